/* test_masks.c - every mask type against small matrices written out by hand
 * (N = 4 or 5), the cache (same tensor, no allocation on reuse, freed by
 * ag_shutdown), tree distances and their input errors, and misuse. */
#include "attngrad.h"
#include "check.h"
#include "fatal.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#define I (-INFINITY)
#define LN2 0.69314718055994531
#define LN3 1.09861228866810969

/* Compares t (shape checked) to want, -inf entries exactly. */
static void check_matrix(const char *what, const ag_tensor *t, int ndim, const int *shape, const double *want) {
    bool shape_ok = t && t->ndim == ndim;
    for (int i = 0; shape_ok && i < ndim; i++) shape_ok = t->shape[i] == shape[i];
    CHECK(shape_ok, "%s: wrong shape", what);
    if (!shape_ok) return;
    int bad = 0;
    for (int64_t i = 0; i < t->size; i++) {
        double got = (double)t->data[i], w = want[i];
        bool ok = isinf(w) ? got == w : fabs(got - w) <= 1e-6 * (1 + fabs(w));
        if (!ok && bad++ < 3) fprintf(stderr, "  %s[%lld] = %g, want %g\n", what, (long long)i, got, w);
    }
    CHECK(bad == 0, "%s: %d entries differ", what, bad);
}

#define DIMS(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}

static void test_directions(void) {
    check_matrix("PAST", ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 4), DIMS(4, 4), (double[]){
        I, I, I, I,
        0, I, I, I,
        0, 0, I, I,
        0, 0, 0, I});
    check_matrix("FUTURE", ag_mask(&(ag_mask_spec){.dir = AG_MASK_FUTURE}, 4), DIMS(4, 4), (double[]){
        I, 0, 0, 0,
        I, I, 0, 0,
        I, I, I, 0,
        I, I, I, I});
    check_matrix("PAST_INCL", ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, 4), DIMS(4, 4), (double[]){
        0, I, I, I,
        0, 0, I, I,
        0, 0, 0, I,
        0, 0, 0, 0});
    check_matrix("FUTURE_INCL", ag_mask(&(ag_mask_spec){.dir = AG_MASK_FUTURE_INCL}, 4), DIMS(4, 4), (double[]){
        0, 0, 0, 0,
        I, 0, 0, 0,
        I, I, 0, 0,
        I, I, I, 0});
    check_matrix("NONE", ag_mask(&(ag_mask_spec){0}, 3), DIMS(3, 3), (double[]){0, 0, 0, 0, 0, 0, 0, 0, 0});
}

static void test_faraway(void) {
    check_matrix("faraway(2)", ag_mask(&(ag_mask_spec){.faraway = 2}, 5), DIMS(5, 5), (double[]){
        I, 0, 0, I, I,
        0, I, 0, 0, I,
        0, 0, I, 0, 0,
        I, 0, 0, I, 0,
        I, I, 0, 0, I});
    check_matrix("faraway(3)", ag_mask(&(ag_mask_spec){.faraway = 3}, 5), DIMS(5, 5), (double[]){
        I, 0, 0, 0, I,
        0, I, 0, 0, 0,
        0, 0, I, 0, 0,
        0, 0, 0, I, 0,
        I, 0, 0, 0, I});
    /* Combined with a direction: both must allow. */
    check_matrix("PAST faraway(2)", ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST, .faraway = 2}, 4), DIMS(4, 4),
                 (double[]){
        I, I, I, I,
        0, I, I, I,
        0, 0, I, I,
        I, 0, 0, I});
}

/* A sliding window: |k - q| < w, the word itself included; with PAST_INCL
 * each position reads itself and the w - 1 before it.  A spec differing
 * in its window alone is its own cache entry. */
