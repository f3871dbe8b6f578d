/* run_folder.h - a training run's folder on disk (train/run_folder.c), as
 * the trainer (train/step.c) writes and resumes it:
 *
 *   <out>/.lock              held by the one command training into <out>
 *   <out>/vocab.txt          the fold's vocabulary (ag_vocab_save)
 *   <out>/last.safetensors   parameters, optimizer, schedule, generator,
 *   <out>/best.safetensors   the run's counters ("state.*" config lines)
 *                            and the metrics logs, all of one moment
 *   <out>/metrics.csv        one row an epoch, rewritten atomically from
 *   <out>/metrics.jsonl      the logs after every checkpoint
 *   <out>/steps.csv          --log-steps N: a row every N steps, appended
 *                            as they are taken, on disk before each checkpoint
 *
 * A crash at any point leaves last.safetensors a whole state, the metrics
 * files at most that state's rows behind it and steps.csv every row up to
 * its step (and perhaps more): --resume rewrites the metrics from the
 * checkpoint, cuts steps.csv back to the checkpoint's step and removes what
 * crashed writers left.  Rank 0 alone writes; every rank takes rank 0's
 * answer where one decides. */
#ifndef AG_RUN_FOLDER_H
#define AG_RUN_FOLDER_H

#include "internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

/* The run's own counters, saved in its checkpoints as "state.*" lines. */
typedef struct {
    int64_t step;  /* optimizer steps so far */
    int epoch;     /* epochs completed */
    int64_t batch; /* batches done in the epoch under way */
    double best;   /* best dev score (higher is better; -inf before the first) */
    int best_epoch, bad_epochs;
    int stopped;    /* early stopping ended the run */
    double seconds; /* training time so far */
} ag__run_state;

/* A growing text; the metrics files' contents as they must be, saved in
 * every checkpoint with the state they describe and rewritten from it. */
typedef struct {
    char *s;
    size_t len;
} ag__text;
typedef struct {
    ag__text csv, jsonl;
} ag__run_logs;

/* One epoch's row of the metrics (or of a stop mid-epoch: partial). */
typedef struct {
    int epoch;
    int64_t step;
    double lr, train_loss, seconds;
    ag_metrics dev, test;
    bool has_test, partial, best;
} ag__epoch_row;

/* The row appended to both logs (the CSV's header first). */
int ag__run_logs_add(ag__run_logs *l, ag_task task, const ag__epoch_row *e, char *err, size_t errlen);
/* Both metrics files of folder `out`, each written atomically. */
int ag__run_logs_write(const char *out, const ag__run_logs *l, char *err, size_t errlen);
void ag__run_logs_free(ag__run_logs *l);

/* --log-steps N: steps.csv, open for appending on rank 0 (f NULL: no log).
 * The step's values are those the step read anyway (its one wait), so a
 * row costs no wait on the device, only its line. */
typedef struct {
    FILE *f;
    int every;
    bool synced_folder; /* the file's name is on disk, not only its rows */
    char path[AG_PATH_MAX + 32];
} ag__step_log;

/* One step's row. */
typedef struct {
    int64_t step;
    int epoch;        /* the epoch the step belongs to, from 1 */
    double lr;        /* the rate the update ran at (--lr-steps' factor included) */
    double loss;      /* the global batch's, as the epoch's train_loss averages it */
    double grad_norm; /* the global gradient norm before clipping */
    int64_t examples, tokens;
    double seconds;   /* training time so far, as metrics.csv counts it */
} ag__step_row;

#define AG__STEP_LOG_HEADER "step,epoch,lr,loss,grad_norm,examples,tokens,seconds"

/* Opens <out>/steps.csv for a row every `every` steps, the header first
 * into an empty file; resumed_at > 0 (the step a --resume goes on from)
 * with no rows there gets a note that the file starts after it. */
int ag__step_log_open(ag__step_log *l, const char *out, int every, int64_t resumed_at, bool quiet, char *err,
                      size_t errlen);
/* Is step one the log takes? */
static inline bool ag__step_log_due(const ag__step_log *l, int64_t step) { return l->f && step % l->every == 0; }
void ag__step_log_add(ag__step_log *l, const ag__step_row *r);
/* The rows so far on disk (before a checkpoint says the run got there); a
 * failed write is reported here, naming the file.  0 with no log. */
int ag__step_log_sync(ag__step_log *l, char *err, size_t errlen);
int ag__step_log_close(ag__step_log *l, char *err, size_t errlen);

/* What a checkpoint of the run holds besides its counters. */
typedef struct {
    ag_params *params;
    ag_optimizer *opt;
    ag_scheduler *sched;
    ag_rng *rng; /* the model's: initialisation, then dropout */
    ag__run_logs *logs;
} ag__run_parts;

/* A checkpoint at path (atomically): the parts, the run's options (o) and
 * its counters (s). */
int ag__run_save(const char *path, const ag_train_opts *o, const ag__run_state *s, const ag__run_parts *p, char *err,
                 size_t errlen);
/* --resume: the parts and counters from <out>/last.safetensors, which must
 * have been trained with `vocab`, the metrics files rewritten to the rows
 * it holds and steps.csv cut back to its step. */
int ag__run_resume(const char *out, const ag_vocab *vocab, const ag__run_parts *p, ag__run_state *s, char *err,
                   size_t errlen);

/* Before anything is loaded: a run to resume must be there, and a fresh
 * run must not overwrite one unless forced. */
int ag__run_folder_check(const char *out, bool resume, bool force, char *err, size_t errlen);
/* The one-writer lock (flock on <out>/.lock, held until unlocked or the
 * process ends); *fd is -1 when none is held. */
int ag__run_folder_lock(const char *out, bool quiet, int *fd, char *err, size_t errlen);
void ag__run_folder_unlock(int fd);
/* Before each write into out: is <out>/.lock still the file the lock fd
 * holds?  Removing a folder does not take a lock from the process holding
 * it, so a run told to stop (which evaluates for minutes before its last
 * checkpoint) could write into a new run's folder of the same name; this
 * stops it first, naming the folder.  0 with fd -1 (no lock held). */
int ag__run_folder_still_ours(const char *out, int fd, char *err, size_t errlen);
/* A fresh run's folder: made, locked, emptied of an earlier run's files. */
int ag__run_folder_make(const char *out, bool quiet, int *lock, char *err, size_t errlen);
/* Removes the temporary files crashed writers left in out. */
int ag__run_folder_clean(const char *out, bool quiet, char *err, size_t errlen);

/* Does rank 0, which makes and writes the run folder, see path?  Every
 * rank takes its answer. */
bool ag__rank0_sees(const char *path);
/* Test-only: AG_CRASH_AT=POINT:N kills the process the N-th time it passes
 * POINT, AG_SIGNAL_AT=POINT:N[:SIGNO] raises a signal there (no-ops when
 * unset; run_folder.c lists the points). */
void ag__crash_point(const char *point);

static inline void ag__path_join(char *dst, size_t n, const char *dir, const char *file) {
    snprintf(dst, n, "%s/%s", dir, file);
}
static inline bool ag__path_exists(const char *path) { return access(path, F_OK) == 0; }

#endif
