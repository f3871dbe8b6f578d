/* optim_experiments.c - trains one model with several optimizers on the
 * same data, initial values and batch order, and writes the curves.
 *
 *   optim_experiments --optim sgd:lr=0.1 --optim adam:lr=1e-3 \
 *                     --optim adadelta:lr=0.5,rho=0.95 --epochs 20 --out runs/opt
 *
 *   optim_experiments --model mtsa --data DATA/trec --optim adam:lr=1e-3 \
 *                     --optim adadelta:lr=0.5,rho=0.95 --epochs 10 --out runs/mtsa-trec
 *
 * writes runs/opt_steps.csv   optimizer,step,epoch,lr,loss        (every step)
 *        runs/opt_epochs.csv  optimizer,epoch,step,lr,train_loss,val_loss,val_<metric>,seconds
 *        runs/opt_loss.svg    training loss per step (log scale unless --linear)
 *        runs/opt_val_loss.svg, runs/opt_<metric>.svg   per epoch
 * Epoch 0 in the epochs file is the untrained model.  Same seed and thread
 * count give the same losses, bit for bit.
 *
 * The model is a small interface (exp_model below): anything that makes its
 * parameters and data from a seed, gives a training loss for a batch of
 * example indices and evaluates a metric on held-out data can be compared.
 * Two implement it: a 2-layer MLP classifier on a generated task (the
 * default), and any registered model (--model) on the trainer's data (its
 * generated task, or a benchmark with --data), built from the trainer
 * library (include/attngrad/train.h): its data splits and vocabulary, the model's
 * loss and its evaluation, so the numbers are those `attngrad train` gets;
 * --plugin FILE.so first loads the kinds and optimizer rules a plugin
 * registers, as `attngrad --plugin` does.  Each epoch prints a progress line; --max-minutes bounds
 * the whole comparison, each optimizer getting an equal share of it. */
#include "attngrad/train.h"
#include "../train/internal.h"
#include "../graph/internal.h" /* ag__malloc: sizes too big for memory end with a message (fatal_exit), not a crash */
#include "plot_curves.h"
#include "../data/atomic_file.h" /* the CSVs replace the old ones whole, or not at all */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* The model interface                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
    int dim, classes, hidden, n_train, n_val;
    bool relu;
    double label_noise;
} task_options;

typedef struct registered_setup registered_setup;

typedef struct {
    int epochs, batch;
    uint64_t seed;
    double seconds_per_run;        /* --max-minutes over the runs; 0 = no limit */
    double clip, l2, smooth;
    bool linear;
    const char *out, *sched;
    ag_lr_steps lr_steps;          /* --lr-steps: each update's rate is the --sched rate times its factor */
    bool has_lr_steps;
    task_options task;             /* the MLP's */
    const registered_setup *setup; /* --model's: data and config shared by every run */
    ag_device device;              /* --device: where each run's parameters and steps live */
} settings;

typedef struct {
    char name[288];          /* "mlp", "mpsan/elu_score on trec" */
    const char *metric;  /* the per-epoch metric on held-out data, e.g. "accuracy" */
    bool metric_higher_is_better;
    /* Makes the data (or takes the shared data) and the parameters,
     * initialised from s->seed; *params gets the parameter list. */
    void *(*create)(const settings *s, ag_rng *rng, ag_params **params);
    int (*train_size)(void *self);
    /* Mean training loss of examples rows[0..n), recorded on the tape;
     * NULL with ag_errmsg() set when the model refuses the batch. */
    ag_tensor *(*loss)(void *self, const int *rows, int n);
    /* Mean loss and the metric on the held-out examples, nothing recorded;
     * nonzero with ag_errmsg() set on failure. */
    int (*evaluate)(void *self, double *loss, double *metric);
    void (*destroy)(void *self);
} exp_model;

/* ------------------------------------------------------------------------ */
/* A 2-layer MLP classifier on a generated task                              */
/* ------------------------------------------------------------------------ */

/* Inputs x ~ N(0, I) in `dim` dimensions; the label is the argmax of a
 * random 2-layer tanh "teacher" network, flipped to a random class with
 * probability label_noise.  Not linearly separable, learnable by the MLP. */
typedef struct {
    task_options o;
    ag_real *x;          /* [n_train + n_val, dim]: training rows first */
    int32_t *y;
    int32_t *labels;     /* scratch for a batch's labels (no allocation per step) */
    ag_params ps;
    ag_tensor *w1, *b1, *w2, *b2;
} mlp;

static void make_task(mlp *m, ag_rng *rng) {
    const task_options *o = &m->o;
    const int n = o->n_train + o->n_val, th = 24;
    double *tw1 = ag__malloc(sizeof(double) * (size_t)o->dim * th);
    double *tw2 = ag__malloc(sizeof(double) * (size_t)th * o->classes);
    for (int i = 0; i < o->dim * th; i++) tw1[i] = 2.0 * ag_rng_normal(rng) / sqrt(o->dim);
    for (int i = 0; i < th * o->classes; i++) tw2[i] = ag_rng_normal(rng);
    m->x = ag__malloc(sizeof(ag_real) * (size_t)n * o->dim);
    m->y = ag__malloc(sizeof(int32_t) * (size_t)n);
    m->labels = ag__malloc(sizeof(int32_t) * (size_t)n);
    double h[24];
    for (int r = 0; r < n; r++) {
        ag_real *x = m->x + (size_t)r * o->dim;
        for (int j = 0; j < o->dim; j++) x[j] = (ag_real)ag_rng_normal(rng);
        for (int k = 0; k < th; k++) {
            double s = 0;
            for (int j = 0; j < o->dim; j++) s += x[j] * tw1[j * th + k];
            h[k] = tanh(s);
        }
        int best = 0;
        double best_v = -INFINITY;
        for (int c = 0; c < o->classes; c++) {
            double s = 0;
            for (int k = 0; k < th; k++) s += h[k] * tw2[k * o->classes + c];
            if (s > best_v) best_v = s, best = c;
        }
        if (ag_rng_uniform(rng) < o->label_noise) best = (int)(ag_rng_next(rng) % (uint64_t)o->classes);
        m->y[r] = best;
    }
    free(tw1);
    free(tw2);
}

