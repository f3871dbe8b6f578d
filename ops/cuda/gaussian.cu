/* gaussian.cu - the CUDA side of ops/gaussian.c: the mean recurrence and
 * the Gaussian context's weights and their gradient.
 *
 * The recurrence is sequential in t, so one thread runs one example (B
 * threads: it is a few flops per step).  The context's weights are a
 * [N,N] matrix per example (row t, column i; 0 outside the window and on
 * padding, so the products run over all N with exact zeros there), one
 * thread per row; the products themselves are cuBLAS's, and the family's
 * table, in ops/cuda/gaussian.c. */
#include "../../graph/prelude.cuh"
#include "gaussian.cuh"
#include "../gaussian_rows.h" /* the recurrence's rows, as the CPU runs them */

#define GAUSS_SUM_FLOOR ((ag_real)1e-12) /* as ops/gaussian.c */

/* ---- the mean recurrence ---- */

__global__ void gaussian_mu_kernel(const ag_real *M, const int32_t *len, ag_real *MU, uint8_t *above, int B, int N) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    int64_t row = (int64_t)b * N;
    ag__gaussian_mu_row(M + row * 3, len[b], MU + row, above + row, N);
}

__global__ void gaussian_mu_grad_kernel(const ag_real *M, const ag_real *MU, const ag_real *G, const int32_t *len,
                                        const uint8_t *above, ag_real *GM, int B, int N, bool fresh) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    int64_t row = (int64_t)b * N;
    ag__gaussian_mu_grad_row(M + row * 3, MU + row, G + row, len[b], above + row, GM + row * 3, N, fresh);
}

static unsigned blocks_of(int64_t n) { return (unsigned)((n + AG_CUDA_THREADS - 1) / AG_CUDA_THREADS); }

extern "C" void ag__gaussian_mu_cuda(const ag_real *m, const int32_t *len, ag_real *mu, uint8_t *above, int B, int N) {
    if (B > 0 && N > 0)
        ag__launch(gaussian_mu_kernel, blocks_of(B), AG_CUDA_THREADS, 0, m, len, mu, above, B, N);
}

extern "C" void ag__gaussian_mu_backward_cuda(const ag_real *m, const ag_real *mu, const ag_real *g, const int32_t *len,
                                              const uint8_t *above, ag_real *gm, int B, int N, bool fresh) {
    if (B > 0 && N > 0)
        ag__launch(gaussian_mu_grad_kernel, blocks_of(B), AG_CUDA_THREADS, 0, m, mu, g, len, above, gm, B, N, fresh);
}

/* ---- the context's weights: one thread per row (b, t) ---- */

__global__ void gauss_weights_kernel(ag_real *W, ag_real *SUM, const ag_real *MU, const ag_real *SIGMA,
                                     const int32_t *len, int B, int N, bool strict, ag_real eps) {
    int64_t bt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bt >= (int64_t)B * N) return;
    int b = (int)(bt / N), t = (int)(bt % N), L = len[b];
    ag_real *row = W + bt * N;
    int end = t >= L ? 0 : strict ? t : t + 1; /* padded rows: an empty window */
    ag_real s = 0;
    if (end > 0) {
        ag_real inv_len = 1 / (ag_real)L, m = MU[bt], sg = SIGMA[bt];
        ag_real inv_d = 1 / (2 * sg * sg + eps);
        for (int i = 0; i < end; i++) {
            ag_real z = (ag_real)i * inv_len - m;
            row[i] = ag__vexp_nonpos(-z * z * inv_d);
            s += row[i];
        }
        ag_real inv = 1 / (s > GAUSS_SUM_FLOOR ? s : GAUSS_SUM_FLOOR);
        for (int i = 0; i < end; i++) row[i] *= inv;
    }
    for (int i = end; i < N; i++) row[i] = 0;
    SUM[bt] = s;
}

/* dmu and dsigma of row (b, t) from dW (= dC h^T, [N,N] per example), as
 * gaussian_context_backward_part computes them; padded rows get 0. */
__global__ void gauss_weights_grad_kernel(const ag_real *W, const ag_real *DW, const ag_real *SUM, const ag_real *MU,
                                          const ag_real *SIGMA, const int32_t *len, ag_real *GMU, ag_real *GSIGMA,
                                          int B, int N, bool strict, ag_real eps, bool fresh_mu, bool fresh_sigma) {
    int64_t bt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bt >= (int64_t)B * N) return;
    int b = (int)(bt / N), t = (int)(bt % N), L = len[b];
    ag_real dmu = 0, dsigma = 0;
    if (t < L) {
        int end = strict ? t : t + 1;
        const ag_real *wr = W + bt * N, *dwr = DW + bt * N;
        bool floored = !(SUM[bt] > GAUSS_SUM_FLOOR); /* S was a constant there: no dot term */
        ag_real dot = 0;
        if (!floored)
            for (int i = 0; i < end; i++) dot += dwr[i] * wr[i];
        ag_real inv_len = 1 / (ag_real)L, m = MU[bt], sg = SIGMA[bt];
        ag_real inv_d = 1 / (2 * sg * sg + eps), dD = 0;
        for (int i = 0; i < end; i++) {
            ag_real dg_g = (dwr[i] - dot) * wr[i];
            ag_real z = (ag_real)i * inv_len - m;
            dmu += dg_g * 2 * z * inv_d;
            dD += dg_g * z * z * inv_d * inv_d;
        }
        dsigma = dD * 4 * sg;
    }
    if (GMU) GMU[bt] = fresh_mu ? dmu : GMU[bt] + dmu;
    if (GSIGMA) GSIGMA[bt] = fresh_sigma ? dsigma : GSIGMA[bt] + dsigma;
}

extern "C" void ag__gauss_weights_cuda(ag_real *w, ag_real *sum, const ag_real *mu, const ag_real *sigma,
                                       const int32_t *len, int B, int N, bool strict, ag_real eps) {
    int64_t rows = (int64_t)B * N;
    if (rows > 0)
        ag__launch(gauss_weights_kernel, blocks_of(rows), AG_CUDA_THREADS, 0, w, sum, mu, sigma, len, B, N, strict,
                   eps);
}

extern "C" void ag__gauss_weights_backward_cuda(const ag_real *w, const ag_real *dw, const ag_real *sum,
                                                const ag_real *mu, const ag_real *sigma, const int32_t *len,
                                                ag_real *gmu, ag_real *gsigma, int B, int N, bool strict, ag_real eps,
                                                bool fresh_mu, bool fresh_sigma) {
    int64_t rows = (int64_t)B * N;
    if (rows > 0)
        ag__launch(gauss_weights_grad_kernel, blocks_of(rows), AG_CUDA_THREADS, 0, w, dw, sum, mu, sigma, len, gmu,
                   gsigma, B, N, strict, eps, fresh_mu, fresh_sigma);
}
