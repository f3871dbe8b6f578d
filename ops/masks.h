/* masks.h - the mask family's kernels (ops/dispatch.h): the CPU's in
 * ops/masks.c, CUDA's in ops/cuda/masks.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_MASKS_H
#define AG_OPS_MASKS_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

typedef struct {
    /* A batch's masks, out [B,h,N,N]: plane i of the positional masks pos
     * [h,N,N] for every example b, minus weight[i] times the tree distance
     * dists [B,N,N] where weight[i] != 0 (dists and weight NULL: no tree
     * head), and -inf where the query or the key is at or past lengths[b]
     * (a padded query attends to nothing).  On a GPU this replaces the
     * host's fill of [B,h,N,N] and its upload. */
    void (*pad_planes)(const ag__kreal *pos, const int32_t *lengths, const int32_t *dists, const ag__kreal *weight,
                       ag__kreal *out, int B, int h, int N);
    /* ag_zero_padding, both ways: y[b,t,:] = x[b,t,:] for t < lengths[b],
     * else 0, over x [B,N,inner]; with add, y += that instead. */
    void (*pad_rows)(const ag__kreal *x, const int32_t *lengths, ag__kreal *y, int B, int N, int64_t inner, bool add);
} ag__masks_kernels;

extern const ag__masks_kernels ag__masks_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__masks_kernels *ag__masks_on(const char *op, ag_device dev);
#endif

#endif
