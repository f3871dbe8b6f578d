/* bench_ops_attn.c - forward and forward+backward time of the attention ops
 * at the MS-SAN size: B = 64, N = 64, d = 300, h = 6 heads of 50 (f32).
 *
 * Each column is the median of `reps` timed runs after warm-up; a run is one
 * step (forward, backward from a fixed seed, ag_step_end), so the arena is
 * warm and nothing is allocated.  Inputs are parameters (persistent).
 * Wall time (fwd, fwd+bwd) and process CPU time (fwd+bwd cpu) are given.
 *
 *     ./build/bench/bench_ops_attn [reps] [--device cpu|cuda]
 *
 * --device cuda: the inputs are drawn on the host as on the CPU, then moved
 * once (ag_params_to) and the masks made on the GPU's side (ag_set_device);
 * the forward and the backward each end with ag_sync(), so each time is the
 * GPU's work (fwd+bwd includes the one wait between them; the cpu column is
 * then the host's, waits included).  It adds a row the CPU table does not
 * have: ag_mtsa_attention at MTSA's 2 heads of 150.
 *
 * Threads: the engine's pool (AG_NUM_THREADS, else OMP_NUM_THREADS, else one
 * per core; ag_set_num_threads), which runs the parallel loops and cuts the
 * large GEMMs; OpenBLAS runs single-threaded under it. */
#include "attngrad.h"
#include "bench_time.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 64, N = 64, D = 300, H = 6, DH = D / H, MIX = 5 };
enum { MTSA_H = 2, MTSA_DH = D / MTSA_H }; /* MTSA's heads: one PAST, one FUTURE */


static ag_device device = AG_CPU;
static ag_params params;
static ag_tensor *scores, *q, *k, *v, *x;
static ag_tensor *mtsa_r, *mtsa_s, *mtsa_v, *mtsa_mask;
static ag_tensor *mix_z, *mix_src[MIX];
static ag_tensor *head_mask;
static ag_mask_spec specs[H];
static const int32_t *lengths;

