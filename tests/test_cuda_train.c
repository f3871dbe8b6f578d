/* test_cuda_train.c - training on the GPU against the CPU, from the same
 * starting values:
 *   - each optimizer (SGD with momentum/nesterov/decay, Adam, AdamW,
 *     amsgrad, Adadelta) over a few steps of the same gradients: parameters
 *     and state;
 *   - a per-parameter rate (ag_optim_set_lr_scale) on the GPU: the bits
 *     of the same optimizer at lr * scale there, every kind (lr_scale_case.h);
 *   - train's gated step on the GPU: a non-finite loss or gradient skips
 *     the update on the device, a finite one is ag_optim_step's;
 *   - global-norm clipping (the norm to the CPU's bits: the same blocks and
 *     lanes; a product, -0 kept, on any mix of devices) and the L2 term;
 *   - a checkpoint written from the GPU read on the CPU;
 *   - every model variant's loss and gradients (docs/models.md's tiny sizes);
 *   - 200 training steps of every variant with the paper's optimizer, L2
 *     and clipping, dropout off: the GPU's losses track the CPU's (f64
 *     1e-8 relative at every step; f32 printed: the two devices sum in
 *     other orders, so their float roundoff differs from the first step and
 *     an optimizer carries it on - the test holds f32 to 1e-2 and reports
 *     the drift it saw);
 *   - anomaly mode names an op that makes a NaN on the GPU;
 *   - (f64) every model variant's gradient check by central differences with
 *     its parameters on the GPU (16 elements a parameter), its zeros
 *     verified as test_models verifies them;
 * Tolerances: optimizer steps are the same expressions on the same values
 * (no FMA contraction on either side), so f64 1e-14 and f32 1e-6 relative
 * leave room only for a compiler's different but exact rewriting; model
 * losses and gradients sum in other orders (cuBLAS, warp reductions), so
 * f64 1e-9 and f32 1e-4, relative to the larger value with a floor: the
 * array's rms, and for model gradients the rms of all the model's (see
 * model_case).  Exit 77 without a GPU; AG_TEST_CUDA_ON_CPU=1 runs the
 * "GPU" side on the CPU, to check the test itself where there is none. */
#include "check.h"
#include "attngrad.h"
#include "../graph/device.h" /* ag__cuda_copy: reading gradients and state back */
#include "../optim/kernels.h" /* the training step's gate, as train/step.c makes it */
#include "../optim/options.h" /* ag__optim_slot_numel: a slot's elements */
#include "attngrad/model.h"
#include "../train/internal.h"
#include "lr_scale_case.h" /* per-parameter rates on the GPU */
#include "model_util.h"    /* verify_small_gradients: the zero class, as test_models checks it */

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef AG_REAL_DOUBLE
static const double TOL_EXACT = 1e-14, TOL_MODEL = 1e-9;
#else
static const double TOL_EXACT = 1e-6, TOL_MODEL = 1e-4;
#endif

static ag_rng rng;
static ag_device GPU = AG_CUDA; /* AG_CPU under AG_TEST_CUDA_ON_CPU=1: the test's own check */

static void copy(void *dst, ag_device dst_dev, const void *src, ag_device src_dev, size_t bytes) {
    if (dst_dev == AG_CPU && src_dev == AG_CPU) memcpy(dst, src, bytes);
    else ag__cuda_copy(dst, dst_dev, src, src_dev, bytes);
}

/* n reals at p on dev, as doubles in a fresh host array. */
static double *host_copy(const ag_real *p, int64_t n, ag_device dev) {
    ag_real *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof(ag_real));
    copy(tmp, AG_CPU, p, dev, (size_t)n * sizeof(ag_real));
    double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = tmp[i];
    free(tmp);
    return d;
}

static double rms_of(const double *a, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += a[i] * a[i];
    return n ? sqrt(ss / (double)n) : 0;
}

/* The worst |a - b| / max(|a|, |b|, rms(a), floor). */
static double worst_rel_floor(const double *a, const double *b, int64_t n, double floor) {
    double worst = 0, rms = fmax(rms_of(a, n), floor);
    for (int64_t i = 0; i < n; i++) {
        if (a[i] == b[i]) continue;
        double m = fmax(fmax(fabs(a[i]), fabs(b[i])), rms), d = fabs(a[i] - b[i]);
        worst = fmax(worst, isfinite(d) ? d / fmax(m, 1e-300) : INFINITY);
    }
    return worst;
}

static double worst_rel(const double *a, const double *b, int64_t n) { return worst_rel_floor(a, b, n, 0); }

/* cpu's and gpu's n reals (gpu on the device) agree to tol; returns the worst. */
static double compare(const char *what, const ag_real *cpu, const ag_real *gpu, int64_t n, double tol) {
    double *a = host_copy(cpu, n, AG_CPU), *b = host_copy(gpu, n, GPU);
    double w = worst_rel(a, b, n);
    CHECK(w <= tol, "%s: worst relative difference %.3g, tolerance %g", what, w, tol);
    free(a);
    free(b);
    return w;
}

/* ---- optimizers ---- */

static void random_fill(ag_real *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (ag_real)(scale * (ag_rng_uniform(&rng) - 0.5));
}

/* Two parameter lists of the same values, one moved to the GPU. */
static void twin_params(ag_params *cpu, ag_params *gpu) {
    static const int shapes[][2] = {{37, 33}, {33, 1}, {5000, 3}}; /* the last spans two norm blocks */
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", k);
        ag_tensor *a = ag_param(cpu, name, 2, shapes[k]), *b = ag_param(gpu, name, 2, shapes[k]);
        random_fill(a->data, a->size, 2);
        memcpy(b->data, a->data, (size_t)a->size * sizeof(ag_real));
    }
    ag_params_to(gpu, GPU);
}

/* The same random gradient into both lists' parameters, scaled. */
static void twin_grads(ag_params *cpu, ag_params *gpu, double scale) {
    for (int i = 0; i < cpu->count; i++) {
        ag_tensor *a = cpu->items[i], *b = gpu->items[i];
        random_fill(a->grad, a->size, scale);
        copy(b->grad, GPU, a->grad, AG_CPU, (size_t)a->size * sizeof(ag_real));
    }
}

/* How close the two devices' updates are: elementwise rules to the bit
 * (TOL_EXACT allows for none but the comparison's), Muon's matrices to
 * its products' roundoff (cuBLAS and OpenBLAS add in other orders, and
 * Newton-Schulz's steps amplify it), as two models' steps are. */
static double update_tol(const ag_optimizer *o) { return o->cfg.kind == AG_MUON ? TOL_MODEL : TOL_EXACT; }

/* Two optimizers' parameters and state agree to update_tol; prints the
 * worst difference, then frees both twins and their optimizers. */
static void compare_twins_and_free(const char *label, ag_params *cpu, ag_params *gpu, ag_optimizer *oc, ag_optimizer *og) {
    double worst = 0;
    for (int i = 0; i < cpu->count; i++) {
        const ag_tensor *p = cpu->items[i];
        char what[160];
        snprintf(what, sizeof what, "%s: %s", label, p->name);
        worst = fmax(worst, compare(what, p->data, gpu->items[i]->data, p->size, update_tol(oc)));
        for (int s = 0; s < oc->n_slots; s++) {
            snprintf(what, sizeof what, "%s: %s's %s", label, p->name, ag_optim_slot_name(oc, s));
            const ag_real *a = oc->slot[s * oc->n_params + i], *b = og->slot[s * og->n_params + i];
            CHECK(!a == !b, "%s: kept on one device only", what);
            if (a && b) /* a Muon matrix has no v; Adafactor's factors are a row and a column */
                worst = fmax(worst, compare(what, a, b, ag__optim_slot_numel(oc, i, s), update_tol(oc)));
        }
    }
    printf("%-44s params and state: worst rel diff %.2e\n", label, worst);
    ag_optim_free(oc);
    ag_optim_free(og);
    ag_params_free(cpu);
    ag_params_free(gpu);
}

/* Gradients with rows of zeros, as an embedding's: row r of each
 * parameter live on steps where (r + step) % 3 == 0, row 5 of p0 live
 * through its last element alone (the row read to its end) and row 7
 * through element 17 alone (seen by one lane of the warp that reads the
 * row on the GPU: the lanes' findings must be combined). */
