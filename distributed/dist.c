/* dist.c - the data-parallel calls of dist.h over a backend, or the one
 * process they are without one.  MPI itself is in dist_mpi.c, which only
 * programs link: the reference below is weak, so a program without it
 * (a test, a user's program on the installed library) runs as one process. */
#include "dist.h"
#include "../graph/device.h"     /* the rank's GPU, copies between it and the host */
#include "../optim/kernels.h"    /* axpy: the loss weighted on its device */
#include "../graph/internal.h"   /* ag__seconds */
#include "dist_kernels.h"
#include "../ops/dispatch.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const ag__dist_backend *ag__dist_mpi_start(void) __attribute__((weak));
const ag__dist_device *ag__dist_nccl_start(const ag__dist_backend *mpi) __attribute__((weak));
bool ag__dist_nccl_loadable(char *why, size_t n) __attribute__((weak));

static const ag__dist_backend *be; /* NULL: one process */
/* How device buffers are reduced, chosen at the first collective on them */
static enum { GPU_UNSET, GPU_NCCL, GPU_HOST } gpu_path;
static const ag__dist_device *nccl; /* with GPU_NCCL */
static double reduce_seconds;    /* in the gradient allreduce, waits included */
static int64_t reduce_calls;

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

int ag__dist_init(char *err, size_t errlen) {
    int n = launched_size();
    if (be || n == 1) return 0;
    if (!ag__dist_mpi_start) {
        snprintf(err, errlen,
                 "started as one of %d processes (mpirun), but this attngrad was built without MPI: each would train "
                 "alone; rebuild with MPI (libopenmpi-dev, meson -Dmpi=enabled) or run without mpirun", n);
        return AG_ERR_ARG;
    }
    be = ag__dist_mpi_start();
    ag__cuda_prefer_device(be->local_rank); /* one GPU per rank, if it trains on one */
    size_pool(be->local_size);
    return 0;
}

void ag__dist_finalize(void) {
    /* a rank's non-zero exit (a stop on a signal gives every rank one)
     * makes Open MPI's mpirun end the others, maybe before their exit
     * flushes: what they printed leaves now */
    fflush(stdout);
    fflush(stderr);
    if (nccl) nccl->finalize();
    if (be) be->finalize();
    be = NULL, nccl = NULL, gpu_path = GPU_UNSET;
}

int ag__dist_rank(void) { return be ? be->rank : 0; }
int ag__dist_size(void) { return be ? be->size : 1; }

const char *ag__dist_who(void) {
    static char who[48];
    if (!be) return "";
    snprintf(who, sizeof who, "rank %d of %d: ", be->rank, be->size);
    return who;
}

void ag__dist_abort(int code) {
    if (!be) return;
    fflush(stdout);
    fflush(stderr);
    be->abort(code);
}

/* Rank r's share starts at ceil(rows r / size): rank 0's is the largest,
 * so it has rows whenever the batch has. */
void ag__dist_split(int64_t rows, int r, int size, int64_t *first, int64_t *count) {
    int64_t p = size, lo = (rows * r + p - 1) / p, hi = (rows * (r + 1) + p - 1) / p;
    *first = lo;
    *count = hi - lo;
}

void ag__dist_share_of(int r, int64_t rows, int64_t *first, int64_t *count) {
    ag__dist_split(rows, r, ag__dist_size(), first, count);
}

void ag__dist_share(int64_t rows, int64_t *first, int64_t *count) { ag__dist_share_of(ag__dist_rank(), rows, first, count); }

void ag__dist_sum(double *x, int n) {
    if (be) be->sum(x, n, sizeof *x);
}

void ag__dist_bcast(void *buf, size_t bytes) {
    if (be) be->bcast(buf, (int64_t)bytes);
}

static void *checked_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "attngrad: %sout of memory for %s (%zu bytes)\n", ag__dist_who(), what, bytes);
        ag__dist_abort(1);
        exit(1); /* one process: ag__dist_abort returned */
    }
    return p;
}

/* Allgather, then the largest nonzero: a max of ints is not what the
 * backend's sum of doubles gives (two ranks' SIGINT and SIGTERM). */
