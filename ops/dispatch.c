/* dispatch.c - the lookup of ops/dispatch.h. */
#include "dispatch.h"

#include "../graph/device.h" /* ag_device_name */

const void *ag__kernels_on(const char *op, const char *family, const void *const *tables, ag_device dev) {
    if (dev != AG_CPU && dev != AG_CUDA) ag__fatal(op, "unknown device %d", (int)dev);
    if (!tables[dev])
        ag__fatal(op, "this attngrad has no %s kernels of the %s family (built without CUDA: meson setup -Dcuda=enabled)",
                  ag_device_name(dev), family);
    return tables[dev];
}
