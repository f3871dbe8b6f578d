/* dump.c - a model at small sizes, for checking it: one forward/backward
 * written to safetensors (to compare with another framework tensor by
 * tensor), and the f64 gradient check of every parameter. */
#include "attngrad/train.h"
#include "internal.h"
#include "../graph/internal.h" /* ag__malloc: out of memory ends with a message, not a crash */

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* rows x width of random sentences: the first row full, the others of random
 * length; tokens, labels, scores, targets, heads (a chain) and bigrams as the
 * tiny batch has them (ag_model_batch_free frees it).  A pair's second
 * sentence is narrower (width - 2, at least 1) with lengths of its own: a
 * model that read it at the first one's width or lengths fails the check. */
static void random_batch(const ag_model *m, int B, int N, const int32_t *given, const int32_t *given_b, uint64_t seed,
                         ag_batch *b) {
    ag_rng r, rb; /* rb: the second sentence's, so the first's draws stay what they were */
    ag_rng_seed(&r, seed);
    ag_rng_seed(&rb, seed ^ 0xb5e7b5e7u);
    int Nb = N > 2 ? N - 2 : N;
    if (given_b)
        for (int i = 0, most = 1; i < B; i++) Nb = most = given_b[i] > most ? given_b[i] : most;
    ag_model_batch_alloc(m, B, Nb > N ? Nb : N, b); /* room for either sentence, the wider given */
    b->width = N;
    b->width_b = Nb; /* its arrays [B, Nb] in the [B, N] room */
    ag_rng rs; /* a generator of their own: the other arrays stay as they were before scores */
    ag_rng_seed(&rs, seed ^ 0x5c0e5);
    for (int i = 0; i < B; i++) b->scores[i] = (float)(1 + 4 * ag_rng_uniform(&rs));
    int V = m->cfg.vocab;
    for (int i = 0; i < B; i++) {
        int n = given ? given[i] : i == 0 ? N : 1 + (int)(ag_rng_next(&r) % (uint64_t)N);
        int nb = given_b ? given_b[i] : i == 0 ? Nb : 1 + (int)(ag_rng_next(&rb) % (uint64_t)Nb);
        b->lengths[i] = n, b->lengths_b[i] = nb;
        b->labels[i] = (int32_t)(ag_rng_next(&r) % (uint64_t)m->cfg.classes);
        for (int t = 0; t < N; t++) {
            size_t k = (size_t)i * N + t;
            bool valid = t < n;
            b->tokens[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            if (valid) (void)ag_rng_next(&r); /* where the second sentence's word was drawn until 2026-12-06 */
            b->targets[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            b->heads[k] = !valid ? AG_HEAD_PAD : t + 1 < n ? t + 1 : AG_HEAD_ROOT;
        }
        for (int t = 0; t < Nb; t++) {
            size_t k = (size_t)i * Nb + t;
            bool valid = t < nb;
            b->tokens_b[k] = valid ? 2 + (int32_t)(ag_rng_next(&rb) % (uint64_t)(V - 2)) : 0;
            b->heads_b[k] = !valid ? AG_HEAD_PAD : t + 1 < nb ? t + 1 : AG_HEAD_ROOT;
        }
        for (int t = 0; t + 1 < n; t++) {
            size_t k = (size_t)i * N + t;
            b->bigrams[k] = ag_bigram_id(b->tokens[k], b->tokens[k + 1], m->cfg.n_bigram);
        }
        for (int t = 0; t + 1 < nb; t++) {
            size_t k = (size_t)i * Nb + t;
            b->bigrams_b[k] = ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], m->cfg.n_bigram);
        }
    }
}

/* The batch of --parses FILE: its first sentences (up to --batch, else 4),
 * one a row (a pair's second sentence: the same), with their lengths and
 * dependency heads.  Words get ids as a vocabulary of the file would give
 * them (the most frequent first), wrapped into --vocab: distinct words stay
 * distinct while the vocabulary has room, so no two positions tie by
 * chance (a tie puts max-pooling on its kink, where no finite difference
 * agrees).  Labels from "# label = N" where they fit. */