int ag__dist_any(int mine) {
    if (!be) return mine;
    int *all = checked_malloc((size_t)be->size * sizeof *all, "the ranks' stop requests");
    all[be->rank] = mine;
    be->allgather(all, sizeof *all);
    int any = 0;
    for (int r = 0; r < be->size; r++)
        if (all[r] && (!any || all[r] > any)) any = all[r];
    free(all);
    return any;
}

/* Two ranks sharing a GPU (their devices' UUIDs, gathered): *a < *b, or
 * false when every rank has its own. */
static bool shared_gpu(int *a, int *b) {
    unsigned char *ids = checked_malloc(16 * (size_t)be->size, "the ranks' GPU ids");
    ag__cuda_device(ids + 16 * (size_t)be->rank);
    be->allgather(ids, 16);
    bool found = false;
    for (int i = 0; i < be->size && !found; i++)
        for (int j = i + 1; j < be->size && !found; j++)
            if (!memcmp(ids + 16 * (size_t)i, ids + 16 * (size_t)j, 16)) *a = i, *b = j, found = true;
    free(ids);
    return found;
}

/* NCCL where the program was built with it, every rank can open its
 * library, and every rank has a GPU of its own (NCCL refuses two ranks on
 * one GPU), else MPI through host memory; rank 0's AG_DIST_REDUCE (nccl,
 * host or auto) may insist.  Every rank decides alike from what the
 * collectives told it; a rank without NCCL says why itself (only it knows). */
static void choose_gpu_path(void) {
    unsigned char want = 0; /* 0 auto, 1 nccl, 2 host */
    const char *v = getenv("AG_DIST_REDUCE");
    if (be->rank == 0 && v && *v && strcmp(v, "auto")) {
        want = !strcmp(v, "nccl") ? 1 : !strcmp(v, "host") ? 2 : 255;
        if (want == 255) {
            fprintf(stderr, "attngrad: %sAG_DIST_REDUCE=%s: expected nccl, host or auto\n", ag__dist_who(), v);
            ag__dist_abort(1);
        }
    }
    be->bcast(&want, 1);
    int a = 0, b = 0;
    bool built = ag__dist_nccl_start != NULL, shared = shared_gpu(&a, &b);
    char why[512] = "";
    bool opens = built && want != 2 && ag__dist_nccl_loadable(why, sizeof why);
    int missing = built && want != 2 ? ag__dist_any(opens ? 0 : be->rank + 1) : 0; /* the highest rank without, + 1 */
    if (built && want != 2 && !opens)
        fprintf(stderr, "attngrad: %s%s%s\n", ag__dist_who(), why,
                want == 1 ? "" : "; every rank's gradients go through host memory instead");
    if (want == 1 && (!built || missing || shared)) {
        if (!built)
            fprintf(stderr, "attngrad: %sAG_DIST_REDUCE=nccl, but this attngrad was built without NCCL (it needs MPI "
                    "and CUDA with nccl.h; meson -Dnccl=enabled)\n", ag__dist_who());
        else if (missing && be->rank == 0)
            fprintf(stderr, "attngrad: %sAG_DIST_REDUCE=nccl, but rank %d cannot open NCCL (its message says why): "
                    "install NCCL where it runs, or let the gradients go through host memory (AG_DIST_REDUCE=host)\n",
                    ag__dist_who(), missing - 1);
        else if (shared)
            fprintf(stderr, "attngrad: %sAG_DIST_REDUCE=nccl, but ranks %d and %d share a GPU, which NCCL refuses: "
                    "give each rank its own (CUDA_VISIBLE_DEVICES, or as many ranks per machine as GPUs), or let "
                    "the gradients go through host memory (AG_DIST_REDUCE=host)\n", ag__dist_who(), a, b);
        ag__dist_abort(1);
    }
    gpu_path = want != 2 && built && !missing && !shared ? GPU_NCCL : GPU_HOST;
    if (gpu_path == GPU_NCCL) nccl = ag__dist_nccl_start(be);
}

/* Rank 0's bytes at dev (device memory) to every rank's. */
static void bcast_device(void *dev, size_t bytes) {
    if (!gpu_path) choose_gpu_path();
    if (nccl) {
        nccl->bcast(dev, (int64_t)bytes);
        return;
    }
    void *host = checked_malloc(bytes, "a parameter's broadcast"); /* once per parameter and run */
    if (be->rank == 0) ag__cuda_copy(host, AG_CPU, dev, AG_CUDA, bytes);
    be->bcast(host, (int64_t)bytes);
    if (be->rank > 0) ag__cuda_copy(dev, AG_CUDA, host, AG_CPU, bytes);
    free(host);
}

