/* rnn.c - multi-layer LSTMs and GRUs over whole padded sequences, with
 * backward through time.  One LSTM layer, gates i,f,g,o in that column order:
 *
 *     a_t = x_t W_ih + b_ih + h_{t-1} W_hh + b_hh          [B,4H]
 *     i, f, o = sigmoid(a_i, a_f, a_o),  g = tanh(a_g)
 *     c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)
 *
 * One GRU layer, PyTorch's: gates r,z,n, the reset gate applied to the
 * recurrent part of n after its bias (so the two products stay apart):
 *
 *     ax = x_t W_ih + b_ih,  ah = h_{t-1} W_hh + b_hh      [B,3H] each
 *     r = sigmoid(ax_r + ah_r),  z = sigmoid(ax_z + ah_z)
 *     n = tanh(ax_n + r ah_n),   h_t = n + z (h_{t-1} - n)  (= (1-z) n + z h_{t-1})
 *
 * Speed comes from the shape of the work: the input projection of every
 * timestep is one tall GEMM ([rows, in] x [in, GH]) hoisted out of the time
 * loop, and each step runs one [B_t, H] x [H, GH] GEMM for the examples
 * still running, against W_hh packed once per layer (f32 with AVX2+FMA:
 * ops/gemm_kernel.c; BLAS otherwise).  Internally only the active rows (t < len[b]) exist,
 * packed time-major, so a step's rows are contiguous for BLAS and padding
 * costs nothing.  All buffers come from the arena once per layer; the time
 * loops allocate nothing.
 *
 * Lengths: at t >= len[b] the state of example b is frozen (h, c carried
 * over) and its output is 0.  T = max(len) steps run; none past it.
 *
 * Each layer records its own tape node (inputs: x, w_ih, w_hh, b_ih, b_hh,
 * h0, c0; the GRU's c0 is NULL), so dropout between layers is just a
 * per-element scale that the next layer applies to its input. */
#include "vecmath.h"
#include "dispatch.h"
#include "rnn.h"
#include "../graph/device.h"

/* ops/rnn.h: the packed rows, their index on the host and their arrays
 * in the device's memory. */
typedef ag__krnn rnn_saved;

/* The two cells: their gates per unit, op name and final states' names. */
typedef enum { CELL_LSTM, CELL_GRU } rnn_cell;
static const struct {
    int gates;
    const char *op, *h_n, *c_n;
} cells[] = {
    [CELL_LSTM] = {4, "ag_lstm", "ag_lstm(h_n)", "ag_lstm(c_n)"},
    [CELL_GRU] = {3, "ag_gru", "ag_gru(h_n)", NULL},
};

/* ---- the LSTM's cell ---- */

/* Gate nonlinearities and state update of one row (vectorisable: the
 * activations are branch-free, see vecmath.h). */
static inline __attribute__((always_inline)) void cell_row_forward(ag_real *restrict a, const ag_real *restrict c_prev, ag_real *restrict c,
                             ag_real *restrict h, ag_real *restrict tc, int H) {
    ag_real *ai = a, *af = a + H, *ag = a + 2 * H, *ao = a + 3 * H;
    for (int j = 0; j < H; j++) {
        ag_real i = ag__vsigmoid(ai[j]), f = ag__vsigmoid(af[j]), g = ag__vtanh(ag[j]), o = ag__vsigmoid(ao[j]);
        ai[j] = i, af[j] = f, ag[j] = g, ao[j] = o;
        ag_real cj = f * c_prev[j] + i * g, t = ag__vtanh(cj);
        c[j] = cj;
        tc[j] = t;
        h[j] = o * t;
    }
}

/* One row of the step backwards: from dh (from above and from t+1) and dc
 * (from t+1) to the gate pre-activation gradients d, and dc for t-1 in place. */
static inline __attribute__((always_inline)) void cell_row_backward(ag_real *restrict d, const ag_real *restrict a, const ag_real *restrict c_prev,
                              const ag_real *restrict tc, const ag_real *restrict dh, const ag_real *restrict dy,
                              ag_real *restrict dc, int H) {
    for (int j = 0; j < H; j++) {
        ag_real i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
        ag_real dht = dh[j] + dy[j];
        ag_real dct = dc[j] + dht * o * (1 - tc[j] * tc[j]);
        d[j] = dct * g * i * (1 - i);
        d[H + j] = dct * c_prev[j] * f * (1 - f);
        d[2 * H + j] = dct * i * (1 - g * g);
        d[3 * H + j] = dht * tc[j] * o * (1 - o);
        dc[j] = dct * f;
    }
}

/* A step's rows, forward: k in [k0, k1), contiguous in every packed array. */
AG_SIMD_CLONES static void cells_forward(const rnn_saved *s, ag_real *c, int k0, int k1, int H) {
    for (int64_t k = k0; k < k1; k++)
        cell_row_forward(s->gates + k * 4 * H, s->cprev + k * H, c + k * H, s->h + k * H, s->tc + k * H, H);
}

