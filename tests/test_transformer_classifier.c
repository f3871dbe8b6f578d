/* test_transformer_classifier.c - examples/transformer_classifier.c (included
 * as is) at tiny sizes: an f64 gradient check of its loss through every
 * parameter, post-LN with ELU and pre-LN with GELU, with dropout on (a
 * fixed mask), on a padded batch; its parameter names; and padding
 * invariance. */
#define TFENC_NO_MAIN
#include "../examples/transformer_classifier.c"

#include "check.h"

#include <string.h>

enum { B = 3, N = 5, V = 7, C = 3 };
static const int32_t tokens[B * N] = {3, 4, 5, 6, 2, /* */ 2, 3, 0, 0, 0, /* */ 6, 5, 4, 0, 0};
static const int32_t lengths[B] = {5, 2, 3}, labels[B] = {0, 2, 1};

typedef struct {
    tfenc m;
    const int32_t *tokens;
} ctx;

static ag_tensor *loss_fn(void *p) {
    ctx *c = p;
    ag_rng drop;
    ag_rng_seed(&drop, 7); /* the same dropout mask at every call */
    return ag_cross_entropy(tfenc_logits(&c->m, c->tokens, lengths, B, N, true, &drop), labels, -1);
}

int main(void) {
    for (int pre = 0; pre < 2; pre++) {
        ag_rng rng;
        ag_rng_seed(&rng, 11);
        ctx c = {.tokens = tokens};
        ag_encoder_config cfg = {.d_model = 4, .heads = 2, .d_ff = 6, .pre_norm = pre, .keep = 0.8,
                                 .act = pre ? AG_ACT_GELU : AG_ACT_ELU}; /* pre-LN with GELU, as GPT-2 */
        tfenc_build(&c.m, V, C, 2, &cfg, &rng);
        CHECK(ag_params_find(&c.m.ps, "layer1.attn.out.weight") && ag_params_find(&c.m.ps, "layer0.ffn.b2") &&
              ag_params_find(&c.m.ps, "cls.weight"), "parameter names");
        CHECK(c.m.ps.count == 1 + 2 * 12 + 2, "%d parameters", c.m.ps.count);
        ag_gradcheck_opts o = ag_gradcheck_defaults();
        ag_gradcheck_result r = ag_gradcheck(loss_fn, &c, c.m.ps.items, c.m.ps.count, &o);
        CHECK(r.ok, "%s-LN: parameter %s element %lld analytic %.12g numeric %.12g", pre ? "pre" : "post",
              c.m.ps.items[r.worst_input]->name, (long long)r.worst_index, r.analytic, r.numeric);
        printf("  %s: %lld elements, max rel err %.2e\n", pre ? "pre-LN, GELU" : "post-LN, ELU", (long long)r.checked,
               r.max_rel_err);
        ag_step_end();
        /* other tokens at padded positions change nothing */
        int32_t other[B * N];
        memcpy(other, tokens, sizeof other);
        other[7] = other[14] = 5;
        ag_tensor *l0 = tfenc_logits(&c.m, tokens, lengths, B, N, false, NULL);
        ag_tensor *l1 = tfenc_logits(&c.m, other, lengths, B, N, false, NULL);
        for (int i = 0; i < B * C; i++) CHECK_NEAR(l1->data[i], l0->data[i], 1e-14, 1e-13);
        ag_step_end();
        ag_params_free(&c.m.ps);
    }
    ag_shutdown();
    return check_summary("test_transformer_classifier");
}
