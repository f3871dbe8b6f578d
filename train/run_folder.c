/* run_folder.c - a training run's folder on disk: the run's counters in
 * its checkpoints, the metrics logs, atomic writes, the one-writer lock,
 * and --resume (run_folder.h says what the folder holds and why a crash
 * anywhere loses nothing). */
#include "run_folder.h"
#include "../distributed/dist.h"
#include "../optim/options.h" /* ag__optim_keeps: the state a resumed optimizer changed */
#include "../data/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

/* ---- the run's counters, saved as "state.*" config lines --------------------- */

static int state_format(const ag__run_state *s, char *buf, size_t n) {
    int w = snprintf(buf, n,
                     "state.step=%lld\nstate.epoch=%d\nstate.batch=%lld\nstate.best=%.17g\nstate.best_epoch=%d\n"
                     "state.bad_epochs=%d\nstate.stopped=%d\nstate.seconds=%.17g\n",
                     (long long)s->step, s->epoch, (long long)s->batch, s->best, s->best_epoch, s->bad_epochs,
                     s->stopped, s->seconds);
    return w < 0 || (size_t)w >= n ? AG_ERR_ARG : 0;
}

static const char *state_value(const char *text, const char *key) {
    size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, k) && p[k] == '=') return p + k + 1;
    return NULL;
}

/* A counter reads back only as the plain decimal integer state_format wrote,
 * within its field's range: a hand-edited or corrupt value such as 3e9 or
 * 0x10 must not wrap an int into a negative epoch or parse as something else. */
static bool parse_counter(const char *p, int64_t max, int64_t *out) {
    if (!p || *p < '0' || *p > '9') return false;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || (*end && *end != '\n') || v > max) return false;
    *out = v;
    return true;
}

static int state_parse(const char *text, ag__run_state *s, const char *what, char *err, size_t errlen) {
    enum { STEP, EPOCH, BATCH, BEST_EPOCH, BAD_EPOCHS, STOPPED, N_COUNTERS };
    static const struct {
        const char *key;
        int64_t max;
    } counters[N_COUNTERS] = {{"state.step", (int64_t)9e15}, {"state.epoch", INT_MAX}, {"state.batch", (int64_t)9e15},
                              {"state.best_epoch", INT_MAX}, {"state.bad_epochs", INT_MAX}, {"state.stopped", 1}};
    int64_t v[N_COUNTERS];
    for (int i = 0; i < N_COUNTERS; i++)
        if (!parse_counter(state_value(text, counters[i].key), counters[i].max, &v[i]))
            return ag__train_fail(err, errlen, AG_ERR_FORMAT,
                                 "%s: config entry %s is missing or not an integer in [0, %lld]", what,
                                 counters[i].key, (long long)counters[i].max);
    /* best may be -inf (no dev score yet); seconds is a finite duration */
    const char *real_keys[] = {"state.best", "state.seconds"};
    double r[2];
    for (int i = 0; i < 2; i++) {
        const char *p = state_value(text, real_keys[i]);
        char *end = NULL;
        r[i] = p ? strtod(p, &end) : NAN;
        /* strtod reads hex too */
        bool hex = p && (memchr(p, 'x', (size_t)(end - p)) || memchr(p, 'X', (size_t)(end - p)));
        if (!p || hex || (*end && *end != '\n') || isnan(r[i]) || (i == 1 && !(r[i] >= 0 && isfinite(r[i]))))
            return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s: config entry %s is missing or bad", what,
                                 real_keys[i]);
    }
    *s = (ag__run_state){.step = v[STEP], .epoch = (int)v[EPOCH], .batch = v[BATCH], .best = r[0],
                         .best_epoch = (int)v[BEST_EPOCH], .bad_epochs = (int)v[BAD_EPOCHS], .stopped = (int)v[STOPPED],
                         .seconds = r[1]};
    return 0;
}

int ag__run_state_check(const char *config, const char *what, char *err, size_t errlen) {
    ag__run_state s;
    return state_parse(config, &s, what, err, errlen);
}

/* ---- the metrics logs -------------------------------------------------------- */

/* A number for JSON: null when not finite (a diverged perplexity). */
static void json_num(FILE *f, const char *key, double x) {
    if (isfinite(x)) fprintf(f, "\"%s\":%.6g", key, x);
    else fprintf(f, "\"%s\":null", key);
}

