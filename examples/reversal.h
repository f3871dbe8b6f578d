/* reversal.h - the examples' generated translation task: reverse a sequence of digits (lengths 1 to max_len), so
 * that the alignment an attention must find is the anti-diagonal.  Shared by examples/seq2seq_attention.c and
 * examples/transformer_seq2seq.c, so the two encoder-decoders are compared on the same sequences. */
#ifndef AG_EXAMPLES_REVERSAL_H
#define AG_EXAMPLES_REVERSAL_H

#include "attngrad.h"

#include <stdio.h>
#include <stdlib.h>

enum { PAD = 0, BOS = 1, EOS = 2, DIGIT0 = 3, VOCAB = 13 }; /* digits 0-9 are ids 3-12 */

/* Sequence k of a set: src [n, Ns] (digits, 0-padded), the decoder's inputs [n, Nt] (BOS, then the source
 * reversed) and labels [n, Nt] (the source reversed, EOS, -1 past it). */
typedef struct {
    int n, Ns, Nt;
    int32_t *src, *len, *tgt_in, *labels;
} reversal;

static inline reversal reversal_make(int n, int max_len, ag_rng *rng) {
    reversal d = {.n = n, .Ns = max_len, .Nt = max_len + 1};
    d.src = calloc((size_t)n * d.Ns, sizeof *d.src), d.len = calloc((size_t)n, sizeof *d.len);
    d.tgt_in = calloc((size_t)n * d.Nt, sizeof *d.tgt_in), d.labels = malloc((size_t)n * d.Nt * sizeof *d.labels);
    for (int k = 0; k < n; k++) {
        int L = d.len[k] = 1 + (int)(ag_rng_uniform(rng) * max_len) % max_len;
        int32_t *src = d.src + k * d.Ns, *in = d.tgt_in + k * d.Nt, *lab = d.labels + k * d.Nt;
        for (int j = 0; j < L; j++) src[j] = DIGIT0 + (int)(ag_rng_uniform(rng) * 10) % 10;
        for (int j = 0; j < d.Nt; j++) lab[j] = j < L ? src[L - 1 - j] : j == L ? EOS : -1;
        in[0] = BOS;
        for (int j = 1; j <= L; j++) in[j] = lab[j - 1];
    }
    return d;
}

static inline void reversal_free(reversal *d) { free(d->src), free(d->len), free(d->tgt_in), free(d->labels); }

/* The greedy decoder's verdict on row b at step t, given the logits row [VOCAB]: its choice, and *ok cleared
 * where it differs from a label that counts. */
static inline int reversal_pick(const reversal *d, int row, int t, const ag_real *logits, int32_t *ok) {
    int best = 0, want = d->labels[row * d->Nt + t];
    for (int v = 1; v < VOCAB; v++) best = logits[v] > logits[best] ? v : best;
    if (want >= 0 && best != want) *ok = 0;
    return best;
}

/* Sequence 0's alignment align [Nt, Ns] (rows: output words, columns: source words) drawn in characters. */
static inline void reversal_print_alignment(const reversal *d, const double *align) {
    printf("\nalignment of test sequence 0 (rows: output words, columns: source words; # > 0.5, + > 0.1):\n   ");
    for (int j = 0; j < d->len[0]; j++) putchar('0' + d->src[j] - DIGIT0);
    putchar('\n');
    for (int t = 0; t <= d->len[0]; t++) {
        printf("  %c ", t < d->len[0] ? '0' + d->labels[t] - DIGIT0 : '$'); /* $: EOS */
        for (int j = 0; j < d->len[0]; j++) {
            double a = align[t * d->Ns + j];
            putchar(a > 0.5 ? '#' : a > 0.1 ? '+' : '.');
        }
        putchar('\n');
    }
}

#endif
