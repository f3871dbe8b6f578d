/* test_custom_model.c - a model the library has never seen, defined here
 * and nowhere else, through the public headers only (include/attngrad/),
 * registered at run time and run through every workflow of the trainer
 * library: train (a run, a resume), eval, predict, heatmap, dump-step and
 * the f64 gradient check, and its own --flags switch; and every refusal of
 * ag_model_register and ag_model_load_plugin, each with its message.
 *
 * Built three ways (tests/meson.build):
 *   test_custom_model_f32, _f64   this file's main: the library calls
 *   custom_model.so, -f64.so      -DAG_TEST_PLUGIN: the same kind behind
 *                                 ag_plugin_init, for `attngrad --plugin`
 *                                 and `optim_experiments --plugin`
 *                                 (tests/test_plugin.sh) */
#include "attngrad/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model: embedding + sinusoidal positions, one masked
 * self-attention, residual + LayerNorm, max pooling over the real tokens,
 * a linear classifier; --flags no_pos leaves the positions out ---- */

/* faint: the attention's output scaled by 1e-7, so wq, wk and wv get gradients of ~1e-8, which no finite
 * difference resolves and which are not zero, whatever the parameters (gradcheck's weak line, and --strict) */
enum { NO_POS = AG_FLAG_OWN(0), FAINT = AG_FLAG_OWN(1) };

typedef struct {
    ag_tensor *embed, *wq, *wk, *wv, *ln_gain, *ln_bias, *out_w, *out_b;
} tiny_attn;

static void tiny_attn_defaults(ag_model_config *c) {
    c->dim = 16;
    c->keep = 0.9;
    c->batch = 16;
    c->optim = "adam:lr=3e-3";
}

static void tiny_attn_tiny(ag_model_config *c) { c->dim = 4; }

static ag_status tiny_attn_build(ag_model *m) {
    int V = m->cfg.vocab, d = m->cfg.dim, K = m->cfg.classes;
    if (d < 1) return ag_fail(AG_ERR_ARG, "tiny_attn: dim = %d, needs at least 1", d);
    tiny_attn *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "tiny_attn: out of memory");
    m->impl = p;
    ag_params *ps = &m->params;
    p->embed = ag_param(ps, "embed", 2, (int[]){V, d});
    p->wq = ag_param(ps, "attn.wq", 2, (int[]){d, d});
    p->wk = ag_param(ps, "attn.wk", 2, (int[]){d, d});
    p->wv = ag_param(ps, "attn.wv", 2, (int[]){d, d});
    p->ln_gain = ag_param(ps, "ln.gain", 1, (int[]){d});
    p->ln_bias = ag_param(ps, "ln.bias", 1, (int[]){d});
    p->out_w = ag_param(ps, "out.w", 2, (int[]){d, K});
    p->out_b = ag_param(ps, "out.b", 1, (int[]){K});
    ag_init_normal(p->embed, 0, 1, &m->rng);
    ag_tensor *glorot[] = {p->wq, p->wk, p->wv, p->out_w};
    for (int i = 0; i < 4; i++) ag_init_glorot_uniform(glorot[i], 1.0, &m->rng);
    ag_init_constant(p->ln_gain, 1);
    /* off zero, so the gradient check sees the bias terms at work */
    ag_init_uniform(p->ln_bias, -0.1, 0.1, &m->rng);
    ag_init_uniform(p->out_b, -0.1, 0.1, &m->rng);
    return AG_OK;
}

/* sin/cos of t / 10000^(2i/d) [N,d], a constant in step memory: without
 * it attention and pooling could not tell word order apart */
static ag_tensor *positions(int N, int d) {
    ag_tensor *pe = ag_tensor_new(2, (int[]){N, d});
    for (int t = 0; t < N; t++)
        for (int i = 0; i < d; i++) {
            double angle = t / pow(10000, (double)(i - i % 2) / d);
            pe->data[t * d + i] = (ag_real)(i % 2 ? cos(angle) : sin(angle));
        }
    return pe;
}

static ag_tensor *tiny_attn_forward(ag_model *m, const ag_batch *b, bool training) {
    tiny_attn *p = m->impl;
    int B = b->rows, N = b->width;
    ag_tensor *e = ag_embedding(p->embed, b->tokens, 2, (int[]){B, N}); /* [B,N,d] */
    if (!(m->cfg.flags & NO_POS)) e = ag_add(e, positions(N, m->cfg.dim));
    ag_tensor *mask = ag_mask_padding(b->lengths, B, N, 3, false);               /* [B,1,N] */
    ag_tensor *probs = NULL;
    ag_tensor *a = ag_attention(ag_linear(e, p->wq, NULL), ag_linear(e, p->wk, NULL), ag_linear(e, p->wv, NULL), mask,
                                1 / sqrt((double)m->cfg.dim), m->capture_maps ? &probs : NULL);
    if (probs) ag_model_capture(m, "self", probs);                               /* [B,N,N] */
    if (m->cfg.flags & FAINT) a = ag_mul_scalar(a, 1e-7);
    ag_tensor *h = ag_layernorm(ag_add(e, a), p->ln_gain, p->ln_bias, 1e-5);
    ag_tensor *pooled = ag_dropout(ag_max_over_time(h, b->lengths), m->cfg.keep, training, &m->rng); /* [B,d] */
    return ag_linear(pooled, p->out_w, p->out_b);
}

static void tiny_attn_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind tiny_attn_kind = {
    .abi = AG_MODEL_ABI,
    .name = "tiny_attn",
    .defaults = tiny_attn_defaults,
    .tiny = tiny_attn_tiny,
    .build = tiny_attn_build,
    .forward = tiny_attn_forward,
    .destroy = tiny_attn_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
    .reads = "max-len",
    .flag_names = "no_pos,faint",
};

#ifdef AG_TEST_PLUGIN

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&tiny_attn_kind); }

#else

#include "check.h"
#include "fatal.h"

#include <unistd.h>

static char tmp[256], err[2048];

/* ---- a language model that keeps a state for generation (model API 2's
 * lm_* callbacks): logits_t = tanh(E[x_t] + F[x_{t-1}]) W + b, so the next
 * word depends on the last two; the state is the last word read ---- */

typedef struct {
    ag_tensor *now, *before, *out_w, *out_b;
} pair_lm;

