/* train.c - the training loop and what surrounds it: evaluation, the
 * step on either device, progress output, profiling, cross-validation
 * folds.  What a run keeps on disk (checkpoints, metrics files, the lock,
 * resuming) is run_folder.c's.
 *
 * One training step is zero_grad, forward, loss, backward, L2, clipping,
 * optimizer step, ag_step_end: everything per step comes from the step
 * arena and the batch buffers allocated once, so after a warm-up step on
 * the widest batch a step performs no heap allocation (the result reports
 * the count, and test_train checks it is 0).
 *
 * Reproducibility: the model's generator (initialisation, then dropout) is
 * the only state that evolves; each epoch's example order comes from a
 * generator seeded by (seed, epoch).  A checkpoint therefore holds all a
 * run needs to continue exactly - parameters, optimizer and schedule state,
 * the dropout generator, and the loop's counters - and resuming gives the
 * same parameters, bit for bit, as a run that never stopped.
 *
 * Under mpirun (dist.h) every rank runs this loop on its share of each
 * batch; the gradient allreduce makes their steps one process's, and rank
 * 0 alone writes and prints. */
#include "attngrad/train.h"
#include "internal.h"
#include "dist.h"
#include "run_folder.h"
#include "../graph/device.h"  /* the step's values stay on the device until one read */
#include "../optim/kernels.h" /* the step's gate and values */

#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- forward, loss, metrics ---------------------------------------------- */

/* Logits of a batch, or NULL with err set when the model refuses the batch
 * (e.g. a parse with a cycle). */
static ag_tensor *forward(ag_model *m, const ag_batch *b, bool training, char *err, size_t errlen) {
    ag_tensor *logits = ag_model_forward(m, b, training);
    if (!logits) ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot use this batch: %s", m->kind->name, ag_errmsg());
    return logits;
}

/* As ag_model_loss: mean cross-entropy over examples, LM over non-pad
 * targets, relatedness KL; NULL with err set for a batch it cannot score. */
static ag_tensor *loss_of(const ag_model *m, const ag_batch *b, ag_tensor *logits, char *err, size_t errlen) {
    ag_tensor *loss = ag_model_loss_of(m, b, logits);
    if (!loss) ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot score this batch: %s", m->kind->name, ag_errmsg());
    return loss;
}

/* The batch loss when the logits are not needed (ag_model_loss: the LM's
 * decoder is fused with its cross-entropy); NULL with err set. */
static ag_tensor *batch_loss(ag_model *m, const ag_batch *b, bool training, char *err, size_t errlen) {
    ag_tensor *loss = ag_model_loss(m, b, training);
    if (!loss) ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot use this batch: %s", m->kind->name, ag_errmsg());
    return loss;
}

static int argmax(const ag_real *row, int n) {
    int best = 0;
    for (int c = 1; c < n; c++)
        if (row[c] > row[best]) best = c;
    return best;
}

static int64_t count_targets(const ag_batch *b) {
    int64_t n = 0;
    for (int64_t i = 0; i < (int64_t)b->rows * b->width; i++) n += b->targets[i] != AG_PAD_ID;
    return n;
}

int ag_evaluate(ag_model *m, const ag_dataset *ds, const int64_t *idx, int64_t n, ag_batch *b, ag_metrics *out,
                char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    bool rel = m->cfg.task == AG_TASK_RELATEDNESS;
    /* relatedness: every predicted and gold score, for the correlations */
    double *pred = rel ? malloc(((size_t)n + 1) * sizeof *pred) : NULL, *gold = rel ? malloc(((size_t)n + 1) * sizeof *gold) : NULL;
    if (rel && (!pred || !gold)) {
        free(pred);
        free(gold);
        return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for %lld scores", (long long)n);
    }
    bool was = ag_set_grad_enabled(false);
    double loss_sum = 0;
    int64_t correct = 0, count = 0, first, mine; /* this rank's share of the examples (all in one process) */
    ag__dist_share(n, &first, &mine);
    int rc = 0;
    for (int64_t start = 0; start < mine && !rc; start += b->max_rows) {
        int32_t rows = (int32_t)(mine - start < b->max_rows ? mine - start : b->max_rows);
        if ((rc = ag_batch_fill(b, ds, idx + first + start, rows, err, errlen))) break;
        bool lm = m->cfg.task == AG_TASK_LM; /* its metrics need the loss alone */
        ag_tensor *logits = lm ? NULL : forward(m, b, false, err, errlen);
        ag_tensor *loss_t = lm ? batch_loss(m, b, false, err, errlen) : logits ? loss_of(m, b, logits, err, errlen) : NULL;
        if (!loss_t) {
            rc = AG_ERR_FORMAT;
            break;
        }
        double loss = ag_item(loss_t);
        if (m->cfg.task == AG_TASK_LM) {
            int64_t tokens = count_targets(b);
            loss_sum += loss * (double)tokens;
            count += tokens;
        } else if (rel) {
            const ag_real *values = ag_host_values(logits);
            for (int r = 0; r < rows; r++) {
                pred[first + count + r] = ag_relatedness_score(values + (int64_t)r * AG_RELATEDNESS_BINS);
                gold[first + count + r] = b->scores[r];
            }
            loss_sum += loss * rows;
            count += rows;
        } else {
            int K = logits->shape[1];
            const ag_real *values = ag_host_values(logits);
            for (int r = 0; r < rows; r++) correct += argmax(values + (int64_t)r * K, K) == b->labels[r];
            loss_sum += loss * rows;
            count += rows;
        }
        ag_step_end();
    }
    ag_step_end();
    ag_set_grad_enabled(was);
    if (rc) { /* with other ranks: the caller ends the job (ag__dist_abort) */
        free(pred);
        free(gold);
        return rc;
    }
    /* the shares' sums, and every prediction for the correlations */
    double sums[3] = {loss_sum, (double)correct, (double)count};
    ag__dist_sum(sums, 3);
    loss_sum = sums[0], correct = (int64_t)sums[1], count = (int64_t)sums[2];
    if (rel) ag__dist_gather_shares(pred, n), ag__dist_gather_shares(gold, n);
    out->examples = n;
    out->tokens = m->cfg.task == AG_TASK_LM ? count : 0;
    out->loss = count ? loss_sum / (double)count : 0;
    out->accuracy = m->cfg.task == AG_TASK_LM || rel || !count ? 0 : (double)correct / (double)count;
    out->perplexity = m->cfg.task == AG_TASK_LM ? exp(out->loss) : 0;
    if (rel) {
        out->pearson = ag_pearson(pred, gold, count);
        out->spearman = ag_spearman(pred, gold, count);
        out->mse = ag_mean_sq_error(pred, gold, count);
    }
    free(pred);
    free(gold);
    return rc;
}

