/* gaussian.h - the Gaussian positional attention's kernels (ops/dispatch.h):
 * the CPU's in ops/gaussian.c, CUDA's in ops/cuda/gaussian.c (cuBLAS's
 * batched products) over the kernels of ops/cuda/gaussian.cu.  Every
 * pointer is in the device's memory. */
#ifndef AG_OPS_GAUSSIAN_H
#define AG_OPS_GAUSSIAN_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* The context of B examples of N positions and H features: len [B], the
 * weights w and the window sums sum [B,N] (unnormalised, before the
 * floor), kept for backward.  w's layout is the device's: the CPU stores
 * example b's [L,L] weights at b*N*N (its GEMMs stop at L), CUDA a full
 * [N,N] per example, 0 outside each window and on padding (one batched
 * product serves every length). */
typedef struct {
    const int32_t *len;
    ag__kreal *w, *sum;
    int B, N, H;
    bool strict;
    ag__kreal eps;
} ag__kgauss;

typedef struct {
    /* The mean recurrence: mu [B,N] and above (1 where the max took
     * m_t . b_t) from m [B,N,3] and the lengths; backward gm (fresh:
     * stored). */
    void (*mu_forward)(const ag__kreal *m, const int32_t *len, ag__kreal *mu, uint8_t *above, int B, int N);
    void (*mu_backward)(const ag__kreal *m, const ag__kreal *mu, const ag__kreal *g, const int32_t *len,
                        const uint8_t *above, ag__kreal *gm, int B, int N, bool fresh);
    /* out [B,N,H] = the weights (filled here, with the sums) times h, 0 on
     * padded queries.  Backward from g = dC: gh = W^T dC, and gmu, gsigma
     * [B,N] through dW = dC h^T (any of the three NULL: not wanted; fresh:
     * stored). */
    void (*context_forward)(const ag__kgauss *p, const ag__kreal *h, const ag__kreal *mu, const ag__kreal *sigma,
                            ag__kreal *out);
    void (*context_backward)(const ag__kgauss *p, const ag__kreal *h, const ag__kreal *mu, const ag__kreal *sigma,
                             const ag__kreal *g, ag__kreal *gh, bool fresh_h, ag__kreal *gmu, bool fresh_mu,
                             ag__kreal *gsigma, bool fresh_sigma);
    /* The forward's weights as [B,N,N] (row t, column i; 0 outside the
     * windows) for heatmaps. */
    void (*weights)(const ag__kgauss *p, ag__kreal *out);
} ag__gaussian_kernels;

extern const ag__gaussian_kernels ag__gaussian_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__gaussian_kernels *ag__gaussian_on(const char *op, ag_device dev);
#endif

#endif
