/* optimizer.c - SGD, Adam/AdamW and Adadelta, exactly as torch.optim
 * documents them (see the formulas in attngrad.h).
 *
 * An optimizer owns one block of state, allocated at init: `n_slots`
 * buffers per parameter, the parameter's size each.  A step walks the
 * parameters and updates each element in place from its gradient, so it
 * never allocates.  Hyperparameters are doubles (as in PyTorch); each is
 * rounded to ag_real once per step, and the per-element arithmetic runs in
 * ag_real, which is what a float32 PyTorch tensor op does too. */
#include "options.h"

#include <stdio.h>

static const char *const kind_names[] = {"sgd", "adam", "adamw", "adadelta"};

const char *ag_optim_name(ag_optim_kind kind) {
    return (unsigned)kind < 4 ? kind_names[kind] : "?";
}

ag_optim_config ag_optim_defaults(ag_optim_kind kind) {
    ag_optim_config c = {.kind = kind, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .rho = 0.9};
    if (kind == AG_ADAMW) c.weight_decay = 1e-2;
    if (kind == AG_ADADELTA) {
        c.lr = 1.0;
        c.eps = 1e-6;
    }
    return c;
}

/* ---- options: the keys each optimizer takes, in PyTorch's names ---- */

static int fields_for(ag_optim_config *c, opt_field *f) {
    int n = 0;
    f[n++] = (opt_field){"lr", OPT_REAL, &c->lr, {0}};
    switch (c->kind) {
    case AG_SGD:
        f[n++] = (opt_field){"momentum", OPT_REAL, &c->momentum, {0}};
        f[n++] = (opt_field){"dampening", OPT_REAL, &c->dampening, {0}};
        f[n++] = (opt_field){"nesterov", OPT_BOOL, &c->nesterov, {0}};
        break;
    case AG_ADAM:
    case AG_ADAMW:
        f[n++] = (opt_field){"beta1", OPT_REAL, &c->beta1, {0}};
        f[n++] = (opt_field){"beta2", OPT_REAL, &c->beta2, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        f[n++] = (opt_field){"amsgrad", OPT_BOOL, &c->amsgrad, {0}};
        break;
    case AG_ADADELTA:
        f[n++] = (opt_field){"rho", OPT_REAL, &c->rho, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        break;
    }
    f[n++] = (opt_field){"weight_decay", OPT_REAL, &c->weight_decay, {0}};
    return n;
}

ag_status ag_optim_check(const ag_optim_config *c) {
    const char *name = ag_optim_name(c->kind);
    if ((unsigned)c->kind > AG_ADADELTA) return ag__fail(AG_ERR_ARG, "unknown optimizer kind %d", (int)c->kind);
    if (!(c->lr >= 0)) return ag__fail(AG_ERR_ARG, "optimizer '%s': lr %g must be >= 0", name, c->lr);
    if (!(c->weight_decay >= 0))
        return ag__fail(AG_ERR_ARG, "optimizer '%s': weight_decay %g must be >= 0", name, c->weight_decay);
    switch (c->kind) {
    case AG_SGD:
        if (!(c->momentum >= 0)) return ag__fail(AG_ERR_ARG, "optimizer 'sgd': momentum %g must be >= 0", c->momentum);
        if (!isfinite(c->dampening)) return ag__fail(AG_ERR_ARG, "optimizer 'sgd': dampening must be finite");
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return ag__fail(AG_ERR_ARG, "optimizer 'sgd': nesterov needs momentum > 0 and dampening = 0 (got %g, %g)",
                            c->momentum, c->dampening);
        break;
    case AG_ADAM:
    case AG_ADAMW:
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return ag__fail(AG_ERR_ARG, "optimizer '%s': beta1 %g must be in [0, 1)", name, c->beta1);
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return ag__fail(AG_ERR_ARG, "optimizer '%s': beta2 %g must be in [0, 1)", name, c->beta2);
        if (!(c->eps >= 0)) return ag__fail(AG_ERR_ARG, "optimizer '%s': eps %g must be >= 0", name, c->eps);
        break;
    case AG_ADADELTA:
        if (!(c->rho >= 0 && c->rho <= 1))
            return ag__fail(AG_ERR_ARG, "optimizer 'adadelta': rho %g must be in [0, 1]", c->rho);
        if (!(c->eps >= 0)) return ag__fail(AG_ERR_ARG, "optimizer 'adadelta': eps %g must be >= 0", c->eps);
        break;
    }
    return AG_OK;
}

ag_status ag_optim_parse(const char *spec, ag_optim_config *out) {
    char name[32];
    const char *rest;
    ag_status st = ag__spec_split("optimizer", spec, name, sizeof name, &rest);
    if (st) return st;
    int kind = -1;
    for (int k = 0; k < 4; k++)
        if (!strcmp(name, kind_names[k])) kind = k;
    if (kind < 0) return ag__fail(AG_ERR_ARG, "unknown optimizer '%s' (known: sgd, adam, adamw, adadelta)", name);
    ag_optim_config c = ag_optim_defaults((ag_optim_kind)kind);
    opt_field f[8];
    int n = fields_for(&c, f);
    if ((st = ag__spec_apply("optimizer", name, rest, f, n))) return st;
    if ((st = ag_optim_check(&c))) return st;
    *out = c;
    return AG_OK;
}

const char *ag_optim_format(const ag_optim_config *c, char *buf, size_t n) {
    ag_optim_config copy = *c;
    opt_field f[8];
    int nf = fields_for(&copy, f);
    return ag__spec_format(ag_optim_name(c->kind), f, nf, buf, n);
}

/* ---- state ---- */

static int slots_for(const ag_optim_config *c) {
    switch (c->kind) {
    case AG_SGD: return c->momentum != 0 ? 1 : 0;
    case AG_ADAM:
    case AG_ADAMW: return c->amsgrad ? 3 : 2;
    case AG_ADADELTA: return 2;
    }
    return 0;
}

const char *ag_optim_slot_name(const ag_optimizer *opt, int s) {
    static const char *const sgd[] = {"momentum"}, *const adam[] = {"m", "v", "vmax"}, *const adadelta[] = {"v", "u"};
    if (s < 0 || s >= opt->n_slots) return NULL;
    switch (opt->cfg.kind) {
    case AG_SGD: return sgd[s];
    case AG_ADAM:
    case AG_ADAMW: return adam[s];
    case AG_ADADELTA: return adadelta[s];
    }
    return NULL;
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
    int64_t numel = ag_params_numel(ps);
    if (opt->n_slots > 0 && opt->n_params > 0) {
        opt->state = ag_calloc((size_t)(numel * opt->n_slots), sizeof(ag_real));
        opt->slot = ag_malloc((size_t)(opt->n_slots * opt->n_params) * sizeof *opt->slot);
        ag_real *next = opt->state;
        for (int s = 0; s < opt->n_slots; s++)
            for (int i = 0; i < opt->n_params; i++) {
                opt->slot[s * opt->n_params + i] = next;
                next += ps->items[i]->size;
            }
    }
    return AG_OK;
}

void ag_optim_free(ag_optimizer *opt) {
    ag_free(opt->state);
    ag_free(opt->slot);
    *opt = (ag_optimizer){0};
}

ag_real *ag_optim_state(const ag_optimizer *opt, const char *param, const char *slot) {
    for (int s = 0; s < opt->n_slots; s++) {
        if (strcmp(ag_optim_slot_name(opt, s), slot)) continue;
        for (int i = 0; i < opt->n_params; i++)
            if (!strcmp(opt->params->items[i]->name, param)) return opt->slot[s * opt->n_params + i];
    }
    return NULL;
}

/* ---- the updates, one parameter at a time ----
 * Each kernel is written once with its options as bool arguments, and
 * called with constants so that every combination compiles to a loop
 * without branches (which the compiler can vectorize).  Pointers are
 * restrict: parameter, gradient and state are separate allocations. */

#define KERNEL static inline __attribute__((always_inline)) void

KERNEL sgd_loop(int64_t n, ag_real *restrict P, const ag_real *restrict G, ag_real *restrict buf, ag_real lr,
                ag_real wd, ag_real mu, ag_real keep, bool decay, bool momentum, bool first, bool nesterov) {
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (decay) g += wd * P[j];
        if (momentum) {
            buf[j] = first ? g : mu * buf[j] + keep * g; /* the buffer starts as the gradient itself */
            g = nesterov ? g + mu * buf[j] : buf[j];
        }
        P[j] -= lr * g;
    }
}

static void sgd_update(const ag_optimizer *o, ag_tensor *p, ag_real *buf) {
    const ag_optim_config *c = &o->cfg;
    const ag_real lr = (ag_real)o->lr, wd = (ag_real)c->weight_decay, mu = (ag_real)c->momentum,
                  keep = (ag_real)(1 - c->dampening);
    const int64_t n = p->size;
    ag_real *P = p->data;
    const ag_real *G = p->grad;
    const bool decay = wd != 0, first = o->step == 1;
    if (mu == 0) {
        if (decay) sgd_loop(n, P, G, buf, lr, wd, mu, keep, true, false, false, false);
        else sgd_loop(n, P, G, buf, lr, wd, mu, keep, false, false, false, false);
    } else if (first) {
        sgd_loop(n, P, G, buf, lr, wd, mu, keep, decay, true, true, c->nesterov);
    } else if (c->nesterov) {
        if (decay) sgd_loop(n, P, G, buf, lr, wd, mu, keep, true, true, false, true);
        else sgd_loop(n, P, G, buf, lr, wd, mu, keep, false, true, false, true);
    } else {
        if (decay) sgd_loop(n, P, G, buf, lr, wd, mu, keep, true, true, false, false);
        else sgd_loop(n, P, G, buf, lr, wd, mu, keep, false, true, false, false);
    }
}

typedef struct {
    ag_real b1, b2, one_b1, one_b2, step_size, bc2_sqrt, eps, l2, decay;
} adam_consts;

KERNEL adam_loop(int64_t n, ag_real *restrict P, const ag_real *restrict G, ag_real *restrict m,
                 ag_real *restrict v, ag_real *restrict vmax, adam_consts k, bool l2, bool decoupled, bool ams) {
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (l2) g += k.l2 * P[j];
        if (decoupled) P[j] *= k.decay;
        m[j] = k.b1 * m[j] + k.one_b1 * g;
        v[j] = k.b2 * v[j] + k.one_b2 * g * g;
        ag_real second = v[j];
        if (ams) second = vmax[j] = v[j] > vmax[j] ? v[j] : vmax[j];
        P[j] -= k.step_size * m[j] / (sqrt(second) / k.bc2_sqrt + k.eps);
    }
}