void ag__dist_bcast_params(ag_params *ps) {
    for (int i = 0; be && i < ps->count; i++) {
        ag_tensor *t = ps->items[i];
        size_t bytes = (size_t)t->size * sizeof(ag_real);
        if (t->device == AG_CUDA) bcast_device(t->data, bytes);
        else be->bcast(t->data, (int64_t)bytes);
    }
}

void ag__dist_gather_shares(double *all, int64_t n) {
    if (!be) return;
    if (n > INT_MAX) {
        fprintf(stderr, "attngrad: %s%lld values to gather, MPI counts them in int\n", ag__dist_who(), (long long)n);
        ag__dist_abort(1);
    }
    int *counts = malloc(2 * (size_t)be->size * sizeof *counts);
    if (!counts) {
        fprintf(stderr, "attngrad: %sout of memory\n", ag__dist_who());
        ag__dist_abort(1);
        return;
    }
    for (int r = 0; r < be->size; r++) {
        int64_t first, count;
        ag__dist_share_of(r, n, &first, &count);
        counts[r] = (int)count, counts[be->size + r] = (int)first;
    }
    be->gather_doubles(all, counts, counts + be->size);
    free(counts);
}

/* Layout of the flat buffer: every gradient in parameter order, then the
 * loss sum, the count, the tokens and how many ranks ask to stop, so one
 * allreduce carries them all. */
enum { TAIL = 4 };

/* A host copy of the flat buffer, for MPI's sum of a GPU's buffer. */
static ag_real *host_flat(ag__dist_grads *g, int64_t n) {
    if (!g->host) g->host = checked_malloc((size_t)n * sizeof *g->host, "the flat gradient buffer");
    return g->host;
}

/* The global mean loss and the global tokens from the summed tail. */
static double from_tail(const ag_real *sums, double *tokens) {
    if (tokens) *tokens = (double)sums[2];
    double total = (double)sums[1];
    return total > 0 ? (double)sums[0] / total : 0;
}

/* ---- the CPU's kernels (distributed/cuda/dist.cu has CUDA's) ---- */

static void pack_cpu(const ag__kgrad_slot *slots, int count, int64_t largest, ag_real w, bool zero, ag_real *flat,
                     int64_t n, const ag_real tail[4]) {
    (void)largest;
    for (int i = 0; i < count; i++)
        for (int64_t k = 0; k < slots[i].size; k++) flat[slots[i].offset + k] = zero ? 0 : w * slots[i].grad[k];
    memcpy(flat + n, tail, TAIL * sizeof *tail);
}

static void unpack_cpu(const ag__kgrad_slot *slots, int count, int64_t largest, const ag_real *flat, int64_t n) {
    (void)largest;
    double total = (double)flat[n + 1];
    ag_real inv = total > 0 ? (ag_real)(1 / total) : 0;
    for (int i = 0; i < count; i++)
        for (int64_t k = 0; k < slots[i].size; k++) slots[i].grad[k] = flat[slots[i].offset + k] * inv;
}

static const ag__dist_kernels dist_cpu = {.pack = pack_cpu, .unpack = unpack_cpu};
AG_DISPATCH(dist, dist_cpu)

/* The flat buffer and the table of the gradients it packs, in one
 * allocation in the memory of the parameters' device, made at the first
 * step: [numel + TAIL values][slots]. */
static void flat_on(ag__dist_grads *g, const ag_params *ps, int64_t numel, ag_device dev) {
    if (g->flat) return;
    size_t values = ((size_t)(numel + TAIL) * sizeof(ag_real) + 255) / 256 * 256;
    size_t table = (size_t)ps->count * sizeof(ag__kgrad_slot);
    ag__kgrad_slot *slots = checked_malloc(table + 1, "the gradients' table");
    int64_t at = 0;
    g->largest = 0;
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *t = ps->items[i];
        if (t->device != dev)
            ag__fatal("ag__dist_reduce_grads", "parameter '%s' is on the %s, '%s' on the %s: move them all "
                      "(ag_params_to)", t->name ? t->name : "(unnamed)", ag_device_name(t->device),
                      ps->items[0]->name ? ps->items[0]->name : "(unnamed)", ag_device_name(dev));
        slots[i] = (ag__kgrad_slot){.grad = t->grad, .offset = at, .size = t->size};
        at += t->size;
        if (t->size > g->largest) g->largest = t->size;
    }
    g->device = dev;
    g->flat = ag__zeros_kept_on(dev, values + table, "ag__dist_reduce_grads");
    g->slots = (char *)g->flat + values;
    g->count = ps->count;
    ag__write_on(dev, g->slots, slots, table);
    free(slots);
}