/* A step's rows, backward: dh and dc are by example, dY [B,N,H] at t. */
AG_SIMD_CLONES static void cells_backward(const rnn_saved *s, ag_real *dG, ag_real *dh, ag_real *dc, const ag_real *dY,
                                          int N, int t, int k0, int k1, int H) {
    for (int64_t k = k0; k < k1; k++) {
        int64_t b = s->row_b[k];
        cell_row_backward(dG + k * 4 * H, s->gates + k * 4 * H, s->cprev + k * H, s->tc + k * H, dh + b * H,
                          dY + (b * N + t) * H, dc + b * H, H);
    }
}

/* ---- the GRU's cell ---- */

/* One row: ax [3H] the input side (b_ih in it), activated in place to r,
 * z, n; ah [3H] the recurrent side (b_hh in it), kept for backward. */
static inline __attribute__((always_inline)) void gru_row_forward(ag_real *restrict ax, const ag_real *restrict ah,
                                                                  const ag_real *restrict h_prev, ag_real *restrict h,
                                                                  int H) {
    for (int j = 0; j < H; j++) {
        ag_real r = ag__vsigmoid(ax[j] + ah[j]), z = ag__vsigmoid(ax[H + j] + ah[H + j]);
        ag_real n = ag__vtanh(ax[2 * H + j] + r * ah[2 * H + j]);
        ax[j] = r, ax[H + j] = z, ax[2 * H + j] = n;
        h[j] = n + z * (h_prev[j] - n);
    }
}

/* One row backwards: dh (from t+1; by example) plus dy (from above) is
 * dL/dh_t.  dx [3H] are the input side's pre-activation gradients, dhh
 * [3H] the recurrent side's (its n part times r), and dh becomes the
 * direct part of dL/dh_{t-1}, z dL/dh_t; the caller adds dhh W_hh^T. */
static inline __attribute__((always_inline)) void gru_row_backward(ag_real *restrict dx, ag_real *restrict dhh,
                                                                   const ag_real *restrict a, const ag_real *restrict ah,
                                                                   const ag_real *restrict h_prev,
                                                                   ag_real *restrict dh, const ag_real *restrict dy,
                                                                   int H) {
    for (int j = 0; j < H; j++) {
        ag_real r = a[j], z = a[H + j], n = a[2 * H + j];
        ag_real dht = dh[j] + dy[j];
        ag_real dan = dht * (1 - z) * (1 - n * n);
        ag_real dar = dan * ah[2 * H + j] * r * (1 - r);
        ag_real daz = dht * (h_prev[j] - n) * z * (1 - z);
        dx[j] = dhh[j] = dar;
        dx[H + j] = dhh[H + j] = daz;
        dx[2 * H + j] = dan;
        dhh[2 * H + j] = dan * r;
        dh[j] = dht * z;
    }
}

AG_SIMD_CLONES static void gru_cells_forward(const rnn_saved *s, int k0, int k1, int H) {
    for (int64_t k = k0; k < k1; k++)
        gru_row_forward(s->gates + k * 3 * H, s->hg + k * 3 * H, s->hprev + k * H, s->h + k * H, H);
}

AG_SIMD_CLONES static void gru_cells_backward(const rnn_saved *s, ag_real *dGx, ag_real *dGh, ag_real *dh,
                                              const ag_real *dY, int N, int t, int k0, int k1, int H) {
    for (int64_t k = k0; k < k1; k++) {
        int64_t b = s->row_b[k];
        gru_row_backward(dGx + k * 3 * H, dGh + k * 3 * H, s->gates + k * 3 * H, s->hg + k * 3 * H, s->hprev + k * H,
                         dh + b * H, dY + (b * N + t) * H, H);
    }
}

/* ---- pieces both cells run on the CPU ---- */

/* Column sums of G [rows, n] added into g1 and g2 (either may be NULL). */
static void add_column_sums(const ag_real *G, int64_t rows, int n, ag_real *g1, ag_real *g2) {
    if (!g1 && !g2) return;
    ag_real *sum = ag__arena_zalloc((size_t)n * sizeof *sum);
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < n; j++) sum[j] += G[r * n + j];
    for (int j = 0; j < n; j++) {
        if (g1) g1[j] += sum[j];
        if (g2) g2[j] += sum[j];
    }
}

/* Every one of the rows [rows, n] of dst = bias (b1 + b2; NULL counts 0). */
static void fill_rows(ag_real *dst, int64_t rows, int n, const ag_real *b1, const ag_real *b2) {
    ag_real *bias = ag__arena_alloc((size_t)n * sizeof *bias + 1);
    for (int j = 0; j < n; j++) bias[j] = (b1 ? b1[j] : 0) + (b2 ? b2[j] : 0);
    for (int64_t k = 0; k < rows; k++) memcpy(dst + k * n, bias, (size_t)n * sizeof *bias);
}

/* The dropout mask of the packed input rows: drawn per example over its
 * [T, in] steps (keyed by its global row, as ag_dropout's), then gathered
 * in packed (time-major) order, so that an example's mask does not depend
 * on which other examples share its batch. */
