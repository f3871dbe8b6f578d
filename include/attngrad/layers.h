/* layers.h - the attention layers a researcher expects, built from
 * attngrad's ops (their gradients follow from the ops' own, and each has an
 * f64 gradient check in tests/test_layers.c).  Part of attngrad.h; it
 * stands alone.  docs/layers.md shows them assembled into a model.
 *
 * Conventions: x is [B, N, d] (batch, positions, features); lengths[b] in
 * [0, N] gives example b's valid positions (NULL: all N); parameters are
 * made with ag_param under the current name scope (ag_scope_push), from a
 * seeded generator, in a fixed order. */
#ifndef AG_LAYERS_H
#define AG_LAYERS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter makers and the blocks the models share (models/layers.c) ---- */

/* Glorot-uniform weight [in, out] (y = x W convention). */
ag_tensor *ag_param_glorot(ag_params *ps, const char *name, int in, int out, ag_rng *rng);
/* Zero-filled bias [n]. */
ag_tensor *ag_param_bias(ag_params *ps, const char *name, int n);
/* A parameter of any shape drawn from U(-bound, bound). */
ag_tensor *ag_param_uniform(ag_params *ps, const char *name, int ndim, const int *shape, double bound, ag_rng *rng);
/* Embedding table [V, d] drawn from U(-bound, bound); row pad_id (>= 0) zero. */
ag_tensor *ag_param_embedding(ag_params *ps, const char *name, int V, int d, double bound, int pad_id,
                              ag_rng *rng);
/* One LSTM layer for ag_lstm: <prefix>.w_ih [in,4H], .w_hh [H,4H], .b_ih and
 * .b_hh [4H], each drawn from U(-bound, bound) in that order (nn.LSTM's
 * default is bound = 1/sqrt(H)). */
ag_lstm_layer ag_param_lstm(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng);
/* A bidirectional LSTM layer for ag_bilstm: ag_param_lstm's four under
 * <prefix>.fw, then four under <prefix>.bw (so "encode" gives encode.fw.w_ih
 * ... encode.bw.b_hh), each from U(-bound, bound). */
typedef struct {
    ag_lstm_layer fw, bw;
} ag_bilstm_layer;
ag_bilstm_layer ag_param_bilstm(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng);
/* The GRU's: <prefix>.w_ih [in,3H], .w_hh [H,3H], .b_ih and .b_hh [3H]
 * from U(-bound, bound) (nn.GRU's default bound 1/sqrt(H)), and the
 * bidirectional layer's, eight under <prefix>.fw and <prefix>.bw. */
ag_gru_layer ag_param_gru(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng);
typedef struct {
    ag_gru_layer fw, bw;
} ag_bigru_layer;
ag_bigru_layer ag_param_bigru(ag_params *ps, const char *prefix, int in, int H, double bound, ag_rng *rng);
/* LayerNorm parameters for ag_layernorm: *gain = <prefix>.gain [d] filled
 * with 1, *bias = <prefix>.bias [d] with 0, in that order.  bias NULL: the
 * gain alone (ag_rmsnorm's). */
void ag_param_layernorm(ag_params *ps, const char *prefix, int d, ag_tensor **gain, ag_tensor **bias);

/* act(x) by the ag_act above: ag_relu, ag_elu, ag_tanh, ag_sigmoid or x. */
ag_tensor *ag_activate(ag_tensor *x, ag_act act);

/* Constant [B, N, 1]: 1 at positions t < lengths[b], 0 at padding.  The
 * layers below stop with a message when a length is outside [0, N]. */
ag_tensor *ag_valid_mask(const int32_t *lengths, int B, int N);
/* x [B, N, ...] with the rows at padded positions set to 0. */
ag_tensor *ag_zero_padding(ag_tensor *x, const int32_t *lengths);
/* Max over the valid positions of x [B, N, d] -> [B, d]; an empty example
 * (lengths[b] = 0) gives 0 and no gradient, as in ag_source2token. */
