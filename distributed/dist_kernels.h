/* dist_kernels.h - the kernels of data-parallel training's flat gradient
 * buffer (ops/dispatch.h): every parameter's gradient packed into one
 * buffer for one allreduce, and unpacked from it.  The CPU's in
 * distributed/dist.c, CUDA's in distributed/cuda/dist.cu; every pointer is in the
 * device's memory. */
#ifndef AG_DIST_KERNELS_H
#define AG_DIST_KERNELS_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

typedef struct {
    ag__kreal *grad;
    int64_t offset, size; /* where the gradient sits in the flat buffer */
} ag__kgrad_slot;

typedef struct {
    /* slots[0..count) (count >= 1), largest the longest size:
     * flat[offset + k] = w grad[k] (0 when zero: a rank without rows), and
     * flat[n..n+4) = tail. */
    void (*pack)(const ag__kgrad_slot *slots, int count, int64_t largest, ag__kreal w, bool zero, ag__kreal *flat,
                 int64_t n, const ag__kreal tail[4]);
    /* After the sum: grad[k] = flat[offset + k] inv, inv = (ag__kreal)(1 /
     * flat[n + 1]) (the summed count, in double), 0 when that is 0. */
    void (*unpack)(const ag__kgrad_slot *slots, int count, int64_t largest, const ag__kreal *flat, int64_t n);
} ag__dist_kernels;

extern const ag__dist_kernels ag__dist_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
const ag__dist_kernels *ag__dist_on(const char *op, ag_device dev);
#endif

#endif
