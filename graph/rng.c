/* rng.c - xoshiro256** seeded through splitmix64: fast, reproducible on every
 * platform, and its whole state is four integers a checkpoint can store. */
#include "internal.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ag_rng_seed(ag_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t ag_rng_next(ag_rng *r) { return ag__xoshiro_next(r->s); }

double ag_rng_uniform(ag_rng *r) { return (double)(ag_rng_next(r) >> 11) * 0x1.0p-53; }

double ag_rng_normal(ag_rng *r) { /* Box-Muller; one value per call keeps the state simple */
    double u1 = ag_rng_uniform(r), u2 = ag_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
