/* cases_seq.c - op cases for the sequence ops: layer norm, the positional
 * LM's Gaussian scoring (mu recurrence and context), the LSTM, the GRU and MTSA's
 * multi-dim attention.  Lengths {5,3} (docs/models.md's tiny gradcheck size),
 * N = 1, empty and fully masked windows are covered for each; then the
 * same at the device's sizes: odd sizes (N = 7, d = 13, H = 33, N = 40 past
 * a warp's lanes), unsorted lengths with padding, a length-1 and a length-0
 * example, T < N, masks with fully masked rows. */
#include "opcase.h"
#include "../ops/mtsa.h" /* ag__mtsa_attention_groups: MTSA's heads in one op */

#include <math.h>
#include <stdlib.h>

static const int32_t len_53[] = {5, 3};
static const int32_t len_42[] = {4, 2};
static const int32_t len_02[] = {0, 2};

/* A {0,1} mask [N,N] on ref's device: past (k < q) or future (k > q). */
static ag_tensor *dir_mask(const ag_tensor *ref, int N, bool past) {
    ag_tensor *m = ag_tensor_new_host(2, (int[]){N, N});
    for (int q = 0; q < N; q++)
        for (int k = 0; k < N; k++) m->data[q * N + k] = past ? k < q : k > q;
    return tc_to_device_of(ref, m);
}

/* ---- layer norm ---- */

static int ln_3d(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 3, 5));
    in[1] = tc_away(r, 0.5, 1.5, true, SHAPE(5));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
static int ln_row(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(6));
    in[1] = tc_away(r, 0.5, 1.5, true, SHAPE(6));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(6));
    return 3;
}
static int ln_d1(ag_tensor **in, ag_rng *r) { /* one feature: xhat is 0, only beta matters */
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(3, 1));
    in[1] = tc_away(r, 0.5, 1.5, true, SHAPE(1));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(1));
    return 3;
}
static int ln_offset(ag_tensor **in, ag_rng *r) { /* a large common offset: the variance must not cancel */
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(4, 8));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] += 10;
    in[1] = tc_away(r, 0.5, 1.5, true, SHAPE(8));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(8));
    return 3;
}
static int ln_plain(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(3, 4));
    return 1;
}
static int ln_gamma_only(ag_tensor **in, ag_rng *r) {
    ln_3d(in, r);
    return 2;
}
static ag_tensor *f_ln(ag_tensor **in) { return ag_layernorm(in[0], in[1], in[2], 1e-6); }
static ag_tensor *f_ln_eps(ag_tensor **in) { return ag_layernorm(in[0], in[1], in[2], 0.1); }
static ag_tensor *f_ln_plain(ag_tensor **in) { return ag_layernorm(in[0], NULL, NULL, 1e-5); }
static ag_tensor *f_ln_gamma(ag_tensor **in) { return ag_layernorm(in[0], in[1], NULL, 1e-6); }

/* ---- RMS norm: layer norm's kernels without the centring ---- */

static int rms_3d(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 3, 5));
    in[1] = tc_away(r, 0.5, 1.5, true, SHAPE(5));
    return 2;
}
static int rms_d1(ag_tensor **in, ag_rng *r) { /* one feature: y = x / sqrt(x^2 + eps) gamma */
    in[0] = tc_away(r, 0.5, 2, true, SHAPE(4, 1));
    in[1] = tc_away(r, 0.5, 1.5, true, SHAPE(1));
    return 2;
}
static int rms_offset(ag_tensor **in, ag_rng *r) { /* a large common offset: RMS keeps it (no centring) */
    ln_offset(in, r);
    return 2;
}
static ag_tensor *f_rms(ag_tensor **in) { return ag_rmsnorm(in[0], in[1], 1e-6); }
static ag_tensor *f_rms_eps(ag_tensor **in) { return ag_rmsnorm(in[0], in[1], 0.1); }
static ag_tensor *f_rms_plain(ag_tensor **in) { return ag_rmsnorm(in[0], NULL, 1e-5); }

/* ---- rotary positions ---- */

static int rope_heads(ag_tensor **in, ag_rng *r) { /* split heads [B, h, N, dh] */
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 3, 5, 8));
    return 1;
}
static int rope_rows(ag_tensor **in, ag_rng *r) { /* rows [B, N, h dh]: three heads of 4 side by side */
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 5, 12));
    return 1;
}
static int rope_n1(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(3, 1, 6));
    return 1;
}
static ag_tensor *f_rope_heads(ag_tensor **in) { return ag_rope(in[0], 8, 0, 10000); }
static ag_tensor *f_rope_rows(ag_tensor **in) { return ag_rope(in[0], 4, 3, 10000); }
static ag_tensor *f_rope_rows_far(ag_tensor **in) { return ag_rope(in[0], 4, 100000, 500); } /* angles far round */
static ag_tensor *f_rope_pair(ag_tensor **in) { return ag_rope(in[0], 2, 1, 10000); } /* one pair a head: theta 1 */
static ag_tensor *f_rope_n1(ag_tensor **in) { return ag_rope(in[0], 6, 7, 10000); }
/* queries and keys rotated, then their scores: q_m . k_n feels m - n */
static ag_tensor *f_rope_scores(ag_tensor **in) {
    ag_tensor *q = ag_rope(ag_slice(in[0], 1, 0, 1), 8, 0, 100), *k = ag_rope(ag_slice(in[0], 1, 1, 2), 8, 0, 100);
    return ag_matmul_t(q, false, k, true); /* [B, 1, N, N] */
}

/* ---- Gaussian mean recurrence ---- */

/* m chosen so that every step is clear of its floor t/len: above it for
 * example 0, and for example 1 above at t = 0, 2 and below at t = 1. */
static int mu_setup(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 0.2, 0.5, true, SHAPE(2, 5, 3));
    ag_real *m = in[0]->data;
    for (int bt = 0; bt < 10; bt++) {
        m[bt * 3 + 1] += 1;                       /* m1/len >= 1.2/len */
        m[bt * 3 + 2] = (ag_real)(m[bt * 3 + 2] + 0.7); /* m2 in [0.9, 1.2] */
    }
    ag_real *m11 = m + (5 + 1) * 3; /* example 1, t = 1: a = 0.3 mu_0 - 2/3 + ... < 1/3 */
    m11[1] = -2;
    m11[2] = (ag_real)0.1;
    return 1;
}
/* N = 1: mu_0 = max((m1 + m2) / len, 0), m1 + m2 clear of 0 both ways
 * (example 1 below: no gradient); lengths 1, 1, 0. */
static int mu_n1(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 0.2, 0.5, true, SHAPE(3, 1, 3));
    in[0]->data[4] = -1;
    return 1;
}
static ag_tensor *f_mu_n1(ag_tensor **in) { return ag_gaussian_mu(in[0], (const int32_t[]){1, 1, 0}); }
static ag_tensor *f_mu(ag_tensor **in) { return ag_gaussian_mu(in[0], len_53); }
static ag_tensor *f_mu_full(ag_tensor **in) { return ag_gaussian_mu(in[0], NULL); }

/* mu_t = max(a, t/len) written with ag_maximum and a constant floor tensor
 * (what ag_gaussian_mu fuses): a is above the floor in some places, below
 * in others, never within 0.05 of it. */
static int max_floor(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 0.05, 0.4, true, SHAPE(2, 5));
    in[1] = ag_tensor_new(SHAPE(2, 5));
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 5; t++) {
            ag_real fl = (ag_real)t / (ag_real)len_53[b];
            in[1]->data[b * 5 + t] = fl;
            if ((t + b) % 2) in[0]->data[b * 5 + t] += fl; /* above */
            else in[0]->data[b * 5 + t] = fl - in[0]->data[b * 5 + t]; /* below */
        }
    return 2;
}
static ag_tensor *f_max_floor(ag_tensor **in) { return ag_maximum(in[0], in[1]); }

/* ---- Gaussian context ---- */