ag_tensor *ag_max_over_time(ag_tensor *x, const int32_t *lengths);
/* Source2token multi-dim pooling (docs/models.md, conventions): A = act(x W1 + b1) W2 + b2,
 * alpha = softmax over valid t per feature, s = sum_t alpha_t * x_t.
 * x [B, N, d] -> [B, d]. */
ag_tensor *ag_source2token(ag_tensor *x, const int32_t *lengths, ag_tensor *w1, ag_tensor *b1,
                           ag_tensor *w2, ag_tensor *b2, ag_act act);
/* The same, and *weights (if not NULL) receives alpha [B, N, d] - a
 * distribution over the positions per feature, 0 on padding - read-only,
 * no gradient, valid until ag_step_end (as ag_attention's probs), for
 * heatmaps (ag_feature_map). */
ag_tensor *ag_source2token_weights(ag_tensor *x, const int32_t *lengths, ag_tensor *w1, ag_tensor *b1,
                                   ag_tensor *w2, ag_tensor *b2, ag_act act, ag_tensor **weights);

/* x [B, N, in] -> [B, N, 2H]: [forward LSTM ; LSTM right to left] over each
 * example's valid positions (ag_lstm with ag_lstm_opts.reverse for the
 * second half), 0 at padding.  lengths NULL: all N. */
ag_tensor *ag_bilstm(ag_tensor *x, const ag_bilstm_layer *l, const int32_t *lengths);
/* The same with GRUs (ag_gru): [forward GRU ; GRU right to left]. */
ag_tensor *ag_bigru(ag_tensor *x, const ag_bigru_layer *l, const int32_t *lengths);

/* Each example's last valid position: x [B, N, d] -> [B, d], row b is
 * x[b, lengths[b] - 1] (lengths NULL: x[b, N - 1]); an empty example
 * (lengths[b] = 0) gives 0 and no gradient, as the pooling below. */
ag_tensor *ag_last_positions(ag_tensor *x, const int32_t *lengths);

/* ---- cross-sentence soft alignment (decomposable attention, ESIM) ----
 * Sentences a [B, Na, d] and b [B, Nb, d], each of its own width and
 * lengths (len_a, len_b; NULL: all positions), scores e_ij = a_i . b_j
 * [B, Na, Nb]:
 *   a~_i = sum_j softmax_j(e_ij) b_j over b's valid j      -> *a_tilde [B, Na, d]
 *   b~_j = sum_i softmax_i(e_ij) a_i over a's valid i      -> *b_tilde [B, Nb, d]
 * *probs_ab receives softmax_j(e_ij) [B, Na, Nb] (a's words as rows, each a
 * distribution over b's valid words; for heatmaps, ag_model_capture_axes
 * with AG_MAP_CROSS).  Any of the three may be NULL.  Rows at a's padded
 * positions still hold their alignment with b (pool with lengths); against
 * an empty sentence the alignment is 0. */
void ag_soft_align(ag_tensor *a, ag_tensor *b, const int32_t *len_a, const int32_t *len_b, ag_tensor **a_tilde,
                   ag_tensor **b_tilde, ag_tensor **probs_ab);
/* The same from scores e [B, Na, Nb] the caller made, e.g. F(a) F(b)^T
 * (decomposable attention's): a~ = softmax_j(e) b, b~ = softmax_i(e)^T a;
 * a [B, Na, da] and b [B, Nb, db] may differ in width then. */
void ag_soft_align_scores(ag_tensor *e, ag_tensor *a, ag_tensor *b, const int32_t *len_a, const int32_t *len_b,
                          ag_tensor **a_tilde, ag_tensor **b_tilde, ag_tensor **probs_ab);

/* ---- per-feature attention maps, for heatmaps ---- */

enum { AG_FEATURE_MEAN = -1 };
/* One map from per-feature weights w [..., d] (features last: the weights
 * of ag_feature_attention [B,Nq,Nk,d], of ag_source2token_weights
 * [B,N,d]): their mean over the features (feature = AG_FEATURE_MEAN) or
 * feature `feature` alone, [...] - e.g. [B,Nq,Nk] for ag_model_capture.
 * A constant (no gradient), in step memory. */
