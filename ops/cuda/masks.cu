/* masks.cu - the CUDA side of ops/masks.c: a batch's masks from the cached
 * positional planes and the lengths, a thread an element, so the host
 * neither fills [B,h,N,N] nor uploads it. */
#include "../../graph/prelude.cuh"
#include "../masks.h"

__global__ void pad_planes_kernel(const ag_real *pos, const int32_t *lengths, ag_real *out, int B, int h, int N) {
    int64_t plane = (int64_t)N * N, n = (int64_t)B * h * plane;
    AG_CUDA_FOR(e, n) {
        int64_t b = e / (h * plane), in_plane = e % plane;
        int q = (int)(in_plane / N), k = (int)(in_plane % N), len = lengths[b];
        int64_t i = (e / plane) % h;
        out[e] = q >= len || k >= len ? (ag_real)-INFINITY : pos[i * plane + in_plane];
    }
}

static void pad_planes(const ag_real *pos, const int32_t *lengths, ag_real *out, int B, int h, int N) {
    int64_t n = (int64_t)B * h * N * N;
    if (n > 0) ag__launch(pad_planes_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, pos, lengths, out, B, h, N);
}

extern "C" const ag__masks_kernels ag__masks_cuda = {pad_planes};
