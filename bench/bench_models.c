/* bench_models.c - one full training step of every registered model at the
 * paper's size (f32): forward, backward, L2 term, the paper's optimizer.
 *
 *     bench_models [--model NAME] [--threads N] [--steps K] [--warmup W] [--device cpu|cuda]
 *                  [--csv FILE] [--batch-dir DIR] [--no-peak | --peak-only] [--gemm-shapes]
 *                  [--no-dropout] [--tile-256]
 *
 * --tile-256 runs our GEMM kernel's 256-bit tile where the CPU has AVX-512
 * (the 512-bit one's before/after; the same bits).
 * --device cuda runs the steps on the GPU (parameters and optimizer state
 * there, the batch copied per step as training does); each step ends with
 * ag_sync, so its time is the GPU's work, and "accounted" memory is the
 * device arena's high-water mark + parameters, gradients and state (GEMM
 * columns count OpenBLAS only, so they are empty there).
 *
 * Per model it reports the median step time with its spread (quartiles,
 * min and max) over K steps after W warm-up steps, the memory, and how much
 * of the step is matrix multiplication:
 *
 *  - memory, two ways: "accounted" = the step arena's high-water mark
 *    (ag_memstats().arena_high: activations, gradients, tape) + parameters
 *    and their gradients + optimizer state; and "rss" = the growth of the
 *    process's peak resident set (getrusage maxrss) from just before the
 *    model is built to the end of its steps.  Each model runs in a forked
 *    child, so every rss figure starts from the same clean process.
 *  - GEMM: every matrix product is counted and timed - OpenBLAS's
 *    cblas_sgemm and the entry points of attngrad's own kernel
 *    (ops/gemm_kernel.c: ag__gemm_packed, ag__gemm_packed_op,
 *    ag__gemm_small) - through link-time wrappers (-Wl,--wrap=...; the
 *    library is untouched): FLOPs (2MNK), calls and time per step, against
 *    the peak of a large square sgemm measured in the same run.
 *    --gemm-shapes also lists the products (transposes, M, N, K, and which
 *    code ran them) that take 90% of the GEMM time, with their rate.
 *
 * The batch is synthetic and fixed: width N (the model's fixed length for
 * dual-axial), the first row full and the other lengths uniform in
 * [ceil(N/2), N], tokens uniform over the vocabulary, random dependency
 * trees, all from seed 1.  --batch-dir DIR writes each model's batch and
 * config to DIR/<model>.safetensors, which bench/bench_models.py replays
 * in PyTorch.  --csv writes model,attngrad_ms,torch_ms,ratio,
 * attngrad_peak_mb,torch_peak_mb (the torch columns empty here; peak = rss).
 *
 * The step is the model's own training recipe (its ag_model_defaults):
 * optimizer, L2, gradient clipping (cfg.clip), dropout (cfg.keep, and
 * cfg.keep_layers between the LM's LSTM layers).  Each model's line says
 * which, and the batch file carries the same values to the PyTorch side.
 * The loss of every step (warm-up included) is printed: one step's loss
 * says little where the recipe is noisy (the LM's SGD at lr 30 spikes on
 * single steps), so the summary adds the median of the last five.
 * --no-dropout sets every keep to 1: both sides then run the same
 * arithmetic, and their losses must agree step by step.
 */
#include "bench_batch.h"
#include "bench_time.h"
#include "../graph/internal.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#ifdef AG_HAVE_OPENBLAS_THREADS
void openblas_set_num_threads(int num_threads);
#endif

/* ---- GEMM accounting: a link-time wrapper around cblas_sgemm ---- */

typedef struct {
    double flops, seconds; /* seconds: summed over calls, so two threads' products overlapping count twice */
    double wall;           /* wall time with at least one product running (global figures only) */
    long calls;
} gemm_stats;

static gemm_stats gemm;

/* --gemm-shapes: the same figures per distinct product (transposes, M, N, K). */
typedef struct {
    char ta, tb, lib; /* lib: 'b' OpenBLAS, 'k' attngrad's kernel */
    int M, N, K;
    gemm_stats s;
} gemm_shape;

enum { MAX_SHAPES = 512 };
static gemm_shape shapes[MAX_SHAPES];
static int n_shapes, shapes_on, want_shapes;

