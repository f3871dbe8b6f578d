/* test_threads.c - the engine's threads: the pool runs every part exactly
 * once, nests and refuses misuse; every parallel op gives bitwise the same
 * output and gradients with 1, 2 and 3 threads at sizes that cross its
 * split points; broadcast ops and cut GEMMs agree with plain reference
 * loops at those sizes (the gradient checks only see small shapes); and a
 * training step of every model gives the same parameters for any count. */
#include "check.h"
#include "../graph/internal.h"
#include "attngrad/model.h"
#include "../train/internal.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the pool ---- */

static _Atomic int hits[4096];

static void count_part(void *ctx, int64_t p) {
    (void)ctx;
    atomic_fetch_add(&hits[p], 1);
}

static void nested_part(void *ctx, int64_t p) {
    int64_t *base = ctx;
    (void)p;
    ag__parallel(8, count_part, base); /* runs inline on this thread */
}

/* ag__worker: in range, and no two parts at once on one index (a scratch
 * per thread relies on it).  hits[4001] counts the faults. */
static _Atomic int busy[256];
static void worker_part(void *ctx, int64_t p) {
    (void)p;
    int w = ag__worker(), threads = *(const int *)ctx;
    if (w < 0 || w >= threads || atomic_exchange(&busy[w], 1)) {
        atomic_fetch_add(&hits[4001], 1);
        return;
    }
    volatile double x = 0;
    for (int i = 0; i < 2000; i++) x += i; /* long enough for others to claim parts meanwhile */
    atomic_store(&busy[w], 0);
}

/* ag__parallel_spans: element e of array s at hits[offset[s] + e]. */
static const int span_offset[] = {0, 0, 7, 7, 7, 40, 40, 41};

static void count_span(void *ctx, int s, int64_t begin, int64_t end) {
    int64_t grain = *(const int64_t *)ctx;
    if (end - begin > grain || begin % grain) atomic_fetch_add(&hits[4000], 1); /* a range the grain does not give */
    for (int64_t e = begin; e < end; e++) atomic_fetch_add(&hits[span_offset[s] + e], 1);
}

/* Empty arrays first, between and last, lengths below, at and above the
 * grain: every element once, no range past its array's end. */
static void count_many(void *ctx, int s, int64_t begin, int64_t end) {
    (void)ctx;
    atomic_fetch_add(&hits[s], (int)(end - begin));
}

static void test_spans(int threads) {
    const int64_t lens[] = {0, 7, 0, 0, 33, 0, 1, 0};
    const int count = (int)(sizeof lens / sizeof *lens);
    for (int64_t grain = 1; grain <= 40; grain += 3) {
        memset(hits, 0, sizeof hits);
        ag__parallel_spans(count, lens, grain, count_span, &grain);
        bool ok = hits[4000] == 0;
        for (int e = 0; e < 41; e++) ok = ok && hits[e] == 1;
        CHECK(ok && hits[41] == 0, "%d threads, grain %lld: every element of every array once", threads,
              (long long)grain);
    }
    /* more arrays than the caller-frame room (65 ranges' starts) */
    static int64_t many[300];
    for (int s = 0; s < 300; s++) many[s] = s % 3;
    memset(hits, 0, sizeof hits);
    int64_t one = 1;
    ag__parallel_spans(300, many, 1, count_many, &one);
    int total = 0;
    for (int s = 0; s < 300; s++) total += hits[s];
    CHECK(total == 300 && hits[2] == 2 && hits[3] == 0, "300 arrays: %d elements", total);
    ag_step_end();
}

static void test_pool(void) {
    for (int threads = 1; threads <= 4; threads++) {
        ag_set_num_threads(threads);
        CHECK(ag_get_num_threads() == threads, "threads %d", ag_get_num_threads());
        bool ok = true;
        for (int job = 0; job < 300 && ok; job++) { /* many jobs: the two slots are reused */
            int parts = 1 + job * 13 % 4096;
            memset(hits, 0, sizeof hits);
            ag__parallel(parts, count_part, NULL);
            for (int p = 0; p < parts; p++) ok = ok && hits[p] == 1;
        }
        CHECK(ok, "%d threads: every part once", threads);
        memset(hits, 0, sizeof hits);
        for (int job = 0; job < 20; job++) ag__parallel(64, worker_part, &threads);
        CHECK(hits[4001] == 0 && ag__worker() == 0, "%d threads: ag__worker out of range or shared %d times", threads,
              hits[4001]);
        memset(hits, 0, sizeof hits);
        ag__parallel(5, nested_part, NULL);
        CHECK(hits[0] == 5 && hits[7] == 5 && hits[8] == 0, "nested loops run inline: %d %d %d", hits[0], hits[7],
              hits[8]);
        test_spans(threads);
    }
}

