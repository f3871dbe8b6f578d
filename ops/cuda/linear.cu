/* linear.cu - the CUDA side of ops/matmul.c's linear layer beyond the
 * product (cuBLAS): the bias and ag_dense's activation added to the
 * product in one pass, the activation's derivative from the output, and the
 * bias gradient's column sums (blocks of rows, then the blocks in order, in
 * one launch: the last block to finish adds them), with the derivative in
 * the same pass when there is one.
 * ops/cuda/matmul.c composes them with cuBLAS (ops/cuda/matmul.cuh). */
#include "../../graph/prelude.cuh"
#include "matmul.cuh"
#include "../vecmath.h"

__global__ void bias_rows_kernel(const ag_real *bias, ag_real *Y, int64_t rows, int cols) {
    AG_CUDA_FOR(i, rows * cols) Y[i] = bias ? bias[i % cols] : 0;
}

/* As matmul.c's act_row and act_grad_row (the gradient from the output y). */
__device__ static inline ag_real act_of(int act, ag_real y) {
    switch (act) {
    case AG_KACT_RELU: return y > 0 ? y : 0;
    case AG_KACT_ELU: return y > 0 ? y : ag__vexpm1(y);
    case AG_KACT_TANH: return ag__vtanh(y);
    case AG_KACT_SIGMOID: return ag__vsigmoid(y);
    default: return y;
    }
}

__device__ static inline ag_real act_grad_of(int act, ag_real dy, ag_real y) {
    switch (act) {
    case AG_KACT_RELU: return y > 0 ? dy : 0;
    case AG_KACT_ELU: return y > 0 ? dy : dy * (y + 1);
    case AG_KACT_TANH: return dy * (1 - y * y);
    case AG_KACT_SIGMOID: return dy * (y * (1 - y));
    default: return dy;
    }
}

/* y = act(y + bias) after the product (bias NULL: act only): one pass for
 * both, where a bias fill before the product and the activation after it
 * were two launches. */
__global__ void bias_act_kernel(const ag_real *bias, int act, ag_real *Y, int64_t rows, int cols) {
    AG_CUDA_FOR(i, rows * cols) Y[i] = act_of(act, bias ? Y[i] + bias[i % cols] : Y[i]);
}

__global__ void act_grad_kernel(int act, const ag_real *DY, const ag_real *Y, ag_real *G, int64_t n) {
    AG_CUDA_FOR(i, n) G[i] = act_grad_of(act, DY[i], Y[i]);
}

/* The end of a column-sum kernel: the last of its blocks to finish adds
 * the partial sums P [blocks, cols] into out in block order, as the CPU
 * does (out + P[0] + P[1] + ...; with scale, out + *scale (P[0] + P[1] +
 * ...)), and sets the ticket counter back to zero for the next kernel.
 * Each block counts itself once its partials are visible to the others
 * (the fence), so the last one reads them all; the rest return.  One
 * launch where a second kernel over the partials was another. */
__device__ static void add_partials_in_last_block(const volatile ag_real *P, int64_t blocks, int cols,
                                                  const ag_real *scale, ag_real *out, unsigned *tickets) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(tickets, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    for (int k = (int)threadIdx.x; k < cols; k += (int)blockDim.x) {
        if (!scale) {
            ag_real acc = out[k];
            for (int64_t b = 0; b < blocks; b++) acc += P[b * cols + k];
            out[k] = acc;
        } else {
            ag_real s = 0;
            for (int64_t b = 0; b < blocks; b++) s += P[b * cols + k];
            out[k] += *scale * s;
        }
    }
    if (threadIdx.x == 0) *tickets = 0;
}

/* act_grad_kernel and the column sums in one pass (ag_dense's backward
 * with a bias): each thread writes its column of G over its block of rows
 * and sums it, in the same order; out += the sums. */
__global__ void act_grad_col_sums_kernel(int act, const ag_real *DY, const ag_real *Y, ag_real *G, int64_t rows,
                                         int cols, int64_t blocks, ag_real *P, unsigned *tickets, ag_real *out) {
    AG_CUDA_FOR(i, blocks * cols) {
        int64_t b = i / cols, k = i - b * cols, r1 = (b + 1) * AG_KCOL_ROWS < rows ? (b + 1) * AG_KCOL_ROWS : rows;
        ag_real s = 0;
        for (int64_t r = b * AG_KCOL_ROWS; r < r1; r++) {
            ag_real g = act_grad_of(act, DY[r * cols + k], Y[r * cols + k]);
            G[r * cols + k] = g;
            s += g;
        }
        P[i] = s;
    }
    add_partials_in_last_block(P, blocks, cols, NULL, out, tickets);
}

/* Thread per (block of rows, column): the block's rows in order; then
 * out (+)= the sums. */
__global__ void col_sums_kernel(const ag_real *X, int64_t rows, int cols, int64_t blocks, const ag_real *scale,
                                ag_real *P, unsigned *tickets, ag_real *out) {
    AG_CUDA_FOR(i, blocks * cols) {
        int64_t b = i / cols, k = i - b * cols, r1 = (b + 1) * AG_KCOL_ROWS < rows ? (b + 1) * AG_KCOL_ROWS : rows;
        ag_real s = 0;
        for (int64_t r = b * AG_KCOL_ROWS; r < r1; r++) s += X[r * cols + k];
        P[i] = s;
    }
    add_partials_in_last_block(P, blocks, cols, scale, out, tickets);
}

extern "C" void ag__bias_rows_cuda(const ag_real *bias, ag_real *y, int64_t rows, int cols) {
    int64_t n = rows * cols;
    if (n > 0) ag__launch(bias_rows_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, bias, y, rows, cols);
}

extern "C" void ag__bias_act_cuda(const ag_real *bias, int act, ag_real *y, int64_t rows, int cols) {
    int64_t n = rows * cols;
    if (n > 0 && (bias || act != AG_KACT_NONE))
        ag__launch(bias_act_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, bias, act, y, rows, cols);
}

extern "C" void ag__act_backward_cuda(int act, const ag_real *dy, const ag_real *y, ag_real *g, int64_t n) {
    if (n > 0) ag__launch(act_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, act, dy, y, g, n);
}

extern "C" void ag__act_backward_col_sums_cuda(int act, const ag_real *dy, const ag_real *y, ag_real *g, int64_t rows,
                                               int cols, ag_real *partial, ag_real *out) {
    int64_t blocks = ag__col_blocks(rows);
    if (cols <= 0 || blocks <= 0) return;
    ag__launch(act_grad_col_sums_kernel, ag__cuda_blocks(blocks * cols), AG_CUDA_THREADS, 0, act, dy, y, g, rows, cols,
               blocks, partial, ag__cuda_block_tickets(), out);
}

extern "C" void ag__col_sums_cuda(const ag_real *x, int64_t rows, int cols, const ag_real *scale, ag_real *partial,
                                  ag_real *out) {
    int64_t blocks = ag__col_blocks(rows);
    if (cols <= 0 || blocks <= 0) return;
    ag__launch(col_sums_kernel, ag__cuda_blocks(blocks * cols), AG_CUDA_THREADS, 0, x, rows, cols, blocks, scale,
               partial, ag__cuda_block_tickets(), out);
}
