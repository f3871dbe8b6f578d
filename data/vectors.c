/* vectors.c - pretrained word vectors for a vocabulary: Stanford GloVe text,
 * word2vec/fastText text with a "count dim" header, word2vec binary.
 *
 * The file is streamed once through a bounded line reader (or, for binary,
 * its byte buffer): a record is looked up as it goes by and kept only when a
 * vocabulary word wants it, so memory is the vocabulary's rows whatever the
 * file's size (glove.840B.300d.txt is 5.6 GB for 2.2M words).
 *
 * Which file a record matches: the exact token first; then, unless
 * exact_only, a vocabulary word whose ASCII-lowercased form is the record's
 * word (GloVe 6B is uncased: "The" gets the row of "the").  An exact match
 * always beats a lowercase one, wherever each is in the file.
 *
 * Checks, every one an error naming path:line (binary: the record and its
 * byte offset), so that a damaged file is never half-used: values that are
 * not decimal numbers (every record's syntax; the records kept also must be
 * finite floats), a record with too few or too many values, a dimension of 0
 * or above max_dim, a word that is not UTF-8, a count header that promises
 * more or fewer records than there are, a binary record cut short.  Records
 * whose word holds spaces (glove.840B has a few, "at name@domain.com") can
 * never be a token, so they are skipped and counted.  A word seen twice keeps
 * its first vector, as gensim does: counted, with the first case noted. */
#include "internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum {
    PEEK_BYTES = 4096,   /* how much of the first record tells text from binary */
    VEC_CHUNK = 1 << 20, /* read buffer; at least the line reader's own (64 KiB) */
};

const char *ag_vec_format_name(ag_vec_format f) {
    switch (f) {
    case AG_VEC_GLOVE: return "GloVe text";
    case AG_VEC_W2V_TEXT: return "word2vec text";
    case AG_VEC_W2V_BINARY: return "word2vec binary";
    }
    return "?";
}

void ag_vectors_free(ag_vectors *v) {
    free(v->rows);
    free(v->found);
    memset(v, 0, sizeof *v);
}

/* ---- small parsers ---- */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* The decimal grammar [+-]?(d+(.d*)?|.d+)([eE][+-]?d+)? and nothing else: no
 * hex, inf or nan, which strtod would take. */
static bool is_decimal(const char *s, size_t n) {
    size_t i = 0, digits = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) digits++;
    if (i < n && s[i] == '.')
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) digits++;
    if (!digits) return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t exp = 0;
        if (++i < n && (s[i] == '+' || s[i] == '-')) i++;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) exp++;
        if (!exp) return false;
    }
    return i == n;
}

static bool is_integer(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return n > 0 && n < 19;
}


/* ---- the state of one read ---- */

typedef struct {
    const char *path;
    const ag_vocab *vocab;
    ag_vec_opts opts;
    ag_vectors *out;
    ag__data_line_reader lr;
    /* ASCII-lowercased forms of the vocabulary's words that have capitals:
     * lower.id k -> first vocab id first[k], then next_id[id] ... (-1 ends) */
    ag__strtab lower;
    int32_t *first, *next_id;
    int64_t *line_of;  /* line (binary: record) that gave each vocab row, for duplicate notes */
    float *vec;        /* the record being matched */
    char *fold;        /* scratch for lowercasing a word */
    size_t fold_cap;
    char *err;
    size_t errlen;
} reader;

static void reader_free(reader *r) {
    ag__data_lines_close(&r->lr);
    ag__strtab_free(&r->lower);
    free(r->first);
    free(r->next_id);
    free(r->line_of);
    free(r->vec);
    free(r->fold);
}

static bool has_upper(const char *s) {
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z') return true;
    return false;
}