static void drop_mask(const rnn_saved *s, int B, int in, double keep, ag_rng *rng) {
    int64_t row_len = (int64_t)s->T * in;
    uint8_t *by_row = ag__arena_alloc((size_t)(B * row_len + 1));
    ag__dropout_mask(by_row, B, row_len, keep, rng);
    for (int t = 0; t < s->T; t++)
        for (int k = s->off[t]; k < s->off[t + 1]; k++)
            memcpy(s->kept + (int64_t)k * in, by_row + s->row_b[k] * row_len + (int64_t)t * in, (size_t)in);
}

/* The hoisted input projection: the active rows of x in packed order
 * (through the dropout mask drawn from rng, when there is one) into
 * s->xin, then s->gates [na,GH] = bias rows + xin W_ih. */
static void input_projection(const rnn_saved *s, const ag__krnn_args *a, int GH, const ag_real *b1, const ag_real *b2,
                             double keep, ag_rng *rng) {
    int N = a->N, in = a->in;
    if (rng) drop_mask(s, a->B, in, keep, rng);
    for (int t = 0; t < s->T; t++)
        for (int k = s->off[t]; k < s->off[t + 1]; k++) {
            const ag_real *src = a->x + ((int64_t)s->row_b[k] * N + t) * in;
            ag_real *dst = s->xin + (int64_t)k * in;
            if (s->kept) {
                const uint8_t *m = s->kept + (int64_t)k * in;
                for (int j = 0; j < in; j++) dst[j] = m[j] ? s->scale * src[j] : 0;
            } else {
                memcpy(dst, src, (size_t)in * sizeof *dst);
            }
        }
    fill_rows(s->gates, s->na, GH, b1, b2); /* the biases enter every step together */
    ag__gemm(false, false, s->na, GH, in, 1, s->xin, a->w_ih, 1, s->gates);
}

/* Row k's state before its step: the previous row's, or the layer's slice
 * of s0 (zeros without one). */
static const ag_real *state_before(const rnn_saved *s, int k, const ag_real *packed, const ag_real *s0,
                                   const ag_real *zeros, int H) {
    if (s->prev[k] >= 0) return packed + (int64_t)s->prev[k] * H;
    return s0 ? s0 + (int64_t)s->row_b[k] * H : zeros;
}

/* The recurrent products are T small GEMMs against the same W_hh: BLAS
 * would repack its 2.5 MB (LSTM, H = 400) on every one, so it is packed
 * once per layer for our kernel (ops/gemm_kernel.c), which then runs at
 * ~105 GFLOP/s where OpenBLAS ran at 65-80.  {0} where that kernel is off
 * or one step would not repay the packing. */
static ag__packed_b pack_recurrent(bool transposed, const ag__krnn_args *a, int GH, int T) {
    if (!(ag__packed_gemm_ok() && T > 1)) return (ag__packed_b){0};
    return transposed ? ag__pack_b(true, GH, a->H, a->w_hh) : ag__pack_b(false, a->H, GH, a->w_hh);
}

/* dst [rows, GH] += hprev [rows, H] W_hh. */
static void recurrent_product(int rows, const ag_real *hprev, const ag__packed_b *w, const ag__krnn_args *a, int GH,
                              ag_real *dst) {
    if (w->panels) ag__gemm_packed(rows, hprev, a->H, w, 1, 1, dst, GH);
    else ag__gemm(false, false, rows, GH, a->H, 1, hprev, a->w_hh, 1, dst);
}

/* dL/dh_{t-1} of step t's examples (by example in dh) from dG [rows, GH]
 * of their rows: dh = dG W_hh^T, or dh += it when add (the GRU's direct
 * part is there).  scratch [rows, H] when not every example is in the step. */
static void recurrent_product_back(const rnn_saved *s, int k0, int rows, int B, const ag_real *dG,
                                   const ag__packed_b *w_t, const ag__krnn_args *a, int GH, bool add, ag_real *dh,
                                   ag_real *scratch) {
    int H = a->H;
    bool all = rows == B; /* then row i is example i */
    ag_real *dst = all ? dh : scratch, beta = all && add ? 1 : 0;
    if (w_t->panels) ag__gemm_packed(rows, dG, GH, w_t, 1, beta, dst, H);
    else ag__gemm(false, true, rows, H, GH, 1, dG, a->w_hh, beta, dst);
    if (all) return;
    for (int i = 0; i < rows; i++) {
        ag_real *to = dh + (int64_t)s->row_b[k0 + i] * H;
        const ag_real *from = scratch + (int64_t)i * H;
        if (add)
            for (int j = 0; j < H; j++) to[j] += from[j];
        else
            memcpy(to, from, (size_t)H * sizeof *to);
    }
}

/* out [B,N,H]: each row's h at its (b, t), 0 past each length; and each
 * example's state after its last step (its initial one at length 0) into
 * h_final and c_final (either may be NULL; c NULL for the GRU). */
