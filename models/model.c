/* model.c - the calls every model shares (the registry of kinds: registry.c). */
#include "attngrad/model.h"
#include "internal.h"
#include "../graph/internal.h" /* ag__fatal: a batch too big for memory ends with a message, not a crash */
#include "../ops/softmax_rows.h" /* ag__max_row */
#include "../ops/loss.h"         /* ag__smoothed_losses: a kind's own loss asked to smooth did */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tasks ---- */

static const char *const task_names[AG_TASK_COUNT] = {"classify", "pair", "lm", "relatedness"};

const char *ag_task_name(ag_task t) { return (unsigned)t < AG_TASK_COUNT ? task_names[t] : "?"; }

int ag_task_parse(const char *name, ag_task *t) {
    for (int i = 0; i < AG_TASK_COUNT; i++)
        if (!strcmp(name, task_names[i])) {
            *t = (ag_task)i;
            return 0;
        }
    return -1;
}

bool ag_model_supports(const ag_model_kind *kind, ag_task task) {
    return (unsigned)task < AG_TASK_COUNT && (kind->tasks & AG_TASK_BIT(task));
}

const char *ag_model_tasks_str(const ag_model_kind *kind, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < AG_TASK_COUNT && k < n; i++)
        if (kind->tasks & AG_TASK_BIT(i)) k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", task_names[i]);
    return buf;
}

/* ---- variant flags ---- */

static const struct {
    const char *name;
    unsigned bit;
} flag_names[] = {
    {"elu_score", AG_FLAG_ELU_SCORE}, {"linear_dist", AG_FLAG_LINEAR_DIST}, {"no_bigram", AG_FLAG_NO_BIGRAM},
    {"softmax", AG_FLAG_SOFTMAX},     {"no_zeta", AG_FLAG_NO_ZETA},         {"text_only", AG_FLAG_TEXT_ONLY},
    {"no_dist", AG_FLAG_NO_DIST},     {"exp_score", AG_FLAG_EXP_SCORE},     {"strict", AG_FLAG_STRICT},
};
enum { FLAG_COUNT = sizeof flag_names / sizeof *flag_names };

/* Position of name[0..len) in the comma-separated list, or -1. */
static int list_index(const char *list, const char *name, size_t len) {
    int i = 0;
    for (const char *p = list; p && *p; p += strcspn(p, ","), p += *p == ',', i++)
        if (strcspn(p, ",") == len && !strncmp(p, name, len)) return i;
    return -1;
}

int ag_model_flags_parse(const ag_model_kind *kind, const char *list, unsigned *bits, char *bad, size_t n) {
    *bits = 0;
    for (const char *p = list; *p; p += strcspn(p, ","), p += *p == ',') {
        size_t len = strcspn(p, ","), i = 0;
        while (i < FLAG_COUNT && !(strlen(flag_names[i].name) == len && !strncmp(flag_names[i].name, p, len))) i++;
        int own = i == FLAG_COUNT && kind ? list_index(kind->flag_names, p, len) : -1;
        if (i == FLAG_COUNT && (own < 0 || own >= AG_FLAG_OWN_MAX)) {
            if (n) snprintf(bad, n, "%.*s", (int)(len > 40 ? 40 : len), p);
            return -1;
        }
        *bits |= own >= 0 ? AG_FLAG_OWN(own) : flag_names[i].bit;
    }
    return 0;
}

const char *ag_model_flags_str(const ag_model_kind *kind, unsigned bits, char *buf, size_t n) {
    size_t k = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < FLAG_COUNT && k < n; i++)
        if (bits & flag_names[i].bit) k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "," : "", flag_names[i].name);
    int i = 0;
    for (const char *p = kind ? kind->flag_names : NULL; p && *p && k < n; p += strcspn(p, ","), p += *p == ',', i++)
        if (i < AG_FLAG_OWN_MAX && (bits & AG_FLAG_OWN(i)))
            k += (size_t)snprintf(buf + k, n - k, "%s%.*s", k ? "," : "", (int)strcspn(p, ","), p);
    return buf;
}