static void *mlp_create(const settings *s, ag_rng *rng, ag_params **params) {
    const task_options *o = &s->task;
    mlp *m = ag__calloc(1, sizeof *m);
    m->o = *o;
    make_task(m, rng);
    ag_params *ps = &m->ps;
    m->w1 = ag_param(ps, "l1.weight", 2, (int[]){o->dim, o->hidden});
    m->b1 = ag_param(ps, "l1.bias", 1, (int[]){o->hidden});
    m->w2 = ag_param(ps, "l2.weight", 2, (int[]){o->hidden, o->classes});
    m->b2 = ag_param(ps, "l2.bias", 1, (int[]){o->classes});
    ag_init_glorot_uniform(m->w1, 1.0, rng); /* as docs/models.md: Glorot weights, zero biases */
    ag_init_glorot_uniform(m->w2, 1.0, rng);
    *params = ps;
    return m;
}

static int mlp_train_size(void *self) { return ((mlp *)self)->o.n_train; }

static ag_tensor *mlp_logits(mlp *m, const int *rows, int first, int n) {
    ag_tensor *x = ag_tensor_new_host(2, (int[]){n, m->o.dim}); /* the batch's rows, then where the step runs */
    for (int i = 0; i < n; i++) {
        int r = rows ? rows[i] : first + i;
        memcpy(x->data + (size_t)i * m->o.dim, m->x + (size_t)r * m->o.dim, sizeof(ag_real) * (size_t)m->o.dim);
    }
    x = ag_to(x, ag_get_device());
    ag_tensor *pre = ag_linear(x, m->w1, m->b1);
    return ag_linear(m->o.relu ? ag_relu(pre) : ag_tanh(pre), m->w2, m->b2);
}

static ag_tensor *mlp_loss(void *self, const int *rows, int n) {
    mlp *m = self;
    for (int i = 0; i < n; i++) m->labels[i] = m->y[rows[i]];
    return ag_cross_entropy(mlp_logits(m, rows, 0, n), m->labels, -1);
}

/* Held-out loss and accuracy, in chunks so memory stays small. */
static int mlp_evaluate(void *self, double *loss, double *accuracy) {
    mlp *m = self;
    bool was = ag_set_grad_enabled(false);
    double sum = 0;
    int correct = 0;
    const int chunk = 512;
    for (int first = m->o.n_train; first < m->o.n_train + m->o.n_val; first += chunk) {
        int n = m->o.n_train + m->o.n_val - first < chunk ? m->o.n_train + m->o.n_val - first : chunk;
        ag_mark_t mark = ag_mark();
        ag_tensor *logits = mlp_logits(m, NULL, first, n);
        sum += n * (double)ag_item(ag_cross_entropy(logits, m->y + first, -1));
        const ag_real *values = ag_host_values(logits);
        for (int i = 0; i < n; i++) {
            const ag_real *row = values + (size_t)i * m->o.classes;
            int best = 0;
            for (int c = 1; c < m->o.classes; c++)
                if (row[c] > row[best]) best = c;
            correct += best == m->y[first + i];
        }
        ag_rewind(mark);
    }
    ag_set_grad_enabled(was);
    *loss = sum / m->o.n_val;
    *accuracy = (double)correct / m->o.n_val;
    return 0;
}

static void mlp_destroy(void *self) {
    mlp *m = self;
    free(m->x);
    free(m->y);
    free(m->labels);
    ag_params_free(&m->ps);
    free(m);
}

static const exp_model mlp_model = {"mlp", "accuracy", true, mlp_create, mlp_train_size, mlp_loss, mlp_evaluate,
                                    mlp_destroy};

/* ------------------------------------------------------------------------ */
/* Any registered model on the trainer's data (--model)                      */
/* ------------------------------------------------------------------------ */

/* Opened once, shared by every run: the splits and vocabulary, and the
 * model's config resolved as `attngrad train` resolves it. */
struct registered_setup {
    ag_train_opts o;
    ag_run_data data;
    ag_model_config cfg;
};

typedef struct {
    const registered_setup *setup;
    ag_model m;
    ag_batch batch;   /* for training and evaluation: as wide as the widest example */
    int64_t *idx;     /* the dataset indices of a training batch */
} registered;

/* Loads the data of o and resolves the model's config on it, as the
 * trainer does before a run (task, vocabulary size and classes from the data). */
static int registered_setup_open(registered_setup *r, char *err, size_t errlen) {
    ag_train_opts *o = &r->o;
    int rc = ag__train_check_dataset(o, err, errlen);
    if (rc) return rc;
    rc = ag_run_data_open(o, o->fold >= 0 ? o->fold : 0, NULL, &r->data, err, errlen);
    if (rc) return rc;
    const ag_run_data *d = &r->data;
    snprintf(o->task, sizeof o->task, "%s", ag_task_name(d->task)); /* relatedness too */
    if (d->lowercase) o->lowercase = 1;
    o->vocab = ag_vocab_size(d->vocab);
    if (d->task != AG_TASK_LM) o->classes = d->classes > 2 ? d->classes : 2;
    if ((rc = ag_train_resolve(o, &r->cfg, err, errlen))) return rc;
    if (!d->ds[AG_SPLIT_DEV] || d->n[AG_SPLIT_DEV] == 0 || d->n[AG_SPLIT_TRAIN] == 0) {
        snprintf(err, errlen, "%s: the comparison needs training and dev examples", d->name);
        return AG_ERR_ARG;
    }
    return 0;
}

