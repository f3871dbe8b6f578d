/* layers.c - parameter makers, the blocks the five models share, and the
 * attention layers of layers.h.  They are compositions of ops (their
 * gradients follow from the ops' own), kept here so that a model reads like
 * its equations. */
#include "../graph/internal.h" /* ag__fatal: misuse names the layer, as an op would (first: AG_INTERNAL) */
#include "attngrad/layers.h"
#include "../ops/softmax_rows.h" /* ag__mask_plan_make: a layer's mask checked as ag_attention would */
#include "../ops/reduce.h"       /* ag__max_over_lengths: ag_max_over_time as one op */
#include "../graph/device.h"     /* ag__on_current: masks built on the host, used on the current device */

#include <limits.h>
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
/* A layer's parameters are named from its prefix: a NULL one is the
 * caller's mistake, named, not a crash in strlen. */
static void need_prefix(const char *layer, const char *prefix) {
    if (!prefix) ag__fatal(layer, "the parameters' name prefix is NULL");
}

static ag_tensor *param_suffixed(ag_params *ps, const char *prefix, const char *suffix, int ndim, const int *shape,
                                 double bound, ag_rng *rng) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *name = ag__malloc(n);
    snprintf(name, n, "%s%s", prefix, suffix);
    ag_tensor *t = ag_param_uniform(ps, name, ndim, shape, bound, rng);
    ag__free(name); /* ag_param keeps its own copy */
    return t;
}

static ag_rnn_layer param_recurrent(const char *maker, ag_params *ps, const char *prefix, int G, int in, int H,
                                        double bound, ag_rng *rng) {
    need_prefix(maker, prefix);
    ag_rnn_layer l;
    l.w_ih = param_suffixed(ps, prefix, ".w_ih", 2, (int[]){in, G * H}, bound, rng);
    l.w_hh = param_suffixed(ps, prefix, ".w_hh", 2, (int[]){H, G * H}, bound, rng);
    l.b_ih = param_suffixed(ps, prefix, ".b_ih", 1, (int[]){G * H}, bound, rng);
    l.b_hh = param_suffixed(ps, prefix, ".b_hh", 1, (int[]){G * H}, bound, rng);
    return l;
}

/* Both directions: <prefix>.fw's four, then <prefix>.bw's. */
static void param_bidirectional(const char *maker, ag_params *ps, const char *prefix, int G, int in, int H,
                                double bound, ag_rng *rng, ag_rnn_layer *fw, ag_rnn_layer *bw) {
    need_prefix(maker, prefix);
    size_t n = strlen(prefix) + 4;
    char *name = ag__malloc(n);
    snprintf(name, n, "%s.fw", prefix);
    *fw = param_recurrent(maker, ps, name, G, in, H, bound, rng);
    snprintf(name, n, "%s.bw", prefix);
    *bw = param_recurrent(maker, ps, name, G, in, H, bound, rng);
    ag__free(name);
}

ag_lstm_layer ag_param_lstm(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng) {
    return param_recurrent("ag_param_lstm", ps, prefix, 4, in, H, bound, rng);
}

ag_gru_layer ag_param_gru(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng) {
    return param_recurrent("ag_param_gru", ps, prefix, 3, in, H, bound, rng);
}

ag_bilstm_layer ag_param_bilstm(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng) {
    ag_bilstm_layer l;
    param_bidirectional("ag_param_bilstm", ps, prefix, 4, in, H, bound, rng, &l.fw, &l.bw);
    return l;
}

ag_bigru_layer ag_param_bigru(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng) {
    ag_bigru_layer l;
    param_bidirectional("ag_param_bigru", ps, prefix, 3, in, H, bound, rng, &l.fw, &l.bw);
    return l;
}

void ag_param_layernorm(ag_params *ps, const char *prefix, int d, ag_tensor **gain, ag_tensor **bias) {
    need_prefix("ag_param_layernorm", prefix);
    if (!gain) ag__fatal("ag_param_layernorm", "%s: gain must not be NULL", prefix);
    size_t n = strlen(prefix) + 6;
    char *name = ag__malloc(n);
    snprintf(name, n, "%s.gain", prefix);
    *gain = ag_param(ps, name, 1, (int[]){d});
    ag_init_constant(*gain, 1);
    if (bias) { /* none for ag_rmsnorm */
        snprintf(name, n, "%s.bias", prefix);
        *bias = ag_param_bias(ps, name, d);
    }
    ag__free(name);
}

ag_tensor *ag_activate(ag_tensor *x, ag_act act) {
    switch (act) {
    case AG_ACT_RELU: return ag_relu(x);
    case AG_ACT_ELU: return ag_elu(x);
    case AG_ACT_TANH: return ag_tanh(x);
    case AG_ACT_SIGMOID: return ag_sigmoid(x);
    case AG_ACT_GELU: return ag_gelu(x);
    case AG_ACT_SILU: return ag_silu(x);
    case AG_ACT_NONE: break;
    }
    return x;
}

/* lengths[b] in [0, N] for every example, or a fatal error naming the layer. */
static void check_lengths(const char *layer, const int32_t *lengths, int B, int N) {
    ag__need_array(layer, "the lengths array", lengths);
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
    ag_tensor *m = ag_tensor_new_host(3, (int[]){B, N, 1});
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N && t < lengths[b]; t++) m->data[b * N + t] = 1;
    return ag_to(m, ag_get_device());
}

ag_tensor *ag_max_over_time(ag_tensor *x, const int32_t *lengths) {
    ag__need("ag_max_over_time", "x", x);
    if (x->ndim != 3) bad_shape("ag_max_over_time", x, "[B, N, d]");
    int B = x->shape[0], N = x->shape[1];
    check_lengths("ag_max_over_time", lengths, B, N);
    /* One op: the max over the valid positions only, where a -inf padding
     * made on the host, its upload and an add took three launches more.
     * An empty example pools to 0 with no gradient, as ag_source2token's
     * does (its softmax gives every position weight 0). */
    return ag__max_over_lengths(x, lengths); /* [B, d] */
}

/* ag_bilstm's and ag_bigru's checks: x [B, N, in] where in is both
 * directions' w_ih rows, G gates per unit, lengths within [0, N]. */
static void check_bidirectional(const char *layer, ag_tensor *x, const ag_tensor *fw_w_ih, const ag_tensor *bw_w_ih,
                                int G, const int32_t *lengths) {
    ag__need(layer, "x", x);
    ag__need(layer, "fw.w_ih", fw_w_ih), ag__need(layer, "bw.w_ih", bw_w_ih);
    int in = fw_w_ih->shape[0];
    if (x->ndim != 3 || x->shape[2] != in) {
        char want[48];
        snprintf(want, sizeof want, "[B, N, %d] (fw.w_ih's rows)", in);
        bad_shape(layer, x, want);
    }
    if (bw_w_ih->shape[0] != in || bw_w_ih->ndim != 2 || fw_w_ih->ndim != 2) {
        char sf[64], sb[64];
        ag__fatal(layer, "fw.w_ih %s and bw.w_ih %s: want both [%d, %dH]", ag_shape_str(fw_w_ih, sf, sizeof sf),
                  ag_shape_str(bw_w_ih, sb, sizeof sb), in, G);
    }
    if (lengths) check_lengths(layer, lengths, x->shape[0], x->shape[1]);
}

