/* loaders.c - benchmark file formats -> ag_dataset.
 *
 * Every loader reads lines of any length (up to a cap), rejects binary junk,
 * and on a malformed line either fails with "path:line: why" or, with
 * skip_bad_lines, drops it and counts it. Bytes >= 0x80 pass through as
 * token bytes: MR/SUBJ/TREC hold Latin-1 and we never decode text. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "atomic_file.h"

enum { AG_MAX_LABEL = 65535 }; /* more classes than this is surely garbage */

/* ---- building a dataset ------------------------------------------------------ */

int ag__ds_init(ag_dataset *ds, ag_format fmt) {
    memset(ds, 0, sizeof *ds);
    ds->format = fmt;
    ds->store = calloc(1, sizeof *ds->store);
    if (!ds->store) return AG_DATA_ENOMEM;
    ds->store->eos = -1;
    ds->store->open_off_b = -1;
    return 0;
}

void ag_dataset_free(ag_dataset *ds) {
    if (!ds) return;
    ag_dataset_store *st = ds->store;
    if (st) {
        ag__strtab_free(&st->types);
        free(st->raw);
        free(st->ids);
        free(st->heads);
        free(st->off_a);
        free(st->off_b);
        free(st->path);
        ag__strtab_free(&st->sent_files);
        free(st->sent_file);
        free(st->sent_line);
        free(st->sent_side);
        free(st);
    }
    free(ds->ex);
    memset(ds, 0, sizeof *ds);
}

const char *ag_dataset_path(const ag_dataset *ds) { return ds->store ? ds->store->path : NULL; }

void ag__ds_begin(ag_dataset *ds) {
    ds->store->open_off = ds->store->nraw;
    ds->store->open_off_b = -1;
}

void ag__ds_begin_second(ag_dataset *ds) { ds->store->open_off_b = ds->store->nraw; }

int ag__ds_add(ag_dataset *ds, const char *tok, size_t len, int32_t head) {
    ag_dataset_store *st = ds->store;
    int32_t id;
    int rc = ag__strtab_intern(&st->types, tok, len, &id);
    if (rc) return rc;
    size_t need = (size_t)st->nraw + 1;
    if (ag__data_grow((void **)&st->raw, &st->capraw, need, sizeof *st->raw)) return AG_DATA_ENOMEM;
    if ((ds->format == AG_FORMAT_CONLLU || st->with_heads) &&
        ag__data_grow((void **)&st->heads, &st->capheads, need, sizeof *st->heads))
        return AG_DATA_ENOMEM;
    if (st->heads) st->heads[st->nraw] = head;
    st->raw[st->nraw++] = id;
    return 0;
}

int64_t ag__ds_open_len(const ag_dataset *ds) {
    const ag_dataset_store *st = ds->store;
    return st->nraw - (st->open_off_b >= 0 ? st->open_off_b : st->open_off);
}

/* NULL before the first token: no heads array yet, and an offset applied to
 * NULL is undefined behaviour even when it is 0 (clang's UBSan stops on it). */
int32_t *ag__ds_open_heads(ag_dataset *ds) {
    ag_dataset_store *st = ds->store;
    return st->heads ? st->heads + st->open_off : NULL;
}

void ag__ds_abort(ag_dataset *ds) {
    ds->store->nraw = ds->store->open_off;
    ds->store->open_off_b = -1;
}

int ag__ds_end(ag_dataset *ds, int32_t label, float score, int64_t line, int32_t clip_to) {
    ag_dataset_store *st = ds->store;
    int64_t end_a = st->open_off_b >= 0 ? st->open_off_b : st->nraw;
    int64_t len_a = end_a - st->open_off;
    int64_t len_b = st->open_off_b >= 0 ? st->nraw - st->open_off_b : 0;
    if (len_a > INT32_MAX || len_b > INT32_MAX) return AG_DATA_ELIMIT;
    size_t need = (size_t)ds->n + 1, c1 = st->capoff;
    if (ag__data_grow((void **)&ds->ex, &st->capex, need, sizeof *ds->ex) ||
        ag__data_grow((void **)&st->off_a, &c1, need, sizeof *st->off_a))
        return AG_DATA_ENOMEM;
    if (ds->format == AG_FORMAT_SICK) {
        size_t c2 = st->capoff;
        if (ag__data_grow((void **)&st->off_b, &c2, need, sizeof *st->off_b)) return AG_DATA_ENOMEM;
    }
    st->capoff = c1;
    int32_t len = (int32_t)len_a;
    if (clip_to > 0 && len > clip_to) {
        len = clip_to;
        ds->stats.clipped++;
    }
    ds->ex[ds->n] = (ag_example){.len = len, .full_len = (int32_t)len_a,
                                 .len_b = (int32_t)len_b, .label = label,
                                 .score = score, .line = line};
    st->off_a[ds->n] = st->open_off;
    if (st->off_b) st->off_b[ds->n] = st->open_off_b;
    ds->n++;
    ds->stats.examples++;
    ds->stats.tokens += len_a + len_b - (ds->format == AG_FORMAT_LM ? 1 : 0);
    if (label >= ds->n_classes) ds->n_classes = label + 1;
    st->open_off = st->nraw;
    st->open_off_b = -1;
    return 0;
}

