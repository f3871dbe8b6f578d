/* rnn.c - the LSTM's CUDA table (ops/rnn.h): the CPU's structure on
 * cuBLAS.  The same packed rows (the index is built on the host from the
 * host lengths, as in ops/rnn.c, and copied once per layer), the input
 * projection of every step as one GEMM, then per step one [B_t,H] x [H,4H]
 * GEMM and one fused cell kernel (ops/cuda/rnn.cu), which also hands h
 * and c to the example's next row and h to the output: two launches a
 * step, where a gather of the states before each step took a third.
 * Backward through time likewise: per step the cell kernel and one GEMM
 * for dh_{t-1} (read by the next cell kernel in the GEMM's row order, no
 * scatter), and the weights' gradients as one GEMM each over all rows.  Dropout's mask is the CPU's, bit for bit, drawn on
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

static void forward(ag__krnn *s, const ag__krnn_args *a, ag_real *c, ag_real *out, ag_real *h_final,
                    ag_real *c_final, double keep, ag_rng *rng) {
    int B = a->B, N = a->N, in = a->in, H = a->H, T = s->T;
    int64_t na = s->na;
    const int32_t *dev_idx = upload_index(s, B, N);
    const int32_t *prev_dev = dev_idx + 2 * na, *last_dev = dev_idx + 4 * na;
    if (rng) { /* drop_mask's mask, drawn on the device per example over [T, in], then put in packed order */
        int64_t row_len = (int64_t)T * in;
        uint8_t *by_row = ag__cuda_arena_alloc((size_t)(B * row_len + 1));
        ag__dropout_mask_device(by_row, B, row_len, keep, rng);
        ag__rnn_gather_mask_cuda(by_row, s->row_b_dev, s->src_dev, N, T, in, s->kept, na);
    }

    /* the active rows of the input, the biases, the hoisted input projection */
    ag__rnn_gather_input_cuda(a->x, s->src_dev, s->kept, s->scale, s->xin, na, in);
    ag__rnn_bias_rows_cuda(a->b_ih, a->b_hh, s->gates, na, 4 * H);
    if (na > 0 && H > 0 && in > 0)
        ag__cuda_gemm(false, false, (int)na, 4 * H, in, 1, s->xin, in, a->w_ih, 4 * H, 1, s->gates, 4 * H);
    /* Step 0's states come from h0/c0 (zeros without them); each later
     * step's are written by the cells of the step before, into the row's
     * next row (s->next_dev), with its output: two launches a step. */
    ag__cuda_zero(out, (size_t)B * N * H * sizeof(ag_real)); /* zeros past each length */
    if (T > 0) ag__lstm_states_before_cuda(s->h, c, prev_dev, s->row_b_dev, a->h0, a->c0, s->hprev, s->cprev, 0, s->off[1], H);
    for (int t = 0; t < T; t++) {
        int k0 = s->off[t], ba = s->off[t + 1] - k0;
        if ((t > 0 || a->h0) && H > 0) /* h_{-1} = 0 without h0: its product would add exact zeros */
            ag__cuda_gemm(false, false, ba, 4 * H, H, 1, s->hprev + (int64_t)k0 * H, H, a->w_hh, 4 * H, 1,
                          s->gates + (int64_t)k0 * 4 * H, 4 * H);
        ag__lstm_cells_forward_cuda(s->gates, s->cprev, c, s->h, s->tc, s->next_dev, s->src_dev, s->hprev, out, k0, ba,
                                    H);
    }
    ag__lstm_final_states_cuda(s->h, c, last_dev, a->h0, a->c0, h_final, c_final, B, H);
}

static void backward(ag__krnn *s, const ag__krnn_args *a, const ag_real *dY, const ag__krnn_grads *g) {
    int B = a->B, in = a->in, H = a->H, T = s->T, na = s->na;
    size_t bh = (size_t)B * H * sizeof(ag_real);
    ag_real *dG = ag__cuda_arena_alloc((size_t)((int64_t)na * 4 * H + 1) * sizeof(ag_real));
    ag_real *dh = ag__cuda_arena_alloc(bh + 1), *dc = ag__cuda_arena_alloc(bh + 1);
    ag_real *dhc = ag__cuda_arena_alloc(bh + 1);
    /* the final states' gradients enter each example's last step (consumed, as on the CPU) */
    if (s->dh_final) ag__cuda_copy(dh, AG_CUDA, s->dh_final, AG_CUDA, bh);
    else ag__cuda_zero(dh, bh);
    if (s->dc_final) ag__cuda_copy(dc, AG_CUDA, s->dc_final, AG_CUDA, bh);
    else ag__cuda_zero(dc, bh);
    s->dh_final = s->dc_final = NULL;
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
        ag__cuda_gemm(false, true, ba, H, 4 * H, 1, dG + (int64_t)k0 * 4 * H, 4 * H, a->w_hh, 4 * H, 0, dhc, H);
        if (t == 0) ag__rnn_scatter_rows_cuda(dhc, s->row_b_dev, dh, 0, ba, H); /* h0's gradient, by example */
    }
    if (g->h0) ag__elementwise_cuda.add_into(g->h0, dh, (int64_t)B * H);
    if (g->c0) ag__elementwise_cuda.add_into(g->c0, dc, (int64_t)B * H);

    /* the weights over all rows at once (without h0, t = 0 adds nothing to dW_hh) */
    int from = a->h0 || T == 0 ? 0 : s->off[1];
    bool gemms = H > 0 && na > 0;
    if (g->w_hh && gemms && na > from)
        ag__cuda_gemm(true, false, H, 4 * H, na - from, 1, s->hprev + (int64_t)from * H, H, dG + (int64_t)from * 4 * H,
                      4 * H, 1, g->w_hh, 4 * H);
    if (g->w_ih && gemms && in > 0)
        ag__cuda_gemm(true, false, in, 4 * H, na, 1, s->xin, in, dG, 4 * H, 1, g->w_ih, 4 * H);
    if (g->b_ih || g->b_hh) ag__rnn_column_sums_cuda(dG, na, 4 * H, g->b_ih, g->b_hh);
    if (g->x && gemms && in > 0) { /* dx of the active rows; a frozen row's is 0 */
        ag_real *dxin = ag__cuda_arena_alloc((size_t)((int64_t)na * in + 1) * sizeof(ag_real));
        ag__cuda_gemm(false, true, na, in, 4 * H, 1, dG, 4 * H, a->w_ih, 4 * H, 0, dxin, in);
        ag__rnn_scatter_input_grad_cuda(dxin, s->src_dev, s->kept, s->scale, g->x, na, in);
    }
}

static void copy(ag_real *dst, const ag_real *src, int64_t n) {
    ag__cuda_copy(dst, AG_CUDA, src, AG_CUDA, (size_t)n * sizeof(ag_real));
}

const ag__rnn_kernels ag__rnn_cuda = {
    .forward = forward,
    .backward = backward,
    .copy = copy,
};