static void twin_sparse_grads(ag_params *cpu, ag_params *gpu, int step) {
    for (int i = 0; i < cpu->count; i++) {
        ag_tensor *a = cpu->items[i], *b = gpu->items[i];
        int cols = a->shape[1];
        random_fill(a->grad, a->size, 1);
        for (int64_t k = 0; k < a->size; k++) {
            int64_t r = k / cols, c = k % cols;
            bool live = (r + step) % 3 == 0;
            if (i == 0 && r == 5) live = c == cols - 1;
            if (i == 0 && r == 7) live = c == 17;
            if (!live) a->grad[k] = 0;
        }
        copy(b->grad, GPU, a->grad, AG_CPU, (size_t)a->size * sizeof(ag_real));
    }
}

/* Twin parameter lists (twin_params) and an optimizer of spec on each. */
static ag_optim_config twin_optimizers(const char *spec, ag_params *cpu, ag_params *gpu, ag_optimizer *oc,
                                       ag_optimizer *og) {
    *cpu = (ag_params){0}, *gpu = (ag_params){0};
    twin_params(cpu, gpu);
    ag_optim_config cfg = {0};
    CHECK(ag_optim_parse(spec, &cfg) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_optim_init(oc, cpu, &cfg);
    ag_optim_init(og, gpu, &cfg);
    return cfg;
}

static void optimizer_case(const char *spec) {
    ag_params cpu, gpu;
    ag_optimizer oc, og;
    ag_optim_config cfg = twin_optimizers(spec, &cpu, &gpu, &oc, &og);
    CHECK(og.device == GPU, "%s: the state of GPU parameters is on the GPU", spec);
    for (int step = 0; step < 4; step++) {
        if (cfg.lazy) twin_sparse_grads(&cpu, &gpu, step); /* rows to skip */
        else twin_grads(&cpu, &gpu, 1);
        ag_optim_step(&oc);
        ag_optim_step(&og);
    }
    CHECK(og.slow_set == oc.slow_set && oc.slow_set == (cfg.lookahead > 0), "%s: slow weights set", spec);
    /* an average: compared in place of the values (and they in its slot) */
    if (cfg.ema > 0 || cfg.swa > 0)
        CHECK(ag_optim_swap_average(&oc) && ag_optim_swap_average(&og) && og.averaged == oc.averaged,
              "%s: the averages of %lld and %lld updates swapped in", spec, (long long)oc.averaged,
              (long long)og.averaged);
    char label[96];
    snprintf(label, sizeof label, "%s after 4 steps", spec);
    compare_twins_and_free(label, &cpu, &gpu, &oc, &og);
}

/* Clipping and the L2 term: the norms to the bit, the gradients after. */
static void gradients_case(void) {
    ag_params cpu = {0}, gpu = {0};
    twin_params(&cpu, &gpu);
    twin_grads(&cpu, &gpu, 10);
    double lc = ag_l2_penalty(&cpu, 1e-3), lg = ag_l2_penalty(&gpu, 1e-3);
    CHECK(lc == lg, "L2 term: cpu %.17g, gpu %.17g", lc, lg);
    double nc = ag_clip_grad_norm(&cpu, 1.0), ng = ag_clip_grad_norm(&gpu, 1.0);
    CHECK(nc == ng, "gradient norm before clipping: cpu %.17g, gpu %.17g (the same blocks and lanes)", nc, ng);
    CHECK(ag_params_norm(&cpu) == ag_params_norm(&gpu), "parameter norm");
    double worst = 0;
    for (int i = 0; i < cpu.count; i++)
        worst = fmax(worst, compare("clipped gradient", cpu.items[i]->grad, gpu.items[i]->grad, cpu.items[i]->size,
                                    TOL_EXACT));
    CHECK(fabs(ag_grad_norm(&gpu) - 1.0) < 1e-5, "the clipped norm %.9g is 1", ag_grad_norm(&gpu));
    /* GPU and host parameters in one list: the CPU's order all the same */
    ag_tensor *mixed_items[3] = {gpu.items[0], cpu.items[1], gpu.items[2]};
    ag_params mixed = {.items = mixed_items, .count = 3};
    CHECK(ag_grad_norm(&mixed) == ag_grad_norm(&cpu) && ag_params_norm(&mixed) == ag_params_norm(&cpu),
          "norms of a list mixing devices: %.17g, CPU %.17g", ag_grad_norm(&mixed), ag_grad_norm(&cpu));
    lc = ag_l2_penalty(&cpu, 1e-3);
    CHECK(ag_l2_penalty(&mixed, 1e-3) == lc, "L2 term of a list mixing devices");
    /* a norm waits for the GPU once, whatever the parameter count; the L2
     * gradient alone (ag_l2_grad) never */
    if (GPU == AG_CUDA) {
        int64_t w0 = ag_memstats().device_waits;
        ag_grad_norm(&gpu);
        int64_t w1 = ag_memstats().device_waits;
        ag_l2_grad(&gpu, 1e-3);
        int64_t w2 = ag_memstats().device_waits;
        CHECK(w1 - w0 == 1 && w2 == w1, "a norm of 3 GPU parameters waited %lld times (want 1), the L2 gradient %lld (want 0)",
              (long long)(w1 - w0), (long long)(w2 - w1));
    }
    /* a NaN is found and named on the GPU as on the CPU */
    ag_real nan_value = (ag_real)NAN;
    copy(gpu.items[2]->grad + 4321, GPU, &nan_value, AG_CPU, sizeof nan_value);
    int64_t at = -1;
    ag_tensor *bad = ag_params_find_nonfinite(&gpu, true, &at);
    CHECK(bad == gpu.items[2] && at == 4321, "the NaN at p2[4321] found on the GPU (got %s at %lld)",
          bad ? bad->name : "none", (long long)at);
    CHECK(ag_check_grads_finite(&gpu, ag_grad_norm(&gpu)) == AG_ERR_NONFINITE, "a NaN gradient refused");
    printf("%-44s norm %.17g on both, gradients worst rel diff %.2e\n", "clip + L2", nc, worst);
    ag_params_free(&cpu);
    ag_params_free(&gpu);
}

/* The n reals at a (on dev_a) and b (on dev_b) have the same bits: a -0
 * where the other has +0 counts. */
static bool same_bits(const ag_real *a, ag_device dev_a, const ag_real *b, ag_device dev_b, int64_t n) {
    size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(ag_real);
    ag_real *ha = malloc(bytes), *hb = malloc(bytes);
    copy(ha, AG_CPU, a, dev_a, (size_t)n * sizeof(ag_real));
    copy(hb, AG_CPU, b, dev_b, (size_t)n * sizeof(ag_real));
    bool same = memcmp(ha, hb, (size_t)n * sizeof(ag_real)) == 0;
    free(ha);
    free(hb);
    return same;
}

/* Clipping scales by a product on every device, so a -0 gradient stays -0
 * as on the host: in a list that mixes devices (its GPU members once went
 * through y = coef x + 0, which made it +0), and with max_norm 0, which
 * the host's formula turns into a coefficient of 0 (the GPU's clip once
 * skipped max_norm <= 0). */
static void clip_bits_case(void) {
    ag_params cpu = {0}, gpu = {0};
    twin_params(&cpu, &gpu);
    twin_grads(&cpu, &gpu, 10);
    const ag_real minus_zero = -(ag_real)0;
    for (int i = 0; i < cpu.count; i += 2) {
        cpu.items[i]->grad[5] = minus_zero;
        copy(gpu.items[i]->grad + 5, GPU, &minus_zero, AG_CPU, sizeof minus_zero);
    }
    ag_tensor *mixed_items[3] = {gpu.items[0], cpu.items[1], gpu.items[2]}, *c1 = cpu.items[1];
    ag_params mixed = {.items = mixed_items, .count = 3};
    ag_real *saved = malloc((size_t)c1->size * sizeof *saved); /* the host member is in both lists */
    memcpy(saved, c1->grad, (size_t)c1->size * sizeof *saved);
    double nm = ag_clip_grad_norm(&mixed, 0.5);
    memcpy(c1->grad, saved, (size_t)c1->size * sizeof *saved);
    double nc = ag_clip_grad_norm(&cpu, 0.5);
    CHECK(nm == nc, "clip of a list mixing devices: norm %.17g, CPU %.17g", nm, nc);
    for (int i = 0; i < cpu.count; i += 2)
        CHECK(same_bits(cpu.items[i]->grad, AG_CPU, gpu.items[i]->grad, GPU, cpu.items[i]->size),
              "clip of a list mixing devices: %s's clipped gradient differs from the CPU's in its bits (a -0 at 5)",
              cpu.items[i]->name);
    /* max_norm 0 on a list all on the GPU: every gradient times 0, -0 where it was negative */
    twin_grads(&cpu, &gpu, 10);
    nc = ag_clip_grad_norm(&cpu, 0);
    double ng = ag_clip_grad_norm(&gpu, 0);
    CHECK(nc == ng, "clip to 0: norm cpu %.17g, gpu %.17g", nc, ng);
    for (int i = 0; i < cpu.count; i++)
        CHECK(same_bits(cpu.items[i]->grad, AG_CPU, gpu.items[i]->grad, GPU, cpu.items[i]->size),
              "clip to 0: %s's gradient differs from the CPU's in its bits", cpu.items[i]->name);
    printf("%-44s mixed devices and max_norm 0: the CPU's bits, -0 kept\n", "clip by a product");
    free(saved);
    ag_params_free(&cpu);
    ag_params_free(&gpu);
}

/* Freezing a parameter on the GPU zeroes its gradient there (it was a
 * host memset of device memory). */
static void freeze_case(void) {
    ag_params cpu = {0}, gpu = {0};
    twin_params(&cpu, &gpu);
    twin_grads(&cpu, &gpu, 1);
    ag_tensor *p = gpu.items[2];
    ag_param_freeze(p);
    double *g = host_copy(p->grad, p->size, p->device);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < p->size; i++) nonzero += g[i] != 0;
    CHECK(!p->requires_grad && nonzero == 0, "ag_param_freeze on the %s: %lld gradient elements left",
          ag_device_name(p->device), (long long)nonzero);
    CHECK(ag_grad_norm(&gpu) == ag_clip_grad_norm(&gpu, 1e30), "a frozen parameter's gradient is out of the norm");
    printf("%-44s the gradient zeroed on the %s\n", "ag_param_freeze", ag_device_name(p->device));
    free(g);
    ag_params_free(&cpu);
    ag_params_free(&gpu);
}