/* Public pointers are set only now: the pools moved while growing. */
void ag__ds_finish(ag_dataset *ds) {
    ag_dataset_store *st = ds->store;
    for (int64_t i = 0; i < ds->n; i++) {
        ds->ex[i].heads = st->heads ? st->heads + st->off_a[i] : NULL;
        ds->ex[i].heads_b = st->heads && st->off_b ? st->heads + st->off_b[i] : NULL;
        ds->ex[i].tokens = ds->encoded ? st->ids + st->off_a[i] : NULL;
        ds->ex[i].tokens_b = ds->encoded && st->off_b ? st->ids + st->off_b[i] : NULL;
    }
    if (ds->format == AG_FORMAT_SICK) ds->n_classes = 3;
}

/* ---- per-line parse context ------------------------------------------------ */

typedef struct {
    ag_dataset *ds;
    ag__data_line_reader lr;
    const ag_load_opts *o;
    ag_span *spans;
    size_t nspans;
    char *err;
    size_t errlen;
} load_ctx;

/* Tokenizes s[0..n) into ctx->spans (growing them); returns the count or -1. */
static int64_t tokenize_into(load_ctx *c, char *s, size_t n) {
    size_t k = ag_tokenize(s, n, c->o->lowercase, c->spans, c->nspans);
    if (k > c->nspans) {
        if (ag__data_grow((void **)&c->spans, &c->nspans, k, sizeof *c->spans)) return -1;
        ag_tokenize(s, n, 0, c->spans, c->nspans); /* already lowered */
    }
    return (int64_t)k;
}

/* A malformed line: fail, or (skip_bad_lines) count it and go on.
 * Returns 0 to continue, negative to stop with that code. */
static int bad_line(load_ctx *c, int64_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_line(load_ctx *c, int64_t line, const char *fmt, ...) {
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ag__ds_abort(c->ds);
    if (!c->o->skip_bad_lines)
        return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: %s", c->lr.path,
                            (long long)line, why);
    ag_corpus_stats *s = &c->ds->stats;
    if (s->skipped++ == 0)
        snprintf(s->first_warning, sizeof s->first_warning, "%s:%lld: %s (skipped)",
                 c->lr.path, (long long)line, why);
    return 0;
}

static int oom(load_ctx *c) {
    return ag__data_fail(c->err, c->errlen, AG_DATA_ENOMEM, "%s:%lld: out of memory or too "
                        "many tokens", c->lr.path, (long long)c->lr.lineno);
}

/* Counts a line that is not UTF-8 (kept as bytes), naming the first. */
void ag__data_note_utf8(ag_corpus_stats *s, const char *path, int64_t line, const char *text, size_t n) {
    long at = ag_utf8_error_at(text, n);
    if (at < 0) return;
    if (s->not_utf8++ == 0)
        snprintf(s->first_not_utf8, sizeof s->first_not_utf8, "%s:%lld: byte 0x%02x at column %ld", path,
                 (long long)line, (unsigned char)text[at], at + 1);
}

/* A sentence of more than max_words words: refused, naming its line, before
 * its words are kept (a batch of it would take memory in their square).  Not
 * a bad line that skip_bad_lines drops: as a line past max_line_bytes, it
 * says the limit is too low for this data, or the data is not sentences. */
int ag__data_too_many_words(const char *path, int64_t line, int64_t words, int64_t max_words, char *err,
                            size_t errlen) {
    if (max_words <= 0 || words <= max_words) return 0;
    return ag__data_fail(err, errlen, AG_DATA_ELIMIT, "%s:%lld: a sentence of %lld words, more than the limit of %lld: "
                         "refused before its words are kept", path, (long long)line, (long long)words,
                         (long long)max_words);
}

static int too_many_words(load_ctx *c, int64_t line, int64_t words) {
    int rc = ag__data_too_many_words(c->lr.path, line, words, c->o->max_words, c->err, c->errlen);
    if (rc) ag__ds_abort(c->ds);
    return rc;
}

/* Common per-line check; returns 1 if the line is junk (already reported). */
static int junk_line(load_ctx *c, int *rc) {
    long at = ag_data_find_junk(c->lr.buf, c->lr.len);
    if (at < 0) {
        ag__data_note_utf8(&c->ds->stats, c->lr.path, c->lr.lineno, c->lr.buf, c->lr.len);
        return 0;
    }
    *rc = bad_line(c, c->lr.lineno, "binary data (byte 0x%02x at column %ld)",
                   (unsigned char)c->lr.buf[at], at + 1);
    return 1;
}

/* The line's tokens into c->spans: their count; 0 for a blank line
 * (counted in the stats); -1 with *rc set for junk (reported) or no memory. */
static int64_t line_tokens(load_ctx *c, int *rc) {
    if (junk_line(c, rc)) return -1;
    int64_t k = tokenize_into(c, c->lr.buf, c->lr.len);
    if (k < 0) {
        *rc = oom(c);
        return -1;
    }
    if (k == 0) c->ds->stats.blank++;
    return k;
}

static int add_spans(load_ctx *c, const char *s, const ag_span *sp, int64_t k, int32_t head) {
    for (int64_t t = 0; t < k; t++)
        if (ag__ds_add(c->ds, s + sp[t].start, sp[t].len, head)) return oom(c);
    return 0;
}

