/* step.c - one training step on either device, and the warm-up that
 * sizes step memory before the first.
 *
 * One training step is zero_grad, forward, loss, backward, L2, clipping,
 * optimizer step, ag_step_end (the update zeroes the gradients it has read,
 * so the next step's zero_grad is done without a pass of its own unless
 * the gate skipped the update): everything per step comes from the step
 * arena and the batch buffers allocated once, so after a warm-up step on
 * the widest batch a step performs no heap allocation (the result reports
 * the count, and test_train checks it is 0). */
#include "trainer.h"
#include "../distributed/dist.h"
#include "../graph/device.h"  /* the step's values stay on the device until one read */
#include "../optim/kernels.h" /* the step's gate and values */
#include "../ops/elementwise.h" /* fill: the parts' loss sum starts at 0 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the model's calls, with the trainer's error convention ---------------- */

/* Logits of a batch, or NULL with err set when the model refuses the batch
 * (e.g. a parse with a cycle). */
ag_tensor *ag__train_forward(ag_model *m, const ag_batch *b, bool training, char *err, size_t errlen) {
    ag_tensor *logits = ag_model_forward(m, b, training);
    if (!logits) ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot use this batch: %s", m->kind->name, ag_errmsg());
    return logits;
}

/* As ag_model_loss: mean cross-entropy over examples, LM over non-pad
 * targets, relatedness KL; NULL with err set for a batch it cannot score. */
ag_tensor *ag__train_loss_of(const ag_model *m, const ag_batch *b, ag_tensor *logits, char *err, size_t errlen) {
    ag_tensor *loss = ag_model_loss_of(m, b, logits);
    if (!loss) ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot score this batch: %s", m->kind->name, ag_errmsg());
    return loss;
}

/* The batch loss when the logits are not needed (ag_model_loss: the LM's
 * decoder is fused with its cross-entropy); NULL with err set. */
ag_tensor *ag__train_batch_loss(ag_model *m, const ag_batch *b, bool training, char *err, size_t errlen) {
    ag_tensor *loss = ag_model_loss(m, b, training);
    if (!loss) ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot use this batch: %s", m->kind->name, ag_errmsg());
    return loss;
}

int64_t ag__count_targets(const ag_batch *b) {
    int64_t n = 0;
    for (int64_t i = 0; i < (int64_t)b->rows * b->width; i++) n += b->targets[i] != AG_PAD_ID;
    return n;
}

/* The run stops at the first non-finite value, before any checkpoint of
 * it is written: `what` happened at `step` (or in the evaluation after
 * epoch `epoch` when step < 0), with what to change; in_ops: an op made it
 * (the loss, a gradient), which anomaly mode would name. */
