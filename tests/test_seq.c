/* test_seq.c - the sequence ops against independent references (f64):
 *   - LSTM against a step-by-step composition of core ops, values and
 *     gradients, 2 layers, lengths {5,3}, initial state, dropout between
 *     layers; gradcheck of every parameter of a 2-layer LSTM (N = 5 and 1);
 *     no heap allocation in the steady state
 *   - GRU likewise: against its composition (PyTorch's nn.GRU equations),
 *     values and gradients, with dropout; final states carried across
 *     chunks; no heap allocation in the steady state
 *   - MTSA attention against its reference identity (naive loops for the
 *     values, a composition of core ops on the [B,N,N,dh] tensor for the
 *     gradients), fully masked and padded rows included
 *   - Gaussian context against naive loops; the mu recurrence against a
 *     per-step composition with ag_maximum, and the tie rule
 *   - layer norm and RMS norm against naive loops
 *   - rotary positions against the paper's formula, and what they are for:
 *     norms kept, q_m . k_n a function of m - n alone, pos0 as an offset
 *   - docs/models.md's dual-axial module composed from core ops (no fused op
 *     needed), checked against naive loops and gradchecked at d=4, L=5
 *   - error messages of every op */
#include "attngrad.h"
#include "check.h"
#include "fatal.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t len_53[] = {5, 3};

/* ---- helpers ---- */

static ag_tensor *uniform(ag_rng *r, double lo, double hi, bool grad, int ndim, const int *shape) {
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(lo + (hi - lo) * ag_rng_uniform(r));
    t->requires_grad = grad;
    return t;
}

static ag_tensor *zeros(int ndim, const int *shape) { return ag_tensor_new(ndim, shape); }

