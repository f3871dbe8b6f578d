/* loop.c - the training loop and what surrounds it: epochs, evaluation
 * after each, early stopping, limits and signals, cross-validation folds.
 * What a run keeps on disk (checkpoints, metrics files, the lock,
 * resuming) is run_folder.c's; one step is step.c's.
 *
 * Reproducibility: the model's generator (initialisation, then dropout) is
 * the only state that evolves; each epoch's example order comes from a
 * generator seeded by (seed, epoch).  A checkpoint therefore holds all a
 * run needs to continue exactly - parameters, optimizer and schedule state,
 * the dropout generator, and the loop's counters - and resuming gives the
 * same parameters, bit for bit, as a run that never stopped.
 *
 * Under mpirun (distributed/dist.h) every rank runs this loop on its share of
 * each batch; the gradient allreduce makes their steps one process's, and
 * rank 0 alone writes and prints. */
#include "trainer.h"
#include "../distributed/dist.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* What the trainer's checkpoints hold besides the run's counters. */
static ag__run_parts run_parts(ag__trainer *t) {
    return (ag__run_parts){.params = &t->model.params, .opt = &t->opt, .sched = &t->sched, .rng = &t->model.rng,
                           .logs = &t->logs};
}

/* ---- setting a run up ----------------------------------------------------------- */

typedef struct {
    ag_metrics dev, test;
    bool valid;          /* has metrics: a limit may stop a run before any evaluation */
    bool has_test, stopped, time_up;
    double first_loss, initial_loss, last_loss, seconds;
    int64_t steps, allocs, waits;
    size_t step_bytes;
    int epochs;
} fold_result;

/* ---- the loop of one fold ---------------------------------------------------------- */

typedef struct {
    ag_train_opts *o;
    const char *out;
    double deadline;     /* monotonic seconds; 0 = none */
    bool quiet;
    ag__step_profile *profile;
    int lock;            /* the folder's lock (-1: none held) */
    ag__step_log *steps; /* --log-steps (f NULL: none, or not rank 0) */
} fold_ctx;

/* Has the wall-clock limit passed?  Rank 0's clock decides for every rank,
 * so that all stop after the same step. */
static bool past(double deadline) {
    if (deadline <= 0) return false;
    char up = ag__seconds() >= deadline;
    ag__dist_bcast(&up, 1);
    return up;
}

/* after_step: right after a step, whose allreduce has agreed on a stop;
 * else the ranks agree now. */
static bool limit_reached(const fold_ctx *c, const ag__run_state *s, bool after_step) {
    return (c->o->max_steps > 0 && s->step >= c->o->max_steps) || past(c->deadline) ||
           (after_step ? ag_train_stop_requested() : ag__train_stop_agree());
}

static void epoch_rng(ag_data_rng *r, uint64_t seed, int epoch) {
    ag_data_rng_seed(r, seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(epoch + 1)));
}

/* Evaluates after an epoch (or a stop mid-epoch), steps the schedule, keeps
 * the best checkpoint, saves the last one and logs the metrics. */
