/* rnn.c - a multi-layer LSTM over whole padded sequences, with backward
 * through time.  One layer, gates i,f,g,o in that column order:
 *
 *     a_t = x_t W_ih + b_ih + h_{t-1} W_hh + b_hh          [B,4H]
 *     i, f, o = sigmoid(a_i, a_f, a_o),  g = tanh(a_g)
 *     c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)
 *
 * Speed comes from the shape of the work: the input projection of every
 * timestep is one tall GEMM ([rows, in] x [in, 4H]) hoisted out of the time
 * loop, and each step runs one [B_t, H] x [H, 4H] GEMM for the examples
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
 * h0, c0), so dropout between layers is just a per-element scale that the
 * next layer applies to its input. */
#include "vecmath.h"
#include "dispatch.h"
#include "rnn.h"
#include "../graph/device.h"

/* ops/rnn.h: the packed rows, their index on the host and their arrays
 * in the device's memory. */
typedef ag__krnn rnn_saved;

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

/* Column sums of G [rows, n] added into g1 and g2 (either may be NULL). */
static void add_column_sums(const ag_real *G, int64_t rows, int n, ag_real *g1, ag_real *g2) {
    ag_real *sum = ag__arena_zalloc((size_t)n * sizeof *sum);
    for (int64_t r = 0; r < rows; r++)
        for (int j = 0; j < n; j++) sum[j] += G[r * n + j];
    for (int j = 0; j < n; j++) {
        if (g1) g1[j] += sum[j];
        if (g2) g2[j] += sum[j];
    }
}

static void backward_cpu(rnn_saved *s, const ag__krnn_args *a, const ag_real *dY, const ag__krnn_grads *gr) {
    int B = a->B, N = a->N, in = a->in, H = a->H, T = s->T, na = s->na;

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
    ag_real *dhc = ag__arena_alloc((size_t)B * H * sizeof *dhc + 1);
    bool want_h0 = gr->h0 != NULL;
    /* W_hh^T in the kernel's panels once for all steps (see forward_cpu) */
    ag__packed_b whh_t = {0};
    bool packed = ag__packed_gemm_ok() && T > 1;
    if (packed) whh_t = ag__pack_b(true, 4 * H, H, a->w_hh);
    for (int t = T - 1; t >= 0; t--) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        cells_backward(s, dG, dh, dc, dY, N, t, k0, k0 + ba, H);
        if (!(t > 0 || want_h0)) continue;
        /* dh_{t-1} = dG_t W_hh^T on this step's rows; the others keep 0 */
        bool all = ba == B;
        if (packed)
            ag__gemm_packed(ba, dG + (int64_t)k0 * 4 * H, 4 * H, &whh_t, 1, 0, all ? dh : dhc, H);
        else
            ag__gemm(false, true, ba, H, 4 * H, 1, dG + (int64_t)k0 * 4 * H, a->w_hh, 0, all ? dh : dhc);
        if (!all)
            for (int i = 0; i < ba; i++)
                memcpy(dh + (int64_t)s->row_b[k0 + i] * H, dhc + (int64_t)i * H, (size_t)H * sizeof *dh);
    }
    if (gr->h0)
        for (int64_t k = 0; k < (int64_t)B * H; k++) gr->h0[k] += dh[k];
    if (gr->c0)
        for (int64_t k = 0; k < (int64_t)B * H; k++) gr->c0[k] += dc[k];

    /* The weights see all timesteps at once: one GEMM each over the rows.
     * Without h0 the rows of t = 0 have h_{t-1} = 0 and add nothing to
     * dW_hh: the product starts after them. */
    int from = a->h0 || T == 0 ? 0 : s->off[1];
    if (gr->w_hh && na > from)
        ag__gemm(true, false, H, 4 * H, na - from, 1, s->hprev + (int64_t)from * H, dG + (int64_t)from * 4 * H, 1,
                 gr->w_hh);
    if (gr->w_ih) ag__gemm(true, false, in, 4 * H, na, 1, s->xin, dG, 1, gr->w_ih);
    if (gr->b_ih || gr->b_hh) add_column_sums(dG, na, 4 * H, gr->b_ih, gr->b_hh);
    if (gr->x) { /* dx of the active rows; a frozen row's is 0 */
        ag_real *dxin = ag__arena_alloc((size_t)((int64_t)na * in + 1) * sizeof *dxin);
        ag__gemm(false, true, na, in, 4 * H, 1, dG, a->w_ih, 0, dxin);
        ag_real *gx = gr->x;
        for (int t = 0; t < T; t++)
            for (int k = s->off[t]; k < s->off[t + 1]; k++) {
                const ag_real *src = dxin + (int64_t)k * in;
                const uint8_t *m = s->kept ? s->kept + (int64_t)k * in : NULL;
                ag_real *dst = gx + ((int64_t)s->row_b[k] * N + t) * in;
                if (m)
                    for (int j = 0; j < in; j++) dst[j] += m[j] ? s->scale * src[j] : 0;
                else
                    for (int j = 0; j < in; j++) dst[j] += src[j];
            }
    }
}

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

