/* checkpoint.c - a training run saved to one safetensors file and resumed
 * from it bit for bit: parameters, optimizer state, schedule state and the
 * training loop's counters and random generator.
 *
 * What goes where (the file stays readable by any safetensors reader):
 *   <param name>                  the parameter, F32 (F64 in the f64 build)
 *   optim.<kind>.<slot>.<param>   optimizer state, e.g. optim.adam.m.cls.out.weight
 *                                 (a registered rule's: optim.lion.m.cls.out.weight)
 *   optim.step                    I64 scalar: updates made (Adam's t)
 *   sched.state                   F64 [4]: last_epoch, best, num_bad_epochs,
 *                                 cooldown_counter
 *   __metadata__                  attngrad.real, optim (the full spec),
 *                                 optim.lr (current rate), sched (spec),
 *                                 step, epoch, rng (4 hex words), config,
 *                                 crc32c.<tensor> for every tensor
 * Numbers in the metadata are written so that they read back exactly. */
#include "../optim/options.h"
#include "../graph/device.h"
#include "../ops/dispatch.h"
#include "../ops/elementwise.h" /* fill: a slot the saved optimizer did not keep */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define REAL_DTYPE (sizeof(ag_real) == 8 ? AG_F64 : AG_F32)

static void slot_name(char *buf, size_t n, const ag_optimizer *o, int s, int i) {
    snprintf(buf, n, "optim.%s.%s.%s", ag_optim_name(o->cfg.kind), ag_optim_slot_name(o, s),
             o->params->items[i]->name);
}

static void check_optimizer(const char *op, const ag_optimizer *opt) {
    if (!opt->params || opt->params->count != opt->n_params)
        ag__fatal(op, "the optimizer's parameter list changed after ag_optim_init (%d parameters, now %d)",
                  opt->n_params, opt->params ? opt->params->count : 0);
}

ag_status ag_checkpoint_save(const char *path, const ag_params *ps, const ag_optimizer *opt,
                             const ag_scheduler *sched, const ag_train_state *st) {
    ag_st_writer w = {0};
    char name[1024], v[AG_CONFIG_MAX];
    for (int i = 0; i < ps->count; i++) ag_st_add_tensor(&w, ps->items[i]->name, ps->items[i]);
    ag_st_set_meta(&w, "attngrad.real", sizeof(ag_real) == 8 ? "f64" : "f32");
    if (opt) {
        check_optimizer("ag_checkpoint_save", opt);
        ag__optim_catch_up((ag_optimizer *)opt); /* lazy adadelta, rmsprop: the dense rule's state is what is saved */
        for (int s = 0; s < opt->n_slots; s++)
            for (int i = 0; i < opt->n_params; i++) {
                int shape[AG_MAX_DIMS], ndim = ag__optim_slot_shape(opt, i, s, shape);
                if (ndim < 0) continue; /* frozen: no state */
                slot_name(name, sizeof name, opt, s, i);
                ag__st_add_real(&w, name, ndim, shape, opt->slot[s * opt->n_params + i], opt->device);
            }
        ag_st_add(&w, "optim.step", AG_I64, 0, NULL, &opt->step);
        if (ag__optim_keeps(&opt->cfg, "average")) /* the updates in it: the next one's weight */
            ag_st_add(&w, "optim.averaged", AG_I64, 0, NULL, &opt->averaged);
        ag_st_set_meta(&w, "optim", ag_optim_format(&opt->cfg, v, sizeof v));
        ag_st_set_meta(&w, "optim.lr", ag__fmt_real(opt->lr, v, sizeof v));
    }
    double sched_state[4];
    if (sched) {
        sched_state[0] = (double)sched->last_epoch;
        sched_state[1] = sched->best;
        sched_state[2] = sched->num_bad_epochs;
        sched_state[3] = sched->cooldown_counter;
        ag_st_add(&w, "sched.state", AG_F64, 1, (int64_t[]){4}, sched_state);
        ag_st_set_meta(&w, "sched", ag_sched_format(&sched->cfg, v, sizeof v));
    }
    if (st) {
        snprintf(v, sizeof v, "%" PRId64, st->step);
        ag_st_set_meta(&w, "step", v);
        snprintf(v, sizeof v, "%" PRId64, st->epoch);
        ag_st_set_meta(&w, "epoch", v);
        snprintf(v, sizeof v, "%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64, st->rng.s[0], st->rng.s[1],
                 st->rng.s[2], st->rng.s[3]);
        ag_st_set_meta(&w, "rng", v);
        ag_st_set_meta(&w, "config", st->config);
        for (const char *const *kv = st->meta; kv && kv[0]; kv += 2) ag_st_set_meta(&w, kv[0], kv[1]);
    }
    ag_st_set_checksums(&w); /* every load verifies them: a flipped bit is refused, not trained on */
    ag_status status = ag_st_write(&w, path);
    ag_st_writer_free(&w);
    return status;
}

