/* fuzz_predict.c - one line of `attngrad predict` into a tiny MPSAN (a
 * classifier, or a pair model when the first byte is odd), checked for
 * binary data first as the CLI does; the line may be refused, it must not
 * hurt the next one. */
#include "fuzz.h"
#include "../../models/train.h"

#include <stdio.h>

static ag_model models[2];
static ag_vocab *vocab;
static FILE *sink;

static void setup(void) {
    ag_set_num_threads(1);
    const char *words[] = {"<pad>", "<unk>", "<eos>", "w1", "w2", "w3", "A", "B"};
    char err[256];
    if (ag_vocab_from_list(words, 8, &vocab, err, sizeof err)) abort();
    for (int i = 0; i < 2; i++) {
        const ag_model_kind *kind = ag_model_find("mpsan");
        ag_model_config cfg = ag_model_task_defaults(kind, i ? AG_TASK_PAIR : AG_TASK_CLASSIFY);
        ag_model_config tiny = ag_model_tiny(kind);
        cfg.dim = tiny.dim, cfg.hidden = tiny.hidden, cfg.heads = tiny.heads;
        cfg.vocab = ag_vocab_size(vocab);
        cfg.classes = 3;
        if (ag_model_init(&models[i], kind, &cfg)) abort();
    }
    sink = fopen("/dev/null", "w");
    if (!sink) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vocab) setup();
    if (ag_data_find_junk((const char *)data, size) >= 0) return 0; /* refused before a model sees it */
    char *line = fuzz_cstring(data, size), err[1024];
    ag_train_opts o = ag_train_opts_default();
    o.lowercase = size > 0 && (data[size - 1] & 1);
    ag_predict_line(&models[size > 0 && (data[0] & 1)], vocab, &o, line, sink, err, sizeof err);
    free(line);
    return 0;
}
