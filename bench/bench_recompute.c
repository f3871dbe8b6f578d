/* bench_recompute.c - what recomputation costs and saves: the training step
 * of the Transformer LM example (examples/transformer_lm.c, included as
 * is) four ways, all measured in this run on the same model, batch and
 * seed: plain; each layer an ag_recompute region (--hparams recompute=1);
 * the attention keeping no probabilities (recompute_attn=1,
 * ag_attention_recompute); and both.  Per way: ms a step (median of R,
 * after one warm step) and step memory (the arena's high-water mark:
 * activations, gradients, tape; the GPU's arena with --device cuda), and
 * their ratios to plain.  The regions' loss must be plain's to the bit
 * (their gradients are the plain ones: tests/test_recompute.c), the
 * recomputed attention's within 1e-5 (its products run in other blocks):
 * else it says so and exits 1.
 *
 *     ./build/bench/bench_recompute [--batch B] [--len N] [--dim D] [--heads H] [--layers L] [--hidden F]
 *                                   [--vocab V] [--threads T] [--reps R] [--device cpu|cuda] [--later] [--profile]
 *                                   [--window W]
 *
 * --window W: sliding-window attention (--hparams window=W), each position reading itself and the W - 1 before it.
 * --later: the later block (rotary positions, RMS norm, SwiGLU); --profile: the op profiler's table of the
 * timed steps, each way. */
#include "../examples/transformer_lm.c"
#include "bench_args.h"
#include "bench_time.h"

#include <math.h>
#include <string.h>

typedef struct {
    int batch, len, dim, heads, layers, hidden, vocab, threads, reps, later, profile, window;
    ag_device device;
} rc_opts;

typedef struct {
    double ms, loss;
    size_t bytes;
} rc_result;

/* The ways: layer regions (ag_recompute) and attention without stored probabilities, each on or off. */
enum { WAYS = 4 };
static const char *const way_names[WAYS] = {"plain", "recompute", "attention", "both"};

static rc_result run(const rc_opts *o, int way) {
    const ag_model_kind *kind = ag_model_find("tlm");
    ag_model_config c = ag_model_defaults(kind);
    char hp[128];
    snprintf(hp, sizeof hp, "ctx=%d,recompute=%d,recompute_attn=%d,window=%d%s", o->len, way & 1, way >> 1, o->window,
             o->later ? ",rope=10000,rms=1,glu=1" : "");
    c.dim = o->dim, c.heads = o->heads, c.layers = o->layers, c.hidden = o->hidden, c.vocab = o->vocab, c.seed = 1;
    c.hparams = hp;
    ag_model m;
    if (ag_model_init(&m, kind, &c) != AG_OK) ag_fatal("bench_recompute", "%s", ag_errmsg());
    ag_params_to(&m.params, o->device);
    ag_set_device(o->device);
    ag_batch b;
    ag_model_batch_alloc(&m, o->batch, o->len, &b);
    for (int r = 0; r < o->batch; r++) {
        b.lengths[r] = o->len - r % 4; /* some padding */
        for (int t = 0; t < o->len; t++) {
            bool valid = t < b.lengths[r];
            b.tokens[r * o->len + t] = valid ? 2 + (r * 7919 + t * 104729) % (o->vocab - 2) : 0;
            b.targets[r * o->len + t] = valid ? 2 + (r * 31 + t * 17 + 1) % (o->vocab - 2) : 0;
        }
    }
    rc_result res = {0};
    double ms[64];
    int reps = o->reps < 64 ? o->reps : 64;
    for (int k = -1; k < reps; k++) { /* k = -1: the warm step */
        if (k == 0) ag_memstats_reset_high();
        if (k == 0 && o->profile) ag_profile_start();
        ag_rng_seed(&m.rng, 5);
        double t0 = bench_wall_ms();
        ag_tensor *loss = ag_model_loss(&m, &b, true);
        ag_backward(loss);
        ag_params_zero_grad(&m.params);
        ag_sync();
        if (k >= 0) ms[k] = bench_wall_ms() - t0;
        res.loss = ag_item(loss);
        ag_step_end();
    }
    if (o->profile) {
        ag_profile_stop();
        printf("profile (%s), per step:\n", way_names[way]);
        ag_profile_report(stdout, reps, 25);
    }
    res.ms = bench_median(ms, reps);
    res.bytes = o->device == AG_CUDA ? ag_memstats().device_arena_high : ag_memstats().arena_high;
    ag_model_batch_free(&b);
    ag_set_device(AG_CPU);
    ag_model_free(&m);
    return res;
}