static void shape_add(char lib, char ta, char tb, int M, int N, int K, double seconds) {
    int i = 0;
    while (i < n_shapes && !(shapes[i].lib == lib && shapes[i].ta == ta && shapes[i].tb == tb && shapes[i].M == M &&
                             shapes[i].N == N && shapes[i].K == K))
        i++;
    if (i == MAX_SHAPES) return;
    if (i == n_shapes) shapes[n_shapes++] = (gemm_shape){.ta = ta, .tb = tb, .lib = lib, .M = M, .N = N, .K = K};
    shapes[i].s.flops += 2.0 * M * N * K;
    shapes[i].s.seconds += seconds;
    shapes[i].s.calls++;
}

static int by_seconds(const void *a, const void *b) {
    double x = ((const gemm_shape *)a)->s.seconds, y = ((const gemm_shape *)b)->s.seconds;
    return (x < y) - (x > y);
}

/* The products that took 90% of the sgemm time, slowest first, per step. */
static void print_shapes(const char *model, int steps, double peak) {
    qsort(shapes, (size_t)n_shapes, sizeof *shapes, by_seconds);
    double total = 0, shown = 0;
    for (int i = 0; i < n_shapes; i++) total += shapes[i].s.seconds;
    printf("\n%s: matrix products per step (%d distinct), slowest first (by: OpenBLAS or attngrad's kernel)\n", model,
           n_shapes);
    printf("  %-3s %-8s %6s %6s %6s %7s %8s %8s %7s %6s\n", "op", "by", "M", "N", "K", "calls", "GFLOP", "ms", "GFLOP/s",
           "share");
    for (int i = 0; i < n_shapes && shown < 0.9 * total; i++) {
        const gemm_shape *g = &shapes[i];
        double rate = g->s.flops / g->s.seconds / 1e9;
        printf("  %c%c  %-8s %6d %6d %6d %7.1f %8.3f %8.2f %7.1f %5.1f%%", g->ta, g->tb,
               g->lib == 'b' ? "openblas" : "attngrad", g->M, g->N, g->K,
               (double)g->s.calls / steps, g->s.flops / steps / 1e9, 1e3 * g->s.seconds / steps, rate,
               100 * g->s.seconds / total);
        if (peak > 0) printf(" (%.0f%% of peak)", 100 * rate / peak);
        printf("\n");
        shown += g->s.seconds;
    }
    fflush(stdout);
}

#if defined(AG_GEMM_WRAP) && defined(OPENBLAS_CONST)
#define GEMM_COUNTED 1
/* Products also run inside the engine's parallel parts: the counts take a lock. */
static pthread_mutex_t gemm_lock = PTHREAD_MUTEX_INITIALIZER;
static int products_running;
static double running_since;

/* A product starts: its start time, and the start of a stretch of wall
 * time with products running if none was. */
static double product_begin(void) {
    double t0 = bench_seconds(CLOCK_MONOTONIC);
    pthread_mutex_lock(&gemm_lock);
    if (products_running++ == 0) running_since = t0;
    pthread_mutex_unlock(&gemm_lock);
    return t0;
}

static void count_product(char lib, char ta, char tb, int M, int N, int K, double t0) {
    double t1 = bench_seconds(CLOCK_MONOTONIC), dt = t1 - t0;
    pthread_mutex_lock(&gemm_lock);
    if (--products_running == 0) gemm.wall += t1 - running_since;
    gemm.seconds += dt;
    gemm.flops += 2.0 * M * N * K;
    gemm.calls++;
    if (shapes_on) shape_add(lib, ta, tb, M, N, K, dt);
    pthread_mutex_unlock(&gemm_lock);
}

/* A call that turned out not to be a product (ag__gemm_small refusing). */
static void product_end_uncounted(void) {
    double t1 = bench_seconds(CLOCK_MONOTONIC);
    pthread_mutex_lock(&gemm_lock);
    if (--products_running == 0) gemm.wall += t1 - running_since;
    pthread_mutex_unlock(&gemm_lock);
}

__typeof__(cblas_sgemm) __real_cblas_sgemm, __wrap_cblas_sgemm;
__typeof__(ag__gemm_packed) __real_ag__gemm_packed, __wrap_ag__gemm_packed;
__typeof__(ag__gemm_packed_op) __real_ag__gemm_packed_op, __wrap_ag__gemm_packed_op;
__typeof__(ag__gemm_small) __real_ag__gemm_small, __wrap_ag__gemm_small;