/* The sum over the ranks of the flat buffer, in place: NCCL on the GPUs'
 * memory (true: timed by CUDA events, read once the host waits anyway), or
 * MPI on host memory (a GPU's buffer goes there and back). */
static bool sum_flat(ag__dist_grads *g, int64_t n) {
    bool on_gpu = g->device == AG_CUDA;
    if (on_gpu && !gpu_path) choose_gpu_path();
    if (on_gpu && nccl) {
        nccl->sum(g->flat, n, sizeof(ag_real)); /* the host does not wait here */
        return true;
    }
    ag_real *h = on_gpu ? host_flat(g, n) : g->flat;
    if (on_gpu) ag_sync(); /* backward and the pack are not the reduction's time */
    double t0 = ag__seconds();
    if (on_gpu) ag__read_on(AG_CUDA, h, g->flat, (size_t)n * sizeof *h);
    be->sum(h, n, sizeof *h);
    if (on_gpu) ag__write_on(AG_CUDA, g->flat, h, (size_t)n * sizeof *h);
    reduce_seconds += ag__seconds() - t0;
    return false;
}

double ag__dist_reduce_grads(ag__dist_grads *g, ag_params *ps, double n_local, double loss_local,
                             const ag_real *loss_there, double *tokens, int *stop) {
    if (!be) {
        if (!loss_there) return loss_local;
        ag_real one;
        ag__read_on(ps->count > 0 ? ps->items[0]->device : AG_CPU, &one, loss_there, sizeof one);
        return one;
    }
    const char *op = "ag__dist_reduce_grads";
    ag_device dev = ps->count > 0 ? ps->items[0]->device : AG_CPU;
    int64_t numel = ag_params_numel(ps), n = numel + TAIL;
    flat_on(g, ps, numel, dev);
    /* the weight n_local is applied in the pack and 1/N after the sum: N is
     * known only then, and the product is the same up to rounding */
    ag_real tail[TAIL] = {n_local > 0 && !loss_there ? (ag_real)(loss_local * n_local) : 0, (ag_real)n_local,
                          tokens ? (ag_real)*tokens : 0, stop && *stop ? 1 : 0};
    const ag__dist_kernels *k = ag__dist_on(op, dev);
    if (g->count > 0) k->pack(g->slots, g->count, g->largest, (ag_real)n_local, !(n_local > 0), g->flat, numel, tail);
    else ag__write_on(dev, g->flat + numel, tail, sizeof tail);
    if (loss_there && n_local > 0) /* the weighted loss made where the loss is: no wait for it */
        ag__grads_on(op, dev)->axpy((ag_real)n_local, loss_there, g->flat + numel, 1);
    ag__kernels_done(op, dev);
    bool by_events = sum_flat(g, n);
    if (g->count > 0) k->unpack(g->slots, g->count, g->largest, g->flat, numel);
    ag__kernels_done(op, dev);
    ag_real sums[TAIL];
    ag__read_on(dev, sums, g->flat + numel, sizeof sums); /* the loss is read now anyway */
    if (by_events) reduce_seconds += nccl->last_seconds();
    reduce_calls++;
    if (stop) *stop = sums[3] > 0 ? ag__dist_any(*stop) : 0; /* every rank sees the same sum: all or none call it */
    return from_tail(sums, tokens);
}

double ag__dist_reduce_seconds(int64_t *calls) {
    if (calls) *calls = reduce_calls;
    return reduce_seconds;
}

const char *ag__dist_reduce_path(void) {
    if (!be) return "";
    return gpu_path == GPU_NCCL ? "NCCL" : gpu_path == GPU_HOST ? "MPI through host memory" : "MPI";
}

void ag__dist_grads_free(ag__dist_grads *g) {
    free(g->host);
    if (g->flat) ag__free_kept_on(g->device, g->flat);
    *g = (ag__dist_grads){0};
}
