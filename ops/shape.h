/* shape.h - the shape family's kernels (ops/dispatch.h): the CPU's in
 * ops/shape.c, CUDA's in ops/cuda/shape.cu.  Every pointer is in the
 * device's memory.  Every kernel writes each destination element from its
 * own sources in a fixed order, so no two threads write one element and no
 * atomics are needed. */
#ifndef AG_OPS_SHAPE_H
#define AG_OPS_SHAPE_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* A strided copy over 4 dims, the one building block of the GPU's
 * permutes, slices, concat parts and head split/merge: the element at
 * coordinates c of shape goes from src[sum c[d] src_stride[d]] to
 * dst[sum c[d] dst_stride[d]], stored, or added when add.  Distinct
 * elements must have distinct destinations (every caller's map is one to
 * one), so threads never race. */
typedef struct {
    int64_t shape[4];
    int64_t src_stride[4], dst_stride[4];
} ag__kstrided;

/* A permutation: the output's shape padded at the front to 4 dims, and the
 * input's stride along each output dim (0 on padding). */
typedef struct {
    int shape[4];
    int64_t stride[4];
} ag__kpermute;

typedef struct {
    void (*strided_copy)(const ag__kstrided *p, const ag__kreal *src, ag__kreal *dst, bool add);
    /* A [rows, cols] block from src (row stride src_ld) to dst (row stride
     * dst_ld), stored or added: a reshape's gradient, a concat part, a
     * slice. */
    void (*copy_rows)(int64_t rows, int64_t cols, const ag__kreal *src, int64_t src_ld, ag__kreal *dst, int64_t dst_ld,
                      bool add);
    /* Forward reads x (src) through the plan's strides into the dense
     * output (dst, stored: add false); backward (grad) writes the output's
     * gradient (src) back through them into x's (dst), stored or added.
     * The map is one to one: a stored gradient is written whole. */
    void (*permute)(const ag__kpermute *p, const ag__kreal *src, ag__kreal *dst, bool grad, bool add);
    /* index_select and embedding: x as [outer, in_rows, inner], out as
     * [outer, n, inner], out[o, i, :] = x[o, index[i], :]. */
    void (*gather)(const ag__kreal *x, const int32_t *index, ag__kreal *out, int64_t outer, int in_rows, int n,
                   int64_t inner);
    /* Its gradient: gx[o, r, :] (+)= the sum, in increasing position, of
     * g[o, i, :] over the positions i with index[i] == r, which are
     * pos[first[r] .. first[r + 1]) (a counting sort of the index, made on
     * the host).  Every element of gx is written; fresh: store instead of
     * add. */
    void (*gather_backward)(const ag__kreal *g, const int32_t *first, const int32_t *pos, ag__kreal *gx, int64_t outer,
                            int in_rows, int n, int64_t inner, bool fresh);
    /* Differences from the last block (ag__ref_differences): x [rows, (g +
     * 1) d] -> y [rows, g d], y's block k = x's block k - x's last block.
     * Backward: gx's block k (+)= gy's block k, gx's last block (+)= minus
     * the sum of gy's g blocks (in block order); fresh: stored. */
    void (*ref_diff)(const ag__kreal *x, ag__kreal *y, int64_t rows, int g, int d);
    void (*ref_diff_backward)(const ag__kreal *gy, ag__kreal *gx, int64_t rows, int g, int d, bool fresh);
} ag__shape_kernels;

extern const ag__shape_kernels ag__shape_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__shape_kernels *ag__shape_on(const char *op, ag_device dev);

/* t [..., (g + 1) d] -> [..., g d]: block k of the last dim minus the last
 * block, for k < g (a softmax over g + 1 logits sees only these: MPSAN's
 * position fusion, ag_softmax_mix_ref).  The last block's gradient is minus
 * the sum of the others'.  One launch each way on the GPU, where slices, a
 * broadcast subtraction and reshapes took up to ten. */
ag_tensor *ag__ref_differences(ag_tensor *t, int g);
#endif

#endif