/* train's step on the GPU (train/step.c ag__train_step): the gradient's
 * sum of squares, clipped on the device, and a gate from it and the loss
 * that the update reads there.  A loss that is NaN, or a gradient with an
 * inf, leaves the parameters and the state as they were (the host then
 * takes back opt.step, as here); otherwise the update is ag_optim_step's.
 * The CPU twin steps as train's host step does: only on a finite loss and
 * norm. */
static void gated_case(const char *spec) {
    if (GPU != AG_CUDA) return; /* a gated step exists on the GPU only */
    ag_params cpu, gpu;
    ag_optimizer oc, og;
    ag_optim_config cfg = twin_optimizers(spec, &cpu, &gpu, &oc, &og);
    enum { STEPS = 5 };
    const ag_real losses[STEPS] = {1.5, (ag_real)NAN, 2, 0.5, (ag_real)INFINITY};
    for (int step = 0; step < STEPS; step++) {
        if (cfg.lazy) twin_sparse_grads(&cpu, &gpu, step); /* rows skipped, and (adadelta) counted but where gated */
        else twin_grads(&cpu, &gpu, 10);
        bool inf_grad = step == 2;
        if (inf_grad) {
            const ag_real inf = (ag_real)INFINITY;
            cpu.items[1]->grad[3] = inf;
            copy(gpu.items[1]->grad + 3, GPU, &inf, AG_CPU, sizeof inf);
        }
        ag_real *loss = ag__cuda_arena_alloc(sizeof *loss);
        double *gate = ag__cuda_arena_alloc(4 * sizeof *gate); /* the gate, then the values read back */
        double values[3];
        copy(loss, GPU, &losses[step], AG_CPU, sizeof *loss);
        double *sq = ag__grad_sq_on(&gpu, 1.0, AG_CUDA);
        ag__grads_on("train step", AG_CUDA)->step_gate(loss, sq, gate);
        bool cleared = false; /* as the trainer's step: the update zeroes the gradients it read */
        double *psq = ag__optim_step_gated_params_sq(&og, gate, AG_CUDA, true, &cleared);
        ag__grads_on("train step", AG_CUDA)->step_values(loss, sq, psq, gate + 1);
        copy(values, AG_CPU, gate + 1, GPU, sizeof values);
        double nc = ag_clip_grad_norm(&cpu, 1.0);
        bool update = isfinite(losses[step]) && isfinite(nc);
        if (update) ag_optim_step(&oc);
        else ag__optim_step_not_taken(&og);
        int64_t nonzero = 0; /* the GPU's gradients: zeroed by an update, kept where the gate skipped it */
        for (int p = 0; p < gpu.count; p++) {
            ag_real *g = malloc((size_t)gpu.items[p]->size * sizeof *g);
            copy(g, AG_CPU, gpu.items[p]->grad, GPU, (size_t)gpu.items[p]->size * sizeof *g);
            for (int64_t k = 0; k < gpu.items[p]->size; k++) nonzero += g[k] != 0;
            free(g);
        }
        CHECK(cleared && (update ? nonzero == 0 : nonzero > 0), "%s step %d: %lld gradient elements not 0 after %s",
              spec, step, (long long)nonzero, update ? "the update (want 0: it zeroes them)" : "a skipped update (want "
              "them as they were)");
        CHECK(sqrt(values[1]) == nc || (isnan(nc) && isnan(values[1])) || (isinf(nc) && isinf(values[1])),
              "%s step %d: the gated step's gradient norm %.17g, the CPU's clip %.17g", spec, step, sqrt(values[1]), nc);
        CHECK(values[0] == (double)losses[step] || isnan(losses[step]), "%s step %d: the loss read back", spec, step);
        double pn = ag_params_norm(&cpu);
        CHECK(fabs(sqrt(values[2]) - pn) <= update_tol(&oc) * pn, "%s step %d: the parameters' norm after the update %.17g, "
              "CPU %.17g", spec, step, sqrt(values[2]), pn);
        ag_step_end();
    }
    CHECK(og.step == oc.step && oc.step == 2, "%s: %lld updates counted on the GPU, %lld on the CPU (want 2)", spec,
          (long long)og.step, (long long)oc.step);
    CHECK(og.averaged == oc.averaged, "%s: %lld updates averaged on the GPU, %lld on the CPU", spec,
          (long long)og.averaged, (long long)oc.averaged);
    char label[96];
    snprintf(label, sizeof label, "%s gated, 3 of %d skipped", spec, STEPS);
    compare_twins_and_free(label, &cpu, &gpu, &oc, &og);
}

/* The update's own squares (update_all's block_sq, which the CPU's
 * training step uses): the GPU's block sums equal the CPU's bit for bit,
 * lazy ones (the live rows alone) too, with the gradients cleared. */
