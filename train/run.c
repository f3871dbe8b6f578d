/* run.c - using a finished (or interrupted) run: its options for --resume,
 * its model for eval, and predictions for lines of text. */
#include "attngrad/train.h"
#include "internal.h"
#include "../distributed/dist.h"
#include "../data/internal.h" /* ag__ds_*: a dataset made from typed lines */
#include "../graph/internal.h" /* ag__arena_alloc: host copies of GPU values */
#include "../ops/softmax_rows.h" /* ag__max_row */

#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A checkpoint read and verified (ag_st_read), with a note when some of
 * its tensors carry no checksum (a run saved before checksums, or a file
 * re-written by another tool), or when they all do but the file is not
 * sealed whole: a run saved before the seal, whose config and metrics
 * history no checksum covers.  Such files load (runs of before keep
 * working); the note says what was not verified. */
static int open_checkpoint(const char *path, ag_st_file *f, bool note, char *err, size_t errlen) {
    if (ag_st_read(path, f)) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
    if (note && f->unchecked)
        fprintf(stderr, "note: %s: %d of its %d tensors carry no checksum: they load unverified\n", path, f->unchecked,
                f->count);
    else if (note && !f->sealed)
        fprintf(stderr, "note: %s: not sealed whole (saved before attngrad.file_crc32c): its tensors are verified, its "
                "header (the config, the metrics history) loads unverified\n", path);
    return 0;
}

/* Tensors attngrad writes besides parameters: never "extra" in a file. */
static bool own_extra(const char *name) {
    static const char *const prefixes[] = {"optim.", "sched.", "grad.", "batch."};
    for (int i = 0; i < 4; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return true;
    return !strcmp(name, "loss");
}

int ag_params_match(const ag_st_file *f, const ag_params *ps, bool strict, FILE *report, char *err, size_t errlen) {
    int missing = 0, shape = 0, dtype = 0, extra = 0, converted = 0;
    ag_dtype real = sizeof(ag_real) == 8 ? AG_F64 : AG_F32;
    unsigned from = 0; /* bit per dtype converted */
    char a[128], b[128];
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *p = ps->items[i];
        const ag_st_tensor *t = ag_st_get(f, p->name);
        bool same = t && t->ndim == p->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!t) {
            missing++;
            fprintf(report, "  missing:  '%s' %s is not in the file\n", p->name, ag_shape_str(p, a, sizeof a));
        } else if (!same) {
            shape++;
            fprintf(report, "  shape:    '%s' is %s in the file, %s in the model\n", p->name, ag_st_shape_str(t, b, sizeof b),
                    ag_shape_str(p, a, sizeof a));
        } else if (!ag_dtype_is_float(t->dtype)) {
            dtype++;
            fprintf(report, "  dtype:    '%s' is %s in the file, not a float type (F32, F64, F16, BF16)\n", p->name,
                    ag_dtype_name(t->dtype));
        } else if (t->dtype != real) {
            converted++;
            from |= 1u << t->dtype;
        }
    }
    for (int i = 0; strict && i < f->count; i++) {
        const ag_st_tensor *t = &f->tensors[i];
        if (ag_params_find(ps, t->name) || own_extra(t->name)) continue;
        extra++;
        fprintf(report, "  extra:    '%s' %s %s is no parameter of the model\n", t->name, ag_dtype_name(t->dtype),
                ag_st_shape_str(t, b, sizeof b));
    }
    if (missing + shape + dtype + extra) {
        const int counts[4] = {missing, shape, dtype, extra};
        const char *what[4] = {"missing", "of another shape", "not float", "extra"};
        char sum[160] = "";
        for (int k = 0, n = 0; k < 4; k++)
            if (counts[k]) n += snprintf(sum + n, sizeof sum - (size_t)n, "%s%d %s", n ? ", " : "", counts[k], what[k]);
        return ag__train_fail(err, errlen, AG_ERR_SHAPE, "%s does not fit the model's %d parameters: %s (each listed above)",
                             f->path, ps->count, sum);
    }
    if (converted) {
        char types[64] = "";
        for (int k = 0, n = 0; k < 32; k++)
            if (from >> k & 1) n += snprintf(types + n, sizeof types - (size_t)n, "%s%s", n ? " or " : "", ag_dtype_name((ag_dtype)k));
        fprintf(report, "note: %s: %d of the %d parameters are %s, converted to %s\n", f->path, converted, ps->count, types,
                ag_dtype_name(real));
    }
    return 0;
}