static int gauss_setup(ag_tensor **in, ag_rng *r, int B, int N, int H) {
    in[0] = tc_uniform(r, -1, 1, true, 3, (int[]){B, N, H});
    in[1] = tc_uniform(r, 0, 1, true, 2, (int[]){B, N});
    in[2] = tc_uniform(r, 0.2, 0.8, true, 2, (int[]){B, N});
    return 3;
}
static int gauss_253(ag_tensor **in, ag_rng *r) { return gauss_setup(in, r, 2, 5, 3); }
static int gauss_n1(ag_tensor **in, ag_rng *r) { return gauss_setup(in, r, 2, 1, 3); }
static int gauss_col(ag_tensor **in, ag_rng *r) { /* mu, sigma as [B,N,1], as a linear layer makes them */
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 4, 2));
    in[1] = tc_uniform(r, 0, 1, true, SHAPE(2, 4, 1));
    in[2] = tc_uniform(r, 0.2, 0.8, true, SHAPE(2, 4, 1));
    return 3;
}
/* Every window's sum below 1e-12 (mu_t 0.8 past position t, sigma 0.1):
 * the floor is what normalises, and its gradient path is checked. */
static int gauss_floor(ag_tensor **in, ag_rng *r) {
    gauss_setup(in, r, 1, 4, 2);
    for (int t = 0; t < 4; t++) {
        in[1]->data[t] = (ag_real)(t / 4.0 + 0.8 + 0.01 * t);
        in[2]->data[t] = (ag_real)0.1;
    }
    return 3;
}
static ag_tensor *f_gauss(ag_tensor **in) { return ag_gaussian_context(in[0], in[1], in[2], NULL, false, 1e-3, NULL); }
static ag_tensor *f_gauss_len(ag_tensor **in) {
    return ag_gaussian_context(in[0], in[1], in[2], len_53, false, 1e-3, NULL);
}
static ag_tensor *f_gauss_strict(ag_tensor **in) {
    return ag_gaussian_context(in[0], in[1], in[2], len_53, true, 1e-3, NULL);
}
static ag_tensor *f_gauss_strict_full(ag_tensor **in) {
    return ag_gaussian_context(in[0], in[1], in[2], NULL, true, 1e-3, NULL);
}
static ag_tensor *f_gauss_len0(ag_tensor **in) {
    return ag_gaussian_context(in[0], in[1], in[2], len_02, false, 1e-3, NULL);
}
static ag_tensor *f_gauss_col(ag_tensor **in) {
    return ag_gaussian_context(in[0], in[1], in[2], len_42, false, 1e-3, NULL);
}
/* The model's whole positional step: mu from the recurrence, then the context. */
static int gauss_mu_chain(ag_tensor **in, ag_rng *r) {
    mu_setup(in, r);
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 5, 3));
    in[2] = tc_uniform(r, 0.2, 0.8, true, SHAPE(2, 5));
    return 3;
}
static ag_tensor *f_gauss_mu_chain(ag_tensor **in) {
    ag_tensor *mu = ag_gaussian_mu(in[0], len_53);
    return ag_gaussian_context(in[1], mu, in[2], len_53, false, 1e-3, NULL);
}

/* ---- LSTM (one layer per case: 7 inputs; the 2-layer checks are in test_seq) ---- */

static int lstm_setup(ag_tensor **in, ag_rng *r, int B, int N, int I, int H, bool bias, bool state) {
    int n = 0;
    in[n++] = tc_uniform(r, -1, 1, true, 3, (int[]){B, N, I});
    in[n++] = tc_uniform(r, -0.6, 0.6, true, 2, (int[]){I, 4 * H});
    in[n++] = tc_uniform(r, -0.6, 0.6, true, 2, (int[]){H, 4 * H});
    if (bias) {
        in[n++] = tc_uniform(r, -0.5, 0.5, true, 1, (int[]){4 * H});
        in[n++] = tc_uniform(r, -0.5, 0.5, true, 1, (int[]){4 * H});
    }
    if (state) {
        in[n++] = tc_uniform(r, -1, 1, true, 3, (int[]){1, B, H});
        in[n++] = tc_uniform(r, -1, 1, true, 3, (int[]){1, B, H});
    }
    return n;
}
static int lstm_full(ag_tensor **in, ag_rng *r) { return lstm_setup(in, r, 2, 4, 3, 2, true, false); }
static int lstm_53(ag_tensor **in, ag_rng *r) { return lstm_setup(in, r, 2, 5, 3, 2, true, true); }
static int lstm_n1(ag_tensor **in, ag_rng *r) { return lstm_setup(in, r, 3, 1, 2, 3, true, true); }
/* Inputs ~1e3: every gate pre-activation far past the sigmoid's and
 * tanh's saturation (e^-1e3 is 0), gradients exactly 0 through the gates;
 * what reaches h0 and c0 goes through the cell (f = 1) and tanh(c). */
static int lstm_saturated(ag_tensor **in, ag_rng *r) {
    int n = lstm_setup(in, r, 2, 3, 2, 2, true, true);
    in[0] = tc_away(r, 900, 1100, true, SHAPE(2, 3, 2));
    for (int64_t j = 0; j < in[0]->size; j++) in[0]->data[j] = (ag_real)(round((double)in[0]->data[j] * 64) / 64);
    return n;
}
static int lstm_nobias(ag_tensor **in, ag_rng *r) { return lstm_setup(in, r, 2, 3, 2, 2, false, false); }
/* No h0: step 0's recurrent product and its rows of dW_hh are skipped (h_{-1} = 0) */
static int lstm_n1_zero_state(ag_tensor **in, ag_rng *r) { return lstm_setup(in, r, 3, 1, 2, 3, true, false); }
static int lstm_02_zero_state(ag_tensor **in, ag_rng *r) { return lstm_setup(in, r, 2, 5, 3, 2, true, false); }

static ag_tensor *run_lstm(ag_tensor **in, bool bias, bool state, const int32_t *len) {
    ag_lstm_layer l = {in[1], in[2], bias ? in[3] : NULL, bias ? in[4] : NULL};
    int s = bias ? 5 : 3;
    ag_lstm_opts o = {.len = len, .h0 = state ? in[s] : NULL, .c0 = state ? in[s + 1] : NULL};
    return ag_lstm(in[0], &l, 1, &o);
}
static ag_tensor *f_lstm(ag_tensor **in) { return run_lstm(in, true, false, NULL); }
static ag_tensor *f_lstm_53(ag_tensor **in) { return run_lstm(in, true, true, len_53); }
static ag_tensor *f_lstm_02(ag_tensor **in) { return run_lstm(in, true, true, len_02); }
static ag_tensor *f_lstm_n1(ag_tensor **in) { return run_lstm(in, true, true, NULL); }
static ag_tensor *f_lstm_saturated(ag_tensor **in) { return run_lstm(in, true, true, (const int32_t[]){3, 1}); }
static ag_tensor *f_lstm_nobias(ag_tensor **in) { return run_lstm(in, false, false, NULL); }
static ag_tensor *f_lstm_zero_state(ag_tensor **in) { return run_lstm(in, true, false, NULL); }
static ag_tensor *f_lstm_02_zero_state(ag_tensor **in) { return run_lstm(in, true, false, len_02); }
/* Two layers sharing nothing but the input: the second reads the first's output. */
static int lstm_2l(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 5, 3));
    for (int l = 0; l < 2; l++) {
        in[1 + 3 * l] = tc_uniform(r, -0.6, 0.6, true, 2, (int[]){l ? 2 : 3, 8});
        in[2 + 3 * l] = tc_uniform(r, -0.6, 0.6, true, SHAPE(2, 8));
        in[3 + 3 * l] = tc_uniform(r, -0.5, 0.5, true, SHAPE(8));
    }
    return 7;
}
static ag_tensor *f_lstm_2l(ag_tensor **in) {
    ag_lstm_layer ls[2] = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    ag_lstm_opts o = {.len = len_53, .keep = 0.5, .training = false}; /* eval: no dropout */
    return ag_lstm(in[0], ls, 2, &o);
}

/* Right to left (the backward half of a bidirectional LSTM): lengths 5 and
 * 3 with h0/c0, and lengths 0 and 2 with the final states (after position 0). */