static void *registered_create(const settings *s, ag_rng *rng, ag_params **params) {
    (void)rng; /* the model draws its initial values and dropout from cfg.seed, the same in every run */
    registered *r = ag__calloc(1, sizeof *r);
    r->setup = s->setup;
    const ag_run_data *d = &s->setup->data;
    (void)ag_model_init(&r->m, ag_model_find(s->setup->o.model), &s->setup->cfg); /* checked by the probe in main */
    ag_batch_opts bo = ag_run_batch_opts(&r->m, &s->setup->o, d->max_width); /* --max-len as train cuts */
    char err[512];
    r->idx = ag__malloc(sizeof *r->idx * (size_t)s->batch);
    if (ag_batch_alloc(&r->batch, d->ds[AG_SPLIT_TRAIN], s->batch, &bo, err, sizeof err)) {
        fprintf(stderr, "optim_experiments: %s\n", err);
        exit(1);
    }
    *params = &r->m.params;
    return r;
}

static int registered_train_size(void *self) { return (int)((registered *)self)->setup->data.n[AG_SPLIT_TRAIN]; }

static ag_tensor *registered_loss(void *self, const int *rows, int n) {
    registered *r = self;
    const ag_run_data *d = &r->setup->data;
    for (int i = 0; i < n; i++) r->idx[i] = d->idx[AG_SPLIT_TRAIN][rows[i]];
    char err[512];
    if (ag_batch_fill(&r->batch, d->ds[AG_SPLIT_TRAIN], r->idx, n, err, sizeof err)) {
        ag_fail(AG_ERR_FORMAT, "%s", err);
        return NULL;
    }
    return ag_model_loss(&r->m, &r->batch, true);
}

/* Dev loss and accuracy (LM: perplexity), as `attngrad train` reports them. */
static int registered_evaluate(void *self, double *loss, double *metric) {
    registered *r = self;
    const ag_run_data *d = &r->setup->data;
    ag_metrics x;
    char err[512];
    if (ag_evaluate(&r->m, d->ds[AG_SPLIT_DEV], d->idx[AG_SPLIT_DEV], d->n[AG_SPLIT_DEV], &r->batch, &x, err,
                    sizeof err))
        return ag_fail(AG_ERR_FORMAT, "%s", err);
    *loss = x.loss;
    *metric = d->task == AG_TASK_LM ? x.perplexity : x.accuracy;
    return 0;
}

static void registered_destroy(void *self) {
    registered *r = self;
    ag_batch_free(&r->batch);
    ag_model_free(&r->m);
    free(r->idx);
    free(r);
}

/* ------------------------------------------------------------------------ */
/* Runs and their records                                                    */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *spec;            /* the optimizer as the user wrote it */
    char csv_name[256];          /* the same, quoted for CSV (specs contain commas) */
    ag_optim_config cfg;
    double *step_x, *step_loss;  /* per step */
    int steps;
    double *epoch_x, *val_loss, *metric; /* per epoch, epoch 0 included */
    int epochs;
    int diverged_at;             /* step of the first non-finite loss, gradient or parameter, or 0 */
    char diverged[320];          /* what was not finite (ag_check_*_finite's message) */
    bool time_up;                /* its share of --max-minutes ran out */
    double seconds;
} run;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One optimizer from scratch: same seed, so same data, initial values and
 * batch order as every other run. */
