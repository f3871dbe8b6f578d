/* dropout.h - the dropout family's kernels (ops/dispatch.h): the CPU's in
 * ops/dropout.c, CUDA's in ops/cuda/dropout.cu.  Every pointer is in the
 * device's memory. */
#ifndef AG_OPS_DROPOUT_H
#define AG_OPS_DROPOUT_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* The draw a mask is keyed by: its value, passed with the launch, or (at
 * non-NULL) where it lies in device memory.  Eagerly the value rides in the
 * launch's arguments, with no copy before it; a CUDA graph replays the
 * launch it captured with the same arguments, so under graphs each step's
 * draw is copied to `at` and the kernel reads it there. */
typedef struct {
    const uint64_t *at;
    uint64_t value;
} ag__seed;

/* ag__dropout_copies' draws, one a copy, the same way: by value (unused
 * ones 0), or at non-NULL `at`, `copies` of them in device memory.  By
 * value they must fit in a launch's arguments, hence the bound. */
enum { AG_DROPOUT_MAX_COPIES = 16 }; /* MTSA's most heads */
typedef struct {
    const uint64_t *at;
    uint64_t value[AG_DROPOUT_MAX_COPIES];
} ag__seeds;

typedef struct {
    /* The mask of ops/dropout_mask.h over `rows` rows of row_len, the first
     * being global row row_base, from the draw seed: kept[i] = 1 where the
     * element's 32 bits are below `below`.  Both devices drop the same
     * units. */
    void (*mask)(uint8_t *kept, int64_t rows, int64_t row_len, int64_t row_base, ag__seed seed, int64_t below);
    /* The forward: that mask over x's rows, and y = kept ? scale x : 0, in
     * one pass where the device can (CUDA: one launch; each generator
     * stream applies what it draws). */
    void (*forward)(uint8_t *kept, const ag__kreal *x, ag__kreal scale, ag__kreal *y, int64_t rows, int64_t row_len,
                    int64_t row_base, ag__seed seed, int64_t below);
    /* gx (+)= kept ? scale g : 0. */
    void (*backward)(const uint8_t *kept, const ag__kreal *g, ag__kreal scale, ag__kreal *gx, int64_t n, bool fresh);
    /* `copies` forwards into planes of kept and y [copies, n] (n = rows
     * row_len), plane c keyed by draw c of seeds, all on ag_dropout's rows
     * of one plane and the same row_base (CUDA: one launch for all).  Plane
     * c's input: x itself (!stacked: ag__dropout_copies), or plane c of x
     * [copies, n] (stacked: ag__dropout_planes).  kept NULL: no masks
     * (eval), each plane its input. */
    void (*copies_forward)(uint8_t *kept, const ag__kreal *x, bool stacked, ag__kreal scale, ag__kreal *y,
                           int copies, int64_t rows, int64_t row_len, int64_t row_base, ag__seeds seeds,
                           int64_t below);
    /* Their backwards, each plane c's step gx (+)= kept_c ? scale g_c : 0
     * with the backward's expression (fresh: it stores).  !stacked: the
     * copies share gx [n], so the steps run in tape order, the last
     * plane's first, fresh the first step only, and gx is that of
     * `copies` separate dropouts to the bit; stacked: gx [copies, n], a
     * plane each, disjoint.  kept NULL: every unit kept and scale 1.
     * CUDA: one launch. */
    void (*copies_backward)(const uint8_t *kept, const ag__kreal *g, ag__kreal scale, ag__kreal *gx, bool stacked,
                            int copies, int64_t n, bool fresh);
} ag__dropout_kernels;

extern const ag__dropout_kernels ag__dropout_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__dropout_kernels *ag__dropout_on(const char *op, ag_device dev);

/* y [copies, ...x.shape]: plane c is what the c-th of `copies` successive
 * ag_dropout(x, keep, training, rng) calls returns, to the bit - one rng
 * draw a copy, taken in plane order before anything else, each mask keyed
 * on x's rows as ag_dropout keys it - and x's gradient is theirs to the
 * bit, their backwards running in tape order (the last plane's first).
 * Eval or keep 1: no draw, y is x copied.  MPSAN drops its input
 * independently before each of its attention units: on the GPU one launch
 * forward and one backward, where separate dropouts took one each a copy.
 * copies in [1, AG_DROPOUT_MAX_COPIES]. */
ag_tensor *ag__dropout_copies(ag_tensor *x, int copies, double keep, bool training, ag_rng *rng);
/* The same with the draws given (draws[c] copy c's, taken by the caller:
 * ag__dropout_draws), for a model that must keep their order in its rng. */
ag_tensor *ag__dropout_copies_drawn(ag_tensor *x, int copies, double keep, bool training, const uint64_t *draws);

/* The draws ag_dropout takes, for a caller that must take them itself (so
 * their order in its rng stays what it was): n draws of rng into out, in
 * order, where ag_dropout(x, keep, training, rng) would draw (training and
 * keep < 1: one a call), none otherwise. */
void ag__dropout_draws(ag_rng *rng, bool training, double keep, uint64_t *out, int n);

/* y [G, ...] = x's G planes each dropped on its own: plane g is, to the
 * bit, ag_dropout(x[g], keep, training, rng) on the slice x[g] (shape
 * x.shape[1:], keyed on the slice's rows) when that call's one draw is
 * draws[g], and x's gradient is theirs.  A model with a head a plane
 * takes the heads' draws in its old order (ag__dropout_draws) and drops
 * them all in one op: on the GPU one launch forward and one backward.
 * Eval or keep 1: x itself, no node, draws unread (may be NULL).  x has 2
 * or more dims and G in [1, AG_DROPOUT_MAX_COPIES]. */
ag_tensor *ag__dropout_planes(ag_tensor *x, double keep, bool training, const uint64_t *draws);
#endif

#endif