static jmp_buf on_error;
static char last_error[1024];

static void catch_fatal(const char *msg) {
    snprintf(last_error, sizeof last_error, "%s", msg);
    longjmp(on_error, 1);
}

static void arena_in_part(void *ctx, int64_t p) {
    (void)ctx;
    (void)p;
    ag__arena_alloc(16);
}

/* An arena allocation inside a part is an engine bug: it aborts with a
 * message whatever the fatal handler (it may be on a worker thread). */
static void test_arena_guard(int threads) {
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        freopen("/dev/null", "w", stderr);
        ag_set_num_threads(threads);
        ag__parallel(4, arena_in_part, NULL);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%d threads: arena use in a part aborts (status %d)",
          threads, status);
}

static void test_misuse(void) {
    ag_fatal_handler old = ag_set_fatal_handler(catch_fatal);
    ag_set_num_threads(2);
    last_error[0] = 0;
    if (setjmp(on_error) == 0) {
        ag_set_num_threads(0);
        CHECK(0, "no error from ag_set_num_threads(0)");
    }
    CHECK(strstr(last_error, "ag_set_num_threads") && strstr(last_error, "0"), "message '%s'", last_error);
    CHECK(ag_get_num_threads() == 2, "a refused count changes nothing");
    ag_set_fatal_handler(old);
    test_arena_guard(1);
    test_arena_guard(2);
}

/* ---- every parallel op: same bits for any thread count ---- */

typedef struct {
    const char *name;
    int n_in;
    int shapes[4][5]; /* ndim, dims... */
    ag_tensor *(*f)(ag_tensor **in);
} op_run;

static int32_t lengths[64], ids[4096];

static ag_tensor *f_add(ag_tensor **in) { return ag_add(in[0], in[1]); }
static ag_tensor *f_mul(ag_tensor **in) { return ag_mul(in[0], in[1]); }
static ag_tensor *f_div(ag_tensor **in) { return ag_div(in[0], in[1]); }
static ag_tensor *f_sub(ag_tensor **in) { return ag_sub(in[0], in[1]); }
static ag_tensor *f_max(ag_tensor **in) { return ag_maximum(in[0], in[1]); }
static ag_tensor *f_unary(ag_tensor **in) {
    ag_tensor *x = in[0];
    ag_tensor *y = ag_add(ag_tanh(x), ag_softplus(x));
    y = ag_add(y, ag_mul(ag_elu(x), ag_sigmoid(x)));
    y = ag_add(y, ag_log_sigmoid(ag_mul_scalar(x, 0.5)));
    y = ag_add(y, ag_log(ag_add_scalar(ag_square(x), 1)));
    return ag_add(y, ag_exp(ag_mul_scalar(x, 0.1)));
}
static ag_tensor *f_sums(ag_tensor **in) {
    ag_tensor *x = in[0];
    ag_tensor *a = ag_sum_axis(x, 0, false), *b = ag_mean_axis(x, 1, false), *c = ag_sum_axis(x, 2, false);
    ag_tensor *m = ag_max_axis(x, 1, false);
    return ag_add(ag_add(ag_sum(a), ag_mean(b)), ag_add(ag_sum(c), ag_sum(m)));
}
static ag_tensor *f_softmaxes(ag_tensor **in) {
    ag_tensor *mask = ag_mask_padding(lengths, 40, 33, 3, true);
    ag_tensor *y = ag_add(ag_masked_softmax(in[0], mask, 0.7), ag_log_softmax(in[0]));
    return ag_add(y, ag_softmax_axis_len(in[0], 1, lengths));
}
static ag_tensor *f_attention(ag_tensor **in) {
    ag_tensor *mask = ag_mask_padding(lengths, 24, 33, 4, true);
    return ag_attention(in[0], in[1], in[2], mask, 0.3, NULL);
}
/* Causal over 300 positions: three blocks of query rows a slice, each with
 * its keys' span, stored and recomputed (a scratch per thread). */
