/* synth.c - generated tasks that need no files (what they are: data.h).
 *
 * They exist to smoke-test models and to show that attention earns its
 * keep: in each task the label or next token depends on word order or
 * position, which a bag of words cannot see. Everything is drawn from
 * ag_data_rng, so a seed fixes the data on every machine. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

enum { SYNTH_MAX_LEN = 100000, PAIR_MAX_LEN = 4096, LOOKUP_VALUES = 8, LOOKUP_MAX_STEPS = 64 };

ag_synth_opts ag_synth_opts_default(ag_synth_task task) {
    ag_synth_opts o = {.seed = 1, .task_seed = 1, .n = 1000, .n_words = 20, .lm_max_len = 35};
    switch (task) {
    case AG_SYNTH_ORDER: o.min_len = 4, o.max_len = 20, o.near = 2; break;
    case AG_SYNTH_LOOKUP: o.n_tables = 8, o.min_steps = 1, o.max_steps = 4; break;
    case AG_SYNTH_PAIR: o.min_len = 4, o.max_len = 12; break;
    }
    return o;
}

static int32_t pick(ag_data_rng *r, int32_t lo, int32_t hi) { /* uniform [lo, hi] */
    return lo + (int32_t)ag_data_rng_below(r, (uint64_t)(hi - lo) + 1);
}

static int add_word(ag_dataset *ds, int32_t w) {
    char buf[16];
    int n = snprintf(buf, sizeof buf, "w%d", (int)w);
    return ag__ds_add(ds, buf, (size_t)n, 0);
}

static int add_str(ag_dataset *ds, const char *s) { return ag__ds_add(ds, s, strlen(s), 0); }

/* ---- ORDER: label = (B before A) + 2 * (distance > near) ------------------ */

static int synth_order(const ag_synth_opts *o, ag_data_rng *r, ag_dataset *ds) {
    for (int64_t i = 0; i < o->n; i++) {
        int32_t len = pick(r, o->min_len, o->max_len);
        int32_t label = pick(r, 0, 3), b_first = label & 1, far = label >> 1;
        int32_t d = far ? pick(r, o->near + 1, len - 1) : pick(r, 1, o->near);
        int32_t p = pick(r, 0, len - 1 - d), q = p + d;
        ag__ds_begin(ds);
        for (int32_t t = 0; t < len; t++) {
            int rc = t == p   ? add_str(ds, b_first ? "B" : "A")
                     : t == q ? add_str(ds, b_first ? "A" : "B")
                              : add_word(ds, pick(r, 0, o->n_words - 1));
            if (rc) return rc;
        }
        int rc = ag__ds_end(ds, label, 0.0f, 0, 0);
        if (rc) return rc;
    }
    ds->n_classes = 4;
    return 0;
}

/* ---- LOOKUP: x t_a1 .. t_ak : r1 .. rk ------------------------------------ */

static void bits_str(int v, char out[4]) {
    out[0] = (char)('0' + ((v >> 2) & 1));
    out[1] = (char)('0' + ((v >> 1) & 1));
    out[2] = (char)('0' + (v & 1));
    out[3] = 0;
}

static int synth_lookup(const ag_synth_opts *o, ag_data_rng *r, ag_dataset *ds) {
    int32_t T = o->n_tables;
    int64_t table[64][LOOKUP_VALUES], sigma[64];
    ag_data_rng tr; /* tables and held-out pairs come from task_seed only */
    ag_data_rng_seed(&tr, o->task_seed);
    for (int32_t a = 0; a < T; a++) {
        for (int v = 0; v < LOOKUP_VALUES; v++) table[a][v] = v;
        ag_data_rng_shuffle(&tr, table[a], LOOKUP_VALUES);
    }
    for (int32_t a = 0; a < T; a++) sigma[a] = a;
    ag_data_rng_shuffle(&tr, sigma, T);

    int32_t kmin = o->split == AG_SYNTH_SPLIT_TEST && o->min_steps < 2 ? 2 : o->min_steps;
    int32_t steps[LOOKUP_MAX_STEPS];
    for (int64_t i = 0; i < o->n; i++) {
        int32_t k = pick(r, kmin, o->max_steps), x = pick(r, 0, LOOKUP_VALUES - 1);
        for (int32_t j = 0; j < k; j++) steps[j] = pick(r, 0, T - 1);
        if (k >= 2 && o->split == AG_SYNTH_SPLIT_TEST) steps[1] = (int32_t)sigma[steps[0]];
        if (k >= 2 && o->split == AG_SYNTH_SPLIT_TRAIN) { /* any second table but sigma's */
            steps[1] = pick(r, 0, T - 2);
            if (steps[1] >= sigma[steps[0]]) steps[1]++;
        }
        char w[16];
        int rc = 0;
        ag__ds_begin(ds);
        bits_str(x, w);
        rc |= add_str(ds, w);
        for (int32_t j = 0; j < k; j++) {
            snprintf(w, sizeof w, "t%d", (int)steps[j]);
            rc |= add_str(ds, w);
        }
        rc |= add_str(ds, ":");
        for (int32_t j = 0, v = x; j < k; j++) {
            v = (int32_t)table[steps[j]][v];
            bits_str(v, w);
            rc |= add_str(ds, w);
        }
        rc |= add_str(ds, AG_EOS_TOKEN);
        if (rc || ag__ds_end(ds, -1, 0.0f, 0, o->lm_max_len + 1)) return AG_DATA_ENOMEM;
    }
    return 0;
}

