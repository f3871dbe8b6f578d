/* optim_step_cases.h - what every optimizer's step keeps, as cases a test
 * runs on its own spec and gradients: the same bits at 1 and 2 threads, a
 * step the training step's gate skips moving nothing, no allocation once
 * warm.  On big_params' parameters, which the update's chunks, the norms'
 * blocks and the products all cut.  After optim_util.h. */
#ifndef AG_OPTIM_STEP_CASES_H
#define AG_OPTIM_STEP_CASES_H

#include "optim_util.h"
#include "../optim/kernels.h" /* ag__optim_step_gated: the training step's skipped update */
#include "../optim/options.h" /* ag__optim_slot_numel: Adafactor's factors are not the parameter's size */

#include <math.h>
#include <stdlib.h>

/* e [300, 250], whose rows cross the update's 32768-element chunks (and 19
 * blocks of 4096), and v [7]: values in [-0.5, 0.5) from a fixed LCG. */
enum { BIG_ROWS = 300, BIG_COLS = 250, BIG_N = BIG_ROWS * BIG_COLS };

static inline void big_params(ag_params *ps) {
    ag_param(ps, "e", 2, (int[]){BIG_ROWS, BIG_COLS});
    ag_param(ps, "v", 1, (int[]){7});
    uint64_t r = 5;
    for (int i = 0; i < ps->count; i++)
        for (int64_t k = 0; k < ps->items[i]->size; k++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            ps->items[i]->data[k] = (ag_real)((double)(r >> 40) / (1 << 24) - 0.5);
        }
}

/* The gradients of step `step` into every parameter of ps. */
typedef void (*big_grads_fn)(ag_params *ps, int step);

/* Gradients of both signs, of a pattern that moves with the step. */
static inline void big_grads_waves(ag_params *ps, int step) {
    for (int i = 0; i < ps->count; i++)
        for (int64_t k = 0; k < ps->items[i]->size; k++)
            ps->items[i]->grad[k] = (ag_real)(0.01 * (double)((k * 7 + step) % 23) - 0.1 + 0.03 * sin((double)k));
}

/* Whether two runs hold the same bits: every value and every slot (a slot
 * one keeps and the other does not differs). */
static inline bool same_runs(const ag_params *pa, const ag_optimizer *a, const ag_params *pb, const ag_optimizer *b) {
    if (pa->count != pb->count || a->n_slots != b->n_slots) return false;
    for (int i = 0; i < pa->count; i++) {
        size_t bytes = (size_t)pa->items[i]->size * sizeof(ag_real);
        if (memcmp(pa->items[i]->data, pb->items[i]->data, bytes)) return false;
        for (int s = 0; s < a->n_slots; s++) {
            const ag_real *x = a->slot[s * a->n_params + i], *y = b->slot[s * b->n_params + i];
            size_t slot_bytes = (size_t)ag__optim_slot_numel(a, i, s) * sizeof(ag_real);
            if (!x != !y || (x && memcmp(x, y, slot_bytes))) return false;
        }
    }
    return true;
}

/* spec's `steps` steps (clipped to clip > 0 first) at 1 and at 2 threads:
 * the same bits. */
static inline void threads_case(const char *spec, big_grads_fn grads, int steps, double clip) {
    ag_params run[2] = {{0}, {0}};
    ag_optimizer o[2];
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    for (int t = 0; t < 2; t++) {
        ag_set_num_threads(t + 1);
        big_params(&run[t]);
        CHECK(ag_optim_init(&o[t], &run[t], &c) == AG_OK, "%s", ag_errmsg());
        for (int step = 0; step < steps; step++) {
            grads(&run[t], step);
            if (clip > 0) ag_clip_grad_norm(&run[t], clip);
            ag_optim_step(&o[t]);
            ag_step_end();
        }
    }
    bool same = same_runs(&run[0], &o[0], &run[1], &o[1]);
    CHECK(same, "%s: 1 and 2 threads differ", spec);
    printf("  %-52s %d steps on [%d, %d] and [7]: %s at 1 and 2 threads\n", spec, steps, BIG_ROWS, BIG_COLS,
           same ? "the same bits" : "DIFFERENT");
    for (int t = 0; t < 2; t++) ag_optim_free(&o[t]), ag_params_free(&run[t]);
    ag_set_num_threads(1);
}

/* What `steps` more steps of a warm optimizer allocate: heap blocks, and
 * growth of the arena's high mark (each step's memory is given back). */
static inline long long allocations_in_steps(ag_optimizer *o, int steps) {
    ag_mem_stats before = ag_memstats();
    for (int s = 0; s < steps; s++) {
        ag_optim_step(o);
        ag_step_end();
    }
    ag_mem_stats after = ag_memstats();
    return (long long)(after.allocs - before.allocs) + (after.arena_high > before.arena_high);
}

/* After a warm step, a step whose gate is NaN (the training step's skipped
 * update) leaves values and state as they were; then `steps` steps
 * allocate nothing. */
static inline void gate_and_memory_case(const char *spec, big_grads_fn grads, int steps) {
    ag_params ps = {0}, before = {0};
    big_params(&ps);
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_optimizer o, copy;
    ag_optim_init(&o, &ps, &c);
    grads(&ps, 1);
    ag_optim_step(&o);
    ag_step_end();
    big_params(&before); /* a copy of the values and the state, to compare with */
    ag_optim_init(&copy, &before, &c);
    for (int i = 0; i < ps.count; i++) {
        size_t bytes = (size_t)ps.items[i]->size * sizeof(ag_real);
        memcpy(before.items[i]->data, ps.items[i]->data, bytes);
        for (int s = 0; s < o.n_slots; s++)
            if (o.slot[s * o.n_params + i])
                memcpy(copy.slot[s * copy.n_params + i], o.slot[s * o.n_params + i],
                       (size_t)ag__optim_slot_numel(&o, i, s) * sizeof(ag_real));
    }
    double nan_gate = NAN;
    ag__optim_step_gated(&o, &nan_gate);
    ag__optim_step_not_taken(&o);
    ag_step_end();
    CHECK(same_runs(&ps, &o, &before, &copy), "%s: a step the gate skips moved the values or the state", spec);
    long long allocs = allocations_in_steps(&o, steps);
    CHECK(allocs == 0, "%s: %lld allocations in %d steps", spec, allocs, steps);
    printf("  %-52s a skipped step moves nothing; %d steps allocate %lld\n", spec, steps, allocs);
    ag_optim_free(&o), ag_optim_free(&copy);
    ag_params_free(&ps), ag_params_free(&before);
}

#endif