static int end_of_epoch(const fold_ctx *c, ag__trainer *t, ag__run_state *s, double train_loss, bool partial, char *err,
                        size_t errlen) {
    ag_run_data *d = &t->data;
    ag__epoch_row e = {.epoch = s->epoch + partial, .step = s->step, .train_loss = train_loss, .partial = partial,
                   .has_test = d->ds[AG_SPLIT_TEST] != NULL};
    /* an optimizer with an average (ema=, swa=), or Lookahead's slow weights:
     * the model evaluated, and saved as the best, is those; training goes on
     * from its own values */
    bool averaged = ag_optim_swap_average(&t->opt);
    int rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_DEV], d->idx[AG_SPLIT_DEV], d->n[AG_SPLIT_DEV], &t->batch, &e.dev,
                         err, errlen);
    if (!rc && e.has_test)
        rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_TEST], d->idx[AG_SPLIT_TEST], d->n[AG_SPLIT_TEST], &t->batch,
                         &e.test, err, errlen);
    if (averaged) ag_optim_swap_average(&t->opt);
    if (!rc) rc = ag__train_check_metrics(t, &e.dev, "dev", e.epoch, err, errlen);
    if (!rc && e.has_test) rc = ag__train_check_metrics(t, &e.test, "test", e.epoch, err, errlen);
    if (rc) return rc;
    double sc = ag__train_score(&t->model, &e.dev);
    /* plateau in "max" mode follows the dev score, in "min" mode the dev loss */
    if (!partial) ag_sched_step(&t->sched, &t->opt, t->sched.cfg.mode_max ? sc : e.dev.loss);
    e.lr = t->opt.lr;
    e.best = sc > s->best;
    if (e.best) {
        t->best_dev = e.dev, t->best_test = e.test, t->have_best = true;
        s->best = sc;
        s->best_epoch = e.epoch;
        s->bad_epochs = 0;
    } else if (!partial) {
        s->bad_epochs++;
    }
    if (!partial && c->o->patience > 0 && s->bad_epochs >= c->o->patience) s->stopped = 1;
    e.seconds = s->seconds;
    /* The row goes into the checkpoints first: a crash between two of these
     * writes leaves last.safetensors holding every row, and resuming
     * rewrites the metrics files from it. */
    if ((rc = ag__run_logs_add(&t->logs, t->data.task, &e, err, errlen))) return rc;
    if (ag__dist_rank() > 0) return 0; /* rank 0 alone writes */
    if ((rc = ag__run_folder_still_ours(c->out, c->lock, err, errlen))) return rc;
    /* the rows up to this step reach the disk before a checkpoint says the run got there */
    if ((rc = ag__step_log_sync(c->steps, err, errlen))) return rc;
    char path[AG_PATH_MAX + 32];
    ag__run_parts parts = run_parts(t);
    if (e.best) {
        ag__path_join(path, sizeof path, c->out, "best.safetensors");
        averaged = ag_optim_swap_average(&t->opt);
        rc = ag__run_save(path, c->o, s, &parts, err, errlen);
        if (averaged) ag_optim_swap_average(&t->opt);
        if (rc) return rc;
        ag__crash_point("best");
    }
    ag__path_join(path, sizeof path, c->out, "last.safetensors");
    if ((rc = ag__run_save(path, c->o, s, &parts, err, errlen))) return rc;
    ag__crash_point("last");
    if ((rc = ag__run_logs_write(c->out, &t->logs, err, errlen))) return rc;
    ag__crash_point("jsonl");
    if (!c->quiet) ag__print_epoch(&e, c->o->epochs, t->data.task);
    return 0;
}

/* A row of steps.csv: values the step has read already, so no wait on the
 * device; t0 is when the epoch under way began. */
static void log_step(ag__step_log *l, const ag__trainer *t, const ag__run_state *s, int64_t rows, double loss,
                     double tokens, double t0) {
    ag__step_row r = {.step = s->step, .epoch = s->epoch + 1, .lr = t->step_lr, .loss = loss,
                      .grad_norm = t->step_grad_norm, .examples = rows, .tokens = (int64_t)tokens,
                      .seconds = s->seconds + ag__seconds() - t0};
    ag__step_log_add(l, &r);
}

/* Trains until the epochs are done, early stopping or a limit; r gets the
 * loss and step counts. */