unsigned ag_model_flags_read(const ag_model_kind *kind) {
    unsigned bits = kind->flags;
    int i = 0;
    for (const char *p = kind->flag_names; p && *p && i < AG_FLAG_OWN_MAX; p += strcspn(p, ","), p += *p == ',', i++)
        bits |= AG_FLAG_OWN(i);
    return bits;
}

/* Is name[0..len) one of the built-in models' switches? */
bool ag__flag_is_builtin(const char *name, size_t len) {
    for (int i = 0; i < FLAG_COUNT; i++)
        if (strlen(flag_names[i].name) == len && !strncmp(flag_names[i].name, name, len)) return true;
    return false;
}

int ag_flags_parse(const char *list, unsigned *bits, char *bad, size_t n) {
    return ag_model_flags_parse(NULL, list, bits, bad, n);
}

const char *ag_flags_str(unsigned bits, char *buf, size_t n) { return ag_model_flags_str(NULL, bits, buf, n); }

ag_model_config ag_model_task_defaults(const ag_model_kind *kind, ag_task task) {
    ag_model_config c = {.vocab = 100, .classes = 2, .keep = 1.0, .seed = 1, .batch = 32,
                         .optim = "adam:lr=1e-3", .layers = 1, .heads = 1, .task = task};
    if (kind->defaults) kind->defaults(&c);
    return c;
}

/* The kind's own task: the first it has a head for (classify, pair, lm,
 * relatedness), unless its defaults say another. */
ag_model_config ag_model_defaults(const ag_model_kind *kind) {
    ag_task first = AG_TASK_CLASSIFY;
    while (first + 1 < AG_TASK_COUNT && !ag_model_supports(kind, first)) first++;
    return ag_model_task_defaults(kind, first);
}

/* Whether `name` (len bytes) is one of the comma-separated names of list. */
static bool listed(const char *list, const char *name, size_t len) {
    for (const char *p = list; p && *p; p += strcspn(p, ","), p += *p == ',')
        if (strcspn(p, ",") == len && !strncmp(p, name, len)) return true;
    return false;
}

/* cfg.hparams, "name=value,...": every name the kind's, once, every value a
 * finite number; AG_ERR_ARG naming the first that is not. */
static ag_status check_hparams(const ag_model_kind *kind, const char *given) {
    const char *own = ag__kind_hparams(kind);
    for (const char *p = given; p && *p; p += strcspn(p, ","), p += *p == ',') {
        size_t len = strcspn(p, ","), name = strcspn(p, "=");
        if (name >= len)
            return ag_fail(AG_ERR_ARG, "model %s: --hparams '%.*s': want name=value", kind->name, (int)len, p);
        if (!listed(own, p, name))
            return ag_fail(AG_ERR_ARG, "model %s has no setting '%.*s' (its --hparams: %s)", kind->name, (int)name, p,
                           own ? own : "none");
        for (const char *q = given; q < p; q += strcspn(q, ","), q += *q == ',')
            if (strcspn(q, "=") == name && !strncmp(q, p, name))
                return ag_fail(AG_ERR_ARG, "model %s: --hparams sets '%.*s' twice", kind->name, (int)name, p);
        char value[64], *end;
        snprintf(value, sizeof value, "%.*s", (int)(len - name - 1), p + name + 1);
        double v = strtod(value, &end);
        if (!value[0] || *end || !isfinite(v) || len - name - 1 >= sizeof value)
            return ag_fail(AG_ERR_ARG, "model %s: --hparams %.*s: '%s' is not a finite number", kind->name, (int)name,
                           p, value);
    }
    return AG_OK;
}

double ag_model_hparam(const ag_model *m, const char *name, double fallback) {
    size_t n = strlen(name);
    if (!listed(ag__kind_hparams(m->kind), name, n))
        ag__fatal("ag_model_hparam", "model %s lists no setting '%s' in its kind's .hparams", m->kind->name, name);
    for (const char *p = m->cfg.hparams; p && *p; p += strcspn(p, ","), p += *p == ',')
        if (strcspn(p, "=") == n && !strncmp(p, name, n)) return strtod(p + n + 1, NULL); /* checked when made */
    return fallback;
}

