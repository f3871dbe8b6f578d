/* rnn.cu - the CUDA side of ops/rnn.c: the elementwise parts of the
 * LSTM and the GRU over packed rows (see rnn_saved there: only active rows exist,
 * time-major, step t's rows k in [off[t], off[t+1]) for the examples
 * row_b[k] in increasing order).  The products are cuBLAS's, called from
 * ops/cuda/rnn.c with the family's table.  One thread per element of a
 * row: every element is written by one thread, and the only sums (the bias
 * gradient's column sums) run in row order in one thread per column, so
 * every run gives the same bits. */
#include "../../graph/prelude.cuh"
#include "rnn.cuh"
#include "../vecmath.h"

#define FOR_ROWS(x, rows, width) AG_CUDA_FOR(x, (int64_t)(rows) * (width))

/* xin[k] = x[src[k]] (src[k] = b*N + t), times the dropout scale where kept. */
__global__ void rnn_gather_input_kernel(const ag_real *X, const int32_t *src, const uint8_t *kept, ag_real scale,
                                         ag_real *XIN, int64_t rows, int in) {
    FOR_ROWS(x, rows, in) {
        int64_t k = x / in;
        int j = (int)(x % in);
        ag_real v = X[(int64_t)src[k] * in + j];
        XIN[x] = kept ? (kept[x] ? scale * v : 0) : v;
    }
}

/* Packed row k (example row_b[k] at step src[k] % N) takes its example's
 * mask row over [T, in] at that step, as the CPU's drop_mask gathers it. */
__global__ void rnn_gather_mask_kernel(const uint8_t *by_row, const int32_t *row_b, const int32_t *src, int N, int T,
                                        int in, uint8_t *kept, int64_t rows) {
    FOR_ROWS(x, rows, in) {
        int64_t k = x / in;
        int j = (int)(x % in);
        kept[x] = by_row[((int64_t)row_b[k] * T + src[k] % N) * in + j];
    }
}

/* Every row of gates starts as b_ih + b_hh (either may be NULL). */
__global__ void rnn_bias_rows_kernel(const ag_real *B_IH, const ag_real *B_HH, ag_real *GATES, int64_t rows, int n4) {
    FOR_ROWS(x, rows, n4) {
        int j = (int)(x % n4);
        GATES[x] = (B_IH ? B_IH[j] : 0) + (B_HH ? B_HH[j] : 0);
    }
}

/* hprev, cprev of step rows k0.. : the row's state at t-1, or the layer's
 * slice of h0/c0 (0 without one) at t = 0.  The GRU's Cs and CPREV are NULL. */
__global__ void rnn_states_before_kernel(const ag_real *Hs, const ag_real *Cs, const int32_t *prev,
                                          const int32_t *row_b, const ag_real *H0, const ag_real *C0, ag_real *HPREV,
                                          ag_real *CPREV, int k0, int rows, int H) {
    FOR_ROWS(x, rows, H) {
        int64_t k = k0 + x / H;
        int j = (int)(x % H);
        int64_t p = prev[k];
        ag_real hv, cv = 0;
        if (p >= 0) {
            hv = Hs[p * H + j];
            if (CPREV) cv = Cs[p * H + j];
        } else {
            int64_t at = (int64_t)row_b[k] * H + j;
            hv = H0 ? H0[at] : 0;
            cv = C0 ? C0[at] : 0;
        }
        HPREV[k * H + j] = hv;
        if (CPREV) CPREV[k * H + j] = cv;
    }
}

/* ops/rnn.c's cell_row_forward, element j of row k: the gates activated
 * in place, c, tanh(c) and h; and what the CPU copies after the step, in
 * the same pass: h and c into the row's next row's h_{t-1} and c_{t-1}
 * (next[k] >= 0), h into the output at src[k] (the caller zeroed the rest). */
__global__ void lstm_cells_forward_kernel(ag_real *GATES, const ag_real *CPREV, ag_real *C, ag_real *Hs, ag_real *TC,
                                          const int32_t *next, const int32_t *src, ag_real *HPREV_NEXT,
                                          ag_real *CPREV_NEXT, ag_real *OUT, int k0, int rows, int H) {
    FOR_ROWS(x, rows, H) {
        int64_t k = k0 + x / H;
        int j = (int)(x % H);
        ag_real *a = GATES + k * 4 * H;
        ag_real i = ag__vsigmoid(a[j]), f = ag__vsigmoid(a[H + j]), g = ag__vtanh(a[2 * H + j]),
                o = ag__vsigmoid(a[3 * H + j]);
        a[j] = i, a[H + j] = f, a[2 * H + j] = g, a[3 * H + j] = o;
        ag_real cj = f * CPREV[k * H + j] + i * g, t = ag__vtanh(cj), hj = o * t;
        C[k * H + j] = cj;
        TC[k * H + j] = t;
        Hs[k * H + j] = hj;
        OUT[(int64_t)src[k] * H + j] = hj;
        int64_t n = next[k];
        if (n >= 0) {
            HPREV_NEXT[n * H + j] = hj;
            CPREV_NEXT[n * H + j] = cj;
        }
    }
}

