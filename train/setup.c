/* setup.c - one fold's trainer: its data, model (with --embeddings'
 * pretrained vectors), optimizer, schedule, batch and sampler. */
#include "trainer.h"
#include "../optim/options.h" /* ag__optim_keeps: the state a resumed run's optimizer kept */
#include "../graph/device.h"   /* ag__zeros_kept_on: the parts' loss sum */

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ag__trainer_free(ag__trainer *t) {
    if (t->loss_sum) ag__free_kept_on(t->opt.device, t->loss_sum);
    ag__dist_grads_free(&t->grads);
    ag_vectors_free(&t->vec);
    ag__run_logs_free(&t->logs);
    ag_sampler_free(&t->sampler);
    ag_batch_free(&t->batch);
    ag_optim_free(&t->opt);
    ag_model_free(&t->model);
    ag_run_data_free(&t->data);
}

/* ---- --embeddings: pretrained word vectors ----------------------------------- */

/* Reads the vectors for the fold's vocabulary before the model is sized:
 * the embedding's dimension is the file's (every model's --dim is its
 * embedding size; docs/models.md says what follows from it per model), so
 * a --dim that disagrees stops the run.  A resumed run takes its embedding
 * from the checkpoint and needs no vectors file. */
static int read_vectors(ag__trainer *t, ag_train_opts *o, char *err, size_t errlen) {
    if (!o->embeddings[0] || o->resume) {
        if (o->embeddings_exact && !o->embeddings[0])
            return ag__train_fail(err, errlen, AG_ERR_ARG, "--embeddings-exact: there is no --embeddings file to look words up in");
        return 0;
    }
    if (o->init[0]) /* which would win is no question a user should have to ask */
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--embeddings and --init %s both set the word embedding: give one",
                             o->init);
    ag_run_data *d = &t->data;
    ag_vec_opts vo = {.exact_only = o->embeddings_exact};
    int rc = ag_vectors_read(o->embeddings, d->vocab, &vo, &t->vec, err, errlen);
    if (rc) return rc;
    /* A wider --dim keeps the vectors whole and draws the extra columns
     * (ag_embedding_from_vectors); a narrower one would cut them. */
    if (o->dim > 0 && o->dim < t->vec.dim)
        return ag__train_fail(err, errlen, AG_ERR_ARG,
                             "--dim %d, but %s holds %d-dimensional vectors (the model's dim is its embedding size): "
                             "leave --dim out to take %d, or give one above it", o->dim, o->embeddings, t->vec.dim,
                             t->vec.dim);
    if (o->dim <= 0) o->dim = t->vec.dim;
    t->vec_covered = ag_vectors_coverage(&t->vec, d->ds[AG_SPLIT_TRAIN], d->idx[AG_SPLIT_TRAIN], d->n[AG_SPLIT_TRAIN],
                                         &t->vec_tokens);
    return 0;
}

/* The model built, before the optimizer: the vectors into its embedding
 * (then their rows are freed) and, with --freeze-embeddings, the embedding
 * frozen, so that the optimizer keeps no state for it. */
static int apply_vectors(ag__trainer *t, const ag_train_opts *o, char *err, size_t errlen) {
    if (!t->vec.rows && !o->freeze_embeddings) return 0;
    ag_tensor *table = ag_model_embedding(&t->model);
    if (!table) return ag__train_fail(err, errlen, AG_ERR_ARG, "--%s: %s", t->vec.rows ? "embeddings" : "freeze-embeddings", ag_errmsg());
    if (t->vec.rows && ag_embedding_from_vectors(table, &t->vec, AG_PAD_ID, &t->model.rng))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--embeddings %s: %s", o->embeddings, ag_errmsg());
    if (o->freeze_embeddings) ag_param_freeze(table);
    free(t->vec.rows);
    t->vec.rows = NULL;
    return 0;
}

/* ---- --param-group ------------------------------------------------------------ */

int ag__train_groups(const ag_train_opts *o, ag__train_group *g) {
    int n = 0;
    for (const char *p = o->param_groups; *p && n < AG__MAX_PARAM_GROUPS; p += strcspn(p, "\n"), p += *p == '\n') {
        char spec[sizeof o->param_groups];
        int len = (int)strcspn(p, "\n");
        snprintf(spec, sizeof spec, "%.*s", len, p);
        if (ag__param_group_parse(spec, &g[n].g) == AG_OK) /* checked when set: always */
            g[n].spec = p, g[n].len = len, n++;
    }
    return n;
}

/* A group that matches nothing is a typo or another model's name: refused,
 * with the first parameter names to write one from. */