static double max_abs_diff(const ag_real *a, const ag_real *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* Runs backward seeded with `seed`, then moves the gradients of ts into
 * copies (and clears them, so the next run starts from zero). */
static ag_real **grads_of(ag_tensor *out, const ag_real *seed, ag_tensor **ts, int n) {
    ag_backward_seeded(out, seed);
    ag_real **g = calloc((size_t)n, sizeof *g);
    for (int i = 0; i < n; i++) {
        g[i] = calloc((size_t)ts[i]->size + 1, sizeof(ag_real));
        if (ts[i]->grad) memcpy(g[i], ts[i]->grad, (size_t)ts[i]->size * sizeof(ag_real));
        ts[i]->grad = NULL;
    }
    return g;
}

static void free_grads(ag_real **g, int n) {
    for (int i = 0; i < n; i++) free(g[i]);
    free(g);
}

static ag_real *random_seed(ag_rng *r, int64_t n) {
    ag_real *s = malloc((size_t)n * sizeof *s + 1);
    for (int64_t i = 0; i < n; i++) s[i] = (ag_real)(ag_rng_uniform(r) * 2 - 1);
    return s;
}

/* Compares the gradients of two runs input by input. */
static void compare_grads(const char *what, ag_real **ga, ag_real **gb, ag_tensor **ts, int n, double tol,
                          bool expect_nonzero) {
    for (int i = 0; i < n; i++) {
        double d = max_abs_diff(ga[i], gb[i], ts[i]->size), scale = 0;
        for (int64_t k = 0; k < ts[i]->size; k++) scale = fmax(scale, fabs((double)gb[i][k]));
        CHECK(d <= tol * fmax(scale, 1), "%s: gradient of input %d differs by %.3g (scale %.3g)", what, i, d, scale);
        CHECK(scale > 0 || !expect_nonzero, "%s: gradient of input %d is all zero: the comparison proves nothing", what, i);
    }
}

/* Selection matrices, so that slicing in the reference compositions is a
 * plain matmul of existing ops: sel(rows, cols, offset) has ones at
 * (offset + j, j), picking columns offset..offset+cols-1 of a [.., rows] input. */
static ag_tensor *sel(int rows, int cols, int offset) {
    ag_tensor *s = zeros(2, (int[]){rows, cols});
    for (int j = 0; j < cols; j++) s->data[(int64_t)(offset + j) * cols + j] = 1;
    return s;
}
/* place(rows, cols, offset): ones at (j, offset + j): puts a [.., rows] block at column offset. */
static ag_tensor *place(int rows, int cols, int offset) {
    ag_tensor *s = zeros(2, (int[]){rows, cols});
    for (int j = 0; j < rows; j++) s->data[(int64_t)j * cols + offset + j] = 1;
    return s;
}

/* ======================================================================== */
/* LSTM                                                                      */
/* ======================================================================== */

typedef struct {
    int B, N, I, H, L;
    ag_lstm_layer layers[3];
    ag_tensor *x, *h0, *c0;
    const int32_t *len;
    double keep;
    bool training;
    uint64_t drop_seed;
} lstm_case;

static ag_tensor *lstm_op(lstm_case *c) {
    ag_rng rng;
    ag_rng_seed(&rng, c->drop_seed);
    ag_lstm_opts o = {.len = c->len, .h0 = c->h0, .c0 = c->c0, .keep = c->keep, .training = c->training, .rng = &rng};
    return ag_lstm(c->x, c->layers, c->L, &o);
}

/* Row l of an [L, ...] tensor through a [1,L] one-hot matrix. */
static ag_tensor *row_picker(int L, int l) {
    ag_tensor *s = zeros(2, (int[]){1, L});
    s->data[l] = 1;
    return s;
}

/* Layer l's [B,H] slice of an initial state [L,B,H], or zeros. */
static ag_tensor *state_slice(ag_tensor *s0, int L, int l, int B, int H) {
    if (!s0) return zeros(2, (int[]){B, H});
    ag_tensor *flat = ag_reshape(s0, 2, (int[]){L, B * H});
    return ag_reshape(ag_matmul(row_picker(L, l), flat), 2, (int[]){B, H});
}

/* The op's dropout between layers, composed: dropout's mask over each
 * example's [T, I] steps, applied to X [B,N,I] (none in evaluation). */
static ag_tensor *composed_dropout(const lstm_case *c, ag_tensor *X, int T, ag_rng *rng) {
    if (!(c->training && c->keep < 1)) return X;
    int B = c->B, N = c->N, I = X->shape[2];
    ag_tensor *M = ag_dropout(ag_tensor_fill(1, 2, (int[]){B, T * I}), c->keep, true, rng);
    ag_tensor *D = ag_tensor_fill(1, 3, (int[]){B, N, I});
    for (int b = 0; b < B; b++)
        for (int t = 0; t < c->len[b]; t++)
            for (int k = 0; k < I; k++) D->data[((int64_t)b * N + t) * I + k] = M->data[((int64_t)b * T + t) * I + k];
    return ag_mul(X, D);
}

/* The same network spelled out one timestep at a time with core ops:
 * slicing by selection matrices, freezing by {0,1} row masks. */
static ag_tensor *lstm_composed(lstm_case *c) {
    int B = c->B, N = c->N, H = c->H, T = 0;
    for (int b = 0; b < B; b++) T = c->len[b] > T ? c->len[b] : T;
    ag_rng rng;
    ag_rng_seed(&rng, c->drop_seed);
    ag_tensor *X = c->x;
    for (int l = 0; l < c->L; l++) {
        const ag_lstm_layer *p = &c->layers[l];
        int I = X->shape[2];
        if (l > 0) X = composed_dropout(c, X, T, &rng);
        ag_tensor *Xflat = ag_reshape(X, 2, (int[]){B, N * I});
        ag_tensor *h = state_slice(c->h0, c->L, l, B, H), *cs = state_slice(c->c0, c->L, l, B, H);
        ag_tensor *out = zeros(2, (int[]){B, N * H});
        for (int t = 0; t < N; t++) {
            ag_tensor *xt = ag_matmul(Xflat, sel(N * I, I, t * I));
            ag_tensor *a = ag_add(ag_linear(xt, p->w_ih, p->b_ih), ag_linear(h, p->w_hh, p->b_hh));
            ag_tensor *gi = ag_sigmoid(ag_matmul(a, sel(4 * H, H, 0)));
            ag_tensor *gf = ag_sigmoid(ag_matmul(a, sel(4 * H, H, H)));
            ag_tensor *gg = ag_tanh(ag_matmul(a, sel(4 * H, H, 2 * H)));
            ag_tensor *go = ag_sigmoid(ag_matmul(a, sel(4 * H, H, 3 * H)));
            ag_tensor *c_new = ag_add(ag_mul(gf, cs), ag_mul(gi, gg));
            ag_tensor *h_new = ag_mul(go, ag_tanh(c_new));
            ag_tensor *valid = zeros(2, (int[]){B, 1}), *frozen = zeros(2, (int[]){B, 1});
            for (int b = 0; b < B; b++) {
                valid->data[b] = t < c->len[b];
                frozen->data[b] = !(t < c->len[b]);
            }
            cs = ag_add(ag_mul(valid, c_new), ag_mul(frozen, cs));
            h = ag_add(ag_mul(valid, h_new), ag_mul(frozen, h));
            out = ag_add(out, ag_matmul(ag_mul(valid, h_new), place(H, N * H, t * H)));
        }
        X = ag_reshape(out, 3, (int[]){B, N, H});
    }
    return X;
}

/* G gates per unit: the LSTM's 4 (with c0 beside h0), the GRU's 3. */
static void make_rnn(lstm_case *c, ag_rng *r, int G, int B, int N, int I, int H, int L, bool state,
                     const int32_t *len) {
    *c = (lstm_case){.B = B, .N = N, .I = I, .H = H, .L = L, .keep = 1, .drop_seed = 7, .len = len};
    double w = G == 4 ? 0.6 : 0.7;
    c->x = uniform(r, -1, 1, true, 3, (int[]){B, N, I});
    for (int l = 0; l < L; l++) {
        c->layers[l].w_ih = uniform(r, -w, w, true, 2, (int[]){l ? H : I, G * H});
        c->layers[l].w_hh = uniform(r, -w, w, true, 2, (int[]){H, G * H});
        c->layers[l].b_ih = uniform(r, -0.5, 0.5, true, 1, (int[]){G * H});
        c->layers[l].b_hh = uniform(r, -0.5, 0.5, true, 1, (int[]){G * H});
    }
    if (state) {
        c->h0 = uniform(r, -1, 1, true, 3, (int[]){L, B, H});
        if (G == 4) c->c0 = uniform(r, -1, 1, true, 3, (int[]){L, B, H});
    }
}
static void make_lstm(lstm_case *c, ag_rng *r, int B, int N, int I, int H, int L, bool state, const int32_t *len) {
    make_rnn(c, r, 4, B, N, I, H, L, state, len);
}

static int lstm_inputs(lstm_case *c, ag_tensor **ts) {
    int n = 0;
    ts[n++] = c->x;
    for (int l = 0; l < c->L; l++) {
        ts[n++] = c->layers[l].w_ih;
        ts[n++] = c->layers[l].w_hh;
        ts[n++] = c->layers[l].b_ih;
        ts[n++] = c->layers[l].b_hh;
    }
    if (c->h0) ts[n++] = c->h0;
    if (c->c0) ts[n++] = c->c0;
    return n;
}

/* The op against its composition (cell: "lstm" or "gru"): values to
 * 1e-12, padded outputs exactly 0, every input's gradient to 1e-12. */
static void vs_composition(const char *cell, const char *what, lstm_case *c, ag_tensor *(*op)(lstm_case *),
                           ag_tensor *(*composed)(lstm_case *)) {
    ag_rng r;
    ag_rng_seed(&r, 99);
    ag_tensor *ts[16];
    int n = lstm_inputs(c, ts);
    ag_tensor *a = op(c);
    ag_real *seed = random_seed(&r, a->size);
    ag_real **ga = grads_of(a, seed, ts, n);
    ag_tensor *b = composed(c);
    CHECK(ag_same_shape(a, b), "%s %s: shapes differ", cell, what);
    double d = max_abs_diff(a->data, b->data, a->size);
    CHECK(d < 1e-12, "%s %s: values differ by %.3g", cell, what, d);
    for (int bb = 0; bb < c->B; bb++) /* padded outputs are exactly 0 */
        for (int t = c->len[bb]; t < c->N; t++)
            for (int j = 0; j < c->H; j++)
                CHECK(a->data[((int64_t)bb * c->N + t) * c->H + j] == 0, "%s %s: padded output", cell, what);
    ag_real **gb = grads_of(b, seed, ts, n);
    compare_grads(what, ga, gb, ts, n, 1e-12, true);
    printf("  %s vs composition: %-34s values differ by %.1e\n", cell, what, d);
    free_grads(ga, n);
    free_grads(gb, n);
    free(seed);
    ag_step_end();
}
static void lstm_vs_composition(const char *what, lstm_case *c) { vs_composition("lstm", what, c, lstm_op, lstm_composed); }

static void test_lstm_composition(void) {
    ag_rng r;
    ag_rng_seed(&r, 1);
    lstm_case c;
    make_lstm(&c, &r, 2, 5, 3, 4, 2, true, len_53);
    lstm_vs_composition("2 layers, len {5,3}, h0/c0", &c);
    make_lstm(&c, &r, 2, 5, 3, 4, 2, false, len_53);
    lstm_vs_composition("2 layers, len {5,3}, zero state", &c);
    make_lstm(&c, &r, 3, 4, 2, 3, 3, true, (const int32_t[]){4, 1, 2});
    c.keep = 0.6;
    c.training = true;
    lstm_vs_composition("3 layers, dropout 0.6 (training)", &c);
    make_lstm(&c, &r, 2, 1, 3, 2, 2, true, (const int32_t[]){1, 1});
    lstm_vs_composition("2 layers, N=1", &c);
}

/* Dropout off in evaluation, and keep = 1 and keep = 0 (unset) mean none. */
static void test_lstm_dropout_modes(void) {
    ag_rng r;
    ag_rng_seed(&r, 2);
    lstm_case c;
    make_lstm(&c, &r, 2, 5, 3, 4, 2, false, len_53);
    ag_tensor *plain = lstm_op(&c);
    c.keep = 0.5;
    ag_tensor *eval = lstm_op(&c);
    c.training = true;
    ag_tensor *train = lstm_op(&c);
    CHECK(max_abs_diff(plain->data, eval->data, plain->size) == 0, "eval mode applies no dropout");
    CHECK(max_abs_diff(plain->data, train->data, plain->size) > 1e-3, "training mode applies dropout");
    c.keep = 1;
    ag_tensor *keep1 = lstm_op(&c);
    CHECK(max_abs_diff(plain->data, keep1->data, plain->size) == 0, "keep 1 is no dropout");
    ag_step_end();
}

/* Gradient check of every parameter, input and initial state of a 2-layer LSTM. */
static ag_tensor *lstm_fn(void *ctx) { return lstm_op(ctx); }

static void test_lstm_gradcheck(const char *what, int N, const int32_t *len) {
    ag_rng r;
    ag_rng_seed(&r, 3);
    lstm_case c;
    make_lstm(&c, &r, 2, N, 3, 3, 2, true, len);
    ag_tensor *ts[16];
    int n = lstm_inputs(&c, ts);
    ag_gradcheck_result res = ag_gradcheck(lstm_fn, &c, ts, n, NULL);
    printf("  lstm gradcheck %-40s %4lld checked, max rel err %.2e (%.3g vs %.3g)\n", what, (long long)res.checked,
           res.max_rel_err, res.analytic, res.numeric);
    CHECK(res.ok, "%s: input %d element %lld: analytic %.12g numeric %.12g", what, res.worst_input,
          (long long)res.worst_index, res.analytic, res.numeric);
    ag_step_end();
}

/* A training loop on the LSTM allocates nothing once the arena has grown. */
static void test_lstm_steady_state(void) {
    ag_params ps = {0};
    int B = 4, N = 6, I = 5, H = 8;
    ag_lstm_layer l[2];
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "l%d.w_ih", k);
        l[k].w_ih = ag_param(&ps, name, 2, (int[]){k ? H : I, 4 * H});
        snprintf(name, sizeof name, "l%d.w_hh", k);
        l[k].w_hh = ag_param(&ps, name, 2, (int[]){H, 4 * H});
        snprintf(name, sizeof name, "l%d.b_ih", k);
        l[k].b_ih = ag_param(&ps, name, 1, (int[]){4 * H});
        l[k].b_hh = NULL;
    }
    ag_rng r;
    ag_rng_seed(&r, 4);
    for (int i = 0; i < ps.count; i++)
        for (int64_t j = 0; j < ps.items[i]->size; j++) ps.items[i]->data[j] = (ag_real)(ag_rng_uniform(&r) - 0.5);
    int64_t allocs[4];
    for (int step = 0; step < 4; step++) {
        ag_tensor *x = uniform(&r, -1, 1, false, 3, (int[]){B, N, I});
        ag_lstm_opts o = {.len = (const int32_t[]){6, 2, 5, 0}, .keep = 0.7, .training = true, .rng = &r};
        ag_tensor *h = ag_lstm(x, l, 2, &o);
        ag_backward(ag_sum(h));
        ag_step_end();
        allocs[step] = ag_memstats().allocs;
    }
    CHECK(allocs[3] == allocs[2], "steady-state LSTM step allocated %lld times", (long long)(allocs[3] - allocs[2]));
    ag_params_free(&ps);
}

