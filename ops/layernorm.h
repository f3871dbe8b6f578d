/* layernorm.h - the layer norm family's kernels (ops/dispatch.h): the
 * CPU's in ops/layernorm.c, CUDA's in ops/cuda/layernorm.cu.  Every pointer
 * is in the device's memory; gamma and beta may be NULL.  A NULL mean is
 * RMS normalisation (ag_rmsnorm): the rows are not centred, their mean is
 * taken as 0 everywhere below, and dx has no mean(dxhat) term. */
#ifndef AG_OPS_LAYERNORM_H
#define AG_OPS_LAYERNORM_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

typedef struct {
    /* y = (x - mean) rstd gamma + beta over each row of [rows, D], the
     * row's mean and rstd = 1 / sqrt(var + eps) kept for backward. */
    void (*rows_forward)(const ag__kreal *x, const ag__kreal *gamma, const ag__kreal *beta, ag__kreal eps, ag__kreal *y,
                         ag__kreal *mean, ag__kreal *rstd, int64_t rows, int D);
    /* gx (+)= rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
     * dxhat = g gamma. */
    void (*rows_backward)(const ag__kreal *x, const ag__kreal *g, const ag__kreal *gamma, const ag__kreal *mean,
                          const ag__kreal *rstd, ag__kreal *gx, int64_t rows, int D, bool fresh);
    /* ggamma, gbeta (either NULL) += their column sums over the rows, each
     * column adding the rows in order. */
    void (*affine_backward)(const ag__kreal *x, const ag__kreal *g, const ag__kreal *mean, const ag__kreal *rstd,
                            ag__kreal *ggamma, ag__kreal *gbeta, int64_t rows, int D);
} ag__layernorm_kernels;

extern const ag__layernorm_kernels ag__layernorm_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__layernorm_kernels *ag__layernorm_on(const char *op, ag_device dev);
#endif

#endif
