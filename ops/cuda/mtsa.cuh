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
 * from S and v, [Z | Num] = ER [ES | v ⊙ ES] (H: ag__mtsa_out_cuda below); backward [dZ | dNum]
 * into d (0 at the entries computed directly), then dR from dER, dS and dv
 * from [dES | d(v ⊙ ES)] (gs or gv may be NULL). */
void ag__mtsa_er_cuda(const ag__kreal *r, const ag__kreal *mask, int mask_slices, int mask_run, const int32_t *len,
                      int per_b, ag__kreal *er, int64_t slices, int N, bool identity);
void ag__mtsa_ep_cuda(const ag__kreal *s, const ag__kreal *v, const int32_t *len, int per_b, ag__kreal *ep,
                      int64_t slices, int N, int dh);
void ag__mtsa_d_cuda(const ag__kreal *g, const ag__kreal *out, const ag__kreal *zn, const int32_t *len, int per_b,
                     ag__kreal *d, int64_t slices, int N, int dh);
void ag__mtsa_r_grad_cuda(const ag__kreal *der, const ag__kreal *er, const ag__kreal *r, ag__kreal *gr, int64_t n,
                          bool identity, bool fresh);
void ag__mtsa_sv_grad_cuda(const ag__kreal *dep, const ag__kreal *ep, const ag__kreal *v, const int32_t *len, int per_b,
                           ag__kreal *gs, ag__kreal *gv, int64_t slices, int N, int dh, bool fresh_s, bool fresh_v);

/* The entries computed directly (ops/mtsa.h: Z underflowed on a query
 * row with an allowed key), what their kernels read besides [Z | Num]: a
 * kernel argument, so without padding (ints, widest fields first). */
typedef struct {
    const ag__kreal *r, *s, *v, *mask;
    const int32_t *len;
    int64_t slices;
    int mask_slices, mask_run, per_b, N, dh;
    int identity; /* ER = M ⊙ exp(R), else the log-sigmoid score */
} ag__kmtsa_direct;

/* Forward: H from [Z | Num] into out, every such entry's computed
 * directly and marked in zn.  Backward (after the products' gradients,
 * which d left them out of): their gradients added to gr, gs, gv (any
 * NULL: not wanted). */
void ag__mtsa_out_cuda(const ag__kmtsa_direct *p, ag__kreal *zn, ag__kreal *out);
void ag__mtsa_direct_grad_cuda(const ag__kmtsa_direct *p, const ag__kreal *zn, const ag__kreal *g,
                               const ag__kreal *out, ag__kreal *gr, ag__kreal *gs, ag__kreal *gv);

AG_KERNELS_END

#endif
