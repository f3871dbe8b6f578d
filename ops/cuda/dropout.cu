/* dropout.cu - the CUDA side of ops/dropout.c: the mask is drawn here by
 * the CPU's generator and keying (ops/dropout_mask.h), bit for bit, and
 * applied in the same kernel; and its backward. */
#include "../../graph/prelude.cuh"
#include "../dropout.h"

#include "../dropout_mask.h"

/* One thread a stream: thread t runs stream t % 8 of job t / 8, jobs being
 * (row, block) pairs, row-major, as the CPU's pool chunks are.  A warp's
 * threads write neighbouring bytes. */
__global__ void dropout_mask_kernel(uint8_t *kept, int64_t rows, int64_t row_len, int64_t blocks_per_row,
                                    int64_t row_base, ag__seed seed_arg, int64_t below) {
    const uint64_t seed = seed_arg.at ? *seed_arg.at : seed_arg.value;
    AG_CUDA_FOR(t, rows * blocks_per_row * AG_MASK_STREAMS) {
        int64_t job = t / AG_MASK_STREAMS, row = job / blocks_per_row, blk = job % blocks_per_row;
        int64_t first = blk * AG_MASK_BLOCK, left = row_len - first;
        ag__mask_stream(kept + row * row_len + first, left < AG_MASK_BLOCK ? left : (int64_t)AG_MASK_BLOCK,
                        ag__mask_block_key(seed, row_base + row, blk), (int)(t % AG_MASK_STREAMS), below);
    }
}

/* The mask kernel's threads, each then applying the elements it drew
 * (i = s mod 8 in its block: the bytes it just wrote, read back by the
 * thread that wrote them): the forward in one launch, where a mask
 * kernel and an elementwise one took two. */
__global__ void dropout_forward_kernel(uint8_t *kept, const ag_real *X, ag_real scale, ag_real *Y, int64_t rows,
                                       int64_t row_len, int64_t blocks_per_row, int64_t row_base,
                                       ag__seed seed_arg, int64_t below) {
    const uint64_t seed = seed_arg.at ? *seed_arg.at : seed_arg.value;
    AG_CUDA_FOR(t, rows * blocks_per_row * AG_MASK_STREAMS) {
        int64_t job = t / AG_MASK_STREAMS, row = job / blocks_per_row, blk = job % blocks_per_row;
        int64_t first = row * row_len + blk * AG_MASK_BLOCK, left = row_len - blk * AG_MASK_BLOCK;
        int64_t n = left < AG_MASK_BLOCK ? left : (int64_t)AG_MASK_BLOCK;
        int s = (int)(t % AG_MASK_STREAMS);
        ag__mask_stream(kept + first, n, ag__mask_block_key(seed, row_base + row, blk), s, below);
        for (int64_t i = first + s; i < first + n; i += AG_MASK_STREAMS) Y[i] = kept[i] ? scale * X[i] : 0;
    }
}

__global__ void dropout_grad_kernel(const uint8_t *kept, const ag_real *G, ag_real scale, ag_real *GX, int64_t n,
                                    bool fresh) {
    AG_CUDA_FOR(i, n) {
        if (kept[i]) GX[i] = fresh ? scale * G[i] : GX[i] + scale * G[i];
        else if (fresh) GX[i] = 0;
    }
}

/* The planes' forward: dropout_forward_kernel's threads for each of the
 * planes in one launch, thread t's plane being t / per_plane, its draw the
 * plane's, its input X (copies) or X's plane (stacked). */
__global__ void dropout_copies_kernel(uint8_t *kept, const ag_real *X, bool stacked, ag_real scale, ag_real *Y,
                                      int copies, int64_t rows, int64_t row_len, int64_t blocks_per_row,
                                      int64_t row_base, ag__seeds seeds, int64_t below) {
    const int64_t per_plane = rows * blocks_per_row * AG_MASK_STREAMS, n = rows * row_len;
    AG_CUDA_FOR(t, copies * per_plane) {
        int64_t c = t / per_plane, u = t % per_plane;
        const uint64_t seed = seeds.at ? seeds.at[c] : seeds.value[c];
        int64_t job = u / AG_MASK_STREAMS, row = job / blocks_per_row, blk = job % blocks_per_row;
        int64_t first = row * row_len + blk * AG_MASK_BLOCK, left = row_len - blk * AG_MASK_BLOCK;
        int64_t len = left < AG_MASK_BLOCK ? left : (int64_t)AG_MASK_BLOCK;
        int s = (int)(u % AG_MASK_STREAMS);
        uint8_t *k = kept + c * n;
        const ag_real *x = stacked ? X + c * n : X;
        ag_real *y = Y + c * n;
        ag__mask_stream(k + first, len, ag__mask_block_key(seed, row_base + row, blk), s, below);
        for (int64_t i = first + s; i < first + len; i += AG_MASK_STREAMS) y[i] = k[i] ? scale * x[i] : 0;
    }
}

