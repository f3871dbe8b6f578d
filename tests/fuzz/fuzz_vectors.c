/* fuzz_vectors.c - a pretrained vectors file (--embeddings), in whichever of
 * the three formats the reader takes it for, against a small vocabulary
 * with capitalised and non-ASCII words, so that the lowercase fallback runs.
 * What loads must be consistent: every word found has a finite row, a word
 * not found a zero one, and the counts match the flags. */
#include "fuzz.h"
#include "attngrad/data.h"

#include <math.h>

static const char *const WORDS[] = {"<pad>", "<unk>", "the", "The", "THE", "cat", "Cat", "\xc3\xbc" "ber", "a", "b"};
enum { V = sizeof WORDS / sizeof *WORDS };

static void check(const ag_vectors *v) {
    int32_t exact = 0, lower = 0;
    for (int32_t id = 0; id < v->vocab; id++) {
        const float *row = v->rows + (size_t)id * (size_t)v->dim;
        for (int32_t j = 0; j < v->dim; j++)
            if (v->found[id] ? !isfinite(row[j]) : row[j] != 0) abort();
        exact += v->found[id] == AG_VEC_EXACT;
        lower += v->found[id] == AG_VEC_LOWER;
    }
    if (v->vocab != V || v->dim < 1 || exact != v->n_exact || lower != v->n_lower || v->found[AG_PAD_ID] ||
        v->found[AG_UNK_ID])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ag_vocab *vocab;
    char err[512];
    if (!vocab && ag_vocab_from_list(WORDS, V, &vocab, err, sizeof err)) abort();
    ag_vec_opts o = {.exact_only = size & 1, .max_dim = 4096}; /* the fallback on and off, by the length */
    ag_vectors v;
    if (ag_vectors_read_mem("vectors", data, size, vocab, &o, &v, err, sizeof err)) {
        if (v.rows || v.found || v.dim) abort(); /* nothing half-loaded */
        return 0;
    }
    check(&v);
    ag_vectors_free(&v);
    return 0;
}