/* ======================================================================== */
/* GRU                                                                       */
/* ======================================================================== */

/* lstm_case's sizes and options; the layers' columns are r, z, n (3H). */
static ag_tensor *gru_op(lstm_case *c) {
    ag_rng rng;
    ag_rng_seed(&rng, c->drop_seed);
    ag_gru_layer ls[3];
    for (int l = 0; l < c->L; l++) ls[l] = (ag_gru_layer){c->layers[l].w_ih, c->layers[l].w_hh, c->layers[l].b_ih, c->layers[l].b_hh};
    ag_gru_opts o = {.len = c->len, .h0 = c->h0, .keep = c->keep, .training = c->training, .rng = &rng};
    return ag_gru(c->x, ls, c->L, &o);
}

/* nn.GRU's equations one timestep at a time with core ops, as lstm_composed:
 * r = s(ax_r + ah_r), z = s(ax_z + ah_z), n = tanh(ax_n + r ah_n),
 * h' = (1 - z) n + z h, with ax = x W_ih + b_ih and ah = h W_hh + b_hh. */
static ag_tensor *gru_composed(lstm_case *c) {
    int B = c->B, N = c->N, H = c->H, T = 0;
    for (int b = 0; b < B; b++) T = c->len[b] > T ? c->len[b] : T;
    ag_rng rng;
    ag_rng_seed(&rng, c->drop_seed);
    ag_tensor *X = c->x;
    for (int l = 0; l < c->L; l++) {
        const ag_lstm_layer *p = &c->layers[l];
        int I = X->shape[2];
        if (l > 0) X = composed_dropout(c, X, T, &rng);
        ag_tensor *Xflat = ag_reshape(X, 2, (int[]){B, N * I});
        ag_tensor *h = state_slice(c->h0, c->L, l, B, H);
        ag_tensor *out = zeros(2, (int[]){B, N * H});
        for (int t = 0; t < N; t++) {
            ag_tensor *xt = ag_matmul(Xflat, sel(N * I, I, t * I));
            ag_tensor *ax = ag_linear(xt, p->w_ih, p->b_ih), *ah = ag_linear(h, p->w_hh, p->b_hh);
            ag_tensor *r = ag_sigmoid(ag_add(ag_matmul(ax, sel(3 * H, H, 0)), ag_matmul(ah, sel(3 * H, H, 0))));
            ag_tensor *z = ag_sigmoid(ag_add(ag_matmul(ax, sel(3 * H, H, H)), ag_matmul(ah, sel(3 * H, H, H))));
            ag_tensor *n = ag_tanh(ag_add(ag_matmul(ax, sel(3 * H, H, 2 * H)), ag_mul(r, ag_matmul(ah, sel(3 * H, H, 2 * H)))));
            ag_tensor *h_new = ag_add(ag_mul(ag_add_scalar(ag_neg(z), 1), n), ag_mul(z, h));
            ag_tensor *valid = zeros(2, (int[]){B, 1}), *frozen = zeros(2, (int[]){B, 1});
            for (int b = 0; b < B; b++) {
                valid->data[b] = t < c->len[b];
                frozen->data[b] = !(t < c->len[b]);
            }
            h = ag_add(ag_mul(valid, h_new), ag_mul(frozen, h));
            out = ag_add(out, ag_matmul(ag_mul(valid, h_new), place(H, N * H, t * H)));
        }
        X = ag_reshape(out, 3, (int[]){B, N, H});
    }
    return X;
}

static void make_gru(lstm_case *c, ag_rng *r, int B, int N, int I, int H, int L, bool state, const int32_t *len) {
    make_rnn(c, r, 3, B, N, I, H, L, state, len);
}

static void gru_vs_composition(const char *what, lstm_case *c) { vs_composition("gru", what, c, gru_op, gru_composed); }

static void test_gru_composition(void) {
    ag_rng r;
    ag_rng_seed(&r, 21);
    lstm_case c;
    make_gru(&c, &r, 2, 5, 3, 4, 2, true, len_53);
    gru_vs_composition("2 layers, len {5,3}, h0", &c);
    make_gru(&c, &r, 2, 5, 3, 4, 2, false, len_53);
    gru_vs_composition("2 layers, len {5,3}, zero state", &c);
    make_gru(&c, &r, 3, 4, 2, 3, 3, true, (const int32_t[]){4, 1, 2});
    c.keep = 0.6;
    c.training = true;
    gru_vs_composition("3 layers, dropout 0.6 (training)", &c);
    make_gru(&c, &r, 3, 1, 3, 2, 2, true, (const int32_t[]){1, 0, 1});
    gru_vs_composition("2 layers, N=1, an empty example", &c);
}

/* h_n is the output at each example's last step (h0 for an empty one), and
 * carrying it into the next chunk reproduces the whole run. */
static void test_gru_final_states(void) {
    enum { B = 3, N = 6, I = 4, H = 5, L = 2 };
    ag_rng r;
    ag_rng_seed(&r, 23);
    ag_gru_layer ls[L];
    for (int l = 0; l < L; l++)
        ls[l] = (ag_gru_layer){uniform(&r, -0.5, 0.5, true, 2, (int[]){l ? H : I, 3 * H}),
                               uniform(&r, -0.5, 0.5, true, 2, (int[]){H, 3 * H}), NULL,
                               uniform(&r, -0.5, 0.5, true, 1, (int[]){3 * H})};
    ag_tensor *x = uniform(&r, -1, 1, false, 3, (int[]){B, N, I});
    ag_tensor *h0 = uniform(&r, -1, 1, false, 3, (int[]){L, B, H});
    const int32_t len[B] = {6, 2, 0};
    ag_tensor *hn;
    ag_tensor *y = ag_gru(x, ls, L, &(ag_gru_opts){.len = len, .h0 = h0, .h_n = &hn});
    double d = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            ag_real want = len[b] ? y->data[((int64_t)b * N + len[b] - 1) * H + j] : h0->data[((L - 1) * B + b) * H + j];
            d = fmax(d, fabs((double)(hn->data[((L - 1) * B + b) * H + j] - want)));
        }
    CHECK(d == 0, "gru: h_n differs from the last output (or h0) by %g", d);
    ag_tensor *whole = ag_gru(x, ls, L, &(ag_gru_opts){.h0 = h0});
    ag_tensor *y1 = ag_gru(ag_slice(x, 1, 0, 3), ls, L, &(ag_gru_opts){.h0 = h0, .h_n = &hn});
    ag_tensor *y2 = ag_gru(ag_slice(x, 1, 3, 6), ls, L, &(ag_gru_opts){.h0 = hn});
    double dc = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++)
            for (int j = 0; j < H; j++) {
                ag_real got = (t < 3 ? y1 : y2)->data[((int64_t)b * 3 + t % 3) * H + j];
                dc = fmax(dc, fabs((double)(got - whole->data[((int64_t)b * N + t) * H + j])));
            }
    CHECK(dc < 1e-12, "gru: chunked run with carried state differs from the whole run by %g", dc);
    printf("  gru final states: h_n vs last output %.1e, carried state vs whole run %.1e\n", d, dc);
    ag_step_end();
}

/* A GRU training loop allocates nothing once the arena has grown. */
static void test_gru_steady_state(void) {
    ag_params ps = {0};
    ag_rng r;
    ag_rng_seed(&r, 24);
    int B = 4, N = 6, I = 5, H = 8;
    ag_gru_layer l[2] = {ag_param_gru(&ps, "g0", I, H, 0.3, &r), ag_param_gru(&ps, "g1", H, H, 0.3, &r)};
    int64_t allocs[4];
    for (int step = 0; step < 4; step++) {
        ag_tensor *x = uniform(&r, -1, 1, false, 3, (int[]){B, N, I});
        ag_tensor *hn;
        ag_gru_opts o = {.len = (const int32_t[]){6, 2, 5, 0}, .keep = 0.7, .training = true, .rng = &r, .h_n = &hn};
        ag_tensor *h = ag_gru(x, l, 2, &o);
        ag_backward(ag_add(ag_sum(h), ag_sum(hn)));
        ag_step_end();
        allocs[step] = ag_memstats().allocs;
    }
    CHECK(allocs[3] == allocs[2], "steady-state GRU step allocated %lld times", (long long)(allocs[3] - allocs[2]));
    ag_params_free(&ps);
}

