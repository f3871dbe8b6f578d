/* lamb.c - LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes") as a
 * plugin update rule: Adam's direction, scaled per parameter by a trust ratio ||θ|| / ||r||, a sum over the whole
 * parameter, which the rule's .sum pass gives.  Per element, with g the gradient, m and v the two slots, t the step:
 *     m = β1 m + (1-β1) g;   v = β2 v + (1-β2) g²
 *     r = (m / (1-β1^t)) / (sqrt(v) / sqrt(1-β2^t) + ε) + wd θ
 *     θ -= lr q r,   q = ||θ|| / ||r|| (1 where either is 0; at most 1 with trust_clip=1)
 * The formula and the defaults are timm's Lamb (lr 1e-3, β 0.9 and 0.999, ε 1e-6, weight decay 0.01): the
 * trust ratio only for parameters with weight decay, unless always_adapt=1 (with a group's weight_decay=0 for
 * biases and norms, as in BERT, those take Adam's step), and trust_clip=1 for LAMBC's ratio of at most 1.
 *
 *   ninja -C build examples/lamb.so
 *   build/tools/attngrad --plugin build/examples/lamb.so train --optim lamb:lr=1e-2 --out runs/lamb
 *   build/tools/optim_experiments --plugin build/examples/lamb.so --optim lamb:lr=1e-2 --optim adam:lr=1e-3
 * (cc -shared -fPIC -O3 -fno-math-errno -std=c11 -I include examples/lamb.c -o lamb.so builds it outside meson:
 * without -fno-math-errno GCC calls libm's sqrtf for each element and vectorizes nothing, 4 times slower.)
 * tests/test_optim_lamb.c checks it against the formula above in double, and at 1 and 2 threads. */
#include "attngrad.h"

#include <math.h>

enum { BETA1, BETA2, EPS, ALWAYS_ADAPT, TRUST_CLIP };     /* a->hparam[] in the order of lamb_hparams */
enum { SUM_VALUE_SQ, SUM_STEP_SQ, N_SUMS };               /* a->sums[]: ||θ||², ||r||² */

/* What every element's r needs, computed once a piece: the reciprocals of Adam's bias corrections (a multiply
 * where torch divides: the same number to the last bit or two, and a division and a half fewer per element). */
typedef struct {
    ag_real b1, b2, inv_c1, inv_root_c2, eps, wd;
} lamb_coef;

static lamb_coef lamb_coef_of(const ag_optim_args *a) {
    double b1 = a->hparam[BETA1], b2 = a->hparam[BETA2];
    return (lamb_coef){.b1 = (ag_real)b1, .b2 = (ag_real)b2, .inv_c1 = (ag_real)(1 / (1 - pow(b1, (double)a->t))),
                       .inv_root_c2 = (ag_real)(1 / sqrt(1 - pow(b2, (double)a->t))), .eps = (ag_real)a->hparam[EPS],
                       .wd = (ag_real)a->weight_decay};
}

#ifdef AG_REAL_DOUBLE
#define lamb_sqrt sqrt
#else
#define lamb_sqrt sqrtf
#endif

/* r, the step before the trust ratio, from the moments as this step leaves them: the same bits in both passes. */
static inline ag_real lamb_direction(const lamb_coef *k, ag_real m, ag_real v, ag_real value) {
    return m * k->inv_c1 / (lamb_sqrt(v) * k->inv_root_c2 + k->eps) + k->wd * value;
}

/* One element's moments, updated, and its r. */
static inline ag_real lamb_moments(const lamb_coef *k, ag_real *m, ag_real *v, ag_real g, ag_real value) {
    *m = k->b1 * *m + (1 - k->b1) * g;
    *v = k->b2 * *v + (1 - k->b2) * g * g;
    return lamb_direction(k, *m, *v, value);
}

/* The first pass: the moments, and the squares of θ and of r over this piece, in double.  The squares go into
 * LANES running sums, element j into lane j % LANES, so the compiler can keep them in vector registers (one running
 * sum is a chain of dependent adds it may not reorder). */
enum { LANES = 8 };
static void lamb_sum(const ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a,
                     double *sums) {
    ag_real *m = slot[0], *v = slot[1];
    const lamb_coef k = lamb_coef_of(a);
    double value_sq[LANES] = {0}, step_sq[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) {
            double r = lamb_moments(&k, &m[j + l], &v[j + l], g[j + l], p[j + l]);
            value_sq[l] += (double)p[j + l] * p[j + l], step_sq[l] += r * r;
        }
    for (; j < n; j++) {
        double r = lamb_moments(&k, &m[j], &v[j], g[j], p[j]);
        value_sq[j % LANES] += (double)p[j] * p[j], step_sq[j % LANES] += r * r;
    }
    for (int l = 0; l < LANES; l++) sums[SUM_VALUE_SQ] += value_sq[l], sums[SUM_STEP_SQ] += step_sq[l];
}

/* The second pass: θ -= lr q r, with the parameter's trust ratio q from the totals. */
static void lamb_update(ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a) {
    (void)g; /* read by the first pass */
    const ag_real *m = slot[0], *v = slot[1];
    const lamb_coef k = lamb_coef_of(a);
    double q = 1, value_norm = sqrt(a->sums[SUM_VALUE_SQ]), step_norm = sqrt(a->sums[SUM_STEP_SQ]);
    if ((a->weight_decay != 0 || a->hparam[ALWAYS_ADAPT] != 0) && value_norm > 0 && step_norm > 0)
        q = value_norm / step_norm;
    if (a->hparam[TRUST_CLIP] != 0 && q > 1) q = 1;
    const ag_real rate = (ag_real)(a->lr * q);
    for (int64_t j = 0; j < n; j++) p[j] -= rate * lamb_direction(&k, m[j], v[j], p[j]);
}

static const ag_optim_hparam lamb_hparams[] = {
    {"beta1", 0.9, 0, 1, AG_HPARAM_MAX_OPEN}, /* in [0, 1) */
    {"beta2", 0.999, 0, 1, AG_HPARAM_MAX_OPEN},
    {"eps", 1e-6, 0, HUGE_VAL, AG_HPARAM_MIN_OPEN},
    {"always_adapt", 0, 0, 1, AG_HPARAM_INT},
    {"trust_clip", 0, 0, 1, AG_HPARAM_INT},
    {NULL},
};
static const ag_optim_slot lamb_slots[] = {{"m", 0}, {"v", 0}, {NULL}};

static const ag_optim_rule lamb_rule = {
    .abi = AG_OPTIM_RULE_ABI,
    .name = "lamb",
    .lr = 1e-3, .weight_decay = 0.01,
    .hparams = lamb_hparams, .slots = lamb_slots,
    .update = lamb_update,
    .n_sums = N_SUMS, .sum = lamb_sum,
};

/* attngrad --plugin lamb.so calls it. */
ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_optim_register(&lamb_rule); }