int ag_checkpoint_fits(const char *path, const ag_model_kind *kind, const ag_model_config *cfg, bool strict,
                       bool note, char *err, size_t errlen) {
    ag_st_file f;
    int rc = open_checkpoint(path, &f, note, err, errlen);
    if (rc) return rc;
    ag_model shapes;
    if (ag_model_shapes(&shapes, kind, cfg)) rc = ag__train_fail(err, errlen, AG_ERR_ARG, "%s: %s", path, ag_errmsg());
    else rc = ag_params_match(&f, &shapes.params, strict, stderr, err, errlen);
    ag_model_free(&shapes);
    ag_st_close(&f);
    return rc;
}

/* The device the run's steps ran on, its config's state.device (train/
 * run_folder.c), as --device names it: "cuda", or "" for the CPU and for
 * a run saved before it was recorded. */
static void recorded_device(const char *config, ag_train_opts *o) {
    static const char key[] = "\nstate.device=cuda";
    const char *at = config ? strstr(config, key) : NULL;
    if (at && (at[sizeof key - 1] == '\n' || !at[sizeof key - 1])) snprintf(o->device, sizeof o->device, "cuda");
}

/* The "config" metadata of a checkpoint parsed into o (on top of defaults);
 * with device, the device the run trained on too. */
static int read_config(const char *ckpt, ag_train_opts *o, bool device, char *err, size_t errlen) {
    ag_st_file f;
    if (open_checkpoint(ckpt, &f, true, err, errlen)) return AG_ERR_FORMAT;
    const char *config = ag_st_meta(&f, "config");
    int rc = config ? 0 : ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s: no 'config' metadata: not a checkpoint of attngrad train", ckpt);
    *o = ag_train_opts_default();
    if (!rc) rc = ag_train_opts_parse(o, config, ckpt, err, errlen);
    if (!rc && device) recorded_device(config, o);
    ag_st_close(&f);
    return rc;
}

