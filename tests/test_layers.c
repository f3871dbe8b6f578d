/* test_layers.c - the shared layers of models/layers.c in f64: a gradient
 * check of each against central differences (through its inputs and
 * parameters), on batches with padding, a length-1 example and an empty
 * one, the values those edge cases must give, and the errors misuse gets.
 * The attention layers of <attngrad/layers.h> likewise: positions, mean and
 * attention pooling, multi-head attention under every kind of mask, the
 * encoder layer pre- and post-LN with dropout, and their parameter names,
 * and its padding skipped (each example alone gives its rows);
 * the cached forwards of generation (ag_kv_cache) against the full one, on
 * every device the build has. */
#include "check.h"
#include "fatal.h"
#include "grads.h"
#include "attngrad/model.h"
#include "../train/internal.h"
#include "attngrad/layers.h"

#include <limits.h>
#include <string.h>

enum { B = 3, N = 4, D = 3 };

/* Lengths: full, length 1, partial; and with an empty example. */
static const int32_t lengths_padded[B] = {4, 1, 2};
static const int32_t lengths_empty[B] = {3, 0, 2};

typedef struct {
    ag_params ps; /* persistent: the checks end steps (ag_step_end) */
    ag_tensor *x, *w1, *b1, *w2, *b2;
    const int32_t *lengths;
    ag_act act;
} layer_ctx;

static ag_tensor *max_over_time_fn(void *p) {
    layer_ctx *c = p;
    return ag_max_over_time(c->x, c->lengths);
}

static ag_tensor *source2token_fn(void *p) {
    layer_ctx *c = p;
    return ag_source2token(c->x, c->lengths, c->w1, c->b1, c->w2, c->b2, c->act);
}

static ag_tensor *zero_padding_fn(void *p) {
    layer_ctx *c = p;
    return ag_zero_padding(c->x, c->lengths);
}

static ag_tensor *activate_fn(void *p) {
    layer_ctx *c = p;
    return ag_activate(c->x, c->act);
}

static void gradcheck(const char *label, ag_forward_fn f, void *ctx, ag_tensor **wrt, int n) {
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(f, ctx, wrt, n, &o);
    CHECK(r.ok, "%s: input %d element %lld analytic %.12g numeric %.12g", label, r.worst_input,
          (long long)r.worst_index, r.analytic, r.numeric);
    ag_step_end();
}

static void setup(layer_ctx *c, ag_rng *r, const int32_t *lengths, ag_act act) {
    memset(c, 0, sizeof *c);
    c->x = ag_param_uniform(&c->ps, "x", 3, (int[]){B, N, D}, 1, r);
    c->w1 = ag_param_uniform(&c->ps, "w1", 2, (int[]){D, D}, 0.8, r);
    c->b1 = ag_param_uniform(&c->ps, "b1", 1, (int[]){D}, 0.3, r);
    c->w2 = ag_param_uniform(&c->ps, "w2", 2, (int[]){D, D}, 0.8, r);
    c->b2 = ag_param_uniform(&c->ps, "b2", 1, (int[]){D}, 0.3, r);
    c->lengths = lengths;
    c->act = act;
}

static void free_ctx(layer_ctx *c) { ag_params_free(&c->ps); }

/* Max over valid t: the gradient goes to the argmax inside the length
 * only; an empty example pools to 0 and gets no gradient. */
static void test_max_over_time(ag_rng *r) {
    const int32_t *cases[2] = {lengths_padded, lengths_empty};
    for (int k = 0; k < 2; k++) {
        layer_ctx c;
        setup(&c, r, cases[k], AG_ACT_NONE);
        gradcheck(k ? "max_over_time, empty example" : "max_over_time, padding", max_over_time_fn, &c, &c.x, 1);
        ag_tensor *m = ag_max_over_time(c.x, c.lengths);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < D; j++) {
                double want = c.lengths[b] > 0 ? -INFINITY : 0;
                for (int t = 0; t < c.lengths[b]; t++) want = fmax(want, c.x->data[(b * N + t) * D + j]);
                CHECK(m->data[b * D + j] == want, "max[%d,%d] = %g, want %g", b, j, m->data[b * D + j], want);
            }
        ag_step_end();
        free_ctx(&c);
    }
}

/* Source2token pooling through x and all four parameters, with each
 * smooth activation; an empty example pools to 0. */
static void test_source2token(ag_rng *r) {
    const ag_act acts[] = {AG_ACT_ELU, AG_ACT_TANH, AG_ACT_SIGMOID, AG_ACT_GELU, AG_ACT_SILU, AG_ACT_NONE};
    for (int a = 0; a < (int)(sizeof acts / sizeof *acts); a++)
        for (int k = 0; k < 2; k++) {
            layer_ctx c;
            setup(&c, r, k ? lengths_empty : lengths_padded, acts[a]);
            char label[64];
            snprintf(label, sizeof label, "source2token act %d%s", (int)acts[a], k ? ", empty example" : "");
            gradcheck(label, source2token_fn, &c, (ag_tensor *[]){c.x, c.w1, c.b1, c.w2, c.b2}, 5);
            if (k) {
                ag_tensor *s = ag_source2token(c.x, c.lengths, c.w1, c.b1, c.w2, c.b2, c.act);
                for (int j = 0; j < D; j++) CHECK(s->data[1 * D + j] == 0, "empty example pooled to %g", s->data[D + j]);
                ag_step_end();
            }
            free_ctx(&c);
        }
}

/* A length-1 example pools to its one row, whatever the scores. */
static void test_length_one(ag_rng *r) {
    layer_ctx c;
    setup(&c, r, lengths_padded, AG_ACT_TANH);
    ag_tensor *s = ag_source2token(c.x, c.lengths, c.w1, c.b1, c.w2, c.b2, c.act);
    ag_tensor *m = ag_max_over_time(c.x, c.lengths);
    for (int j = 0; j < D; j++) {
        CHECK_NEAR(s->data[1 * D + j], c.x->data[(1 * N) * D + j], 1e-15, 0);
        CHECK(m->data[1 * D + j] == c.x->data[(1 * N) * D + j], "max of one row");
    }
    ag_step_end();
    free_ctx(&c);
}

static void test_padding_and_activations(ag_rng *r) {
    layer_ctx c;
    setup(&c, r, lengths_empty, AG_ACT_NONE);
    gradcheck("zero_padding", zero_padding_fn, &c, &c.x, 1);
    const ag_act acts[] = {AG_ACT_ELU, AG_ACT_TANH, AG_ACT_SIGMOID, AG_ACT_RELU, AG_ACT_GELU, AG_ACT_SILU, AG_ACT_NONE};
    for (int a = 0; a < (int)(sizeof acts / sizeof *acts); a++) {
        c.act = acts[a];
        char label[32];
        snprintf(label, sizeof label, "activate %d", (int)acts[a]);
        gradcheck(label, activate_fn, &c, &c.x, 1); /* x in (-1, 1): ReLU's kink at 0 is not hit */
    }
    free_ctx(&c);
}

/* ag_zero_padding on [B, N] and [B, N, h, d]: the mask broadcasts over
 * every trailing dim. */
static ag_tensor *zero_padding_4d_fn(void *p) { return ag_zero_padding((ag_tensor *)p, lengths_empty); }