static ag_tensor *f_attention_causal(ag_tensor **in) {
    ag_tensor *mask = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, 300);
    return ag_add(ag_attention(in[0], in[1], in[2], mask, 0.3, NULL),
                  ag_attention_recompute(in[0], in[1], in[2], mask, 0.2));
}
static ag_tensor *f_matmul(ag_tensor **in) { return ag_matmul(in[0], in[1]); }
static ag_tensor *f_matmul_tn(ag_tensor **in) { return ag_matmul_t(in[0], true, in[1], false); }
static ag_tensor *f_matmul_nt(ag_tensor **in) { return ag_matmul_t(in[0], false, in[1], true); }
static ag_tensor *f_linear(ag_tensor **in) { return ag_linear(in[0], in[1], in[2]); }
static ag_tensor *f_linear_padded(ag_tensor **in) { /* every third row 0 in x and in dy: packed both ways */
    ag_tensor *m = ag_tensor_fill(1, 3, (int[]){64, 30, 1});
    for (int i = 0; i < 64 * 30; i++) m->data[i] = i % 3 == 1 ? 0 : 1;
    return ag_mul(ag_linear(ag_mul(in[0], m), in[1], in[2]), m);
}
static int32_t targets[64 * 30];
static ag_tensor *f_decoder_loss(ag_tensor **in) { /* the LM's tied decoder and its loss, a quarter ignored */
    ag_tensor *logits = ag_matmul_t(in[0], false, in[1], true);
    for (int i = 0; i < 64 * 30; i++) targets[i] = i % 4 == 3 ? 0 : 1 + (i * 37) % 999;
    return ag_mul(ag_cross_entropy(logits, targets, 0), in[2]);
}
static ag_tensor *f_lstm(ag_tensor **in) { /* frozen rows (lengths, some 0): packed products */
    ag_lstm_layer layer = {in[1], in[2], in[3], NULL};
    ag_lstm_opts o = {.len = lengths};
    return ag_lstm(in[0], &layer, 1, &o);
}
static ag_tensor *f_layernorm(ag_tensor **in) { return ag_layernorm(in[0], in[1], in[2], 1e-5); }
static ag_tensor *f_shape(ag_tensor **in) {
    ag_tensor *x = in[0];
    ag_tensor *parts[3] = {x, ag_transpose(x, 1, 2), ag_reshape(ag_permute(x, (int[]){2, 0, 1}), 3, (int[]){40, 50, 50})};
    ag_tensor *c = ag_concat(parts, 3, 1);
    ag_tensor *h = ag_merge_heads(ag_split_heads(c, 5));
    ag_tensor *e = ag_embedding(in[1], ids, 2, (int[]){64, 64});
    return ag_add(ag_sum(h), ag_sum(e));
}
static ag_tensor *f_gaussian(ag_tensor **in) {
    return ag_gaussian_context(in[0], ag_sigmoid(in[1]), ag_add_scalar(ag_sigmoid(in[2]), 0.1), lengths, false,
                               1e-3, NULL);
}
static ag_tensor *f_mtsa(ag_tensor **in) {
    ag_tensor *mask = ag_tensor_fill(1, 2, (int[]){33, 33});
    for (int q = 0; q < 33; q++) mask->data[q * 33 + q] = 0;
    return ag_mtsa_attention(in[0], in[1], in[2], mask, lengths, AG_MTSA_LOG_SIGMOID);
}

/* DiSAN's feature-wise attention, forward masked (a scratch per thread
 * for rows and examples; k only for gradient: q's and v's scratch). */
static ag_tensor *f_feature(ag_tensor **in) {
    ag_tensor *mask = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 33);
    ag_tensor *k = ag_tensor_from(in[1]->data, in[1]->ndim, in[1]->shape); /* a constant */
    return ag_feature_attention(in[0], k, in[2], mask, lengths, 5.0, NULL);
}

