/* test_decoder.c - the Transformer's decoder side of <attngrad/layers.h> in
 * f64: cross-attention (ag_mha_new_cross, ag_mha_cross_forward) and the
 * decoder layer (ag_decoder_layer_*).
 *   - cross-attention against attention written out on the host (grouped
 *     key-value heads too), a gradient check through x, the memory and
 *     every parameter under each kind of mask with a padded and an empty
 *     memory, its weights, and padded memory changing nothing;
 *   - the decoder layer pre- and post-norm, the 2017 block and the later
 *     one (RMS, SwiGLU, RoPE, one key-value head), with dropout: gradient
 *     checks, parameter names, causality, recomputation bit for bit;
 *   - its cached forward for generation (one sequence, or several decoded
 *     together, the memory projected once; reordered for beam search)
 *     against the full one, and its
 *     forward and backward on every device the build has against the CPU;
 *   - the errors misuse gets. */
#include "check.h"
#include "fatal.h"
#include "grads.h"
#include "attngrad/layers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, NT = 4, NS = 5, DM = 4, H = 2 };

static const int32_t mem_padded[B] = {5, 1, 3};
static const int32_t mem_empty[B] = {5, 0, 2};
static const int32_t tgt_padded[B] = {2, 4, 1}; /* the target's: its padding skipped, output 0 there */

typedef struct {
    ag_params ps; /* persistent: the checks end steps (ag_step_end) */
    ag_tensor *x, *memory;
    const int32_t *tgt_len, *mem_len;
    ag_mha cross;
    ag_decoder_layer dec;
    int mask_kind;
    bool training;
} dec_ctx;

static void gradcheck(const char *label, ag_forward_fn f, void *ctx, ag_tensor **wrt, int n) {
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(f, ctx, wrt, n, &o);
    CHECK(r.ok, "%s: input %d element %lld analytic %.12g numeric %.12g", label, r.worst_input,
          (long long)r.worst_index, r.analytic, r.numeric);
    ag_step_end();
}

/* Masks against the scores [B, H, NT, NS]: 0 none; 1 a distance penalty per
 * head [1, H, NT, NS]; 2 per example and head, one row all -inf (example 0,
 * head 1, query 2: that row's output is the bias alone). */
static ag_tensor *cross_mask(int kind) {
    if (kind == 0) return NULL;
    int lead = kind == 1 ? 1 : B;
    ag_tensor *m = ag_tensor_new(4, (int[]){lead, H, NT, NS});
    for (int b = 0; b < lead; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < NT; i++)
                for (int j = 0; j < NS; j++) {
                    double v = -0.3 * (h + 1) * abs(i - j) + (kind == 2 ? 0.2 * sin(b + j) : 0);
                    if (kind == 2 && ((b == 0 && h == 1 && i == 2) || (b == 2 && j == 0))) v = -INFINITY;
                    m->data[((b * H + h) * NT + i) * NS + j] = (ag_real)v;
                }
    return m;
}

static ag_tensor *cross_fn(void *p) {
    dec_ctx *c = p;
    return ag_mha_cross_forward(&c->cross, c->x, c->memory, c->mem_len, cross_mask(c->mask_kind), NULL);
}

static ag_tensor *decoder_fn(void *p) {
    dec_ctx *c = p;
    static ag_rng drop; /* lives past the backward: a recomputed layer draws from it again there */
    ag_rng_seed(&drop, 99); /* the same dropout mask at every call of the check */
    return ag_decoder_layer_forward(&c->dec, c->x, c->tgt_len, c->memory, c->mem_len, c->training, &drop);
}

static void nonzero_biases(ag_params *ps) {
    for (int p = 0; p < ps->count; p++) /* gains and biases off 1 and 0 */
        if (ps->items[p]->ndim == 1)
            for (int64_t i = 0; i < ps->items[p]->size; i++) ps->items[p]->data[i] += (ag_real)(0.1 * sin(i + p));
}

/* out [B, NT, DM] of cross-attention written out: q = x Wq + bq, [k|v] =
 * memory Wkv + bkv, query head h reading key-value head h / (H / kv). */