ag_tensor *ag_bilstm(ag_tensor *x, const ag_bilstm_layer *l, const int32_t *lengths) {
    if (!l) ag__fatal("ag_bilstm", "the layer is NULL");
    check_bidirectional("ag_bilstm", x, l->fw.w_ih, l->bw.w_ih, 4, lengths);
    ag_tensor *f = ag_lstm(x, &l->fw, 1, &(ag_lstm_opts){.len = lengths});
    ag_tensor *r = ag_lstm(x, &l->bw, 1, &(ag_lstm_opts){.len = lengths, .reverse = true});
    return ag_concat((ag_tensor *[]){f, r}, 2, 2);
}

ag_tensor *ag_bigru(ag_tensor *x, const ag_bigru_layer *l, const int32_t *lengths) {
    if (!l) ag__fatal("ag_bigru", "the layer is NULL");
    check_bidirectional("ag_bigru", x, l->fw.w_ih, l->bw.w_ih, 3, lengths);
    ag_tensor *f = ag_gru(x, &l->fw, 1, &(ag_gru_opts){.len = lengths});
    ag_tensor *r = ag_gru(x, &l->bw, 1, &(ag_gru_opts){.len = lengths, .reverse = true});
    return ag_concat((ag_tensor *[]){f, r}, 2, 2);
}

ag_tensor *ag_last_positions(ag_tensor *x, const int32_t *lengths) {
    const char *layer = "ag_last_positions";
    ag__need(layer, "x", x);
    if (x->ndim != 3) bad_shape(layer, x, "[B, N, d]");
    int B = x->shape[0], N = x->shape[1], d = x->shape[2];
    if (lengths) check_lengths(layer, lengths, B, N);
    int32_t *rows = ag__malloc((size_t)(B + 1) * sizeof *rows);
    bool empty = N == 0;
    for (int b = 0; b < B; b++) {
        int len = lengths ? lengths[b] : N;
        empty |= len == 0;
        rows[b] = b * N + (len > 0 ? len - 1 : 0);
    }
    ag_tensor *y;
    if (N == 0) { /* nothing to select: every example is empty */
        y = ag_tensor_new(2, (int[]){B, d});
    } else {
        y = ag_index_select(ag_reshape(x, 2, (int[]){B * N, d}), 0, rows, B); /* [B, d] */
        if (empty) { /* an empty example's row is 0, with no gradient to position 0 */
            ag_tensor *keep = ag_tensor_new_host(2, (int[]){B, 1});
            for (int b = 0; b < B; b++) keep->data[b] = (lengths ? lengths[b] : N) > 0;
            y = ag_mul(y, ag_to(keep, x->device));
        }
    }
    ag__free(rows);
    return y;
}

/* ---- cross-sentence soft alignment ---- */

static void need_sentence(const char *layer, const char *what, const ag_tensor *t, const int32_t *len, int B) {
    char st[64];
    ag__need(layer, what, t);
    if (t->ndim != 3 || t->shape[0] != B)
        ag__fatal(layer, "%s %s: want [%d, N, d] (the batch of %d)", what, ag_shape_str(t, st, sizeof st), B, B);
    if (len) check_lengths(layer, len, B, t->shape[1]);
}

static void align(ag_tensor *e, ag_tensor *a, ag_tensor *b, const int32_t *len_a,
                  const int32_t *len_b, ag_tensor **a_tilde, ag_tensor **b_tilde, ag_tensor **probs_ab) {
    if (a_tilde || probs_ab) {
        ag_tensor *to_b = ag_softmax_axis_len(e, 2, len_b); /* row i over b's valid j */
        if (probs_ab) *probs_ab = to_b;
        if (a_tilde) *a_tilde = ag_matmul(to_b, b);          /* [B, Na, db] */
    }
    if (b_tilde) {
        ag_tensor *to_a = ag_softmax_axis_len(e, 1, len_a);  /* column j over a's valid i */
        *b_tilde = ag_matmul_t(to_a, true, a, false);        /* [B, Nb, da] */
    }
}

void ag_soft_align(ag_tensor *a, ag_tensor *b, const int32_t *len_a, const int32_t *len_b, ag_tensor **a_tilde,
                   ag_tensor **b_tilde, ag_tensor **probs_ab) {
    const char *layer = "ag_soft_align";
    ag__need(layer, "a", a);
    need_sentence(layer, "a", a, len_a, a->shape[0]);
    need_sentence(layer, "b", b, len_b, a->shape[0]);
    if (a->shape[2] != b->shape[2]) {
        char sa[64], sb[64];
        ag__fatal(layer, "a %s and b %s: want the same width d (e = a b^T)", ag_shape_str(a, sa, sizeof sa),
                  ag_shape_str(b, sb, sizeof sb));
    }
    align(ag_matmul_t(a, false, b, true), a, b, len_a, len_b, a_tilde, b_tilde, probs_ab);
}

void ag_soft_align_scores(ag_tensor *e, ag_tensor *a, ag_tensor *b, const int32_t *len_a, const int32_t *len_b,
                          ag_tensor **a_tilde, ag_tensor **b_tilde, ag_tensor **probs_ab) {
    const char *layer = "ag_soft_align_scores";
    ag__need(layer, "a", a);
    need_sentence(layer, "a", a, len_a, a->shape[0]);
    need_sentence(layer, "b", b, len_b, a->shape[0]);
    ag__need(layer, "e", e);
    if (e->ndim != 3 || e->shape[0] != a->shape[0] || e->shape[1] != a->shape[1] || e->shape[2] != b->shape[1]) {
        char se[64];
        ag__fatal(layer, "scores e %s: want [%d, %d, %d] (B, a's positions, b's)", ag_shape_str(e, se, sizeof se),
                  a->shape[0], a->shape[1], b->shape[1]);
    }
    align(e, a, b, len_a, len_b, a_tilde, b_tilde, probs_ab);
}

/* A constant view of t's values (no node, no gradient): what a layer hands
 * out for heatmaps, as ag_attention's probs. */
static ag_tensor *constant_view(const ag_tensor *t, const char *what) {
    return ag__view_of(t->data, t->device, t->ndim, t->shape, what);
}

ag_tensor *ag_source2token_weights(ag_tensor *x, const int32_t *lengths, ag_tensor *w1, ag_tensor *b1,
                                   ag_tensor *w2, ag_tensor *b2, ag_act act, ag_tensor **weights) {
    ag_tensor *scores = ag_linear(ag_dense(x, w1, b1, act), w2, b2);  /* [B,N,d] */
    /* softmax over valid t, then the weighted sum over t, in one op: what
     * ag_sum_axis(ag_mul(ag_softmax_axis_len(scores, 1, lengths), x), 1)
     * computes, to the bit, in one launch each way on the GPU */
    ag_tensor *alpha;
    ag_tensor *pooled = ag__softmax_pool(scores, x, lengths, weights ? &alpha : NULL); /* [B,d] */
    if (weights) *weights = constant_view(alpha, "ag_source2token(weights)");
    return pooled;
}

ag_tensor *ag_source2token(ag_tensor *x, const int32_t *lengths, ag_tensor *w1, ag_tensor *b1,
                           ag_tensor *w2, ag_tensor *b2, ag_act act) {
    return ag_source2token_weights(x, lengths, w1, b1, w2, b2, act, NULL);
}