int ag__train_diverged(const ag__trainer *t, int64_t step, int epoch, const char *what, bool in_ops, char *err,
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

static int64_t batch_tokens(const ag_batch *b) {
    int64_t n = 0;
    for (int32_t r = 0; r < b->rows; r++) n += b->lengths[r] + (b->lengths_b ? b->lengths_b[r] : 0);
    return n;
}

/* ---- a rank's share of a batch, in parts (--micro-batch) ------------------- */

/* The parts a share of `rows` rows runs in: as many as the batch buffers
 * (--micro-batch rows) need, as even as ag__dist_split cuts them; 0
 * without rows. */
static int part_count(const ag__trainer *t, int64_t rows) {
    int64_t most = t->batch.max_rows;
    return (int)((rows + most - 1) / most);
}

/* Part j of `parts` of the share idx[0..rows) into the batch buffers.  Its
 * rows are global rows first + its offset: dropout's masks are drawn per
 * global row, so a part draws what its rows would in one batch. */
static int fill_part(ag__trainer *t, const int64_t *idx, int64_t first, int64_t rows, int j, int parts, char *err,
                     size_t errlen) {
    int64_t at, n;
    ag__dist_split(rows, j, parts, &at, &n);
    ag_set_dropout_row_base(first + at);
    return ag_batch_fill(&t->batch, t->data.ds[AG_SPLIT_TRAIN], idx + at, (int32_t)n, err, errlen);
}

/* What a batch's mean loss is over: its rows, or the LM's targets. */
static double loss_weight(const ag_model *m, const ag_batch *b) {
    return m->cfg.task == AG_TASK_LM ? (double)ag__count_targets(b) : b->rows;
}

/* Forward and backward of the share idx[0..rows) in parts, each part's
 * tape and step memory rewound (ag_rewind) before the next, so the step
 * memory is one part's, in one step (the GPU's staging of uploads turns
 * over once a step: no wait between parts).  Each
 * part's loss gradient is seeded with its weight's share of the whole, so
 * the gradients add up to those of the share's mean loss; *weight gets
 * what that mean is over, *tokens the input tokens, and the mean: with
 * on_device, t->loss_sum on the step's device, summed there (no wait), else
 * *loss, read on the host (one part: its loss as it is).
 * Every part starts from the dropout generator the step began with: the
 * parts draw one batch's masks. */
static int forward_backward_parts(ag__trainer *t, const int64_t *idx, int64_t first, int64_t rows, bool on_device,
                                  double *loss, double *weight, double *tokens, char *err, size_t errlen) {
    ag_model *m = &t->model;
    ag_device dev = t->opt.device;
    int parts = part_count(t, rows), rc;
    double total = (double)rows, sum = 0;
    if (on_device) ag__elementwise_on("train step", dev)->fill(t->loss_sum, 0, 1);
    ag_mark_t part_start = ag_mark(); /* each part's tape and memory go back to here */
    if (m->cfg.task == AG_TASK_LM && parts > 1) /* its parts weigh their targets: counted first */
        for (int j = total = 0; j < parts; j++) {
            if ((rc = fill_part(t, idx, first, rows, j, parts, err, errlen))) return rc;
            total += loss_weight(m, &t->batch);
        }
    ag_rng start = m->rng;
    *tokens = 0;
    for (int j = 0; j < parts; j++) {
        m->rng = start;
        if ((rc = fill_part(t, idx, first, rows, j, parts, err, errlen))) return rc;
        ag_tensor *out = ag__train_batch_loss(m, &t->batch, true, err, errlen);
        if (!out) {
            ag_step_end();
            return AG_ERR_FORMAT;
        }
        double w = loss_weight(m, &t->batch);
        if (parts == 1) total = w; /* the LM's targets were not counted first */
        *tokens += (double)batch_tokens(&t->batch);
        if (on_device) { /* a loss that is not finite reaches the gate, which skips the update */
            ag_real share = (ag_real)(w / total);
            ag__grads_on("train step", dev)->axpy(share, out->data, t->loss_sum, 1);
            ag_backward_seeded(out, &share);
            ag_rewind(part_start);
            continue;
        }
        double part = ag_item(out);
        if (parts == 1) sum = part; /* the loss as it is: no rounding of w * part / w */
        else sum += w * part;
        if (isfinite(part) && parts == 1) ag_backward(out);
        else if (isfinite(part)) ag_backward_seeded(out, &(ag_real){(ag_real)(w / total)});
        ag_rewind(part_start); /* the gradients are the parameters': they stay */
    }
    *loss = parts > 1 ? sum / total : sum;
    *weight = parts > 0 ? total : 0;
    return 0;
}

/* One step on the rows idx[first..first + rows) of a global batch of
 * global_rows rows (this rank's share; all of them in one process); *loss
 * gets the global batch's loss (without the L2 term), *tokens its input
 * tokens, t->step_lr the rate of its update and t->step_grad_norm the
 * global gradient norm before clipping.  Fails if the model refuses the
 * batch, or when the loss, the global gradient norm or, after the update,
 * the parameters' norm is not finite; the gradients are the reduced ones, so
 * every rank stops at the same step.
 *
 * One path for both devices: the loss, the gradient's and the parameters'
 * sums of squares stay in the memory of the parameters' device until one
 * read after the update, which the device skips unless the loss and the
 * norm are finite (optim/kernels.h's gate).  On the GPU that is one wait a
 * step where reading each value when made costs three, and with CUDA
 * graphs the step is one segment.  A data-parallel rank reads its share's
 * loss before the allreduce, which needs it on the host: once, its parts'
 * losses summed on the device first. */
int ag__train_step(ag__trainer *t, int64_t step, const int64_t *idx, int64_t first, int64_t rows, int64_t global_rows,
                   double *loss, double *tokens, char *err, size_t errlen) {
    ag_model *m = &t->model;
    ag_device dev = t->opt.device;
    ag__crash_point("step"); /* a test's signal (AG_SIGNAL_AT) comes before this step's allreduce */
    if (!t->grads_zero) ag_params_zero_grad(&m->params);
    t->grads_zero = false;
    const ag_real *loss_there;
    ag_real global; /* a share in parts, data-parallel: the global loss, which the CPU reads in place */
    int rc;
    if (ag__dist_size() == 1 && part_count(t, rows) == 1) { /* one batch: its loss stays where it was made */
        ag_tensor *out;
        if ((rc = fill_part(t, idx + first, first, rows, 0, 1, err, errlen))) return rc;
        if (!(out = ag__train_batch_loss(m, &t->batch, true, err, errlen))) {
            ag_step_end();
            return AG_ERR_FORMAT;
        }
        *tokens = (double)batch_tokens(&t->batch);
        ag_backward(out);
        loss_there = out->data;
    } else if (ag__dist_size() == 1) { /* parts: their losses summed on the device */
        double unused, n_mine;
        if ((rc = forward_backward_parts(t, idx + first, first, rows, true, &unused, &n_mine, tokens, err, errlen)))
            return rc;
        loss_there = t->loss_sum;
    } else {
        double mine, n_mine; /* a rank without rows joins the allreduce with zeros */
        bool summed = t->loss_sum != NULL; /* in parts: their sum, on the device, goes into the allreduce from there */
        if ((rc = forward_backward_parts(t, idx + first, first, rows, summed, &mine, &n_mine, tokens, err, errlen)))
            return rc;
        /* a request to stop rides in the same allreduce: any rank's stops
         * every rank after this step, at no cost of its own */
        int stop = ag__train_stop_mine();
        global = (ag_real)ag__dist_reduce_grads(&t->grads, &m->params, n_mine, mine, summed ? t->loss_sum : NULL,
                                                tokens, &stop);
        ag__train_stop_agreed(stop);
        /* a rank without rows drew no dropout masks: it takes rank 0's generator */
        if (global_rows < ag__dist_size()) ag__dist_bcast(&m->rng, sizeof m->rng);
        loss_there = ag__step_copy_on(dev, &global, sizeof global); /* staged on the GPU */
    }
    if (m->cfg.l2 > 0) ag_l2_grad(&m->params, m->cfg.l2);
    const ag__grads_kernels *k = ag__grads_on("train step", dev);
    double *sq = ag__grad_sq_on(&m->params, t->clip, dev), *values = ag__step_alloc_on(dev, 4 * sizeof(double));
    k->step_gate(loss_there, sq, values + 3);
    /* The update zeroes the gradients once read (the next step's
     * zero_grad), where it updates every one of the model's parameters:
     * the frozen ones, which it skips, get no gradient. */
    bool cleared = false;
    double base_lr = t->opt.lr; /* --sched's rate: what checkpoints and the epoch's schedule keep */
    if (t->has_lr_steps) ag_lr_steps_apply(&t->lr_steps, &t->opt, base_lr);
    double *psq = t->opt.params == &m->params
                      ? ag__optim_step_gated_params_sq(&t->opt, values + 3, dev, true, &cleared)
                      : NULL;
    if (!psq) { /* an optimizer over another list: its update, then the model's squares */
        ag__optim_step_gated(&t->opt, values + 3);
        psq = ag__params_sq_on(&m->params, dev);
    }
    t->step_lr = t->opt.lr;
    t->opt.lr = base_lr;
    k->step_values(loss_there, sq, psq, values);
    ag__kernels_done("train step", dev);
    double host[3];
    ag__read_on(dev, host, values, sizeof host); /* the step's one wait */
    *loss = host[0];
    t->step_grad_norm = sqrt(host[1]);
    /* the update was skipped (the gate was NaN or inf) but counted when it
     * was launched: no update was made (Adam's bias correction and a
     * per-step rate follow opt.step) */
    if (!isfinite(host[0]) || !isfinite(host[1])) ag__optim_step_not_taken(&t->opt);
    else t->grads_zero = cleared; /* the gate let the update, and its zeroing, run */
    if (!isfinite(*loss)) {
        ag_step_end();
        char what[64];
        snprintf(what, sizeof what, "the training loss is %g", *loss);
        return ag__train_diverged(t, step, 0, what, true, err, errlen);
    }
    bool in_ops = true; /* else the update made it */
    ag_status st = ag_check_grads_finite(&m->params, sqrt(host[1]));
    if (!st) in_ops = false, st = ag__check_params_norm(&m->params, sqrt(host[2]));
    ag_step_end();
    return st ? ag__train_diverged(t, step, 0, ag_errmsg(), in_ops, err, errlen) : 0;
}

/* ---- warm-up ---------------------------------------------------------------- */

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
int32_t ag__example_len(const ag_run_data *d, int s, int64_t i) {
    const ag_dataset *ds = d->ds[s];
    const ag_example *e = &ds->ex[d->idx[s][i]];
    int32_t a = row_len(ds, e, false), b = ds->format == AG_FORMAT_SICK ? row_len(ds, e, true) : 0;
    return a > b ? a : b;
}

/* The longest sentence over every split (*split, *index; -1 when there is
 * none), and how many are longer than max_len (when > 0). */
int64_t ag__longest_sentence(const ag_run_data *d, int max_len, int *split, int64_t *index, int32_t *len) {
    int64_t cut = 0;
    *split = -1, *index = -1, *len = 0;
    for (int s = 0; s < AG_SPLITS; s++)
        for (int64_t i = 0; d->ds[s] && i < d->n[s]; i++) {
            int32_t n = ag__example_len(d, s, i);
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
static void describe_batch(const ag__trainer *t, int32_t rows, int32_t width, int split, int64_t i, int32_t len) {
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
int ag__train_warm_up(ag__trainer *t, char *err, size_t errlen) {
    ag_model *m = &t->model;
    ag_batch *b = &t->batch;
    ag_rng saved = m->rng;
    int32_t lo = b->opts.fixed_len ? b->opts.fixed_len : 1, hi = b->opts.fixed_len ? lo : t->data.max_width;
    bool *occurs = b->opts.fixed_len ? NULL : batch_widths(&t->data, hi);
    int split;
    int64_t longest;
    int32_t len;
    ag__longest_sentence(&t->data, 0, &split, &longest, &len);
    for (int32_t w = lo; w <= hi + 1; w++) {
        bool full = w == hi + 1;
        if (!full && occurs && !occurs[w]) continue;
        /* a sentence too long for memory fails here, at its own width, before the full batch */
        describe_batch(t, full ? b->max_rows : 1, full ? hi : w, split, longest, len);
        dummy_batch(b, full ? b->max_rows : 1, full ? hi : w);
        ag_tensor *loss = ag__train_batch_loss(m, b, true, err, errlen);
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