/* Lowercases s[0..n) into r->fold (NUL-terminated). */
static int fold_case(reader *r, const char *s, size_t n) {
    if (ag__data_grow((void **)&r->fold, &r->fold_cap, n + 1, 1)) return AG_DATA_ENOMEM;
    for (size_t i = 0; i < n; i++) r->fold[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    r->fold[n] = 0;
    return 0;
}

/* The vocabulary's lowercase forms, for the fallback. */
static int build_lower_map(reader *r) {
    int32_t V = ag_vocab_size(r->vocab);
    r->next_id = malloc((size_t)V * sizeof *r->next_id);
    if (!r->next_id) return AG_DATA_ENOMEM;
    size_t cap = 0;
    for (int32_t id = AG_UNK_ID + 1; id < V; id++) {
        const char *w = ag_vocab_token(r->vocab, id);
        if (!has_upper(w)) continue;
        int32_t k, forms = r->lower.n;
        if (fold_case(r, w, strlen(w)) || ag__strtab_intern(&r->lower, r->fold, strlen(r->fold), &k) ||
            ag__data_grow((void **)&r->first, &cap, (size_t)k + 1, sizeof *r->first))
            return AG_DATA_ENOMEM;
        if (r->lower.n > forms) r->first[k] = -1; /* a new form: its list starts empty */
        r->next_id[id] = r->first[k];
        r->first[k] = id;
    }
    return 0;
}

static int fail(reader *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(reader *r, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (r->err && r->errlen) vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return code;
}

/* Where a record is, for messages: "path:12" (text, a line) or "path:
 * record 12 (byte 3456 after the header)" (binary; byte < 0: text). */
static const char *where(const reader *r, int64_t rec, int64_t byte, char *buf, size_t n) {
    if (byte < 0) snprintf(buf, n, "%s:%lld", r->path, (long long)rec);
    else snprintf(buf, n, "%s: record %lld (byte %lld after the header)", r->path, (long long)rec, (long long)byte);
    return buf;
}

/* What every word must be, used or not: not empty, no control bytes,
 * UTF-8.  A NUL or another control byte is valid UTF-8, so without its own
 * check a damaged file (or a binary one read as text) would pass silently:
 * its words would just never match a token, as the data loaders refuse
 * those bytes. */
static int check_word(reader *r, const char *w, size_t n, int64_t rec, int64_t byte) {
    char at[AG_ERR_LEN];
    if (!n) return fail(r, AG_DATA_EFORMAT, "%s: empty word", where(r, rec, byte, at, sizeof at));
    long junk = ag_data_find_junk(w, n);
    if (junk >= 0)
        return fail(r, AG_DATA_EFORMAT, "%s: binary data in the word (byte 0x%02x at offset %ld)",
                    where(r, rec, byte, at, sizeof at), (unsigned char)w[junk], junk);
    long bad = ag_utf8_error_at(w, n);
    if (bad >= 0)
        return fail(r, AG_DATA_EFORMAT, "%s: the word is not UTF-8 (byte 0x%02x at offset %ld of '%.40s')",
                    where(r, rec, byte, at, sizeof at), (unsigned char)w[bad], bad, w);
    return 0;
}

/* Gives row `id` the vector when `how` (exact or lowercase) beats what it
 * holds; true when the row already holds this same word's vector (a
 * duplicate: the first one stays). */
static bool offer(reader *r, int32_t id, uint8_t how, const float *vec, int64_t rec, int64_t *first_rec) {
    ag_vectors *v = r->out;
    uint8_t had = v->found[id];
    if (had == how) { /* only the same word gives the same kind of match twice */
        *first_rec = r->line_of[id];
        return true;
    }
    if (had == AG_VEC_EXACT) return false; /* an exact match is never replaced by a lowercase one */
    memcpy(v->rows + (size_t)id * v->dim, vec, (size_t)v->dim * sizeof(float));
    if (had == AG_VEC_LOWER) v->n_lower--;
    v->found[id] = how;
    how == AG_VEC_EXACT ? v->n_exact++ : v->n_lower++;
    r->line_of[id] = rec;
    return false;
}

/* Fills r->vec from the record (0, or an error written). */
typedef int (*parse_fn)(reader *r, const void *record);

/* Offers record `rec` (word w) to the vocabulary rows that want it: the
 * word itself, and when it is lowercase the capitalised words whose
 * lowercase form it is.  Its values are parsed only then. */
static int match(reader *r, const char *w, size_t n, int64_t rec, parse_fn parse, const void *record) {
    int32_t exact = ag_vocab_find(r->vocab, w, n);
    if (exact <= AG_UNK_ID) exact = -1; /* <pad> stays zero; <unk> is no word */
    if (fold_case(r, w, n)) return fail(r, AG_DATA_ENOMEM, "%s: out of memory", r->path);
    bool lowercase = !memcmp(w, r->fold, n);
    int32_t k = !r->opts.exact_only && lowercase && r->lower.n ? ag__strtab_find(&r->lower, w, n) : -1;
    if (exact < 0 && k < 0) return 0;
    int rc = parse(r, record);
    if (rc) return rc;
    int64_t first = 0;
    bool dup = exact >= 0 && offer(r, exact, AG_VEC_EXACT, r->vec, rec, &first);
    for (int32_t id = k >= 0 ? r->first[k] : -1; id >= 0; id = r->next_id[id])
        dup |= offer(r, id, AG_VEC_LOWER, r->vec, rec, &first);
    ag_vectors *v = r->out;
    if (dup && !v->duplicates++)
        snprintf(v->first_warning, sizeof v->first_warning, "'%.60s' on %s %lld again: %s %lld's vector is used", w, v->format == AG_VEC_W2V_BINARY ? "record" : "line",
                 (long long)rec, v->format == AG_VEC_W2V_BINARY ? "record" : "line", (long long)first);
    return 0;
}

static int check_dim(reader *r, int64_t dim, int64_t rec) {
    char at[AG_ERR_LEN];
    if (dim < 1) return fail(r, AG_DATA_EFORMAT, "%s: dimension %lld: vectors need at least one value", where(r, rec, -1, at, sizeof at), (long long)dim);
    if (dim > r->opts.max_dim)
        return fail(r, AG_DATA_ELIMIT, "%s: dimension %lld is absurd (at most %d)", where(r, rec, -1, at, sizeof at),
                    (long long)dim, r->opts.max_dim);
    ag_vectors *v = r->out;
    int32_t V = ag_vocab_size(r->vocab);
    v->dim = (int32_t)dim;
    v->vocab = V;
    v->rows = calloc((size_t)V * (size_t)dim, sizeof *v->rows);
    v->found = calloc((size_t)V, 1);
    r->line_of = calloc((size_t)V, sizeof *r->line_of);
    r->vec = malloc((size_t)dim * sizeof *r->vec);
    if (!v->rows || !v->found || !r->line_of || !r->vec)
        return fail(r, AG_DATA_ENOMEM, "%s: out of memory for %d rows of %lld values", r->path, V, (long long)dim);
    return 0;
}

/* ---- text records ---- */

typedef struct {
    const char *const *val; /* the value fields */
    const size_t *len;
    int64_t line;
} text_record;

static int parse_text(reader *r, const void *record) {
    const text_record *t = record;
    float *vec = r->vec;
    char at[AG_ERR_LEN], num[64];
    for (int32_t i = 0; i < r->out->dim; i++) {
        size_t n = t->len[i] < sizeof num - 1 ? t->len[i] : sizeof num - 1;
        memcpy(num, t->val[i], n);
        num[n] = 0;
        float x = strtof(num, NULL);
        if (!isfinite(x) || t->len[i] >= sizeof num - 1)
            return fail(r, AG_DATA_EFORMAT, "%s: value %d ('%.40s') is not a finite float",
                        where(r, t->line, -1, at, sizeof at), i + 1, num);
        vec[i] = x;
    }
    return 0;
}

/* Splits the line into fields at runs of blanks (word2vec writes a space
 * after the last value); *nf may exceed max (then only max are stored). */
static size_t split(char *s, size_t n, const char **f, size_t *len, size_t max) {
    size_t nf = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && is_blank(s[i])) i++;
        if (i == n) break;
        size_t start = i;
        while (i < n && !is_blank(s[i])) i++;
        if (nf < max) f[nf] = s + start, len[nf] = i - start;
        nf++;
    }
    return nf;
}