ag_tensor *ag_feature_map(ag_tensor *w, int feature) {
    const char *layer = "ag_feature_map";
    char sw[64];
    ag__need(layer, "w", w);
    ag__check_live(layer, w);
    if (w->ndim < 2) bad_shape(layer, w, "[..., d] with at least one dim before the features");
    int d = w->shape[w->ndim - 1];
    if (feature != AG_FEATURE_MEAN && (feature < 0 || feature >= d))
        ag__fatal(layer, "feature %d of %s: want 0..%d or AG_FEATURE_MEAN", feature, ag_shape_str(w, sw, sizeof sw),
                  d - 1);
    bool was = ag_set_grad_enabled(false); /* a picture, not part of the model */
    ag_tensor *m = feature == AG_FEATURE_MEAN ? ag_mean_axis(w, -1, false)
                                              : ag_reshape(ag_slice(w, w->ndim - 1, feature, feature + 1), w->ndim - 1,
                                                           w->shape);
    ag_set_grad_enabled(was);
    return m;
}

/* ---- positional encodings ---- */

ag_tensor *ag_sinusoidal_positions(int N, int d) {
    if (N < 0 || d < 1) ag__fatal("ag_sinusoidal_positions", "N = %d, d = %d: want N >= 0, d >= 1", N, d);
    ag_tensor *pe = ag_tensor_new_host(2, (int[]){N, d});
    for (int i = 0; i < d; i += 2) {
        double inv_freq = pow(10000.0, -(double)i / d); /* 10000^(-2k/d) for the pair k = i/2 */
        for (int t = 0; t < N; t++) {
            pe->data[(int64_t)t * d + i] = (ag_real)sin(t * inv_freq);
            if (i + 1 < d) pe->data[(int64_t)t * d + i + 1] = (ag_real)cos(t * inv_freq);
        }
    }
    return ag_to(pe, ag_get_device());
}

ag_tensor *ag_add_sinusoidal_positions(ag_tensor *x) {
    ag__need("ag_add_sinusoidal_positions", "x", x);
    if (x->ndim != 3) bad_shape("ag_add_sinusoidal_positions", x, "[B, N, d]");
    return ag_add(x, ag_sinusoidal_positions(x->shape[1], x->shape[2]));
}

ag_tensor *ag_param_positions(ag_params *ps, const char *name, int max_len, int d, double std, ag_rng *rng) {
    ag_tensor *t = ag_param(ps, name, 2, (int[]){max_len, d});
    ag_init_normal(t, 0, std, rng);
    return t;
}

ag_tensor *ag_add_learned_positions(ag_tensor *x, ag_tensor *table) {
    const char *layer = "ag_add_learned_positions";
    char st[64];
    ag__need(layer, "x", x), ag__need(layer, "the table", table);
    if (x->ndim != 3) bad_shape(layer, x, "[B, N, d]");
    if (table->ndim != 2 || table->shape[1] != x->shape[2] || table->shape[0] < x->shape[1])
        ag__fatal(layer, "table %s for x with %d positions of %d features: want [max_len >= %d, %d]",
                  ag_shape_str(table, st, sizeof st), x->shape[1], x->shape[2], x->shape[1], x->shape[2]);
    return ag_add(x, ag_slice(table, 0, 0, x->shape[1])); /* a view: rows 0..N-1 */
}

/* ---- pooling ---- */

ag_tensor *ag_mean_over_time(ag_tensor *x, const int32_t *lengths) {
    ag__need("ag_mean_over_time", "x", x);
    if (x->ndim != 3) bad_shape("ag_mean_over_time", x, "[B, N, d]");
    int B = x->shape[0], N = x->shape[1];
    if (lengths) check_lengths("ag_mean_over_time", lengths, B, N);
    ag_tensor *w = ag_tensor_new_host(3, (int[]){B, N, 1}); /* 1/len on valid rows: one product and one sum */
    for (int b = 0; b < B; b++) {
        int len = lengths ? lengths[b] : N;
        for (int t = 0; t < len; t++) w->data[(int64_t)b * N + t] = (ag_real)(1.0 / len);
    }
    return ag_sum_axis(ag_mul(x, ag_to(w, x->device)), 1, false);
}

ag_tensor *ag_attention_pool(ag_tensor *x, const int32_t *lengths, ag_tensor *w, ag_tensor *b) {
    ag__need("ag_attention_pool", "x", x);
    if (x->ndim != 3) bad_shape("ag_attention_pool", x, "[B, N, d]");
    if (lengths) check_lengths("ag_attention_pool", lengths, x->shape[0], x->shape[1]);
    ag_tensor *alpha = ag_softmax_axis_len(ag_linear(x, w, b), 1, lengths); /* [B, N, 1], 0 past the length */
    return ag_sum_axis(ag_mul(alpha, x), 1, false);
}

/* ---- multi-head attention ---- */

/* Self-attention's fused [d, d + 2 kv dh] projection, or cross-attention's q [d, d] and kv [d, 2 kv dh]; misuse
 * named as `layer`. */
static ag_mha mha_make(const char *layer, ag_params *ps, int d_model, int heads, int kv_heads, bool cross,
                       ag_rng *rng) {
    if (heads < 1 || d_model < 1 || d_model % heads)
        ag__fatal(layer, "d_model %d and %d heads: want heads >= 1 dividing d_model", d_model, heads);
    if (kv_heads < 1 || heads % kv_heads)
        ag__fatal(layer, "%d key-value heads for %d heads: want a divisor of the heads", kv_heads, heads);
    ag_mha m = {.d_model = d_model, .heads = heads, .kv_heads = kv_heads};
    int kv = 2 * kv_heads * (d_model / heads);
    if (cross) {
        double bound = sqrt(6.0 / (d_model + d_model + kv)); /* Glorot over the fused [d, d + kv], as torch's */
        m.w_q = ag_param_uniform(ps, "q.weight", 2, (int[]){d_model, d_model}, bound, rng);
        m.b_q = ag_param_bias(ps, "q.bias", d_model);
        m.w_qkv = ag_param_uniform(ps, "kv.weight", 2, (int[]){d_model, kv}, bound, rng);
        m.b_qkv = ag_param_bias(ps, "kv.bias", kv);
    } else {
        m.w_qkv = ag_param_glorot(ps, "qkv.weight", d_model, d_model + kv, rng); /* fans of the fused matrix, as torch's */
        m.b_qkv = ag_param_bias(ps, "qkv.bias", d_model + kv);
    }
    m.w_o = ag_param_glorot(ps, "out.weight", d_model, d_model, rng);
    m.b_o = ag_param_bias(ps, "out.bias", d_model);
    return m;
}

ag_mha ag_mha_new(ag_params *ps, int d_model, int heads, ag_rng *rng) {
    return mha_make("ag_mha_new", ps, d_model, heads, heads, false, rng);
}

ag_mha ag_mha_new_grouped(ag_params *ps, int d_model, int heads, int kv_heads, ag_rng *rng) {
    return mha_make("ag_mha_new_grouped", ps, d_model, heads, kv_heads, false, rng);
}

ag_mha ag_mha_new_cross(ag_params *ps, int d_model, int heads, int kv_heads, ag_rng *rng) {
    return mha_make("ag_mha_new_cross", ps, d_model, heads, kv_heads, true, rng);
}

/* A layer made before kv_heads existed (a struct of the caller's) has 0: one a head. */
static int kv_heads_of(const ag_mha *m) { return m->kv_heads > 0 ? m->kv_heads : m->heads; }

/* x [B, N, d_model] for layer m, else a message naming the layer. */
static void need_model_rows(const char *layer, const char *what, const ag_mha *m, const ag_tensor *x) {
    ag__need(layer, what, x);
    if (x->ndim != 3 || x->shape[2] != m->d_model) {
        char want[64], got[64];
        snprintf(want, sizeof want, "[B, N, %d]", m->d_model);
        ag__fatal(layer, "%s %s: want %s", what, ag_shape_str(x, got, sizeof got), want);
    }
}