static void write_outputs(const rnn_saved *s, const ag__krnn_args *a, const ag_real *c, ag_real *out,
                          ag_real *h_final, ag_real *c_final) {
    int B = a->B, N = a->N, H = a->H;
    ag_real *zeros = ag__arena_zalloc((size_t)H * sizeof *zeros + 1);
    for (int b = 0; b < B && (h_final || c_final); b++) {
        int k = s->last[b];
        const ag_real *hb = k >= 0 ? s->h + (int64_t)k * H : a->h0 ? a->h0 + (int64_t)b * H : zeros;
        if (h_final) memcpy(h_final + (int64_t)b * H, hb, (size_t)H * sizeof(ag_real));
        if (c_final) {
            const ag_real *cb = k >= 0 ? c + (int64_t)k * H : a->c0 ? a->c0 + (int64_t)b * H : zeros;
            memcpy(c_final + (int64_t)b * H, cb, (size_t)H * sizeof(ag_real));
        }
    }
    for (int b = 0; b < B; b++) /* zeros past each length */
        for (int t = s->len[b]; t < N; t++) memset(out + ((int64_t)b * N + t) * H, 0, (size_t)H * sizeof(ag_real));
    for (int t = 0; t < s->T; t++)
        for (int k = s->off[t]; k < s->off[t + 1]; k++)
            memcpy(out + ((int64_t)s->row_b[k] * N + t) * H, s->h + (int64_t)k * H, (size_t)H * sizeof(ag_real));
}

/* The gradients every layer takes alike once its dG are known: dW_hh
 * from the recurrent side's dGh (without h0, the rows of t = 0 have
 * h_{t-1} = 0 and add nothing: the product starts after them), dW_ih and
 * dx from the input side's dGx (a frozen row's dx is 0), and the biases
 * (the LSTM's dGx and dGh are one array: both biases take its sums). */
static void weight_and_input_grads(const rnn_saved *s, const ag__krnn_args *a, const ag_real *dGx, const ag_real *dGh,
                                   int GH, const ag__krnn_grads *gr) {
    int N = a->N, in = a->in, H = a->H, na = s->na;
    int from = a->h0 || s->T == 0 ? 0 : s->off[1];
    if (gr->w_hh && na > from)
        ag__gemm(true, false, H, GH, na - from, 1, s->hprev + (int64_t)from * H, dGh + (int64_t)from * GH, 1, gr->w_hh);
    if (gr->w_ih) ag__gemm(true, false, in, GH, na, 1, s->xin, dGx, 1, gr->w_ih);
    if (dGx == dGh) {
        add_column_sums(dGx, na, GH, gr->b_ih, gr->b_hh);
    } else {
        add_column_sums(dGx, na, GH, gr->b_ih, NULL);
        add_column_sums(dGh, na, GH, gr->b_hh, NULL);
    }
    if (!gr->x) return;
    ag_real *dxin = ag__arena_alloc((size_t)((int64_t)na * in + 1) * sizeof *dxin);
    ag__gemm(false, true, na, in, GH, 1, dGx, a->w_ih, 0, dxin);
    for (int t = 0; t < s->T; t++)
        for (int k = s->off[t]; k < s->off[t + 1]; k++) {
            const ag_real *src = dxin + (int64_t)k * in;
            const uint8_t *m = s->kept ? s->kept + (int64_t)k * in : NULL;
            ag_real *dst = gr->x + ((int64_t)s->row_b[k] * N + t) * in;
            if (m)
                for (int j = 0; j < in; j++) dst[j] += m[j] ? s->scale * src[j] : 0;
            else
                for (int j = 0; j < in; j++) dst[j] += src[j];
        }
}

/* ---- the LSTM layer on the CPU ---- */

static void lstm_forward_cpu(rnn_saved *s, const ag__krnn_args *a, ag_real *c, ag_real *out, ag_real *h_final,
                             ag_real *c_final, double keep, ag_rng *rng) {
    int H = a->H, T = s->T;
    input_projection(s, a, 4 * H, a->b_ih, a->b_hh, keep, rng);
    ag__packed_b whh = pack_recurrent(false, a, 4 * H, T);
    ag_real *zeros = ag__arena_zalloc((size_t)H * sizeof *zeros + 1);
    for (int t = 0; t < T; t++) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        for (int k = k0; k < k0 + ba; k++) {
            memcpy(s->hprev + (int64_t)k * H, state_before(s, k, s->h, a->h0, zeros, H), (size_t)H * sizeof(ag_real));
            memcpy(s->cprev + (int64_t)k * H, state_before(s, k, c, a->c0, zeros, H), (size_t)H * sizeof(ag_real));
        }
        if (t > 0 || a->h0) /* h_{-1} = 0: its product would add exact zeros */
            recurrent_product(ba, s->hprev + (int64_t)k0 * H, &whh, a, 4 * H, s->gates + (int64_t)k0 * 4 * H);
        cells_forward(s, c, k0, k0 + ba, H);
    }
    write_outputs(s, a, c, out, h_final, c_final);
}

