/* profile_step.c - full training steps of every registered model at the
 * paper's sizes, for profiling (perf record -g, valgrind --tool=callgrind)
 * and for before/after timings of engine changes.
 *
 *     ./build/bench/profile_step [model|all] [steps] [threads] [ops]
 *
 * "ops" adds attngrad's op profiler table (ag_profile_report): forward and
 * backward time per op and call site over the timed steps.
 * threads: ag_set_num_threads (default: the engine's, one per core).
 * A step is what a training loop does: zero the gradients, forward with
 * dropout (training), the model's loss, backward, the L2 term when the
 * model has one, the LM's gradient clipping (0.25), the model's optimizer,
 * ag_step_end.  The batch is bench_models.c's: synthetic and fixed from
 * seed 1, vocab 20000 and 5 classes (the LM its own vocab), the first row
 * full and the other lengths uniform in [ceil(N/2), N], N = 30 (LM 35,
 * dual-axial its fixed L = 64).  Sizes are the models' defaults: MPSAN
 * d=300 B=64; dual-axial d=128 B=64; MS-SAN d=300 h=6 B=32; MTSA d=300
 * dh=300 B=32; LM E=H=400 B=32.
 *
 * Per model it prints the fastest and the median step (wall ms), the median
 * CPU ms of the process (all threads), and the median split into forward,
 * backward and optimizer.  The machine may be shared: read the minimum.
 * The last column is a hash of every parameter after the run: it must not
 * depend on the thread count. */
#include "attngrad.h"
#include "../models/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { VOCAB = 20000, CLASSES = 5, WARMUP = 3 };

static double clock_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static int32_t *ints(size_t n) { return calloc(n ? n : 1, sizeof(int32_t)); }

/* bench_models.c's batch: B rows at width N, the first full, the others'
 * lengths uniform in [ceil(N/2), N]; tokens uniform over the vocabulary;
 * each word's head a random earlier word. */
static void make_batch(const ag_model *m, ag_batch *b, int B, int N) {
    memset(b, 0, sizeof *b);
    if (m->kind->batch_opts) m->kind->batch_opts(&m->cfg, &b->opts);
    b->rows = b->max_rows = B;
    b->width = b->width_b = b->max_width = N;
    b->tokens = ints((size_t)B * N);
    b->tokens_b = ints((size_t)B * N);
    b->targets = ints((size_t)B * N);
    b->heads = ints((size_t)B * N);
    b->heads_b = ints((size_t)B * N);
    b->bigrams = ints((size_t)B * N);
    b->bigrams_b = ints((size_t)B * N);
    b->lengths = ints((size_t)B);
    b->lengths_b = ints((size_t)B);
    b->labels = ints((size_t)B);
    ag_rng r;
    ag_rng_seed(&r, 1);
    uint64_t V = (uint64_t)m->cfg.vocab, K = (uint64_t)(m->cfg.classes > 0 ? m->cfg.classes : 1);
    int lo = (N + 1) / 2, nbi = b->opts.n_bigram;
    for (int i = 0; i < B; i++) {
        int len = i == 0 ? N : lo + (int)(ag_rng_next(&r) % (uint64_t)(N - lo + 1));
        b->lengths[i] = b->lengths_b[i] = len;
        b->labels[i] = (int32_t)(ag_rng_next(&r) % K);
        for (int t = 0; t < N; t++) {
            int k = i * N + t;
            bool valid = t < len;
            b->tokens[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (V - 2)) : 0;
            b->tokens_b[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (V - 2)) : 0;
            b->targets[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (V - 2)) : 0;
            b->heads[k] = b->heads_b[k] = !valid ? AG_HEAD_PAD : t == 0 ? AG_HEAD_ROOT
                                                                      : (int32_t)(ag_rng_next(&r) % (uint64_t)t);
        }
        for (int t = 0; t + 1 < len && nbi > 1; t++) {
            int k = i * N + t;
            b->bigrams[k] = ag_bigram_id(b->tokens[k], b->tokens[k + 1], nbi);
            b->bigrams_b[k] = ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], nbi);
        }
    }
}

static void free_batch(ag_batch *b) {
    free(b->tokens); free(b->tokens_b); free(b->targets); free(b->heads); free(b->heads_b);
    free(b->bigrams); free(b->bigrams_b); free(b->lengths); free(b->lengths_b); free(b->labels);
}

