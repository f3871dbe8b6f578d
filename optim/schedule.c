/* schedule.c - learning-rate schedules, stepped once per epoch, with
 * PyTorch's exact semantics (torch.optim.lr_scheduler):
 *   StepLR           lr *= gamma at every epoch that is a multiple of step_size
 *   ExponentialLR    lr *= gamma at every epoch
 *   ReduceLROnPlateau  counts epochs without a significant improvement of a
 *                    metric; after more than `patience` of them, lr is cut
 *                    by `factor` (not below min_lr) and `cooldown` epochs
 *                    are ignored.
 * Like PyTorch's step(), the updates are chained (lr *= gamma) rather than
 * recomputed from the initial rate, so they compose with other changes. */
#include "options.h"

#include <stdio.h>

static const char *const sched_names[] = {"constant", "step", "exponential", "plateau"};

ag_sched_config ag_sched_defaults(ag_sched_kind kind) {
    ag_sched_config c = {.kind = kind, .step_size = 0, .gamma = 0.1, .factor = 0.1, .patience = 10,
                         .threshold = 1e-4, .cooldown = 0, .min_lr = 0, .eps = 1e-8};
    if (kind == AG_SCHED_EXPONENTIAL) c.gamma = NAN; /* required, as in PyTorch */
    return c;
}