static int group_matches_none(const ag__train_group *g, const ag_params *ps, const char *model, char *err,
                              size_t errlen) {
    char names[256] = "";
    size_t k = 0;
    for (int i = 0; i < ps->count && i < 6 && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%.60s", i ? ", " : "", ps->items[i]->name);
    if (ps->count > 6 && k < sizeof names) snprintf(names + k, sizeof names - k, ", ...");
    return ag__train_fail(err, errlen, AG_ERR_ARG, "option --param-group '%.*s': pattern '%s' matches no parameter of "
                          "model %s (its %d: %s)", g->len, g->spec, g->g.pattern, model, ps->count, names);
}

/* A group's muon=0/1 says which side of Muon its matrices take: for
 * --optim muon only, and muon=1 needs a 2-D parameter to route. */
static int muon_group_fits(ag__train_group *g, const ag_params *ps, const ag_train_opts *o, char *err,
                           size_t errlen) {
    if (g->g.muon < 0) return 0;
    ag_optim_config oc;
    if (ag_optim_parse(o->optim, &oc) == AG_OK && oc.kind != AG_MUON) /* a bad --optim: its own message, later */
        return ag__train_fail(err, errlen, AG_ERR_ARG, "option --param-group '%.*s': muon=%d routes matrices between "
                              "Muon's step and its AdamW part, a setting of --optim muon, but the optimizer is %s", g->len, g->spec, g->g.muon,
                              ag_optim_name(oc.kind));
    bool matrix = false;
    for (int i = 0; i < ps->count && !matrix; i++)
        matrix = ps->items[i]->ndim == 2 && ag__param_group_match(ps->items[i], &g->g);
    if (!matrix && g->g.muon == 1)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "option --param-group '%.*s': muon=1, but pattern '%s' matches "
                              "no 2-D parameter, and Muon's step is for matrices", g->len, g->spec, g->g.pattern);
    return 0;
}

/* Before the optimizer is made: every group must match a parameter (a
 * muon group fit the optimizer), and the parameters whose last group that
 * sets freeze says 1 are frozen (no gradient, no optimizer state). */
static int freeze_groups(ag__trainer *t, const ag_train_opts *o, char *err, size_t errlen) {
    ag__train_group g[AG__MAX_PARAM_GROUPS];
    int n = ag__train_groups(o, g);
    ag_params *ps = &t->model.params;
    for (int k = 0; k < n; k++) {
        bool any = false;
        for (int i = 0; i < ps->count && !any; i++) any = ag__param_group_match(ps->items[i], &g[k].g);
        if (!any) return group_matches_none(&g[k], ps, o->model, err, errlen);
        int rc = muon_group_fits(&g[k], ps, o, err, errlen);
        if (rc) return rc;
    }
    for (int i = 0; i < ps->count; i++) {
        int freeze = -1;
        for (int k = 0; k < n; k++)
            if (g[k].g.freeze >= 0 && ag__param_group_match(ps->items[i], &g[k].g)) freeze = g[k].g.freeze;
        if (freeze == 1 && ps->items[i]->requires_grad) ag_param_freeze(ps->items[i]);
    }
    return 0;
}

/* After: each group's side of Muon, rate and weight decay, in order (a
 * later one wins). */
static void optim_groups(ag__trainer *t, const ag_train_opts *o) {
    ag__train_group g[AG__MAX_PARAM_GROUPS];
    int n = ag__train_groups(o, g);
    for (int k = 0; k < n; k++) {
        if (g[k].g.muon >= 0) ag_optim_set_muon(&t->opt, ag__param_group_match, &g[k].g, g[k].g.muon == 1);
        if (!isnan(g[k].g.lr_scale)) ag_optim_set_lr_scale(&t->opt, ag__param_group_match, &g[k].g, g[k].g.lr_scale);
        if (!isnan(g[k].g.weight_decay))
            ag_optim_set_weight_decay(&t->opt, ag__param_group_match, &g[k].g, g[k].g.weight_decay);
    }
}

/* Groups a line each as "'a' 'b'", or "none". */
static const char *quoted_groups(const char *lines, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s", *lines ? "" : "none");
    for (const char *p = lines; *p && k < n; p += strcspn(p, "\n"), p += *p == '\n')
        k += (size_t)snprintf(buf + k, n - k, "%s'%.*s'", p == lines ? "" : " ", (int)strcspn(p, "\n"), p);
    return buf;
}

/* The run's --param-group lines of a config text ("param-group=G\n" each),
 * as o->param_groups holds them, into buf. */
static void config_groups(const char *config, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (const char *p = config; p && *p; p += strcspn(p, "\n"), p += *p == '\n') {
        if (strncmp(p, "param-group=", 12)) continue;
        int len = (int)strcspn(p + 12, "\n");
        int w = snprintf(buf + k, n - k, "%s%.*s", k ? "\n" : "", len, p + 12);
        if (w < 0 || (size_t)w >= n - k) return;
        k += (size_t)w;
    }
}