static const op_run runs[] = {
    {"add same shape", 2, {{3, 40, 33, 70}, {3, 40, 33, 70}}, f_add},
    {"add bias row", 2, {{3, 40, 33, 70}, {1, 70}}, f_add},
    {"mul column", 2, {{3, 40, 33, 70}, {3, 40, 33, 1}}, f_mul},
    {"mul column lhs", 2, {{3, 40, 33, 1}, {3, 40, 33, 70}}, f_mul},
    {"div middle dims", 2, {{4, 6, 1, 33, 70}, {4, 1, 40, 1, 70}}, f_div},
    {"sub heads mask", 2, {{4, 12, 6, 33, 33}, {4, 12, 1, 1, 33}}, f_sub},
    {"maximum wide row", 2, {{2, 3, 40000}, {1, 40000}}, f_max},
    {"unary ops", 1, {{3, 40, 33, 70}}, f_unary},
    {"sums and max", 1, {{3, 40, 33, 70}}, f_sums},
    {"softmaxes", 1, {{3, 40, 33, 33}}, f_softmaxes},
    {"attention", 3, {{4, 24, 6, 33, 20}, {4, 24, 6, 33, 20}, {4, 24, 6, 33, 30}}, f_attention},
    {"attention causal, in blocks", 3, {{4, 3, 4, 300, 16}, {4, 3, 4, 300, 16}, {4, 3, 4, 300, 8}}, f_attention_causal},
    {"matmul cut by rows", 2, {{2, 2100, 300}, {2, 300, 300}}, f_matmul},
    {"matmul cut by columns", 2, {{2, 300, 300}, {2, 300, 2100}}, f_matmul},
    {"matmul cut by K", 2, {{2, 1900, 300}, {2, 1900, 300}}, f_matmul_tn},
    {"matmul in two, a short batch", 2, {{2, 384, 300}, {2, 300, 300}}, f_matmul},
    {"matmul in two by K, a short batch", 2, {{2, 288, 120}, {2, 288, 120}}, f_matmul_tn},
    {"matmul batched", 2, {{3, 40, 33, 64}, {3, 40, 50, 64}}, f_matmul_nt},
    {"matmul shared rhs", 2, {{3, 40, 33, 64}, {2, 64, 300}}, f_matmul},
    {"linear", 3, {{3, 64, 30, 300}, {2, 300, 500}, {1, 500}}, f_linear},
    {"linear, zero gradient rows", 3, {{3, 64, 30, 300}, {2, 300, 500}, {1, 500}}, f_linear_padded},
    {"layernorm", 3, {{3, 40, 33, 300}, {1, 300}, {1, 300}}, f_layernorm},
    {"lstm", 4, {{3, 40, 33, 96}, {2, 96, 384}, {2, 96, 384}, {1, 384}}, f_lstm},
    {"decoder + cross-entropy", 3, {{3, 64, 30, 96}, {2, 1000, 96}, {0}}, f_decoder_loss},
    {"shape ops", 2, {{3, 40, 50, 50}, {2, 500, 64}}, f_shape},
    {"gaussian context", 3, {{3, 40, 33, 64}, {2, 40, 33}, {2, 40, 33}}, f_gaussian},
    {"mtsa attention", 3, {{3, 40, 33, 33}, {3, 40, 33, 64}, {3, 40, 33, 64}}, f_mtsa},
    {"feature attention", 3, {{3, 40, 33, 24}, {3, 40, 33, 24}, {3, 40, 33, 24}}, f_feature},
};

typedef struct {
    ag_real *out, *grad[4];
    int64_t out_size, grad_size[4];
} result;

static result run_op(const op_run *r, int threads) {
    ag_set_num_threads(threads);
    ag_rng rng;
    ag_rng_seed(&rng, 11);
    ag_tensor *in[4];
    for (int i = 0; i < r->n_in; i++) {
        in[i] = ag_tensor_new(r->shapes[i][0], r->shapes[i] + 1);
        for (int64_t k = 0; k < in[i]->size; k++) in[i]->data[k] = (ag_real)(ag_rng_uniform(&rng) * 2 - 1);
        in[i]->requires_grad = true;
    }
    ag_tensor *y = r->f(in);
    ag_real *seed = malloc((size_t)y->size * sizeof *seed);
    for (int64_t k = 0; k < y->size; k++) seed[k] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    ag_backward_seeded(y, seed);
    free(seed);
    result res = {malloc((size_t)y->size * sizeof(ag_real)), {0}, y->size, {0}};
    memcpy(res.out, y->data, (size_t)y->size * sizeof(ag_real));
    for (int i = 0; i < r->n_in; i++) {
        res.grad_size[i] = in[i]->size;
        res.grad[i] = malloc((size_t)in[i]->size * sizeof(ag_real));
        if (in[i]->grad) /* none where the op read a constant copy of the input */
            memcpy(res.grad[i], in[i]->grad, (size_t)in[i]->size * sizeof(ag_real));
        else
            memset(res.grad[i], 0, (size_t)in[i]->size * sizeof(ag_real));
    }
    ag_step_end();
    return res;
}

