/* test_transformer_seq2seq.c - examples/transformer_seq2seq.c (included as is) in double precision:
 *   - a gradient check of its label-smoothed loss through every parameter, with dropout (one mask for every
 *     call), on a batch with a padded source, a length-1 source and ignored target positions;
 *   - padded source words change no logit, and a later target word no earlier one;
 *   - decoding several sequences a word at a time from the layers' key-value caches gives the logits of the full
 *     decoder run over the words it chose, and the drawn alignment is a distribution over the valid words;
 *   - beam search: with one hypothesis it is greedy decoding, with every two-word prefix kept it finds the best
 *     target an exhaustive search finds;
 *   - it learns: 300 steps of Adam on the reversal task halve the loss. */
#define TSEQ_NO_MAIN
#include "../examples/transformer_seq2seq.c"

#include "check.h"
#include "example_checks.h"

#include <string.h>

enum { B = 3, NS = 4, NT = 3 };
static int32_t src[B * NS] = {3, 7, 5, 9, /* */ 4, 0, 0, 0, /* */ 12, 6, 0, 0};
static int32_t src_len[B] = {4, 1, 2};
static int32_t tgt_in[B * NT] = {BOS, 9, 5, /* */ BOS, 4, 0, /* */ BOS, 6, 12};
static int32_t labels[B * NT] = {9, 5, 7, /* */ 4, EOS, -1, /* */ 6, 12, EOS};
static const reversal batch = {.n = B, .Ns = NS, .Nt = NT, .src = src, .len = src_len, .tgt_in = tgt_in, .labels = labels};

static ag_tensor *loss_fn(void *p) {
    static ag_rng drop; /* the same dropout masks at every call of the check */
    ag_rng_seed(&drop, 11);
    return tseq_loss(p, &batch, 0, B, 0.1, true, &drop);
}

static void build_small(tseq *m, ag_rng *rng, int layers, double keep) {
    tseq_build(m, &(ag_encoder_config){.d_model = 4, .heads = 2, .d_ff = 6, .keep = keep}, layers, rng);
    for (int p = 0; p < m->ps.count; p++) /* gains and biases off 1 and 0 */
        if (m->ps.items[p]->ndim == 1)
            for (int64_t i = 0; i < m->ps.items[p]->size; i++) m->ps.items[p]->data[i] += (ag_real)(0.1 * sin(i + p));
}

static void test_gradcheck(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 5);
    tseq m;
    build_small(&m, &rng, 2, 0.8);
    CHECK(ag_params_find(&m.ps, "enc1.attn.qkv.weight") && ag_params_find(&m.ps, "dec1.cross.kv.weight") &&
              ag_params_find(&m.ps, "dec0.self.ffn.w2") && ag_params_find(&m.ps, "embed"),
          "parameter names");
    gradcheck_params(loss_fn, &m, &m.ps);

    /* padded source words, and a later target word, change nothing they must not */
    ag_real kept[B * NT * VOCAB];
    ag_tensor *memory = tseq_encode(&m, src, src_len, B, NS, false, NULL);
    ag_tensor_read(tseq_decode(&m, memory, src_len, tgt_in, NULL, B, NT, false, NULL, NULL), kept);
    ag_step_end();
    int32_t src2[B * NS], tgt2[B * NT];
    memcpy(src2, src, sizeof src2), memcpy(tgt2, tgt_in, sizeof tgt2);
    src2[5] = src2[6] = src2[11] = 8; /* padded words */
    tgt2[2] = 11;                     /* example 0's last input word */
    memory = tseq_encode(&m, src2, src_len, B, NS, false, NULL);
    ag_tensor *logits = tseq_decode(&m, memory, src_len, tgt2, NULL, B, NT, false, NULL, NULL);
    for (int i = 0; i < B * NT * VOCAB; i++) {
        bool may_move = i >= 2 * VOCAB && i < NT * VOCAB; /* example 0, position 2 */
        if (!may_move) CHECK_NEAR(logits->data[i], kept[i], 1e-15, 1e-14);
    }
    ag_step_end();
    ag_params_free(&m.ps);
}