/* A self-attention layer's call with a cross-attention layer, or the other way round. */
static void need_kind(const char *layer, const ag_mha *m, bool cross) {
    if (!m) ag__fatal(layer, "the layer is NULL");
    if (cross && !m->w_q)
        ag__fatal(layer, "a self-attention layer (ag_mha_new): cross-attention needs ag_mha_new_cross's");
    if (!cross && m->w_q)
        ag__fatal(layer, "a cross-attention layer (ag_mha_new_cross): it reads a memory, ag_mha_cross_forward");
}

/* Positions of two sequences: a rotation or a window between them means nothing. */
static void need_no_positions(const char *layer, const ag_mha *m) {
    if (m->rope_base > 0 || m->window > 0 || m->alibi)
        ag__fatal(layer, "rope_base %g, window %d, alibi %d: rotary positions, windows and ALiBi are for "
                  "self-attention (want 0)", m->rope_base, m->window, (int)m->alibi);
}

/* ---- the valid rows of a padded batch ----
 * The Transformer layers' position-wise work (projections, FFN, norms,
 * dropout, residuals) needs a padded batch [B, N, C]'s valid rows alone:
 * packed, [T, C] in order (row b N + t for t < lengths[b]), they skip the
 * padding's products; attention alone needs the [B, N, ...] layout, and
 * gets it back with zeros at the padding. */
typedef struct {
    const int32_t *rows;    /* [T] the valid rows' places in [B N]; NULL: nothing packed (T = B N) */
    const int32_t *slots;   /* [B N] each place's packed row (0 at padding, zeroed after) */
    const int32_t *lengths; /* where some row is padding, packed or not; else NULL */
    int T, B, N;
} packing;

static const packing unpacked = {0};

/* lengths (checked) of B sequences of N: their packing where at least an eighth of the rows is padding (the
 * gathers cost about what 6% of a layer's products do, and each is a launch on a GPU), else none (its lengths
 * kept where some row is padding, for finish()). */
static packing packing_of(const int32_t *lengths, int B, int N) {
    packing p = {.lengths = lengths, .B = B, .N = N};
    int64_t T = 0, all = (int64_t)B * N;
    for (int b = 0; lengths && b < B; b++) T += lengths[b];
    if (!lengths || T == all) return unpacked;
    if (T == 0 || (all - T) * 8 < all) return (packing){.lengths = lengths, .B = B, .N = N};
    int32_t *rows = ag__arena_alloc((size_t)T * sizeof *rows), *slots = ag__arena_alloc((size_t)B * N * sizeof *slots);
    for (int b = 0, r = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            slots[b * N + t] = t < lengths[b] ? r : 0;
            if (t < lengths[b]) rows[r++] = b * N + t;
        }
    p.rows = rows, p.slots = slots, p.T = (int)T;
    return p;
}

/* x [B, N, C] -> its valid rows [T, C] (x itself where p packs nothing). */
static ag_tensor *pack(const packing *p, ag_tensor *x) {
    if (!p->rows) return x;
    return ag_index_select(ag_reshape(x, 2, (int[]){p->B * p->N, x->shape[2]}), 0, p->rows, p->T);
}

/* The inverse: y [T, C] -> [B, N, C], 0 at the padding (a gather, then the padding zeroed; its gradient there is
 * 0, so the row the padding gathered gets nothing from it). */
static ag_tensor *unpack(const packing *p, ag_tensor *y) {
    if (!p->rows) return y;
    ag_tensor *rows = ag_index_select(y, 0, p->slots, p->B * p->N);
    return ag_zero_padding(ag_reshape(rows, 3, (int[]){p->B, p->N, y->shape[1]}), p->lengths);
}

/* A layer's output [T, d] or [B, N, d] as [B, N, d] with 0 at the padding, packed or not. */
static ag_tensor *finish(const packing *p, ag_tensor *y) {
    if (p->rows) return unpack(p, y);
    return p->lengths ? ag_zero_padding(y, p->lengths) : y;
}

/* ---- ALiBi ---- */

void ag_alibi_slopes(int heads, double *slopes) {
    if (heads < 1) ag__fatal("ag_alibi_slopes", "%d heads: want at least one", heads);
    ag__need_array("ag_alibi_slopes", "slopes", slopes);
    int p = 1; /* the largest power of 2 <= heads: its slopes 2^(-8 k / p); past it, every other of 2p's */
    while (p <= heads / 2) p *= 2;
    for (int k = 0; k < p; k++) slopes[k] = pow(2, -8.0 * (k + 1) / p);
    for (int k = 0; k < heads - p; k++) slopes[p + k] = pow(2, -8.0 * (2 * k + 1) / (2 * p));
}

/* ALiBi's bias [1, h, N, N]: head i's -m_i |q - k| (ag_mask_heads' distance penalty, cached as its masks are). */
static ag_tensor *alibi_bias(int h, int N) {
    double *slopes = ag__arena_alloc((size_t)h * sizeof *slopes);
    ag_mask_spec *specs = ag__arena_alloc((size_t)h * sizeof *specs);
    ag_alibi_slopes(h, slopes);
    for (int i = 0; i < h; i++) specs[i] = (ag_mask_spec){.dist = AG_DIST_WORD, .weight = slopes[i]};
    return ag_reshape(ag_mask_heads(specs, h, N), 4, (int[]){1, h, N, N});
}

/* Heads q [B, h, Nq, dh] read k, v [B, kv, Nk, dh] under the padding of
 * lengths (of the keys) and mask, then merge, pack as the queries' pq
 * says, and go through W_o. */
static ag_tensor *attend(const char *layer, const ag_mha *m, ag_tensor *q, ag_tensor *k, ag_tensor *v,
                         const int32_t *lengths, ag_tensor *mask, ag_tensor **probs, const packing *pq) {
    int B = q->shape[0], h = q->shape[1], Nq = q->shape[2], Nk = k->shape[2], dh = q->shape[3];
    if (mask) ag__mask_plan_make(layer, 4, (int[]){B, h, Nq, Nk}, mask); /* ambiguity and shape, before adding */
    if (m->alibi) { /* self-attention over all positions: Nq = Nk */
        ag_tensor *bias = alibi_bias(h, Nq);
        mask = mask ? ag_add(mask, bias) : bias;
    }
    if (lengths) {
        check_lengths(layer, lengths, B, Nk);
        ag_tensor *pad = ag_mask_padding(lengths, B, Nk, 4, false); /* [B, 1, 1, Nk] */
        mask = mask ? ag_add(pad, mask) : pad;
    }
    /* k, v: each key-value head serves its group of h / kv query heads, uncopied */
    double scale = 1 / sqrt((double)dh);
    ag_tensor *o = m->recompute_attention && !probs ? ag_attention_recompute(q, k, v, mask, scale)
                                                    : ag_attention(q, k, v, mask, scale, probs); /* [B, h, Nq, dh] */
    return ag_linear(pack(pq, ag_merge_heads(o)), m->w_o, m->b_o);
}