static void test_window(void) {
    check_matrix("PAST_INCL window(2)", ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = 2}, 4), DIMS(4, 4),
                 (double[]){
        0, I, I, I,
        0, 0, I, I,
        I, 0, 0, I,
        I, I, 0, 0});
    check_matrix("window(2) with word distance", ag_mask(&(ag_mask_spec){.dist = AG_DIST_WORD, .window = 2}, 3),
                 DIMS(3, 3), (double[]){
        0, -1, I,
        -1, 0, -1,
        I, -1, 0});
    check_matrix("PAST_INCL window(1): the word alone", ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = 1}, 3),
                 DIMS(3, 3), (double[]){
        0, I, I,
        I, 0, I,
        I, I, 0});
    check_matrix("PAST_INCL, no window (after the windowed ones: not their cache entry)",
                 ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, 4), DIMS(4, 4), (double[]){
        0, I, I, I,
        0, 0, I, I,
        0, 0, 0, I,
        0, 0, 0, 0});
}

static void test_distances(void) {
    check_matrix("word distance", ag_mask(&(ag_mask_spec){.dist = AG_DIST_WORD}, 4), DIMS(4, 4), (double[]){
         0, -1, -2, -3,
        -1,  0, -1, -2,
        -2, -1,  0, -1,
        -3, -2, -1,  0});
    /* docs/models.md's MPSAN masks past_sd and future_sd. */
    check_matrix("past_sd", ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST, .dist = AG_DIST_LOG}, 4), DIMS(4, 4),
                 (double[]){
           I,    I, I, I,
           0,    I, I, I,
        -LN2,    0, I, I,
        -LN3, -LN2, 0, I});
    check_matrix("future_sd", ag_mask(&(ag_mask_spec){.dir = AG_MASK_FUTURE, .dist = AG_DIST_LOG}, 4), DIMS(4, 4),
                 (double[]){
        I, 0, -LN2, -LN3,
        I, I,    0, -LN2,
        I, I,    I,    0,
        I, I,    I,    I});
    /* The documented choice: -ln|q-k| is 0 on an allowed diagonal. */
    check_matrix("log distance, diagonal", ag_mask(&(ag_mask_spec){.dist = AG_DIST_LOG}, 3), DIMS(3, 3),
                 (double[]){
           0, 0, -LN2,
           0, 0,    0,
        -LN2, 0,    0});
    /* MS-SAN head 0: M_dir + 1.5 * M_dis. */
    check_matrix("PAST_INCL + 1.5 word",
                 ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_WORD, .weight = 1.5}, 4),
                 DIMS(4, 4), (double[]){
           0,    I,    I, I,
        -1.5,    0,    I, I,
          -3, -1.5,    0, I,
        -4.5,   -3, -1.5, 0});
}

static void test_heads_and_cache(void) {
    const ag_mask_spec specs[2] = {{.dir = AG_MASK_PAST}, {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD}};
    ag_tensor *m = ag_mask_heads(specs, 2, 3);
    check_matrix("heads [2,3,3]", m, DIMS(2, 3, 3), (double[]){
        I, I, I,
        0, I, I,
        0, 0, I,
        /* head 1 */
        0, -1, -2,
        I,  0, -1,
        I,  I,  0});
    CHECK(!m->requires_grad && m->persistent, "cached masks are constants outside the step arena");

    /* Reuse: the same tensor, and no allocation at all. */
    ag_tensor *a = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 7);
    ag_mem_stats before = ag_memstats();
    ag_tensor *b = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 7);
    ag_tensor *c = ag_mask_heads(specs, 2, 3);
    CHECK(ag_memstats().allocs == before.allocs, "a cached mask was rebuilt");
    CHECK(a == b && c == m, "the cache returned a different tensor");
    /* Weight 0 reads as 1: the same mask. */
    ag_tensor *w0 = ag_mask(&(ag_mask_spec){.dist = AG_DIST_WORD}, 4);
    ag_tensor *w1 = ag_mask(&(ag_mask_spec){.dist = AG_DIST_WORD, .weight = 1}, 4);
    CHECK(w0 == w1, "weight 0 and 1 should be the same cached mask");
    /* Different N or spec: a different mask. */
    CHECK(ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 8) != a, "N is part of the key");
    CHECK(ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, 7) != a, "the spec is part of the key");
    /* Survives the end of a step. */
    ag_step_end();
    CHECK(ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 7) == a && a->data[7] == 0 && isinf(a->data[0]),
          "cached masks outlive ag_step_end");
}

