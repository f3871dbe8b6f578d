/* layernorm.cu - the CUDA side of ops/layernorm.c: a warp per row for the
 * forward and dx (mean, variance and the backward's two means are warp
 * reductions in a fixed order); gamma's and beta's gradients a thread per
 * column, adding the rows in order as the CPU does - no atomics.  A NULL
 * row_mean is RMS normalisation (ops/layernorm.h): mean 0, no centring. */
#include "../../graph/prelude.cuh"
#include "../layernorm.h"

__global__ void layernorm_rows_kernel(const ag_real *X, const ag_real *gamma, const ag_real *beta, ag_real eps,
                                      ag_real *Y, ag_real *row_mean, ag_real *row_rstd, int64_t rows, int D) {
    AG_CUDA_WARP_ROW(r, rows);
    const ag_real *x = X + r * D;
    ag_real *y = Y + r * D;
    ag_real mean = 0, var = 0;
    if (row_mean) {
        for (int k = AG_CUDA_LANE; k < D; k += 32) mean += x[k];
        mean = ag__warp_sum(mean) / (ag_real)D;
    }
    for (int k = AG_CUDA_LANE; k < D; k += 32) var += (x[k] - mean) * (x[k] - mean); /* two passes: no cancellation */
    var = ag__warp_sum(var) / (ag_real)D;
    ag_real rstd = (ag_real)(1 / sqrt((double)(var + eps))); /* C's double sqrt, as the CPU */
    for (int k = AG_CUDA_LANE; k < D; k += 32) {
        ag_real xhat = (x[k] - mean) * rstd;
        y[k] = (gamma ? xhat * gamma[k] : xhat) + (beta ? beta[k] : 0);
    }
    if (AG_CUDA_LANE == 0) {
        if (row_mean) row_mean[r] = mean;
        row_rstd[r] = rstd;
    }
}

/* dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma */
__global__ void layernorm_grad_rows_kernel(const ag_real *X, const ag_real *G, const ag_real *gamma,
                                           const ag_real *row_mean, const ag_real *row_rstd, ag_real *GX, int64_t rows,
                                           int D, bool fresh) {
    AG_CUDA_WARP_ROW(r, rows);
    const ag_real *x = X + r * D, *dy = G + r * D;
    ag_real *dx = GX + r * D, mean = row_mean ? row_mean[r] : 0, rstd = row_rstd[r];
    ag_real sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int k = AG_CUDA_LANE; k < D; k += 32) {
        ag_real xhat = (x[k] - mean) * rstd, dxhat = gamma ? dy[k] * gamma[k] : dy[k];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
    }
    ag_real m1 = row_mean ? ag__warp_sum(sum_dxhat) / (ag_real)D : 0, m2 = ag__warp_sum(sum_dxhat_xhat) / (ag_real)D;
    for (int k = AG_CUDA_LANE; k < D; k += 32) {
        ag_real xhat = (x[k] - mean) * rstd, dxhat = gamma ? dy[k] * gamma[k] : dy[k];
        ag_real d = rstd * (dxhat - m1 - xhat * m2);
        dx[k] = fresh ? d : dx[k] + d;
    }
}

__global__ void layernorm_grad_affine_kernel(const ag_real *X, const ag_real *G, const ag_real *row_mean,
                                             const ag_real *row_rstd, ag_real *ggamma, ag_real *gbeta, int64_t rows,
                                             int D) {
    AG_CUDA_FOR(k, (int64_t)D) {
        ag_real gg = ggamma ? ggamma[k] : 0, gb = gbeta ? gbeta[k] : 0;
        for (int64_t r = 0; r < rows; r++) {
            ag_real dy = G[r * D + k];
            gg += dy * ((X[r * D + k] - (row_mean ? row_mean[r] : 0)) * row_rstd[r]);
            gb += dy;
        }
        if (ggamma) ggamma[k] = gg;
        if (gbeta) gbeta[k] = gb;
    }
}

static void rows_forward(const ag_real *x, const ag_real *gamma, const ag_real *beta, ag_real eps, ag_real *y,
                         ag_real *mean, ag_real *rstd, int64_t rows, int D) {
    if (rows > 0 && D > 0)
        ag__launch(layernorm_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), x, gamma, beta, eps, y, mean, rstd, rows, D);
}

static void rows_backward(const ag_real *x, const ag_real *g, const ag_real *gamma, const ag_real *mean,
                          const ag_real *rstd, ag_real *gx, int64_t rows, int D, bool fresh) {
    if (rows > 0 && D > 0)
        ag__launch(layernorm_grad_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), x, g, gamma, mean, rstd, gx, rows, D,
                   fresh);
}

static void affine_backward(const ag_real *x, const ag_real *g, const ag_real *mean, const ag_real *rstd,
                            ag_real *ggamma, ag_real *gbeta, int64_t rows, int D) {
    if (D > 0 && (ggamma || gbeta))
        ag__launch(layernorm_grad_affine_kernel, ag__cuda_blocks(D), AG_CUDA_THREADS, 0, x, g, mean, rstd, ggamma,
                   gbeta, rows, D);
}

extern "C" const ag__layernorm_kernels ag__layernorm_cuda = {rows_forward, rows_backward, affine_backward};
