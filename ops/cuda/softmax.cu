/* softmax.cu - the CUDA side of ops/softmax.c: softmax over the last axis.
 * A warp per row: the row's max, sum of exponentials and (backward) the
 * dot product g.y are warp reductions in a fixed order. */
#include "prelude.cuh"
#include "../vecmath.h"

__device__ static inline ag_real warp_max(ag_real v) {
    for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ static inline ag_real warp_sum(ag_real v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

enum { ROWS_PER_BLOCK = 8 };

__global__ void softmax_rows_kernel(const ag_real *X, ag_real *Y, int64_t rows, int cols) {
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (r >= rows) return;
    const ag_real *x = X + r * cols;
    ag_real *y = Y + r * cols;
    ag_real m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += 32) m = fmax(m, x[c]);
    m = warp_max(m);
    ag_real s = 0;
    for (int c = threadIdx.x; c < cols; c += 32) {
        ag_real e = exp(x[c] - m);
        y[c] = e;
        s += e;
    }
    s = warp_sum(s);
    for (int c = threadIdx.x; c < cols; c += 32) y[c] /= s;
}

__global__ void softmax_rows_grad_kernel(const ag_real *Y, const ag_real *G, ag_real *GX, int64_t rows, int cols,
                                         bool fresh) {
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
    if (r >= rows) return;
    const ag_real *y = Y + r * cols, *g = G + r * cols;
    ag_real *gx = GX + r * cols;
    ag_real dot = 0;
    for (int c = threadIdx.x; c < cols; c += 32) dot += g[c] * y[c];
    dot = warp_sum(dot);
    for (int c = threadIdx.x; c < cols; c += 32) {
        ag_real d = y[c] * (g[c] - dot);
        gx[c] = fresh ? d : gx[c] + d;
    }
}

static unsigned row_blocks(int64_t rows) { return (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

extern "C" void ag__softmax_rows_forward_cuda(const ag_real *x, ag_real *y, int64_t rows, int cols) {
    if (rows > 0 && cols > 0)
        softmax_rows_kernel<<<row_blocks(rows), dim3(32, ROWS_PER_BLOCK), 0, ag__cuda_stream()>>>(x, y, rows, cols);
}

extern "C" void ag__softmax_rows_backward_cuda(const ag_real *y, const ag_real *g, ag_real *gx, int64_t rows, int cols,
                                               bool fresh) {
    if (rows > 0 && cols > 0)
        softmax_rows_grad_kernel<<<row_blocks(rows), dim3(32, ROWS_PER_BLOCK), 0, ag__cuda_stream()>>>(y, g, gx, rows,
                                                                                                      cols, fresh);
}
