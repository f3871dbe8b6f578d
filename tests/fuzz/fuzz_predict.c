/* fuzz_predict.c - `attngrad predict`'s input into a tiny MPSAN (a
 * classifier, or a pair model when the first byte is odd) or, by the first
 * byte's third bit, a tiny positional LM that scores a line whole or (the
 * fourth bit) sentence by sentence, or (the fifth) continues it with
 * `generate`'s drawn words: read line by
 * line under a length limit and a word limit, checked for binary data as
 * the CLI does; a line may be refused, it must not hurt the next one. */
#include "fuzz.h"
#include "attngrad/train.h"
#include "../../train/internal.h"

#include <stdio.h>

static ag_model models[3]; /* classifier, pair, LM */
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
    const ag_model_kind *lm = ag_model_find("poslm");
    ag_model_config cfg = ag_model_tiny(lm);
    cfg.task = AG_TASK_LM;
    cfg.vocab = ag_vocab_size(vocab);
    if (ag_model_init(&models[2], lm, &cfg)) abort();
    sink = fopen("/dev/null", "w");
    if (!sink) abort();
}

/* The input as `attngrad predict` reads stdin: lines of at most 48 bytes
 * (ag_read_line, the limit of --max-line-bytes) and 6 words (ag_many_words,
 * --max-line-words), a longer one refused or cut (--long-lines, by the last
 * byte's second bit), each line predicted. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!vocab) setup();
    FILE *in = fmemopen((void *)data, size, "r");
    if (!in) return 0; /* an empty input: fmemopen refuses size 0 */
    ag_train_opts o = ag_train_opts_default();
    o.lowercase = size > 0 && (data[size - 1] & 1);
    o.max_line_bytes = 48;
    o.max_line_words = 6;
    if (size > 0 && (data[size - 1] & 2)) snprintf(o.long_lines, sizeof o.long_lines, "cut");
    int which = size > 0 && (data[0] & 4) ? 2 : size > 0 && (data[0] & 1);
    if (size > 0 && (data[0] & 8)) snprintf(o.lm_split, sizeof o.lm_split, "sentence");
    o.words = 3;
    o.temperature = size > 1 ? data[1] % 4 * 0.5 : 1; /* 0 (the likeliest) to 1.5 */
    ag_rng draws;
    ag_rng_seed(&draws, size);
    char *line = NULL, err[1024];
    size_t cap = 0, dropped, words;
    ssize_t n;
    while ((n = ag_read_line(in, &line, &cap, (size_t)o.max_line_bytes, &dropped)) >= 0) {
        if (n > o.max_line_bytes || cap > (size_t)o.max_line_bytes + 2) abort(); /* the bound is the point */
        if (dropped && ag_long_line(&o, line, &n, dropped, err, sizeof err)) continue;
        if (ag_data_find_junk(line, (size_t)n) >= 0) continue; /* refused before a model sees it */
        if (ag_many_words(&o, line, &n, &words, err, sizeof err)) continue;
        if (ag_tokenize(line, (size_t)n, 0, NULL, 0) > (size_t)o.max_line_words || (size_t)n != strlen(line)) abort();
        if (which == 2 && (data[0] & 16)) ag_generate_line(&models[2], vocab, &o, line, &draws, sink, err, sizeof err);
        else ag_predict_line(&models[which], vocab, &o, line, sink, err, sizeof err);
    }
    fclose(in);
    free(line);
    return 0;
}