/* Non-negative decimal integer filling all of s[0..n), at most max. */
static int parse_uint(const char *s, size_t n, long max, long *out) {
    if (n == 0 || n > 9) return 0;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max) return 0;
    *out = v;
    return 1;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Finite decimal number filling all of s[0..n): sign, digits, point, exponent
 * (the exponent because ag_dataset_save writes %g). strtod alone would also
 * take "0x3", "inf" and leading whitespace. */
static int parse_decimal(const char *s, size_t n, double *out) {
    char num[64];
    size_t i = 0, digits = 0;
    if (n == 0 || n >= sizeof num) return 0;
    if (s[i] == '+' || s[i] == '-') i++;
    for (; i < n && is_digit(s[i]); i++) digits++;
    if (i < n && s[i] == '.')
        for (i++; i < n && is_digit(s[i]); i++) digits++;
    if (digits == 0) return 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t exp_start = i;
        while (i < n && is_digit(s[i])) i++;
        if (i == exp_start) return 0;
    }
    if (i != n) return 0;
    memcpy(num, s, n);
    num[n] = 0;
    *out = strtod(num, NULL);
    return isfinite(*out);
}

/* A label beyond the data set's known classes (opts.n_classes) would add a
 * class. Fails even with skip_bad_lines: skipping would hide labels numbered
 * another way (1 and 2 for 0 and 1) by silently dropping a whole class. */
static int check_label_range(load_ctx *c, long label) {
    int32_t k = c->o->n_classes;
    if (k <= 0 || label < k) return 0;
    return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                        "%s:%lld: label %ld is outside [0, %d] (the data set has %d classes)",
                        c->lr.path, (long long)c->lr.lineno, label, (int)k - 1, (int)k);
}

/* ---- "label sentence" ---------------------------------------------------------- */

static int load_labeled_line(load_ctx *c) {
    int rc = 0;
    int64_t k = line_tokens(c, &rc);
    if (k <= 0) return rc; /* blank (counted), junk or out of memory */
    const char *lab = c->lr.buf + c->spans[0].start;
    long label;
    if (!parse_uint(lab, c->spans[0].len, AG_MAX_LABEL, &label))
        return bad_line(c, c->lr.lineno, "label '%.*s' is not an integer in [0, %d]",
                        (int)(c->spans[0].len > 40 ? 40 : c->spans[0].len), lab, AG_MAX_LABEL);
    if ((rc = check_label_range(c, label))) return rc;
    if (k == 1) return bad_line(c, c->lr.lineno, "empty sentence after label %ld", label);
    if ((rc = too_many_words(c, c->lr.lineno, k - 1))) return rc;
    ag__ds_begin(c->ds);
    if ((rc = add_spans(c, c->lr.buf, c->spans + 1, k - 1, 0))) return rc;
    if (ag__ds_end(c->ds, (int32_t)label, 0.0f, c->lr.lineno, 0)) return oom(c);
    return 0;
}

/* ---- LM text ------------------------------------------------------------------------ */

/* A token that ends a sentence of tokenised text: ".", "?" or "!" standing
 * alone.  Abbreviations keep their point ("U.S.", "Dr."), so a lone point
 * is a sentence's end; "..." is left inside (it often is not). */
static int ends_sentence(const char *s, const ag_span *sp) {
    return sp->len == 1 && (s[sp->start] == '.' || s[sp->start] == '?' || s[sp->start] == '!');
}

/* Tokens [from, to) of the line as one LM example, <eos> appended. */
static int add_lm_example(load_ctx *c, int64_t from, int64_t to) {
    int rc;
    ag__ds_begin(c->ds);
    if ((rc = add_spans(c, c->lr.buf, c->spans + from, to - from, 0))) return rc;
    if (ag__ds_add(c->ds, AG_EOS_TOKEN, strlen(AG_EOS_TOKEN), 0)) return oom(c);
    if (ag__ds_end(c->ds, -1, 0.0f, c->lr.lineno, c->o->lm_max_len + 1)) return oom(c);
    return 0;
}

int64_t ag__sentence_end(const char *s, const ag_span *spans, int64_t from, int64_t k) {
    for (int64_t t = from; t + 1 < k; t++)
        if (ends_sentence(s, &spans[t]) && !ends_sentence(s, &spans[t + 1])) return t + 1;
    return k;
}

/* One example a line, or with lm_sentences one a sentence. */
static int load_lm_line(load_ctx *c) {
    int rc = 0;
    int64_t k = line_tokens(c, &rc);
    if (k <= 0) return rc; /* blank (counted), junk or out of memory */
    for (int64_t from = 0, to; from < k; from = to) {
        to = c->o->lm_sentences ? ag__sentence_end(c->lr.buf, c->spans, from, k) : k;
        if ((rc = add_lm_example(c, from, to))) return rc;
    }
    return 0;
}

/* ---- SICK TSV ------------------------------------------------------------------------ */

typedef struct {
    char *s;
    size_t n;
} field;

/* Splits on tabs; fills up to maxf fields and returns how many there are. */
static int tsv_split(char *s, size_t n, field *f, int maxf) {
    int i = 0;
    size_t start = 0;
    for (size_t p = 0; p <= n; p++) {
        if (p == n || s[p] == '\t') {
            if (i < maxf) f[i] = (field){s + start, p - start};
            if (i < INT32_MAX) i++;
            start = p + 1;
        }
    }
    return i;
}

typedef struct {
    int ncols;
    int col_a, col_b, col_score, col_label;
    field *f; /* ncols fields of the current line */
} sick_cols;