static void fused_squares_case(const char *spec) {
    if (GPU != AG_CUDA) return;
    ag_params cpu, gpu;
    ag_optimizer oc, og;
    twin_optimizers(spec, &cpu, &gpu, &oc, &og);
    bool same = true;
    for (int step = 0; step < 3; step++) {
        twin_sparse_grads(&cpu, &gpu, step);
        double *on_cpu[3], *on_gpu[3];
        int64_t blocks[3];
        for (int i = 0; i < 3; i++) {
            blocks[i] = (cpu.items[i]->size + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
            on_cpu[i] = malloc((size_t)blocks[i] * sizeof(double));
            on_gpu[i] = ag__cuda_arena_alloc((size_t)blocks[i] * sizeof(double));
        }
        ag__optim_step_gated_sq(&oc, NULL, on_cpu, true);
        ag__optim_step_gated_sq(&og, NULL, on_gpu, true);
        for (int i = 0; i < 3; i++) {
            double *back = malloc((size_t)blocks[i] * sizeof(double));
            copy(back, AG_CPU, on_gpu[i], GPU, (size_t)blocks[i] * sizeof(double));
            same = same && !memcmp(back, on_cpu[i], (size_t)blocks[i] * sizeof(double));
            free(back);
            free(on_cpu[i]);
        }
        ag_step_end();
    }
    CHECK(same, "%s: the update's block sums of squares differ between the CPU and the GPU", spec);
    char label[96];
    snprintf(label, sizeof label, "%s with its squares", spec);
    compare_twins_and_free(label, &cpu, &gpu, &oc, &og);
}

/* A checkpoint of GPU parameters and Adam state, read into CPU twins. */
static void checkpoint_case(void) {
    ag_params cpu = {0}, gpu = {0};
    twin_params(&cpu, &gpu);
    ag_optim_config cfg;
    ag_optim_parse("adam:lr=1e-2", &cfg);
    ag_optimizer og, oc;
    ag_optim_init(&og, &gpu, &cfg);
    twin_grads(&cpu, &gpu, 1);
    ag_optim_step(&og);
    char path[] = "/tmp/ag-cuda-ckpt-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    CHECK(ag_checkpoint_save(path, &gpu, &og, NULL, NULL) == AG_OK, "save from the GPU: %s", ag_errmsg());
    ag_optim_init(&oc, &cpu, &cfg);
    CHECK(ag_checkpoint_load(path, &cpu, &oc, NULL, NULL) == AG_OK, "load on the CPU: %s", ag_errmsg());
    for (int i = 0; i < cpu.count; i++) {
        compare("checkpoint: parameter", cpu.items[i]->data, gpu.items[i]->data, cpu.items[i]->size, 0);
        for (int s = 0; s < oc.n_slots; s++)
            compare("checkpoint: state", oc.slot[s * oc.n_params + i], og.slot[s * og.n_params + i],
                    cpu.items[i]->size, 0);
    }
    CHECK(oc.step == 1, "checkpoint: the step count");
    /* and back: a step moves the GPU's values on, the load restores them */
    twin_grads(&cpu, &gpu, 1);
    ag_optim_step(&og);
    CHECK(ag_checkpoint_load(path, &gpu, &og, NULL, NULL) == AG_OK, "load on the GPU: %s", ag_errmsg());
    compare("checkpoint loaded on the GPU", cpu.items[0]->data, gpu.items[0]->data, cpu.items[0]->size, 0);
    printf("%-44s written from the GPU, read on the CPU and the GPU: equal\n", "checkpoint");
    /* into an amsgrad Adam that has stepped: its vmax, which the file's Adam
     * did not keep, starts at zero on the device as on the CPU */
    ag_optim_config ams;
    ag_optim_parse("adam:lr=1e-2,amsgrad=1", &ams);
    ag_optimizer ag2, ac2;
    ag_optim_init(&ag2, &gpu, &ams), ag_optim_init(&ac2, &cpu, &ams);
    twin_grads(&cpu, &gpu, 1);
    ag_optim_step(&ag2), ag_optim_step(&ac2);
    CHECK(ag_checkpoint_load(path, &gpu, &ag2, NULL, NULL) == AG_OK, "amsgrad on the GPU: %s", ag_errmsg());
    CHECK(ag_checkpoint_load(path, &cpu, &ac2, NULL, NULL) == AG_OK, "amsgrad on the CPU: %s", ag_errmsg());
    for (int i = 0; i < cpu.count; i++) {
        for (int64_t j = 0; j < cpu.items[i]->size; j++) CHECK(ac2.slot[2 * ac2.n_params + i][j] == 0, "CPU vmax");
        for (int s = 0; s < ac2.n_slots; s++)
            compare("checkpoint into amsgrad: state", ac2.slot[s * ac2.n_params + i], ag2.slot[s * ag2.n_params + i],
                    cpu.items[i]->size, 0);
    }
    printf("%-44s read into amsgrad Adam: vmax from zero on both\n", "checkpoint");
    ag_optim_free(&ag2), ag_optim_free(&ac2);
    unlink(path);
    ag_optim_free(&og);
    ag_optim_free(&oc);
    ag_params_free(&cpu);
    ag_params_free(&gpu);
}

/* ---- models ---- */

typedef struct {
    const char *model;
    unsigned flags;
    ag_task task;
    int attention;
    const char *label;
    /* The most launches a training step on the tiny batches may put on the
     * GPU (graphs_case): what it takes now, so that a change that adds
     * launches shows here (raise it knowingly, with the reason in the
     * commit).  Issue 38's fusions took MPSAN from 373 to 243 and
     * mpsan/relatedness from 579 to 335; its second round (the optimizer,
     * norms, L2 and zero_grad in one launch each, the LSTM's two launches
     * a time step, dropout in one kernel, source2token's pooling as one
     * op) to 111, 194, 142, 138, 259, 181, 170, 140 and 139, from 243,
     * 335, 194, 231, 357, 304, 281, 224 and 220.  Since 2026-12-06 the
     * step has dropout on (GRAPH_KEEP: the tiny configurations have none),
     * its kernels counted, and an eager dropout takes its draw with the
     * launch, where it was a copy before it: 127, 222, 146, 146, 271, 215,
     * 174, 144 and 143.  The bias gradient's column sums in one launch
     * (ops/cuda/linear.cu), not two: 118, 206, 143, 139, 259, 204, 170,
     * 140 and 142.  The fusion gates as ag_lerp, one kernel each way where
     * the composition took three and six: 118, 206, 136, 132, 245, 190,
     * 170, 140 and 142.  MPSAN's four units as one in each op (stacked
     * parameters, ag__dropout_copies, a grouped dense, one attention op
     * and the fusion over the stack): 85 and 140.  MTSA's heads likewise
     * (ag__dropout_planes, grouped dense layers, batched products,
     * ag__mtsa_attention_groups): 190 -> 125.  ag_reshape's backward
     * handing its buffer to an input with none: poslm/standard 140 ->
     * 139 (MTSA's 125 counts it).  ag_matmul's backward storing a fresh
     * gradient (beta 0) where it zeroed it first: dual_axial 136 -> 128,
     * mtsa 125 -> 123, poslm/standard 139 -> 138.  Small uploads sent
     * once (the same bytes again in a step: its earlier copy; the same in
     * every step: kept on the device) and the embedding's backward
     * sending its two index arrays as one: 79, 131, 124, 128, 239, 117,
     * 159, 130 and 133 (here the two runs and three batches take turns,
     * so only the repeats within a step count).  ag_zero_padding as one
     * op, the fused loss's one upload, the masks built on the device:
     * dual_axial 123, mtsa 116, poslm 158, 129, 132 in f32 and one more
     * each in f64 (the bounds hold both builds).  ag_max_over_time
     * as one op: ms_san 125, ms_san/pair 233.  MTSA's attention computes
     * the entries whose Z underflows directly (scores ~1e3): its output
     * kernel does it in the forward, one kernel more in the backward, mtsa
     * 117.  The bounds below. */
    int max_launches;
    const char *optim; /* NULL: the model's optimizer (the LM's: steps_optimizer) */
} variant;

static const variant variants[] = {
    {"mpsan", 0, 0, 0, "mpsan", 79, NULL},
    {"mpsan", 0, AG_TASK_RELATEDNESS, 0, "mpsan/relatedness", 131, NULL},
    {"dual_axial", 0, 0, 0, "dual_axial", 123, NULL},
    {"ms_san", 0, 0, 0, "ms_san", 125, NULL},
    {"ms_san", 0, AG_TASK_PAIR, 0, "ms_san/pair", 233, NULL},
    {"mtsa", 0, 0, 0, "mtsa", 117, NULL},
    {"poslm", 0, 0, 0, "poslm", 159, NULL},
    {"poslm", 0, 0, AG_LM_STANDARD, "poslm/standard", 130, NULL},
    {"poslm", 0, 0, AG_LM_NONE, "poslm/none", 133, NULL},
};

/* A model under another optimizer than its own, for what the optimizer
 * does on the device across steps: the CPU's losses tracked, and a CUDA
 * graph's replay equal to eager (its forward and backward are the
 * model's, checked above).  MTSA's 16 matrices under Muon: Newton-Schulz's
 * products on cuBLAS inside the captured step, 5 launches a matrix (its
 * momentum, the norm's two, the division, the update) and 25 a shape
 * (5 steps of 3 batched products and 2 sums): 298 a step (2026-12-07; 598
 * with a matrix at a time, 30 launches each); a shape's momentum, norms,
 * divisions and updates a launch each for all its matrices: 246.  At lr 1e-2 the f32 runs
 * drift apart by 1% in 200 steps (the products' other order, through
 * Newton-Schulz, in a step that large); at 2e-3 by 1.3e-5.  Adafactor:
 * a phase over every parameter per launch (the rows', the columns' and
 * their means' of the factored ones, the direction, the sums of squares of
 * θ and u, their totals, the update), its scalars and tables read on the
 * device so that a graph replays every step: 125 a step, 8 over MTSA's
 * own optimizer (2026-12-07; 335 with a parameter at a time, 9 launches a
 * matrix and 7 a vector).  eps 1e-10, not its default: in f64
 * that is 2.2e-16, and a gradient that is 0 in exact arithmetic (head
 * biases before a softmax that ignores shifts) comes out as rounding noise
 * of ~1e-17, other noise on each device, which Adafactor divides by about
 * eps: steps of noise that drove the two runs' losses 7e-6 apart. */
static const variant optimizer_variants[] = {
    {"mtsa", 0, 0, 0, "mtsa/muon", 246, "muon:lr=2e-3"},
    {"mtsa", 0, 0, 0, "mtsa/adafactor", 125, "adafactor:lr=1e-2,eps=1e-10"},
};

typedef struct {
    const variant *v;
    ag_model m;
    ag_batch b;
    double loss;
    double *grads[256];
    ag_device dev;
} model_run;

static void model_step(void *ctx) {
    model_run *r = ctx;
    ag_set_device(r->dev);
    ag_tensor *loss = ag_model_loss(&r->m, &r->b, false);
    if (!loss) ag_fatal("model_step", "%s: %s", r->v->label, ag_errmsg());
    ag_params_zero_grad(&r->m.params);
    ag_backward(loss);
    r->loss = ag_item(loss);
    for (int i = 0; i < r->m.params.count && i < 256; i++) {
        ag_tensor *p = r->m.params.items[i];
        r->grads[i] = p->requires_grad ? host_copy(p->grad, p->size, p->device) : NULL;
    }
    ag_step_end();
}

static bool init_model(model_run *r, const variant *v) {
    const ag_model_kind *kind = ag_model_find(v->model);
    if (!kind) return false;
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.flags |= v->flags;
    if (v->task) cfg.task = v->task;
    cfg.attention = v->attention;
    r->v = v;
    if (ag_model_init(&r->m, kind, &cfg) != AG_OK) {
        CHECK(false, "%s: init: %s", v->label, ag_errmsg());
        return false;
    }
    ag_tiny_batch(&r->m, &r->b, 3);
    return true;
}

static void free_run(model_run *r) {
    for (int i = 0; i < r->m.params.count && i < 256; i++) free(r->grads[i]);
    ag_model_batch_free(&r->b);
    ag_model_free(&r->m);
}

/* Generation's kept state (ag_model_kind.lm_*) on the GPU: the logits after
 * 4, then 1, 1 and 2 more words are the CPU's, and feeding a word waits for
 * the GPU not once: the state stays on the device (the caller's read of
 * the logits is the one wait a word). */
static void feed_case(const variant *v) {
    model_run c = {.dev = AG_CPU}, g = {.dev = GPU};
    if (!init_model(&c, v) || !init_model(&g, v)) return;
    const ag_model_kind *k = c.m.kind;
    ag_params_to(&g.m.params, GPU);
    void *sc = k->lm_state_new(&c.m, 8), *sg = k->lm_state_new(&g.m, 8);
    CHECK(sc && sg, "%s: no generation state", v->label);
    static const int32_t ids[8] = {3, 5, 2, 7, 4, 4, 6, 3}; /* the tiny vocabulary: 8 words */
    static const int chunks[] = {4, 1, 1, 2};
    bool grads = ag_set_grad_enabled(false);
    double worst = 0;
    int64_t waits = 0, launches = 0;
    for (int i = 0, fed = 0; sc && sg && i < 4; fed += chunks[i++]) {
        ag_set_device(AG_CPU);
        ag_tensor *want = k->lm_feed(&c.m, sc, ids + fed, chunks[i]);
        ag_set_device(GPU);
        ag_mem_stats m0 = ag_memstats();
        ag_tensor *got = k->lm_feed(&g.m, sg, ids + fed, chunks[i]);
        waits += ag_memstats().device_waits - m0.device_waits;
        launches += ag_memstats().device_launches - m0.device_launches;
        CHECK(want && got && got->device == GPU, "%s: feed %d: %s", v->label, i, ag_errmsg());
        if (!want || !got) break;
        char what[64];
        snprintf(what, sizeof what, "%s: the logits after %d words", v->label, fed + chunks[i]);
        worst = fmax(worst, compare(what, want->data, got->data, want->size, TOL_MODEL));
        ag_step_end();
    }
    ag_set_grad_enabled(grads);
    ag_set_device(AG_CPU);
    if (GPU == AG_CUDA)
        CHECK(waits == 0, "%s: feeding 8 words in 4 calls waited for the GPU %lld times (want 0)", v->label,
              (long long)waits);
    printf("%-20s fed word by word: worst rel diff %.2e, %lld waits, %lld launches in 4 calls\n", v->label, worst,
           (long long)waits, (long long)launches);
    if (sc) k->lm_state_free(sc);
    if (sg) k->lm_state_free(sg);
    /* A state of 2^31 - 1 positions (tens of GB even at the tiny sizes;
     * the emulator's device has 8 GiB): NULL where the device has no room
     * (generate then forwards each word), not the end of the program, and
     * a state that fits is made after it.  On the GPU only: test_poslm
     * checks the CPU's under a cap (host memory may overcommit, and ASan's
     * allocator stops the program at such a size). */
    if (GPU == AG_CUDA) {
        ag_set_device(GPU);
        void *big = k->lm_state_new(&g.m, INT_MAX);
        printf("%-20s a state of %d positions on the %s: %s\n", v->label, INT_MAX, ag_device_name(GPU),
               big ? "made (the device has room)" : "NULL (no room)");
        if (big) k->lm_state_free(big);
        sg = k->lm_state_new(&g.m, 8);
        CHECK(sg != NULL, "%s: no state of 8 positions after one of %d", v->label, INT_MAX);
        if (sg) k->lm_state_free(sg);
        ag_set_device(AG_CPU);
    }
    ag_params_to(&g.m.params, AG_CPU);
    free_run(&c);
    free_run(&g);
}

/* One model: loss and every gradient on the CPU, then the same parameters
 * moved to the GPU; the GPU run is under ag_try, so an op without a CUDA
 * implementation fails this model by name and the next one runs. */
static void model_case(const variant *v) {
    model_run c = {.dev = AG_CPU}, g = {.dev = GPU};
    if (!init_model(&c, v) || !init_model(&g, v)) return;
    model_step(&c);
    ag_params_to(&g.m.params, GPU);
    ag_status st = ag_try(model_step, &g);
    ag_set_device(AG_CPU);
    if (st != AG_OK) {
        CHECK(false, "%s on the GPU: %s", v->label, ag_errmsg());
        ag_step_end();
        ag_params_to(&g.m.params, AG_CPU);
        free_run(&c);
        free_run(&g);
        return;
    }
    double dl = fabs(c.loss - g.loss) / fmax(fabs(c.loss), 1e-300), worst = dl;
    CHECK(dl <= TOL_MODEL, "%s: loss cpu %.17g, gpu %.17g", v->label, c.loss, g.loss);
    /* The floor: the rms of all the model's gradients.  Some gradients are
     * sums that cancel to zero in exact arithmetic (a bias added before a
     * softmax over the positions it is added to: MPSAN's pool.b2); their
     * computed values are roundoff of the terms' size on either device. */
    double ss = 0;
    int64_t numel = 0;
    for (int i = 0; i < c.m.params.count && i < 256; i++)
        if (c.grads[i]) {
            int64_t n = c.m.params.items[i]->size;
            ss += rms_of(c.grads[i], n) * rms_of(c.grads[i], n) * (double)n, numel += n;
        }
    double model_rms = numel ? sqrt(ss / (double)numel) : 0;
    for (int i = 0; i < c.m.params.count && i < 256; i++) {
        if (!c.grads[i]) continue;
        double w = worst_rel_floor(c.grads[i], g.grads[i], c.m.params.items[i]->size, model_rms);
        CHECK(w <= TOL_MODEL, "%s: the gradient of %s: worst relative difference %.3g", v->label,
              c.m.params.items[i]->name, w);
        worst = fmax(worst, w);
    }
    printf("%-20s loss %.10g: loss and %d gradients, worst rel diff %.2e\n", v->label, c.loss, c.m.params.count,
           worst);
    ag_params_to(&g.m.params, AG_CPU);
    free_run(&c);
    free_run(&g);
}

/* The op profiler on the GPU counts each call site's launches: the rows'
 * forward and backward launches add up to what it says ops launched, that
 * and what ran outside ops to every launch of the step (the engine's own
 * counter), and the model's own lines are named (the profiler's whole use:
 * which line to fuse next). */
static void profile_launches_case(const variant *v) {
    model_run g = {.dev = GPU};
    if (!init_model(&g, v)) return;
    ag_params_to(&g.m.params, GPU);
    model_step(&g); /* warm: the arena and the kernels' first uses */
    for (int i = 0; i < g.m.params.count && i < 256; i++) free(g.grads[i]), g.grads[i] = NULL;
    int64_t before = ag_memstats().device_launches;
    ag_profile_start();
    model_step(&g);
    ag_profile_stop();
    int64_t launched = ag_memstats().device_launches - before;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ag_profile_report(f, 1, 0);
    fclose(f);
    ag_set_device(AG_CPU);
    if (GPU == AG_CPU) {
        CHECK(!strstr(buf, "GPU launches"), "%s: a CPU step's profile names launches:\n%s", v->label, buf);
    } else {
        double total = -1, by_ops = -1, outside = -1, rows = 0;
        const char *head = strstr(buf, "GPU launches per step: ");
        CHECK(head && sscanf(head, "GPU launches per step: %lf, %lf by ops, %lf outside", &total, &by_ops, &outside) == 3,
              "%s: no launch line:\n%s", v->label, buf);
        CHECK(total == (double)launched && by_ops + outside == total && by_ops > 0,
              "%s: launches %g = %g by ops + %g outside, the engine counted %lld:\n%s", v->label, total, by_ops, outside,
              (long long)launched, buf);
        char *copy = strdup(buf), *save = NULL; /* a site's row ends "fwd+bwd" */
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char *plus = strrchr(line, '+'), *start = plus;
            while (start && start > line && start[-1] != ' ') start--;
            double fwd = 0, bwd = 0;
            if (start && sscanf(start, "%lf+%lf", &fwd, &bwd) == 2) rows += fwd + bwd;
        }
        free(copy);
        CHECK(rows == by_ops, "%s: the sites' launches add to %g, not %g:\n%s", v->label, rows, by_ops, buf);
        char site[32];
        snprintf(site, sizeof site, "%s.c:", v->model);
        CHECK(strstr(buf, site) != NULL, "%s: no site in %s:\n%s", v->label, site, buf);
        printf("%-20s profiled: %g launches, %g by ops at their lines, %g outside ops\n", v->label, total, by_ops,
               outside);
    }
    free(buf);
    ag_params_to(&g.m.params, AG_CPU);
    free_run(&g);
}

