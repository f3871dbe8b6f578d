/* optimizer.c - SGD, Adam/AdamW, Adadelta, Adagrad, RMSprop and Muon, exactly
 * as torch.optim documents them (see the formulas in attngrad/optim.h), and
 * the rules a program or a plugin registers (their registry and specs:
 * spec.c): the state, the step and its CPU kernels (optim/cuda: the GPU's),
 * the average of the parameters, parameter groups.
 *
 * An optimizer owns one block of state, allocated at init: `n_slots`
 * buffers per parameter, the parameter's size each (NULL where it keeps
 * none: a frozen parameter, a Muon matrix's v).  A step walks the
 * parameters and updates each element in place from its gradient, so it
 * never allocates.  Hyperparameters are doubles (as in PyTorch); each is
 * rounded to ag_real once per step, and the per-element arithmetic runs in
 * ag_real, which is what a float32 PyTorch tensor op does too. */
#include "options.h"
#include "kernels.h"
#include "../graph/device.h"
#include "../ops/dispatch.h"
#include "../ops/elementwise.h" /* fill: Adagrad's initial sums */
#include "../ops/matmul.h"      /* Muon's products */

#include <float.h>
#include <stdio.h>

/* ---- state ---- */

/* The update's own slots; the average's comes after them. */
static int rule_slots(const ag_optim_config *c) {
    switch (c->kind) {
    case AG_SGD: return c->momentum != 0 ? 1 : 0;
    case AG_ADAM:
    case AG_ADAMW: return c->amsgrad ? 3 : 2;
    case AG_ADADELTA: return 2;
    case AG_ADAGRAD: return 1;
    case AG_RMSPROP: return 1 + (c->momentum != 0) + c->centered;
    case AG_MUON: return 2; /* m; v for the AdamW part only (muon_keeps) */
    case AG_ADAFACTOR: return 3 + (c->beta1 > 0); /* row_var, col_var where factored, else variance (keeps_slot); exp_avg */
    default: break;
    }
    const ag__registered_rule *r = ag__optim_registered(c->kind);
    return r ? r->n_slots : 0;
}

static bool averages(const ag_optim_config *c) { return c->ema > 0 || c->swa > 0; }

/* The slots after the rule's: "slow" (lookahead), then "average". */
static int slow_slot(const ag_optim_config *c) { return rule_slots(c); }
static int average_slot(const ag_optim_config *c) { return rule_slots(c) + (c->lookahead > 0); }

static int slots_for(const ag_optim_config *c) { return average_slot(c) + averages(c); }

/* Whether parameter i takes Muon's own step: a 2-D parameter that
 * ag_optim_set_muon routed there, by default a weight matrix (not an
 * embedding table); the other parameters take its AdamW part. */
static bool muon_matrix(const ag_optimizer *o, int i) {
    const ag_tensor *p = o->params->items[i];
    if (o->cfg.kind != AG_MUON || p->ndim != 2) return false;
    return o->muon ? o->muon[i] : ag_is_weight_matrix(p);
}

/* Adafactor factors the second moment of a parameter of 2 or more dims
 * over its last two (torch: grad.dim() > 1). */
static bool factored(const ag_tensor *p) { return p->ndim >= 2; }

/* Whether parameter i has slot s: a trained one every slot, but a Muon
 * matrix's v (it keeps one buffer, as torch.optim.Muon) and the Adafactor
 * slots of the other form (factored or not). */
static bool keeps_slot(const ag_optimizer *o, int i, int s) {
    const ag_tensor *p = o->params->items[i];
    if (!p->requires_grad) return false;
    if (o->cfg.kind == AG_ADAFACTOR && s < 3) return factored(p) ? s < 2 : s == 2;
    return !(s == 1 && muon_matrix(o, i));
}

/* Slot s of parameter i: its shape, the parameter's but for Adafactor's
 * row_var [..., r, 1] and col_var [..., 1, c] (torch's keepdim shapes);
 * its dims, or -1 where it has none. */
int ag__optim_slot_shape(const ag_optimizer *o, int i, int s, int shape[AG_MAX_DIMS]) {
    const ag_tensor *p = o->params->items[i];
    if (!keeps_slot(o, i, s)) return -1;
    memcpy(shape, p->shape, sizeof p->shape);
    if (o->cfg.kind == AG_ADAFACTOR && s < 2) shape[p->ndim - 1 - s] = 1; /* row_var: c -> 1; col_var: r -> 1 */
    return p->ndim;
}

int64_t ag__optim_slot_numel(const ag_optimizer *o, int i, int s) {
    int shape[AG_MAX_DIMS], nd = ag__optim_slot_shape(o, i, s, shape);
    int64_t n = nd < 0 ? 0 : 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

const char *ag__optim_slot(const ag_optim_config *c, int s) {
    static const char *const sgd[] = {"momentum"}, *const adam[] = {"m", "v", "vmax"}, *const adadelta[] = {"v", "u"};
    if (s < 0 || s >= slots_for(c)) return NULL;
    if (s == average_slot(c) && averages(c)) return "average";
    if (s == slow_slot(c)) return "slow";
    switch (c->kind) {
    case AG_SGD: return sgd[s];
    case AG_ADAM:
    case AG_ADAMW: return adam[s];
    case AG_ADADELTA: return adadelta[s];
    case AG_ADAGRAD: return "sum";
    case AG_RMSPROP: return s == 0 ? "square_avg" : s == 1 && c->momentum != 0 ? "momentum_buffer" : "grad_avg";
    case AG_MUON: return adam[s]; /* a matrix's momentum buffer is its m */
    case AG_ADAFACTOR: return (const char *const[]){"row_var", "col_var", "variance", "exp_avg"}[s];
    default: return ag_optim_rule_of(c->kind)->slots[s].name;
    }
}

double ag__optim_slot_init(const ag_optim_config *c, int s) {
    if (c->kind == AG_ADAGRAD) return c->initial_accumulator_value; /* torch.full_like */
    const ag_optim_rule *r = ag_optim_rule_of(c->kind);
    return r && s >= 0 && s < rule_slots(c) ? r->slots[s].init : 0;
}

bool ag__optim_keeps(const ag_optim_config *c, const char *slot) {
    for (int s = 0; s < slots_for(c); s++)
        if (!strcmp(ag__optim_slot(c, s), slot)) return true;
    return false;
}

const char *ag_optim_slot_name(const ag_optimizer *opt, int s) {
    return s < opt->n_slots ? ag__optim_slot(&opt->cfg, s) : NULL;
}

/* A lazy update's row: the slice along the last dim (a vector is one row). */
static int64_t lazy_row(const ag_tensor *p) { return p->ndim > 0 ? p->shape[p->ndim - 1] : 1; }

/* Whether a zero gradient leaves cfg's values where they are and only
 * decays its state, by this factor (0: it does not): adadelta, rmsprop
 * without momentum or centering.  Their lazy rows owe the skipped steps. */
static double lazy_decay(const ag_optim_config *c) {
    if (c->kind == AG_ADADELTA) return c->rho;
    if (c->kind == AG_RMSPROP && c->momentum == 0 && !c->centered) return c->alpha;
    return 0;
}

/* A decaying lazy rule's missed counts, one zeroed array per trained
 * parameter on the state's device (ag_optimizer.missed). */
static void missed_init(ag_optimizer *opt) {
    if (!opt->cfg.lazy || lazy_decay(&opt->cfg) == 0 || opt->n_params <= 0) return;
    opt->missed = ag__malloc((size_t)opt->n_params * sizeof *opt->missed);
    for (int i = 0; i < opt->n_params; i++) {
        const ag_tensor *p = opt->params->items[i];
        opt->missed[i] = p->requires_grad && p->size > 0
                             ? ag__zeros_kept_on(opt->device, (size_t)(p->size / lazy_row(p)) * sizeof(int32_t),
                                                 "a lazy optimizer's missed steps")
                             : NULL;
    }
}

static void missed_free(ag_optimizer *opt) {
    if (!opt->missed) return;
    for (int i = 0; i < opt->n_params; i++) ag__free_kept_on(opt->device, opt->missed[i]);
    ag__free(opt->missed);
}

/* Every slot in one allocation on the state's device, each slot's arrays
 * one after another; frozen parameters (and Muon matrices' v) get none,
 * their pointers stay NULL.  Each slot starts at its initial value. */
static void lay_out_state(ag_optimizer *opt) {
    if (opt->n_slots <= 0 || opt->n_params <= 0) return;
    int64_t numel = 0;
    for (int i = 0; i < opt->n_params; i++)
        for (int s = 0; s < opt->n_slots; s++) numel += ag__optim_slot_numel(opt, i, s);
    opt->state = ag__zeros_kept_on(opt->device, ((size_t)numel + 1) * sizeof(ag_real), "the optimizer's state");
    opt->slot = ag__malloc((size_t)(opt->n_slots * opt->n_params) * sizeof *opt->slot);
    ag_real *next = opt->state;
    for (int s = 0; s < opt->n_slots; s++) {
        ag_real *first_of_slot = next;
        for (int i = 0; i < opt->n_params; i++) {
            bool kept = keeps_slot(opt, i, s);
            opt->slot[s * opt->n_params + i] = kept ? next : NULL;
            next += ag__optim_slot_numel(opt, i, s);
        }
        double init = ag__optim_slot_init(&opt->cfg, s);
        if (init != 0 && next > first_of_slot)
            ag__elementwise_on("ag_optim_init", opt->device)->fill(first_of_slot, (ag_real)init, next - first_of_slot);
    }
}

ag_status ag_optim_init(ag_optimizer *opt, ag_params *ps, const ag_optim_config *cfg) {
    *opt = (ag_optimizer){0};
    ag_status st = ag_optim_check(cfg);
    if (st) return st;
    opt->cfg = *cfg;
    opt->lr = cfg->lr;
    opt->params = ps;
    opt->n_params = ps->count;
    opt->n_slots = slots_for(cfg);
    const ag_tensor *first = NULL;
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *p = ps->items[i];
        if (!p->requires_grad) continue;
        if (!first) first = p;
        else if (p->device != first->device)
            ag__fatal("ag_optim_init", "parameters on two devices: '%s' on the %s, '%s' on the %s (ag_params_to "
                      "moves them all)", first->name, ag_device_name(first->device), p->name,
                      ag_device_name(p->device));
    }
    opt->device = first ? first->device : AG_CPU;
    if (opt->device != AG_CPU && ag__optim_registered(cfg->kind)) {
        ag_device dev = opt->device;
        *opt = (ag_optimizer){0};
        return ag__fail(AG_ERR_ARG, "ag_optim_init: optimizer '%s' is a registered rule, whose update runs on the CPU "
                        "only, but the parameters are on the %s: train on the CPU, or use a built-in optimizer "
                        "(sgd, adam, ...), which has kernels there", ag_optim_name(cfg->kind), ag_device_name(dev));
    }
    lay_out_state(opt);
    missed_init(opt);
    return AG_OK;
}