static void free_result(result *r) {
    free(r->out);
    for (int i = 0; i < 4; i++) free(r->grad[i]);
}

static void test_ops_thread_invariant(void) {
    for (int b = 0; b < 64; b++) lengths[b] = b % 7 == 0 ? 0 : 33 - b % 29; /* empty rows too */
    for (int i = 0; i < 4096; i++) ids[i] = (i * 7919) % 500 % (i % 3 ? 500 : 40); /* many repeats */
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        result one = run_op(&runs[k], 1);
        for (int threads = 2; threads <= 3; threads++) {
            result many = run_op(&runs[k], threads);
            bool same = many.out_size == one.out_size &&
                        memcmp(many.out, one.out, (size_t)one.out_size * sizeof(ag_real)) == 0;
            for (int i = 0; i < runs[k].n_in; i++)
                same = same && memcmp(many.grad[i], one.grad[i], (size_t)one.grad_size[i] * sizeof(ag_real)) == 0;
            CHECK(same, "%s: %d threads differ from 1", runs[k].name, threads);
            free_result(&many);
        }
        free_result(&one);
    }
}

/* ---- subnormal numbers flushed (ag_flush_denormals) ---- */

#ifdef AG_REAL_DOUBLE
#define REAL_MIN DBL_MIN
#else
#define REAL_MIN FLT_MIN
#endif

static ag_real tiny_products[4096]; /* per part: tiny * tiny, 0 where flushed */

static void tiny_product_part(void *ctx, int64_t p) {
    volatile ag_real half_root = (ag_real)(sqrt(REAL_MIN) * 0.5); /* its square: REAL_MIN / 4, subnormal */
    (void)ctx;
    tiny_products[p] = half_root * half_root;
}

/* What every part computed: 1 all flushed, 0 none, -1 some (a thread behind). */
static int parts_flushed(void) {
    memset(tiny_products, 0xff, sizeof tiny_products);
    ag__parallel(4096, tiny_product_part, NULL);
    int zeros = 0;
    for (int p = 0; p < 4096; p++) zeros += tiny_products[p] == 0;
    return zeros == 4096 ? 1 : zeros == 0 ? 0 : -1;
}

/* ag_mul of a subnormal by one, over enough elements to be split: FTZ
 * (results) and DAZ (inputs) alike; 1 all zero, 0 none. */
static int op_flushed(void) {
    int n[1] = {1 << 18};
    ag_tensor *a = ag_tensor_new(1, n), *one = ag_tensor_new(1, n);
    for (int64_t k = 0; k < a->size; k++) a->data[k] = REAL_MIN / 4, one->data[k] = 1;
    ag_tensor *y = ag_mul(a, one);
    int64_t zeros = 0, size = y->size;
    for (int64_t k = 0; k < size; k++) zeros += y->data[k] == 0;
    ag_step_end();
    return zeros == size ? 1 : zeros == 0 ? 0 : -1;
}

static void *op_flushed_thread(void *arg) {
    *(int *)arg = op_flushed();
    return NULL;
}

static void test_flush_denormals(void) {
    if (!ag_flush_denormals_supported()) {
        printf("  flush denormals: not on this CPU, skipped\n");
        return;
    }
    ag_set_num_threads(3);
    CHECK(!ag_flush_denormals_enabled(), "the library leaves subnormals alone until asked");
    int pf = parts_flushed(), of = op_flushed();
    CHECK(pf == 0 && of == 0, "off: every part (%d) and op (%d) keeps subnormals", pf, of);
    CHECK(!ag_flush_denormals(true) && ag_flush_denormals_enabled(), "returns the previous setting");
    CHECK(parts_flushed() == 1, "on: every thread's parts flush");
    CHECK(op_flushed() == 1, "on: an op reads subnormal inputs as 0");
    int other = -2;
    pthread_t t;
    pthread_create(&t, NULL, op_flushed_thread, &other);
    pthread_join(t, NULL);
    CHECK(other == 1, "on: a thread that never asked follows at its first op (%d)", other);
    ag_set_num_threads(2); /* new workers take the mode too */
    CHECK(parts_flushed() == 1, "on: a new pool's workers flush");
    CHECK(ag_flush_denormals(false) && parts_flushed() == 0 && op_flushed() == 0, "off again: the workers follow");
}