/* Higher is better: accuracy, minus the perplexity of an LM, or the Pearson
 * r of relatedness (as Tai et al. select), where a constant prediction's
 * undefined r counts as the worst, -1. */
static double score(const ag_model *m, const ag_metrics *x) {
    if (m->cfg.task == AG_TASK_LM) return -x->perplexity;
    if (m->cfg.task == AG_TASK_RELATEDNESS) return isnan(x->pearson) ? -1 : x->pearson;
    return x->accuracy;
}

/* ---- one training step ------------------------------------------------------ */

typedef struct {
    ag_model model;
    ag_optimizer opt;
    ag_scheduler sched;
    ag_run_data data;
    ag_batch batch;
    ag_sampler sampler;
    double clip;
    ag__dist_grads grads; /* data-parallel: the flat buffer of the allreduce */
    ag_metrics best_dev, best_test; /* of the best checkpoint, once this process has evaluated it */
    bool have_best;
    ag_vectors vec;                 /* --embeddings of a fresh run: counts (rows freed once copied) */
    int64_t vec_covered, vec_tokens; /* training tokens with a vector, of all */
    ag__run_logs logs;              /* metrics.csv and metrics.jsonl, saved in every checkpoint */
} trainer;

/* What the trainer's checkpoints hold besides the run's counters. */
static ag__run_parts run_parts(trainer *t) {
    return (ag__run_parts){.params = &t->model.params, .opt = &t->opt, .sched = &t->sched, .rng = &t->model.rng,
                           .logs = &t->logs};
}

/* The run stops at the first non-finite value, before any checkpoint of
 * it is written: `what` happened at `step` (or in the evaluation after
 * epoch `epoch` when step < 0), with what to change; in_ops: an op made it
 * (the loss, a gradient), which anomaly mode would name. */
static int diverged(const trainer *t, int64_t step, int epoch, const char *what, bool in_ops, char *err,
                    size_t errlen) {
    char clip[48] = "off";
    if (t->clip > 0) snprintf(clip, sizeof clip, "%g", t->clip);
    char where[64];
    if (step >= 0) snprintf(where, sizeof where, "step %lld", (long long)step);
    else snprintf(where, sizeof where, "the evaluation after epoch %d", epoch);
    return ag__train_fail(err, errlen, AG_ERR_NONFINITE,
                         "training diverged at %s: %s; lower the learning rate (now %g, --optim %s) or clip the "
                         "gradient norm (--clip, now %s)%s", where, what, t->opt.lr, ag_optim_name(t->opt.cfg.kind), clip,
                         in_ops && !ag_anomaly_enabled() ? "; --detect-anomaly names the op that made the first inf or NaN" : "");
}

static int64_t batch_tokens(const ag_batch *b);

/* One step on t->batch, this rank's share of a global batch of
 * global_rows rows; *loss gets the global batch's loss (without the L2
 * term), *tokens its input tokens.  Fails if the model refuses the batch,
 * or when the loss, the global gradient norm or, after the update, the
 * parameters' norm is not finite; the gradients are the reduced ones, so
 * every rank stops at the same step.
 *
 * One path for both devices: the loss, the gradient's and the parameters'
 * sums of squares stay in the memory of the parameters' device until one
 * read after the update, which the device skips unless the loss and the
 * norm are finite (optim/kernels.h's gate).  On the GPU that is one wait a
 * step where reading each value when made costs three, and with CUDA
 * graphs the step is one segment.  Data-parallel ranks sum their losses on
 * the host first (the allreduce needs them there). */
