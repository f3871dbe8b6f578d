/* test_transformer_lm_model.c - examples/transformer_lm.c (included as is, registered through its ag_plugin_init),
 * in f64 on a padded batch of lengths 6, 1 and 4 (a length-1 sentence):
 * - causality: changing the tokens after position t (of every row) leaves every logit at positions <= t
 *   bit-identical and moves the ones at t + 1, with dropout off and on (the same masks: the model's rng restored);
 * - padding: the tokens at padded positions change nothing, and each row alone (at its own width) gives the
 *   logits it gives in the batch;
 * - the fused loss equals the cross-entropy of forward's logits, and forward's last-position logits (what
 *   generate asks for) are its full logits' at lengths - 1;
 * - an f64 gradient check of the loss through every parameter with the parameters drawn from U(-1, 1), every
 *   gradient resolved (>= 1e-6) but the keys' bias (a shift of a query's every score: exactly 0, unless rope turns
 *   it by position);
 * - word by word (its lm_feed, generate's path, each layer's keys and values cached): the logits after each
 *   prefix, fed in chunks of 4, 1, 2, 1, 1 and 1 words, are forward's at the prefix's last position; a word past
 *   the cache is refused, and a cache longer than the position table is not made;
 * - an input longer than its position table (--hparams ctx) is refused, by name.
 * Each check but the last runs seven times: on the 2017 block with learned positions, on the later one (--hparams
 * rope=10000,rms=1,glu=1: rotary positions, RMS norm, SwiGLU), whose word-by-word check also proves the cache's
 * keys turned to their own positions, on the later one with one key-value head (kv_heads=1: multi-query), and
 * with a sliding window of 3 positions, stored and recomputed (window=3, recompute_attn=1), whose word-by-word
 * check proves generate's cached steps read the window the full forward's mask allows, and with ALiBi's penalties
 * in place of the position table (alibi=1; with a window and one key-value head), which the cached steps build
 * for the rows they read. */
#include "../examples/transformer_lm.c"

#include "check.h"

enum { B = 3, N = 6 };
static const int32_t lengths[B] = {6, 1, 4};

static const char *block = NULL; /* the hparams of the block under test, before make's own */

static ag_model make(const char *hparams, double keep) {
    const ag_model_kind *kind = ag_model_find("tlm");
    ag_model_config c = ag_model_tiny(kind);
    static char both[128];
    snprintf(both, sizeof both, "%s%s%s", block ? block : "", block && hparams ? "," : "", hparams ? hparams : "");
    c.hparams = both[0] ? both : NULL, c.keep = keep, c.seed = 5;
    ag_model m;
    CHECK(ag_model_init(&m, kind, &c) == AG_OK, "%s", ag_errmsg());
    return m;
}

/* Row r: tokens 2 + (3r + t + shift) mod 8 at its valid positions t, 0 (<pad>) past them; targets the next token. */
static void fill(ag_batch *b, const int32_t *lens, int rows, int shift) {
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < b->width; t++) {
            b->tokens[r * b->width + t] = t < lens[r] ? 2 + (3 * r + t + shift) % 8 : 0;
            b->targets[r * b->width + t] = t < lens[r] ? 2 + (3 * r + t + 1) % 8 : 0;
        }
    for (int r = 0; r < rows; r++) b->lengths[r] = lens[r];
}

/* forward's logits [B,N,V] copied out of the step, from the model's rng as it was at `rng`. */
static void logits(ag_model *m, const ag_batch *b, bool training, ag_rng rng, ag_real *out) {
    m->rng = rng;
    ag_tensor *l = ag_model_forward(m, b, training);
    CHECK(l && l->ndim == 3 && l->shape[0] == b->rows && l->shape[1] == b->width, "forward: %s", ag_errmsg());
    if (l) memcpy(out, l->data, (size_t)l->size * sizeof *out);
    ag_step_end();
}