static int parsed_batch(const ag_model *m, const char *path, int rows, uint64_t seed, ag_batch *b, char *err,
                        size_t errlen) {
    ag_dataset ds;
    ag_load_opts lo = ag_load_opts_default();
    ag_vocab *words = NULL;
    int rc = ag_dataset_load(path, AG_FORMAT_CONLLU, &lo, NULL, &ds, err, errlen);
    if (!rc) rc = ag_vocab_build(&ds, NULL, 0, NULL, &words, err, errlen);
    if (!rc) rc = ag_dataset_encode(&ds, words, err, errlen);
    ag_vocab_free(words);
    if (rc) {
        ag_dataset_free(&ds);
        return rc;
    }
    int B = (int)(ds.n < rows ? ds.n : rows), N = 1, V = m->cfg.vocab, fixed = m->cfg.fixed_len;
    for (int i = 0; i < B; i++) N = ds.ex[i].len > N ? ds.ex[i].len : N;
    if (fixed > 0) N = fixed; /* dual-axial's rows are always this wide: longer sentences cut */
    ag_rng r;
    ag_rng_seed(&r, seed);
    ag_model_batch_alloc(m, B, N, b);
    for (int i = 0; i < B; i++) {
        const ag_example *e = &ds.ex[i];
        int n = e->len < N ? e->len : N;
        b->lengths[i] = b->lengths_b[i] = n;
        b->scores[i] = (float)(1 + 4 * ag_rng_uniform(&r));
        b->labels[i] = e->label >= 0 && e->label < m->cfg.classes ? e->label
                                                                  : (int32_t)(ag_rng_next(&r) % (uint64_t)m->cfg.classes);
        for (int t = 0; t < N; t++) {
            size_t k = (size_t)i * N + t;
            b->tokens[k] = b->tokens_b[k] = t < n ? 2 + (e->tokens[t] - 2) % (V - 2) : 0;
            b->targets[k] = t + 1 < n ? b->tokens[k + 1] : 0;
            int32_t head = t < n ? e->heads[t] : AG_HEAD_PAD;
            b->heads[k] = b->heads_b[k] = head >= n ? AG_HEAD_ROOT : head; /* a head cut off: a root */
        }
        for (int t = 0; t + 1 < n; t++) {
            size_t k = (size_t)i * N + t;
            b->bigrams[k] = b->bigrams_b[k] = ag_bigram_id(b->tokens[k], b->tokens[k + 1], m->cfg.n_bigram);
        }
    }
    ag_dataset_free(&ds);
    return 0;
}

/* "5,1,3" (checked by the option) into len[64]; returns the count. */
static int parse_lengths(const char *s, int32_t *len) {
    int n = 0;
    for (char *end; *s && n < 64; s = *end ? end + 1 : end) len[n++] = (int32_t)strtol(s, &end, 10);
    return n;
}