/* Each example's state after its last row, or its initial state (len 0);
 * CF (and C) NULL for the GRU. */
__global__ void rnn_final_states_kernel(const ag_real *Hs, const ag_real *C, const int32_t *last, const ag_real *H0,
                                         const ag_real *C0, ag_real *HF, ag_real *CF, int B, int H) {
    FOR_ROWS(x, B, H) {
        int64_t b = x / H;
        int j = (int)(x % H);
        int64_t k = last[b];
        if (HF) HF[x] = k >= 0 ? Hs[k * H + j] : H0 ? H0[x] : 0;
        if (CF) CF[x] = k >= 0 ? C[k * H + j] : C0 ? C0[x] : 0;
    }
}

/* ops/rnn.c's cell_row_backward, element j of row k: dh and dc are by
 * example (row_b[k]), dY [B,N,H] at row src[k]; dc is updated in place.
 * dh_t from step t+1 is DH_NEXT's row next[k] - next_k0 (the product
 * dG_{t+1} W_hh^T in step t+1's row order) where the example has a row at
 * t+1, else DH's (its final state's gradient). */
__global__ void lstm_cells_backward_kernel(ag_real *DG, const ag_real *GATES, const ag_real *CPREV, const ag_real *TC,
                                           const ag_real *DH, const ag_real *DH_NEXT, const int32_t *next, int next_k0,
                                           const ag_real *DY, ag_real *DC, const int32_t *src, const int32_t *row_b,
                                           int k0, int rows, int H) {
    FOR_ROWS(x, rows, H) {
        int64_t k = k0 + x / H;
        int j = (int)(x % H);
        int64_t bj = (int64_t)row_b[k] * H + j, n = DH_NEXT ? next[k] : -1;
        const ag_real *a = GATES + k * 4 * H;
        ag_real *d = DG + k * 4 * H;
        ag_real i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j], tc = TC[k * H + j];
        ag_real dh = n >= 0 ? DH_NEXT[(n - next_k0) * H + j] : DH[bj];
        ag_real dht = dh + DY[(int64_t)src[k] * H + j];
        ag_real dct = DC[bj] + dht * o * (1 - tc * tc);
        d[j] = dct * g * i * (1 - i);
        d[H + j] = dct * CPREV[k * H + j] * f * (1 - f);
        d[2 * H + j] = dct * i * (1 - g * g);
        d[3 * H + j] = dht * tc * o * (1 - o);
        DC[bj] = dct * f;
    }
}

/* ops/rnn.c's gru_row_forward, element j of row k: AX [3H] (b_ih in it)
 * activated in place to r, z, n; AH [3H] the recurrent side (b_hh in it);
 * h into the row's h, its next row's h_{t-1} and the output at src[k]. */
__global__ void gru_cells_forward_kernel(ag_real *GATES, const ag_real *HG, ag_real *HPREV, ag_real *Hs,
                                         const int32_t *next, const int32_t *src, ag_real *OUT, int k0, int rows,
                                         int H) {
    FOR_ROWS(x, rows, H) {
        int64_t k = k0 + x / H;
        int j = (int)(x % H);
        ag_real *ax = GATES + k * 3 * H;
        const ag_real *ah = HG + k * 3 * H;
        ag_real r = ag__vsigmoid(ax[j] + ah[j]), z = ag__vsigmoid(ax[H + j] + ah[H + j]);
        ag_real n = ag__vtanh(ax[2 * H + j] + r * ah[2 * H + j]);
        ax[j] = r, ax[H + j] = z, ax[2 * H + j] = n;
        ag_real hj = n + z * (HPREV[k * H + j] - n);
        Hs[k * H + j] = hj;
        OUT[(int64_t)src[k] * H + j] = hj;
        int64_t nk = next[k];
        if (nk >= 0) HPREV[nk * H + j] = hj;
    }
}

/* ops/rnn.c's gru_row_backward, element j of row k: dL/dh_t from DH_NEXT
 * (row next[k] - next_k0, step t+1's order) or DH (by example: its final
 * state's gradient); the input side's DGX, the recurrent side's DGH, and
 * the direct part of dL/dh_{t-1}, z dL/dh_t, into DH_OUT in this step's
 * row order (the caller's GEMM adds DGH W_hh^T there). */
