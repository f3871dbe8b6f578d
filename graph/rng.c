/* rng.c - the engine's generator (xoshiro.h) and the distributions drawn from it. */
#include "internal.h"
#include "xoshiro.h"

void ag_rng_seed(ag_rng *r, uint64_t seed) { ag__xoshiro_seed(r->s, seed); }

uint64_t ag_rng_next(ag_rng *r) { return ag__xoshiro_next(r->s); }

double ag_rng_uniform(ag_rng *r) { return (double)(ag_rng_next(r) >> 11) * 0x1.0p-53; }

double ag_rng_normal(ag_rng *r) { /* Box-Muller; one value per call keeps the state simple */
    double u1 = ag_rng_uniform(r), u2 = ag_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
