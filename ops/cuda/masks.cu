/* masks.cu - the CUDA side of ops/masks.c, a thread an element: a batch's
 * masks from the cached positional planes and the lengths, so the host
 * neither fills [B,h,N,N] nor uploads it; ag_zero_padding's rows. */
#include "../../graph/prelude.cuh"
#include "../masks.h"

/* The CPU's sums exactly: pos - w d, two roundings (nvcc runs -fmad=false). */
__global__ void pad_planes_kernel(const ag_real *pos, const int32_t *lengths, const int32_t *dists,
                                  const ag_real *weight, ag_real *out, int B, int h, int N) {
    int64_t plane = (int64_t)N * N, n = (int64_t)B * h * plane;
    AG_CUDA_FOR(e, n) {
        int64_t b = e / (h * plane), in_plane = e % plane;
        int q = (int)(in_plane / N), k = (int)(in_plane % N), len = lengths[b];
        int64_t i = (e / plane) % h;
        ag_real v = pos[i * plane + in_plane];
        if (dists && weight[i] != 0 && q < len && k < len) v -= weight[i] * (ag_real)dists[b * plane + in_plane];
        out[e] = q >= len || k >= len ? (ag_real)-INFINITY : v;
    }
}

static void pad_planes(const ag_real *pos, const int32_t *lengths, const int32_t *dists, const ag_real *weight,
                       ag_real *out, int B, int h, int N) {
    int64_t n = (int64_t)B * h * N * N;
    if (n > 0)
        ag__launch(pad_planes_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, pos, lengths, dists, weight, out, B, h,
                   N);
}

__global__ void pad_rows_kernel(const ag_real *x, const int32_t *lengths, ag_real *y, int N, int64_t inner,
                                bool add, int64_t n) {
    AG_CUDA_FOR(e, n) {
        int64_t row = e / inner;
        ag_real v = row % N < lengths[row / N] ? x[e] : (ag_real)0;
        y[e] = add ? y[e] + v : v;
    }
}

static void pad_rows(const ag_real *x, const int32_t *lengths, ag_real *y, int B, int N, int64_t inner, bool add) {
    int64_t n = (int64_t)B * N * inner;
    if (n > 0) ag__launch(pad_rows_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, lengths, y, N, inner, add, n);
}

extern "C" const ag__masks_kernels ag__masks_cuda = {pad_planes, pad_rows};