void ag_optim_free(ag_optimizer *opt) {
    missed_free(opt);
    ag__free_kept_on(opt->device, opt->state);
    ag__free(opt->slot);
    ag__free(opt->weight_decay);
    ag__free(opt->lr_scale);
    ag__free(opt->muon);
    *opt = (ag_optimizer){0};
}

ag_real *ag_optim_state(const ag_optimizer *opt, const char *param, const char *slot) {
    ag__optim_catch_up((ag_optimizer *)opt); /* lazy adadelta, rmsprop: what the caller reads is the dense rule's state */
    for (int s = 0; s < opt->n_slots; s++) {
        if (strcmp(ag_optim_slot_name(opt, s), slot)) continue;
        for (int i = 0; i < opt->n_params; i++)
            if (!strcmp(opt->params->items[i]->name, param)) return opt->slot[s * opt->n_params + i];
    }
    return NULL;
}

int ag_optim_state_shape(const ag_optimizer *opt, const char *param, const char *slot, int shape[AG_MAX_DIMS]) {
    for (int s = 0; s < opt->n_slots; s++) {
        if (strcmp(ag_optim_slot_name(opt, s), slot)) continue;
        for (int i = 0; i < opt->n_params; i++)
            if (!strcmp(opt->params->items[i]->name, param)) return ag__optim_slot_shape(opt, i, s, shape);
    }
    return -1;
}

/* ---- the updates ----
 *
 * Each parameter is updated in chunks of UPDATE_CHUNK elements, run on the
 * thread pool (elements are independent, so any split gives the same bits).
 * The per-element arithmetic is written once; the branches on the settings
 * (weight decay, momentum, amsgrad, ...) are taken once per chunk: each
 * setting is a constant argument of an always-inlined kernel, so every
 * combination compiles to its own branch-free loop that GCC vectorises
 * (a loop with an `if` on a setting inside stays scalar). */

enum { UPDATE_CHUNK = 1 << 15, LIVE_ROWS_GRAIN = 256 };

#define KERNEL static inline __attribute__((always_inline))

/* The coefficients of a step, computed once for both devices (the CUDA
 * kernels of optim/cuda/optimizer.cu take the same structs). */
/* The coefficients are filled field by field into zeroed memory (the
 * caller's): their padding and the union's unused tail stay 0, so the table
 * the device gets has no undefined byte, and the same coefficients are the
 * same bytes (graph/cuda_uploads.c sends bytes it saw before only once). */
static void sgd_coef(const ag_optimizer *o, double lr, double weight_decay, ag__ksgd *k) {
    const ag_optim_config *c = &o->cfg;
    k->lr = (ag_real)lr, k->wd = (ag_real)weight_decay, k->mu = (ag_real)c->momentum;
    k->keep = (ag_real)(1 - c->dampening), k->first = o->step == 1; /* the buffer starts as g */
    k->nesterov = c->nesterov;
}

/* PyTorch's implementation keeps vmax as the running max of the raw second
 * moment and bias-corrects it with the current step (older versions of its
 * documentation wrote the max of the corrected values instead); we follow
 * the implementation, which is what users compare against. */
static void adam_coef(const ag_optimizer *o, double lr, double weight_decay, ag__kadam *k) {
    const ag_optim_config *c = &o->cfg;
    const double t = (double)o->step;
    const bool decoupled = c->kind == AG_ADAMW || c->kind == AG_MUON; /* Muon's AdamW part */
    k->b1 = (ag_real)c->beta1, k->b2 = (ag_real)c->beta2, k->eps = (ag_real)(c->kind == AG_MUON ? c->adam_eps : c->eps);
    k->one_b1 = (ag_real)(1 - c->beta1), k->one_b2 = (ag_real)(1 - c->beta2);
    k->step_size = (ag_real)(lr / (1 - pow(c->beta1, t)));
    k->bc2_sqrt = (ag_real)sqrt(1 - pow(c->beta2, t));
    k->l2 = decoupled ? 0 : (ag_real)weight_decay;
    k->decay = (ag_real)(1 - lr * weight_decay); /* AdamW's shrink of θ, at the parameter's own rate (torch's group lr) */
    k->coupled_decay = k->l2 != 0;
    k->decoupled_decay = decoupled && weight_decay != 0;
}

static void adadelta_coef(const ag_optimizer *o, double lr, double weight_decay, ag__kadadelta *k) {
    const ag_optim_config *c = &o->cfg;
    k->lr = (ag_real)lr, k->wd = (ag_real)weight_decay, k->rho = (ag_real)c->rho;
    k->one_rho = (ag_real)(1 - c->rho), k->eps = (ag_real)c->eps;
}

static void adagrad_coef(const ag_optimizer *o, double lr, double weight_decay, ag__kadagrad *k) {
    const ag_optim_config *c = &o->cfg;
    k->clr = (ag_real)(lr / (1 + (double)(o->step - 1) * c->lr_decay));
    k->wd = (ag_real)weight_decay, k->eps = (ag_real)c->eps;
}

static void rmsprop_coef(const ag_optimizer *o, double lr, double weight_decay, ag__krmsprop *k) {
    const ag_optim_config *c = &o->cfg;
    k->lr = (ag_real)lr, k->wd = (ag_real)weight_decay, k->alpha = (ag_real)c->alpha;
    k->one_alpha = (ag_real)(1 - c->alpha), k->eps = (ag_real)c->eps, k->mu = (ag_real)c->momentum;
}

KERNEL void sgd_kernel(ag_real *restrict P, const ag_real *restrict G, ag_real *restrict buf, int64_t n,
                       const ag__ksgd *k, const bool decay, const bool momentum) {
    const ag_real lr = k->lr, wd = k->wd, mu = k->mu, keep = k->keep;
    const bool first = k->first, nesterov = k->nesterov;
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (decay) g += wd * P[j];
        if (momentum) {
            buf[j] = first ? g : mu * buf[j] + keep * g;
            g = nesterov ? g + mu * buf[j] : buf[j];
        }
        P[j] -= lr * g;
    }
}

AG_SIMD_CLONES
static void sgd_range(const ag__ksgd *k, ag_real *P, const ag_real *G, ag_real *buf, int64_t n) {
    if (k->mu != 0) {
        if (k->wd != 0) sgd_kernel(P, G, buf, n, k, true, true);
        else sgd_kernel(P, G, buf, n, k, false, true);
    } else {
        if (k->wd != 0) sgd_kernel(P, G, buf, n, k, true, false);
        else sgd_kernel(P, G, buf, n, k, false, false);
    }
}

KERNEL void adam_kernel(ag_real *restrict P, const ag_real *restrict G, ag_real *restrict m, ag_real *restrict v,
                        ag_real *restrict vmax, int64_t n, const ag__kadam *k, const bool coupled_decay,
                        const bool decoupled_decay, const bool ams) {
    const ag_real b1 = k->b1, b2 = k->b2, one_b1 = k->one_b1, one_b2 = k->one_b2, step_size = k->step_size,
                  bc2_sqrt = k->bc2_sqrt, eps = k->eps, l2 = k->l2, decay = k->decay;
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (coupled_decay) g += l2 * P[j];
        if (decoupled_decay) P[j] *= decay;
        m[j] = b1 * m[j] + one_b1 * g;
        v[j] = b2 * v[j] + one_b2 * g * g;
        ag_real second = v[j];
        if (ams) second = vmax[j] = v[j] > vmax[j] ? v[j] : vmax[j];
        P[j] -= step_size * m[j] / (sqrt(second) / bc2_sqrt + eps);
    }
}

AG_SIMD_CLONES
static void adam_range(const ag__kadam *k, ag_real *P, const ag_real *G, ag_real *m, ag_real *v, ag_real *vmax,
                       int64_t n) {
#define ADAM(cd, dd, ams) adam_kernel(P, G, m, v, vmax, n, k, cd, dd, ams)
    if (vmax) {
        if (k->coupled_decay) ADAM(true, false, true);
        else if (k->decoupled_decay) ADAM(false, true, true);
        else ADAM(false, false, true);
    } else {
        if (k->coupled_decay) ADAM(true, false, false);
        else if (k->decoupled_decay) ADAM(false, true, false);
        else ADAM(false, false, false);
    }
#undef ADAM
}

KERNEL void adadelta_kernel(ag_real *restrict P, const ag_real *restrict G, ag_real *restrict v, ag_real *restrict u,
                            int64_t n, const ag__kadadelta *k, const bool decay) {
    const ag_real lr = k->lr, wd = k->wd, rho = k->rho, one_rho = k->one_rho, eps = k->eps;
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (decay) g += wd * P[j];
        v[j] = rho * v[j] + one_rho * g * g;
        ag_real delta = sqrt(u[j] + eps) / sqrt(v[j] + eps) * g;
        u[j] = rho * u[j] + one_rho * delta * delta;
        P[j] -= lr * delta;
    }
}

AG_SIMD_CLONES
static void adadelta_range(const ag__kadadelta *k, ag_real *P, const ag_real *G, ag_real *v, ag_real *u, int64_t n) {
    if (k->wd != 0) adadelta_kernel(P, G, v, u, n, k, true);
    else adadelta_kernel(P, G, v, u, n, k, false);
}

