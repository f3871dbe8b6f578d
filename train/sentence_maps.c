/* sentence_maps.c - what a trained model attends to in one sentence: one
 * forward with the maps recorded, each cut to the sentence and written as an
 * SVG heatmap with the words along its axes (`attngrad heatmap`). */
#include "attngrad/train.h"
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { LABEL_LEN = 64 };

/* The axis labels of one sentence of the batch's example: its words, unknown
 * ones (encoded as <unk>) as "<unk>(word)".  labels[t] points into text. */
typedef struct {
    char (*text)[LABEL_LEN];
    const char **labels;
    int n; /* words, the LM's <eos> included */
} word_labels;

static int word_labels_make(const ag_dataset *ds, int second, word_labels *wl) {
    const ag_example *ex = &ds->ex[0];
    const int32_t *ids = second ? ex->tokens_b : ex->tokens;
    wl->n = second ? ex->len_b : ex->len;
    wl->text = malloc(sizeof *wl->text * (size_t)wl->n);
    wl->labels = malloc(sizeof *wl->labels * (size_t)wl->n);
    if (!wl->text || !wl->labels) return AG_ERR_NOMEM;
    for (int t = 0; t < wl->n; t++) {
        const char *word = ag_dataset_word(ds, 0, second, t);
        bool unknown = ids[t] == AG_UNK_ID && strcmp(word, AG_UNK_TOKEN) != 0;
        snprintf(wl->text[t], LABEL_LEN, unknown ? AG_UNK_TOKEN "(%s)" : "%s", word);
        wl->labels[t] = wl->text[t];
    }
    return 0;
}

static void word_labels_free(word_labels *wl) {
    free(wl->text);
    free(wl->labels);
}

/* "past gate, head 1" -> "past_gate_head_1": a file-name part. */
static void slug(const char *name, char *out, size_t n) {
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n; p++) {
        bool word = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-';
        if (word) out[k++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
        else if (k > 0 && out[k - 1] != '_') out[k++] = '_';
    }
    while (k > 0 && out[k - 1] == '_') k--;
    out[k] = 0;
}

/* The start of every file name: "dir/<model>" when out is a folder (one
 * ending in '/' is created), else the prefix itself. */
static int output_base(const char *out, const char *model, char *base, size_t n, char *err, size_t errlen) {
    size_t len = strlen(out);
    struct stat st;
    bool is_dir = stat(out, &st) == 0 && S_ISDIR(st.st_mode);
    if (!is_dir && len > 0 && out[len - 1] == '/') {
        if (mkdir(out, 0777) != 0 && errno != EEXIST)
            return ag__train_fail(err, errlen, AG_ERR_IO, "%s: cannot create the folder: %s", out, strerror(errno));
        is_dir = true;
    }
    if (is_dir) snprintf(base, n, "%s%s%s", out, out[len - 1] == '/' ? "" : "/", model);
    else snprintf(base, n, "%s", out);
    return 0;
}

typedef struct {
    int want;                  /* the map's size along the axis: a sentence's width, or -1: any */
    int n;                     /* the entries drawn: the sentence's length, or all */
    const char *const *labels; /* its words, or NULL: numbered */
} map_axis;

/* The first n_rows x n_cols entries (the sentence's, padding cut off) of
 * head h of map w [1,Nq,Nk] or [1,h,Nq,Nk], copied contiguous into dst. */
static void cut(const ag_tensor *w, int h, int n_rows, int n_cols, ag_real *dst) {
    int Nq = w->shape[w->ndim - 2], Nk = w->shape[w->ndim - 1];
    const ag_real *src = ag_host_values(w) + (int64_t)h * Nq * Nk; /* a GPU map read back */
    for (int r = 0; r < n_rows; r++)
        memcpy(dst + (int64_t)r * n_cols, src + (int64_t)r * Nk, sizeof *dst * (size_t)n_cols);
}

/* Occurrences of map i's name and axes among the maps before it: a second
 * map of the same name gets "-2" in its file name. */
