/* train_data.c - the data of a run: the generated tasks, a benchmark folder
 * (with its dev/test files, a held-out dev split, or 10-fold CV) or a single
 * file; then one vocabulary from the training split, and every split encoded.
 *
 * Splits that are random use fixed seeds, not --seed: every run of a data
 * set sees the same train/dev/test examples, whatever its own seed. */
#include "attngrad/train.h"
#include "internal.h"

#include <errno.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { SPLIT_SEED = 20240601, CV_SEED = 20240602, SYNTH_SEED = 1 };

void ag_run_data_free(ag_run_data *d) {
    for (int s = 0; s < AG_SPLITS; s++) {
        ag_dataset_free(&d->sets[s]);
        free(d->idx[s]);
    }
    ag_vocab_free(d->vocab);
    memset(d, 0, sizeof *d);
}

static int64_t *all_indices(int64_t n) {
    int64_t *idx = malloc(((size_t)n + 1) * sizeof *idx);
    for (int64_t i = 0; idx && i < n; i++) idx[i] = i;
    return idx;
}

/* Split s is the whole of dataset ds. */
static int use_whole(ag_run_data *d, int s, const ag_dataset *ds) {
    d->ds[s] = ds;
    d->n[s] = ds->n;
    d->idx[s] = all_indices(ds->n);
    return d->idx[s] ? 0 : AG_DATA_ENOMEM;
}

/* Moves a dev_frac share of split `from` (indices idx[0..n)) into the dev split. */
static int hold_out(ag_run_data *d, const int64_t *idx, int64_t n, double dev_frac, char *err, size_t errlen) {
    int64_t *train = malloc(((size_t)n + 1) * sizeof *train), *dev = malloc(((size_t)n + 1) * sizeof *dev);
    if (!train || !dev || ag_split_holdout(idx, n, dev_frac, SPLIT_SEED, train, &d->n[AG_SPLIT_TRAIN], dev,
                                           &d->n[AG_SPLIT_DEV])) {
        free(train);
        free(dev);
        return ag__train_fail(err, errlen, AG_DATA_ENOMEM, "out of memory splitting off a dev set");
    }
    free(d->idx[AG_SPLIT_TRAIN]);
    d->idx[AG_SPLIT_TRAIN] = train;
    d->idx[AG_SPLIT_DEV] = dev;
    d->ds[AG_SPLIT_DEV] = d->ds[AG_SPLIT_TRAIN];
    if (d->n[AG_SPLIT_TRAIN] < 1 || d->n[AG_SPLIT_DEV] < 1) /* say which side came out empty, and the share */
        return ag__train_fail(err, errlen, AG_DATA_EFORMAT,
                             "%s: %lld examples at --dev-frac %g leave %lld for dev and %lld for training: each needs "
                             "at least one", d->name, (long long)n, dev_frac, (long long)d->n[AG_SPLIT_DEV],
                             (long long)d->n[AG_SPLIT_TRAIN]);
    return 0;
}

/* ---- the generated tasks ---- */

static int open_synth(const ag_train_opts *o, ag_task task, ag_run_data *d, char *err, size_t errlen) {
    bool pairs = task == AG_TASK_PAIR || task == AG_TASK_RELATEDNESS; /* the pair task has labels and scores */
    ag_synth_task t = task == AG_TASK_LM ? AG_SYNTH_LOOKUP : pairs ? AG_SYNTH_PAIR : AG_SYNTH_ORDER;
    snprintf(d->name, sizeof d->name, "synth-%s", t == AG_SYNTH_LOOKUP ? "lookup" : t == AG_SYNTH_PAIR ? "pair" : "order");
    for (int s = 0; s < AG_SPLITS; s++) {
        ag_synth_opts so = ag_synth_opts_default(t);
        so.seed = SYNTH_SEED + (uint64_t)s; /* three disjoint draws */
        so.n = s == AG_SPLIT_TRAIN ? o->synth_n : (o->synth_n / 4 > 8 ? o->synth_n / 4 : 8);
        if (t == AG_SYNTH_LOOKUP) /* the test split holds the unseen table compositions */
            so.split = s == AG_SPLIT_TEST ? AG_SYNTH_SPLIT_TEST : AG_SYNTH_SPLIT_TRAIN;
        char why[AG_ERR_LEN];
        if (ag_synth(t, &so, &d->sets[s], why, sizeof why)) return ag__train_fail(err, errlen, AG_DATA_EINVAL, "%s", why);
        if (use_whole(d, s, &d->sets[s])) return ag__train_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    }
    return 0;
}

