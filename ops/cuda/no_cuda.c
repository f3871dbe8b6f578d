/* no_cuda.c - the kernel launchers of kernels.h in a build without CUDA.
 * No tensor can be on the GPU there (ag_to and ag_set_device refuse first),
 * so these are never reached; they exist so that the ops' dispatch links. */
#include "../../graph/internal.h"
#include "kernels.h"

#define UNREACHABLE(name) ag__fatal(name, "this attngrad was built without CUDA")

void ag__grads_pack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, ag_kreal w, bool zero,
                         ag_kreal *flat, int64_t n, const ag_kreal tail[3]) {
    (void)slots, (void)count, (void)largest, (void)w, (void)zero, (void)flat, (void)n, (void)tail;
    UNREACHABLE("ag_dist_reduce_grads");
}
void ag__grads_unpack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, const ag_kreal *flat, int64_t n) {
    (void)slots, (void)count, (void)largest, (void)flat, (void)n;
    UNREACHABLE("ag_dist_reduce_grads");
}
