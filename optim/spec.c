/* spec.c - what an optimizer is called and what it takes: the built-in
 * kinds and the rules a program or a plugin registers (ag_optim_register),
 * their keys in PyTorch's names, defaults and range checks, specs
 * ("adam:lr=1e-3,...") read and written back, and the parameter groups of
 * `attngrad train --param-group`.  The state and the step are
 * optimizer.c's. */
#include "options.h"
#include "param_groups.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {"sgd", "adam", "adamw", "adadelta", "adagrad", "rmsprop", "muon", "adafactor"};
enum { N_KINDS = sizeof kind_names / sizeof *kind_names };

/* ---- registered rules ----
 * Kept with their counts of hyperparameters and slots (their arrays end at
 * a NULL name), counted once when registered.  A rule's kind is
 * AG_OPTIM_RULE_FIRST + its index here: the registry only grows, so a
 * kind keeps its rule for the life of the process. */
static ag__registered_rule rules[AG_OPTIM_MAX_RULES];
static int n_rules;

const ag__registered_rule *ag__optim_registered(ag_optim_kind kind) {
    int i = (int)kind - AG_OPTIM_RULE_FIRST;
    return i >= 0 && i < n_rules ? &rules[i] : NULL;
}

const ag_optim_rule *ag_optim_rule_of(ag_optim_kind kind) {
    const ag__registered_rule *r = ag__optim_registered(kind);
    return r ? r->rule : NULL;
}

int ag__optim_rule_count(void) { return n_rules; }

const char *ag_optim_name(ag_optim_kind kind) {
    const ag__registered_rule *r = ag__optim_registered(kind);
    return (unsigned)kind < N_KINDS ? kind_names[kind] : r ? r->rule->name : "?";
}

bool ag_optim_find(const char *name, ag_optim_kind *kind) {
    for (int k = 0; name && k < N_KINDS + n_rules; k++) {
        ag_optim_kind as = k < N_KINDS ? (ag_optim_kind)k : (ag_optim_kind)(AG_OPTIM_RULE_FIRST + k - N_KINDS);
        if (!strcmp(ag_optim_name(as), name)) {
            *kind = as;
            return true;
        }
    }
    return false;
}

/* A rule's name goes into specs and checkpoints' tensor names: as a model
 * kind's, 1-31 letters, digits, '_' and '-' (no ':', ',', '=' or '.'). */
static bool good_rule_name(const char *name) { return ag__is_name(name, AG_OPTIM_NAME_MAX); }