static void trim(char **s, size_t *n) {
    while (*n && ((*s)[0] == ' ' || (*s)[0] == '\r')) (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\r')) (*n)--;
}

static int sick_header(load_ctx *c, sick_cols *h) {
    static const char *names[4] = {"sentence_A", "sentence_B", "relatedness_score",
                                   "entailment_judgment"};
    int *cols[4] = {&h->col_a, &h->col_b, &h->col_score, &h->col_label};
    if (strncmp(c->lr.buf, "pair_ID", 7) != 0)
        return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                            "%s:%lld: expected the SICK header line (pair_ID<TAB>sentence_A...)",
                            c->lr.path, (long long)c->lr.lineno);
    h->ncols = tsv_split(c->lr.buf, c->lr.len, NULL, 0);
    h->f = malloc((size_t)h->ncols * sizeof *h->f);
    if (!h->f) return oom(c);
    tsv_split(c->lr.buf, c->lr.len, h->f, h->ncols);
    for (int k = 0; k < 4; k++) {
        *cols[k] = -1;
        for (int i = 0; i < h->ncols && *cols[k] < 0; i++) {
            field f = h->f[i];
            trim(&f.s, &f.n);
            if (f.n == strlen(names[k]) && memcmp(f.s, names[k], f.n) == 0) *cols[k] = i;
        }
        if (*cols[k] < 0)
            return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                                "%s:%lld: header has no column '%s'", c->lr.path,
                                (long long)c->lr.lineno, names[k]);
    }
    return 0;
}

static int sick_label(const char *s, size_t n) {
    static const char *names[3] = {"NEUTRAL", "ENTAILMENT", "CONTRADICTION"};
    for (int i = 0; i < 3; i++)
        if (n == strlen(names[i]) && memcmp(s, names[i], n) == 0) return i;
    return -1;
}

/* 0 = added, 1 = line skipped, negative = error code */
static int sick_sentence(load_ctx *c, char *s, size_t n, const char *name) {
    int64_t k = tokenize_into(c, s, n);
    if (k < 0) return oom(c);
    if (k == 0) {
        int rc = bad_line(c, c->lr.lineno, "empty %s", name);
        return rc ? rc : 1;
    }
    return add_spans(c, s, c->spans, k, 0);
}

static int load_sick_line(load_ctx *c, sick_cols *h) {
    int rc = 0;
    if (junk_line(c, &rc)) return rc;
    if (ag_tokenize(c->lr.buf, c->lr.len, 0, NULL, 0) == 0) {
        c->ds->stats.blank++;
        return 0;
    }
    int nf = tsv_split(c->lr.buf, c->lr.len, h->f, h->ncols);
    if (nf != h->ncols)
        return bad_line(c, c->lr.lineno, "expected %d tab-separated columns, found %d",
                        h->ncols, nf);
    char *fa = h->f[h->col_a].s, *fb = h->f[h->col_b].s;
    char *fs = h->f[h->col_score].s, *fl = h->f[h->col_label].s;
    size_t na = h->f[h->col_a].n, nb = h->f[h->col_b].n;
    size_t ns = h->f[h->col_score].n, nl = h->f[h->col_label].n;
    trim(&fs, &ns);
    trim(&fl, &nl);
    /* parse score and label before tokenizing: lower-casing edits the line */
    double score;
    if (!parse_decimal(fs, ns, &score))
        return bad_line(c, c->lr.lineno, "relatedness score '%.*s' is not a decimal number",
                        (int)(ns > 40 ? 40 : ns), fs);
    int label = sick_label(fl, nl);
    if (label < 0)
        return bad_line(c, c->lr.lineno,
                        "entailment label '%.*s' is not NEUTRAL/ENTAILMENT/CONTRADICTION",
                        (int)(nl > 40 ? 40 : nl), fl);
    int64_t words = (int64_t)(ag_tokenize(fa, na, 0, NULL, 0) + ag_tokenize(fb, nb, 0, NULL, 0));
    if ((rc = too_many_words(c, c->lr.lineno, words))) return rc;
    ag__ds_begin(c->ds);
    if ((rc = sick_sentence(c, fa, na, "sentence_A"))) return rc < 0 ? rc : 0;
    ag__ds_begin_second(c->ds);
    if ((rc = sick_sentence(c, fb, nb, "sentence_B"))) return rc < 0 ? rc : 0;
    if (ag__ds_end(c->ds, label, (float)score, c->lr.lineno, 0)) return oom(c);
    return 0;
}

/* ---- CoNLL-U --------------------------------------------------------------------------- */

typedef struct {
    int open;           /* inside a sentence (saw a token line) */
    int bad;            /* skipping the rest of a bad sentence */
    int64_t number;     /* 1-based sentence number */
    int64_t first_line;
    long label;         /* from "# label = N", else -1 */
    int32_t sent_file;  /* from "# sent_id = FILE:LINE[:A|B]", else -1 */
    int64_t sent_line;
    int8_t sent_side;
    int64_t *tok_line;  /* line of each token, for messages */
    size_t cap_tok_line;
    int64_t *walk;      /* scratch of first_cycle_token, one per token */
    size_t cap_walk;
} conllu_state;

static int conllu_bad(load_ctx *c, conllu_state *s, int64_t line, const char *why) {
    int rc = bad_line(c, line, "sentence %lld: %s", (long long)s->number, why);
    s->bad = 1;
    return rc;
}

