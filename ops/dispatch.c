/* dispatch.c - the lookup of ops/dispatch.h, and step memory on a device. */
#include "dispatch.h"

#include "../graph/device.h"

const void *ag__kernels_on(const char *op, const char *family, const void *const *tables, ag_device dev) {
    if (dev != AG_CPU && dev != AG_CUDA) ag__fatal(op, "unknown device %d", (int)dev);
    if (!tables[dev])
        ag__fatal(op, "this attngrad has no %s kernels of the %s family (built without CUDA: meson setup -Dcuda=enabled)",
                  ag_device_name(dev), family);
    return tables[dev];
}

void *ag__step_alloc_on(ag_device dev, size_t bytes) {
    return dev == AG_CUDA ? ag__cuda_arena_alloc(bytes) : ag_arena_alloc(bytes);
}

int32_t *ag__step_i32_on(ag_device dev, const int32_t *host, int64_t n) {
    if (dev == AG_CUDA) return ag__to_device_i32(host, n);
    int32_t *copy = ag_arena_alloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    if (n > 0) memcpy(copy, host, (size_t)n * sizeof *copy);
    return copy;
}

void *ag__step_copy_on(ag_device dev, const void *host, size_t bytes) {
    void *copy = ag__step_alloc_on(dev, bytes > 0 ? bytes : 1);
    if (dev == AG_CUDA) ag__cuda_copy(copy, AG_CUDA, host, AG_CPU, bytes);
    else if (bytes > 0) memcpy(copy, host, bytes);
    return copy;
}
