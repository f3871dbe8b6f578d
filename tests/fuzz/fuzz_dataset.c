/* fuzz_dataset.c - one data loader (FUZZ_FORMAT: labeled, sick, conllu or
 * lm) on a file's bytes; what loads is then given a vocabulary and encoded,
 * as the trainer does with a training split. */
#include "fuzz.h"
#include "attngrad/data.h"

static void load(const uint8_t *data, size_t size, int skip) {
    char err[512];
    ag_dataset ds;
    ag_load_opts o = ag_load_opts_default();
    o.lowercase = size > 0 && data[0] & 1;
    o.skip_bad_lines = skip;
    o.max_line_bytes = 1 << 16;
    o.max_words = size > 0 && data[0] & 2 ? 8 : 0; /* the word limit, or none */
    o.lm_sentences = size > 0 && data[0] & 4;          /* LM: a sentence an example */
    o.lm_max_len = size > 0 && data[0] & 8 ? 3 : 35;   /* windows that cut */
    if (ag_dataset_load_mem("fuzz", data, size, FUZZ_FORMAT, &o, NULL, &ds, err, sizeof err)) return;
    for (int64_t i = 0; o.max_words && FUZZ_FORMAT != AG_FORMAT_LM && i < ds.n; i++)
        if (ds.ex[i].full_len + ds.ex[i].len_b > o.max_words) abort(); /* the bound is the point */
    ag_vocab *v = NULL;
    ag_vocab_opts vo = {.min_count = 1};
    if (!ag_vocab_build(&ds, NULL, ds.n, &vo, &v, err, sizeof err)) {
        ag_dataset_encode(&ds, v, err, sizeof err);
        ag_vocab_free(v);
    }
    ag_dataset_free(&ds);
}

/* Loads with bad lines an error, then skipped (the paths differ at the end
 * of a file); lower-casing, a word limit and the LM's splitting and
 * windows from the first byte. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    for (int skip = 0; skip < 2; skip++) load(data, size, skip);
    return 0;
}