/* A token on a cycle of heads[0..n) (in range, none its own head), or -1
 * when every chain of heads reaches the root. Linear, not a walk of up to n
 * steps from each token as in ag_tree_distance: a sentence here can hold
 * millions of tokens. walk[t] = 1 + the start of the walk that first went
 * through t; a walk that stops at a token of an earlier walk is rooted. */
static int64_t first_cycle_token(const int32_t *heads, int64_t n, int64_t *walk) {
    memset(walk, 0, (size_t)n * sizeof *walk);
    for (int64_t start = 0; start < n; start++) {
        int64_t at = start;
        while (at >= 0 && walk[at] == 0) {
            walk[at] = start + 1;
            at = heads[at];
        }
        if (at >= 0 && walk[at] == start + 1) return at; /* came back: a cycle */
    }
    return -1;
}

/* The sent_id of the sentence just kept (example n - 1). */
static int keep_sent_id(load_ctx *c, const conllu_state *s) {
    ag_dataset_store *st = c->ds->store;
    size_t n = (size_t)c->ds->n, cap = st->cap_sent;
    if (ag__data_grow((void **)&st->sent_file, &cap, n, sizeof *st->sent_file)) return AG_DATA_ENOMEM;
    cap = st->cap_sent;
    if (ag__data_grow((void **)&st->sent_line, &cap, n, sizeof *st->sent_line)) return AG_DATA_ENOMEM;
    cap = st->cap_sent;
    if (ag__data_grow((void **)&st->sent_side, &cap, n, sizeof *st->sent_side)) return AG_DATA_ENOMEM;
    st->cap_sent = cap;
    st->sent_file[n - 1] = s->sent_file;
    st->sent_line[n - 1] = s->sent_line;
    st->sent_side[n - 1] = s->sent_side;
    return 0;
}

/* Validates the heads of the open sentence and keeps it. */
static int conllu_end_sentence(load_ctx *c, conllu_state *s) {
    int rc = 0;
    int64_t n = ag__ds_open_len(c->ds);
    const int32_t *heads = ag__ds_open_heads(c->ds);
    if (!s->bad && n == 0) rc = conllu_bad(c, s, s->first_line, "no word tokens");
    for (int64_t t = 0; !s->bad && t < n; t++) {
        char why[128];
        if (heads[t] >= n) {
            snprintf(why, sizeof why, "token %lld: head %lld out of range (%lld tokens)",
                     (long long)t + 1, (long long)heads[t] + 1, (long long)n);
            rc = conllu_bad(c, s, s->tok_line[t], why);
        } else if (heads[t] == t) {
            snprintf(why, sizeof why, "token %lld: head points to itself", (long long)t + 1);
            rc = conllu_bad(c, s, s->tok_line[t], why);
        }
    }
    if (!s->bad && ag__data_grow((void **)&s->walk, &s->cap_walk, (size_t)n, sizeof *s->walk))
        return oom(c);
    int64_t on_cycle = s->bad ? -1 : first_cycle_token(heads, n, s->walk);
    if (on_cycle >= 0) {
        char why[128];
        snprintf(why, sizeof why, "token %lld: its heads form a cycle that never reaches the root",
                 (long long)on_cycle + 1);
        rc = conllu_bad(c, s, s->tok_line[on_cycle], why);
    }
    if (!s->bad && s->label < 0 && c->o->require_labels)
        rc = conllu_bad(c, s, s->first_line, "no '# label = N' line (classification needs one)");
    if (!s->bad && (ag__ds_end(c->ds, (int32_t)s->label, 0.0f, s->first_line, 0) || keep_sent_id(c, s))) rc = oom(c);
    s->open = s->bad = 0;
    s->label = s->sent_file = -1;
    return rc;
}

static int conllu_token(load_ctx *c, conllu_state *s) {
    int64_t ln = c->lr.lineno;
    field f[10];
    int nf = tsv_split(c->lr.buf, c->lr.len, f, 10);
    if (nf != 10) {
        char why[80];
        snprintf(why, sizeof why, "expected 10 tab-separated columns, found %d", nf);
        return conllu_bad(c, s, ln, why);
    }
    char *fid = f[0].s, *fform = f[1].s, *fhead = f[6].s;
    size_t nid = f[0].n, nform = f[1].n, nhead = f[6].n;
    if (memchr(fid, '-', nid) || memchr(fid, '.', nid)) return 0; /* multiword / empty node */
    int64_t pos = ag__ds_open_len(c->ds);
    long id, head;
    if (!parse_uint(fid, nid, 999999999, &id) || id != pos + 1) {
        char why[96];
        snprintf(why, sizeof why, "token ID '%.*s', expected %lld", (int)(nid > 20 ? 20 : nid),
                 fid, (long long)pos + 1);
        return conllu_bad(c, s, ln, why);
    }
    if (!parse_uint(fhead, nhead, 999999999, &head)) {
        char why[96];
        snprintf(why, sizeof why, "token %ld: HEAD '%.*s' is not an integer", id,
                 (int)(nhead > 20 ? 20 : nhead), fhead);
        return conllu_bad(c, s, ln, why);
    }
    if (nform == 0) return conllu_bad(c, s, ln, "empty FORM");
    int rc = too_many_words(c, s->first_line, pos + 1);
    if (rc) return rc;
    for (size_t i = 0; i < nform; i++) { /* "1 000": keep one token per word */
        if (fform[i] == ' ') fform[i] = '_';
        if (c->o->lowercase && fform[i] >= 'A' && fform[i] <= 'Z') fform[i] += 'a' - 'A';
    }
    if (ag__data_grow((void **)&s->tok_line, &s->cap_tok_line, (size_t)pos + 1, sizeof *s->tok_line))
        return oom(c);
    s->tok_line[pos] = ln;
    if (ag__ds_add(c->ds, fform, nform, (int32_t)head - 1)) return oom(c);
    return 0;
}

