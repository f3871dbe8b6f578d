/* rnn.c - the recurrent layers' CUDA table (ops/rnn.h): the CPU's
 * structure on cuBLAS.  The same packed rows (the index is built on the
 * host from the host lengths, as in ops/rnn.c, and copied once per layer),
 * the input projection of every step as one GEMM, then per step one
 * [B_t,H] x [H,GH] GEMM and one fused cell kernel (ops/cuda/rnn.cu), which
 * also hands h (and the LSTM's c) to the example's next row and h to the
 * output: two launches a step, where a gather of the states before each
 * step took a third.  Backward through time likewise: per step the cell
 * kernel and one GEMM for dh_{t-1} (read by the next cell kernel in the
 * GEMM's row order, no scatter), and the weights' gradients as one GEMM
 * each over all rows.  Dropout's mask is the CPU's, bit for bit, drawn on
 * the device (ops/dropout_mask.h) and put in packed order there.  Compiled
 * only in CUDA builds. */
#include "../dispatch.h"
#include "../rnn.h"
#include "../../graph/device.h"
#include "rnn.cuh"
#include "../elementwise.h"

/* The kernels' index in one copy: row_b [na], src [na], prev [na], next
 * [na] (row k's row at t+1, or -1: inverse of prev), last [B]; s keeps
 * row_b's and src's, the others are the forward's. */
static const int32_t *upload_index(ag__krnn *s, int B, int N) {
    int64_t na = s->na;
    int32_t *idx = ag__arena_alloc((size_t)(4 * na + B + 1) * sizeof *idx);
    memcpy(idx, s->row_b, (size_t)na * sizeof *idx);
    for (int t = 0; t < s->T; t++)
        for (int k = s->off[t]; k < s->off[t + 1]; k++) idx[na + k] = s->row_b[k] * N + t;
    memcpy(idx + 2 * na, s->prev, (size_t)na * sizeof *idx);
    int32_t *next = idx + 3 * na;
    for (int64_t k = 0; k < na; k++) next[k] = -1;
    for (int64_t k = 0; k < na; k++)
        if (s->prev[k] >= 0) next[s->prev[k]] = (int32_t)k;
    memcpy(idx + 4 * na, s->last, (size_t)B * sizeof *idx);
    const int32_t *dev_idx = ag__to_device_i32(idx, 4 * na + B);
    s->row_b_dev = dev_idx;
    s->src_dev = dev_idx + na;
    s->next_dev = dev_idx + 3 * na;
    return dev_idx;
}

/* The hoisted input projection, as the CPU's: the dropout mask drawn on
 * the device per example over [T, in] and put in packed order, the active
 * rows of x, then gates [na,GH] = b1 + b2 + xin W_ih. */
static void input_projection(ag__krnn *s, const ag__krnn_args *a, int GH, const ag_real *b1, const ag_real *b2,
                             double keep, ag_rng *rng) {
    int B = a->B, N = a->N, in = a->in, T = s->T;
    int64_t na = s->na;
    if (rng) {
        int64_t row_len = (int64_t)T * in;
        uint8_t *by_row = ag__cuda_arena_alloc((size_t)(B * row_len + 1));
        ag__dropout_mask_device(by_row, B, row_len, keep, rng);
        ag__rnn_gather_mask_cuda(by_row, s->row_b_dev, s->src_dev, N, T, in, s->kept, na);
    }
    ag__rnn_gather_input_cuda(a->x, s->src_dev, s->kept, s->scale, s->xin, na, in);
    ag__rnn_bias_rows_cuda(b1, b2, s->gates, na, GH);
    if (na > 0 && GH > 0 && in > 0)
        ag__cuda_gemm(false, false, (int)na, GH, in, 1, s->xin, in, a->w_ih, GH, 1, s->gates, GH);
}

/* dst [rows, GH] += hprev [rows, H] W_hh. */
static void recurrent_product(int rows, const ag_real *hprev, const ag__krnn_args *a, int GH, ag_real *dst) {
    if (a->H > 0) ag__cuda_gemm(false, false, rows, GH, a->H, 1, hprev, a->H, a->w_hh, GH, 1, dst, GH);
}

/* dst [rows, H] = dG [rows, GH] W_hh^T, or += when add. */
static void recurrent_product_back(int rows, const ag_real *dG, const ag__krnn_args *a, int GH, bool add,
                                   ag_real *dst) {
    if (a->H > 0) ag__cuda_gemm(false, true, rows, a->H, GH, 1, dG, GH, a->w_hh, GH, add ? 1 : 0, dst, a->H);
}

/* dh [B,H]: the final states' gradients entering each example's last step
 * (consumed, as on the CPU), or zeros. */