ag_tensor *ag_model_dropout(ag_model *m, ag_tensor *x, bool training) {
    return ag_dropout(x, m->cfg.keep, training, &m->rng);
}

static ag_status model_build(ag_model *m, const ag_model_kind *kind, const ag_model_config *cfg, bool shapes_only) {
    memset(m, 0, sizeof *m);
    m->params.shapes_only = shapes_only;
    unsigned reads = ag_model_flags_read(kind);
    if (cfg->flags & ~reads) { /* a variant switch of another model would be ignored silently */
        char foreign[128], own[256];
        ag_flags_str(cfg->flags & ~reads, foreign, sizeof foreign); /* another kind's own bits have no name here */
        ag_model_flags_str(kind, reads, own, sizeof own);
        return ag_fail(AG_ERR_ARG, "model %s does not read flag %s (its flags: %s)", kind->name,
                       foreign[0] ? foreign : "(unknown bits)", own[0] ? own : "none");
    }
    ag_status bad = check_hparams(kind, cfg->hparams); /* a setting the kind does not have would be ignored */
    if (bad != AG_OK) return bad;
    m->kind = kind;
    m->cfg = *cfg;
    ag_rng_seed(&m->rng, cfg->seed);
    ag__params_watch(&m->params);
    ag_status st = kind->build(m);
    char first[160];
    int strays = ag__params_strays(first, sizeof first);
    if (st == AG_OK && strays)
        st = ag_fail(AG_ERR_ARG, "model %s: its build made %d parameter%s outside the model's list (the first: %s): "
                     "no optimizer, gradient check or checkpoint would ever see %s; make %s with ag_param(&m->params, ...)",
                     kind->name, strays, strays == 1 ? "" : "s", first, strays == 1 ? "it" : "them",
                     strays == 1 ? "it" : "them");
    if (st != AG_OK) ag_model_free(m);
    return st;
}

ag_status ag_model_init(ag_model *m, const ag_model_kind *kind, const ag_model_config *cfg) {
    return model_build(m, kind, cfg, false);
}

ag_status ag_model_shapes(ag_model *m, const ag_model_kind *kind, const ag_model_config *cfg) {
    return model_build(m, kind, cfg, true);
}

void ag_model_capture_axes(ag_model *m, const char *name, ag_tensor *w, int axes) {
    if (!m->capture_maps || m->n_maps == AG_MAX_MAPS) return;
    ag_attn_map *map = &m->maps[m->n_maps++];
    snprintf(map->name, sizeof map->name, "%s", name);
    map->w = w;
    map->axes = axes;
}

void ag_model_capture(ag_model *m, const char *name, ag_tensor *w) { ag_model_capture_axes(m, name, w, AG_MAP_SENTENCE); }

/* Before a forward: clears the captured maps; false (ag_errmsg says why)
 * when the kind has no head for the configured task. */
static bool forward_begins(ag_model *m) {
    m->n_maps = 0;
    if (!ag_model_supports(m->kind, m->cfg.task)) { /* e.g. a one-sentence model given pairs */
        char tasks[64];
        ag_fail(AG_ERR_ARG, "model %s has no head for the %s task (it does: %s)", m->kind->name,
                ag_task_name(m->cfg.task), ag_model_tasks_str(m->kind, tasks, sizeof tasks));
        return false;
    }
    return true;
}

ag_tensor *ag_model_forward(ag_model *m, const ag_batch *b, bool training) {
    return forward_begins(m) ? m->kind->forward(m, b, training) : NULL;
}

void ag_model_free(ag_model *m) {
    if (m->kind && m->kind->destroy) m->kind->destroy(m);
    ag_params_free(&m->params);
    memset(m, 0, sizeof *m);
}