static void profile(const ag_model_kind *kind, int steps, bool ops) {
    ag_model_config cfg = ag_model_defaults(kind);
    if (cfg.task != AG_TASK_LM) { /* the LM keeps its own vocabulary */
        cfg.vocab = VOCAB;
        cfg.classes = CLASSES;
    }
    ag_model m;
    ag_model_init(&m, kind, &cfg);
    ag_batch_opts bo = {0};
    if (kind->batch_opts) kind->batch_opts(&cfg, &bo);
    int B = cfg.batch, N = bo.fixed_len > 0 ? bo.fixed_len : cfg.task == AG_TASK_LM ? 35 : 30;
    ag_batch b;
    make_batch(&m, &b, B, N);
    ag_optim_config oc;
    if (ag_optim_parse(cfg.optim, &oc) != AG_OK) {
        fprintf(stderr, "%s: %s\n", kind->name, ag_errmsg());
        exit(1);
    }
    ag_optimizer opt;
    ag_optim_init(&opt, &m.params, &oc);

    double *t = malloc((size_t)steps * 5 * sizeof *t);
    double *wall = t, *cpu = t + steps, *fwd = t + 2 * steps, *bwd = t + 3 * steps, *upd = t + 4 * steps;
    double loss = 0;
    for (int i = -WARMUP; i < steps; i++) {
        if (i == 0 && ops) ag_profile_start();
        double c0 = clock_ms(CLOCK_PROCESS_CPUTIME_ID), t0 = clock_ms(CLOCK_MONOTONIC);
        ag_params_zero_grad(&m.params);
        ag_tensor *l = ag_model_loss(&m, &b, true);
        double t1 = clock_ms(CLOCK_MONOTONIC);
        ag_backward(l);
        if (cfg.l2 > 0) ag_l2_penalty(&m.params, cfg.l2);
        if (cfg.task == AG_TASK_LM) ag_clip_grad_norm(&m.params, 0.25); /* MODELS.md §3 */
        double t2 = clock_ms(CLOCK_MONOTONIC);
        ag_optim_step(&opt);
        loss = ag_item(l);
        ag_step_end();
        double t3 = clock_ms(CLOCK_MONOTONIC), c3 = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
        if (i >= 0) {
            wall[i] = t3 - t0;
            cpu[i] = c3 - c0;
            fwd[i] = t1 - t0;
            bwd[i] = t2 - t1;
            upd[i] = t3 - t2;
        }
    }
    double best = wall[0];
    for (int i = 1; i < steps; i++) best = wall[i] < best ? wall[i] : best;
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a over the parameters' bytes */
    for (int i = 0; i < m.params.count; i++) {
        const unsigned char *bytes = (const unsigned char *)m.params.items[i]->data;
        for (size_t j = 0; j < (size_t)m.params.items[i]->size * sizeof(ag_real); j++)
            hash = (hash ^ bytes[j]) * 1099511628211ULL;
    }
    printf("%-12s B=%-3d N=%-3d d=%-4d min %8.2f  median %8.2f  cpu %8.2f  | fwd %7.2f bwd %7.2f optim %6.2f"
           "  loss %.6f  params %016llx\n",
           kind->name, B, N, cfg.dim, best, median(wall, steps), median(cpu, steps), median(fwd, steps),
           median(bwd, steps), median(upd, steps), loss, (unsigned long long)hash);
    if (ops) {
        ag_profile_report(stdout, steps, 40);
        ag_profile_stop();
    }
    fflush(stdout);
    free(t);
    ag_optim_free(&opt);
    free_batch(&b);
    ag_model_free(&m);
    ag_shutdown();
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    if (steps < 1) steps = 1;
    if (argc > 3) ag_set_num_threads(atoi(argv[3]));
    bool ops = argc > 4 && !strcmp(argv[4], "ops");
    printf("training steps, f32, %d timed after %d warm-up, %d threads; ms per step\n", steps, WARMUP,
           ag_get_num_threads());
    bool found = false;
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) {
        if (strcmp(which, "all") != 0 && strcmp(which, (*k)->name) != 0) continue;
        found = true;
        profile(*k, steps, ops);
    }
    if (!found) {
        fprintf(stderr, "unknown model '%s'\n", which);
        return 1;
    }
    return 0;
}