/* ---- large shapes against plain loops ---- */

/* The broadcast ops at shapes above their split points, in f64 against a
 * direct loop over the output (the same sums in the same order). */
static void test_broadcast_reference(void) {
    ag_set_num_threads(3);
    ag_rng rng;
    ag_rng_seed(&rng, 5);
    int as[3] = {40, 1, 70}, bs[3] = {1, 33, 1}; /* [40,1,70] * [33,1]: both broadcast */
    ag_tensor *a = ag_tensor_new(3, as), *b = ag_tensor_new(2, bs + 1);
    for (int64_t k = 0; k < a->size; k++) a->data[k] = (ag_real)(ag_rng_uniform(&rng) + 0.5);
    for (int64_t k = 0; k < b->size; k++) b->data[k] = (ag_real)(ag_rng_uniform(&rng) + 0.5);
    a->requires_grad = b->requires_grad = true;
    ag_tensor *y = ag_div(a, b); /* [40,33,70] */
    ag_real *g = malloc((size_t)y->size * sizeof *g);
    for (int64_t k = 0; k < y->size; k++) g[k] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    ag_backward_seeded(y, g);
    double worst = 0, worst_ga = 0, worst_gb = 0;
    double *ga = calloc((size_t)a->size, sizeof *ga), *gb = calloc((size_t)b->size, sizeof *gb);
    for (int i = 0; i < 40; i++)
        for (int q = 0; q < 33; q++)
            for (int l = 0; l < 70; l++) {
                int64_t io = ((int64_t)i * 33 + q) * 70 + l, ia = i * 70 + l, ib = q;
                double want = (double)a->data[ia] / (double)b->data[ib];
                worst = check_worst(worst, fabs(y->data[io] - want) / fabs(want));
                ga[ia] += g[io] / b->data[ib];
                gb[ib] += -g[io] * a->data[ia] / (b->data[ib] * b->data[ib]);
            }
    for (int64_t k = 0; k < a->size; k++) worst_ga = check_worst(worst_ga, fabs(a->grad[k] - ga[k]) / (fabs(ga[k]) + 1e-30));
    for (int64_t k = 0; k < b->size; k++) worst_gb = check_worst(worst_gb, fabs(b->grad[k] - gb[k]) / (fabs(gb[k]) + 1e-30));
#ifdef AG_REAL_DOUBLE
    const double tol = 1e-12;
#else
    const double tol = 1e-4;
#endif
    CHECK(worst < tol && worst_ga < tol && worst_gb < tol, "div [40,1,70] / [33,1]: out %.3g, da %.3g, db %.3g", worst,
          worst_ga, worst_gb);
    free(g);
    free(ga);
    free(gb);
    ag_step_end();
}

/* GEMMs cut by rows, columns and K against a plain triple loop in double. */
static void test_gemm_reference(void) {
    static const struct {
        bool ta, tb;
        int M, N, K;
    } cases[] = {{false, false, 2100, 300, 300}, {false, true, 300, 2100, 300}, {true, false, 300, 300, 1900},
                 {true, true, 257, 600, 1300},
                 /* two parts of at least GEMM_PAIR_SIDE: rows, columns, rows of A^T, K */
                 {false, false, 384, 300, 300}, {false, false, 64, 300, 384}, {true, false, 300, 300, 288},
                 {true, false, 120, 120, 300}};
    ag_set_num_threads(3);
    ag_rng rng;
    ag_rng_seed(&rng, 9);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int M = cases[c].M, N = cases[c].N, K = cases[c].K;
        ag_real *A = malloc((size_t)M * K * sizeof *A), *B = malloc((size_t)K * N * sizeof *B);
        ag_real *C = malloc((size_t)M * N * sizeof *C);
        for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
        for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
        for (int64_t i = 0; i < (int64_t)M * N; i++) C[i] = 1;
        ag__gemm(cases[c].ta, cases[c].tb, M, N, K, 2, A, B, (ag_real)0.5, C);
        double worst = 0;
        for (int i = 0; i < M; i += 7)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) {
                    double a = cases[c].ta ? A[(int64_t)k * M + i] : A[(int64_t)i * K + k];
                    double b = cases[c].tb ? B[(int64_t)j * K + k] : B[(int64_t)k * N + j];
                    s += a * b;
                }
                worst = check_worst(worst, fabs(C[(int64_t)i * N + j] - (2 * s + 0.5)) / (fabs(2 * s + 0.5) + 1));
            }