static int train_one(const exp_model *model, const settings *s, run *r, FILE *steps_csv, FILE *epochs_csv) {
    ag_params *ps;
    ag_rng rng, order;
    ag_rng_seed(&rng, s->seed);
    ag_rng_seed(&order, s->seed + 0x9e3779b97f4a7c15ULL);
    void *self = model->create(s, &rng, &ps);
    if (s->device == AG_CUDA) { /* before the optimizer: its state follows the parameters */
        ag_params_to(ps, AG_CUDA);
        ag_set_device(AG_CUDA);
    }
    ag_optimizer opt;
    ag_scheduler sched;
    ag_sched_config sc;
    if (ag_optim_init(&opt, ps, &r->cfg) || ag_sched_parse(s->sched, &sc) || ag_sched_init(&sched, &sc)) {
        fprintf(stderr, "optim_experiments: %s\n", ag_errmsg());
        model->destroy(self);
        ag_set_device(AG_CPU);
        return 1;
    }
    const int n = model->train_size(self), per_epoch = (n + s->batch - 1) / s->batch;
    int *perm = ag__malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) perm[i] = i;
    r->step_x = ag__malloc(sizeof(double) * (size_t)per_epoch * s->epochs);
    r->step_loss = ag__malloc(sizeof(double) * (size_t)per_epoch * s->epochs);
    r->epoch_x = ag__malloc(sizeof(double) * (size_t)(s->epochs + 1));
    r->val_loss = ag__malloc(sizeof(double) * (size_t)(s->epochs + 1));
    r->metric = ag__malloc(sizeof(double) * (size_t)(s->epochs + 1));
    double t0 = now();
    int rc = 0;

    for (int epoch = 0; epoch <= s->epochs && !r->diverged_at && !rc; epoch++) {
        double sum = 0;
        int count = 0;
        if (epoch > 0) {
            for (int i = n - 1; i > 0; i--) { /* Fisher-Yates, from the order generator */
                int j = (int)(ag_rng_next(&order) % (uint64_t)(i + 1)), t = perm[i];
                perm[i] = perm[j], perm[j] = t;
            }
            for (int b = 0; b < n && !r->diverged_at && !r->time_up; b += s->batch) {
                int rows = n - b < s->batch ? n - b : s->batch;
                double step_lr = opt.lr; /* the rate this step ran at: --lr-steps' factor included */
                ag_tensor *loss = model->loss(self, perm + b, rows);
                if (!loss) {
                    rc = 1;
                    break;
                }
                ag_params_zero_grad(ps);
                ag_backward(loss);
                if (s->l2 > 0) ag_l2_grad(ps, s->l2);
                /* the checks attngrad train makes: a diverged optimizer stops
                 * its own run, reported as diverged, and the others go on */
                double l = ag_item(loss), norm = s->clip > 0 ? ag_clip_grad_norm(ps, s->clip) : ag_grad_norm(ps);
                ag_status st = isfinite(l) ? ag_check_grads_finite(ps, norm) : ag_fail(AG_ERR_NONFINITE, "the loss is %g", l);
                if (!st) {
                    double base_lr = opt.lr; /* --sched's rate, which the epoch's schedule keeps */
                    if (s->has_lr_steps) ag_lr_steps_apply(&s->lr_steps, &opt, base_lr);
                    step_lr = opt.lr;
                    ag_optim_step(&opt);
                    opt.lr = base_lr;
                    st = ag_check_params_finite(ps, NULL);
                }
                ag_step_end();
                r->step_x[r->steps] = r->steps + 1;
                r->step_loss[r->steps++] = l;
                fprintf(steps_csv, "%s,%d,%d,%.9g,%.9g\n", r->csv_name, r->steps, epoch, step_lr, l);
                if (st) {
                    r->diverged_at = r->steps;
                    snprintf(r->diverged, sizeof r->diverged, "%s", ag_errmsg());
                }
                sum += l, count++;
                /* checked per step, so one long epoch cannot overrun the share */
                if (s->seconds_per_run > 0 && now() - t0 >= s->seconds_per_run) r->time_up = true;
            }
        }
        double val_loss, metric;
        bool averaged = !rc && ag_optim_swap_average(&opt); /* ema=, swa= (else lookahead=): the average (the slow weights) is validated */
        if (!rc) rc = model->evaluate(self, &val_loss, &metric);
        if (averaged) ag_optim_swap_average(&opt);
        if (rc) {
            ag_step_end();
            fprintf(stderr, "optim_experiments: %s: %s\n", r->spec, ag_errmsg());
            break;
        }
        ag_step_end();
        r->epoch_x[r->epochs] = epoch;
        r->val_loss[r->epochs] = val_loss;
        r->metric[r->epochs++] = metric;
        if (!r->diverged_at && (!isfinite(val_loss) || !isfinite(metric))) { /* an LM's perplexity past exp(709) */
            r->diverged_at = r->steps > 0 ? r->steps : 1;
            snprintf(r->diverged, sizeof r->diverged, "after epoch %d the validation %s is %g (loss %g)", epoch,
                     model->metric, metric, val_loss);
        }
        double lr = opt.lr;
        /* plateau:mode=max watches the metric (accuracy), as attngrad train's dev score; min the loss */
        if (epoch > 0) ag_sched_step(&sched, &opt, sc.mode_max ? metric : val_loss);
        fprintf(epochs_csv, "%s,%d,%d,%.9g,%.9g,%.9g,%.9g,%.3f\n", r->csv_name, epoch, r->steps, lr,
                count ? sum / count : NAN, val_loss, metric, now() - t0);
        /* progress as it goes: a long comparison shows each epoch, not only each finished optimizer */
        if (epoch == 0)
            printf("  %s untrained: val loss %.5f, val %s %.4f\n", r->spec, val_loss, model->metric, metric);
        else
            printf("  %s epoch %d/%d: %d steps, train loss %.5f, val loss %.5f, val %s %.4f (%.1f s)%s\n", r->spec,
                   epoch, s->epochs, r->steps, count ? sum / count : NAN, val_loss, model->metric, metric, now() - t0,
                   r->time_up ? ", time share used" : "");
        fflush(stdout);
        if (r->time_up) break;
    }
    r->seconds = now() - t0;
    free(perm);
    ag_optim_free(&opt);
    model->destroy(self);
    ag_set_device(AG_CPU);
    return rc ? 1 : 0;
}

/* Exponential moving average with bias correction (as TensorBoard smooths). */
static void smooth(const double *y, int n, double beta, double *out) {
    double avg = 0, weight = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            out[i] = y[i];
            continue;
        }
        avg = beta * avg + (1 - beta) * y[i];
        weight = beta * weight + (1 - beta);
        out[i] = avg / weight;
    }
}