typedef struct {
    const char **f;
    size_t *len, cap;
} fields;

/* Value k of the line is no decimal number: say which, and say binary data
 * when a control byte is why (quoted, a NUL would cut the value short). */
static int bad_value(reader *r, const char *s, size_t n, size_t k) {
    char at[AG_ERR_LEN];
    long junk = ag_data_find_junk(s, n);
    if (junk >= 0)
        return fail(r, AG_DATA_EFORMAT, "%s: value %zu: binary data (byte 0x%02x at offset %ld)",
                    where(r, r->lr.lineno, -1, at, sizeof at), k, (unsigned char)s[junk], junk);
    return fail(r, AG_DATA_EFORMAT, "%s: value %zu ('%.*s') is not a number", where(r, r->lr.lineno, -1, at, sizeof at),
                k, (int)(n < 40 ? n : 40), s);
}

static int text_line(reader *r, fields *fs) {
    ag__data_line_reader *lr = &r->lr;
    char at[AG_ERR_LEN];
    size_t nf = split(lr->buf, lr->len, fs->f, fs->len, fs->cap);
    if (nf == 0) return 0; /* a blank line */
    if (nf > fs->cap) { /* a line with more fields than room: grow, split again */
        size_t cap = fs->cap;
        if (ag__data_grow((void **)&fs->f, &cap, nf, sizeof *fs->f) ||
            ag__data_grow((void **)&fs->len, &fs->cap, nf, sizeof *fs->len))
            return fail(r, AG_DATA_ENOMEM, "%s: out of memory", r->path);
        split(lr->buf, lr->len, fs->f, fs->len, fs->cap);
    }
    ag_vectors *v = r->out;
    if (!v->dim) { /* GloVe: the first record sets the dimension */
        int rc = check_dim(r, (int64_t)nf - 1, lr->lineno);
        if (rc) return rc;
    }
    /* More fields than a word and d values: a word with spaces when none of
     * the extra fields is a number ("at name@domain.com", ". . ."), else a
     * record with too many values.  Ambiguous cases are errors, not skips. */
    size_t d = (size_t)v->dim, words = nf > d ? nf - d : 1;
    bool spaced = words > 1;
    for (size_t i = 1; i < words && spaced; i++) spaced = !is_decimal(fs->f[i], fs->len[i]);
    if (nf < d + 1 || (nf > d + 1 && !spaced))
        return fail(r, AG_DATA_EFORMAT, "%s: '%.*s' has %zu values, expected %zu", where(r, lr->lineno, -1, at, sizeof at),
                    (int)(fs->len[0] < 40 ? fs->len[0] : 40), fs->f[0], nf - 1, d);
    for (size_t i = words; i < nf; i++)
        if (!is_decimal(fs->f[i], fs->len[i]))
            return bad_value(r, fs->f[i], fs->len[i], i - words + 1);
    size_t wlen = (size_t)(fs->f[words - 1] + fs->len[words - 1] - fs->f[0]);
    char *word = (char *)fs->f[0];
    word[wlen] = 0; /* ends the word (the blank after it; values are kept by length) */
    int rc = check_word(r, word, wlen, lr->lineno, -1);
    if (rc) return rc;
    if (spaced) { /* "at name@domain.com": no token holds a space */
        v->spaced++;
        return 0;
    }
    v->records++;
    text_record t = {fs->f + words, fs->len + words, lr->lineno};
    return match(r, word, wlen, lr->lineno, parse_text, &t);
}

