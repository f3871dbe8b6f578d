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
enum { AG_DROPOUT_MAX_COPIES = 8 };
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
    /* `copies` forwards of x (n = rows row_len elements) into planes of
     * kept and y [copies, n], plane c keyed by draw c of seeds (CUDA: one
     * launch for all).  kept NULL: no masks (eval), each plane is x. */
    void (*copies_forward)(uint8_t *kept, const ag__kreal *x, ag__kreal scale, ag__kreal *y, int copies, int64_t rows,
                           int64_t row_len, int64_t row_base, ag__seeds seeds, int64_t below);
    /* Their backwards in tape order, the last plane's first: for c =
     * copies-1 down to 0, gx (+)= kept_c ? scale g_c : 0, each step the
     * backward's expression (fresh: the first step stores), so gx is that
     * of `copies` separate dropouts to the bit.  kept NULL: every unit
     * kept and scale 1, the planes' sum.  CUDA: one launch. */
    void (*copies_backward)(const uint8_t *kept, const ag__kreal *g, ag__kreal scale, ag__kreal *gx, int copies,
                            int64_t n, bool fresh);
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
#endif

#endif
