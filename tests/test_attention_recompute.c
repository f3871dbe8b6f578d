/* test_attention_recompute.c - ag_attention_recompute inside the layers
 * (recompute_attention), in f64, on the CPU and on the GPU where the build
 * has one (the emulator in CI):
 *   - a causal stack of pre-LN encoder layers (rotary positions, 4 query
 *     heads on 2 key-value heads, padded lengths, dropout): the loss and
 *     every gradient as with the probabilities stored, to roundoff; with
 *     blocks of 3 query rows (several blocks, a short last one) and with
 *     the layers' ag_recompute regions on top;
 *   - step memory at N = 192: the stored probabilities' bytes are saved,
 *     and a warm step makes no heap allocation;
 *   - heatmaps: probabilities asked for are stored and handed out, with
 *     recompute_attention or without. */
#include "attngrad.h"
#include "check.h"
#include "../graph/device.h" /* ag__read_on: gradients read back from the GPU */
#include "../ops/attention.h" /* ag__attention_block_rows */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, D = 8, H = 4, KV = 2, LAYERS = 2 };

typedef struct {
    ag_params ps;
    ag_encoder_layer layer[LAYERS];
    ag_rng rng; /* dropout's */
} stack;

static void stack_init(stack *s, bool recompute_attention, bool regions) {
    *s = (stack){0};
    ag_rng init;
    ag_rng_seed(&init, 11);
    ag_encoder_config c = {.d_model = D, .heads = H, .kv_heads = KV, .d_ff = 2 * D, .pre_norm = true, .keep = 0.8,
                           .act = AG_ACT_GELU, .rope_base = 100, .recompute = regions,
                           .recompute_attention = recompute_attention};
    for (int l = 0; l < LAYERS; l++) {
        ag_scope_push("layer%d", l);
        s->layer[l] = ag_encoder_layer_new(&s->ps, &c, &init);
        ag_scope_pop();
    }
    /* biases and gains away from their 0 and 1, so every parameter's gradient is worth comparing */
    for (int p = 0; p < s->ps.count; p++) {
        ag_tensor *t = s->ps.items[p];
        for (int64_t i = 0; i < t->size; i++) t->data[i] += (ag_real)(0.05 * sin(0.37 * (double)(i + 7 * p)));
    }
}

static ag_tensor *input(ag_device d, int n) {
    ag_tensor *x = ag_tensor_new_host(3, (int[]){B, n, D});
    for (int64_t i = 0; i < x->size; i++) x->data[i] = (ag_real)sin(0.7 * (double)i + 0.3);
    x = ag_to(x, d);
    x->requires_grad = true;
    return x;
}

/* The gradients step() reads back: every parameter's, then the input's. */
static int64_t values_of(const stack *s, int n) {
    int64_t v = (int64_t)B * n * D;
    for (int p = 0; p < s->ps.count; p++) v += s->ps.items[p]->size;
    return v;
}

static const ag_mask_spec causal = {.dir = AG_MASK_PAST_INCL};

/* One training step's loss; grads receives every parameter's gradient and
 * then the input's (host copies). */
static double step(stack *s, ag_device d, int n, const int32_t *lengths, ag_real *grads) {
    ag_rng_seed(&s->rng, 5);
    ag_tensor *x = input(d, n), *h = x;
    for (int l = 0; l < LAYERS; l++) h = ag_encoder_layer_forward(&s->layer[l], h, lengths, ag_mask(&causal, n), true, &s->rng);
    ag_tensor *loss = ag_mean(ag_square(ag_sub(h, ag_scalar(0.25))));
    ag_params_zero_grad(&s->ps);
    ag_backward(loss);
    double value = ag_item(loss);
    int64_t at = 0;
    for (int p = 0; p < s->ps.count; p++) {
        ag__read_on(d, grads + at, s->ps.items[p]->grad, (size_t)s->ps.items[p]->size * sizeof(ag_real));
        at += s->ps.items[p]->size;
    }
    ag__read_on(d, grads + at, x->grad, (size_t)x->size * sizeof(ag_real));
    ag_step_end();
    return value;
}

