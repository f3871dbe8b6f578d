/* parses.c - dependency parses (a CoNLL-U dataset) onto the sentences of
 * another dataset: each sentence finds its parse by the parse's
 * "# sent_id = FILE:LINE" (":A" / ":B" for the sides of a pair), or by
 * order when the parses carry no such ids, and the words must agree. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
    const ag_dataset *ds, *parses;
    const char *data_name, *parse_name;
    const char *want_file; /* the data file's name, which sent_ids must give; NULL: not checked */
    int64_t *at[2];   /* [line]: the parse of that line's first / second sentence, -1 none */
    int64_t max_line;
    char *err;
    size_t errlen;
} attach_ctx;

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* a[0..n) == b[0..n), ASCII case aside: a lower-cased data set keeps the
 * parse of its cased text. */
static int same_prefix(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char x = a[i] >= 'A' && a[i] <= 'Z' ? a[i] + ('a' - 'A') : a[i], y = b[i] >= 'A' && b[i] <= 'Z' ? b[i] + ('a' - 'A') : b[i];
        if (x != y) return 0;
    }
    return 1;
}

/* The heads of n words from parse k of p.  Each word is one token of the
 * parse, or several that spaCy split at a no-break space (U+00A0, which
 * our tokenizer keeps inside a word: SST's "8 1/2"): such a word takes the
 * head of its piece nearest the root, and what pointed at any piece points
 * at the word.  Contracting pieces that way never makes a cycle: nothing
 * above that piece is part of the word.  Returns -1, or the first word
 * (n: the parse's tokens left over) that does not match, its token in *tok. */
int32_t ag__data_parse_heads(ag__word_fn word, void *ctx, int32_t n, const ag_dataset *p, int64_t k, int32_t *heads,
                            int32_t *scratch, int32_t *tok) {
    const ag_example *e = &p->ex[k];
    int32_t m = e->len, j = 0, *word_of = scratch; /* [m]: the word each token is part of */
    for (int32_t t = 0; t < n; t++) {
        size_t len, pos = 0;
        const char *w = word(ctx, t, &len);
        for (;;) {
            *tok = j;
            if (j >= m) return t;
            const char *q = ag_dataset_word(p, k, 0, j);
            size_t ql = strlen(q);
            if (ql > len - pos || !same_prefix(w + pos, q, ql)) return t;
            word_of[j++] = t;
            if ((pos += ql) == len) break;
            if (len - pos < 3 || memcmp(w + pos, "\xc2\xa0", 2)) return t;
            pos += 2;
        }
    }
    *tok = j;
    if (j != m) return n;
    for (int32_t t = 0; t < n; t++) heads[t] = INT32_MIN;
    int32_t *depth_of = scratch + m; /* [n]: depth of the word's piece that gave its head */
    for (int32_t i = 0; i < m; i++) {
        int32_t depth = 0;
        for (int32_t a = e->heads[i]; a >= 0; a = e->heads[a]) depth++;
        int32_t t = word_of[i];
        if (heads[t] == INT32_MIN || depth < depth_of[t]) {
            heads[t] = e->heads[i] < 0 ? AG_HEAD_ROOT : word_of[e->heads[i]];
            depth_of[t] = depth;
        }
    }
    return -1;
}

typedef struct {
    const ag_dataset *ds;
    int64_t i;
    int second;
} data_words;

static const char *data_word(void *ctx, int32_t t, size_t *len) {
    const data_words *d = ctx;
    const char *w = ag_dataset_word(d->ds, d->i, d->second, t);
    *len = strlen(w);
    return w;
}

/* Sentence `second` of example i gets the heads of parse k, whose words
 * must be its own. */
static int heads_from(const attach_ctx *c, int64_t i, int second, int64_t k, int32_t *heads, int32_t *scratch) {
    const ag_example *e = &c->ds->ex[i], *p = &c->parses->ex[k];
    int32_t n = second ? e->len_b : e->full_len, tok;
    const char *which = c->ds->format == AG_FORMAT_SICK ? second ? " (sentence B)" : " (sentence A)" : "";
    data_words dw = {c->ds, i, second};
    int32_t bad = ag__data_parse_heads(data_word, &dw, n, c->parses, k, heads, scratch, &tok);
    if (bad < 0) return 0;
    if (bad == n || tok >= p->len) /* one side ran out of words */
        return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                            "%s:%lld%s has %d words, but its parse at %s:%lld has %d tokens", c->data_name,
                            (long long)e->line, which, (int)n, c->parse_name, (long long)p->line, (int)p->len);
    return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                        "%s:%lld%s: word %d is '%.40s', but its parse at %s:%lld has '%.40s' (token %d)", c->data_name,
                        (long long)e->line, which, (int)bad + 1, ag_dataset_word(c->ds, i, second, bad), c->parse_name,
                        (long long)p->line, ag_dataset_word(c->parses, k, 0, tok), (int)tok + 1);
}

/* Every parse indexed by its sent_id's line and side; the FILE must be the
 * data file's name, and no (line, side) may come twice. */