/* "# sent_id = FILE:LINE" or "FILE:LINE:A|B" (the form CONLLU.md gives the
 * parses of a data file); any other id leaves the sentence without one. */
static int conllu_sent_id(load_ctx *c, conllu_state *s, const char *v, size_t n) {
    int8_t side = 0;
    if (n > 2 && v[n - 2] == ':' && (v[n - 1] == 'A' || v[n - 1] == 'B')) {
        side = v[n - 1];
        n -= 2;
    }
    size_t colon = n;
    while (colon > 0 && v[colon - 1] != ':') colon--;
    long line;
    if (colon < 2 || !parse_uint(v + colon, n - colon, 999999999, &line) || line < 1)
        return 0;
    if (ag__strtab_intern(&c->ds->store->sent_files, v, colon - 1, &s->sent_file)) return oom(c);
    s->sent_line = line;
    s->sent_side = side;
    return 0;
}

static int conllu_comment(load_ctx *c, conllu_state *s) {
    char *p = c->lr.buf + 1;
    while (*p == ' ') p++;
    size_t key = strcspn(p, " =");
    int is_label = key == 5 && !strncmp(p, "label", 5), is_id = key == 7 && !strncmp(p, "sent_id", 7);
    if (!is_label && !is_id) return 0;
    p += key;
    while (*p == ' ') p++;
    if (*p++ != '=') return 0;
    while (*p == ' ') p++;
    size_t n = strlen(p);
    while (n && p[n - 1] == ' ') n--;
    if (is_id) return conllu_sent_id(c, s, p, n);
    if (!parse_uint(p, n, AG_MAX_LABEL, &s->label)) {
        s->label = -1;
        return conllu_bad(c, s, c->lr.lineno, "'# label =' is not an integer in [0, 65535]");
    }
    return check_label_range(c, s->label);
}

static int conllu_line(load_ctx *c, conllu_state *s) {
    int rc = 0;
    int blank = ag_tokenize(c->lr.buf, c->lr.len, 0, NULL, 0) == 0;
    if (blank) {
        if (s->open || s->bad) return conllu_end_sentence(c, s);
        c->ds->stats.blank++;
        return 0;
    }
    if (!s->open && !s->bad) { /* a new sentence starts with its comments */
        s->open = 1;
        s->number++;
        s->first_line = c->lr.lineno;
        ag__ds_begin(c->ds);
    }
    if (s->bad) return 0;
    if (junk_line(c, &rc)) {
        s->bad = 1;
        return rc;
    }
    if (c->lr.buf[0] == '#') return conllu_comment(c, s);
    return conllu_token(c, s);
}

/* ---- driver ------------------------------------------------------------------------------ */

ag_load_opts ag_load_opts_default(void) {
    return (ag_load_opts){.lowercase = 0, .skip_bad_lines = 0, .lm_max_len = 35,
                          .max_line_bytes = (size_t)64 << 20};
}

/* A file (mem NULL) or bytes in memory named `path`. */
static int dataset_load(const char *path, const void *mem, size_t mem_len, ag_format fmt, const ag_load_opts *opts,
                        const ag_vocab *vocab, ag_dataset *ds, char *err, size_t errlen) {
    ag_load_opts o = opts ? *opts : ag_load_opts_default();
    memset(ds, 0, sizeof *ds);
    if (fmt < AG_FORMAT_LABELED || fmt > AG_FORMAT_LM)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL, "%s: unknown format %d", path, (int)fmt);
    if (fmt == AG_FORMAT_LM && o.lm_max_len < 1)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL, "lm_max_len must be >= 1");
    load_ctx c = {.ds = ds, .o = &o, .err = err, .errlen = errlen};
    int rc = mem ? ag__data_lines_open_mem(&c.lr, path, mem, mem_len, o.max_line_bytes, err, errlen)
                 : ag__data_lines_open(&c.lr, path, o.max_line_bytes, err, errlen);
    if (rc) return rc;
    if (o.first_line > 1) c.lr.lineno = o.first_line - 1;
    if (ag__ds_init(ds, fmt) || !(ds->store->path = strdup(path))) {
        ag__data_lines_close(&c.lr);
        ag_dataset_free(ds);
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    }
    ds->lm_max_len = fmt == AG_FORMAT_LM ? o.lm_max_len : 0;
    sick_cols cols = {0};
    int have_header = 0;
    conllu_state cs = {.label = -1, .sent_file = -1};
    while (rc == 0 && (rc = ag__data_lines_next(&c.lr, err, errlen)) == 1) {
        switch (fmt) {
        case AG_FORMAT_LABELED: rc = load_labeled_line(&c); break;
        case AG_FORMAT_LM: rc = load_lm_line(&c); break;
        case AG_FORMAT_CONLLU: rc = conllu_line(&c, &cs); break;
        case AG_FORMAT_SICK:
            if (have_header) rc = load_sick_line(&c, &cols);
            else if ((rc = sick_header(&c, &cols)) == 0) have_header = 1;
            break;
        }
    }
    if (rc == 0 && fmt == AG_FORMAT_CONLLU && (cs.open || cs.bad))
        rc = conllu_end_sentence(&c, &cs); /* no blank line at the end */
    if (rc == 0 && fmt == AG_FORMAT_SICK && !have_header)
        rc = ag__data_fail(err, errlen, AG_DATA_EFORMAT, "%s: empty file (no SICK header)", path);
    if (rc == 0 && ds->n == 0)
        rc = ag__data_fail(err, errlen, AG_DATA_EFORMAT, "%s: no examples", path);
    ds->stats.lines = c.lr.lineno;
    ag__data_lines_close(&c.lr);
    free(c.spans);
    free(cs.tok_line);
    free(cs.walk);
    free(cols.f);
    if (rc == 0) ag__ds_finish(ds);
    if (rc == 0 && vocab) rc = ag_dataset_encode(ds, vocab, err, errlen);
    if (rc < 0) ag_dataset_free(ds);
    return rc < 0 ? rc : 0;
}