void __wrap_ag__gemm_packed(int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha, ag_real beta,
                            ag_real *C, int ldc) {
    double t0 = product_begin();
    __real_ag__gemm_packed(M, A, lda, B, alpha, beta, C, ldc);
    count_product('k', 'N', 'N', M, B->N, B->K, t0);
}

void __wrap_ag__gemm_packed_op(bool ta, int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha,
                               ag_real beta, ag_real *C, int ldc) {
    double t0 = product_begin();
    __real_ag__gemm_packed_op(ta, M, A, lda, B, alpha, beta, C, ldc);
    count_product('k', ta ? 'T' : 'N', 'N', M, B->N, B->K, t0);
}

bool __wrap_ag__gemm_small(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda,
                           const ag_real *B, int ldb, ag_real beta, ag_real *C, int ldc, const ag__k_span *spans) {
    double t0 = product_begin();
    bool done = __real_ag__gemm_small(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, spans);
    if (done) count_product('k', ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, t0);
    else product_end_uncounted();
    return done;
}

void __wrap_cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER order, OPENBLAS_CONST enum CBLAS_TRANSPOSE ta,
                        OPENBLAS_CONST enum CBLAS_TRANSPOSE tb, OPENBLAS_CONST blasint M, OPENBLAS_CONST blasint N,
                        OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha, OPENBLAS_CONST float *A,
                        OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *B, OPENBLAS_CONST blasint ldb,
                        OPENBLAS_CONST float beta, float *C, OPENBLAS_CONST blasint ldc) {
    double t0 = product_begin();
    __real_cblas_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    (void)order; /* ag__gemm is row-major throughout */
    count_product('b', ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', M, N, K, t0);
}
#else
#define GEMM_COUNTED 0
#endif

/* Best GFLOP/s of an n x n x n sgemm (a few runs after one warm-up). */
static double sgemm_peak(int n) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++) a[i] = b[i] = (float)((i % 17) - 8) / 16;
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_seconds(CLOCK_MONOTONIC);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double dt = bench_seconds(CLOCK_MONOTONIC) - t0;
        if (r > 0 && 2.0 * n * n * n / dt > best) best = 2.0 * n * n * n / dt;
    }
    free(a), free(b), free(c);
    return best / 1e9;
}

/* ---- memory bandwidth, for the optimizer's floor ---- */

typedef struct {
    float *x;
    const float *y;
} rmw_job;

static void rmw_range(void *ctx, int64_t i0, int64_t i1) {
    const rmw_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->x[i] = j->x[i] * 0.999f + j->y[i];
}

/* Best GB/s of x = 0.999 x + y over two 128 MB arrays (2 reads and a write
 * per element, the optimizer's pattern of reading what it writes back), on
 * the engine's pool at the same threads as the steps. */
static double memory_gbs(void) {
    const int64_t n = (int64_t)1 << 25;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = y[i] = 1e-3f * (float)(i % 7);
    rmw_job j = {x, y};
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_seconds(CLOCK_MONOTONIC);
        ag__parallel_range(n, (int64_t)1 << 16, rmw_range, &j);
        double dt = bench_seconds(CLOCK_MONOTONIC) - t0;
        if (r > 0 && 12.0 * (double)n / dt > best) best = 12.0 * (double)n / dt;
    }
    free(x), free(y);
    return best / 1e9;
}

/* ---- the model's recipe ---- */

static bool no_dropout; /* --no-dropout */

/* bench_batch.h's config, every keep 1 under --no-dropout. */
static ag_model_config model_config(const ag_model_kind *kind) {
    ag_model_config c = bench_config(kind);
    if (no_dropout) c.keep = c.keep_layers = 1;
    return c;
}

/* cfg.keep_layers as ag_lstm reads it: 0 (a model that never set it) is 1. */
static double keep_between_layers(const ag_model_config *c) { return c->keep_layers > 0 ? c->keep_layers : 1; }