ag_tensor *ag_feature_map(ag_tensor *w, int feature);


/* ---- positional encodings ---- */

/* The Transformer's sinusoids, a constant [N, d] (step memory):
 * PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(t / 10000^(2i/d)). */
ag_tensor *ag_sinusoidal_positions(int N, int d);
/* x [B, N, d] + PE[N, d]. */
ag_tensor *ag_add_sinusoidal_positions(ag_tensor *x);
/* A learned table [max_len, d] named `name`, drawn from N(0, std). */
ag_tensor *ag_param_positions(ag_params *ps, const char *name, int max_len, int d, double std, ag_rng *rng);
/* x [B, N, d] + table[:N] (N <= max_len); the gradient reaches the table. */
ag_tensor *ag_add_learned_positions(ag_tensor *x, ag_tensor *table);

/* ---- pooling over valid positions: x [B, N, d] -> [B, d] ----
 * An empty example (lengths[b] = 0) pools to 0 with no gradient, in all
 * three (ag_max_over_time, in attngrad.h, is the max). */

/* Mean of the rows t < lengths[b]. */
ag_tensor *ag_mean_over_time(ag_tensor *x, const int32_t *lengths);
/* sum_t softmax_t(x_t . w + b) x_t over t < lengths[b]: one score per
 * position from w [d, 1] and b [1] (may be NULL). */
ag_tensor *ag_attention_pool(ag_tensor *x, const int32_t *lengths, ag_tensor *w, ag_tensor *b);

/* ---- multi-head attention ---- */

/* Q, K and V come from one fused projection x W_qkv + b_qkv, W_qkv [d, 3d]
 * with Q's columns first, then K's, then V's (each split into heads of
 * d / heads columns), and the heads' merged output goes through W_o [d, d]
 * + b_o.  Parameters: <scope>qkv.weight, qkv.bias, out.weight, out.bias
 * (Glorot-uniform weights - over the fused [d, 3d], as torch's
 * MultiheadAttention - and zero biases).  Grouped-query attention
 * (Ainslie et al. 2023; multi-query with one group): kv_heads < heads
 * key-value heads, each read by heads / kv_heads query heads, W_qkv then
 * [d, d + 2 kv_heads d/heads] (K's and V's columns kv_heads heads each):
 * fewer parameters, and a key-value cache kv_heads / heads the size. */
typedef struct {
    int d_model, heads;
    ag_tensor *w_qkv, *b_qkv, *w_o, *b_o;
    double rope_base; /* > 0: queries and keys turned by ag_rope(., d/heads, position, rope_base); 0 (ag_mha_new's): none */
    int kv_heads;     /* key-value heads, dividing heads (0 reads as heads) */
    bool recompute_attention; /* ag_attention_recompute: no [B,h,N,N] probabilities kept, made again in backward
                                 (memory linear in N for one more Q K^T); not where probs are asked for */
    int window;       /* > 0: a sliding window, for generation: ag_mha_forward_cached lets each new position read
                         itself and the window - 1 before it (ag_mha_forward reads what its mask allows: give it
                         the same window, ag_mask_spec.window) */
    ag_tensor *w_q, *b_q; /* cross-attention only (ag_mha_new_cross): the queries' projection [d, d]; w_qkv and
                             b_qkv then project the memory to K and V alone, [d, 2 kv_heads d/heads] */
    bool alibi;       /* ALiBi (Press et al. 2022): head i's scores get -m_i |q - k| (ag_alibi_slopes), in the
                         cached forward too; direction (causal or not) is the mask's.  Self-attention only */
} ag_mha;

/* ALiBi's slopes m_0..m_{heads-1}: 2^(-8 (i + 1) / heads) for a power of 2,
 * else the paper's: the largest power of 2's, then every other of twice
 * that's. */
void ag_alibi_slopes(int heads, double *slopes);