static void cross_reference(const ag_mha *m, const ag_tensor *x, const ag_tensor *mem, const int32_t *len,
                            const ag_tensor *mask, double *out) {
    int kv = m->kv_heads, dh = DM / H, ckv = 2 * kv * dh;
    double q[NT][DM], k[NS][2 * DM], o[NT][DM];
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < NT; i++)
            for (int c = 0; c < DM; c++) {
                q[i][c] = m->b_q->data[c];
                for (int e = 0; e < DM; e++) q[i][c] += x->data[(b * NT + i) * DM + e] * m->w_q->data[e * DM + c];
            }
        for (int j = 0; j < NS; j++)
            for (int c = 0; c < ckv; c++) {
                k[j][c] = m->b_qkv->data[c];
                for (int e = 0; e < DM; e++) k[j][c] += mem->data[(b * NS + j) * DM + e] * m->w_qkv->data[e * ckv + c];
            }
        for (int h = 0; h < H; h++) {
            int g = h / (H / kv);
            for (int i = 0; i < NT; i++) {
                double s[NS], top = -INFINITY, sum = 0;
                for (int j = 0; j < NS; j++) {
                    s[j] = -INFINITY;
                    if (len && j >= len[b]) continue;
                    double dot = 0;
                    for (int c = 0; c < dh; c++) dot += q[i][h * dh + c] * k[j][g * dh + c];
                    s[j] = dot / sqrt(dh);
                    if (mask) s[j] += mask->data[(((mask->shape[0] == 1 ? 0 : b) * H + h) * NT + i) * NS + j];
                    top = s[j] > top ? s[j] : top;
                }
                for (int j = 0; j < NS; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - top);
                for (int c = 0; c < dh; c++) {
                    o[i][h * dh + c] = 0;
                    for (int j = 0; j < NS && sum > 0; j++)
                        if (s[j] != -INFINITY) o[i][h * dh + c] += exp(s[j] - top) / sum * k[j][kv * dh + g * dh + c];
                }
            }
        }
        for (int i = 0; i < NT; i++)
            for (int c = 0; c < DM; c++) {
                double y = m->b_o->data[c];
                for (int e = 0; e < DM; e++) y += o[i][e] * m->w_o->data[e * DM + c];
                out[(b * NT + i) * DM + c] = y;
            }
    }
}

/* ---- cross-attention ---- */

static void cross_case(ag_rng *r, int kv) {
    dec_ctx c = {0};
    int dh = DM / H;
    c.x = ag_param_uniform(&c.ps, "x", 3, (int[]){B, NT, DM}, 1, r);
    c.memory = ag_param_uniform(&c.ps, "memory", 3, (int[]){B, NS, DM}, 1, r);
    ag_scope_push("cross");
    c.cross = ag_mha_new_cross(&c.ps, DM, H, kv, r);
    ag_scope_pop();
    CHECK(ag_params_find(&c.ps, "cross.q.weight") == c.cross.w_q && c.cross.w_q->shape[0] == DM &&
              c.cross.w_q->shape[1] == DM && ag_params_find(&c.ps, "cross.kv.weight") == c.cross.w_qkv &&
              c.cross.w_qkv->shape[1] == 2 * kv * dh && ag_params_find(&c.ps, "cross.kv.bias") == c.cross.b_qkv &&
              ag_params_find(&c.ps, "cross.out.bias") == c.cross.b_o,
          "cross-attention's parameters: q.weight [d, d], kv.weight [d, 2 kv dh], kv.bias, out.*");
    double bound = sqrt(6.0 / (2 * DM + 2 * kv * dh)), top = 0;
    for (int64_t i = 0; i < c.cross.w_q->size; i++) top = fmax(top, fabs(c.cross.w_q->data[i]));
    CHECK(top <= bound, "q.weight drawn within the fused matrix's Glorot bound %g: %g", bound, top);
    nonzero_biases(&c.ps);

    /* the values: attention written out, under every mask and padding */
    const int32_t *lens[3] = {NULL, mem_padded, mem_empty};
    double want[B * NT * DM];
    for (int kind = 0; kind < 3; kind++)
        for (int l = 0; l < 3; l++) {
            c.mask_kind = kind, c.mem_len = lens[l];
            ag_tensor *mask = cross_mask(kind), *y = ag_mha_cross_forward(&c.cross, c.x, c.memory, c.mem_len, mask, NULL);
            cross_reference(&c.cross, c.x, c.memory, c.mem_len, mask, want);
            double worst = 0;
            for (int i = 0; i < B * NT * DM; i++) worst = check_worst(worst, fabs(y->data[i] - want[i]));
            CHECK(worst <= 1e-14, "cross-attention, %d key-value heads, mask %d, lengths %d: %.3g from the written-out one",
                  kv, kind, l, worst);
            ag_step_end();
            char label[96];
            snprintf(label, sizeof label, "cross-attention, %d key-value heads, mask %d, lengths %d", kv, kind, l);
            gradcheck(label, cross_fn, &c, c.ps.items, c.ps.count);
        }

    /* the weights: over each memory's valid words, 0 past them */
    ag_tensor *probs = NULL;
    ag_tensor *y0 = ag_mha_cross_forward(&c.cross, c.x, c.memory, mem_empty, NULL, &probs);
    CHECK(probs && probs->ndim == 4 && probs->shape[0] == B && probs->shape[1] == H && probs->shape[2] == NT &&
              probs->shape[3] == NS, "probs [B, h, Nq, Nk]");
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < NT; i++) {
                double sum = 0;
                for (int j = 0; j < NS; j++) {
                    double p = probs->data[((b * H + h) * NT + i) * NS + j];
                    if (j >= mem_empty[b]) CHECK(p == 0, "example %d: weight %g on padded word %d", b, p, j);
                    sum += p;
                }
                CHECK_NEAR(sum, mem_empty[b] ? 1 : 0, 1e-14, 0);
            }
    for (int i = 0; i < NT * DM; i++) /* the empty memory: the output bias alone */
        CHECK(y0->data[NT * DM + i] == c.cross.b_o->data[i % DM], "empty memory, element %d: %g", i, y0->data[NT * DM + i]);
    ag_real kept[B * NT * DM];
    ag_tensor_read(ag_mha_cross_forward(&c.cross, c.x, c.memory, mem_padded, NULL, NULL), kept);
    ag_step_end();
    ag_real saved = c.memory->data[(1 * NS + 3) * DM]; /* example 1 has length 1: word 3 is padding */
    c.memory->data[(1 * NS + 3) * DM] += 5;
    ag_tensor *y1 = ag_mha_cross_forward(&c.cross, c.x, c.memory, mem_padded, NULL, NULL);
    for (int i = 0; i < B * NT * DM; i++) CHECK(y1->data[i] == kept[i], "a padded memory word moved output %d", i);
    c.memory->data[(1 * NS + 3) * DM] = saved;
    ag_step_end();
    ag_params_free(&c.ps);
}

