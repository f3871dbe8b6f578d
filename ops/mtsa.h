/* mtsa.h - MTSA's token2token attention kernels (ops/dispatch.h): the CPU's
 * in ops/mtsa_attn.c, CUDA's in ops/cuda/mtsa.c (cuBLAS's batched
 * products) over the kernels of ops/cuda/mtsa.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_MTSA_H
#define AG_OPS_MTSA_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* `slices` [N,N] score slices, per_b of them per example (len[slice /
 * per_b] its length: ag__mtsa_attention_groups's G heads of B examples
 * are G*B examples, head g's copy of len at g*B), dh features; identity:
 * ER = M ⊙ exp(R), else the log-sigmoid score.  What the forward keeps
 * for backward: ER, [ES | v ⊙ ES] and [Z | Num] = ER [ES | v ⊙ ES], at
 * slice i's i*N*N, i*N*2dh, i*N*2dh.  Their layout is the device's: the
 * CPU stores [L,L] and [L,2dh] blocks (its GEMMs stop at L), CUDA full
 * [N,N] and [N,2dh] blocks, 0 on padded queries and keys (one batched
 * product serves every length).
 *
 * The row and column maxima are taken apart, so a live entry's Z is
 * e^-(its best key's distance below both maxima) at the least: with
 * scores ~1e3 (or ~50 in f32) that underflows, and H = Num / Z would be 0
 * or roundoff.  Such an entry (Z < AG_KMTSA_Z_MIN on a query row with an
 * allowed key) is computed directly, its own max over the keys
 * subtracted, and marked in [Z | Num]: Z = -(its sum), <= -1, and Num =
 * that max; backward takes it out of the products and adds its gradient
 * directly, reading S and the mask again (mask, mask_slices, mask_run:
 * what forward read, or NULL). */
typedef struct {
    const int32_t *len;
    ag__kreal *er, *ep, *zn;
    const ag__kreal *mask;
    int mask_slices, mask_run;
    int slices, per_b, N, dh;
    bool identity;
} ag__kmtsa;

/* Far above the smallest normal number over the roundoff of a sum of up
 * to 2^20 terms: a Z above it lost nothing to underflow. */
#ifdef AG_REAL_DOUBLE
#define AG_KMTSA_Z_MIN 1e-250
#else
#define AG_KMTSA_Z_MIN 1e-18f
#endif

typedef struct {
    /* out [slices,N,dh] = H from R, S, v and the {0,1} mask (or NULL):
     * slice i reads mask slice (i / mask_run) % mask_slices, so runs of
     * mask_run consecutive slices share one (ag_mtsa_attention's mask
     * [h,N,N] repeats every h slices: run 1; a head's B slices share its
     * mask: run B).  0 on padded queries.  Backward from g = dH: gr, gs,
     * gv (any NULL: not wanted; fresh: stored); s for the entries
     * computed directly. */
    void (*forward)(const ag__kmtsa *p, const ag__kreal *r, const ag__kreal *s, const ag__kreal *v, const ag__kreal *mask,
                    int mask_slices, int mask_run, ag__kreal *out);
    void (*backward)(const ag__kmtsa *p, const ag__kreal *r, const ag__kreal *s, const ag__kreal *v, const ag__kreal *g,
                     const ag__kreal *out, ag__kreal *gr, bool fresh_r, ag__kreal *gs, bool fresh_s, ag__kreal *gv,
                     bool fresh_v);
} ag__mtsa_kernels;

extern const ag__mtsa_kernels ag__mtsa_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__mtsa_kernels *ag__mtsa_on(const char *op, ag_device dev);

/* G heads of MTSA in one op (models/mtsa.c's heads, stacked head-major):
 * r [G,B,N,N], s and v [G,B,N,dh] -> out [G,B,N,dh], head g under mask g
 * of masks [G,N,N] (or one [N,N] for all heads, or NULL: all allowed),
 * every head under the examples' lengths len[B] (or NULL: all N).  Head g
 * is ag_mtsa_attention(r[g], s[g], v[g], masks[g], len, score), the same
 * bits on the CPU, forward and backward, in the launches of one call. */
ag_tensor *ag__mtsa_attention_groups(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *masks,
                                     const int32_t *len, ag_mtsa_score score);
#endif

#endif
