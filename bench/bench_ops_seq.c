/* bench_ops_seq.c - forward and forward+backward time of the sequence ops
 * at training sizes (f32): the LSTM and the GRU (B=64, N=64, in=H=300, 1 layer) and
 * Gaussian positional scoring (B=64, N=64, H=300); and of every elementwise
 * activation (the unary op table) on a [2048, 1024] tensor, a Transformer
 * FFN's hidden layer at 16 x 128 words.  Prints the median of repeated runs
 * (after warm-up, so the arena has grown and no step mallocs) and the GEMM
 * work per second (0 for the activations, which do none).
 *
 *     ./build/bench/bench_ops_seq [repeats] [--device cpu|cuda]
 *
 * --device cuda: the weights move there once (ag_params_to), each step's
 * inputs are drawn on the host and copied there before the timed part
 * (ag_to), and each timed run ends with ag_sync(), so its time is the GPU's
 * work.
 *
 * Threads: the engine's pool (AG_NUM_THREADS, else OMP_NUM_THREADS, else one
 * per core; ag_set_num_threads), which runs the parallel loops and cuts the
 * large GEMMs; OpenBLAS runs single-threaded under it. */
#include "attngrad.h"
#include "bench_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static ag_device device = AG_CPU;


static void fill(ag_tensor *t, ag_rng *r, double lo, double hi) {
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(lo + (hi - lo) * ag_rng_uniform(r));
}

/* A step's input: drawn on the host, put on the bench's device (a CPU
 * tensor stays itself), and a leaf whose gradient is part of the work. */
static ag_tensor *input(int ndim, const int *shape, ag_rng *r, double lo, double hi) {
    ag_tensor *t = ag_tensor_new_host(ndim, shape);
    fill(t, r, lo, hi);
    t = ag_to(t, device);
    t->requires_grad = true;
    return t;
}

/* One benchmarked workload: build its inputs, run forward (and backward). */
typedef struct {
    const char *name;
    double gflop_fwd, gflop_bwd; /* GEMM work of forward and of backward */
    void (*setup)(void *ctx, ag_rng *r); /* makes this step's inputs (not timed) */
    ag_tensor *(*forward)(void *ctx);
    void *ctx;
} workload;

/* Backward is seeded with d(out) = 1 directly: a loss reduction would time
 * the reduction, not the op.  The seed lives where the op runs, made once,
 * so a GPU backward does not copy it over each time. */
static ag_tensor *ones_like(ag_params *seeds, const ag_tensor *out) {
    ag_tensor *s = ag_param(seeds, "seed", out->ndim, out->shape);
    for (int64_t i = 0; i < s->size; i++) s->data[i] = 1;
    ag_params_to(seeds, device);
    return s;
}

static void bench(const workload *w, int repeats) {
    ag_rng r;
    ag_rng_seed(&r, 1);
    double *fwd = malloc((size_t)repeats * sizeof *fwd), *both = malloc((size_t)repeats * sizeof *both);
    ag_params seeds = {0};
    ag_tensor *seed = NULL;
    for (int pass = 0; pass < 2; pass++) /* pass 0: forward only; pass 1: forward + backward */
        for (int i = -3; i < repeats; i++) {  /* 3 warm-up runs */
            w->setup(w->ctx, &r);
            double t0 = bench_seconds(CLOCK_MONOTONIC);
            ag_tensor *out = w->forward(w->ctx);
            if (pass) {
                if (!seed) seed = ones_like(&seeds, out);
                ag_backward_seeded_tensor(out, seed);
            }
            ag_sync(); /* the GPU's queued work inside dt (on the CPU it returns at once) */
            double dt = bench_seconds(CLOCK_MONOTONIC) - t0;
            ag_step_end();
            if (i >= 0) (pass ? both : fwd)[i] = dt;
        }
    double f = bench_median(fwd, repeats), fb = bench_median(both, repeats);
    double fmin = fwd[0], fbmin = both[0]; /* sorted by bench_median() */
    printf("| %-34s | %7.2f | %7.2f | %7.2f | %7.2f | %7.2f | %7.1f |\n", w->name, 1e3 * f, 1e3 * fb,
           1e3 * (fb - f), 1e3 * fmin, 1e3 * fbmin, (w->gflop_fwd + w->gflop_bwd) / fb);
    free(fwd);
    free(both);
    ag_params_free(&seeds);
}

