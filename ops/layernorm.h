/* layernorm.h - the layer norm family's kernels (ops/dispatch.h): the
 * CPU's in ops/layernorm.c, CUDA's in ops/cuda/layernorm.cu.  Every pointer
 * is in the device's memory; gamma and beta may be NULL. */
#ifndef AG_OPS_LAYERNORM_H
#define AG_OPS_LAYERNORM_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

typedef struct {
    /* y = (x - mean) rstd gamma + beta over each row of [rows, D], the
     * row's mean and rstd = 1 / sqrt(var + eps) kept for backward. */
    void (*rows_forward)(const ag_kreal *x, const ag_kreal *gamma, const ag_kreal *beta, ag_kreal eps, ag_kreal *y,
                         ag_kreal *mean, ag_kreal *rstd, int64_t rows, int D);
    /* gx (+)= rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)),
     * dxhat = g gamma. */
    void (*rows_backward)(const ag_kreal *x, const ag_kreal *g, const ag_kreal *gamma, const ag_kreal *mean,
                          const ag_kreal *rstd, ag_kreal *gx, int64_t rows, int D, bool fresh);
    /* ggamma, gbeta (either NULL) += their column sums over the rows, each
     * column adding the rows in order. */
    void (*affine_backward)(const ag_kreal *x, const ag_kreal *g, const ag_kreal *mean, const ag_kreal *rstd,
                            ag_kreal *ggamma, ag_kreal *gbeta, int64_t rows, int D);
} ag__layernorm_kernels;

extern const ag__layernorm_kernels ag__layernorm_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__layernorm_kernels *ag__layernorm_on(const char *op, ag_device dev);
#endif

#endif