/* --resume: a parameter the run kept frozen has no optimizer state in its
 * checkpoint, so no group (nor --freeze-embeddings 0) may train it now: its
 * state never was (a frozen one more is fine: its state stays unread).
 * Groups that differ from the run's are said, as a changed --optim is. */
static int resumed_groups(const ag__trainer *t, const ag_train_opts *o, const char *ckpt, char *err, size_t errlen) {
    ag_st_file f;
    if (ag_st_read(ckpt, &f)) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
    const ag_optimizer *opt = &t->opt;
    const char *spec = ag_st_meta(&f, "optim"), *config = ag_st_meta(&f, "config");
    ag_optim_config saved;
    int rc = 0;
    if (spec && ag_optim_parse(spec, &saved) == AG_OK && saved.kind == opt->cfg.kind) /* else the load says why */
        for (int s = 0; s < opt->n_slots && !rc; s++) {
            const char *slot = ag_optim_slot_name(opt, s);
            if (!ag__optim_keeps(&saved, slot)) continue;
            for (int i = 0; i < opt->n_params && !rc; i++) {
                char name[1024];
                const ag_tensor *p = opt->params->items[i];
                snprintf(name, sizeof name, "optim.%s.%s.%s", ag_optim_name(saved.kind), slot, p->name);
                char m[1024]; /* Muon's v: a matrix the run routed to Muon's step has its m; the load says so */
                snprintf(m, sizeof m, "optim.%s.%s.%s", ag_optim_name(saved.kind), ag_optim_slot_name(opt, 0), p->name);
                bool routed = saved.kind == AG_MUON && s == 1 && ag_st_get(&f, m);
                if (opt->slot[s * opt->n_params + i] && !ag_st_get(&f, name) && !routed) /* kept now, frozen then */
                    rc = ag__train_fail(err, errlen, AG_ERR_ARG, "%s: parameter '%s' was frozen in the run (no '%s' "
                                        "state): --resume cannot train it, its optimizer state never was; keep it "
                                        "frozen as the run did, or start a new run from these weights with --init",
                                        ckpt, p->name, slot);
            }
        }
    char was[sizeof o->param_groups], now_text[sizeof o->param_groups + 192], was_text[sizeof now_text];
    config_groups(config, was, sizeof was);
    if (!rc && strcmp(was, o->param_groups) && ag__dist_rank() == 0)
        fprintf(stderr, "note: %s: the parameter groups are this command's from here on: %s (the run's: %s)\n", ckpt,
                quoted_groups(o->param_groups, now_text, sizeof now_text),
                quoted_groups(was, was_text, sizeof was_text));
    ag_st_close(&f);
    return rc;
}

/* ag_model_init refused the config (ag_errmsg says why); with vectors, the
 * width came from them: say so, with the model's own (e.g. MS-SAN's heads
 * must divide d). */
static int model_refused(const ag__trainer *t, const ag_train_opts *o, char *err, size_t errlen) {
    if (!t->vec.dim) return ag__train_fail(err, errlen, AG_ERR_ARG, "%s", ag_errmsg());
    return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s cannot take the %d-dimensional vectors of %s (its own dim is "
                         "%d): %s; a --dim above %d it can take keeps the vectors in its first %d columns",
                         o->model, t->vec.dim, o->embeddings, ag_model_defaults(ag_model_find(o->model)).dim,
                         ag_errmsg(), t->vec.dim, t->vec.dim);
}

/* --lr-steps ...,total=run: the steps this command plans, --epochs times
 * the batches of an epoch, or --max-steps where that is fewer (counted
 * from the run's start, as the optimizer's step is), so a run bounded by
 * either decays to its end without a count worked out by hand.  Each
 * command plans its own: a --resume with more epochs stretches the decay. */
static int run_total(ag__trainer *t, const ag_train_opts *o, char *err, size_t errlen) {
    int64_t planned = (int64_t)o->epochs * t->sampler.n_batches;
    if (o->max_steps > 0 && o->max_steps < planned) planned = o->max_steps;
    if (planned >= AG__LR_TOTAL_RUN) planned = AG__LR_TOTAL_RUN - 1;
    if (planned <= t->lr_steps.warmup)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "option --lr-steps '%s': total=run is the run's %lld planned "
                              "steps (--epochs %d x %lld batches%s), not above its warmup %d", o->lr_steps,
                              (long long)planned, o->epochs, (long long)t->sampler.n_batches,
                              o->max_steps > 0 && o->max_steps == planned ? ", cut by --max-steps" : "",
                              t->lr_steps.warmup);
    t->lr_steps.total = (int)planned;
    return 0;
}

