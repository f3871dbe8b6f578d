/* squares.c - sums of squares in fixed blocks, the one order in which every
 * norm of optim/ adds: gradient clipping's and the L2 term's (gradients.c)
 * and the parameters' norm the update takes in its own pass (optimizer.c).
 * Each block of AG_SQ_BLOCK values is summed in AG_SQ_LANES double lanes,
 * the blocks then added in order (kernels.h): deterministic for any thread
 * count, and vectorised (a single running double was a 4-cycle add chain:
 * 10 ms over the LM's 7M gradients).  CUDA's blocks, in
 * optim/cuda/optimizer.cu, add the same lanes in the same order. */
#include "kernels.h"
#include "../graph/internal.h" /* the pool, AG_SIMD_CLONES */

typedef struct {
    const ag_real *x;
    int64_t n;
    double *block_sq;
} squares_job;

AG_SIMD_CLONES static void block_squares(void *ctx, int64_t b0, int64_t b1) {
    const squares_job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        const ag_real *x = j->x + b * AG_SQ_BLOCK;
        int64_t n = j->n - b * AG_SQ_BLOCK < AG_SQ_BLOCK ? j->n - b * AG_SQ_BLOCK : AG_SQ_BLOCK, i = 0;
        double acc[AG_SQ_LANES] = {0};
        for (; i + AG_SQ_LANES <= n; i += AG_SQ_LANES)
            for (int l = 0; l < AG_SQ_LANES; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
        for (; i < n; i++) acc[i % AG_SQ_LANES] += (double)x[i] * (double)x[i];
        double s = 0;
        for (int l = 0; l < AG_SQ_LANES; l++) s += acc[l];
        j->block_sq[b] = s;
    }
}

static int64_t blocks_of(int64_t n) { return (n + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK; }

void ag__sum_squares_blocks_serial(const ag_real *x, int64_t n, double *block_sq) {
    squares_job j = {.x = x, .n = n, .block_sq = block_sq};
    block_squares(&j, 0, blocks_of(n));
}

void ag__sum_squares_blocks(const ag_real *x, int64_t n, double *block_sq) {
    squares_job j = {.x = x, .n = n, .block_sq = block_sq};
    ag__parallel_range(blocks_of(n), 16, block_squares, &j);
}