/* The metrics of one split: CSV header, CSV cells (empty when the split is
 * absent), JSON object. */
static void csv_header(FILE *f, const char *split, ag_task task) {
    if (task == AG_TASK_RELATEDNESS) fprintf(f, "%s_loss,%s_pearson,%s_spearman,%s_mse,", split, split, split, split);
    else fprintf(f, "%s_loss,%s_%s,", split, split, task == AG_TASK_LM ? "ppl" : "acc");
}

static void csv_cells(FILE *f, ag_task task, const ag_metrics *x, bool present) {
    if (!present) fputs(task == AG_TASK_RELATEDNESS ? ",,,," : ",,", f);
    else if (task == AG_TASK_RELATEDNESS) fprintf(f, "%.6f,%.6f,%.6f,%.6f,", x->loss, x->pearson, x->spearman, x->mse);
    else fprintf(f, "%.6f,%.6f,", x->loss, task == AG_TASK_LM ? x->perplexity : x->accuracy);
}

static void json_split(FILE *j, const char *split, ag_task task, const ag_metrics *x) {
    fprintf(j, ",\"%s\":{", split);
    json_num(j, "loss", x->loss), fputc(',', j);
    if (task == AG_TASK_RELATEDNESS) {
        json_num(j, "pearson", x->pearson), fputc(',', j), json_num(j, "spearman", x->spearman), fputc(',', j);
        json_num(j, "mse", x->mse);
    } else {
        json_num(j, task == AG_TASK_LM ? "perplexity" : "accuracy", task == AG_TASK_LM ? x->perplexity : x->accuracy);
    }
    fputc('}', j);
}

/* One epoch's row appended to both logs (the CSV's header first). */
int ag__run_logs_add(ag__run_logs *l, ag_task task, const ag__epoch_row *e, char *err, size_t errlen) {
    char *row = NULL, *jrow = NULL;
    size_t n = 0, jn = 0;
    FILE *f = open_memstream(&row, &n), *j = open_memstream(&jrow, &jn);
    if (f && !l->csv.len) {
        fputs("epoch,step,lr,train_loss,", f);
        csv_header(f, "dev", task);
        csv_header(f, "test", task);
        fputs("seconds,partial,best\n", f);
    }
    if (f) {
        fprintf(f, "%d,%lld,%.6g,%.6f,", e->epoch, (long long)e->step, e->lr, e->train_loss);
        csv_cells(f, task, &e->dev, true);
        csv_cells(f, task, &e->test, e->has_test);
        fprintf(f, "%.3f,%d,%d\n", e->seconds, e->partial, e->best);
    }
    if (j) {
        fprintf(j, "{\"epoch\":%d,\"step\":%lld,", e->epoch, (long long)e->step);
        json_num(j, "lr", e->lr), fputc(',', j), json_num(j, "train_loss", e->train_loss);
        json_split(j, "dev", task, &e->dev);
        if (e->has_test) json_split(j, "test", task, &e->test);
        fprintf(j, ",\"seconds\":%.3f,\"partial\":%s,\"best\":%s}\n", e->seconds, e->partial ? "true" : "false",
                e->best ? "true" : "false");
    }
    bool ok = f && j;
    if (f) fclose(f);
    if (j) fclose(j);
    const char *add[2] = {row, jrow};
    ag__text *logs[2] = {&l->csv, &l->jsonl};
    for (int k = 0; k < 2 && ok; k++) {
        size_t m = strlen(add[k]);
        char *grown = realloc(logs[k]->s, logs[k]->len + m + 1);
        if (!grown) ok = false;
        else memcpy(grown + logs[k]->len, add[k], m + 1), logs[k]->s = grown, logs[k]->len += m;
    }
    free(row);
    free(jrow);
    return ok ? 0 : ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for the metrics log");
}

void ag__run_logs_free(ag__run_logs *l) {
    free(l->csv.s);
    free(l->jsonl.s);
    *l = (ag__run_logs){0};
}

/* ---- writes a crash cannot tear ---------------------------------------------- */

/* Is `var` (POINT:N...) at `point` the N-th time this is asked for it?
 * *rest: what follows N. */