static void lstm_backward_cpu(rnn_saved *s, const ag__krnn_args *a, const ag_real *dY, const ag__krnn_grads *gr) {
    int B = a->B, N = a->N, H = a->H, T = s->T, na = s->na;

    /* dh, dc of the state each example carries into the step being undone,
     * by example.  An example not yet started (going backwards) holds the
     * gradient of its final state there (0 without h_n/c_n): outputs past
     * len are the constant 0, and its rows are not written before its last
     * step. */
    ag_real *dG = ag__arena_alloc((size_t)((int64_t)na * 4 * H + 1) * sizeof *dG);
    ag_real *dh = ag__arena_zalloc((size_t)B * H * sizeof *dh + 1);
    ag_real *dc = ag__arena_zalloc((size_t)B * H * sizeof *dc + 1);
    /* the final states' gradients enter each example's last step (consumed:
     * a later sweep that does not reach h_n/c_n must not see them again) */
    if (s->dh_final) memcpy(dh, s->dh_final, (size_t)B * H * sizeof *dh);
    if (s->dc_final) memcpy(dc, s->dc_final, (size_t)B * H * sizeof *dc);
    s->dh_final = s->dc_final = NULL;
    ag_real *scratch = ag__arena_alloc((size_t)B * H * sizeof *scratch + 1);
    ag__packed_b whh_t = pack_recurrent(true, a, 4 * H, T); /* W_hh^T once for all steps */
    for (int t = T - 1; t >= 0; t--) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        cells_backward(s, dG, dh, dc, dY, N, t, k0, k0 + ba, H);
        if (t > 0 || gr->h0) /* dh_{t-1} = dG_t W_hh^T on this step's rows; the others keep theirs */
            recurrent_product_back(s, k0, ba, B, dG + (int64_t)k0 * 4 * H, &whh_t, a, 4 * H, false, dh, scratch);
    }
    if (gr->h0)
        for (int64_t k = 0; k < (int64_t)B * H; k++) gr->h0[k] += dh[k];
    if (gr->c0)
        for (int64_t k = 0; k < (int64_t)B * H; k++) gr->c0[k] += dc[k];
    weight_and_input_grads(s, a, dG, dG, 4 * H, gr);
}

/* ---- the GRU layer on the CPU ---- */

static void gru_forward_cpu(rnn_saved *s, const ag__krnn_args *a, ag_real *out, ag_real *h_final, double keep,
                            ag_rng *rng) {
    int H = a->H, T = s->T;
    input_projection(s, a, 3 * H, a->b_ih, NULL, keep, rng);
    fill_rows(s->hg, s->na, 3 * H, a->b_hh, NULL); /* the recurrent side starts at b_hh */
    ag__packed_b whh = pack_recurrent(false, a, 3 * H, T);
    ag_real *zeros = ag__arena_zalloc((size_t)H * sizeof *zeros + 1);
    for (int t = 0; t < T; t++) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        for (int k = k0; k < k0 + ba; k++)
            memcpy(s->hprev + (int64_t)k * H, state_before(s, k, s->h, a->h0, zeros, H), (size_t)H * sizeof(ag_real));
        if (t > 0 || a->h0)
            recurrent_product(ba, s->hprev + (int64_t)k0 * H, &whh, a, 3 * H, s->hg + (int64_t)k0 * 3 * H);
        gru_cells_forward(s, k0, k0 + ba, H);
    }
    write_outputs(s, a, NULL, out, h_final, NULL);
}

static void gru_backward_cpu(rnn_saved *s, const ag__krnn_args *a, const ag_real *dY, const ag__krnn_grads *gr) {
    int B = a->B, N = a->N, H = a->H, T = s->T, na = s->na;
    size_t gates = (size_t)((int64_t)na * 3 * H + 1) * sizeof(ag_real);
    ag_real *dGx = ag__arena_alloc(gates), *dGh = ag__arena_alloc(gates);
    ag_real *dh = ag__arena_zalloc((size_t)B * H * sizeof *dh + 1); /* by example, as the LSTM's */
    if (s->dh_final) memcpy(dh, s->dh_final, (size_t)B * H * sizeof *dh);
    s->dh_final = NULL;
    ag_real *scratch = ag__arena_alloc((size_t)B * H * sizeof *scratch + 1);
    ag__packed_b whh_t = pack_recurrent(true, a, 3 * H, T);
    for (int t = T - 1; t >= 0; t--) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        gru_cells_backward(s, dGx, dGh, dh, dY, N, t, k0, k0 + ba, H); /* dh: z dL/dh_t */
        if (t > 0 || gr->h0) /* ... plus dGh_t W_hh^T */
            recurrent_product_back(s, k0, ba, B, dGh + (int64_t)k0 * 3 * H, &whh_t, a, 3 * H, true, dh, scratch);
    }
    if (gr->h0)
        for (int64_t k = 0; k < (int64_t)B * H; k++) gr->h0[k] += dh[k];
    weight_and_input_grads(s, a, dGx, dGh, 3 * H, gr);
}

/* ---- layers on the tape ---- */