int main(int argc, char **argv) {
    rc_opts o = {.batch = 16, .len = 128, .dim = 256, .heads = 4, .layers = 6, .hidden = 1024, .vocab = 10001,
                 .threads = 1, .reps = 3, .device = AG_CPU};
    for (int i = 1; i < argc; i++) {
        if (bench_arg_int(argc, argv, &i, "--batch", &o.batch) || bench_arg_int(argc, argv, &i, "--len", &o.len) ||
            bench_arg_int(argc, argv, &i, "--dim", &o.dim) || bench_arg_int(argc, argv, &i, "--heads", &o.heads) ||
            bench_arg_int(argc, argv, &i, "--layers", &o.layers) || bench_arg_int(argc, argv, &i, "--hidden", &o.hidden) ||
            bench_arg_int(argc, argv, &i, "--vocab", &o.vocab) || bench_arg_int(argc, argv, &i, "--threads", &o.threads) ||
            bench_arg_int(argc, argv, &i, "--reps", &o.reps) || bench_arg_int(argc, argv, &i, "--window", &o.window))
            continue;
        if (!strcmp(argv[i], "--later") || !strcmp(argv[i], "--profile")) {
            *(argv[i][2] == 'l' ? &o.later : &o.profile) = 1;
            continue;
        }
        if (bench_arg_device(argc, argv, &i, &o.device)) continue;
        fprintf(stderr, "bench_recompute: unknown option %s (see the file's header)\n", argv[i]);
        return 2;
    }
    if (o.batch < 1 || o.len < 4 || o.reps < 1 || o.vocab < 3 || o.window < 0) {
        fprintf(stderr, "bench_recompute: want --batch, --reps >= 1, --len >= 4, --vocab >= 3, --window >= 0\n");
        return 2;
    }
    if (bench_no_device(o.device)) return 77;
    ag_set_num_threads(o.threads);
    if (ag_plugin_init() != AG_OK) ag_fatal("bench_recompute", "%s", ag_errmsg());
    rc_result r[WAYS];
    for (int w = 0; w < WAYS; w++) {
        r[w] = run(&o, w);
        printf("result: way=%s device=%s ms_per_step=%.3f step_mb=%.2f loss=%.9g batch=%d len=%d dim=%d heads=%d "
               "layers=%d hidden=%d vocab=%d threads=%d block=%s window=%d\n", way_names[w], ag_device_name(o.device),
               r[w].ms, r[w].bytes / 1048576.0, r[w].loss, o.batch, o.len, o.dim, o.heads, o.layers, o.hidden, o.vocab,
               o.threads, o.later ? "later" : "2017", o.window);
    }
    for (int w = 1; w < WAYS; w++)
        printf("%s / plain: time %.3f, step memory %.3f\n", way_names[w], r[w].ms / r[0].ms,
               (double)r[w].bytes / (double)r[0].bytes);
    ag_shutdown();
    int bad = 0;
    for (int w = 1; w < WAYS; w++) {
        bool same = w == 1 ? r[w].loss == r[0].loss : fabs(r[w].loss - r[0].loss) <= 1e-5 * fabs(r[0].loss);
        if (!same) {
            fprintf(stderr, "bench_recompute: the %s loss %.17g is not the plain one's %.17g\n", way_names[w], r[w].loss,
                    r[0].loss);
            bad = 1;
        }
    }
    return bad;
}
