/* dist.cu - the GPU side of distributed/dist.c's flat gradient buffer: every
 * parameter's gradient packed into one device buffer for one allreduce, and
 * unpacked from it, with the host path's arithmetic (the rank's weight
 * before the sum, 1/N after, N read from the buffer's own tail). */
#include "../../graph/prelude.cuh"
#include "../dist_kernels.h"

/* gridDim.y is at most 65535: longer parameter lists go in several
 * launches; 1024 blocks of 256 threads fill an H100 (132 SMs x 2048). */
static const int MAX_SLOTS = 65535;
static const unsigned MAX_BLOCKS = 1024;

typedef struct {
    ag_real v[4];
} tail4;
static_assert(sizeof(tail4) == 4 * sizeof(ag_real), "tail4: no padding");
template <> struct ag__no_padding<tail4> : std::true_type {}; /* reals only, no padding: a launch's bytes are its own */

/* Block row y copies slot y; the first block also writes the tail. */
__global__ void pack_kernel(const ag__kgrad_slot *slots, ag_real w, bool zero, ag_real *flat, int64_t n, tail4 tail,
                            bool first) {
    if (first && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x < 4) flat[n + threadIdx.x] = tail.v[threadIdx.x];
    ag__kgrad_slot s = slots[blockIdx.y];
    AG_CUDA_FOR(k, s.size) flat[s.offset + k] = zero ? 0 : w * s.grad[k];
}

__global__ void unpack_kernel(const ag__kgrad_slot *slots, const ag_real *flat, int64_t n) {
    double total = (double)flat[n + 1]; /* as distributed/dist.c computes 1/N on the host */
    ag_real inv = total > 0 ? (ag_real)(1 / total) : 0;
    ag__kgrad_slot s = slots[blockIdx.y];
    AG_CUDA_FOR(k, s.size) s.grad[k] = flat[s.offset + k] * inv;
}

static dim3 grid(int64_t largest, int slots) {
    unsigned x = ag__cuda_blocks(largest);
    return dim3(x < MAX_BLOCKS ? x : MAX_BLOCKS, (unsigned)slots);
}

static void pack(const ag__kgrad_slot *slots, int count, int64_t largest, ag__kreal w, bool zero,
                                    ag__kreal *flat, int64_t n, const ag__kreal tail[4]) {
    tail4 t = {{tail[0], tail[1], tail[2], tail[3]}};
    for (int first = 0; first < count; first += MAX_SLOTS) {
        int k = count - first < MAX_SLOTS ? count - first : MAX_SLOTS;
        ag__launch(pack_kernel, grid(largest, k), AG_CUDA_THREADS, 0, slots + first, w, zero, flat, n, t, first == 0);
    }
}

static void unpack(const ag__kgrad_slot *slots, int count, int64_t largest, const ag__kreal *flat,
                                      int64_t n) {
    for (int first = 0; first < count; first += MAX_SLOTS) {
        int k = count - first < MAX_SLOTS ? count - first : MAX_SLOTS;
        ag__launch(unpack_kernel, grid(largest, k), AG_CUDA_THREADS, 0, slots + first, flat, n);
    }
}

extern "C" const ag__dist_kernels ag__dist_cuda = {pack, unpack};