static void test_zero_padding_ranks(ag_rng *r) {
    ag_params ps = {0};
    ag_tensor *x2 = ag_param_uniform(&ps, "x2", 2, (int[]){B, N}, 1, r);
    ag_tensor *x4 = ag_param_uniform(&ps, "x4", 4, (int[]){B, N, 2, 3}, 1, r);
    ag_tensor *y2 = ag_zero_padding(x2, lengths_padded), *y4 = ag_zero_padding(x4, lengths_empty);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            CHECK(y2->data[b * N + t] == (t < lengths_padded[b] ? x2->data[b * N + t] : 0), "2-D [%d,%d]", b, t);
            for (int k = 0; k < 6; k++) {
                int64_t i = (int64_t)(b * N + t) * 6 + k;
                CHECK(y4->data[i] == (t < lengths_empty[b] ? x4->data[i] : 0), "4-D [%d,%d,%d]", b, t, k);
            }
        }
    ag_step_end();
    gradcheck("zero_padding 4-D", zero_padding_4d_fn, x4, &x4, 1);
    ag_params_free(&ps);
}

/* Misuse stops with a message naming the layer, the shape or the length. */
static void test_misuse(ag_rng *r) {
    ag_params ps = {0};
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){B, N, D}, 1, r);
    ag_tensor *flat = ag_param_uniform(&ps, "flat", 2, (int[]){B, N}, 1, r);
    ag_tensor *one = ag_param_uniform(&ps, "one", 1, (int[]){B}, 1, r);
    const int32_t negative[B] = {4, -1, 2}, too_long[B] = {4, 5, 2};
    EXPECT_FATAL(ag_max_over_time(x, negative), "ag_max_over_time", "lengths[1] = -1", "[0, 4]");
    EXPECT_FATAL(ag_max_over_time(x, too_long), "ag_max_over_time", "lengths[1] = 5");
    EXPECT_FATAL(ag_max_over_time(flat, lengths_padded), "ag_max_over_time", "[3,4]", "[B, N, d]");
    EXPECT_FATAL(ag_zero_padding(x, too_long), "ag_zero_padding", "lengths[1] = 5");
    EXPECT_FATAL(ag_zero_padding(one, lengths_padded), "ag_zero_padding", "[3]");
    EXPECT_FATAL(ag_valid_mask(negative, B, N), "ag_valid_mask", "lengths[1] = -1");
    /* and the caller's line, as an op's message does */
    char at[64];
    snprintf(at, sizeof at, "test_layers.c:%d", __LINE__ + 1);
    EXPECT_FATAL(ag_max_over_time(x, too_long), "ag_max_over_time", at);
    snprintf(at, sizeof at, "test_layers.c:%d", __LINE__ + 1);
    EXPECT_FATAL(ag_zero_padding(x, too_long), "ag_zero_padding", at);
    ag_tensor *w = ag_param_uniform(&ps, "w", 2, (int[]){D, D}, 1, r), *b = ag_param_uniform(&ps, "b", 1, (int[]){D}, 1, r);
    snprintf(at, sizeof at, "test_layers.c:%d", __LINE__ + 1);
    EXPECT_FATAL(ag_source2token(x, too_long, w, b, w, b, AG_ACT_ELU), "lengths[1] = 5", at);
    ag_step_end();
    ag_params_free(&ps);
}

/* ---- <attngrad/layers.h> ---- */

enum { H = 2, DM = 4 }; /* heads, d_model: B (3) differs from H, so no mask is ambiguous */

typedef struct {
    ag_params ps;
    ag_tensor *x, *table, *w, *b;
    const int32_t *lengths;
    ag_mha mha;
    ag_encoder_layer enc;
    ag_tensor *mask;    /* step memory: remade by the forward from mask_kind */
    int mask_kind;
    bool training;
} attn_ctx;

static ag_tensor *make_mask(int kind) {
    const ag_mask_spec specs[H] = {{.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_WORD}, {.faraway = 2}};
    switch (kind) {
    case 1: return ag_mask(&(ag_mask_spec){.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_LOG}, N); /* positional */
    case 2: return ag_reshape(ag_mask_heads(specs, H, N), 4, (int[]){1, H, N, N});        /* per head */
    case 3: {                                                                               /* per example and head */
        ag_tensor *m = NULL;
        ag_mask_batch(specs, H, B, N, lengths_padded, NULL, &m);
        return m;
    }
    }
    return NULL;
}

static ag_tensor *sinusoid_fn(void *p) { return ag_add_sinusoidal_positions(((attn_ctx *)p)->x); }
static ag_tensor *learned_fn(void *p) {
    attn_ctx *c = p;
    return ag_add_learned_positions(c->x, c->table);
}
static ag_tensor *mean_fn(void *p) {
    attn_ctx *c = p;
    return ag_mean_over_time(c->x, c->lengths);
}
static ag_tensor *attn_pool_fn(void *p) {
    attn_ctx *c = p;
    return ag_attention_pool(c->x, c->lengths, c->w, c->b);
}
static ag_tensor *mha_fn(void *p) {
    attn_ctx *c = p;
    return ag_mha_forward(&c->mha, c->x, c->lengths, make_mask(c->mask_kind), NULL);
}
static ag_tensor *encoder_fn(void *p) {
    attn_ctx *c = p;
    static ag_rng drop; /* lives past the backward: a recomputed layer draws from it again there */
    ag_rng_seed(&drop, 99); /* the same dropout mask at every call of the check */
    return ag_encoder_layer_forward(&c->enc, c->x, c->lengths, make_mask(c->mask_kind), c->training, &drop);
}

static void test_positions(ag_rng *r) {
    attn_ctx c = {0};
    c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, 6}, 1, r);
    c.table = ag_param_positions(&c.ps, "pos", N + 3, 6, 0.5, r);
    ag_tensor *pe = ag_sinusoidal_positions(N, 6);
    for (int t = 0; t < N; t++)
        for (int i = 0; i < 6; i++) {
            double angle = t / pow(10000, (double)(i - i % 2) / 6);
            CHECK_NEAR(pe->data[t * 6 + i], i % 2 ? cos(angle) : sin(angle), 1e-15, 0);
        }
    ag_tensor *odd = ag_sinusoidal_positions(2, 3); /* an odd d ends with a sine */
    CHECK_NEAR(odd->data[3 + 2], sin(1 / pow(10000, 2.0 / 3)), 1e-15, 0);
    ag_step_end();
    gradcheck("sinusoidal positions", sinusoid_fn, &c, &c.x, 1);
    gradcheck("learned positions", learned_fn, &c, (ag_tensor *[]){c.x, c.table}, 2);
    ag_params_zero_grad(&c.ps);
    ag_tensor *y = ag_add_learned_positions(c.x, c.table);
    ag_backward_seeded(y, ag_tensor_fill(1, 3, (int[]){B, N, 6})->data);
    CHECK(c.table->grad[(N - 1) * 6] == B && c.table->grad[N * 6] == 0, "rows past N get no gradient");
    ag_step_end();
    ag_tensor *short_table = ag_param(&c.ps, "short", 2, (int[]){N - 1, 6});
    EXPECT_FATAL_AT(ag_add_learned_positions(c.x, short_table), "ag_add_learned_positions", "[3,6]", "max_len >= 4");
    ag_params_free(&c.ps);
}

