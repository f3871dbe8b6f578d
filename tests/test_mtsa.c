/* test_mtsa.c - MTSA (docs/models.md, MTSA) beyond its gradient check
 * (test_models): a whole training step never holds the [N,N,dh] score
 * tensor, the FLAG changes the scores, both ways of computing the scores
 * agree, and steady steps allocate nothing. */
#include "check.h"
#include "attngrad/model.h"
#include "../train/internal.h"

#include <stdlib.h>
#include <string.h>

static void make_batch(ag_batch *b, int B, int N, int V, int K) {
    ag_rng r;
    ag_rng_seed(&r, 5);
    memset(b, 0, sizeof *b);
    b->rows = b->max_rows = B;
    b->width = b->max_width = N;
    b->tokens = calloc((size_t)B * N, sizeof *b->tokens);
    b->lengths = calloc((size_t)B, sizeof *b->lengths);
    b->labels = calloc((size_t)B, sizeof *b->labels);
    for (int i = 0; i < B; i++) {
        b->lengths[i] = N - i;
        b->labels[i] = (int32_t)(ag_rng_next(&r) % (uint64_t)K);
        for (int t = 0; t < b->lengths[i]; t++) b->tokens[i * N + t] = 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2));
    }
}

static ag_model_config config(unsigned flags) {
    ag_model_config c = ag_model_defaults(ag_model_find("mtsa"));
    c.vocab = 50;
    c.classes = 5;
    c.dim = 16;
    c.hidden = 48;
    c.flags = flags;
    return c;
}

/* Bytes of step arena for one forward and backward with dropout, B = 1,
 * N = dh = n (the arena's high-water mark only grows: call with growing n). */
static size_t step_bytes(int n) {
    ag_model_config c = config(0);
    c.hidden = n;
    ag_model m;
    ag_model_init(&m, ag_model_find("mtsa"), &c);
    ag_batch b;
    make_batch(&b, 1, n, c.vocab, c.classes);
    ag_backward(ag_model_loss(&m, &b, true));
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return ag_memstats().arena_high;
}

/* A step holds [N,N] and [N,dh] tensors, never [N,N,dh]: doubling N and dh
 * together multiplies its memory by about 4.  One [N,N,dh] tensor would add
 * 8 c - 4 c = 4 c over that, c being its size at n/2; the check allows
 * half of it, for [N,N] terms that start at the larger n (the scratch of a
 * product that becomes big enough to cut by K). */
static void test_no_cube(void) {
    size_t prev = 0, prev_cube = 0;
    for (int n = 16; n <= 128; n *= 2) {
        size_t used = step_bytes(n), cube = (size_t)n * n * n * sizeof(ag_real);
        printf("  n = %3d: arena %9zu bytes, one [N,N,dh] tensor %9zu\n", n, used, cube);
        if (prev)
            CHECK(used <= 4 * prev + 2 * prev_cube, "n = %d: %zu bytes after %zu at n/2 (one [N,N,dh] there: %zu)", n,
                  used, prev, prev_cube);
        prev = used, prev_cube = cube;
    }
}

/* The same weights with sigma_t = log-sigmoid and identity give different
 * logits (the FLAG reaches the attention). */
static void test_flag(void) {
    ag_model_config c0 = config(0), c1 = config(AG_FLAG_EXP_SCORE);
    ag_model m0, m1;
    ag_model_init(&m0, ag_model_find("mtsa"), &c0);
    ag_model_init(&m1, ag_model_find("mtsa"), &c1);
    ag_batch b;
    make_batch(&b, 3, 7, c0.vocab, c0.classes);
    ag_tensor *l0 = ag_model_forward(&m0, &b, false), *l1 = ag_model_forward(&m1, &b, false);
    double d = 0;
    for (int64_t k = 0; k < l0->size; k++) d = fmax(d, fabs(l0->data[k] - l1->data[k]));
    CHECK(l0->ndim == 2 && l0->shape[0] == 3 && l0->shape[1] == c0.classes);
    CHECK(d > 1e-9, "the FLAG changes nothing (%g)", d);
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m0);
    ag_model_free(&m1);
}

/* After warm-up a training step (forward with dropout, backward) makes no
 * heap allocation: activations, masks and saved state come from the arena. */
static void test_steady_state(void) {
    ag_model_config c = config(0);
    ag_model m;
    ag_model_init(&m, ag_model_find("mtsa"), &c);
    ag_batch b;
    make_batch(&b, 3, 9, c.vocab, c.classes);
    int64_t allocs = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 3) allocs = ag_memstats().allocs;
        ag_backward(ag_model_loss(&m, &b, true));
        ag_step_end();
    }
    CHECK(ag_memstats().allocs == allocs, "%lld heap allocations in 5 steady steps",
          (long long)(ag_memstats().allocs - allocs));
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* The scores take x1 (Wq Wk^T / sqrt(dh)) x2^T when the batch has more
 * rows than dh and q k^T / sqrt(dh) otherwise: the same function.  One
 * example alone (7 rows <= dh = 8) and with a second one beside it (14
 * rows): its logits and the gradients of their sum agree. */
static void example0_grads(ag_model *m, int B, float *logits, float *grads, int64_t n_grads) {
    ag_batch b;
    make_batch(&b, B, 7, m->cfg.vocab, m->cfg.classes);
    ag_params_zero_grad(&m->params);
    ag_tensor *l = ag_model_forward(m, &b, false);
    for (int k = 0; k < m->cfg.classes; k++) logits[k] = (float)l->data[k];
    ag_backward(ag_sum(ag_slice(l, 0, 0, 1)));
    int64_t at = 0;
    for (int i = 0; i < m->params.count; i++)
        for (int64_t k = 0; k < m->params.items[i]->size && at < n_grads; k++)
            grads[at++] = (float)m->params.items[i]->grad[k];
    ag_step_end();
    ag_model_batch_free(&b);
}

static void test_score_paths(void) {
    ag_model_config c = config(0);
    c.hidden = 8;
    ag_model m;
    ag_model_init(&m, ag_model_find("mtsa"), &c);
    int64_t n = 0;
    for (int i = 0; i < m.params.count; i++) n += m.params.items[i]->size;
    float *g1 = calloc((size_t)n, sizeof *g1), *g2 = calloc((size_t)n, sizeof *g2), l1[8], l2[8];
    example0_grads(&m, 1, l1, g1, n);
    example0_grads(&m, 2, l2, g2, n);
    double worst = 0, scale = 0;
    for (int k = 0; k < c.classes; k++) CHECK(fabs(l1[k] - l2[k]) <= 1e-5 * (1 + fabs(l1[k])), "logit %d: %g vs %g", k, l1[k], l2[k]);
    for (int64_t k = 0; k < n; k++) worst = check_worst(worst, fabs(g1[k] - g2[k])), scale = fmax(scale, fabs(g1[k]));
    printf("  score paths: worst gradient difference %.2e (largest gradient %.2e)\n", worst, scale);
    CHECK(scale > 0 && worst <= 1e-5 * scale, "gradients differ by %g (scale %g)", worst, scale);
    free(g1), free(g2);
    ag_model_free(&m);
}

int main(void) {
    test_score_paths();
    test_no_cube();
    test_flag();
    test_steady_state();
    ag_shutdown();
    return check_summary("test_mtsa");
}