static void test_cross_errors(ag_rng *r) {
    ag_params ps = {0};
    ag_scope_push("self");
    ag_mha self = ag_mha_new(&ps, DM, H, r);
    ag_scope_pop();
    ag_mha cross = ag_mha_new_cross(&ps, DM, H, H, r);
    ag_tensor *x = ag_tensor_new(3, (int[]){B, NT, DM}), *mem = ag_tensor_new(3, (int[]){B, NS, DM});
    EXPECT_FATAL_AT(ag_mha_cross_forward(&self, x, mem, NULL, NULL, NULL), "ag_mha_cross_forward",
                    "a self-attention layer (ag_mha_new)", "ag_mha_new_cross");
    EXPECT_FATAL_AT(ag_mha_forward(&cross, x, NULL, NULL, NULL), "ag_mha_forward", "a cross-attention layer");
    ag_kv_cache cache = {0};
    EXPECT_FATAL_AT(ag_mha_forward_cached(&cross, ag_tensor_new(3, (int[]){1, 1, DM}), &cache), "ag_mha_forward_cached",
                    "a cross-attention layer");
    EXPECT_FATAL_AT(ag_mha_cross_forward(&cross, x, ag_tensor_new(3, (int[]){2, NS, DM}), NULL, NULL, NULL),
                    "ag_mha_cross_forward", "x holds 3 sequences, memory 2");
    EXPECT_FATAL_AT(ag_mha_cross_forward(&cross, x, ag_tensor_new(3, (int[]){B, NS, 5}), NULL, NULL, NULL),
                    "ag_mha_cross_forward", "memory [3,5,5]: want [B, N, 4]");
    EXPECT_FATAL_AT(ag_mha_cross_forward(&cross, x, NULL, NULL, NULL, NULL), "ag_mha_cross_forward", "memory");
    EXPECT_FATAL_AT(ag_mha_cross_forward(&cross, x, mem, (const int32_t[]){6, 1, 1}, NULL, NULL),
                    "ag_mha_cross_forward", "lengths[0] = 6 is outside [0, 5]");
    EXPECT_FATAL_AT(ag_mha_cross_forward(&cross, x, mem, NULL, ag_tensor_new(2, (int[]){NT, NT}), NULL),
                    "ag_mha_cross_forward", "[4,4]");
    cross.rope_base = 10;
    EXPECT_FATAL_AT(ag_mha_cross_forward(&cross, x, mem, NULL, NULL, NULL), "ag_mha_cross_forward",
                    "rotary positions, windows and ALiBi are for self-attention");
    EXPECT_FATAL(ag_mha_new_cross(&ps, 5, 2, 2, r), "ag_mha_new_cross", "dividing");
    EXPECT_FATAL(ag_mha_new_cross(&ps, DM, H, 3, r), "ag_mha_new_cross", "3 key-value heads for 2 heads");
    ag_step_end();
    ag_params_free(&ps);
}

/* ---- the decoder layer ---- */

static ag_encoder_config config(bool pre, bool later) {
    return (ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 6, .pre_norm = pre, .keep = 0.8,
                               .act = later ? AG_ACT_NONE : AG_ACT_ELU, .rms_norm = later, .gated = later,
                               .rope_base = later ? 100 : 0, .kv_heads = later ? 1 : 0};
}

