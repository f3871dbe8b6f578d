/* transformer_lm.c - a small decoder-only Transformer language model (GPT-style) as a plugin model for the `lm`
 * task, from <attngrad/layers.h>: token embedding + learned positions -> dropout -> L pre-LayerNorm blocks of
 * causal multi-head self-attention and a GELU FFN (ag_encoder_layer with pre_norm, a PAST_INCL mask and the
 * batch's lengths: a position reads itself, the positions before it and no padding) -> a final LayerNorm ->
 * logits through the embedding (tied decoder, no bias).  The loss is the fused ag_linear_t_cross_entropy, which
 * never builds the [B,N,V] logits.  Sizes: --dim (d, 128), --heads (4), --layers (2), --hidden (the FFN's width,
 * 4d), --keep (0.9: after the embedding and on each sublayer's output); the learned position table has the run's
 * --max-len positions (cfg.max_len: no batch is wider, and generate keeps to the last max-len words), else
 * --hparams ctx=N (128), beyond which an input is refused.
 * The later block (LLaMA's) by parts, through --hparams: rope=BASE turns queries and keys by their positions
 * (ag_rope, e.g. rope=10000) in place of the learned table; rms=1 normalises by ag_rmsnorm (gains, no biases);
 * glu=1 makes the FFN SwiGLU (--hidden the gated width).  All three: --hparams rope=10000,rms=1,glu=1.
 * alibi=1: ALiBi's distance penalties on every head's scores (Press et al. 2022) in place of the learned table.
 * kv_heads=K: grouped-query attention, K key-value heads for the --heads query heads (1: multi-query), a smaller
 * key-value cache for generate.
 * recompute=1 keeps each layer's output alone and makes the rest again in backward (ag_recompute): less memory
 * for one more forward a step, the same gradients.  recompute_attn=1 keeps no attention probabilities
 * [B,h,N,N] (ag_attention_recompute): memory linear in the context for one more Q K^T a layer; the two combine.
 * window=W: sliding-window attention, each position reading itself and the W - 1 before it (in training, and in
 * generate's cached steps); with recompute_attn=1 a layer's attention then costs O(N W) on the CPU, not O(N^2).
 *
 *   ninja -C build examples/transformer_lm.so examples/transformer_lm-f64.so
 *   P=build/examples/transformer_lm.so
 *   build/tools/attngrad --plugin $P gradcheck --model tlm            # f64 (loads ...-f64.so)
 *   build/tools/attngrad --plugin $P train --model tlm --epochs 20 --out runs/tlm   # the generated LM task
 *   build/tools/attngrad --plugin $P train --model tlm --data DATA/ptb --lr-steps cosine:warmup=500,total=20000
 *   build/tools/attngrad --plugin $P heatmap --ckpt runs/tlm/best.safetensors --sentence "w1 w2 w3" --out maps/
 *   echo "the market" | build/tools/attngrad --plugin $P generate --ckpt runs/tlm/best.safetensors --words 100
 * generate feeds it word by word (lm_feed): each layer's keys and values are kept (ag_kv_cache), so a drawn word
 * costs one position, not a forward over the text so far.
 * The heatmaps "layer0", "layer1", ... are each layer's causal attention weights [B,h,N,N], a map per head.
 *
 * AdamW through --optim decays every parameter; transformers decay no bias or LayerNorm parameter:
 * --param-group '@bias_norm:weight_decay=0' (docs/optim.md).  tests/test_transformer_lm.sh gradchecks it, checks causality and that it learns. */
#include "attngrad/model.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int ctx, n_layers;
    ag_tensor *embed, *pos, *lnf_g, *lnf_b;
    ag_encoder_layer layer[]; /* n_layers */
} tlm;

static void tlm_defaults(ag_model_config *c) {
    c->dim = 128, c->heads = 4, c->layers = 2, c->hidden = 512, c->keep = 0.9, c->batch = 32, c->clip = 1;
    c->optim = "adamw:lr=1e-3,beta2=0.98,weight_decay=0.01";
}

static void tlm_tiny(ag_model_config *c) { c->dim = 8, c->heads = 2, c->layers = 2, c->hidden = 12, c->keep = 1; }

