/* rope.h - the rotary position family's kernels (ops/dispatch.h): the
 * CPU's in ops/rope.c, CUDA's in ops/cuda/rope.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_ROPE_H
#define AG_OPS_ROPE_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

typedef struct {
    /* cs[t][i] = (cos, sin) of (pos0 + t) base^(-2i / head_dim) for the N
     * positions t and the head_dim / 2 pairs i: [N, head_dim / 2, 2],
     * angles in double, then rounded once. */
    void (*angles)(ag__kreal *cs, int N, int head_dim, int pos0, double base);
    /* y (+)= x with each pair (2i, 2i+1) of each head_dim-wide chunk of a
     * [rows, D] row turned by its angle (sign = +1) or back (sign = -1, the
     * gradient); row r is at position r % N. */
    void (*rotate)(const ag__kreal *x, const ag__kreal *cs, ag__kreal *y, int64_t rows, int N, int D, int head_dim,
                   int sign, bool fresh);
} ag__rope_kernels;

extern const ag__rope_kernels ag__rope_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__rope_kernels *ag__rope_on(const char *op, ag_device dev);
#endif

#endif