static bool passing(const char *var, const char *point, int *passed, const char **rest) {
    const char *at = getenv(var);
    size_t n = strlen(point);
    if (!at || strncmp(at, point, n) || at[n] != ':') return false;
    char *end;
    long want = strtol(at + n + 1, &end, 10);
    *rest = end;
    return ++*passed == want;
}

/* Test-only: AG_CRASH_AT=POINT:N kills the process with SIGKILL, as a crash
 * would, the N-th time it passes POINT, so that a test can stop a run
 * between any two of its writes.  AG_SIGNAL_AT=POINT:N[:SIGNO] raises
 * SIGNO (SIGTERM unless given) there instead, as a `kill` at that moment
 * would: the graceful stop's whole path at a moment the test chooses
 * rather than races for (under mpirun, a wrapper sets it for one rank).
 * Points: "start" once the run is set up, before its first step; "step"
 * as a training step begins (before its gradient
 * allreduce), "best", "last" and "jsonl" after each of an epoch's writes
 * (rank 0's), "csv" in the metrics' write.  Unset (always, outside tests)
 * they cost two getenv per step. */
void ag__crash_point(const char *point) {
    static int crashes, signals;
    const char *rest;
    if (passing("AG_CRASH_AT", point, &crashes, &rest)) raise(SIGKILL);
    if (passing("AG_SIGNAL_AT", point, &signals, &rest)) raise(*rest == ':' ? atoi(rest + 1) : SIGTERM);
}

/* `path` holds exactly text[0..n) or what it held before, whenever the
 * process dies: a temporary file next to it, then rename. */
static int write_atomic(const char *path, const char *text, size_t n, char *err, size_t errlen) {
    ag__atomic_file file;
    int e = ag__atomic_open(&file, path);
    if (!e) {
        fwrite(text, 1, n, file.f);
        e = ag__atomic_close(&file);
    }
    if (!e) return 0;
    return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot write: %s", path, strerror(e));
}

/* Both metrics files from the logs. */
int ag__run_logs_write(const char *out, const ag__run_logs *l, char *err, size_t errlen) {
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, out, "metrics.csv");
    int rc = write_atomic(path, l->csv.s ? l->csv.s : "", l->csv.len, err, errlen);
    ag__crash_point("csv");
    ag__path_join(path, sizeof path, out, "metrics.jsonl");
    if (!rc) rc = write_atomic(path, l->jsonl.s ? l->jsonl.s : "", l->jsonl.len, err, errlen);
    return rc;
}

/* ---- steps.csv (--log-steps) ------------------------------------------------ */

/* Appended, not rewritten: a row every step can grow the file past what a
 * checkpoint should carry.  Line-buffered, so each row is written as it is
 * taken (a `tail -f` or a plot follows the run) and a crash loses none that
 * was; rows of steps after the last checkpoint that a crash leaves there
 * are cut on --resume (cut_step_log), which takes those steps again. */
int ag__step_log_open(ag__step_log *l, const char *out, int every, int64_t resumed_at, bool quiet, char *err,
                      size_t errlen) {
    *l = (ag__step_log){.every = every};
    ag__path_join(l->path, sizeof l->path, out, "steps.csv");
    l->f = fopen(l->path, "a");
    if (!l->f) return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot open: %s", l->path, strerror(errno));
    setvbuf(l->f, NULL, _IOLBF, 0);
    if (fseek(l->f, 0, SEEK_END) == 0 && ftell(l->f) > 0) return 0; /* a resumed run's rows, cut back to its checkpoint */
    fputs(AG__STEP_LOG_HEADER "\n", l->f);
    if (resumed_at > 0 && !quiet)
        fprintf(stderr, "note: %s: the run logged no steps before this one: its rows start after step %lld\n", l->path,
                (long long)resumed_at);
    return 0;
}

void ag__step_log_add(ag__step_log *l, const ag__step_row *r) {
    /* a failed write keeps the stream's error, which the next sync reports */
    fprintf(l->f, "%lld,%d,%.9g,%.9g,%.9g,%lld,%lld,%.3f\n", (long long)r->step, r->epoch, r->lr, r->loss,
            r->grad_norm, (long long)r->examples, (long long)r->tokens, r->seconds);
}