KERNEL void adagrad_kernel(ag_real *restrict P, const ag_real *restrict G, ag_real *restrict sum, int64_t n,
                           const ag__kadagrad *k, const bool decay) {
    const ag_real clr = k->clr, wd = k->wd, eps = k->eps;
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (decay) g += wd * P[j];
        sum[j] += g * g;
        P[j] -= clr * (g / (sqrt(sum[j]) + eps));
    }
}

AG_SIMD_CLONES
static void adagrad_range(const ag__kadagrad *k, ag_real *P, const ag_real *G, ag_real *sum, int64_t n) {
    if (k->wd != 0) adagrad_kernel(P, G, sum, n, k, true);
    else adagrad_kernel(P, G, sum, n, k, false);
}

/* PyTorch's order: the square average, then (centered) the gradient's
 * average by lerp and the variance, the root plus eps; the momentum
 * buffer takes g / d, and θ moves by lr times it. */
KERNEL void rmsprop_kernel(ag_real *restrict P, const ag_real *restrict G, ag_real *restrict v, ag_real *restrict buf,
                           ag_real *restrict gavg, int64_t n, const ag__krmsprop *k, const bool decay,
                           const bool momentum, const bool centered) {
    const ag_real lr = k->lr, wd = k->wd, alpha = k->alpha, one_alpha = k->one_alpha, eps = k->eps, mu = k->mu;
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (decay) g += wd * P[j];
        v[j] = alpha * v[j] + one_alpha * g * g;
        ag_real second = v[j];
        if (centered) {
            gavg[j] += one_alpha * (g - gavg[j]);
            second = v[j] - gavg[j] * gavg[j];
        }
        ag_real d = sqrt(second) + eps;
        if (momentum) {
            buf[j] = mu * buf[j] + g / d;
            P[j] -= lr * buf[j];
        } else {
            P[j] -= lr * (g / d);
        }
    }
}

AG_SIMD_CLONES
static void rmsprop_range(const ag__krmsprop *k, ag_real *P, const ag_real *G, ag_real *v, ag_real *buf,
                          ag_real *gavg, int64_t n) {
#define RMSPROP(mom, cen)                                                    \
    do {                                                                     \
        if (k->wd != 0) rmsprop_kernel(P, G, v, buf, gavg, n, k, true, mom, cen); \
        else rmsprop_kernel(P, G, v, buf, gavg, n, k, false, mom, cen);      \
    } while (0)
    if (buf && gavg) RMSPROP(true, true);
    else if (buf) RMSPROP(true, false);
    else if (gavg) RMSPROP(false, true);
    else RMSPROP(false, false);
#undef RMSPROP
}

/* A registered rule's coefficients: its update, the arguments of this
 * parameter's step, and the parameter's slots (host memory: rules run on
 * the CPU alone).  A rule with sums: block_sums[b * n_sums + k], sum k of
 * block b (AG_SQ_BLOCK elements, the last one shorter), and their totals,
 * both in step memory. */
typedef struct {
    ag_optim_update_fn update;
    ag_optim_sum_fn sum;
    int n_slots, n_sums;
    ag_optim_args args;
    ag_real *slot[AG_OPTIM_MAX_SLOTS];
    double *block_sums, *totals;
} rule_coef;

static void rule_coef_of(const ag_optimizer *o, int i, double lr, double weight_decay, rule_coef *k) {
    const ag__registered_rule *r = ag__optim_registered(o->cfg.kind);
    k->update = r->rule->update, k->n_slots = rule_slots(&o->cfg);
    k->args = (ag_optim_args){.t = o->step, .lr = lr, .weight_decay = weight_decay, .hparam = o->cfg.hparam};
    for (int s = 0; s < k->n_slots; s++) k->slot[s] = o->slot[s * o->n_params + i];
    if (r->n_sums > 0) {
        int64_t blocks = (o->params->items[i]->size + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
        k->sum = r->sum, k->n_sums = r->n_sums;
        k->block_sums = ag__step_alloc_on(AG_CPU, (size_t)((blocks ? blocks : 1) * r->n_sums) * sizeof(double));
        k->totals = ag__step_alloc_on(AG_CPU, (size_t)r->n_sums * sizeof(double));
    }
}

/* Elements [begin, begin + n) of a rule's span: its update on that piece
 * (given the parameter's totals, where the rule has sums). */
static void rule_elements(const ag__update_span *u, int64_t begin, int64_t n) {
    const rule_coef *k = u->coef;
    ag_real *slot[AG_OPTIM_MAX_SLOTS] = {0};
    for (int s = 0; s < k->n_slots; s++) slot[s] = k->slot[s] + begin;
    ag_optim_args args = k->args;
    args.sums = k->n_sums > 0 ? k->totals : NULL;
    if (n > 0) k->update(u->p + begin, u->g + begin, slot, n, &args);
}

/* Blocks [begin, end) of a rule's span s: its .sum over each, into the
 * block's own sums.  The blocks are the same at any thread count. */
static void rule_sum_blocks(void *ctx, int s, int64_t begin, int64_t end) {
    const ag__update_span *u = &((const ag__update_span *)ctx)[s];
    const rule_coef *k = u->coef;
    for (int64_t b = begin; b < end; b++) {
        int64_t first = b * AG_SQ_BLOCK, n = u->n - first < AG_SQ_BLOCK ? u->n - first : AG_SQ_BLOCK;
        double *sums = k->block_sums + b * k->n_sums;
        ag_real *slot[AG_OPTIM_MAX_SLOTS] = {0};
        for (int i = 0; i < k->n_slots; i++) slot[i] = k->slot[i] + first;
        for (int i = 0; i < k->n_sums; i++) sums[i] = 0;
        k->sum(u->p + first, u->g + first, slot, n, &k->args, sums);
    }
}

/* A rule with sums, before its update: the .sum pass over every
 * parameter's blocks, in parallel, then each parameter's totals, its
 * blocks added in order: the same bits at any thread count. */
static void rule_sums_all(const ag__update_span *spans, int count) {
    const rule_coef *k0 = count > 0 ? spans[0].coef : NULL;
    if (!k0 || k0->n_sums == 0) return;
    int64_t room[64];
    int64_t *blocks = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)count * sizeof *blocks);
    for (int s = 0; s < count; s++) blocks[s] = (spans[s].n + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
    ag__parallel_spans(count, blocks, UPDATE_CHUNK / AG_SQ_BLOCK, rule_sum_blocks, (void *)spans);
    for (int s = 0; s < count; s++) {
        const rule_coef *k = spans[s].coef;
        for (int i = 0; i < k->n_sums; i++) {
            double total = 0;
            for (int64_t b = 0; b < blocks[s]; b++) total += k->block_sums[b * k->n_sums + i];
            k->totals[i] = total;
        }
    }
}

/* The CPU's updates: chunks of UPDATE_CHUNK elements of every parameter,
 * all in one parallel loop (ag__parallel_spans). */
typedef struct {
    int kind;
    bool gated_off; /* no update: the squares alone, where asked */
    const ag__update_span *spans;
} update_job;

static ag_real *at(ag_real *slot, int64_t begin) { return slot ? slot + begin : NULL; }

/* Elements [begin, begin + n) of span u's arrays, with the kernel of kind. */
static void update_elements(int kind, const ag__update_span *u, int64_t begin, int64_t n) {
    ag_real *P = u->p + begin;
    const ag_real *G = u->g + begin;
    switch (kind) {
    case AG_SGD: sgd_range(u->coef, P, G, at(u->s0, begin), n); break;
    case AG_ADAM:
    case AG_ADAMW: adam_range(u->coef, P, G, at(u->s0, begin), at(u->s1, begin), at(u->s2, begin), n); break;
    case AG_ADADELTA: adadelta_range(u->coef, P, G, at(u->s0, begin), at(u->s1, begin), n); break;
    case AG_ADAGRAD: adagrad_range(u->coef, P, G, at(u->s0, begin), n); break;
    case AG_RMSPROP: rmsprop_range(u->coef, P, G, at(u->s0, begin), at(u->s1, begin), at(u->s2, begin), n); break;
    default: rule_elements(u, begin, n); break; /* a registered rule (ag_optim_init kept it on the CPU) */
    }
}

/* Where the update clears g, it goes in pieces of CLEAR_PIECE elements, so
 * that g's piece is still in L1 when it is zeroed (16 KB of floats). */
enum { CLEAR_PIECE = 4096 };

/* The update of elements [begin, end) of span u, and g's zeroing where
 * asked.  Elements are independent: any cut gives the same bits. */
static void update_and_clear(int kind, const ag__update_span *u, int64_t begin, int64_t end) {
    if (!u->g_clear) {
        update_elements(kind, u, begin, end - begin);
        return;
    }
    for (int64_t b = begin; b < end; b += CLEAR_PIECE) {
        int64_t n = end - b < CLEAR_PIECE ? end - b : CLEAR_PIECE;
        update_elements(kind, u, b, n);
        memset(u->g_clear + b, 0, (size_t)n * sizeof(ag_real));
    }
}

static bool all_zero(const ag_real *g, int64_t n);

/* A decaying lazy rule: elements [begin, end) of a row that missed
 * `steps` steps get them, each a multiply of s0 (and s1) by the decay, as
 * ag__lazy_missed_steps does element by element; here a step at a time
 * over the piece, which stays in L1 and whose multiplies are SIMD lanes
 * (element by element they wait on each other), stopping once all of it
 * is 0.  The same bits. */
AG_SIMD_CLONES
static void catch_up_piece(const ag__update_span *u, int32_t steps, int64_t begin, int64_t end) {
    const ag_real f = u->decay;
    ag_real *restrict a = u->s0 + begin, *restrict b = u->s1 ? u->s1 + begin : NULL;
    const int64_t n = end - begin;
    for (int32_t s = 0; s < steps; s++) {
        if (s % 64 == 0 && all_zero(a, n) && (!b || all_zero(b, n))) return;
        for (int64_t j = 0; j < n; j++) a[j] = f * a[j];
        if (b)
            for (int64_t j = 0; j < n; j++) b[j] = f * b[j];
    }
}