/* ======================================================================== */
/* MTSA attention                                                            */
/* ======================================================================== */

static ag_tensor *dir_mask(int N, bool past) {
    ag_tensor *m = zeros(2, (int[]){N, N});
    for (int q = 0; q < N; q++)
        for (int k = 0; k < N; k++) m->data[q * N + k] = past ? k < q : k > q;
    return m;
}

static bool mtsa_allowed(const ag_tensor *mask, const int32_t *len, int b, int q, int k) {
    int N = mask->shape[0];
    return mask->data[q * N + k] != 0 && q < len[b] && k < len[b];
}

/* The reference identity, literally: a log-domain softmax over k per (q, l). */
static void mtsa_naive(const ag_tensor *R, const ag_tensor *S, const ag_tensor *V, const ag_tensor *mask,
                       const int32_t *len, ag_mtsa_score score, double *H) {
    int B = R->shape[0], N = R->shape[1], dh = S->shape[2];
    for (int b = 0; b < B; b++)
        for (int q = 0; q < N; q++)
            for (int l = 0; l < dh; l++) {
                double mx = -INFINITY, z = 0, acc = 0;
                double logit[64];
                for (int k = 0; k < N; k++) {
                    double rr = R->data[(b * N + q) * N + k];
                    double st = score == AG_MTSA_IDENTITY ? rr : -log1p(exp(-rr));
                    logit[k] = mtsa_allowed(mask, len, b, q, k) ? st + S->data[(b * N + k) * dh + l] : -INFINITY;
                    mx = fmax(mx, logit[k]);
                }
                for (int k = 0; k < N && mx > -INFINITY; k++) {
                    double e = exp(logit[k] - mx);
                    z += e;
                    acc += e * V->data[(b * N + k) * dh + l];
                }
                H[(b * N + q) * dh + l] = mx > -INFINITY ? acc / z : 0;
            }
}

/* The identity composed from core ops on the [B,N,N,dh] tensor: differentiable,
 * so it checks the op's gradients too. */
static ag_tensor *mtsa_composed(ag_tensor *R, ag_tensor *S, ag_tensor *V, const ag_tensor *mask, const int32_t *len,
                                ag_mtsa_score score) {
    int B = R->shape[0], N = R->shape[1], dh = S->shape[2];
    ag_tensor *M = zeros(4, (int[]){B, N, N, 1}), *fix = zeros(4, (int[]){B, N, 1, 1});
    for (int b = 0; b < B; b++)
        for (int q = 0; q < N; q++) {
            bool any = false;
            for (int k = 0; k < N; k++) {
                bool a = mtsa_allowed(mask, len, b, q, k);
                M->data[(b * N + q) * N + k] = a;
                any |= a;
            }
            fix->data[b * N + q] = !any; /* a fully masked row: 0 / 1 */
        }
    ag_tensor *st = score == AG_MTSA_IDENTITY ? R : ag_log_sigmoid(R);
    ag_tensor *x = ag_add(ag_reshape(st, 4, (int[]){B, N, N, 1}), ag_reshape(S, 4, (int[]){B, 1, N, dh}));
    ag_tensor *e = ag_mul(ag_exp(ag_sub(x, ag_max_axis(x, 2, true))), M);
    ag_tensor *p = ag_div(e, ag_add(ag_sum_axis(e, 2, true), fix));
    return ag_sum_axis(ag_mul(p, ag_reshape(V, 4, (int[]){B, 1, N, dh})), 2, false);
}

static void mtsa_check(const char *what, int B, int N, int dh, double rs, double ss, const int32_t *len, bool past,
                       ag_mtsa_score score, bool all_masked) {
    ag_rng r;
    ag_rng_seed(&r, 5);
    ag_tensor *R = uniform(&r, -rs, rs, true, 3, (int[]){B, N, N});
    ag_tensor *S = uniform(&r, -ss, ss, true, 3, (int[]){B, N, dh});
    ag_tensor *V = uniform(&r, -1, 1, true, 3, (int[]){B, N, dh});
    ag_tensor *mask = dir_mask(N, past), *ts[3] = {R, S, V};
    ag_tensor *H = ag_mtsa_attention(R, S, V, mask, len, score);
    double *ref = malloc((size_t)H->size * sizeof *ref);
    mtsa_naive(R, S, V, mask, len, score, ref);
    double d = 0;
    for (int64_t i = 0; i < H->size; i++) d = fmax(d, fabs(H->data[i] - ref[i]));
    CHECK(d < 1e-12, "%s: H differs from the reference identity by %.3g", what, d);
    for (int b = 0; b < B; b++) /* first query under PAST and padded queries: exactly 0 */
        for (int q = 0; q < N; q++)
            if (q >= len[b] || (past && q == 0) || (!past && q == len[b] - 1))
                for (int l = 0; l < dh; l++) CHECK(H->data[(b * N + q) * dh + l] == 0, "%s: masked row %d,%d", what, b, q);
    ag_real *seed = random_seed(&r, H->size);
    ag_real **ga = grads_of(H, seed, ts, 3);
    ag_tensor *C = mtsa_composed(R, S, V, mask, len, score);
    double dc = max_abs_diff(H->data, C->data, H->size);
    CHECK(dc < 1e-12, "%s: composed reference differs by %.3g", what, dc);
    ag_real **gb = grads_of(C, seed, ts, 3);
    compare_grads(what, ga, gb, ts, 3, 1e-10, !all_masked);
    for (int b = 0; b < B; b++) /* no gradient reaches R of disallowed pairs */
        for (int q = 0; q < N; q++)
            for (int k = 0; k < N; k++)
                if (!mtsa_allowed(mask, len, b, q, k)) CHECK(ga[0][(b * N + q) * N + k] == 0, "%s: dR at masked %d,%d,%d", what, b, q, k);
    printf("  mtsa vs identity: %-36s values %.1e, composition %.1e\n", what, d, dc);
    free_grads(ga, 3);
    free_grads(gb, 3);
    free(ref);
    free(seed);
    ag_step_end();
}

static void test_mtsa(void) {
    mtsa_check("past, len {5,3}", 2, 5, 4, 2, 1, len_53, true, AG_MTSA_LOG_SIGMOID, false);
    mtsa_check("future, len {5,3}", 2, 5, 4, 2, 1, len_53, false, AG_MTSA_LOG_SIGMOID, false);
    mtsa_check("past, identity", 2, 5, 4, 2, 1, len_53, true, AG_MTSA_IDENTITY, false);
    mtsa_check("past, large logits", 2, 6, 3, 30, 20, (const int32_t[]){6, 4}, true, AG_MTSA_LOG_SIGMOID, false);
    mtsa_check("future, identity, large logits", 2, 6, 3, 30, 20, (const int32_t[]){6, 4}, false, AG_MTSA_IDENTITY, false);
    mtsa_check("past, N=1 (all masked)", 2, 1, 3, 2, 1, (const int32_t[]){1, 0}, true, AG_MTSA_LOG_SIGMOID, true);
}

/* Logits far beyond exp's range stay finite (the stable form), for both scores:
 * row 0 drops key 1 (R = -2000), rows 1 and 2 weigh all keys equally. */
static void test_mtsa_overflow(void) {
    for (int sc = 0; sc < 2; sc++) {
        ag_tensor *R = ag_tensor_fill(2000, 3, (int[]){1, 3, 3});
        R->data[1] = -2000; /* q = 0, k = 1 */
        ag_tensor *S = ag_tensor_fill(900, 3, (int[]){1, 3, 2}), *V = ag_tensor_fill(1, 3, (int[]){1, 3, 2});
        V->data[2] = 3; /* k = 1, l = 0 */
        ag_tensor *H = ag_mtsa_attention(R, S, V, NULL, NULL, sc ? AG_MTSA_IDENTITY : AG_MTSA_LOG_SIGMOID);
        CHECK_NEAR(H->data[0], 1, 1e-12, 0);
        CHECK_NEAR(H->data[1], 1, 1e-12, 0);
        CHECK_NEAR(H->data[2], 5.0 / 3, 1e-12, 0);
        CHECK_NEAR(H->data[3], 1, 1e-12, 0);
        CHECK_NEAR(H->data[4], 5.0 / 3, 1e-12, 0);
    }
    ag_step_end();
}

/* A batch of width 0 (N = 0) with a mask [0,0]: empty outputs, no
 * gradient, no division by the mask's N N (it was a SIGFPE). */