static int train_loop(const fold_ctx *c, ag__trainer *t, ag__run_state *s, fold_result *r, char *err, size_t errlen) {
    int64_t n_batches = t->sampler.n_batches, first_n = 0;
    double first_sum = 0;
    r->initial_loss = r->last_loss = NAN; /* no step yet */
    while (s->epoch < c->o->epochs && !s->stopped && !limit_reached(c, s, false)) {
        ag_data_rng r_epoch;
        epoch_rng(&r_epoch, (uint64_t)c->o->seed, s->epoch);
        ag_sampler_epoch(&t->sampler, &r_epoch);
        ag__progress p;
        ag__progress_start(&p, c->quiet ? "none" : c->o->progress, s->epoch + 1, c->o->epochs, n_batches);
        double t0 = ag__seconds();
        bool stop = false;
        while (s->batch < n_batches && !stop) {
            int32_t rows;
            const int64_t *idx = ag_sampler_batch(&t->sampler, s->batch, &rows);
            int64_t first, mine; /* this rank's rows of the global batch (all of them in one process) */
            ag__dist_share(rows, &first, &mine);
            ag_mem_stats before = ag_memstats();
            double loss, tokens;
            ag__profile_step_begin(c->profile);
            int rc = ag__train_step(t, s->step + 1, idx, first, mine, rows, &loss, &tokens, err, errlen);
            if (rc) return rc;
            r->allocs += ag_memstats().allocs - before.allocs;
            r->waits += ag_memstats().device_waits - before.device_waits;
            ag__profile_step_end(c->profile);
            s->step++;
            s->batch++;
            if (ag__step_log_due(c->steps, s->step)) log_step(c->steps, t, s, rows, loss, tokens, t0);
            if (first_n == 0) r->initial_loss = loss;
            if (first_n < 10) first_sum += loss, first_n++;
            ag__progress_step(&p, s->batch, (int64_t)tokens, loss);
            stop = limit_reached(c, s, true);
            /* --eval-every N: an evaluation, the best checkpoint kept and the
             * last saved, every N steps between the epochs' (a stop here
             * evaluates below anyway); the schedule and early stopping stay
             * the epochs' */
            if (!stop && c->o->eval_every > 0 && s->step % c->o->eval_every == 0 && s->batch < n_batches) {
                ag__progress_end(&p);
                ag__profile_epoch_end(c->profile); /* a profile is of training steps */
                s->seconds += ag__seconds() - t0;
                if ((rc = end_of_epoch(c, t, s, p.loss_sum / p.steps, true, err, errlen))) return rc;
                t0 = ag__seconds(); /* the evaluation is not training time */
            }
        }
        ag__progress_end(&p);
        ag__profile_epoch_end(c->profile);
        s->seconds += ag__seconds() - t0;
        bool partial = s->batch < n_batches;
        if (!partial) s->epoch++, s->batch = 0;
        r->last_loss = p.steps ? p.loss_sum / p.steps : NAN;
        int rc = end_of_epoch(c, t, s, r->last_loss, partial, err, errlen);
        if (rc) return rc;
        if (partial) break;
    }
    r->first_loss = first_n ? first_sum / first_n : NAN;
    r->time_up = s->epoch < c->o->epochs && !s->stopped;
    r->stopped = s->stopped;
    return 0;
}

/* The final metrics of a fold: those of its best checkpoint (evaluated
 * again only when it was saved by an earlier process). */
static int evaluate_best(const fold_ctx *c, ag__trainer *t, fold_result *r, char *err, size_t errlen) {
    r->has_test = t->data.ds[AG_SPLIT_TEST] != NULL;
    if (t->have_best) {
        r->dev = t->best_dev, r->test = t->best_test, r->valid = true;
        return 0;
    }
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, c->out, "best.safetensors");
    /* rank 0's view decides, as for the run folder: a rank that saw
     * otherwise would skip the evaluation's collectives the others wait in */
    if (!ag__rank0_sees(path)) /* only a limit reached before the first step gets here */
        return r->time_up ? 0 : ag__train_fail(err, errlen, AG_ERR_IO, "%s: no best checkpoint", path);
    r->valid = true;
    if (ag_checkpoint_load(path, &t->model.params, NULL, NULL, NULL))
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
    ag__dist_bcast_params(&t->model.params); /* rank 0's best, should a rank read another copy */
    ag_run_data *d = &t->data;
    int rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_DEV], d->idx[AG_SPLIT_DEV], d->n[AG_SPLIT_DEV], &t->batch, &r->dev,
                         err, errlen);
    if (!rc && r->has_test)
        rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_TEST], d->idx[AG_SPLIT_TEST], d->n[AG_SPLIT_TEST], &t->batch,
                         &r->test, err, errlen);
    return rc;
}