int ag_run_config(const char *out, ag_train_opts *o, char *err, size_t errlen) {
    char path[AG_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/last.safetensors", out);
    if (access(path, F_OK) == 0) return read_config(path, o, true, err, errlen);
    snprintf(path, sizeof path, "%s/fold0/last.safetensors", out);
    if (access(path, F_OK) != 0)
        return ag__train_fail(err, errlen, AG_ERR_IO, "%s: no run to resume here (no last.safetensors)", out);
    int rc = read_config(path, o, true, err, errlen);
    o->fold = -1; /* a cross-validation run over all folds */
    return rc;
}

int ag_load_run(const char *ckpt, const char *vocab_path, ag_train_opts *o, ag_model *m, ag_vocab **vocab, char *err,
                size_t errlen) {
    memset(m, 0, sizeof *m);
    *vocab = NULL;
    int rc = read_config(ckpt, o, false, err, errlen); /* eval and predict run where --device says */
    if (rc) return rc;
    if (o->vocab <= 0) /* train always records it: without it the vocab.txt check below means nothing */
        return ag__train_fail(err, errlen, AG_ERR_FORMAT,
                             "%s: its 'config' metadata has no vocab entry (the vocabulary size, as vocab=N)", ckpt);
    char path[AG_PATH_MAX + 16], copy[AG_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", ckpt);
    if (!vocab_path) snprintf(path, sizeof path, "%s/vocab.txt", dirname(copy));
    else snprintf(path, sizeof path, "%s", vocab_path);
    if ((rc = ag_vocab_load(path, vocab, err, errlen))) return rc;
    char fp[sizeof o->vocab_fp];
    snprintf(fp, sizeof fp, "%016" PRIx64, ag_vocab_fingerprint(*vocab));
    if (ag_vocab_size(*vocab) != o->vocab) {
        rc = ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s: %d words, but %s was trained with a vocabulary of %d", path,
                  ag_vocab_size(*vocab), ckpt, o->vocab);
    } else if (o->vocab_fp[0] && strcmp(fp, o->vocab_fp)) { /* runs before the fingerprint was recorded: size only */
        rc = ag__train_fail(err, errlen, AG_ERR_FORMAT,
                           "%s is not the vocabulary %s was trained with (same size, but its words or their order "
                           "differ: fingerprint %s, the checkpoint's %s)", path, ckpt, fp, o->vocab_fp);
    } else {
        ag_model_config cfg;
        rc = ag_train_resolve(o, &cfg, err, errlen);
        if (rc) { /* the config's model or task is wrong: name the checkpoint that holds it */
            char why[512];
            snprintf(why, sizeof why, "%s", err);
            ag__train_fail(err, errlen, rc, "%s: bad 'config' metadata: %s", ckpt, why);
        }
        /* names and shapes first: a small file whose config asks for a huge
         * model is refused before that model's memory is taken */
        if (!rc) rc = ag_checkpoint_fits(ckpt, ag_model_find(o->model), &cfg, false, false, err, errlen);
        if (!rc && ag_model_init(m, ag_model_find(o->model), &cfg))
            rc = ag__train_fail(err, errlen, AG_ERR_ARG, "%s: %s", ckpt, ag_errmsg());
        if (!rc && ag_checkpoint_load(ckpt, &m->params, NULL, NULL, NULL))
            rc = ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s", ag_errmsg());
        if (!rc) rc = ag_train_use_device(o, &m->params, err, errlen);
    }
    if (rc) {
        ag_model_free(m);
        ag_vocab_free(*vocab);
        *vocab = NULL;
    }
    return rc;
}

/* ---- lines of input, bounded ---- */

ssize_t ag_read_line(FILE *in, char **buf, size_t *cap, size_t max, size_t *dropped) {
    size_t n = 0;
    int c = EOF;
    *dropped = 0;
    while ((c = getc_unlocked(in)) != EOF) {
        if (n < max) {
            if (n + 2 > *cap) { /* grows to max + 2 at most: a longer line is never held */
                size_t grown = *cap ? 2 * *cap : 256;
                if (grown > max + 2) grown = max + 2;
                char *b = realloc(*buf, grown);
                if (!b) ag__fatal("ag_read_line", "out of memory for a line of %zu bytes", grown);
                *buf = b;
                *cap = grown;
            }
            (*buf)[n++] = (char)c;
        } else {
            (*dropped)++;
        }
        if (c == '\n') break;
    }
    if (n == 0 && c == EOF && !*dropped) return -1;
    if (!*buf) {
        if (!(*buf = malloc(1))) ag__fatal("ag_read_line", "out of memory");
        *cap = 1;
    }
    (*buf)[n] = 0;
    return (ssize_t)n;
}

int ag_long_line(const ag_train_opts *o, char *line, ssize_t *n, size_t dropped, char *err, size_t errlen) {
    size_t max = (size_t)(o->max_line_bytes > 0 ? o->max_line_bytes : AG_MAX_LINE_BYTES);
    if (strcmp(o->long_lines, "cut")) {
        ag__train_fail(err, errlen, AG_ERR_FORMAT,
                      "line longer than %zu bytes (%zu more): refused before reading it into memory "
                      "(--max-line-bytes N reads longer lines, --long-lines cut predicts its start)", max, dropped);
        return 1;
    }
    ssize_t k = *n;
    while (k > 0 && line[k - 1] != ' ' && line[k - 1] != '\t') k--; /* no word cut in two */
    if (k > 0) *n = k;
    line[*n] = 0;
    return 0;
}

int ag_many_words(const ag_train_opts *o, char *line, ssize_t *n, size_t *words, char *err, size_t errlen) {
    int64_t limit = ag_line_word_limit(o);
    *words = ag_tokenize(line, (size_t)*n, 0, NULL, 0);
    if (limit <= 0 || *words <= (size_t)limit) return 0;
    size_t max = (size_t)limit;
    const char *tab = memchr(line, '\t', (size_t)*n);
    ag_span *spans = strcmp(o->long_lines, "cut") ? NULL : malloc(max * sizeof *spans); /* a cut line's only */
    size_t end = spans ? (ag_tokenize(line, (size_t)*n, 0, spans, max), spans[max - 1].start + spans[max - 1].len) : 0;
    bool cut = spans != NULL;
    free(spans);
    if (!cut || (tab && (size_t)(tab - line) >= end)) { /* refused; a cut pair would lose its second sentence */
        ag__train_fail(err, errlen, AG_ERR_FORMAT, "%zu words, more than --max-line-words %zu: refused before the model "
                       "sees it (--max-line-words N takes longer lines%s)", *words, max,
                       tab ? "; a pair's two sentences count together" : ", --long-lines cut predicts its first words");
        return 1;
    }
    *n = (ssize_t)end;
    line[end] = 0;
    return 0;
}

/* ---- predict ---- */

static const char *const sick_labels[] = {"NEUTRAL", "ENTAILMENT", "CONTRADICTION"};

/* The tokens of s[0..n): their count, or -1 when out of memory; their
 * spans in *spans, which is `few` (AG_FEW_SPANS of them) where they fit,
 * else malloc'd: free it when it is not `few`.  Any number of them: the
 * batch cuts a sentence longer than the run's --max-len. */
#define AG_FEW_SPANS 512
static int64_t tokens_of(char *s, size_t n, int lowercase, ag_span *few, ag_span **spans) {
    *spans = few;
    size_t k = ag_tokenize(s, n, lowercase, few, AG_FEW_SPANS);
    if (k > INT32_MAX || (k > AG_FEW_SPANS && !(*spans = malloc(k * sizeof **spans)))) return *spans = few, -1;
    if (k > AG_FEW_SPANS) ag_tokenize(s, n, lowercase, *spans, k);
    return (int64_t)k;
}

/* Tokens [from, to) of s added to the open sentence of ds: 0, or -1 when
 * out of memory. */
static int add_spans(ag_dataset *ds, const char *s, const ag_span *spans, int64_t from, int64_t to) {
    for (int64_t t = from; t < to; t++)
        if (ag__ds_add(ds, s + spans[t].start, spans[t].len, 0)) return -1;
    return 0;
}

/* Tokens of s[0..n) added to the open sentence of ds: their count, or -1
 * when out of memory. */
static int add_tokens(ag_dataset *ds, char *s, size_t n, int lowercase) {
    ag_span few[AG_FEW_SPANS], *spans;
    int64_t k = tokens_of(s, n, lowercase, few, &spans);
    int rc = k >= 0 && !add_spans(ds, s, spans, 0, k) ? (int)k : -1;
    if (spans != few) free(spans);
    return rc;
}

/* An LM line as examples, <eos> after each: the whole line, or with
 * `sentences` one a sentence, cut where the run's training text was;
 * max_len: the model's (the run's --max-len, or its own table's size). */
static int lm_line_dataset(const ag_train_opts *o, int max_len, char *line, bool sentences, ag_dataset *ds, char *err,
                           size_t errlen) {
    ag_span few[AG_FEW_SPANS], *spans;
    int64_t k = tokens_of(line, strlen(line), o->lowercase, few, &spans);
    int rc = k < 0 ? -1 : 0;
    for (int64_t from = 0, to; !rc && from < k; from = to) {
        to = sentences ? ag__sentence_end(line, spans, from, k) : k;
        /* a model of at most N positions: the last N words, those before
         * the next word (generate's prompt, predict's "next"), not the first N */
        int64_t first = max_len > 0 && to - from > max_len ? to - max_len : from;
        ag__ds_begin(ds);
        rc = add_spans(ds, line, spans, first, to);
        if (!rc && (ag__ds_add(ds, AG_EOS_TOKEN, strlen(AG_EOS_TOKEN), 0) || ag__ds_end(ds, -1, 0, 1, 0))) rc = -1;
    }
    if (spans != few) free(spans);
    if (rc) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    if (k == 0) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "empty sentence");
    ag__ds_finish(ds);
    return 0;
}

