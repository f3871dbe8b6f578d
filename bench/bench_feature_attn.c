/* bench_feature_attn.c - one feature-wise (DiSAN token2token) attention
 * step, forward and backward, at B = 64, N = 30, d = 300 (f32), three ways
 * measured in the same run, interleaved (a loaded machine slows all three
 * alike):
 *   composed  today's ops before issue 36, as DiSAN had to be written: the
 *             scores materialised as [B,N,d,N] (keys last, for the last-axis
 *             ag_masked_softmax), with the transposes and reshapes that puts
 *             the keys there, c tanh, the softmax, the weighted sum;
 *   axis      the same [B,N,N,d] scores normalised in place along the key axis
 *             by ag_masked_softmax_axis (no transposes: any score tensor);
 *   fused     ag_feature_attention: no [B,N,N,d] tensor at all.
 * Inputs q, k, v [B,N,d] are parameters; the mask is the forward direction
 * (ag_mask FUTURE, [N,N]); c = 5.  Each figure is the median of `reps`
 * steps after warm-up (forward, backward from a fixed seed, ag_step_end),
 * wall and process CPU time; the last line is composed / fused.
 *
 *     ./build/bench/bench_feature_attn [reps] [--device cpu|cuda]
 *
 * Threads: the engine's pool (AG_NUM_THREADS, else one per core). */
#include "attngrad.h"
#include "bench_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 64, N = 30, D = 300 };
static const double C = 5.0;

static ag_tensor *q, *k, *v;

static ag_tensor *direction_mask(void) { return ag_mask(&(ag_mask_spec){.dir = AG_MASK_FUTURE}, N); }

/* [B,N,d,N]: query i, feature l, key j last. */
static ag_tensor *composed(void) {
    ag_tensor *qi = ag_reshape(q, 4, (int[]){B, N, D, 1});
    ag_tensor *kj = ag_reshape(ag_transpose(k, 1, 2), 4, (int[]){B, 1, D, N});
    ag_tensor *vj = ag_reshape(ag_transpose(v, 1, 2), 4, (int[]){B, 1, D, N});
    ag_tensor *s = ag_mul_scalar(ag_tanh(ag_mul_scalar(ag_add(qi, kj), 1 / C)), C);
    ag_tensor *p = ag_masked_softmax(s, ag_reshape(direction_mask(), 4, (int[]){1, N, 1, N}), 1.0);
    return ag_sum_axis(ag_mul(p, vj), 3, false);
}

/* [B,N,N,d]: query i, key j, feature l; the softmax along axis 2. */
static ag_tensor *axis(void) {
    ag_tensor *qi = ag_reshape(q, 4, (int[]){B, N, 1, D}), *kj = ag_reshape(k, 4, (int[]){B, 1, N, D});
    ag_tensor *s = ag_mul_scalar(ag_tanh(ag_mul_scalar(ag_add(qi, kj), 1 / C)), C);
    ag_tensor *p = ag_masked_softmax_axis(s, 2, ag_reshape(direction_mask(), 4, (int[]){1, N, N, 1}), 1.0);
    return ag_sum_axis(ag_mul(p, ag_reshape(v, 4, (int[]){B, 1, N, D})), 2, false);
}

static ag_tensor *fused(void) { return ag_feature_attention(q, k, v, direction_mask(), NULL, C, NULL); }

static void step(ag_tensor *(*f)(void), const ag_tensor *seed, double *wall, double *cpu) {
    double c0 = bench_cpu_ms(), t0 = bench_wall_ms();
    ag_backward_seeded_tensor(f(), seed);
    ag_sync();
    *wall = bench_wall_ms() - t0;
    *cpu = bench_cpu_ms() - c0;
    ag_step_end();
}

int main(int argc, char **argv) {
    int reps = 9;
    ag_device device = AG_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = !strcmp(argv[++i], "cuda") ? AG_CUDA : AG_CPU;
        else if (atoi(argv[i]) > 0) reps = atoi(argv[i]);
        else return fprintf(stderr, "usage: bench_feature_attn [reps] [--device cpu|cuda]\n"), 2;
    }
    ag_params ps = {0};
    ag_rng r;
    ag_rng_seed(&r, 1);
    q = ag_param(&ps, "q", 3, (int[]){B, N, D}), k = ag_param(&ps, "k", 3, (int[]){B, N, D});
    v = ag_param(&ps, "v", 3, (int[]){B, N, D});
    ag_tensor *seed = ag_param(&ps, "seed", 3, (int[]){B, N, D});
    for (int p = 0; p < 4; p++)
        for (int64_t i = 0; i < ps.items[p]->size; i++) ps.items[p]->data[i] = (ag_real)ag_rng_normal(&r);
    ag_params_to(&ps, device);
    ag_set_device(device); /* the mask is made there */

    const char *names[3] = {"composed [B,N,d,N], today's ops", "axis [B,N,N,d], ag_masked_softmax_axis",
                            "fused ag_feature_attention"};
    ag_tensor *(*fns[3])(void) = {composed, axis, fused};
    double *t = malloc(sizeof *t * 6 * (size_t)reps);
    for (int i = -2; i < reps; i++) /* 2 warm-up rounds grow the arenas */
        for (int f = 0; f < 3; f++) {
            double w, c;
            step(fns[f], seed, &w, &c);
            if (i >= 0) t[(2 * f) * reps + i] = w, t[(2 * f + 1) * reps + i] = c;
        }
    printf("feature-wise attention step (fwd+bwd), B=%d N=%d d=%d, %s, median of %d\n", B, N, D,
           ag_device_name(device), reps);
    double wall[3];
    for (int f = 0; f < 3; f++) {
        wall[f] = bench_median(t + 2 * f * reps, reps);
        printf("  %-42s %9.2f ms wall %9.2f ms cpu\n", names[f], wall[f], bench_median(t + (2 * f + 1) * reps, reps));
    }
    printf("  composed / fused: %.1fx   axis / fused: %.1fx\n", wall[0] / wall[2], wall[1] / wall[2]);
    free(t);
    ag_params_free(&ps);
    ag_shutdown();
    return 0;
}