/* The layer's operands as the kernels take them (the slices of h0, c0). */
static ag__krnn_args layer_args(const rnn_saved *s, ag_tensor *x, ag_tensor *w_ih, ag_tensor *w_hh, ag_tensor *b_ih,
                                ag_tensor *b_hh, ag_tensor *h0, ag_tensor *c0) {
    int B = x->shape[0], H = w_hh->shape[0];
    int64_t at = (int64_t)s->layer * B * H;
    return (ag__krnn_args){.x = x->data, .w_ih = w_ih->data, .w_hh = w_hh->data,
                           .b_ih = b_ih ? b_ih->data : NULL, .b_hh = b_hh ? b_hh->data : NULL,
                           .h0 = h0 ? h0->data + at : NULL, .c0 = c0 ? c0->data + at : NULL,
                           .B = B, .N = x->shape[1], .in = x->shape[2], .H = H};
}

/* Either cell's layer backward.  Every wanted gradient is allocated, even
 * one that stays zero (every length 1 leaves dW_hh untouched). */
static void layer_backward(ag_node *n, rnn_cell cell) {
    rnn_saved *s = n->saved;
    ag_tensor *x = n->in[0], *w_ih = n->in[1], *w_hh = n->in[2], *b_ih = n->in[3], *b_hh = n->in[4];
    ag_tensor *h0 = n->in[5], *c0 = n->in[6];
    ag__krnn_args a = layer_args(s, x, w_ih, w_hh, b_ih, b_hh, h0, c0);
    int64_t at = (int64_t)s->layer * a.B * a.H;
    ag__krnn_grads g = {
        .h0 = h0 && ag__wants(n, 5) ? ag__grad(h0) + at : NULL,
        .c0 = c0 && ag__wants(n, 6) ? ag__grad(c0) + at : NULL,
        .w_hh = ag__wants(n, 2) ? ag__grad(w_hh) : NULL,
        .w_ih = ag__wants(n, 1) ? ag__grad(w_ih) : NULL,
        .b_ih = b_ih && ag__wants(n, 3) ? ag__grad(b_ih) : NULL,
        .b_hh = b_hh && ag__wants(n, 4) ? ag__grad(b_hh) : NULL,
        .x = ag__wants(n, 0) ? ag__grad(x) : NULL,
    };
    const ag__rnn_kernels *k = ag__rnn_on(n->op, x->device);
    if (cell == CELL_LSTM) k->lstm_backward(s, &a, n->out->grad, &g);
    else k->gru_backward(s, &a, n->out->grad, &g);
}
static void lstm_layer_backward(ag_node *n) { layer_backward(n, CELL_LSTM); }
static void gru_layer_backward(ag_node *n) { layer_backward(n, CELL_GRU); }

/* The packed row index: off, row_b, prev and last (see rnn_saved). */
static void active_rows(rnn_saved *s, int B) {
    int T = s->T;
    s->off = ag__arena_alloc((size_t)(T + 1) * sizeof *s->off);
    s->row_b = ag__arena_alloc((size_t)((int64_t)T * B + 1) * sizeof *s->row_b);
    s->prev = ag__arena_alloc((size_t)((int64_t)T * B + 1) * sizeof *s->prev);
    int32_t *at = ag__arena_alloc((size_t)(B ? B : 1) * sizeof *at); /* example -> its row at the step before */
    int k = 0;
    for (int t = 0; t < T; t++) {
        s->off[t] = k;
        for (int b = 0; b < B; b++)
            if (t < s->len[b]) {
                s->row_b[k] = b;
                s->prev[k] = t == 0 ? -1 : at[b];
                at[b] = k++;
            }
    }
    s->off[T] = s->na = k;
    s->last = ag__arena_alloc((size_t)(B ? B : 1) * sizeof *s->last);
    for (int b = 0; b < B; b++) s->last[b] = s->len[b] > 0 ? at[b] : -1;
}

/* The layer's tape node (inputs: x, w_ih, w_hh, b_ih, b_hh, h0, c0),
 * keeping a copy of what its backward needs. */
static ag_tensor *record_layer(rnn_cell cell, ag_tensor *out, ag_tensor *x, const ag_rnn_layer *p, ag_tensor *h0,
                               ag_tensor *c0, const rnn_saved *s) {
    ag_node *n = ag__record(cells[cell].op, cell == CELL_LSTM ? lstm_layer_backward : gru_layer_backward, out, 7,
                            (ag_tensor *[]){x, p->w_ih, p->w_hh, p->b_ih, p->b_hh, h0, c0});
    if (n) {
        rnn_saved *sp = ag__arena_alloc(sizeof *sp);
        *sp = *s;
        n->saved = sp;
    }
    return out;
}

