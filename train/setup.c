/* setup.c - one fold's trainer: its data, model (with --embeddings'
 * pretrained vectors), optimizer, schedule, batch and sampler. */
#include "trainer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void ag__trainer_free(ag__trainer *t) {
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

    ag_optim_config oc;
    ag_sched_config sc;
    if (ag_optim_parse(o->optim, &oc) || ag_optim_init(&t->opt, &t->model.params, &oc) ||
        ag_sched_parse(o->sched, &sc) || ag_sched_init(&t->sched, &sc) ||
        (o->lr_steps[0] && ag_lr_steps_parse(o->lr_steps, &t->lr_steps)))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "%s", ag_errmsg());
    t->has_lr_steps = o->lr_steps[0] != 0;
    t->clip = o->clip;

    ag_batch_opts bo = ag_run_batch_opts(&t->model, o, d->max_width);
    d->max_width = bo.max_width; /* the warm-up's widest batch */
    /* Shuffled batches of similar lengths (less padding), sorted within
     * chunks of 16 batches; the LM keeps the file's order, as its paper. */
    bool lm = d->task == AG_TASK_LM;
    ag_sampler_opts so = {.batch_size = cfg.batch, .shuffle = !lm, .bucket_chunks = lm ? 0 : 16};
    if ((rc = ag_batch_alloc(&t->batch, d->ds[AG_SPLIT_TRAIN], cfg.batch, &bo, err, errlen)) ||
        (rc = ag_sampler_init(&t->sampler, d->ds[AG_SPLIT_TRAIN], d->idx[AG_SPLIT_TRAIN], d->n[AG_SPLIT_TRAIN], &so,
                              err, errlen)))
        return rc;
    if (t->sampler.n_batches < 1) return ag__train_fail(err, errlen, AG_ERR_ARG, "%s: no training examples", d->name);
    return 0;
}