ag_model_config ag_model_tiny(const ag_model_kind *kind) {
    ag_model_config c = ag_model_defaults(kind);
    c.vocab = 10;
    c.classes = 3;
    c.keep = 1.0;
    c.seed = 7;
    if (kind->tiny) kind->tiny(&c);
    return c;
}

static int32_t *ints(size_t n) { return calloc(n ? n : 1, sizeof(int32_t)); }

void ag_model_batch_alloc(const ag_model *m, int B, int N, ag_batch *b) {
    memset(b, 0, sizeof *b);
    if (m->kind->batch_opts) m->kind->batch_opts(&m->cfg, &b->opts);
    size_t cells = (size_t)B * N;
    b->rows = b->max_rows = B;
    b->width = b->width_b = b->max_width = N;
    b->tokens = ints(cells), b->tokens_b = ints(cells), b->targets = ints(cells);
    b->heads = ints(cells), b->heads_b = ints(cells), b->bigrams = ints(cells), b->bigrams_b = ints(cells);
    b->lengths = ints(B), b->lengths_b = ints(B), b->labels = ints(B);
    b->scores = calloc(B > 0 ? B : 1, sizeof *b->scores);
    /* All or nothing: what was taken goes back before the fatal error, so the
     * exit it ends in has memory to run (OpenBLAS joining its threads hangs
     * without, under ulimit -v). */
    const void *arrays[] = {b->tokens, b->tokens_b, b->targets, b->heads, b->heads_b, b->bigrams,
                            b->bigrams_b, b->lengths, b->lengths_b, b->labels, b->scores};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++)
        if (!arrays[i]) {
            ag_model_batch_free(b);
            ag__fatal("ag_model_batch_alloc", "out of memory for a batch of %d rows x %d tokens (%zu bytes an array)",
                      B, N, cells * sizeof(int32_t));
        }
}

void ag_tiny_batch(const ag_model *m, ag_batch *b, uint64_t seed) {
    enum { B = 2, N = 5 };
    static const int32_t lengths[B] = {5, 3};
    /* The second sentence has lengths of its own: a pair model that masked
     * it with the first one's would pass a check on equal lengths. */
    static const int32_t lengths_b[B] = {2, 4};
    ag_rng r, rb; /* rb: the second sentence's words, so the first's stay the draws they always were */
    ag_rng_seed(&r, seed);
    ag_rng_seed(&rb, seed ^ 0xb5e7b5e7u);
    ag_model_batch_alloc(m, B, N, b);
    static const float scores[B] = {3.6f, 1.7f}; /* relatedness: two targets, each over two bins */
    memcpy(b->scores, scores, sizeof scores);
    int V = m->cfg.vocab, nbi = m->cfg.n_bigram;
    for (int i = 0; i < B; i++) {
        b->lengths[i] = lengths[i], b->lengths_b[i] = lengths_b[i];
        b->labels[i] = (int32_t)(ag_rng_next(&r) % (uint64_t)m->cfg.classes);
        for (int t = 0; t < N; t++) {
            bool valid = t < lengths[i], valid_b = t < lengths_b[i];
            int k = i * N + t;
            b->tokens[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            if (valid) (void)ag_rng_next(&r); /* where the second sentence's word was drawn until 2026-12-06 */
            b->tokens_b[k] = valid_b ? 2 + (int32_t)(ag_rng_next(&rb) % (uint64_t)(V - 2)) : 0;
            b->targets[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            /* a small tree: t -> t+1 except a second root at t = 2 */
            b->heads[k] = !valid ? AG_HEAD_PAD : (t == lengths[i] - 1 || t == 2) ? -1 : t + 1;
            b->heads_b[k] = !valid_b ? AG_HEAD_PAD : (t == lengths_b[i] - 1 || t == 2) ? -1 : t + 1;
        }
        for (int t = 0; t < N; t++) {
            int k = i * N + t;
            b->bigrams[k] = (nbi > 1 && t + 1 < lengths[i]) ? ag_bigram_id(b->tokens[k], b->tokens[k + 1], nbi) : 0;
            b->bigrams_b[k] =
                (nbi > 1 && t + 1 < lengths_b[i]) ? ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], nbi) : 0;
        }
    }
}