static ag_status pair_lm_build(ag_model *m) {
    int V = m->cfg.vocab, d = m->cfg.dim;
    pair_lm *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "pair_lm: out of memory");
    m->impl = p;
    p->now = ag_param(&m->params, "now", 2, (int[]){V, d});
    p->before = ag_param(&m->params, "before", 2, (int[]){V, d});
    p->out_w = ag_param(&m->params, "out.w", 2, (int[]){d, V});
    p->out_b = ag_param(&m->params, "out.b", 1, (int[]){V});
    ag_init_normal(p->now, 0, 1, &m->rng);
    ag_init_normal(p->before, 0, 1, &m->rng);
    ag_init_glorot_uniform(p->out_w, 1.0, &m->rng);
    ag_init_uniform(p->out_b, -0.5, 0.5, &m->rng);
    return AG_OK;
}

/* logits [rows, n, V] of ids [rows, n] whose words before are prev [rows, n] */
static ag_tensor *pair_lm_logits(const pair_lm *p, const int32_t *ids, const int32_t *prev, int rows, int n) {
    int shape[2] = {rows, n};
    ag_tensor *h = ag_tanh(ag_add(ag_embedding(p->now, ids, 2, shape), ag_embedding(p->before, prev, 2, shape)));
    return ag_linear(h, p->out_w, p->out_b);
}

static ag_tensor *pair_lm_forward(ag_model *m, const ag_batch *b, bool training) {
    (void)training;
    int B = b->rows, N = b->width;
    int32_t *prev = malloc(((size_t)B * N + 1) * sizeof *prev);
    if (!prev) return ag_fail(AG_ERR_NOMEM, "pair_lm: out of memory"), NULL;
    for (int i = 0; i < B * N; i++) prev[i] = i % N ? b->tokens[i - 1] : AG_PAD_ID; /* <pad> before the first */
    ag_tensor *logits = pair_lm_logits(m->impl, b->tokens, prev, B, N);
    free(prev);
    return logits;
}

static void pair_lm_destroy(ag_model *m) { free(m->impl); }

typedef struct {
    int capacity, fed; /* positions room for, read so far */
    int32_t last;      /* the last word read (<pad> before any) */
} pair_lm_state;

static int words_fed; /* every word lm_feed read, over the test */

static void *pair_lm_state_new(const ag_model *m, int capacity) {
    (void)m;
    pair_lm_state *s = malloc(sizeof *s);
    if (s) *s = (pair_lm_state){capacity, 0, AG_PAD_ID};
    return s;
}

static ag_tensor *pair_lm_feed(ag_model *m, void *state, const int32_t *ids, int n) {
    pair_lm_state *s = state;
    if (n < 1 || n > s->capacity - s->fed)
        return ag_fail(AG_ERR_ARG, "pair_lm: %d words after %d, room for %d", n, s->fed, s->capacity), NULL;
    int32_t prev[64];
    if (n > 64) return ag_fail(AG_ERR_ARG, "pair_lm: %d words at once", n), NULL;
    for (int i = 0; i < n; i++) prev[i] = i ? ids[i - 1] : s->last;
    ag_tensor *logits = pair_lm_logits(m->impl, ids, prev, 1, n);
    s->last = ids[n - 1], s->fed += n, words_fed += n;
    return ag_slice(logits, 1, n - 1, n); /* [1,1,V] */
}

static void pair_lm_state_free(void *state) { free(state); }

/* A feed that breaks the contract: [1, V], not [1, 1, V] */
static ag_tensor *pair_lm_feed_2d(ag_model *m, void *state, const int32_t *ids, int n) {
    ag_tensor *logits = pair_lm_feed(m, state, ids, n);
    return logits ? ag_reshape(logits, 2, (int[]){1, logits->shape[2]}) : NULL;
}

static const ag_model_kind pair_lm_kind = {
    .abi = AG_MODEL_ABI,
    .name = "pair_lm",
    .build = pair_lm_build,
    .forward = pair_lm_forward,
    .destroy = pair_lm_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_LM),
    .lm_state_new = pair_lm_state_new,
    .lm_feed = pair_lm_feed,
    .lm_state_free = pair_lm_state_free,
};

/* ---- a model with a table per position, sized by the run's --max-len
 * (model API 4's cfg.max_len), as learned positions are: it refuses a
 * wider batch, so generation must keep to the last max_len words.  Its
 * own recipe (AdamW, a warm-up and decay over the run's steps) is what
 * the generated LM task must leave alone. ---- */

typedef struct {
    pair_lm base;
    ag_tensor *pos;
} pos_lm;

static void pos_lm_defaults(ag_model_config *c) {
    c->dim = 8;
    c->optim = "adamw:lr=3e-3,weight_decay=0.01";
    c->clip = 2;
    c->lr_steps = "linear:warmup=2,total=run";
}

static void pos_lm_bad_defaults(ag_model_config *c) {
    pos_lm_defaults(c);
    c->lr_steps = "cosine:warmup=5"; /* no total */
}

static ag_status pos_lm_build(ag_model *m) {
    int V = m->cfg.vocab, d = m->cfg.dim, L = m->cfg.max_len;
    if (L < 1) return ag_fail(AG_ERR_ARG, "pos_lm: its position table needs --max-len (got %d)", L);
    pos_lm *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "pos_lm: out of memory");
    m->impl = p;
    p->base.now = ag_param(&m->params, "now", 2, (int[]){V, d});
    p->base.before = ag_param(&m->params, "before", 2, (int[]){V, d});
    p->pos = ag_param(&m->params, "pos", 2, (int[]){L, d});
    p->base.out_w = ag_param(&m->params, "out.w", 2, (int[]){d, V});
    p->base.out_b = ag_param(&m->params, "out.b", 1, (int[]){V});
    ag_init_normal(p->base.now, 0, 1, &m->rng);
    ag_init_normal(p->base.before, 0, 1, &m->rng);
    ag_init_normal(p->pos, 0, 1, &m->rng);
    ag_init_glorot_uniform(p->base.out_w, 1.0, &m->rng);
    ag_init_uniform(p->base.out_b, -0.5, 0.5, &m->rng);
    return AG_OK;
}

/* logits [rows, n, V] of ids whose words before are prev, at positions at */
static ag_tensor *pos_lm_logits(const pos_lm *p, const int32_t *ids, const int32_t *prev, const int32_t *at, int rows,
                                int n) {
    int shape[2] = {rows, n};
    ag_tensor *h = ag_add(ag_embedding(p->base.now, ids, 2, shape), ag_embedding(p->base.before, prev, 2, shape));
    return ag_linear(ag_tanh(ag_add(h, ag_embedding(p->pos, at, 2, shape))), p->base.out_w, p->base.out_b);
}