/* ---- loading: everything is checked first, then copied ---- */

/* The first element that is not a finite value of the build's real type
 * (NaN, inf, or in the f32 build an F64 beyond float's range), or -1. */
static int64_t first_nonfinite(const ag_st_tensor *t, double *value) {
    double limit = sizeof(ag_real) == sizeof(float) ? FLT_MAX : DBL_MAX;
    for (int64_t i = 0; i < t->numel; i++) {
        double x = ag_st_real_at(t, i);
        if (!(fabs(x) <= limit)) {
            *value = x;
            return i;
        }
    }
    return -1;
}

/* The tensor `name` of the file, a float type of like's shape, every value
 * finite: a diverged run's weights would load and predict silently. */
static ag_status find_real(const ag_st_file *f, const char *name, const ag_tensor *like, const char *role,
                           const ag_st_tensor **out) {
    const ag_st_tensor *t = ag_st_get(f, name);
    if (!t) return ag__fail(AG_ERR_SHAPE, "%s: no tensor '%s' (%s)", f->path, name, role);
    if (!ag_dtype_is_float(t->dtype))
        return ag__fail(AG_ERR_FORMAT, "%s: tensor '%s' is %s, expected a float type (F32, F64, F16, BF16)", f->path,
                        name, ag_dtype_name(t->dtype));
    bool same = t->ndim == like->ndim;
    for (int i = 0; same && i < t->ndim; i++) same = t->shape[i] == like->shape[i];
    if (!same) {
        char a[128], b[64];
        return ag__fail(AG_ERR_SHAPE, "%s: tensor '%s' has shape %s in the file, but the %s has shape %s", f->path, name,
                        ag_st_shape_str(t, a, sizeof a), role, ag_shape_str(like, b, sizeof b));
    }
    double bad;
    int64_t at = first_nonfinite(t, &bad);
    if (at >= 0)
        return ag__fail(AG_ERR_FORMAT, "%s: tensor '%s' (%s) holds %g at element %lld, not a finite %s", f->path, name,
                        role, bad, (long long)at, sizeof(ag_real) == sizeof(float) ? "float" : "double");
    *out = t;
    return AG_OK;
}

static ag_status meta_required(const ag_st_file *f, const char *key, const char *why, const char **out) {
    *out = ag_st_meta(f, key);
    if (!*out) return ag__fail(AG_ERR_FORMAT, "%s: no metadata '%s' (%s)", f->path, key, why);
    return AG_OK;
}

static ag_status meta_int64(const ag_st_file *f, const char *key, int64_t *out) {
    const char *s;
    ag_status st = meta_required(f, key, "the training state", &s);
    if (st) return st;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!isdigit((unsigned char)*s) || *end || errno || v < 0)
        return ag__fail(AG_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not a non-negative integer", f->path, key, s);
    *out = v;
    return AG_OK;
}