/* The line as a dataset in the model's format: one example (pairs: its two
 * sentences), or for an LM one a sentence where `sentences`. */
static int line_dataset(const ag_train_opts *o, const ag_model *m, char *line, bool sentences, ag_dataset *ds,
                        char *err, size_t errlen) {
    ag_task task = m->cfg.task;
    bool pair = task == AG_TASK_PAIR || task == AG_TASK_RELATEDNESS;
    ag_format fmt = task == AG_TASK_LM ? AG_FORMAT_LM : pair ? AG_FORMAT_SICK : AG_FORMAT_LABELED;
    if (ag__ds_init(ds, fmt)) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    if (task == AG_TASK_LM) return lm_line_dataset(o, m->cfg.max_len, line, sentences, ds, err, errlen);
    char *tab = strchr(line, '\t');
    if (pair && !tab) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "a pair model needs two sentences separated by a tab");
    if (pair && strchr(tab + 1, '\t')) /* else the words after a second tab would join sentence b unseen */
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "more than one tab: a pair model reads two sentences separated by one tab");
    if (tab && pair) *tab = 0;
    ag__ds_begin(ds);
    int ka = add_tokens(ds, line, strlen(line), o->lowercase), kb = 1;
    if (ka > 0 && pair) {
        ag__ds_begin_second(ds);
        kb = add_tokens(ds, tab + 1, strlen(tab + 1), o->lowercase);
    }
    if (ka < 0 || kb < 0) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    if (ka == 0 || kb == 0) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "empty sentence");
    if (ag__ds_end(ds, pair ? 0 : -1, 0, 1, 0)) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    ag__ds_finish(ds);
    return 0;
}