/* The recipe in words, for the model's summary line. */
static void print_recipe(const ag_model_config *c) {
    printf("optimizer %s, ", c->optim);
    if (c->clip > 0) printf("gradient norm clipped at %g, ", c->clip);
    printf("L2 %g, dropout keep %g", c->l2, c->keep);
    if (c->task == AG_TASK_LM) printf(" (between LSTM layers %g)", keep_between_layers(c));
}

/* ---- the synthetic batch ---- */

static int64_t *add_ints(ag_st_writer *w, const char *name, const int32_t *src, int rows, int width) {
    int64_t n = (int64_t)rows * (width ? width : 1), *dst = malloc((size_t)n * sizeof *dst);
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    ag_st_add(w, name, AG_I64, width ? 2 : 1, (int64_t[]){rows, width}, dst);
    return dst;
}

/* The batch, the model's config and its initial parameters, for the
 * PyTorch side. */
static void write_batch(const char *dir, const ag_model *m, const ag_batch *b) {
    static const char *const tasks[] = {"classify", "pair", "lm"}, *const att[] = {"positional", "standard", "none"};
    const ag_model_config *c = &m->cfg;
    char path[1024], config[1024];
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, m->kind->name);
    snprintf(config, sizeof config,
             "model=%s\nvocab=%d\nclasses=%d\ndim=%d\nhidden=%d\nheads=%d\nlayers=%d\nfixed_len=%d\nn_bigram=%d\n"
             "keep=%.17g\nkeep_layers=%.17g\npos_hidden=%d\nl2=%.17g\noptim=%s\ntask=%s\nattention=%s\nbatch=%d\n"
             "clip=%.17g\n",
             m->kind->name, c->vocab, c->classes, c->dim, c->hidden, c->heads, c->layers, c->fixed_len, c->n_bigram,
             c->keep, keep_between_layers(c), c->pos_hidden, c->l2, c->optim, tasks[c->task],
             att[c->attention >= 0 && c->attention < 3 ? c->attention : 0], b->rows, c->clip);
    ag_st_writer w = {0};
    int64_t *bufs[8];
    int nb = 0, B = b->rows, N = b->width;
    bufs[nb++] = add_ints(&w, "batch.tokens", b->tokens, B, N);
    bufs[nb++] = add_ints(&w, "batch.lengths", b->lengths, B, 0);
    bufs[nb++] = add_ints(&w, "batch.labels", b->labels, B, 0);
    bufs[nb++] = add_ints(&w, "batch.targets", b->targets, B, N);
    bufs[nb++] = add_ints(&w, "batch.heads", b->heads, B, N);
    bufs[nb++] = add_ints(&w, "batch.bigrams", b->bigrams, B, N);
    bufs[nb++] = add_ints(&w, "batch.tokens_b", b->tokens_b, B, N);
    bufs[nb++] = add_ints(&w, "batch.lengths_b", b->lengths_b, B, 0);
    for (int i = 0; i < m->params.count; i++) /* the initial values: both sides start alike */
        ag_st_add_tensor(&w, m->params.items[i]->name, m->params.items[i]);
    ag_st_set_meta(&w, "config", config);
    ag_st_set_meta(&w, "model", m->kind->name);
    if (ag_st_write(&w, path) != AG_OK) fprintf(stderr, "bench_models: %s\n", ag_errmsg());
    ag_st_writer_free(&w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
}

/* ---- one model ---- */

enum { MAX_LOSSES = 256 }; /* the steps whose losses are kept, from the first */

typedef struct {
    int B, N;
    int64_t params;
    double ms_med, ms_q1, ms_q3, ms_min, ms_max;
    double gemm_gflop, gemm_ms, gemm_calls;  /* per step */
    double arena_mb, param_mb, optim_mb, rss_mb;
    double loss_first, loss_last, loss_tail; /* tail: the median of the last five steps' */
    double losses[MAX_LOSSES];               /* warm-up included */
    int n_losses, steps;
    int slots; /* the optimizer's state arrays per parameter */
    double waits;    /* per step: times the host waited for the GPU */
    double launches; /* per step: kernels, cuBLAS calls, copies and fills put on the GPU's stream */
    double graph_launches, eager_segments; /* per step, with --cuda-graphs */
} result;
/* bench_forked's child writes it in one write() and the parent reads it in one read() */
_Static_assert(sizeof(result) <= PIPE_BUF, "a result must fit one atomic pipe write");

