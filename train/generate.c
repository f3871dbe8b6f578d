/* generate.c - text from a trained language model: a prompt continued one
 * drawn word at a time (`attngrad generate`), as PyTorch's word-language-
 * model example does.  Each word is a forward over the prompt and the
 * words so far: the models are causal, so the last position's logits are
 * the next word's distribution, and no model needs a cache of its own.
 * The model decodes that position alone where it can (m->last_logits). */
#include "attngrad/train.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The word drawn from softmax(logits / temperature) over ids 2..V-1 (never
 * <pad> or <unk>) at u in [0, 1): the first id whose running share passes
 * u, so u walks the distribution in id order.  temperature 0: the
 * likeliest (the first of ties), as predict's "next". */
int ag__draw_word(const ag_real *logits, int V, double temperature, double u) {
    int best = AG_UNK_ID + 1;
    for (int v = best + 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0 || V <= AG_UNK_ID + 2) return best;
    double sum = 0;
    for (int v = AG_UNK_ID + 1; v < V; v++) sum += exp((logits[v] - logits[best]) / temperature);
    double at = u * sum, run = 0;
    for (int v = AG_UNK_ID + 1; v < V; v++) {
        double share = exp((logits[v] - logits[best]) / temperature);
        run += share;
        if (run > at && share > 0) return v;
    }
    return best; /* u * sum rounded past the last running sum */
}

/* The words of the prompt: the last row of b (a run trained on sentences
 * continues the line's last sentence), into ids; their count. */
static int prompt_ids(const ag_batch *b, int32_t *ids) {
    int last = b->rows - 1, n = b->lengths[last];
    memcpy(ids, b->tokens + (int64_t)last * b->width, (size_t)n * sizeof *ids);
    return n;
}

/* The next word after ids[0..n): a one-row forward of them in g, asking
 * the model for the last position's logits alone (m->last_logits). */
static int next_word(ag_model *m, ag_batch *g, const int32_t *ids, int n, const ag_train_opts *o, ag_rng *rng,
                     int *word, char *err, size_t errlen) {
    g->width = g->width_b = n;
    g->lengths[0] = n;
    memcpy(g->tokens, ids, (size_t)n * sizeof *ids);
    ag_tensor *logits;
    bool was = m->last_logits;
    m->last_logits = true;
    int rc = ag__line_forward(m, g, &logits, err, errlen);
    m->last_logits = was;
    if (!rc) {
        int V = logits->shape[2], at = logits->shape[1] == 1 ? 0 : n - 1; /* [1,1,V] or a kind's [1,n,V] */
        const ag_real *values = ag_host_values(logits) + (int64_t)at * V; /* the last position's */
        *word = ag__draw_word(values, V, o->temperature, ag_rng_uniform(rng));
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
    int rc = o->words >= 0 && isfinite(o->temperature) && o->temperature >= 0
                 ? ag__cut_line_end(line, err, errlen)
                 : ag__train_fail(err, errlen, AG_ERR_ARG, "generate: words %d and temperature %g must be >= 0", o->words,
                                  o->temperature);
    if (rc || ag_tokenize(line, strlen(line), 0, NULL, 0) == 0) { /* a bad or a blank prompt: a blank line */
        fputc('\n', out);
        return rc;
    }
    ag_dataset ds;
    ag_batch b, g = {0};
    int32_t *ids = NULL;
    rc = ag__line_examples(m, vocab, o, line, &ds, &b, err, errlen);
    int most = rc ? 0 : b.lengths[b.rows - 1] + o->words;
    if (!rc && !(ids = malloc((size_t)most * sizeof *ids)))
        rc = ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for %d words", most);
    if (!rc) {
        int n = prompt_ids(&b, ids), eos = ag_vocab_find(vocab, AG_EOS_TOKEN, strlen(AG_EOS_TOKEN));
        ag_model_batch_alloc(m, 1, most, &g);
        for (int k = 0, word; k < o->words; k++) {
            if ((rc = next_word(m, &g, ids, n, o, rng, &word, err, errlen)) || word == eos) break;
            fprintf(out, "%s%s", k ? " " : "", ag_vocab_token(vocab, word));
            ids[n++] = word;
        }
    }
    fputc('\n', out); /* after the words drawn before an error too */
    ag_model_batch_free(&g);
    free(ids);
    ag_batch_free(&b);
    ag_dataset_free(&ds);
    return rc;
}