static void make_decoder(dec_ctx *c, ag_rng *r, const ag_encoder_config *cfg) {
    *c = (dec_ctx){0};
    c->x = ag_param_uniform(&c->ps, "x", 3, (int[]){B, NT, DM}, 1, r);
    c->memory = ag_param_uniform(&c->ps, "memory", 3, (int[]){B, NS, DM}, 1, r);
    ag_scope_push("dec");
    c->dec = ag_decoder_layer_new(&c->ps, cfg, r);
    ag_scope_pop();
    nonzero_biases(&c->ps);
    c->mem_len = mem_padded;
}

static void test_decoder_layer(ag_rng *r) {
    for (int variant = 0; variant < 4; variant++)
        for (int training = 0; training < 2; training++) {
            bool pre = variant % 2, later = variant >= 2;
            ag_encoder_config cfg = config(pre, later);
            dec_ctx c;
            make_decoder(&c, r, &cfg);
            CHECK(ag_params_find(&c.ps, "dec.self.attn.qkv.weight") && ag_params_find(&c.ps, "dec.self.ln1.gain") &&
                      ag_params_find(&c.ps, "dec.cross.q.weight") && ag_params_find(&c.ps, "dec.cross.kv.weight") &&
                      ag_params_find(&c.ps, "dec.ln_cross.gain") && ag_params_find(&c.ps, "dec.self.ffn.w1") &&
                      ag_params_find(&c.ps, "dec.self.ln2.gain"),
                  "decoder parameter names");
            CHECK(later == !ag_params_find(&c.ps, "dec.ln_cross.bias"), "RMS norm: no ln_cross.bias");
            CHECK(c.dec.cross.kv_heads == (later ? 1 : H) && c.dec.cross.rope_base == 0 &&
                      c.dec.self.attn.rope_base == cfg.rope_base,
                  "the cross-attention takes kv_heads, not the rotary positions");
            c.training = training;
            char label[96];
            for (int packed = 0; packed < 2; packed++) { /* the whole target, and its padding skipped */
                c.tgt_len = packed ? tgt_padded : NULL;
                snprintf(label, sizeof label, "decoder layer %s-%s%s%s", pre ? "pre" : "post",
                         later ? "RMS, SwiGLU, RoPE" : "LN", training ? ", dropout" : "", packed ? ", target lengths" : "");
                gradcheck(label, decoder_fn, &c, c.ps.items, c.ps.count);
            }
            c.tgt_len = NULL;

            /* causal: a later target position moves no earlier output; padded memory moves nothing */
            c.training = false;
            ag_real y0[B * NT * DM];
            ag_tensor_read(decoder_fn(&c), y0);
            ag_step_end();
            c.x->data[(0 * NT + 2) * DM + 1] += 1;
            c.memory->data[(1 * NS + 4) * DM] += 5; /* example 1's memory has length 1 */
            ag_tensor *y1 = decoder_fn(&c);
            for (int i = 0; i < B * NT * DM; i++) {
                bool moved = i >= 2 * DM && i < NT * DM; /* example 0, positions 2 and 3 */
                if (!moved) CHECK(y1->data[i] == y0[i], "%s: output %d moved", label, i);
            }
            CHECK(y1->data[2 * DM] != y0[2 * DM], "%s: the changed position's own output did not move", label);
            ag_step_end();
            ag_params_free(&c.ps);
        }
}

/* Padding skipped: the layer on a padded batch with lengths gives, at each example's valid positions, what it gives
 * on that example alone, cut to its lengths (no padding at all), and 0 at the padding; both blocks, pre and post,
 * packed and with too little padding to pack. */
static void test_decoder_padding(ag_rng *r) {
    for (int variant = 0; variant < 4; variant++) {
        ag_encoder_config cfg = config(variant % 2, variant >= 2);
        dec_ctx c;
        make_decoder(&c, r, &cfg);
        for (int k = 0; k < 2; k++) { /* packed target and memory; neither packed (one padded row of 12, of 15) */
            const int32_t *tgt = k ? (const int32_t[]){4, 4, 3} : tgt_padded, *mem = k ? (const int32_t[]){5, 5, 4} : mem_padded;
            ag_real y[B * NT * DM];
            ag_tensor_read(ag_decoder_layer_forward(&c.dec, c.x, tgt, c.memory, mem, false, NULL), y);
            ag_step_end();
            double worst = 0;
            for (int b = 0; b < B; b++) {
                int nt = tgt[b], ns = mem[b];
                ag_tensor *xb = ag_slice(ag_slice(c.x, 0, b, b + 1), 1, 0, nt);
                ag_tensor *mb = ag_slice(ag_slice(c.memory, 0, b, b + 1), 1, 0, ns);
                ag_tensor *alone = ag_decoder_layer_forward(&c.dec, xb, NULL, mb, NULL, false, NULL); /* [1, nt, d] */
                for (int t = 0; t < NT; t++)
                    for (int j = 0; j < DM; j++) {
                        double got = y[(b * NT + t) * DM + j];
                        if (t >= nt) CHECK(got == 0, "variant %d: padded position %d of example %d is %g", variant, t, b, got);
                        else worst = check_worst(worst, fabs(got - alone->data[t * DM + j]));
                    }
                ag_step_end();
            }
            CHECK(worst <= 1e-14, "variant %d, lengths %d: the padded batch's valid rows differ from each example's "
                  "alone by %.3g", variant, k, worst);
        }
        ag_params_free(&c.ps);
    }
}