static void test_mtsa_empty(void) {
    ag_tensor *R = ag_tensor_new(3, (int[]){2, 0, 0}), *S = ag_tensor_new(3, (int[]){2, 0, 3});
    ag_tensor *V = ag_tensor_new(3, (int[]){2, 0, 3}), *mask = ag_tensor_new(2, (int[]){0, 0});
    R->requires_grad = S->requires_grad = V->requires_grad = true;
    ag_tensor *H = ag_mtsa_attention(R, S, V, mask, (const int32_t[]){0, 0}, AG_MTSA_LOG_SIGMOID);
    CHECK(H->ndim == 3 && H->shape[0] == 2 && H->shape[1] == 0 && H->shape[2] == 3 && H->size == 0);
    ag_backward(ag_sum(H));
    ag_step_end();
}

/* ======================================================================== */
/* Gaussian scoring                                                          */
/* ======================================================================== */

static void test_gaussian_values(void) {
    ag_rng r;
    ag_rng_seed(&r, 6);
    int B = 3, N = 6, H = 4;
    const int32_t len[] = {6, 4, 0};
    ag_tensor *h = uniform(&r, -1, 1, false, 3, (int[]){B, N, H});
    ag_tensor *mu = uniform(&r, 0, 1, false, 2, (int[]){B, N});
    ag_tensor *sg = uniform(&r, 0.1, 0.6, false, 2, (int[]){B, N});
    for (int strict = 0; strict < 2; strict++) {
        ag_tensor *w = NULL;
        ag_tensor *c = ag_gaussian_context(h, mu, sg, len, strict, 1e-3, &w);
        CHECK(w && w->ndim == 3 && w->shape[0] == B && w->shape[1] == N && w->shape[2] == N, "weights [B,N,N]");
        double dc = 0, dw = 0;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < N; t++) {
                double g[16] = {0}, sum = 0;
                int end = t < len[b] ? (strict ? t : t + 1) : 0;
                for (int i = 0; i < end; i++) {
                    double z = (double)i / len[b] - mu->data[b * N + t], s = sg->data[b * N + t];
                    g[i] = exp(-z * z / (2 * s * s + 1e-3));
                    sum += g[i];
                }
                for (int i = 0; i < N; i++) {
                    g[i] /= fmax(sum, 1e-12);
                    dw = fmax(dw, fabs(g[i] - w->data[(b * N + t) * N + i]));
                }
                for (int j = 0; j < H; j++) {
                    double acc = 0;
                    for (int i = 0; i < end; i++) acc += g[i] * h->data[(b * N + i) * H + j];
                    dc = fmax(dc, fabs(acc - c->data[(b * N + t) * H + j]));
                }
            }
        CHECK(dc < 1e-14 && dw < 1e-15, "gaussian (strict %d) vs naive: context %.3g, weights %.3g", strict, dc, dw);
        printf("  gaussian vs naive (strict %d): context %.1e, weights %.1e\n", strict, dc, dw);
    }
    ag_step_end();
}

/* mu by a per-step composition with ag_maximum(a, floor): the recurrence op
 * must agree on values and gradients, ties included. */
static ag_tensor *mu_composed(ag_tensor *m, const int32_t *len) {
    int B = m->shape[0], N = m->shape[1];
    ag_tensor *mflat = ag_reshape(m, 2, (int[]){B, N * 3});
    ag_tensor *prev = zeros(2, (int[]){B, 1}), *out = zeros(2, (int[]){B, N});
    for (int t = 0; t < N; t++) {
        ag_tensor *inv = zeros(2, (int[]){B, 1}), *next = zeros(2, (int[]){B, 1});
        ag_tensor *floor_t = zeros(2, (int[]){B, 1}), *valid = zeros(2, (int[]){B, 1});
        for (int b = 0; b < B; b++) {
            inv->data[b] = (ag_real)1 / (ag_real)len[b];
            next->data[b] = (ag_real)(t + 1) / (ag_real)len[b];
            floor_t->data[b] = (ag_real)t / (ag_real)len[b];
            valid->data[b] = t < len[b];
        }
        ag_tensor *m0 = ag_matmul(mflat, sel(N * 3, 1, t * 3));
        ag_tensor *m1 = ag_matmul(mflat, sel(N * 3, 1, t * 3 + 1));
        ag_tensor *m2 = ag_matmul(mflat, sel(N * 3, 1, t * 3 + 2));
        ag_tensor *a = ag_add(ag_add(ag_mul(m0, prev), ag_mul(m1, inv)), ag_mul(m2, next));
        prev = ag_maximum(a, floor_t);
        out = ag_add(out, ag_matmul(ag_mul(prev, valid), place(1, N, t)));
    }
    return out;
}

static void test_gaussian_mu(void) {
    ag_rng r;
    ag_rng_seed(&r, 8);
    ag_tensor *m = uniform(&r, -1, 1.5, true, 3, (int[]){2, 5, 3});
    /* example 1, t = 0: m1 = m2 = 0 makes a = 0 = floor exactly: a tie */
    m->data[15 + 1] = m->data[15 + 2] = 0;
    ag_tensor *a = ag_gaussian_mu(m, len_53);
    ag_real *seed = random_seed(&r, a->size);
    ag_real **ga = grads_of(a, seed, &m, 1);
    ag_tensor *b = mu_composed(m, len_53);
    CHECK(max_abs_diff(a->data, b->data, a->size) < 1e-15, "mu recurrence vs ag_maximum composition: values");
    ag_real **gb = grads_of(b, seed, &m, 1);
    CHECK(max_abs_diff(ga[0], gb[0], m->size) < 1e-14, "mu recurrence vs ag_maximum composition: gradients");
    CHECK(ga[0][15] == 0 && ga[0][16] == 0 && ga[0][17] == 0, "a tie sends no gradient to m");
    int above = 0, below = 0;
    for (int b2 = 0; b2 < 2; b2++)
        for (int t = 0; t < len_53[b2]; t++) {
            bool on_floor = a->data[b2 * 5 + t] == (ag_real)t / (ag_real)len_53[b2];
            above += !on_floor;
            below += on_floor;
        }
    CHECK(above > 0 && below > 1, "the data exercises both branches (%d above, %d on the floor)", above, below);
    for (int t = 3; t < 5; t++) CHECK(a->data[5 + t] == 0, "mu is 0 at padded t");
    free_grads(ga, 1);
    free_grads(gb, 1);
    free(seed);
    ag_step_end();

    /* ag_maximum itself: ties send the gradient to the second argument. */
    ag_tensor *x = ag_tensor_from((ag_real[]){0.5, 0.3, 0.7}, 1, (int[]){3});
    ag_tensor *y = ag_tensor_from((ag_real[]){0.2, 0.3, 0.9}, 1, (int[]){3});
    x->requires_grad = y->requires_grad = true;
    ag_backward(ag_sum(ag_maximum(x, y)));
    CHECK(x->grad[0] == 1 && x->grad[1] == 0 && x->grad[2] == 0, "maximum: gradient to a where a > b only");
    CHECK(y->grad[0] == 0 && y->grad[1] == 1 && y->grad[2] == 1, "maximum: a tie goes to b");
    ag_step_end();
}

/* ======================================================================== */
/* Layer norm                                                                */
/* ======================================================================== */

static void test_layernorm_values(void) {
    ag_rng r;
    ag_rng_seed(&r, 9);
    int rows = 5, D = 7;
    ag_tensor *x = uniform(&r, -3, 3, false, 2, (int[]){rows, D});
    ag_tensor *g = uniform(&r, 0.5, 1.5, false, 1, (int[]){D}), *b = uniform(&r, -1, 1, false, 1, (int[]){D});
    ag_tensor *y = ag_layernorm(x, g, b, 1e-6);
    double d = 0;
    for (int i = 0; i < rows; i++) {
        double mean = 0, var = 0;
        for (int j = 0; j < D; j++) mean += x->data[i * D + j] / D;
        for (int j = 0; j < D; j++) var += (x->data[i * D + j] - mean) * (x->data[i * D + j] - mean) / D;
        for (int j = 0; j < D; j++) {
            double want = (x->data[i * D + j] - mean) / sqrt(var + 1e-6) * g->data[j] + b->data[j];
            d = fmax(d, fabs(want - y->data[i * D + j]));
        }
    }
    CHECK(d < 1e-14, "layernorm vs naive: %.3g", d);
    ag_step_end();
}