__global__ void gru_cells_backward_kernel(ag_real *DGX, ag_real *DGH, const ag_real *GATES, const ag_real *HG,
                                          const ag_real *HPREV, const ag_real *DH, const ag_real *DH_NEXT,
                                          const int32_t *next, int next_k0, const ag_real *DY, ag_real *DH_OUT,
                                          const int32_t *src, const int32_t *row_b, int k0, int rows, int H) {
    FOR_ROWS(x, rows, H) {
        int64_t k = k0 + x / H;
        int j = (int)(x % H);
        int64_t n_row = DH_NEXT ? next[k] : -1;
        const ag_real *a = GATES + k * 3 * H;
        ag_real r = a[j], z = a[H + j], n = a[2 * H + j];
        ag_real dh = n_row >= 0 ? DH_NEXT[(n_row - next_k0) * H + j] : DH[(int64_t)row_b[k] * H + j];
        ag_real dht = dh + DY[(int64_t)src[k] * H + j];
        ag_real dan = dht * (1 - z) * (1 - n * n);
        ag_real dar = dan * HG[k * 3 * H + 2 * H + j] * r * (1 - r);
        ag_real daz = dht * (HPREV[k * H + j] - n) * z * (1 - z);
        ag_real *dx = DGX + k * 3 * H, *dhh = DGH + k * 3 * H;
        dx[j] = dhh[j] = dar;
        dx[H + j] = dhh[H + j] = daz;
        dx[2 * H + j] = dan;
        dhh[2 * H + j] = dan * r;
        DH_OUT[(k - k0) * H + j] = dht * z;
    }
}

/* dh[row_b[k0 + r]] = dhc[r] for the step's rows. */
__global__ void rnn_scatter_rows_kernel(const ag_real *DHC, const int32_t *row_b, ag_real *DH, int k0, int rows,
                                         int H) {
    FOR_ROWS(x, rows, H) {
        int64_t r = x / H;
        int j = (int)(x % H);
        DH[(int64_t)row_b[k0 + r] * H + j] = DHC[x];
    }
}

/* Column sums of G [rows, n] in row order, added into g1 and g2 (either may be NULL). */
__global__ void rnn_column_sums_kernel(const ag_real *G, int64_t rows, int n, ag_real *G1, ag_real *G2) {
    AG_CUDA_FOR(j, n) {
        ag_real sum = 0;
        for (int64_t r = 0; r < rows; r++) sum += G[r * n + j];
        if (G1) G1[j] += sum;
        if (G2) G2[j] += sum;
    }
}

/* gx[src[k]] += dxin[k], through the dropout mask where there is one.
 * Each (b, t) is one row k at most: no two threads write one element. */
__global__ void rnn_scatter_input_grad_kernel(const ag_real *DXIN, const int32_t *src, const uint8_t *kept,
                                               ag_real scale, ag_real *GX, int64_t rows, int in) {
    FOR_ROWS(x, rows, in) {
        int64_t k = x / in;
        int j = (int)(x % in);
        ag_real *dst = GX + (int64_t)src[k] * in + j;
        *dst += kept ? (kept[x] ? scale * DXIN[x] : 0) : DXIN[x];
    }
}

extern "C" void ag__rnn_gather_input_cuda(const ag_real *x, const int32_t *src, const uint8_t *kept, ag_real scale,
                                           ag_real *xin, int64_t rows, int in) {
    if (rows * in > 0)
        ag__launch(rnn_gather_input_kernel, ag__cuda_blocks(rows * in), AG_CUDA_THREADS, 0, x, src, kept, scale, xin,
                   rows, in);
}

extern "C" void ag__rnn_gather_mask_cuda(const uint8_t *by_row, const int32_t *row_b, const int32_t *src, int N, int T,
                                          int in, uint8_t *kept, int64_t rows) {
    if (rows * in > 0)
        ag__launch(rnn_gather_mask_kernel, ag__cuda_blocks(rows * in), AG_CUDA_THREADS, 0, by_row, row_b, src, N, T,
                   in, kept, rows);
}

extern "C" void ag__rnn_bias_rows_cuda(const ag_real *b_ih, const ag_real *b_hh, ag_real *gates, int64_t rows,
                                        int n4) {
    if (rows * n4 > 0)
        ag__launch(rnn_bias_rows_kernel, ag__cuda_blocks(rows * n4), AG_CUDA_THREADS, 0, b_ih, b_hh, gates, rows, n4);
}