static void test_pooling(ag_rng *r) {
    const int32_t *cases[2] = {lengths_padded, lengths_empty};
    for (int k = 0; k < 2; k++) {
        attn_ctx c = {0};
        c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, D}, 1, r);
        c.w = ag_param_uniform(&c.ps, "w", 2, (int[]){D, 1}, 1, r);
        c.b = ag_param_uniform(&c.ps, "b", 1, (int[]){1}, 1, r);
        c.lengths = cases[k];
        gradcheck(k ? "mean_over_time, empty" : "mean_over_time", mean_fn, &c, &c.x, 1);
        gradcheck(k ? "attention_pool, empty" : "attention_pool", attn_pool_fn, &c, (ag_tensor *[]){c.x, c.w, c.b}, 3);
        ag_tensor *m = ag_mean_over_time(c.x, c.lengths), *a = ag_attention_pool(c.x, c.lengths, c.w, NULL);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < D; j++) {
                double want = 0;
                for (int t = 0; t < c.lengths[b]; t++) want += c.x->data[(b * N + t) * D + j] / c.lengths[b];
                CHECK_NEAR(m->data[b * D + j], want, 1e-15, 1e-14);
                if (c.lengths[b] == 0) CHECK(a->data[b * D + j] == 0, "empty example pooled to %g", a->data[b * D + j]);
                if (c.lengths[b] == 1) CHECK_NEAR(a->data[b * D + j], c.x->data[b * N * D + j], 1e-15, 0);
            }
        ag_tensor *all = ag_mean_over_time(c.x, NULL); /* NULL lengths: every position */
        CHECK_NEAR(all->data[0], (c.x->data[0] + c.x->data[D] + c.x->data[2 * D] + c.x->data[3 * D]) / 4, 1e-15, 1e-14);
        ag_step_end();
        ag_params_free(&c.ps);
    }
}

/* Multi-head attention through x and its four parameters under each kind of
 * mask, with and without lengths; padded keys change nothing at valid
 * positions. */
static void test_mha(ag_rng *r) {
    attn_ctx c = {0};
    c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, DM}, 1, r);
    ag_scope_push("mha");
    c.mha = ag_mha_new(&c.ps, DM, H, r);
    ag_scope_pop();
    CHECK(ag_params_find(&c.ps, "mha.qkv.weight") == c.mha.w_qkv && c.mha.w_qkv->shape[1] == 3 * DM);
    CHECK(ag_params_find(&c.ps, "mha.out.bias") == c.mha.b_o);
    for (int i = 0; i < c.mha.b_qkv->size; i++) c.mha.b_qkv->data[i] = (ag_real)(0.1 * sin(i)); /* nonzero biases */
    for (int i = 0; i < c.mha.b_o->size; i++) c.mha.b_o->data[i] = (ag_real)(0.1 * cos(i));
    ag_tensor *wrt[] = {c.x, c.mha.w_qkv, c.mha.b_qkv, c.mha.w_o, c.mha.b_o};
    const char *kinds[] = {"none", "positional [N,N]", "per-head [1,h,N,N]", "batch [B,h,N,N]"};
    for (int kind = 0; kind < 4; kind++)
        for (int with_len = 0; with_len < 2; with_len++) {
            c.mask_kind = kind;
            c.lengths = with_len ? lengths_padded : NULL;
            char label[96];
            snprintf(label, sizeof label, "mha, mask %s%s", kinds[kind], with_len ? ", lengths" : "");
            gradcheck(label, mha_fn, &c, wrt, 5);
        }
    /* padded keys are ignored: changing x at padded positions moves no valid output */
    c.lengths = lengths_padded;
    c.mask_kind = 1;
    ag_tensor *y0 = mha_fn(&c);
    ag_real saved = c.x->data[(1 * N + 2) * DM]; /* example 1 has length 1: position 2 is padding */
    c.x->data[(1 * N + 2) * DM] += 3;
    ag_tensor *y1 = mha_fn(&c);
    c.x->data[(1 * N + 2) * DM] = saved;
    CHECK_NEAR(y1->data[(1 * N + 0) * DM + 1], y0->data[(1 * N + 0) * DM + 1], 1e-15, 0);
    /* the attention weights come out for heatmaps; padded keys get none */
    ag_tensor *probs = NULL;
    (void)ag_mha_forward(&c.mha, c.x, lengths_padded, NULL, &probs);
    CHECK(probs && probs->ndim == 4 && probs->shape[1] == H && probs->data[((1 * H + 1) * N + 0) * N + 1] == 0);
    ag_step_end();
    /* a 3-D mask is refused when its dim could be the batch or the heads */
    ag_tensor *x2 = ag_param_uniform(&c.ps, "x2", 3, (int[]){H, N, DM}, 1, r);
    EXPECT_FATAL_AT(ag_mha_forward(&c.mha, x2, NULL, ag_mask_padding(lengths_padded, H, N, 3, false), NULL),
                    "ag_mha_forward", "ambiguous", "[2,1,1,4]");
    EXPECT_FATAL_AT(ag_mha_forward(&c.mha, c.mha.w_o, NULL, NULL, NULL), "ag_mha_forward", "[B, N, 4]");
    EXPECT_FATAL(ag_mha_new(&c.ps, 5, 2, r), "ag_mha_new", "dividing");
    ag_step_end();
    ag_params_free(&c.ps);
}

/* Grouped-query attention, multi-query here (one key-value head for the
 * H = 2 query heads): a gradient check under every mask, with rotary
 * positions too; and the same outputs as multi-head attention whose
 * key-value heads are the grouped layer's, repeated for each query head of
 * their group. */
static void test_mha_grouped(ag_rng *r) {
    attn_ctx c = {0};
    c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, DM}, 1, r);
    c.mha = ag_mha_new_grouped(&c.ps, DM, H, 1, r);
    int dh = DM / H;
    CHECK(c.mha.kv_heads == 1 && c.mha.w_qkv->shape[1] == DM + 2 * dh && c.mha.b_qkv->size == DM + 2 * dh,
          "qkv.weight [d, d + 2 kv dh]");
    for (int i = 0; i < c.mha.b_qkv->size; i++) c.mha.b_qkv->data[i] = (ag_real)(0.1 * sin(i));
    ag_tensor *wrt[] = {c.x, c.mha.w_qkv, c.mha.b_qkv, c.mha.w_o, c.mha.b_o};
    for (int rope = 0; rope < 2; rope++)
        for (int kind = 0; kind < 4; kind++) {
            c.mha.rope_base = rope ? 50 : 0;
            c.mask_kind = kind;
            c.lengths = lengths_padded;
            char label[96];
            snprintf(label, sizeof label, "grouped-query mha, mask %d%s", kind, rope ? ", rope" : "");
            gradcheck(label, mha_fn, &c, wrt, 5);
        }
    /* multi-head attention with the key-value head repeated: the same rows */
    ag_params ps = {0};
    ag_mha full = ag_mha_new(&ps, DM, H, r);
    for (int row = 0; row < DM; row++)
        for (int col = 0; col < 3 * DM; col++) { /* Q's columns as they are; K's and V's head 0 for every head */
            int part = col / DM, within = col % DM, from = part == 0 ? col : DM + (part - 1) * dh + within % dh;
            full.w_qkv->data[row * 3 * DM + col] = c.mha.w_qkv->data[row * (DM + 2 * dh) + from];
            if (row == 0) full.b_qkv->data[col] = c.mha.b_qkv->data[from];
        }
    memcpy(full.w_o->data, c.mha.w_o->data, (size_t)DM * DM * sizeof(ag_real));
    memcpy(full.b_o->data, c.mha.b_o->data, (size_t)DM * sizeof(ag_real));
    for (int rope = 0; rope < 2; rope++) {
        c.mha.rope_base = full.rope_base = rope ? 50 : 0;
        ag_tensor *mask = make_mask(1);
        ag_tensor *a = ag_mha_forward(&c.mha, c.x, lengths_padded, mask, NULL);
        ag_tensor *b = ag_mha_forward(&full, c.x, lengths_padded, mask, NULL);
        double d = 0;
        for (int64_t i = 0; i < a->size; i++) d = check_worst(d, fabs(a->data[i] - b->data[i]));
        CHECK(d <= 1e-14, "grouped-query attention%s against multi-head with the key-value head repeated: %.3g",
              rope ? " with rope" : "", d);
        ag_step_end();
    }
    EXPECT_FATAL(ag_mha_new_grouped(&ps, DM, H, 3, r), "ag_mha_new_grouped", "3 key-value heads for 2 heads");
    EXPECT_FATAL(ag_encoder_layer_new(&ps, &(ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 4, .kv_heads = 3}, r),
                 "ag_encoder_layer_new", "kv_heads 3 for 2 heads");
    ag_params_free(&ps);
    ag_params_free(&c.ps);
}