static int train_fold(ag_train_opts *o, int fold, const char *out, double deadline, ag__step_profile *profile,
                      fold_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    bool resume = o->resume;
    char path[AG_PATH_MAX + 32];
    bool writer = ag__dist_rank() == 0; /* rank 0 alone writes */
    int lock = -1;                      /* held from here (resume) or from make_folder (a fresh run) to the end */
    int rc = ag__run_folder_check(out, resume, o->force, err, errlen);
    if (!rc && resume && writer) rc = ag__run_folder_lock(out, o->quiet, &lock, err, errlen);
    if (rc) return rc;
    ag_vocab *vocab = NULL;
    ag__path_join(path, sizeof path, out, "vocab.txt");
    if (resume && (rc = ag_vocab_load(path, &vocab, err, errlen))) return ag__run_folder_unlock(lock), rc;

    ag__trainer t;
    ag__run_parts parts = run_parts(&t);
    ag__run_state s = {.best = -INFINITY};
    ag__step_log steps = {0};
    fold_ctx c = {.o = o, .out = out, .deadline = deadline, .quiet = o->quiet, .profile = profile, .steps = &steps};
    ag__path_join(path, sizeof path, out, "last.safetensors");
    rc = ag__trainer_init(&t, o, fold, vocab, resume ? path : o->init[0] ? o->init : NULL, err, errlen);
    ag__path_join(path, sizeof path, out, "vocab.txt");
    if (!rc && !resume && writer) rc = ag__run_folder_make(out, o->quiet, &lock, err, errlen);
    if (!rc && writer) rc = ag__run_folder_clean(out, o->quiet, err, errlen);
    if (!rc && !resume && writer) rc = ag_vocab_save(t.data.vocab, path, err, errlen);
    c.lock = lock;
    if (!rc && resume) rc = ag__run_resume(out, t.data.vocab, &parts, &s, err, errlen);
    /* early stopping is judged again by this command's --patience, as its
     * --epochs extends a run: a larger patience continues a run that stopped
     * early, exactly as a run with that patience from the start would have */
    if (!rc && resume) s.stopped = o->patience > 0 && s.bad_epochs >= o->patience;
    if (!rc) rc = ag__train_ranks_agree(o, &t, &s, err, errlen); /* before the first collective on the model */
    if (!rc) ag__dist_bcast_params(&t.model.params); /* every rank starts from rank 0's parameters */
    if (!rc && !o->quiet) ag__print_header(&t, o, out);
    if (!rc && writer && o->log_steps > 0) rc = ag__step_log_open(&steps, out, o->log_steps, s.step, o->quiet, err, errlen);
    ag__crash_point("start"); /* a test's signal before the first step */
    ag_memstats_reset_high(); /* from here, this fold's steps: the warm-up takes the widest */
    if (!rc) rc = ag__train_warm_up(&t, err, errlen);
    double reduce0 = ag__dist_reduce_seconds(NULL), train0 = s.seconds;
    if (!rc) rc = train_loop(&c, &t, &s, r, err, errlen);
    ag_mem_stats ms = ag_memstats();
    r->step_bytes = t.opt.device == AG_CUDA ? ms.device_arena_high : ms.arena_high;
    if (!rc && !o->quiet && ag__dist_size() > 1) /* what the ranks cost each other */
        printf("  %d ranks: %.2f s of %.2f s training in the gradient allreduce (%s; waits for the slowest rank "
               "included)\n", ag__dist_size(), ag__dist_reduce_seconds(NULL) - reduce0, s.seconds - train0,
               ag__dist_reduce_path());
    if (!rc) rc = evaluate_best(&c, &t, r, err, errlen);
    r->steps = s.step;
    r->epochs = s.epoch;
    r->seconds = s.seconds;
    int closed = ag__step_log_close(&steps, rc ? NULL : err, rc ? 0 : errlen); /* a failed write, unless one failed before */
    if (!rc) rc = closed;
    ag__trainer_free(&t);
    ag__run_folder_unlock(lock);
    return rc;
}