/* 200 steps from the same start on both devices: tiny batches from 7
 * seeds in turn, the model's optimizer, L2 term and clip.
 * AG_TEST_TRACK_STEPS=N: N steps instead, for the bounds_ runs on the
 * emulator, which look for a kernel that reads past a tensor or lacks a
 * barrier: every kernel of a step has run after the first steps (the
 * optimizer's state after the second), and the drift over 200 is the
 * plain run's check. */
enum { TRACK_STEPS = 200 };

static int track_steps(void) {
    const char *v = getenv("AG_TEST_TRACK_STEPS");
    int n = v ? atoi(v) : TRACK_STEPS;
    return n >= 2 && n <= TRACK_STEPS ? n : TRACK_STEPS;
}
#ifdef AG_REAL_DOUBLE
static const double TOL_TRACK = 1e-8;
#else
static const double TOL_TRACK = 1e-2;
#endif

/* One step as train takes it: the loss, backward, the L2 gradient, the clip
 * (or the norm), the update unless the norm is not finite, the parameters'
 * check; training: dropout on; graphs: with ag_cuda_graphs. */
static double train_like_step(model_run *r, ag_optimizer *opt, uint64_t seed, bool training, bool graphs) {
    ag_set_device(r->dev);
    ag_cuda_graphs(graphs);
    ag_batch b;
    ag_tiny_batch(&r->m, &b, seed);
    ag_params_zero_grad(&r->m.params);
    ag_tensor *loss = ag_model_loss(&r->m, &b, training);
    double value = loss ? ag_item(loss) : NAN;
    if (loss) {
        ag_backward(loss);
        if (r->m.cfg.l2 > 0) ag_l2_grad(&r->m.params, r->m.cfg.l2);
        double norm = r->m.cfg.clip > 0 ? ag_clip_grad_norm(&r->m.params, r->m.cfg.clip) : ag_grad_norm(&r->m.params);
        if (isfinite(norm)) ag_optim_step(opt);
        ag_check_params_finite(&r->m.params, NULL);
    }
    ag_step_end();
    ag_cuda_graphs(false);
    ag_set_device(AG_CPU);
    ag_model_batch_free(&b);
    return value;
}