/* greedy_decode, four sequences together from the layers' caches: each one's logits against the full decoder
 * over the words it chose, and its count of exact matches; and the alignment drawn from those words is a
 * distribution over each source's valid words. */
static void test_cached(void) {
    enum { S = 4 };
    ag_rng rng;
    ag_rng_seed(&rng, 9);
    tseq m;
    build_small(&m, &rng, 2, 1);
    reversal d = reversal_make(S, 6, &rng);
    int32_t words[S * 8];
    ag_real logits[S * 8 * VOCAB];
    int correct = greedy_decode(&m, &d, 0, S, words, logits);
    CHECK(correct >= 0, "%s", ag_errmsg());
    int exact = 0;
    for (int k = 0; k < S; k++) {
        int32_t in[8] = {BOS}, ok = 1;
        for (int t = 1; t < d.Nt; t++) in[t] = words[k * d.Nt + t - 1];
        ag_tensor *memory = tseq_encode(&m, d.src + k * d.Ns, d.len + k, 1, d.Ns, false, NULL);
        ag_tensor *full = tseq_decode(&m, memory, d.len + k, in, NULL, 1, d.Nt, false, NULL, NULL);
        double worst = 0;
        for (int i = 0; i < d.Nt * VOCAB; i++) worst = check_worst(worst, fabs(full->data[i] - logits[k * d.Nt * VOCAB + i]));
        CHECK(worst <= 1e-13, "sequence %d: cached decoding's logits %.3g from the full decoder's", k, worst);
        for (int t = 0; t < d.Nt; t++) CHECK(reversal_pick(&d, k, t, full->data + t * VOCAB, &ok) == words[k * d.Nt + t]);
        exact += ok;
        ag_step_end();
        double align[8 * 6];
        alignment(&m, &d, k, words + k * d.Nt, align);
        for (int t = 0; t < d.Nt; t++) {
            double sum = 0;
            for (int j = 0; j < d.Ns; j++) {
                if (j >= d.len[k]) CHECK(align[t * d.Ns + j] == 0, "sequence %d: weight on padded word %d", k, j);
                sum += align[t * d.Ns + j];
            }
            CHECK_NEAR(sum, 1, 1e-14, 1e-14);
        }
    }
    CHECK(correct == exact, "greedy_decode counted %d exact matches, the full decoder %d", correct, exact);
    reversal_free(&d);
    ag_params_free(&m.ps);
}

/* The log-probability the full decoder gives target words [Nt] of source k, up to and with its EOS. */
static double full_score(const tseq *m, const reversal *d, int k, const int32_t *words) {
    int32_t in[16] = {BOS};
    for (int t = 1; t < d->Nt; t++) in[t] = words[t - 1];
    ag_tensor *memory = tseq_encode(m, d->src + k * d->Ns, d->len + k, 1, d->Ns, false, NULL);
    ag_tensor *logp = ag_log_softmax(tseq_decode(m, memory, d->len + k, in, NULL, 1, d->Nt, false, NULL, NULL));
    double score = 0;
    for (int t = 0; t < d->Nt; t++) {
        score += logp->data[t * VOCAB + words[t]];
        if (words[t] == EOS) break;
    }
    ag_step_end();
    return score;
}

/* Beam search: one hypothesis is greedy decoding; with four, each source's best scores what the full decoder
 * gives its words (the caches reordered at every step to the hypotheses kept); and with as many hypotheses as
 * there are two-word prefixes (169) on three-word targets it is exhaustive, so its best must be the best of every
 * target the full decoder scores (a word after EOS counts nothing, as beam_decode scores them). */