static void print_probs(FILE *out, const ag_real *logits, int K) {
    double mx = ag__max_row(logits, K), sum = 0;
    for (int c = 0; c < K; c++) sum += exp(logits[c] - mx);
    for (int c = 0; c < K; c++) fprintf(out, "%s%.4f", c ? " " : "\t", exp(logits[c] - mx) / sum);
}

/* LM: perplexity of the line (the words and <eos> of each of its rows, a
 * sentence each where the run was trained on sentences) and the likeliest
 * word after its last word. */
static void print_lm(FILE *out, const ag_vocab *vocab, const ag_batch *b, ag_tensor *logits) {
    int N = logits->shape[1], V = logits->shape[2];
    const ag_real *values = ag_host_values(logits);
    double nll = 0;
    int64_t words = 0;
    for (int r = 0; r < b->rows; r++)
        for (int t = 0; t < b->lengths[r]; t++, words++) {
            const ag_real *row = values + ((int64_t)r * N + t) * V;
            double mx = ag__max_row(row, V), sum = 0;
            for (int v = 0; v < V; v++) sum += exp(row[v] - mx);
            nll += mx + log(sum) - row[b->targets[(int64_t)r * b->width + t]];
        }
    int r = b->rows - 1;
    const ag_real *last = values + ((int64_t)r * N + b->lengths[r] - 1) * V;
    int best = 2; /* never predict <pad> or <unk> */
    for (int v = 3; v < V; v++)
        if (last[v] > last[best]) best = v;
    fprintf(out, "ppl %.3f\tnext %s", exp(nll / words), ag_vocab_token(vocab, best));
}

