/* additive.h - scalar additive self-attention whose values are its inputs,
 * MPSAN's masked unit (ag__additive_self_attention): the CPU's kernels in
 * ops/additive.c, CUDA's in ops/cuda/additive.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_ADDITIVE_H
#define AG_OPS_ADDITIVE_H

#include "../graph/kreal.h"
#include "softmax.h"

AG_KERNELS_BEGIN

/* G units at once (G >= 1), unit g on h [g] of h [G,B,N,d] with its own
 * u [g], v [g] of [G,d] and bias [g] of [G]; one score per (query q, key
 * k) of an example,
 *     z = (h_k.u + h_q.v) + bias,   e = c tanh(z / c)   (elu: ELU(z / c)),
 * p[q,:] = softmax_k(e + mask[q,k]) (the mask broadcast over the scores
 * [B,N,N] by `mask`, ops/softmax.h, unit g's mask mask_group elements
 * after unit 0's; a row with no key above -inf is 0), out_q = sum_k p[q,k]
 * h_k.  What forward keeps for backward: probs [G,B,N,N] and huv [G,B,N,2]
 * = (h_t.u, h_t.v) per position.  Every gradient (and the work) is laid
 * out as its tensor, [G, ...]. */
typedef struct {
    ag__kmask mask;
    int G, B, N, d;
    int64_t mask_group;
    bool elu;
    ag__kreal c;
    ag__kreal *probs, *huv;
} ag__kadd;

typedef struct {
    /* out [B,N,d], and the plan's probs and huv. */
    void (*forward)(const ag__kadd *p, const ag__kreal *h, const ag__kreal *u, const ag__kreal *v,
                    const ag__kreal *bias, const ag__kreal *mask, ag__kreal *out);
    /* From g = dout: gh [G,B,N,d], gu, gv [G,d], gbias [G] (any NULL:
     * not wanted; fresh: stored, else added).  work: G B N (N + 2) reals
     * of step memory (each unit's dz [B,N,N] and its column and row sums
     * [B,N], in the order the device's kernels choose). */
    void (*backward)(const ag__kadd *p, const ag__kreal *h, const ag__kreal *u, const ag__kreal *v,
                     const ag__kreal *bias, const ag__kreal *g, ag__kreal *work, ag__kreal *gh, bool fresh_h, ag__kreal *gu, bool fresh_u, ag__kreal *gv,
                     bool fresh_v, ag__kreal *gbias, bool fresh_bias);
} ag__additive_kernels;

extern const ag__additive_kernels ag__additive_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__additive_kernels *ag__additive_on(const char *op, ag_device dev);

/* MPSAN's masked unit's attention (docs/models.md, MPSAN's masked units) as one op:
 *     e[b,q,k] = c tanh((h[b,k].u + h[b,q].v + bias) / c)   (elu: ELU((...) / c)),
 *     p[b,q,:] = softmax_k(e[b,q,k] + mask[b,q,k]),   out[b,q] = sum_k p[b,q,k] h[b,k],
 * h [B,N,d], u and v [d], bias [1] -> out [B,N,d]; c > 0 (DiSAN: 5).  The
 * mask is an additive constant broadcast against the scores [B,N,N] as in
 * ag_masked_softmax (or NULL); a query row with no allowed key gives 0 and
 * no gradient (ag_mask_batch's masks make padded rows so).  Gradients to
 * h, u, v and bias.  If probs is not NULL it receives p [B,N,N]
 * (read-only, no gradient, valid until ag_step_end: heatmaps).  Forward is
 * one launch on the GPU, backward three; the composition it replaces
 * (two products, the adds, the scaled tanh, ag_masked_softmax, the
 * weighted sum) took 30 in all. */
ag_tensor *ag__additive_self_attention(ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias, ag_tensor *mask,
                                       double c, bool elu, ag_tensor **probs);
/* The same with the mask plane `plane` of masks [B,P,N,N] (ag_mask_batch's
 * P masks), read in place: the same bits as passing that plane sliced out. */
ag_tensor *ag__additive_self_attention_plane(ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias,
                                             ag_tensor *masks, int plane, double c, bool elu, ag_tensor **probs);
/* G units in one op (MPSAN's four): h [G,B,N,d], u and v [G,d], bias [G]
 * -> out [G,B,N,d], unit g under mask plane first + g of masks [B,P,N,N],
 * each unit the same bits as ag__additive_self_attention_plane on its own
 * slices, in the launches of one (forward one, backward three).  probs, if
 * not NULL, receives p [G,B,N,N]. */
ag_tensor *ag__additive_self_attention_planes(ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias,
                                              ag_tensor *masks, int first, double c, bool elu, ag_tensor **probs);
#endif

#endif