static ag_tensor *f_lstm_reverse_53(ag_tensor **in) {
    ag_lstm_layer l = {in[1], in[2], in[3], in[4]};
    ag_lstm_opts o = {.len = len_53, .h0 = in[5], .c0 = in[6], .reverse = true};
    return ag_lstm(in[0], &l, 1, &o);
}
static ag_tensor *flat(ag_tensor *t);
static ag_tensor *f_lstm_reverse_finals(ag_tensor **in) {
    ag_lstm_layer l = {in[1], in[2], in[3], in[4]};
    ag_tensor *hn, *cn;
    ag_lstm_opts o = {.len = len_02, .h0 = in[5], .c0 = in[6], .h_n = &hn, .c_n = &cn, .reverse = true};
    ag_tensor *y = ag_lstm(in[0], &l, 1, &o);
    return ag_concat((ag_tensor *[]){flat(y), flat(hn), flat(cn)}, 3, 0);
}
/* The last valid position's output of a right-to-left pass is the first
 * step: the LSTM of that one word from h0/c0, a left-to-right run of length 1. */
static ag_tensor *f_lstm_reverse_first_step(ag_tensor **in) {
    ag_lstm_layer l = {in[1], in[2], in[3], in[4]};
    ag_lstm_opts rev = {.len = len_53, .h0 = in[5], .c0 = in[6], .reverse = true};
    ag_tensor *y = ag_lstm(in[0], &l, 1, &rev);                                  /* [2,5,H] */
    static const int32_t last[] = {4, 2};                                        /* len - 1 */
    ag_tensor *x_last = ag_concat((ag_tensor *[]){ag_slice(ag_slice(in[0], 0, 0, 1), 1, last[0], last[0] + 1),
                                                  ag_slice(ag_slice(in[0], 0, 1, 2), 1, last[1], last[1] + 1)}, 2, 0);
    ag_lstm_opts one = {.h0 = in[5], .c0 = in[6]};
    ag_tensor *want = ag_lstm(x_last, &l, 1, &one);                              /* [2,1,H] */
    ag_tensor *got = ag_concat((ag_tensor *[]){ag_slice(ag_slice(y, 0, 0, 1), 1, last[0], last[0] + 1),
                                               ag_slice(ag_slice(y, 0, 1, 2), 1, last[1], last[1] + 1)}, 2, 0);
    return tc_difference(ag_sub(got, want), want);
}

/* Final states h_n, c_n [L,B,H] next to the outputs, flattened together:
 * lengths {0, 2} (the empty example's final state is its h0/c0, so its
 * gradient goes straight there), and two layers whose outputs nothing else
 * reads (the layers' backward must still run). */
static ag_tensor *flat(ag_tensor *t) { return ag_reshape(t, 1, (int[]){(int)t->size}); }
static ag_tensor *f_lstm_finals(ag_tensor **in) {
    ag_lstm_layer l = {in[1], in[2], in[3], in[4]};
    ag_tensor *hn, *cn;
    ag_lstm_opts o = {.len = len_02, .h0 = in[5], .c0 = in[6], .h_n = &hn, .c_n = &cn};
    ag_tensor *y = ag_lstm(in[0], &l, 1, &o);
    return ag_concat((ag_tensor *[]){flat(y), flat(hn), flat(cn)}, 3, 0);
}
static ag_tensor *f_lstm_2l_finals_only(ag_tensor **in) {
    ag_lstm_layer ls[2] = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    ag_tensor *hn, *cn;
    ag_lstm_opts o = {.len = len_53, .h_n = &hn, .c_n = &cn};
    ag_lstm(in[0], ls, 2, &o);
    return ag_concat((ag_tensor *[]){flat(hn), flat(cn)}, 2, 0);
}
static ag_tensor *f_lstm_2l_h_n(ag_tensor **in) { /* h_n alone, of a batch whose examples all end early */
    ag_lstm_layer ls[2] = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    ag_tensor *hn;
    ag_lstm_opts o = {.len = len_02, .h_n = &hn};
    ag_lstm(in[0], ls, 2, &o);
    return hn;
}

/* ---- MTSA attention ---- */

static int mtsa_setup(ag_tensor **in, ag_rng *r, int B, int N, int dh, double rs, double ss) {
    in[0] = tc_uniform(r, -rs, rs, true, 3, (int[]){B, N, N});
    in[1] = tc_uniform(r, -ss, ss, true, 3, (int[]){B, N, dh});
    in[2] = tc_uniform(r, -1, 1, true, 3, (int[]){B, N, dh});
    return 3;
}
static int mtsa_253(ag_tensor **in, ag_rng *r) { return mtsa_setup(in, r, 2, 5, 3, 2, 1); }
static int mtsa_n1(ag_tensor **in, ag_rng *r) { return mtsa_setup(in, r, 2, 1, 3, 2, 1); }
static int mtsa_large(ag_tensor **in, ag_rng *r) { return mtsa_setup(in, r, 2, 4, 3, 40, 30); }
static int mtsa_heads(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 2, 4, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 2, 4, 3));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(2, 2, 4, 3));
    return 3;
}
static ag_tensor *f_mtsa_past(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 5, true), len_53, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_future_id(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 5, false), len_53, AG_MTSA_IDENTITY);
}
static ag_tensor *f_mtsa_nomask(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], NULL, NULL, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_n1_past(ag_tensor **in) { /* the only row is fully masked: output 0 */
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 1, true), NULL, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_large(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 4, true), len_42, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_large_id(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 4, false), len_42, AG_MTSA_IDENTITY);
}
static ag_tensor *f_mtsa_heads(ag_tensor **in) { /* head 0 past, head 1 future: mask [h,N,N] */
    ag_tensor *m = ag_tensor_new_host(3, (int[]){2, 4, 4});
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 4; k++) {
            m->data[q * 4 + k] = k < q;
            m->data[16 + q * 4 + k] = k > q;
        }
    return ag_mtsa_attention(in[0], in[1], in[2], tc_to_device_of(in[0], m), len_42, AG_MTSA_LOG_SIGMOID);
}

/* The op against the [B,N,N,dh] composition it replaces: scores
 * sigma_t(R[q,k]) + S[k,l] under the direction mask (-inf where it is 0),
 * the softmax over the keys, the weighted sum of v.  The difference is 0
 * and so are its gradients; v is added so the output has a gradient. */
static ag_tensor *mtsa_composed(ag_tensor **in, int N, bool past, ag_mtsa_score score) {
    int B = in[0]->shape[0], dh = in[1]->shape[2];
    ag_tensor *m = ag_tensor_new_host(4, (int[]){1, N, N, 1});
    for (int q = 0; q < N; q++)
        for (int k = 0; k < N; k++) m->data[q * N + k] = (past ? k < q : k > q) ? 0 : -INFINITY;
    ag_tensor *sr = score == AG_MTSA_IDENTITY ? in[0] : ag_log_sigmoid(in[0]);
    ag_tensor *scores = ag_add(ag_reshape(sr, 4, (int[]){B, N, N, 1}), ag_reshape(in[1], 4, (int[]){B, 1, N, dh}));
    ag_tensor *p = ag_masked_softmax_axis(scores, 2, tc_to_device_of(in[0], m), 1.0);
    return ag_sum_axis(ag_mul(p, ag_reshape(in[2], 4, (int[]){B, 1, N, dh})), 2, false);
}
static ag_tensor *mtsa_vs_composed(ag_tensor **in, bool past, ag_mtsa_score score) {
    int N = in[0]->shape[1];
    ag_tensor *op = ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], N, past), NULL, score);
    return tc_difference(ag_sub(op, mtsa_composed(in, N, past, score)), in[2]);
}
static ag_tensor *f_mtsa_vs_composed(ag_tensor **in) { return mtsa_vs_composed(in, true, AG_MTSA_LOG_SIGMOID); }
static ag_tensor *f_mtsa_vs_composed_id(ag_tensor **in) { return mtsa_vs_composed(in, false, AG_MTSA_IDENTITY); }
/* R and S ~1e3 (multiples of 1/64): each part's own maximum is far from
 * the best key's, so ER ES alone would underflow to 0 */