/* Past its 64 MiB the cache stops growing: a longer width's mask is built in
 * step memory on every call, with the same values, and once the arena holds
 * a step no call allocates. */
static void test_cache_budget(void) {
    const ag_mask_spec past = {.dir = AG_MASK_PAST, .dist = AG_DIST_WORD};
    int N = (int)sqrt((double)(80 << 20) / sizeof(ag_real)); /* one mask alone over the budget */
    ag_tensor *big = ag_mask(&past, N);
    CHECK(!big->persistent && !big->requires_grad, "a mask over the cache's budget should be step memory");
    int64_t q = N - 1, k = N / 2;
    CHECK(big->data[q * N + k] == -(ag_real)(q - k) && isinf(big->data[k * N + q]) && isinf(big->data[0]),
          "the uncached mask has the wrong values");
    ag_step_end();
    ag_mem_stats before = ag_memstats();
    ag_tensor *again = ag_mask(&past, N);
    CHECK(ag_memstats().allocs == before.allocs, "an uncached mask allocated once the arena was warm");
    CHECK(again->data[q * N + k] == -(ag_real)(q - k), "the rebuilt mask has the wrong values");
    ag_step_end();
    /* the small masks are still cached */
    CHECK(ag_mask(&past, 5) == ag_mask(&past, 5) && ag_mask(&past, 5)->persistent, "small masks are still cached");
    CHECK(!ag_mask_attenuation(exp(1.0), exp(1.0), N)->persistent, "the attenuation factor has the same budget");
    ag_step_end();
}

static void test_attenuation(void) {
    /* 1/ln(e|q-k| + e) = 1/(1 + ln(|q-k| + 1)). */
    double d0 = 1, d1 = 1 / (1 + LN2), d2 = 1 / (1 + LN3), d3 = 1 / (1 + 2 * LN2);
    check_matrix("attenuation", ag_mask_attenuation(exp(1.0), exp(1.0), 4), DIMS(4, 4), (double[]){
        d0, d1, d2, d3,
        d1, d0, d1, d2,
        d2, d1, d0, d1,
        d3, d2, d1, d0});
    CHECK(ag_mask_attenuation(exp(1.0), exp(1.0), 4) == ag_mask_attenuation(exp(1.0), exp(1.0), 4), "cached");
    /* w = 1, c = 2: 1/ln(|q-k| + 2). */
    check_matrix("attenuation w=1 c=2", ag_mask_attenuation(1, 2, 2), DIMS(2, 2), (double[]){
        1 / LN2, 1 / LN3,
        1 / LN3, 1 / LN2});
}

static void test_padding(void) {
    const int32_t len[2] = {3, 1};
    check_matrix("padding keys [B,1,N]", ag_mask_padding(len, 2, 4, 3, false), DIMS(2, 1, 4), (double[]){
        0, 0, 0, I,
        0, I, I, I});
    check_matrix("padding keys [B,1,1,N]", ag_mask_padding(len, 2, 4, 4, false), DIMS(2, 1, 1, 4), (double[]){
        0, 0, 0, I,
        0, I, I, I});
    const double both[] = {
        0, 0, 0, I,
        0, 0, 0, I,
        0, 0, 0, I,
        I, I, I, I,
        /* example 1 */
        0, I, I, I,
        I, I, I, I,
        I, I, I, I,
        I, I, I, I};
    check_matrix("padding keys+queries [B,N,N]", ag_mask_padding(len, 2, 4, 3, true), DIMS(2, 4, 4), both);
    check_matrix("padding keys+queries [B,1,N,N]", ag_mask_padding(len, 2, 4, 4, true), DIMS(2, 1, 4, 4), both);
    ag_step_end();
}