int ag_dump_setup(const ag_train_opts *o, ag_model *m, ag_batch *b, char *err, size_t errlen) {
    const ag_model_kind *kind = ag_model_find(o->model);
    if (!kind) return ag__train_fail(err, errlen, AG_ERR_ARG, "unknown model '%s'", o->model);
    /* the tiny config, with whatever the options set on top */
    ag_model_config cfg = ag_model_tiny(kind);
    unsigned flags;
    if (ag__train_flags(o, kind, &flags, err, errlen)) return AG_ERR_ARG; /* another kind's own switch */
    ag__train_apply(o, &cfg);
    cfg.keep = 1.0;
    /* no --max-len here: a table per position (cfg.max_len) is sized to
     * hold the check's batch, the tiny one's 5 positions or --len's (a
     * CoNLL-U file's sentences are as long as they are: no limit) */
    int widest = o->len;
    for (const char *p = o->lengths; *p; p += *p == ',') { /* --lengths: the batch is as wide as its longest */
        char *end;
        long x = strtol(p, &end, 10);
        widest = x > widest ? (int)x : widest;
        p = end;
    }
    if (cfg.max_len == 0 && !o->parses[0]) cfg.max_len = cfg.fixed_len > 0 ? cfg.fixed_len : widest > 0 ? widest : 5;
    if (!ag_model_supports(kind, cfg.task)) {
        char tasks[64];
        return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s has no head for the %s task (it does: %s)", kind->name,
                    ag_task_name(cfg.task), ag_model_tasks_str(kind, tasks, sizeof tasks));
    }
    if (cfg.vocab < 3) return ag__train_fail(err, errlen, AG_ERR_ARG, "--vocab %d: at least 3 (<pad>, <unk>, a word)", cfg.vocab);
    if (ag_model_init(m, kind, &cfg)) return ag__train_fail(err, errlen, AG_ERR_ARG, "%s", ag_errmsg());
    int rc = ag_train_use_device(o, &m->params, err, errlen);
    if (rc) { /* no GPU, or the one asked for is not there */
        ag_model_free(m);
        return rc;
    }
    if (o->parses[0] && strcmp(o->parses, "none")) {
        if ((rc = parsed_batch(m, o->parses, o->batch > 0 ? o->batch : 4, 3, b, err, errlen))) {
            ag_model_free(m);
            return rc;
        }
    } else if (o->lengths[0]) { /* rows of the lengths asked for: a one-word sentence, a pair's own */
        int32_t len[64], len_b[64];
        int B = parse_lengths(o->lengths, len), Bb = o->lengths_b[0] ? parse_lengths(o->lengths_b, len_b) : B;
        int N = o->len;
        for (int i = 0; i < B; i++) N = len[i] > N ? len[i] : N;
        if (Bb != B || (cfg.fixed_len > 0 && N != cfg.fixed_len)) {
            ag_model_free(m);
            return Bb != B ? ag__train_fail(err, errlen, AG_ERR_ARG, "--lengths-b gives %d lengths for the %d rows of "
                                            "--lengths", Bb, B)
                           : ag__train_fail(err, errlen, AG_ERR_ARG, "model %s takes sentences of %d positions, not "
                                            "--lengths up to %d", kind->name, cfg.fixed_len, N);
        }
        random_batch(m, B, N, len, o->lengths_b[0] ? len_b : NULL, 3, b);
    } else if (o->batch > 0 || o->len > 0) {
        int N = cfg.fixed_len > 0 ? cfg.fixed_len : o->len > 0 ? o->len : 5;
        random_batch(m, o->batch > 0 ? o->batch : 2, N, NULL, NULL, 3, b);
    } else {
        ag_tiny_batch(m, b, 3);
    }
    return 0;
}

/* A batch array [rows] or [rows, width] as I64. */
static int64_t *add_ints(ag_st_writer *w, const char *name, const int32_t *src, int rows, int width) {
    int64_t n = (int64_t)rows * (width ? width : 1), *dst = ag__malloc((size_t)n * sizeof *dst);
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    ag_st_add(w, name, AG_I64, width ? 2 : 1, (int64_t[]){rows, width}, dst);
    return dst;
}