/* The cross-attention's weights come out, and the output is the same. */
static void test_decoder_probs(ag_rng *r) {
    ag_encoder_config cfg = config(true, false);
    dec_ctx c;
    make_decoder(&c, r, &cfg);
    ag_tensor *probs = NULL;
    ag_tensor *y0 = ag_decoder_layer_forward(&c.dec, c.x, tgt_padded, c.memory, mem_padded, false, NULL);
    ag_tensor *y1 = ag_decoder_layer_forward_probs(&c.dec, c.x, tgt_padded, c.memory, mem_padded, false, NULL, &probs);
    CHECK(probs && probs->ndim == 4 && probs->shape[1] == H && probs->shape[2] == NT && probs->shape[3] == NS,
          "cross probs [B, h, Nt, Ns]");
    CHECK(!memcmp(y0->data, y1->data, (size_t)y0->size * sizeof(ag_real)), "the _probs forward is the forward");
    CHECK(probs->data[((1 * H + 1) * NT + 3) * NS + 1] == 0, "no weight on padded memory");
    ag_step_end();
    ag_params_free(&c.ps);
}

/* cfg.recompute: the loss and every gradient bit for bit, and a gradient check through it. */
static void test_decoder_recompute(ag_rng *r) {
    for (int later = 0; later < 2; later++) {
        ag_encoder_config cfg = config(true, later);
        dec_ctx c;
        make_decoder(&c, r, &cfg);
        c.training = true;
        ag_real *g[2];
        double loss[2];
        for (int k = 0; k < 2; k++) {
            c.dec.self.cfg.recompute = k;
            g[k] = grads_of_sum_squares(&c.ps, decoder_fn, &c, &loss[k]);
        }
        CHECK(loss[0] == loss[1] && !memcmp(g[0], g[1], (size_t)grads_total(&c.ps) * sizeof(ag_real)),
              "decoder %s recomputed: loss %.17g against %.17g, or gradients not the same bits", later ? "later" : "2017",
              loss[1], loss[0]);
        free(g[0]), free(g[1]);
        c.dec.self.cfg.recompute = true;
        gradcheck(later ? "decoder layer pre-RMS, recomputed" : "decoder layer pre-LN, recomputed", decoder_fn, &c,
                  c.ps.items, c.ps.count);
        ag_params_free(&c.ps);
    }
}

static void test_decoder_errors(ag_rng *r) {
    ag_params ps = {0};
    EXPECT_FATAL(ag_decoder_layer_new(&ps, &(ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 0}, r),
                 "ag_decoder_layer_new", "d_ff 0");
    EXPECT_FATAL(ag_decoder_layer_new(&ps, &(ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 4, .kv_heads = 3}, r),
                 "ag_decoder_layer_new", "kv_heads 3 for 2 heads");
    EXPECT_FATAL(ag_decoder_layer_new(&ps, NULL, r), "ag_decoder_layer_new", "config");
    ag_decoder_layer l = ag_decoder_layer_new(&ps, &(ag_encoder_config){.d_model = DM, .heads = H, .d_ff = 4, .keep = 0.9}, r);
    ag_tensor *x = ag_tensor_new(3, (int[]){B, NT, DM}), *mem = ag_tensor_new(3, (int[]){B, NS, DM});
    EXPECT_FATAL_AT(ag_decoder_layer_forward(&l, x, NULL, mem, NULL, true, NULL), "ag_decoder_layer_forward", "needs an rng");
    EXPECT_FATAL_AT(ag_decoder_layer_forward(&l, x, NULL, ag_tensor_new(3, (int[]){B, NS, 3}), NULL, false, NULL),
                    "ag_decoder_layer_forward", "memory [3,5,3]");
    EXPECT_FATAL_AT(ag_decoder_layer_forward(&l, ag_tensor_new(2, (int[]){NT, DM}), NULL, mem, NULL, false, NULL),
                    "ag_decoder_layer_forward", "x [4,4]");
    EXPECT_FATAL_AT(ag_decoder_layer_forward(NULL, x, NULL, mem, NULL, false, NULL), "ag_decoder_layer_forward", "NULL");
    EXPECT_FATAL_AT(ag_decoder_layer_forward(&l, x, (const int32_t[]){1, 5, 1}, mem, NULL, false, NULL),
                    "ag_decoder_layer_forward", "lengths[1] = 5 is outside [0, 4]");
    EXPECT_FATAL_AT(ag_decoder_layer_forward(&l, x, NULL, ag_tensor_new(3, (int[]){2, NS, DM}), NULL, false, NULL),
                    "ag_decoder_layer_forward", "x holds 3 sequences, memory 2");
    ag_kv_cache memory = {0};
    EXPECT_FATAL_AT(ag_decoder_layer_forward_cached(&l, ag_tensor_new(3, (int[]){1, 1, DM}), &memory, NULL, NULL),
                    "ag_decoder_layer_forward_cached", "cache");
    ag_step_end();
    ag_params_free(&ps);
}