static void test_rmsnorm_values(void) {
    ag_rng r;
    ag_rng_seed(&r, 10);
    int rows = 5, D = 7;
    ag_tensor *x = uniform(&r, -3, 3, false, 2, (int[]){rows, D});
    for (int j = 0; j < D; j++) x->data[j] += 20; /* row 0 far from 0: RMS norm does not centre it */
    ag_tensor *g = uniform(&r, 0.5, 1.5, false, 1, (int[]){D});
    ag_tensor *y = ag_rmsnorm(x, g, 1e-6), *plain = ag_rmsnorm(x, NULL, 0);
    double d = 0, unit = 0;
    for (int i = 0; i < rows; i++) {
        double ms = 0, ms_y = 0;
        for (int j = 0; j < D; j++) ms += x->data[i * D + j] * x->data[i * D + j] / D;
        for (int j = 0; j < D; j++) {
            d = fmax(d, fabs(x->data[i * D + j] / sqrt(ms + 1e-6) * g->data[j] - y->data[i * D + j]));
            ms_y += plain->data[i * D + j] * plain->data[i * D + j] / D;
        }
        unit = fmax(unit, fabs(ms_y - 1));
    }
    CHECK(d < 1e-14, "rmsnorm vs naive: %.3g", d);
    CHECK(unit < 1e-14, "rmsnorm without gain and eps: mean square of a row off 1 by %.3g", unit);
    ag_step_end();
}

/* ======================================================================== */
/* Rotary positions                                                          */
/* ======================================================================== */

static double dot(const ag_real *a, const ag_real *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static void test_rope_values(void) {
    ag_rng r;
    ag_rng_seed(&r, 11);
    enum { B = 2, N = 6, H = 3, DH = 8, D = H * DH };
    ag_tensor *x = uniform(&r, -2, 2, false, 3, (int[]){B, N, D}); /* rows of three heads */
    int pos0 = 4;
    double base = 10000;
    ag_tensor *y = ag_rope(x, DH, pos0, base);
    double d = 0, norms = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++)
            for (int h = 0; h < H; h++) {
                const ag_real *xh = x->data + ((int64_t)(b * N + t) * D + h * DH);
                const ag_real *yh = y->data + ((int64_t)(b * N + t) * D + h * DH);
                for (int i = 0; i < DH / 2; i++) {
                    double a = (pos0 + t) * pow(base, -2.0 * i / DH), c = cos(a), s = sin(a);
                    d = fmax(d, fabs(xh[2 * i] * c - xh[2 * i + 1] * s - yh[2 * i]));
                    d = fmax(d, fabs(xh[2 * i] * s + xh[2 * i + 1] * c - yh[2 * i + 1]));
                }
                norms = fmax(norms, fabs(dot(xh, xh, DH) - dot(yh, yh, DH)));
            }
    CHECK(d < 1e-14, "rope vs the paper's formula: %.3g", d);
    CHECK(norms < 1e-13, "rope changed a head's norm by %.3g", norms);

    /* split heads [B, H, N, DH] give the same rotation as rows of heads */
    ag_tensor *split = ag_rope(ag_split_heads(x, H), DH, pos0, base);
    ag_tensor *merged = ag_merge_heads(split);
    CHECK(max_abs_diff(merged->data, y->data, y->size) == 0, "rope on split heads differs from rope on rows");

    /* q_m . k_n depends on m - n alone: every position moved by 9 (pos0)
     * gives the same scores, and the scores differ from unrotated ones */
    ag_tensor *q = uniform(&r, -1, 1, false, 2, (int[]){N, DH}), *k = uniform(&r, -1, 1, false, 2, (int[]){N, DH});
    ag_tensor *s0 = ag_matmul_t(ag_rope(q, DH, 0, base), false, ag_rope(k, DH, 0, base), true);
    ag_tensor *s9 = ag_matmul_t(ag_rope(q, DH, 9, base), false, ag_rope(k, DH, 9, base), true);
    ag_tensor *plain = ag_matmul_t(q, false, k, true);
    CHECK(max_abs_diff(s0->data, s9->data, s0->size) < 1e-13, "rope scores moved with the offset: %.3g",
          max_abs_diff(s0->data, s9->data, s0->size));
    CHECK(max_abs_diff(s0->data, plain->data, s0->size) > 1e-3, "rope left the scores as they were");
    for (int m = 0; m < N; m++) /* the diagonal: m - n = 0, the unrotated score */
        CHECK(fabs(s0->data[m * N + m] - plain->data[m * N + m]) < 1e-14, "rope score q_%d . k_%d is not q . k", m, m);

    /* pos0 is an offset: rows 3.. of a rotation from 0 are a rotation from 3 */
    ag_tensor *tail = ag_rope(ag_slice(x, 1, 3, N), DH, pos0 + 3, base);
    ag_tensor *whole_tail = ag_slice(y, 1, 3, N);
    CHECK(max_abs_diff(tail->data, whole_tail->data, tail->size) == 0, "rope's pos0 is not an offset");
    ag_step_end();
}

/* ======================================================================== */
/* Dual-axial module (docs/models.md, dual-axial), composed from core ops    */
/* ======================================================================== */

typedef struct {
    ag_tensor *x, *wq, *wk, *wv, *fq, *fk, *fv; /* text W [d,d], feature W' [L,L] */
    const int32_t *len;
    bool feature; /* which axis the gradcheck looks at */
} dual_case;

/* Text-axial: alpha = softplus(Q K^T) ⊙ zeta ⊙ valid(k) as a constant
 * [B,L,L] factor; w = alpha V; Ht = softplus(w) ⊙ x / len at valid q. */
static ag_tensor *text_axial(dual_case *c) {
    int B = c->x->shape[0], L = c->x->shape[1];
    ag_tensor *zv = zeros(3, (int[]){B, L, L}), *qs = zeros(3, (int[]){B, L, 1});
    for (int b = 0; b < B; b++)
        for (int q = 0; q < L; q++) {
            qs->data[b * L + q] = q < c->len[b] ? (ag_real)1 / (ag_real)c->len[b] : 0;
            for (int k = 0; k < L; k++)
                zv->data[(b * L + q) * L + k] = k < c->len[b] ? 1 / log(exp(1.0) * abs(q - k) + exp(1.0)) : 0;
        }
    ag_tensor *Q = ag_matmul(c->x, c->wq), *K = ag_matmul(c->x, c->wk), *V = ag_matmul(c->x, c->wv);
    ag_tensor *alpha = ag_mul(ag_softplus(ag_matmul_t(Q, false, K, true)), zv);
    return ag_mul(ag_mul(ag_softplus(ag_matmul(alpha, V)), c->x), qs);
}

/* Feature-axial on Y = X^T without a transpose op: Q' = X^T W' is
 * matmul_t(X, T, W'), and Hf = (softplus(A' V') ⊙ Y)^T = softplus(V'^T A'^T) ⊙ X. */
static ag_tensor *feature_axial(dual_case *c) {
    ag_tensor *Q = ag_matmul_t(c->x, true, c->fq, false), *K = ag_matmul_t(c->x, true, c->fk, false);
    ag_tensor *V = ag_matmul_t(c->x, true, c->fv, false); /* [B,d,L] */
    ag_tensor *A = ag_softplus(ag_matmul_t(Q, false, K, true)); /* [B,d,d] */
    return ag_mul(ag_softplus(ag_matmul_t(V, true, A, true)), c->x);
}

static ag_tensor *dual_fn(void *ctx) {
    dual_case *c = ctx;
    return c->feature ? feature_axial(c) : text_axial(c);
}