static int write_plots(const exp_model *model, const settings *s, run *runs, int n) {
    char path[1024], title[256];
    plot_series *series = ag__calloc((size_t)(2 * n), sizeof *series);
    double **smoothed = ag__calloc((size_t)n, sizeof *smoothed);
    int rc = 0;
    /* training loss per step: the raw curve faint, its moving average bold */
    for (int i = 0; i < n; i++) {
        smoothed[i] = ag__malloc(sizeof(double) * (size_t)(runs[i].steps ? runs[i].steps : 1));
        smooth(runs[i].step_loss, runs[i].steps, s->smooth, smoothed[i]);
        series[i] = (plot_series){NULL, runs[i].step_x, runs[i].step_loss, runs[i].steps, i, 1.0, 0.25};
        series[n + i] = (plot_series){runs[i].spec, runs[i].step_x, smoothed[i], runs[i].steps, i, 2.0, 1.0};
    }
    snprintf(title, sizeof title, "Training loss (%s, batch %d, moving average %.2g)", model->name, s->batch, s->smooth);
    snprintf(path, sizeof path, "%s_loss.svg", s->out);
    plot_spec loss = {title, "step", "cross-entropy", !s->linear, 0, 0, s->smooth > 0 ? series : series + n,
                      s->smooth > 0 ? 2 * n : n};
    if (s->smooth <= 0)
        for (int i = 0; i < n; i++) series[n + i].y = runs[i].step_loss;
    rc |= plot_svg(&loss, path);

    for (int i = 0; i < n; i++) series[i] = (plot_series){runs[i].spec, runs[i].epoch_x, runs[i].val_loss, runs[i].epochs, i, 2.0, 1.0};
    snprintf(title, sizeof title, "Validation loss (%s)", model->name);
    snprintf(path, sizeof path, "%s_val_loss.svg", s->out);
    rc |= plot_svg(&(plot_spec){title, "epoch", "cross-entropy", !s->linear, 0, 0, series, n}, path);

    for (int i = 0; i < n; i++) series[i].y = runs[i].metric;
    snprintf(title, sizeof title, "Validation %s (%s)", model->metric, model->name);
    snprintf(path, sizeof path, "%s_%s.svg", s->out, model->metric);
    rc |= plot_svg(&(plot_spec){title, "epoch", model->metric, false, 0, 0, series, n}, path);
    for (int i = 0; i < n; i++) free(smoothed[i]);
    free(smoothed);
    free(series);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Command line                                                              */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: optim_experiments [options] [--optim SPEC]...\n"
            "Trains the same model with each optimizer (same data, initial values and batch\n"
            "order) and writes PREFIX_steps.csv, PREFIX_epochs.csv and SVG plots.\n"
            "  --optim SPEC     an optimizer, repeatable: sgd:lr=0.1,momentum=0.9  adam:lr=1e-3\n"
            "                   adamw:lr=1e-3,weight_decay=0.01  adadelta:lr=0.5,rho=0.95\n"
            "                   adagrad:lr=0.05  rmsprop:lr=1e-3,momentum=0.9,centered=1  muon:lr=1e-3\n"
            "                   adafactor:lr=1e-2, or a plugin's\n"
            "                   rule after --plugin (examples/lion.c: lion:lr=1e-4,weight_decay=0.1)\n"
            "                   (default: those three: sgd:lr=0.1 adam:lr=1e-3 adadelta:lr=0.5,rho=0.95)\n"
            "  --sched SPEC     schedule for every run, stepped each epoch on the validation loss\n"
            "                   (plateau:mode=max: on the validation metric): constant (default),\n"
            "                   step:step_size=10,gamma=0.5, exponential:gamma=0.9, plateau:factor=0.5,patience=2\n"
            "  --lr-steps SPEC  a per-step factor on --sched's rate: cosine:warmup=100,total=2000,min_ratio=0.1,\n"
            "                   linear:total=1000, inv_sqrt:warmup=4000 (the steps CSV's lr column is the rate used)\n"
            "  --epochs N       epochs (20)            --batch N     batch size (32; --model: the model's)\n"
            "  --seed N         data, initial values and batch order (1)\n"
            "  --clip X         clip the global gradient norm at X (off; --model: the model's)\n"
            "  --l2 X           L2 penalty X * sum 1/2 |W|^2 over weight matrices (0; --model: the model's)\n"
            "  --smooth B       moving-average factor for the per-step loss plot (0.98; 0 = raw)\n"
            "  --linear         linear y axis for the loss plots (log by default)\n"
            "  --out PREFIX     output prefix (optim)\n"
            "  --threads N      the engine's threads (0: one per core, the default)\n"
            "  --denormals HOW  flush (default: subnormal floats computed as 0, as `attngrad train`) or keep\n"
            "  --device D       cpu (default), cuda or cuda:N: each run's parameters, optimizer and steps on a GPU\n"
            "  --max-minutes M  time for the whole comparison: each optimizer stops after M / count minutes\n"
            "                   (at a step's end; that epoch is evaluated where it stopped)\n"
            "  --plugin FILE    first option(s): load the model kinds and optimizer rules a shared object registers\n"
            "The model: a 2-layer MLP on a generated task by default,\n"
            "  --hidden N       hidden units (64)      --act tanh|relu (tanh)\n"
            "  --dim N          input dimensions (10)  --classes N   (4)\n"
            "  --train N        training examples (4000)   --val N  held-out examples (1000)\n"
            "  --noise P        label noise (0.05)\n"
            "or a registered model on the trainer's data (dev split for validation):\n"
            "  --model NAME     any registered kind (`attngrad models` lists them; a plugin's after --plugin)\n"
            "  with the options of `attngrad train` for the data and the model's sizes: --data PATH\n"
            "  (none: the generated task), --dataset, --format, --task, --synth-n, --lowercase,\n"
            "  --min-count, --fold, --folds, --dev-frac, --dim, --hidden, --heads, --layers,\n"
            "  --fixed-len, --bigrams, --keep, --flags, --attention\n");
}

/* "a,b" -> "\"a,b\"", inner quotes doubled (RFC 4180). */
static void csv_quote(const char *s, char *out, size_t n) {
    size_t k = 0;
    out[k++] = '"';
    for (; *s && k + 3 < n; s++) {
        if (*s == '"') out[k++] = '"';
        out[k++] = *s;
    }
    out[k++] = '"';
    out[k] = 0;
}

static bool parse_number(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || !*v || *end || errno || !(x >= lo && x <= hi)) {
        fprintf(stderr, "optim_experiments: %s needs a number in [%g, %g], got '%s'\n", flag, lo, hi, v ? v : "");
        return false;
    }
    *out = x;
    return true;
}

/* Whether v is `second` rather than `first`, the two values flag takes;
 * false, after a message naming both, for anything else. */
static bool parse_choice(const char *flag, const char *v, const char *first, const char *second, bool *is_second) {
    if (!v || (strcmp(v, first) && strcmp(v, second))) {
        fprintf(stderr, "optim_experiments: %s is %s or %s, got '%s'\n", flag, first, second, v ? v : "");
        return false;
    }
    *is_second = !strcmp(v, second);
    return true;
}

