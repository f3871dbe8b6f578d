/* bench_update.c - the training step's passes over the parameters, as
 * `attngrad train` runs them (train/step.c), for every registered model at
 * bench_models' sizes: zero_grad as a pass of its own before the update
 * (what a step did before) against the update zeroing the gradients it
 * reads (ag__optim_step_gated_params_sq with clear_grads), both with the
 * parameters' squares the step takes in the update's pass.
 *
 *     taskset -c 1 ./build/bench/bench_update [model|all] [reps] [threads]
 *
 * The two are timed alternately; one thread (the default) times each rep
 * on this thread's CPU clock (a loaded machine's preemption left out),
 * more on the wall clock; min and median ms. */
#include "bench_batch.h"
#include "bench_time.h"
#include "../optim/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static clockid_t clock_used = CLOCK_THREAD_CPUTIME_ID;
static double now_ms(void) { return 1e3 * bench_seconds(clock_used); }

/* A backward's worth of gradient: every element written. */
static void fill_grads(ag_params *ps, uint64_t seed) {
    for (int i = 0; i < ps->count; i++)
        for (int64_t k = 0; k < ps->items[i]->size; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            ps->items[i]->grad[k] = (ag_real)((double)(seed >> 40) / (1 << 24) - 0.5) * 1e-3f;
        }
}

static void bench(const ag_model_kind *kind, int reps) {
    ag_model_config cfg = bench_config(kind);
    ag_model m;
    if (ag_model_init(&m, kind, &cfg)) {
        fprintf(stderr, "bench_update: %s: %s\n", kind->name, ag_errmsg());
        exit(1);
    }
    ag_optim_config oc;
    ag_optimizer opt;
    if (ag_optim_parse(cfg.optim, &oc) != AG_OK || ag_optim_init(&opt, &m.params, &oc) != AG_OK) {
        fprintf(stderr, "bench_update: %s: optimizer '%s': %s\n", kind->name, cfg.optim, ag_errmsg());
        exit(1);
    }
    double *t = malloc(2 * (size_t)reps * sizeof *t), *separate = t, *fused = t + reps, gate = 1;
    bool cleared;
    for (int r = -2; r < reps; r++) { /* two untimed reps: the state's pages touched */
        fill_grads(&m.params, (uint64_t)r + 3);
        double t0 = now_ms();
        ag_params_zero_grad(&m.params);
        ag__optim_step_gated_params_sq(&opt, &gate, AG_CPU, false, &cleared);
        ag_step_end();
        double t1 = now_ms();
        fill_grads(&m.params, (uint64_t)r + 3);
        double t2 = now_ms();
        ag__optim_step_gated_params_sq(&opt, &gate, AG_CPU, true, &cleared);
        ag_step_end();
        double t3 = now_ms();
        if (r >= 0) separate[r] = t1 - t0, fused[r] = t3 - t2;
    }
    double sep_med = bench_median(separate, reps), fused_med = bench_median(fused, reps);
    printf("%-12s %6.2f M %-42s %8.2f %8.2f %8.2f %8.2f %7.3f\n", kind->name, ag_params_numel(&m.params) / 1e6,
           cfg.optim, separate[0], sep_med, fused[0], fused_med, fused_med / sep_med);
    free(t);
    ag_optim_free(&opt);
    ag_model_free(&m);
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int reps = argc > 2 ? atoi(argv[2]) : 30;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    if (reps < 1 || threads < 1) {
        fprintf(stderr, "usage: %s [model|all] [reps >= 1] [threads >= 1]\n", argv[0]);
        return 2;
    }
    ag_set_num_threads(threads);
    if (threads > 1) clock_used = CLOCK_MONOTONIC; /* the pool's threads work too */
    printf("%-12s %8s %-42s %17s %17s %7s\n", "model", "params", "optimizer", "separate min/med", "fused min/med",
           "fused/separate");
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++)
        if (!strcmp(which, "all") || !strcmp(which, (*k)->name)) bench(*k, reps);
    ag_shutdown();
    return 0;
}