/* Self-attention of m over x [B, N, d], or over pq's valid rows of it [T, d] (the output likewise). */
static ag_tensor *self_attention(const char *layer, const ag_mha *m, ag_tensor *x, const packing *pq,
                                 const int32_t *lengths, ag_tensor *mask, ag_tensor **probs) {
    int h = m->heads, kv = kv_heads_of(m), dh = m->d_model / h;
    /* One GEMM for Q, K and V, its columns Q's h heads, then K's kv, then V's kv: each taken into heads
     * straight from its columns (no slices of a split copy) */
    ag_tensor *qkv = unpack(pq, ag_linear(x, m->w_qkv, m->b_qkv)); /* [B, N, (h + 2kv) dh] */
    ag_tensor *q = ag_split_heads_at(qkv, 0, h, dh), *k = ag_split_heads_at(qkv, h * dh, kv, dh);
    ag_tensor *v = ag_split_heads_at(qkv, (h + kv) * dh, kv, dh);
    if (m->rope_base > 0) q = ag_rope(q, dh, 0, m->rope_base), k = ag_rope(k, dh, 0, m->rope_base);
    return attend(layer, m, q, k, v, lengths, mask, probs, pq);
}

/* Cross-attention of m: x [B, Nq, d] or pq's valid rows of it, reading memory [B, Nk, d], whose keys and values
 * are projected from pm's valid rows alone. */
static ag_tensor *cross_attention(const char *layer, const ag_mha *m, ag_tensor *x, const packing *pq,
                                  ag_tensor *memory, const packing *pm, const int32_t *memory_lengths,
                                  ag_tensor *mask, ag_tensor **probs) {
    int h = m->heads, kv = kv_heads_of(m), dh = m->d_model / h;
    ag_tensor *q = ag_split_heads_at(unpack(pq, ag_linear(x, m->w_q, m->b_q)), 0, h, dh);      /* [B, h, Nq, dh] */
    ag_tensor *kvs = unpack(pm, ag_linear(pack(pm, memory), m->w_qkv, m->b_qkv));              /* [B, Nk, 2 kv dh] */
    ag_tensor *k = ag_split_heads_at(kvs, 0, kv, dh), *v = ag_split_heads_at(kvs, kv * dh, kv, dh);
    return attend(layer, m, q, k, v, memory_lengths, mask, probs, pq);
}

ag_tensor *ag_mha_forward(const ag_mha *m, ag_tensor *x, const int32_t *lengths, ag_tensor *mask,
                          ag_tensor **probs) {
    const char *layer = "ag_mha_forward";
    need_kind(layer, m, false);
    need_model_rows(layer, "x", m, x);
    return self_attention(layer, m, x, &unpacked, lengths, mask, probs);
}

ag_tensor *ag_mha_cross_forward(const ag_mha *m, ag_tensor *x, ag_tensor *memory, const int32_t *memory_lengths,
                                ag_tensor *mask, ag_tensor **probs) {
    const char *layer = "ag_mha_cross_forward";
    need_kind(layer, m, true);
    need_model_rows(layer, "x", m, x), need_model_rows(layer, "memory", m, memory);
    if (memory->shape[0] != x->shape[0])
        ag__fatal(layer, "x holds %d sequences, memory %d: want one memory each", x->shape[0], memory->shape[0]);
    need_no_positions(layer, m);
    return cross_attention(layer, m, x, &unpacked, memory, &unpacked, memory_lengths, mask, probs);
}

/* ---- Transformer encoder layer ---- */

/* The encoder layer of cfg, its misuse named as `layer` (the decoder makes its self part here too). */
static ag_encoder_layer encoder_layer_make(const char *layer, ag_params *ps, const ag_encoder_config *cfg,
                                           ag_rng *rng) {
    ag_encoder_layer l = {.cfg = *cfg};
    if (cfg->d_ff < 1) ag__fatal(layer, "d_ff %d: want >= 1", cfg->d_ff);
    if (!(cfg->keep == 0 || (cfg->keep > 0 && cfg->keep <= 1)))
        ag__fatal(layer, "keep %g: want a probability in (0, 1] (0 reads as 1)", cfg->keep);
    if (l.cfg.keep == 0) l.cfg.keep = 1;
    if (!(cfg->rope_base >= 0) || !isfinite(cfg->rope_base))
        ag__fatal(layer, "rope_base %g: want > 0 (rotary positions) or 0 (none)", cfg->rope_base);
    if (l.cfg.act == AG_ACT_NONE) l.cfg.act = cfg->gated ? AG_ACT_SILU : AG_ACT_RELU;
    if (l.cfg.ln_eps == 0) l.cfg.ln_eps = 1e-5;
    int d = cfg->d_model, w1_out = cfg->gated ? 2 * cfg->d_ff : cfg->d_ff;
    if (cfg->rope_base > 0 && cfg->heads > 0 && d % cfg->heads == 0 && (d / cfg->heads) % 2)
        ag__fatal(layer, "rotary positions turn pairs of a head's features: d_model %d over %d "
                  "heads is an odd head width", d, cfg->heads);
    if (cfg->window < 0) ag__fatal(layer, "window %d: want > 0 (a sliding window) or 0 (none)", cfg->window);
    if (cfg->kv_heads < 0 || (cfg->kv_heads > 0 && cfg->heads > 0 && cfg->heads % cfg->kv_heads))
        ag__fatal(layer, "kv_heads %d for %d heads: want a divisor of the heads (0: as many)",
                  cfg->kv_heads, cfg->heads);
    ag_scope_push("attn");
    l.attn = mha_make(layer, ps, d, cfg->heads, cfg->kv_heads ? cfg->kv_heads : cfg->heads, false, rng);
    l.attn.rope_base = cfg->rope_base;
    l.attn.recompute_attention = cfg->recompute_attention;
    l.attn.window = cfg->window;
    l.attn.alibi = cfg->alibi;
    ag_scope_pop();
    ag_param_layernorm(ps, "ln1", d, &l.ln1_g, cfg->rms_norm ? NULL : &l.ln1_b);
    l.w1 = ag_param_glorot(ps, "ffn.w1", d, w1_out, rng); /* gated: the gate's columns, then the value's */
    l.b1 = ag_param_bias(ps, "ffn.b1", w1_out);
    l.w2 = ag_param_glorot(ps, "ffn.w2", cfg->d_ff, d, rng);
    l.b2 = ag_param_bias(ps, "ffn.b2", d);
    ag_param_layernorm(ps, "ln2", d, &l.ln2_g, cfg->rms_norm ? NULL : &l.ln2_b);
    return l;
}

ag_encoder_layer ag_encoder_layer_new(ag_params *ps, const ag_encoder_config *cfg, ag_rng *rng) {
    return encoder_layer_make("ag_encoder_layer_new", ps, cfg, rng);
}

ag_tensor *ag_encoder_norm(const ag_encoder_config *c, ag_tensor *x, ag_tensor *gain, ag_tensor *bias) {
    if (!c) ag__fatal("ag_encoder_norm", "the config is NULL");
    return c->rms_norm ? ag_rmsnorm(x, gain, c->ln_eps ? c->ln_eps : 1e-5)
                       : ag_layernorm(x, gain, bias, c->ln_eps ? c->ln_eps : 1e-5);
}

/* act(x W1 + b1) W2 + b2, or gated: (act(a) * v) W2 + b2, [a | v] = x W1 + b1. */
static ag_tensor *feed_forward(const ag_encoder_layer *l, ag_tensor *x) {
    const ag_encoder_config *c = &l->cfg;
    if (!c->gated) return ag_linear(ag_dense(x, l->w1, l->b1, c->act), l->w2, l->b2);
    return ag_linear(ag_glu(ag_linear(x, l->w1, l->b1), c->act), l->w2, l->b2);
}

/* x + dropout(f), normalised after (post-LN) or with f computed on LN(x)
 * by the caller (pre-LN). */