static int mtsa_1e3(ag_tensor **in, ag_rng *r) {
    mtsa_setup(in, r, 2, 4, 3, 1, 1);
    in[0] = tc_away(r, 900, 1100, true, SHAPE(2, 4, 4));
    in[1] = tc_away(r, 900, 1100, true, SHAPE(2, 4, 3));
    for (int i = 0; i < 2; i++)
        for (int64_t j = 0; j < in[i]->size; j++) in[i]->data[j] = (ag_real)(round((double)in[i]->data[j] * 64) / 64);
    return 3;
}
static ag_tensor *f_mtsa_1e3(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 4, true), len_42, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_1e3_id(ag_tensor **in) {
    return ag_mtsa_attention(in[0], in[1], in[2], dir_mask(in[0], 4, false), len_42, AG_MTSA_IDENTITY);
}

/* ---- MTSA's heads in one op: in[0] = r [G,B,N,N], in[1] = s, in[2] = v [G,B,N,dh] ---- */

static const int32_t len_4103[4] = {4, 1, 0, 3}; /* N = 4: full, length 1, empty, padded */

/* A {0,1} mask on ref's device: 1 where key k < query q (strict past:
 * query 0 has no key) in slice 0, k != q in slice 1, all but key 2 in slice 2. */
static ag_tensor *mtsa_mask(const ag_tensor *ref, int slices, int N) {
    ag_tensor *t = ag_tensor_new_host(slices > 1 ? 3 : 2, slices > 1 ? (int[]){slices, N, N} : (int[]){N, N});
    for (int i = 0; i < slices; i++)
        for (int q = 0; q < N; q++)
            for (int k = 0; k < N; k++)
                t->data[((int64_t)i * N + q) * N + k] = (ag_real)(i % 3 == 0 ? k < q : i % 3 == 1 ? k != q : k != 2);
    return tc_to_device_of(ref, t);
}
/* models/mtsa.c's direction masks stacked, [G,N,N]: heads g < G/2 past
 * (k < q), the rest future (k > q), the diagonal excluded in both. */
static ag_tensor *head_masks(const ag_tensor *ref, int G, int N) {
    ag_tensor *m = ag_tensor_new_host(3, (int[]){G, N, N});
    for (int g = 0; g < G; g++)
        for (int q = 0; q < N; q++)
            for (int k = 0; k < N; k++) m->data[((int64_t)g * N + q) * N + k] = g < G / 2 ? k < q : k > q;
    return tc_to_device_of(ref, m);
}
static int groups_setup(ag_tensor **in, ag_rng *r, int G, int B, int N, int dh) {
    in[0] = tc_uniform(r, -2, 2, true, 4, (int[]){G, B, N, N});
    in[1] = tc_uniform(r, -1, 1, true, 4, (int[]){G, B, N, dh});
    in[2] = tc_uniform(r, -1, 1, true, 4, (int[]){G, B, N, dh});
    return 3;
}
static int groups_2443(ag_tensor **in, ag_rng *r) { return groups_setup(in, r, 2, 4, 4, 3); }
static int groups_3442(ag_tensor **in, ag_rng *r) { return groups_setup(in, r, 3, 4, 4, 2); }