static int earlier_twins(const ag_model *m, int i) {
    int n = 0;
    for (int j = 0; j < i; j++) n += m->maps[j].axes == m->maps[i].axes && !strcmp(m->maps[j].name, m->maps[i].name);
    return n;
}

/* The SVG files of map i, one per head. */
static int write_map(const ag_model *m, const char *model, int i, const ag_batch *b, const word_labels *words,
                     const char *base, FILE *paths, char *err, size_t errlen) {
    const ag_attn_map *map = &m->maps[i];
    const ag_tensor *w = map->w;
    bool lm = m->cfg.task == AG_TASK_LM, pair = m->cfg.task == AG_TASK_PAIR || m->cfg.task == AG_TASK_RELATEDNESS;
    bool second = map->axes == AG_MAP_SENTENCE_B;
    int heads = w->ndim == 4 ? w->shape[1] : 1, Nq = w->shape[w->ndim - 2], Nk = w->shape[w->ndim - 1];
    /* What each axis indexes: a sentence's positions (its width, its words
     * up to its length) or numbered rows of any count (want -1). */
    map_axis sa = {b->width, b->lengths[0], words[0].labels}, sb = sa; /* a one-sentence batch has no b */
    if (pair) sb = (map_axis){b->width_b, b->lengths_b[0], words[1].labels};
    map_axis any_q = {-1, Nq, NULL}, any_k = {-1, Nk, NULL}, row = second ? sb : sa, col = row;
    const char *what = "rows: query word, columns: the word it attends to";
    switch (map->axes) {
    case AG_MAP_FEATURES:
        row = any_q, col = any_k, what = "rows and columns: features (the feature axis attends over features)";
        break;
    case AG_MAP_SLOTS:
        row = any_q, col = sa, what = "rows: slot (a learnt query: hop, memory), columns: the word it attends to";
        break;
    case AG_MAP_CROSS:
        if (!pair)
            return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s: attention map '%s' is between two sentences, but "
                                  "the %s task has one", m->kind->name, map->name, ag_task_name(m->cfg.task));
        row = sa, col = sb, what = "rows: a word of sentence a, columns: the word of sentence b it attends to";
        break;
    default:
        if (lm) /* LM rows are the targets: the word after each input, so labels shift by one */
            row.labels = words[0].labels + 1, what = "rows: target (the next word, predicted at that step), columns: input";
    }
    if ((w->ndim != 3 && w->ndim != 4) || w->shape[0] != 1 || (row.want >= 0 && Nq != row.want) ||
        (col.want >= 0 && Nk != col.want)) {
        char shape[64], r[16] = "r", c[16] = "c";
        if (row.want >= 0) snprintf(r, sizeof r, "%d", row.want);
        if (col.want >= 0) snprintf(c, sizeof c, "%d", col.want);
        return ag__train_fail(err, errlen, AG_ERR_SHAPE, "model %s: attention map '%s' is %s, want [1,%s,%s] or [1,h,%s,%s]",
                    m->kind->name, map->name, ag_shape_str(w, shape, sizeof shape), r, c, r, c);
    }
    int rows = row.n, cols = col.n;
    const char *const *row_labels = row.labels, *const *col_labels = col.labels;

    char name[48], path[AG_PATH_MAX + 128], title[512], sentence_tag[16] = "", twin[16] = "";
    slug(map->name, name, sizeof name);
    if (pair) snprintf(sentence_tag, sizeof sentence_tag, "-%s", map->axes == AG_MAP_CROSS ? "ab" : second ? "b" : "a");
    int twins = earlier_twins(m, i);
    if (twins) snprintf(twin, sizeof twin, "-%d", twins + 1);
    ag_real *cells = malloc(sizeof *cells * (size_t)rows * (size_t)cols);
    if (!cells) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (int h = 0; h < heads && !rc; h++) {
        char head[32] = "", head_tag[16] = "";
        if (heads > 1) {
            snprintf(head, sizeof head, ", head %d of %d", h + 1, heads);
            snprintf(head_tag, sizeof head_tag, "-h%d", h + 1);
        }
        snprintf(path, sizeof path, "%s-%s%s%s%s.svg", base, name, sentence_tag, twin, head_tag);
        snprintf(title, sizeof title, "%s: %s%s%s\n%s", model, map->name, head,
                 !pair ? "" : map->axes == AG_MAP_CROSS ? ", sentence a to b" : second ? ", sentence b" : ", sentence a", what);
        cut(w, h, rows, cols, cells);
        if (ag_heatmap_svg(path, title, cells, rows, cols, row_labels, col_labels) != AG_OK)
            rc = ag__train_fail(err, errlen, AG_ERR_IO, "%s", ag_errmsg());
        else if (paths)
            fprintf(paths, "%s\n", path);
    }
    free(cells);
    return rc;
}

