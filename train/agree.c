/* agree.c - the ranks of a data-parallel job check that they train the same
 * run before their first collective on the model.
 *
 * Every rank reads its own command line, data and checkpoint.  mpirun
 * gives every rank the same command line, but a launcher's per-rank line
 * ("mpirun -np 1 A : -np 1 B"), a wrapper script or a copy of the data on
 * each machine's own disk may not: ranks with other shapes send buffers of
 * other sizes (a crash, MPI_ERR_TRUNCATE), ranks with another seed or
 * batch take other batch sequences and wait in collectives the others
 * never reach (a hang), and ranks with other data of the same shapes train
 * silently on a mixture.  So the ranks compare, once per fold, what decides
 * their collectives and their steps with rank 0's: a rank that differs
 * says what and ends the job (ag__dist_abort, by its caller).  After
 * --resume that includes the values a rank read from its last.safetensors
 * (parameters, optimizer and schedule state), which a stale copy of the
 * run folder would make its own. */
#include "trainer.h"
#include "../graph/device.h" /* ag__read_on: a GPU's values to hash */
#include "../optim/options.h" /* ag__optim_slot_numel: a slot's elements */

#include <stdlib.h>
#include <string.h>

/* FNV-1a, 64 bits: n bytes at p into h. */
static uint64_t mix(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t mix_ints(uint64_t h, const int32_t *v, int32_t n) {
    return v && n > 0 ? mix(h, v, (size_t)n * sizeof *v) : h;
}

/* The splits' examples in the order the run takes them, and the vocabulary
 * that encoded them: the same words, labels and parses on every rank. */
static uint64_t data_digest(const ag_run_data *d) {
    uint64_t h = 0xcbf29ce484222325ull, fp = d->vocab ? ag_vocab_fingerprint(d->vocab) : 0;
    h = mix(h, &fp, sizeof fp);
    for (int s = 0; s < AG_SPLITS; s++) {
        h = mix(h, &d->n[s], sizeof d->n[s]);
        for (int64_t i = 0; d->ds[s] && i < d->n[s]; i++) {
            const ag_example *e = &d->ds[s]->ex[d->idx[s][i]];
            int32_t sizes[3] = {e->len, e->len_b, e->label};
            h = mix(h, sizes, sizeof sizes);
            h = mix(h, &e->score, sizeof e->score);
            h = mix_ints(mix_ints(h, e->tokens, e->len), e->tokens_b, e->len_b);
            h = mix_ints(mix_ints(h, e->heads, e->len), e->heads_b, e->len_b);
        }
    }
    return h;
}

/* The parameters' names and sizes (a plugin loaded on one rank only adds
 * some), and the run's counters and dropout generator after --resume (a
 * rank that read a stale copy of the checkpoint). */
static uint64_t model_digest(const ag_params *ps) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *t = ps->items[i];
        if (t->name) h = mix(h, t->name, strlen(t->name) + 1);
        h = mix(h, &t->size, sizeof t->size);
    }
    return h;
}

/* The best dev score too: it decides which epochs count as bad, so a rank
 * with another would stop early (--patience) where the others go on. */
static uint64_t state_digest(const ag__run_state *s, const ag_rng *rng) {
    int64_t counters[6] = {s->step, s->epoch, s->batch, s->bad_epochs, s->stopped, s->best_epoch};
    uint64_t h = mix(0xcbf29ce484222325ull, counters, sizeof counters);
    return mix(mix(h, &s->best, sizeof s->best), rng->s, sizeof rng->s);
}

/* ---- the values a run goes on from ---- */

/* What every rank must hold alike beside the counters, each named as a
 * checkpoint names it: after --resume the parameters (a fresh run's are
 * rank 0's, broadcast before the first step, whatever a rank made of the
 * seed or its --init file), and always the optimizer's state, its step
 * count and rate, and the schedule's state, which no broadcast makes
 * equal: a rank that resumed another copy of last.safetensors would take
 * other steps than rank 0 from the same gradients.  One CRC-32C each. */
typedef struct {
    const ag__trainer *t;
    int params; /* the parameters, counted first: 0 on a fresh run */
    int slots;  /* the optimizer's state tensors, slot by slot */
    int count;  /* params + slots + 3: optim.step, optim.lr, sched.state */
} run_values;