/* ---- files ---- */

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* n_classes > 0: the data set's known class count, so a label beyond it is
 * a bad line, not a new class; 0: infer the count from the labels. */
/* --max-line-bytes of the run: the longest line any of its files may hold. */
static size_t line_limit(const ag_train_opts *o) {
    return (size_t)(o->max_line_bytes > 0 ? o->max_line_bytes : AG_MAX_LINE_BYTES);
}

/* --max-line-words, so that one line of thousands of words is refused by
 * its file and line before a batch of it (attention: memory in the square
 * of its words) takes the machine. */
int64_t ag_line_word_limit(const ag_train_opts *o) {
    return o->max_line_words <= 0 || (o->max_len > 0 && o->max_len <= o->max_line_words) ? 0 : o->max_line_words;
}

/* What to do about a limit a file's line went past (AG_DATA_ELIMIT). */
static int limit_advice(int rc, char *err, size_t errlen) {
    size_t used = err ? strlen(err) : 0;
    if (rc == AG_DATA_ELIMIT && err && used < errlen)
        snprintf(err + used, errlen - used, strstr(err, " words, more than the limit of ")
                 ? " (--max-line-words N takes longer ones, --max-len N cuts them)"
                 : " (--max-line-bytes N reads longer lines)");
    return rc;
}

/* Whether LM text is cut into sentences: --lm-split, or the data set's way
 * (b NULL: a file of the user's, a line an example unless told). */
static int lm_sentences(const ag_train_opts *o, const ag_benchmark *b) {
    if (o->lm_split[0]) return !strcmp(o->lm_split, "sentence");
    return b && b->lm_sentences;
}

const ag_benchmark *ag__train_benchmark(const ag_train_opts *o) {
    char copy[AG_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", o->data);
    return ag_benchmark_find(o->dataset[0] ? o->dataset : basename(copy));
}

int ag__train_lm_sentences(const ag_train_opts *o) {
    return lm_sentences(o, o->lm_split[0] || o->format[0] ? NULL : ag__train_benchmark(o));
}

/* A data file of benchmark b, or of the user's (b NULL). */
static int load(const ag_train_opts *o, const char *path, ag_format fmt, const ag_benchmark *b, ag_dataset *ds,
                char *err, size_t errlen) {
    if (o->lm_split[0] && fmt != AG_FORMAT_LM)
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "--lm-split %s: %s is %s data, not LM text", o->lm_split,
                             path, ag_format_name(fmt));
    ag_load_opts lo = ag_load_opts_default();
    lo.max_line_bytes = line_limit(o);
    lo.max_words = ag_line_word_limit(o);
    lo.lowercase = o->lowercase || (b && b->lowercase);
    lo.skip_bad_lines = b && b->label_only_lines > 0;
    lo.n_classes = b ? b->n_classes : 0;
    lo.require_labels = 1; /* a run trains CoNLL-U for classification only, and the loss skips label -1 */
    lo.lm_sentences = lm_sentences(o, b);
    return limit_advice(ag_dataset_load(path, fmt, &lo, NULL, ds, err, errlen), err, errlen);
}