static int train_step(trainer *t, int64_t step, int64_t global_rows, double *loss, double *tokens, char *err,
                      size_t errlen) {
    ag_model *m = &t->model;
    ag_device dev = t->opt.device;
    ag_params_zero_grad(&m->params);
    ag_tensor *out = NULL;
    if (t->batch.rows > 0 && !(out = batch_loss(m, &t->batch, true, err, errlen))) {
        ag_step_end();
        return AG_ERR_FORMAT;
    }
    *tokens = (double)batch_tokens(&t->batch);
    const ag_real *loss_there;
    ag_real global; /* data-parallel: the global loss, which the CPU reads in place */
    if (ag__dist_size() > 1) {
        double mine = out ? ag_item(out) : 0; /* a rank without rows joins the allreduce with zeros */
        double n_mine = !out ? 0 : m->cfg.task == AG_TASK_LM ? (double)count_targets(&t->batch) : t->batch.rows;
        if (out && isfinite(mine)) ag_backward(out);
        global = (ag_real)ag__dist_reduce_grads(&t->grads, &m->params, n_mine, mine, tokens);
        /* a rank without rows drew no dropout masks: it takes rank 0's generator */
        if (global_rows < ag__dist_size()) ag__dist_bcast(&m->rng, sizeof m->rng);
        loss_there = ag__step_copy_on(dev, &global, sizeof global); /* staged on the GPU */
    } else {
        ag_backward(out);
        loss_there = out->data;
    }
    if (m->cfg.l2 > 0) ag_l2_grad(&m->params, m->cfg.l2);
    const ag__grads_kernels *k = ag__grads_on("train step", dev);
    double *sq = ag__grad_sq_on(&m->params, t->clip, dev), *values = ag__step_alloc_on(dev, 4 * sizeof(double));
    k->step_gate(loss_there, sq, values + 3);
    ag__optim_step_gated(&t->opt, values + 3);
    k->step_values(loss_there, sq, ag__params_sq_on(&m->params, dev), values);
    ag__kernels_done("train step", dev);
    double host[3];
    ag__read_on(dev, host, values, sizeof host); /* the step's one wait */
    *loss = host[0];
    /* the update was skipped (the gate was NaN or inf) but counted when it
     * was launched: no update was made (Adam's bias correction and a
     * per-step rate follow opt.step) */
    if (!isfinite(host[0]) || !isfinite(host[1])) t->opt.step--;
    if (!isfinite(*loss)) {
        ag_step_end();
        char what[64];
        snprintf(what, sizeof what, "the training loss is %g", *loss);
        return diverged(t, step, 0, what, true, err, errlen);
    }
    bool in_ops = true; /* else the update made it */
    ag_status st = ag_check_grads_finite(&m->params, sqrt(host[1]));
    if (!st) in_ops = false, st = ag__check_params_norm(&m->params, sqrt(host[2]));
    ag_step_end();
    return st ? diverged(t, step, 0, ag_errmsg(), in_ops, err, errlen) : 0;
}

/* Metrics of a model that diverged in a way the steps did not show (the
 * LM's perplexity overflows to inf from a finite loss past 709) end the
 * run as a non-finite step does.  A relatedness r that is NaN is not one:
 * a constant prediction has no correlation. */
static int check_metrics(const trainer *t, const ag_metrics *x, const char *split, int epoch, char *err,
                         size_t errlen) {
    char what[128];
    if (t->model.cfg.task == AG_TASK_LM && !isfinite(x->perplexity))
        snprintf(what, sizeof what, "the %s perplexity is %g (loss %g)", split, x->perplexity, x->loss);
    else if (!isfinite(x->loss))
        snprintf(what, sizeof what, "the %s loss is %g", split, x->loss);
    else
        return 0;
    return diverged(t, -1, epoch, what, false, err, errlen);
}

/* A batch of `rows` copies of a sentence of w <unk> tokens, written straight
 * into the batch buffers (for warm-up: contents do not matter, shapes do). */
static void dummy_batch(ag_batch *b, int32_t rows, int32_t w) {
    int32_t width = b->opts.fixed_len ? b->opts.fixed_len : w;
    b->rows = rows;
    b->width = width;
    b->width_b = b->tokens_b ? width : 0;
    for (int32_t r = 0; r < rows; r++) {
        b->lengths[r] = w;
        b->labels[r] = 0;
        if (b->scores) b->scores[r] = 3; /* relatedness: any score in [1, 5] */
        if (b->lengths_b) b->lengths_b[r] = w;
        for (int32_t t = 0; t < width; t++) {
            int64_t k = (int64_t)r * width + t;
            int32_t tok = t < w ? AG_UNK_ID : AG_PAD_ID, head = t >= w ? AG_HEAD_PAD : t + 1 < w ? t + 1 : AG_HEAD_ROOT;
            int32_t bigram = t + 1 < w ? ag_bigram_id(tok, tok, b->opts.n_bigram) : 0;
            b->tokens[k] = tok;
            if (b->targets) b->targets[k] = tok;
            if (b->heads) b->heads[k] = head;
            if (b->bigrams) b->bigrams[k] = bigram;
            if (b->tokens_b) b->tokens_b[k] = tok;
            if (b->heads_b) b->heads_b[k] = head;
            if (b->bigrams_b) b->bigrams_b[k] = bigram;
        }
    }
}

/* Tokens of one side of an example as a batch row takes them, before any
 * cut (the LM's inputs stop before its last word). */
static int32_t row_len(const ag_dataset *ds, const ag_example *e, bool second) {
    return second ? e->len_b : ds->format == AG_FORMAT_LM ? e->len - 1 : e->len;
}

/* Example i of split s: its longer side. */
static int32_t example_len(const ag_run_data *d, int s, int64_t i) {
    const ag_dataset *ds = d->ds[s];
    const ag_example *e = &ds->ex[d->idx[s][i]];
    int32_t a = row_len(ds, e, false), b = ds->format == AG_FORMAT_SICK ? row_len(ds, e, true) : 0;
    return a > b ? a : b;
}

