/* gaussian.cuh - the launchers of ops/cuda/gaussian.cu, for
 * ops/cuda/gaussian.c, which composes them with cuBLAS into the family's
 * CUDA table (ops/gaussian.h).  C and C++: no engine types. */
#ifndef AG_CUDA_GAUSSIAN_CUH
#define AG_CUDA_GAUSSIAN_CUH

#include "../../graph/kreal.h"

AG_KERNELS_BEGIN

/* The mean recurrence, one thread per example (ops/gaussian.h). */
void ag__gaussian_mu_cuda(const ag__kreal *m, const int32_t *len, ag__kreal *mu, uint8_t *above, int B, int N);
void ag__gaussian_mu_backward_cuda(const ag__kreal *m, const ag__kreal *mu, const ag__kreal *g, const int32_t *len,
                                   const uint8_t *above, ag__kreal *gm, int B, int N, bool fresh);
/* The context's normalised weights w [B,N,N] (0 outside each window and
 * on padding) and window sums [B,N]; backward: dmu, dsigma [B,N] from
 * dw = dC h^T (either output may be NULL). */
void ag__gauss_weights_cuda(ag__kreal *w, ag__kreal *sum, const ag__kreal *mu, const ag__kreal *sigma, const int32_t *len,
                            int B, int N, bool strict, ag__kreal eps);
void ag__gauss_weights_backward_cuda(const ag__kreal *w, const ag__kreal *dw, const ag__kreal *sum, const ag__kreal *mu,
                                     const ag__kreal *sigma, const int32_t *len, ag__kreal *gmu, ag__kreal *gsigma, int B,
                                     int N, bool strict, ag__kreal eps, bool fresh_mu, bool fresh_sigma);

AG_KERNELS_END

#endif