int ag_dataset_load(const char *path, ag_format fmt, const ag_load_opts *opts, const ag_vocab *vocab, ag_dataset *ds,
                    char *err, size_t errlen) {
    return dataset_load(path, NULL, 0, fmt, opts, vocab, ds, err, errlen);
}

int ag_dataset_load_mem(const char *name, const void *bytes, size_t n, ag_format fmt, const ag_load_opts *opts,
                        const ag_vocab *vocab, ag_dataset *ds, char *err, size_t errlen) {
    return dataset_load(name, n ? bytes : "", n, fmt, opts, vocab, ds, err, errlen);
}

/* ---- encode, inspect, save ------------------------------------------------------------- */

int ag_dataset_encode(ag_dataset *ds, const ag_vocab *vocab, char *err, size_t errlen) {
    ag_dataset_store *st = ds->store;
    if (!st || !vocab) return ag__data_fail(err, errlen, AG_DATA_EINVAL, "encode: no data/vocab");
    int32_t nt = st->types.n;
    int32_t *map = malloc(((size_t)nt + 1) * sizeof *map);
    unsigned char *oov = malloc((size_t)nt + 1);
    int32_t *ids = realloc(st->ids, ((size_t)st->nraw + 1) * sizeof *ids);
    if (!map || !oov || !ids) {
        free(map);
        free(oov);
        if (ids) st->ids = ids;
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "encode: out of memory");
    }
    st->ids = ids;
    for (int32_t t = 0; t < nt; t++) { /* one hash lookup per type, not per token */
        const char *s = ag__strtab_str(&st->types, t);
        int32_t found = ag_vocab_find(vocab, s, st->types.len[t]);
        oov[t] = found < 0;
        map[t] = found <= AG_PAD_ID ? AG_UNK_ID : found;
    }
    for (int64_t i = 0; i < st->nraw; i++) ids[i] = map[st->raw[i]];
    int64_t unk = 0, noov = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        int64_t n_a = ds->ex[i].full_len - (ds->format == AG_FORMAT_LM ? 1 : 0);
        for (int pass = 0; pass < 2; pass++) {
            int64_t off = pass ? (st->off_b ? st->off_b[i] : 0) : st->off_a[i];
            int64_t n = pass ? (st->off_b ? ds->ex[i].len_b : 0) : n_a;
            for (int64_t t = 0; t < n; t++) {
                unk += ids[off + t] == AG_UNK_ID;
                noov += oov[st->raw[off + t]];
            }
        }
    }
    free(map);
    free(oov);
    ds->stats.unk = unk;
    ds->stats.oov = noov;
    ds->stats.oov_rate = ds->stats.tokens ? (double)noov / (double)ds->stats.tokens : 0.0;
    ds->encoded = 1;
    ag__ds_finish(ds);
    return 0;
}

const char *ag_dataset_word(const ag_dataset *ds, int64_t i, int second, int32_t t) {
    const ag_dataset_store *st = ds->store;
    if (!st || i < 0 || i >= ds->n || t < 0) return NULL;
    if (second && (!st->off_b || t >= ds->ex[i].len_b)) return NULL;
    if (!second && t >= ds->ex[i].full_len) return NULL;
    int64_t off = second ? st->off_b[i] : st->off_a[i];
    return ag__strtab_str(&st->types, st->raw[off + t]);
}

void ag_dataset_max_len(const ag_dataset *ds, int32_t *max_len, int32_t *max_len_b) {
    int32_t a = 0, b = 0;
    for (int64_t i = 0; i < ds->n; i++) {
        if (ds->ex[i].len > a) a = ds->ex[i].len;
        if (ds->ex[i].len_b > b) b = ds->ex[i].len_b;
    }
    if (max_len) *max_len = a;
    if (max_len_b) *max_len_b = b;
}

static void write_words(FILE *f, const ag_dataset *ds, int64_t i, int second, int32_t n) {
    for (int32_t t = 0; t < n; t++) {
        if (t) fputc(' ', f);
        fputs(ag_dataset_word(ds, i, second, t), f);
    }
}