/* The longest sentence over every split (*split, *index; -1 when there is
 * none), and how many are longer than max_len (when > 0). */
static int64_t longest_sentence(const ag_run_data *d, int max_len, int *split, int64_t *index, int32_t *len) {
    int64_t cut = 0;
    *split = -1, *index = -1, *len = 0;
    for (int s = 0; s < AG_SPLITS; s++)
        for (int64_t i = 0; d->ds[s] && i < d->n[s]; i++) {
            int32_t n = example_len(d, s, i);
            cut += max_len > 0 && n > max_len;
            if (n > *len) *split = s, *index = i, *len = n;
        }
    return cut;
}

/* What the trainer is doing where a fatal error may end it, for the CLI's
 * message (ag__train_doing). */
static char doing[512];
const char *ag__train_doing(void) { return doing; }

/* occurs[w] for every width w <= hi a batch of the run's data can have:
 * a batch is as wide as its longest sentence (each side of a pair).  NULL
 * when out of memory: then every width is warmed up. */
static bool *batch_widths(const ag_run_data *d, int32_t hi) {
    bool *occurs = calloc((size_t)hi + 1, sizeof *occurs);
    for (int s = 0; s < AG_SPLITS; s++) {
        const ag_dataset *ds = d->ds[s];
        for (int64_t i = 0; occurs && ds && i < d->n[s]; i++) {
            const ag_example *e = &ds->ex[d->idx[s][i]];
            for (int side = 0; side < (ds->format == AG_FORMAT_SICK ? 2 : 1); side++) {
                int32_t n = row_len(ds, e, side);
                occurs[n < 1 ? 1 : n > hi ? hi : n] = true; /* a batch is never 0 wide */
            }
        }
    }
    return occurs;
}

/* A warm-up batch, for a fatal error's message: step memory grows with
 * the batch's width (squared, under attention), and the data's longest
 * sentence (`longest`, from longest_sentence) is what makes it wide. */
static void describe_batch(const trainer *t, int32_t rows, int32_t width, int split, int64_t i, int32_t len) {
    const ag_dataset *ds = split >= 0 ? t->data.ds[split] : NULL;
    const char *path = ds ? ag_dataset_path(ds) : NULL;
    int k = snprintf(doing, sizeof doing, "sizing step memory on %s, %d row%s of %d tokens",
                     rows > 1 ? "the largest batch the data can make" : "one sentence of each width", (int)rows,
                     rows == 1 ? "" : "s", (int)width);
    if (path && k > 0 && (size_t)k < sizeof doing)
        k += snprintf(doing + k, sizeof doing - (size_t)k, " (the longest sentence: %s line %lld, %d tokens)", path,
                      (long long)ds->ex[t->data.idx[split][i]].line, (int)len);
    if (!t->batch.opts.fixed_len && k > 0 && (size_t)k < sizeof doing)
        snprintf(doing + k, sizeof doing - (size_t)k, "; --max-len N cuts longer sentences");
}

/* Runs forward and backward once on every width a batch can have (cached
 * masks are per width) and once on the largest batch (the step arena and
 * the tape reach their high-water mark), so that the training steps after
 * it allocate nothing.  Only the widths the data has: a few long sentences
 * must not cost a step at every width up to theirs.  Parameters, gradients
 * and the dropout generator are left as they were. */
static int warm_up(trainer *t, char *err, size_t errlen) {
    ag_model *m = &t->model;
    ag_batch *b = &t->batch;
    ag_rng saved = m->rng;
    int32_t lo = b->opts.fixed_len ? b->opts.fixed_len : 1, hi = b->opts.fixed_len ? lo : t->data.max_width;
    bool *occurs = b->opts.fixed_len ? NULL : batch_widths(&t->data, hi);
    int split;
    int64_t longest;
    int32_t len;
    longest_sentence(&t->data, 0, &split, &longest, &len);
    for (int32_t w = lo; w <= hi + 1; w++) {
        bool full = w == hi + 1;
        if (!full && occurs && !occurs[w]) continue;
        /* a sentence too long for memory fails here, at its own width, before the full batch */
        describe_batch(t, full ? b->max_rows : 1, full ? hi : w, split, longest, len);
        dummy_batch(b, full ? b->max_rows : 1, full ? hi : w);
        ag_tensor *loss = batch_loss(m, b, true, err, errlen);
        if (!loss) {
            free(occurs);
            return AG_ERR_FORMAT;
        }
        ag_backward(loss);
        ag_step_end();
    }
    free(occurs);
    doing[0] = 0;
    ag_params_zero_grad(&m->params);
    m->rng = saved;
    return 0;
}

/* ---- progress output --------------------------------------------------------- */

typedef struct {
    int mode;            /* 0 none, 1 plain lines, 2 a live bar */
    FILE *f;
    double t_start, t_last;
    int64_t tokens, steps, n_batches, every;
    double loss_sum;
    int epoch, epochs;
} progress;

static void progress_start(progress *p, const char *mode, int epoch, int epochs, int64_t n_batches) {
    p->f = stderr;
    p->mode = !strcmp(mode, "none") ? 0 : !strcmp(mode, "lines") ? 1 : !strcmp(mode, "bar") ? 2 : isatty(2) ? 2 : 1;
    p->t_start = p->t_last = now();
    p->tokens = p->steps = 0;
    p->loss_sum = 0;
    p->epoch = epoch;
    p->epochs = epochs;
    p->n_batches = n_batches;
    p->every = n_batches / 10 > 1 ? n_batches / 10 : 1;
}