/* ---- generation, and the devices ---- */

/* ag_decoder_layer_forward_cached on device d, S sequences decoded
 * together: a target of LEN positions fed 2, 1 and 3 at a time (or one at
 * a time) against the memories' cache (lengths 3, 5, 1 of NS) gives the
 * rows of the full forward; a self-attention cache of capacity < LEN (0:
 * LEN) under a window reuses its rows in turn. */
static void cached_case(ag_rng *r, ag_device d, bool pre, bool later, int window, int capacity, bool singly, int S,
                        bool alibi) {
    enum { LEN = 6 };
    const int *chunks = singly ? (const int[]){1, 1, 1, 1, 1, 1} : (const int[]){2, 1, 3};
    int n_chunks = singly ? LEN : 3, cap = capacity ? capacity : LEN;
    const int32_t len[3] = {3, 5, 1};
    ag_params ps = {0};
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){S, LEN, DM}, 1, r);
    ag_tensor *mem = ag_param_uniform(&ps, "memory", 3, (int[]){S, NS, DM}, 1, r);
    ag_encoder_config cfg = config(pre, later);
    cfg.window = window, cfg.alibi = alibi;
    ag_decoder_layer l = ag_decoder_layer_new(&ps, &cfg, r);
    nonzero_biases(&ps);
    ag_params_to(&ps, d);
    ag_set_device(d);
    ag_real full[3 * LEN * DM], got[3 * LEN * DM];
    ag_tensor_read(ag_decoder_layer_forward(&l, x, NULL, mem, len, false, NULL), full);
    ag_step_end();
    ag_kv_cache c, memory;
    CHECK(ag_kv_cache_init_batch(&c, &l.self.attn, S, cap, d) == AG_OK && c.batch == S, "%s", ag_errmsg());
    CHECK(ag_kv_cache_memory(&memory, &l.cross, mem) == AG_OK, "%s", ag_errmsg());
    int kvw = 2 * (later ? 1 : H) * (DM / H);
    CHECK(memory.batch == S && memory.n == NS && memory.capacity == NS && ag_buffer_size(memory.kv) == (int64_t)S * NS * kvw,
          "the memory's cache: %d sequences of %d positions, %d reals each", S, NS, kvw);
    ag_step_end();
    double worst = 0;
    int64_t waits = 0;
    for (int i = 0, at = 0; i < n_chunks; at += chunks[i++]) {
        int64_t w0 = ag_memstats().device_waits;
        ag_tensor *y = ag_decoder_layer_forward_cached(&l, ag_slice(x, 1, at, at + chunks[i]), &memory, len, &c);
        waits += ag_memstats().device_waits - w0;
        CHECK(y->shape[0] == S && y->shape[1] == chunks[i] && c.n == at + chunks[i], "chunk %d", i);
        ag_tensor_read(y, got);
        for (int b = 0; b < S; b++)
            for (int e = 0; e < chunks[i] * DM; e++)
                worst = check_worst(worst, fabs(got[b * chunks[i] * DM + e] - full[(b * LEN + at) * DM + e]));
        ag_step_end();
    }
    CHECK(worst <= 1e-13, "decoder %s-%s%s, %d sequence(s), window %d, capacity %d%s, on the %s: cached rows differ "
          "from the full forward's by %.3g", pre ? "pre" : "post", later ? "RMS, SwiGLU, RoPE" : "LN",
          alibi ? ", ALiBi" : "", S, window, cap, singly ? " one at a time" : "", ag_device_name(d), worst);
    CHECK(waits == 0, "on the %s: the cached forwards waited for the device %lld times", ag_device_name(d),
          (long long)waits);
    ag_kv_cache_free(&c), ag_kv_cache_free(&memory);
    ag_set_device(AG_CPU);
    ag_params_to(&ps, AG_CPU);
    ag_params_free(&ps);
}