static ag_real *final_state_grad(ag_real **from, int B, int H) {
    size_t bh = (size_t)B * H * sizeof(ag_real);
    ag_real *d = ag__cuda_arena_alloc(bh + 1);
    if (*from) ag__cuda_copy(d, AG_CUDA, *from, AG_CUDA, bh);
    else ag__cuda_zero(d, bh);
    *from = NULL;
    return d;
}

/* The weights' gradients over all rows at once (without h0, t = 0 adds
 * nothing to dW_hh), the biases' and dx of the active rows (a frozen
 * row's is 0); the LSTM's dGx and dGh are one array. */
static void weight_and_input_grads(const ag__krnn *s, const ag__krnn_args *a, const ag_real *dGx, const ag_real *dGh,
                                   int GH, const ag__krnn_grads *g) {
    int in = a->in, H = a->H, na = s->na;
    int from = a->h0 || s->T == 0 ? 0 : s->off[1];
    bool gemms = H > 0 && na > 0;
    if (g->w_hh && gemms && na > from)
        ag__cuda_gemm(true, false, H, GH, na - from, 1, s->hprev + (int64_t)from * H, H, dGh + (int64_t)from * GH, GH, 1,
                      g->w_hh, GH);
    if (g->w_ih && gemms && in > 0) ag__cuda_gemm(true, false, in, GH, na, 1, s->xin, in, dGx, GH, 1, g->w_ih, GH);
    if (dGx == dGh) {
        if (g->b_ih || g->b_hh) ag__rnn_column_sums_cuda(dGx, na, GH, g->b_ih, g->b_hh);
    } else {
        if (g->b_ih) ag__rnn_column_sums_cuda(dGx, na, GH, g->b_ih, NULL);
        if (g->b_hh) ag__rnn_column_sums_cuda(dGh, na, GH, g->b_hh, NULL);
    }
    if (g->x && gemms && in > 0) {
        ag_real *dxin = ag__cuda_arena_alloc((size_t)((int64_t)na * in + 1) * sizeof(ag_real));
        ag__cuda_gemm(false, true, na, in, GH, 1, dGx, GH, a->w_ih, GH, 0, dxin, in);
        ag__rnn_scatter_input_grad_cuda(dxin, s->src_dev, s->kept, s->scale, g->x, na, in);
    }
}

/* ---- the LSTM ---- */

static void lstm_forward(ag__krnn *s, const ag__krnn_args *a, ag_real *c, ag_real *out, ag_real *h_final,
                         ag_real *c_final, double keep, ag_rng *rng) {
    int B = a->B, N = a->N, H = a->H, T = s->T;
    int64_t na = s->na;
    const int32_t *dev_idx = upload_index(s, B, N);
    const int32_t *prev_dev = dev_idx + 2 * na, *last_dev = dev_idx + 4 * na;
    input_projection(s, a, 4 * H, a->b_ih, a->b_hh, keep, rng);
    /* Step 0's states come from h0/c0 (zeros without them); each later
     * step's are written by the cells of the step before, into the row's
     * next row (s->next_dev), with its output: two launches a step. */
    ag__cuda_zero(out, (size_t)B * N * H * sizeof(ag_real)); /* zeros past each length */
    if (T > 0) ag__rnn_states_before_cuda(s->h, c, prev_dev, s->row_b_dev, a->h0, a->c0, s->hprev, s->cprev, 0, s->off[1], H);
    for (int t = 0; t < T; t++) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        if (t > 0 || a->h0) /* h_{-1} = 0 without h0: its product would add exact zeros */
            recurrent_product(ba, s->hprev + (int64_t)k0 * H, a, 4 * H, s->gates + (int64_t)k0 * 4 * H);
        ag__lstm_cells_forward_cuda(s->gates, s->cprev, c, s->h, s->tc, s->next_dev, s->src_dev, s->hprev, out, k0, ba,
                                    H);
    }
    ag__rnn_final_states_cuda(s->h, c, last_dev, a->h0, a->c0, h_final, c_final, B, H);
}

static void lstm_backward(ag__krnn *s, const ag__krnn_args *a, const ag_real *dY, const ag__krnn_grads *g) {
    int B = a->B, H = a->H, T = s->T, na = s->na;
    ag_real *dG = ag__cuda_arena_alloc((size_t)((int64_t)na * 4 * H + 1) * sizeof(ag_real));
    ag_real *dh = final_state_grad(&s->dh_final, B, H), *dc = final_state_grad(&s->dc_final, B, H);
    ag_real *dhc = ag__cuda_arena_alloc((size_t)B * H * sizeof(ag_real) + 1);
    /* dh_{t-1} = dG_t W_hh^T goes to dhc in step t's row order, where the
     * cells of step t-1 read it through each row's next row (an example
     * with no row at t holds its final state's gradient in dh): no scatter
     * a step. */
    for (int t = T - 1; t >= 0; t--) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        const ag_real *dh_next = t + 1 < T ? dhc : NULL; /* none after the last step */
        ag__lstm_cells_backward_cuda(dG, s->gates, s->cprev, s->tc, dh, dh_next, s->next_dev, t + 1 < T ? s->off[t + 1] : 0,
                                     dY, dc, s->src_dev, s->row_b_dev, k0, ba, H);
        if (!(t > 0 || g->h0) || H == 0) continue;
        recurrent_product_back(ba, dG + (int64_t)k0 * 4 * H, a, 4 * H, false, dhc);
        if (t == 0) ag__rnn_scatter_rows_cuda(dhc, s->row_b_dev, dh, 0, ba, H); /* h0's gradient, by example */
    }
    if (g->h0) ag__elementwise_cuda.add_into(g->h0, dh, (int64_t)B * H);
    if (g->c0) ag__elementwise_cuda.add_into(g->c0, dc, (int64_t)B * H);
    weight_and_input_grads(s, a, dG, dG, 4 * H, g);
}

