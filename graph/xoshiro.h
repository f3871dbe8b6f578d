/* xoshiro.h - xoshiro256** (Blackman & Vigna) seeded through splitmix64,
 * on a bare uint64_t[4] state, shared by the engine's ag_rng and the data
 * pipeline's ag_data_rng (which stays free of engine types): fast,
 * reproducible on every platform, and a checkpoint stores four integers. */
#ifndef AG_XOSHIRO_H
#define AG_XOSHIRO_H

#include <stdint.h>

/* The same functions compile for the GPU (ops/dropout_mask.h draws the
 * dropout mask there from them), so AG_HD is __host__ __device__ under nvcc. */
#ifndef AG_HD
#ifdef __CUDACC__
#define AG_HD __host__ __device__
#else
#define AG_HD
#endif
#endif

AG_HD static inline uint64_t ag__splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

AG_HD static inline void ag__xoshiro_seed(uint64_t s[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) s[i] = ag__splitmix64(&seed); /* never all zero */
}

AG_HD static inline uint64_t ag__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

AG_HD static inline uint64_t ag__xoshiro_next(uint64_t s[4]) {
    uint64_t result = ag__rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = ag__rotl(s[3], 45);
    return result;
}

#endif