/* ag_kv_cache_select, as beam search reorders its hypotheses: three
 * sequences fed 3 positions, the caches (the target's and the memory's)
 * reordered to {2, 0, 0}, then fed the rest of the reordered targets: the
 * rows of the full forward over the reordered targets and memories. */
static void select_case(ag_rng *r, ag_device d) {
    enum { S = 3, LEN = 5, AT = 3 };
    const int32_t from[S] = {2, 0, 0}, len[S] = {3, 5, 1};
    ag_params ps = {0};
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){S, LEN, DM}, 1, r);
    ag_tensor *mem = ag_param_uniform(&ps, "memory", 3, (int[]){S, NS, DM}, 1, r);
    ag_encoder_config cfg = config(true, true);
    ag_decoder_layer l = ag_decoder_layer_new(&ps, &cfg, r);
    nonzero_biases(&ps);
    ag_params_to(&ps, d);
    ag_set_device(d);
    int32_t len_after[S];
    for (int s = 0; s < S; s++) len_after[s] = len[from[s]];
    ag_real full[S * LEN * DM], got[S * (LEN - AT) * DM];
    ag_tensor_read(ag_decoder_layer_forward(&l, ag_index_select(x, 0, from, S), NULL, ag_index_select(mem, 0, from, S),
                                            len_after, false, NULL),
                   full);
    ag_step_end();
    ag_kv_cache c, memory;
    CHECK(ag_kv_cache_init_batch(&c, &l.self.attn, S, LEN, d) == AG_OK && ag_kv_cache_memory(&memory, &l.cross, mem) == AG_OK,
          "%s", ag_errmsg());
    (void)ag_decoder_layer_forward_cached(&l, ag_slice(x, 1, 0, AT), &memory, len, &c);
    ag_kv_cache_select(&c, from);
    ag_kv_cache_select(&memory, from);
    ag_tensor *rest = ag_slice(ag_index_select(x, 0, from, S), 1, AT, LEN);
    ag_tensor_read(ag_decoder_layer_forward_cached(&l, rest, &memory, len_after, &c), got);
    double worst = 0;
    for (int s = 0; s < S; s++)
        for (int e = 0; e < (LEN - AT) * DM; e++)
            worst = check_worst(worst, fabs(got[s * (LEN - AT) * DM + e] - full[(s * LEN + AT) * DM + e]));
    CHECK(worst <= 1e-13, "on the %s: after ag_kv_cache_select the cached rows differ from the reordered forward's by %.3g",
          ag_device_name(d), worst);
    EXPECT_FATAL_AT(ag_kv_cache_select(&c, (const int32_t[]){0, 3, 1}), "ag_kv_cache_select",
                    "from[1] = 3: want a sequence of the cache's 3");
    ag_kv_cache empty = {0};
    EXPECT_FATAL_AT(ag_kv_cache_select(&empty, from), "ag_kv_cache_select", "empty");
    ag_step_end();
    ag_kv_cache_free(&c), ag_kv_cache_free(&memory);
    ag_set_device(AG_CPU);
    ag_params_to(&ps, AG_CPU);
    ag_params_free(&ps);
}

/* What the caches refuse: a batch that is not theirs, a memory's cache of
 * another layer or none, a self-attention layer's memory. */
