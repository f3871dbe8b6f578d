/* attention.h - the attention family's kernels (ops/dispatch.h): the CPU's
 * in ops/attention.c, CUDA's in ops/cuda/attention.c (cuBLAS products
 * around the softmax kernel).  Every pointer is in the device's memory. */
#ifndef AG_OPS_ATTENTION_H
#define AG_OPS_ATTENTION_H

#include "softmax.h"

AG_KERNELS_BEGIN

/* One attention call over `slices` leading (batch, head) slices: Q
 * [slices, nq, d], K [slices / group, nk, d], V [slices / group, nk, dv]
 * (grouped-query attention: `group` consecutive query slices read one
 * key-value slice; 1 otherwise); probs [slices, nq, nk] is the one thing
 * backward keeps.  The GPU's products run a group's query slices as one:
 * M = group * nq rows, contiguous in Q, probs and out.
 *
 * probs NULL (ag_attention_recompute): nothing of the scores is kept.  Each
 * table then works through blocks of query rows of its own choosing (the
 * CPU's fit its caches, the GPU's a bounded scratch), and backward makes
 * each block's probabilities again from Q, K and the mask (mask and
 * mask_plan, kept for it) with the same code, so they are the forward's to
 * the bit.  The CPU runs stored probabilities in the same blocks, each
 * block's products over the keys its mask leaves open. */
typedef struct {
    int slices, nq, nk, d, dv, group;
    ag__kreal scale;
    ag__kreal *probs;
    const ag__kreal *mask;     /* the forward's mask (NULL: none) and its plan (the recomputed backward reads them) */
    const ag__kmask *mask_plan;
    int block_rows;            /* query rows a block (0: the table's choice) */
    int32_t *spans;            /* the CPU's, probs kept under a mask: each block's keys [first, end), forward's
                                  for backward (NULL: none) */
} ag__kattn;

/* Tests: the block_rows of every attention from now on (0, the default:
 * each table's choice), so that small shapes run in several blocks with a
 * short last one. */
extern int ag__attention_block_rows;

typedef struct {
    /* probs = softmax(scale Q K^T + mask) (mask rows by mask_plan, or mask
     * NULL), out = probs V, for every slice. */
    void (*forward)(const ag__kattn *p, const ag__kmask *mask_plan, const ag__kreal *mask, const ag__kreal *Q,
                    const ag__kreal *K, const ag__kreal *V, ag__kreal *out);
    /* From G = dL/dout and the saved probs (or, probs NULL, the
     * probabilities made again block by block): dV = P^T G, dS = P * (G V^T -
     * rowsum) * scale, dQ = dS K, dK = dS^T Q, each NULL when not wanted,
     * stored when fresh, else added.  They are written in the order dV, dQ,
     * dK, so a tensor passed twice (self-attention's q = k) is stored by its
     * first use and added by the second. */
    void (*backward)(const ag__kattn *p, const ag__kreal *Q, const ag__kreal *K, const ag__kreal *V, const ag__kreal *G,
                     ag__kreal *GQ, bool fresh_q, ag__kreal *GK, bool fresh_k, ag__kreal *GV, bool fresh_v);
    /* [outer, N, h, d] <-> [outer, h, N, d] (to_heads: the first to the
     * second), stored or added.  The merged side's rows are `row` apart (h
     * d, or wider: h heads of columns from a wider row, as a fused q|k|v
     * projection's). */
    void (*heads_permute)(const ag__kreal *src, ag__kreal *dst, int64_t outer, int N, int h, int d, int64_t row,
                          bool to_heads, bool accumulate);
} ag__attention_kernels;

extern const ag__attention_kernels ag__attention_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
const ag__attention_kernels *ag__attention_on(const char *op, ag_device dev);
#endif

#endif
