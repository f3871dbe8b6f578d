/* test_mtsa.c - MTSA (MODELS.md §5) beyond its gradient check
 * (test_models): a whole training step never holds the [N,N,dh] score
 * tensor, the FLAG changes the scores, and steady steps allocate nothing. */
#include "check.h"
#include "../models/models.h"

#include <stdlib.h>
#include <string.h>

static void make_batch(ag_batch *b, int B, int N, int V, int K) {
    ag_rng r;
    ag_rng_seed(&r, 5);
    memset(b, 0, sizeof *b);
    b->rows = b->max_rows = B;
    b->width = b->max_width = N;
    b->tokens = calloc((size_t)B * N, sizeof *b->tokens);
    b->lengths = calloc((size_t)B, sizeof *b->lengths);
    b->labels = calloc((size_t)B, sizeof *b->labels);
    for (int i = 0; i < B; i++) {
        b->lengths[i] = N - i;
        b->labels[i] = (int32_t)(ag_rng_next(&r) % (uint64_t)K);
        for (int t = 0; t < b->lengths[i]; t++) b->tokens[i * N + t] = 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2));
    }
}

static ag_model_config config(unsigned flags) {
    ag_model_config c = ag_model_defaults(ag_model_find("mtsa"));
    c.vocab = 50;
    c.classes = 5;
    c.dim = 16;
    c.hidden = 48;
    c.flags = flags;
    return c;
}

/* Bytes of step arena for one forward and backward with dropout, B = 1,
 * N = dh = n (the arena's high-water mark only grows: call with growing n). */
static size_t step_bytes(int n) {
    ag_model_config c = config(0);
    c.hidden = n;
    ag_model m;
    ag_model_init(&m, ag_model_find("mtsa"), &c);
    ag_batch b;
    make_batch(&b, 1, n, c.vocab, c.classes);
    ag_backward(ag_model_loss(&m, &b, true));
    ag_step_end();
    ag_tiny_batch_free(&b);
    ag_model_free(&m);
    return ag_memstats().arena_high;
}

/* A step holds [N,N] and [N,dh] tensors, never [N,N,dh]: doubling N and dh
 * together multiplies its memory by at most 4 (a cube would make it 8). */
static void test_no_cube(void) {
    size_t prev = 0;
    for (int n = 16; n <= 128; n *= 2) {
        size_t used = step_bytes(n), cube = (size_t)n * n * n * sizeof(ag_real);
        printf("  n = %3d: arena %9zu bytes, one [N,N,dh] tensor %9zu\n", n, used, cube);
        if (prev) CHECK(used <= 4 * prev, "n = %d: %zu bytes after %zu at n/2", n, used, prev);
        prev = used;
    }
}

/* The same weights with sigma_t = log-sigmoid and identity give different
 * logits (the FLAG reaches the attention). */
static void test_flag(void) {
    ag_model_config c0 = config(0), c1 = config(AG_FLAG_EXP_SCORE);
    ag_model m0, m1;
    ag_model_init(&m0, ag_model_find("mtsa"), &c0);
    ag_model_init(&m1, ag_model_find("mtsa"), &c1);
    ag_batch b;
    make_batch(&b, 3, 7, c0.vocab, c0.classes);
    ag_tensor *l0 = ag_model_forward(&m0, &b, false), *l1 = ag_model_forward(&m1, &b, false);
    double d = 0;
    for (int64_t k = 0; k < l0->size; k++) d = fmax(d, fabs(l0->data[k] - l1->data[k]));
    CHECK(l0->ndim == 2 && l0->shape[0] == 3 && l0->shape[1] == c0.classes);
    CHECK(d > 1e-9, "the FLAG changes nothing (%g)", d);
    ag_step_end();
    ag_tiny_batch_free(&b);
    ag_model_free(&m0);
    ag_model_free(&m1);
}

/* After warm-up a training step (forward with dropout, backward) makes no
 * heap allocation: activations, masks and saved state come from the arena. */
static void test_steady_state(void) {
    ag_model_config c = config(0);
    ag_model m;
    ag_model_init(&m, ag_model_find("mtsa"), &c);
    ag_batch b;
    make_batch(&b, 3, 9, c.vocab, c.classes);
    int64_t allocs = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 3) allocs = ag_memstats().allocs;
        ag_backward(ag_model_loss(&m, &b, true));
        ag_step_end();
    }
    CHECK(ag_memstats().allocs == allocs, "%lld heap allocations in 5 steady steps",
          (long long)(ag_memstats().allocs - allocs));
    ag_tiny_batch_free(&b);
    ag_model_free(&m);
}

int main(void) {
    test_no_cube();
    test_flag();
    test_steady_state();
    ag_shutdown();
    return check_summary("test_mtsa");
}