static void test_cache_errors(ag_rng *r) {
    ag_params ps = {0};
    ag_encoder_config cfg = config(false, false);
    ag_decoder_layer l = ag_decoder_layer_new(&ps, &cfg, r);
    ag_scope_push("grouped");
    ag_mha grouped = ag_mha_new_cross(&ps, DM, H, 1, r);
    ag_scope_pop();
    ag_tensor *mem = ag_tensor_new(3, (int[]){2, NS, DM});
    ag_kv_cache c, memory, empty = {0};
    CHECK(ag_kv_cache_init_batch(&c, &l.self.attn, 2, 4, AG_CPU) == AG_OK && ag_kv_cache_memory(&memory, &l.cross, mem) == AG_OK);
    EXPECT_FATAL_AT(ag_decoder_layer_forward_cached(&l, ag_tensor_new(3, (int[]){3, 1, DM}), &memory, NULL, &c),
                    "ag_mha_forward_cached", "[3,1,4]", "[2, n, 4] (the cache holds 2 sequences)");
    EXPECT_FATAL_AT(ag_mha_cross_forward_cached(&l.cross, ag_tensor_new(3, (int[]){3, 1, DM}), &memory, NULL),
                    "ag_mha_cross_forward_cached", "x holds 3 sequences, the memory's cache 2");
    EXPECT_FATAL_AT(ag_mha_cross_forward_cached(&grouped, ag_tensor_new(3, (int[]){2, 1, DM}), &memory, NULL),
                    "ag_mha_cross_forward_cached", "another layer's");
    EXPECT_FATAL_AT(ag_mha_cross_forward_cached(&l.cross, ag_tensor_new(3, (int[]){2, 1, DM}), &empty, NULL),
                    "ag_mha_cross_forward_cached", "the memory's cache is empty");
    EXPECT_FATAL_AT(ag_mha_cross_forward_cached(&l.cross, ag_tensor_new(3, (int[]){2, 1, DM}), &memory,
                                                (const int32_t[]){6, 1}),
                    "ag_mha_cross_forward_cached", "lengths[0] = 6 is outside [0, 5]");
    EXPECT_FATAL(ag_kv_cache_memory(&empty, &l.self.attn, mem), "ag_kv_cache_memory", "a self-attention layer");
    EXPECT_FATAL(ag_kv_cache_memory(&empty, &l.cross, ag_tensor_new(3, (int[]){2, 0, DM})), "ag_kv_cache_memory",
                 "memory [2,0,4]");
    EXPECT_FATAL(ag_kv_cache_init_batch(&empty, &l.self.attn, 0, 4, AG_CPU), "ag_kv_cache_init_batch", "batch 0");
    EXPECT_FATAL_AT(ag_decoder_layer_forward_cached(&l, ag_tensor_new(3, (int[]){2, 1, DM}), NULL, NULL, &c),
                    "ag_decoder_layer_forward_cached", "the memory's cache");
    ag_kv_cache_free(&c), ag_kv_cache_free(&memory);
    ag_step_end();
    ag_params_free(&ps);
}

/* One forward and backward (with dropout) on device d against the CPU's:
 * the loss and every gradient. */
static void device_case(ag_rng *r, ag_device d, bool pre, bool later) {
    ag_encoder_config cfg = config(pre, later);
    dec_ctx c;
    make_decoder(&c, r, &cfg);
    c.training = true;
    int64_t total = grads_total(&c.ps);
    ag_real *g[2];
    double loss[2];
    for (int k = 0; k < 2; k++) {
        ag_device on = k ? d : AG_CPU;
        ag_params_to(&c.ps, on);
        ag_set_device(on);
        g[k] = grads_of_sum_squares(&c.ps, decoder_fn, &c, &loss[k]);
        ag_set_device(AG_CPU);
    }
    double worst = 0;
    for (int64_t i = 0; i < total; i++) worst = check_worst(worst, fabs(g[1][i] - g[0][i]) / fmax(1, fabs(g[0][i])));
    CHECK(fabs(loss[1] - loss[0]) <= 1e-12 * fabs(loss[0]) && worst <= 1e-12,
          "decoder %s-%s on the %s: loss %.17g against the CPU's %.17g, gradients %.3g apart", pre ? "pre" : "post",
          later ? "RMS" : "LN", ag_device_name(d), loss[1], loss[0], worst);
    free(g[0]), free(g[1]);
    ag_params_free(&c.ps);
}

static void test_devices(ag_rng *r, ag_device d) {
    for (int S = 1; S <= 3; S += 2) { /* one sequence; three decoded together, their memories of three lengths */
        for (int v = 0; v < 4; v++) cached_case(r, d, v % 2, v >= 2, 0, 0, false, S, false);
        cached_case(r, d, true, true, 2, 0, false, S, false);
        cached_case(r, d, false, false, 0, 0, true, S, false);
        cached_case(r, d, true, false, 2, 4, false, S, false); /* rows reused in turn */
        cached_case(r, d, false, true, 3, 3, true, S, false);
        cached_case(r, d, true, false, 0, 0, false, S, true); /* ALiBi: its penalties built for the cached rows */
        cached_case(r, d, false, false, 2, 4, true, S, true);
    }
    select_case(r, d);
    if (d != AG_CPU)
        for (int v = 0; v < 4; v++) device_case(r, d, v % 2, v >= 2);
}

int main(void) {
    ag_rng r;
    ag_rng_seed(&r, 7);
    cross_case(&r, H);
    cross_case(&r, 1); /* multi-query: one key-value head */
    test_cross_errors(&r);
    test_decoder_layer(&r);
    test_decoder_padding(&r);
    test_decoder_probs(&r);
    test_decoder_recompute(&r);
    test_decoder_errors(&r);
    test_cache_errors(&r);
    test_devices(&r, AG_CPU);
    char why[256];
    if (ag_cuda_available(why, sizeof why)) test_devices(&r, AG_CUDA);
    else printf("the decoder on the GPU not run: %s\n", why);
    ag_shutdown();
    return check_summary("test_decoder");
}