int ag__step_log_sync(ag__step_log *l, char *err, size_t errlen) {
    if (!l->f) return 0;
    errno = 0;
    int e = fflush(l->f) != 0 || ferror(l->f) ? (errno ? errno : EIO) : fsync(fileno(l->f)) != 0 ? errno : 0;
    if (e == EINVAL) e = 0; /* no file to sync (a device): as durable as it can be */
    if (!e && !l->synced_folder) e = ag__sync_folder(l->path); /* a new file's name, once */
    if (e) return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot write: %s", l->path, strerror(e));
    l->synced_folder = true;
    return 0;
}

int ag__step_log_close(ag__step_log *l, char *err, size_t errlen) {
    int rc = ag__step_log_sync(l, err, errlen);
    if (l->f) fclose(l->f);
    l->f = NULL;
    return rc;
}

/* The device the run's steps so far ran on, as state.device=cpu|cuda: a
 * --resume on the other one goes on from the same state, but the devices
 * round some sums in another order (BLAS against cuBLAS and the kernels),
 * so it ends near the run never stopped, not on its bits; note_device
 * says so.  Not an option (--device): where a run resumes is the resuming
 * command's choice. */
static int device_format(ag_device d, char *buf, size_t n) {
    int w = snprintf(buf, n, "state.device=%s\n", ag_device_name(d));
    return w < 0 || (size_t)w >= n ? AG_ERR_ARG : 0;
}

static void note_device(const char *path, const char *config, ag_device now) {
    const char *was = state_value(config, "state.device"); /* none: a run saved before it was recorded */
    size_t len = was ? strcspn(was, "\n") : 0;
    const char *name = ag_device_name(now);
    if (!was || (strlen(name) == len && !strncmp(was, name, len)) || ag__dist_rank() != 0) return;
    fprintf(stderr, "note: %s: the run trained on %.*s, this command trains on %s (--device): it goes on from the "
            "saved state, but the two devices add some sums in other orders, so its steps match those on %.*s within "
            "rounding, not bit for bit (--device %.*s keeps the run on %.*s)\n", path, (int)len, was, name, (int)len,
            was, (int)len, was, (int)len, was);
}

/* A checkpoint: the run's options and counters travel in its config. */
int ag__run_save(const char *path, const ag_train_opts *o, const ag__run_state *s, const ag__run_parts *p, char *err,
                 size_t errlen) {
    ag_train_state st = {.step = s->step, .epoch = s->epoch, .rng = *p->rng};
    bool fits = ag_train_opts_format(o, st.config, sizeof st.config) == 0;
    size_t k = strlen(st.config);
    if (!fits || state_format(s, st.config + k, sizeof st.config - k) ||
        (p->opt && device_format(p->opt->device, st.config + strlen(st.config), sizeof st.config - strlen(st.config))))
        return ag__train_fail(err, errlen, AG_ERR_ARG,
                             "%s: the run's config does not fit in %d bytes (shorter --data path?)", path,
                             AG_CONFIG_MAX);
    const ag__run_logs *l = p->logs;
    const char *meta[] = {"metrics.csv", l->csv.s ? l->csv.s : "", "metrics.jsonl", l->jsonl.s ? l->jsonl.s : "", NULL};
    st.meta = meta;
    if (ag_checkpoint_save(path, p->params, p->opt, p->sched, &st))
        return ag__train_fail(err, errlen, AG_ERR_IO, "%s", ag_errmsg());
    return 0;
}

/* ---- the folder: one writer, no stale files ---------------------------------- */

/* Does rank 0, which makes and writes the run folder, see path?  Every
 * rank takes its answer: one that looked after rank 0 made the folder, or
 * at another file system, must not decide otherwise (and stop alone). */
bool ag__rank0_sees(const char *path) {
    char there = ag__dist_rank() == 0 && ag__path_exists(path);
    ag__dist_bcast(&there, 1);
    return there;
}

/* Before anything is loaded: a run to resume must be there, and a fresh
 * run must not overwrite one unless forced. */
int ag__run_folder_check(const char *out, bool resume, bool force, char *err, size_t errlen) {
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, out, "last.safetensors");
    bool there = ag__rank0_sees(path);
    if (resume) return there ? 0 : ag__train_fail(err, errlen, AG_ERR_IO, "%s: nothing to resume (no such file)", path);
    if (there && !force)
        return ag__train_fail(err, errlen, AG_ERR_ARG,
                             "%s already holds a run: add --resume to continue it or --force to start over", out);
    return 0;
}