/* The encoder layer, pre- and post-LN, in evaluation and with dropout in
 * training (a fixed mask), through every parameter and x; and the later
 * block (RMS norm, a gated FFN, rotary positions), pre- and post-norm. */
static void test_encoder_layer(ag_rng *r) {
    for (int variant = 0; variant < 4; variant++)
        for (int training = 0; training < 2; training++) {
            bool pre = variant % 2, later = variant >= 2;
            attn_ctx c = {0};
            c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, DM}, 1, r);
            ag_encoder_config cfg = {.d_model = DM, .heads = H, .d_ff = 6, .pre_norm = pre, .keep = 0.8,
                                     .act = later ? AG_ACT_NONE : AG_ACT_ELU, .rms_norm = later, .gated = later,
                                     .rope_base = later ? 100 : 0};
            ag_scope_push("enc");
            ag_scope_push("layer0");
            c.enc = ag_encoder_layer_new(&c.ps, &cfg, r);
            ag_scope_pop();
            ag_scope_pop();
            CHECK(!strcmp(ag_scope(), ""));
            CHECK(ag_params_find(&c.ps, "enc.layer0.attn.qkv.weight") && ag_params_find(&c.ps, "enc.layer0.ln2.gain") &&
                  ag_params_find(&c.ps, "enc.layer0.ffn.w1"), "encoder parameter names");
            CHECK(c.enc.ln1_g->data[0] == 1 && (later ? !c.enc.ln1_b && !ag_params_find(&c.ps, "enc.layer0.ln1.bias")
                                                      : c.enc.ln1_b->data[0] == 0));
            if (later)
                CHECK(c.enc.cfg.act == AG_ACT_SILU && c.enc.w1->shape[1] == 12 && c.enc.attn.rope_base == 100,
                      "the later block: SwiGLU's fused [d, 2 d_ff] and rotary positions on its attention");
            for (int p = 1; p < c.ps.count; p++) /* move the gains and biases off 1 and 0 */
                if (c.ps.items[p]->ndim == 1)
                    for (int64_t i = 0; i < c.ps.items[p]->size; i++) c.ps.items[p]->data[i] += (ag_real)(0.1 * sin(i + p));
            c.lengths = lengths_padded;
            c.mask_kind = 1;
            c.training = training;
            char label[64];
            snprintf(label, sizeof label, "encoder layer %s-%s%s", pre ? "pre" : "post",
                     later ? "RMS, SwiGLU, RoPE" : "LN", training ? ", dropout" : "");
            gradcheck(label, encoder_fn, &c, c.ps.items, c.ps.count);
            ag_params_free(&c.ps);
        }
    ag_params ps = {0};
    EXPECT_FATAL(ag_encoder_layer_new(&ps, &(ag_encoder_config){.d_model = 4, .heads = 2, .d_ff = 0}, r),
                 "ag_encoder_layer_new", "d_ff");
    EXPECT_FATAL(ag_encoder_layer_new(&ps, &(ag_encoder_config){.d_model = 6, .heads = 2, .d_ff = 4, .rope_base = 1e4}, r),
                 "ag_encoder_layer_new", "odd head width", "d_model 6 over 2 heads");
    EXPECT_FATAL(ag_encoder_layer_new(&ps, &(ag_encoder_config){.d_model = 4, .heads = 2, .d_ff = 4, .rope_base = -1}, r),
                 "ag_encoder_layer_new", "rope_base -1");
    ag_params_free(&ps);
}

/* cfg.recompute: each block a region of ag_recompute, both blocks, with
 * dropout in training: the loss and every gradient as without it, bit for
 * bit, and a gradient check through it. */
static void test_encoder_recompute(ag_rng *r) {
    for (int later = 0; later < 2; later++) {
        attn_ctx c = {0};
        c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, DM}, 1, r);
        ag_encoder_config cfg = {.d_model = DM, .heads = H, .d_ff = 6, .pre_norm = true, .keep = 0.8,
                                 .rms_norm = later, .gated = later, .rope_base = later ? 100 : 0};
        c.enc = ag_encoder_layer_new(&c.ps, &cfg, r);
        c.lengths = lengths_padded;
        c.mask_kind = 1;
        c.training = true;
        ag_real *g[2];
        double loss[2];
        for (int k = 0; k < 2; k++) {
            c.enc.cfg.recompute = k;
            g[k] = grads_of_sum_squares(&c.ps, encoder_fn, &c, &loss[k]);
        }
        CHECK(loss[0] == loss[1] && !memcmp(g[0], g[1], (size_t)grads_total(&c.ps) * sizeof(ag_real)),
              "%s block recomputed: loss %.17g against %.17g, or gradients not the same bits", later ? "later" : "2017",
              loss[1], loss[0]);
        free(g[0]);
        free(g[1]);
        c.enc.cfg.recompute = true;
        gradcheck(later ? "encoder layer pre-RMS, SwiGLU, RoPE, recomputed" : "encoder layer pre-LN, recomputed",
                  encoder_fn, &c, c.ps.items, c.ps.count);
        ag_params_free(&c.ps);
    }
}

/* ---- bidirectional LSTM, last positions, soft alignment, encoder weights ---- */

/* A gradient check that also requires every input's largest gradient to be
 * resolvable (>= 1e-6): an input whose gradients all vanish passes a
 * gradient check without being checked. */
static void gradcheck_resolved(const char *label, ag_forward_fn f, void *ctx, ag_tensor **wrt, int n) {
    double big[16] = {0};
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    o.input_max_grad = big;
    ag_gradcheck_result r = ag_gradcheck(f, ctx, wrt, n, &o);
    CHECK(r.ok, "%s: input %d element %lld analytic %.12g numeric %.12g", label, r.worst_input,
          (long long)r.worst_index, r.analytic, r.numeric);
    for (int i = 0; i < n; i++) CHECK(big[i] >= 1e-6, "%s: input %d's gradients all under 1e-6 (%g)", label, i, big[i]);
    ag_step_end();
}

/* A tensor's values flattened, for one output of several. */
static ag_tensor *flat(ag_tensor *t) { return ag_reshape(t, 1, (int[]){(int)t->size}); }

typedef struct {
    ag_params ps;
    ag_tensor *x, *a, *b, *e;
    ag_bilstm_layer bl;
    ag_bigru_layer bg;
    const int32_t *lengths, *len_a, *len_b;
    bool scores;
} seq_ctx;

static ag_tensor *bilstm_fn(void *p) {
    seq_ctx *c = p;
    return ag_bilstm(c->x, &c->bl, c->lengths);
}
static ag_tensor *last_fn(void *p) {
    seq_ctx *c = p;
    return ag_last_positions(c->x, c->lengths);
}
static ag_tensor *align_fn(void *p) {
    seq_ctx *c = p;
    ag_tensor *at, *bt, *probs;
    if (c->scores) ag_soft_align_scores(c->e, c->a, c->b, c->len_a, c->len_b, &at, &bt, &probs);
    else ag_soft_align(c->a, c->b, c->len_a, c->len_b, &at, &bt, &probs);
    return ag_concat((ag_tensor *[]){flat(at), flat(bt), flat(probs)}, 3, 0);
}