static ag_tensor *residual(const ag_encoder_layer *l, ag_tensor *x, ag_tensor *f, ag_tensor *g, ag_tensor *b,
                           bool training, ag_rng *rng) {
    ag_tensor *y = ag_add(x, ag_dropout(f, l->cfg.keep, training, rng));
    return l->cfg.pre_norm ? y : ag_encoder_norm(&l->cfg, y, g, b);
}

/* The self-attention sublayer over x [B, N, d] or p's valid rows of it
 * (cache: ag_mha_forward_cached's; p, lengths, mask and probs unused then). */
static ag_tensor *attention_sublayer(const char *layer, const ag_encoder_layer *l, ag_tensor *x, const packing *p,
                                     const int32_t *lengths, ag_tensor *mask, bool training, ag_rng *rng,
                                     ag_tensor **probs, ag_kv_cache *cache) {
    const ag_encoder_config *c = &l->cfg;
    ag_tensor *a_in = c->pre_norm ? ag_encoder_norm(c, x, l->ln1_g, l->ln1_b) : x;
    ag_tensor *a = cache ? ag_mha_forward_cached(&l->attn, a_in, cache)
                         : self_attention(layer, &l->attn, a_in, p, lengths, mask, probs);
    return residual(l, x, a, l->ln1_g, l->ln1_b, training, rng);
}

static ag_tensor *ffn_sublayer(const ag_encoder_layer *l, ag_tensor *x, bool training, ag_rng *rng) {
    const ag_encoder_config *c = &l->cfg;
    ag_tensor *f_in = c->pre_norm ? ag_encoder_norm(c, x, l->ln2_g, l->ln2_b) : x;
    return residual(l, x, feed_forward(l, f_in), l->ln2_g, l->ln2_b, training, rng);
}

static void need_rng_for(const char *layer, const ag_encoder_config *c, bool training, ag_rng *rng) {
    if (training && c->keep < 1 && !rng) ag__fatal(layer, "training with dropout (keep %g) needs an rng", c->keep);
}

/* x [B, N, d]'s packing by lengths (checked), none without them. */
static packing packing_for(const char *layer, const ag_tensor *x, const int32_t *lengths) {
    if (!lengths) return unpacked;
    check_lengths(layer, lengths, x->shape[0], x->shape[1]);
    return packing_of(lengths, x->shape[0], x->shape[1]);
}

/* cache: generation, ag_mha_forward_cached's attention.  Else, with lengths, every position-wise part runs on the
 * valid rows alone, and the padding comes out 0. */
static ag_tensor *encoder_forward(const char *layer, const ag_encoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                  ag_tensor *mask, bool training, ag_rng *rng, ag_tensor **probs, ag_kv_cache *cache) {
    if (!l) ag__fatal(layer, "the layer is NULL");
    if (cache) ag__need(layer, "x", x); /* its shape: ag_mha_forward_cached's, with the cache's batch */
    else need_model_rows(layer, "x", &l->attn, x);
    need_rng_for(layer, &l->cfg, training, rng);
    packing p = cache ? unpacked : packing_for(layer, x, lengths);
    x = attention_sublayer(layer, l, pack(&p, x), &p, lengths, mask, training, rng, probs, cache);
    return finish(&p, ffn_sublayer(l, x, training, rng));
}

/* cfg.recompute: the layer as a region of ag_recompute (its output kept,
 * the rest made again in backward). */
typedef struct {
    const char *layer;
    const ag_encoder_layer *l;
    const int32_t *lengths;
    ag_tensor *mask;
    bool training;
    ag_rng *rng;
} encoder_region;

static ag_tensor *encoder_region_run(void *p, ag_tensor *const *in) {
    const encoder_region *r = p;
    return encoder_forward(r->layer, r->l, in[0], r->lengths, r->mask, r->training, r->rng, NULL, NULL);
}

/* The layer, as a region of ag_recompute where cfg.recompute asks and no
 * probs are wanted (they would be step memory the region forgets). */
static ag_tensor *encoder_forward_maybe_region(const char *layer, const ag_encoder_layer *l, ag_tensor *x,
                                               const int32_t *lengths, ag_tensor *mask, bool training, ag_rng *rng,
                                               ag_tensor **probs) {
    if (l && x && l->cfg.recompute && !probs) {
        encoder_region r = {layer, l, lengths, mask, training, rng};
        return ag_recompute(encoder_region_run, &r, sizeof r, 1, &x, rng);
    }
    return encoder_forward(layer, l, x, lengths, mask, training, rng, probs, NULL);
}

ag_tensor *ag_encoder_layer_forward(const ag_encoder_layer *l, ag_tensor *x, const int32_t *lengths, ag_tensor *mask,
                                    bool training, ag_rng *rng) {
    return encoder_forward_maybe_region("ag_encoder_layer_forward", l, x, lengths, mask, training, rng, NULL);
}

ag_tensor *ag_encoder_layer_forward_probs(const ag_encoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                          ag_tensor *mask, bool training, ag_rng *rng, ag_tensor **probs) {
    return encoder_forward_maybe_region("ag_encoder_layer_forward_probs", l, x, lengths, mask, training, rng, probs);
}

/* ---- Transformer decoder layer ---- */

ag_decoder_layer ag_decoder_layer_new(ag_params *ps, const ag_encoder_config *cfg, ag_rng *rng) {
    const char *layer = "ag_decoder_layer_new";
    ag__need_array(layer, "the config", cfg);
    ag_decoder_layer l = {0};
    ag_scope_push("self");
    l.self = encoder_layer_make(layer, ps, cfg, rng);
    ag_scope_pop();
    ag_scope_push("cross");
    l.cross = mha_make(layer, ps, cfg->d_model, cfg->heads, l.self.attn.kv_heads, true, rng);
    l.cross.recompute_attention = cfg->recompute_attention;
    ag_scope_pop();
    ag_param_layernorm(ps, "ln_cross", cfg->d_model, &l.ln_cross_g, cfg->rms_norm ? NULL : &l.ln_cross_b);
    return l;
}

/* cache: generation, the self-attention ag_mha_forward_cached's and the
 * memory read from its cache memory_kv; else causal over x, reading the
 * memory tensor, the position-wise parts on the valid rows of the target
 * (lengths) and of the memory (memory_lengths) alone. */
static ag_tensor *decoder_forward(const char *layer, const ag_decoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                  ag_tensor *memory, const ag_kv_cache *memory_kv, const int32_t *memory_lengths,
                                  bool training, ag_rng *rng, ag_tensor **cross_probs, ag_kv_cache *cache) {
    if (!l) ag__fatal(layer, "the layer is NULL");
    const ag_encoder_layer *s = &l->self;
    const ag_encoder_config *c = &s->cfg;
    need_model_rows(layer, "x", &s->attn, x);
    need_rng_for(layer, c, training, rng);
    packing pt = unpacked, pm = unpacked;
    ag_tensor *causal = NULL;
    if (!cache) {
        need_model_rows(layer, "memory", &l->cross, memory);
        if (memory->shape[0] != x->shape[0])
            ag__fatal(layer, "x holds %d sequences, memory %d: want one memory each", x->shape[0], memory->shape[0]);
        pt = packing_for(layer, x, lengths), pm = packing_for(layer, memory, memory_lengths);
        causal = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = c->window}, x->shape[1]);
    }
    x = attention_sublayer(layer, s, pack(&pt, x), &pt, lengths, causal, training, rng, NULL, cache);
    ag_tensor *a_in = c->pre_norm ? ag_encoder_norm(c, x, l->ln_cross_g, l->ln_cross_b) : x;
    ag_tensor *a = cache ? ag_mha_cross_forward_cached(&l->cross, a_in, memory_kv, memory_lengths)
                         : cross_attention(layer, &l->cross, a_in, &pt, memory, &pm, memory_lengths, NULL, cross_probs);
    x = residual(s, x, a, l->ln_cross_g, l->ln_cross_b, training, rng);
    return finish(&pt, ffn_sublayer(s, x, training, rng));
}

