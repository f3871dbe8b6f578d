/* gaussian.c - the Gaussian positional attention's CUDA table
 * (ops/gaussian.h): the kernels of ops/cuda/gaussian.cu around cuBLAS's
 * batched products.  Every length runs in one batched product: example b's
 * weights are a full [N,N] matrix, 0 outside the window and on padded rows
 * and columns, so the products over all N add exact zeros where the CPU's
 * over L stop.  Compiled only in CUDA builds. */
#include "../dispatch.h"
#include "../gaussian.h"
#include "../../graph/device.h"
#include "gaussian.cuh"

static void context_forward(const ag__kgauss *s, const ag_real *h, const ag_real *mu, const ag_real *sigma,
                            ag_real *out) {
    int B = s->B, N = s->N, H = s->H;
    int64_t nn = (int64_t)N * N, nh = (int64_t)N * H;
    ag__gauss_weights_cuda(s->w, s->sum, mu, sigma, s->len, B, N, s->strict, s->eps);
    if (B > 0 && N > 0 && H > 0)
        ag__cuda_gemm_batched(false, false, N, H, N, s->w, N, nn, h, H, nh, 0, out, H, nh, B);
}

static void context_backward(const ag__kgauss *s, const ag_real *h, const ag_real *mu, const ag_real *sigma,
                             const ag_real *G, ag_real *gh, bool fresh_h, ag_real *gmu, bool fresh_mu, ag_real *gsigma,
                             bool fresh_sigma) {
    int B = s->B, N = s->N, H = s->H;
    int64_t nn = (int64_t)N * N, nh = (int64_t)N * H;
    if (gh && B > 0 && N > 0 && H > 0) /* dh = W^T dC (rows of padded i: 0) */
        ag__cuda_gemm_batched(true, false, N, H, N, s->w, N, nn, G, H, nh, fresh_h ? 0 : 1, gh, H, nh, B);
    if (gmu || gsigma) { /* dW = dC h^T, then each row's dmu, dsigma */
        ag_real *dw = ag__cuda_arena_alloc((size_t)B * nn * sizeof(ag_real) + 1);
        if (H > 0 && B > 0 && N > 0)
            ag__cuda_gemm_batched(false, true, N, N, H, G, H, nh, h, H, nh, 0, dw, N, nn, B);
        else
            ag__cuda_zero(dw, (size_t)B * nn * sizeof(ag_real));
        ag__gauss_weights_backward_cuda(s->w, dw, s->sum, mu, sigma, s->len, gmu, gsigma, B, N, s->strict, s->eps,
                                        fresh_mu, fresh_sigma);
    }
}

/* The weights are already [B,N,N] here. */
static void weights(const ag__kgauss *s, ag_real *out) {
    ag__cuda_copy(out, AG_CUDA, s->w, AG_CUDA, (size_t)s->B * s->N * s->N * sizeof(ag_real));
}

const ag__gaussian_kernels ag__gaussian_cuda = {
    .mu_forward = ag__gaussian_mu_cuda,
    .mu_backward = ag__gaussian_mu_backward_cuda,
    .context_forward = context_forward,
    .context_backward = context_backward,
    .weights = weights,
};
