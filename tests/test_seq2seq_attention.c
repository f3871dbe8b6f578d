/* test_seq2seq_attention.c - examples/seq2seq_attention.c (included as is) in double precision:
 *   - a gradient check of its teacher-forced loss through every parameter, on a batch with a padded source,
 *     a length-1 source and ignored target positions;
 *   - the attention: a distribution over each source's valid words, 0 at padding, and padded source words
 *     change no logit;
 *   - it learns: 300 steps of Adam on the reversal task halve the loss. */
#define S2S_NO_MAIN
#include "../examples/seq2seq_attention.c"

#include "check.h"
#include "example_checks.h"

#include <string.h>

enum { B = 3, NS = 4, NT = 3 };
static const int32_t src[B * NS] = {3, 7, 5, 9, /* */ 4, 0, 0, 0, /* */ 12, 6, 0, 0};
static const int32_t src_len[B] = {4, 1, 2};
static const int32_t tgt_in[B * NT] = {BOS, 9, 5, /* */ BOS, 4, 0, /* */ BOS, 6, 12};
static const int32_t labels[B * NT] = {9, 5, 7, /* */ 4, EOS, -1, /* */ 6, 12, EOS};

static ag_tensor *loss_fn(void *p) {
    const s2s *m = p;
    return ag_cross_entropy(s2s_logits(m, src, src_len, B, NS, tgt_in, NT), labels, -1);
}

static void test_gradcheck(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 5);
    s2s m;
    s2s_build(&m, 3, 2, 3, &rng);
    CHECK(ag_params_find(&m.ps, "encoder.bw.w_hh") && ag_params_find(&m.ps, "decoder.w_ih") &&
              ag_params_find(&m.ps, "attn.v"), "parameter names");
    CHECK(m.decoder.w_ih->shape[0] == 3 + 2 * 2 && m.decoder.w_ih->shape[1] == 3 * 2, "the decoder reads [E y; c]");
    gradcheck_params(loss_fn, &m, &m.ps);

    /* the first step's attention: over each source's valid words, 0 past them */
    ag_tensor *s, *alpha;
    encoded e = s2s_encode(&m, src, src_len, B, NS, &s);
    ag_tensor *y = ag_embedding(m.tgt_embed, (const int32_t[]){BOS, BOS, BOS}, 2, (int[]){B, 1});
    ag_tensor *first = s2s_step(&m, &e, &s, y, &alpha);
    CHECK(alpha->ndim == 3 && alpha->shape[0] == B && alpha->shape[1] == 1 && alpha->shape[2] == NS, "alpha [B,1,Ns]");
    for (int b = 0; b < B; b++) {
        double sum = 0;
        for (int j = 0; j < NS; j++) {
            double a = alpha->data[b * NS + j];
            if (j >= src_len[b]) CHECK(a == 0, "row %d: weight %g at padded word %d", b, a, j);
            sum += a;
        }
        CHECK_NEAR(sum, 1, 1e-14, 1e-14);
    }
    ag_real kept[B * VOCAB];
    memcpy(kept, first->data, sizeof kept);
    ag_step_end();
    int32_t other[B * NS];
    memcpy(other, src, sizeof other);
    other[5] = other[6] = other[11] = 8; /* padded words */
    e = s2s_encode(&m, other, src_len, B, NS, &s);
    y = ag_embedding(m.tgt_embed, (const int32_t[]){BOS, BOS, BOS}, 2, (int[]){B, 1});
    first = s2s_step(&m, &e, &s, y, NULL);
    for (int i = 0; i < B * VOCAB; i++) CHECK_NEAR(first->data[i], kept[i], 1e-15, 1e-14);
    ag_step_end();
    ag_params_free(&m.ps);
}

typedef struct {
    const s2s *m;
    const reversal *d;
} reversal_batches;

static ag_tensor *reversal_loss(void *p, int step) {
    const reversal_batches *c = p;
    const reversal *d = c->d;
    int k0 = step * 16 % (d->n - 16);
    return ag_cross_entropy(s2s_logits(c->m, d->src + k0 * d->Ns, d->len + k0, 16, d->Ns, d->tgt_in + k0 * d->Nt, d->Nt),
                            d->labels + k0 * d->Nt, -1);
}

static void test_learns(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 3);
    reversal d = reversal_make(640, 5, &rng);
    s2s m;
    s2s_build(&m, 8, 16, 16, &rng);
    adam_halves_loss(&m.ps, 1e-2, 300, reversal_loss, &(reversal_batches){&m, &d}, "reversal, lengths 1-5");
    ag_params_free(&m.ps), reversal_free(&d);
}

int main(void) {
    test_gradcheck();
    test_learns();
    ag_shutdown();
    return check_summary("test_seq2seq_attention");
}