/* ---- binary records: "word " then dim little-endian float32, maybe '\n' ---- */

/* Makes n bytes available at lr->chunk + lr->chunk_pos (n <= the chunk size);
 * returns how many are (fewer at the end of the file). */
static size_t have_bytes(ag__data_line_reader *lr, size_t n, size_t chunk_size) {
    size_t avail = lr->chunk_len - lr->chunk_pos;
    if (avail >= n || lr->eof) return avail < n ? avail : n;
    memmove(lr->chunk, lr->chunk + lr->chunk_pos, avail);
    lr->chunk_pos = 0;
    lr->chunk_len = avail;
    while (lr->chunk_len < n) {
        size_t got = ag__data_lines_read(lr, lr->chunk + lr->chunk_len, chunk_size - lr->chunk_len);
        if (!got) {
            lr->eof = 1;
            break;
        }
        lr->chunk_len += got;
    }
    return lr->chunk_len < n ? lr->chunk_len : n;
}

typedef struct {
    const unsigned char *bytes;
    int64_t rec, offset;
} bin_record;

static int parse_binary(reader *r, const void *record) {
    const bin_record *b = record;
    float *vec = r->vec;
    char at[AG_ERR_LEN];
    for (int32_t i = 0; i < r->out->dim; i++) {
        const unsigned char *p = b->bytes + 4 * (size_t)i;
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        float x;
        memcpy(&x, &u, sizeof x);
        if (!isfinite(x))
            return fail(r, AG_DATA_EFORMAT, "%s: value %d is not a finite float (%g)", where(r, b->rec, b->offset, at, sizeof at),
                        i + 1, (double)x);
        vec[i] = x;
    }
    return 0;
}