void ag_model_batch_free(ag_batch *b) {
    free(b->tokens); free(b->lengths); free(b->labels); free(b->tokens_b); free(b->lengths_b);
    free(b->targets); free(b->heads); free(b->heads_b); free(b->bigrams); free(b->bigrams_b); free(b->scores);
    memset(b, 0, sizeof *b);
}

/* ---- relatedness: Tai et al.'s target and predicted score ---- */

ag_status ag_relatedness_target(const float *scores, int rows, ag_real *target) {
    enum { K = AG_RELATEDNESS_BINS };
    for (int r = 0; r < rows; r++) {
        double y = scores[r];
        if (!(y >= 1 && y <= K))
            return ag_fail(AG_ERR_ARG, "relatedness score %g of row %d is outside [1, %d]", y, r, K);
        int lo = (int)floor(y); /* bins are 1-based: bin i is target[i - 1] */
        ag_real *t = target + (int64_t)r * K;
        for (int i = 0; i < K; i++) t[i] = 0;
        t[lo - 1] = (ag_real)(lo - y + 1);
        if (lo < K) t[lo] = (ag_real)(y - lo); /* y = 5 is the one-hot on bin 5 */
    }
    return AG_OK;
}

double ag_relatedness_score(const ag_real *logits) {
    double mx = ag__max_row(logits, AG_RELATEDNESS_BINS), sum = 0, weighted = 0;
    for (int i = 0; i < AG_RELATEDNESS_BINS; i++) {
        double e = exp((double)logits[i] - mx);
        sum += e;
        weighted += (i + 1) * e;
    }
    return weighted / sum;
}

ag_tensor *ag_model_loss_of(const ag_model *m, const ag_batch *b, ag_tensor *logits) {
    return ag_model_objective_of(m, b, logits, false);
}

ag_tensor *ag_model_objective_of(const ag_model *m, const ag_batch *b, ag_tensor *logits, bool training) {
    double eps = training ? m->cfg.label_smoothing : 0;
    bool lm = m->cfg.task == AG_TASK_LM;
    if (m->cfg.task != AG_TASK_RELATEDNESS && eps > 0)
        return ag_cross_entropy_smoothed(logits, lm ? b->targets : b->labels, lm ? 0 : -1, eps);
    if (lm) return ag_cross_entropy(logits, b->targets, 0);
    if (m->cfg.task != AG_TASK_RELATEDNESS) return ag_cross_entropy(logits, b->labels, -1);
    if (!b->scores) {
        ag_fail(AG_ERR_ARG, "a relatedness batch needs scores (a batch of sentence pairs)");
        return NULL;
    }
    ag_tensor *target = ag_tensor_new_host(2, (int[]){b->rows, AG_RELATEDNESS_BINS}); /* step memory */
    if (ag_relatedness_target(b->scores, b->rows, target->data) != AG_OK) return NULL;
    return ag_kl_div_soft(logits, target->data);
}

ag_tensor *ag_model_loss(ag_model *m, const ag_batch *b, bool training) {
    if (m->kind->loss) {
        if (!forward_begins(m)) return NULL;
        int64_t smoothed = ag__smoothed_losses;
        ag_tensor *loss = m->kind->loss(m, b, training);
        if (loss && training && m->cfg.label_smoothing > 0 && ag__smoothed_losses == smoothed) {
            ag_fail(AG_ERR_ARG, "label smoothing %g: the loss of model %s made no smoothed cross-entropy (a kind's "
                    "own loss applies it through ag_model_objective_of or the _smoothed ops: docs/extending.md)",
                    m->cfg.label_smoothing, m->kind->name);
            return NULL;
        }
        return loss;
    }
    ag_tensor *logits = ag_model_forward(m, b, training);
    if (!logits) return NULL; /* bad input (e.g. a parse); ag_errmsg() says why */
    return ag_model_objective_of(m, b, logits, training);
}