ag_mha ag_mha_new(ag_params *ps, int d_model, int heads, ag_rng *rng);
ag_mha ag_mha_new_grouped(ag_params *ps, int d_model, int heads, int kv_heads, ag_rng *rng);
/* Cross-attention, as a Transformer decoder reads its encoder: queries from
 * x, keys and values from a memory.  Parameters <scope>q.weight [d, d],
 * q.bias, kv.weight [d, 2 kv_heads d/heads] (K's columns, then V's),
 * kv.bias, out.weight, out.bias; q and kv are drawn with the fans of the
 * fused [d, d + 2 kv_heads d/heads] (torch's MultiheadAttention, whose one
 * in_proj_weight serves both).  kv_heads as ag_mha_new_grouped's. */
ag_mha ag_mha_new_cross(ag_params *ps, int d_model, int heads, int kv_heads, ag_rng *rng);
/* Self-attention over x [B, N, d] -> [B, N, d], scores scaled by
 * 1/sqrt(d / heads).  lengths (or NULL) masks padded keys; mask (or NULL)
 * is any additive mask ag_attention takes against the scores [B, h, N, N]:
 * positional [N, N] (ag_mask), per head [1, h, N, N] (ag_mask_heads viewed
 * so), per example [B, 1, N, N] or [B, 1, 1, N], or all [B, h, N, N]
 * (ag_mask_batch).  Both together add up.  probs (or NULL) receives the
 * attention weights [B, h, N, N] for heatmaps (then they are stored, even
 * with recompute_attention).  The mask must then stay unchanged until
 * backward. */
ag_tensor *ag_mha_forward(const ag_mha *m, ag_tensor *x, const int32_t *lengths, ag_tensor *mask,
                          ag_tensor **probs);
/* Cross-attention of ag_mha_new_cross's layer: x [B, Nq, d] reads memory
 * [B, Nk, d] -> [B, Nq, d], scores scaled by 1/sqrt(d / heads).
 * memory_lengths (or NULL) masks the memory's padded keys (a memory of
 * length 0 gives the output bias alone: fully masked rows give 0); mask (or
 * NULL) is any additive mask against the scores [B, h, Nq, Nk], as
 * ag_mha_forward's; probs (or NULL) receives the weights [B, h, Nq, Nk]
 * (alignments).  Padded query rows carry values. */
ag_tensor *ag_mha_cross_forward(const ag_mha *m, ag_tensor *x, ag_tensor *memory, const int32_t *memory_lengths,
                                ag_tensor *mask, ag_tensor **probs);

/* ---- Transformer encoder layer ---- */

typedef struct {
    int d_model, heads, d_ff;
    bool pre_norm;      /* x + f(LN(x)) (pre-LN), or LN(x + f(x)) (post-LN, the 2017 paper's) */
    double keep;        /* dropout keep probability on each sublayer's output; 0 reads as 1 */
    ag_act act;         /* the FFN's activation; AG_ACT_NONE reads as ReLU */
    double ln_eps;      /* 0 reads as 1e-5 */
    /* What later Transformers changed (LLaMA's block: pre_norm, rms_norm,
     * gated with AG_ACT_SILU, rope_base 10000).  All off: the 2017 block. */
    bool rms_norm;      /* ag_rmsnorm (gain, no bias) where ag_layernorm was */
    bool gated;         /* FFN (act(x Wa + ba) * (x Wv + bv)) W2 + b2 (GLU variants; act AG_ACT_NONE reads as SiLU:
                           SwiGLU), ffn.w1 [d, 2 d_ff] = [Wa | Wv] */
    double rope_base;   /* > 0: rotary positions on queries and keys (ag_rope, an even head width); 0: none */
    int kv_heads;       /* grouped-query attention: key-value heads, dividing heads (0: as many as heads) */
    bool recompute;     /* keep the layer's output alone and make the rest again in backward (ag_recompute):
                           less step memory for one more forward; not where probs are asked for.  The forward's
                           rng, lengths and mask must then last until backward (a model's rng, not a local's) */
    bool recompute_attention; /* the attention alone keeps no [B,h,N,N] probabilities (ag_mha's field): memory
                                 linear in the sequence, for one more Q K^T and softmax in backward */
    int window;         /* a causal stack's sliding window, for its cached forward (ag_mha's field); the mask the
                           layer is given says the same for the full forward.  0: none */
    bool alibi;         /* ALiBi distance penalties on the self-attention's scores (ag_mha's field) */
} ag_encoder_config;

