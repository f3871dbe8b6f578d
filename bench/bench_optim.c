/* bench_optim.c - one optimizer step (ag_optim_step, then ag_step_end) on
 * one parameter, for each spec and shape given: the median and the fastest
 * of --reps steps after 2 warm-up steps, on the wall clock.
 *
 *     ./build/bench/bench_optim [--reps 11] [--threads 1] [--device cpu|cuda] [--spec SPEC]... [--shape RxC]...
 *
 * --device cuda: the parameter and the state on the GPU, each step timed to
 * its ag_sync() (tools/gpu-check.sh --bench-ops runs it there).
 * Defaults: muon, muon:ns_steps=3, adafactor and adamw on 300x300,
 * 300x1200 and 1200x300 (MPSAN's and MTSA's layers).  Each row, for bench_optim_torch.py
 * to read beside PyTorch's optimizers:
 *     step <spec> <rows>x<cols> median_ms <m> min_ms <f>
 * The parameter is named "w": a weight matrix, so Muon orthogonalises it. */
#include "attngrad.h"
#include "bench_time.h"

#include <stdio.h>
#include <string.h>

enum { MAX_ITEMS = 16 };

static void fill(ag_tensor *w) {
    uint64_t r = 7;
    for (int64_t k = 0; k < w->size; k++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(r >> 40) / (1 << 24) - 0.5;
        w->data[k] = (ag_real)(0.1 * u), w->grad[k] = (ag_real)(1e-3 * u + 1e-4 * (double)(k % 7));
    }
}

static int time_step(const char *spec, int rows, int cols, int reps, ag_device dev) {
    ag_optim_config c;
    if (ag_optim_parse(spec, &c) != AG_OK) {
        fprintf(stderr, "bench_optim: %s\n", ag_errmsg());
        return 2;
    }
    ag_params ps = {0};
    fill(ag_param(&ps, "w", 2, (int[]){rows, cols}));
    if (dev != AG_CPU) ag_params_to(&ps, dev);
    ag_optimizer o;
    if (ag_optim_init(&o, &ps, &c) != AG_OK) {
        fprintf(stderr, "bench_optim: %s\n", ag_errmsg());
        return 2;
    }
    double ms[256];
    for (int r = -2; r < reps; r++) {
        double t0 = bench_wall_ms();
        ag_optim_step(&o);
        ag_sync();
        ag_step_end();
        if (r >= 0) ms[r] = bench_wall_ms() - t0;
    }
    double median = bench_median(ms, reps);
    printf("step %s %dx%d median_ms %.4f min_ms %.4f\n", spec, rows, cols, median, ms[0]);
    fflush(stdout);
    ag_optim_free(&o);
    ag_params_free(&ps);
    return 0;
}

int main(int argc, char **argv) {
    const char *specs[MAX_ITEMS];
    int shapes[MAX_ITEMS][2], n_specs = 0, n_shapes = 0, reps = 11, threads = 1;
    ag_device dev = AG_CPU;
    for (int i = 1; i < argc; i++) {
        bool more = i + 1 < argc;
        if (!strcmp(argv[i], "--reps") && more) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && more) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && more && (!strcmp(argv[i + 1], "cpu") || !strcmp(argv[i + 1], "cuda")))
            dev = !strcmp(argv[++i], "cuda") ? AG_CUDA : AG_CPU;
        else if (!strcmp(argv[i], "--spec") && more && n_specs < MAX_ITEMS) specs[n_specs++] = argv[++i];
        else if (!strcmp(argv[i], "--shape") && more && n_shapes < MAX_ITEMS &&
                 sscanf(argv[i + 1], "%dx%d", &shapes[n_shapes][0], &shapes[n_shapes][1]) == 2 &&
                 shapes[n_shapes][0] > 0 && shapes[n_shapes][1] > 0)
            n_shapes++, i++;
        else {
            fprintf(stderr, "usage: bench_optim [--reps N (1-256)] [--threads N] [--device cpu|cuda] [--spec SPEC]... "
                            "[--shape RxC]... "
                            "(at most %d of each)\n", MAX_ITEMS);
            return 2;
        }
    }
    if (reps < 1 || reps > 256 || threads < 1) {
        fprintf(stderr, "bench_optim: --reps must be 1-256 and --threads at least 1\n");
        return 2;
    }
    if (!n_specs)
        specs[n_specs++] = "muon", specs[n_specs++] = "muon:ns_steps=3", specs[n_specs++] = "adafactor",
        specs[n_specs++] = "adamw";
    if (!n_shapes) {
        static const int defaults[3][2] = {{300, 300}, {300, 1200}, {1200, 300}};
        memcpy(shapes, defaults, sizeof defaults);
        n_shapes = 3;
    }
    char why[256];
    if (dev == AG_CUDA && !ag_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_optim: --device cuda: %s\n", why);
        return 77;
    }
    ag_set_num_threads(threads);
    printf("bench_optim: on the %s, %d threads, %d steps each, f32\n", ag_device_name(dev), threads, reps);
    for (int s = 0; s < n_shapes; s++)
        for (int k = 0; k < n_specs; k++)
            if (time_step(specs[k], shapes[s][0], shapes[s][1], reps, dev)) return 2;
    ag_shutdown();
    return 0;
}