/* Lazy: the live rows' pieces of [begin, end) (a range may start or end
 * inside a row; the row's flag was set from all of it), a run of live rows
 * at a time.  A dead row's gradient is zero already: nothing to clear. */
static void update_live_rows(int kind, const ag__update_span *u, int64_t begin, int64_t end) {
    const int64_t row = u->row, last = (end - 1) / row;
    for (int64_t r = begin / row; r <= last;) {
        if (!u->live[r]) {
            r++;
            continue;
        }
        int64_t r1 = r + 1;
        while (r1 <= last && u->live[r1]) r1++;
        if (u->catchup) /* a decaying rule: the steps these rows missed first (the live pass counted them) */
            for (int64_t c = r; c < r1; c++)
                catch_up_piece(u, u->catchup[c], c * row > begin ? c * row : begin, (c + 1) * row < end ? (c + 1) * row : end);
        update_and_clear(kind, u, r * row > begin ? r * row : begin, r1 * row < end ? r1 * row : end);
        r = r1;
    }
}

/* Lazy: the block sums of squares of the live rows' values in [begin,
 * end) (begin a multiple of AG_SQ_BLOCK): the bits of the full blocks
 * over values where the dead rows read 0 (each lane adds its elements in
 * order, and x + 0.0 is x).  The dead rows have not changed, so the
 * training step's check of the values skips reading them. */
static void live_block_squares(const ag__update_span *u, int64_t begin, int64_t end) {
    const int64_t row = u->row;
    for (int64_t b = begin; b < end; b += AG_SQ_BLOCK) {
        int64_t e = end - b < AG_SQ_BLOCK ? end : b + AG_SQ_BLOCK, first = b / row, last = (e - 1) / row, r = first;
        while (r <= last && u->live[r]) r++;
        if (r > last) { /* every row live: the usual block */
            ag__sum_squares_blocks_serial(u->p + b, e - b, u->block_sq + b / AG_SQ_BLOCK);
            continue;
        }
        double acc[AG_SQ_LANES] = {0};
        for (r = first; r <= last; r++) {
            if (!u->live[r]) continue;
            int64_t i = r * row > b ? r * row : b, re = (r + 1) * row < e ? (r + 1) * row : e;
            for (; i < re; i++) acc[(i - b) % AG_SQ_LANES] += (double)u->p[i] * (double)u->p[i];
        }
        double s = 0;
        for (int l = 0; l < AG_SQ_LANES; l++) s += acc[l];
        u->block_sq[b / AG_SQ_BLOCK] = s;
    }
}

/* Elements [begin, end) of span s's arrays: the update (unless gated
 * off), g's zeroing where asked, the squares where asked. */
static void update_range(void *ctx, int s, int64_t begin, int64_t end) {
    const update_job *j = ctx;
    const ag__update_span *u = &j->spans[s];
    if (!j->gated_off && u->row > 0) update_live_rows(j->kind, u, begin, end);
    else if (!j->gated_off) update_and_clear(j->kind, u, begin, end);
    if (u->block_sq && u->row > 0) live_block_squares(u, begin, end);
    else if (u->block_sq) ag__sum_squares_blocks_serial(u->p + begin, end - begin, u->block_sq + begin / AG_SQ_BLOCK);
}

/* Whether n values are all zero, -0 too: the OR of their bits without the
 * sign, in blocks of 64 (integer ORs, which vectorise; a float compare per
 * element ran at a quarter of the memory's speed), one test a block.  The
 * bits are read through a may_alias type, which C allows for any object. */
#ifdef AG_REAL_DOUBLE
typedef uint64_t __attribute__((may_alias)) real_bits;
#else
typedef uint32_t __attribute__((may_alias)) real_bits;
#endif
AG_SIMD_CLONES
static bool all_zero(const ag_real *g, int64_t n) {
    const real_bits *b = (const real_bits *)g;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        real_bits any = 0;
        for (int k = 0; k < 64; k++) any |= b[i + k] << 1;
        if (any) return false;
    }
    real_bits any = 0;
    for (; i < n; i++) any |= b[i] << 1;
    return any == 0;
}

/* live[r] of the lazy spans' rows [begin, end), and a decaying rule's
 * count of the steps each row missed (unless the gate skips the step). */
static void find_live_rows(void *ctx, int s, int64_t begin, int64_t end) {
    const update_job *j = ctx;
    const ag__update_span *u = &j->spans[s];
    for (int64_t r = begin; r < end; r++) {
        u->live[r] = !all_zero(u->g + r * u->row, u->row);
        if (u->missed && !j->gated_off) ag__lazy_row_steps(u, r, u->live[r]);
    }
}

static bool gated_off(const double *gate) { return gate && !isfinite(*gate); }

/* Every parameter's chunks in one parallel loop: with two threads the
 * small parameters (biases, gates) no longer run one after the other on
 * the caller, and a step wakes the pool once instead of once per
 * parameter.  Elements are independent, so the bits are those of one
 * loop per parameter. */
static void update_all_cpu(int kind, const ag__update_span *spans, int count, const double *gate) {
    bool squares = false;
    for (int s = 0; s < count; s++) squares = squares || spans[s].block_sq;
    if ((gated_off(gate) && !squares) || count <= 0) return;
    int64_t room[64];
    int64_t *lens = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)count * sizeof *lens);
    update_job j = {.kind = kind, .gated_off = gated_off(gate), .spans = spans};
    bool lazy = false; /* first the lazy spans' live rows, in a pass of their own */
    for (int s = 0; s < count; s++) {
        lens[s] = spans[s].row > 0 ? spans[s].n / spans[s].row : 0;
        lazy = lazy || lens[s] > 0;
    }
    if (lazy) ag__parallel_spans(count, lens, LIVE_ROWS_GRAIN, find_live_rows, &j);
    if (kind >= AG_OPTIM_RULE_FIRST && !j.gated_off) rule_sums_all(spans, count);
    for (int s = 0; s < count; s++) lens[s] = spans[s].n;
    ag__parallel_spans(count, lens, UPDATE_CHUNK, update_range, &j);
}

/* Rows [begin, end) of span s: the steps each missed, then its count 0. */
static void catch_up_rows(void *ctx, int s, int64_t begin, int64_t end) {
    const ag__update_span *u = &((const ag__update_span *)ctx)[s];
    for (int64_t r = begin; r < end; r++) {
        catch_up_piece(u, u->missed[r], r * u->row, (r + 1) * u->row);
        u->missed[r] = 0;
    }
}

static void catch_up_all_cpu(const ag__update_span *spans, int count) {
    int64_t room[64];
    int64_t *rows = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)(count ? count : 1) * sizeof *rows);
    for (int s = 0; s < count; s++) rows[s] = spans[s].row > 0 ? spans[s].n / spans[s].row : 0;
    ag__parallel_spans(count, rows, LIVE_ROWS_GRAIN, catch_up_rows, (void *)spans);
}

_Static_assert((int)AG__OPTIM_SGD == (int)AG_SGD && (int)AG__OPTIM_ADAM == (int)AG_ADAM &&
                   (int)AG__OPTIM_ADAMW == (int)AG_ADAMW && (int)AG__OPTIM_ADADELTA == (int)AG_ADADELTA &&
                   (int)AG__OPTIM_ADAGRAD == (int)AG_ADAGRAD && (int)AG__OPTIM_RMSPROP == (int)AG_RMSPROP,
               "optim/kernels.h's update kinds are ag_optim_kind's values");

/* The average's lerp and the swap, each array's elements on their own. */
typedef struct {
    ag_real w;
    ag_real *const *avg, *const *y;
    const ag_real *const *x;
} average_job;

static void average_span(void *ctx, int s, int64_t begin, int64_t end) {
    const average_job *j = ctx;
    ag_real *avg = j->avg[s], w = j->w;
    const ag_real *x = j->x[s];
    for (int64_t i = begin; i < end; i++) avg[i] = ag__lerp(avg[i], x[i], w);
}

static void average_all_cpu(const ag_real *w, ag_real *const *avg, const ag_real *const *x, const int64_t *n,
                            int count, const double *gate) {
    if (gated_off(gate)) return;
    average_job j = {.w = *w, .avg = avg, .x = x};
    ag__parallel_spans(count, n, AG_GRAIN_ELEMENTWISE, average_span, &j);
}

static void swap_span(void *ctx, int s, int64_t begin, int64_t end) {
    const average_job *j = ctx;
    ag_real *x = j->avg[s], *y = j->y[s];
    for (int64_t i = begin; i < end; i++) {
        ag_real t = x[i];
        x[i] = y[i], y[i] = t;
    }
}

static void swap_all_cpu(ag_real *const *x, ag_real *const *y, const int64_t *n, int count) {
    average_job j = {.avg = x, .y = y};
    ag__parallel_spans(count, n, AG_GRAIN_ELEMENTWISE, swap_span, &j);
}

static void lookahead_span(void *ctx, int s, int64_t begin, int64_t end) {
    const average_job *j = ctx;
    ag_real *slow = j->avg[s], *x = j->y[s], w = j->w;
    for (int64_t i = begin; i < end; i++) x[i] = slow[i] = ag__lerp(slow[i], x[i], w);
}

static void lookahead_all_cpu(const ag_real *w, ag_real *const *slow, ag_real *const *x, const int64_t *n, int count,
                              const double *gate) {
    if (gated_off(gate)) return;
    average_job j = {.w = *w, .avg = slow, .y = x};
    ag__parallel_spans(count, n, AG_GRAIN_ELEMENTWISE, lookahead_span, &j);
}

/* ---- Muon's elementwise passes on the CPU (its products: the matmul family's) ---- */

typedef struct {
    ag_real *b, *u, *y, *g_clear;
    const ag_real *g, *x;
    ag_real mu, one_mu, a, c, decay, rate;
    bool nesterov;
} muon_job;

AG_SIMD_CLONES static void muon_momentum_range(void *ctx, int64_t i0, int64_t i1) {
    const muon_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->u[i] = ag__muon_direction(j->b[i], j->g[i], j->mu, j->one_mu, j->nesterov, &j->b[i]);
}