int ag_dump_step(const ag_train_opts *o, const char *path, char *err, size_t errlen) {
    ag_model m;
    ag_batch b;
    int rc = ag_dump_setup(o, &m, &b, err, errlen);
    if (rc) return rc;
    ag_params_zero_grad(&m.params);
    ag_tensor *loss = ag_model_loss(&m, &b, false);
    if (!loss) {
        rc = ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s refused the batch: %s", o->model, ag_errmsg());
    } else {
        ag_backward(loss);
        ag_st_writer w = {0};
        char name[256];
        for (int i = 0; i < m.params.count; i++) {
            ag_tensor *p = m.params.items[i];
            ag_st_add_tensor(&w, p->name, p);
            snprintf(name, sizeof name, "grad.%s", p->name);
            ag_tensor g = *p;
            g.data = p->grad;
            ag_st_add_tensor(&w, name, &g);
        }
        ag_st_add_tensor(&w, "loss", &(ag_tensor){.ndim = 0, .size = 1, .data = loss->data, .device = loss->device});
        int B = b.rows, N = b.width;
        int64_t *bufs[10] = {0};
        int nb = 0;
        bool rel = m.cfg.task == AG_TASK_RELATEDNESS, pair = m.cfg.task == AG_TASK_PAIR || rel,
             lm = m.cfg.task == AG_TASK_LM;
        bufs[nb++] = add_ints(&w, "batch.tokens", b.tokens, B, N);
        bufs[nb++] = add_ints(&w, "batch.lengths", b.lengths, B, 0);
        if (rel) ag_st_add(&w, "batch.scores", AG_F32, 1, (int64_t[]){B}, b.scores); /* the target is their function */
        else bufs[nb++] = lm ? add_ints(&w, "batch.targets", b.targets, B, N) : add_ints(&w, "batch.labels", b.labels, B, 0);
        if (b.opts.n_bigram > 1) bufs[nb++] = add_ints(&w, "batch.bigrams", b.bigrams, B, N);
        if (b.opts.heads) bufs[nb++] = add_ints(&w, "batch.heads", b.heads, B, N);
        if (pair) {
            bufs[nb++] = add_ints(&w, "batch.tokens_b", b.tokens_b, B, b.width_b);
            bufs[nb++] = add_ints(&w, "batch.lengths_b", b.lengths_b, B, 0);
            if (b.opts.heads) bufs[nb++] = add_ints(&w, "batch.heads_b", b.heads_b, B, b.width_b);
            if (b.opts.n_bigram > 1) bufs[nb++] = add_ints(&w, "batch.bigrams_b", b.bigrams_b, B, b.width_b);
        }
        ag_train_opts saved = *o;
        char config[AG_CONFIG_MAX];
        ag__train_record(&saved, &m.cfg);
        if (ag_train_opts_format(&saved, config, sizeof config) == 0) ag_st_set_meta(&w, "config", config);
        ag_st_set_meta(&w, "model", o->model);
        if (ag_st_write(&w, path)) rc = ag__train_fail(err, errlen, AG_ERR_IO, "%s", ag_errmsg());
        ag_st_writer_free(&w);
        for (int i = 0; i < nb; i++) ag__free(bufs[i]);
    }
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return rc;
}

/* ---- gradient check ---- */

typedef struct {
    ag_model *m;
    ag_batch *b;
} loss_ctx;

static ag_tensor *tiny_loss(void *p) {
    loss_ctx *c = p;
    return ag_model_loss(c->m, c->b, false);
}

typedef struct {
    double worst, worst_true;
    bool ok;
    int weak;        /* parameters whose check compared nothing: weak, or zero here only */
} check_summary;

ag__grad_class ag__grad_class_of(const ag_gradcheck_result *r, double largest, ag_forward_fn f, void *ctx,
                                 ag_tensor *p, double *moved) {
    if (moved) *moved = 0;
    if (r->max_grad >= AG__RESOLVED_GRAD) return AG__GRAD_RESOLVED;
    if (r->max_grad > AG__ZERO_GRAD) return AG__GRAD_WEAK;
    double m = ag_gradcheck_shift(f, ctx, p, AG__ZERO_SHIFT, 17);
    if (moved) *moved = m;
    if (!(m <= AG__ZERO_MOVES)) return AG__GRAD_ZERO_HERE;
    return r->max_analytic <= AG__ZERO_ANALYTIC * largest ? AG__GRAD_ZERO : AG__GRAD_ZERO_WRONG;
}

/* A parameter's verdict: the class of its gradient where the values are
 * wide (at the init every gradient is tiny, and a small one is weak). */
static const char *verdict(const ag_gradcheck_result *r, ag__grad_class c, double moved, char *buf, size_t n) {
    switch (c) {
    case AG__GRAD_RESOLVED: return r->ok ? "ok" : "FAIL";
    case AG__GRAD_WEAK: return r->ok ? "ok, weak" : "FAIL";
    case AG__GRAD_ZERO:
        snprintf(buf, n, "%s (invariant: |a| %.2e, the loss moves %.2e)", r->ok ? "ok, zero" : "FAIL", r->max_analytic,
                 moved);
        return buf;
    case AG__GRAD_ZERO_HERE: /* the check compared nothing of it: weak */
        snprintf(buf, n, "%s (zero here only: the loss moves %.2e)", r->ok ? "ok, weak" : "FAIL", moved);
        return buf;
    case AG__GRAD_ZERO_WRONG:
        snprintf(buf, n, "FAIL (invariant: the loss moves %.2e, yet |a| %.2e is no roundoff)", moved, r->max_analytic);
        return buf;
    }
    return "?";
}