static int64_t batch_tokens(const ag_batch *b) {
    int64_t n = 0;
    for (int32_t r = 0; r < b->rows; r++) n += b->lengths[r] + (b->lengths_b ? b->lengths_b[r] : 0);
    return n;
}

static void progress_step(progress *p, int64_t done, int64_t tokens, double loss) {
    p->tokens += tokens;
    p->steps++;
    p->loss_sum += loss;
    if (!p->mode) return;
    double t = now(), rate = p->tokens / (t - p->t_start + 1e-9);
    if (p->mode == 2 && (t - p->t_last >= 0.1 || done == p->n_batches)) {
        enum { W = 24 };
        char bar[W + 1];
        int fill = (int)(W * done / p->n_batches);
        for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
        bar[W] = 0;
        fprintf(p->f, "\r\033[Kepoch %d/%d [%s] %lld/%lld  %.0f tok/s  loss %.4f", p->epoch, p->epochs, bar,
                (long long)done, (long long)p->n_batches, rate, p->loss_sum / p->steps);
        fflush(p->f);
        p->t_last = t;
    } else if (p->mode == 1 && (done % p->every == 0 || done == p->n_batches)) {
        fprintf(p->f, "epoch %d/%d  step %lld/%lld  %.0f tok/s  loss %.4f\n", p->epoch, p->epochs, (long long)done,
                (long long)p->n_batches, rate, p->loss_sum / p->steps);
        fflush(p->f);
    }
}

static void progress_end(progress *p) {
    if (p->mode == 2) fprintf(p->f, "\r\033[K");
    fflush(p->f);
}

/* ---- --profile K: the op table of K training steps --------------------------- */

/* One per command, across folds.  Profiling starts before the command's
 * training step AG_PROFILE_WARMUP + 1 and reports once, after K steps or at
 * the end of the epoch under way, whichever comes first: the evaluation
 * that follows an epoch is not training. */
typedef struct {
    int want;      /* K; 0 = off */
    int64_t taken; /* training steps so far */
    bool on;
} step_profile;

static void profile_step_begin(step_profile *sp) {
    if (sp->want > 0 && sp->taken == AG_PROFILE_WARMUP) {
        ag_profile_start();
        sp->on = true;
    }
}

/* Stops the profiler and prints its table to stderr. */
static void profile_report(step_profile *sp) {
    int steps = (int)(sp->taken - AG_PROFILE_WARMUP);
    ag_profile_stop();
    sp->on = false;
    fprintf(stderr, "\nop profile of training step%s %d", steps > 1 ? "s" : "", AG_PROFILE_WARMUP + 1);
    if (steps > 1) fprintf(stderr, "-%lld", (long long)sp->taken);
    if (steps < sp->want) fprintf(stderr, " (%d of the %d asked for: the epoch or the run ended first)", steps, sp->want);
    fprintf(stderr, "\n");
    ag_profile_report(stderr, steps, AG_PROFILE_TOP);
    fprintf(stderr, "\n");
    fflush(stderr);
}

static void profile_step_end(step_profile *sp) {
    sp->taken++;
    if (sp->on && sp->taken == AG_PROFILE_WARMUP + sp->want) profile_report(sp);
}

static void profile_epoch_end(step_profile *sp) {
    if (sp->on) profile_report(sp);
}

/* After the command: the profiler off (an error may have cut a profiled
 * step short), and a word when the run was too short to profile. */
static void profile_close(step_profile *sp, int rc) {
    if (sp->on) ag_profile_stop();
    else if (sp->want > 0 && sp->taken <= AG_PROFILE_WARMUP && !rc)
        fprintf(stderr, "--profile: no op table: the run ended after %lld training steps, and profiling starts after %d\n",
                (long long)sp->taken, AG_PROFILE_WARMUP);
}

/* ---- an epoch's line ---------------------------------------------------------- */

static void print_metrics(FILE *f, const char *name, ag_task task, const ag_metrics *x) {
    if (task == AG_TASK_LM) fprintf(f, "%s ppl %.2f", name, x->perplexity);
    else if (task == AG_TASK_RELATEDNESS)
        fprintf(f, "%s r %.4f rho %.4f mse %.4f (loss %.4f)", name, x->pearson, x->spearman, x->mse, x->loss);
    else fprintf(f, "%s acc %.2f%% (loss %.4f)", name, 100 * x->accuracy, x->loss);
}

static void print_epoch(const ag__epoch_row *e, int epochs, ag_task task) {
    printf("epoch %d/%d%s  loss %.4f  ", e->epoch, epochs, e->partial ? " (stopped mid-epoch)" : "", e->train_loss);
    print_metrics(stdout, "dev", task, &e->dev);
    if (e->has_test) {
        printf("  ");
        print_metrics(stdout, "test", task, &e->test);
    }
    printf("  lr %.3g  %.1fs%s\n", e->lr, e->seconds, e->best ? "  *" : "");
    fflush(stdout);
}

/* ---- setting a run up ----------------------------------------------------------- */

typedef struct {
    ag_metrics dev, test;
    bool valid;          /* has metrics: a limit may stop a run before any evaluation */
    bool has_test, stopped, time_up;
    double first_loss, initial_loss, last_loss, seconds;
    int64_t steps, allocs;
    int epochs;
} fold_result;