/* The optimizer of the many-step cases.  The paper's SGD at lr 30 makes the
 * tiny LM diverge (its loss climbs from 2.1 to 9.6 in 200 steps): a
 * diverging run amplifies any roundoff without bound, on any two machines.
 * Its lr 1 trains. */
static const char *steps_optimizer(const variant *v, const ag_model *m) {
    return v->optim ? v->optim : m->cfg.task == AG_TASK_LM ? "sgd:lr=1,weight_decay=1.2e-6" : m->cfg.optim;
}

static void tracking_case(const variant *v) {
    model_run c = {.dev = AG_CPU}, g = {.dev = GPU};
    if (!init_model(&c, v) || !init_model(&g, v)) return;
    ag_params_to(&g.m.params, GPU);
    ag_optim_config oc;
    ag_optimizer oc_cpu, oc_gpu;
    const char *spec = steps_optimizer(v, &c.m);
    if (ag_optim_parse(spec, &oc) != AG_OK) {
        CHECK(false, "%s: optimizer %s: %s", v->label, spec, ag_errmsg());
        return;
    }
    ag_optim_init(&oc_cpu, &c.m.params, &oc);
    ag_optim_init(&oc_gpu, &g.m.params, &oc);
    double worst = 0, first = 0, last_cpu = 0, last_gpu = 0;
    int worst_at = 0, steps = track_steps();
    for (int s = 0; s < steps; s++) {
        double lc = train_like_step(&c, &oc_cpu, 1 + (uint64_t)s % 7, false, false),
               lg = train_like_step(&g, &oc_gpu, 1 + (uint64_t)s % 7, false, false);
        double d = fabs(lc - lg) / fmax(fabs(lc), 1e-300);
        if (!(d <= worst)) worst = isnan(d) ? INFINITY : d, worst_at = s;
        if (s == 0) first = lc;
        last_cpu = lc, last_gpu = lg;
    }
    CHECK(worst <= TOL_TRACK, "%s: over %d steps the GPU's loss drifted %.3g from the CPU's (worst at step %d)",
          v->label, steps, worst, worst_at);
    printf("%-20s %d steps (%s): loss %.6f -> cpu %.9f, gpu %.9f; worst relative drift %.2e at step %d\n", v->label,
           steps, spec, first, last_cpu, last_gpu, worst, worst_at);
    ag_optim_free(&oc_cpu);
    ag_optim_free(&oc_gpu);
    ag_params_to(&g.m.params, AG_CPU);
    free_run(&c);
    free_run(&g);
}

/* ---- CUDA graphs: the same steps to the bit ----
 * Two GPU runs from the same start, one eager, one with ag_cuda_graphs:
 * train's step (dropout on, the L2 gradient, the clip or the norm, the
 * update, the parameters' norm), tiny batches from 3 seeds in turn, so
 * every stretch of a step repeats and is replayed from a graph.  Losses
 * and parameters must be equal, not close: a graph runs the same kernels
 * with the same arguments. */