static ag_status tlm_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int d = c->dim, ctx = c->max_len > 0 ? c->max_len : (int)ag_model_hparam(m, "ctx", 128);
    if (d < 1 || c->heads < 1 || d % c->heads || c->layers < 1 || c->hidden < 1 || ctx < 1)
        return ag_fail(AG_ERR_ARG, "tlm: want dim a multiple of heads, and layers, hidden, ctx >= 1 "
                       "(dim %d, heads %d, layers %d, hidden %d, ctx %d)", d, c->heads, c->layers, c->hidden, ctx);
    tlm *p = calloc(1, sizeof *p + (size_t)c->layers * sizeof p->layer[0]);
    if (!p) return ag_fail(AG_ERR_NOMEM, "tlm: out of memory");
    m->impl = p;
    p->ctx = ctx, p->n_layers = c->layers;
    m->cfg.max_len = ctx; /* the longest text it reads: generate keeps to its last ctx words (a window), not fails */
    ag_params *ps = &m->params;
    double rope = ag_model_hparam(m, "rope", 0);
    bool glu = ag_model_hparam(m, "glu", 0) != 0;
    if (rope < 0 || (rope > 0 && (d / c->heads) % 2))
        return ag_fail(AG_ERR_ARG, "tlm: rope=%g wants a base > 0 and an even head width (dim %d / heads %d)", rope, d,
                       c->heads);
    bool alibi = ag_model_hparam(m, "alibi", 0) != 0;
    if (alibi && rope > 0)
        return ag_fail(AG_ERR_ARG, "tlm: alibi=1 and rope=%g: positions come one way, ALiBi's or rotary", rope);
    int kv_heads = (int)ag_model_hparam(m, "kv_heads", 0);
    double window = ag_model_hparam(m, "window", 0);
    if (window < 0 || window != (int)window)
        return ag_fail(AG_ERR_ARG, "tlm: window=%g wants a whole number of positions (0: none)", window);
    if (kv_heads < 0 || (kv_heads > 0 && c->heads % kv_heads))
        return ag_fail(AG_ERR_ARG, "tlm: kv_heads=%d wants a divisor of the %d heads", kv_heads, c->heads);
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, d, 0.1, AG_PAD_ID, &m->rng); /* also the decoder */
    if (rope == 0 && !alibi) p->pos = ag_param_positions(ps, "pos.weight", ctx, d, 0.02, &m->rng);
    ag_encoder_config ec = {.d_model = d, .heads = c->heads, .d_ff = c->hidden, .pre_norm = true, .keep = c->keep,
                            .act = glu ? AG_ACT_SILU : AG_ACT_GELU, .rms_norm = ag_model_hparam(m, "rms", 0) != 0,
                            .gated = glu, .rope_base = rope, .kv_heads = kv_heads,
                            .recompute = ag_model_hparam(m, "recompute", 0) != 0,
                            .recompute_attention = ag_model_hparam(m, "recompute_attn", 0) != 0,
                            .window = (int)window, .alibi = alibi};
    for (int l = 0; l < c->layers; l++) {
        ag_scope_push("layer%d", l);
        p->layer[l] = ag_encoder_layer_new(ps, &ec, &m->rng);
        ag_scope_pop();
    }
    ag_param_layernorm(ps, "ln_f", d, &p->lnf_g, ec.rms_norm ? NULL : &p->lnf_b);
    return AG_OK;
}

/* The final LayerNorm's output [B,N,d]: position t reads tokens 0..t of its row and nothing else. */
static ag_tensor *tlm_hidden(ag_model *m, const ag_batch *b, bool training) {
    tlm *p = m->impl;
    int B = b->rows, N = b->width;
    if (N > p->ctx) {
        ag_fail(AG_ERR_ARG, "tlm: %d positions, more than the %d of its %s (--max-len, or --hparams ctx)", N, p->ctx,
                p->pos ? "position table" : "context");
        return NULL;
    }
    ag_tensor *h = ag_embedding(p->embed, b->tokens, 2, (int[]){B, N});
    if (p->pos) h = ag_add_learned_positions(h, p->pos); /* else each layer turns its queries and keys (rope), or
                                                            * penalises its scores by distance (ALiBi) */
    h = ag_model_dropout(m, h, training);
    /* key k <= query q (and k > q - window) */
    ag_tensor *causal = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = p->layer[0].cfg.window}, N);
    for (int l = 0; l < p->n_layers; l++) { /* padded keys masked by lengths, on top of the causal mask */
        ag_tensor *probs = NULL; /* [B,h,N,N], for heatmaps: "layer0", "layer1", ... */
        h = ag_encoder_layer_forward_probs(&p->layer[l], h, b->lengths, causal, training, &m->rng,
                                           m->capture_maps ? &probs : NULL);
        char name[16];
        snprintf(name, sizeof name, "layer%d", l);
        if (probs) ag_model_capture(m, name, probs);
    }
    return ag_encoder_norm(&p->layer[0].cfg, h, p->lnf_g, p->lnf_b);
}