/* trainer.h says what this builds and checks. */
int ag__trainer_init(ag__trainer *t, ag_train_opts *o, int fold, ag_vocab *vocab, const char *ckpt, char *err,
                     size_t errlen) {
    memset(t, 0, sizeof *t);
    int rc = ag_run_data_open(o, fold, vocab, &t->data, err, errlen);
    if (rc) return rc;
    ag_run_data *d = &t->data;
    snprintf(o->task, sizeof o->task, "%s", ag_task_name(d->task));
    o->lowercase = d->lowercase; /* what the data did: predict and heatmap tokenize the same way */
    o->vocab = ag_vocab_size(d->vocab);
    snprintf(o->vocab_fp, sizeof o->vocab_fp, "%016" PRIx64, ag_vocab_fingerprint(d->vocab));
    snprintf(o->parse_source, sizeof o->parse_source, "%s", d->parses[0] ? d->parses : "chain");
    snprintf(o->labels, sizeof o->labels, "%s", d->label_names && d->task != AG_TASK_LM ? d->label_names : "");
    if (d->task != AG_TASK_LM) o->classes = d->classes > 2 ? d->classes : 2;
    if ((rc = read_vectors(t, o, err, errlen))) return rc;
    ag_model_config cfg;
    if ((rc = ag_train_resolve(o, &cfg, err, errlen))) return rc;
    bool init = ckpt && !o->resume;
    if (ckpt && (rc = ag_checkpoint_fits(ckpt, ag_model_find(o->model), &cfg, init, init, err, errlen))) return rc;
    if (ag_model_init(&t->model, ag_model_find(o->model), &cfg)) return model_refused(t, o, err, errlen);
    if (init && ag_checkpoint_load(ckpt, &t->model.params, NULL, NULL, NULL)) /* the dropout generator stays the seed's */
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "--init: %s", ag_errmsg());
    if ((rc = apply_vectors(t, o, err, errlen))) return rc;
    if ((rc = ag_train_use_device(o, &t->model.params, err, errlen))) return rc; /* the optimizer's state follows */
    if ((rc = freeze_groups(t, o, err, errlen))) return rc;

    ag_optim_config oc;
    ag_sched_config sc;
    if (ag_optim_parse(o->optim, &oc) || ag_optim_init(&t->opt, &t->model.params, &oc) ||
        ag_sched_parse(o->sched, &sc) || ag_sched_init(&t->sched, &sc) ||
        (o->lr_steps[0] && ag__lr_steps_read(o->lr_steps, NULL, &t->lr_steps, &t->lr_steps_run)))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "%s", ag_errmsg());
    optim_groups(t, o);
    if (ckpt && o->resume && (rc = resumed_groups(t, o, ckpt, err, errlen))) return rc;
    t->has_lr_steps = o->lr_steps[0] != 0;
    t->clip = o->clip;

    ag_batch_opts bo = ag_run_batch_opts(&t->model, o, d->max_width);
    d->max_width = bo.max_width; /* the warm-up's widest batch */
    /* Shuffled batches of similar lengths (less padding), sorted within
     * chunks of 16 batches; the LM keeps the file's order, as its paper. */
    bool lm = d->task == AG_TASK_LM;
    ag_sampler_opts so = {.batch_size = cfg.batch, .shuffle = !lm, .bucket_chunks = lm ? 0 : 16};
    /* The batch buffers, the warm-up and so the step memory are those of
     * the most rows one forward takes: a rank's share of a batch under
     * mpirun, at most --micro-batch; the sampler still draws whole batches */
    int32_t share = (int32_t)((cfg.batch + ag__dist_size() - 1) / ag__dist_size());
    int32_t part_rows = o->micro_batch > 0 && o->micro_batch < share ? o->micro_batch : share;
    if ((rc = ag_batch_alloc(&t->batch, d->ds[AG_SPLIT_TRAIN], part_rows, &bo, err, errlen)) ||
        (rc = ag_sampler_init(&t->sampler, d->ds[AG_SPLIT_TRAIN], d->idx[AG_SPLIT_TRAIN], d->n[AG_SPLIT_TRAIN], &so,
                              err, errlen)))
        return rc;
    if (t->sampler.n_batches < 1) return ag__train_fail(err, errlen, AG_ERR_ARG, "%s: no training examples", d->name);
    if (part_rows < share) /* made now: a training step allocates nothing */
        t->loss_sum = ag__zeros_kept_on(t->opt.device, sizeof(ag_real), "the parts' loss");
    return t->lr_steps_run ? run_total(t, o, err, errlen) : 0;
}