static ag_status parse_rng(const ag_st_file *f, ag_rng *out) {
    const char *s;
    ag_status st = meta_required(f, "rng", "the training state", &s);
    if (st) return st;
    /* exactly "hhhhhhhhhhhhhhhh,hhhhhhhhhhhhhhhh,hhhhhhhhhhhhhhhh,hhhhhhhhhhhhhhhh" */
    bool ok = strlen(s) == 4 * 17 - 1;
    for (int i = 0; ok && s[i]; i++) ok = i % 17 == 16 ? s[i] == ',' : isxdigit((unsigned char)s[i]) != 0;
    for (int i = 0; ok && i < 4; i++) out->s[i] = strtoull(s + 17 * i, NULL, 16);
    if (ok && !(out->s[0] | out->s[1] | out->s[2] | out->s[3]))
        return ag__fail(AG_ERR_FORMAT, "%s: metadata 'rng' is all zeros, a state xoshiro256** never reaches", f->path);
    if (ok) return AG_OK;
    return ag__fail(AG_ERR_FORMAT, "%s: metadata 'rng' = '%.80s' is not 4 comma-separated 16-digit hex words", f->path, s);
}

typedef struct {
    const ag_st_tensor **param, **slot;   /* validated sources, in copy order */
    int64_t opt_step, opt_averaged;
    bool slow_set; /* lookahead's slow weights come from the file */
    double opt_lr;
    double sched_state[4];
    ag_train_state st;
} load_plan;

/* Muon: each trained 2-D parameter on the side of the run that saved f
 * (ag_optim_set_muon), read from whether its AdamW "v" is there, "m" being
 * there (a parameter frozen in the run has neither). */
static ag_status muon_sides_agree(const ag_st_file *f, const ag_optimizer *opt) {
    if (opt->cfg.kind != AG_MUON) return AG_OK;
    for (int i = 0; i < opt->n_params; i++) {
        const ag_tensor *p = opt->params->items[i];
        if (p->ndim != 2 || !opt->slot[i]) continue; /* slot 0 "m": NULL when frozen */
        char m[1024], v[1024];
        slot_name(m, sizeof m, opt, 0, i);
        slot_name(v, sizeof v, opt, 1, i);
        bool saved_adamw = ag_st_get(f, v) != NULL, adamw = opt->slot[opt->n_params + i] != NULL;
        if (saved_adamw == adamw || !ag_st_get(f, m)) continue;
        return ag__fail(AG_ERR_ARG, "%s: parameter '%s' took %s in the run that saved it (its '%s' is %s), but %s here: "
                        "route it as the run did (ag_optim_set_muon; attngrad train --param-group '%s:muon=%d')",
                        f->path, p->name, saved_adamw ? "Muon's AdamW part" : "Muon's step", v,
                        saved_adamw ? "there" : "not there", adamw ? "the AdamW part" : "Muon's step", p->name, !saved_adamw);
    }
    return AG_OK;
}

