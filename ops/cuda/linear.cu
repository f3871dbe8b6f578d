/* linear.cu - the CUDA side of ops/matmul.c's linear layer beyond the
 * product (cuBLAS): the bias rows the product adds to, ag_dense's
 * activation and its derivative from the output, and the bias gradient's
 * column sums (blocks of rows, then the blocks in order: no atomics).
 * ops/cuda/matmul.c composes them with cuBLAS (ops/cuda/matmul.cuh). */
#include "../../graph/prelude.cuh"
#include "matmul.cuh"
#include "../vecmath.h"

__global__ void bias_rows_kernel(const ag_real *bias, ag_real *Y, int64_t rows, int cols) {
    AG_CUDA_FOR(i, rows * cols) Y[i] = bias ? bias[i % cols] : 0;
}

/* As matmul.c's act_row and act_grad_row. */
__global__ void act_kernel(int act, ag_real *Y, int64_t n) {
    AG_CUDA_FOR(i, n) {
        ag_real y = Y[i];
        switch (act) {
        case AG_KACT_RELU: Y[i] = y > 0 ? y : 0; break;
        case AG_KACT_ELU: Y[i] = y > 0 ? y : ag__vexpm1(y); break;
        case AG_KACT_TANH: Y[i] = ag__vtanh(y); break;
        case AG_KACT_SIGMOID: Y[i] = ag__vsigmoid(y); break;
        default: break;
        }
    }
}

__global__ void act_grad_kernel(int act, const ag_real *DY, const ag_real *Y, ag_real *G, int64_t n) {
    AG_CUDA_FOR(i, n) {
        ag_real dy = DY[i], y = Y[i];
        switch (act) {
        case AG_KACT_RELU: G[i] = y > 0 ? dy : 0; break;
        case AG_KACT_ELU: G[i] = y > 0 ? dy : dy * (y + 1); break;
        case AG_KACT_TANH: G[i] = dy * (1 - y * y); break;
        case AG_KACT_SIGMOID: G[i] = dy * (y * (1 - y)); break;
        default: G[i] = dy; break;
        }
    }
}

/* Thread per (block of rows, column): the block's rows in order. */
__global__ void col_partials_kernel(const ag_real *X, int64_t rows, int cols, int64_t blocks, ag_real *P) {
    AG_CUDA_FOR(i, blocks * cols) {
        int64_t b = i / cols, k = i - b * cols, r1 = (b + 1) * AG_KCOL_ROWS < rows ? (b + 1) * AG_KCOL_ROWS : rows;
        ag_real s = 0;
        for (int64_t r = b * AG_KCOL_ROWS; r < r1; r++) s += X[r * cols + k];
        P[i] = s;
    }
}

__global__ void col_sums_kernel(const ag_real *P, int64_t blocks, int cols, const ag_real *scale, ag_real *out) {
    AG_CUDA_FOR(k, (int64_t)cols) {
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
}

extern "C" void ag__bias_rows_cuda(const ag_real *bias, ag_real *y, int64_t rows, int cols) {
    int64_t n = rows * cols;
    if (n > 0) ag__launch(bias_rows_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, bias, y, rows, cols);
}

extern "C" void ag__act_forward_cuda(int act, ag_real *y, int64_t n) {
    if (n > 0 && act != AG_KACT_NONE)
        ag__launch(act_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, act, y, n);
}

extern "C" void ag__act_backward_cuda(int act, const ag_real *dy, const ag_real *y, ag_real *g, int64_t n) {
    if (n > 0) ag__launch(act_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, act, dy, y, g, n);
}

extern "C" void ag__col_sums_cuda(const ag_real *x, int64_t rows, int cols, const ag_real *scale, ag_real *partial,
                                  ag_real *out) {
    int64_t blocks = ag__col_blocks(rows);
    if (cols <= 0 || blocks <= 0) return;
    ag__launch(col_partials_kernel, ag__cuda_blocks(blocks * cols), AG_CUDA_THREADS, 0, x, rows, cols, blocks, partial);
    ag__launch(col_sums_kernel, ag__cuda_blocks(cols), AG_CUDA_THREADS, 0, partial, blocks, cols, scale, out);
}