static ag_tensor *bigru_fn(void *p) {
    seq_ctx *c = p;
    return ag_bigru(c->x, &c->bg, c->lengths);
}

/* The BiGRU likewise: [forward ; right to left] of ag_gru, its parameters
 * <prefix>.fw.* then <prefix>.bw.* at 3H columns, gradchecked with padding
 * and an empty example; an LSTM's layer given to it is refused by name. */
static void test_bigru(ag_rng *r) {
    seq_ctx c = {0};
    c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, D}, 1, r);
    c.bg = ag_param_bigru(&c.ps, "enc", D, 2, 0.8, r);
    c.lengths = lengths_empty;
    CHECK(c.ps.count == 9 && !strcmp(c.ps.items[1]->name, "enc.fw.w_ih") && !strcmp(c.ps.items[8]->name, "enc.bw.b_hh"),
          "bigru parameter names and order");
    CHECK(c.bg.fw.w_hh->shape[0] == 2 && c.bg.fw.w_hh->shape[1] == 6 && c.bg.bw.b_ih->shape[0] == 6, "3H columns");
    ag_tensor *y = ag_bigru(c.x, &c.bg, c.lengths);
    ag_tensor *f = ag_gru(c.x, &c.bg.fw, 1, &(ag_gru_opts){.len = c.lengths});
    ag_tensor *rv = ag_gru(c.x, &c.bg.bw, 1, &(ag_gru_opts){.len = c.lengths, .reverse = true});
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++)
            for (int j = 0; j < 4; j++) {
                ag_real want = j < 2 ? f->data[(b * N + t) * 2 + j] : rv->data[(b * N + t) * 2 + j - 2];
                CHECK(y->data[(b * N + t) * 4 + j] == want && (t < c.lengths[b] || want == 0), "bigru [%d,%d,%d]", b, t, j);
            }
    ag_step_end();
    gradcheck_resolved("bigru, an empty example", bigru_fn, &c, c.ps.items, c.ps.count);
    ag_bilstm_layer lstm = ag_param_bilstm(&c.ps, "lstm", D, 2, 0.8, r);
    ag_bigru_layer lstm_shaped = {lstm.fw, lstm.bw};
    EXPECT_FATAL_AT(ag_bigru(c.x, &lstm_shaped, NULL), "ag_gru", "w_hh", "[2,8]", "[H,3H]");
    EXPECT_FATAL(ag_bigru(c.x, NULL, NULL), "ag_bigru", "NULL");
    ag_step_end();
    ag_params_free(&c.ps);
}

/* The BiLSTM is [forward ; right to left] of ag_lstm, 0 at padding, through
 * x and all eight parameters, with padding, a length-1 and an empty example;
 * its parameters are named <prefix>.fw.* then <prefix>.bw.*. */
static void test_bilstm(ag_rng *r) {
    const int32_t *cases[3] = {lengths_padded, lengths_empty, NULL};
    for (int k = 0; k < 3; k++) {
        seq_ctx c = {0};
        c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, D}, 1, r);
        c.bl = ag_param_bilstm(&c.ps, "enc", D, 2, 0.8, r);
        c.lengths = cases[k];
        CHECK(c.ps.count == 9 && !strcmp(c.ps.items[1]->name, "enc.fw.w_ih") &&
              !strcmp(c.ps.items[5]->name, "enc.bw.w_ih") && !strcmp(c.ps.items[8]->name, "enc.bw.b_hh"),
              "bilstm parameter names and order");
        CHECK(c.bl.bw.w_hh == ag_params_find(&c.ps, "enc.bw.w_hh") && c.bl.fw.w_hh->shape[1] == 8);
        ag_tensor *y = ag_bilstm(c.x, &c.bl, c.lengths);
        ag_tensor *f = ag_lstm(c.x, &c.bl.fw, 1, &(ag_lstm_opts){.len = c.lengths});
        ag_tensor *rv = ag_lstm(c.x, &c.bl.bw, 1, &(ag_lstm_opts){.len = c.lengths, .reverse = true});
        CHECK(y->ndim == 3 && y->shape[2] == 4);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < N; t++)
                for (int j = 0; j < 4; j++) {
                    ag_real want = j < 2 ? f->data[(b * N + t) * 2 + j] : rv->data[(b * N + t) * 2 + j - 2];
                    int len = c.lengths ? c.lengths[b] : N;
                    CHECK(y->data[(b * N + t) * 4 + j] == want && (t < len || want == 0), "bilstm [%d,%d,%d]", b, t, j);
                }
        ag_step_end();
        const char *labels[3] = {"bilstm, padding", "bilstm, empty example", "bilstm, no lengths"};
        gradcheck_resolved(labels[k], bilstm_fn, &c, c.ps.items, c.ps.count);
        if (k == 0) {
            ag_tensor *narrow = ag_param_uniform(&c.ps, "narrow", 3, (int[]){B, N, D + 1}, 1, r);
            EXPECT_FATAL_AT(ag_bilstm(narrow, &c.bl, NULL), "ag_bilstm", "[3,4,4]", "[B, N, 3]");
            EXPECT_FATAL_AT(ag_bilstm(c.x, &c.bl, (const int32_t[]){4, 5, 1}), "ag_bilstm", "lengths[1] = 5");
            EXPECT_FATAL(ag_bilstm(c.x, NULL, NULL), "ag_bilstm", "NULL");
            ag_step_end();
        }
        ag_params_free(&c.ps);
    }
}

/* Each example's last valid row, its gradient to that row alone; an empty
 * example gives 0; NULL lengths take row N-1. */
static void test_last_positions(ag_rng *r) {
    const int32_t *cases[3] = {lengths_padded, lengths_empty, NULL};
    for (int k = 0; k < 3; k++) {
        seq_ctx c = {0};
        c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, D}, 1, r);
        c.lengths = cases[k];
        ag_tensor *y = last_fn(&c);
        CHECK(y->ndim == 2 && y->shape[0] == B && y->shape[1] == D);
        for (int b = 0; b < B; b++) {
            int len = c.lengths ? c.lengths[b] : N;
            for (int j = 0; j < D; j++)
                CHECK(y->data[b * D + j] == (len ? c.x->data[(b * N + len - 1) * D + j] : 0), "last [%d,%d]", b, j);
        }
        ag_step_end();
        const char *labels[3] = {"last_positions, padding", "last_positions, empty", "last_positions, no lengths"};
        gradcheck_resolved(labels[k], last_fn, &c, &c.x, 1);
        if (k == 1) { /* the empty example's position 0 gets no gradient */
            ag_params_zero_grad(&c.ps);
            ag_backward_seeded(last_fn(&c), ag_tensor_fill(1, 2, (int[]){B, D})->data);
            CHECK(c.x->grad[(1 * N) * D] == 0 && c.x->grad[(0 * N + 2) * D] == 1 && c.x->grad[(2 * N + 1) * D] == 1);
            ag_step_end();
        }
        ag_params_free(&c.ps);
    }
    ag_params ps = {0};
    ag_tensor *flat2 = ag_param_uniform(&ps, "flat", 2, (int[]){B, N}, 1, r);
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){B, N, D}, 1, r);
    EXPECT_FATAL_AT(ag_last_positions(flat2, NULL), "ag_last_positions", "[3,4]", "[B, N, d]");
    EXPECT_FATAL_AT(ag_last_positions(x, (const int32_t[]){1, -1, 2}), "ag_last_positions", "lengths[1] = -1");
    ag_step_end();
    ag_params_free(&ps);
}