static int index_by_id(attach_ctx *c) {
    const ag_dataset_store *ps = c->parses->store;
    const char *want = c->want_file;
    for (int64_t i = 0; i < c->ds->n; i++) /* the index spans the data's lines, whatever a sent_id claims */
        if (c->ds->ex[i].line > c->max_line) c->max_line = c->ds->ex[i].line;
    for (int64_t k = 0; k < c->parses->n; k++)
        if (ps->sent_line[k] > c->max_line)
            return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: a parse of %s:%lld%s, which holds no such sentence",
                                c->parse_name, (long long)c->parses->ex[k].line, c->data_name,
                                (long long)ps->sent_line[k], ps->sent_side[k] == 'B' ? " (sentence B)" : "");
    for (int s = 0; s < 2; s++) {
        if (!(c->at[s] = malloc(((size_t)c->max_line + 1) * sizeof *c->at[s]))) return AG_DATA_ENOMEM;
        for (int64_t l = 0; l <= c->max_line; l++) c->at[s][l] = -1;
    }
    for (int64_t k = 0; k < c->parses->n; k++) {
        const char *file = ag__strtab_str(&ps->sent_files, ps->sent_file[k]);
        if (want && strcmp(file, want))
            return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                                "%s:%lld: sent_id names file '%.60s', but the data file is %s", c->parse_name,
                                (long long)c->parses->ex[k].line, file, c->data_name);
        int side = ps->sent_side[k] == 'B';
        int64_t *slot = &c->at[side][ps->sent_line[k]];
        if (*slot >= 0)
            return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: a second parse of %s:%lld%s (the first at line %lld)",
                                c->parse_name, (long long)c->parses->ex[k].line, file, (long long)ps->sent_line[k],
                                side ? ":B" : "", (long long)c->parses->ex[*slot].line);
        *slot = k;
    }
    return 0;
}

/* The parse of sentence `second` of example i, or -1 with the message set. */
static int64_t parse_of(attach_ctx *c, int64_t i, int second, int by_id) {
    const ag_example *e = &c->ds->ex[i];
    int per = c->ds->format == AG_FORMAT_SICK ? 2 : 1;
    int64_t k = by_id ? (e->line <= c->max_line ? c->at[second][e->line] : -1) : i * per + second;
    if (k < 0 || k >= c->parses->n)
        ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: no parse of this %s in %s%s", c->data_name,
                     (long long)e->line, per == 2 ? second ? "pair's sentence B" : "pair's sentence A" : "sentence",
                     c->parse_name, by_id ? " (no sent_id names this line)" : " (fewer parses than sentences)");
    return k < c->parses->n ? k : -1;
}

static int attach(attach_ctx *c, ag_dataset *ds) {
    const ag_dataset *p = c->parses;
    ag_dataset_store *st = ds->store, *ps = p->store;
    int per = ds->format == AG_FORMAT_SICK ? 2 : 1;
    int by_id = ps->sent_line != NULL;
    for (int64_t k = 0; by_id && k < p->n; k++) by_id = ps->sent_file[k] >= 0;
    int rc = by_id ? index_by_id(c) : 0;
    if (rc) return rc;
    if (!by_id && p->n != ds->n * per)
        return ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT,
                            "%s holds %lld parses and no 'sent_id = FILE:LINE' lines, but %s has %lld sentences: "
                            "cannot match them by order", c->parse_name, (long long)p->n, c->data_name,
                            (long long)(ds->n * per));
    int32_t *heads = malloc(((size_t)st->nraw + 1) * sizeof *heads), longest = 0;
    for (int64_t k = 0; k < p->n; k++) longest = p->ex[k].len > longest ? p->ex[k].len : longest;
    int32_t *scratch = malloc(2 * ((size_t)longest + 1) * sizeof *scratch);
    int64_t *used = by_id ? calloc((size_t)p->n + 1, sizeof *used) : NULL;
    if (!heads || !scratch || (by_id && !used)) rc = AG_DATA_ENOMEM;
    for (int64_t i = 0; !rc && i < ds->n; i++)
        for (int second = 0; !rc && second < per; second++) {
            int64_t k = parse_of(c, i, second, by_id);
            int64_t off = k < 0 ? 0 : second ? st->off_b[i] : st->off_a[i];
            if (k < 0 || (rc = heads_from(c, i, second, k, heads + off, scratch))) {
                rc = rc ? rc : AG_DATA_EFORMAT;
                break;
            }
            if (used) used[k] = 1;
        }
    for (int64_t k = 0; !rc && used && k < p->n; k++)
        if (!used[k])
            rc = ag__data_fail(c->err, c->errlen, AG_DATA_EFORMAT, "%s:%lld: a parse of %s:%lld%s, which holds no such sentence",
                              c->parse_name, (long long)p->ex[k].line, c->data_name, (long long)ps->sent_line[k],
                              ps->sent_side[k] == 'B' ? " (sentence B)" : "");
    free(used);
    free(scratch);
    if (rc) {
        free(heads);
        return rc;
    }
    free(st->heads);
    st->heads = heads;
    st->capheads = (size_t)st->nraw + 1;
    st->with_heads = 1;
    ag__ds_finish(ds);
    return 0;
}

int ag_dataset_attach_parses(ag_dataset *ds, const ag_dataset *parses, char *err, size_t errlen) {
    if (!ds->store || !parses->store || parses->format != AG_FORMAT_CONLLU ||
        (ds->format != AG_FORMAT_LABELED && ds->format != AG_FORMAT_SICK))
        return ag__data_fail(err, errlen, AG_DATA_EINVAL,
                            "attach parses: want labeled or sick sentences and a CoNLL-U dataset, have %s and %s",
                            ag_format_name(ds->format), ag_format_name(parses->format));
    const char *path = ag_dataset_path(ds);
    attach_ctx c = {.ds = ds, .parses = parses, .err = err, .errlen = errlen,
                    .data_name = path ? path : "the data", .want_file = path ? base_name(path) : NULL,
                    .parse_name = ag_dataset_path(parses) ? ag_dataset_path(parses) : "the parses"};
    int rc = attach(&c, ds);
    free(c.at[0]);
    free(c.at[1]);
    if (rc == AG_DATA_ENOMEM) rc = ag__data_fail(err, errlen, AG_DATA_ENOMEM, "attach parses: out of memory");
    return rc;
}