static double quantile(const double *sorted, int n, double q) {
    double pos = q * (n - 1);
    int i = (int)pos;
    return i + 1 < n ? sorted[i] + (pos - i) * (sorted[i + 1] - sorted[i]) : sorted[n - 1];
}

static double maxrss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

static ag_device device = AG_CPU;
static int cuda_graphs; /* --cuda-graphs: ag_cuda_graphs on the GPU */

/* The first, the last and the median of the last five of n >= 1 losses,
 * and the first MAX_LOSSES of them. */
static void keep_losses(result *r, const double *losses, int n) {
    double tail[5];
    int k = n < 5 ? n : 5;
    memcpy(tail, losses + n - k, (size_t)k * sizeof *tail);
    qsort(tail, (size_t)k, sizeof *tail, bench_cmp_double);
    r->loss_first = losses[0];
    r->loss_last = losses[n - 1];
    r->loss_tail = quantile(tail, k, 0.5);
    r->steps = n;
    r->n_losses = n < MAX_LOSSES ? n : MAX_LOSSES;
    memcpy(r->losses, losses, (size_t)r->n_losses * sizeof *losses);
}

static int bench_one(const ag_model_kind *kind, int steps, int warmup, const char *batch_dir, result *res) {
    double rss0 = maxrss_mb();
    ag_model_config cfg = model_config(kind);
    ag_model m;
    if (ag_model_init(&m, kind, &cfg)) {
        fprintf(stderr, "bench_models: %s\n", ag_errmsg());
        exit(1);
    }
    int B = cfg.batch, N = bench_width(&cfg);
    ag_batch b;
    bench_batch_make(&m, B, N, 1, &b);
    if (batch_dir) write_batch(batch_dir, &m, &b);
    if (device == AG_CUDA) { /* after write_batch: the initial values go out from the host */
        ag_params_to(&m.params, AG_CUDA);
        ag_set_device(AG_CUDA);
        ag_cuda_graphs(cuda_graphs);
    }

    ag_optim_config oc;
    ag_optimizer opt;
    if (ag_optim_parse(cfg.optim, &oc) != AG_OK || ag_optim_init(&opt, &m.params, &oc) != AG_OK) {
        fprintf(stderr, "bench_models: %s: optimizer '%s': %s\n", kind->name, cfg.optim, ag_errmsg());
        return 1;
    }
    double *ms = malloc(sizeof(double) * (size_t)steps), *losses = malloc(sizeof(double) * (size_t)(warmup + steps));
    gemm_stats before = gemm;
    int64_t waits0 = 0;
    ag_mem_stats stats0 = {0};
    for (int s = -warmup; s < steps; s++) {
        if (s == 0) before = gemm, shapes_on = want_shapes, stats0 = ag_memstats(), waits0 = stats0.device_waits;
        double t0 = bench_seconds(CLOCK_MONOTONIC);
        ag_params_zero_grad(&m.params);
        ag_tensor *loss = ag_model_loss(&m, &b, true);
        double value = ag_item(loss);
        ag_backward(loss);
        if (cfg.l2 > 0) ag_l2_grad(&m.params, cfg.l2);
        if (cfg.clip > 0) ag_clip_grad_norm(&m.params, cfg.clip); /* the LM's 0.25, docs/models.md, positional LM */
        ag_optim_step(&opt);
        ag_step_end();
        ag_sync(); /* the GPU's queue drained: the step's whole work is inside dt */
        double dt = bench_seconds(CLOCK_MONOTONIC) - t0;
        losses[warmup + s] = value;
        if (s >= 0) ms[s] = 1e3 * dt;
    }
    shapes_on = 0;
    if (want_shapes) print_shapes(kind->name, steps, 0);
    qsort(ms, (size_t)steps, sizeof *ms, bench_cmp_double);
    int64_t numel = ag_params_numel(&m.params);
    *res = (result){
        .B = B, .N = N, .params = numel,
        .ms_med = quantile(ms, steps, 0.5), .ms_q1 = quantile(ms, steps, 0.25), .ms_q3 = quantile(ms, steps, 0.75),
        .ms_min = ms[0], .ms_max = ms[steps - 1],
        .gemm_gflop = (gemm.flops - before.flops) / steps / 1e9,
        .gemm_ms = 1e3 * (gemm.wall - before.wall) / steps, /* wall: at 2 threads overlapping products count once */
        .gemm_calls = (double)(gemm.calls - before.calls) / steps,
        .arena_mb = (double)(device == AG_CUDA ? ag_memstats().device_arena_high : ag_memstats().arena_high) / (1 << 20),
        .param_mb = 2.0 * (double)numel * sizeof(ag_real) / (1 << 20),
        .optim_mb = (double)opt.n_slots * (double)numel * sizeof(ag_real) / (1 << 20),
        .slots = opt.n_slots,
        .rss_mb = maxrss_mb() - rss0,
        .waits = (double)(ag_memstats().device_waits - waits0) / steps,
        .launches = (double)(ag_memstats().device_launches - stats0.device_launches) / steps,
        .graph_launches = (double)(ag_memstats().graph_launches - stats0.graph_launches) / steps,
        .eager_segments = (double)(ag_memstats().eager_segments - stats0.eager_segments) / steps,
    };
    keep_losses(res, losses, warmup + steps);
    free(ms);
    free(losses);
    ag_optim_free(&opt);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    ag_shutdown();
    return 0;
}