/* ---- the whole command -------------------------------------------------------------- */

static void default_out(ag_train_opts *o) {
    char stamp[32];
    time_t tt = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&tt));
    char data[64] = "synth", copy[AG_PATH_MAX];
    if (o->data[0]) {
        snprintf(copy, sizeof copy, "%s", o->data);
        snprintf(data, sizeof data, "%s", o->dataset[0] ? o->dataset : basename(copy));
    }
    snprintf(o->out, sizeof o->out, "runs/%s-%s-%s", o->model, data, stamp);
    for (int i = 2; ag__path_exists(o->out); i++) snprintf(o->out, sizeof o->out, "runs/%s-%s-%s-%d", o->model, data, stamp, i);
}

static void add_fold(ag_train_result *r, const fold_result *f, int k) {
    double w = 1.0 / (k + 1); /* running means over folds */
    r->dev.accuracy += (f->dev.accuracy - r->dev.accuracy) * w;
    r->dev.loss += (f->dev.loss - r->dev.loss) * w;
    r->dev.perplexity += (f->dev.perplexity - r->dev.perplexity) * w;
    r->test.accuracy += (f->test.accuracy - r->test.accuracy) * w;
    r->test.loss += (f->test.loss - r->test.loss) * w;
    r->test.perplexity += (f->test.perplexity - r->test.perplexity) * w;
    r->dev.pearson += (f->dev.pearson - r->dev.pearson) * w;
    r->dev.spearman += (f->dev.spearman - r->dev.spearman) * w;
    r->dev.mse += (f->dev.mse - r->dev.mse) * w;
    r->test.pearson += (f->test.pearson - r->test.pearson) * w;
    r->test.spearman += (f->test.spearman - r->test.spearman) * w;
    r->test.mse += (f->test.mse - r->test.mse) * w;
    r->dev.examples += f->dev.examples;
    r->test.examples += f->test.examples;
    r->has_test = f->has_test;
    if (k == 0) r->first_loss = f->first_loss, r->initial_loss = f->initial_loss;
    r->last_loss = f->last_loss;
    r->steps += f->steps;
    r->epochs = f->epochs;
    r->step_allocs += f->allocs;
    r->step_waits += f->waits;
    if (f->step_bytes > r->step_bytes) r->step_bytes = f->step_bytes;
    r->stopped_early |= f->stopped;
    r->time_up |= f->time_up;
    r->folds = k + 1;
}

/* The run, or every fold of a cross-validation data set, into r. */
static int train_folds(ag_train_opts *o, int folds, double deadline, ag__step_profile *profile, ag_train_result *r,
                       char *err, size_t errlen) {
    if (!folds || o->fold >= 0) { /* one run, straight into the folder */
        fold_result f;
        int rc = train_fold(o, folds ? o->fold : -1, o->out, deadline, profile, &f, err, errlen);
        if (!rc) add_fold(r, &f, 0);
        r->folds = f.valid;
        return rc;
    }
    double sum_sq = 0;
    for (int k = 0; k < folds && !past(deadline); k++) {
        char dir[AG_PATH_MAX + 16];
        snprintf(dir, sizeof dir, "%s/fold%d", o->out, k);
        char last[AG_PATH_MAX + 48];
        ag__path_join(last, sizeof last, dir, "last.safetensors");
        ag_train_opts ok = *o;
        ok.fold = k;
        ok.resume = o->resume && ag__rank0_sees(last); /* folds not begun yet begin now */
        fold_result f;
        int rc = train_fold(&ok, k, dir, deadline, profile, &f, err, errlen);
        if (rc) return rc;
        if (!f.valid) break; /* the time ran out before this fold could start */
        add_fold(r, &f, k);
        sum_sq += f.test.accuracy * f.test.accuracy;
        if (!o->quiet) printf("fold %d/%d: test acc %.2f%%\n\n", k + 1, folds, 100 * f.test.accuracy);
    }
    if (r->folds < folds) r->time_up = true;
    double var = r->folds ? sum_sq / r->folds - r->test.accuracy * r->test.accuracy : 0;
    r->test_std = var > 0 ? sqrt(var) : 0;
    return 0;
}