/* Without masks (eval): each plane its input. */
__global__ void dropout_copies_plain_kernel(const ag_real *X, bool stacked, ag_real *Y, int64_t n, int copies) {
    AG_CUDA_FOR(i, copies * n) Y[i] = X[stacked ? i : i % n];
}

/* A thread an element of gx, running the backwards of the planes that
 * reach it in tape order (the last plane's first) with
 * dropout_grad_kernel's expressions: all of them where the copies share
 * x, so the sum is the separate dropouts' to the bit; its own plane's
 * alone where x is stacked.  No mask: every unit kept. */
__global__ void dropout_copies_grad_kernel(const uint8_t *kept, const ag_real *G, ag_real scale, ag_real *GX,
                                           bool stacked, int copies, int64_t n, bool fresh) {
    AG_CUDA_FOR(t, (stacked ? copies : 1) * n) {
        int64_t i = t % n, first = t / n; /* t < n where shared: planes 0 to copies-1 */
        int64_t last = stacked ? first : copies - 1;
        bool fresh_t = fresh;
        ag_real gx = fresh_t ? 0 : GX[t];
        for (int64_t c = last; c >= first; c--) {
            int64_t at = c * n + i;
            if (!kept || kept[at]) gx = fresh_t ? scale * G[at] : gx + scale * G[at];
            fresh_t = false;
        }
        GX[t] = gx;
    }
}

static void draw_mask(uint8_t *kept, int64_t rows, int64_t row_len, int64_t row_base, ag__seed seed, int64_t below) {
    if (rows <= 0 || row_len <= 0) return;
    int64_t blocks_per_row = (row_len + AG_MASK_BLOCK - 1) / AG_MASK_BLOCK;
    ag__launch(dropout_mask_kernel, ag__cuda_blocks(rows * blocks_per_row * AG_MASK_STREAMS), AG_CUDA_THREADS, 0, kept,
               rows, row_len, blocks_per_row, row_base, seed, below);
}

static void forward(uint8_t *kept, const ag_real *x, ag_real scale, ag_real *y, int64_t rows, int64_t row_len,
                    int64_t row_base, ag__seed seed, int64_t below) {
    if (rows <= 0 || row_len <= 0) return;
    int64_t blocks_per_row = (row_len + AG_MASK_BLOCK - 1) / AG_MASK_BLOCK;
    ag__launch(dropout_forward_kernel, ag__cuda_blocks(rows * blocks_per_row * AG_MASK_STREAMS), AG_CUDA_THREADS, 0,
               kept, x, scale, y, rows, row_len, blocks_per_row, row_base, seed, below);
}

static void mask_backward(const uint8_t *kept, const ag_real *g, ag_real scale, ag_real *gx, int64_t n, bool fresh) {
    if (n > 0)
        ag__launch(dropout_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, kept, g, scale, gx, n, fresh);
}

static void copies_forward(uint8_t *kept, const ag_real *x, bool stacked, ag_real scale, ag_real *y, int copies,
                           int64_t rows, int64_t row_len, int64_t row_base, ag__seeds seeds, int64_t below) {
    if (rows <= 0 || row_len <= 0) return;
    if (!kept) {
        ag__launch(dropout_copies_plain_kernel, ag__cuda_blocks(copies * rows * row_len), AG_CUDA_THREADS, 0, x,
                   stacked, y, rows * row_len, copies);
        return;
    }
    int64_t blocks_per_row = (row_len + AG_MASK_BLOCK - 1) / AG_MASK_BLOCK;
    ag__launch(dropout_copies_kernel, ag__cuda_blocks(copies * rows * blocks_per_row * AG_MASK_STREAMS),
               AG_CUDA_THREADS, 0, kept, x, stacked, scale, y, copies, rows, row_len, blocks_per_row, row_base, seeds,
               below);
}

static void copies_backward(const uint8_t *kept, const ag_real *g, ag_real scale, ag_real *gx, bool stacked,
                            int copies, int64_t n, bool fresh) {
    if (n > 0)
        ag__launch(dropout_copies_grad_kernel, ag__cuda_blocks((stacked ? copies : 1) * n), AG_CUDA_THREADS, 0, kept,
                   g, scale, gx, stacked, copies, n, fresh);
}

extern "C" const ag__dropout_kernels ag__dropout_cuda = {draw_mask, forward, mask_backward, copies_forward,
                                                        copies_backward};