typedef struct {
    const char *layer;
    const ag_decoder_layer *l;
    const int32_t *lengths, *memory_lengths;
    bool training;
    ag_rng *rng;
} decoder_region;

static ag_tensor *decoder_region_run(void *p, ag_tensor *const *in) {
    const decoder_region *r = p;
    return decoder_forward(r->layer, r->l, in[0], r->lengths, in[1], NULL, r->memory_lengths, r->training, r->rng,
                           NULL, NULL);
}

/* As encoder_forward_maybe_region: x and the memory are the region's inputs. */
static ag_tensor *decoder_forward_maybe_region(const char *layer, const ag_decoder_layer *l, ag_tensor *x,
                                               const int32_t *lengths, ag_tensor *memory,
                                               const int32_t *memory_lengths, bool training, ag_rng *rng,
                                               ag_tensor **cross_probs) {
    if (l && x && memory && l->self.cfg.recompute && !cross_probs) {
        decoder_region r = {layer, l, lengths, memory_lengths, training, rng};
        return ag_recompute(decoder_region_run, &r, sizeof r, 2, (ag_tensor *const[]){x, memory}, rng);
    }
    return decoder_forward(layer, l, x, lengths, memory, NULL, memory_lengths, training, rng, cross_probs, NULL);
}

ag_tensor *ag_decoder_layer_forward(const ag_decoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                    ag_tensor *memory, const int32_t *memory_lengths, bool training, ag_rng *rng) {
    return decoder_forward_maybe_region("ag_decoder_layer_forward", l, x, lengths, memory, memory_lengths, training,
                                        rng, NULL);
}

ag_tensor *ag_decoder_layer_forward_probs(const ag_decoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                          ag_tensor *memory, const int32_t *memory_lengths, bool training,
                                          ag_rng *rng, ag_tensor **cross_probs) {
    return decoder_forward_maybe_region("ag_decoder_layer_forward_probs", l, x, lengths, memory, memory_lengths,
                                        training, rng, cross_probs);
}

/* ---- generation: a cache of keys and values ---- */

/* A cache made before batches existed (a struct of the caller's) has 0: one sequence. */
static int batch_of(const ag_kv_cache *c) { return c->batch > 0 ? c->batch : 1; }

static int kv_width(const ag_mha *m) { return 2 * kv_heads_of(m) * (m->d_model / m->heads); }

static ag_status kv_cache_make(const char *layer, ag_kv_cache *c, const ag_mha *m, int batch, int capacity,
                               ag_device d) {
    ag__need_array(layer, "the cache", c), ag__need_array(layer, "the layer", m);
    if (capacity < 1) ag__fatal(layer, "capacity %d: want at least one position", capacity);
    if (batch < 1) ag__fatal(layer, "batch %d: want at least one sequence", batch);
    if ((int64_t)batch * capacity > INT64_MAX / kv_width(m))
        ag__fatal(layer, "%d sequences of %d positions: past what a buffer counts", batch, capacity);
    *c = (ag_kv_cache){.capacity = capacity, .batch = batch};
    c->kv = ag_buffer_new(d, (int64_t)batch * capacity * kv_width(m), "kv cache");
    if (c->kv) return AG_OK;
    *c = (ag_kv_cache){0};
    return AG_ERR_NOMEM; /* ag_buffer_new said why */
}

ag_status ag_kv_cache_init(ag_kv_cache *c, const ag_mha *m, int capacity, ag_device d) {
    return kv_cache_make("ag_kv_cache_init", c, m, 1, capacity, d);
}

ag_status ag_kv_cache_init_batch(ag_kv_cache *c, const ag_mha *m, int batch, int capacity, ag_device d) {
    return kv_cache_make("ag_kv_cache_init_batch", c, m, batch, capacity, d);
}

ag_status ag_kv_cache_memory(ag_kv_cache *c, const ag_mha *m, ag_tensor *memory) {
    const char *layer = "ag_kv_cache_memory";
    need_kind(layer, m, true);
    need_model_rows(layer, "memory", m, memory);
    int B = memory->shape[0], Ns = memory->shape[1];
    if (B < 1 || Ns < 1) ag__fatal(layer, "memory [%d,%d,%d]: want a position or more in each of one sequence or more",
                                   B, Ns, m->d_model);
    ag_status st = kv_cache_make(layer, c, m, B, Ns, memory->device);
    if (st != AG_OK) return st;
    bool grad = ag_set_grad_enabled(false); /* values, for steps to come: nothing on the tape */
    ag_buffer_write(c->kv, 0, ag_linear(memory, m->w_qkv, m->b_qkv)); /* [B, Ns, 2 dkv]: the buffer's layout */
    ag_set_grad_enabled(grad);
    c->n = Ns;
    return AG_OK;
}

void ag_kv_cache_free(ag_kv_cache *c) {
    if (!c) return;
    ag_buffer_free(c->kv);
    *c = (ag_kv_cache){0};
}

void ag_kv_cache_select(ag_kv_cache *c, const int32_t *from) {
    const char *layer = "ag_kv_cache_select";
    ag__need_array(layer, "the cache", c), ag__need_array(layer, "from", from);
    if (!c->kv) ag__fatal(layer, "the cache is empty (none made)");
    int S = batch_of(c);
    for (int s = 0; s < S; s++)
        if (from[s] < 0 || from[s] >= S)
            ag__fatal(layer, "from[%d] = %d: want a sequence of the cache's %d", s, (int)from[s], S);
    int64_t row = ag_buffer_size(c->kv) / S;
    if (row > INT_MAX) ag__fatal(layer, "sequences of %lld reals each: past what a view counts", (long long)row);
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *picked = ag_index_select(ag_buffer_view(c->kv, 0, 2, (int[]){S, (int)row}), 0, from, S); /* a copy */
    ag_buffer_write(c->kv, 0, picked);
    ag_set_grad_enabled(grad);
}

/* The cached forward's mask: which keys the chunk's query at + i reads,
 * len positions read in all.  Contiguous (one sequence in order), key c is
 * position first + c; else (a batch, or a windowed cache that wrapped)
 * key c is row c of each sequence's capacity, holding position c (none
 * past len), or, once wrapped, the latest position below len in its class
 * p % capacity.  A query reads p where at + i - window < p <= at + i (no
 * lower bound without a window).  With ALiBi's slopes (m->alibi) a read
 * key adds -m_h |at + i - p|, head by head: [1, h, n, cols]; else [n,
 * cols], or NULL where every key is read by every query. */
static ag_tensor *cache_mask(const ag_mha *m, int at, int n, int len, int first, int cols, bool contiguous,
                             int capacity) {
    int h = m->alibi ? m->heads : 1;
    double *slopes = NULL;
    if (m->alibi) ag_alibi_slopes(h, slopes = ag__arena_alloc((size_t)h * sizeof *slopes));
    ag_tensor *mask = m->alibi ? ag_tensor_new_host(4, (int[]){1, h, n, cols}) : ag_tensor_new_host(2, (int[]){n, cols});
    bool all = true;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < cols; c++) {
            int p = contiguous ? first + c : len <= capacity ? (c < len ? c : -1) : len - 1 - (len - 1 - c) % capacity;
            int q = at + i;
            bool reads = p >= 0 && p <= q && (m->window <= 0 || p > q - m->window);
            all = all && reads;
            for (int k = 0; k < h; k++) /* the value ag_mask_heads gives the full forward, to the bit */
                mask->data[((int64_t)k * n + i) * cols + c] = reads ? (ag_real)(slopes ? -slopes[k] * (q - p) : 0) : -INFINITY;
        }
    return all && !m->alibi ? NULL : ag__on_current(mask);
}