/* The file name of a benchmark's path "folder/file". */
static const char *file_part(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Which benchmark --data holds, and the folder its files are in: the data
 * root holding "trec/" (with --dataset trec), or the benchmark's own folder
 * under any name (named by --dataset, or by its name). */
static int find_benchmark(const ag_train_opts *o, const ag_benchmark **bench, char *dir, char *err, size_t errlen) {
    char copy[AG_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", o->data);
    const char *name = o->dataset[0] ? o->dataset : basename(copy);
    *bench = ag__train_benchmark(o);
    if (!*bench && !strcmp(name, "sst"))
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "%s holds SST-5 and SST-2: add --dataset sst5 or --dataset sst2", o->data);
    if (!*bench)
        return ag__train_fail(err, errlen, AG_DATA_EINVAL,
                    "%s: not a known benchmark folder; name the data set with --dataset (trec, sst5, sst2, mr, "
                    "subj, cr, mpqa, sick, ptb, wikitext2) or pass a file",
                    o->data);
    const char *train = (*bench)->train, *file = file_part(train);
    char under_root[2 * AG_PATH_MAX], in_place[2 * AG_PATH_MAX];
    snprintf(under_root, sizeof under_root, "%s/%s", o->data, train);
    snprintf(in_place, sizeof in_place, "%s/%s", o->data, file);
    if (is_file(under_root)) {
        if (snprintf(dir, AG_PATH_MAX, "%s", under_root) >= AG_PATH_MAX)
            return ag__train_fail(err, errlen, AG_DATA_EINVAL, "%s: path too long", under_root);
        *strrchr(dir, '/') = 0; /* the folder of the train file */
        return 0;
    }
    if (is_file(in_place)) {
        snprintf(dir, AG_PATH_MAX, "%s", o->data);
        return 0;
    }
    return ag__train_fail(err, errlen, AG_DATA_EIO, "%s: no %s data here (looked for %s and %s)", o->data,
                         (*bench)->name, under_root, in_place);
}

/* ---- dependency parses ---- */

/* Whether the run's model reads a parse (its batches carry heads: MS-SAN
 * unless no_dist).  Only then are parses loaded and matched: a model that
 * reads none must not stop on a parse it would never use.  A kind not
 * registered here (a plugin's, before it is loaded) gets them. */
static bool model_reads_parses(const ag_train_opts *o) {
    const ag_model_kind *kind = ag_model_find(o->model);
    if (!kind) return true;
    if (!kind->batch_opts) return false;
    ag_model_config cfg = ag_model_defaults(kind);
    unsigned flags;
    if (ag__train_flags(o, kind, &flags, NULL, 0) == 0) cfg.flags = flags;
    ag_batch_opts bo = {0};
    kind->batch_opts(&cfg, &bo);
    return bo.heads;
}

/* The folder of parses for data in `dir`: --parses, or a conllu/ folder
 * there; "" = none (then the models that read a parse take the chain). */
static int parse_folder(const ag_train_opts *o, const char *dir, char *out, char *err, size_t errlen) {
    out[0] = 0;
    if (!strcmp(o->parses, "none") || !model_reads_parses(o)) return 0;
    if (o->parses[0]) {
        if (!is_dir(o->parses)) return ag__train_fail(err, errlen, AG_DATA_EIO, "--parses %s: no such folder", o->parses);
        snprintf(out, AG_PATH_MAX, "%s", o->parses);
        return 0;
    }
    char auto_dir[2 * AG_PATH_MAX];
    snprintf(auto_dir, sizeof auto_dir, "%s/conllu", dir);
    if (is_dir(auto_dir) && strlen(auto_dir) < AG_PATH_MAX) snprintf(out, AG_PATH_MAX, "%s", auto_dir);
    return 0;
}

/* The parse file of data file `file` in folder pdir: FILE.conllu, or with
 * its .txt cut (SICK_train.txt -> SICK_train.conllu).  0 and path set, or
 * 1: there is none. */
static int parse_file(const char *pdir, const char *file, char *path, size_t n) {
    snprintf(path, n, "%s/%s.conllu", pdir, file_part(file));
    if (is_file(path)) return 0;
    size_t len = strlen(file_part(file));
    if (len > 4 && !strcmp(file_part(file) + len - 4, ".txt")) {
        snprintf(path, n, "%s/%.*s.conllu", pdir, (int)(len - 4), file_part(file));
        if (is_file(path)) return 0;
    }
    snprintf(path, n, "%s/%s.conllu", pdir, file_part(file));
    return 1;
}

static int load_parses(const ag_train_opts *o, const char *path, ag_dataset *parses, char *err, size_t errlen) {
    ag_load_opts lo = ag_load_opts_default(); /* labels or not: only the words and heads count */
    lo.max_line_bytes = line_limit(o);
    lo.max_words = ag_line_word_limit(o);
    return limit_advice(ag_dataset_load(path, AG_FORMAT_CONLLU, &lo, NULL, parses, err, errlen), err, errlen);
}

/* The parses of data file `file` onto ds.  Without a parse file in the
 * folder the sentences keep none: an error only when --parses named it. */
static int attach_parses(const ag_train_opts *o, const char *pdir, const char *file, ag_dataset *ds, char *err,
                         size_t errlen) {
    char path[3 * AG_PATH_MAX];
    if (parse_file(pdir, file, path, sizeof path))
        return o->parses[0] ? ag__train_fail(err, errlen, AG_DATA_EIO, "--parses %s: no %s for %s", o->parses, path, file)
                            : 0;
    ag_dataset parses;
    int rc = load_parses(o, path, &parses, err, errlen);
    if (!rc) rc = ag_dataset_attach_parses(ds, &parses, err, errlen);
    ag_dataset_free(&parses);
    return rc;
}

/* SST's phrases: every labelled node of trees/train.txt beside the stsa
 * files, each with its sentence's parse where the train file has one. */
static int load_phrases(const ag_train_opts *o, const ag_benchmark *b, const char *dir, const char *pdir,
                        ag_dataset *ds, char *err, size_t errlen) {
    if (strcmp(b->name, "sst5") && strcmp(b->name, "sst2"))
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "--phrases: %s has no phrase labels (only sst5 and sst2: SST's trees)",
                             b->name);
    char trees[2 * AG_PATH_MAX], ppath[3 * AG_PATH_MAX];
    snprintf(trees, sizeof trees, "%s/trees/train.txt", dir);
    if (!is_file(trees))
        return ag__train_fail(err, errlen, AG_DATA_EIO,
                             "--phrases: no %s (SST's PTB trees, trainDevTestTrees_PTB's train.txt; docs/data.md)", trees);
    ag_dataset parses = {0};
    ag_tree_opts to = {.binary = !strcmp(b->name, "sst2"), .phrases = 1, .lowercase = 1,
                       .max_line_bytes = line_limit(o), .max_words = ag_line_word_limit(o)};
    int rc = 0;
    /* every tree's sentence, neutral ones too: the parses of stsa.fine.train
     * (SST-2's file drops the neutral sentences, whose phrases SST-2 keeps) */
    const char *sentences = ag_benchmark_find("sst5")->train;
    if (pdir[0] && !parse_file(pdir, sentences, ppath, sizeof ppath)) {
        if ((rc = load_parses(o, ppath, &parses, err, errlen))) return rc;
        to.parses = &parses;
    } else if (o->parses[0] && strcmp(o->parses, "none")) {
        return ag__train_fail(err, errlen, AG_DATA_EIO, "--parses %s: no %s for %s", o->parses, ppath, trees);
    }
    rc = limit_advice(ag_trees_load(trees, &to, ds, err, errlen), err, errlen);
    ag_dataset_free(&parses);
    return rc;
}