/* Soft alignment of a [B,Na,d] and b [B,Nb,d], b narrower (Nb 3) and wider
 * (Nb 5) than a (Na 4), against the ops written out; through a and b (and
 * the scores in ag_soft_align_scores, a and b of different widths); a
 * length-1 sentence on either side and an empty one. */
static void test_soft_align(ag_rng *r) {
    static const int32_t la[2][B] = {{4, 1, 2}, {3, 2, 0}}, lb3[2][B] = {{1, 3, 2}, {0, 1, 3}},
                         lb5[2][B] = {{5, 2, 1}, {2, 0, 5}};
    for (int wide = 0; wide < 2; wide++)
        for (int k = 0; k < 2; k++)
            for (int scores = 0; scores < 2; scores++) {
                int Nb = wide ? 5 : 3, db = scores ? D + 2 : D;
                seq_ctx c = {0};
                c.a = ag_param_uniform(&c.ps, "a", 3, (int[]){B, N, D}, 1, r);
                c.b = ag_param_uniform(&c.ps, "b", 3, (int[]){B, Nb, db}, 1, r);
                c.e = ag_param_uniform(&c.ps, "e", 3, (int[]){B, N, Nb}, 2, r);
                c.len_a = la[k], c.len_b = wide ? lb5[k] : lb3[k], c.scores = scores;
                ag_tensor *at, *bt, *probs;
                if (scores) ag_soft_align_scores(c.e, c.a, c.b, c.len_a, c.len_b, &at, &bt, &probs);
                else ag_soft_align(c.a, c.b, c.len_a, c.len_b, &at, &bt, &probs);
                ag_tensor *e = scores ? c.e : ag_matmul_t(c.a, false, c.b, true);
                ag_tensor *want_at = ag_matmul(ag_softmax_axis_len(e, 2, c.len_b), c.b);
                ag_tensor *want_bt = ag_matmul_t(ag_softmax_axis_len(e, 1, c.len_a), true, c.a, false);
                CHECK(at->ndim == 3 && at->shape[1] == N && at->shape[2] == db && bt->shape[1] == Nb &&
                      bt->shape[2] == D && probs->shape[1] == N && probs->shape[2] == Nb, "soft_align shapes");
                for (int64_t i = 0; i < at->size; i++) CHECK(at->data[i] == want_at->data[i], "a~ [%lld]", (long long)i);
                for (int64_t i = 0; i < bt->size; i++) CHECK(bt->data[i] == want_bt->data[i], "b~ [%lld]", (long long)i);
                for (int b = 0; b < B; b++)
                    for (int i = 0; i < N; i++) { /* a row of probs: a distribution over b's valid words, or 0 */
                        double sum = 0;
                        for (int j = 0; j < Nb; j++) {
                            double p = probs->data[(b * N + i) * Nb + j];
                            sum += p;
                            if (j >= c.len_b[b]) CHECK(p == 0, "probs past b's length");
                        }
                        CHECK_NEAR(sum, c.len_b[b] ? 1 : 0, 1e-14, 0);
                        if (c.len_b[b] == 0)
                            for (int j = 0; j < db; j++) CHECK(at->data[(b * N + i) * db + j] == 0, "a~ against empty b");
                        if (c.len_b[b] == 1)
                            for (int j = 0; j < db; j++)
                                CHECK_NEAR(at->data[(b * N + i) * db + j], c.b->data[b * Nb * db + j], 1e-15, 0);
                    }
                ag_step_end();
                char label[80];
                snprintf(label, sizeof label, "soft_align%s, b %s, lengths %d", scores ? "_scores" : "",
                         wide ? "wider" : "narrower", k);
                if (scores) gradcheck_resolved(label, align_fn, &c, (ag_tensor *[]){c.e, c.a, c.b}, 3);
                else gradcheck_resolved(label, align_fn, &c, (ag_tensor *[]){c.a, c.b}, 2);
                ag_params_free(&c.ps);
            }
    /* outputs may be NULL; NULL lengths are every position */
    ag_params ps = {0};
    ag_tensor *a = ag_param_uniform(&ps, "a", 3, (int[]){B, N, D}, 1, r);
    ag_tensor *b = ag_param_uniform(&ps, "b", 3, (int[]){B, 2, D}, 1, r);
    ag_tensor *at = NULL, *bt = NULL, *pr = NULL, *at2 = NULL;
    ag_soft_align(a, b, NULL, NULL, &at, NULL, NULL);
    ag_soft_align(a, b, NULL, (const int32_t[]){2, 2, 2}, &at2, &bt, &pr);
    CHECK(at && at2 && bt && pr && !memcmp(at->data, at2->data, (size_t)at->size * sizeof(ag_real)));
    ag_step_end();
    /* misuse names the layer and the shapes */
    ag_tensor *b4 = ag_param_uniform(&ps, "b4", 3, (int[]){B, 2, D + 1}, 1, r);
    ag_tensor *b2 = ag_param_uniform(&ps, "b2", 3, (int[]){2, 2, D}, 1, r);
    ag_tensor *e = ag_param_uniform(&ps, "e", 3, (int[]){B, 2, N}, 1, r);
    EXPECT_FATAL_AT(ag_soft_align(a, b4, NULL, NULL, &at, &bt, NULL), "ag_soft_align", "[3,4,3]", "[3,2,4]", "width");
    EXPECT_FATAL_AT(ag_soft_align(a, b2, NULL, NULL, &at, &bt, NULL), "ag_soft_align", "b [2,2,3]", "batch of 3");
    EXPECT_FATAL_AT(ag_soft_align(a, b, NULL, (const int32_t[]){2, 3, 1}, &at, NULL, NULL), "ag_soft_align",
                    "lengths[1] = 3", "[0, 2]");
    EXPECT_FATAL_AT(ag_soft_align_scores(e, a, b, NULL, NULL, &at, &bt, NULL), "ag_soft_align_scores", "[3,2,4]",
                    "[3, 4, 2]");
    /* a NULL name prefix is named, not a crash in strlen */
    ag_tensor *g = NULL, *bb = NULL;
    EXPECT_FATAL(ag_param_lstm(&ps, NULL, 2, 3, 0.1, r), "ag_param_lstm", "prefix is NULL");
    EXPECT_FATAL(ag_param_bilstm(&ps, NULL, 2, 3, 0.1, r), "ag_param_bilstm", "prefix is NULL");
    EXPECT_FATAL(ag_param_layernorm(&ps, NULL, 3, &g, &bb), "ag_param_layernorm", "prefix is NULL");
    ag_step_end();
    ag_params_free(&ps);
}

/* Padding skipped: the encoder layer on a padded batch with lengths gives,
 * at each example's valid positions, what it gives on that example alone
 * cut to its length (no padding at all), and 0 at the padding; both
 * blocks, pre and post, under a positional mask; an empty example is all
 * 0.  Also where too little is padding to be packed. */