/* ---- LSTM ---- */

typedef struct {
    int B, N, I, H;
    ag_lstm_layer layer;
    ag_tensor *x;
} lstm_ctx;

static void lstm_setup(void *p, ag_rng *r) {
    lstm_ctx *c = p;
    /* a leaf, as when x comes from an embedding: dx is part of the work */
    c->x = input(3, (int[]){c->B, c->N, c->I}, r, -1, 1);
}

static ag_tensor *lstm_forward(void *p) {
    lstm_ctx *c = p;
    return ag_lstm(c->x, &c->layer, 1, NULL);
}

/* ---- GRU: lstm_ctx's sizes, its own layer ---- */

typedef struct {
    lstm_ctx sizes;
    ag_gru_layer layer;
} gru_ctx;

static void gru_setup(void *p, ag_rng *r) { lstm_setup(&((gru_ctx *)p)->sizes, r); }

static ag_tensor *gru_forward(void *p) {
    gru_ctx *c = p;
    return ag_gru(c->sizes.x, &c->layer, 1, NULL);
}

/* ---- Gaussian positional scoring ---- */

typedef struct {
    int B, N, H;
    ag_tensor *h, *mu, *sigma;
} gauss_ctx;

static void gauss_setup(void *p, ag_rng *r) {
    gauss_ctx *c = p;
    c->h = input(3, (int[]){c->B, c->N, c->H}, r, -1, 1);
    c->mu = input(2, (int[]){c->B, c->N}, r, 0, 1);
    c->sigma = input(2, (int[]){c->B, c->N}, r, 0.05, 0.5);
}

static ag_tensor *gauss_forward(void *p) {
    gauss_ctx *c = p;
    return ag_gaussian_context(c->h, c->mu, c->sigma, NULL, false, 1e-3, NULL);
}

/* ---- elementwise activations ---- */

typedef struct {
    const char *name;
    ag_tensor *(*op)(ag_tensor *);
    double lo, hi; /* the input's range: the op's domain, and both its branches */
    ag_tensor *x;
} unary_ctx;

enum { UNARY_ROWS = 2048, UNARY_COLS = 1024 };

static void unary_setup(void *p, ag_rng *r) {
    unary_ctx *c = p;
    c->x = input(2, (int[]){UNARY_ROWS, UNARY_COLS}, r, c->lo, c->hi);
}

static ag_tensor *unary_forward(void *p) {
    unary_ctx *c = p;
    return c->op(c->x);
}

