/* trainer.h - the pieces of one training run, shared by the files of
 * train/ that run it: setup.c makes a fold's trainer, step.c takes one
 * step, eval.c scores a split, report.c prints, loop.c runs the epochs. */
#ifndef AG_TRAINER_H
#define AG_TRAINER_H

#include "internal.h"
#include "run_folder.h"
#include "../distributed/dist.h"
#include "../graph/internal.h" /* ag__seconds */
#include "../optim/param_groups.h" /* --param-group */

#include <stdio.h>

/* One fold's run: what setup.c builds and loop.c drives. */
typedef struct {
    ag_model model;
    ag_optimizer opt;
    ag_scheduler sched;
    ag_lr_steps lr_steps; /* --lr-steps: each update's rate is opt.lr times its factor */
    bool has_lr_steps;
    bool lr_steps_run;    /* its total is the run's planned steps (total=run) */
    ag_run_data data;
    ag_batch batch;
    ag_sampler sampler;
    double clip;
    ag__dist_grads grads; /* data-parallel: the flat buffer of the allreduce */
    bool grads_zero;      /* the last step's update zeroed every gradient: the next step's zero_grad is done */
    ag_real *loss_sum;    /* --micro-batch: the parts' loss, summed on the step's device (kept) */
    double step_lr, step_grad_norm; /* the last step's rate and gradient norm before clipping (--log-steps) */
    ag_metrics best_dev, best_test; /* of the best checkpoint, once this process has evaluated it */
    bool have_best;
    ag_vectors vec;                 /* --embeddings of a fresh run: counts (rows freed once copied) */
    int64_t vec_covered, vec_tokens; /* training tokens with a vector, of all */
    ag__run_logs logs;              /* metrics.csv and metrics.jsonl, saved in every checkpoint */
} ag__trainer;

/* ---- setup.c ---------------------------------------------------------------- */

/* Data, model, optimizer, schedule, batch and sampler of one fold.  The
 * model must fit the checkpoint `ckpt` when one is given (--resume's
 * last.safetensors, or --init's file, strictly: no tensor left over):
 * checked from names and shapes before the model is allocated. */
int ag__trainer_init(ag__trainer *t, ag_train_opts *o, int fold, ag_vocab *vocab, const char *ckpt, char *err,
                     size_t errlen);
void ag__trainer_free(ag__trainer *t);

/* --param-group's groups of o in order (set and checked by ag_train_set), each
 * with its text (spec[0..len), a line of o->param_groups); their count. */
enum { AG__MAX_PARAM_GROUPS = 64 }; /* more than 512 bytes of groups can hold */
typedef struct {
    ag__param_group g;
    const char *spec;
    int len;
} ag__train_group;
int ag__train_groups(const ag_train_opts *o, ag__train_group *g);

/* ---- agree.c ---------------------------------------------------------------- */

/* Under mpirun: fails (err says what differs) on a rank whose options,
 * data, parameters (names and sizes; after --resume their values),
 * optimizer state or resumed counters are not rank 0's, before the ranks'
 * collectives on them could crash, hang or mix two runs.  Collective;
 * 0 in one process. */
int ag__train_ranks_agree(const ag_train_opts *o, const ag__trainer *t, const ag__run_state *s, char *err,
                          size_t errlen);

/* ---- stop.c: stopping on a signal ------------------------------------------ */

/* This process's request to stop (ag_train_request_stop): a signal
 * number, -1 (asked without one) or 0; what a step's allreduce carries. */
int ag__train_stop_mine(void);
/* What the ranks agreed on (a step's allreduce, dist.h's ag__dist_any):
 * once nonzero, every rank stops after this step. */
void ag__train_stop_agreed(int stop);
/* The ranks agree now: collective under mpirun (every rank or none calls
 * it); ag_train_stop_requested after. */
int ag__train_stop_agree(void);

/* ---- step.c ----------------------------------------------------------------- */

/* The model's forward, loss of given logits, and loss of a batch (the LM's
 * decoder fused with its cross-entropy): NULL with err set when the model
 * refuses the batch (e.g. a parse with a cycle). */
ag_tensor *ag__train_forward(ag_model *m, const ag_batch *b, bool training, char *err, size_t errlen);
ag_tensor *ag__train_loss_of(const ag_model *m, const ag_batch *b, ag_tensor *logits, char *err, size_t errlen);
ag_tensor *ag__train_batch_loss(ag_model *m, const ag_batch *b, bool training, char *err, size_t errlen);
/* The batch's targets that are not padding (the LM's tokens scored). */
int64_t ag__count_targets(const ag_batch *b);
/* The run stops at the first non-finite value, before any checkpoint of
 * it is written: `what` happened at `step` (or in the evaluation after
 * epoch `epoch` when step < 0), with what to change. */
int ag__train_diverged(const ag__trainer *t, int64_t step, int epoch, const char *what, bool in_ops, char *err,
                       size_t errlen);
/* One step on the training rows idx[first..first + rows), this rank's
 * share of a global batch idx[0..global_rows), in parts of at most
 * t->batch.max_rows rows (step.c says what it does and checks). */
int ag__train_step(ag__trainer *t, int64_t step, const int64_t *idx, int64_t first, int64_t rows, int64_t global_rows,
                   double *loss, double *tokens, char *err, size_t errlen);
/* Forward and backward once at every width the data's batches have, and
 * once on the largest batch, so that the steps after allocate nothing. */
int ag__train_warm_up(ag__trainer *t, char *err, size_t errlen);
/* Example i of split s: its longer side, in tokens. */
int32_t ag__example_len(const ag_run_data *d, int s, int64_t i);
/* The longest sentence over every split (*split, *index; -1 when there is
 * none), and how many are longer than max_len (when > 0). */
int64_t ag__longest_sentence(const ag_run_data *d, int max_len, int *split, int64_t *index, int32_t *len);

/* ---- eval.c ----------------------------------------------------------------- */

/* Higher is better: what picks the best checkpoint. */
double ag__train_score(const ag_model *m, const ag_metrics *x);
/* Metrics that are not finite end the run as a non-finite step does. */
int ag__train_check_metrics(const ag__trainer *t, const ag_metrics *x, const char *split, int epoch, char *err,
                            size_t errlen);

/* ---- report.c --------------------------------------------------------------- */

/* An epoch's progress on stderr: none, plain lines, or a live bar. */
typedef struct {
    int mode;            /* 0 none, 1 plain lines, 2 a live bar */
    FILE *f;
    double t_start, t_last;
    int64_t tokens, steps, n_batches, every;
    double loss_sum;
    int epoch, epochs;
} ag__progress;

void ag__progress_start(ag__progress *p, const char *mode, int epoch, int epochs, int64_t n_batches);
void ag__progress_step(ag__progress *p, int64_t done, int64_t tokens, double loss);
void ag__progress_end(ag__progress *p);

/* --profile K: one per command, across folds (report.c says when it
 * starts and reports). */
typedef struct {
    int want;      /* K; 0 = off */
    int64_t taken; /* training steps so far */
    bool on;
} ag__step_profile;

void ag__profile_step_begin(ag__step_profile *sp);
void ag__profile_step_end(ag__step_profile *sp);
void ag__profile_epoch_end(ag__step_profile *sp);
void ag__profile_close(ag__step_profile *sp, int rc);

void ag__print_epoch(const ag__epoch_row *e, int epochs, ag_task task);
void ag__print_header(const ag__trainer *t, const ag_train_opts *o, const char *out);

#endif