static ag_status plan_optimizer(const ag_st_file *f, const ag_optimizer *opt, load_plan *plan) {
    const char *spec, *lr;
    ag_status st = meta_required(f, "optim", "no optimizer state was saved", &spec);
    if (st) return st;
    ag_optim_config saved;
    if (ag_optim_parse(spec, &saved))
        return ag__fail(AG_ERR_FORMAT, "%s: metadata 'optim': %.400s", f->path, ag_errmsg());
    if (saved.kind != opt->cfg.kind)
        return ag__fail(AG_ERR_ARG, "%s: the file holds '%s' optimizer state, this run uses '%s'", f->path,
                        ag_optim_name(saved.kind), ag_optim_name(opt->cfg.kind));
    if ((st = meta_required(f, "optim.lr", "the current learning rate", &lr))) return st;
    char *end;
    plan->opt_lr = strtod(lr, &end);
    if (!*lr || *end || !isfinite(plan->opt_lr) || plan->opt_lr < 0)
        return ag__fail(AG_ERR_FORMAT, "%s: metadata 'optim.lr' = '%.40s' is not a learning rate", f->path, lr);
    const ag_st_tensor *step = ag_st_get(f, "optim.step");
    if (!step || (step->dtype != AG_I64 && step->dtype != AG_I32) || step->numel != 1 || step->ndim != 0)
        return ag__fail(AG_ERR_FORMAT, "%s: no integer scalar 'optim.step'", f->path);
    ag_st_to_i64(step, &plan->opt_step);
    if (plan->opt_step < 0) return ag__fail(AG_ERR_FORMAT, "%s: optim.step is negative", f->path);
    /* the average's count goes with its slot: one starting here starts empty */
    if (ag__optim_keeps(&opt->cfg, "average") && ag__optim_keeps(&saved, "average")) {
        const ag_st_tensor *n = ag_st_get(f, "optim.averaged");
        if (!n || (n->dtype != AG_I64 && n->dtype != AG_I32) || n->numel != 1 || n->ndim != 0)
            return ag__fail(AG_ERR_FORMAT, "%s: optimizer '%s' keeps an average but no integer scalar "
                            "'optim.averaged' counts its updates", f->path, spec);
        ag_st_to_i64(n, &plan->opt_averaged);
        if (plan->opt_averaged < 0 || plan->opt_averaged > plan->opt_step)
            return ag__fail(AG_ERR_FORMAT, "%s: optim.averaged = %lld is not a count of the %lld updates", f->path,
                            (long long)plan->opt_averaged, (long long)plan->opt_step);
    }
    /* slow weights started here start from the values at the next update */
    plan->slow_set = ag__optim_keeps(&opt->cfg, "slow") && ag__optim_keeps(&saved, "slow");
    /* a rate the caller changed stands; else the run's own (a schedule's) */
    if (opt->cfg.lr != saved.lr) plan->opt_lr = opt->cfg.lr;
    if ((st = muon_sides_agree(f, opt))) return st;
    char name[1024], role[64];
    snprintf(role, sizeof role, "%s state", ag_optim_name(opt->cfg.kind));
    for (int s = 0; s < opt->n_slots; s++)
        for (int i = 0; i < opt->n_params; i++) {
            if (!opt->slot[s * opt->n_params + i]) continue; /* frozen: no state */
            if (!ag__optim_keeps(&saved, ag_optim_slot_name(opt, s))) continue; /* new here: starts as at init */
            slot_name(name, sizeof name, opt, s, i);
            ag_tensor like = {0}; /* the slot's shape: the parameter's, but Adafactor's factors */
            like.ndim = ag__optim_slot_shape(opt, i, s, like.shape);
            if ((st = find_real(f, name, &like, role, &plan->slot[s * opt->n_params + i]))) return st;
        }
    return AG_OK;
}

static ag_status plan_scheduler(const ag_st_file *f, const ag_scheduler *sched, load_plan *plan) {
    const char *spec;
    ag_status st = meta_required(f, "sched", "no schedule state was saved", &spec);
    if (st) return st;
    ag_sched_config saved;
    if (ag_sched_parse(spec, &saved))
        return ag__fail(AG_ERR_FORMAT, "%s: metadata 'sched': %.400s", f->path, ag_errmsg());
    if (saved.kind != sched->cfg.kind) {
        char a[256], b[256];
        return ag__fail(AG_ERR_ARG, "%s: the file holds schedule '%s', this run uses '%s'", f->path,
                        ag_sched_format(&saved, a, sizeof a), ag_sched_format(&sched->cfg, b, sizeof b));
    }
    const ag_st_tensor *t = ag_st_get(f, "sched.state");
    if (!t || t->dtype != AG_F64 || t->ndim != 1 || t->numel != 4)
        return ag__fail(AG_ERR_FORMAT, "%s: no F64 [4] tensor 'sched.state'", f->path);
    memcpy(plan->sched_state, t->data, sizeof plan->sched_state);
    const double *v = plan->sched_state;
    for (int k = 0; k < 4; k++)
        if (k != 1 && !(v[k] >= 0 && v[k] <= (k ? 2147483647.0 : 1e15) && v[k] == floor(v[k])))
            return ag__fail(AG_ERR_FORMAT, "%s: sched.state[%d] = %g is not a count", f->path, k, v[k]);
    if (isnan(v[1])) return ag__fail(AG_ERR_FORMAT, "%s: sched.state best is NaN", f->path);
    return AG_OK;
}