static ag_tensor *pos_lm_forward(ag_model *m, const ag_batch *b, bool training) {
    (void)training;
    int B = b->rows, N = b->width;
    if (N > m->cfg.max_len)
        return ag_fail(AG_ERR_ARG, "pos_lm: %d positions, more than its table's %d", N, m->cfg.max_len), NULL;
    int32_t prev[4096], at[4096];
    if ((int64_t)B * N > 4096) return ag_fail(AG_ERR_ARG, "pos_lm: a batch of %d x %d", B, N), NULL;
    for (int i = 0; i < B * N; i++) prev[i] = i % N ? b->tokens[i - 1] : AG_PAD_ID, at[i] = i % N;
    return pos_lm_logits(m->impl, b->tokens, prev, at, B, N);
}

static ag_tensor *pos_lm_feed(ag_model *m, void *state, const int32_t *ids, int n) {
    pair_lm_state *s = state;
    if (n < 1 || n > s->capacity - s->fed || s->fed + n > m->cfg.max_len || n > 64)
        return ag_fail(AG_ERR_ARG, "pos_lm: %d words after %d, room for %d", n, s->fed, s->capacity), NULL;
    int32_t prev[64], at[64];
    for (int i = 0; i < n; i++) prev[i] = i ? ids[i - 1] : s->last, at[i] = s->fed + i;
    ag_tensor *logits = pos_lm_logits(m->impl, ids, prev, at, 1, n);
    s->last = ids[n - 1], s->fed += n, words_fed += n;
    return ag_slice(logits, 1, n - 1, n);
}

static const ag_model_kind pos_lm_kind = {
    .abi = AG_MODEL_ABI,
    .name = "pos_lm",
    .defaults = pos_lm_defaults,
    .build = pos_lm_build,
    .forward = pos_lm_forward,
    .destroy = pair_lm_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_LM),
    .reads = "max-len",
    .lm_state_new = pair_lm_state_new,
    .lm_feed = pos_lm_feed,
    .lm_state_free = pair_lm_state_free,
};

static void set(ag_train_opts *o, const char *key, const char *value) {
    int rc = ag_train_set(o, key, value, err, sizeof err);
    CHECK(rc == 0, "--%s %s: %s", key, value ? value : "", err);
}

/* ---- registration and its refusals ---- */

static ag_tensor *no_forward(ag_model *m, const ag_batch *b, bool training) {
    (void)m, (void)b, (void)training;
    return NULL;
}

static void refused(const ag_model_kind *kind, const char *want, const char *want2) {
    ag_status st = ag_model_register(kind);
    CHECK(st == AG_ERR_ARG && strstr(ag_errmsg(), want) && (!want2 || strstr(ag_errmsg(), want2)),
          "want '%s' '%s', got %d '%s'", want, want2 ? want2 : "", st, ag_errmsg());
}

static void test_register(void) {
    int builtin = 0; /* the kinds registered before: 5 built-in and 8 of the tests above (test_generate_from_state's,
                      * test_max_len's, test_hparams'; the older API's kinds are refused) */
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) builtin++;
    CHECK(builtin == 5 + 8, "%d kinds before", builtin);
    CHECK(ag_model_find("tiny_attn") == NULL);
    CHECK(ag_model_register(&tiny_attn_kind) == AG_OK, "%s", ag_errmsg());
    CHECK(ag_model_find("tiny_attn") == &tiny_attn_kind);
    CHECK(ag_model_kinds()[builtin] == &tiny_attn_kind && ag_model_kinds()[builtin + 1] == NULL);

    ag_model_kind k = tiny_attn_kind;
    refused(&tiny_attn_kind, "'tiny_attn' is already registered", NULL);
    k.name = "mpsan"; /* a built-in name is taken too */
    refused(&k, "'mpsan' is already registered", NULL);
    refused(NULL, "kind is NULL", NULL);
    k = tiny_attn_kind, k.name = "other";
    /* the same API, the other real type: what a float plugin in attngrad-f64 would be */
    k.abi = AG_MODEL_API_VERSION * 100 + (sizeof(ag_real) == 8 ? 4 : 8);
    refused(&k, sizeof(ag_real) == 8 ? "with -DAG_REAL_DOUBLE" : "without -DAG_REAL_DOUBLE", "-byte ag_real");
    k.abi = (AG_MODEL_API_VERSION + 1) * 100 + (int)sizeof(ag_real);
    char api[32];
    snprintf(api, sizeof api, "model API %d ", AG_MODEL_API_VERSION + 1);
    refused(&k, api, "rebuild it against this attngrad");
    k.abi = 100 + (sizeof(ag_real) == 8 ? 4 : 8); /* API 1, the other real type */
    refused(&k, "model API 1 with", sizeof(ag_real) == 8 ? "with -DAG_REAL_DOUBLE" : "without -DAG_REAL_DOUBLE");
    k.abi = 0; /* a kind that never set .abi */
    refused(&k, "kind 'other' has no .abi: set .abi = AG_MODEL_ABI", NULL);
    k = pair_lm_kind, k.name = "other", k.lm_feed = NULL; /* a state with nothing to feed it */
    refused(&k, "kind 'other' has 2 of lm_state_new, lm_feed and lm_state_free: give all three or none", NULL);
    k.lm_state_new = NULL;
    refused(&k, "has 1 of lm_state_new", NULL);
    k = tiny_attn_kind, k.name = "two words";
    refused(&k, "'two words' is not 1-31 letters", NULL);
    k.name = "";
    refused(&k, "'' is not", NULL);
    k.name = "a_name_longer_than_thirty_one_bytes";
    refused(&k, "is not 1-31", NULL);
    k.name = NULL;
    refused(&k, "(NULL)", NULL);
    k = tiny_attn_kind, k.name = "other", k.build = NULL;
    refused(&k, "kind 'other' has no build callback", NULL);
    k = tiny_attn_kind, k.name = "other", k.forward = NULL;
    refused(&k, "kind 'other' has no forward callback", NULL);
    k = tiny_attn_kind, k.name = "other", k.tasks = 0;
    refused(&k, "kind 'other' lists no task", NULL);
    k = tiny_attn_kind, k.name = "other", k.flag_names = "fast,strict";
    refused(&k, "flag_names \"fast,strict\": a name of a built-in model's flag", NULL);
    k.flag_names = "fast,slow,fast";
    refused(&k, "a name given twice", NULL);
    const char *malformed[] = {"Fast", "fast,", ",fast", "", "fa st", "a,,b"};
    for (int i = 0; i < 6; i++) {
        k.flag_names = malformed[i];
        refused(&k, "names are lower-case letters, digits and '_', separated by ','", malformed[i]);
    }
    k.flag_names = "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q";
    refused(&k, "more than 16 names", NULL);
    CHECK(ag_model_find("other") == NULL, "a refused kind is not registered");

    /* a full registry says so */
    static ag_model_kind many[AG_MODEL_MAX_KINDS];
    static char names[AG_MODEL_MAX_KINDS][16];
    int added = 0;
    ag_status st = AG_OK;
    for (int i = 0; i < AG_MODEL_MAX_KINDS && st == AG_OK; i++) {
        snprintf(names[i], sizeof names[i], "filler%d", i);
        many[i] = (ag_model_kind){.abi = AG_MODEL_ABI, .name = names[i], .build = tiny_attn_build,
                                  .forward = no_forward, .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY)};
        if ((st = ag_model_register(&many[i])) == AG_OK) added++;
    }
    CHECK(st == AG_ERR_ARG && strstr(ag_errmsg(), "the registry is full (64 kinds)"), "%s", ag_errmsg());
    CHECK(added == AG_MODEL_MAX_KINDS - builtin - 1, "%d added", added);
    /* unknown names list what is registered: the fillers too */
    ag_train_opts o = ag_train_opts_default();
    char last_filler[16];
    snprintf(last_filler, sizeof last_filler, "filler%d;", added - 1); /* the last, whole */
    CHECK(ag_train_set(&o, "model", "nope", err, sizeof err) && strstr(err, "tiny_attn") && strstr(err, last_filler) &&
              strstr(err, "--plugin"), "%s", err);

    /* plugins that cannot be loaded: dlerror's text, and the file named */
    CHECK(ag_model_load_plugin("/nonexistent/x.so") == AG_ERR_IO && strstr(ag_errmsg(), "plugin /nonexistent/x.so") &&
              strstr(ag_errmsg(), "No such file"), "%s", ag_errmsg());
    CHECK(ag_model_load_plugin("x.so") == AG_ERR_IO && strstr(ag_errmsg(), "./x.so"), "%s", ag_errmsg());
}