static int fields_for(ag_sched_config *c, opt_field *f) {
    int n = 0;
    switch (c->kind) {
    case AG_SCHED_CONSTANT: break;
    case AG_SCHED_STEP:
        f[n++] = (opt_field){"step_size", OPT_INT, &c->step_size, {0}};
        f[n++] = (opt_field){"gamma", OPT_REAL, &c->gamma, {0}};
        break;
    case AG_SCHED_EXPONENTIAL: f[n++] = (opt_field){"gamma", OPT_REAL, &c->gamma, {0}}; break;
    case AG_SCHED_PLATEAU:
        f[n++] = (opt_field){"mode", OPT_CHOICE, &c->mode_max, {"min", "max"}};
        f[n++] = (opt_field){"factor", OPT_REAL, &c->factor, {0}};
        f[n++] = (opt_field){"patience", OPT_INT, &c->patience, {0}};
        f[n++] = (opt_field){"threshold", OPT_REAL, &c->threshold, {0}};
        f[n++] = (opt_field){"threshold_mode", OPT_CHOICE, &c->threshold_abs, {"rel", "abs"}};
        f[n++] = (opt_field){"cooldown", OPT_INT, &c->cooldown, {0}};
        f[n++] = (opt_field){"min_lr", OPT_REAL, &c->min_lr, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        break;
    }
    return n;
}

ag_status ag_sched_check(const ag_sched_config *c) {
    switch (c->kind) {
    case AG_SCHED_CONSTANT: return AG_OK;
    case AG_SCHED_STEP:
        if (c->step_size < 1) return ag__fail(AG_ERR_ARG, "schedule 'step': step_size must be given and >= 1 (got %d)", c->step_size);
        if (!isfinite(c->gamma)) return ag__fail(AG_ERR_ARG, "schedule 'step': gamma must be finite");
        return AG_OK;
    case AG_SCHED_EXPONENTIAL:
        if (!isfinite(c->gamma)) return ag__fail(AG_ERR_ARG, "schedule 'exponential': gamma must be given");
        return AG_OK;
    case AG_SCHED_PLATEAU:
        if (!(c->factor < 1 && c->factor >= 0)) /* PyTorch: "Factor should be < 1.0." */
            return ag__fail(AG_ERR_ARG, "schedule 'plateau': factor %g must be in [0, 1)", c->factor);
        if (c->patience < 0) return ag__fail(AG_ERR_ARG, "schedule 'plateau': patience %d must be >= 0", c->patience);
        if (c->cooldown < 0) return ag__fail(AG_ERR_ARG, "schedule 'plateau': cooldown %d must be >= 0", c->cooldown);
        if (!(c->threshold >= 0)) return ag__fail(AG_ERR_ARG, "schedule 'plateau': threshold %g must be >= 0", c->threshold);
        if (!(c->min_lr >= 0)) return ag__fail(AG_ERR_ARG, "schedule 'plateau': min_lr %g must be >= 0", c->min_lr);
        if (!(c->eps >= 0)) return ag__fail(AG_ERR_ARG, "schedule 'plateau': eps %g must be >= 0", c->eps);
        return AG_OK;
    }
    return ag__fail(AG_ERR_ARG, "unknown schedule kind %d", (int)c->kind);
}

ag_status ag_sched_parse_over(const char *spec, const ag_sched_config *base, ag_sched_config *out) {
    char name[32];
    const char *rest;
    int kind;
    ag_status st = ag__spec_kind("schedule", spec, sched_names, 4, name, sizeof name, &rest, &kind);
    if (st) return st;
    ag_sched_config c = base && base->kind == (ag_sched_kind)kind ? *base : ag_sched_defaults((ag_sched_kind)kind);
    opt_field f[8];
    int n = fields_for(&c, f);
    if ((st = ag__spec_apply("schedule", name, rest, f, n))) return st;
    if ((st = ag_sched_check(&c))) return st;
    *out = c;
    return AG_OK;
}

ag_status ag_sched_parse(const char *spec, ag_sched_config *out) { return ag_sched_parse_over(spec, NULL, out); }

const char *ag_sched_format(const ag_sched_config *c, char *buf, size_t n) {
    ag_sched_config copy = *c;
    opt_field f[8];
    int nf = fields_for(&copy, f);
    return ag__spec_format((unsigned)c->kind < 4 ? sched_names[c->kind] : "?", f, nf, buf, n);
}

ag_status ag_sched_init(ag_scheduler *s, const ag_sched_config *cfg) {
    ag_status st = ag_sched_check(cfg);
    if (st) return st;
    *s = (ag_scheduler){.cfg = *cfg, .best = cfg->mode_max ? -INFINITY : INFINITY};
    return AG_OK;
}

/* ReduceLROnPlateau.is_better: rel mode compares with best scaled by
 * (1 -+ threshold), abs mode with best -+ threshold. */
static bool plateau_is_better(const ag_sched_config *c, double a, double best) {
    if (!c->mode_max) return c->threshold_abs ? a < best - c->threshold : a < best * (1 - c->threshold);
    return c->threshold_abs ? a > best + c->threshold : a > best * (1 + c->threshold);
}

static double plateau_step(ag_scheduler *s, double lr, double metric) {
    const ag_sched_config *c = &s->cfg;
    if (plateau_is_better(c, metric, s->best)) {
        s->best = metric;
        s->num_bad_epochs = 0;
    } else {
        s->num_bad_epochs++;
    }
    if (s->cooldown_counter > 0) { /* bad epochs during the cooldown do not count */
        s->cooldown_counter--;
        s->num_bad_epochs = 0;
    }
    if (s->num_bad_epochs > c->patience) {
        double new_lr = lr * c->factor > c->min_lr ? lr * c->factor : c->min_lr;
        if (lr - new_lr > c->eps) lr = new_lr;
        s->cooldown_counter = c->cooldown;
        s->num_bad_epochs = 0;
    }
    return lr;
}

double ag_sched_step(ag_scheduler *s, ag_optimizer *opt, double metric) {
    const ag_sched_config *c = &s->cfg;
    double lr = opt->lr;
    s->last_epoch++;
    switch (c->kind) {
    case AG_SCHED_CONSTANT: break;
    case AG_SCHED_STEP:
        if (s->last_epoch % c->step_size == 0) lr *= c->gamma;
        break;
    case AG_SCHED_EXPONENTIAL: lr *= c->gamma; break;
    case AG_SCHED_PLATEAU: lr = plateau_step(s, lr, metric); break;
    }
    opt->lr = lr;
    return lr;
}

/* ---- per-step schedules: warm-up, then constant, linear, cosine or
 * inverse square root, as the Transformer recipes use them (HF's
 * get_linear/cosine_schedule_with_warmup, fairseq's inverse_sqrt).  A pure
 * function of the step, so resuming needs only the optimizer's step. */

static const char *const lr_decay_names[] = {"constant", "linear", "cosine", "inv_sqrt", "cosine_restarts"};
enum { N_LR_DECAYS = sizeof lr_decay_names / sizeof *lr_decay_names };

static int lr_steps_fields(ag_lr_steps *s, opt_field *f) {
    int n = 0;
    f[n++] = (opt_field){"warmup", OPT_INT, &s->warmup, {0}};
    if (s->decay == AG_LR_LINEAR || s->decay == AG_LR_COSINE) f[n++] = (opt_field){"total", OPT_INT, &s->total, {0}};
    if (s->decay == AG_LR_COSINE_RESTARTS) {
        f[n++] = (opt_field){"period", OPT_INT, &s->period, {0}};
        f[n++] = (opt_field){"mult", OPT_INT, &s->mult, {0}};
    }
    if (s->decay == AG_LR_LINEAR || s->decay == AG_LR_COSINE || s->decay == AG_LR_COSINE_RESTARTS)
        f[n++] = (opt_field){"min_ratio", OPT_REAL, &s->min_ratio, {0}};
    return n;
}

ag_status ag_lr_steps_check(const ag_lr_steps *s) {
    if ((unsigned)s->decay >= N_LR_DECAYS) return ag__fail(AG_ERR_ARG, "unknown per-step schedule kind %d", (int)s->decay);
    const char *name = lr_decay_names[s->decay];
    if (s->warmup < 0) return ag__fail(AG_ERR_ARG, "schedule '%s': warmup %d must be >= 0", name, s->warmup);
    if (s->decay == AG_LR_COSINE_RESTARTS) {
        if (s->period < 1)
            return ag__fail(AG_ERR_ARG, "schedule '%s': period %d must be given, the first cycle's steps (>= 1)", name,
                            s->period);
        if (s->mult < 1)
            return ag__fail(AG_ERR_ARG, "schedule '%s': mult %d must be >= 1 (each cycle's steps over the last's)",
                            name, s->mult);
        if (!(s->min_ratio >= 0 && s->min_ratio <= 1))
            return ag__fail(AG_ERR_ARG, "schedule '%s': min_ratio %g must be in [0, 1]", name, s->min_ratio);
    }
    if (s->decay == AG_LR_LINEAR || s->decay == AG_LR_COSINE) {
        if (s->total <= s->warmup)
            return ag__fail(AG_ERR_ARG, "schedule '%s': total %d must be given and above warmup %d", name, s->total,
                            s->warmup);
        if (!(s->min_ratio >= 0 && s->min_ratio <= 1))
            return ag__fail(AG_ERR_ARG, "schedule '%s': min_ratio %g must be in [0, 1]", name, s->min_ratio);
    }
    return AG_OK;
}

ag_status ag_lr_steps_parse_over(const char *spec, const ag_lr_steps *base, ag_lr_steps *out) {
    char name[32];
    const char *rest;
    int kind;
    ag_status st = ag__spec_kind("per-step schedule", spec, lr_decay_names, N_LR_DECAYS, name, sizeof name, &rest, &kind);
    if (st) return st;
    ag_lr_steps s = base && base->decay == (ag_lr_decay)kind ? *base : (ag_lr_steps){.decay = (ag_lr_decay)kind, .mult = 1};
    opt_field f[4];
    int n = lr_steps_fields(&s, f);
    if ((st = ag__spec_apply("schedule", name, rest, f, n))) return st;
    if ((st = ag_lr_steps_check(&s))) return st;
    *out = s;
    return AG_OK;
}

ag_status ag_lr_steps_parse(const char *spec, ag_lr_steps *out) { return ag_lr_steps_parse_over(spec, NULL, out); }

const char *ag_lr_steps_format(const ag_lr_steps *s, char *buf, size_t n) {
    ag_lr_steps copy = *s;
    opt_field f[4];
    int nf = lr_steps_fields(&copy, f);
    return ag__spec_format((unsigned)s->decay < N_LR_DECAYS ? lr_decay_names[s->decay] : "?", f, nf, buf, n);
}

double ag_lr_steps_factor(const ag_lr_steps *s, int64_t t) {
    if (t < 1) t = 1;
    double w = s->warmup;
    if (t < s->warmup) return (double)t / w; /* t = warmup reaches 1 */
    double p = 0;
    if (s->decay == AG_LR_LINEAR || s->decay == AG_LR_COSINE) {
        p = ((double)t - w) / ((double)s->total - w);
        if (p > 1) p = 1;
    }
    switch (s->decay) {
    case AG_LR_COSINE_RESTARTS: { /* the cycle u falls in (cycles of one length: a remainder), and where in it */
        double u = (double)t - w, T = s->period;
        if (s->mult == 1) u = fmod(u, T);
        else
            while (u >= T) u -= T, T *= s->mult; /* cycles grow geometrically: a few dozen at most */
        return s->min_ratio + (1 - s->min_ratio) * 0.5 * (1 + cos(M_PI * u / T));
    }
    case AG_LR_CONSTANT: return 1;
    case AG_LR_LINEAR: return s->min_ratio + (1 - s->min_ratio) * (1 - p);
    case AG_LR_COSINE: return s->min_ratio + (1 - s->min_ratio) * 0.5 * (1 + cos(M_PI * p));
    case AG_LR_INV_SQRT: return s->warmup > 0 ? sqrt(w / (double)t) : 1 / sqrt((double)t);
    }
    return 1;
}

double ag_lr_steps_apply(const ag_lr_steps *s, ag_optimizer *opt, double base_lr) {
    opt->lr = base_lr * ag_lr_steps_factor(s, opt->step + 1);
    return opt->lr;
}