int ag_sentence_heatmaps(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *sentence,
                         const char *sentence_b, const char *out, FILE *paths, char *err, size_t errlen) {
    bool pair = m->cfg.task == AG_TASK_PAIR || m->cfg.task == AG_TASK_RELATEDNESS;
    if (pair && !sentence_b)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s compares two sentences: give the second with --sentence-b",
                    m->kind->name);
    if (!pair && sentence_b)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s reads one sentence: --sentence-b is for pair models",
                    m->kind->name);
    /* the line ag_line_batch reads: tabs only between the two sentences */
    size_t na = strlen(sentence), nb = sentence_b ? strlen(sentence_b) : 0;
    char *line = malloc(na + nb + 2);
    if (!line) return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    snprintf(line, na + nb + 2, "%s%s%s", sentence, pair ? "\t" : "", pair ? sentence_b : "");
    for (char *p = line; *p; p++)
        if ((*p == '\t' && p != line + na) || *p == '\n' || *p == '\r') *p = ' ';

    ag_dataset ds;
    ag_batch b;
    word_labels words[2] = {{0}};
    int rc = ag_line_batch(m, vocab, o, line, &ds, &b, err, errlen);
    int L = b.opts.fixed_len, n = rc ? 0 : ds.ex[0].len, n_b = rc || !pair ? 0 : ds.ex[0].len_b;
    if (!rc && L > 0 && (n > L || n_b > L))
        rc = ag__train_fail(err, errlen, AG_ERR_ARG,
                  "the %ssentence has %d words, but model %s reads at most %d (its --fixed-len)",
                  n > L ? "" : "second ", n > L ? n : n_b, m->kind->name, L);
    if (!rc && (word_labels_make(&ds, 0, &words[0]) || (pair && word_labels_make(&ds, 1, &words[1]))))
        rc = ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory");
    if (!rc) {
        bool was_grad = ag_set_grad_enabled(false), was_capture = m->capture_maps;
        m->capture_maps = true;
        ag_tensor *logits = ag_model_forward(m, &b, false);
        if (!logits)
            rc = ag__train_fail(err, errlen, AG_ERR_FORMAT, "model %s cannot use this input: %s", m->kind->name, ag_errmsg());
        else if (m->n_maps == 0)
            rc = ag__train_fail(err, errlen, AG_ERR_ARG, "model %s records no attention maps%s", m->kind->name,
                      m->cfg.task == AG_TASK_LM ? " (an LM trained with --attention none has none)" : "");
        char base[AG_PATH_MAX + 64], model[256]; /* model: "mpsan", "mpsan/elu_score", "poslm" */
        snprintf(model, sizeof model, "%s%s%s", m->kind->name, o->flags[0] ? "/" : "", o->flags);
        if (!rc) rc = output_base(out, m->kind->name, base, sizeof base, err, errlen); /* no folder after a failure */
        for (int i = 0; i < m->n_maps && !rc; i++) rc = write_map(m, model, i, &b, words, base, paths, err, errlen);
        m->capture_maps = was_capture;
        ag_step_end();
        ag_set_grad_enabled(was_grad);
    }
    word_labels_free(&words[0]);
    word_labels_free(&words[1]);
    ag_batch_free(&b);
    ag_dataset_free(&ds);
    free(line);
    return rc;
}