int ag_train_use_device(const ag_train_opts *o, ag_params *ps, char *err, size_t errlen) {
    if (!o->device[0] || !strcmp(o->device, "cpu")) {
        if (o->cuda_graphs) return ag__train_fail(err, errlen, AG_ERR_ARG, "--cuda-graphs needs --device cuda");
        /* the current device is the process's: a run on the CPU after one on
         * the GPU in the same program (the library's callers, not the CLI)
         * would otherwise make its masks and constants there */
        ag_set_device(AG_CPU);
        ag_cuda_graphs(false);
        return 0;
    }
    int index = ag__train_device_index(o->device); /* -1 for "cuda": the default GPU */
    if (index >= 0 && ag__dist_size() > 1)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--device %s names one GPU for all %d ranks: give --device cuda, "
                             "and each rank takes its own (docs/distributed.md)", o->device, ag__dist_size());
    char why[256];
    if (!ag_cuda_use(index, why, sizeof why))
        return ag__train_fail(err, errlen, AG_ERR_ARG, "--device %s: %s", o->device, why);
    ag_params_to(ps, AG_CUDA);
    ag_set_device(AG_CUDA);
    ag_cuda_graphs(o->cuda_graphs);
    return 0;
}

const ag_real *ag_host_values(const ag_tensor *t) {
    if (t->device == AG_CPU) return t->data;
    ag_real *host = ag__arena_alloc((size_t)t->size * sizeof(ag_real));
    ag_tensor_read(t, host);
    return host;
}

ag_batch_opts ag_run_batch_opts(const ag_model *m, const ag_train_opts *o, int32_t max_width) {
    ag_batch_opts bo = {0};
    if (m->kind->batch_opts) m->kind->batch_opts(&m->cfg, &bo);
    bo.max_len = o->max_len;
    bo.max_width = o->max_len > 0 && max_width > o->max_len ? o->max_len : max_width;
    return bo;
}

/* ds (unencoded: a line's examples) as one batch for m, a row each. */
static int example_batch(const ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, ag_dataset *ds, ag_batch *b,
                         char *err, size_t errlen) {
    if (ds->n > INT32_MAX) return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%lld sentences in one line", (long long)ds->n);
    int64_t one = 0, *rows = ds->n == 1 ? &one : malloc((size_t)ds->n * sizeof *rows);
    if (!rows) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < ds->n; i++) rows[i] = i;
    int rc = ag_dataset_encode(ds, vocab, err, errlen);
    ag_batch_opts bo = ag_run_batch_opts(m, o, 0); /* cut as the run was trained */
    if (!rc) rc = ag_batch_alloc(b, ds, (int32_t)ds->n, &bo, err, errlen);
    if (!rc) rc = ag_batch_fill(b, ds, rows, (int32_t)ds->n, err, errlen);
    if (rows != &one) free(rows);
    return rc;
}

int ag__line_examples(const ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, ag_dataset *ds,
                      ag_batch *b, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    bool sentences = m->cfg.task == AG_TASK_LM && ag__train_lm_sentences(o);
    int rc = line_dataset(o, m, line, sentences, ds, err, errlen);
    return rc ? rc : example_batch(m, vocab, o, ds, b, err, errlen);
}

int ag_line_batch(const ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, ag_dataset *ds,
                  ag_batch *b, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    int rc = line_dataset(o, m, line, false, ds, err, errlen);
    return rc ? rc : example_batch(m, vocab, o, ds, b, err, errlen);
}

int ag__cut_line_end(char *line, char *err, size_t errlen) {
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    if (n && line[n - 1] == '\r') line[--n] = 0;
    size_t at = strcspn(line, "\r\n");
    if (at < n)
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s inside the line (column %zu): only its end may hold CR or LF",
                             line[at] == '\r' ? "carriage return" : "line feed", at + 1);
    return 0;
}

/* The forward of one line, under ag_try: a line too long for step memory
 * (the arena refuses it) fails alone, and the next line finds the engine
 * as it was. */
typedef struct {
    ag_model *m;
    const ag_batch *b;
    ag_tensor *logits;
} line_forward;

static void run_line_forward(void *ctx) {
    line_forward *j = ctx;
    j->logits = ag_model_forward(j->m, j->b, false);
}

