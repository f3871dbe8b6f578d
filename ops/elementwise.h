/* elementwise.h - the elementwise family's kernels (ops/dispatch.h): the
 * CPU's in ops/elementwise.c, CUDA's in ops/cuda/elementwise.cu.  Every
 * pointer is in the device's memory.  Besides the ops' own kernels, fill
 * and add_into serve the engine (graph/tape.c's seed, graph/device.c's
 * ag_to backward) and other families. */
#ifndef AG_OPS_ELEMENTWISE_H
#define AG_OPS_ELEMENTWISE_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* Binary ops with broadcasting: the output's shape right-aligned in 4
 * dims, and each operand's strides (0 where it is repeated).  op:
 * AG_BINARY_add, _sub, _mul, _div, _maximum. */
typedef struct {
    int shape[4];
    int64_t sa[4], sb[4];
} ag__kbcast;
enum { AG_BINARY_add, AG_BINARY_sub, AG_BINARY_mul, AG_BINARY_div, AG_BINARY_maximum, AG_BINARY_COUNT };

typedef struct {
    /* The unary table of ops/unary_table.h, by its index (AG_UNARY_<NAME>):
     * y = f(x); backward gx = (fresh ? 0 : gx) + g * f'(x, y). */
    void (*unary_forward)(int op, const ag__kreal *x, ag__kreal *y, int64_t n);
    void (*unary_backward)(int op, const ag__kreal *x, const ag__kreal *y, const ag__kreal *g, ag__kreal *gx, int64_t n,
                           bool fresh);
    /* y = a op b over the plan.  Backward: the gradient of one operand (side
     * 0: a, 1: b), whose strides are in bc: each of its elements sums, in
     * increasing output order, the terms of every output position that
     * reads it (no atomics: the same bits every run, for any thread count).
     * gx has the operand's size; fresh: store instead of add. */
    void (*binary_forward)(int op, const ag__kbcast *bc, const ag__kreal *a, const ag__kreal *b, ag__kreal *y);
    void (*binary_backward)(int op, int side, const ag__kbcast *bc, const ag__kreal *a, const ag__kreal *b,
                            const ag__kreal *g, ag__kreal *gx, int64_t gx_size, bool fresh);
    /* y = scale x + shift; backward gx (+)= scale g (gx may alias g when
     * fresh: a scaling in place). */
    void (*affine_forward)(const ag__kreal *x, ag__kreal *y, ag__kreal scale, ag__kreal shift, int64_t n);
    void (*affine_backward)(const ag__kreal *g, ag__kreal *gx, ag__kreal scale, int64_t n, bool fresh);
    /* y = min(max(x, lo), hi); backward gx (+)= g strictly inside (lo, hi),
     * 0 elsewhere. */
    void (*clamp_forward)(const ag__kreal *x, ag__kreal *y, ag__kreal lo, ag__kreal hi, int64_t n);
    void (*clamp_backward)(const ag__kreal *x, const ag__kreal *g, ag__kreal *gx, ag__kreal lo, ag__kreal hi, int64_t n,
                           bool fresh);
    /* y = a + w (b - a); backward da (+)= g - g w, db (+)= g w, dw (+)=
     * g (b - a), each only where its pointer is not NULL, each with its own
     * fresh (store instead of add).  One thread an element writes all
     * three in that order, so a gradient that aliases another (lerp(x, x,
     * w)) sums both terms, the second added to the first. */
    void (*lerp_forward)(const ag__kreal *a, const ag__kreal *b, const ag__kreal *w, ag__kreal *y, int64_t n);
    void (*lerp_backward)(const ag__kreal *a, const ag__kreal *b, const ag__kreal *w, const ag__kreal *g,
                          ag__kreal *ga, bool fresh_a, ag__kreal *gb, bool fresh_b, ag__kreal *gw, bool fresh_w,
                          int64_t n);
    /* y = value; y += x */
    void (*fill)(ag__kreal *y, ag__kreal value, int64_t n);
    void (*add_into)(ag__kreal *y, const ag__kreal *x, int64_t n);
    /* The gated unit over rows [a | b] of x [rows, 2F]: y = f(a) b [rows,
     * F], f the unary table's op (AG_UNARY_<NAME>).  Backward into gx
     * [rows, 2F]: ga = g b f'(a), gb = g f(a), f(a) made again (nothing
     * saved); fresh: store instead of add. */
    void (*glu_forward)(int op, const ag__kreal *x, ag__kreal *y, int64_t rows, int F);
    void (*glu_backward)(int op, const ag__kreal *x, const ag__kreal *g, ag__kreal *gx, int64_t rows, int F, bool fresh);
} ag__elementwise_kernels;

extern const ag__elementwise_kernels ag__elementwise_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__elementwise_kernels *ag__elementwise_on(const char *op, ag_device dev);
#endif

#endif