static double softplus_d(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* docs/models.md's dual-axial module written out index by index. */
static void dual_naive(const dual_case *c, double *ht, double *hf) {
    int B = c->x->shape[0], L = c->x->shape[1], d = c->x->shape[2];
    const ag_real *X = c->x->data;
    for (int b = 0; b < B; b++) {
        const ag_real *x = X + b * L * d;
        double Q[8][8], K[8][8], V[8][8], Qf[8][8], Kf[8][8], Vf[8][8];
        for (int t = 0; t < L; t++)
            for (int j = 0; j < d; j++) {
                Q[t][j] = K[t][j] = V[t][j] = 0;
                for (int i = 0; i < d; i++) {
                    Q[t][j] += x[t * d + i] * c->wq->data[i * d + j];
                    K[t][j] += x[t * d + i] * c->wk->data[i * d + j];
                    V[t][j] += x[t * d + i] * c->wv->data[i * d + j];
                }
            }
        for (int a = 0; a < d; a++) /* Y[a, t] = x[t, a] */
            for (int j = 0; j < L; j++) {
                Qf[a][j] = Kf[a][j] = Vf[a][j] = 0;
                for (int t = 0; t < L; t++) {
                    Qf[a][j] += x[t * d + a] * c->fq->data[t * L + j];
                    Kf[a][j] += x[t * d + a] * c->fk->data[t * L + j];
                    Vf[a][j] += x[t * d + a] * c->fv->data[t * L + j];
                }
            }
        int len = c->len[b];
        for (int q = 0; q < L; q++)
            for (int j = 0; j < d; j++) {
                double w = 0;
                for (int k = 0; k < len; k++) {
                    double s = 0;
                    for (int i = 0; i < d; i++) s += Q[q][i] * K[k][i];
                    w += softplus_d(s) / log(exp(1.0) * abs(q - k) + exp(1.0)) * V[k][j];
                }
                ht[(b * L + q) * d + j] = q < len ? softplus_d(w) * x[q * d + j] / len : 0;
            }
        for (int a = 0; a < d; a++)
            for (int t = 0; t < L; t++) {
                double w = 0;
                for (int bb = 0; bb < d; bb++) {
                    double s = 0;
                    for (int j = 0; j < L; j++) s += Qf[a][j] * Kf[bb][j];
                    w += softplus_d(s) * Vf[bb][t];
                }
                hf[(b * L + t) * d + a] = softplus_d(w) * x[t * d + a]; /* Hf = H'^T */
            }
    }
}

static void test_dual_axial(void) {
    ag_rng r;
    ag_rng_seed(&r, 10);
    int B = 2, L = 5, d = 4;
    dual_case c = {.len = len_53};
    c.x = uniform(&r, -1, 1, true, 3, (int[]){B, L, d});
    for (int b = 0; b < B; b++) /* padded rows of X are 0 (so Y's padded columns are) */
        for (int t = len_53[b]; t < L; t++)
            for (int j = 0; j < d; j++) c.x->data[(b * L + t) * d + j] = 0;
    c.wq = uniform(&r, -0.7, 0.7, true, 2, (int[]){d, d});
    c.wk = uniform(&r, -0.7, 0.7, true, 2, (int[]){d, d});
    c.wv = uniform(&r, -0.7, 0.7, true, 2, (int[]){d, d});
    c.fq = uniform(&r, -0.7, 0.7, true, 2, (int[]){L, L});
    c.fk = uniform(&r, -0.7, 0.7, true, 2, (int[]){L, L});
    c.fv = uniform(&r, -0.7, 0.7, true, 2, (int[]){L, L});
    double ht[64], hf[64];
    dual_naive(&c, ht, hf);
    ag_tensor *t = text_axial(&c), *f = feature_axial(&c);
    double dt = 0, df = 0;
    for (int64_t i = 0; i < t->size; i++) {
        dt = fmax(dt, fabs(t->data[i] - ht[i]));
        df = fmax(df, fabs(f->data[i] - hf[i]));
    }
    CHECK(dt < 1e-13 && df < 1e-13, "dual-axial composition vs docs/models.md: text %.3g, feature %.3g", dt, df);
    ag_tensor *wrt[7] = {c.x, c.wq, c.wk, c.wv, c.fq, c.fk, c.fv};
    for (int feat = 0; feat < 2; feat++) {
        c.feature = feat;
        ag_gradcheck_result res = ag_gradcheck(dual_fn, &c, feat ? (ag_tensor *[]){c.x, c.fq, c.fk, c.fv} : wrt, 4, NULL);
        printf("  dual-axial %-8s vs naive %.1e, gradcheck %3lld checked, max rel err %.2e\n", feat ? "feature" : "text",
               feat ? df : dt, (long long)res.checked, res.max_rel_err);
        CHECK(res.ok, "dual-axial %s: input %d element %lld: analytic %.12g numeric %.12g", feat ? "feature" : "text",
              res.worst_input, (long long)res.worst_index, res.analytic, res.numeric);
    }
    ag_step_end();
}

/* ======================================================================== */
/* Error messages                                                            */
/* ======================================================================== */

static void test_errors(void) {
    ag_fatal_handler old = ag_set_fatal_handler(catch_fatal);
    ag_tensor *x = zeros(3, (int[]){2, 5, 3}), *v4 = zeros(1, (int[]){4});
    EXPECT_FATAL_AT(ag_layernorm(x, v4, NULL, 1e-5), "ag_layernorm", "gamma", "[4]", "[2,5,3]");
    EXPECT_FATAL_AT(ag_layernorm(x, NULL, v4, 1e-5), "ag_layernorm", "beta", "[4]");
    EXPECT_FATAL_AT(ag_rmsnorm(x, v4, 1e-5), "ag_rmsnorm", "gamma", "[4]", "[2,5,3]");
    EXPECT_FATAL_AT(ag_rmsnorm(x, NULL, -1), "ag_rmsnorm", "eps -1");
    ag_tensor *x12 = zeros(3, (int[]){2, 5, 12});
    EXPECT_FATAL_AT(ag_rope(x12, 5, 0, 1e4), "ag_rope", "head_dim 5", "[2,5,12]", "even");
    EXPECT_FATAL_AT(ag_rope(x12, 8, 0, 1e4), "ag_rope", "head_dim 8", "dividing the last axis (12)");
    EXPECT_FATAL_AT(ag_rope(x12, 4, -1, 1e4), "ag_rope", "pos0 -1");
    EXPECT_FATAL_AT(ag_rope(x12, 4, 0, 0), "ag_rope", "base 0");
    EXPECT_FATAL_AT(ag_rope(v4, 4, 0, 1e4), "ag_rope", "[4]", "[..., N, D]");
    EXPECT_FATAL_AT(ag_glu(x, AG_ACT_SILU), "ag_glu", "[2,5,3]", "[..., 2F]");
    EXPECT_FATAL_AT(ag_glu(x12, (ag_act)99), "ag_glu", "activation 99");

    ag_tensor *mu = zeros(2, (int[]){2, 5}), *bad = zeros(2, (int[]){2, 4});
    EXPECT_FATAL_AT(ag_gaussian_context(x, bad, mu, NULL, false, 1e-3, NULL), "ag_gaussian_context", "mu", "[2,4]", "[2,5,3]");
    EXPECT_FATAL_AT(ag_gaussian_context(x, mu, bad, NULL, false, 1e-3, NULL), "ag_gaussian_context", "sigma", "[2,4]");
    EXPECT_FATAL_AT(ag_gaussian_context(mu, mu, mu, NULL, false, 1e-3, NULL), "ag_gaussian_context", "[2,5]", "[B,N,H]");
    EXPECT_FATAL_AT(ag_gaussian_context(x, mu, mu, (const int32_t[]){5, 6}, false, 1e-3, NULL), "ag_gaussian_context",
                 "len[1] = 6");
    EXPECT_FATAL_AT(ag_gaussian_mu(mu, NULL), "ag_gaussian_mu", "[2,5]", "[B,N,3]");
    EXPECT_FATAL_AT(ag_gaussian_mu(x, (const int32_t[]){5, 9}), "ag_gaussian_mu", "len[1] = 9");

    ag_tensor *w_ih = zeros(2, (int[]){3, 8}), *w_hh = zeros(2, (int[]){2, 8}), *wrong = zeros(2, (int[]){4, 8});
    ag_lstm_layer ok = {w_ih, w_hh, NULL, NULL};
    EXPECT_FATAL_AT(ag_lstm(x, &(ag_lstm_layer){wrong, w_hh, NULL, NULL}, 1, NULL), "ag_lstm", "w_ih", "[4,8]", "[2,5,3]");
    EXPECT_FATAL_AT(ag_lstm(x, &(ag_lstm_layer){w_ih, wrong, NULL, NULL}, 1, NULL), "ag_lstm", "w_hh", "[4,8]");
    EXPECT_FATAL_AT(ag_lstm(x, &(ag_lstm_layer){w_ih, w_hh, v4, NULL}, 1, NULL), "ag_lstm", "b_ih", "[4]", "[8]");
    EXPECT_FATAL_AT(ag_lstm(x, (ag_lstm_layer[]){ok, ok}, 2, NULL), "ag_lstm", "layer 1", "w_ih", "[3,8]", "[2,8]");
    EXPECT_FATAL_AT(ag_lstm(x, &ok, 1, &(ag_lstm_opts){.h0 = zeros(3, (int[]){1, 2, 3})}), "ag_lstm", "h0", "[1,2,3]",
                 "[layers=1,B=2,H=2]");
    EXPECT_FATAL_AT(ag_lstm(x, (ag_lstm_layer[]){ok, {zeros(2, (int[]){2, 8}), w_hh, NULL, NULL}}, 2,
                         &(ag_lstm_opts){.keep = 0.5, .training = true}),
                 "ag_lstm", "needs an rng");
    EXPECT_FATAL_AT(ag_lstm(x, &ok, 1, &(ag_lstm_opts){.keep = 1.5}), "ag_lstm", "keep 1.5");
    EXPECT_FATAL_AT(ag_lstm(x, &ok, 1, &(ag_lstm_opts){.len = (const int32_t[]){-1, 2}}), "ag_lstm", "len[0] = -1");
    EXPECT_FATAL_AT(ag_lstm(mu, &ok, 1, NULL), "ag_lstm", "[2,5]", "[B,N,in]");

    /* the GRU's: the same checks, 3H columns (an LSTM's [2,8] w_hh is not one) */
    ag_tensor *g_ih = zeros(2, (int[]){3, 6}), *g_hh = zeros(2, (int[]){2, 6});
    ag_gru_layer gok = {g_ih, g_hh, NULL, NULL};
    EXPECT_FATAL_AT(ag_gru(x, &(ag_gru_layer){w_ih, w_hh, NULL, NULL}, 1, NULL), "ag_gru", "w_hh", "[2,8]", "[H,3H]");
    EXPECT_FATAL_AT(ag_gru(x, &(ag_gru_layer){w_ih, g_hh, NULL, NULL}, 1, NULL), "ag_gru", "w_ih", "[3,8]", "[3,6]");
    EXPECT_FATAL_AT(ag_gru(x, &(ag_gru_layer){g_ih, g_hh, NULL, v4}, 1, NULL), "ag_gru", "b_hh", "[4]", "[6]");
    EXPECT_FATAL_AT(ag_gru(x, (ag_gru_layer[]){gok, gok}, 2, NULL), "ag_gru", "layer 1", "w_ih", "[3,6]", "[2,6]");
    EXPECT_FATAL_AT(ag_gru(x, &gok, 1, &(ag_gru_opts){.h0 = zeros(3, (int[]){2, 2, 2})}), "ag_gru", "h0", "[2,2,2]",
                    "[layers=1,B=2,H=2]");
    EXPECT_FATAL_AT(ag_gru(x, (ag_gru_layer[]){gok, {zeros(2, (int[]){2, 6}), g_hh, NULL, NULL}}, 2,
                           &(ag_gru_opts){.keep = 0.5, .training = true}),
                    "ag_gru", "needs an rng");
    EXPECT_FATAL_AT(ag_gru(x, &gok, 1, &(ag_gru_opts){.len = (const int32_t[]){2, 6}}), "ag_gru", "len[1] = 6");
    EXPECT_FATAL_AT(ag_gru(x, &gok, 0, NULL), "ag_gru", "0 layers");

    ag_tensor *R = zeros(3, (int[]){2, 5, 5}), *S = zeros(3, (int[]){2, 5, 4}), *S3 = zeros(3, (int[]){2, 4, 4});
    EXPECT_FATAL_AT(ag_mtsa_attention(R, S3, S3, NULL, NULL, AG_MTSA_LOG_SIGMOID), "ag_mtsa_attention", "[2,5,5]", "[2,4,4]");
    EXPECT_FATAL_AT(ag_mtsa_attention(R, S, S, zeros(2, (int[]){4, 4}), NULL, AG_MTSA_LOG_SIGMOID), "ag_mtsa_attention",
                 "mask", "[4,4]", "[2,5,5]");
    ag_tensor *additive = zeros(2, (int[]){5, 5});
    additive->data[3] = -INFINITY;
    EXPECT_FATAL_AT(ag_mtsa_attention(R, S, S, additive, NULL, AG_MTSA_LOG_SIGMOID), "ag_mtsa_attention", "mask", "0 or 1");
    ag_tensor *trained = zeros(2, (int[]){5, 5});
    trained->requires_grad = true;
    EXPECT_FATAL_AT(ag_mtsa_attention(R, S, S, trained, NULL, AG_MTSA_LOG_SIGMOID), "ag_mtsa_attention", "requires grad",
                    "constants");
    EXPECT_FATAL_AT(ag_mtsa_attention(R, S, S, NULL, (const int32_t[]){5, 7}, AG_MTSA_IDENTITY), "ag_mtsa_attention",
                 "len[1] = 7");
    EXPECT_FATAL_AT(ag_mtsa_attention(R, S, S, NULL, NULL, (ag_mtsa_score)7), "ag_mtsa_attention", "score");
    ag_set_fatal_handler(old);
    ag_step_end();
}

/* Final states: the top layer's h_n is the output at each example's last
 * step (h0 for an empty one), and carrying h_n/c_n into the next chunk of a
 * sequence reproduces the whole sequence run at once (truncated BPTT). */
static void test_lstm_final_states(void) {
    enum { B = 3, N = 6, I = 4, H = 5, L = 2 };
    ag_rng r;
    ag_rng_seed(&r, 17);
    ag_lstm_layer ls[L];
    for (int l = 0; l < L; l++)
        ls[l] = (ag_lstm_layer){uniform(&r, -0.5, 0.5, true, 2, (int[]){l ? H : I, 4 * H}),
                                uniform(&r, -0.5, 0.5, true, 2, (int[]){H, 4 * H}),
                                uniform(&r, -0.5, 0.5, true, 1, (int[]){4 * H}), NULL};
    ag_tensor *x = uniform(&r, -1, 1, false, 3, (int[]){B, N, I});
    ag_tensor *h0 = uniform(&r, -1, 1, false, 3, (int[]){L, B, H}), *c0 = uniform(&r, -1, 1, false, 3, (int[]){L, B, H});
    const int32_t len[B] = {6, 2, 0};
    ag_tensor *hn, *cn;
    ag_tensor *y = ag_lstm(x, ls, L, &(ag_lstm_opts){.len = len, .h0 = h0, .c0 = c0, .h_n = &hn, .c_n = &cn});
    double d = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < H; j++) {
            ag_real want = len[b] ? y->data[((int64_t)b * N + len[b] - 1) * H + j] : h0->data[((L - 1) * B + b) * H + j];
            d = fmax(d, fabs((double)(hn->data[((L - 1) * B + b) * H + j] - want)));
            if (len[b] == 0) d = fmax(d, fabs((double)(cn->data[(L - 1) * B * H + b * H + j] - c0->data[((L - 1) * B + b) * H + j])));
        }
    CHECK(d == 0, "h_n differs from the last output (or h0) by %g", d);

    /* whole sequence vs two chunks of 3 with the state carried over */
    ag_tensor *whole = ag_lstm(x, ls, L, &(ag_lstm_opts){.h0 = h0, .c0 = c0});
    ag_tensor *x1 = ag_slice(x, 1, 0, 3), *x2 = ag_slice(x, 1, 3, 6);
    ag_tensor *y1 = ag_lstm(x1, ls, L, &(ag_lstm_opts){.h0 = h0, .c0 = c0, .h_n = &hn, .c_n = &cn});
    ag_tensor *y2 = ag_lstm(x2, ls, L, &(ag_lstm_opts){.h0 = hn, .c0 = cn});
    double dc = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++)
            for (int j = 0; j < H; j++) {
                ag_tensor *part = t < 3 ? y1 : y2;
                ag_real got = part->data[((int64_t)b * 3 + t % 3) * H + j];
                dc = fmax(dc, fabs((double)(got - whole->data[((int64_t)b * N + t) * H + j])));
            }
    CHECK(dc < 1e-12, "chunked run with carried state differs from the whole run by %g", dc);
    printf("  lstm final states: h_n vs last output %.1e, carried state vs whole run %.1e\n", d, dc);
    ag_step_end();
}

int main(void) {
    test_lstm_composition();
    test_lstm_final_states();
    test_lstm_dropout_modes();
    test_lstm_gradcheck("2 layers, len {5,3}, h0/c0", 5, len_53);
    test_lstm_gradcheck("2 layers, N=1, h0/c0", 1, (const int32_t[]){1, 1});
    test_lstm_steady_state();
    test_gru_composition();
    test_gru_final_states();
    test_gru_steady_state();
    test_mtsa();
    test_mtsa_overflow();
    test_mtsa_empty();
    test_gaussian_values();
    test_gaussian_mu();
    test_layernorm_values();
    test_rmsnorm_values();
    test_rope_values();
    test_dual_axial();
    test_errors();
    ag_shutdown();
    return check_summary("test_seq");
}