/* Runs bench_one in a child process so that each model's rss is its own. */
static int bench_forked(const ag_model_kind *kind, int steps, int warmup, const char *batch_dir, result *res) {
    int fd[2];
    if (pipe(fd) != 0) return 1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(fd[0]);
        result r = {0};
        int rc = bench_one(kind, steps, warmup, batch_dir, &r);
        if (rc == 0 && write(fd[1], &r, sizeof r) != (ssize_t)sizeof r) rc = 1;
        _exit(rc);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], res, sizeof *res);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got == (ssize_t)sizeof *res && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

/* The step's GEMM work at the sgemm peak (ms): no step with these
 * products can be faster.  0 without a peak. */
static double bound_ms(const result *r, double peak_gflops) {
    return peak_gflops > 0 ? 1e3 * r->gemm_gflop / peak_gflops : 0;
}

/* Bytes a step's dense passes over the parameters move at least: the
 * optimizer reads the value, the gradient and each state slot and writes
 * back the value and the slots; zeroing writes every gradient. */
static double param_pass_mb(const result *r) { return (double)r->params * sizeof(ag_real) * (4 + 2 * r->slots) / 1e6; }

static void usage(void) {
    fprintf(stderr, "usage: bench_models [--model NAME] [--threads N] [--steps K] [--warmup W] [--device cpu|cuda]\n"
                    "                    [--csv FILE] [--batch-dir DIR] [--no-peak | --peak-only] [--gemm-shapes]\n"
                    "                    [--no-dropout] [--cuda-graphs] [--tile-256]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *only = NULL, *csv = NULL, *batch_dir = NULL;
    int threads = 0, steps = 20, warmup = 3, peak = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-peak")) { peak = 0; continue; }
        if (!strcmp(a, "--peak-only")) { peak = 2; continue; }
        if (!strcmp(a, "--gemm-shapes")) { want_shapes = 1; continue; }
        if (!strcmp(a, "--no-dropout")) { no_dropout = true; continue; }
        if (!strcmp(a, "--tile-256")) { ag__gemm_kernel_256(true); continue; }
        if (!strcmp(a, "--cuda-graphs")) { cuda_graphs = 1; continue; }
        if (!v) usage();
        if (!strcmp(a, "--model")) only = v;
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--csv")) csv = v;
        else if (!strcmp(a, "--batch-dir")) batch_dir = v;
        else if (!strcmp(a, "--device") && (!strcmp(v, "cpu") || !strcmp(v, "cuda"))) device = !strcmp(v, "cuda") ? AG_CUDA : AG_CPU;
        else usage();
        i++;
    }
    if (steps < 1 || warmup < 0) usage();
    if (only && !ag_model_find(only)) {
        fprintf(stderr, "bench_models: unknown model '%s'\n", only);
        return 2;
    }
    printf("blas: %s\n", ag_blas_info()); /* its kernels chosen before the peak is measured */
#ifdef AG_HAVE_OPENBLAS_THREADS
    if (threads > 0) openblas_set_num_threads(threads);
#else
    if (threads > 0) fprintf(stderr, "bench_models: no openblas_set_num_threads: set OPENBLAS_NUM_THREADS\n");
#endif
    if (peak == 2) { /* for bench_models.py: the sgemm peak alone */
        printf("result: peak_gflops=%.2f\n", sgemm_peak(2048));
        return 0;
    }
    /* The engine's pool does the parallel work (OpenBLAS runs single-threaded
     * inside it); the peak below is OpenBLAS's own threads at the same count. */
    if (threads > 0) ag_set_num_threads(threads);
    /* CUDA is first touched in the forked children (a parent that had
     * initialised it could not fork a child that uses it) */
    if (device == AG_CUDA) peak = 0; /* the CPU's sgemm peak says nothing of the GPU's step */
    printf("attngrad f32 training step (fwd + bwd + L2 + clipping + optimizer) on the %s, median of %d steps after %d "
           "warm-up; threads %d%s%s\n\n",
           ag_device_name(device), steps, warmup, ag_get_num_threads(), no_dropout ? "; dropout off" : "",
           device == AG_CUDA ? "; GEMM columns: OpenBLAS only, none here" : GEMM_COUNTED ? "" : "; GEMM not counted (no --wrap)");
    printf("| %-10s | %-6s | %9s | %8s | %-28s | %6s | %7s | %6s | %7s | %8s | %6s |\n", "model", "BxN", "params",
           "step ms", "[q1-q3] (min-max)", "GEMM", "GEMM ms", "% step", "calls", "acct MB", "rss MB");
    printf("|------------|--------|-----------|----------|------------------------------|--------|---------|--------|"
           "---------|----------|--------|\n");
    FILE *out = csv ? fopen(csv, "w") : NULL;
    if (csv && !out) {
        perror(csv);
        return 1;
    }
    if (out) fprintf(out, "model,attngrad_ms,torch_ms,ratio,attngrad_peak_mb,torch_peak_mb\n");
    result rs[16];
    const char *names[16];
    int n = 0, failed = 0;
    for (const ag_model_kind *const *k = ag_model_kinds(); *k && n < 16; k++) {
        if (only && strcmp((*k)->name, only)) continue;
        result r = {0};
        if (bench_forked(*k, steps, warmup, batch_dir, &r)) {
            fprintf(stderr, "bench_models: %s failed\n", (*k)->name);
            failed = 1;
            continue;
        }
        char bn[16], spread[64];
        snprintf(bn, sizeof bn, "%dx%d", r.B, r.N);
        snprintf(spread, sizeof spread, "%.1f-%.1f (%.1f-%.1f)", r.ms_q1, r.ms_q3, r.ms_min, r.ms_max);
        printf("| %-10s | %-6s | %8.2fM | %8.1f | %-28s | %6.2f | %7.1f | %5.0f%% | %7.0f | %8.1f | %6.1f |\n",
               (*k)->name, bn, r.params / 1e6, r.ms_med, spread, r.gemm_gflop, r.gemm_ms,
               100 * r.gemm_ms / r.ms_med, r.gemm_calls, r.arena_mb + r.param_mb + r.optim_mb, r.rss_mb);
        if (out) fprintf(out, "%s,%.3f,,,%.1f,\n", (*k)->name, r.ms_med, r.rss_mb);
        rs[n] = r;
        names[n++] = (*k)->name;
    }
    if (out) fclose(out);
    printf("\nGEMM = GFLOP of matrix products per step (OpenBLAS and attngrad's kernel); GEMM ms = wall time with "
           "at least one product running; acct MB = arena high-water + params + grads + optimizer state; "
           "rss MB = growth of peak RSS during the model's run.\n");
#ifdef AG_HAVE_OPENBLAS_THREADS
    if (peak && threads > 0) openblas_set_num_threads(threads); /* as --peak-only measures it (the models are done) */
#endif
    double pk = peak ? sgemm_peak(2048) : 0, gbs = pk > 0 ? memory_gbs() : 0;
    if (pk > 0) {
        /* The bound: the step's products at the sgemm peak, nothing else
         * (issue 39).  A step cannot beat it with the same FLOPs.  The
         * memory floor is the other thing no kernel work removes: the
         * optimizer's and zeroing's dense passes over every parameter. */
        printf("OpenBLAS sgemm peak (2048^3, same threads): %.1f GFLOP/s; memory %.1f GB/s (read-modify-write, "
               "same threads)\n\n", pk, gbs);
        printf("| %-10s | %8s | %8s | %12s | %10s | %18s |\n", "model", "step ms", "bound ms", "step / bound",
               "params MB", "param passes ms");
        printf("|------------|----------|----------|--------------|------------|--------------------|\n");
        for (int i = 0; i < n; i++)
            printf("| %-10s | %8.1f | %8.1f | %12.2f | %10.0f | %18.1f |\n", names[i], rs[i].ms_med,
                   bound_ms(&rs[i], pk), rs[i].ms_med / bound_ms(&rs[i], pk), param_pass_mb(&rs[i]),
                   param_pass_mb(&rs[i]) / gbs);
        printf("\nbound ms = GEMM GFLOP per step / sgemm peak: the step's matrix products at the peak, nothing "
               "else.  params MB = what the optimizer and zero_grad move per step at least (value, gradient and "
               "state read, value and state written, gradient zeroed); param passes ms = that at the measured "
               "bandwidth.\n");
    }
    for (int i = 0; i < n; i++) {
        const result *r = &rs[i];
        double rate = r->gemm_ms > 0 ? r->gemm_gflop / (r->gemm_ms / 1e3) : 0;
        printf("  %-10s arena %.1f MB + params/grads %.1f MB + optimizer %.1f MB; GEMM %.1f GFLOP/s inside the products",
               names[i], r->arena_mb, r->param_mb, r->optim_mb, rate);
        if (pk > 0) printf(" (%.0f%% of peak); whole step %.1f GFLOP/s of GEMM work (%.0f%% of peak)", 100 * rate / pk,
                           r->gemm_gflop / (r->ms_med / 1e3), 100 * r->gemm_gflop / (r->ms_med / 1e3) / pk);
        if (device == AG_CUDA)
            printf("; %.0f launches a step (kernels, cuBLAS calls, copies, fills), the host waited for the GPU %.1f "
                   "times", r->launches, r->waits);
        if (cuda_graphs)
            printf("; %.1f graph launches and %.1f eager stretches a step", r->graph_launches, r->eager_segments);
        ag_model_config c = model_config(ag_model_find(names[i]));
        printf("\n  %-10s ", "");
        print_recipe(&c);
        printf("\n  %-10s loss %.4f -> %.4f over %d steps (median of the last %d: %.4f):", "", r->loss_first,
               r->loss_last, r->steps, r->steps < 5 ? r->steps : 5, r->loss_tail);
        for (int s = 0; s < r->n_losses; s++) printf(" %.4f", r->losses[s]);
        printf("\n");
        /* one line per model for bench_models.py */
        printf("result: model=%s B=%d N=%d params=%lld ms_med=%.4f ms_q1=%.4f ms_q3=%.4f ms_min=%.4f ms_max=%.4f "
               "gemm_gflop=%.6f gemm_ms=%.4f gemm_calls=%.0f arena_mb=%.3f param_mb=%.3f optim_mb=%.3f rss_mb=%.2f "
               "loss_first=%.6f loss_last=%.6f loss_tail=%.6f peak_gflops=%.2f waits=%.1f launches=%.0f graph_launches=%.1f "
               "eager_segments=%.1f bound_ms=%.4f step_over_bound=%.4f mem_gbs=%.2f param_pass_ms=%.4f optim=%s clip=%g l2=%g keep=%g keep_layers=%g "
               "losses=",
               names[i], r->B, r->N, (long long)r->params, r->ms_med, r->ms_q1, r->ms_q3, r->ms_min, r->ms_max,
               r->gemm_gflop, r->gemm_ms, r->gemm_calls, r->arena_mb, r->param_mb, r->optim_mb, r->rss_mb,
               r->loss_first, r->loss_last, r->loss_tail, pk, r->waits, r->launches, r->graph_launches, r->eager_segments,
               bound_ms(r, pk), pk > 0 && r->gemm_gflop > 0 ? r->ms_med / bound_ms(r, pk) : 0, gbs,
               gbs > 0 ? param_pass_mb(r) / gbs : 0, c.optim, c.clip, c.l2,
               c.keep, keep_between_layers(&c));
        for (int s = 0; s < r->n_losses; s++) printf("%s%.6f", s ? "," : "", r->losses[s]);
        printf("\n");
    }
    return failed;
}
