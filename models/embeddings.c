/* embeddings.c - a model's word embedding from pretrained vectors
 * (ag_vectors_read): the rows of the words found are the vectors, the other
 * words draw theirs from U(-0.05, 0.05) as the MPSAN and MTSA papers do, and
 * the pad row is zero. */
#include "attngrad/model.h"
#include "internal.h"

#include <string.h>

#define OOV_BOUND 0.05 /* U(-0.05, 0.05) for the words the file lacks (docs/models.md, Conventions) */

ag_tensor *ag_model_embedding(const ag_model *m) {
    ag_tensor *t = ag_params_find(&m->params, "embed.weight");
    if (!t || t->ndim != 2) {
        ag_fail(AG_ERR_ARG, "model %s has no word embedding (a parameter 'embed.weight' [V, d])", m->kind->name);
        return NULL;
    }
    return t;
}

ag_status ag_embedding_from_vectors(ag_tensor *table, const ag_vectors *v, int pad_id, ag_rng *rng) {
    char shape[64];
    if (table->ndim != 2 || table->shape[0] != v->vocab || table->shape[1] < v->dim)
        return ag_fail(AG_ERR_SHAPE, "embedding '%s' is %s, but the vectors are %d-dimensional for a vocabulary of %d",
                       table->name ? table->name : "(unnamed)", ag_shape_str(table, shape, sizeof shape), v->dim,
                       v->vocab);
    /* A wider table (--dim above the file's, e.g. MS-SAN's multiple of 6
     * heads) keeps each vector whole in its first v->dim columns and draws
     * the rest like a missing word's; draws go row by row, column by column,
     * so a table of the file's width draws exactly as before. */
    int64_t d = table->shape[1];
    for (int32_t id = 0; id < v->vocab; id++) {
        ag_real *row = table->data + id * d;
        const float *vec = v->rows + id * (int64_t)v->dim;
        for (int64_t j = 0; j < d; j++)
            row[j] = id == pad_id                  ? 0
                     : v->found[id] && j < v->dim ? (ag_real)vec[j]
                                                   : (ag_real)(-OOV_BOUND + 2 * OOV_BOUND * ag_rng_uniform(rng));
    }
    return AG_OK;
}