/* One writer per run folder: the command that trains into a folder holds
 * flock(2) on <folder>/.lock until it ends, so a second train into the same
 * folder (a queued --resume, a --force, a copy of the same command) stops,
 * naming the holder, instead of interleaving its checkpoints and metrics
 * with the first one's.  The kernel drops the lock when its holder dies, so
 * a crash leaves nothing stale behind; a file system without locks gets a
 * note and no lock.  *fd is -1 when no lock is held. */
int ag__run_folder_lock(const char *out, bool quiet, int *fd, char *err, size_t errlen) {
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, out, ".lock");
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (*fd < 0) return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) == 0) {
        char pid[24];
        int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (ftruncate(*fd, 0) || pwrite(*fd, pid, (size_t)n, 0) != n) {
            /* the pid only serves another command's message: the run goes on without it */
        }
        return 0;
    }
    int e = errno;
    if (e != EWOULDBLOCK) { /* no locks here (some network file systems) */
        close(*fd), *fd = -1;
        if (!quiet) fprintf(stderr, "note: %s: cannot lock (%s): nothing stops a second run writing into %s\n", path,
                            strerror(e), out);
        return 0;
    }
    char holder[24] = "";
    ssize_t n = pread(*fd, holder, sizeof holder - 1, 0);
    close(*fd), *fd = -1;
    long pid = n > 0 ? strtol(holder, NULL, 10) : 0;
    if (pid > 0 && pid <= INT_MAX && kill((pid_t)pid, 0) == 0) /* not a dead run's pid under another holder */
        return ag__train_fail(err, errlen, AG_ERR_IO,
                             "%s is in use: process %ld is training into it; wait for it to end (then --resume) or "
                             "give another --out", out, pid);
    return ag__train_fail(err, errlen, AG_ERR_IO, "%s is in use: another process holds %s; wait for it to end or give "
                         "another --out", out, path);
}

int ag__run_folder_still_ours(const char *out, int fd, char *err, size_t errlen) {
    if (fd < 0) return 0;
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, out, ".lock");
    struct stat held, there;
    if (fstat(fd, &held) == 0 && stat(path, &there) == 0 && held.st_dev == there.st_dev && held.st_ino == there.st_ino)
        return 0;
    return ag__train_fail(err, errlen, AG_ERR_IO,
                         "%s was removed or made anew since this run locked it (its .lock is not this run's): "
                         "nothing more is written there, so that another run's files stay as they are", out);
}

void ag__run_folder_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing the file drops the lock; the file stays for the next run */
}

static int make_dirs(const char *path, char *err, size_t errlen) {
    char buf[AG_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        bool end = !*p;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
            if (end) return 0;
            *p = '/';
        }
    }
}

/* A fresh run's folder, made only once its data and model are built, so a
 * bad start (even a fatal size error) leaves no empty folder behind.  It is
 * locked before anything in it is removed: a --force into a folder another
 * command is training into stops there, having deleted nothing. */
int ag__run_folder_make(const char *out, bool quiet, int *lock, char *err, size_t errlen) {
    char path[AG_PATH_MAX + 32];
    int rc = make_dirs(out, err, errlen);
    if (!rc) rc = ag__run_folder_lock(out, quiet, lock, err, errlen);
    const char *stale[] = {"metrics.csv", "metrics.jsonl", "best.safetensors", "last.safetensors", "steps.csv"};
    for (int i = 0; !rc && i < 5; i++) {
        ag__path_join(path, sizeof path, out, stale[i]);
        if (ag__path_exists(path) && unlink(path))
            rc = ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    }
    return rc;
}

/* Is `name` a temporary file of this run's writers ("<file>.tmp.<pid>.<n>",
 * <file> one of the run's own) that no live process is writing?  A crash
 * leaves those behind; a live writer's pid is not ours and answers kill 0. */