static int open_benchmark(const ag_train_opts *o, int fold, ag_run_data *d, char *err, size_t errlen) {
    const ag_benchmark *b;
    char dir[AG_PATH_MAX], path[2 * AG_PATH_MAX];
    if (o->phrases && o->dataset[0] && strcmp(o->dataset, "sst5") && strcmp(o->dataset, "sst2"))
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "--phrases: %s has no phrase labels (only sst5 and sst2: SST's trees)",
                             o->dataset);
    int rc = find_benchmark(o, &b, dir, err, errlen);
    if (rc) return rc;
    snprintf(d->name, sizeof d->name, "%s%s", b->name, o->phrases ? "-phrases" : "");
    d->label_names = b->label_names;
    char pdir[AG_PATH_MAX];
    if ((rc = parse_folder(o, dir, pdir, err, errlen))) return rc;
    const char *files[AG_SPLITS] = {b->train, b->dev, b->test};
    for (int s = 0; s < AG_SPLITS; s++) {
        if (!files[s]) continue;
        snprintf(path, sizeof path, "%s/%s", dir, file_part(files[s]));
        d->lowercase = b->lowercase || o->lowercase;
        if (s == AG_SPLIT_TRAIN && o->phrases)
            rc = load_phrases(o, b, dir, pdir, &d->sets[s], err, errlen);
        else if (!(rc = load(o, path, b->format, b, &d->sets[s], err, errlen)) && pdir[0])
            rc = attach_parses(o, pdir, files[s], &d->sets[s], err, errlen);
        if (rc) return rc;
        if (use_whole(d, s, &d->sets[s])) return ag__train_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    }
    if (pdir[0] && d->sets[AG_SPLIT_TRAIN].ex[0].heads) snprintf(d->parses, sizeof d->parses, "%s", pdir);
    if (b->n_classes > d->classes) d->classes = b->n_classes;
    if (!b->cv) return b->dev ? 0 : hold_out(d, d->idx[AG_SPLIT_TRAIN], d->n[AG_SPLIT_TRAIN], o->dev_frac, err, errlen);

    /* CV: fold `fold` is the test set, a share of the rest the dev set */
    int64_t n = d->sets[0].n;
    if (fold < 0 || fold >= o->folds)
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "--fold %d: %s has folds 0..%d", fold, b->name, o->folds - 1);
    int32_t *which = malloc(((size_t)n + 1) * sizeof *which);
    int64_t *rest = malloc(((size_t)n + 1) * sizeof *rest), *test = malloc(((size_t)n + 1) * sizeof *test), n_rest;
    rc = !which || !rest || !test ? AG_DATA_ENOMEM : ag_cv_assign(n, o->folds, CV_SEED, which);
    if (!rc) rc = ag_cv_split(which, n, o->folds, fold, -1, rest, &n_rest, NULL, NULL, test, &d->n[AG_SPLIT_TEST]);
    free(which);
    if (!rc) {
        d->ds[AG_SPLIT_TEST] = &d->sets[0];
        free(d->idx[AG_SPLIT_TEST]);
        d->idx[AG_SPLIT_TEST] = test;
        rc = hold_out(d, rest, n_rest, o->dev_frac, err, errlen);
    } else {
        free(test);
        ag__train_fail(err, errlen, rc, "%s: cannot make %d folds of %lld examples", b->name, o->folds, (long long)n);
    }
    free(rest);
    return rc;
}