/* The chunk must hold a word and a vector: the word is cut at 1 KiB. */
enum { MAX_BINARY_WORD = 1024 };

static int binary_records(reader *r, int64_t count, size_t chunk_size) {
    ag__data_line_reader *lr = &r->lr;
    ag_vectors *v = r->out;
    size_t vbytes = 4 * (size_t)v->dim;
    int64_t offset = 0; /* of the record, from the end of the header */
    char at[AG_ERR_LEN];
    for (int64_t rec = 1;; rec++) {
        /* word2vec ends each vector with '\n'; gensim's files may not */
        while (have_bytes(lr, 1, chunk_size) && lr->chunk[lr->chunk_pos] == '\n') lr->chunk_pos++, offset++;
        size_t got = have_bytes(lr, MAX_BINARY_WORD + 1 + vbytes, chunk_size);
        if (!got) {
            if (rec - 1 != count)
                return fail(r, AG_DATA_EFORMAT, "%s: truncated: the header promises %lld vectors, the file ends after %lld",
                            r->path, (long long)count, (long long)(rec - 1));
            return 0;
        }
        if (rec > count)
            return fail(r, AG_DATA_EFORMAT, "%s: more than the %lld vectors the header promises", where(r, rec, offset, at, sizeof at),
                        (long long)count);
        char *start = lr->chunk + lr->chunk_pos, *space = memchr(start, ' ', got < MAX_BINARY_WORD + 1 ? got : MAX_BINARY_WORD + 1);
        if (!space)
            return fail(r, AG_DATA_EFORMAT, "%s: %s", where(r, rec, offset, at, sizeof at),
                        got <= MAX_BINARY_WORD ? "truncated: the file ends inside a word" : "no space after the word within 1024 bytes");
        size_t wlen = (size_t)(space - start);
        if (got - wlen - 1 < vbytes)
            return fail(r, AG_DATA_EFORMAT, "%s: truncated: '%.*s' has %zu of its %zu bytes of values",
                        where(r, rec, offset, at, sizeof at), (int)(wlen < 40 ? wlen : 40), start, got - wlen - 1, vbytes);
        *space = 0;
        int rc = check_word(r, start, wlen, rec, offset);
        if (rc) return rc;
        v->records++;
        bin_record b = {(const unsigned char *)space + 1, rec, offset};
        if ((rc = match(r, start, wlen, rec, parse_binary, &b))) return rc;
        lr->chunk_pos += wlen + 1 + vbytes;
        offset += (int64_t)(wlen + 1 + vbytes);
    }
}

/* ---- detection and the whole read ---- */

/* After a "count dim" header: binary when the bytes after the first word
 * are not text (float32 bytes of real vectors always include some). */
static bool looks_binary(ag__data_line_reader *lr, size_t chunk_size) {
    size_t got = have_bytes(lr, PEEK_BYTES, chunk_size);
    const unsigned char *p = (const unsigned char *)lr->chunk + lr->chunk_pos;
    const unsigned char *space = memchr(p, ' ', got);
    for (const unsigned char *q = space ? space + 1 : p + got; q < p + got && *q != '\n'; q++)
        if ((*q < 0x20 && *q != '\t') || *q >= 0x7f) return true;
    return false;
}