/* ---- the GRU ---- */

static void gru_forward(ag__krnn *s, const ag__krnn_args *a, ag_real *out, ag_real *h_final, double keep,
                        ag_rng *rng) {
    int B = a->B, N = a->N, H = a->H, T = s->T;
    int64_t na = s->na;
    const int32_t *dev_idx = upload_index(s, B, N);
    const int32_t *prev_dev = dev_idx + 2 * na, *last_dev = dev_idx + 4 * na;
    input_projection(s, a, 3 * H, a->b_ih, NULL, keep, rng);
    ag__rnn_bias_rows_cuda(a->b_hh, NULL, s->hg, na, 3 * H); /* the recurrent side starts at b_hh */
    ag__cuda_zero(out, (size_t)B * N * H * sizeof(ag_real));
    if (T > 0) ag__rnn_states_before_cuda(s->h, NULL, prev_dev, s->row_b_dev, a->h0, NULL, s->hprev, NULL, 0, s->off[1], H);
    for (int t = 0; t < T; t++) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        if (t > 0 || a->h0) recurrent_product(ba, s->hprev + (int64_t)k0 * H, a, 3 * H, s->hg + (int64_t)k0 * 3 * H);
        ag__gru_cells_forward_cuda(s->gates, s->hg, s->hprev, s->h, s->next_dev, s->src_dev, out, k0, ba, H);
    }
    ag__rnn_final_states_cuda(s->h, NULL, last_dev, a->h0, NULL, h_final, NULL, B, H);
}

/* As the LSTM's, with two buffers for dL/dh_{t-1} in step t's row order:
 * the cells of step t write its direct part (z dL/dh_t) into one while
 * they read step t+1's from the other, and the GEMM adds dGh_t W_hh^T. */
static void gru_backward(ag__krnn *s, const ag__krnn_args *a, const ag_real *dY, const ag__krnn_grads *g) {
    int B = a->B, H = a->H, T = s->T, na = s->na;
    size_t gates = (size_t)((int64_t)na * 3 * H + 1) * sizeof(ag_real), bh = (size_t)B * H * sizeof(ag_real) + 1;
    ag_real *dGx = ag__cuda_arena_alloc(gates), *dGh = ag__cuda_arena_alloc(gates);
    ag_real *dh = final_state_grad(&s->dh_final, B, H);
    ag_real *dhc[2] = {ag__cuda_arena_alloc(bh), ag__cuda_arena_alloc(bh)};
    for (int t = T - 1; t >= 0; t--) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        ag_real *cur = dhc[t & 1];
        const ag_real *dh_next = t + 1 < T ? dhc[(t + 1) & 1] : NULL;
        ag__gru_cells_backward_cuda(dGx, dGh, s->gates, s->hg, s->hprev, dh, dh_next, s->next_dev,
                                    t + 1 < T ? s->off[t + 1] : 0, dY, cur, s->src_dev, s->row_b_dev, k0, ba, H);
        if (!(t > 0 || g->h0) || H == 0) continue;
        recurrent_product_back(ba, dGh + (int64_t)k0 * 3 * H, a, 3 * H, true, cur);
        if (t == 0) ag__rnn_scatter_rows_cuda(cur, s->row_b_dev, dh, 0, ba, H);
    }
    if (g->h0) ag__elementwise_cuda.add_into(g->h0, dh, (int64_t)B * H);
    weight_and_input_grads(s, a, dGx, dGh, 3 * H, g);
}

static void copy(ag_real *dst, const ag_real *src, int64_t n) {
    ag__cuda_copy(dst, AG_CUDA, src, AG_CUDA, (size_t)n * sizeof(ag_real));
}

const ag__rnn_kernels ag__rnn_cuda = {
    .lstm_forward = lstm_forward,
    .lstm_backward = lstm_backward,
    .gru_forward = gru_forward,
    .gru_backward = gru_backward,
    .copy = copy,
};
