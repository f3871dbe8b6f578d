/* dropout_mask.h - which units dropout keeps, defined one generator stream
 * at a time.
 *
 * The mask is a function of one draw from the caller's rng (the seed), an
 * element's global row (ag_set_dropout_row_base + its row) and its index in
 * that row, nothing else (ops/dropout.c says why).  A row is cut into
 * blocks of AG_MASK_BLOCK elements; each block runs AG_MASK_STREAMS
 * xoshiro256** streams seeded through splitmix64 from (seed, row, block),
 * and each draw of stream s gives two elements of the block: 16k + s from
 * its low 32 bits and 16k + 8 + s from its high ones.  An element is kept
 * when those 32 bits are below keep 2^32.
 *
 * The CPU computes the eight streams of a block at once in vector lanes
 * (ops/dropout.c); the GPU runs one stream a thread with the functions
 * below (ops/cuda/dropout.cu), so both devices drop the same units without
 * a mask crossing the bus.  tests/test_dropout_mask.c checks the CPU's
 * vector loop against these functions, on the CPU; the CUDA op tests check
 * the GPU's mask against the CPU's. */
#ifndef AG_DROPOUT_MASK_H
#define AG_DROPOUT_MASK_H

#include "../graph/xoshiro.h"

enum { AG_MASK_BLOCK = 4096, AG_MASK_STREAMS = 8, AG_MASK_STEP = 2 * AG_MASK_STREAMS };

/* The draw's key for block blk of global row `row`. */
AG_HD static inline uint64_t ag__mask_block_key(uint64_t seed, int64_t row, int64_t blk) {
    uint64_t x = seed + (uint64_t)row * 0x9e3779b97f4a7c15ULL;
    return ag__splitmix64(&x) + (uint64_t)blk * 0xd1b54a32d192ed03ULL;
}

/* Stream s takes the 4s-th to (4s+3)-th outputs of splitmix64 run from the
 * block's key (splitmix64's k-th output is a function of key + (k+1) golden,
 * so a stream skips to its own without running the others'). */
AG_HD static inline void ag__mask_stream_seed(uint64_t st[4], uint64_t key, int s) {
    key += (uint64_t)(4 * s) * 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < 4; i++) st[i] = ag__splitmix64(&key);
}

/* below = ceil(keep 2^32): a unit is kept when its 32 bits are below it. */
AG_HD static inline int64_t ag__mask_below(double keep) {
    double b = keep * 4294967296.0;
    int64_t i = (int64_t)b;
    return (double)i < b ? i + 1 : i;
}

/* Stream s's elements of one block of n (<= AG_MASK_BLOCK) elements. */
AG_HD static inline void ag__mask_stream(uint8_t *block, int64_t n, uint64_t key, int s, int64_t below) {
    uint64_t st[4];
    ag__mask_stream_seed(st, key, s);
    for (int64_t base = 0; base + s < n; base += AG_MASK_STEP) {
        uint64_t r = ag__xoshiro_next(st);
        block[base + s] = (int64_t)(r & 0xffffffffu) < below;
        if (base + AG_MASK_STREAMS + s < n) block[base + AG_MASK_STREAMS + s] = (int64_t)(r >> 32) < below;
    }
}

#endif