static int open_file(const ag_train_opts *o, ag_run_data *d, char *err, size_t errlen) {
    ag_format fmt = AG_FORMAT_LABELED;
    if (o->format[0]) ag_format_parse(o->format, &fmt);
    char copy[AG_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", o->data);
    snprintf(d->name, sizeof d->name, "%s", basename(copy));
    d->lowercase = o->lowercase;
    if (o->phrases)
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "--phrases: %s is a file; pass SST's folder with --dataset sst5 or sst2",
                             o->data);
    int rc = load(o, o->data, fmt, NULL, &d->sets[0], err, errlen);
    if (rc) return rc;
    char dir[AG_PATH_MAX], pdir[AG_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", o->data);
    snprintf(dir, sizeof dir, "%s", dirname(copy));
    if (fmt != AG_FORMAT_LM && fmt != AG_FORMAT_CONLLU) {
        if ((rc = parse_folder(o, dir, pdir, err, errlen)) || (pdir[0] && (rc = attach_parses(o, pdir, o->data, &d->sets[0], err, errlen))))
            return rc;
        if (pdir[0] && d->sets[0].ex[0].heads) snprintf(d->parses, sizeof d->parses, "%s", pdir);
    } else if (fmt == AG_FORMAT_CONLLU) {
        snprintf(d->parses, sizeof d->parses, "%s", o->data); /* the file is its own parse */
    }
    if (use_whole(d, AG_SPLIT_TRAIN, &d->sets[0])) return ag__train_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    return hold_out(d, d->idx[AG_SPLIT_TRAIN], d->n[AG_SPLIT_TRAIN], o->dev_frac, err, errlen);
}

int ag_run_data_folds(const ag_train_opts *o, char *err, size_t errlen) {
    const ag_benchmark *b;
    char dir[AG_PATH_MAX];
    if (!o->data[0] || !is_dir(o->data)) return 0;
    if (find_benchmark(o, &b, dir, err, errlen)) return -1;
    return b->cv ? o->folds : 0;
}

/* ---- the task, the vocabulary, the encoding ---- */

/* The task asked for: --task, else the model's own. */
static ag_task wanted_task(const ag_train_opts *o) {
    ag_task t = AG_TASK_CLASSIFY;
    if (o->task[0] && ag_task_parse(o->task, &t) == 0) return t;
    const ag_model_kind *kind = ag_model_find(o->model);
    return kind ? ag_model_defaults(kind).task : AG_TASK_CLASSIFY;
}

/* Every score of a relatedness split in [1, 5]: the target is defined there. */
static int check_scores(const ag_run_data *d, char *err, size_t errlen) {
    for (int s = 0; s < AG_SPLITS; s++) {
        const ag_dataset *ds = &d->sets[s];
        const char *file = ag_dataset_path(ds) ? ag_dataset_path(ds) : d->name; /* train, dev, test: each has a line 4 */
        for (int64_t i = 0; i < ds->n; i++) {
            float y = ds->ex[i].score;
            if (!(y >= 1 && y <= AG_RELATEDNESS_BINS))
                return ag__train_fail(err, errlen, AG_DATA_EFORMAT, "%s:%lld: relatedness score %g is outside [1, %d]",
                            file, (long long)ds->ex[i].line, (double)y, AG_RELATEDNESS_BINS);
        }
    }
    return 0;
}

/* The task of the run: --task if the data has it; else the model's own
 * task, or on sentence pairs the first pair task the model has (ms_san:
 * entailment classes, mpsan: relatedness scores).  Then the model must have
 * a head for it. */
static int check_task(const ag_train_opts *o, ag_run_data *d, char *err, size_t errlen) {
    ag_format fmt = d->sets[0].format;
    ag_task data_task = fmt == AG_FORMAT_LM ? AG_TASK_LM : fmt == AG_FORMAT_SICK ? AG_TASK_PAIR : AG_TASK_CLASSIFY;
    unsigned fits = AG_TASK_BIT(data_task) | (fmt == AG_FORMAT_SICK ? AG_TASK_BIT(AG_TASK_RELATEDNESS) : 0);
    const ag_model_kind *kind = ag_model_find(o->model);
    unsigned can = kind ? kind->tasks : 0;
    ag_task want = wanted_task(o);
    for (int t = 0; !o->task[0] && !(fits & AG_TASK_BIT(want)) && t < AG_TASK_COUNT; t++)
        if (fits & can & AG_TASK_BIT(t)) want = (ag_task)t; /* the first task both the data and the model have */
    static const char *const names[] = {"classification", "sentence pairs", "language modelling", "relatedness scores"};
    char tasks[64];
    if (data_task == AG_TASK_LM && want != AG_TASK_LM)
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "%s is language-model text, but model %s does %s", d->name, o->model,
                    names[want]);
    if (want == AG_TASK_LM && data_task != AG_TASK_LM)
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "model %s is a language model, but %s is labeled data for %s", o->model,
                    d->name, names[data_task]);
    if (o->task[0] && !(fits & AG_TASK_BIT(want)))
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "--task %s does not fit %s (%s)", o->task, d->name, names[data_task]);
    if (!(fits & AG_TASK_BIT(want)))
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "%s holds %s, but model %s does %s only (its tasks: %s)", d->name,
                    names[data_task], o->model, names[want], kind ? ag_model_tasks_str(kind, tasks, sizeof tasks) : "?");
    if (kind && !ag_model_supports(kind, want))
        return ag__train_fail(err, errlen, AG_DATA_EINVAL, "model %s has no head for the %s task (it does: %s)", o->model,
                    ag_task_name(want), ag_model_tasks_str(kind, tasks, sizeof tasks));
    d->task = want;
    return want == AG_TASK_RELATEDNESS ? check_scores(d, err, errlen) : 0;
}