/* The CSV files, written whole or not at all (data/atomic_file.h): a
 * comparison stopped before its end (Ctrl-C, a closed pipe) leaves the
 * previous comparison's files as they were, beside its plots.  NULL with
 * a message naming the file and why. */
static FILE *open_csv(ag__atomic_file *a, const char *path) {
    int e = ag__atomic_open(a, path);
    if (e) fprintf(stderr, "optim_experiments: cannot write %s: %s\n", path, strerror(e));
    return e ? NULL : a->f;
}

/* Nonzero, with the message, when a row never reached the file: a full disk
 * often shows only here, when the buffered rows are written. */
static int close_csv(ag__atomic_file *a) {
    int e = ag__atomic_close(a);
    if (e) fprintf(stderr, "optim_experiments: cannot write %s: %s\n", a->path, strerror(e));
    return e != 0;
}

/* A programmer error (e.g. sizes a model cannot take: --heads not dividing
 * --dim) ends the program with its message rather than with abort(). */
static void fatal_exit(const char *msg) {
    fprintf(stderr, "optim_experiments: %s\n", msg);
    exit(1);
}

/* Options of `attngrad train` that --model passes on: the data and the
 * model's sizes.  The loop's own (epochs, batch, seed, clip, l2, optim,
 * sched, out) are this tool's; stopping and run-folder options do not apply. */
static bool trainer_option(const char *key, int *takes_value) {
    static const char *const not_here[] = {"patience", "max-steps", "max-minutes", "resume", "force",
                                           "progress", "quiet", "threads", "denormals", "model", "init",
                                           "profile", "cuda-graphs", "lr-steps"};
    for (size_t i = 0; i < sizeof not_here / sizeof *not_here; i++)
        if (!strcmp(key, not_here[i])) return false;
    return ag_train_option_info(key, AG_CMD_TRAIN, takes_value);
}

/* The MLP's own options, refused with --model (--dim and --hidden then size the model). */
static bool is_mlp_option(const char *arg) {
    static const char *const mlp_only[] = {"--act", "--noise", "--classes", "--train", "--val"};
    for (size_t i = 0; i < sizeof mlp_only / sizeof *mlp_only; i++)
        if (!strcmp(arg, mlp_only[i])) return true;
    return false;
}

/* The --plugin FILE options before the others, loaded in order; returns
 * how many arguments they took, or -1 after printing why one failed. */
static int load_plugins(int argc, char **argv) {
    int i = 1;
    for (; i < argc && !strcmp(argv[i], "--plugin"); i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "optim_experiments: --plugin needs a file (a shared object that registers model kinds "
                    "or optimizer rules)\n");
            return -1;
        }
        if (ag_model_load_plugin(argv[i + 1])) {
            fprintf(stderr, "optim_experiments: %s\n", ag_errmsg());
            return -1;
        }
    }
    return i - 1;
}