/* One layer over the sequence.  keep < 1 applies inverted dropout to x. */
static ag_tensor *rnn_layer(rnn_cell cell, ag_tensor *x, const ag_rnn_layer *p, int layer, int32_t *len, int T,
                            ag_tensor *h0, ag_tensor *c0, double keep, ag_rng *rng, ag_real *h_final,
                            ag_real *c_final) {
    ag_device dev = x->device; /* the op checked every operand */
    int B = x->shape[0], N = x->shape[1], in = x->shape[2], H = p->w_hh->shape[0], GH = cells[cell].gates * H;
    rnn_saved s = {.len = len, .T = T, .layer = layer, .scale = (ag_real)(1 / keep)};
    active_rows(&s, B);
    int64_t na = s.na;
    ag_rng *drop = keep < 1 ? rng : NULL;
    if (drop) s.kept = ag__step_alloc_on(dev, (size_t)(na * in + 1));
    size_t real = sizeof(ag_real);
    s.xin = ag__step_alloc_on(dev, (size_t)(na * in + 1) * real);
    s.gates = ag__step_alloc_on(dev, (size_t)(na * GH + 1) * real);
    s.hprev = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    s.h = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    ag_tensor *out = ag__empty_on(dev, 3, (int[]){B, N, H});
    ag__krnn_args a = layer_args(&s, x, p->w_ih, p->w_hh, p->b_ih, p->b_hh, h0, c0);
    const ag__rnn_kernels *k = ag__rnn_on(cells[cell].op, dev);
    if (cell == CELL_LSTM) {
        s.cprev = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
        s.tc = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
        ag_real *c = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
        k->lstm_forward(&s, &a, c, out->data, h_final, c_final, keep, drop);
    } else {
        s.hg = ag__step_alloc_on(dev, (size_t)(na * GH + 1) * real);
        k->gru_forward(&s, &a, out->data, h_final, keep, drop);
    }
    return record_layer(cell, out, x, p, h0, c0, &s);
}

/* ---- final states: h_n / c_n [L,B,H] ----
 *
 * Their node's inputs are the layers' outputs (so it is recorded when any
 * layer is); its backward hands each layer its slice of the gradient
 * (rnn_saved.dh_final / dc_final) and makes sure the layer's backward
 * runs even when nothing else reached its output. */
typedef struct {
    int layers;
    bool cell;                      /* c_n, else h_n */
    rnn_saved *saved[AG_MAX_INPUTS];
} final_saved;

static void final_states_backward(ag_node *n) {
    const final_saved *f = n->saved;
    int B = n->out->shape[1], H = n->out->shape[2];
    for (int l = 0; l < f->layers; l++) {
        if (!f->saved[l]) continue;
        ag_real *g = ag__step_alloc_on(n->out->device, (size_t)B * H * sizeof(ag_real) + 1);
        ag__rnn_on(n->op, n->out->device)->copy(g, n->out->grad + (int64_t)l * B * H, (int64_t)B * H);
        if (f->cell) f->saved[l]->dc_final = g;
        else f->saved[l]->dh_final = g;
        ag__grad(n->in[l]);
    }
}

static bool is_layer_node(const ag_node *n) {
    return n && (n->backward == lstm_layer_backward || n->backward == gru_layer_backward);
}

static void record_final(rnn_cell cell, ag_tensor *t, ag_tensor **outs, int L, bool c_n) {
    ag_node *n = ag__record(c_n ? cells[cell].c_n : cells[cell].h_n, final_states_backward, t, L, outs);
    if (!n) return;
    final_saved *f = ag__arena_zalloc(sizeof *f);
    f->layers = L;
    f->cell = c_n;
    for (int l = 0; l < L; l++) f->saved[l] = is_layer_node(outs[l]->node) ? outs[l]->node->saved : NULL;
    n->saved = f;
}

/* ---- argument checks ---- */

static void check_matrix(const char *op, const ag_tensor *x, const ag_tensor *w, const char *what, int layer, int rows,
                         int cols) {
    char sw[64], sx[64];
    if (!w) ag__fatal(op, "layer %d: %s is NULL", layer, what);
    ag__check_same_device(op, x, w);
    bool ok = cols < 0 ? w->ndim == 1 && w->shape[0] == rows : w->ndim == 2 && w->shape[0] == rows && w->shape[1] == cols;
    if (!ok) {
        if (cols < 0)
            ag__fatal(op, "layer %d: %s %s does not fit x %s (want [%d])", layer, what, ag_shape_str(w, sw, sizeof sw),
                      ag_shape_str(x, sx, sizeof sx), rows);
        ag__fatal(op, "layer %d: %s %s does not fit x %s (want [%d,%d])", layer, what, ag_shape_str(w, sw, sizeof sw),
                  ag_shape_str(x, sx, sizeof sx), rows, cols);
    }
}

static void check_state(const char *op, const ag_tensor *x, const ag_tensor *s0, const char *what, int L, int B, int H) {
    if (!s0) return;
    ag__check_same_device(op, x, s0);
    if (s0->ndim != 3 || s0->shape[0] != L || s0->shape[1] != B || s0->shape[2] != H) {
        char ss[64], sx[64];
        ag__fatal(op, "%s %s does not fit x %s (want [layers=%d,B=%d,H=%d])", what, ag_shape_str(s0, ss, sizeof ss),
                  ag_shape_str(x, sx, sizeof sx), L, B, H);
    }
}

/* The layers of either cell over x, with ag_lstm_opts' options (the GRU's
 * c0 and c_n are NULL). */