static void test_tree_distance(void) {
    /* 1 is the root; 0 and 2 hang from 1, 4 from 2, 3 from 4. */
    int32_t dist[25];
    CHECK(ag_tree_distance((int32_t[]){1, -1, 1, 4, 2}, 5, dist) == AG_OK, "%s", ag_errmsg());
    const int32_t want[25] = {
        0, 1, 2, 4, 3,
        1, 0, 1, 3, 2,
        2, 1, 0, 2, 1,
        4, 3, 2, 0, 1,
        3, 2, 1, 1, 0};
    CHECK(memcmp(dist, want, sizeof want) == 0, "tree distances differ");

    /* A forest: the two trees {0,1} and {2,3} are N = 4 apart. */
    CHECK(ag_tree_distance((int32_t[]){-1, 0, -1, 2}, 4, dist) == AG_OK, "%s", ag_errmsg());
    const int32_t forest[16] = {
        0, 1, 4, 4,
        1, 0, 4, 4,
        4, 4, 0, 1,
        4, 4, 1, 0};
    CHECK(memcmp(dist, forest, sizeof forest) == 0, "forest distances differ");

    /* The chain head[i] = i+1 (no parse): tree distance = word distance. */
    CHECK(ag_tree_distance((int32_t[]){1, 2, 3, 4, -1}, 5, dist) == AG_OK, "%s", ag_errmsg());
    bool chain = true;
    for (int q = 0; q < 5; q++)
        for (int k = 0; k < 5; k++) chain = chain && dist[q * 5 + k] == abs(q - k);
    CHECK(chain, "the chain parse should give |q-k|");

    CHECK(ag_tree_distance(NULL, 0, dist) == AG_OK, "an empty sentence is fine");

    /* Bad heads are input errors naming the position. */
    CHECK(ag_tree_distance((int32_t[]){1, 1, -1}, 3, dist) == AG_ERR_FORMAT &&
              strstr(ag_errmsg(), "position 1") && strstr(ag_errmsg(), "itself"),
          "self-pointing head: %s", ag_errmsg());
    CHECK(ag_tree_distance((int32_t[]){1, 5, -1}, 3, dist) == AG_ERR_FORMAT &&
              strstr(ag_errmsg(), "position 1") && strstr(ag_errmsg(), "head 5"),
          "head out of range: %s", ag_errmsg());
    CHECK(ag_tree_distance((int32_t[]){-1, -3, 0}, 3, dist) == AG_ERR_FORMAT && strstr(ag_errmsg(), "position 1"),
          "head below -1: %s", ag_errmsg());
    CHECK(ag_tree_distance((int32_t[]){-1, 2, 1}, 3, dist) == AG_ERR_FORMAT && strstr(ag_errmsg(), "position 1") &&
              strstr(ag_errmsg(), "cycle"),
          "cycle: %s", ag_errmsg());
}