int main(int argc, char **argv) {
    settings s = {.epochs = 20, .batch = 0, .seed = 1, .clip = -1, .l2 = -1, .smooth = 0.98, .out = "optim",
                  .sched = "constant",
                  .task = {.dim = 10, .classes = 4, .hidden = 64, .n_train = 4000, .n_val = 1000, .label_noise = 0.05}};
    ag_set_fatal_handler(fatal_exit);
    int plugins = load_plugins(argc, argv);
    if (plugins < 0) return 1;
    argv[plugins] = argv[0]; /* the other options as if no --plugin came first */
    argv += plugins, argc -= plugins;
    double minutes = 0, threads = 0;
    bool keep_denormals = false;
    static registered_setup setup;
    setup.o = ag_train_opts_default();
    const char *model_name = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--model")) model_name = argv[i + 1];
    const char *specs[64];
    int n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x = 0; /* cast to int below even when its parse failed: garbage there is undefined */
        bool ok = true;
        int takes_value = 1;
        char err[512];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--linear")) {
            s.linear = true;
            continue;
        } else if (!strcmp(a, "--model") && v) {
            if (ag_train_set(&setup.o, "model", v, err, sizeof err)) {
                fprintf(stderr, "optim_experiments: %s\n", err);
                ok = false;
            }
        } else if (!strcmp(a, "--optim") && v) {
            if (n == 64) ok = false;
            else specs[n++] = v;
        } else if (!strcmp(a, "--sched") && v) s.sched = v;
        else if (!strcmp(a, "--lr-steps") && v) {
            if (ag_lr_steps_parse(v, &s.lr_steps) != AG_OK) {
                fprintf(stderr, "optim_experiments: --lr-steps: %s\n", ag_errmsg());
                ok = false;
            }
            s.has_lr_steps = true;
        }
        else if (!strcmp(a, "--out") && v && !*v) { /* '' would write _steps.csv into the current folder */
            fprintf(stderr, "optim_experiments: --out needs a file prefix, got ''\n");
            ok = false;
        } else if (!strcmp(a, "--out") && v) s.out = v;
        else if (!strcmp(a, "--epochs")) ok = parse_number(a, v, 1, 1e6, &x), s.epochs = (int)x;
        else if (!strcmp(a, "--batch")) ok = parse_number(a, v, 1, 1e6, &x), s.batch = (int)x;
        else if (!strcmp(a, "--seed")) ok = parse_number(a, v, 0, 9e15, &x), s.seed = (uint64_t)x;
        else if (!strcmp(a, "--clip")) ok = parse_number(a, v, 0, INFINITY, &s.clip);
        else if (!strcmp(a, "--l2")) ok = parse_number(a, v, 0, INFINITY, &s.l2);
        else if (!strcmp(a, "--smooth")) ok = parse_number(a, v, 0, 0.9999, &s.smooth);
        else if (!strcmp(a, "--threads")) ok = parse_number(a, v, 0, 1024, &threads);
        else if (!strcmp(a, "--denormals")) ok = parse_choice(a, v, "flush", "keep", &keep_denormals);
        else if (!strcmp(a, "--max-minutes")) ok = parse_number(a, v, 0, 1e9, &minutes);
        else if (!strcmp(a, "--device") && (!v || !*v || ag__train_device_index(v) < -1)) {
            fprintf(stderr, "optim_experiments: --device '%s': expected cpu, cuda or cuda:N (N a GPU's index)\n",
                    v ? v : "");
            ok = false;
        } else if (!strcmp(a, "--device")) {
            s.device = strcmp(v, "cpu") ? AG_CUDA : AG_CPU;
            char why[256];
            if (s.device == AG_CUDA && !ag_cuda_use(ag__train_device_index(v), why, sizeof why)) {
                fprintf(stderr, "optim_experiments: --device %s: %s\n", v, why);
                return 2;
            }
        } else if (!strcmp(a, "--plugin")) {
            fprintf(stderr, "optim_experiments: --plugin comes before every other option\n");
            ok = false;
        }
        else if (!strcmp(a, "--init") || !strcmp(a, "--profile") || !strcmp(a, "--cuda-graphs")) {
            /* train's, and once taken here without effect */
            fprintf(stderr, "optim_experiments: %s is train's: %s\n", a,
                    !strcmp(a, "--init") ? "every optimizer here starts from the model's own initialisation from --seed"
                    : !strcmp(a, "--profile") ? "the tool times each optimizer's run as a whole (its seconds column)"
                                              : "the tool's steps run eagerly, one launch an op");
            ok = false;
        }
        else if (!strncmp(a, "--embeddings", 12) || !strcmp(a, "--freeze-embeddings")) {
            /* accepted and ignored, it once was: a comparison that the user believes starts from GloVe */
            fprintf(stderr, "optim_experiments: %s is train's: every optimizer here starts from the same random "
                    "initialisation of the model, without pretrained vectors (docs/optim.md)\n", a);
            ok = false;
        }
        else if (!strcmp(a, "--param-group")) {
            /* a train option, so --model would take it and no optimizer here would read it */
            fprintf(stderr, "optim_experiments: --param-group is train's: the tool compares optimizers that each "
                    "train every parameter at their own rate and weight decay (docs/optim.md)\n");
            ok = false;
        }
        else if (model_name && !strncmp(a, "--", 2) && trainer_option(a + 2, &takes_value)) {
            if (takes_value && !v) {
                fprintf(stderr, "optim_experiments: %s needs a value\n", a);
                ok = false;
            } else if (ag_train_set(&setup.o, a + 2, takes_value ? v : NULL, err, sizeof err)) {
                fprintf(stderr, "optim_experiments: %s\n", err);
                ok = false;
            }
            if (!takes_value && ok) continue;
        } else if (model_name && is_mlp_option(a)) {
            fprintf(stderr, "optim_experiments: %s is an option of the MLP, not of --model %s\n", a, model_name);
            ok = false;
        } else if (!strcmp(a, "--act")) ok = parse_choice(a, v, "tanh", "relu", &s.task.relu);
        else if (!strcmp(a, "--noise")) ok = parse_number(a, v, 0, 1, &s.task.label_noise);
        else if (!strcmp(a, "--hidden")) ok = parse_number(a, v, 1, 1e5, &x), s.task.hidden = (int)x;
        else if (!strcmp(a, "--dim")) ok = parse_number(a, v, 1, 1e5, &x), s.task.dim = (int)x;
        else if (!strcmp(a, "--classes")) ok = parse_number(a, v, 2, 1e4, &x), s.task.classes = (int)x;
        else if (!strcmp(a, "--train")) ok = parse_number(a, v, 1, 1e8, &x), s.task.n_train = (int)x;
        else if (!strcmp(a, "--val")) ok = parse_number(a, v, 1, 1e8, &x), s.task.n_val = (int)x;
        else {
            bool trainer = !model_name && !strncmp(a, "--", 2) && trainer_option(a + 2, NULL);
            fprintf(stderr, "optim_experiments: %s option '%s'%s\n",
                    trainer ? "the MLP takes no" : "unknown or incomplete", a,
                    trainer ? " (it is for a registered model: add --model NAME)" : "");
            ok = false;
        }
        if (!ok) {
            usage(stderr);
            return 2;
        }
        i++; /* the option's value */
    }
    if (n == 0) {
        specs[n++] = "sgd:lr=0.1";
        specs[n++] = "adam:lr=1e-3";
        specs[n++] = "adadelta:lr=0.5,rho=0.95";
    }
    if (threads > 0) ag_set_num_threads((int)threads);
    ag_flush_denormals(!keep_denormals); /* as attngrad train: Adam+L2's subnormal weights (core.h) */
    s.seconds_per_run = 60 * minutes / n; /* equal shares: no optimizer is favoured by coming first */
    ag_sched_config sc;
    if (ag_sched_parse(s.sched, &sc)) {
        fprintf(stderr, "optim_experiments: %s\n", ag_errmsg());
        return 2;
    }
    exp_model chosen = mlp_model;
    if (model_name) { /* the data once; the loop's settings default to the model's */
        char err[1024];
        setup.o.seed = (int64_t)s.seed;
        if (s.batch) setup.o.batch = s.batch;
        if (registered_setup_open(&setup, err, sizeof err)) {
            fprintf(stderr, "optim_experiments: %s\n", err);
            ag_run_data_free(&setup.data);
            return 1;
        }
        bool lm = setup.data.task == AG_TASK_LM;
        chosen = (exp_model){"", lm ? "perplexity" : "accuracy", !lm, registered_create, registered_train_size,
                             registered_loss, registered_evaluate, registered_destroy};
        snprintf(chosen.name, sizeof chosen.name, "%s%s%s on %s", setup.o.model, setup.o.flags[0] ? "/" : "",
                 setup.o.flags, setup.data.name);
        s.batch = setup.cfg.batch;
        if (s.clip < 0) s.clip = setup.o.clip;
        if (s.l2 < 0) s.l2 = setup.cfg.l2;
        s.setup = &setup;
    } else {
        s.batch = s.batch ? s.batch : 32;
        s.clip = s.clip < 0 ? 0 : s.clip;
        s.l2 = s.l2 < 0 ? 0 : s.l2;
    }
    const exp_model *model = &chosen;
    run *runs = ag__calloc((size_t)n, sizeof *runs);
    for (int i = 0; i < n; i++) { /* every spec checked before any training */
        runs[i].spec = specs[i];
        csv_quote(specs[i], runs[i].csv_name, sizeof runs[i].csv_name);
        if (ag_optim_parse(specs[i], &runs[i].cfg)) {
            fprintf(stderr, "optim_experiments: %s\n", ag_errmsg());
            free(runs); /* LeakSanitizer's exit status would hide the usage error's */
            return 2;
        }
    }
    char steps_path[1024], epochs_path[1024];
    snprintf(steps_path, sizeof steps_path, "%s_steps.csv", s.out);
    snprintf(epochs_path, sizeof epochs_path, "%s_epochs.csv", s.out);
    ag__atomic_file steps_file, epochs_file;
    FILE *steps_csv = open_csv(&steps_file, steps_path);
    FILE *epochs_csv = steps_csv ? open_csv(&epochs_file, epochs_path) : NULL;
    if (!epochs_csv) {
        if (steps_csv) (void)ag__atomic_close(&steps_file); /* an empty file would replace the old one: */
        if (steps_csv) fprintf(stderr, "optim_experiments: %s was replaced by an empty one\n", steps_path);
        free(runs);
        return 1;
    }
    fprintf(steps_csv, "optimizer,step,epoch,lr,loss\n");
    fprintf(epochs_csv, "optimizer,epoch,step,lr,train_loss,val_loss,val_%s,seconds\n", model->metric);

    if (model_name) {
        const ag_run_data *d = &setup.data;
        ag_model probe; /* only to count the parameters */
        if (ag_model_init(&probe, ag_model_find(setup.o.model), &setup.cfg)) {
            fprintf(stderr, "optim_experiments: %s\n", ag_errmsg());
            return 1;
        }
        printf("model %s: %lld parameters (d=%d), %lld train / %lld dev examples, vocab %d, batch %d, clip %g, l2 %g, "
               "keep %g, %d epochs, seed %llu\n",
               model->name, (long long)ag_params_numel(&probe.params), setup.cfg.dim, (long long)d->n[AG_SPLIT_TRAIN],
               (long long)d->n[AG_SPLIT_DEV], ag_vocab_size(d->vocab), s.batch, s.clip, s.l2, setup.cfg.keep, s.epochs,
               (unsigned long long)s.seed);
        ag_model_free(&probe);
    } else {
        printf("model %s: %d -> %d (%s) -> %d, %d train / %d held-out examples, batch %d, %d epochs, seed %llu\n",
               model->name, s.task.dim, s.task.hidden, s.task.relu ? "relu" : "tanh", s.task.classes, s.task.n_train,
               s.task.n_val, s.batch, s.epochs, (unsigned long long)s.seed);
    }
    const char *abbrev = strcmp(model->metric, "accuracy") ? "ppl" : "acc";
    char val_col[16], best_col[16];
    snprintf(val_col, sizeof val_col, "val %s", abbrev);
    snprintf(best_col, sizeof best_col, "best %s", abbrev);
    printf("%-36s %12s %12s %12s %12s %9s\n", "optimizer", "train loss", "val loss", val_col, best_col, "seconds");
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        rc = train_one(model, &s, &runs[i], steps_csv, epochs_csv);
        if (rc) break;
        run *r = &runs[i];
        double best = r->metric[0], tail = 0;
        int k = 0;
        for (int e = 1; e < r->epochs; e++) best = model->metric_higher_is_better ? fmax(best, r->metric[e]) : fmin(best, r->metric[e]);
        for (int j = r->steps - 1; j >= 0 && k < 50; j--, k++) tail += r->step_loss[j]; /* last 50 steps */
        printf("%-36s %12.5f %12.5f %12.4f %12.4f %9.2f%s\n", r->spec, k ? tail / k : NAN, r->val_loss[r->epochs - 1],
               r->metric[r->epochs - 1], best, r->seconds, r->diverged_at ? "  diverged" : "");
        if (r->diverged_at) printf("  %s: diverged at step %d (%s); its run stopped there\n", r->spec, r->diverged_at, r->diverged);
        if (r->time_up)
            printf("  %s: its share of --max-minutes (%.1f s) ran out after %d steps, in epoch %d\n", r->spec,
                   s.seconds_per_run, r->steps, r->epochs - 1);
    }
    if (close_csv(&steps_file) | close_csv(&epochs_file)) rc = 1;
    if (!rc && write_plots(model, &s, runs, n)) {
        fprintf(stderr, "optim_experiments: cannot write the plots under %s: %s\n", s.out, strerror(errno));
        rc = 1;
    }
    if (!rc) printf("wrote %s_steps.csv, %s_epochs.csv, %s_loss.svg, %s_val_loss.svg, %s_%s.svg\n", s.out, s.out, s.out,
                    s.out, s.out, model->metric);
    for (int i = 0; i < n; i++) {
        free(runs[i].step_x), free(runs[i].step_loss);
        free(runs[i].epoch_x), free(runs[i].val_loss), free(runs[i].metric);
    }
    free(runs);
    if (model_name) ag_run_data_free(&setup.data);
    ag_shutdown();
    return rc;
}