static void save_example(FILE *f, const ag_dataset *ds, int64_t i) {
    static const char *sick_labels[3] = {"NEUTRAL", "ENTAILMENT", "CONTRADICTION"};
    const ag_example *e = &ds->ex[i];
    switch (ds->format) {
    case AG_FORMAT_LABELED:
        fprintf(f, "%d ", (int)e->label);
        write_words(f, ds, i, 0, e->full_len);
        break;
    case AG_FORMAT_LM: write_words(f, ds, i, 0, e->full_len - 1); break;
    case AG_FORMAT_SICK:
        fprintf(f, "%lld\t", (long long)i + 1);
        write_words(f, ds, i, 0, e->full_len);
        fputc('\t', f);
        write_words(f, ds, i, 1, e->len_b);
        fprintf(f, "\t%.9g\t%s", (double)e->score,
                e->label >= 0 && e->label < 3 ? sick_labels[e->label] : "NEUTRAL");
        break;
    case AG_FORMAT_CONLLU:
        if (e->label >= 0) fprintf(f, "# label = %d\n", (int)e->label);
        for (int32_t t = 0; t < e->full_len; t++)
            fprintf(f, "%d\t%s\t_\t_\t_\t_\t%d\t_\t_\t_\n", (int)t + 1,
                    ag_dataset_word(ds, i, 0, t), (int)e->heads[t] + 1);
        break;
    }
    fputc('\n', f);
}

int ag_dataset_save(const ag_dataset *ds, const char *path, char *err, size_t errlen) {
    if (!ds->store) return ag__data_fail(err, errlen, AG_DATA_EINVAL, "save: empty dataset");
    ag__atomic_file file; /* a data set written whole, or the old file kept */
    int e = ag__atomic_open(&file, path);
    if (e) return ag__data_fail(err, errlen, AG_DATA_EIO, "%s: cannot write: %s", path, strerror(e));
    if (ds->format == AG_FORMAT_SICK)
        fputs("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n", file.f);
    for (int64_t i = 0; i < ds->n; i++) save_example(file.f, ds, i);
    if ((e = ag__atomic_close(&file)) != 0) /* why: a full disk says so, not just that it failed */
        return ag__data_fail(err, errlen, AG_DATA_EIO, "%s: write failed: %s", path, strerror(e));
    return 0;
}

/* ---- names ---------------------------------------------------------------------------------- */

static const char *format_names[] = {NULL, "labeled", "sick", "conllu", "lm"};

int ag_format_parse(const char *name, ag_format *fmt) {
    for (int f = AG_FORMAT_LABELED; f <= AG_FORMAT_LM; f++)
        if (strcmp(name, format_names[f]) == 0) {
            *fmt = (ag_format)f;
            return 0;
        }
    return AG_DATA_EINVAL;
}

const char *ag_format_name(ag_format fmt) {
    return fmt >= AG_FORMAT_LABELED && fmt <= AG_FORMAT_LM ? format_names[fmt] : "unknown";
}

static const ag_benchmark benchmarks[] = {
    /* name  format  train  dev  test  cv  classes  lowercase  label-only lines  label names  sentences */
    {"trec", AG_FORMAT_LABELED, "trec/TREC.train.all", NULL, "trec/TREC.test.all", 0, 6, 1, 0,
     "DESC,ENTY,ABBR,HUM,LOC,NUM", 0},
    {"sst5", AG_FORMAT_LABELED, "sst/stsa.fine.train", "sst/stsa.fine.dev",
     "sst/stsa.fine.test", 0, 5, 0, 0,
     "very_negative,negative,neutral,positive,very_positive", 0},
    {"sst2", AG_FORMAT_LABELED, "sst/stsa.binary.train", "sst/stsa.binary.dev",
     "sst/stsa.binary.test", 0, 2, 0, 0, "negative,positive", 0},
    {"mr", AG_FORMAT_LABELED, "mr/rt-polarity.all", NULL, NULL, 1, 2, 0, 0, "negative,positive", 0},
    {"subj", AG_FORMAT_LABELED, "subj/subj.all", NULL, NULL, 1, 2, 0, 0, "subjective,objective", 0},
    {"cr", AG_FORMAT_LABELED, "cr/custrev.all", NULL, NULL, 1, 2, 0, 4, "negative,positive", 0},
    {"mpqa", AG_FORMAT_LABELED, "mpqa/mpqa.all", NULL, NULL, 1, 2, 0, 3, "negative,positive", 0},
    {"sick", AG_FORMAT_SICK, "sick/SICK_train.txt", "sick/SICK_trial.txt",
     "sick/SICK_test_annotated.txt", 0, 3, 1, 0,
     "NEUTRAL,ENTAILMENT,CONTRADICTION", 0},
    {"ptb", AG_FORMAT_LM, "ptb/ptb.train.txt", "ptb/ptb.valid.txt", "ptb/ptb.test.txt", 0, 0, 0,
     0, NULL, 0},
    {"wikitext2", AG_FORMAT_LM, "wikitext2/train.txt", "wikitext2/valid.txt",
     "wikitext2/test.txt", 0, 0, 0, 0, NULL, 1},
};

const ag_benchmark *ag_benchmark_find(const char *name) {
    for (size_t i = 0; i < sizeof benchmarks / sizeof *benchmarks; i++)
        if (strcmp(benchmarks[i].name, name) == 0) return &benchmarks[i];
    return NULL;
}
