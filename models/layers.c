/* layers.c - parameter makers and the blocks the five models share.  They
 * are compositions of ops (their gradients follow from the ops' own), kept
 * here so that a model reads like its equations. */
#include "attngrad.h"
#include "../graph/internal.h" /* ag__fatal: misuse names the layer, as an op would */

#include <math.h>
#include <stdio.h>
#include <string.h>

ag_tensor *ag_param_glorot(ag_params *ps, const char *name, int in, int out, ag_rng *rng) {
    ag_tensor *w = ag_param(ps, name, 2, (int[]){in, out});
    ag_init_glorot_uniform(w, 1.0, rng);
    return w;
}

ag_tensor *ag_param_bias(ag_params *ps, const char *name, int n) {
    return ag_param(ps, name, 1, (int[]){n});
}

ag_tensor *ag_param_uniform(ag_params *ps, const char *name, int ndim, const int *shape, double bound, ag_rng *rng) {
    ag_tensor *t = ag_param(ps, name, ndim, shape);
    ag_init_uniform(t, -bound, bound, rng);
    return t;
}

ag_tensor *ag_param_embedding(ag_params *ps, const char *name, int V, int d, double bound, int pad_id,
                              ag_rng *rng) {
    ag_tensor *e = ag_param_uniform(ps, name, 2, (int[]){V, d}, bound, rng);
    if (e->data && pad_id >= 0 && pad_id < V) memset(e->data + (int64_t)pad_id * d, 0, (size_t)d * sizeof(ag_real));
    return e;
}

/* ag_param_uniform under the name prefix + suffix (any length). */
static ag_tensor *param_suffixed(ag_params *ps, const char *prefix, const char *suffix, int ndim, const int *shape,
                                 double bound, ag_rng *rng) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *name = ag_malloc(n);
    snprintf(name, n, "%s%s", prefix, suffix);
    ag_tensor *t = ag_param_uniform(ps, name, ndim, shape, bound, rng);
    ag_free(name); /* ag_param keeps its own copy */
    return t;
}

ag_lstm_layer ag_param_lstm(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng) {
    ag_lstm_layer l;
    l.w_ih = param_suffixed(ps, prefix, ".w_ih", 2, (int[]){in, 4 * H}, bound, rng);
    l.w_hh = param_suffixed(ps, prefix, ".w_hh", 2, (int[]){H, 4 * H}, bound, rng);
    l.b_ih = param_suffixed(ps, prefix, ".b_ih", 1, (int[]){4 * H}, bound, rng);
    l.b_hh = param_suffixed(ps, prefix, ".b_hh", 1, (int[]){4 * H}, bound, rng);
    return l;
}

ag_tensor *ag_activate(ag_tensor *x, ag_act act) {
    switch (act) {
    case AG_ACT_RELU: return ag_relu(x);
    case AG_ACT_ELU: return ag_elu(x);
    case AG_ACT_TANH: return ag_tanh(x);
    case AG_ACT_SIGMOID: return ag_sigmoid(x);
    case AG_ACT_NONE: break;
    }
    return x;
}

/* lengths[b] in [0, N] for every example, or a fatal error naming the layer. */
static void check_lengths(const char *layer, const int32_t *lengths, int B, int N) {
    for (int b = 0; b < B; b++)
        if (lengths[b] < 0 || lengths[b] > N)
            ag__fatal(layer, "lengths[%d] = %d is outside [0, %d]", b, (int)lengths[b], N);
}

static void bad_shape(const char *layer, const ag_tensor *x, const char *want) {
    char sx[64];
    ag__fatal(layer, "x %s: want %s", ag_shape_str(x, sx, sizeof sx), want);
}

ag_tensor *ag_valid_mask(const int32_t *lengths, int B, int N) {
    check_lengths("ag_valid_mask", lengths, B, N);
    ag_tensor *m = ag_tensor_new(3, (int[]){B, N, 1});
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N && t < lengths[b]; t++) m->data[b * N + t] = 1;
    return m;
}

ag_tensor *ag_zero_padding(ag_tensor *x, const int32_t *lengths) {
    if (x->ndim < 2) bad_shape("ag_zero_padding", x, "[B, N, ...]");
    int shape[AG_MAX_DIMS] = {x->shape[0], x->shape[1]}; /* [B, N, 1, ...] as deep as x */
    for (int i = 2; i < x->ndim; i++) shape[i] = 1;
    return ag_mul(x, ag_reshape(ag_valid_mask(lengths, x->shape[0], x->shape[1]), x->ndim, shape));
}

ag_tensor *ag_max_over_time(ag_tensor *x, const int32_t *lengths) {
    if (x->ndim != 3) bad_shape("ag_max_over_time", x, "[B, N, d]");
    int B = x->shape[0], N = x->shape[1];
    check_lengths("ag_max_over_time", lengths, B, N);
    ag_tensor *pad = ag_tensor_new(3, (int[]){B, N, 1});
    bool empty = false;
    for (int b = 0; b < B; b++) {
        if (lengths[b] <= 0) { /* no -inf here: max over all -inf would be -inf */
            empty = true;
            continue;
        }
        for (int t = lengths[b]; t < N; t++) pad->data[b * N + t] = -INFINITY;
    }
    ag_tensor *m = ag_max_axis(ag_add(x, pad), 1, false); /* [B, d] */
    if (!empty) return m;
    /* An empty example pools to 0 with no gradient, as ag_source2token's
     * does (its softmax gives every position weight 0). */
    ag_tensor *keep = ag_tensor_new(2, (int[]){B, 1});
    for (int b = 0; b < B; b++) keep->data[b] = lengths[b] > 0;
    return ag_mul(m, keep);
}

ag_tensor *ag_source2token(ag_tensor *x, const int32_t *lengths, ag_tensor *w1, ag_tensor *b1,
                           ag_tensor *w2, ag_tensor *b2, ag_act act) {
    ag_tensor *scores = ag_linear(ag_dense(x, w1, b1, act), w2, b2);  /* [B,N,d] */
    ag_tensor *alpha = ag_softmax_axis_len(scores, 1, lengths);       /* over valid t */
    return ag_sum_axis(ag_mul(alpha, x), 1, false);                   /* [B,d] */
}
