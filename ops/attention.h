/* attention.h - the attention family's kernels (ops/dispatch.h): the CPU's
 * in ops/attention.c, CUDA's in ops/cuda/attention.c (cuBLAS products
 * around the softmax kernel).  Every pointer is in the device's memory. */
#ifndef AG_OPS_ATTENTION_H
#define AG_OPS_ATTENTION_H

#include "softmax.h"

AG_KERNELS_BEGIN

/* One attention call over `slices` leading (batch, head) slices: Q
 * [slices, nq, d], K [slices, nk, d], V [slices, nk, dv]; probs [slices, nq,
 * nk] is the one thing backward keeps. */
typedef struct {
    int slices, nq, nk, d, dv;
    ag_kreal scale;
    ag_kreal *probs;
} ag_kattn;

typedef struct {
    /* probs = softmax(scale Q K^T + mask) (mask rows by mask_plan, or mask
     * NULL), out = probs V, for every slice. */
    void (*forward)(const ag_kattn *p, const ag_kmask *mask_plan, const ag_kreal *mask, const ag_kreal *Q,
                    const ag_kreal *K, const ag_kreal *V, ag_kreal *out);
    /* From G = dL/dout and the saved probs: dV = P^T G, dS = P * (G V^T -
     * rowsum) * scale, dQ = dS K, dK = dS^T Q, each NULL when not wanted,
     * stored when fresh, else added.  They are written in the order dV, dQ,
     * dK, so a tensor passed twice (self-attention's q = k) is stored by its
     * first use and added by the second. */
    void (*backward)(const ag_kattn *p, const ag_kreal *Q, const ag_kreal *K, const ag_kreal *V, const ag_kreal *G,
                     ag_kreal *GQ, bool fresh_q, ag_kreal *GK, bool fresh_k, ag_kreal *GV, bool fresh_v);
    /* [outer, N, h, d] <-> [outer, h, N, d] (to_heads: the first to the
     * second), stored or added. */
    void (*heads_permute)(const ag_kreal *src, ag_kreal *dst, int64_t outer, int N, int h, int d, bool to_heads,
                          bool accumulate);
} ag__attention_kernels;

extern const ag__attention_kernels ag__attention_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
const ag__attention_kernels *ag__attention_on(const char *op, ag_device dev);
#endif

#endif