/* ---- PAIR: span (entail), reversed span (contradict), random (neutral) ---- */

static int synth_pair(const ag_synth_opts *o, ag_data_rng *r, ag_dataset *ds) {
    int32_t a[PAIR_MAX_LEN];
    for (int64_t i = 0; i < o->n; i++) {
        int32_t len = pick(r, o->min_len, o->max_len);
        for (int32_t t = 0; t < len; t++) a[t] = pick(r, 0, o->n_words - 1);
        int32_t label = pick(r, 0, 2); /* SICK ids: 0 NEUTRAL, 1 ENTAILMENT, 2 CONTRADICTION */
        int32_t m = pick(r, 2, len < 5 ? len : 5), s0 = pick(r, 0, len - m);
        if (label != 0 && a[s0] == a[s0 + m - 1]) { /* a palindrome span would be ambiguous */
            int32_t v = pick(r, 0, o->n_words - 2);
            a[s0 + m - 1] = v >= a[s0] ? v + 1 : v;
        }
        int32_t b[5];
        for (int32_t j = 0; j < m; j++)
            b[j] = label == 1 ? a[s0 + j] : label == 2 ? a[s0 + m - 1 - j] : pick(r, 0, o->n_words - 1);
        int32_t shared = 0;
        for (int32_t j = 0; j < m; j++)
            for (int32_t t = 0; t < len; t++)
                if (a[t] == b[j]) {
                    shared++;
                    break;
                }
        int rc = 0;
        ag__ds_begin(ds);
        for (int32_t t = 0; t < len; t++) rc |= add_word(ds, a[t]);
        ag__ds_begin_second(ds);
        for (int32_t j = 0; j < m; j++) rc |= add_word(ds, b[j]);
        float score = 1.0f + 4.0f * (float)shared / (float)m;
        if (rc || ag__ds_end(ds, label, score, 0, 0)) return AG_DATA_ENOMEM;
    }
    return 0;
}

static const char *check_opts(ag_synth_task task, const ag_synth_opts *o) {
    if (o->n < 1) return "n must be >= 1";
    switch (task) {
    case AG_SYNTH_ORDER:
        if (o->near < 1) return "near must be >= 1";
        if (o->min_len < o->near + 2) return "min_len must be >= near + 2 (all classes possible)";
        if (o->max_len < o->min_len || o->max_len > SYNTH_MAX_LEN) return "bad max_len";
        if (o->n_words < 1) return "n_words must be >= 1";
        return NULL;
    case AG_SYNTH_LOOKUP:
        if (o->n_tables < 2 || o->n_tables > 64) return "n_tables must be in [2, 64]";
        if (o->min_steps < 1 || o->max_steps < o->min_steps || o->max_steps > LOOKUP_MAX_STEPS)
            return "need 1 <= min_steps <= max_steps <= 64";
        if (o->split == AG_SYNTH_SPLIT_TEST && o->max_steps < 2)
            return "the TEST split needs max_steps >= 2";
        if (o->split < AG_SYNTH_SPLIT_ALL || o->split > AG_SYNTH_SPLIT_TEST) return "bad split";
        if (o->lm_max_len < 1) return "lm_max_len must be >= 1";
        return NULL;
    case AG_SYNTH_PAIR:
        if (o->min_len < 2 || o->max_len < o->min_len || o->max_len > PAIR_MAX_LEN)
            return "need 2 <= min_len <= max_len <= 4096";
        if (o->n_words < 2) return "n_words must be >= 2";
        return NULL;
    }
    return "unknown task";
}

int ag_synth(ag_synth_task task, const ag_synth_opts *opts, ag_dataset *ds, char *err,
             size_t errlen) {
    memset(ds, 0, sizeof *ds);
    ag_synth_opts o = opts ? *opts : ag_synth_opts_default(task);
    const char *why = check_opts(task, &o);
    if (why) return ag__data_fail(err, errlen, AG_DATA_EINVAL, "synth: %s", why);
    ag_format fmt = task == AG_SYNTH_ORDER    ? AG_FORMAT_LABELED
                    : task == AG_SYNTH_LOOKUP ? AG_FORMAT_LM
                                              : AG_FORMAT_SICK;
    if (ag__ds_init(ds, fmt)) return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    ag_data_rng r;
    ag_data_rng_seed(&r, o.seed);
    int rc = task == AG_SYNTH_ORDER    ? synth_order(&o, &r, ds)
             : task == AG_SYNTH_LOOKUP ? synth_lookup(&o, &r, ds)
                                       : synth_pair(&o, &r, ds);
    if (rc) {
        ag_dataset_free(ds);
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "synth: out of memory");
    }
    if (task == AG_SYNTH_LOOKUP) ds->lm_max_len = o.lm_max_len;
    ag__ds_finish(ds);
    return 0;
}
