/* softmax.h - the softmax family's kernels (ops/dispatch.h): the CPU's in
 * ops/softmax.c, CUDA's in ops/cuda/softmax.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_SOFTMAX_H
#define AG_OPS_SOFTMAX_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* How a mask broadcasts over the rows of the scores: the scores' three
 * leading dims right-aligned in 4, the mask's strides along them (0 where
 * it repeats), and the row length.  Row r = (i0 rows3[1] + i1) rows3[2] + i2
 * reads the mask row at i0 stride3[0] + i1 stride3[1] + i2 stride3[2]. */
typedef struct {
    int rows3[3], cols; /* cols beside rows3: no padding (a kernel argument, prelude.cuh ag__no_padding) */
    int64_t stride3[3];
} ag__kmask;

/* The softmax-gated mixture (ag_softmax_mix*): rows of d features, n
 * sources, nz logits per feature (n, or n - 1 with the last source's fixed
 * at 0); len (or NULL) makes row r, position r % N of example r / N,
 * padding when past its length: output 0, no gradient.  Forward writes y
 * and the gate [rows, n, d]; backward reads gate, out and dout and writes dz
 * and dsrc[g] (NULL: not wanted; fresh: store).  A source given twice has
 * fresh false on its repeats. */
enum { AG_KMIX_MAX_SOURCES = 8 };
typedef struct {
    const ag__kreal *z, *src[AG_KMIX_MAX_SOURCES], *out, *dout;
    ag__kreal *gate, *y, *dz, *dsrc[AG_KMIX_MAX_SOURCES];
    int n, d, nz, N;
    const int32_t *len;
    bool fresh_z, fresh_src[AG_KMIX_MAX_SOURCES];
    bool unused[7]; /* to the pointers' alignment: no padding (a kernel argument, prelude.cuh ag__no_padding) */
} ag__kmix;

/* A masked softmax along any axis (ag_masked_softmax_axis): x seen as
 * [outer, n, inner] around the axis, and as shape4 (x's shape right-aligned
 * in 4 dims, the axis at axis4).  The mask element that x's element at
 * 4-D index (i0..i3) reads is at sum_d i_d mstride4[d] (0 where the mask
 * repeats along d). */
typedef struct {
    int64_t outer, n, inner;
    int64_t mstride4[4];
    int shape4[4];
    int axis4;
    int unused; /* no padding (a kernel argument, prelude.cuh ag__no_padding) */
} ag__kaxis;

typedef struct {
    /* y = softmax(scale x + mask) over the last axis of [rows, plan->cols]
     * (mask NULL: none; y may alias x).  A row with no entry above -inf
     * (fully masked) becomes zeros.  Backward: gx (+)= scale y (g - sum(g y));
     * gx may alias g when fresh. */
    void (*rows_forward)(const ag__kreal *x, const ag__kreal *mask, const ag__kmask *plan, ag__kreal scale, ag__kreal *y,
                         int64_t rows);
    void (*rows_backward)(const ag__kreal *y, const ag__kreal *g, ag__kreal scale, ag__kreal *gx, int64_t rows, int cols,
                          bool fresh);
    /* Log-softmax over the last axis of [rows, cols]: y = x - max - log sum
     * e^(x - max); backward gx (+)= g - e^y sum(g). */
    void (*log_rows_forward)(const ag__kreal *x, ag__kreal *y, int64_t rows, int cols);
    void (*log_rows_backward)(const ag__kreal *y, const ag__kreal *g, ag__kreal *gx, int64_t rows, int cols, bool fresh);
    /* Softmax along an axis over the valid positions: x seen as
     * [outer, n, inner], each (outer o, inner k) column a softmax over
     * t < len[o / per_example] (len NULL: n), zeros at t >= len.  Backward:
     * gx[t] (+)= y[t] (g[t] - sum_t' g y) over t < len; a fresh gx gets 0 at
     * padded positions. */
    void (*len_forward)(const ag__kreal *x, ag__kreal *y, const int32_t *len, int64_t outer, int64_t n, int64_t inner,
                        int64_t per_example);
    void (*len_backward)(const ag__kreal *y, const ag__kreal *g, ag__kreal *gx, const int32_t *len, int64_t outer,
                         int64_t n, int64_t inner, int64_t per_example, bool fresh);
    /* Softmax pooling (ag__softmax_pool), per (outer o, inner k) column:
     * alpha = len_forward's softmax of s, out[o,k] = sum_{t<len} alpha[t]
     * x[t] in increasing t.  Backward from g [outer, inner]: gs (+)=
     * alpha (g x - sum_t (g x) alpha) over t < len, and gx (+)= g alpha; a
     * fresh buffer (fresh_s, fresh_x) gets 0 at padded positions; gs or gx
     * NULL: not wanted. */
    void (*pool_forward)(const ag__kreal *s, const ag__kreal *x, ag__kreal *alpha, ag__kreal *out, const int32_t *len,
                         int64_t outer, int64_t n, int64_t inner, int64_t per_example);
    void (*pool_backward)(const ag__kreal *alpha, const ag__kreal *x, const ag__kreal *g, ag__kreal *gs, bool fresh_s,
                          ag__kreal *gx, bool fresh_x, const int32_t *len, int64_t outer, int64_t n, int64_t inner,
                          int64_t per_example);
    void (*mix_forward)(const ag__kmix *j, int64_t rows);
    void (*mix_backward)(const ag__kmix *j, int64_t rows);
    /* y = softmax(scale x + mask) along the plan's axis, each (outer o,
     * inner k) column on its own (mask NULL: none); a column with no entry
     * above -inf becomes zeros.  Backward: gx (+)= scale y (g - sum_t g y)
     * along the axis (masked entries have y = 0: no gradient). */
    void (*axis_forward)(const ag__kaxis *p, const ag__kreal *x, const ag__kreal *mask, ag__kreal scale,
                         ag__kreal *y);
    void (*axis_backward)(const ag__kaxis *p, const ag__kreal *y, const ag__kreal *g, ag__kreal scale,
                          ag__kreal *gx, bool fresh);
} ag__softmax_kernels;

extern const ag__softmax_kernels ag__softmax_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__softmax_kernels *ag__softmax_on(const char *op, ag_device dev);

/* Source2token's pooling as one op: scores and x [B,N,d], lengths [B] (or
 * NULL: all N) ->
 *     alpha[b,:,j] = softmax over t < len[b] of scores[b,:,j]  (0 past it),
 *     out[b,j] = sum_{t<len[b]} alpha[b,t,j] x[b,t,j]            [B,d],
 * what ag_sum_axis(ag_mul(ag_softmax_axis_len(scores, 1, lengths), x), 1)
 * computes, to its bits (the same operations in the same order).  An empty
 * example pools to 0 with no gradient.  Gradients to scores and x.  alpha
 * (not NULL) receives the weights [B,N,d] (read-only, no gradient, valid
 * until ag_step_end).  On the GPU one launch forward (and the lengths'
 * copy) and one backward, where the composition took four and four. */
ag_tensor *ag__softmax_pool(ag_tensor *scores, ag_tensor *x, const int32_t *lengths, ag_tensor **alpha);

/* ag_softmax_mix_ref over the G planes of stack [G, ...] and then ref
 * [...] (G + 1 sources, ref the reference): the same bits as passing the
 * planes sliced out, without the slices (MPSAN's four units, made as one
 * stack, and its input).  Gradients to z, every plane and ref. */
ag_tensor *ag__softmax_mix_ref_planes(ag_tensor *z, ag_tensor *stack, ag_tensor *ref, const int32_t *lengths);
#endif

#endif