static ag_tensor *param(const char *name, int ndim, const int *shape, ag_rng *r, double scale) {
    ag_tensor *t = ag_param(&params, name, ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(scale * ag_rng_normal(r));
    return t;
}

/* ---- the benchmarked functions ---- */

static ag_tensor *run_masked_softmax(void) { return ag_masked_softmax(scores, head_mask, 1 / sqrt(DH)); }

/* With padding, per step: the batch mask [B,h,N,N] is built inside the run. */
static ag_tensor *run_masked_softmax_padded(void) {
    ag_tensor *m = NULL;
    ag_mask_batch(specs, H, B, N, lengths, NULL, &m);
    return ag_masked_softmax(scores, m, 1 / sqrt(DH));
}

static ag_tensor *run_fused(void) { return ag_attention(q, k, v, head_mask, 1 / sqrt(DH), NULL); }

static ag_tensor *run_composed(void) {
    ag_tensor *p = ag_masked_softmax(ag_matmul_t(q, false, k, true), head_mask, 1 / sqrt(DH));
    return ag_matmul(p, v);
}

/* MPSAN's position fusion: a softmax over 5 sources per feature, and the
 * same spelled with stack, softmax over an axis, product and sum. */
static ag_tensor *run_mix(void) { return ag_softmax_mix(mix_z, mix_src, MIX); }

static ag_tensor *run_mix_composed(void) {
    ag_tensor *parts[MIX];
    for (int g = 0; g < MIX; g++) parts[g] = ag_reshape(mix_src[g], 4, (int[]){B, N, 1, D});
    ag_tensor *gate = ag_softmax_axis_len(ag_reshape(mix_z, 4, (int[]){B, N, MIX, D}), 2, NULL);
    return ag_sum_axis(ag_mul(gate, ag_concat(parts, MIX, 2)), 2, false);
}

static ag_tensor *run_heads(void) { return ag_merge_heads(ag_split_heads(x, H)); }

static ag_tensor *run_mha_core(void) { /* split, fused attention, merge: the MS-SAN inner block */
    ag_tensor *s = ag_split_heads(x, H);
    return ag_merge_heads(ag_attention(s, s, s, head_mask, 1 / sqrt(DH), NULL));
}

/* MTSA's multi-dim token2token attention, padded batch: R [B,2,N,N], S and
 * v [B,2,N,150], the {0,1} direction masks [2,N,N]. */
static ag_tensor *run_mtsa(void) {
    return ag_mtsa_attention(mtsa_r, mtsa_s, mtsa_v, mtsa_mask, lengths, AG_MTSA_LOG_SIGMOID);
}

/* ---- timing ---- */

typedef struct {
    double fwd, fwd_bwd, fwd_bwd_cpu;
} timing;

/* d(out), a fixed pattern, made once per row where the op runs: a GPU
 * backward reads it in place (a host array would be copied over each time). */
static ag_tensor *make_seed(ag_params *seeds, const ag_tensor *out) {
    ag_tensor *seed = ag_param(seeds, "seed", out->ndim, out->shape);
    for (int64_t j = 0; j < seed->size; j++) seed->data[j] = (ag_real)((j % 13) - 6) / 6;
    ag_params_to(seeds, device);
    return seed;
}

/* ag_sync(): the GPU's queued work is inside the time (on the CPU it
 * returns at once). */
static timing measure(ag_tensor *(*f)(void), int reps) {
    double *tf = malloc((size_t)reps * 3 * sizeof *tf), *tb = tf + reps, *tc = tb + reps;
    ag_params seeds = {0};
    ag_tensor *seed = NULL;
    for (int i = -3; i < reps; i++) { /* 3 warm-up runs grow the arena to size */
        double c0 = bench_cpu_ms(), t0 = bench_wall_ms();
        ag_tensor *out = f();
        ag_sync();
        double t1 = bench_wall_ms();
        if (!seed) seed = make_seed(&seeds, out);
        ag_backward_seeded_tensor(out, seed);
        ag_sync();
        double t2 = bench_wall_ms(), c2 = bench_cpu_ms();
        ag_step_end();
        if (i >= 0) {
            tf[i] = t1 - t0;
            tb[i] = t2 - t0;
            tc[i] = c2 - c0;
        }
    }
    timing t = {bench_median(tf, reps), bench_median(tb, reps), bench_median(tc, reps)};
    free(tf);
    ag_params_free(&seeds);
    return t;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_ops_attn [reps] [--device cpu|cuda]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int reps = 21;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "cuda")) device = AG_CUDA, i++;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc && !strcmp(argv[i + 1], "cpu")) device = AG_CPU, i++;
        else if (argv[i][0] != '-') reps = atoi(argv[i]);
        else usage();
    }
    if (reps < 1) reps = 1;
    char why[256];
    if (device == AG_CUDA && !ag_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_ops_attn: --device cuda: %s\n", why);
        return 1;
    }
    ag_rng r;
    ag_rng_seed(&r, 1);
    scores = param("scores", 4, (int[]){B, H, N, N}, &r, 3.0);
    q = param("q", 4, (int[]){B, H, N, DH}, &r, 1.0);
    k = param("k", 4, (int[]){B, H, N, DH}, &r, 1.0);
    v = param("v", 4, (int[]){B, H, N, DH}, &r, 1.0);
    x = param("x", 3, (int[]){B, N, D}, &r, 1.0);
    mix_z = param("mix_z", 3, (int[]){B, N, MIX * D}, &r, 1.0);
    for (int g = 0; g < MIX; g++) {
        char name[16];
        snprintf(name, sizeof name, "mix_s%d", g);
        mix_src[g] = param(name, 3, (int[]){B, N, D}, &r, 1.0);
    }
    mtsa_r = param("mtsa_r", 4, (int[]){B, MTSA_H, N, N}, &r, 1.0);
    mtsa_s = param("mtsa_s", 4, (int[]){B, MTSA_H, N, MTSA_DH}, &r, 1.0);
    mtsa_v = param("mtsa_v", 4, (int[]){B, MTSA_H, N, MTSA_DH}, &r, 1.0);
    mtsa_mask = ag_param(&params, "mtsa_mask", 3, (int[]){MTSA_H, N, N});
    for (int qi = 0; qi < N; qi++) /* head 0: PAST (k < q), head 1: FUTURE (k > q), as models/mtsa.c */
        for (int ki = 0; ki < N; ki++) {
            mtsa_mask->data[(int64_t)qi * N + ki] = ki < qi;
            mtsa_mask->data[(int64_t)(N + qi) * N + ki] = ki > qi;
        }
    ag_param_freeze(mtsa_mask); /* a constant */
    if (device == AG_CUDA) { /* drawn on the host, moved once; the masks below are made for the GPU */
        ag_params_to(&params, AG_CUDA);
        ag_set_device(AG_CUDA);
    }

    /* MS-SAN's heads: PAST_INCL / FUTURE_INCL with word distance on heads 0
     * and 3 (the tree-distance heads use word distance here). */
    for (int i = 0; i < H; i++)
        specs[i] = (ag_mask_spec){.dir = i < 3 ? AG_MASK_PAST_INCL : AG_MASK_FUTURE_INCL,
                                  .dist = i % 3 == 2 ? AG_DIST_NONE : AG_DIST_WORD, .weight = 1.5};
    head_mask = ag_mask_heads(specs, H, N);
    int32_t *len = malloc(B * sizeof *len);
    for (int b = 0; b < B; b++) len[b] = N - (b * 7) % (N / 2);
    lengths = len;

    printf("attention ops, f32%s: B=%d N=%d d=%d h=%d (d_head %d), median of %d runs, %d threads\n",
           device == AG_CUDA ? " on cuda" : "", B, N, D, H, DH, reps, ag_get_num_threads());
    printf("%-52s %8s %11s %15s\n", "op", "fwd ms", "fwd+bwd ms", "fwd+bwd cpu ms");
    typedef struct {
        const char *name;
        ag_tensor *(*f)(void);
    } row;
    const row rows[] = {
        {"masked_softmax [B,h,N,N] + mask [h,N,N]", run_masked_softmax},
        {"masked_softmax + ag_mask_batch [B,h,N,N] (padded)", run_masked_softmax_padded},
        {"attention fused  Q,K,V [B,h,N,dh], mask [h,N,N]", run_fused},
        {"attention composed: matmul, masked_softmax, matmul", run_composed},
        {"split_heads + merge_heads [B,N,d]", run_heads},
        {"split + fused attention + merge", run_mha_core},
        {"softmax_mix 5 sources [B,N,5d] -> [B,N,d]", run_mix},
        {"softmax mixture composed: concat, softmax, mul, sum", run_mix_composed},
        /* GPU only: the CPU table (bench/README.md) was measured without it */
        {"mtsa_attention R [B,2,N,N], S,v [B,2,N,150], lengths", run_mtsa},
    };
    size_t n_rows = sizeof rows / sizeof rows[0] - (device == AG_CPU);
    for (size_t i = 0; i < n_rows; i++) {
        timing t = measure(rows[i].f, reps);
        printf("%-52s %8.3f %11.3f %15.3f\n", rows[i].name, t.fwd, t.fwd_bwd, t.fwd_bwd_cpu);
    }
    free(len);
    ag_params_free(&params);
    ag_shutdown();
    return 0;
}