static run_values values_of(const ag__trainer *t, bool resumed) {
    run_values v = {.t = t, .params = resumed ? t->model.params.count : 0, .slots = t->opt.n_slots * t->opt.n_params};
    v.count = v.params + v.slots + 3;
    return v;
}

/* CRC-32C of n values at p in the memory of dev; a GPU's through buf. */
static uint32_t crc_on(ag_device dev, const ag_real *p, int64_t n, ag_real *buf) {
    if (!p || n <= 0) return 0; /* no optimizer state: a frozen parameter's, a Muon matrix's v */
    if (dev != AG_CPU) ag__read_on(dev, buf, p, (size_t)n * sizeof *p), p = buf;
    return ag_crc32c(0, p, (size_t)n * sizeof *p);
}

/* Value k's CRC-32C, and its name into name[0..n) when name is not NULL. */
static uint32_t value_crc(const run_values *v, int k, ag_real *buf, char *name, size_t n) {
    const ag_optimizer *o = &v->t->opt;
    if (k < v->params) {
        const ag_tensor *p = v->t->model.params.items[k];
        if (name) snprintf(name, n, "%s", p->name ? p->name : "(unnamed)");
        return crc_on(p->device, p->data, p->size, buf);
    }
    if ((k -= v->params) < v->slots) {
        const ag_tensor *p = o->params->items[k % o->n_params];
        if (name)
            snprintf(name, n, "optim.%s.%s.%s", ag_optim_name(o->cfg.kind), ag_optim_slot_name(o, k / o->n_params),
                     p->name ? p->name : "(unnamed)");
        return crc_on(o->device, o->slot[k], ag__optim_slot_numel(o, k % o->n_params, k / o->n_params), buf);
    }
    const ag_scheduler *sc = &v->t->sched;
    double sched[4] = {(double)sc->last_epoch, sc->best, sc->num_bad_epochs, sc->cooldown_counter};
    static const char *const names[3] = {"optim.step", "optim.lr", "sched.state"};
    const void *at[3] = {&o->step, &o->lr, sched};
    size_t bytes[3] = {sizeof o->step, sizeof o->lr, sizeof sched};
    k -= v->slots;
    if (name) snprintf(name, n, "%s", names[k]);
    return ag_crc32c(0, at[k], bytes[k]);
}

/* The largest tensor of v on a GPU, in values (0: none is). */
static int64_t gpu_largest(const run_values *v) {
    int64_t n = 0;
    const ag_params *lists[2] = {&v->t->model.params, v->slots ? v->t->opt.params : NULL};
    for (int l = 0; l < 2; l++)
        for (int i = 0; lists[l] && i < lists[l]->count; i++) {
            const ag_tensor *p = lists[l]->items[i];
            bool gpu = l ? v->t->opt.device != AG_CPU : v->params && p->device != AG_CPU;
            if (gpu && p->size > n) n = p->size;
        }
    return n;
}

/* Compares v's values with rank 0's (one broadcast of their CRCs, every
 * rank in it); fails on this rank naming the first that differs. */
static int values_agree(const run_values *v, bool resumed, const char *how, char *err, size_t errlen) {
    int64_t largest = gpu_largest(v);
    uint32_t *crc = malloc(2 * (size_t)v->count * sizeof *crc);
    ag_real *buf = largest ? malloc((size_t)largest * sizeof *buf) : NULL;
    if (!crc || (largest && !buf)) {
        free(crc), free(buf);
        return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for the digests of the run's %d tensors",
                              v->count);
    }
    uint32_t *first = crc + v->count;
    for (int k = 0; k < v->count; k++) first[k] = crc[k] = value_crc(v, k, buf, NULL, 0);
    ag__dist_bcast(first, (size_t)v->count * sizeof *first);
    int k = 0;
    while (k < v->count && crc[k] == first[k]) k++;
    int rc = 0;
    if (k < v->count) {
        char name[512];
        value_crc(v, k, buf, name, sizeof name);
        const char *from = resumed ? " as this rank resumed it from last.safetensors: another copy of the run folder?"
                                   : "";
        rc = ag__train_fail(err, errlen, AG_ERR_ARG, "its %s from rank 0's ('%s'%s): %s",
                            k < v->params ? "parameters differ" : "optimizer state differs", name, from, how);
    }
    free(crc), free(buf);
    return rc;
}