static void trainer_free(trainer *t) {
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
static int read_vectors(trainer *t, ag_train_opts *o, char *err, size_t errlen) {
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
static int apply_vectors(trainer *t, const ag_train_opts *o, char *err, size_t errlen) {
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
static int model_refused(const trainer *t, const ag_train_opts *o, char *err, size_t errlen) {
    if (!t->vec.dim) return ag__train_fail(err, errlen, AG_ERR_ARG, "%s", ag_errmsg());
    return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s cannot take the %d-dimensional vectors of %s (its own dim is "
                         "%d): %s; a --dim above %d it can take keeps the vectors in its first %d columns",
                         o->model, t->vec.dim, o->embeddings, ag_model_defaults(ag_model_find(o->model)).dim,
                         ag_errmsg(), t->vec.dim, t->vec.dim);
}

static void print_vectors(const trainer *t, const ag_train_opts *o) {
    const ag_vectors *v = &t->vec;
    if (!v->dim) {
        if (o->embeddings[0] && o->resume) printf("  embeddings: from the checkpoint%s\n", o->freeze_embeddings ? " (frozen)" : "");
        else if (o->freeze_embeddings) printf("  embeddings: random, frozen\n");
        return;
    }
    int32_t words = v->vocab - 2, found = v->n_exact + v->n_lower; /* all but <pad> and <unk> */
    printf("  embeddings %s (%s, %dd%s): %d of %d words found", o->embeddings, ag_vec_format_name(v->format), v->dim,
           o->freeze_embeddings ? ", frozen" : "", found, words);
    if (v->n_lower) printf(" (%d lower-cased)", v->n_lower);
    printf(", %.1f%% of %lld training tokens; the other %d words from U(-0.05, 0.05)\n",
           t->vec_tokens ? 100.0 * (double)t->vec_covered / (double)t->vec_tokens : 0.0, (long long)t->vec_tokens,
           words - found);
    if (v->duplicates) /* each keeps its first vector, as gensim */
        printf("  note: %s repeats %lld word%s of the vocabulary, the first vector kept: %s\n", o->embeddings,
               (long long)v->duplicates, v->duplicates == 1 ? "" : "s", v->first_warning);
    if (v->spaced) /* "at name@domain.com" in glove.840B: no token can be that */
        printf("  note: %lld vector%s skipped: a word with spaces\n", (long long)v->spaced, v->spaced == 1 ? "" : "s");
}

/* Data, model, optimizer, schedule, batch and sampler of one fold.  The
 * model must fit the checkpoint `ckpt` when one is given (--resume's
 * last.safetensors, or --init's file, strictly: no tensor left over):
 * checked from names and shapes before the model is allocated. */
static int trainer_init(trainer *t, ag_train_opts *o, int fold, ag_vocab *vocab, const char *ckpt, char *err,
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
        ag_sched_parse(o->sched, &sc) || ag_sched_init(&t->sched, &sc))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "%s", ag_errmsg());
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

static void print_header(const trainer *t, const ag_train_opts *o, const char *out) {
    const ag_run_data *d = &t->data;
    printf("%s on %s: %lld train / %lld dev / %lld test examples, vocab %d", o->model, d->name,
           (long long)d->n[AG_SPLIT_TRAIN], (long long)d->n[AG_SPLIT_DEV], (long long)d->n[AG_SPLIT_TEST],
           ag_vocab_size(d->vocab));
    if (d->task == AG_TASK_RELATEDNESS) printf(", relatedness scores 1-%d", AG_RELATEDNESS_BINS);
    else if (d->task != AG_TASK_LM) printf(", %d classes", o->classes);
    printf("\n  %lld parameters (d=%d), %s, batch %d, keep %g, l2 %g, schedule %s\n  run folder %s\n",
           (long long)ag_params_numel(&t->model.params), o->dim, o->optim, o->batch, o->keep, o->l2, o->sched, out);
    print_vectors(t, o);
    if (d->sets[0].stats.skipped)
        printf("  note: %lld malformed lines skipped (%s)\n", (long long)d->sets[0].stats.skipped,
               d->sets[0].stats.first_warning);
    for (int s = 0; s < AG_SPLITS; s++) /* each file once: a CV run's splits share sets[0] */
        if (d->sets[s].stats.not_utf8)
            printf("  note: %lld line%s not UTF-8, read as bytes (the first: %s): such words miss UTF-8 pretrained "
                   "vectors\n", (long long)d->sets[s].stats.not_utf8, d->sets[s].stats.not_utf8 == 1 ? " is" : "s are",
                   d->sets[s].stats.first_not_utf8);
    if (!t->batch.opts.heads && o->parses[0] && strcmp(o->parses, "none"))
        printf("  note: model %s reads no parse: --parses %s ignored\n", o->model, o->parses);
    if (t->batch.opts.heads)
        printf(d->parses[0] ? "  parses: %s\n"
                            : "  note: %s reads a dependency parse, but the data has none (no conllu/ folder beside it, "
                              "or --parses none): the chain i -> i+1 stands in\n",
               d->parses[0] ? d->parses : o->model);
    int split;
    int64_t i, cut = longest_sentence(d, o->max_len, &split, &i, &(int32_t){0});
    if (cut && !t->batch.opts.fixed_len)
        printf("  note: --max-len %d cuts %lld sentences (the longest: %d tokens)\n", o->max_len, (long long)cut,
               example_len(d, split, i));
    fflush(stdout);
}

/* ---- the loop of one fold ---------------------------------------------------------- */

typedef struct {
    ag_train_opts *o;
    const char *out;
    double deadline;     /* monotonic seconds; 0 = none */
    bool quiet;
    step_profile *profile;
} fold_ctx;

/* Has the wall-clock limit passed?  Rank 0's clock decides for every rank,
 * so that all stop after the same step. */
static bool past(double deadline) {
    if (deadline <= 0) return false;
    char up = now() >= deadline;
    ag__dist_bcast(&up, 1);
    return up;
}

/* Set from a signal handler (ag_train_request_stop): the run stops after
 * the step in progress, as at --max-steps, and saves where it is. */
static volatile sig_atomic_t stop_signal;
void ag_train_request_stop(int signo) { stop_signal = signo ? signo : -1; }
int ag_train_stop_requested(void) { return stop_signal; }

static bool limit_reached(const fold_ctx *c, const ag__run_state *s) {
    return (c->o->max_steps > 0 && s->step >= c->o->max_steps) || past(c->deadline) || stop_signal;
}

static void epoch_rng(ag_data_rng *r, uint64_t seed, int epoch) {
    ag_data_rng_seed(r, seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(epoch + 1)));
}

/* Evaluates after an epoch (or a stop mid-epoch), steps the schedule, keeps
 * the best checkpoint, saves the last one and logs the metrics. */
static int end_of_epoch(const fold_ctx *c, trainer *t, ag__run_state *s, double train_loss, bool partial, char *err,
                        size_t errlen) {
    ag_run_data *d = &t->data;
    ag__epoch_row e = {.epoch = s->epoch + partial, .step = s->step, .train_loss = train_loss, .partial = partial,
                   .has_test = d->ds[AG_SPLIT_TEST] != NULL};
    int rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_DEV], d->idx[AG_SPLIT_DEV], d->n[AG_SPLIT_DEV], &t->batch, &e.dev,
                         err, errlen);
    if (!rc && e.has_test)
        rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_TEST], d->idx[AG_SPLIT_TEST], d->n[AG_SPLIT_TEST], &t->batch,
                         &e.test, err, errlen);
    if (!rc) rc = check_metrics(t, &e.dev, "dev", e.epoch, err, errlen);
    if (!rc && e.has_test) rc = check_metrics(t, &e.test, "test", e.epoch, err, errlen);
    if (rc) return rc;
    double sc = score(&t->model, &e.dev);
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
    char path[AG_PATH_MAX + 32];
    ag__run_parts parts = run_parts(t);
    if (e.best) {
        ag__path_join(path, sizeof path, c->out, "best.safetensors");
        if ((rc = ag__run_save(path, c->o, s, &parts, err, errlen))) return rc;
        ag__crash_point("best");
    }
    ag__path_join(path, sizeof path, c->out, "last.safetensors");
    if ((rc = ag__run_save(path, c->o, s, &parts, err, errlen))) return rc;
    ag__crash_point("last");
    if ((rc = ag__run_logs_write(c->out, &t->logs, err, errlen))) return rc;
    ag__crash_point("jsonl");
    if (!c->quiet) print_epoch(&e, c->o->epochs, t->data.task);
    return 0;
}