static ag_tensor *tlm_forward(ag_model *m, const ag_batch *b, bool training) {
    ag_tensor *h = tlm_hidden(m, b, training);
    if (!h) return NULL;
    if (m->last_logits) /* generate: each row's last position alone, [B,1,V] */
        h = ag_reshape(ag_last_positions(h, b->lengths), 3, (int[]){b->rows, 1, m->cfg.dim});
    return ag_linear_t(h, ((tlm *)m->impl)->embed, NULL); /* [B,N,V] */
}

static ag_tensor *tlm_loss(ag_model *m, const ag_batch *b, bool training) {
    ag_tensor *h = tlm_hidden(m, b, training);
    if (!h) return NULL;
    tlm *p = m->impl;
    double eps = training ? m->cfg.label_smoothing : 0; /* --label-smoothing */
    if (eps > 0) return ag_linear_t_cross_entropy_smoothed(h, p->embed, NULL, b->targets, AG_PAD_ID, eps);
    return ag_linear_t_cross_entropy(h, p->embed, NULL, b->targets, AG_PAD_ID);
}

/* ---- word by word, for generation: each layer's keys and values kept (ag_kv_cache) ---- */
typedef struct {
    int n_layers;
    ag_kv_cache layer[]; /* n_layers */
} tlm_state;

static void tlm_state_free(void *state) {
    tlm_state *s = state;
    for (int l = 0; s && l < s->n_layers; l++) ag_kv_cache_free(&s->layer[l]);
    free(s);
}

/* NULL past the position table (generate's forward then says so) or where there is no room. */
static void *tlm_state_new(const ag_model *m, int capacity) {
    const tlm *p = m->impl;
    tlm_state *s = capacity >= 1 && capacity <= p->ctx ? calloc(1, sizeof *s + (size_t)p->n_layers * sizeof s->layer[0]) : NULL;
    if (!s) return NULL;
    s->n_layers = p->n_layers;
    for (int l = 0; l < p->n_layers; l++)
        if (ag_kv_cache_init(&s->layer[l], &p->layer[l].attn, capacity, p->embed->device) != AG_OK) {
            tlm_state_free(s);
            return NULL;
        }
    return s;
}

/* tlm_forward's logits at the last of ids[0..n), read after the positions the caches hold. */
static ag_tensor *tlm_feed(ag_model *m, void *state, const int32_t *ids, int n) {
    tlm *p = m->impl;
    tlm_state *s = state;
    int at = s->layer[0].n;
    if (n < 1 || n > s->layer[0].capacity - at) {
        ag_fail(AG_ERR_ARG, "tlm: feeding %d words after %d: the state holds %d positions", n, at, s->layer[0].capacity);
        return NULL;
    }
    ag_tensor *h = ag_embedding(p->embed, ids, 2, (int[]){1, n});                                 /* [1,n,d] */
    if (p->pos) h = ag_add(h, ag_slice(p->pos, 0, at, at + n));
    for (int l = 0; l < p->n_layers; l++) h = ag_encoder_layer_forward_cached(&p->layer[l], h, &s->layer[l]);
    h = ag_encoder_norm(&p->layer[0].cfg, ag_slice(h, 1, n - 1, n), p->lnf_g, p->lnf_b);      /* [1,1,d] */
    return ag_linear_t(h, p->embed, NULL);                                                               /* [1,1,V] */
}

static void tlm_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind tlm_kind = {
    .abi = AG_MODEL_ABI,
    .name = "tlm",
    .defaults = tlm_defaults, .tiny = tlm_tiny,
    .build = tlm_build, .forward = tlm_forward, .loss = tlm_loss, .destroy = tlm_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_LM),
    .reads = "hidden,heads,layers,max-len",
    .hparams = "ctx,rope,rms,glu,kv_heads,recompute,recompute_attn,window,alibi",
    .lm_state_new = tlm_state_new, .lm_feed = tlm_feed, .lm_state_free = tlm_state_free,
};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&tlm_kind); }