static int encode(ag_run_data *d, int min_count, char *err, size_t errlen) {
    if (!d->vocab) {
        ag_vocab_opts vo = {.min_count = min_count, .max_size = 0};
        int rc = ag_vocab_build(d->ds[AG_SPLIT_TRAIN], d->idx[AG_SPLIT_TRAIN], d->n[AG_SPLIT_TRAIN], &vo, &d->vocab,
                                err, errlen);
        if (rc) return rc;
    }
    d->max_width = 1;
    for (int s = 0; s < AG_SPLITS; s++) {
        ag_dataset *ds = &d->sets[s];
        if (!ds->store) continue;
        int rc = ag_dataset_encode(ds, d->vocab, err, errlen);
        if (rc) return rc;
        int32_t a, b;
        ag_dataset_max_len(ds, &a, &b);
        if (ds->format == AG_FORMAT_LM) a--;
        if (a > d->max_width) d->max_width = a;
        if (b > d->max_width) d->max_width = b;
        if (ds->format != AG_FORMAT_LM && ds->n_classes > d->classes) d->classes = ds->n_classes;
    }
    return 0;
}

int ag_run_data_open(const ag_train_opts *o, int fold, ag_vocab *vocab, ag_run_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->vocab = vocab;
    int rc;
    if (!o->data[0]) rc = open_synth(o, wanted_task(o), d, err, errlen);
    else if (is_dir(o->data)) rc = open_benchmark(o, fold, d, err, errlen);
    else if (is_file(o->data)) rc = open_file(o, d, err, errlen);
    else rc = ag__train_fail(err, errlen, AG_DATA_EIO, "%s: no such file or folder", o->data);
    if (!rc) rc = check_task(o, d, err, errlen);
    if (!rc) rc = encode(d, o->min_count, err, errlen);
    if (!rc && d->task == AG_TASK_LM) d->classes = 0;
    if (!rc && d->task == AG_TASK_RELATEDNESS) d->classes = AG_RELATEDNESS_BINS; /* the scores' bins, not the labels */
    if (rc) ag_run_data_free(d);
    return rc;
}