extern "C" void ag__rnn_states_before_cuda(const ag_real *h, const ag_real *c, const int32_t *prev,
                                            const int32_t *row_b, const ag_real *h0, const ag_real *c0, ag_real *hprev,
                                            ag_real *cprev, int k0, int rows, int H) {
    if ((int64_t)rows * H > 0)
        ag__launch(rnn_states_before_kernel, ag__cuda_blocks((int64_t)rows * H), AG_CUDA_THREADS, 0, h, c, prev, row_b,
                   h0, c0, hprev, cprev, k0, rows, H);
}

extern "C" void ag__lstm_cells_forward_cuda(ag_real *gates, ag_real *cprev, ag_real *c, ag_real *h, ag_real *tc,
                                            const int32_t *next, const int32_t *src, ag_real *hprev, ag_real *out,
                                            int k0, int rows, int H) {
    if ((int64_t)rows * H > 0)
        ag__launch(lstm_cells_forward_kernel, ag__cuda_blocks((int64_t)rows * H), AG_CUDA_THREADS, 0, gates,
                   (const ag_real *)cprev, c, h, tc, next, src, hprev, cprev, out, k0, rows, H);
}

extern "C" void ag__rnn_final_states_cuda(const ag_real *h, const ag_real *c, const int32_t *last, const ag_real *h0,
                                           const ag_real *c0, ag_real *h_final, ag_real *c_final, int B, int H) {
    if ((int64_t)B * H > 0 && (h_final || c_final))
        ag__launch(rnn_final_states_kernel, ag__cuda_blocks((int64_t)B * H), AG_CUDA_THREADS, 0, h, c, last, h0, c0,
                   h_final, c_final, B, H);
}

extern "C" void ag__lstm_cells_backward_cuda(ag_real *dG, const ag_real *gates, const ag_real *cprev, const ag_real *tc,
                                             const ag_real *dh, const ag_real *dh_next, const int32_t *next, int next_k0,
                                             const ag_real *dY, ag_real *dc, const int32_t *src, const int32_t *row_b,
                                             int k0, int rows, int H) {
    if ((int64_t)rows * H > 0)
        ag__launch(lstm_cells_backward_kernel, ag__cuda_blocks((int64_t)rows * H), AG_CUDA_THREADS, 0, dG, gates, cprev,
                   tc, dh, dh_next, next, next_k0, dY, dc, src, row_b, k0, rows, H);
}

extern "C" void ag__rnn_scatter_rows_cuda(const ag_real *dhc, const int32_t *row_b, ag_real *dh, int k0, int rows,
                                           int H) {
    if ((int64_t)rows * H > 0)
        ag__launch(rnn_scatter_rows_kernel, ag__cuda_blocks((int64_t)rows * H), AG_CUDA_THREADS, 0, dhc, row_b, dh, k0,
                   rows, H);
}

extern "C" void ag__rnn_column_sums_cuda(const ag_real *G, int64_t rows, int n, ag_real *g1, ag_real *g2) {
    if (n > 0 && (g1 || g2))
        ag__launch(rnn_column_sums_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, G, rows, n, g1, g2);
}

extern "C" void ag__rnn_scatter_input_grad_cuda(const ag_real *dxin, const int32_t *src, const uint8_t *kept,
                                                 ag_real scale, ag_real *gx, int64_t rows, int in) {
    if (rows * in > 0)
        ag__launch(rnn_scatter_input_grad_kernel, ag__cuda_blocks(rows * in), AG_CUDA_THREADS, 0, dxin, src, kept,
                   scale, gx, rows, in);
}

extern "C" void ag__gru_cells_forward_cuda(ag_real *gates, const ag_real *hg, ag_real *hprev, ag_real *h,
                                           const int32_t *next, const int32_t *src, ag_real *out, int k0, int rows,
                                           int H) {
    if ((int64_t)rows * H > 0)
        ag__launch(gru_cells_forward_kernel, ag__cuda_blocks((int64_t)rows * H), AG_CUDA_THREADS, 0, gates, hg, hprev,
                   h, next, src, out, k0, rows, H);
}

extern "C" void ag__gru_cells_backward_cuda(ag_real *dGx, ag_real *dGh, const ag_real *gates, const ag_real *hg,
                                            const ag_real *hprev, const ag_real *dh, const ag_real *dh_next,
                                            const int32_t *next, int next_k0, const ag_real *dY, ag_real *dh_out,
                                            const int32_t *src, const int32_t *row_b, int k0, int rows, int H) {
    if ((int64_t)rows * H > 0)
        ag__launch(gru_cells_backward_kernel, ag__cuda_blocks((int64_t)rows * H), AG_CUDA_THREADS, 0, dGx, dGh, gates,
                   hg, hprev, dh, dh_next, next, next_k0, dY, dh_out, src, row_b, k0, rows, H);
}