/* --dataset names a benchmark folder's data set (its files, splits and
 * labels): with a file of one's own or the generated task a command would
 * read the data without it, unsaid.  Refused by train, optim_experiments,
 * and eval or predict given new data; their runs' own configs name a
 * dataset only with the folder it belongs to. */
int ag__train_check_dataset(const ag_train_opts *o, char *err, size_t errlen) {
    struct stat st;
    const char *clear = o->resume ? " (on --resume, --dataset '' clears the run's own)" : "";
    if (!o->dataset[0] || (!o->data[0] && !strcmp(o->dataset, "synth"))) return 0;
    if (!o->data[0])
        return ag__train_fail(err, errlen, AG_ERR_ARG, "option --dataset %s: there is no --data, so the data would "
                              "be the generated task: give the data set's folder with --data%s", o->dataset, clear);
    if (stat(o->data, &st) == 0 && !S_ISDIR(st.st_mode))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "option --dataset %s: --data %s is a file, which would be read "
                              "without it: --dataset names a benchmark folder's data set; give that folder with "
                              "--data, or drop --dataset (a file's format is --format)%s", o->dataset, o->data, clear);
    return 0;
}

int ag_train(ag_train_opts *o, ag_train_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    double t0 = ag__seconds(), deadline = o->max_minutes > 0 ? t0 + 60 * o->max_minutes : 0;
    char real[PATH_MAX];
    if (o->data[0] && realpath(o->data, real) && strlen(real) < sizeof o->data) strcpy(o->data, real); /* eval from anywhere */
    if (!o->out[0]) {
        if (o->resume) return ag__train_fail(err, errlen, AG_ERR_ARG, "--resume needs --out (the run folder to continue)");
        default_out(o);
        ag__dist_bcast(o->out, sizeof o->out); /* rank 0's clock names the folder */
    }
    if (o->resume && o->init[0])
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--init starts a run from a file, --resume continues one: not both");
    int rc = ag__train_check_dataset(o, err, errlen);
    if (rc) return rc;
    if (ag__dist_rank() > 0) o->quiet = 1, o->profile = 0; /* rank 0 alone prints */
    snprintf(r->out, sizeof r->out, "%s", o->out);
    int folds = ag_run_data_folds(o, err, errlen);
    if (folds < 0 && o->fold >= 0) return AG_ERR_ARG; /* err says why the folder is no data set */
    if (folds < 0) folds = 0; /* opening the data will say what is wrong with it */
    if (folds && o->fold >= folds) return ag__train_fail(err, errlen, AG_ERR_ARG, "--fold %d: there are %d folds", o->fold, folds);
    if (!folds && o->fold >= 0)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--fold: %s is not a cross-validation data set (mr, subj, cr, mpqa)",
                    o->data[0] ? o->data : "the generated task");
    ag__step_profile profile = {.want = o->profile};
    bool anomaly = ag_anomaly(o->detect_anomaly); /* warm-up, steps and evaluations alike */
    bool flushed = ag_flush_denormals(strcmp(o->denormals, "keep") != 0); /* core.h: Adam+L2's subnormal weights */
    rc = train_folds(o, folds, deadline, &profile, r, err, errlen);
    if (!rc) ag__train_stop_agree(); /* a signal after the last step: every rank's command says so alike */
    ag_flush_denormals(flushed);
    ag_anomaly(anomaly);
    ag__profile_close(&profile, rc);
    r->seconds = ag__seconds() - t0;
    return rc;
}