static bool stale_temp(const char *name) {
    static const char *const own[] = {"last.safetensors", "best.safetensors", "metrics.csv", "metrics.jsonl",
                                      "steps.csv", "vocab.txt"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
        size_t n = strlen(own[i]);
        if (strncmp(name, own[i], n) || strncmp(name + n, ".tmp.", 5)) continue;
        const char *p = name + n + 5;
        char *end;
        errno = 0;
        long pid = strtol(p, &end, 10);
        bool counter = end[0] == '.' && end[1] && strspn(end + 1, "0123456789") == strlen(end + 1);
        if (end == p || !counter || errno || pid <= 0 || pid > INT_MAX) return false;
        return pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno == ESRCH);
    }
    return false;
}

/* Removes what crashed writers left in the run folder: a temporary file is
 * never the run's state (the rename that makes it so did not happen). */
int ag__run_folder_clean(const char *out, bool quiet, char *err, size_t errlen) {
    DIR *d = opendir(out);
    if (!d) return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot list: %s", out, strerror(errno));
    int removed = 0, rc = 0;
    char path[AG_PATH_MAX + 300];
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!stale_temp(e->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", out, e->d_name);
        if (unlink(path) && errno != ENOENT)
            rc = ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
        else removed++;
    }
    closedir(d);
    if (removed && !quiet)
        printf("  note: removed %d temporary file%s a crashed run left in %s\n", removed, removed > 1 ? "s" : "", out);
    return rc;
}

/* ---- --resume ---------------------------------------------------------------- */

/* The text of a file (NULL, with errno, if it cannot be read). */
static char *read_text(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    *n = 0;
    if (f && fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len >= 0 && (s = malloc((size_t)len + 1)) && fseek(f, 0, SEEK_SET) == 0)
            s[*n = fread(s, 1, (size_t)len, f)] = 0;
    }
    if (f) fclose(f);
    return s;
}

/* The metrics logs of a resumed run: the rows last.safetensors holds (the
 * epochs whose state it is), and the files rewritten to exactly those,
 * header included, whatever a crash or a full disk left in them (by rank 0
 * under mpirun).  A run saved before its checkpoints held the rows keeps
 * its files as they are. */
static int restore_metrics(const char *out, const char *ckpt, ag__run_logs *l, char *err, size_t errlen) {
    ag_st_file f;
    if (ag_st_read(ckpt, &f)) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
    const char *csv = ag_st_meta(&f, "metrics.csv"), *jsonl = ag_st_meta(&f, "metrics.jsonl");
    ag__text *logs[2] = {&l->csv, &l->jsonl};
    const char *saved[2] = {csv, jsonl}, *names[2] = {"metrics.csv", "metrics.jsonl"};
    for (int k = 0; k < 2; k++) {
        char path[AG_PATH_MAX + 32];
        ag__path_join(path, sizeof path, out, names[k]);
        logs[k]->s = saved[0] && saved[1] ? strdup(saved[k]) : read_text(path, &logs[k]->len);
        if (logs[k]->s) logs[k]->len = strlen(logs[k]->s);
    }
    ag_st_close(&f);
    /* every rank keeps the rows (each checkpoint carries them); rank 0 alone
     * writes the folder, which it alone has locked */
    return csv && jsonl && ag__dist_rank() == 0 ? ag__run_logs_write(out, l, err, errlen) : 0;
}

/* The length of the start of steps.csv's text[0..n) to keep on resuming
 * from `step`: the header and the rows after it, in order, up to the row of
 * that step; not a row after it (the resumed run takes those steps again),
 * nor a line a crash cut short, nor anything after one that does not read
 * as a row.  -1 when the first line is no step log's header. */
static long step_rows_upto(const char *text, size_t n, int64_t step) {
    size_t h = strlen(AG__STEP_LOG_HEADER "\n");
    if (n < h) return memcmp(text, AG__STEP_LOG_HEADER "\n", n) ? -1 : 0; /* the header cut short: none */
    if (memcmp(text, AG__STEP_LOG_HEADER "\n", h)) return -1;
    size_t keep = h;
    for (int64_t last = 0;;) {
        const char *line = text + keep, *end = memchr(line, '\n', n - keep);
        if (!end) break;
        char *after = (char *)line;
        errno = 0;
        long long v = *line >= '0' && *line <= '9' ? strtoll(line, &after, 10) : -1;
        if (v <= last || v > step || errno || *after != ',' || after > end) break;
        last = v;
        keep = (size_t)(end + 1 - text);
    }
    return (long)keep;
}

