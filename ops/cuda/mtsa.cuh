/* mtsa.cuh - the launchers of ops/cuda/mtsa.cu, for ops/cuda/mtsa.c,
 * which composes them with cuBLAS into the family's CUDA table
 * (ops/mtsa.h).  C and C++: no engine types. */
#ifndef AG_CUDA_MTSA_CUH
#define AG_CUDA_MTSA_CUH

#include "../../graph/kreal.h"

AG_KERNELS_BEGIN

/* MTSA's token2token attention (ops/mtsa_attn.c), over `slices` [N,N]
 * score slices (per_b of them per example, len[slice / per_b]): ER
 * [slices,N,N] from R and the {0,1} mask (slice i's is mask slice
 * (i / mask_run) % mask_slices, or NULL), [ES | v ⊙ ES] [slices,N,2dh]
 * from S and v, H from [Z | Num] = ER [ES | v ⊙ ES]; backward [dZ | dNum]
 * into d, then dR from dER, dS and dv from [dES | d(v ⊙ ES)] (gs or gv
 * may be NULL). */
void ag__mtsa_er_cuda(const ag__kreal *r, const ag__kreal *mask, int mask_slices, int mask_run, const int32_t *len,
                      int per_b, ag__kreal *er, int64_t slices, int N, bool identity);
void ag__mtsa_ep_cuda(const ag__kreal *s, const ag__kreal *v, const int32_t *len, int per_b, ag__kreal *ep,
                      int64_t slices, int N, int dh);
void ag__mtsa_out_cuda(const ag__kreal *zn, const int32_t *len, int per_b, ag__kreal *out, int64_t slices, int N,
                       int dh);
void ag__mtsa_d_cuda(const ag__kreal *g, const ag__kreal *out, const ag__kreal *zn, const int32_t *len, int per_b,
                     ag__kreal *d, int64_t slices, int N, int dh);
void ag__mtsa_r_grad_cuda(const ag__kreal *der, const ag__kreal *er, const ag__kreal *r, ag__kreal *gr, int64_t n,
                          bool identity, bool fresh);
void ag__mtsa_sv_grad_cuda(const ag__kreal *dep, const ag__kreal *ep, const ag__kreal *v, const int32_t *len, int per_b,
                           ag__kreal *gs, ag__kreal *gv, int64_t slices, int N, int dh, bool fresh_s, bool fresh_v);

AG_KERNELS_END

#endif