#ifdef AG_REAL_DOUBLE
        CHECK(worst < 1e-12, "gemm %d: %.3g", (int)c, worst);
#else
        CHECK(worst < 1e-4, "gemm %d: %.3g", (int)c, worst);
#endif
        free(A);
        free(B);
        free(C);
        ag_step_end();
    }
}

/* ---- a training step of every model ---- */

/* B rows at width N with lengths spread over [N/3, N], in the layout the
 * model asks for (heads: a chain; bigrams when it has them). */
static void make_batch(const ag_model *m, ag_batch *b, int B, int N) {
    ag_model_batch_alloc(m, B, N, b);
    for (int i = 0; i < B; i++) {
        int len = N / 3 + (i * 7) % (N - N / 3 + 1);
        b->lengths[i] = b->lengths_b[i] = len;
        b->labels[i] = i % m->cfg.classes;
        for (int t = 0; t < N; t++) {
            int k = i * N + t;
            bool valid = t < len;
            b->tokens[k] = b->targets[k] = valid ? 2 + (i * 31 + t * 17) % (m->cfg.vocab - 2) : 0;
            b->tokens_b[k] = valid ? 2 + (i * 13 + t * 5) % (m->cfg.vocab - 2) : 0;
            b->heads[k] = b->heads_b[k] = !valid ? AG_HEAD_PAD : t == len - 1 ? -1 : t + 1;
        }
        for (int t = 0; t + 1 < len && b->opts.n_bigram > 1; t++) {
            int k = i * N + t;
            b->bigrams[k] = ag_bigram_id(b->tokens[k], b->tokens[k + 1], b->opts.n_bigram);
            b->bigrams_b[k] = ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], b->opts.n_bigram);
        }
    }
}

/* Parameters after 3 training steps (dropout on), hashed. */
static uint64_t model_hash(const ag_model_kind *kind, int threads) {
    ag_set_num_threads(threads);
    ag_model_config cfg = ag_model_defaults(kind);
    cfg.vocab = 300;
    cfg.classes = 4;
    cfg.dim = cfg.dim > 96 ? 96 : cfg.dim; /* small, but with parts to split at B = 24 */
    if (cfg.hidden > 96) cfg.hidden = 96;
    if (cfg.fixed_len > 24) cfg.fixed_len = 24;
    if (cfg.n_bigram > 1) cfg.n_bigram = 1000;
    ag_model m;
    ag_model_init(&m, kind, &cfg);
    ag_batch b;
    make_batch(&m, &b, 24, cfg.fixed_len > 0 ? cfg.fixed_len : 24);
    ag_optim_config oc;
    ag_optim_parse(cfg.optim, &oc);
    ag_optimizer opt;
    ag_optim_init(&opt, &m.params, &oc);
    for (int step = 0; step < 3; step++) {
        ag_params_zero_grad(&m.params);
        ag_tensor *loss = ag_model_loss(&m, &b, true);
        ag_backward(loss);
        if (cfg.l2 > 0) ag_l2_penalty(&m.params, cfg.l2);
        ag_optim_step(&opt);
        ag_step_end();
    }
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < m.params.count; i++) {
        const unsigned char *p = (const unsigned char *)m.params.items[i]->data;
        for (size_t k = 0; k < (size_t)m.params.items[i]->size * sizeof(ag_real); k++) h = (h ^ p[k]) * 1099511628211ULL;
    }
    ag_optim_free(&opt);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return h;
}

static void test_models(void) {
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) {
        uint64_t one = model_hash(*k, 1), two = model_hash(*k, 2), three = model_hash(*k, 3);
        CHECK(one == two && one == three, "%s: parameters after 3 steps differ with the thread count", (*k)->name);
    }
}

/* Argument "quick": the pool, misuse and model steps only (the large-shape
 * op runs take minutes under valgrind). */
int main(int argc, char **argv) {
    bool quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    test_pool();
    test_misuse();
    test_flush_denormals();
    if (!quick) {
        test_ops_thread_invariant();
        test_broadcast_reference();
        test_gemm_reference();
    }
    test_models();
    ag_shutdown();
    return check_summary("test_threads");
}
