/* loss.cuh - the launchers of ops/cuda/loss.cu, for ops/cuda/loss.c, which
 * composes them with cuBLAS into the loss family's CUDA table (ops/loss.h
 * says what each computes).  C and C++: no engine types. */
#ifndef AG_CUDA_LOSS_CUH
#define AG_CUDA_LOSS_CUH

#include "../../graph/kreal.h"

AG_KERNELS_BEGIN

void ag__cross_entropy_forward_cuda(const ag__kreal *z, const int32_t *labels, int ignore_index, ag__kreal eps,
                                    ag__kreal *row_max, ag__kreal *row_lse, ag__kreal *row_loss, int64_t rows, int C);
void ag__cross_entropy_backward_cuda(const ag__kreal *z, const int32_t *labels, int ignore_index, ag__kreal eps,
                                     const ag__kreal *row_max, const ag__kreal *row_lse, const ag__kreal *g,
                                     int64_t counted, ag__kreal *gz, int64_t rows, int C, bool fresh);
void ag__row_loss_mean_cuda(const ag__kreal *row_loss, int64_t rows, int64_t n, ag__kreal *out);
void ag__row_loss_mean_f64_cuda(const double *row_loss, int64_t rows, int64_t n, ag__kreal *out);
/* The fused linear + cross-entropy on its counted rows z [n, C] (bias and
 * product already in): row losses, and with to_grad the rows become
 * softmax minus the (eps-smoothed) target in place. */
void ag__lce_rows_cuda(ag__kreal *z, const int32_t *labels, ag__kreal eps, ag__kreal *loss, int64_t n, int C,
                       bool to_grad);
/* scal[0] = g[0] / n, scal[1] = 0, scal[2] = 1: the fused backward's GEMM
 * factors, made on the device (no read of g on the host). */
void ag__lce_scale_cuda(const ag__kreal *g, int64_t n, ag__kreal *scal);
/* y rows: y[i] = x[idx[i]] (width wide); unpack: dst row r = src row pos[r]
 * (pos -1: 0), stored when fresh (0 on the -1 rows) or added. */
void ag__gather_rows_cuda(const ag__kreal *x, int width, const int32_t *idx, int64_t n, ag__kreal *y);
void ag__unpack_rows_cuda(ag__kreal *dst, const ag__kreal *src, int width, const int32_t *pos, int64_t rows,
                          bool fresh);
void ag__kl_div_soft_forward_cuda(const ag__kreal *z, const ag__kreal *t, ag__kreal *row_max, ag__kreal *row_lse,
                                  ag__kreal *row_mass, double *row_loss, int64_t rows, int C);
void ag__kl_div_soft_backward_cuda(const ag__kreal *z, const ag__kreal *t, const ag__kreal *row_max,
                                   const ag__kreal *row_lse, const ag__kreal *row_mass, const ag__kreal *g, ag__kreal *gz,
                                   int64_t rows, int C);
void ag__mse_forward_cuda(const ag__kreal *p, const ag__kreal *t, ag__kreal *out, int64_t n);
void ag__mse_backward_cuda(const ag__kreal *p, const ag__kreal *t, const ag__kreal *g, ag__kreal *gp, ag__kreal *gt,
                           int64_t n);

AG_KERNELS_END

#endif