/* Trains until the epochs are done, early stopping or a limit; r gets the
 * loss and step counts. */
static int train_loop(const fold_ctx *c, trainer *t, ag__run_state *s, fold_result *r, char *err, size_t errlen) {
    int64_t n_batches = t->sampler.n_batches, first_n = 0;
    double first_sum = 0;
    r->initial_loss = r->last_loss = NAN; /* no step yet */
    while (s->epoch < c->o->epochs && !s->stopped && !limit_reached(c, s)) {
        ag_data_rng r_epoch;
        epoch_rng(&r_epoch, (uint64_t)c->o->seed, s->epoch);
        ag_sampler_epoch(&t->sampler, &r_epoch);
        progress p;
        progress_start(&p, c->quiet ? "none" : c->o->progress, s->epoch + 1, c->o->epochs, n_batches);
        double t0 = now();
        bool stop = false;
        while (s->batch < n_batches && !stop) {
            int32_t rows;
            const int64_t *idx = ag_sampler_batch(&t->sampler, s->batch, &rows);
            int64_t first, mine; /* this rank's rows of the global batch (all of them in one process) */
            ag__dist_share(rows, &first, &mine);
            ag_set_dropout_row_base(first);
            int rc = ag_batch_fill(&t->batch, t->data.ds[AG_SPLIT_TRAIN], idx + first, (int32_t)mine, err, errlen);
            if (rc) return rc;
            int64_t allocs = ag_memstats().allocs;
            double loss, tokens;
            profile_step_begin(c->profile);
            if ((rc = train_step(t, s->step + 1, rows, &loss, &tokens, err, errlen))) return rc;
            r->allocs += ag_memstats().allocs - allocs;
            profile_step_end(c->profile);
            s->step++;
            s->batch++;
            if (first_n == 0) r->initial_loss = loss;
            if (first_n < 10) first_sum += loss, first_n++;
            progress_step(&p, s->batch, (int64_t)tokens, loss);
            stop = limit_reached(c, s);
        }
        progress_end(&p);
        profile_epoch_end(c->profile);
        s->seconds += now() - t0;
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
static int evaluate_best(const fold_ctx *c, trainer *t, fold_result *r, char *err, size_t errlen) {
    r->has_test = t->data.ds[AG_SPLIT_TEST] != NULL;
    if (t->have_best) {
        r->dev = t->best_dev, r->test = t->best_test, r->valid = true;
        return 0;
    }
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, c->out, "best.safetensors");
    if (!ag__path_exists(path)) /* only a limit reached before the first step gets here */
        return r->time_up ? 0 : ag__train_fail(err, errlen, AG_ERR_IO, "%s: no best checkpoint", path);
    r->valid = true;
    if (ag_checkpoint_load(path, &t->model.params, NULL, NULL, NULL))
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
    ag_run_data *d = &t->data;
    int rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_DEV], d->idx[AG_SPLIT_DEV], d->n[AG_SPLIT_DEV], &t->batch, &r->dev,
                         err, errlen);
    if (!rc && r->has_test)
        rc = ag_evaluate(&t->model, d->ds[AG_SPLIT_TEST], d->idx[AG_SPLIT_TEST], d->n[AG_SPLIT_TEST], &t->batch,
                         &r->test, err, errlen);
    return rc;
}