/* The direction alone, b as it was (a step the gate skips). */
AG_SIMD_CLONES static void muon_direction_range(void *ctx, int64_t i0, int64_t i1) {
    const muon_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        ag_real b;
        j->u[i] = ag__muon_direction(j->b[i], j->g[i], j->mu, j->one_mu, j->nesterov, &b);
    }
}

static void muon_momentum_cpu(const ag__muon_span *spans, int count, ag_real mu, ag_real one_mu, bool nesterov,
                              const double *gate) {
    for (int s = 0; s < count; s++) {
        muon_job j = {.b = spans[s].b, .g = spans[s].g, .u = spans[s].u, .mu = mu, .one_mu = one_mu, .nesterov = nesterov};
        ag__parallel_range(spans[s].n, AG_GRAIN_ELEMENTWISE, gated_off(gate) ? muon_direction_range : muon_momentum_range,
                           &j);
    }
}

AG_SIMD_CLONES static void divide_range(void *ctx, int64_t i0, int64_t i1) {
    const muon_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->u[i] /= j->a;
}

/* torch's u.div_(u.norm().clamp(min=eps)): the norm rounded to ag_real, each element divided by it. */
static void muon_normalize_cpu(ag_real *u, int64_t n, int count, const double *sq, ag_real eps) {
    for (int s = 0; s < count; s++) {
        ag_real norm = (ag_real)sqrt(sq[s]);
        muon_job j = {.u = u + s * n, .a = norm > eps ? norm : eps};
        ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, divide_range, &j);
    }
}

AG_SIMD_CLONES static void axpby_range(void *ctx, int64_t i0, int64_t i1) {
    const muon_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] = j->a * j->x[i] + j->c * j->y[i];
}

static void axpby_cpu(ag_real a, const ag_real *x, ag_real b, ag_real *y, int64_t n) {
    muon_job j = {.x = x, .y = y, .a = a, .c = b};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, axpby_range, &j);
}

/* θ = decay θ - rate x, as torch's mul_ then add_(alpha=-rate); g zeroed where asked. */
AG_SIMD_CLONES static void muon_apply_range(void *ctx, int64_t i0, int64_t i1) {
    const muon_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        ag_real shrunk = j->y[i] * j->decay;
        j->y[i] = shrunk - j->rate * j->x[i];
    }
    if (j->g_clear) memset(j->g_clear + i0, 0, (size_t)(i1 - i0) * sizeof(ag_real));
}

static void muon_apply_cpu(const ag__muon_span *spans, int count, const double *gate) {
    if (gated_off(gate)) return;
    for (int s = 0; s < count; s++) {
        const ag__muon_span *a = &spans[s];
        muon_job j = {.y = a->p, .x = a->u, .g_clear = a->g_clear, .decay = a->decay, .rate = a->rate};
        ag__parallel_range(a->n, AG_GRAIN_ELEMENTWISE, muon_apply_range, &j);
    }
}

/* ---- Adafactor's kernels: a parameter as [batch, rows, cols] ----
 * Every sum is in double, in the order CUDA's threads add them (a row's in
 * ag__adafactor_row_sq's lanes, a column's down the rows). */

typedef struct {
    const ag_real *g, *R, *C, *means;
    ag_real *Rw, *Cw, *V, *u;
    int rows, cols;
    ag_real w, eps1;
    bool keep; /* the state moves (a step the gate skips keeps it) */
} adafactor_job;

/* R = lerp(R, mean over the row of g², w), rows [i0, i1) of all batch x rows. */
AG_SIMD_CLONES static void adafactor_rows_range(void *ctx, int64_t i0, int64_t i1) {
    const adafactor_job *j = ctx;
    for (int64_t r = i0; r < i1; r++)
        j->Rw[r] = ag__lerp(j->Rw[r], (ag_real)(ag__adafactor_row_sq(j->g + r * j->cols, j->cols) / j->cols), j->w);
}

/* C = lerp(C, mean over the column of g², w), columns [k0, k1) of all
 * batch x cols, a block of columns at a time down the rows. */
AG_SIMD_CLONES static void adafactor_cols_range(void *ctx, int64_t k0, int64_t k1) {
    const adafactor_job *j = ctx;
    enum { BLOCK = 256 };
    double sq[BLOCK];
    for (int64_t k = k0; k < k1;) {
        int64_t b = k / j->cols, c0 = k % j->cols, width = j->cols - c0;
        if (width > BLOCK) width = BLOCK;
        if (width > k1 - k) width = k1 - k;
        for (int64_t c = 0; c < width; c++) sq[c] = 0;
        for (int r = 0; r < j->rows; r++) {
            const ag_real *g = j->g + (b * j->rows + r) * j->cols + c0;
            for (int64_t c = 0; c < width; c++) sq[c] += (double)g[c] * g[c];
        }
        for (int64_t c = 0; c < width; c++) j->Cw[k + c] = ag__lerp(j->Cw[k + c], (ag_real)(sq[c] / j->rows), j->w);
        k += width;
    }
}

/* The CPU's phases run a parameter at a time (each its own parallel
 * loops): one dispatch is no cost here. */
static void adafactor_factors_cpu(const ag__adafactor_span *spans, int count, const double *gate) {
    for (int s = 0; s < count; s++) {
        const ag__adafactor_span *a = &spans[s];
        if (!a->R) continue;
        const int rows = a->rows, cols = a->cols;
        adafactor_job j = {.g = a->g, .Rw = a->R, .Cw = a->C, .rows = rows, .cols = cols, .w = a->k->w};
        if (!gated_off(gate)) {
            ag__parallel_range(a->batch * rows, AG_GRAIN_ELEMENTWISE / (cols > 0 ? cols : 1) + 1, adafactor_rows_range, &j);
            ag__parallel_range(a->batch * cols, AG_GRAIN_ELEMENTWISE / (rows > 0 ? rows : 1) + 1, adafactor_cols_range, &j);
        }
        for (int64_t b = 0; b < a->batch; b++) ag__adafactor_mean(a->R + b * rows, rows, a->k->eps1, &a->means[b]);
    }
}

/* Rows [r0, r1) of all batch x rows: a row's R and mean, its columns' C. */
AG_SIMD_CLONES static void adafactor_direction_rows(void *ctx, int64_t r0, int64_t r1) {
    const adafactor_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / j->rows;
        const ag_real row = j->R[r], mean = j->means[b], eps1 = j->eps1, *g = j->g + r * j->cols,
                      *C = j->C + b * j->cols;
        ag_real *u = j->u + r * j->cols;
        for (int c = 0; c < j->cols; c++) u[c] = ag__adafactor_direction(g[c], row, C[c], mean, eps1);
    }
}

/* A vector's: V = lerp(V, g², w) (unless gated: V read as it is), u from V. */
AG_SIMD_CLONES static void adafactor_vector_range(void *ctx, int64_t i0, int64_t i1) {
    const adafactor_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        ag_real v = j->keep ? ag__lerp(j->V[i], j->g[i] * j->g[i], j->w) : j->V[i];
        if (j->keep) j->V[i] = v;
        j->u[i] = ag__adafactor_vector_direction(j->g[i], v, j->eps1);
    }
}

static void adafactor_direction_cpu(const ag__adafactor_span *spans, int count, const double *gate) {
    for (int s = 0; s < count; s++) {
        const ag__adafactor_span *a = &spans[s];
        adafactor_job j = {.g = a->g, .R = a->R, .C = a->C, .means = a->means, .V = a->V, .u = a->u, .rows = a->rows,
                           .cols = a->cols, .w = a->k->w, .eps1 = a->k->eps1, .keep = !gated_off(gate)};
        if (a->R) ag__parallel_range(a->batch * a->rows, AG_GRAIN_ELEMENTWISE / a->cols + 1, adafactor_direction_rows, &j);
        else ag__parallel_range(a->batch * a->rows * a->cols, AG_GRAIN_ELEMENTWISE, adafactor_vector_range, &j);
    }
}

typedef struct {
    const ag__adafactor_span *a;
    ag_real rate;
} adafactor_apply_job;

AG_SIMD_CLONES static void adafactor_apply_range(void *ctx, int64_t i0, int64_t i1) {
    const adafactor_apply_job *j = ctx;
    const ag__adafactor_span *a = j->a;
    for (int64_t i = i0; i < i1; i++) ag__adafactor_step(a->p, a->m, a->u, i, j->rate, a->k);
    if (a->g_clear) memset(a->g_clear + i0, 0, (size_t)(i1 - i0) * sizeof(ag_real));
}

static void adafactor_apply_cpu(const ag__adafactor_span *spans, int count, const double *gate) {
    if (gated_off(gate)) return;
    for (int s = 0; s < count; s++) {
        const int64_t n = spans[s].batch * spans[s].rows * spans[s].cols;
        adafactor_apply_job j = {.a = &spans[s], .rate = (ag_real)ag__adafactor_rate(spans[s].sq, n, spans[s].k)};
        ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, adafactor_apply_range, &j);
    }
}

static const ag__optim_kernels optim_cpu = {.update_all = update_all_cpu,
                                            .average_all = average_all_cpu,
                                            .swap_all = swap_all_cpu,
                                            .lookahead_all = lookahead_all_cpu,
                                            .catch_up_all = catch_up_all_cpu,
                                            .muon_momentum = muon_momentum_cpu,
                                            .muon_normalize = muon_normalize_cpu,
                                            .axpby = axpby_cpu,
                                            .muon_apply = muon_apply_cpu,
                                            .adafactor_factors = adafactor_factors_cpu,
                                            .adafactor_direction = adafactor_direction_cpu,
                                            .adafactor_apply = adafactor_apply_cpu};
AG_DISPATCH(optim, optim_cpu)

/* Parameter i's weight decay and rate (its group's, schedules applied). */
static double weight_decay_of(const ag_optimizer *opt, int i) {
    return opt->weight_decay ? opt->weight_decay[i] : opt->cfg.weight_decay;
}
static double lr_of(const ag_optimizer *opt, int i) { return opt->lr_scale ? opt->lr * opt->lr_scale[i] : opt->lr; }