int ag__line_forward(ag_model *m, const ag_batch *b, ag_tensor **logits, char *err, size_t errlen) {
    bool was = ag_set_grad_enabled(false);
    line_forward job = {m, b, NULL};
    ag_status st = ag_try(run_line_forward, &job);
    ag_set_grad_enabled(was);
    *logits = job.logits;
    if (st) {
        const char *msg = ag_errmsg();
        if (!strncmp(msg, "attngrad: ", 10)) msg += 10; /* the CLI names the program already */
        return ag__train_fail(err, errlen, st, "%s", msg);
    }
    if (!job.logits)
        return ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot use this input: %s", m->kind->name, ag_errmsg());
    return 0;
}

/* Class `k` as the run names it: the k-th of o->labels, else the number. */
static void print_class(FILE *out, const ag_train_opts *o, int k) {
    const char *p = o->labels;
    for (int i = 0; i < k && p && *p; i++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
    size_t n = p ? strcspn(p, ",") : 0;
    if (n) fprintf(out, "%.*s", (int)n, p);
    else fprintf(out, "%d", k);
}

/* Prints the prediction for the one-row batch b. */
static int predict_batch(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const ag_batch *b, FILE *out,
                         char *err, size_t errlen) {
    ag_task task = m->cfg.task;
    ag_tensor *logits;
    int rc = ag__line_forward(m, b, &logits, err, errlen);
    if (rc) {
        logits = NULL;
    } else if (task == AG_TASK_LM) {
        print_lm(out, vocab, b, logits);
    } else if (task == AG_TASK_RELATEDNESS) { /* the score, then p over 1..5 */
        const ag_real *p = ag_host_values(logits);
        fprintf(out, "%.4f", ag_relatedness_score(p));
        print_probs(out, p, AG_RELATEDNESS_BINS);
    } else {
        const ag_real *p = ag_host_values(logits);
        int K = logits->shape[1], best = 0;
        for (int c = 1; c < K; c++)
            if (p[c] > p[best]) best = c;
        if (task == AG_TASK_PAIR && K == 3 && !o->labels[0]) fprintf(out, "%s", sick_labels[best]); /* runs before labels= */
        else print_class(out, o, best);
        print_probs(out, p, K);
    }
    if (logits) fputc('\n', out);
    ag_step_end();
    return rc;
}

int ag_predict_line(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, FILE *out, char *err,
                    size_t errlen) {
    if (ag__cut_line_end(line, err, errlen)) return AG_ERR_FORMAT;
    if (ag_tokenize(line, strlen(line), 0, NULL, 0) == 0) { /* keep output lines aligned with input lines */
        fputc('\n', out);
        return 0;
    }
    ag_dataset ds;
    ag_batch b;
    int rc = ag__line_examples(m, vocab, o, line, &ds, &b, err, errlen);
    if (!rc) rc = predict_batch(m, vocab, o, &b, out, err, errlen);
    ag_batch_free(&b);
    ag_dataset_free(&ds);
    return rc;
}

int ag_predict_conllu(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *name, int64_t first_line,
                      const char *text, size_t n, FILE *out, char *err, size_t errlen) {
    if (m->cfg.task != AG_TASK_CLASSIFY)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "%s:%lld: --input conllu gives one sentence at a time: model %s does %s",
                             name, (long long)first_line, m->kind->name, ag_task_name(m->cfg.task));
    ag_load_opts lo = ag_load_opts_default();
    lo.lowercase = o->lowercase; /* as the run's data */
    lo.first_line = first_line;
    ag_dataset ds;
    ag_batch b = {0};
    int rc = ag_dataset_load_mem(name, text, n, AG_FORMAT_CONLLU, &lo, NULL, &ds, err, errlen);
    if (!rc && ds.n != 1)
        rc = ag__train_fail(err, errlen, AG_ERR_FORMAT, "%s:%lld: %lld sentences where one was given", name,
                           (long long)first_line, (long long)ds.n);
    if (!rc) rc = example_batch(m, vocab, o, &ds, &b, err, errlen);
    if (!rc) rc = predict_batch(m, vocab, o, &b, out, err, errlen);
    ag_batch_free(&b);
    ag_dataset_free(&ds);
    return rc;
}
