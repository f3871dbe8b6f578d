/* test_disan.c - examples/disan.c (included as is): an f64 gradient check of
 * its loss through every parameter on a padded batch (an example of length
 * 1 among them); the weights it hands out for heatmaps (ag_feature_attention's,
 * ag_source2token_weights', ag_feature_map); the same bits on 1 and 3
 * threads; and that it learns the
 * generated order task, where a bag of words stays at 25%: the training
 * loss falls and the test accuracy ends well above chance. */
#define DISAN_NO_MAIN
#include "../examples/disan.c"

#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, N = 5, V = 7, C = 4 };
static const int32_t tokens[B * N] = {3, 4, 5, 6, 2, /* */ 2, 0, 0, 0, 0, /* */ 6, 5, 4, 0, 0};
static const int32_t lengths[B] = {5, 1, 3}, labels[B] = {0, 2, 3};

static ag_tensor *loss_fn(void *p) {
    return ag_cross_entropy(disan_logits(p, tokens, lengths, B, N, NULL), labels, -1);
}

static void test_gradcheck(void) {
    ag_rng rng;
    ag_rng_seed(&rng, 3);
    disan m;
    disan_build(&m, V, C, 4, &rng);
    CHECK(ag_params_find(&m.ps, "fw.w1") && ag_params_find(&m.ps, "bw.wf2") && ag_params_find(&m.ps, "embed.weight"),
          "parameter names");
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(loss_fn, &m, m.ps.items, m.ps.count, &o);
    CHECK(r.ok, "parameter %s element %lld analytic %.12g numeric %.12g", m.ps.items[r.worst_input]->name,
          (long long)r.worst_index, r.analytic, r.numeric);
    printf("  gradcheck: %lld elements of %d parameters, max rel err %.2e\n", (long long)r.checked, m.ps.count,
           r.max_rel_err);
    ag_step_end();

    /* the maps: each direction's weights sum to 1 over the allowed keys per
     * (query, feature), 0 where the direction or padding forbids; the
     * pooling's over the valid positions per feature */
    disan_maps maps;
    disan_logits(&m, tokens, lengths, B, N, &maps);
    CHECK(maps.fw->ndim == 4 && maps.fw->shape[2] == N && maps.fw->shape[3] == 4, "fw weights [B,N,N,d]");
    CHECK(maps.pool->ndim == 3 && maps.pool->shape[2] == 8 && !maps.pool->requires_grad, "pool weights [B,N,2d]");
    for (int b = 0; b < B; b++)
        for (int i = 0; i < N; i++)
            for (int l = 0; l < 4; l++) {
                double sum_fw = 0, sum_bw = 0, wrong = 0;
                for (int j = 0; j < N; j++) {
                    int64_t at = (((int64_t)b * N + i) * N + j) * 4 + l;
                    bool fw_ok = j < i && i < lengths[b], bw_ok = j > i && j < lengths[b] && i < lengths[b];
                    sum_fw += maps.fw->data[at], sum_bw += maps.bw->data[at];
                    wrong += fw_ok ? 0 : fabs(maps.fw->data[at]);
                    wrong += bw_ok ? 0 : fabs(maps.bw->data[at]);
                }
                bool any_fw = i > 0 && i < lengths[b], any_bw = i < lengths[b] - 1;
                CHECK_NEAR(sum_fw, any_fw ? 1.0 : 0.0, 1e-12, 0);
                CHECK_NEAR(sum_bw, any_bw ? 1.0 : 0.0, 1e-12, 0);
                CHECK(wrong == 0, "weight where the mask forbids (b %d, i %d)", b, i);
            }
    for (int b = 0; b < B; b++)
        for (int l = 0; l < 8; l++) {
            double sum = 0;
            for (int t = 0; t < N; t++) /* a weight on padding, were it not 0, would show */
                sum += maps.pool->data[((int64_t)b * N + t) * 8 + l] * (t < lengths[b] ? 1 : 1e9);
            CHECK_NEAR(sum, 1.0, 1e-12, 0);
        }
    ag_tensor *mean = ag_feature_map(maps.fw, AG_FEATURE_MEAN), *f2 = ag_feature_map(maps.fw, 2);
    CHECK(mean->ndim == 3 && mean->shape[2] == N && !mean->requires_grad, "the mean map is [B,N,N]");
    for (int64_t e = 0; e < mean->size; e++) {
        const ag_real *w = maps.fw->data + e * 4;
        CHECK_NEAR(mean->data[e], (w[0] + w[1] + w[2] + w[3]) / 4, 1e-15, 1e-14);
        CHECK_NEAR(f2->data[e], w[2], 0, 0);
    }
    ag_step_end();
    ag_params_free(&m.ps);
}

/* The ops' CPU parts are fixed by the shape, not the thread count: one
 * training step's loss and gradients have the same bits on 1 and 3 threads. */
static void test_threads(void) {
    double first_loss = 0;
    ag_real *first = NULL;
    for (int threads = 1; threads <= 3; threads += 2) {
        ag_set_num_threads(threads);
        ag_rng rng;
        ag_rng_seed(&rng, 5);
        disan m;
        disan_build(&m, V, C, 6, &rng);
        ag_params_zero_grad(&m.ps);
        ag_tensor *loss = loss_fn(&m);
        ag_backward(loss);
        int64_t n = 0;
        for (int p = 0; p < m.ps.count; p++) n += m.ps.items[p]->size;
        ag_real *g = malloc(sizeof *g * (size_t)n);
        for (int p = 0, at = 0; p < m.ps.count; at += (int)m.ps.items[p]->size, p++)
            memcpy(g + at, m.ps.items[p]->grad, sizeof *g * (size_t)m.ps.items[p]->size);
        if (!first) {
            first = g, first_loss = ag_item(loss);
        } else {
            CHECK(ag_item(loss) == first_loss && !memcmp(g, first, sizeof *g * (size_t)n),
                  "1 and 3 threads give different bits");
            free(g);
        }
        ag_step_end();
        ag_params_free(&m.ps);
    }
    free(first);
}

static void test_learns(void) {
    double first = 0, last = 0, acc = disan_run(800, 6, 16, false, &first, &last, NULL);
    printf("  order task: train loss %.3f -> %.3f over 6 epochs, test accuracy %.1f%%\n", first, last, 100 * acc);
    CHECK(acc >= 0, "the run failed");
    CHECK(last < 0.7 * first, "train loss %.3f -> %.3f: it does not learn", first, last);
    CHECK(acc > 0.45, "test accuracy %.1f%%: a bag of words gets 25%%", 100 * acc);
}

int main(void) {
    test_gradcheck();
    test_threads();
    test_learns();
    ag_shutdown();
    return check_summary("test_disan");
}