/* rows: the new positions' k | v [S, n, 2 dkv] into each sequence's rows
 * of the cache from position at, wrapping past its end when windowed: one
 * copy per part for all S sequences. */
static void cache_write(ag_kv_cache *c, int at, ag_tensor *rows, int dkv) {
    int n = rows->shape[1], row = at % c->capacity, head = c->capacity - row < n ? c->capacity - row : n;
    int64_t stride = (int64_t)c->capacity * 2 * dkv;
    ag__buffer_write_rows(c->kv, (int64_t)row * 2 * dkv, stride, head == n ? rows : ag_slice(rows, 1, 0, head));
    if (head < n) ag__buffer_write_rows(c->kv, 0, stride, ag_slice(rows, 1, head, n));
}

ag_tensor *ag_mha_forward_cached(const ag_mha *m, ag_tensor *x, ag_kv_cache *c) {
    const char *layer = "ag_mha_forward_cached";
    need_kind(layer, m, false);
    ag__need(layer, "x", x), ag__need_array(layer, "the cache", c);
    int d = m->d_model, h = m->heads, kv = kv_heads_of(m), dh = d / h, dkv = kv * dh, S = batch_of(c);
    if (x->ndim != 3 || x->shape[0] != S || x->shape[2] != d) {
        char want[64];
        snprintf(want, sizeof want, "[%d, n, %d] (the cache holds %d sequence%s)", S, d, S, S == 1 ? "" : "s");
        bad_shape(layer, x, want);
    }
    int n = x->shape[1], at = c->n;
    if (n > INT_MAX - at) ag__fatal(layer, "%d positions after %d: past the %d positions a cache counts", n, at, INT_MAX);
    int len = at + n;
    /* keys from `first`: all of them, or under a sliding window those the chunk's first position reads on */
    int first = m->window > 0 && at - m->window + 1 > 0 ? at - m->window + 1 : 0, keys = len - first;
    if (!c->kv || keys > c->capacity) {
        if (m->window > 0)
            ag__fatal(layer, "%d positions after %d read %d with a window of %d: the cache holds %d%s", n, at, keys,
                      m->window, c->capacity, c->kv ? "" : " (none made)");
        ag__fatal(layer, "%d positions after %d: the cache holds %d%s", n, at, c->capacity, c->kv ? "" : " (none made)");
    }
    ag_tensor *qkv = ag_linear(x, m->w_qkv, m->b_qkv);                                     /* [S, n, d + 2 dkv] */
    ag_tensor *new_kv = ag_slice(qkv, 2, d, d + 2 * dkv);                                  /* the new rows' k | v */
    if (m->rope_base > 0) { /* q and k turned to their positions at..at+n-1; the cache keeps turned keys */
        ag_tensor *qk = ag_rope(ag_slice(qkv, 2, 0, d + dkv), dh, at, m->rope_base);
        new_kv = ag_concat((ag_tensor *[]){ag_slice(qk, 2, d, d + dkv), ag_slice(new_kv, 2, dkv, 2 * dkv)}, 2, 2);
        qkv = qk;
    }
    ag_tensor *q = ag_split_heads_at(qkv, 0, h, dh);                                       /* [S, h, n, dh] */
    cache_write(c, at, new_kv, dkv);
    ag_tensor *kvs, *mask = NULL;
    if (S == 1 && len <= c->capacity) { /* one sequence in order: rows first..len-1, no more */
        kvs = ag_buffer_view(c->kv, (int64_t)first * 2 * dkv, 3, (int[]){1, keys, 2 * dkv}); /* rows of k | v */
        /* position at + i reads keys <= at + i (and > at + i - window): the causal mask's last n rows, from key
         * `first` on (one new position reads them all: no mask) */
        if (m->alibi) {
            mask = cache_mask(m, at, n, len, first, keys, true, c->capacity);
        } else if (n > 1) {
            mask = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = m->window}, len);
            mask = ag_slice(ag_slice(mask, 0, at, len), 1, first, len);
        }
    } else { /* each sequence's whole capacity, the rows no query may read masked (the softmax ignores order) */
        kvs = ag_buffer_view(c->kv, 0, 3, (int[]){S, c->capacity, 2 * dkv});
        mask = cache_mask(m, at, n, len, 0, c->capacity, false, c->capacity);
    }
    ag_tensor *k = ag_split_heads_at(kvs, 0, kv, dh), *v = ag_split_heads_at(kvs, dkv, kv, dh); /* [S, kv, keys, dh] */
    ag_tensor *o = ag_attention(q, k, v, mask, 1 / sqrt((double)dh), NULL);                /* [S, h, n, dh] */
    c->n = len;
    return ag_linear(ag_merge_heads(o), m->w_o, m->b_o);
}

ag_tensor *ag_mha_cross_forward_cached(const ag_mha *m, ag_tensor *x, const ag_kv_cache *memory,
                                       const int32_t *memory_lengths) {
    const char *layer = "ag_mha_cross_forward_cached";
    need_kind(layer, m, true);
    need_model_rows(layer, "x", m, x);
    ag__need_array(layer, "the memory's cache", memory);
    need_no_positions(layer, m);
    int S = batch_of(memory), Ns = memory->n, h = m->heads, kv = kv_heads_of(m), dh = m->d_model / h;
    if (!memory->kv || Ns != memory->capacity || ag_buffer_size(memory->kv) != (int64_t)S * Ns * kv_width(m))
        ag__fatal(layer, "the memory's cache is %s: want ag_kv_cache_memory's for this layer",
                  memory->kv ? "another layer's or a self-attention's" : "empty");
    if (x->shape[0] != S) ag__fatal(layer, "x holds %d sequences, the memory's cache %d", x->shape[0], S);
    ag_tensor *q = ag_split_heads_at(ag_linear(x, m->w_q, m->b_q), 0, h, dh);               /* [S, h, n, dh] */
    ag_tensor *kvs = ag_buffer_view(memory->kv, 0, 3, (int[]){S, Ns, kv_width(m)});       /* [S, Ns, 2 kv dh] */
    ag_tensor *k = ag_split_heads_at(kvs, 0, kv, dh), *v = ag_split_heads_at(kvs, kv * dh, kv, dh);
    return attend(layer, m, q, k, v, memory_lengths, NULL, NULL, &unpacked);
}

ag_tensor *ag_encoder_layer_forward_cached(const ag_encoder_layer *l, ag_tensor *x, ag_kv_cache *c) {
    const char *layer = "ag_encoder_layer_forward_cached";
    ag__need_array(layer, "the cache", c);
    return encoder_forward(layer, l, x, NULL, NULL, false, NULL, NULL, c);
}

ag_tensor *ag_decoder_layer_forward_cached(const ag_decoder_layer *l, ag_tensor *x, const ag_kv_cache *memory,
                                           const int32_t *memory_lengths, ag_kv_cache *c) {
    const char *layer = "ag_decoder_layer_forward_cached";
    ag__need_array(layer, "the cache", c), ag__need_array(layer, "the memory's cache", memory);
    return decoder_forward(layer, l, x, NULL, NULL, memory, memory_lengths, false, NULL, NULL, c);
}