static void same_as_stored(ag_device d, bool regions, int block_rows) {
    enum { N = 7 };
    static const int32_t lengths[B] = {7, 1, 5};
    stack plain, lean;
    stack_init(&plain, false, regions);
    stack_init(&lean, true, regions);
    ag_params_to(&plain.ps, d);
    ag_params_to(&lean.ps, d);
    ag_set_device(d);
    int64_t n = values_of(&plain, N);
    ag_real *g_plain = calloc((size_t)n, sizeof *g_plain), *g_lean = calloc((size_t)n, sizeof *g_lean);
    double lp = step(&plain, d, N, lengths, g_plain);
    ag__attention_block_rows = block_rows;
    double ll = step(&lean, d, N, lengths, g_lean);
    ag__attention_block_rows = 0;
    double worst = 0, scale = 0;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = check_worst(worst, fabs(g_plain[i] - g_lean[i]));
        scale = fmax(scale, fabs(g_plain[i]));
        nonzero += g_plain[i] != 0;
    }
    CHECK(nonzero * 10 >= n * 9, "on the %s: only %lld of %lld gradients are not 0: the comparison would say little",
          ag_device_name(d), (long long)nonzero, (long long)n);
    CHECK(fabs(lp - ll) <= 1e-14 * fabs(lp), "on the %s: loss %.17g recomputed, %.17g stored", ag_device_name(d), ll, lp);
    CHECK(worst <= 1e-13 * scale && scale > 1e-3, "on the %s: gradients differ by %.3g (scale %.3g)", ag_device_name(d),
          worst, scale);
    printf("  %s%s, %s blocks: loss and %lld gradients within %.2e of the stored probabilities'\n", ag_device_name(d),
           regions ? " in ag_recompute regions" : "", block_rows ? "3-row" : "the kernels'", (long long)n, worst);
    free(g_plain);
    free(g_lean);
    ag_set_device(AG_CPU);
    ag_params_free(&plain.ps);
    ag_params_free(&lean.ps);
}

/* The stored probabilities are B h N N reals a layer; recomputed, only a
 * block's scratch exists, and only while the op runs. */
static void memory(void) {
    enum { N = 192 };
    int32_t lengths[B] = {N, N - 5, N / 2};
    size_t peak[2];
    int64_t allocs[2];
    for (int lean = 0; lean < 2; lean++) {
        stack s;
        stack_init(&s, lean, false);
        ag_real *grads = malloc(sizeof(ag_real) * (size_t)values_of(&s, N));
        for (int k = 0; k < 3; k++) { /* warm: the third step's counts */
            ag_memstats_reset_high();
            int64_t a0 = ag_memstats().allocs;
            step(&s, AG_CPU, N, lengths, grads);
            peak[lean] = ag_memstats().arena_high;
            allocs[lean] = ag_memstats().allocs - a0;
        }
        free(grads);
        ag_params_free(&s.ps);
    }
    size_t probs = (size_t)LAYERS * B * H * N * N * sizeof(ag_real);
    CHECK(peak[1] + probs * 9 / 10 <= peak[0], "N = %d: step memory %zu bytes recomputed, %zu stored (the probabilities: %zu)",
          N, peak[1], peak[0], probs);
    CHECK(allocs[1] == 0, "a warm step with recomputed attention made %lld heap allocations", (long long)allocs[1]);
    printf("  N = %d, %d layers: step memory %.0f KiB recomputed, %.0f KiB stored (the probabilities %.0f KiB)\n", N,
           LAYERS, peak[1] / 1024.0, peak[0] / 1024.0, probs / 1024.0);
}

/* Heatmaps ask for the probabilities: they are stored then, and are the
 * same with the flag as without. */
static void heatmaps(void) {
    enum { N = 5 };
    stack plain, lean;
    stack_init(&plain, false, false);
    stack_init(&lean, true, false);
    ag_tensor *x = input(AG_CPU, N), *pp = NULL, *pl = NULL;
    ag_tensor *yp = ag_encoder_layer_forward_probs(&plain.layer[0], x, NULL, ag_mask(&causal, N), false, NULL, &pp);
    ag_tensor *yl = ag_encoder_layer_forward_probs(&lean.layer[0], x, NULL, ag_mask(&causal, N), false, NULL, &pl);
    CHECK(pl && pp && pl->size == (int64_t)B * H * N * N, "recompute_attention: no probabilities handed out");
    CHECK(pl && pp && !memcmp(pl->data, pp->data, (size_t)pp->size * sizeof(ag_real)) &&
              !memcmp(yl->data, yp->data, (size_t)yp->size * sizeof(ag_real)),
          "recompute_attention with probabilities asked for: not the stored layer's");
    ag_step_end();
    ag_params_free(&plain.ps);
    ag_params_free(&lean.ps);
}

int main(void) {
    ag_set_num_threads(2);
    same_as_stored(AG_CPU, false, 0);
    same_as_stored(AG_CPU, false, 3);
    same_as_stored(AG_CPU, true, 3);
    char why[256];
    if (ag_cuda_available(why, sizeof why)) {
        same_as_stored(AG_CUDA, false, 0);
        same_as_stored(AG_CUDA, true, 3);
    } else {
        printf("  on the GPU: not run (%s)\n", why);
    }
    memory();
    heatmaps();
    ag_shutdown();
    return check_summary("test_attention_recompute");
}
