/* init.c - parameter initializers.  Values are drawn in double from the
 * generator, one draw per element in row-major order, then rounded to
 * ag_real: the same seed gives the same numbers in the f32 and f64 builds
 * (up to that rounding), and a model initialised in a different order of
 * calls gets different, but still reproducible, values. */
#include "../graph/internal.h"

#include <stdio.h>

/* The initializers write host memory: a tensor on a GPU is refused by
 * name, where writing through its device pointer would crash (or, in the
 * emulator, pass unnoticed).  Initialise on the CPU, then ag_params_to. */
static void need_host(const char *op, const ag_tensor *t) {
    if (t->device != AG_CPU && t->data)
        ag__fatal(op, "%s is on the %s: initializers write host memory; initialise it on the CPU, then move it "
                  "(ag_params_to)", t->name ? t->name : "the tensor", ag_device_name(t->device));
}

/* A parameter of a shapes-only list (ag_params.shapes_only) has no data:
 * the initializers leave it alone (the model is only being measured). */
void ag_init_zeros(ag_tensor *t) {
    need_host("ag_init_zeros", t);
    if (t->data) memset(t->data, 0, (size_t)t->size * sizeof(ag_real));
}

void ag_init_constant(ag_tensor *t, double value) {
    need_host("ag_init_constant", t);
    if (!t->data) return;
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)value;
}

static void fill_uniform(ag_tensor *t, double a, double b, ag_rng *rng) {
    if (!t->data) return;
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(a + (b - a) * ag_rng_uniform(rng));
}

static void fill_normal(ag_tensor *t, double mean, double std, ag_rng *rng) {
    if (!t->data) return;
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(mean + std * ag_rng_normal(rng));
}

void ag_init_uniform(ag_tensor *t, double a, double b, ag_rng *rng) {
    need_host("ag_init_uniform", t);
    if (!(a <= b)) ag__fatal("ag_init_uniform", "empty range U(%g, %g)", a, b);
    fill_uniform(t, a, b, rng);
}

void ag_init_normal(ag_tensor *t, double mean, double std, ag_rng *rng) {
    need_host("ag_init_normal", t);
    if (!(std >= 0)) ag__fatal("ag_init_normal", "std %g must be >= 0", std);
    fill_normal(t, mean, std, rng);
}

/* fan_in + fan_out of a weight stored [in, out]: the last two dims. */
static double glorot_fans(const char *op, const ag_tensor *t) {
    if (t->ndim < 2) {
        char s[64];
        ag__fatal(op, "needs a weight of at least 2 dims [in, out], got %s%s%s", ag_shape_str(t, s, sizeof s),
                  t->name ? " for " : "", t->name ? t->name : "");
    }
    return (double)t->shape[t->ndim - 2] + (double)t->shape[t->ndim - 1];
}

void ag_init_glorot_uniform(ag_tensor *t, double gain, ag_rng *rng) {
    need_host("ag_init_glorot_uniform", t);
    double fans = glorot_fans("ag_init_glorot_uniform", t);
    double bound = fans > 0 ? gain * sqrt(6.0 / fans) : 0;
    fill_uniform(t, -bound, bound, rng);
}

void ag_init_glorot_normal(ag_tensor *t, double gain, ag_rng *rng) {
    need_host("ag_init_glorot_normal", t);
    double fans = glorot_fans("ag_init_glorot_normal", t);
    fill_normal(t, 0, fans > 0 ? gain * sqrt(2.0 / fans) : 0, rng);
}