/* ---- every workflow ---- */

static ag_train_opts small_run(const char *name) {
    ag_train_opts o = ag_train_opts_default();
    char out[512];
    snprintf(out, sizeof out, "%s/%s", tmp, name);
    set(&o, "model", "tiny_attn");
    set(&o, "out", out);
    set(&o, "synth-n", "1600"); /* enough to learn: 59% dev accuracy after 5 epochs, in 0.4 s */
    set(&o, "dim", "16");
    set(&o, "epochs", "4");
    set(&o, "progress", "none");
    set(&o, "quiet", NULL);
    return o;
}

static bool exists(const char *dir, const char *file) {
    char path[AG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

/* A kind's own --flags: set by name, refused for another kind and the
 * other way round, named in messages. */
/* A kind whose build puts a trainable parameter in a list of its own: the
 * model's optimizer, gradient check and checkpoints would never see it, so
 * ag_model_init refuses the model, naming it. */
static ag_params stray_list;
static ag_status stray_build(ag_model *m) {
    ag_status st = tiny_attn_build(m);
    ag_param(&stray_list, "gate", 2, (int[]){4, 3}); /* meant: ag_param(&m->params, ...) */
    return st;
}

static void test_stray_param(void) {
    ag_model_kind k = tiny_attn_kind;
    k.name = "stray";
    k.build = stray_build;
    ag_model m;
    ag_model_config c = ag_model_tiny(&tiny_attn_kind);
    ag_status st = ag_model_init(&m, &k, &c);
    CHECK(st == AG_ERR_ARG && strstr(ag_errmsg(), "model stray: its build made 1 parameter outside the model's list "
                                                  "(the first: 'gate' [4,3]): no optimizer, gradient check or "
                                                  "checkpoint would ever see it"),
          "%d: %s", (int)st, ag_errmsg());
    ag_params_free(&stray_list);
    CHECK(ag_model_init(&m, &tiny_attn_kind, &c) == AG_OK, "the watch ends with the build: %s", ag_errmsg());
    ag_model_free(&m);
    ag_params other = {0}; /* outside a model's build, any list is the caller's business */
    ag_param(&other, "w", 1, (int[]){2});
    ag_params_free(&other);
}

static void test_flags(void) {
    ag_train_opts o = ag_train_opts_default();
    ag_model_config c;
    set(&o, "model", "tiny_attn");
    set(&o, "flags", "no_pos");
    CHECK(ag_train_resolve(&o, &c, err, sizeof err) == 0 && c.flags == NO_POS, "%s flags %#x", err, c.flags);
    char buf[64];
    CHECK(!strcmp(ag_model_flags_str(&tiny_attn_kind, c.flags, buf, sizeof buf), "no_pos"), "%s", buf);
    set(&o, "model", "mtsa");
    CHECK(ag_train_resolve(&o, &c, err, sizeof err) && strstr(err, "model mtsa does not read flag no_pos (its flags: exp_score)"),
          "%s", err);
    o = ag_train_opts_default();
    set(&o, "model", "tiny_attn");
    set(&o, "flags", "no_pos,strict");
    CHECK(ag_train_resolve(&o, &c, err, sizeof err) && strstr(err, "model tiny_attn does not read flag strict (its flags: no_pos,faint)"),
          "%s", err);
    CHECK(ag_dump_step(&o, "/nonexistent/x", err, sizeof err) && strstr(err, "does not read flag strict"), "%s", err);
    CHECK(ag_train_set(&o, "flags", "no_pos,bogus", err, sizeof err) && strstr(err, "unknown flag 'bogus'"), "%s", err);
    /* ag_model_init refuses bits the kind does not read, its own named */
    ag_model m;
    c = ag_model_tiny(&tiny_attn_kind);
    c.flags = NO_POS | AG_FLAG_STRICT;
    CHECK(ag_model_init(&m, &tiny_attn_kind, &c) == AG_ERR_ARG && strstr(ag_errmsg(), "flag strict (its flags: no_pos,faint)"),
          "%s", ag_errmsg());
}

static void test_workflows(void) {
    /* train: learns the generated order task, writes its checkpoints and metrics */
    ag_train_opts o = small_run("run");
    ag_train_result r;
    CHECK(ag_train(&o, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.epochs == 4 && r.steps > 0 && r.folds == 1, "%d epochs, %lld steps", r.epochs, (long long)r.steps);
    CHECK(r.last_loss < r.first_loss, "loss %g -> %g", r.first_loss, r.last_loss);
    CHECK(r.dev.accuracy > 0.4, "dev accuracy %g", r.dev.accuracy); /* 4 classes: chance is 0.25 */
    CHECK(exists(r.out, "best.safetensors") && exists(r.out, "last.safetensors") && exists(r.out, "vocab.txt"));

    /* resume: one more epoch from last.safetensors, the options from the run */
    ag_train_opts again;
    CHECK(ag_run_config(r.out, &again, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(again.model, "tiny_attn") && again.dim == 16, "%s d=%d", again.model, again.dim);
    set(&again, "epochs", "5");
    set(&again, "out", r.out);
    set(&again, "progress", "none"); /* not part of a run's saved options */
    set(&again, "quiet", NULL);
    set(&again, "resume", NULL);
    ag_train_result r2;
    CHECK(ag_train(&again, &r2, err, sizeof err) == 0, "%s", err);
    CHECK(r2.epochs == 5 && r2.steps > r.steps, "%d epochs, %lld steps", r2.epochs, (long long)r2.steps);

    /* eval: the best checkpoint gives the dev accuracy the run reported */
    char ckpt[AG_PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/best.safetensors", r.out);
    ag_train_opts lo;
    ag_model m;
    ag_vocab *vocab;
    CHECK(ag_load_run(ckpt, NULL, &lo, &m, &vocab, err, sizeof err) == 0, "%s", err);
    if (err[0] && !m.kind) return;
    CHECK(m.kind == &tiny_attn_kind);
    ag_run_data d;
    ag_batch b = {0};
    ag_metrics x = {0};
    CHECK(ag_run_data_open(&lo, 0, NULL, &d, err, sizeof err) == 0, "%s", err);
    ag_batch_opts bo = ag_run_batch_opts(&m, &lo, d.max_width);
    CHECK(ag_batch_alloc(&b, d.ds[AG_SPLIT_DEV], lo.batch, &bo, err, sizeof err) == 0, "%s", err);
    CHECK(ag_evaluate(&m, d.ds[AG_SPLIT_DEV], d.idx[AG_SPLIT_DEV], d.n[AG_SPLIT_DEV], &b, &x, err, sizeof err) == 0,
          "%s", err);
    CHECK_NEAR(x.accuracy, r2.dev.accuracy, 1e-12, 0); /* best.safetensors: the best over both parts of the run */
    ag_batch_free(&b);
    ag_run_data_free(&d);

    /* predict: a label and the probabilities of a line */
    char line[] = "w1 A w2 B w3\n", out[512] = "";
    FILE *f = tmpfile();
    CHECK(ag_predict_line(&m, vocab, &lo, line, f, err, sizeof err) == 0, "%s", err);
    rewind(f);
    CHECK(fgets(out, sizeof out, f) && strchr(out, '\t'), "predict printed '%s'", out);
    fclose(f);

    /* heatmap: the map the forward captured, as an SVG */
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s/maps", tmp);
    f = tmpfile();
    CHECK(ag_sentence_heatmaps(&m, vocab, &lo, "w1 A w2 B", NULL, prefix, f, err, sizeof err) == 0, "%s", err);
    CHECK(exists(tmp, "maps-self.svg"), "no %s-self.svg", prefix);
    fclose(f);
    ag_vocab_free(vocab);
    ag_model_free(&m);

    /* dump-step: one forward/backward at the tiny sizes, every parameter and its gradient */
    ag_train_opts dump = ag_train_opts_default();
    set(&dump, "model", "tiny_attn");
    char path[1024];
    snprintf(path, sizeof path, "%s/step.safetensors", tmp);
    CHECK(ag_dump_step(&dump, path, err, sizeof err) == 0, "%s", err);
    ag_st_file st;
    CHECK(ag_st_read(path, &st) == AG_OK, "%s", ag_errmsg());
    CHECK(ag_st_get(&st, "grad.attn.wq") && ag_st_get(&st, "ln.bias") && ag_st_get(&st, "loss"));
    ag_st_close(&st);

    /* gradcheck: f64, every parameter; the float build refuses with the way out */
    f = tmpfile();
    int rc = ag_model_gradcheck(&dump, f, err, sizeof err);
    rewind(f);
    char text[8192] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    if (sizeof(ag_real) == sizeof(double)) {
        CHECK(rc == 1, "gradcheck failed:\n%s", text);
        CHECK(strstr(text, "of 8 parameters") && strstr(text, "out.b") && strstr(text, "true ") &&
                  strstr(text, ": PASS") && !strstr(text, "weak in the last pass"), "%s", text);
        /* attention scaled by 1e-7: its three projections stay weak drawn wide, which the check says, and
         * --strict makes a failure */
        set(&dump, "flags", "faint");
        for (int strict = 0; strict <= 1; strict++) {
            dump.strict = strict;
            f = tmpfile();
            rc = ag_model_gradcheck(&dump, f, err, sizeof err);
            rewind(f);
            n = fread(text, 1, sizeof text - 1, f);
            text[n] = 0;
            fclose(f);
            CHECK(rc == !strict && strstr(text, "3 of 8 parameters weak in the last pass") &&
                      (strict ? strstr(text, "(--strict: a failure)") && strstr(text, ": FAIL")
                              : strstr(text, ": PASS") != NULL),
                  "gradcheck of tiny_attn/faint, strict %d: rc %d\n%s", strict, rc, text);
        }
    } else {
        CHECK(rc < 0 && strstr(err, "attngrad-f64"), "%d %s", rc, err);
    }
}

/* Kinds built against model API 1, 2, 3 or 6: their structs end earlier
 * (API 1 at flag_names, 2 at lm_state_free, 3 at hparams; what follows in
 * memory is not theirs: bytes of 0xA5, where a read past the end finds a
 * wild pointer and ASan a read out of bounds), their build and forward
 * read ag_model's fields where API 3 and 4 no longer keep them, and an API
 * 6 kind keeps layers (ag_mha, ag_encoder_config) of another size.  Each
 * is refused by name, to be rebuilt. */
static void test_older_kinds_refused(void) {
    static const struct {
        int version;
        size_t size;
        const char *name;
    } older[] = {
        {1, offsetof(ag_model_kind, lm_state_new), "pair_lm_v1"},
        {2, offsetof(ag_model_kind, hparams), "tiny_attn_v2"},
        {3, sizeof(ag_model_kind), "tiny_attn_v3"},
        {6, sizeof(ag_model_kind), "tiny_attn_v6"}, /* its layers the size they were before API 7 */
    };
    static union {
        ag_model_kind whole; /* for the alignment */
        unsigned char bytes[sizeof(ag_model_kind)];
    } v;
    for (size_t i = 0; i < sizeof older / sizeof *older; i++) {
        memset(v.bytes, 0xA5, sizeof v.bytes);
        memcpy(v.bytes, older[i].version == 1 ? (const void *)&pair_lm_kind : (const void *)&tiny_attn_kind,
               older[i].size);
        v.whole.abi = older[i].version * 100 + (int)sizeof(ag_real), v.whole.name = older[i].name;
        char want[64];
        snprintf(want, sizeof want, "kind '%s' was built against model API %d", older[i].name, older[i].version);
        CHECK(ag_model_register(&v.whole) == AG_ERR_ARG && strstr(ag_errmsg(), want) &&
                  strstr(ag_errmsg(), "rebuild it against this attngrad"),
              "an API %d kind: %s", older[i].version, ag_errmsg());
        CHECK(!ag_model_find(older[i].name), "a refused API %d kind is not registered", older[i].version);
    }
}

static void hparams_defaults(ag_model_config *c) {
    tiny_attn_defaults(c);
    c->hparams = "alpha=3";
}

/* A kind's settings: read as given or as its default, refused when not its
 * own, malformed, twice or not a number; a malformed list is refused when
 * the kind registers. */
static void test_hparams(void) {
    static ag_model_kind k; /* registered: it must outlive every use */
    k = tiny_attn_kind;
    k.name = "tiny_hparams", k.hparams = "alpha,beta_2";
    CHECK(ag_model_register(&k) == AG_OK, "%s", ag_errmsg());
    ag_model m;
    ag_model_config c = ag_model_defaults(&k);
    c.hparams = "beta_2=0.25";
    CHECK(ag_model_init(&m, &k, &c) == AG_OK, "%s", ag_errmsg());
    CHECK(ag_model_hparam(&m, "beta_2", 9) == 0.25 && ag_model_hparam(&m, "alpha", 7) == 7);
    EXPECT_FATAL(ag_model_hparam(&m, "gamma", 0), "ag_model_hparam", "no setting 'gamma'");
    ag_model_free(&m);
    static const struct {
        const char *given, *says;
    } bad[] = {{"gamma=1", "no setting 'gamma' (its --hparams: alpha,beta_2)"}, {"alpha", "want name=value"},
               {"alpha=1,alpha=2", "sets 'alpha' twice"}, {"alpha=1e400", "not a finite number"},
               {"alpha=", "not a finite number"}, {"alpha=2x", "not a finite number"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        c.hparams = bad[i].given;
        CHECK(ag_model_init(&m, &k, &c) == AG_ERR_ARG && strstr(ag_errmsg(), bad[i].says), "%s: %s", bad[i].given,
              ag_errmsg());
    }
    /* a kind's defaults may set its settings: kept where --hparams is not
     * given (the trainer once cleared them), replaced where it is */
    static ag_model_kind d;
    d = k;
    d.name = "default_hparams", d.defaults = hparams_defaults;
    CHECK(ag_model_register(&d) == AG_OK, "%s", ag_errmsg());
    ag_train_opts o = ag_train_opts_default();
    snprintf(o.model, sizeof o.model, "%s", d.name);
    ag_model_config r;
    char err[256] = "";
    CHECK(ag_train_resolve(&o, &r, err, sizeof err) == 0 && r.hparams && !strcmp(r.hparams, "alpha=3"),
          "the defaults' hparams after resolve: %s (%s)", r.hparams ? r.hparams : "NULL", err);
    snprintf(o.hparams, sizeof o.hparams, "beta_2=0.5");
    CHECK(ag_train_resolve(&o, &r, err, sizeof err) == 0 && r.hparams && !strcmp(r.hparams, "beta_2=0.5"),
          "--hparams replaces the defaults' list: %s (%s)", r.hparams ? r.hparams : "NULL", err);
    ag_model_kind w = tiny_attn_kind;
    w.name = "bad_hparams", w.hparams = "Alpha";
    refused(&w, "hparams \"Alpha\": names are lower-case", NULL);
    w.hparams = "a,a";
    refused(&w, "a name given twice", NULL);
}

/* Label smoothing and a kind's own loss: one that builds on the training
 * objective (ag_model_objective_of) smooths; one that takes the plain
 * cross-entropy is refused by name in training, where the smoothing would
 * be dropped silently, and not in evaluation. */
static ag_tensor *objective_loss(ag_model *m, const ag_batch *b, bool training) {
    ag_tensor *logits = tiny_attn_forward(m, b, training);
    return logits ? ag_model_objective_of(m, b, logits, training) : NULL;
}
static ag_tensor *plain_loss(ag_model *m, const ag_batch *b, bool training) {
    ag_tensor *logits = tiny_attn_forward(m, b, training);
    return logits ? ag_model_loss_of(m, b, logits) : NULL;
}
static void test_own_loss_smoothing(void) {
    ag_tensor *(*losses[2])(ag_model *, const ag_batch *, bool) = {objective_loss, plain_loss};
    for (int i = 0; i < 2; i++) {
        ag_model_kind k = tiny_attn_kind;
        k.loss = losses[i];
        ag_model_config cfg = ag_model_tiny(&k);
        cfg.label_smoothing = 0.1;
        ag_model m;
        CHECK(ag_model_init(&m, &k, &cfg) == AG_OK, "%s", ag_errmsg());
        ag_batch b;
        ag_tiny_batch(&m, &b, 3);
        ag_tensor *trained = ag_model_loss(&m, &b, true), *evaluated = ag_model_loss(&m, &b, false);
        if (i == 0) CHECK(trained && evaluated, "a loss on ag_model_objective_of, smoothing 0.1: %s", ag_errmsg());
        else
            CHECK(!trained && evaluated && strstr(ag_errmsg(), "label smoothing 0.1: the loss of model tiny_attn made "
                                                               "no smoothed cross-entropy"),
                  "a loss that ignores smoothing 0.1: %s", trained ? "taken" : ag_errmsg());
        ag_step_end();
        ag_model_batch_free(&b);
        ag_model_free(&m);
    }
}

/* generate's words, drawn with rng seeded `seed`, into got */
static void generate(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *prompt, uint64_t seed,
                     char *got, size_t n) {
    char line[128];
    snprintf(line, sizeof line, "%s", prompt);
    ag_rng rng;
    ag_rng_seed(&rng, seed);
    FILE *f = tmpfile();
    got[0] = 0;
    CHECK(f && ag_generate_line(m, vocab, o, line, &rng, f, err, sizeof err) == 0, "%s", err);
    if (!f) return;
    rewind(f);
    if (!fgets(got, (int)n, f)) got[0] = 0;
    got[strcspn(got, "\n")] = 0;
    fclose(f);
}

static int count_words(const char *text) {
    int n = 0;
    for (const char *w = text; *w; w += strcspn(w, " "), w += *w == ' ') n++;
    return n;
}

/* An LM with lm_* draws, from its kept state, the words a forward per word
 * draws (the same kind without them), reading each word once; a state that
 * cannot be made falls back to forward. */
static void test_generate_from_state(void) {
    const char *words[] = {"<pad>", "<unk>", "<eos>", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};
    ag_vocab *vocab;
    CHECK(ag_vocab_from_list(words, 10, &vocab, err, sizeof err) == 0, "%s", err);
    CHECK(ag_model_register(&pair_lm_kind) == AG_OK, "%s", ag_errmsg());
    static ag_model_kind by_forward;
    by_forward = pair_lm_kind, by_forward.name = "pair_lm_forward";
    by_forward.lm_state_new = NULL, by_forward.lm_feed = NULL, by_forward.lm_state_free = NULL;
    CHECK(ag_model_register(&by_forward) == AG_OK, "%s", ag_errmsg());
    ag_train_opts o = ag_train_opts_default();
    o.words = 12, o.temperature = 1;
    ag_model_config c = ag_model_defaults(&pair_lm_kind);
    c.vocab = 10, c.dim = 6, c.seed = 3, c.task = AG_TASK_LM;
    ag_model a, b;
    CHECK(ag_model_init(&a, &pair_lm_kind, &c) == AG_OK && ag_model_init(&b, &by_forward, &c) == AG_OK, "%s",
          ag_errmsg());
    const char *prompts[] = {"w1 w2 w3", "w7", "w4 w4 w5 w1 w2"};
    for (int i = 0; i < 3; i++) {
        char kept[512], forward[512];
        int before = words_fed;
        generate(&a, vocab, &o, prompts[i], 11 + (uint64_t)i, kept, sizeof kept);
        generate(&b, vocab, &o, prompts[i], 11 + (uint64_t)i, forward, sizeof forward);
        CHECK(kept[0] && !strcmp(kept, forward), "'%s': from the state '%s', by forward '%s'", prompts[i], kept, forward);
        /* the prompt, then each word drawn, but the 12th, which ends it
         * unread (a draw of <eos> ends it after the words before are read) */
        int prompt_words = count_words(prompts[i]), drawn = count_words(kept);
        CHECK(words_fed - before == prompt_words + drawn - (drawn == o.words),
              "'%s': %d words fed for %d prompt words and %d drawn", prompts[i], words_fed - before, prompt_words,
              drawn);
    }
    static ag_model_kind flat;
    flat = pair_lm_kind, flat.name = "pair_lm_flat", flat.lm_feed = pair_lm_feed_2d;
    CHECK(ag_model_register(&flat) == AG_OK, "%s", ag_errmsg());
    ag_model f;
    CHECK(ag_model_init(&f, &flat, &c) == AG_OK, "%s", ag_errmsg());
    char line[] = "w1 w2";
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    FILE *out = tmpfile();
    CHECK(out && ag_generate_line(&f, vocab, &o, line, &rng, out, err, sizeof err) == AG_ERR_ARG &&
              strstr(err, "model pair_lm_flat's lm_feed gave logits [1,10] after 2 words, not [1,1,10]"),
          "%s", err);
    if (out) fclose(out);
    ag_model_free(&f);
    test_older_kinds_refused();
    ag_model_free(&a);
    ag_model_free(&b);
    ag_vocab_free(vocab);
}

/* The last lr of a run's steps.csv (step,epoch,lr,...), and its rows */
static double last_lr(const char *dir, int *rows) {
    char path[AG_PATH_MAX + 32], line[512];
    snprintf(path, sizeof path, "%s/steps.csv", dir);
    FILE *f = fopen(path, "r");
    double lr = NAN;
    *rows = 0;
    if (!f) return lr;
    while (fgets(line, sizeof line, f))
        if (line[0] >= '0' && line[0] <= '9') {
            char *p = strchr(strchr(line, ',') + 1, ',');
            lr = strtod(p + 1, NULL), (*rows)++;
        }
    fclose(f);
    return lr;
}

/* cfg.max_len (model API 4): the run's --max-len reaches the kind, is
 * saved with the run, and generation keeps to the last max_len words. */
static void test_max_len(void) {
    CHECK(ag_model_register(&pos_lm_kind) == AG_OK, "%s", ag_errmsg());
    static ag_model_kind by_forward;
    by_forward = pos_lm_kind, by_forward.name = "pos_lm_forward";
    by_forward.lm_state_new = NULL, by_forward.lm_feed = NULL, by_forward.lm_state_free = NULL;
    CHECK(ag_model_register(&by_forward) == AG_OK, "%s", ag_errmsg());

    const char *words[] = {"<pad>", "<unk>", "<eos>", "w1", "w2", "w3", "w4", "w5", "w6", "w7"};
    ag_vocab *vocab;
    CHECK(ag_vocab_from_list(words, 10, &vocab, err, sizeof err) == 0, "%s", err);
    ag_model_config c = ag_model_defaults(&pos_lm_kind);
    c.vocab = 10, c.seed = 3;
    ag_model a, b;
    CHECK(ag_model_init(&a, &pos_lm_kind, &c) == AG_ERR_ARG && strstr(ag_errmsg(), "needs --max-len"), "%s",
          ag_errmsg());
    c.max_len = 4;
    CHECK(ag_model_init(&a, &pos_lm_kind, &c) == AG_OK && ag_model_init(&b, &by_forward, &c) == AG_OK, "%s",
          ag_errmsg());
    ag_train_opts o = ag_train_opts_default();
    o.words = 12, o.temperature = 1, o.max_len = 4;
    /* a prompt of 7 words, 12 drawn: every forward and feed within the
     * table's 4 positions, the same words either way, and the prompt's
     * first 3 words never read */
    char kept[512], forward[512], last4[512];
    generate(&a, vocab, &o, "w1 w2 w3 w4 w5 w6 w7", 5, kept, sizeof kept);
    generate(&b, vocab, &o, "w1 w2 w3 w4 w5 w6 w7", 5, forward, sizeof forward);
    generate(&b, vocab, &o, "w4 w5 w6 w7", 5, last4, sizeof last4);
    CHECK(kept[0] && !strcmp(kept, forward) && !strcmp(kept, last4), "from the state '%s', by forward '%s', from "
          "the last 4 words '%s'", kept, forward, last4);
    ag_model_free(&a);
    ag_model_free(&b);
    ag_vocab_free(vocab);

    /* train sets it from --max-len and saves it: the checkpoint builds the
     * same table; the kind's AdamW survives the generated LM task (poslm's
     * SGD does not), and its warm-up and decay run to the run's last step */
    ag_train_opts t = ag_train_opts_default(), back;
    char out[512];
    snprintf(out, sizeof out, "%s/pos_lm", tmp);
    set(&t, "model", "pos_lm");
    set(&t, "out", out);
    set(&t, "synth-n", "200");
    set(&t, "max-len", "6");
    set(&t, "epochs", "2");
    set(&t, "log-steps", "1");
    set(&t, "progress", "none");
    set(&t, "quiet", NULL);
    ag_train_result r;
    CHECK(ag_train(&t, &r, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(t.optim, "adamw:lr=3e-3,weight_decay=0.01") && t.clip == 2, "the generated LM task changed "
          "pos_lm's recipe: %s, clip %g", t.optim, t.clip);
    CHECK(!strcmp(t.lr_steps, "linear:warmup=2,total=run"), "lr_steps '%s'", t.lr_steps);
    int rows;
    double lr = last_lr(out, &rows);
    CHECK(rows == r.steps && rows > 2 && lr == 0, "%d rows for %lld steps, the last at lr %g (total=run: 0)", rows,
          (long long)r.steps, lr);
    ag_model m;
    char ckpt[600];
    snprintf(ckpt, sizeof ckpt, "%s/last.safetensors", out);
    CHECK(ag_load_run(ckpt, NULL, &back, &m, &vocab, err, sizeof err) == 0, "%s", err);
    CHECK(m.cfg.max_len == 6 && back.max_len == 6 && !strcmp(back.lr_steps, "linear:warmup=2,total=run"),
          "loaded: cfg.max_len %d, lr_steps '%s'", m.cfg.max_len, back.lr_steps);
    ag_model_free(&m);
    ag_vocab_free(vocab);

    /* dump-step and gradcheck size the table to their batch: the tiny one, or --len's */
    ag_train_opts d = ag_train_opts_default();
    set(&d, "model", "pos_lm");
    ag_batch db;
    CHECK(ag_dump_setup(&d, &m, &db, err, sizeof err) == 0 && m.cfg.max_len == 5, "%s (max_len %d)", err,
          m.cfg.max_len);
    ag_model_batch_free(&db);
    ag_model_free(&m);
    set(&d, "len", "7");
    set(&d, "batch", "2");
    CHECK(ag_dump_setup(&d, &m, &db, err, sizeof err) == 0 && m.cfg.max_len == 7 && db.width == 7, "%s", err);
    ag_model_batch_free(&db);
    ag_model_free(&m);
    if (sizeof(ag_real) == sizeof(double)) {
        FILE *f = tmpfile();
        CHECK(f && ag_model_gradcheck(&d, f, err, sizeof err) == 1, "pos_lm gradcheck: %s", err);
        if (f) fclose(f);
    }

    /* a kind's malformed default is refused naming the kind, when a run is resolved */
    ag_model_config cfg;
    static ag_model_kind bad_steps;
    bad_steps = pos_lm_kind, bad_steps.name = "pos_lm_bad_steps", bad_steps.defaults = pos_lm_bad_defaults;
    CHECK(ag_model_register(&bad_steps) == AG_OK, "%s", ag_errmsg());
    ag_train_opts q = ag_train_opts_default();
    set(&q, "model", "pos_lm_bad_steps");
    CHECK(ag_train_resolve(&q, &cfg, err, sizeof err) == AG_ERR_ARG &&
              strstr(err, "model pos_lm_bad_steps's default per-step schedule 'cosine:warmup=5' (its defaults' "
                     "lr_steps): schedule 'cosine': total 0 must be given"), "%s", err);

    /* --lr-steps given wins over the kind's; poslm's SGD is replaced */
    q = ag_train_opts_default();
    set(&q, "model", "pos_lm");
    set(&q, "lr-steps", "constant");
    CHECK(ag_train_resolve(&q, &cfg, err, sizeof err) == 0 && !strcmp(q.lr_steps, "constant") &&
              !strcmp(cfg.lr_steps, "constant"), "%s / %s", err, q.lr_steps);
    q = ag_train_opts_default();
    set(&q, "model", "poslm");
    CHECK(ag_train_resolve(&q, &cfg, err, sizeof err) == 0 && !strcmp(q.optim, "adam:lr=3e-3") && q.clip == 0,
          "poslm on the generated task: %s, clip %g", q.optim, q.clip);
}

int main(void) {
    test_stray_param();
    snprintf(tmp, sizeof tmp, "%s/test_custom_model.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_generate_from_state(); /* first: test_register fills the registry */
    test_max_len();
    test_hparams();
    test_own_loss_smoothing();
    test_register();
    test_flags();
    test_workflows();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
    ag_shutdown();
    return check_summary(sizeof(ag_real) == sizeof(double) ? "custom_model_f64" : "custom_model_f32");
}

#endif