static void test_mask_batch(void) {
    /* MS-SAN: heads 0 PAST_INCL + 1.5 tree, 1 FUTURE_INCL + 1.5 word. */
    const ag_mask_spec specs[2] = {
        {.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_TREE, .weight = 1.5},
        {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD, .weight = 1.5},
    };
    /* Sentence 0: root 0, children 1 and 2, 3 under 2.  Sentence 1 (length
     * 3): root 1 with children 0 and 2; its padded head 99 is ignored. */
    const int32_t lengths[2] = {4, 3};
    const int32_t heads[8] = {-1, 0, 0, 2, /* */ 1, -1, 1, 99};
    ag_tensor *m = NULL;
    CHECK(ag_mask_batch(specs, 2, 2, 4, lengths, heads, &m) == AG_OK, "%s", ag_errmsg());
    check_matrix("ag_mask_batch", m, DIMS(2, 2, 4, 4), (double[]){
        /* b0 h0: tree distances 0:[0,1,1,2] 1:[1,0,2,3] 2:[1,2,0,1] 3:[2,3,1,0] */
           0,    I,    I, I,
        -1.5,    0,    I, I,
        -1.5,   -3,    0, I,
          -3, -4.5, -1.5, 0,
        /* b0 h1 */
        0, -1.5,   -3, -4.5,
        I,    0, -1.5,   -3,
        I,    I,    0, -1.5,
        I,    I,    I,    0,
        /* b1 h0: padded key 3 and padded query row 3 */
           0,    I, I, I,
        -1.5,    0, I, I,
          -3, -1.5, 0, I,
           I,    I, I, I,
        /* b1 h1 */
        0, -1.5,   -3, I,
        I,    0, -1.5, I,
        I,    I,    0, I,
        I,    I,    I, I});

    /* No tree spec: heads may be NULL. */
    const ag_mask_spec dir_only[1] = {{.dir = AG_MASK_PAST}};
    CHECK(ag_mask_batch(dir_only, 1, 2, 4, lengths, NULL, &m) == AG_OK, "%s", ag_errmsg());
    check_matrix("ag_mask_batch no tree", m, DIMS(2, 1, 4, 4), (double[]){
        I, I, I, I,
        0, I, I, I,
        0, 0, I, I,
        0, 0, 0, I,
        I, I, I, I,
        0, I, I, I,
        0, 0, I, I,
        I, I, I, I});

    /* A bad head names the sentence and the position. */
    const int32_t bad[8] = {-1, 0, 0, 2, /* */ 1, -1, 2, 0};
    m = (ag_tensor *)1;
    CHECK(ag_mask_batch(specs, 2, 2, 4, lengths, bad, &m) == AG_ERR_FORMAT && m == NULL &&
              strstr(ag_errmsg(), "sentence 1") && strstr(ag_errmsg(), "position 2"),
          "bad head in a batch: %s", ag_errmsg());
    ag_step_end();
}

/* ---- misuse stops with a message naming the function ---- */

static void test_misuse(void) {
    ag_fatal_handler old = ag_set_fatal_handler(catch_fatal);
    const int32_t too_long[2] = {3, 5};
    EXPECT_FATAL_AT(ag_mask(&(ag_mask_spec){.dist = AG_DIST_TREE}, 4), "ag_mask", "ag_mask_batch");
    EXPECT_FATAL_AT(ag_mask(&(ag_mask_spec){.dir = (ag_mask_dir)9}, 4), "ag_mask", "direction 9");
    EXPECT_FATAL_AT(ag_mask(&(ag_mask_spec){.faraway = -1}, 4), "ag_mask", "faraway -1");
    EXPECT_FATAL_AT(ag_mask(&(ag_mask_spec){.window = -3}, 4), "ag_mask", "window -3 < 0");
    EXPECT_FATAL_AT(ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, -2), "ag_mask", "N = -2");
    EXPECT_FATAL_AT(ag_mask_heads((ag_mask_spec[]){{0}}, 0, 4), "ag_mask_heads", "0 heads");
    EXPECT_FATAL_AT(ag_mask_attenuation(1, 1, 4), "ag_mask_attenuation", "c = 1");
    EXPECT_FATAL_AT(ag_mask_padding(too_long, 2, 4, 3, false), "ag_mask_padding", "lengths[1] = 5");
    EXPECT_FATAL_AT(ag_mask_padding(too_long, 2, 5, 2, false), "ag_mask_padding", "ndim 2");
    ag_tensor *m;
    EXPECT_FATAL_AT(ag_mask_batch((ag_mask_spec[]){{.dist = AG_DIST_TREE}}, 1, 2, 5, too_long, NULL, &m),
                 "ag_mask_batch", "heads is NULL");
    ag_set_fatal_handler(old);
    ag_step_end();
}

int main(void) {
    test_directions();
    test_faraway();
    test_window();
    test_distances();
    test_heads_and_cache();
    test_attenuation();
    test_cache_budget();
    test_padding();
    test_tree_distance();
    test_mask_batch();
    test_misuse();
    ag_shutdown();
    ag_mem_stats s = ag_memstats();
    CHECK(s.allocs == s.frees, "ag_shutdown left %lld allocations (the mask cache?)", (long long)(s.allocs - s.frees));
    return check_summary("test_masks");
}