/* PyTorch's implementation keeps vmax as the running max of the raw second
 * moment and bias-corrects it with the current step (older versions of its
 * documentation wrote the max of the corrected values instead); we follow
 * the implementation, which is what users compare against. */
static void adam_update(const ag_optimizer *o, ag_tensor *p, ag_real *m, ag_real *v, ag_real *vmax) {
    const ag_optim_config *c = &o->cfg;
    const double t = (double)o->step;
    const adam_consts k = {
        .b1 = (ag_real)c->beta1, .b2 = (ag_real)c->beta2,
        .one_b1 = (ag_real)(1 - c->beta1), .one_b2 = (ag_real)(1 - c->beta2),
        .step_size = (ag_real)(o->lr / (1 - pow(c->beta1, t))),
        .bc2_sqrt = (ag_real)sqrt(1 - pow(c->beta2, t)),
        .eps = (ag_real)c->eps,
        .l2 = (ag_real)c->weight_decay,
        .decay = (ag_real)(1 - o->lr * c->weight_decay), /* AdamW's shrink of θ */
    };
    const bool decoupled = c->kind == AG_ADAMW && c->weight_decay != 0;
    const bool l2 = c->kind == AG_ADAM && c->weight_decay != 0;
    const int64_t n = p->size;
    ag_real *P = p->data;
    const ag_real *G = p->grad;
    if (vmax) {
        if (l2) adam_loop(n, P, G, m, v, vmax, k, true, false, true);
        else if (decoupled) adam_loop(n, P, G, m, v, vmax, k, false, true, true);
        else adam_loop(n, P, G, m, v, vmax, k, false, false, true);
    } else {
        if (l2) adam_loop(n, P, G, m, v, vmax, k, true, false, false);
        else if (decoupled) adam_loop(n, P, G, m, v, vmax, k, false, true, false);
        else adam_loop(n, P, G, m, v, vmax, k, false, false, false);
    }
}

