/* test_pointer_network.c - examples/pointer_network.c (included as is) in double precision:
 *   - a gradient check of its teacher-forced loss through every parameter, on a batch with a set of one
 *     number and padded steps whose labels are ignored;
 *   - its output is a distribution over the inputs not yet pointed at: -inf scores on used and padded
 *     positions, at every step of teacher forcing;
 *   - it learns: 300 steps of Adam on sorting 2-5 numbers cut the loss by more than half. */
#define PTRNET_NO_MAIN
#include "../examples/pointer_network.c"

#include "check.h"
#include "example_checks.h"

enum { B = 3, N = 4 };
static const ag_real values[B * N] = {0.7, 0.1, 0.9, 0.4, /* */ 0.3, 0, 0, 0, /* */ 0.5, 0.2, 0.8, 0};
static const int32_t lengths[B] = {4, 1, 3};
static const int32_t order[B * N] = {1, 3, 0, 2, /* */ 0, -1, -1, -1, /* */ 1, 0, 2, -1};

static ag_tensor *loss_fn(void *p) {
    return ptrnet_loss(p, &(sets){.B = B, .N = N, .values = values, .len = lengths, .order = order});
}

static void test_gradcheck(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 9);
    ptrnet m;
    ptrnet_build(&m, 3, 4, &rng);
    CHECK(m.ps.count == 14 && ag_params_find(&m.ps, "decoder.w_hh") && ag_params_find(&m.ps, "start"), "parameters");
    gradcheck_params(loss_fn, &m, &m.ps);

    /* teacher forcing's steps: the used and the padded inputs are out, the others open */
    sets d = {.B = B, .N = N, .values = values, .len = lengths, .order = order};
    encoded enc = ptrnet_encode(&m, &d);
    bool used[B * N] = {0};
    ag_tensor *y = ag_embedding(m.start, (int32_t[B]){0}, 2, (int[]){B, 1});
    for (int i = 0; i < N; i++) {
        ag_tensor *u = ptrnet_step(&m, &enc, &d, y, used, i);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < N; j++) {
                bool out = j >= lengths[b] || (i < lengths[b] && used[b * N + j]);
                CHECK(out ? u->data[b * N + j] == -INFINITY : isfinite(u->data[b * N + j]), "step %d set %d input %d",
                      i, b, j);
            }
        int32_t pick[B];
        for (int b = 0; b < B; b++) {
            pick[b] = order[b * N + i];
            if (pick[b] >= 0) used[b * N + pick[b]] = true;
        }
        y = picked(&m, &enc, B, N, pick);
    }
    ag_step_end();
    ag_params_free(&m.ps);
}

typedef struct {
    const ptrnet *m;
    const sorting *s;
} sorting_batches;

static ag_tensor *sorting_loss(void *p, int step) {
    const sorting_batches *c = p;
    sets d = batch_of(c->s, step * 32 % (c->s->n - 32), 32);
    return ptrnet_loss(c->m, &d);
}

static void test_learns(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 4);
    sorting s = sorting_make(1000, 2, 5, &rng);
    ptrnet m;
    ptrnet_build(&m, 8, 16, &rng);
    adam_halves_loss(&m.ps, 1e-2, 300, sorting_loss, &(sorting_batches){&m, &s}, "sorting 2-5 numbers");
    ag_params_free(&m.ps), sorting_free(&s);
}

int main(void) {
    test_gradcheck();
    test_learns();
    ag_shutdown();
    return check_summary("test_pointer_network");
}