/* One pass over every parameter at its current values; a small gradient
 * is told apart as zero only where the values are wide (at the init both
 * are tiny), and is verified there against the model's largest. */
static check_summary check_every_parameter(ag_model *m, loss_ctx *ctx, bool wide, FILE *out) {
    check_summary s = {.ok = true};
    int n = m->params.count;
    ag_gradcheck_result *res = ag__malloc((size_t)(n ? n : 1) * sizeof *res);
    double largest = 0;
    for (int i = 0; i < n; i++) {
        ag_tensor *p = m->params.items[i];
        ag_gradcheck_opts go = ag_gradcheck_defaults();
        go.max_checks = 64;
        res[i] = ag_gradcheck(tiny_loss, ctx, &p, 1, &go);
        largest = fmax(largest, res[i].max_grad);
        ag_step_end();
    }
    for (int i = 0; i < n; i++) {
        ag_tensor *p = m->params.items[i];
        const ag_gradcheck_result *r = &res[i];
        double moved = 0;
        ag__grad_class c = !wide && r->max_grad < AG__RESOLVED_GRAD
                               ? AG__GRAD_WEAK
                               : ag__grad_class_of(r, largest, tiny_loss, ctx, p, &moved);
        char shape[64], buf[128];
        fprintf(out, "  %-26s %-12s rel %.2e  true %.2e  abs %.2e  |g| %.2e  %s\n", p->name,
                ag_shape_str(p, shape, sizeof shape), r->max_rel_err, r->max_true_rel_err, r->max_abs_err, r->max_grad,
                verdict(r, c, moved, buf, sizeof buf));
        if (!r->ok)
            fprintf(out, "    worst at element %lld: analytic %.12g, numeric %.12g\n", (long long)r->worst_index,
                    r->analytic, r->numeric);
        s.worst = fmax(s.worst, r->max_rel_err);
        s.worst_true = fmax(s.worst_true, r->max_true_rel_err);
        s.ok = s.ok && r->ok && c != AG__GRAD_ZERO_WRONG;
        s.weak += r->ok && (c == AG__GRAD_WEAK || c == AG__GRAD_ZERO_HERE);
    }
    ag__free(res);
    return s;
}

/* Host copies of every parameter's values, and putting them back. */
static ag_real **save_values(ag_params *ps) {
    ag_device dev = ps->count ? ps->items[0]->device : AG_CPU;
    ag_params_to(ps, AG_CPU);
    ag_real **saved = ag__malloc((size_t)(ps->count + 1) * sizeof *saved);
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *p = ps->items[i];
        saved[i] = ag__malloc((size_t)(p->size + 1) * sizeof(ag_real));
        if (p->data) memcpy(saved[i], p->data, (size_t)p->size * sizeof(ag_real));
    }
    ag_params_to(ps, dev);
    return saved;
}

static void restore_values(ag_params *ps, ag_real **saved) {
    ag_device dev = ps->count ? ps->items[0]->device : AG_CPU;
    ag_params_to(ps, AG_CPU);
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (p->data) memcpy(p->data, saved[i], (size_t)p->size * sizeof(ag_real));
        ag__free(saved[i]);
    }
    ag__free(saved);
    ag_params_to(ps, dev);
}

void ag__params_draw_wide(ag_params *ps, uint64_t seed) {
    ag_rng rng;
    ag_rng_seed(&rng, seed);
    ag_device dev = ps->count ? ps->items[0]->device : AG_CPU;
    ag_params_to(ps, AG_CPU);
    for (int i = 0; i < ps->count; i++) ag_init_uniform(ps->items[i], -1, 1, &rng);
    ag_params_to(ps, dev);
}

/* Two passes: at the parameters' values, then with every parameter drawn
 * from U(-1, 1).  At a model's init (weights ~0.1, embeddings U(-0.05,
 * 0.05)) many gradients are 1e-9 to 1e-11 (attention scores nearly equal; a
 * query's vector reaching a softmax over keys only through a curvature),
 * which finite differences cannot resolve; drawn wide they are resolved or
 * zero.  A model whose loss is not finite at such values (a parameter that
 * must stay positive) is checked at its values alone, and told so.  The
 * parameters get their values back. */
