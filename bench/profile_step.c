/* profile_step.c - full training steps of every registered model at the
 * paper's sizes, for profiling (perf record -g, valgrind --tool=callgrind)
 * and for before/after timings of engine changes.
 *
 *     ./build/bench/profile_step [model|all] [steps] [threads] [ops] [cuda]
 *
 * "ops" adds attngrad's op profiler table (ag_profile_report): forward and
 * backward time per op and call site over the timed steps, and on the GPU
 * the launches each site puts on the stream.  "cuda" runs the steps on the
 * GPU (a build with CUDA, or the emulator, where only the launch counts
 * mean anything); every step then ends with ag_sync, so its time is whole.
 * threads: ag_set_num_threads (default: the engine's, one per core).
 * A step is what a training loop does: zero the gradients, forward with
 * dropout (training), the model's loss, backward, the L2 term when the
 * model has one, the LM's gradient clipping (0.25), the model's optimizer,
 * ag_step_end.  The model and batch are bench_models' (bench_batch.h,
 * seed 1): vocab 20000 and 5 classes (the LM its own vocab), the first row
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
#include "bench_batch.h"
#include "bench_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP = 3 };

static ag_device device = AG_CPU;

static void profile(const ag_model_kind *kind, int steps, bool ops) {
    ag_model_config cfg = bench_config(kind);
    ag_model m;
    ag_model_init(&m, kind, &cfg);
    int B = cfg.batch, N = bench_width(&m.cfg);
    ag_batch b;
    bench_batch_make(&m, B, N, 1, &b);
    if (device == AG_CUDA) {
        ag_params_to(&m.params, AG_CUDA);
        ag_set_device(AG_CUDA);
    }
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
        double c0 = bench_cpu_ms(), t0 = bench_wall_ms();
        ag_params_zero_grad(&m.params);
        ag_tensor *l = ag_model_loss(&m, &b, true);
        double t1 = bench_wall_ms();
        ag_backward(l);
        if (cfg.l2 > 0) ag_l2_grad(&m.params, cfg.l2);
        if (cfg.clip > 0) ag_clip_grad_norm(&m.params, cfg.clip); /* the LM's 0.25, docs/models.md, positional LM */
        double t2 = bench_wall_ms();
        ag_optim_step(&opt);
        loss = ag_item(l);
        ag_step_end();
        ag_sync();
        double t3 = bench_wall_ms(), c3 = bench_cpu_ms();
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
    if (ops) ag_profile_stop(); /* the report below counts the timed steps alone */
    if (device == AG_CUDA) ag_params_to(&m.params, AG_CPU); /* the hash reads them on the host */
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a over the parameters' bytes */
    for (int i = 0; i < m.params.count; i++) {
        const unsigned char *bytes = (const unsigned char *)m.params.items[i]->data;
        for (size_t j = 0; j < (size_t)m.params.items[i]->size * sizeof(ag_real); j++)
            hash = (hash ^ bytes[j]) * 1099511628211ULL;
    }
    printf("%-12s B=%-3d N=%-3d d=%-4d min %8.2f  median %8.2f  cpu %8.2f  | fwd %7.2f bwd %7.2f optim %6.2f"
           "  loss %.6f  params %016llx\n",
           kind->name, B, N, cfg.dim, best, bench_median(wall, steps), bench_median(cpu, steps), bench_median(fwd, steps),
           bench_median(bwd, steps), bench_median(upd, steps), loss, (unsigned long long)hash);
    if (ops) {
        ag_profile_report(stdout, steps, device == AG_CUDA ? 0 : 40); /* on the GPU: every site's launches */
    }
    fflush(stdout);
    free(t);
    ag_optim_free(&opt);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    ag_shutdown();
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    if (steps < 1) steps = 1;
    if (argc > 3) ag_set_num_threads(atoi(argv[3]));
    bool ops = false;
    for (int i = 4; i < argc; i++) {
        if (!strcmp(argv[i], "ops")) ops = true;
        else if (!strcmp(argv[i], "cuda")) device = AG_CUDA;
        else {
            fprintf(stderr, "profile_step: unknown argument '%s' (ops, cuda)\n", argv[i]);
            return 2;
        }
    }
    printf("training steps, f32, %d timed after %d warm-up, %d threads, on %s; ms per step\n", steps, WARMUP,
           ag_get_num_threads(), ag_device_name(device));
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