enum { GRAPH_STEPS = 24 };
/* By this step every stretch of the three batches' steps has been seen
 * (each batch's stretches run eagerly once, are captured the second time,
 * replay from the third; an arena that grows lets the graphs go once), so
 * from here on nothing is captured: a capture says that a launch's bytes
 * differ between equal steps (padding, or an argument that varies) and its
 * graph never replays. */
enum { GRAPH_WARM_STEPS = 12 };
#define GRAPH_KEEP 0.8

static void graphs_case(const variant *v) {
    model_run e = {.dev = GPU}, g = {.dev = GPU};
    if (!init_model(&e, v) || !init_model(&g, v)) return;
    ag_params_to(&e.m.params, GPU);
    ag_params_to(&g.m.params, GPU);
    ag_optim_config oc;
    const char *spec = steps_optimizer(v, &e.m);
    if (ag_optim_parse(spec, &oc) != AG_OK) {
        CHECK(false, "%s: optimizer %s: %s", v->label, spec, ag_errmsg());
        return;
    }
    ag_optimizer oe, og;
    ag_optim_init(&oe, &e.m.params, &oc);
    ag_optim_init(&og, &g.m.params, &oc);
    /* dropout on: the tiny configurations have none (keep 1), and a
     * graph must replay each step's own masks */
    e.m.cfg.keep = g.m.cfg.keep = GRAPH_KEEP;
    ag_mem_stats before = ag_memstats(), warm = before;
    int differ = 0, first_differ = -1, launches_differ = 0;
    int64_t seed_copies = -1; /* the graph run's launches beyond the eager run's */
    /* launches and host waits of the last eager step of each batch: what a
     * step costs the host on these small models (docs/performance.md) */
    int64_t step_launches[3] = {0}, step_waits[3] = {0};
    for (int s = 0; s < GRAPH_STEPS; s++) {
        if (s == GRAPH_WARM_STEPS) warm = ag_memstats();
        ag_mem_stats m0 = ag_memstats();
        double le = train_like_step(&e, &oe, 1 + (uint64_t)s % 3, true, false);
        ag_mem_stats m1 = ag_memstats();
        double lg = train_like_step(&g, &og, 1 + (uint64_t)s % 3, true, true);
        ag_mem_stats m2 = ag_memstats();
        if (!(le == lg) && differ++ == 0) first_differ = s;
        /* a graph replays the launches it captured: the eager run's work,
         * and a copy of each dropout's draw to device memory, where the
         * captured launch reads it (eagerly the draw goes with the launch).
         * An upload whose bytes were kept on the GPU is no launch: which
         * run's step found them kept first is the order of the two, so each
         * counts as the launch it would have been. */
        int64_t extra = (m2.device_launches + m2.device_kept_uploads - m1.device_launches - m1.device_kept_uploads) -
                        (m1.device_launches + m1.device_kept_uploads - m0.device_launches - m0.device_kept_uploads);
        if (s == 0) seed_copies = extra;
        launches_differ += extra != seed_copies;
        step_launches[s % 3] = m1.device_launches - m0.device_launches;
        step_waits[s % 3] = m1.device_waits - m0.device_waits;
    }
    ag_mem_stats after = ag_memstats();
    if (GPU == AG_CUDA) {
        CHECK(step_launches[0] > 0, "%s: a step on the GPU counted no launch", v->label);
        /* the bounds count uploads sent once (graph/cuda.c), which
         * AG_CUDA_EXACT_ALLOC (the bounds_ runs) switches off */
        for (int i = 0; i < 3 && !check_env_on("AG_CUDA_EXACT_ALLOC"); i++)
            CHECK(step_launches[i] <= v->max_launches, "%s: a training step on tiny batch %d took %lld launches, more "
                  "than the %d it took when last counted (variants[]: fewer launches are the GPU step's cost on "
                  "these models; raise the bound only knowingly)", v->label, i, (long long)step_launches[i],
                  v->max_launches);
        CHECK(launches_differ == 0 && seed_copies > 0, "%s: the CUDA-graph run enqueued %lld launches more than the "
              "eager run in its first step (one copy a dropout), and another number in %d of %d steps", v->label,
              (long long)seed_copies, launches_differ, GRAPH_STEPS);
    }
    printf("%-20s a training step on a tiny batch (3 batches): %lld / %lld / %lld launches, %lld / %lld / %lld host "
           "waits; with graphs %lld copies of dropout draws more\n", v->label, (long long)step_launches[0],
           (long long)step_launches[1], (long long)step_launches[2], (long long)step_waits[0],
           (long long)step_waits[1], (long long)step_waits[2], (long long)seed_copies);
    CHECK(differ == 0, "%s: with CUDA graphs %d of %d losses differ from the eager run's, the first at step %d", v->label,
          differ, GRAPH_STEPS, first_differ);
    int64_t params_differ = 0;
    for (int i = 0; i < e.m.params.count; i++) {
        ag_tensor *a = e.m.params.items[i], *b = g.m.params.items[i];
        double *ha = host_copy(a->data, a->size, a->device), *hb = host_copy(b->data, b->size, b->device);
        for (int64_t j = 0; j < a->size; j++) params_differ += !(ha[j] == hb[j]);
        free(ha);
        free(hb);
    }
    CHECK(params_differ == 0, "%s: with CUDA graphs %lld parameter values differ after %d steps", v->label,
          (long long)params_differ, GRAPH_STEPS);
    long long launches = (long long)(after.graph_launches - before.graph_launches),
              captures = (long long)(after.graph_captures - before.graph_captures),
              eager = (long long)(after.eager_segments - before.eager_segments),
              late = (long long)(after.graph_captures - warm.graph_captures),
              late_eager = (long long)(after.eager_segments - after.short_segments - warm.eager_segments +
                                       warm.short_segments); /* a stretch too short for a graph runs eagerly */
    /* AG_CUDA_EXACT_ALLOC=1 (gpu-check --memcheck) gives every step new
     * addresses: nothing replays there, by design */
    if (GPU == AG_CUDA && !check_env_on("AG_CUDA_EXACT_ALLOC")) {
        CHECK(launches > 0, "%s: no stretch of %d steps replayed from a graph (%lld captured, %lld run eagerly)",
              v->label, GRAPH_STEPS, captures, eager);
        CHECK(late == 0, "%s: %lld graphs captured after step %d, where every stretch had been seen: equal steps "
              "recorded different bytes (a padded argument, or one that varies), so those graphs never replay",
              v->label, late, GRAPH_WARM_STEPS);
        CHECK(late_eager == 0, "%s: %lld stretches ran eagerly after step %d, where every stretch had been "
              "captured: the cache forgot what it had seen, or let its graphs go", v->label, late_eager,
              GRAPH_WARM_STEPS);
    }
    printf("%-20s %d steps with CUDA graphs: equal to eager; %lld graph launches, %lld captures (%lld after step %d), "
           "%lld eager stretches\n",
           v->label, GRAPH_STEPS, launches, captures, late, GRAPH_WARM_STEPS, eager);
    ag_optim_free(&oe);
    ag_optim_free(&og);
    ag_params_to(&e.m.params, AG_CPU);
    ag_params_to(&g.m.params, AG_CPU);
    free_run(&e);
    free_run(&g);
}

#ifdef AG_REAL_DOUBLE
/* The finite-difference check of a model whose parameters are on the GPU:
 * ag_gradcheck reads and writes their elements through copies. */
static ag_tensor *gc_loss(void *ctx) {
    model_run *r = ctx;
    return ag_model_loss(&r->m, &r->b, false);
}

/* With every parameter drawn from U(-1, 1), as test_models does: at the
 * tiny init many gradients are too small for finite differences (1e-9 to
 * 1e-11), where any value passes; drawn wide each is resolved (>= 1e-6)
 * or zero by structure, verified as test_models verifies it
 * (verify_small_gradients: the analytic gradient roundoff, and the loss on
 * the GPU unmoved when the parameter moves far there). */