/* Options that are a rank's own: paths, which may name the same contents
 * from other folders (the contents are compared as data), what rank 0
 * alone prints, and what the data decide (compared as data). */
static bool rank_own(const char *line) {
    static const char *keys[] = {"data", "out", "embeddings", "parses", "init", "quiet", "progress", "profile",
                                 "vocab-fp", "classes", "labels", "parse-source"};
    size_t k = strcspn(line, "=");
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (strlen(keys[i]) == k && !strncmp(line, keys[i], k)) return true;
    return false;
}

/* The run's options as its checkpoints record them ("key=value" lines),
 * less a rank's own, into buf. */
static void shared_options(const ag_train_opts *o, char *buf, size_t n) {
    char all[AG_CONFIG_MAX] = "";
    ag_train_opts_format(o, all, sizeof all); /* one too long for a checkpoint is cut alike on every rank */
    size_t k = 0;
    for (const char *p = all; *p && k + 1 < n;) {
        size_t len = strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n');
        if (!rank_own(p) && k + len < n) memcpy(buf + k, p, len), k += len;
        p += len;
    }
    buf[k] = 0;
}

/* The first line of mine that theirs lacks, and theirs for the same key
 * ("unset" when none), as "key=A here, key=B on rank 0". */
static void first_difference(const char *mine, const char *theirs, char *out, size_t n) {
    for (const char *p = mine; *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] == '\n')) {
        int len = (int)strcspn(p, "\n"), key = (int)strcspn(p, "=");
        bool found = false;
        const char *q = theirs, *same_key = NULL;
        for (; *q && !found; q += strcspn(q, "\n") + (q[strcspn(q, "\n")] == '\n')) {
            int qlen = (int)strcspn(q, "\n");
            found = qlen == len && !strncmp(p, q, (size_t)len);
            if (!strncmp(p, q, (size_t)key + 1)) same_key = q;
        }
        if (found) continue;
        if (same_key) snprintf(out, n, "%.*s here, %.*s on rank 0", len, p, (int)strcspn(same_key, "\n"), same_key);
        else snprintf(out, n, "%.*s here, unset on rank 0", len, p);
        return;
    }
    snprintf(out, n, "rank 0 sets an option this rank does not");
}

typedef struct {
    char options[AG_CONFIG_MAX];
    uint64_t data, model, state;
    int32_t values; /* run_values' count: the size of the second broadcast */
} run_digest;

int ag__train_ranks_agree(const ag_train_opts *o, const ag__trainer *t, const ag__run_state *s, char *err,
                          size_t errlen) {
    if (ag__dist_size() == 1) return 0;
    static run_digest mine, first; /* 2 KB each: off the stack */
    memset(&mine, 0, sizeof mine);
    shared_options(o, mine.options, sizeof mine.options);
    mine.data = data_digest(&t->data);
    mine.model = model_digest(&t->model.params);
    mine.state = state_digest(s, &t->model.rng);
    run_values v = values_of(t, o->resume);
    mine.values = v.count;
    first = mine;
    ag__dist_bcast(&first, sizeof first);
    const char *how = "ranks must train one run (docs/distributed.md)";
    /* the options first: other options (a seed) make other data */
    if (strcmp(mine.options, first.options)) {
        char what[256];
        first_difference(mine.options, first.options, what, sizeof what);
        return ag__train_fail(err, errlen, AG_ERR_ARG, "its options differ from rank 0's (%s): %s", what, how);
    }
    if (mine.data != first.data)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "its data differ from rank 0's (the words, labels or order of "
                              "the examples; every rank must read the same files): %s", how);
    if (mine.model != first.model)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "its model's parameters differ from rank 0's (a --plugin on "
                              "one rank only?): %s", how);
    if (mine.state != first.state)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "the run it resumes differs from rank 0's (its step, epoch, "
                              "best dev score or dropout generator: another copy of last.safetensors?): %s", how);
    if (mine.values != first.values) /* the same model and optimizer: only --resume changes the count */
        return ag__train_fail(err, errlen, AG_ERR_ARG, "it %s, rank 0 %s: %s", o->resume ? "resumes a run" :
                              "starts a new run", o->resume ? "starts a new one" : "resumes one", how);
    return values_agree(&v, o->resume, how, err, errlen);
}