static void test_encoder_padding(ag_rng *r) {
    for (int variant = 0; variant < 4; variant++) {
        bool pre = variant % 2, later = variant >= 2;
        ag_params ps = {0};
        ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){B, N, DM}, 1, r);
        ag_encoder_layer l = ag_encoder_layer_new(&ps, &(ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 6,
                                                                            .pre_norm = pre, .rms_norm = later,
                                                                            .gated = later, .rope_base = later ? 10 : 0,
                                                                            .kv_heads = later ? 1 : 0}, r);
        for (int p = 1; p < ps.count; p++)
            if (ps.items[p]->ndim == 1)
                for (int64_t i = 0; i < ps.items[p]->size; i++) ps.items[p]->data[i] += (ag_real)(0.1 * sin(i + p));
        const ag_mask_spec spec = {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_LOG};
        for (int k = 0; k < 3; k++) { /* packed; packed with an empty example; one padded row, not packed */
            const int32_t *lengths = k == 0 ? lengths_padded : k == 1 ? lengths_empty : (const int32_t[]){4, 4, 3};
            ag_real y[B * N * DM];
            ag_tensor_read(ag_encoder_layer_forward(&l, x, lengths, ag_mask(&spec, N), false, NULL), y);
            ag_step_end();
            double worst = 0;
            for (int b = 0; b < B; b++) {
                int n = lengths[b];
                ag_tensor *alone = n ? ag_encoder_layer_forward(&l, ag_slice(ag_slice(x, 0, b, b + 1), 1, 0, n), NULL,
                                                                ag_mask(&spec, n), false, NULL)
                                     : NULL;
                for (int t = 0; t < N; t++)
                    for (int j = 0; j < DM; j++) {
                        double got = y[(b * N + t) * DM + j];
                        if (t >= n) CHECK(got == 0, "variant %d: padded position %d of example %d is %g", variant, t, b, got);
                        else worst = check_worst(worst, fabs(got - alone->data[t * DM + j]));
                    }
                ag_step_end();
            }
            CHECK(worst <= 1e-14, "variant %d: the padded batch's valid rows differ from each example's alone by %.3g",
                  variant, worst);
        }
        ag_params_free(&ps);
    }
}

/* ag_encoder_layer_forward_probs: the same output as ag_encoder_layer_forward,
 * and the attention weights [B,h,N,N], rows distributions over the valid
 * keys. */
static void test_encoder_probs(ag_rng *r) {
    ag_params ps = {0};
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){B, N, DM}, 1, r);
    ag_encoder_config cfg = {.d_model = DM, .heads = H, .d_ff = 6, .pre_norm = true};
    ag_encoder_layer l = ag_encoder_layer_new(&ps, &cfg, r);
    CHECK(ag_params_find(&ps, "ln1.gain") == l.ln1_g && ag_params_find(&ps, "ln2.bias") == l.ln2_b);
    ag_tensor *probs = NULL;
    ag_tensor *y0 = ag_encoder_layer_forward(&l, x, lengths_padded, NULL, false, NULL);
    ag_tensor *y1 = ag_encoder_layer_forward_probs(&l, x, lengths_padded, NULL, false, NULL, &probs);
    CHECK(!memcmp(y0->data, y1->data, (size_t)y0->size * sizeof(ag_real)), "the same output with probs");
    CHECK(probs && probs->ndim == 4 && probs->shape[0] == B && probs->shape[1] == H && probs->shape[2] == N &&
          probs->shape[3] == N);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int q = 0; q < N; q++) {
                double sum = 0;
                for (int k = 0; k < N; k++) {
                    double p = probs->data[((b * H + h) * N + q) * N + k];
                    sum += p;
                    if (k >= lengths_padded[b]) CHECK(p == 0, "padded key weighted");
                }
                CHECK_NEAR(sum, 1, 1e-14, 0);
            }
    (void)ag_encoder_layer_forward_probs(&l, x, NULL, NULL, false, NULL, NULL); /* probs may be NULL */
    ag_step_end();
    cfg.keep = 0.5;
    ag_scope_push("dropped");
    ag_encoder_layer ld = ag_encoder_layer_new(&ps, &cfg, r);
    ag_scope_pop();
    EXPECT_FATAL_AT(ag_encoder_layer_forward_probs(&ld, x, NULL, NULL, true, NULL, &probs),
                    "ag_encoder_layer_forward_probs", "needs an rng");
    ag_step_end();
    ag_params_free(&ps);
    /* ag_param_layernorm: <prefix>.gain 1, <prefix>.bias 0, in that order */
    ag_tensor *g, *bias;
    ag_param_layernorm(&ps, "ln_f", 5, &g, &bias);
    CHECK(ps.count == 2 && ps.items[0] == g && !strcmp(g->name, "ln_f.gain") && !strcmp(bias->name, "ln_f.bias") &&
          g->shape[0] == 5 && g->data[4] == 1 && bias->data[4] == 0);
    ag_params_free(&ps);
}

/* ag_encoder_layer_forward_cached (so ag_mha_forward_cached), pre- and
 * post-LN, on device d: 7 positions fed 3, 1, 2 and 1 at a time (or one
 * at a time) give the rows of the full forward under the causal mask
 * (with a sliding window: under its mask, each chunk reading the window
 * before it), on the GPU without waiting for it once; more positions than
 * the cache holds, or more than one sequence, are refused by name.  A
 * windowed cache of capacity < 7 (0: 7) reuses its rows in turn: it must
 * hold a chunk's window, and then runs past its capacity. */
