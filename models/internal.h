/* internal.h - what models/ shares with the trainer, the tools and the tests
 * but does not publish in include/attngrad/: the built-in models' flag
 * names, the positional LM's inspection hook, and which kinds generate
 * from a kept state. */
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

/* Does kind keep a state for generation (ag_model_kind.lm_*)?  False for
 * a kind built against model API 1, whose struct ends before those fields. */
bool ag__kind_feeds(const ag_model_kind *kind);
/* The kind's hparams list: NULL for a kind built before API 3, whose
 * struct ends before it. */
static inline const char *ag__kind_hparams(const ag_model_kind *kind) {
    return kind->abi / 100 >= 3 ? kind->hparams : NULL;
}

#endif