static void usage(void) {
    fprintf(stderr, "usage: bench_ops_seq [repeats] [--device cpu|cuda]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int repeats = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "cuda")) device = AG_CUDA, i++;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "cpu")) device = AG_CPU, i++;
        else if (argv[i][0] != '-') repeats = atoi(argv[i]);
        else usage();
    }
    if (repeats < 1) repeats = 1;
    char why[256];
    if (device == AG_CUDA && !ag_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_ops_seq: --device cuda: %s\n", why);
        return 1;
    }
    ag_params ps = {0};
    lstm_ctx lc = {64, 64, 300, 300, {0}, NULL};
    lc.layer.w_ih = ag_param(&ps, "w_ih", 2, (int[]){lc.I, 4 * lc.H});
    lc.layer.w_hh = ag_param(&ps, "w_hh", 2, (int[]){lc.H, 4 * lc.H});
    lc.layer.b_ih = ag_param(&ps, "b_ih", 1, (int[]){4 * lc.H});
    lc.layer.b_hh = ag_param(&ps, "b_hh", 1, (int[]){4 * lc.H});
    gru_ctx grc = {{64, 64, 300, 300, {0}, NULL}, {0}};
    grc.layer.w_ih = ag_param(&ps, "gru.w_ih", 2, (int[]){grc.sizes.I, 3 * grc.sizes.H});
    grc.layer.w_hh = ag_param(&ps, "gru.w_hh", 2, (int[]){grc.sizes.H, 3 * grc.sizes.H});
    grc.layer.b_ih = ag_param(&ps, "gru.b_ih", 1, (int[]){3 * grc.sizes.H});
    grc.layer.b_hh = ag_param(&ps, "gru.b_hh", 1, (int[]){3 * grc.sizes.H});
    ag_rng r;
    ag_rng_seed(&r, 2);
    for (int i = 0; i < ps.count; i++) fill(ps.items[i], &r, -0.06, 0.06);
    ag_params_to(&ps, device);
    gauss_ctx gc = {64, 64, 300, NULL, NULL, NULL};

    /* 2*M*N*K per GEMM: forward = input projection + recurrence; backward =
     * dh (recurrent), dW_hh, dW_ih, dx. */
    double lstm_gemm = 2.0 * lc.B * lc.N * 4 * lc.H * (lc.I + lc.H) / 1e9;
    double gru_gemm = lstm_gemm * 3 / 4;
    double gauss_gemm = 2.0 * gc.B * gc.N * gc.N * gc.H / 1e9;
    unary_ctx uc[] = {
        {"exp", ag_exp, -4, 4, NULL},         {"log", ag_log, 0.1, 4, NULL},
        {"sqrt", ag_sqrt, 0.1, 4, NULL},      {"square", ag_square, -4, 4, NULL},
        {"abs", ag_abs, -4, 4, NULL},         {"tanh", ag_tanh, -4, 4, NULL},
        {"sigmoid", ag_sigmoid, -4, 4, NULL}, {"relu", ag_relu, -4, 4, NULL},
        {"elu", ag_elu, -4, 4, NULL},         {"softplus", ag_softplus, -4, 4, NULL},
        {"log_sigmoid", ag_log_sigmoid, -4, 4, NULL}, {"gelu", ag_gelu, -4, 4, NULL},
        {"silu", ag_silu, -4, 4, NULL},
    };
    enum { N_UNARY = sizeof uc / sizeof *uc };
    char unary_names[N_UNARY][40];
    enum { N_SEQ = 3 };
    workload ws[N_SEQ + N_UNARY] = {
        {"lstm B64 N64 in300 H300 (1 layer)", lstm_gemm, 2 * lstm_gemm, lstm_setup, lstm_forward, &lc},
        {"gru B64 N64 in300 H300 (1 layer)", gru_gemm, 2 * gru_gemm, gru_setup, gru_forward, &grc},
        {"gaussian B64 N64 H300", gauss_gemm, 2 * gauss_gemm, gauss_setup, gauss_forward, &gc},
    };
    for (int i = 0; i < N_UNARY; i++) {
        snprintf(unary_names[i], sizeof unary_names[i], "%s [%d,%d]", uc[i].name, UNARY_ROWS, UNARY_COLS);
        ws[N_SEQ + i] = (workload){unary_names[i], 0, 0, unary_setup, unary_forward, &uc[i]};
    }
    printf("attngrad f32%s, median of %d runs, %d threads\n\n", device == AG_CUDA ? " on cuda" : "", repeats,
           ag_get_num_threads());
    printf("| %-34s | %7s | %7s | %7s | %7s | %7s | %7s |\n", "op (median ms; min ms)", "fwd", "fwd+bwd", "bwd",
           "min fwd", "min f+b", "GFLOP/s");
    printf("|------------------------------------|---------|---------|---------|---------|---------|---------|\n");
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) bench(&ws[i], repeats);
    ag_params_free(&ps);
    ag_shutdown();
    return 0;
}