static int read_all(reader *r) {
    ag_vectors *v = r->out;
    ag__data_line_reader *lr = &r->lr;
    size_t chunk_size = VEC_CHUNK;
    char *bigger = realloc(lr->chunk, chunk_size); /* nothing read yet: the line reader takes any size >= its own */
    if (!bigger) return fail(r, AG_DATA_ENOMEM, "%s: out of memory", r->path);
    lr->chunk = bigger;
    int rc = ag__data_lines_next(lr, r->err, r->errlen);
    if (rc < 0) return rc;
    if (rc == 0) return fail(r, AG_DATA_EFORMAT, "%s: empty file", r->path);
    const char *f[3];
    size_t len[3];
    int64_t count = -1;
    v->format = AG_VEC_GLOVE;
    if (split(lr->buf, lr->len, f, len, 3) == 2 && is_integer(f[0], len[0]) && is_integer(f[1], len[1])) { /* "count dim" */
        count = strtoll(f[0], NULL, 10);
        if ((rc = check_dim(r, strtoll(f[1], NULL, 10), 1))) return rc;
        if (count < 1) return fail(r, AG_DATA_EFORMAT, "%s:1: the header promises %lld vectors", r->path, (long long)count);
        v->format = looks_binary(lr, chunk_size) ? AG_VEC_W2V_BINARY : AG_VEC_W2V_TEXT;
    }
    if (v->format == AG_VEC_W2V_BINARY) {
        size_t need = MAX_BINARY_WORD + 1 + 4 * (size_t)v->dim;
        if (need > chunk_size) {
            if (!(bigger = realloc(lr->chunk, need))) return fail(r, AG_DATA_ENOMEM, "%s: out of memory", r->path);
            lr->chunk = bigger;
            chunk_size = need;
        }
        return binary_records(r, count, chunk_size);
    }
    fields fs = {0};
    if (v->format == AG_VEC_GLOVE) rc = text_line(r, &fs); /* line 1 is a record */
    while (rc >= 0 && (rc = ag__data_lines_next(lr, r->err, r->errlen)) == 1) rc = text_line(r, &fs);
    free(fs.f);
    free(fs.len);
    if (rc < 0) return rc;
    if (!v->dim) return fail(r, AG_DATA_EFORMAT, "%s: no vectors (only blank lines)", r->path);
    if (count >= 0 && v->records + v->spaced != count)
        return fail(r, AG_DATA_EFORMAT, "%s: the header promises %lld vectors, the file holds %lld%s", r->path,
                    (long long)count, (long long)(v->records + v->spaced),
                    v->records + v->spaced < count ? " (truncated?)" : "");
    return 0;
}

/* A file (mem NULL) or bytes in memory named `path`. */
static int vectors_read(const char *path, const void *mem, size_t mem_len, const ag_vocab *vocab,
                        const ag_vec_opts *opts, ag_vectors *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    reader r = {.path = path, .vocab = vocab, .out = out, .err = err, .errlen = errlen};
    if (opts) r.opts = *opts;
    if (r.opts.max_dim <= 0) r.opts.max_dim = AG_VEC_MAX_DIM;
    int rc = mem ? ag__data_lines_open_mem(&r.lr, path, mem, mem_len, 0, err, errlen)
                 : ag__data_lines_open(&r.lr, path, 0, err, errlen);
    if (!rc && build_lower_map(&r)) rc = fail(&r, AG_DATA_ENOMEM, "%s: out of memory", path);
    if (!rc) rc = read_all(&r);
    reader_free(&r);
    if (rc) ag_vectors_free(out); /* nothing half-loaded */
    return rc;
}

int ag_vectors_read(const char *path, const ag_vocab *vocab, const ag_vec_opts *opts, ag_vectors *out, char *err,
                    size_t errlen) {
    return vectors_read(path, NULL, 0, vocab, opts, out, err, errlen);
}

int ag_vectors_read_mem(const char *name, const void *bytes, size_t n, const ag_vocab *vocab, const ag_vec_opts *opts,
                        ag_vectors *out, char *err, size_t errlen) {
    return vectors_read(name, bytes ? bytes : "", n, vocab, opts, out, err, errlen);
}

int64_t ag_vectors_coverage(const ag_vectors *v, const ag_dataset *ds, const int64_t *subset, int64_t n,
                            int64_t *tokens) {
    int64_t covered = 0, total = 0;
    if (!subset) n = ds->n;
    for (int64_t i = 0; ds->encoded && i < n; i++) {
        const ag_example *e = &ds->ex[subset ? subset[i] : i];
        for (int side = 0; side < 2; side++) {
            const int32_t *t = side ? e->tokens_b : e->tokens;
            int32_t len = side ? e->len_b : e->len;
            for (int32_t k = 0; t && k < len; k++) covered += t[k] >= 0 && t[k] < v->vocab && v->found[t[k]];
            total += t ? len : 0;
        }
    }
    if (tokens) *tokens = total;
    return covered;
}