static int train_fold(ag_train_opts *o, int fold, const char *out, double deadline, step_profile *profile,
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

    trainer t;
    ag__run_parts parts = run_parts(&t);
    ag__run_state s = {.best = -INFINITY};
    fold_ctx c = {.o = o, .out = out, .deadline = deadline, .quiet = o->quiet, .profile = profile};
    ag__path_join(path, sizeof path, out, "last.safetensors");
    rc = trainer_init(&t, o, fold, vocab, resume ? path : o->init[0] ? o->init : NULL, err, errlen);
    ag__path_join(path, sizeof path, out, "vocab.txt");
    if (!rc && !resume && writer) rc = ag__run_folder_make(out, o->quiet, &lock, err, errlen);
    if (!rc && writer) rc = ag__run_folder_clean(out, o->quiet, err, errlen);
    if (!rc && !resume && writer) rc = ag_vocab_save(t.data.vocab, path, err, errlen);
    if (!rc && resume) rc = ag__run_resume(out, t.data.vocab, &parts, &s, err, errlen);
    /* early stopping is judged again by this command's --patience, as its
     * --epochs extends a run: a larger patience continues a run that stopped
     * early, exactly as a run with that patience from the start would have */
    if (!rc && resume) s.stopped = o->patience > 0 && s.bad_epochs >= o->patience;
    if (!rc) ag__dist_bcast_params(&t.model.params); /* every rank starts from rank 0's parameters */
    if (!rc && !o->quiet) print_header(&t, o, out);
    if (!rc) rc = warm_up(&t, err, errlen);
    double reduce0 = ag__dist_reduce_seconds(NULL), train0 = s.seconds;
    if (!rc) rc = train_loop(&c, &t, &s, r, err, errlen);
    if (!rc && !o->quiet && ag__dist_size() > 1) /* what the ranks cost each other */
        printf("  %d ranks: %.2f s of %.2f s training in the gradient allreduce (%s; waits for the slowest rank "
               "included)\n", ag__dist_size(), ag__dist_reduce_seconds(NULL) - reduce0, s.seconds - train0,
               ag__dist_reduce_path());
    if (!rc) rc = evaluate_best(&c, &t, r, err, errlen);
    r->steps = s.step;
    r->epochs = s.epoch;
    r->seconds = s.seconds;
    trainer_free(&t);
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
    r->stopped_early |= f->stopped;
    r->time_up |= f->time_up;
    r->folds = k + 1;
}

/* The run, or every fold of a cross-validation data set, into r. */
static int train_folds(ag_train_opts *o, int folds, double deadline, step_profile *profile, ag_train_result *r,
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

int ag_train(ag_train_opts *o, ag_train_result *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    double t0 = now(), deadline = o->max_minutes > 0 ? t0 + 60 * o->max_minutes : 0;
    char real[PATH_MAX];
    if (o->data[0] && realpath(o->data, real) && strlen(real) < sizeof o->data) strcpy(o->data, real); /* eval from anywhere */
    if (!o->out[0]) {
        if (o->resume) return ag__train_fail(err, errlen, AG_ERR_ARG, "--resume needs --out (the run folder to continue)");
        default_out(o);
        ag__dist_bcast(o->out, sizeof o->out); /* rank 0's clock names the folder */
    }
    if (o->resume && o->init[0])
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--init starts a run from a file, --resume continues one: not both");
    if (ag__dist_rank() > 0) o->quiet = 1, o->profile = 0; /* rank 0 alone prints */
    snprintf(r->out, sizeof r->out, "%s", o->out);
    int folds = ag_run_data_folds(o, err, errlen);
    if (folds < 0 && o->fold >= 0) return AG_ERR_ARG; /* err says why the folder is no data set */
    if (folds < 0) folds = 0; /* opening the data will say what is wrong with it */
    if (folds && o->fold >= folds) return ag__train_fail(err, errlen, AG_ERR_ARG, "--fold %d: there are %d folds", o->fold, folds);
    if (!folds && o->fold >= 0)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--fold: %s is not a cross-validation data set (mr, subj, cr, mpqa)",
                    o->data[0] ? o->data : "the generated task");
    step_profile profile = {.want = o->profile};
    bool anomaly = ag_anomaly(o->detect_anomaly); /* warm-up, steps and evaluations alike */
    int rc = train_folds(o, folds, deadline, &profile, r, err, errlen);
    ag_anomaly(anomaly);
    profile_close(&profile, rc);
    r->seconds = now() - t0;
    return rc;
}