/* Parameters: <scope>attn.*, ln1.gain, ln1.bias, ffn.w1, ffn.b1, ffn.w2,
 * ffn.b2, ln2.gain, ln2.bias (gains 1, biases 0; no ln*.bias with
 * rms_norm).  A pre-LN stack wants a final norm after its last layer (the
 * caller's: ag_encoder_norm). */
typedef struct {
    ag_encoder_config cfg;
    ag_mha attn;
    ag_tensor *ln1_g, *ln1_b, *w1, *b1, *w2, *b2, *ln2_g, *ln2_b;
} ag_encoder_layer;

ag_encoder_layer ag_encoder_layer_new(ag_params *ps, const ag_encoder_config *cfg, ag_rng *rng);
/* The norm c asks for over x's last axis: ag_rmsnorm(x, gain, eps) with
 * c->rms_norm, else ag_layernorm(x, gain, bias, eps) (eps c->ln_eps, 0:
 * 1e-5) - for a stack's final norm, made with ag_param_layernorm. */
ag_tensor *ag_encoder_norm(const ag_encoder_config *c, ag_tensor *x, ag_tensor *gain, ag_tensor *bias);
/* x [B, N, d] -> [B, N, d]: self-attention (lengths, mask as ag_mha_forward)
 * then the FFN act(x W1 + b1) W2 + b2, each with dropout (when training;
 * rng needed then) and a residual connection, normalised before or after.
 * With lengths, padded positions come out 0, and where an eighth of the
 * rows or more is padding every position-wise part (the projections, the
 * FFN, the norms, dropout) runs on the valid rows alone, so padding costs
 * no products; without, every position is valid. */
ag_tensor *ag_encoder_layer_forward(const ag_encoder_layer *l, ag_tensor *x, const int32_t *lengths, ag_tensor *mask,
                                    bool training, ag_rng *rng);
/* The same, and *probs (if not NULL) receives the self-attention's weights
 * [B, h, N, N] (as ag_mha_forward's), for heatmaps. */
ag_tensor *ag_encoder_layer_forward_probs(const ag_encoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                          ag_tensor *mask, bool training, ag_rng *rng, ag_tensor **probs);

/* ---- Transformer decoder layer ---- */

/* Vaswani et al. 2017's decoder layer: causal self-attention, then
 * cross-attention over the encoder's output (the memory), then the FFN,
 * each a residual sublayer with dropout, normalised before or after as the
 * config says (ag_encoder_config, every field read as the encoder's; the
 * self-attention takes rope_base, window, kv_heads and
 * recompute_attention, the cross-attention kv_heads and
 * recompute_attention).  Parameters: <scope>self.* (an encoder layer's:
 * attn.*, ln1.*, ffn.*, ln2.*) and cross.* (ag_mha_new_cross's), ln_cross.*
 * (the cross sublayer's norm).  torch's nn.TransformerDecoderLayer: norm1
 * is self.ln1, norm2 ln_cross, norm3 self.ln2. */
typedef struct {
    ag_encoder_layer self; /* the causal self-attention and the FFN, with their norms */
    ag_mha cross;
    ag_tensor *ln_cross_g, *ln_cross_b;
} ag_decoder_layer;

ag_decoder_layer ag_decoder_layer_new(ag_params *ps, const ag_encoder_config *cfg, ag_rng *rng);
/* x [B, Nt, d] (the target side, shifted right) of lengths (or NULL) and
 * memory [B, Ns, d] of memory_lengths (or NULL) -> [B, Nt, d].  The
 * self-attention is causal: position t reads positions 0..t (within
 * cfg.window), so a padded target position never reaches a valid one (mask
 * it in the loss).  With lengths, the padding comes out 0 and costs no
 * products, as the encoder layer's; memory_lengths masks the memory's
 * padding and projects its valid rows alone (each where an eighth of the
 * rows or more is padding).  training and rng as the encoder layer's; cfg.recompute keeps
 * the output alone (the lengths must then last until backward). */