static void gradcheck_model_case(const variant *v) {
    model_run g = {.dev = GPU};
    if (!init_model(&g, v)) return;
    ag_params *ps = &g.m.params;
    ag__params_draw_wide(ps, 11);
    ag_params_to(ps, GPU);
    ag_set_device(GPU);
    double worst = 0;
    ag_gradcheck_result *res = calloc((size_t)ps->count + 1, sizeof *res); /* checked 0: not checked */
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (!p->requires_grad) continue;
        ag_gradcheck_opts o = ag_gradcheck_defaults();
        o.max_checks = 16;
        ag_gradcheck_result r = res[i] = ag_gradcheck(gc_loss, &g, &p, 1, &o);
        worst = check_worst(worst, r.max_rel_err);
        CHECK(r.ok, "%s on the GPU: gradcheck of %s: element %lld analytic %.12g numeric %.12g", v->label, p->name,
              (long long)r.worst_index, r.analytic, r.numeric);
        ag_step_end();
    }
    char label[64];
    snprintf(label, sizeof label, "%s on the GPU", v->label);
    zero_classes z;
    verify_small_gradients(ps, gc_loss, &g, res, 16, label, &z);
    free(res);
    ag_set_device(AG_CPU);
    printf("%-20s gradcheck on the GPU: %d parameters, worst rel err %.2e, zero (invariant):%s%s%s\n", v->label,
           ps->count, worst, *z.zero ? z.zero : " none",
           *z.redrawn ? "; zero at this draw only, resolved at a second:" : "", z.redrawn);
    ag_params_to(ps, AG_CPU);
    free_run(&g);
}
#endif

/* Anomaly mode reads a GPU op's output back and names the op. */
static ag_tensor *anomaly_x;
static void log_of_negative(void *ctx) {
    (void)ctx;
    ag_log(anomaly_x);
}

static void anomaly_case(void) {
    ag_real minus[4] = {1, 2, -1, 3};
    anomaly_x = ag_to(ag_tensor_from(minus, 1, (int[]){4}), GPU);
    bool was = ag_anomaly(true);
    ag_status st = ag_try(log_of_negative, NULL);
    ag_anomaly(was);
    CHECK(st != AG_OK && strstr(ag_errmsg(), "ag_log: anomaly mode") && strstr(ag_errmsg(), "element 2"),
          "anomaly mode on the GPU: %s", st ? ag_errmsg() : "no error");
    ag_step_end();
    printf("%-44s %s\n", "anomaly mode", st ? ag_errmsg() : "no error");
}

/* The initializers write host memory: a GPU tensor is refused by name
 * (on a GPU the write would crash; on the emulator it would pass). */
static ag_tensor *init_x;
static void init_on_device(void *ctx) {
    (void)ctx;
    ag_rng r;
    ag_rng_seed(&r, 1);
    ag_init_uniform(init_x, -1, 1, &r);
}

static void init_on_device_case(void) {
    if (GPU == AG_CPU) return; /* AG_TEST_CUDA_ON_CPU: no device tensor to refuse */
    ag_params ps = {0};
    init_x = ag_param(&ps, "w", 1, (int[]){4});
    ag_params_to(&ps, GPU);
    ag_status st = ag_try(init_on_device, NULL);
    CHECK(st != AG_OK && strstr(ag_errmsg(), "ag_init_uniform") && strstr(ag_errmsg(), "w is on the") &&
              strstr(ag_errmsg(), "initialise it on the CPU"),
          "ag_init_uniform of a GPU tensor: %s", st ? ag_errmsg() : "no error");
    printf("%-44s %s\n", "an initializer on the GPU", st ? ag_errmsg() : "no error");
    ag_params_to(&ps, AG_CPU);
    ag_params_free(&ps);
}

int main(void) {
    char why[256];
    if (check_env_on("AG_TEST_CUDA_ON_CPU")) {
        GPU = AG_CPU;
        printf("AG_TEST_CUDA_ON_CPU: both sides on the cpu (the test's own check, not the GPU's)\n");
    } else if (!ag_cuda_available(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* each line in the log before a crash */
    ag_rng_seed(&rng, 7);
    static const char *const specs[] = {
        "sgd:lr=0.1",
        "sgd:lr=0.1,momentum=0.9,nesterov=1,weight_decay=1e-3",
        "sgd:lr=0.05,momentum=0.8,dampening=0.1",
        "adam:lr=1e-2",
        "adam:lr=1e-2,amsgrad=1,weight_decay=1e-2",
        "adamw:lr=1e-2,weight_decay=0.1",
        "adadelta:lr=0.5,rho=0.95,weight_decay=1e-3",
        "adam:lr=1e-2,weight_decay=1e-2,lazy=1", /* rows with a zero gradient skipped: the CPU's rows */
        "adadelta:lr=0.5,rho=0.95,lazy=1",
        "sgd:lr=0.1,momentum=0.9,lazy=1",
        "adagrad:lr=0.1,lr_decay=0.01,weight_decay=1e-3",
        "adagrad:lr=0.1,initial_accumulator_value=0.1,lazy=1", /* the initial sums filled on the device */
        "rmsprop:lr=1e-2,weight_decay=1e-3",
        "rmsprop:lr=1e-2,momentum=0.9",
        "rmsprop:lr=1e-2,centered=1",
        "rmsprop:lr=1e-2,momentum=0.9,centered=1,lazy=1",
        "rmsprop:lr=1e-2,alpha=0.9,lazy=1", /* no momentum or centering: its skipped rows decay when caught up */
        "adam:lr=1e-2,ema=0.9", /* the parameters' average: every update's, from the second (w 1, then 1/2, 1/3) */
        "sgd:lr=0.1,momentum=0.9,swa=2",
        "adadelta:lr=0.5,rho=0.95,lazy=1,ema=0.6", /* lazy rows still move the average (w 0.4: the small form) */
        "adam:lr=1e-2,lookahead=2,lookahead_alpha=0.6", /* the slow weights copied, then a step back every 2 */
        "rmsprop:lr=1e-2,momentum=0.9,lookahead=3,swa=1",
        "muon:lr=1e-2", /* every twin is a matrix: Newton-Schulz on cuBLAS, a wide, a [33, 1] and a tall one */
        "muon:lr=2e-2,nesterov=0,match_rms_adamw=0,ns_steps=3,weight_decay=0.01,ema=0.9",
        "adafactor:lr=1e-2", /* factored: a wide, a [33, 1] (one column) and a tall [5000, 3] */
        "adafactor:lr=0.6,weight_decay=0.1,eps=1e-3,eps2=0.1,d=2,ema=0.9", /* rho = 1/sqrt(t) from step 3 */
        "adafactor:lr=1e-3,scale_parameter=0,relative_step=0,weight_decay=0.01", /* Hugging Face's switches off */
        "adafactor:lr=1e-2,beta1=0.9,weight_decay=0.01", /* and its first moment */
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) optimizer_case(specs[i]);
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) gated_case(specs[i]);
    fused_squares_case("adam:lr=1e-2,weight_decay=1e-2");
    fused_squares_case("adam:lr=1e-2,weight_decay=1e-2,lazy=1");
    fused_squares_case("adadelta:lr=0.5,rho=0.95,lazy=1");
    fused_squares_case("rmsprop:lr=1e-2,momentum=0.9,centered=1,lazy=1");
    lr_scale_all(GPU); /* a scale on one parameter: the bits of lr * scale there too */
    gradients_case();
    clip_bits_case();
    freeze_case();
    checkpoint_case();
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) model_case(&variants[i]);
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) tracking_case(&variants[i]);
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) graphs_case(&variants[i]);
    for (size_t i = 0; i < sizeof optimizer_variants / sizeof *optimizer_variants; i++) {
        tracking_case(&optimizer_variants[i]);
        graphs_case(&optimizer_variants[i]);
    }
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
        if (!strcmp(variants[i].model, "poslm")) feed_case(&variants[i]);
    anomaly_case();
    init_on_device_case();
    profile_launches_case(&variants[0]); /* MPSAN */
    profile_launches_case(&variants[6]); /* the LM: its own model file's sites, not the trainer's */
#ifdef AG_REAL_DOUBLE
    /* AG_TEST_NO_GRADCHECK=1: as in tests/opcase_run.c, the bounds_ runs
     * leave the finite differences to the plain run */
    if (check_env_on("AG_TEST_NO_GRADCHECK"))
        printf("AG_TEST_NO_GRADCHECK: no model gradcheck on the %s\n", ag_device_name(GPU));
    else
        for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) gradcheck_model_case(&variants[i]);
#endif
    ag_shutdown();
    return check_summary("test_cuda_train");
}