/* steps.csv of a resumed run cut back to the rows of the steps
 * last.safetensors holds, rewritten atomically (so a crash now leaves the
 * file as it was, which a next --resume cuts the same); as it is when
 * nothing follows them.  The run appends to it (or, with --log-steps 0,
 * leaves it as the curve up to here). */
static int cut_step_log(const char *out, int64_t step, char *err, size_t errlen) {
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, out, "steps.csv");
    if (!ag__path_exists(path)) return 0;
    size_t n;
    char *text = read_text(path, &n);
    if (!text) return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    long keep = step_rows_upto(text, n, step);
    int rc = 0;
    if (keep < 0)
        rc = ag__train_fail(err, errlen, AG_ERR_FORMAT,
                            "%s: its first line is not '%s', so which rows the checkpoint's step %lld keeps is "
                            "unknown: move it away to resume", path, AG__STEP_LOG_HEADER, (long long)step);
    else if ((size_t)keep < n)
        rc = write_atomic(path, text, (size_t)keep, err, errlen);
    free(text);
    return rc;
}

/* What this command's --optim changed of the run's own optimizer, said
 * once (ag_checkpoint_load has done it): a new rate, state that starts at
 * zero, state not carried on. */
static void note_optim_changes(const char *path, const char *config, const ag_optimizer *opt) {
    const char *line = state_value(config, "optim");
    char spec[AG_CONFIG_MAX];
    ag_optim_config was;
    snprintf(spec, sizeof spec, "%.*s", line ? (int)strcspn(line, "\n") : 0, line ? line : "");
    if (!line || ag_optim_parse(spec, &was) || was.kind != opt->cfg.kind || ag__dist_rank() != 0) return;
    const char *kind = ag_optim_name(opt->cfg.kind);
    if (was.lr != opt->cfg.lr)
        fprintf(stderr, "note: %s: lr %g, this command's, is the rate from here on (the run's was %g; its schedule "
                "goes on from the new one)\n", path, opt->cfg.lr, was.lr);
    for (int k = 0; ag__optim_slot(&opt->cfg, k); k++)
        if (!ag__optim_keeps(&was, ag__optim_slot(&opt->cfg, k)))
            fprintf(stderr, "note: %s: the run's %s kept no '%s' state: it starts at zero\n", path, kind,
                    ag__optim_slot(&opt->cfg, k));
    for (int k = 0; ag__optim_slot(&was, k); k++)
        if (!ag__optim_keeps(&opt->cfg, ag__optim_slot(&was, k)))
            fprintf(stderr, "note: %s: its '%s' state is not carried on: this command's %s keeps none\n", path,
                    ag__optim_slot(&was, k), kind);
}

int ag__run_resume(const char *out, const ag_vocab *vocab, const ag__run_parts *p, ag__run_state *s, char *err,
                   size_t errlen) {
    char path[AG_PATH_MAX + 32];
    ag__path_join(path, sizeof path, out, "last.safetensors");
    ag_train_state st;
    if (ag_checkpoint_load(path, p->params, p->opt, p->sched, &st))
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
    /* this folder's own vocab.txt (a CV run has one per fold) against the
     * fingerprint its checkpoint recorded; runs saved before it: size only */
    const char *saved = state_value(st.config, "vocab-fp");
    char fp[17];
    snprintf(fp, sizeof fp, "%016" PRIx64, ag_vocab_fingerprint(vocab));
    if (saved && *saved != '\n' && strncmp(saved, fp, 16))
        return ag__train_fail(err, errlen, AG_DATA_EFORMAT,
                             "%s/vocab.txt is not the vocabulary this run was trained with (its words or their order "
                             "differ: fingerprint %s, the checkpoint's %.16s)", out, fp, saved);
    *p->rng = st.rng;
    note_optim_changes(path, st.config, p->opt);
    note_device(path, st.config, p->opt->device);
    int rc = state_parse(st.config, s, path, err, errlen);
    if (!rc) rc = restore_metrics(out, path, p->logs, err, errlen);
    /* rank 0 alone writes the folder, which it alone has locked */
    return !rc && ag__dist_rank() == 0 ? cut_step_log(out, s->step, err, errlen) : rc;
}