/* ---- Muon's matrices ----
 * One matrix at a time on its device, in the step's memory: X the
 * momentum's direction divided by its norm, then ns_steps Newton-Schulz
 * steps of three products each (the matmul family's batched product, on
 * OpenBLAS or cuBLAS), then the update.  torch transposes a tall matrix
 * to work on the wide side; here the products take X^T X and multiply on
 * the right instead, which is the same arithmetic on the transpose.  Every
 * value stays on the device (the norm too): no wait, and a CUDA graph can
 * record it. */

/* op(A_i) op(B_i) into C_i [M, N] for i < batch (beta 0: C is not read),
 * every operand dense, the batch's one after another. */
static void products(const ag__matmul_kernels *mm, int batch, const ag_real *A, bool ta, int a_rows, int a_cols,
                     const ag_real *B, bool tb, int b_rows, int b_cols, ag_real *C) {
    int M = ta ? a_cols : a_rows, K = ta ? a_rows : a_cols, N = tb ? b_rows : b_cols;
    mm->batched(&(ag__kmm){.A = A, .B = B, .C = C, .a_rows = a_rows, .a_cols = a_cols, .b_rows = b_rows,
                           .b_cols = b_cols, .M = M, .N = N, .K = K, .batch = batch, .beta = 0, .ta = ta, .tb = tb});
}

/* The scale of a matrix's step: match_rms_adamw's 0.2 sqrt(max(r, c)), an
 * AdamW-like RMS; else torch's "original" sqrt(max(1, A / B)) for its
 * [out, in] weights, which for attngrad's [in, out] is c / r. */
static double muon_scale(const ag_optim_config *c, int rows, int cols) {
    return c->match_rms_adamw ? 0.2 * sqrt((double)(rows > cols ? rows : cols))
                              : sqrt(fmax(1.0, (double)cols / (double)rows));
}

/* The step of the k Muon matrices idx[0..k) of one shape [rows, cols], in
 * one batch: each its momentum's direction, divided by its own norm, into
 * its slice of X [k, rows, cols]; then Newton-Schulz on all of them at once
 * (a batched product each, the launches of one matrix's); then each its
 * update.  A matrix's arithmetic is the same whatever its batch. */
static void muon_group_step(ag_optimizer *o, const int *idx, int k, const double *gate, bool clear_grads) {
    const char *op = "ag_optim_step";
    const ag_optim_config *c = &o->cfg;
    const ag_device dev = o->device;
    const ag__optim_kernels *kern = ag__optim_on(op, dev);
    const ag__grads_kernels *sq = ag__grads_on(op, dev);
    const ag__matmul_kernels *mm = ag__matmul_on(op, dev);
    const ag_tensor *p0 = o->params->items[idx[0]];
    const int rows = p0->shape[0], cols = p0->shape[1], m = rows <= cols ? rows : cols;
    const bool wide = rows <= cols; /* the Gram matrix X X^T, else X^T X: [m, m] either way */
    const int64_t n = p0->size, mm_n = (int64_t)m * m, blocks = (n + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
    ag_real *x = ag__step_alloc_on(dev, (size_t)(k * n) * sizeof *x), *t = ag__step_alloc_on(dev, (size_t)(k * n) * sizeof *t);
    ag_real *gram = ag__step_alloc_on(dev, (size_t)(k * mm_n) * sizeof *gram);
    ag_real *poly = ag__step_alloc_on(dev, (size_t)(k * mm_n) * sizeof *poly);
    double *block_sq = ag__step_alloc_on(dev, (size_t)(k * blocks + k) * sizeof *block_sq), *norm_sq = block_sq + k * blocks;
    int64_t room[17]; /* each matrix's first block, and the end */
    int64_t *first = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)(k + 1) * sizeof *first);
    for (int j = 0; j <= k; j++) first[j] = j * blocks;
    const int64_t *first_on_device = ag__step_copy_on(dev, first, (size_t)(k + 1) * sizeof *first);

    ag__muon_span *spans = ag__arena_alloc((size_t)k * sizeof *spans);
    const ag_real **slices = ag__arena_alloc((size_t)k * sizeof *slices);
    int64_t *lens = ag__arena_alloc((size_t)k * sizeof *lens);
    for (int j = 0; j < k; j++) {
        ag_tensor *p = o->params->items[idx[j]];
        double lr = lr_of(o, idx[j]), wd = weight_decay_of(o, idx[j]);
        spans[j] = (ag__muon_span){.p = p->data, .b = o->slot[idx[j]], .u = x + j * n,
                                   .g_clear = clear_grads ? p->grad : NULL, .g = p->grad, .n = n,
                                   .decay = (ag_real)(1 - lr * wd), .rate = (ag_real)(lr * muon_scale(c, rows, cols))};
        slices[j] = x + j * n, lens[j] = n;
    }
    /* each momentum's direction over its own norm: a launch per pass for the group */
    kern->muon_momentum(spans, k, (ag_real)c->momentum, (ag_real)(1 - c->momentum), c->nesterov, gate);
    if (sq->sum_squares_blocks_all) {
        sq->sum_squares_blocks_all(slices, lens, k, block_sq);
    } else {
        for (int j = 0; j < k; j++) sq->sum_squares_blocks(slices[j], n, block_sq + j * blocks);
    }
    sq->sum_blocks_each(block_sq, first_on_device, k, norm_sq);
    kern->muon_normalize(x, n, k, norm_sq, (ag_real)c->eps);
    for (int step = 0; step < c->ns_steps; step++) {
        products(mm, k, x, !wide, rows, cols, x, wide, rows, cols, gram);        /* A */
        products(mm, k, gram, false, m, m, gram, false, m, m, poly);              /* A A */
        kern->axpby(AG_MUON_NS_B, gram, AG_MUON_NS_C, poly, k * mm_n);           /* b A + c A A */
        if (wide) products(mm, k, poly, false, m, m, x, false, rows, cols, t);    /* (b A + c A A) X */
        else products(mm, k, x, false, rows, cols, poly, false, m, m, t);         /* X (b A + c A A) */
        kern->axpby(1, t, AG_MUON_NS_A, x, k * n);                                /* a X + that */
    }
    kern->muon_apply(spans, k, gate);
}

/* Every Muon matrix's step, those of one shape in one batch (MTSA's heads:
 * a Newton-Schulz step is five launches for all of them); block_sq[i]
 * (CPU), where asked, the squares of its values after it, as the other
 * parameters' update pass takes them. */
static void muon_matrices(ag_optimizer *o, const double *gate, double *const *block_sq, bool clear_grads) {
    if (o->cfg.kind != AG_MUON) return;
    const int np = o->n_params;
    int room[32 * 2];
    int *idx = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)(2 * (np ? np : 1)) * sizeof *idx), *done = idx + np;
    for (int i = 0; i < np; i++) done[i] = !o->params->items[i]->requires_grad || !muon_matrix(o, i);
    for (int i = 0; i < np; i++) {
        if (done[i]) continue;
        const ag_tensor *p = o->params->items[i];
        int k = 0;
        for (int j = i; j < np; j++) {
            const ag_tensor *q = o->params->items[j];
            if (done[j] || q->shape[0] != p->shape[0] || q->shape[1] != p->shape[1]) continue;
            idx[k++] = j, done[j] = 1;
        }
        if (!(o->device == AG_CPU && gated_off(gate))) /* a GPU's kernels read the gate themselves */
            muon_group_step(o, idx, k, gate, clear_grads);
    }
    for (int i = 0; i < np && block_sq; i++)
        if (block_sq[i] && o->params->items[i]->requires_grad && muon_matrix(o, i))
            ag__sum_squares_blocks(o->params->items[i]->data, o->params->items[i]->size, block_sq[i]);
}

/* ---- Adafactor's parameters ----
 * One parameter at a time on its device, as torch.optim.Adafactor's
 * single-tensor loop: its factors (or a vector's variance), the direction
 * u in the step's memory, the sums of squares of θ (before the update: its
 * RMS sets the step size) and of u (whose RMS clips it), then the update.
 * The sums never leave the device: no wait, and a CUDA graph can record it. */

/* Parameter i's scalars this step, into *k (zeroed: no undefined byte goes to the device). */
static void adafactor_coef(const ag_optimizer *o, int i, ag__kadafactor *k) {
    const ag_optim_config *c = &o->cfg;
    const double t = (double)o->step, lr = lr_of(o, i);
    k->w = (ag_real)pow(t, c->beta2_decay);
    k->eps1 = (ag_real)(c->eps > 0 ? c->eps : sizeof(ag_real) == sizeof(float) ? FLT_EPSILON : DBL_EPSILON);
    k->decay = (ag_real)(1 - lr * weight_decay_of(o, i));
    k->b1 = (ag_real)c->beta1, k->one_b1 = (ag_real)(1 - c->beta1);
    k->rho = c->relative_step ? fmin(lr, 1 / sqrt(t)) : lr; /* torch's min(lr, 1 / step ** 0.5) */
    k->eps2 = c->eps2, k->d = c->d, k->scaled = c->scale_parameter;
}

/* Every trained parameter's Adafactor step, phase by phase over all of
 * them (a few launches a step on a GPU, where a parameter at a time took
 * 7 to 9 each); block_sq[i] (CPU), where asked, the squares of parameter
 * i's values after it.  The parameters are independent: the same bits as
 * one at a time. */