ag_tensor *ag_decoder_layer_forward(const ag_decoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                    ag_tensor *memory, const int32_t *memory_lengths, bool training, ag_rng *rng);
/* The same, and *cross_probs (if not NULL) receives the cross-attention's
 * weights [B, h, Nt, Ns]: where each target position looked in the source. */
ag_tensor *ag_decoder_layer_forward_probs(const ag_decoder_layer *l, ag_tensor *x, const int32_t *lengths,
                                          ag_tensor *memory, const int32_t *memory_lengths, bool training,
                                          ag_rng *rng, ag_tensor **cross_probs);

/* ---- generation: a cache of keys and values ---- */

/* What a causal self-attention layer keeps of the positions it has read,
 * for generation a word at a time (ag_model_kind.lm_feed): their keys and
 * values, [capacity, 2d] rows of one sequence in an ag_buffer, so a new
 * word costs its own projections and one pass over the cache, not a
 * forward over the text so far.  One cache per layer.  A layer with a
 * sliding window (ag_mha.window = w) keeps only the last `capacity`
 * positions, position p in row p % capacity, so it reads on past its
 * capacity: a chunk of k positions needs capacity >= w + k - 1 (a word
 * at a time: capacity = w). */
typedef struct {
    ag_buffer *kv;
    int capacity, n; /* positions it has room for, read so far (n = 0 starts it over) */
    int batch;       /* sequences, each with capacity rows of its own, all at position n (0 reads as 1) */
} ag_kv_cache;

/* An empty cache for m's keys and values on device d; AG_ERR_NOMEM (with
 * ag_fail, *c zeroed) where d has no room. */
ag_status ag_kv_cache_init(ag_kv_cache *c, const ag_mha *m, int capacity, ag_device d);
/* The same for batch sequences decoded together, each call feeding each
 * the same number of positions (a batch of sources translated at once; a
 * sequence that has ended is fed anything, and its words ignored).  Every
 * call then reads each sequence's whole capacity, the rows not yet
 * written masked: size capacity to the longest output. */
ag_status ag_kv_cache_init_batch(ag_kv_cache *c, const ag_mha *m, int batch, int capacity, ag_device d);
/* A cross-attention layer's memory for generation (m: ag_mha_new_cross's):
 * the keys and values of memory [B, Ns, d], projected once into c (batch
 * B, capacity and n Ns, on memory's device) for every step of a decoding.
 * AG_ERR_NOMEM as ag_kv_cache_init. */
ag_status ag_kv_cache_memory(ag_kv_cache *c, const ag_mha *m, ag_tensor *memory);
void ag_kv_cache_free(ag_kv_cache *c);
/* Beam search's reordering: sequence s of c becomes what sequence from[s]
 * held (from [c->batch], each in [0, batch), repeats allowed), every row
 * of it; one gather on the cache's device.  For a self-attention's cache
 * and a memory's alike. */
void ag_kv_cache_select(ag_kv_cache *c, const int32_t *from);
/* Causal self-attention over x [S, n, d] (S: the cache's batch), the n
 * positions after the c->n read before: their keys and values join the
 * cache, and each reads the positions up to its own (within the window).
 * A chunk the cache cannot hold is refused by name, the cache unchanged.
 * The rows of ag_mha_forward over all c->n + n
 * positions with the mask ag_mask(PAST_INCL), to roundoff; no gradient
 * reaches earlier positions (the cache holds values, not the tape). */
ag_tensor *ag_mha_forward_cached(const ag_mha *m, ag_tensor *x, ag_kv_cache *c);
/* An encoder layer's evaluation-mode forward the same way: causal, cached. */
ag_tensor *ag_encoder_layer_forward_cached(const ag_encoder_layer *l, ag_tensor *x, ag_kv_cache *c);
/* A decoder layer's the same way: x [S, n, d], the n target positions
 * after the c->n before (c: a cache of l->self.attn for S sequences),
 * reading the memory from its cache (ag_kv_cache_memory(&memory,
 * &l->cross, encoder_output), made once for the whole decoding;
 * memory_lengths [S] or NULL); the rows of ag_decoder_layer_forward over
 * all c->n + n positions, to roundoff. */