static ag_tensor *f_groups_past_future(ag_tensor **in) {
    return ag__mtsa_attention_groups(in[0], in[1], in[2], head_masks(in[0], 2, 4), len_4103, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_groups_past_future_id(ag_tensor **in) {
    return ag__mtsa_attention_groups(in[0], in[1], in[2], head_masks(in[0], 2, 4), len_4103, AG_MTSA_IDENTITY);
}
static ag_tensor *f_groups_shared_mask(ag_tensor **in) { /* one [N,N] for every head */
    return ag__mtsa_attention_groups(in[0], in[1], in[2], dir_mask(in[0], 4, true), len_4103, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_groups_no_mask_no_len(ag_tensor **in) {
    return ag__mtsa_attention_groups(in[0], in[1], in[2], NULL, NULL, AG_MTSA_LOG_SIGMOID);
}
/* Three heads under three different masks (past, k != q, all but key 2):
 * a head reading its neighbour's mask shows. */
static ag_tensor *f_groups_3_heads(ag_tensor **in) {
    return ag__mtsa_attention_groups(in[0], in[1], in[2], mtsa_mask(in[0], 3, 4), len_4103, AG_MTSA_LOG_SIGMOID);
}

/* The op against ag_mtsa_attention on each head's slices, stacked back:
 * the same kernels on the same data, a difference of exactly 0 (v added
 * so that the output has a gradient worth checking). */
static ag_tensor *groups_vs_head_by_head(ag_tensor **in, ag_tensor *masks, const int32_t *len, ag_mtsa_score score) {
    int G = in[0]->shape[0], B = in[0]->shape[1], N = in[0]->shape[2], dh = in[1]->shape[3];
    ag_tensor *heads[4]; /* G <= 4 in the cases */
    for (int g = 0; g < G; g++) {
        ag_tensor *r = ag_reshape(ag_slice(in[0], 0, g, g + 1), 3, (int[]){B, N, N});
        ag_tensor *s = ag_reshape(ag_slice(in[1], 0, g, g + 1), 3, (int[]){B, N, dh});
        ag_tensor *v = ag_reshape(ag_slice(in[2], 0, g, g + 1), 3, (int[]){B, N, dh});
        ag_tensor *m = ag_reshape(ag_slice(masks, 0, g, g + 1), 2, (int[]){N, N});
        heads[g] = ag_reshape(ag_mtsa_attention(r, s, v, m, len, score), 4, (int[]){1, B, N, dh});
    }
    ag_tensor *all = ag__mtsa_attention_groups(in[0], in[1], in[2], masks, len, score);
    return tc_difference(ag_sub(all, ag_concat(heads, G, 0)), in[2]);
}
static ag_tensor *f_groups_vs_heads(ag_tensor **in) {
    return groups_vs_head_by_head(in, head_masks(in[0], 2, 4), len_4103, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_groups_vs_heads_3_id(ag_tensor **in) {
    return groups_vs_head_by_head(in, mtsa_mask(in[0], 3, 4), len_4103, AG_MTSA_IDENTITY);
}
/* r and s ~1e3 (multiples of 1/64), entries computed directly in both */
static int groups_1e3(ag_tensor **in, ag_rng *r) {
    groups_setup(in, r, 2, 4, 4, 3);
    in[0] = tc_away(r, 900, 1100, true, SHAPE(2, 4, 4, 4));
    in[1] = tc_away(r, 900, 1100, true, SHAPE(2, 4, 4, 3));
    for (int i = 0; i < 2; i++)
        for (int64_t j = 0; j < in[i]->size; j++) in[i]->data[j] = (ag_real)(round((double)in[i]->data[j] * 64) / 64);
    return 3;
}
/* N = 1 under past and future: every head's only query has no key (0) */
static int groups_n1(ag_tensor **in, ag_rng *r) { return groups_setup(in, r, 2, 3, 1, 2); }
static ag_tensor *f_groups_n1(ag_tensor **in) {
    return ag__mtsa_attention_groups(in[0], in[1], in[2], head_masks(in[0], 2, 1), (const int32_t[]){1, 0, 1},
                                     AG_MTSA_LOG_SIGMOID);
}
/* One key, weight 1: H = v, and r's gradient is 0 up to roundoff (the
 * device's differs from the CPU's exact 0), so r is added too, giving it
 * one of the scale the comparison measures against. */
static ag_tensor *f_groups_n1_nomask(ag_tensor **in) {
    ag_tensor *h = ag__mtsa_attention_groups(in[0], in[1], in[2], NULL, (const int32_t[]){1, 0, 1}, AG_MTSA_IDENTITY);
    return ag_add(h, ag_mul_scalar(in[0], 0.5)); /* r [G,B,1,1] over the features */
}

/* ---- GRU (one layer per case: x, w_ih, w_hh, then b_ih, b_hh, then h0) ---- */

static int gru_setup(ag_tensor **in, ag_rng *r, int B, int N, int I, int H, bool bias, bool state) {
    int n = 0;
    in[n++] = tc_uniform(r, -1, 1, true, 3, (int[]){B, N, I});
    in[n++] = tc_uniform(r, -0.7, 0.7, true, 2, (int[]){I, 3 * H});
    in[n++] = tc_uniform(r, -0.7, 0.7, true, 2, (int[]){H, 3 * H});
    if (bias) {
        in[n++] = tc_uniform(r, -0.5, 0.5, true, 1, (int[]){3 * H});
        in[n++] = tc_uniform(r, -0.5, 0.5, true, 1, (int[]){3 * H});
    }
    if (state) in[n++] = tc_uniform(r, -1, 1, true, 3, (int[]){1, B, H});
    return n;
}
static int gru_full(ag_tensor **in, ag_rng *r) { return gru_setup(in, r, 2, 4, 3, 2, true, false); }
static int gru_53(ag_tensor **in, ag_rng *r) { return gru_setup(in, r, 2, 5, 3, 2, true, true); }
static int gru_n1(ag_tensor **in, ag_rng *r) { return gru_setup(in, r, 3, 1, 2, 3, true, true); }
static int gru_n1_zero_state(ag_tensor **in, ag_rng *r) { return gru_setup(in, r, 3, 1, 2, 3, true, false); }
static int gru_nobias(ag_tensor **in, ag_rng *r) { return gru_setup(in, r, 2, 4, 2, 2, false, true); }
/* Inputs ~1e3: r, z and n saturated (exactly 0, 1 or +-1), no gradient
 * through any gate; h0's reaches it where z is 1 (h = n + z (h0 - n)). */
static int gru_saturated(ag_tensor **in, ag_rng *r) {
    int n = gru_setup(in, r, 2, 3, 2, 2, true, true);
    in[0] = tc_away(r, 900, 1100, true, SHAPE(2, 3, 2));
    for (int64_t j = 0; j < in[0]->size; j++) in[0]->data[j] = (ag_real)(round((double)in[0]->data[j] * 64) / 64);
    return n;
}

static ag_tensor *run_gru(ag_tensor **in, bool bias, bool state, const int32_t *len, bool reverse) {
    ag_gru_layer l = {in[1], in[2], bias ? in[3] : NULL, bias ? in[4] : NULL};
    ag_gru_opts o = {.len = len, .h0 = state ? in[bias ? 5 : 3] : NULL, .reverse = reverse};
    return ag_gru(in[0], &l, 1, &o);
}
static ag_tensor *f_gru(ag_tensor **in) { return run_gru(in, true, false, NULL, false); }
static ag_tensor *f_gru_53(ag_tensor **in) { return run_gru(in, true, true, len_53, false); }
static ag_tensor *f_gru_02(ag_tensor **in) { return run_gru(in, true, true, len_02, false); }
static ag_tensor *f_gru_state(ag_tensor **in) { return run_gru(in, true, true, NULL, false); }
static ag_tensor *f_gru_zero_state(ag_tensor **in) { return run_gru(in, true, false, NULL, false); }
static ag_tensor *f_gru_nobias(ag_tensor **in) { return run_gru(in, false, true, len_42, false); }
static ag_tensor *f_gru_saturated(ag_tensor **in) { return run_gru(in, true, true, (const int32_t[]){3, 1}, false); }
static ag_tensor *f_gru_02_zero_state(ag_tensor **in) { return run_gru(in, true, false, len_02, false); }
static ag_tensor *f_gru_reverse_53(ag_tensor **in) { return run_gru(in, true, true, len_53, true); }
/* The output and h_n of lengths 0 and 2 (h_n of the empty example is its h0). */
static ag_tensor *gru_finals(ag_tensor **in, bool reverse) {
    ag_gru_layer l = {in[1], in[2], in[3], in[4]};
    ag_tensor *hn;
    ag_tensor *y = ag_gru(in[0], &l, 1, &(ag_gru_opts){.len = len_02, .h0 = in[5], .h_n = &hn, .reverse = reverse});
    return ag_concat((ag_tensor *[]){flat(y), flat(hn)}, 2, 0);
}
static ag_tensor *f_gru_finals(ag_tensor **in) { return gru_finals(in, false); }
static ag_tensor *f_gru_reverse_finals(ag_tensor **in) { return gru_finals(in, true); }
/* Two layers, each with one of its biases: x, then w_ih, w_hh, a bias per layer. */
static int gru_2l(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 5, 3));
    for (int l = 0; l < 2; l++) {
        in[1 + 3 * l] = tc_uniform(r, -0.7, 0.7, true, 2, (int[]){l ? 2 : 3, 6});
        in[2 + 3 * l] = tc_uniform(r, -0.7, 0.7, true, SHAPE(2, 6));
        in[3 + 3 * l] = tc_uniform(r, -0.5, 0.5, true, SHAPE(6));
    }
    return 7;
}
static ag_tensor *f_gru_2l(ag_tensor **in) {
    ag_gru_layer ls[2] = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    return ag_gru(in[0], ls, 2, &(ag_gru_opts){.len = len_53, .keep = 0.5}); /* eval: no dropout */
}
static ag_tensor *f_gru_2l_h_n(ag_tensor **in) { /* h_n alone, of a batch whose examples all end early */
    ag_gru_layer ls[2] = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    ag_tensor *hn = NULL;
    ag_gru(in[0], ls, 2, &(ag_gru_opts){.len = len_02, .h_n = &hn});
    return hn;
}
/* ag_bigru (models/layers.c): bilstm_setup's shapes at 3H = 9. */
static int bigru_setup(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(3, 6, 5));
    for (int d = 0; d < 2; d++) {
        in[1 + 3 * d] = tc_uniform(r, -0.7, 0.7, true, SHAPE(5, 9));
        in[2 + 3 * d] = tc_uniform(r, -0.7, 0.7, true, SHAPE(3, 9));
        in[3 + 3 * d] = tc_uniform(r, -0.5, 0.5, true, SHAPE(9));
    }
    return 7;
}
static ag_tensor *f_bigru(ag_tensor **in) {
    ag_bigru_layer l = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    return ag_bigru(in[0], &l, (const int32_t[]){6, 0, 1});
}
static ag_tensor *f_bigru_full(ag_tensor **in) {
    ag_bigru_layer l = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    return ag_bigru(in[0], &l, NULL);
}

/* ---- the device's sizes ---- */

static const int32_t seq_len[3] = {4, 7, 1};       /* B = 3, N = 7; unsorted: the LSTM's active rows are not a prefix */
static const int32_t seq_len0[3] = {5, 0, 1};      /* an empty example too */
static const int32_t seq_len_short[3] = {5, 0, 3}; /* T = 5 < N = 7: a mask row is [T, in], not [N, in] */
static const int32_t seq_len_long[3] = {40, 33, 1}; /* N = 40: more steps than a warp has lanes */

static ag_tensor *f_ln_1e5(ag_tensor **x) { return ag_layernorm(x[0], x[1], x[2], 1e-5); }
static ag_tensor *f_ln_gamma_1e3(ag_tensor **x) { return ag_layernorm(x[0], x[1], NULL, 1e-3); }

/* A constant of the given shape on ref's device, fixed values in
 * [-0.5, 0.5] (weights, biases). */
static ag_tensor *seq_const(const ag_tensor *ref, int ndim, const int *shape, double phase) {
    ag_tensor *t = ag_tensor_new_host(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(0.5 * sin(0.7 * (double)i + phase));
    return tc_to_device_of(ref, t);
}

/* ---- Gaussian: x0 = m [3,7,3]; x0 = h [3,7,13], x1 = mu, x2 = sigma [3,7] ---- */
static ag_tensor *f_gaussian_mu(ag_tensor **x) { return ag_gaussian_mu(x[0], seq_len); }
static ag_tensor *f_gaussian_mu_len0(ag_tensor **x) { return ag_gaussian_mu(x[0], seq_len0); }
static ag_tensor *f_gaussian_context(ag_tensor **x) {
    return ag_gaussian_context(x[0], x[1], x[2], seq_len, false, 1e-6, NULL);
}
static ag_tensor *f_gaussian_context_strict(ag_tensor **x) {
    return ag_gaussian_context(x[0], x[1], x[2], seq_len0, true, 1e-6, NULL);
}
/* The weights for heatmaps in the output: c + w h.  w is a constant (no
 * gradient through it), so the case has 3*7*60 = 1260 outputs, past the
 * gradcheck's GRADCHECK_OUT_MAX: central differences would see w move with mu. */
static ag_tensor *f_gaussian_weights(ag_tensor **x) {
    ag_tensor *w = NULL;
    ag_tensor *c = ag_gaussian_context(x[0], x[1], x[2], NULL, false, 0, &w);
    return ag_add(c, ag_matmul(w, x[0]));
}

/* ---- MTSA: x0 = R [..,N,N], x1 = S, x2 = v [..,N,dh] ---- */
static ag_tensor *f_mtsa_len(ag_tensor **x) {
    return ag_mtsa_attention(x[0], x[1], x[2], NULL, seq_len, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_mask_nn(ag_tensor **x) {
    return ag_mtsa_attention(x[0], x[1], x[2], mtsa_mask(x[0], 1, 7), seq_len, AG_MTSA_IDENTITY);
}
static ag_tensor *f_mtsa_mask_hnn(ag_tensor **x) {
    return ag_mtsa_attention(x[0], x[1], x[2], mtsa_mask(x[0], 3, 7), seq_len0, AG_MTSA_LOG_SIGMOID);
}
static ag_tensor *f_mtsa_full(ag_tensor **x) {
    return ag_mtsa_attention(x[0], x[1], x[2], NULL, NULL, AG_MTSA_IDENTITY);
}
/* Two heads past and future over N = 33 (a warp's lanes and one), dh = 37. */
static ag_tensor *f_groups_sized(ag_tensor **x) {
    return ag__mtsa_attention_groups(x[0], x[1], x[2], head_masks(x[0], 2, 33), (const int32_t[]){33, 20},
                                     AG_MTSA_LOG_SIGMOID);
}

/* ---- LSTM: x0 = x [B,N,in]; the rest as each case says ---- */
/* x1 = w_ih [13,20], x2 = w_hh [5,20] (H = 5), constant biases. */
static ag_tensor *f_lstm_const_biases(ag_tensor **x) {
    ag_lstm_layer l = {x[1], x[2], seq_const(x[0], 1, (int[]){20}, 0.3), seq_const(x[0], 1, (int[]){20}, 1.1)};
    return ag_lstm(x[0], &l, 1, &(ag_lstm_opts){.len = seq_len});
}
/* Two layers (the second constant, without biases): h_n + c_n [2,3,5],
 * the final states of examples of lengths 5, 0 and 1. */
static ag_tensor *f_lstm_2l_finals_const(ag_tensor **x) {
    ag_lstm_layer l[2] = {{x[1], x[2], seq_const(x[0], 1, (int[]){20}, 0.3), NULL},
                          {seq_const(x[0], 2, (int[]){5, 20}, 2.0), seq_const(x[0], 2, (int[]){5, 20}, 2.5), NULL,
                           NULL}};
    ag_tensor *hn = NULL, *cn = NULL;
    ag_lstm(x[0], l, 2, &(ag_lstm_opts){.len = seq_len0, .h_n = &hn, .c_n = &cn});
    return ag_add(hn, cn);
}
/* x1 = h0, x2 = c0 [2,3,5]; constant weights, dropout between the layers
 * (keep 0.7, the same mask on both sides: the rng is seeded here). */
static ag_tensor *lstm_h0_dropout(ag_tensor **x, const int32_t *len) {
    ag_lstm_layer l[2] = {{seq_const(x[0], 2, (int[]){13, 20}, 0.1), seq_const(x[0], 2, (int[]){5, 20}, 0.2),
                           seq_const(x[0], 1, (int[]){20}, 0.3), seq_const(x[0], 1, (int[]){20}, 0.4)},
                          {seq_const(x[0], 2, (int[]){5, 20}, 0.5), seq_const(x[0], 2, (int[]){5, 20}, 0.6),
                           seq_const(x[0], 1, (int[]){20}, 0.7), NULL}};
    ag_rng r;
    ag_rng_seed(&r, 7);
    ag_lstm_opts o = {.len = len, .h0 = x[1], .c0 = x[2], .keep = 0.7, .training = true, .rng = &r};
    return ag_lstm(x[0], l, 2, &o);
}
static ag_tensor *f_lstm_h0_dropout(ag_tensor **x) { return lstm_h0_dropout(x, seq_len); }
static ag_tensor *f_lstm_h0_dropout_short(ag_tensor **x) { return lstm_h0_dropout(x, seq_len_short); }
/* x1 = b_ih, x2 = b_hh [20]: the biases' gradients (column sums). */
static ag_tensor *f_lstm_biases(ag_tensor **x) {
    ag_lstm_layer l = {seq_const(x[0], 2, (int[]){13, 20}, 0.1), seq_const(x[0], 2, (int[]){5, 20}, 0.2), x[1], x[2]};
    return ag_lstm(x[0], &l, 1, &(ag_lstm_opts){.len = seq_len});
}
/* x1 = h0, x2 = c0 [1,3,5]: h_n + c_n, where the empty example's final
 * state is its initial one. */
static ag_tensor *f_lstm_h0_finals(ag_tensor **x) {
    ag_lstm_layer l = {seq_const(x[0], 2, (int[]){13, 20}, 0.1), seq_const(x[0], 2, (int[]){5, 20}, 0.2),
                       seq_const(x[0], 1, (int[]){20}, 0.3), NULL};
    ag_tensor *hn = NULL, *cn = NULL;
    ag_lstm(x[0], &l, 1, &(ag_lstm_opts){.len = seq_len0, .h0 = x[1], .c0 = x[2], .h_n = &hn, .c_n = &cn});
    return ag_add(hn, cn);
}
/* Full lengths, H = 33: x1 = w_ih [7,132], x2 = w_hh [33,132]. */
static ag_tensor *f_lstm_h33(ag_tensor **x) {
    ag_lstm_layer l = {x[1], x[2], NULL, seq_const(x[0], 1, (int[]){132}, 0.9)};
    return ag_lstm(x[0], &l, 1, NULL);
}
static ag_tensor *f_lstm_long(ag_tensor **x) {
    ag_lstm_layer l = {x[1], x[2], seq_const(x[0], 1, (int[]){20}, 0.3), seq_const(x[0], 1, (int[]){20}, 1.1)};
    return ag_lstm(x[0], &l, 1, &(ag_lstm_opts){.len = seq_len_long});
}

/* ---- GRU: x0 = x [B,N,in]; the rest as each case says ---- */
/* x1 = w_ih [13,15], x2 = w_hh [5,15] (H = 5), constant biases. */
static ag_tensor *f_gru_const_biases(ag_tensor **x) {
    ag_gru_layer l = {x[1], x[2], seq_const(x[0], 1, (int[]){15}, 0.3), seq_const(x[0], 1, (int[]){15}, 1.1)};
    return ag_gru(x[0], &l, 1, &(ag_gru_opts){.len = seq_len});
}
/* x1 = h0 [2,3,5]; constant weights, dropout between the layers, h_n
 * added to the output's first step. */
static ag_tensor *gru_h0_dropout(ag_tensor **x, const int32_t *len) {
    ag_gru_layer l[2] = {{seq_const(x[0], 2, (int[]){13, 15}, 0.1), seq_const(x[0], 2, (int[]){5, 15}, 0.2),
                          seq_const(x[0], 1, (int[]){15}, 0.3), seq_const(x[0], 1, (int[]){15}, 0.4)},
                         {seq_const(x[0], 2, (int[]){5, 15}, 0.5), seq_const(x[0], 2, (int[]){5, 15}, 0.6),
                          seq_const(x[0], 1, (int[]){15}, 0.7), NULL}};
    ag_rng r;
    ag_rng_seed(&r, 7);
    ag_tensor *hn = NULL;
    ag_gru_opts o = {.len = len, .h0 = x[1], .keep = 0.7, .training = true, .rng = &r, .h_n = &hn};
    ag_tensor *y = ag_gru(x[0], l, 2, &o);
    return ag_concat((ag_tensor *[]){flat(y), flat(hn)}, 2, 0);
}
static ag_tensor *f_gru_h0_dropout(ag_tensor **x) { return gru_h0_dropout(x, seq_len); }
static ag_tensor *f_gru_h0_dropout_short(ag_tensor **x) { return gru_h0_dropout(x, seq_len_short); }
/* x1 = b_ih, x2 = b_hh [15]: the two biases' gradients differ (r scales b_hn's). */
static ag_tensor *f_gru_biases(ag_tensor **x) {
    ag_gru_layer l = {seq_const(x[0], 2, (int[]){13, 15}, 0.1), seq_const(x[0], 2, (int[]){5, 15}, 0.2), x[1], x[2]};
    return ag_gru(x[0], &l, 1, &(ag_gru_opts){.len = seq_len0});
}
/* Full lengths, H = 33: x1 = w_ih [7,99], x2 = w_hh [33,99]. */
static ag_tensor *f_gru_h33(ag_tensor **x) {
    ag_gru_layer l = {x[1], x[2], seq_const(x[0], 1, (int[]){99}, 0.4), seq_const(x[0], 1, (int[]){99}, 0.9)};
    return ag_gru(x[0], &l, 1, NULL);
}
static ag_tensor *f_gru_long(ag_tensor **x) {
    ag_gru_layer l = {x[1], x[2], seq_const(x[0], 1, (int[]){15}, 0.3), seq_const(x[0], 1, (int[]){15}, 1.1)};
    return ag_gru(x[0], &l, 1, &(ag_gru_opts){.len = seq_len_long, .reverse = true});
}

/* ag_bilstm (models/layers.c): each direction its own w_ih, w_hh and one bias;
 * a full, an empty and a length-1 example. */
static int bilstm_setup(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(3, 6, 5));
    for (int d = 0; d < 2; d++) {
        in[1 + 3 * d] = tc_uniform(r, -0.6, 0.6, true, SHAPE(5, 12));
        in[2 + 3 * d] = tc_uniform(r, -0.6, 0.6, true, SHAPE(3, 12));
        in[3 + 3 * d] = tc_uniform(r, -0.5, 0.5, true, SHAPE(12));
    }
    return 7;
}
static ag_tensor *f_bilstm(ag_tensor **in) {
    ag_bilstm_layer l = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    return ag_bilstm(in[0], &l, (const int32_t[]){6, 0, 1});
}
static ag_tensor *f_bilstm_full(ag_tensor **in) {
    ag_bilstm_layer l = {{in[1], in[2], in[3], NULL}, {in[4], in[5], NULL, in[6]}};
    return ag_bilstm(in[0], &l, NULL);
}

const op_case seq_cases[] = {
    {"layernorm/3d", ln_3d, f_ln, 0, 0},
    {"layernorm/1d_row", ln_row, f_ln, 0, 0},
    {"layernorm/one_feature", ln_d1, f_ln_eps, 0, 0},
    {"layernorm/large_offset", ln_offset, f_ln, 0, 0},
    {"layernorm/no_affine", ln_plain, f_ln_plain, 0, 0},
    {"layernorm/gamma_only", ln_gamma_only, f_ln_gamma, 0, 0},
    {"rmsnorm/3d", rms_3d, f_rms, 0, 0},
    {"rmsnorm/one_feature", rms_d1, f_rms_eps, 0, 0},
    {"rmsnorm/large_offset", rms_offset, f_rms, 0, 0},
    {"rmsnorm/no_gain", ln_plain, f_rms_plain, 0, 0},
    {"rope/split_heads", rope_heads, f_rope_heads, 0, 0},
    {"rope/rows_of_3_heads_pos0_3", rope_rows, f_rope_rows, 0, 0},
    {"rope/rows_pos0_1e5", rope_rows, f_rope_rows_far, 0, 0},
    {"rope/head_dim_2", rope_rows, f_rope_pair, 0, 0},
    {"rope/N1", rope_n1, f_rope_n1, 0, 0},
    {"rope/scores", rope_heads, f_rope_scores, 0, 0},
    {"maximum/constant_floor", max_floor, f_max_floor, 0, 0},
    {"gaussian_mu/lengths_5_3", mu_setup, f_mu, 0, 0},
    {"gaussian_mu/full", mu_setup, f_mu_full, 0, 0},
    {"gaussian_mu/N1_lengths_1_1_0", mu_n1, f_mu_n1, 0, 0},
    {"gaussian/full", gauss_253, f_gauss, 0, 0},
    {"gaussian/lengths_5_3", gauss_253, f_gauss_len, 0, 0},
    {"gaussian/strict_lengths_5_3", gauss_253, f_gauss_strict, 0, 0},
    {"gaussian/lengths_0_2", gauss_253, f_gauss_len0, 0, 0},
    {"gaussian/N1", gauss_n1, f_gauss, 0, 0},
    {"gaussian/N1_strict", gauss_n1, f_gauss_strict_full, 0, 0},
    {"gaussian/mu_sigma_col", gauss_col, f_gauss_col, 0, 0},
    {"gaussian/sum_floor", gauss_floor, f_gauss, 0, 0},
    {"gaussian/mu_then_context", gauss_mu_chain, f_gauss_mu_chain, 0, 0},
    {"lstm/full_length", lstm_full, f_lstm, 0, 0},
    {"lstm/lengths_5_3_state", lstm_53, f_lstm_53, 0, 0},
    {"lstm/lengths_0_2_state", lstm_53, f_lstm_02, 0, 0},
    {"lstm/N1_state", lstm_n1, f_lstm_n1, 0, 0},
    {"lstm/no_bias", lstm_nobias, f_lstm_nobias, 0, 0},
    {"lstm/saturated_gates_inputs_1e3_lengths_3_1", lstm_saturated, f_lstm_saturated, 0, 0},
    {"lstm/N1_zero_state", lstm_n1_zero_state, f_lstm_zero_state, 0, 0},
    {"lstm/lengths_0_2_zero_state", lstm_02_zero_state, f_lstm_02_zero_state, 0, 0},
    {"bilstm/lengths_6_0_1", bilstm_setup, f_bilstm, 0, 0},
    {"bilstm/full", bilstm_setup, f_bilstm_full, 0, 0},
    {"lstm/2_layers_lengths_5_3", lstm_2l, f_lstm_2l, 0, 0},
    {"lstm/final_states_lengths_0_2", lstm_53, f_lstm_finals, 0, 0},
    {"lstm/2_layers_final_states_only", lstm_2l, f_lstm_2l_finals_only, 0, 0},
    {"lstm/2_layers_h_n_lengths_0_2", lstm_2l, f_lstm_2l_h_n, 0, 0},
    {"lstm/reverse_lengths_5_3_state", lstm_53, f_lstm_reverse_53, 0, 0},
    {"lstm/reverse_final_states_lengths_0_2", lstm_53, f_lstm_reverse_finals, 0, 0},
    {"lstm/reverse_last_word_is_first_step", lstm_53, f_lstm_reverse_first_step, .flags = OPCASE_DIFFERENCE},
    {"gru/full_length", gru_full, f_gru, 0, 0},
    {"gru/lengths_5_3_state", gru_53, f_gru_53, 0, 0},
    {"gru/lengths_0_2_state", gru_53, f_gru_02, 0, 0},
    {"gru/N1_state", gru_n1, f_gru_state, 0, 0},
    {"gru/N1_zero_state", gru_n1_zero_state, f_gru_zero_state, 0, 0},
    {"gru/no_bias_lengths_4_2_state", gru_nobias, f_gru_nobias, 0, 0},
    {"gru/saturated_gates_inputs_1e3_lengths_3_1", gru_saturated, f_gru_saturated, 0, 0},
    {"gru/lengths_0_2_zero_state", gru_full, f_gru_02_zero_state, 0, 0},
    {"gru/2_layers_lengths_5_3", gru_2l, f_gru_2l, 0, 0},
    {"gru/2_layers_h_n_lengths_0_2", gru_2l, f_gru_2l_h_n, 0, 0},
    {"gru/final_states_lengths_0_2", gru_53, f_gru_finals, 0, 0},
    {"gru/reverse_lengths_5_3_state", gru_53, f_gru_reverse_53, 0, 0},
    {"gru/reverse_final_states_lengths_0_2", gru_53, f_gru_reverse_finals, 0, 0},
    {"bigru/lengths_6_0_1", bigru_setup, f_bigru, 0, 0},
    {"bigru/full", bigru_setup, f_bigru_full, 0, 0},
    {"mtsa/past_lengths_5_3", mtsa_253, f_mtsa_past, 0, 0},
    {"mtsa/future_identity", mtsa_253, f_mtsa_future_id, 0, 0},
    {"mtsa/no_mask", mtsa_253, f_mtsa_nomask, 0, 0},
    {"mtsa/N1_fully_masked", mtsa_n1, f_mtsa_n1_past, 0, 0},
    {"mtsa/large_logits", mtsa_large, f_mtsa_large, 0, 0},
    {"mtsa/large_logits_identity", mtsa_large, f_mtsa_large_id, 0, 0},
    {"mtsa/heads_past_future", mtsa_heads, f_mtsa_heads, 0, 0},
    {"mtsa/equals_composed", mtsa_253, f_mtsa_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"mtsa/equals_composed_identity", mtsa_253, f_mtsa_vs_composed_id, .flags = OPCASE_DIFFERENCE},
    {"mtsa/equals_composed_logits_1e3", mtsa_1e3, f_mtsa_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"mtsa/equals_composed_logits_1e3_identity", mtsa_1e3, f_mtsa_vs_composed_id, .flags = OPCASE_DIFFERENCE},
    {"mtsa/logits_1e3", mtsa_1e3, f_mtsa_1e3, 0, 0},
    {"mtsa/logits_1e3_identity", mtsa_1e3, f_mtsa_1e3_id, 0, 0},
    {"mtsa_groups/past_future_lengths_4_1_0_3", groups_2443, f_groups_past_future, 0, 0},
    {"mtsa_groups/past_future_identity", groups_2443, f_groups_past_future_id, 0, 0},
    {"mtsa_groups/shared_mask", groups_2443, f_groups_shared_mask, 0, 0},
    {"mtsa_groups/no_mask_no_len", groups_2443, f_groups_no_mask_no_len, 0, 0},
    {"mtsa_groups/3_heads_3_masks", groups_3442, f_groups_3_heads, 0, 0},
    {"mtsa_groups/equal_head_by_head", groups_2443, f_groups_vs_heads, .flags = OPCASE_DIFFERENCE},
    {"mtsa_groups/equal_head_by_head_3_identity", groups_3442, f_groups_vs_heads_3_id, .flags = OPCASE_DIFFERENCE},
    {"mtsa_groups/logits_1e3_past_future", groups_1e3, f_groups_past_future, 0, 0},
    {"mtsa_groups/logits_1e3_equal_head_by_head", groups_1e3, f_groups_vs_heads, .flags = OPCASE_DIFFERENCE},
    {"mtsa_groups/N1_fully_masked", groups_n1, f_groups_n1, 0, 0},
    {"mtsa_groups/N1_no_mask", groups_n1, f_groups_n1_nomask, 0, 0},
    /* ---- the device's sizes ---- */
    /* layer norm: width 33, 64; gamma and beta or not; 3-D (width 1: layernorm/one_feature) */
    UNIFORM_CASE("layernorm [7,33] gamma beta", f_ln_1e5, -2, 2, DIMS(7, 33), DIMS(33), DIMS(33)),
    UNIFORM_CASE("layernorm [2,3,33] gamma", f_ln_gamma_1e3, -2, 2, DIMS(2, 3, 33), DIMS(33)),
    UNIFORM_CASE("layernorm [4,64] plain", f_ln_plain, -2, 2, DIMS(4, 64)),
    UNIFORM_CASE("gaussian_mu [3,7,3] len 4,7,1", f_gaussian_mu, -1, 1, DIMS(3, 7, 3)),
    UNIFORM_CASE("gaussian_mu [3,7,3] len 5,0,1", f_gaussian_mu_len0, -1, 1, DIMS(3, 7, 3)),
    UNIFORM_CASE("gaussian_context [3,7,13]", f_gaussian_context, 0.1, 1, DIMS(3, 7, 13), DIMS(3, 7), DIMS(3, 7)),
    UNIFORM_CASE("gaussian_context strict len0", f_gaussian_context_strict, 0.1, 1, DIMS(3, 7, 13), DIMS(3, 7),
                 DIMS(3, 7, 1)),
    UNIFORM_CASE("gaussian_context weights", f_gaussian_weights, 0.1, 1, DIMS(3, 7, 60), DIMS(3, 7), DIMS(3, 7)),
    UNIFORM_CASE("mtsa [3,7,7] len 4,7,1", f_mtsa_len, -2, 2, DIMS(3, 7, 7), DIMS(3, 7, 13), DIMS(3, 7, 13)),
    UNIFORM_CASE("mtsa [3,7,7] mask [7,7] ident", f_mtsa_mask_nn, -2, 2, DIMS(3, 7, 7), DIMS(3, 7, 13),
                 DIMS(3, 7, 13)),
    UNIFORM_CASE("mtsa [3,3,7,7] mask [3,7,7]", f_mtsa_mask_hnn, -2, 2, DIMS(3, 3, 7, 7), DIMS(3, 3, 7, 13),
                 DIMS(3, 3, 7, 13)),
    UNIFORM_CASE("mtsa [2,33,33] logits to 30", f_mtsa_full, -30, 30, DIMS(2, 33, 33), DIMS(2, 33, 5),
                 DIMS(2, 33, 5)),
    UNIFORM_CASE("mtsa_groups [2,2,33,33] dh 37 len 33,20", f_groups_sized, -4, 4, DIMS(2, 2, 33, 33),
                 DIMS(2, 2, 33, 37), DIMS(2, 2, 33, 37)),
    UNIFORM_CASE("lstm [3,7,13] H 5 len 4,7,1", f_lstm_const_biases, -1, 1, DIMS(3, 7, 13), DIMS(13, 20),
                 DIMS(5, 20)),
    UNIFORM_CASE("lstm 2 layers h_n+c_n len 5,0,1", f_lstm_2l_finals_const, -1, 1, DIMS(3, 7, 13), DIMS(13, 20),
                 DIMS(5, 20)),
    UNIFORM_CASE("lstm 2 layers h0 c0 dropout", f_lstm_h0_dropout, -1, 1, DIMS(3, 7, 13), DIMS(2, 3, 5),
                 DIMS(2, 3, 5)),
    UNIFORM_CASE("lstm 2 layers h0 c0 dropout len 5,0,3", f_lstm_h0_dropout_short, -1, 1, DIMS(3, 7, 13),
                 DIMS(2, 3, 5), DIMS(2, 3, 5)),
    UNIFORM_CASE("lstm biases [20]", f_lstm_biases, -1, 1, DIMS(3, 7, 13), DIMS(20), DIMS(20)),
    UNIFORM_CASE("lstm h0 c0 -> h_n+c_n len 5,0,1", f_lstm_h0_finals, -1, 1, DIMS(3, 7, 13), DIMS(1, 3, 5),
                 DIMS(1, 3, 5)),
    UNIFORM_CASE("lstm [3,40,13] H 5 len 40,33,1", f_lstm_long, -1, 1, DIMS(3, 40, 13), DIMS(13, 20), DIMS(5, 20)),
    UNIFORM_CASE("lstm [2,5,7] H 33 full", f_lstm_h33, -0.5, 0.5, DIMS(2, 5, 7), DIMS(7, 132), DIMS(33, 132)),
    UNIFORM_CASE("gru [3,7,13] H 5 len 4,7,1", f_gru_const_biases, -1, 1, DIMS(3, 7, 13), DIMS(13, 15),
                 DIMS(5, 15)),
    UNIFORM_CASE("gru 2 layers h0 dropout h_n", f_gru_h0_dropout, -1, 1, DIMS(3, 7, 13), DIMS(2, 3, 5)),
    UNIFORM_CASE("gru 2 layers h0 dropout h_n len 5,0,3", f_gru_h0_dropout_short, -1, 1, DIMS(3, 7, 13),
                 DIMS(2, 3, 5)),
    UNIFORM_CASE("gru biases [15] len 5,0,1", f_gru_biases, -1, 1, DIMS(3, 7, 13), DIMS(15), DIMS(15)),
    UNIFORM_CASE("gru reverse [3,40,13] H 5 len 40,33,1", f_gru_long, -1, 1, DIMS(3, 40, 13), DIMS(13, 15),
                 DIMS(5, 15)),
    UNIFORM_CASE("gru [2,5,7] H 33 full", f_gru_h33, -0.5, 0.5, DIMS(2, 5, 7), DIMS(7, 99), DIMS(33, 99)),
    {NULL, NULL, NULL, 0, 0},
};