static bool two_passes(ag_model *m, const ag_batch *b, const char *label, bool strict, FILE *out) {
    loss_ctx ctx = {m, (ag_batch *)b};
    if (!tiny_loss(&ctx)) { /* a kind may refuse a batch (model.h): say so, as train does */
        fprintf(out, "%s: the model refused the batch: %s\nFAIL\n", label, ag_errmsg());
        ag_step_end();
        return false;
    }
    ag_step_end();
    /* rel is the measure the tolerance bounds (relative, floored at atol/rtol
     * = 1e-2 for gradients too small to resolve); true is |a - n| / max(|a|, |n|) */
    fprintf(out, "%s: f64 gradient check of %d parameters (pass: |a - n| <= 1e-8 + 1e-6 |n|; rel = |a - n| / "
            "max(|a|, |n|, 1e-2), true = |a - n| / max(|a|, |n|), |g| = the largest max(|a|, |n|): weak under %g; "
            "drawn wide, zero under %g where verified: |a| under %g of the largest |g|, and the loss moves under %g "
            "(relative) when every element moves by up to %g either way)\n", label, m->params.count,
            AG__RESOLVED_GRAD, AG__ZERO_GRAD, AG__ZERO_ANALYTIC, AG__ZERO_MOVES, AG__ZERO_SHIFT);
    fprintf(out, " at the model's init:\n");
    check_summary init = check_every_parameter(m, &ctx, false, out);

    ag_real **saved = save_values(&m->params);
    ag__params_draw_wide(&m->params, 11);
    double loss = ag_item(tiny_loss(&ctx));
    ag_step_end();
    check_summary wide = {.ok = true, .weak = init.weak};
    if (isfinite(loss)) {
        fprintf(out, " every parameter drawn from U(-1, 1), where gradients the init leaves too small are resolved:\n");
        wide = check_every_parameter(m, &ctx, true, out);
    } else {
        fprintf(out, " not drawn from U(-1, 1): the loss is %g there; the init's check stands alone\n", loss);
    }
    restore_values(&m->params, saved);
    bool ok = init.ok && wide.ok && !(strict && wide.weak);
    if (wide.weak)
        fprintf(out, "%d of %d parameters weak in the last pass: every gradient checked under %g (or under %g but "
                "zero here only), where any value would pass%s; docs/extending.md, \"Checking it\"\n", wide.weak,
                m->params.count, AG__RESOLVED_GRAD, AG__ZERO_GRAD, strict ? " (--strict: a failure)" : "");
    fprintf(out, "worst relative error %.2e (true %.2e): %s\n", fmax(init.worst, wide.worst),
            fmax(init.worst_true, wide.worst_true), ok ? "PASS" : "FAIL");
    return ok;
}

bool ag_model_gradcheck_batch(ag_model *m, const ag_batch *b, FILE *out) {
    if (sizeof(ag_real) != sizeof(double))
        ag__fatal("ag_model_gradcheck_batch", "needs double precision (an AG_REAL_DOUBLE build: attngrad-f64)");
    return two_passes(m, b, m->kind->name, false, out);
}

int ag_model_gradcheck(const ag_train_opts *o, FILE *out, char *err, size_t errlen) {
    if (sizeof(ag_real) != sizeof(double))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "gradcheck needs double precision: run attngrad-f64 gradcheck");
    ag_model m;
    ag_batch b;
    int rc = ag_dump_setup(o, &m, &b, err, errlen);
    if (rc) return rc;
    if (!tiny_loss(&(loss_ctx){&m, &b})) {
        rc = ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s refused the batch: %s", o->model, ag_errmsg());
        ag_step_end();
        ag_model_batch_free(&b);
        ag_model_free(&m);
        return rc;
    }
    ag_step_end();
    char label[sizeof o->model + sizeof o->flags + 2];
    snprintf(label, sizeof label, "%s%s%s", o->model, o->flags[0] ? "/" : "", o->flags);
    bool ok = two_passes(&m, &b, label, o->strict, out);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return ok ? 1 : 0;
}