static void causal(double keep) {
    ag_model m = make(NULL, keep);
    int V = m.cfg.vocab;
    ag_batch b;
    ag_model_batch_alloc(&m, B, N, &b);
    ag_rng rng = m.rng;
    static ag_real base[B * N * 10], changed[B * N * 10];
    bool training = keep < 1;
    for (int t = 0; t < N - 1; t++) {
        fill(&b, lengths, B, 0);
        logits(&m, &b, training, rng, base);
        for (int r = 0; r < B; r++) /* every valid token after t: another word */
            for (int u = t + 1; u < lengths[r]; u++) b.tokens[r * N + u] = 2 + (b.tokens[r * N + u] - 2 + 3) % 8;
        logits(&m, &b, training, rng, changed);
        int same = 0, moved = 0;
        for (int r = 0; r < B; r++)
            for (int u = 0; u < lengths[r]; u++) {
                bool eq = !memcmp(base + (r * N + u) * V, changed + (r * N + u) * V, V * sizeof *base);
                if (u <= t) {
                    same += eq;
                    CHECK(eq, "keep %g: row %d position %d changed with the tokens after %d", keep, r, u, t);
                } else if (u == t + 1) {
                    moved += !eq;
                    CHECK(!eq, "keep %g: row %d position %d unchanged by its own token", keep, r, u);
                }
            }
        CHECK(same > 0 && moved > 0, "vacuous at t = %d", t); /* row 0 is full: position t + 1 is valid */
    }
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

static void padding(void) {
    ag_model m = make(NULL, 1);
    int V = m.cfg.vocab;
    ag_batch b;
    ag_model_batch_alloc(&m, B, N, &b);
    fill(&b, lengths, B, 0);
    static ag_real base[B * N * 10], junk[B * N * 10], alone[N * 10];
    logits(&m, &b, false, m.rng, base);
    for (int r = 0; r < B; r++) /* real words where the padding was */
        for (int u = lengths[r]; u < N; u++) b.tokens[r * N + u] = 2 + (r + u) % 8;
    logits(&m, &b, false, m.rng, junk);
    for (int r = 0; r < B; r++)
        CHECK(!memcmp(base + r * N * V, junk + r * N * V, (size_t)lengths[r] * V * sizeof *base),
              "row %d: the padded positions' tokens reach its valid positions", r);
    for (int r = 0; r < B; r++) { /* row r alone, at its own width */
        ag_batch one;
        ag_model_batch_alloc(&m, 1, lengths[r], &one);
        memcpy(one.tokens, b.tokens + r * N, (size_t)lengths[r] * sizeof *one.tokens);
        one.lengths[0] = lengths[r];
        logits(&m, &one, false, m.rng, alone);
        double worst = 0;
        for (int e = 0; e < lengths[r] * V; e++) worst = check_worst(worst, fabs(alone[e] - base[r * N * V + e]));
        CHECK(worst <= 1e-12, "row %d (length %d) alone: logits differ by %.3g from the batch's", r, lengths[r], worst);
        ag_model_batch_free(&one);
    }
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

static void loss_and_last(void) {
    ag_model m = make(NULL, 1);
    int V = m.cfg.vocab;
    ag_batch b;
    ag_model_batch_alloc(&m, B, N, &b);
    fill(&b, lengths, B, 0);
    ag_tensor *full = ag_model_forward(&m, &b, false);
    double fused = ag_item(ag_model_loss(&m, &b, false)), ce = ag_item(ag_cross_entropy(full, b.targets, AG_PAD_ID));
    CHECK_NEAR(fused, ce, 1e-13, 1e-12);
    m.last_logits = true;
    ag_tensor *last = ag_model_forward(&m, &b, false);
    m.last_logits = false;
    CHECK(last && last->ndim == 3 && last->shape[0] == B && last->shape[1] == 1 && last->shape[2] == V, "last_logits");
    for (int r = 0; last && r < B; r++)
        for (int v = 0; v < V; v++) CHECK_NEAR(last->data[r * V + v], full->data[(r * N + lengths[r] - 1) * V + v], 1e-13, 1e-12);
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

typedef struct { ag_model *m; ag_batch *b; } ctx;
static ag_tensor *loss_fn(void *p) { ctx *c = p; return ag_model_loss(c->m, c->b, false); }

static void gradcheck(void) {
    ag_model m = make(NULL, 1);
    ag_rng rng;
    ag_rng_seed(&rng, 11);
    for (int p = 0; p < m.params.count; p++)
        for (int64_t e = 0; e < m.params.items[p]->size; e++) m.params.items[p]->data[e] = 2 * ag_rng_uniform(&rng) - 1;
    ag_batch b;
    ag_model_batch_alloc(&m, B, N, &b);
    fill(&b, lengths, B, 0);
    ctx c = {&m, &b};
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(loss_fn, &c, m.params.items, m.params.count, &o);
    CHECK(r.ok, "parameter %s element %lld analytic %.12g numeric %.12g", m.params.items[r.worst_input]->name,
          (long long)r.worst_index, r.analytic, r.numeric);
    ag_params_zero_grad(&m.params);
    ag_backward(loss_fn(&c));
    int d = m.cfg.dim;
    for (int p = 0; p < m.params.count; p++) {
        ag_tensor *t = m.params.items[p];
        /* turned by its position (rope), the keys' bias is no longer a shift of every score alike */
        bool qkv_bias = strstr(t->name, "qkv.bias") != NULL && !block;
        double most = 0, keys = 0; /* the keys' bias is elements [d, 2d) of qkv.bias */
        for (int64_t e = 0; e < t->size; e++)
            if (qkv_bias && e >= d && e < 2 * d) keys = fmax(keys, fabs(t->grad[e]));
            else most = fmax(most, fabs(t->grad[e]));
        CHECK(most >= 1e-6, "%s: largest gradient %.3g, too small to check", t->name, most);
        if (qkv_bias) CHECK(keys <= 1e-12, "%s: the keys' bias has gradient %.3g, want 0", t->name, keys);
    }
    ag_step_end();
    printf("  gradcheck: %lld elements of %d parameters, max rel err %.2e\n", (long long)r.checked, m.params.count,
           r.max_rel_err);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

static void feed(void) {
    enum { LEN = 10 };
    static const int chunks[] = {4, 1, 2, 1, 1, 1};
    ag_model m = make("ctx=10", 1);
    int V = m.cfg.vocab;
    ag_batch b;
    ag_model_batch_alloc(&m, 1, LEN, &b);
    fill(&b, (int32_t[]){LEN}, 1, 0);
    CHECK(m.cfg.max_len == LEN, "the model says it reads %d positions (cfg.max_len %d): generate's window", LEN,
          m.cfg.max_len);
    void *st = m.kind->lm_state_new(&m, LEN);
    CHECK(st != NULL, "no state: %s", ag_errmsg());
    CHECK(m.kind->lm_state_new(&m, LEN + 1) == NULL, "a state past the 10 positions of the table");
    double worst = 0;
    for (size_t c = 0, fed = 0; st && c < sizeof chunks / sizeof *chunks; c++) {
        ag_tensor *got = m.kind->lm_feed(&m, st, b.tokens + fed, chunks[c]);
        fed += chunks[c];
        CHECK(got && got->ndim == 3 && got->shape[0] == 1 && got->shape[1] == 1 && got->shape[2] == V, "feed's logits");
        b.lengths[0] = b.width = (int)fed;
        m.last_logits = true;
        ag_tensor *want = ag_model_forward(&m, &b, false);
        m.last_logits = false;
        for (int v = 0; got && v < V; v++) worst = check_worst(worst, fabs(got->data[v] - want->data[v]));
        ag_step_end();
    }
    CHECK(worst <= 1e-12, "fed word by word, the logits differ from forward's by %.3g", worst);
    CHECK(st && m.kind->lm_feed(&m, st, b.tokens, 1) == NULL && strstr(ag_errmsg(), "feeding 1 words after 10"),
          "an 11th word: %s", ag_errmsg());
    printf("  fed word by word: logits within %.2e of forward's\n", worst);
    m.kind->lm_state_free(st);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* --hparams recompute=1 (each layer an ag_recompute region): in training with dropout, the loss and every
 * gradient are the plain model's, bit for bit. */
static void recompute(void) {
    double loss[2];
    ag_real *grads[2] = {NULL, NULL};
    int64_t total = 0;
    for (int k = 0; k < 2; k++) {
        ag_model m = make(k ? "recompute=1" : NULL, 0.7);
        CHECK(((tlm *)m.impl)->layer[0].cfg.recompute == k, "recompute=%d not in the layers' config", k);
        ag_batch b;
        ag_model_batch_alloc(&m, B, N, &b);
        fill(&b, lengths, B, 0);
        ag_rng_seed(&m.rng, 3);
        ag_tensor *l = ag_model_loss(&m, &b, true);
        loss[k] = ag_item(l);
        ag_backward(l);
        total = 0;
        for (int p = 0; p < m.params.count; p++) total += m.params.items[p]->size;
        grads[k] = malloc((size_t)total * sizeof(ag_real));
        for (int p = 0, at = 0; p < m.params.count; at += (int)m.params.items[p]->size, p++)
            memcpy(grads[k] + at, m.params.items[p]->grad, (size_t)m.params.items[p]->size * sizeof(ag_real));
        ag_step_end();
        ag_model_batch_free(&b);
        ag_model_free(&m);
    }
    CHECK(loss[0] == loss[1] && !memcmp(grads[0], grads[1], (size_t)total * sizeof(ag_real)),
          "recompute=1: loss %.17g against %.17g, or gradients not the same bits", loss[1], loss[0]);
    free(grads[0]);
    free(grads[1]);
}

static void too_long(void) {
    ag_model m = make("ctx=4", 1);
    ag_batch b;
    ag_model_batch_alloc(&m, B, N, &b);
    fill(&b, lengths, B, 0);
    CHECK(ag_model_forward(&m, &b, false) == NULL && strstr(ag_errmsg(), "6 positions, more than the 4"),
          "a batch 6 wide at ctx=4: %s", ag_errmsg());
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

int main(void) {
    ag_set_num_threads(1);
    CHECK(ag_plugin_init() == AG_OK, "%s", ag_errmsg());
    CHECK(ag_model_tiny(ag_model_find("tlm")).vocab == 10, "the buffers below hold a vocabulary of 10");
    static const char *blocks[] = {NULL, "rope=10000,rms=1,glu=1", "rope=10000,rms=1,glu=1,kv_heads=1", "window=3",
                                   "rope=10000,rms=1,glu=1,window=3,recompute_attn=1", "alibi=1",
                                   "alibi=1,window=3,kv_heads=1"};
    for (int k = 0; k < 7; k++) {
        block = blocks[k];
        printf("%s%s:\n", block ? "--hparams " : "the 2017 block", block ? block : "");
        causal(1);
        causal(0.7);
        padding();
        loss_and_last();
        gradcheck();
        feed();
        recompute();
    }
    block = NULL;
    too_long();
    ag_shutdown();
    return check_summary("test_transformer_lm_model");
}
