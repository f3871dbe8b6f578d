/* reduce.h - the reduce family's kernels (ops/dispatch.h): the CPU's in
 * ops/reduce.c, CUDA's in ops/cuda/reduce.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_REDUCE_H
#define AG_OPS_REDUCE_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

typedef struct {
    /* *out = scale * sum of x[0..n), in a fixed order (deterministic for a
     * given n; scale 1/n gives the mean).  Backward: gx (+)= scale g[0] for
     * every element (g in the device's memory). */
    void (*sum)(const ag__kreal *x, ag__kreal scale, ag__kreal *out, int64_t n);
    void (*sum_backward)(const ag__kreal *g, ag__kreal scale, ag__kreal *gx, int64_t n, bool fresh);
    /* Along an axis, x as [outer, n, inner] and the result as [outer, inner]:
     * y = scale * sum over the axis, in increasing position; backward
     * gx (+)= scale g. */
    void (*sum_axis_forward)(const ag__kreal *x, ag__kreal *y, ag__kreal scale, int64_t outer, int64_t n,
                             int64_t inner);
    void (*sum_axis_backward)(const ag__kreal *g, ag__kreal *gx, ag__kreal scale, int64_t outer, int64_t n,
                              int64_t inner, bool fresh);
    /* y = the max over the axis and arg its first position (ties go to the
     * first); backward gx (+)= g at arg, 0 elsewhere.  With len (one per
     * outer index, in [0, n]; NULL: n each) the max runs over the first
     * len[o] positions only, and an empty one gives y 0 and arg -1 (no
     * gradient): ag_max_over_time's max over valid positions. */
    void (*max_axis_forward)(const ag__kreal *x, ag__kreal *y, int32_t *arg, int64_t outer, int64_t n,
                             int64_t inner, const int32_t *len);
    void (*max_axis_backward)(const ag__kreal *g, const int32_t *arg, ag__kreal *gx, int64_t outer, int64_t n,
                              int64_t inner, bool fresh);
} ag__reduce_kernels;

extern const ag__reduce_kernels ag__reduce_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__reduce_kernels *ag__reduce_on(const char *op, ag_device dev);
/* ag_max_over_time's op (layers.h): the max of x [B, N, d] over the first
 * lengths[b] positions of each example, 0 and no gradient for an empty
 * one; the lengths checked by the caller.  One kernel each way. */
ag_tensor *ag__max_over_lengths(ag_tensor *x, const int32_t *lengths);
#endif

#endif