ag_tensor *ag_decoder_layer_forward_cached(const ag_decoder_layer *l, ag_tensor *x, const ag_kv_cache *memory,
                                           const int32_t *memory_lengths, ag_kv_cache *c);
/* Cross-attention reading a memory's cache: ag_mha_cross_forward's rows
 * for x [S, n, d], without projecting the memory again. */
ag_tensor *ag_mha_cross_forward_cached(const ag_mha *m, ag_tensor *x, const ag_kv_cache *memory,
                                       const int32_t *memory_lengths);

/* Errors inside a layer name the caller's line, as an op's do. */
#ifndef AG_INTERNAL
#define ag_activate(...) AG_AT(ag_activate, __VA_ARGS__)
#define ag_valid_mask(...) AG_AT(ag_valid_mask, __VA_ARGS__)
#define ag_zero_padding(...) AG_AT(ag_zero_padding, __VA_ARGS__)
#define ag_max_over_time(...) AG_AT(ag_max_over_time, __VA_ARGS__)
#define ag_source2token(...) AG_AT(ag_source2token, __VA_ARGS__)
#define ag_add_sinusoidal_positions(...) AG_AT(ag_add_sinusoidal_positions, __VA_ARGS__)
#define ag_add_learned_positions(...) AG_AT(ag_add_learned_positions, __VA_ARGS__)
#define ag_mean_over_time(...) AG_AT(ag_mean_over_time, __VA_ARGS__)
#define ag_attention_pool(...) AG_AT(ag_attention_pool, __VA_ARGS__)
#define ag_source2token_weights(...) AG_AT(ag_source2token_weights, __VA_ARGS__)
#define ag_feature_map(...) AG_AT(ag_feature_map, __VA_ARGS__)
#define ag_mha_forward(...) AG_AT(ag_mha_forward, __VA_ARGS__)
#define ag_encoder_layer_forward(...) AG_AT(ag_encoder_layer_forward, __VA_ARGS__)
#define ag_encoder_norm(...) AG_AT(ag_encoder_norm, __VA_ARGS__)
#define ag_encoder_layer_forward_probs(...) AG_AT(ag_encoder_layer_forward_probs, __VA_ARGS__)
#define ag_mha_forward_cached(...) AG_AT(ag_mha_forward_cached, __VA_ARGS__)
#define ag_mha_cross_forward(...) AG_AT(ag_mha_cross_forward, __VA_ARGS__)
#define ag_decoder_layer_forward(...) AG_AT(ag_decoder_layer_forward, __VA_ARGS__)
#define ag_decoder_layer_forward_probs(...) AG_AT(ag_decoder_layer_forward_probs, __VA_ARGS__)
#define ag_decoder_layer_forward_cached(...) AG_AT(ag_decoder_layer_forward_cached, __VA_ARGS__)
#define ag_mha_cross_forward_cached(...) AG_AT(ag_mha_cross_forward_cached, __VA_ARGS__)
#define ag_kv_cache_memory(...) AG_AT_STATUS(ag_kv_cache_memory, __VA_ARGS__)
#define ag_kv_cache_select(...) AG_AT_STMT(ag_kv_cache_select, __VA_ARGS__)
#define ag_encoder_layer_forward_cached(...) AG_AT(ag_encoder_layer_forward_cached, __VA_ARGS__)
#define ag_bilstm(...) AG_AT(ag_bilstm, __VA_ARGS__)
#define ag_bigru(...) AG_AT(ag_bigru, __VA_ARGS__)
#define ag_last_positions(...) AG_AT(ag_last_positions, __VA_ARGS__)
#define ag_soft_align(...) AG_AT_STMT(ag_soft_align, __VA_ARGS__)
#define ag_soft_align_scores(...) AG_AT_STMT(ag_soft_align_scores, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif /* AG_LAYERS_H */