static void kv_cache_case(ag_rng *r, ag_device d, bool pre, bool later, int window, int capacity, bool singly,
                          bool alibi) {
    enum { LEN = 7 };
    const int *chunks = singly ? (const int[]){1, 1, 1, 1, 1, 1, 1} : (const int[]){3, 1, 2, 1};
    int n_chunks = singly ? 7 : 4, cap = capacity ? capacity : LEN;
    ag_params ps = {0};
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){1, LEN, DM}, 1, r);
    /* later: the cache holds keys turned to their positions, and each chunk's queries and keys are turned from
     * where the cache ends; one key-value head (multi-query): the cache holds it alone */
    ag_encoder_layer l = ag_encoder_layer_new(&ps, &(ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 6,
                                                                        .pre_norm = pre, .rms_norm = later,
                                                                        .gated = later, .rope_base = later ? 10 : 0,
                                                                        .kv_heads = later ? 1 : 0,
                                                                        .window = window, .alibi = alibi}, r);
    ag_params_to(&ps, d);
    ag_set_device(d);
    ag_real full[LEN * DM], got[DM * 3];
    ag_tensor *causal = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = window}, LEN);
    ag_tensor_read(ag_encoder_layer_forward(&l, x, NULL, causal, false, NULL), full);
    ag_step_end();
    ag_kv_cache c;
    CHECK(ag_kv_cache_init(&c, &l.attn, cap, d) == AG_OK && c.n == 0 && c.capacity == cap, "%s", ag_errmsg());
    CHECK(ag_buffer_size(c.kv) == (int64_t)cap * 2 * (later ? DM / H : DM), "a cache of %lld reals for %d key-value heads",
          (long long)ag_buffer_size(c.kv), later ? 1 : H);
    double worst = 0;
    int64_t waits = 0;
    for (int i = 0, at = 0; i < n_chunks; at += chunks[i++]) {
        int64_t w0 = ag_memstats().device_waits;
        ag_tensor *y = ag_encoder_layer_forward_cached(&l, ag_slice(x, 1, at, at + chunks[i]), &c);
        waits += ag_memstats().device_waits - w0;
        CHECK(y->ndim == 3 && y->shape[1] == chunks[i] && c.n == at + chunks[i], "chunk %d", i);
        ag_tensor_read(y, got);
        for (int e = 0; e < chunks[i] * DM; e++) worst = check_worst(worst, fabs(got[e] - full[at * DM + e]));
        ag_step_end();
    }
    CHECK(worst <= 1e-13, "%s-%s, window %d, capacity %d%s, on the %s: cached rows differ from the full forward's by %.3g",
          pre ? "pre" : "post", later ? "RMS, SwiGLU, RoPE" : "LN", window, cap, singly ? " one at a time" : "",
          ag_device_name(d), worst);
    CHECK(waits == 0, "on the %s: the cached forwards waited for the device %lld times", ag_device_name(d),
          (long long)waits);
    if (window) { /* a chunk whose window does not fit: refused, the cache as it was */
        int n = cap - window + 2;
        char want[96];
        snprintf(want, sizeof want, "%d positions after 7 read %d with a window of %d: the cache holds %d", n,
                 n + window - 1, window, cap);
        EXPECT_FATAL_AT(ag_encoder_layer_forward_cached(&l, ag_slice(ag_tensor_new(3, (int[]){1, LEN, DM}), 1, 0, n), &c),
                        "ag_mha_forward_cached", want);
        CHECK(c.n == LEN, "a refused chunk left %d positions read", c.n);
        c.n = INT_MAX - 1; /* a count that would wrap: refused, not undefined */
        EXPECT_FATAL_AT(ag_encoder_layer_forward_cached(&l, ag_slice(x, 1, 0, 2), &c), "ag_mha_forward_cached",
                        "2 positions after 2147483646: past the 2147483647 positions a cache counts");
        c.n = LEN;
    } else
        EXPECT_FATAL_AT(ag_encoder_layer_forward_cached(&l, ag_slice(x, 1, 0, 1), &c), "ag_mha_forward_cached",
                        "1 positions after 7: the cache holds 7");
    EXPECT_FATAL_AT(ag_mha_forward_cached(&l.attn, ag_tensor_new(3, (int[]){2, 1, DM}), &c), "ag_mha_forward_cached",
                    "the cache holds 1 sequence", "[2,1,4]");
    ag_step_end();
    ag_kv_cache_free(&c);
    CHECK(c.kv == NULL && c.n == 0, "a freed cache is empty");
    if (d == AG_CUDA) { /* 2^31 - 1 positions, 137 GB (the emulator's device has 8 GiB): refused, not the end */
        ag_kv_cache big;
        ag_status st = ag_kv_cache_init(&big, &l.attn, INT_MAX, d);
        CHECK(st == AG_OK || (st == AG_ERR_NOMEM && big.kv == NULL && big.capacity == 0 && big.n == 0),
              "a cache of %d positions on the %s: %d, %s", INT_MAX, ag_device_name(d), (int)st, ag_errmsg());
        if (st == AG_OK) ag_kv_cache_free(&big); /* a device with room */
        CHECK(ag_kv_cache_init(&big, &l.attn, LEN, d) == AG_OK, "a cache of %d after: %s", LEN, ag_errmsg());
        ag_kv_cache_free(&big);
    }
    ag_set_device(AG_CPU);
    ag_params_to(&ps, AG_CPU);
    ag_params_free(&ps);
}

static void test_kv_cache(ag_rng *r, ag_device d) {
    kv_cache_case(r, d, false, false, 0, 0, false, false);
    kv_cache_case(r, d, true, false, 0, 0, false, false);
    kv_cache_case(r, d, true, true, 0, 0, false, false);
    kv_cache_case(r, d, true, false, 2, 0, false, false); /* a window shorter than a chunk: masked within it */
    kv_cache_case(r, d, true, true, 3, 0, false, false);
    /* rows reused in turn: a chunk's window fits (3 + 2 - 1), wraps in a chunk's middle; one at a time in exactly
     * the window (no mask), and with a row to spare */
    kv_cache_case(r, d, true, false, 2, 4, false, false);
    kv_cache_case(r, d, true, true, 3, 5, false, false);
    kv_cache_case(r, d, false, true, 3, 3, true, false);
    kv_cache_case(r, d, true, true, 2, 3, true, false);
    /* ALiBi: in order, in chunks and one at a time; and in rows reused in turn */
    kv_cache_case(r, d, true, false, 0, 0, false, true);
    kv_cache_case(r, d, false, false, 0, 0, true, true);
    kv_cache_case(r, d, true, false, 2, 4, false, true);
}

/* ALiBi: the paper's slopes; a layer with alibi gives, bit for bit, what the
 * same layer without it gives under its penalties as a mask of the
 * caller's (ag_mask_heads, DIST_WORD, the slopes as weights) added to the
 * causal mask; and a gradient check through it. */
static void test_alibi(ag_rng *r) {
    double s8[8], s6[6];
    ag_alibi_slopes(8, s8), ag_alibi_slopes(6, s6);
    for (int i = 0; i < 8; i++) CHECK(s8[i] == pow(2, -(i + 1)), "8 heads: slope %d is %g", i, s8[i]);
    const double want6[6] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}; /* get_slopes(6) of the paper's code */
    for (int i = 0; i < 6; i++) CHECK(s6[i] == want6[i], "6 heads: slope %d is %g, want %g", i, s6[i], want6[i]);
    EXPECT_FATAL(ag_alibi_slopes(0, s6), "ag_alibi_slopes", "0 heads");

    attn_ctx c = {0};
    c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, N, DM}, 1, r);
    ag_encoder_config cfg = {.d_model = DM, .heads = H, .d_ff = 6, .pre_norm = true, .alibi = true};
    c.enc = ag_encoder_layer_new(&c.ps, &cfg, r);
    CHECK(c.enc.attn.alibi, "the config's alibi reaches the attention");
    ag_tensor *causal = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, N);
    ag_real with[B * N * DM];
    ag_tensor_read(ag_encoder_layer_forward(&c.enc, c.x, lengths_padded, causal, false, NULL), with);
    double slopes[H];
    ag_alibi_slopes(H, slopes);
    ag_mask_spec specs[H];
    for (int i = 0; i < H; i++) specs[i] = (ag_mask_spec){.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_WORD, .weight = slopes[i]};
    c.enc.attn.alibi = false;
    ag_tensor *by_hand = ag_encoder_layer_forward(&c.enc, c.x, lengths_padded,
                                                  ag_reshape(ag_mask_heads(specs, H, N), 4, (int[]){1, H, N, N}), false, NULL);
    CHECK(!memcmp(with, by_hand->data, sizeof with), "alibi against its penalties as the caller's mask");
    ag_step_end();
    c.enc.attn.alibi = true;
    c.lengths = lengths_padded;
    c.mask_kind = 1;
    gradcheck("encoder layer pre-LN, ALiBi", encoder_fn, &c, c.ps.items, c.ps.count);
    ag_params_free(&c.ps);
}

int main(void) {
    ag_rng r;
    ag_rng_seed(&r, 5);
    test_positions(&r);
    test_pooling(&r);
    test_mha(&r);
    test_mha_grouped(&r);
    test_encoder_layer(&r);
    test_encoder_recompute(&r);
    test_max_over_time(&r);
    test_source2token(&r);
    test_length_one(&r);
    test_padding_and_activations(&r);
    test_zero_padding_ranks(&r);
    test_misuse(&r);
    test_bilstm(&r);
    test_bigru(&r);
    test_last_positions(&r);
    test_soft_align(&r);
    test_encoder_padding(&r);
    test_alibi(&r);
    test_encoder_probs(&r);
    test_kv_cache(&r, AG_CPU);
    char why[256];
    if (ag_cuda_available(why, sizeof why)) test_kv_cache(&r, AG_CUDA);
    else printf("the cached forwards on the GPU not run: %s\n", why);
    ag_shutdown();
    return check_summary("test_layers");
}