static ag_status plan_train_state(const ag_st_file *f, load_plan *plan) {
    ag_status st;
    if ((st = meta_int64(f, "step", &plan->st.step)) || (st = meta_int64(f, "epoch", &plan->st.epoch)) ||
        (st = parse_rng(f, &plan->st.rng)))
        return st;
    const char *config = ag_st_meta(f, "config");
    if (!config) config = "";
    if (strlen(config) >= AG_CONFIG_MAX)
        return ag__fail(AG_ERR_FORMAT, "%s: metadata 'config' is longer than %d bytes", f->path, AG_CONFIG_MAX - 1);
    strcpy(plan->st.config, config);
    return AG_OK;
}

/* A checked tensor's values into n reals at dst on dev (through a host copy
 * for the GPU: loading is not a steady-state path). */
static void load_real(const ag_st_tensor *t, ag_real *dst, ag_device dev, int64_t n) {
    if (dev != AG_CUDA) {
        ag_st_to_real(t, dst);
        return;
    }
    ag_real *host = ag__malloc((size_t)(n > 0 ? n : 1) * sizeof(ag_real));
    ag_st_to_real(t, host);
    ag__cuda_copy(dst, AG_CUDA, host, AG_CPU, (size_t)n * sizeof(ag_real));
    ag__free(host);
}

ag_status ag_checkpoint_load(const char *path, ag_params *ps, ag_optimizer *opt, ag_scheduler *sched,
                             ag_train_state *st) {
    if (opt) check_optimizer("ag_checkpoint_load", opt);
    ag_st_file f;
    ag_status status = ag_st_read(path, &f);
    if (status) return status;
    load_plan *plan = ag__calloc(1, sizeof *plan);
    plan->param = ag__calloc((size_t)ps->count + 1, sizeof *plan->param);
    int n_slots = opt ? opt->n_slots * opt->n_params : 0;
    plan->slot = ag__calloc((size_t)n_slots + 1, sizeof *plan->slot);

    for (int i = 0; i < ps->count && !status; i++)
        status = find_real(&f, ps->items[i]->name, ps->items[i], "model's parameter", &plan->param[i]);
    if (!status && opt) status = plan_optimizer(&f, opt, plan);
    if (!status && sched) status = plan_scheduler(&f, sched, plan);
    if (!status && st) status = plan_train_state(&f, plan);

    if (!status) { /* all checked: from here on nothing can fail */
        for (int i = 0; i < ps->count; i++)
            load_real(plan->param[i], ps->items[i]->data, ps->items[i]->device, ps->items[i]->size);
        if (opt) {
            for (int k = 0; k < n_slots; k++) {
                int64_t n = ag__optim_slot_numel(opt, k % opt->n_params, k / opt->n_params);
                if (opt->slot[k] && plan->slot[k]) load_real(plan->slot[k], opt->slot[k], opt->device, n);
                else if (opt->slot[k]) /* as ag_optim_init set it */
                    ag__elementwise_on("ag_checkpoint_load", opt->device)
                        ->fill(opt->slot[k], (ag_real)ag__optim_slot_init(&opt->cfg, k / opt->n_params), n);
            }
            ag__optim_missed_reset(opt); /* the state just read is up to date */
            opt->step = plan->opt_step;
            opt->averaged = plan->opt_averaged;
            opt->slow_set = plan->slow_set;
            opt->lr = plan->opt_lr;
        }
        if (sched) {
            sched->last_epoch = (int64_t)plan->sched_state[0];
            sched->best = plan->sched_state[1];
            sched->num_bad_epochs = (int)plan->sched_state[2];
            sched->cooldown_counter = (int)plan->sched_state[3];
        }
        if (st) *st = plan->st;
    }
    ag__free(plan->param);
    ag__free(plan->slot);
    ag__free(plan);
    ag_st_close(&f);
    return status;
}
