/* feature.h - feature-wise (multi-dimensional) additive attention, DiSAN's
 * token2token form (ag_feature_attention): the CPU's kernels in
 * ops/feature.c, CUDA's in ops/cuda/feature.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_FEATURE_H
#define AG_OPS_FEATURE_H

#include "../graph/kreal.h"
#include "softmax.h"

AG_KERNELS_BEGIN

/* Queries [B,Nq,d], keys and values [B,Nk,d]; the score of query i, key j,
 * feature l is c tanh((q[b,i,l] + k[b,j,l]) / c) + mask[b,i,j].  The mask
 * broadcasts over the scores [B,Nq,Nk] by `mask` (ops/softmax.h: row r =
 * b Nq + i); len (or NULL: all valid) masks keys j >= len[b] and query rows
 * i >= len[b] (out 0, no gradient).  A key is skipped - no work at all -
 * where the mask is -inf, so a direction mask halves the op. */
typedef struct {
    const int32_t *len;
    ag__kmask mask;
    int B, Nq, Nk, d;
} ag__kfeat;

typedef struct {
    /* out [B,Nq,d] and lse [B,Nq,d] = max + log sum_j e^(score - max) per
     * (query, feature), all that backward keeps (it recomputes the scores);
     * rows with no allowed key: out 0, lse 0. */
    void (*forward)(const ag__kfeat *p, const ag__kreal *q, const ag__kreal *k, const ag__kreal *v,
                    const ag__kreal *mask, ag__kreal c, ag__kreal *out, ag__kreal *lse);
    /* The weights [B,Nq,Nk,d] = e^(score - lse), 0 where not allowed. */
    void (*weights)(const ag__kfeat *p, const ag__kreal *q, const ag__kreal *k, const ag__kreal *mask, ag__kreal c,
                    const ag__kreal *lse, ag__kreal *w);
    /* From g = dout: gq, gk, gv (NULL: not wanted; fresh: stored). */
    void (*backward)(const ag__kfeat *p, const ag__kreal *q, const ag__kreal *k, const ag__kreal *v,
                     const ag__kreal *mask, ag__kreal c, const ag__kreal *out, const ag__kreal *lse,
                     const ag__kreal *g, ag__kreal *gq, bool fresh_q, ag__kreal *gk, bool fresh_k, ag__kreal *gv,
                     bool fresh_v);
} ag__feature_kernels;

extern const ag__feature_kernels ag__feature_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__feature_kernels *ag__feature_on(const char *op, ag_device dev);
#endif

#endif
