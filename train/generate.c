/* generate.c - text from a trained language model: a prompt continued one
 * drawn word at a time (`attngrad generate`), as PyTorch's word-language-
 * model example does.  An LM that keeps a state between words
 * (ag_model_kind.lm_*: the built-in positional LM keeps its LSTMs' states
 * and what its context reads) is fed each word once, so a word is one step
 * of it.  Any other LM runs a forward over the prompt and the words so far
 * for each word: the models are causal, so the last position's logits are
 * the next word's distribution, and the model decodes that position alone
 * where it can (m->last_logits). */
#include "attngrad/train.h"
#include "internal.h"
#include "../models/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The word drawn from softmax(logits / temperature) over ids 2..V-1 (never
 * <pad> or <unk>) at u in [0, 1): the first id whose running share passes
 * u, so u walks the distribution in id order.  temperature 0: the
 * likeliest (the first of ties), as predict's "next". */
int ag__draw_word(const ag_real *logits, int V, double temperature, double u) {
    return ag__draw_word_top(logits, V, temperature, 0, 1, u, NULL);
}

static int by_logit_then_id(const void *pa, const void *pb) {
    const ag__ranked *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int by_id(const void *pa, const void *pb) {
    const ag__ranked *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* The words a draw may take, in order[0..m): every one (m = all) or, with
 * top_k or top_p, the likeliest first (ties by id), cut to top_k, then to
 * the fewest whose shares reach top_p of the kept ones' sum (top-k, then
 * top-p on what it kept, as Hugging Face's warpers run); at least one. */
static int kept_words(const ag_real *logits, int first, int n, double temperature, int top_k, double top_p,
                      ag__ranked *order) {
    for (int i = 0; i < n; i++) order[i] = (ag__ranked){logits[first + i], first + i};
    qsort(order, (size_t)n, sizeof *order, by_logit_then_id);
    int m = top_k > 0 && top_k < n ? top_k : n;
    if (top_p < 1) {
        double total = 0, run = 0;
        for (int i = 0; i < m; i++) total += exp((order[i].logit - order[0].logit) / temperature);
        for (int i = 0; i < m; i++) {
            run += exp((order[i].logit - order[0].logit) / temperature);
            if (run >= top_p * total) {
                m = i + 1;
                break;
            }
        }
    }
    qsort(order, (size_t)m, sizeof *order, by_id); /* u walks the kept words in id order, as all of them */
    return m;
}

int ag__draw_word_top(const ag_real *logits, int V, double temperature, int top_k, double top_p, double u,
                      ag__ranked *order) {
    int first = AG_UNK_ID + 1, n = V - first, best = first;
    for (int v = best + 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0 || n <= 1 || top_k == 1) return best;
    bool cut = order && ((top_k > 0 && top_k < n) || top_p < 1);
    int m = cut ? kept_words(logits, first, n, temperature, top_k, top_p, order) : n;
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp(((cut ? order[i].logit : logits[first + i]) - logits[best]) / temperature);
    double at = u * sum, run = 0;
    for (int i = 0; i < m; i++) {
        double share = exp(((cut ? order[i].logit : logits[first + i]) - logits[best]) / temperature);
        run += share;
        if (run > at && share > 0) return cut ? order[i].id : first + i;
    }
    return best; /* u * sum rounded past the last running sum; the likeliest is always kept */
}

/* The words of the prompt: the last row of b (a run trained on sentences
 * continues the line's last sentence), into ids; their count. */
static int prompt_ids(const ag_batch *b, int32_t *ids) {
    int last = b->rows - 1, n = b->lengths[last];
    memcpy(ids, b->tokens + (int64_t)last * b->width, (size_t)n * sizeof *ids);
    return n;
}

/* What the LM keeps between words (ag_model_kind.lm_*), how many of the
 * words it has read, and where they began among the words so far (past
 * cfg.max_len words the window moves on, and a state starts over at it). */
typedef struct {
    void *kept;
    int fed, from, capacity;
} lm_state;

/* lm_feed under ag_try, gradients off, as ag__line_forward runs a forward:
 * a failure (step memory refused) ends this line alone. */
typedef struct {
    ag_model *m;
    void *kept;
    const int32_t *ids;
    int n;
    ag_tensor *logits;
} feed_job;

static void run_feed(void *ctx) {
    feed_job *j = ctx;
    j->logits = j->m->kind->lm_feed(j->m, j->kept, j->ids, j->n);
}

/* The logits after ids[0..n) from the LM's state: the words from the
 * count it has read on fed to it. */
static int feed_logits(ag_model *m, lm_state *state, const int32_t *ids, int n, ag_tensor **logits, char *err,
                       size_t errlen) {
    feed_job j = {m, state->kept, ids + state->fed, n - state->fed, NULL};
    bool grads = ag_set_grad_enabled(false);
    ag_status st = ag_try(run_feed, &j);
    ag_set_grad_enabled(grads);
    if (!st && !j.logits) st = AG_ERR_ARG; /* lm_feed's ag_fail */
    *logits = j.logits;
    if (!st) state->fed = n;
    const char *msg = ag_errmsg();
    if (!strncmp(msg, "attngrad: ", 10)) msg += 10; /* the CLI names the program already */
    return st ? ag__train_fail(err, errlen, st, "%s", msg) : 0;
}

/* The logits after ids[0..n) from a one-row forward of them all in g,
 * asking for the last position's alone (m->last_logits). */
static int forward_logits(ag_model *m, ag_batch *g, const int32_t *ids, int n, ag_tensor **logits, char *err,
                          size_t errlen) {
    g->width = g->width_b = n;
    g->lengths[0] = n;
    memcpy(g->tokens, ids, (size_t)n * sizeof *ids);
    bool was = m->last_logits;
    m->last_logits = true;
    int rc = ag__line_forward(m, g, logits, err, errlen);
    m->last_logits = was;
    return rc;
}

/* A model of a run with --max-len N never saw more than N positions (a
 * table per position may have no more): it reads the last N words so far,
 * as a window that moves on with each word drawn.  A kept state that read
 * words now before the window starts over from the window's first. */
static int window_start(const ag_model *m, int n) {
    return m->cfg.max_len > 0 && n > m->cfg.max_len ? n - m->cfg.max_len : 0;
}

static void restart_state(ag_model *m, lm_state *state, int from) {
    m->kind->lm_state_free(state->kept);
    state->kept = m->kind->lm_state_new(m, state->capacity); /* NULL: a forward for each word from here */
    state->fed = 0, state->from = from;
}

/* The next word after ids[0..n): from the LM's state where it keeps one,
 * else from a forward. */
static int next_word(ag_model *m, lm_state *state, ag_batch *g, const int32_t *ids, int n, const ag_train_opts *o,
                     ag__ranked *order, ag_rng *rng, int *word, char *err, size_t errlen) {
    ag_tensor *logits;
    int from = window_start(m, n);
    if (state->kept && from != state->from) restart_state(m, state, from);
    if (!state->kept && !g->tokens) ag_model_batch_alloc(m, 1, state->capacity, g);
    int rc = state->kept ? feed_logits(m, state, ids + from, n - from, &logits, err, errlen)
                         : forward_logits(m, g, ids + from, n - from, &logits, err, errlen);
    int V = m->cfg.vocab;
    if (!rc && !(logits->ndim == 3 && logits->shape[0] == 1 && (logits->shape[1] == 1 || logits->shape[1] == n - from) &&
                 logits->shape[2] == V)) { /* a kind's callback broke its contract: say so, read nothing */
        char shape[64];
        rc = ag__train_fail(err, errlen, AG_ERR_ARG, "generate: model %s's %s gave logits %s after %d words, not [1,1,%d]%s",
                            m->kind->name, state->kept ? "lm_feed" : "forward", ag_shape_str(logits, shape, sizeof shape),
                            n - from, V, state->kept ? "" : " or [1,n,V]");
    }
    if (!rc) {
        int at = logits->shape[1] == 1 ? 0 : n - from - 1; /* [1,1,V] or a kind's [1,n,V] over the window */
        const ag_real *values = ag_host_values(logits) + (int64_t)at * V; /* the last position's */
        *word = ag__draw_word_top(values, V, o->temperature, o->top_k, o->top_p, ag_rng_uniform(rng), order);
    }
    ag_step_end();
    return rc;
}

int ag_generate_line(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, ag_rng *rng, FILE *out,
                     char *err, size_t errlen) {
    if (m->cfg.task != AG_TASK_LM) {
        fputc('\n', out); /* a line for every prompt line, as below */
        return ag__train_fail(err, errlen, AG_ERR_ARG, "generate continues text with a language model: model %s does %s",
                              m->kind->name, ag_task_name(m->cfg.task));
    }
    int rc = o->words >= 0 && isfinite(o->temperature) && o->temperature >= 0 && o->top_k >= 0 &&
                     o->top_p > 0 && o->top_p <= 1
                 ? ag__cut_line_end(line, err, errlen)
                 : ag__train_fail(err, errlen, AG_ERR_ARG,
                                  "generate: words %d, temperature %g and top_k %d must be >= 0, top_p %g in (0, 1]",
                                  o->words, o->temperature, o->top_k, o->top_p);
    if (rc || ag_tokenize(line, strlen(line), 0, NULL, 0) == 0) { /* a bad or a blank prompt: a blank line */
        fputc('\n', out);
        return rc;
    }
    ag_dataset ds;
    ag_batch b, g = {0};
    lm_state state = {0};
    int32_t *ids = NULL;
    ag__ranked *order = NULL; /* top_k's and top_p's ranking of the vocabulary */
    rc = ag__line_examples(m, vocab, o, line, &ds, &b, err, errlen);
    int most = rc ? 0 : b.lengths[b.rows - 1] + o->words;
    if (!rc && !(ids = malloc((size_t)most * sizeof *ids)))
        rc = ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for %d words", most);
    if (!rc && (o->top_k > 0 || o->top_p < 1) && !(order = malloc((size_t)m->cfg.vocab * sizeof *order)))
        rc = ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for a ranking of %d words", m->cfg.vocab);
    if (!rc) {
        int n = prompt_ids(&b, ids), eos = ag_vocab_find(vocab, AG_EOS_TOKEN, strlen(AG_EOS_TOKEN));
        state.capacity = m->cfg.max_len > 0 && most > m->cfg.max_len ? m->cfg.max_len : most; /* the window's */
        if (ag__kind_feeds(m->kind)) state.kept = m->kind->lm_state_new(m, state.capacity);
        /* without a state: a forward for each word, in g (next_word makes it) */
        for (int k = 0, word; k < o->words; k++) {
            if ((rc = next_word(m, &state, &g, ids, n, o, order, rng, &word, err, errlen)) || word == eos) break;
            fprintf(out, "%s%s", k ? " " : "", ag_vocab_token(vocab, word));
            ids[n++] = word;
        }
    }
    fputc('\n', out); /* after the words drawn before an error too */
    if (state.kept) m->kind->lm_state_free(state.kept);
    ag_model_batch_free(&g);
    free(ids);
    free(order);
    ag_batch_free(&b);
    ag_dataset_free(&ds);
    return rc;
}