static void test_beam(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 21);
    tseq m;
    build_small(&m, &rng, 2, 1);
    reversal d = reversal_make(4, 6, &rng);
    int32_t greedy[4 * 8], beam[4 * 8];
    double scores[4];
    CHECK(greedy_decode(&m, &d, 0, 4, greedy, NULL) >= 0 && beam_decode(&m, &d, 0, 4, 1, beam, NULL) >= 0, "%s",
          ag_errmsg());
    CHECK(!memcmp(greedy, beam, sizeof(int32_t) * 4 * d.Nt), "one hypothesis a source is not greedy decoding");
    CHECK(beam_decode(&m, &d, 0, 4, 65, NULL, NULL) == -1 && strstr(ag_errmsg(), "4 sources of 65 hypotheses"),
          "more hypotheses than the decoder holds: %s", ag_errmsg());
    CHECK(greedy_decode(&m, &d, 0, 0, NULL, NULL) == -1 && strstr(ag_errmsg(), "0 sequences"), "%s", ag_errmsg());
    CHECK(beam_decode(&m, &d, 0, 4, 4, beam, scores) >= 0, "%s", ag_errmsg());
    for (int k = 0; k < 4; k++) {
        double full = full_score(&m, &d, k, beam + k * d.Nt);
        CHECK_NEAR(scores[k], full, 1e-12, 1e-12);
    }
    reversal_free(&d);

    reversal e = reversal_make(2, 2, &rng); /* Nt = 3 */
    enum { ALL = VOCAB * VOCAB * VOCAB };
    static int32_t in[ALL * 3], cand[ALL * 3];
    for (int k = 0; k < e.n; k++) {
        int n = 0;
        for (int w0 = 0; w0 < VOCAB; w0++)
            for (int w1 = 0; w1 < (w0 == EOS ? 1 : VOCAB); w1++)
                for (int w2 = 0; w2 < (w0 == EOS || w1 == EOS ? 1 : VOCAB); w2++, n++) {
                    int32_t *c = cand + n * 3;
                    c[0] = w0, c[1] = w0 == EOS ? PAD : w1, c[2] = w0 == EOS || w1 == EOS ? PAD : w2;
                    in[n * 3] = BOS, in[n * 3 + 1] = c[0], in[n * 3 + 2] = c[1];
                }
        int32_t *idx = malloc(sizeof(int32_t) * n), *len = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) idx[i] = 0, len[i] = e.len[k];
        ag_tensor *memory = ag_index_select(tseq_encode(&m, e.src + k * e.Ns, e.len + k, 1, e.Ns, false, NULL), 0, idx, n);
        ag_tensor *logp = ag_log_softmax(tseq_decode(&m, memory, len, in, NULL, n, 3, false, NULL, NULL)); /* [n, 3, V] */
        int best = 0;
        double best_score = -INFINITY;
        for (int i = 0; i < n; i++) {
            double score = 0;
            for (int t = 0; t < 3; t++) {
                score += logp->data[((int64_t)i * 3 + t) * VOCAB + cand[i * 3 + t]];
                if (cand[i * 3 + t] == EOS) break;
            }
            if (score > best_score) best_score = score, best = i;
        }
        ag_step_end();
        int32_t words[3];
        CHECK(beam_decode(&m, &e, k, 1, VOCAB * VOCAB, words, NULL) >= 0, "%s", ag_errmsg());
        CHECK(!memcmp(words, cand + best * 3, sizeof words), "source %d: beam search's best %d %d %d, the exhaustive "
              "search's %d %d %d (log-probability %.6f)", k, words[0], words[1], words[2], cand[best * 3],
              cand[best * 3 + 1], cand[best * 3 + 2], best_score);
        free(idx), free(len);
    }
    reversal_free(&e);
    ag_params_free(&m.ps);
}

typedef struct {
    const tseq *m;
    const reversal *d;
    ag_rng *rng;
} reversal_batches;

static ag_tensor *reversal_loss(void *p, int step) {
    const reversal_batches *c = p;
    return tseq_loss(c->m, c->d, step * 16 % (c->d->n - 16), 16, 0, true, c->rng);
}

static void test_learns(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 3);
    reversal d = reversal_make(640, 5, &rng);
    tseq m;
    tseq_build(&m, &(ag_encoder_config){.d_model = 16, .heads = 2, .d_ff = 32, .keep = 0.9}, 1, &rng);
    adam_halves_loss(&m.ps, 3e-3, 300, reversal_loss, &(reversal_batches){&m, &d, &rng}, "reversal, lengths 1-5");
    ag_params_free(&m.ps), reversal_free(&d);
}

int main(void) {
    test_gradcheck();
    test_cached();
    test_beam();
    test_learns();
    ag_shutdown();
    return check_summary("test_transformer_seq2seq");
}
