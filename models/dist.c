/* dist.c - the data-parallel calls of dist.h over a backend, or the one
 * process they are without one.  MPI itself is in dist_mpi.c, which only
 * programs link: the reference below is weak, so a program without it
 * (a test, a user's program on the installed library) runs as one process. */
#include "dist.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const ag_dist_backend *ag__dist_mpi_start(void) __attribute__((weak));

static const ag_dist_backend *be; /* NULL: one process */
static double reduce_seconds;    /* in the gradient allreduce, waits included */
static int64_t reduce_calls;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* How many processes the launcher started, from its environment; 1 when
 * not launched by mpirun (Open MPI) or mpiexec (MPICH's Hydra). */
static int launched_size(void) {
    const char *keys[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(keys[i]);
        if (v && atoi(v) > 1) return atoi(v);
    }
    return 1;
}

/* The engine's pool defaults to a thread per online core: N ranks on one
 * machine would each start that many and fight over the cores. */
static void size_pool(int local_size) {
    if (getenv("AG_NUM_THREADS") || getenv("OMP_NUM_THREADS")) return;
    int online = (int)sysconf(_SC_NPROCESSORS_ONLN), cpus = online;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
    int n = cpus < online ? cpus : online / (local_size > 0 ? local_size : 1); /* bound: its cores; else a share */
    ag_set_num_threads(n > 0 ? n : 1);
}

int ag_dist_init(char *err, size_t errlen) {
    int n = launched_size();
    if (be || n == 1) return 0;
    if (!ag__dist_mpi_start) {
        snprintf(err, errlen,
                 "started as one of %d processes (mpirun), but this attngrad was built without MPI: each would train "
                 "alone; rebuild with MPI (libopenmpi-dev, meson -Dmpi=enabled) or run without mpirun", n);
        return AG_ERR_ARG;
    }
    be = ag__dist_mpi_start();
    size_pool(be->local_size);
    return 0;
}

void ag_dist_finalize(void) {
    if (be) be->finalize();
    be = NULL;
}

int ag_dist_rank(void) { return be ? be->rank : 0; }
int ag_dist_size(void) { return be ? be->size : 1; }

const char *ag_dist_who(void) {
    static char who[48];
    if (!be) return "";
    snprintf(who, sizeof who, "rank %d of %d: ", be->rank, be->size);
    return who;
}

void ag_dist_abort(int code) {
    if (!be) return;
    fflush(stdout);
    fflush(stderr);
    be->abort(code);
}

/* Rank r's share starts at ceil(rows r / size): rank 0's is the largest,
 * so it has rows whenever the batch has. */
void ag_dist_split(int64_t rows, int r, int size, int64_t *first, int64_t *count) {
    int64_t p = size, lo = (rows * r + p - 1) / p, hi = (rows * (r + 1) + p - 1) / p;
    *first = lo;
    *count = hi - lo;
}

void ag_dist_share_of(int r, int64_t rows, int64_t *first, int64_t *count) {
    ag_dist_split(rows, r, ag_dist_size(), first, count);
}

void ag_dist_share(int64_t rows, int64_t *first, int64_t *count) { ag_dist_share_of(ag_dist_rank(), rows, first, count); }

void ag_dist_sum(double *x, int n) {
    if (be) be->sum(x, n, sizeof *x);
}

void ag_dist_bcast(void *buf, size_t bytes) {
    if (be) be->bcast(buf, (int64_t)bytes);
}

void ag_dist_bcast_params(ag_params *ps) {
    for (int i = 0; be && i < ps->count; i++)
        be->bcast(ps->items[i]->data, ps->items[i]->size * (int64_t)sizeof(ag_real));
}

void ag_dist_gather_shares(double *all, int64_t n) {
    if (!be) return;
    if (n > INT_MAX) {
        fprintf(stderr, "attngrad: %s%lld values to gather, MPI counts them in int\n", ag_dist_who(), (long long)n);
        ag_dist_abort(1);
    }
    int *counts = malloc(2 * (size_t)be->size * sizeof *counts);
    if (!counts) {
        fprintf(stderr, "attngrad: %sout of memory\n", ag_dist_who());
        ag_dist_abort(1);
        return;
    }
    for (int r = 0; r < be->size; r++) {
        int64_t first, count;
        ag_dist_share_of(r, n, &first, &count);
        counts[r] = (int)count, counts[be->size + r] = (int)first;
    }
    be->gather_doubles(all, counts, counts + be->size);
    free(counts);
}

/* Layout of the flat buffer: every gradient in parameter order, then the
 * loss sum, the count and the tokens, so one allreduce carries them all. */
double ag_dist_reduce_grads(ag_dist_grads *g, ag_params *ps, double n_local, double loss_local, double *tokens) {
    if (!be) return loss_local;
    int64_t numel = ag_params_numel(ps);
    if (!g->buf) {
        g->n = numel + 3;
        g->buf = malloc((size_t)g->n * sizeof *g->buf);
        if (!g->buf) {
            fprintf(stderr, "attngrad: %sout of memory for a %lld-value gradient buffer\n", ag_dist_who(),
                    (long long)g->n);
            ag_dist_abort(1);
        }
    }
    /* the weight n_local is applied here and 1/N after the sum: N is known
     * only then, and the product is the same up to rounding */
    ag_real w = (ag_real)n_local, *p = g->buf;
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *t = ps->items[i];
        for (int64_t k = 0; k < t->size; k++) p[k] = n_local > 0 ? w * t->grad[k] : 0;
        p += t->size;
    }
    p[0] = n_local > 0 ? (ag_real)(loss_local * n_local) : 0;
    p[1] = (ag_real)n_local;
    p[2] = tokens ? (ag_real)*tokens : 0;
    double t0 = now();
    be->sum(g->buf, g->n, sizeof *g->buf);
    reduce_seconds += now() - t0, reduce_calls++;
    if (tokens) *tokens = (double)p[2];
    double total = (double)p[1];
    ag_real inv = total > 0 ? (ag_real)(1 / total) : 0;
    p = g->buf;
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *t = ps->items[i];
        for (int64_t k = 0; k < t->size; k++) t->grad[k] = p[k] * inv;
        p += t->size;
    }
    return total > 0 ? (double)p[0] / total : 0;
}

double ag_dist_reduce_seconds(int64_t *calls) {
    if (calls) *calls = reduce_calls;
    return reduce_seconds;
}

void ag_dist_grads_free(ag_dist_grads *g) {
    free(g->buf);
    *g = (ag_dist_grads){0};
}