/* A hyperparameter's or slot's name: a spec's key, a part of a tensor's name. */
static bool good_key(const char *key) {
    size_t n = strlen(key);
    return n > 0 && n < AG_OPTIM_NAME_MAX && strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* "in [0, 1)", "> 0", ">= 0", "finite": the values h takes, for messages. */
static const char *range_text(const ag_optim_hparam *h, char *buf, size_t n) {
    bool lo = h->min > -HUGE_VAL, hi = h->max < HUGE_VAL, lo_open = h->flags & AG_HPARAM_MIN_OPEN,
         hi_open = h->flags & AG_HPARAM_MAX_OPEN;
    const char *what = h->flags & AG_HPARAM_INT ? "an integer" : "";
    if (lo && hi) snprintf(buf, n, "%s%sin %c%g, %g%c", what, *what ? " " : "", lo_open ? '(' : '[', h->min, h->max, hi_open ? ')' : ']');
    else if (lo) snprintf(buf, n, "%s%s%s %g", what, *what ? " " : "", lo_open ? ">" : ">=", h->min);
    else if (hi) snprintf(buf, n, "%s%s%s %g", what, *what ? " " : "", hi_open ? "<" : "<=", h->max);
    else snprintf(buf, n, "%s", *what ? "a finite integer" : "finite");
    return buf;
}

static bool in_range(const ag_optim_hparam *h, double x) {
    if (!isfinite(x) || ((h->flags & AG_HPARAM_INT) && x != floor(x))) return false;
    bool above = h->flags & AG_HPARAM_MIN_OPEN ? x > h->min : x >= h->min;
    bool below = h->flags & AG_HPARAM_MAX_OPEN ? x < h->max : x <= h->max;
    return above && below;
}

/* What is wrong with rule r's hyperparameters, into why[cap] ("hyperparameter
 * 'x': ..."), or false; their count in *n. */
static bool hparams_problem(const ag_optim_rule *r, int *n, char *why, size_t cap) {
    static const char *const reserved[] = {"lr", "weight_decay", "lazy", "ema", "swa", "lookahead", "lookahead_alpha"};
    const ag_optim_hparam *h = r->hparams;
    for (*n = 0; h && h[*n].name; (*n)++) {
        const ag_optim_hparam *x = &h[*n];
        const char *bad = NULL;
        char range[96];
        if (*n == AG_OPTIM_MAX_HPARAMS) bad = "one more than the 8 a rule may have";
        else if (!good_key(x->name)) bad = "not a name (1-31 lower-case letters, digits, '_')";
        for (int k = 0; !bad && k < 7; k++)
            if (!strcmp(x->name, reserved[k]))
                bad = "a key every optimizer has (lr, weight_decay, lazy, ema, swa, lookahead, lookahead_alpha)";
        for (int k = 0; !bad && k < *n; k++)
            if (!strcmp(h[k].name, x->name)) bad = "a name given twice";
        if (!bad && x->flags & ~(unsigned)(AG_HPARAM_MIN_OPEN | AG_HPARAM_MAX_OPEN | AG_HPARAM_INT))
            bad = "flags other than AG_HPARAM_*";
        if (!bad && (isnan(x->min) || isnan(x->max) || !(x->min <= x->max))) bad = "an empty range (min > max, or NaN)";
        if (bad) {
            snprintf(why, cap, "hyperparameter '%.40s': %s", x->name, bad);
            return true;
        }
        if (!in_range(x, x->value)) { /* a bound left out of the initializer is 0 */
            snprintf(why, cap, "hyperparameter '%.40s': its default %g is not %s (-HUGE_VAL, HUGE_VAL: no bound)",
                     x->name, x->value, range_text(x, range, sizeof range));
            return true;
        }
    }
    return false;
}

static bool slots_problem(const ag_optim_rule *r, int *n, char *why, size_t cap) {
    const ag_optim_slot *sl = r->slots;
    for (*n = 0; sl && sl[*n].name; (*n)++) {
        const char *bad = NULL;
        if (*n == AG_OPTIM_MAX_SLOTS) bad = "one more than the 4 a rule may have";
        else if (!good_key(sl[*n].name)) bad = "not a name (1-31 lower-case letters, digits, '_')";
        for (int k = 0; !bad && k < *n; k++)
            if (!strcmp(sl[k].name, sl[*n].name)) bad = "a name given twice";
        if (!bad && !isfinite(sl[*n].init)) bad = "an initial value that is not finite";
        if (bad) {
            snprintf(why, cap, "slot '%.40s': %s", sl[*n].name, bad);
            return true;
        }
    }
    return false;
}

ag_status ag_optim_register(const ag_optim_rule *r) {
    const char *op = "ag_optim_register";
    if (!r) return ag__fail(AG_ERR_ARG, "%s: rule is NULL", op);
    const char *name = r->name && good_rule_name(r->name) ? r->name : NULL;
    if (r->abi == 0) /* left out of the initializer */
        return ag__fail(AG_ERR_ARG, "%s: rule '%.40s' has no .abi: set .abi = AG_OPTIM_RULE_ABI", op,
                        name ? name : "(bad name)");
    int version = r->abi / 100, real = r->abi % 100;
    if (!(version >= 1 && version <= AG_OPTIM_RULE_API_VERSION && real == (int)sizeof(ag_real)))
        return ag__fail(AG_ERR_ARG, "%s: rule '%.40s' was built against optimizer rule API %d with %d-byte ag_real "
                        "(abi %d), but this program has API %d with %d-byte ag_real (abi %d): rebuild it against "
                        "this attngrad%s", op, name ? name : "(bad name)", version, real, r->abi,
                        AG_OPTIM_RULE_API_VERSION, (int)sizeof(ag_real), AG_OPTIM_RULE_ABI,
                        version >= 1 && version <= AG_OPTIM_RULE_API_VERSION && real != (int)sizeof(ag_real)
                            ? (sizeof(ag_real) == 8 ? " with -DAG_REAL_DOUBLE" : " without -DAG_REAL_DOUBLE")
                            : "");
    if (!name)
        return ag__fail(AG_ERR_ARG, "%s: rule name '%.40s' is not 1-31 letters, digits, '_' or '-'", op,
                        r->name ? r->name : "(NULL)");
    ag_optim_kind clash;
    if (ag_optim_find(name, &clash))
        return ag__fail(AG_ERR_ARG, "%s: '%s' is %s", op, name,
                        (int)clash < N_KINDS ? "a built-in optimizer" : "already registered");
    if (!r->update) return ag__fail(AG_ERR_ARG, "%s: rule '%s' has no update function", op, name);
    if (!(r->lr >= 0) || !isfinite(r->lr) || !(r->weight_decay >= 0) || !isfinite(r->weight_decay))
        return ag__fail(AG_ERR_ARG, "%s: rule '%s': default lr %g and weight_decay %g must be finite and >= 0", op,
                        name, r->lr, r->weight_decay);
    ag__registered_rule reg = {.rule = r};
    if (version >= 2) reg.n_sums = r->n_sums, reg.sum = r->sum;
    if (!(reg.n_sums >= 0 && reg.n_sums <= AG_OPTIM_MAX_SUMS) || (reg.n_sums > 0) != (reg.sum != NULL))
        return ag__fail(AG_ERR_ARG, "%s: rule '%s': .n_sums %d and .sum %s: give both, 1 to %d sums and their "
                        "function, or neither", op, name, reg.n_sums, reg.sum ? "set" : "NULL", AG_OPTIM_MAX_SUMS);
    char why[256];
    if (hparams_problem(r, &reg.n_hparams, why, sizeof why) || slots_problem(r, &reg.n_slots, why, sizeof why))
        return ag__fail(AG_ERR_ARG, "%s: rule '%s': %s", op, name, why);
    if (n_rules == AG_OPTIM_MAX_RULES)
        return ag__fail(AG_ERR_ARG, "%s: '%s': the registry is full (%d rules)", op, name, AG_OPTIM_MAX_RULES);
    rules[n_rules++] = reg;
    return AG_OK;
}

ag_optim_config ag_optim_defaults(ag_optim_kind kind) {
    ag_optim_config c = {.kind = kind, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .rho = 0.9,
                         .alpha = 0.99, .lookahead_alpha = 0.5};
    const ag__registered_rule *r = ag__optim_registered(kind);
    if (r) {
        c.lr = r->rule->lr, c.weight_decay = r->rule->weight_decay;
        for (int i = 0; i < r->n_hparams; i++) c.hparam[i] = r->rule->hparams[i].value;
    }
    if (kind == AG_ADAMW) c.weight_decay = 1e-2;
    if (kind == AG_ADADELTA) {
        c.lr = 1.0;
        c.eps = 1e-6;
    }
    if (kind == AG_ADAGRAD) {
        c.lr = 1e-2;
        c.eps = 1e-10;
    }
    if (kind == AG_RMSPROP) c.lr = 1e-2;
    if (kind == AG_MUON) { /* torch.optim.Muon's, but the scale: Moonlight's, one lr for both parts */
        c.momentum = 0.95, c.nesterov = true, c.ns_steps = 5, c.eps = 1e-7, c.weight_decay = 0.1;
        c.match_rms_adamw = true, c.adam_eps = 1e-8;
    }
    if (kind == AG_ADAFACTOR) /* torch.optim.Adafactor's; eps (eps1) 0: the real type's epsilon, torch's None */
        c.lr = 1e-2, c.eps = 0, c.beta2_decay = -0.8, c.eps2 = 1e-3, c.d = 1, c.scale_parameter = c.relative_step = true,
        c.beta1 = 0; /* no first moment, as torch's */
    return c;
}

/* ---- options: the keys each optimizer takes, in PyTorch's names ---- */

/* The most keys of one optimizer: lr, a rule's own, weight_decay, lazy,
 * ema, swa, lookahead, lookahead_alpha. */
enum { MAX_FIELDS = AG_OPTIM_MAX_HPARAMS + 7 };

/* writing: a spec to read back, lazy, ema, swa and lookahead only where
 * set (the specs written before they existed stay as they were) */
static int fields_for(ag_optim_config *c, opt_field *f, bool writing) {
    int n = 0;
    f[n++] = (opt_field){"lr", OPT_REAL, &c->lr, {0}};
    const ag__registered_rule *r = ag__optim_registered(c->kind);
    for (int i = 0; r && i < r->n_hparams; i++) /* an integer one too: a double, checked whole by ag_optim_check */
        f[n++] = (opt_field){r->rule->hparams[i].name, OPT_REAL, &c->hparam[i], {0}};
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
    case AG_ADAGRAD:
        f[n++] = (opt_field){"lr_decay", OPT_REAL, &c->lr_decay, {0}};
        f[n++] = (opt_field){"initial_accumulator_value", OPT_REAL, &c->initial_accumulator_value, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        break;
    case AG_RMSPROP:
        f[n++] = (opt_field){"alpha", OPT_REAL, &c->alpha, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        f[n++] = (opt_field){"momentum", OPT_REAL, &c->momentum, {0}};
        f[n++] = (opt_field){"centered", OPT_BOOL, &c->centered, {0}};
        break;
    case AG_MUON:
        f[n++] = (opt_field){"momentum", OPT_REAL, &c->momentum, {0}};
        f[n++] = (opt_field){"nesterov", OPT_BOOL, &c->nesterov, {0}};
        f[n++] = (opt_field){"ns_steps", OPT_INT, &c->ns_steps, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        f[n++] = (opt_field){"match_rms_adamw", OPT_BOOL, &c->match_rms_adamw, {0}};
        f[n++] = (opt_field){"beta1", OPT_REAL, &c->beta1, {0}};
        f[n++] = (opt_field){"beta2", OPT_REAL, &c->beta2, {0}};
        f[n++] = (opt_field){"adam_eps", OPT_REAL, &c->adam_eps, {0}};
        break;
    case AG_ADAFACTOR:
        f[n++] = (opt_field){"beta2_decay", OPT_REAL, &c->beta2_decay, {0}};
        f[n++] = (opt_field){"eps", OPT_REAL, &c->eps, {0}};
        f[n++] = (opt_field){"eps2", OPT_REAL, &c->eps2, {0}};
        f[n++] = (opt_field){"d", OPT_REAL, &c->d, {0}};
        /* Hugging Face's first moment and two switches: written only where they differ from torch's rule,
         * so its spec reads as it did */
        if (!writing || c->beta1 != 0) f[n++] = (opt_field){"beta1", OPT_REAL, &c->beta1, {0}};
        if (!writing || !c->scale_parameter)
            f[n++] = (opt_field){"scale_parameter", OPT_BOOL, &c->scale_parameter, {0}};
        if (!writing || !c->relative_step) f[n++] = (opt_field){"relative_step", OPT_BOOL, &c->relative_step, {0}};
        break;
    default: break; /* a rule's: above */
    }
    f[n++] = (opt_field){"weight_decay", OPT_REAL, &c->weight_decay, {0}};
    if (!writing || c->lazy) f[n++] = (opt_field){"lazy", OPT_BOOL, &c->lazy, {0}};
    if (!writing || c->ema) f[n++] = (opt_field){"ema", OPT_REAL, &c->ema, {0}};
    if (!writing || c->swa) f[n++] = (opt_field){"swa", OPT_INT, &c->swa, {0}};
    if (!writing || c->lookahead) {
        f[n++] = (opt_field){"lookahead", OPT_INT, &c->lookahead, {0}};
        f[n++] = (opt_field){"lookahead_alpha", OPT_REAL, &c->lookahead_alpha, {0}};
    }
    return n;
}

ag_status ag_optim_check(const ag_optim_config *c) {
    const char *name = ag_optim_name(c->kind);
    const ag__registered_rule *r = ag__optim_registered(c->kind);
    if ((unsigned)c->kind >= N_KINDS && !r) return ag__fail(AG_ERR_ARG, "unknown optimizer kind %d", (int)c->kind);
    if (!(c->lr >= 0)) return ag__fail(AG_ERR_ARG, "optimizer '%s': lr %g must be >= 0", name, c->lr);
    if (!(c->weight_decay >= 0))
        return ag__fail(AG_ERR_ARG, "optimizer '%s': weight_decay %g must be >= 0", name, c->weight_decay);
    if (!(c->ema >= 0 && c->ema < 1))
        return ag__fail(AG_ERR_ARG, "optimizer '%s': ema %g must be in [0, 1): the decay of the parameters' average "
                        "(0.999 keeps about the last 1000 updates' worth; 0: no average)", name, c->ema);
    if (c->swa < 0)
        return ag__fail(AG_ERR_ARG, "optimizer '%s': swa %d must be >= 0: the first update averaged (1: all of "
                        "them; 0: no average)", name, c->swa);
    if (c->ema > 0 && c->swa > 0)
        return ag__fail(AG_ERR_ARG, "optimizer '%s': ema=%g and swa=%d: one average at a time", name, c->ema, c->swa);
    if (c->lookahead < 0)
        return ag__fail(AG_ERR_ARG, "optimizer '%s': lookahead %d must be >= 0: the updates between two steps back "
                        "to the slow weights (5 in its paper; 0: none)", name, c->lookahead);
    if (c->lookahead > 0 && !(c->lookahead_alpha > 0 && c->lookahead_alpha <= 1))
        return ag__fail(AG_ERR_ARG, "optimizer '%s': lookahead_alpha %g must be in (0, 1]: how far the slow weights "
                        "move toward the fast ones (0.5 in its paper)", name, c->lookahead_alpha);
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
        if (!(c->eps > 0)) return ag__fail(AG_ERR_ARG, "optimizer '%s': eps %g must be > 0 (0 makes 0/0 of every gradient element that is 0)", name, c->eps);
        break;
    case AG_ADADELTA:
        if (!(c->rho >= 0 && c->rho <= 1))
            return ag__fail(AG_ERR_ARG, "optimizer 'adadelta': rho %g must be in [0, 1]", c->rho);
        if (!(c->eps > 0)) return ag__fail(AG_ERR_ARG, "optimizer 'adadelta': eps %g must be > 0 (0 makes 0/0 of every gradient element that is 0)", c->eps);
        break;
    case AG_ADAGRAD:
        if (!(c->lr_decay >= 0)) return ag__fail(AG_ERR_ARG, "optimizer 'adagrad': lr_decay %g must be >= 0", c->lr_decay);
        if (!(c->initial_accumulator_value >= 0) || !isfinite(c->initial_accumulator_value))
            return ag__fail(AG_ERR_ARG, "optimizer 'adagrad': initial_accumulator_value %g must be finite and >= 0",
                            c->initial_accumulator_value);
        if (!(c->eps > 0)) return ag__fail(AG_ERR_ARG, "optimizer 'adagrad': eps %g must be > 0 (0 makes 0/0 of every gradient element that is 0)", c->eps);
        break;
    case AG_RMSPROP:
        if (!(c->alpha >= 0)) return ag__fail(AG_ERR_ARG, "optimizer 'rmsprop': alpha %g must be >= 0", c->alpha);
        if (!(c->eps > 0)) return ag__fail(AG_ERR_ARG, "optimizer 'rmsprop': eps %g must be > 0 (0 makes 0/0 of every gradient element that is 0)", c->eps);
        if (!(c->momentum >= 0)) return ag__fail(AG_ERR_ARG, "optimizer 'rmsprop': momentum %g must be >= 0", c->momentum);
        break;
    case AG_MUON:
        if (!(c->momentum >= 0 && c->momentum < 1))
            return ag__fail(AG_ERR_ARG, "optimizer 'muon': momentum %g must be in [0, 1)", c->momentum);
        if (!(c->ns_steps >= 1 && c->ns_steps < 100))
            return ag__fail(AG_ERR_ARG, "optimizer 'muon': ns_steps %d must be in [1, 99] (torch's limit)", c->ns_steps);
        if (!(c->eps > 0) || !isfinite(c->eps))
            return ag__fail(AG_ERR_ARG, "optimizer 'muon': eps %g must be finite and > 0 (the floor of the norm a "
                            "matrix's step is divided by)", c->eps);
        if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
            return ag__fail(AG_ERR_ARG, "optimizer 'muon': beta1 %g and beta2 %g (its AdamW part's) must be in [0, 1)",
                            c->beta1, c->beta2);
        if (!(c->adam_eps > 0))
            return ag__fail(AG_ERR_ARG, "optimizer 'muon': adam_eps %g must be > 0 (0 makes 0/0 of every gradient "
                            "element that is 0)", c->adam_eps);
        if (c->lazy)
            return ag__fail(AG_ERR_ARG, "optimizer 'muon': lazy=1 is not for muon: its step of a matrix is one "
                            "product over all of it");
        break;
    case AG_ADAFACTOR: /* torch's ranges, and finite */
        if (!(c->beta2_decay <= 0) || !isfinite(c->beta2_decay))
            return ag__fail(AG_ERR_ARG, "optimizer 'adafactor': beta2_decay %g must be finite and <= 0 (1 - beta2 at "
                            "step t is t^beta2_decay: -0.8 in its paper)", c->beta2_decay);
        if (!(c->eps >= 0) || !isfinite(c->eps))
            return ag__fail(AG_ERR_ARG, "optimizer 'adafactor': eps %g must be finite and >= 0 (eps1, the floor of the "
                            "second moment's estimate; 0: the real type's epsilon)", c->eps);
        if (!(c->eps2 >= 0) || !isfinite(c->eps2))
            return ag__fail(AG_ERR_ARG, "optimizer 'adafactor': eps2 %g must be finite and >= 0 (the floor of a "
                            "parameter's RMS in its step size)", c->eps2);
        if (!(c->d >= 1) || !isfinite(c->d))
            return ag__fail(AG_ERR_ARG, "optimizer 'adafactor': d %g must be finite and >= 1 (the RMS an update is "
                            "clipped to)", c->d);
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return ag__fail(AG_ERR_ARG, "optimizer 'adafactor': beta1 %g must be in [0, 1) (Hugging Face's first "
                            "moment of the update; 0: none, as torch's)", c->beta1);
        if (c->lazy)
            return ag__fail(AG_ERR_ARG, "optimizer 'adafactor': lazy=1 is not for adafactor: its factored second "
                            "moment averages whole rows and columns");
        break;
    default: /* a rule's, as it declared them */
        if (c->lazy && r->n_sums > 0)
            return ag__fail(AG_ERR_ARG, "optimizer '%s': lazy=1 is not for a rule with sums over the whole parameter: "
                            "a lazy step would leave its skipped rows out of them", name);
        for (int i = 0; i < r->n_hparams; i++) {
            const ag_optim_hparam *h = &r->rule->hparams[i];
            char range[96];
            if (!in_range(h, c->hparam[i]))
                return ag__fail(AG_ERR_ARG, "optimizer '%s': %s %g must be %s", name, h->name, c->hparam[i],
                                range_text(h, range, sizeof range));
        }
        break;
    }
    return AG_OK;
}

ag_status ag_optim_parse_over(const char *spec, const ag_optim_config *base, ag_optim_config *out) {
    char name[AG_OPTIM_NAME_MAX];
    const char *rest;
    const char *names[N_KINDS + AG_OPTIM_MAX_RULES]; /* the built-in kinds, then the rules */
    for (int k = 0; k < N_KINDS + n_rules; k++) names[k] = k < N_KINDS ? kind_names[k] : rules[k - N_KINDS].rule->name;
    int at;
    ag_status st = ag__spec_kind("optimizer", spec, names, N_KINDS + n_rules, name, sizeof name, &rest, &at);
    if (st) return st;
    ag_optim_kind kind = at < N_KINDS ? (ag_optim_kind)at : (ag_optim_kind)(AG_OPTIM_RULE_FIRST + at - N_KINDS);
    ag_optim_config c = base && base->kind == kind ? *base : ag_optim_defaults(kind);
    opt_field f[MAX_FIELDS];
    int n = fields_for(&c, f, false);
    if ((st = ag__spec_apply("optimizer", name, rest, f, n))) return st;
    if ((st = ag_optim_check(&c))) return st;
    *out = c;
    return AG_OK;
}

ag_status ag_optim_parse(const char *spec, ag_optim_config *out) { return ag_optim_parse_over(spec, NULL, out); }

const char *ag_optim_format(const ag_optim_config *c, char *buf, size_t n) {
    ag_optim_config copy = *c;
    opt_field f[MAX_FIELDS];
    int nf = fields_for(&copy, f, true);
    return ag__spec_format(ag_optim_name(c->kind), f, nf, buf, n);
}

/* ---- --param-group: a group as the command line gives it ---- */

static bool is_weight_matrix(const ag_tensor *p, void *ctx) {
    (void)ctx;
    return ag_is_weight_matrix(p);
}

static const struct {
    const char *name;
    ag_param_pred match;
} param_sets[] = {{"@bias_norm", ag_param_is_bias_or_norm}, {"@matrices", is_weight_matrix}};
const char *const ag__param_sets = "@bias_norm (parameters of at most one dim: biases, norms' gains and shifts), "
                                   "@matrices (2 or more dims, embedding tables not)";

static ag_param_pred param_set(const char *pattern) {
    for (size_t k = 0; k < sizeof param_sets / sizeof *param_sets; k++)
        if (!strcmp(pattern, param_sets[k].name)) return param_sets[k].match;
    return NULL;
}

bool ag__param_group_match(const ag_tensor *p, void *group) {
    const ag__param_group *g = group;
    ag_param_pred set = param_set(g->pattern);
    return set ? set(p, NULL) : p->name && fnmatch(g->pattern, p->name, 0) == 0;
}

ag_status ag__param_group_parse(const char *spec, ag__param_group *g) {
    *g = (ag__param_group){.lr_scale = NAN, .weight_decay = NAN, .freeze = -1, .muon = -1};
    const char *rest;
    ag_status st = ag__spec_split("param group", spec, g->pattern, sizeof g->pattern, &rest);
    if (st) return st;
    if (g->pattern[0] == '@' && !param_set(g->pattern))
        return ag__fail(AG_ERR_ARG, "param group '%s': unknown set '%s' (the sets: %s; a glob needs no '@')", spec,
                        g->pattern, ag__param_sets);
    const opt_field f[] = {{"lr_scale", OPT_REAL, &g->lr_scale, {0}},
                           {"weight_decay", OPT_REAL, &g->weight_decay, {0}},
                           {"freeze", OPT_INT, &g->freeze, {0}},
                           {"muon", OPT_INT, &g->muon, {0}}};
    if ((st = ag__spec_apply("param group", g->pattern, rest, f, 4))) return st;
    if (isnan(g->lr_scale) && isnan(g->weight_decay) && g->freeze < 0 && g->muon < 0)
        return ag__fail(AG_ERR_ARG, "param group '%s' sets nothing: write %s:lr_scale=S, weight_decay=W, freeze=1 or "
                        "muon=0", spec, g->pattern);
    if (g->lr_scale < 0) return ag__fail(AG_ERR_ARG, "param group '%s': lr_scale %g must be >= 0", g->pattern, g->lr_scale);
    if (g->weight_decay < 0)
        return ag__fail(AG_ERR_ARG, "param group '%s': weight_decay %g must be >= 0", g->pattern, g->weight_decay);
    if (g->freeze != -1 && g->freeze != 0 && g->freeze != 1)
        return ag__fail(AG_ERR_ARG, "param group '%s': freeze %d must be 0 or 1", g->pattern, g->freeze);
    if (g->muon != -1 && g->muon != 0 && g->muon != 1)
        return ag__fail(AG_ERR_ARG, "param group '%s': muon %d must be 0 (Muon's AdamW part) or 1 (Muon's step)",
                        g->pattern, g->muon);
    if (g->freeze == 1 && !(isnan(g->lr_scale) && isnan(g->weight_decay) && g->muon < 0))
        return ag__fail(AG_ERR_ARG, "param group '%s': freeze=1 keeps its parameters as they are: lr_scale, "
                        "weight_decay and muon would do nothing", g->pattern);
    return AG_OK;
}
