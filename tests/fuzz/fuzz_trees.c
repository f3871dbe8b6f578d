/* fuzz_trees.c - SST's bracketed trees (ag_trees_load) on a file's bytes:
 * sentences and every phrase, SST-5 and SST-2 labels (the first byte's low
 * bits; a word limit by its fourth), then a vocabulary and the encoding, as the trainer does with
 * --phrases.  A line nests as deep as it likes: the parser's stack is its
 * own, never the C stack. */
#include "fuzz.h"
#include "attngrad/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ag_dataset ds;
    ag_tree_opts o = {.phrases = size > 0 && (data[0] & 1), .binary = size > 0 && (data[0] & 2),
                      .lowercase = size > 0 && (data[0] & 4), .max_line_bytes = 1 << 16,
                      .max_words = size > 0 && (data[0] & 8) ? 8 : 0};
    if (ag_trees_load_mem("fuzz", data, size, &o, &ds, err, sizeof err)) return 0;
    ag_vocab *v = NULL;
    ag_vocab_opts vo = {.min_count = 1};
    if (!ag_vocab_build(&ds, NULL, ds.n, &vo, &v, err, sizeof err)) {
        ag_dataset_encode(&ds, v, err, sizeof err);
        ag_vocab_free(v);
    }
    ag_dataset_free(&ds);
    return 0;
}