static ag_tensor *rnn(rnn_cell cell, ag_tensor *x, const ag_rnn_layer *layers, int num_layers, const ag_lstm_opts *o) {
    const char *op = cells[cell].op;
    int G = cells[cell].gates;
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (x->ndim != 3) ag__fatal(op, "x %s must be [B,N,in]", ag_shape_str(x, sx, sizeof sx));
    if (num_layers < 1 || !layers) ag__fatal(op, "%d layers (need at least 1)", num_layers);
    int B = x->shape[0], N = x->shape[1];
    const ag_tensor *w0 = layers[0].w_hh;
    if (!w0 || w0->ndim != 2 || w0->shape[1] != G * w0->shape[0]) {
        char sw[64];
        ag__fatal(op, "layer 0: w_hh %s must be [H,%dH]", w0 ? ag_shape_str(w0, sw, sizeof sw) : "NULL", G);
    }
    int H = w0->shape[0];
    for (int l = 0; l < num_layers; l++) {
        const ag_rnn_layer *p = &layers[l];
        check_matrix(op, x, p->w_hh, "w_hh", l, H, G * H);
        check_matrix(op, x, p->w_ih, "w_ih", l, l == 0 ? x->shape[2] : H, G * H);
        if (p->b_ih) check_matrix(op, x, p->b_ih, "b_ih", l, G * H, -1);
        if (p->b_hh) check_matrix(op, x, p->b_hh, "b_hh", l, G * H, -1);
    }
    check_state(op, x, o->h0, "h0", num_layers, B, H);
    check_state(op, x, o->c0, "c0", num_layers, B, H);
    double keep = o->keep == 0 ? 1 : o->keep;
    if (!(keep > 0 && keep <= 1)) ag__fatal(op, "keep %g is outside (0, 1]", o->keep);
    bool dropout = o->training && keep < 1 && num_layers > 1;
    if (dropout && !o->rng) ag__fatal(op, "dropout (keep %g) needs an rng", keep);

    int32_t *len = ag__arena_alloc((size_t)(B ? B : 1) * sizeof *len);
    int T = 0;
    for (int b = 0; b < B; b++) {
        len[b] = o->len ? o->len[b] : N;
        if (len[b] < 0 || len[b] > N) ag__fatal(op, "len[%d] = %d is outside [0, %d]", b, (int)len[b], N);
        if (len[b] > T) T = len[b];
    }

    bool finals = o->h_n || o->c_n;
    if (finals && num_layers > AG_MAX_INPUTS)
        ag__fatal(op, "final states of %d layers (at most %d)", num_layers, AG_MAX_INPUTS);
    ag_tensor *hn = o->h_n ? ag__empty_on(dev, 3, (int[]){num_layers, B, H}) : NULL;
    ag_tensor *cn = o->c_n ? ag__empty_on(dev, 3, (int[]){num_layers, B, H}) : NULL;
    ag_tensor *outs[AG_MAX_INPUTS];
    ag_tensor *h = o->reverse ? ag_reverse_padded(x, len) : x; /* right to left: reversed in, reversed back out */
    for (int l = 0; l < num_layers; l++) {
        h = rnn_layer(cell, h, &layers[l], l, len, T, o->h0, o->c0, l > 0 && dropout ? keep : 1, o->rng,
                      hn ? hn->data + (int64_t)l * B * H : NULL, cn ? cn->data + (int64_t)l * B * H : NULL);
        if (finals) outs[l] = h;
    }
    if (hn) record_final(cell, hn, outs, num_layers, false);
    if (cn) record_final(cell, cn, outs, num_layers, true);
    if (o->h_n) *o->h_n = hn;
    if (o->c_n) *o->c_n = cn;
    return o->reverse ? ag_reverse_padded(h, len) : h;
}

ag_tensor *ag_lstm(ag_tensor *x, const ag_lstm_layer *layers, int num_layers, const ag_lstm_opts *opts) {
    static const ag_lstm_opts defaults = {0};
    return rnn(CELL_LSTM, x, layers, num_layers, opts ? opts : &defaults);
}

ag_tensor *ag_gru(ag_tensor *x, const ag_gru_layer *layers, int num_layers, const ag_gru_opts *opts) {
    static const ag_gru_opts defaults = {0};
    const ag_gru_opts *g = opts ? opts : &defaults;
    ag_lstm_opts o = {.len = g->len, .h0 = g->h0, .keep = g->keep, .training = g->training, .rng = g->rng,
                      .h_n = g->h_n, .reverse = g->reverse};
    return rnn(CELL_GRU, x, layers, num_layers, &o);
}

/* ---- the CPU's table (ops/rnn.h; CUDA's is in ops/cuda/rnn.c) ---- */

static void copy_cpu(ag_real *dst, const ag_real *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }

static const ag__rnn_kernels rnn_cpu = {
    .lstm_forward = lstm_forward_cpu,
    .lstm_backward = lstm_backward_cpu,
    .gru_forward = gru_forward_cpu,
    .gru_backward = gru_backward_cpu,
    .copy = copy_cpu,
};
AG_DISPATCH(rnn, rnn_cpu)
