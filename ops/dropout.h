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
} ag__dropout_kernels;

extern const ag__dropout_kernels ag__dropout_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__dropout_kernels *ag__dropout_on(const char *op, ag_device dev);
#endif

#endif