static void adafactor_params(ag_optimizer *o, const double *gate, double *const *block_sq, bool clear_grads) {
    if (o->cfg.kind != AG_ADAFACTOR) return;
    const char *op = "ag_optim_step";
    const ag_device dev = o->device;
    const int n = o->n_params;
    ag__kadafactor room[32]; /* every parameter's scalars, one copy to the device */
    ag__kadafactor *coef = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)(n ? n : 1) * sizeof *coef);
    memset(coef, 0, (size_t)n * sizeof *coef);
    for (int i = 0; i < n; i++)
        if (o->params->items[i]->requires_grad) adafactor_coef(o, i, &coef[i]);
    const ag__kadafactor *coef_there = ag__step_copy_on(dev, coef, (size_t)n * sizeof *coef);

    /* The spans, and the arrays whose sums of squares each step needs:
     * 2j is span j's θ, 2j + 1 its u, their blocks laid one after another. */
    ag__adafactor_span *spans = ag__arena_alloc((size_t)(n ? n : 1) * sizeof *spans);
    const ag_real **arrays = ag__arena_alloc((size_t)(2 * n + 1) * sizeof *arrays);
    int64_t *lens = ag__arena_alloc((size_t)(2 * n + 1) * sizeof *lens);
    int64_t *first = ag__arena_alloc((size_t)(2 * n + 1) * sizeof *first);
    double *sums = ag__step_alloc_on(dev, (size_t)(2 * n + 1) * sizeof *sums);
    int count = 0;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        ag_tensor *p = o->params->items[i];
        if (!p->requires_grad || p->size == 0) continue;
        const bool f = factored(p);
        const int cols = f ? p->shape[p->ndim - 1] : (int)p->size, rows = f ? p->shape[p->ndim - 2] : 1;
        const int64_t batch = f ? p->size / ((int64_t)rows * cols) : 1;
        ag__adafactor_span *s = &spans[count];
        *s = (ag__adafactor_span){.k = &coef_there[i], .g = p->grad, .p = p->data,
                                  .u = ag__step_alloc_on(dev, (size_t)p->size * sizeof(ag_real)),
                                  .g_clear = clear_grads ? p->grad : NULL, .sq = sums + 2 * count,
                                  .batch = batch, .rows = rows, .cols = cols};
        if (f) {
            s->R = o->slot[i], s->C = o->slot[o->n_params + i];
            s->means = ag__step_alloc_on(dev, (size_t)batch * sizeof(ag_real));
        } else {
            s->V = o->slot[2 * o->n_params + i];
        }
        if (o->cfg.beta1 > 0) s->m = o->slot[3 * o->n_params + i];
        arrays[2 * count] = p->data, arrays[2 * count + 1] = s->u;
        lens[2 * count] = lens[2 * count + 1] = p->size;
        const int64_t blocks = (p->size + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
        first[2 * count + 1] = first[2 * count] + blocks, first[2 * count + 2] = first[2 * count + 1] + blocks;
        count++;
    }
    if (count > 0 && !(dev == AG_CPU && gated_off(gate))) { /* a GPU's kernels read the gate themselves */
        const ag__optim_kernels *k = ag__optim_on(op, dev);
        const ag__grads_kernels *sq = ag__grads_on(op, dev);
        double *block_sums = ag__step_alloc_on(dev, (size_t)(first[2 * count] + 1) * sizeof *block_sums);
        k->adafactor_factors(spans, count, gate);
        k->adafactor_direction(spans, count, gate);
        if (sq->sum_squares_blocks_all) { /* θ before the update, and u */
            sq->sum_squares_blocks_all(arrays, lens, 2 * count, block_sums);
        } else {
            for (int a = 0; a < 2 * count; a++) sq->sum_squares_blocks(arrays[a], lens[a], block_sums + first[a]);
        }
        sq->sum_blocks_each(block_sums, ag__step_copy_on(dev, first, (size_t)(2 * count + 1) * sizeof *first),
                            2 * count, sums);
        k->adafactor_apply(spans, count, gate);
    }
    for (int i = 0; block_sq && i < n; i++) {
        ag_tensor *p = o->params->items[i];
        if (p->requires_grad && p->size > 0 && block_sq[i]) ag__sum_squares_blocks(p->data, p->size, block_sq[i]);
    }
}

/* ---- the step ---- */

/* One parameter's coefficients: those of opt's kind, with its weight decay. */
typedef union {
    ag__ksgd sgd;
    ag__kadam adam;
    ag__kadadelta adadelta;
    ag__kadagrad adagrad;
    ag__krmsprop rmsprop;
    rule_coef rule;
} update_coef;

/* *c is zeroed: the fields of opt's kind are filled in (sgd_coef says why).
 * The parameter's rate is the current one times its scale, one product in
 * double: scale s gives the coefficients, to the bit, of an optimizer whose
 * rate is lr * s, and a schedule, which changes opt->lr, moves every
 * group's rate alike (as torch's schedulers scale each group's lr). */
static void coef_of(const ag_optimizer *opt, int i, update_coef *c) {
    double wd = weight_decay_of(opt, i), lr = lr_of(opt, i);
    switch (opt->cfg.kind) {
    case AG_SGD: sgd_coef(opt, lr, wd, &c->sgd); return;
    case AG_ADAM:
    case AG_ADAMW:
    case AG_MUON: adam_coef(opt, lr, wd, &c->adam); return; /* a Muon matrix's: muon_matrices */
    case AG_ADAFACTOR: return; /* adafactor_params: no update_all */
    case AG_ADADELTA: adadelta_coef(opt, lr, wd, &c->adadelta); return;
    case AG_ADAGRAD: adagrad_coef(opt, lr, wd, &c->adagrad); return;
    case AG_RMSPROP: rmsprop_coef(opt, lr, wd, &c->rmsprop); return;
    default: break;
    }
    rule_coef_of(opt, i, lr, wd, &c->rule);
}

/* Parameter i's arrays for update_all, in update's order of slots. */
static ag__update_span span_of(const ag_optimizer *o, int i, const update_coef *coef) {
    ag_tensor *p = o->params->items[i];
    ag_real *const *s = o->slot ? o->slot + i : NULL;
    const int np = o->n_params, slots = rule_slots(&o->cfg);
    ag__update_span u = {.coef = coef, .p = p->data, .g = p->grad, .n = p->size,
                         .s0 = slots > 0 ? s[0] : NULL, .s1 = slots > 1 ? s[np] : NULL,
                         .s2 = slots > 2 ? s[2 * np] : NULL};
    if (o->cfg.kind == AG_RMSPROP && o->cfg.momentum == 0) /* square_avg[, grad_avg]: no buffer at s1 */
        u.s2 = u.s1, u.s1 = NULL;
    if (o->cfg.lazy && p->size > 0) { /* rows along the last dim; a vector is one row */
        u.row = lazy_row(p);
        u.live = ag__step_alloc_on(o->device, (size_t)(p->size / u.row));
        if (o->missed && o->missed[i]) {
            u.missed = o->missed[i], u.decay = (ag_real)lazy_decay(&o->cfg);
            u.catchup = ag__step_alloc_on(o->device, (size_t)(p->size / u.row) * sizeof *u.catchup);
        }
    }
    return u;
}

static void optim_step(ag_optimizer *opt, const double *gate, double *const *block_sq, bool clear_grads);

void ag_optim_step(ag_optimizer *opt) { optim_step(opt, NULL, NULL, false); }

void ag__optim_catch_up(ag_optimizer *opt) {
    if (!opt->missed) return;
    ag__update_span room[32];
    ag__update_span *spans = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)opt->n_params * sizeof *spans);
    int count = 0;
    for (int i = 0; i < opt->n_params; i++) {
        if (!opt->missed[i]) continue;
        ag_tensor *p = opt->params->items[i];
        spans[count++] = (ag__update_span){.s0 = opt->slot[i], /* adadelta's v and u; rmsprop's square average */
                                           .s1 = opt->cfg.kind == AG_ADADELTA ? opt->slot[opt->n_params + i] : NULL,
                                           .n = p->size, .row = lazy_row(p), .missed = opt->missed[i],
                                           .decay = (ag_real)lazy_decay(&opt->cfg)};
    }
    ag__optim_on("ag_optim_state", opt->device)->catch_up_all(spans, count);
}

void ag__optim_missed_reset(ag_optimizer *opt) {
    if (!opt->missed) return;
    for (int i = 0; i < opt->n_params; i++) {
        const ag_tensor *p = opt->params->items[i];
        size_t bytes = (size_t)(p->size / lazy_row(p)) * sizeof(int32_t);
        if (!opt->missed[i]) continue;
        if (opt->device == AG_CPU) memset(opt->missed[i], 0, bytes);
        else ag__cuda_zero(opt->missed[i], bytes);
    }
}

/* ---- the average of the parameters (cfg.ema, cfg.swa) ---- */

/* Every trained parameter's values and its slot s (the average, the slow
 * weights), in the caller's arrays (room for AVERAGE_ROOM of them), else
 * in step memory; their count. */
typedef struct {
    ag_real **value, **average;
    int64_t *n;
    int count;
} average_arrays;

enum { AVERAGE_ROOM = 64 };

static average_arrays average_arrays_of(const ag_optimizer *o, int s, ag_real **value, ag_real **average, int64_t *n) {
    average_arrays a = {value, average, n, 0};
    if (o->n_params > AVERAGE_ROOM) { /* on the host: pointers and lengths the kernels read there */
        a.value = ag__arena_alloc((size_t)o->n_params * sizeof *a.value);
        a.average = ag__arena_alloc((size_t)o->n_params * sizeof *a.average);
        a.n = ag__arena_alloc((size_t)o->n_params * sizeof *a.n);
    }
    ag_real *const *slot = o->slot + s * o->n_params;
    for (int i = 0; i < o->n_params; i++)
        if (slot[i]) { /* frozen: no state */
            a.value[a.count] = o->params->items[i]->data, a.average[a.count] = slot[i];
            a.n[a.count++] = o->params->items[i]->size;
        }
    return a;
}

/* After update t: into the average, when it takes this update (ema: all;
 * swa: from update S on), with AveragedModel's weight: the first copies. */
static void average_update(ag_optimizer *opt, const double *gate) {
    const ag_optim_config *c = &opt->cfg;
    if (!averages(c) || (c->swa > 0 && opt->step < c->swa)) return;
    double w = opt->averaged == 0 ? 1 : c->ema > 0 ? 1 - c->ema : 1.0 / (double)(opt->averaged + 1);
    opt->averaged++; /* taken back with the step where the gate skips it (ag__optim_step_not_taken) */
    ag_real *value[AVERAGE_ROOM], *average[AVERAGE_ROOM];
    int64_t n[AVERAGE_ROOM];
    average_arrays a = average_arrays_of(opt, average_slot(c), value, average, n);
    ag_real wr = (ag_real)w;
    const ag_real *w_there = ag__step_copy_on(opt->device, &wr, sizeof wr);
    ag__optim_on("ag_optim_step", opt->device)
        ->average_all(w_there, a.average, (const ag_real *const *)a.value, a.n, a.count, gate);
}