/* Every wanted gradient is allocated, even one that stays zero (every
 * length 1 leaves dW_hh untouched). */
static void lstm_layer_backward(ag_node *n) {
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
    ag__rnn_on(n->op, x->device)->backward(s, &a, n->out->grad, &g);
}

/* The packed row index: off, row_b and prev (see rnn_saved). */
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

/* Row k's state before its step: the previous row's, or the layer's slice
 * of s0 (zeros without one). */
static const ag_real *state_before(const rnn_saved *s, int k, const ag_real *packed, const ag_real *s0,
                                   const ag_real *zeros, int H) {
    if (s->prev[k] >= 0) return packed + (int64_t)s->prev[k] * H;
    return s0 ? s0 + (int64_t)s->row_b[k] * H : zeros;
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

/* The layer's tape node (inputs: x, w_ih, w_hh, b_ih, b_hh, h0, c0),
 * keeping a copy of what its backward needs. */
static ag_tensor *record_layer(ag_tensor *out, ag_tensor *x, const ag_lstm_layer *p, ag_tensor *h0, ag_tensor *c0,
                               const rnn_saved *s) {
    ag_node *n = ag__record("ag_lstm", lstm_layer_backward, out, 7,
                            (ag_tensor *[]){x, p->w_ih, p->w_hh, p->b_ih, p->b_hh, h0, c0});
    if (n) {
        rnn_saved *sp = ag__arena_alloc(sizeof *sp);
        *sp = *s;
        n->saved = sp;
    }
    return out;
}

/* The layer forward on the CPU: the mask, the active rows of the input,
 * then the hoisted input projection. */
static void forward_cpu(rnn_saved *sp, const ag__krnn_args *a, ag_real *c, ag_real *out, ag_real *h_final,
                        ag_real *c_final, double keep, ag_rng *rng) {
    rnn_saved s = *sp; /* a copy of the plan: the arrays it points to are filled */
    int B = a->B, N = a->N, in = a->in, H = a->H, T = s.T;
    int64_t na = s.na;
    const ag_real *h0 = a->h0, *c0 = a->c0;
    if (rng) drop_mask(&s, B, in, keep, rng);
    for (int t = 0; t < T; t++)
        for (int k = s.off[t]; k < s.off[t + 1]; k++) {
            const ag_real *src = a->x + ((int64_t)s.row_b[k] * N + t) * in;
            ag_real *dst = s.xin + (int64_t)k * in;
            if (s.kept) {
                const uint8_t *m = s.kept + (int64_t)k * in;
                for (int j = 0; j < in; j++) dst[j] = m[j] ? s.scale * src[j] : 0;
            } else {
                memcpy(dst, src, (size_t)in * sizeof *dst);
            }
        }
    ag_real *bias = ag__arena_alloc((size_t)4 * H * sizeof *bias); /* both biases enter every step together */
    for (int j = 0; j < 4 * H; j++) bias[j] = (a->b_ih ? a->b_ih[j] : 0) + (a->b_hh ? a->b_hh[j] : 0);
    for (int64_t k = 0; k < na; k++) memcpy(s.gates + k * 4 * H, bias, (size_t)4 * H * sizeof *bias);
    ag__gemm(false, false, (int)na, 4 * H, in, 1, s.xin, a->w_ih, 1, s.gates);

    /* The recurrent products are T small GEMMs against the same W_hh:
     * BLAS would repack its 2.5 MB (H = 400) on every one, so it is packed
     * once here for our kernel (ops/gemm_kernel.c), which then runs at
     * ~105 GFLOP/s where OpenBLAS ran at 65-80. */
    ag__packed_b whh = {0};
    bool packed = ag__packed_gemm_ok() && T > 1;
    if (packed) whh = ag__pack_b(false, H, 4 * H, a->w_hh);
    ag_real *zeros = ag__arena_zalloc((size_t)H * sizeof *zeros + 1);
    for (int t = 0; t < T; t++) {
        int k0 = s.off[t], ba = s.off[t + 1] - k0;
        for (int k = k0; k < k0 + ba; k++) {
            memcpy(s.hprev + (int64_t)k * H, state_before(&s, k, s.h, h0, zeros, H), (size_t)H * sizeof(ag_real));
            memcpy(s.cprev + (int64_t)k * H, state_before(&s, k, c, c0, zeros, H), (size_t)H * sizeof(ag_real));
        }
        if (t == 0 && !h0) {
            /* h_{-1} = 0: its product would add exact zeros */
        } else if (packed)
            ag__gemm_packed(ba, s.hprev + (int64_t)k0 * H, H, &whh, 1, 1, s.gates + (int64_t)k0 * 4 * H, 4 * H);
        else
            ag__gemm(false, false, ba, 4 * H, H, 1, s.hprev + (int64_t)k0 * H, a->w_hh, 1,
                     s.gates + (int64_t)k0 * 4 * H);
        cells_forward(&s, c, k0, k0 + ba, H);
    }

    for (int b = 0; b < B && (h_final || c_final); b++) { /* each example's state after its last step */
        int k = s.last[b];
        const ag_real *hb = k >= 0 ? s.h + (int64_t)k * H : h0 ? h0 + (int64_t)b * H : zeros;
        const ag_real *cb = k >= 0 ? c + (int64_t)k * H : c0 ? c0 + (int64_t)b * H : zeros;
        if (h_final) memcpy(h_final + (int64_t)b * H, hb, (size_t)H * sizeof(ag_real));
        if (c_final) memcpy(c_final + (int64_t)b * H, cb, (size_t)H * sizeof(ag_real));
    }

    for (int b = 0; b < B; b++) /* zeros past each length */
        for (int t = s.len[b]; t < N; t++) memset(out + ((int64_t)b * N + t) * H, 0, (size_t)H * sizeof(ag_real));
    for (int t = 0; t < T; t++)
        for (int k = s.off[t]; k < s.off[t + 1]; k++)
            memcpy(out + ((int64_t)s.row_b[k] * N + t) * H, s.h + (int64_t)k * H, (size_t)H * sizeof(ag_real));
}

static void copy_cpu(ag_real *dst, const ag_real *src, int64_t n) { memcpy(dst, src, (size_t)n * sizeof *dst); }

/* One layer over the sequence.  keep < 1 applies inverted dropout to x. */
static ag_tensor *lstm_layer(ag_tensor *x, const ag_lstm_layer *p, int layer, int32_t *len, int T, ag_tensor *h0,
                             ag_tensor *c0, double keep, ag_rng *rng, ag_real *h_final, ag_real *c_final) {
    ag_device dev = x->device; /* ag_lstm checked every operand */
    int B = x->shape[0], N = x->shape[1], in = x->shape[2], H = p->w_hh->shape[0];
    rnn_saved s = {.len = len, .T = T, .layer = layer, .scale = (ag_real)(1 / keep)};
    active_rows(&s, B);
    int64_t na = s.na;
    ag_rng *drop = keep < 1 ? rng : NULL;
    if (drop) s.kept = ag__step_alloc_on(dev, (size_t)(na * in + 1));
    size_t real = sizeof(ag_real);
    s.xin = ag__step_alloc_on(dev, (size_t)(na * in + 1) * real);
    s.gates = ag__step_alloc_on(dev, (size_t)(na * 4 * H + 1) * real);
    s.hprev = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    s.cprev = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    s.h = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    ag_real *c = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    s.tc = ag__step_alloc_on(dev, (size_t)(na * H + 1) * real);
    ag_tensor *out = ag__empty_on(dev, 3, (int[]){B, N, H});
    ag__krnn_args a = layer_args(&s, x, p->w_ih, p->w_hh, p->b_ih, p->b_hh, h0, c0);
    ag__rnn_on("ag_lstm", dev)->forward(&s, &a, c, out->data, h_final, c_final, keep, drop);
    return record_layer(out, x, p, h0, c0, &s);
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

static void record_final(ag_tensor *t, ag_tensor **outs, int L, bool cell) {
    ag_node *n = ag__record(cell ? "ag_lstm(c_n)" : "ag_lstm(h_n)", final_states_backward, t, L, outs);
    if (!n) return;
    final_saved *f = ag__arena_zalloc(sizeof *f);
    f->layers = L;
    f->cell = cell;
    for (int l = 0; l < L; l++)
        f->saved[l] = outs[l]->node && outs[l]->node->backward == lstm_layer_backward ? outs[l]->node->saved : NULL;
    n->saved = f;
}

/* ---- argument checks ---- */

static void check_matrix(const ag_tensor *x, const ag_tensor *w, const char *what, int layer, int rows, int cols) {
    char sw[64], sx[64];
    if (!w) ag__fatal("ag_lstm", "layer %d: %s is NULL", layer, what);
    ag__check_same_device("ag_lstm", x, w);
    bool ok = cols < 0 ? w->ndim == 1 && w->shape[0] == rows : w->ndim == 2 && w->shape[0] == rows && w->shape[1] == cols;
    if (!ok) {
        if (cols < 0)
            ag__fatal("ag_lstm", "layer %d: %s %s does not fit x %s (want [%d])", layer, what,
                      ag_shape_str(w, sw, sizeof sw), ag_shape_str(x, sx, sizeof sx), rows);
        ag__fatal("ag_lstm", "layer %d: %s %s does not fit x %s (want [%d,%d])", layer, what,
                  ag_shape_str(w, sw, sizeof sw), ag_shape_str(x, sx, sizeof sx), rows, cols);
    }
}

static void check_state(const ag_tensor *x, const ag_tensor *s0, const char *what, int L, int B, int H) {
    if (!s0) return;
    ag__check_same_device("ag_lstm", x, s0);
    if (s0->ndim != 3 || s0->shape[0] != L || s0->shape[1] != B || s0->shape[2] != H) {
        char ss[64], sx[64];
        ag__fatal("ag_lstm", "%s %s does not fit x %s (want [layers=%d,B=%d,H=%d])", what,
                  ag_shape_str(s0, ss, sizeof ss), ag_shape_str(x, sx, sizeof sx), L, B, H);
    }
}

ag_tensor *ag_lstm(ag_tensor *x, const ag_lstm_layer *layers, int num_layers, const ag_lstm_opts *opts) {
    char sx[64];
    static const ag_lstm_opts defaults = {0};
    const ag_lstm_opts *o = opts ? opts : &defaults;
    ag_device dev = ag__check_same_device("ag_lstm", x, NULL);
    if (x->ndim != 3) ag__fatal("ag_lstm", "x %s must be [B,N,in]", ag_shape_str(x, sx, sizeof sx));
    if (num_layers < 1 || !layers) ag__fatal("ag_lstm", "%d layers (need at least 1)", num_layers);
    int B = x->shape[0], N = x->shape[1];
    const ag_tensor *w0 = layers[0].w_hh;
    if (!w0 || w0->ndim != 2 || w0->shape[1] != 4 * w0->shape[0]) {
        char sw[64];
        ag__fatal("ag_lstm", "layer 0: w_hh %s must be [H,4H]", w0 ? ag_shape_str(w0, sw, sizeof sw) : "NULL");
    }
    int H = w0->shape[0];
    for (int l = 0; l < num_layers; l++) {
        const ag_lstm_layer *p = &layers[l];
        check_matrix(x, p->w_hh, "w_hh", l, H, 4 * H);
        check_matrix(x, p->w_ih, "w_ih", l, l == 0 ? x->shape[2] : H, 4 * H);
        if (p->b_ih) check_matrix(x, p->b_ih, "b_ih", l, 4 * H, -1);
        if (p->b_hh) check_matrix(x, p->b_hh, "b_hh", l, 4 * H, -1);
    }
    check_state(x, o->h0, "h0", num_layers, B, H);
    check_state(x, o->c0, "c0", num_layers, B, H);
    double keep = o->keep == 0 ? 1 : o->keep;
    if (!(keep > 0 && keep <= 1)) ag__fatal("ag_lstm", "keep %g is outside (0, 1]", o->keep);
    bool dropout = o->training && keep < 1 && num_layers > 1;
    if (dropout && !o->rng) ag__fatal("ag_lstm", "dropout (keep %g) needs an rng", keep);

    int32_t *len = ag__arena_alloc((size_t)(B ? B : 1) * sizeof *len);
    int T = 0;
    for (int b = 0; b < B; b++) {
        len[b] = o->len ? o->len[b] : N;
        if (len[b] < 0 || len[b] > N) ag__fatal("ag_lstm", "len[%d] = %d is outside [0, %d]", b, (int)len[b], N);
        if (len[b] > T) T = len[b];
    }

    bool finals = o->h_n || o->c_n;
    if (finals && num_layers > AG_MAX_INPUTS)
        ag__fatal("ag_lstm", "final states of %d layers (at most %d)", num_layers, AG_MAX_INPUTS);
    ag_tensor *hn = o->h_n ? ag__empty_on(dev, 3, (int[]){num_layers, B, H}) : NULL;
    ag_tensor *cn = o->c_n ? ag__empty_on(dev, 3, (int[]){num_layers, B, H}) : NULL;
    ag_tensor *outs[AG_MAX_INPUTS];
    ag_tensor *h = o->reverse ? ag_reverse_padded(x, len) : x; /* right to left: reversed in, reversed back out */
    for (int l = 0; l < num_layers; l++) {
        h = lstm_layer(h, &layers[l], l, len, T, o->h0, o->c0, l > 0 && dropout ? keep : 1, o->rng,
                       hn ? hn->data + (int64_t)l * B * H : NULL, cn ? cn->data + (int64_t)l * B * H : NULL);
        if (finals) outs[l] = h;
    }
    if (hn) record_final(hn, outs, num_layers, false);
    if (cn) record_final(cn, outs, num_layers, true);
    if (o->h_n) *o->h_n = hn;
    if (o->c_n) *o->c_n = cn;
    return o->reverse ? ag_reverse_padded(h, len) : h;
}

/* ---- the CPU's table (ops/rnn.h; CUDA's is in ops/cuda/rnn.c) ---- */

static const ag__rnn_kernels lstm_cpu = {
    .forward = forward_cpu,
    .backward = backward_cpu,
    .copy = copy_cpu,
};
AG_DISPATCH(rnn, lstm_cpu)
