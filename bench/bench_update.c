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
 * more on the wall clock; min and median ms.
 *
 * Then, for the models trained with adadelta, its update with lazy=1
 * against the dense one on a batch's gradient (the embedding tables' rows
 * of B x N drawn words live, the rest zero; every other parameter full),
 * and whether the two states end the same to the bit (lazy adadelta is
 * the dense rule, rows skipped and caught up later). */
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

/* A batch's gradient: every element of a weight, and of an embedding
 * table (a 2-D parameter that is not a weight matrix) the rows of B x N
 * words drawn as text draws them (three in four among the 2000 most
 * frequent), as the embedding's backward leaves it. */
static void fill_batch_grads(ag_params *ps, uint64_t seed) {
    fill_grads(ps, seed);
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (p->ndim != 2 || ag_is_weight_matrix(p)) continue;
        int rows = p->shape[0], cols = p->shape[1];
        ag_real *keep = malloc((size_t)p->size * sizeof *keep);
        memcpy(keep, p->grad, (size_t)p->size * sizeof *keep);
        memset(p->grad, 0, (size_t)p->size * sizeof *keep);
        for (int w = 0; w < 64 * 30; w++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            int r = (int)((seed >> 33) % (uint64_t)rows);
            if ((seed >> 20) % 4) r %= rows < 2000 ? rows : 2000;
            memcpy(p->grad + (int64_t)r * cols, keep + (int64_t)r * cols, (size_t)cols * sizeof *keep);
        }
        free(keep);
    }
}

static bool same_state(const ag_optimizer *a, const ag_optimizer *b) {
    for (int s = 0; s < a->n_slots; s++)
        for (int i = 0; i < a->n_params; i++) {
            const ag_tensor *p = a->params->items[i];
            const char *slot = ag_optim_slot_name(a, s);
            const ag_real *x = ag_optim_state(a, p->name, slot), *y = ag_optim_state(b, p->name, slot);
            if ((x || y) && (!x || !y || memcmp(x, y, (size_t)p->size * sizeof *x))) return false;
        }
    return true;
}

static void bench_lazy(const ag_model_kind *kind, int reps) {
    ag_model_config cfg = bench_config(kind);
    if (strncmp(cfg.optim, "adadelta", 8)) return;
    ag_model m[2];
    ag_optimizer opt[2];
    char spec[2][256];
    snprintf(spec[0], sizeof spec[0], "%s", cfg.optim);
    snprintf(spec[1], sizeof spec[1], "%s,lazy=1", cfg.optim);
    for (int k = 0; k < 2; k++) {
        ag_optim_config oc;
        if (ag_model_init(&m[k], kind, &cfg) || ag_optim_parse(spec[k], &oc) || ag_optim_init(&opt[k], &m[k].params, &oc)) {
            fprintf(stderr, "bench_update: %s, %s: %s\n", kind->name, spec[k], ag_errmsg());
            exit(1);
        }
    }
    double *t = malloc(2 * (size_t)reps * sizeof *t), gate = 1;
    bool cleared;
    for (int r = -2; r < reps; r++)
        for (int k = 0; k < 2; k++) {
            fill_batch_grads(&m[k].params, (uint64_t)r + 7);
            double t0 = now_ms();
            ag__optim_step_gated_params_sq(&opt[k], &gate, AG_CPU, true, &cleared);
            ag_step_end();
            if (r >= 0) t[k * reps + r] = now_ms() - t0;
        }
    double dense = bench_median(t, reps), lazy = bench_median(t + reps, reps);
    printf("%-12s %6.2f M %-42s %8.2f %8.2f %7.3f %s\n", kind->name, ag_params_numel(&m[0].params) / 1e6, spec[1], dense,
           lazy, lazy / dense, same_state(&opt[0], &opt[1]) ? "same" : "DIFFER");
    free(t);
    for (int k = 0; k < 2; k++) ag_optim_free(&opt[k]), ag_model_free(&m[k]);
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
    printf("\nadadelta on a batch's gradient (embedding rows of 64 x 30 words live): median ms\n");
    printf("%-12s %8s %-42s %8s %8s %7s %s\n", "model", "params", "optimizer", "dense", "lazy", "lazy/dense", "state");
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++)
        if (!strcmp(which, "all") || !strcmp(which, (*k)->name)) bench_lazy(*k, reps);
    ag_shutdown();
    return 0;
}
