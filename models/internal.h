/* internal.h - what models/ shares with the trainer, the tools and the tests
 * but does not publish in include/attngrad/: the built-in models' flag
 * names, and the positional LM's inspection hook and word-by-word stepper. */
#ifndef AG_MODELS_INTERNAL_H
#define AG_MODELS_INTERNAL_H

#include "../include/attngrad/model.h"

/* Is name[0..len) one of the built-in models' --flags names? */
bool ag__flag_is_builtin(const char *name, size_t len);

/* The positional LM's attention in its last forward, for heatmaps and
 * tests (step-arena tensors: valid until ag_step_end).  *mu [B,N] is the
 * Gaussian mean (NULL unless AG_LM_POSITIONAL); *weights [B,N(t),N(i)] the
 * weight of h_i in c_t (NULL for AG_LM_NONE).  Either pointer may be NULL. */
void ag__poslm_attention(const ag_model *m, ag_tensor **mu, ag_tensor **weights);

/* The positional LM word by word, for generation: its LSTMs' states and
 * what its context reads of every earlier position, kept between calls,
 * so that a word costs one step of the LSTMs and a one-row decoder, not a
 * forward over the prompt so far.  state_new: room for `capacity`
 * positions; NULL when m is not poslm (generate then runs forward with
 * m->last_logits) or memory is short.  feed: ids[0..n) after the
 * positions fed before, evaluation mode; the next word's logits [1,1,V]
 * (step memory), the values forward gives at the last position to
 * roundoff. */
typedef struct ag__lm_state ag__lm_state;
ag__lm_state *ag__poslm_state_new(const ag_model *m, int capacity);
ag_tensor *ag__poslm_feed(ag_model *m, ag__lm_state *s, const int32_t *ids, int n);
int ag__lm_state_count(const ag__lm_state *s); /* positions fed so far */
void ag__poslm_state_free(ag__lm_state *s);

#endif