/* The weights to evaluate: the average where the optimizer keeps one, else
 * Lookahead's slow weights (what its algorithm returns; its authors
 * evaluate on them), in the slot swap_all trades with the parameters. */
bool ag_optim_swap_average(ag_optimizer *opt) {
    const ag_optim_config *c = &opt->cfg;
    int slot;
    if (averages(c)) {
        if (opt->averaged == 0) return false;
        slot = average_slot(c);
    } else if (c->lookahead > 0 && opt->slow_set) {
        slot = slow_slot(c);
    } else {
        return false;
    }
    ag_real *value[AVERAGE_ROOM], *average[AVERAGE_ROOM];
    int64_t n[AVERAGE_ROOM];
    average_arrays a = average_arrays_of(opt, slot, value, average, n);
    ag__optim_on("ag_optim_swap_average", opt->device)->swap_all(a.value, a.average, a.n, a.count);
    ag__kernels_done("ag_optim_swap_average", opt->device);
    opt->swapped = !opt->swapped;
    return true;
}

/* Lookahead: before the first update the slow weights are the values (a
 * lerp of weight 1 is a copy); after every k-th, one step back to them.
 * A step the gate skips moves neither (the first copy is right either way). */
static void lookahead_step(ag_optimizer *opt, const double *gate, bool before) {
    const ag_optim_config *c = &opt->cfg;
    if (c->lookahead <= 0 || (before && opt->slow_set) || (!before && opt->step % c->lookahead)) return;
    ag_real *value[AVERAGE_ROOM], *slow[AVERAGE_ROOM];
    int64_t n[AVERAGE_ROOM];
    average_arrays a = average_arrays_of(opt, slow_slot(c), value, slow, n);
    ag_real w = before ? 1 : (ag_real)c->lookahead_alpha;
    const ag_real *w_there = ag__step_copy_on(opt->device, &w, sizeof w);
    const ag__optim_kernels *k = ag__optim_on("ag_optim_step", opt->device);
    if (before) k->average_all(w_there, a.average, (const ag_real *const *)a.value, a.n, a.count, NULL);
    else k->lookahead_all(w_there, a.average, a.value, a.n, a.count, gate);
    opt->slow_set = true;
}

void ag__optim_step_not_taken(ag_optimizer *opt) {
    const ag_optim_config *c = &opt->cfg;
    if (averages(c) && !(c->swa > 0 && opt->step < c->swa)) opt->averaged--;
    opt->step--;
}

void ag__optim_step_gated(ag_optimizer *opt, const double *gate) { optim_step(opt, gate, NULL, false); }

/* block_sq[i]: where parameter i's block sums of squares go (sum_squares_blocks'
 * layout). */
void ag__optim_step_gated_sq(ag_optimizer *opt, const double *gate, double *const *block_sq, bool clear_grads) {
    optim_step(opt, gate, block_sq, clear_grads);
}

/* Every parameter's coefficients go to the device's memory in one (staged,
 * non-waiting) copy and the kernels read them there, so that the launches'
 * arguments stay the same from step to step (a CUDA graph replays them). */
static void optim_step(ag_optimizer *opt, const double *gate, double *const *block_sq, bool clear_grads) {
    const char *op = "ag_optim_step";
    ag_params *ps = opt->params;
    if (!ps || ps->count != opt->n_params)
        ag__fatal(op, "the parameter list changed from %d to %d parameters after ag_optim_init", opt->n_params,
                  ps ? ps->count : 0);
    if (opt->swapped)
        ag__fatal(op, "the parameters hold their average (ag_optim_swap_average): swap them back before a step");
    opt->step++;
    const int n = opt->n_params;
    update_coef room[32]; /* a step of a few parameters leaves the arena alone */
    update_coef *coef = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)(n ? n : 1) * sizeof *coef);
    memset(coef, 0, (size_t)n * sizeof *coef); /* a frozen parameter's stays 0: the copy reads no undefined byte */
    for (int i = 0; i < n; i++) {
        ag_tensor *p = ps->items[i];
        if (!p->requires_grad) continue; /* frozen (ag_param_freeze) */
        if (p->device != opt->device)
            ag__fatal(op, "parameter '%s' is on the %s but the optimizer's state on the %s: move the parameters "
                      "(ag_params_to) before ag_optim_init", p->name, ag_device_name(p->device),
                      ag_device_name(opt->device));
        if (!p->grad) ag__fatal(op, "parameter '%s' has no gradient buffer", p->name);
        coef_of(opt, i, &coef[i]);
    }
    const update_coef *on_device = ag__step_copy_on(opt->device, coef, (size_t)n * sizeof *coef);
    ag__update_span span_room[32];
    ag__update_span *spans = ag__step_room_on(AG_CPU, span_room, sizeof span_room, (size_t)(n ? n : 1) * sizeof *spans);
    int count = 0;
    for (int i = 0; i < n; i++)
        if (ps->items[i]->requires_grad && !muon_matrix(opt, i) && opt->cfg.kind != AG_ADAFACTOR) {
            spans[count] = span_of(opt, i, &on_device[i]);
            spans[count].g_clear = clear_grads ? ps->items[i]->grad : NULL;
            spans[count++].block_sq = block_sq ? block_sq[i] : NULL;
        }
    lookahead_step(opt, gate, true);
    int kind = opt->cfg.kind == AG_MUON ? AG_ADAMW : (int)opt->cfg.kind; /* Muon's other parameters: its AdamW part */
    if (count > 0) ag__optim_on(op, opt->device)->update_all(kind, spans, count, gate);
    muon_matrices(opt, gate, block_sq, clear_grads);
    adafactor_params(opt, gate, block_sq, clear_grads);
    lookahead_step(opt, gate, false);
    average_update(opt, gate);
    ag__kernels_done(op, opt->device);
}

/* ---- parameter groups ---- */

bool ag_param_is_bias_or_norm(const ag_tensor *p, void *ctx) {
    (void)ctx;
    return p->ndim <= 1;
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

bool ag_is_weight_matrix(const ag_tensor *p) {
    if (p->ndim < 2) return false;
    return !(p->name && (starts_with(p->name, "embed") || starts_with(p->name, "bigram")));
}

/* A per-parameter array of opt's, made on first use with every entry
 * `all` (what the config gives every parameter). */
static double *per_param(const ag_optimizer *opt, double **arr, double all) {
    if (!*arr) {
        *arr = ag__malloc((size_t)(opt->n_params ? opt->n_params : 1) * sizeof **arr);
        for (int i = 0; i < opt->n_params; i++) (*arr)[i] = all;
    }
    return *arr;
}

/* Sets v[i] for every parameter i that match takes; returns how many. */
static int set_matching(const ag_optimizer *opt, ag_param_pred match, void *ctx, double *v, double value) {
    int matched = 0;
    for (int i = 0; i < opt->n_params; i++)
        if (match(opt->params->items[i], ctx)) {
            v[i] = value;
            matched++;
        }
    return matched;
}

int ag_optim_set_weight_decay(ag_optimizer *opt, ag_param_pred match, void *ctx, double weight_decay) {
    if (!(weight_decay >= 0) || !isfinite(weight_decay))
        ag__fatal("ag_optim_set_weight_decay", "weight_decay %g must be finite and >= 0", weight_decay);
    if (!opt->params || opt->params->count != opt->n_params)
        ag__fatal("ag_optim_set_weight_decay", "the parameter list changed after ag_optim_init");
    return set_matching(opt, match, ctx, per_param(opt, &opt->weight_decay, opt->cfg.weight_decay), weight_decay);
}

int ag_optim_set_lr_scale(ag_optimizer *opt, ag_param_pred match, void *ctx, double scale) {
    if (!(scale >= 0) || !isfinite(scale))
        ag__fatal("ag_optim_set_lr_scale", "scale %g must be finite and >= 0 (0: the parameters do not move)", scale);
    if (!opt->params || opt->params->count != opt->n_params)
        ag__fatal("ag_optim_set_lr_scale", "the parameter list changed after ag_optim_init");
    return set_matching(opt, match, ctx, per_param(opt, &opt->lr_scale, 1), scale);
}

int ag_optim_set_muon(ag_optimizer *opt, ag_param_pred match, void *ctx, bool muon) {
    const char *op = "ag_optim_set_muon";
    if (opt->cfg.kind != AG_MUON)
        ag__fatal(op, "the optimizer is %s: which parameters take Muon's step is a setting of muon only",
                  ag_optim_name(opt->cfg.kind));
    if (!opt->params || opt->params->count != opt->n_params)
        ag__fatal(op, "the parameter list changed after ag_optim_init");
    if (opt->step > 0)
        ag__fatal(op, "after %lld steps: the state of a parameter that changes sides would have to start over; "
                  "route the parameters before the first step", (long long)opt->step);
    unsigned char *was = ag__malloc((size_t)(opt->n_params ? opt->n_params : 1));
    for (int i = 0; i < opt->n_params; i++) was[i] = muon_matrix(opt, i);
    if (!opt->muon) opt->muon = ag__malloc((size_t)(opt->n_params ? opt->n_params : 1));
    memcpy(opt->muon, was, (size_t)opt->n_params);
    int set = 0;
    for (int i = 0; i < opt->n_params; i++) {
        const ag_tensor *p = opt->params->items[i];
        if (p->ndim != 2 || !match(p, ctx)) continue; /* Muon's step is for matrices: the rest stay on AdamW */
        opt->muon[i] = muon;
        set++;
    }
    if (memcmp(was, opt->muon, (size_t)opt->n_params)) { /* the slots change: lay them out again, all still initial */
        ag__free_kept_on(opt->device, opt->state);
        ag__free(opt->slot);
        opt->state = NULL, opt->slot = NULL;
        lay_out_state(opt);
    }
    ag__free(was);
    return set;
}