KERNEL adadelta_loop(int64_t n, ag_real *restrict P, const ag_real *restrict G, ag_real *restrict v,
                     ag_real *restrict u, ag_real lr, ag_real wd, ag_real rho, ag_real one_rho, ag_real eps, bool decay) {
    for (int64_t j = 0; j < n; j++) {
        ag_real g = G[j];
        if (decay) g += wd * P[j];
        v[j] = rho * v[j] + one_rho * g * g;
        ag_real delta = sqrt(u[j] + eps) / sqrt(v[j] + eps) * g;
        u[j] = rho * u[j] + one_rho * delta * delta;
        P[j] -= lr * delta;
    }
}

static void adadelta_update(const ag_optimizer *o, ag_tensor *p, ag_real *v, ag_real *u) {
    const ag_optim_config *c = &o->cfg;
    const ag_real lr = (ag_real)o->lr, wd = (ag_real)c->weight_decay, rho = (ag_real)c->rho,
                  one_rho = (ag_real)(1 - c->rho), eps = (ag_real)c->eps;
    if (wd != 0) adadelta_loop(p->size, p->data, p->grad, v, u, lr, wd, rho, one_rho, eps, true);
    else adadelta_loop(p->size, p->data, p->grad, v, u, lr, wd, rho, one_rho, eps, false);
}

void ag_optim_step(ag_optimizer *opt) {
    ag_params *ps = opt->params;
    if (!ps || ps->count != opt->n_params)
        ag__fatal("ag_optim_step", "the parameter list changed from %d to %d parameters after ag_optim_init",
                  opt->n_params, ps ? ps->count : 0);
    opt->step++;
    const int n = opt->n_params;
    for (int i = 0; i < n; i++) {
        ag_tensor *p = ps->items[i];
        ag__check_device("ag_optim_step", p, NULL);
        if (!p->grad) ag__fatal("ag_optim_step", "parameter '%s' has no gradient buffer", p->name);
        ag_real *const *s = opt->slot ? opt->slot + i : NULL; /* s[k * n]: slot k of this parameter */
        switch (opt->cfg.kind) {
        case AG_SGD: sgd_update(opt, p, s ? s[0] : NULL); break;
        case AG_ADAM:
        case AG_ADAMW: adam_update(opt, p, s[0], s[n], opt->n_slots > 2 ? s[2 * n] : NULL); break;
        case AG_ADADELTA: adadelta_update(opt, p, s[0], s[n]); break;
        }
    }
}
