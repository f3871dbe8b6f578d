/* vocab.c - tokenizer, interned-string hash table, vocabulary.
 *
 * One hash table (ag__strtab) serves both the raw token types of a dataset
 * and the vocabulary: lookups are O(1) expected, never a linear scan. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "atomic_file.h"

/* ---- tokenizer ------------------------------------------------------------ */

static int is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

size_t ag_tokenize(char *s, size_t n, int lowercase, ag_span *spans, size_t max_spans) {
    size_t count = 0, i = 0;
    while (i < n) {
        while (i < n && is_space((unsigned char)s[i])) i++;
        if (i == n) break;
        size_t start = i;
        for (; i < n && !is_space((unsigned char)s[i]); i++)
            if (lowercase && s[i] >= 'A' && s[i] <= 'Z') s[i] = (char)(s[i] - 'A' + 'a');
        if (count < max_spans) spans[count] = (ag_span){start, i - start};
        count++;
    }
    return count;
}

/* ---- interned strings ------------------------------------------------------ */

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

void ag__strtab_free(ag__strtab *t) {
    free(t->bytes);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static int strtab_rehash(ag__strtab *t, size_t nslots) {
    int32_t *slots = malloc(nslots * sizeof *slots);
    if (!slots) return AG_DATA_ENOMEM;
    memset(slots, 0xff, nslots * sizeof *slots); /* all -1 */
    size_t mask = nslots - 1;
    for (int32_t id = 0; id < t->n; id++) {
        size_t i = (size_t)t->hash[id] & mask;
        while (slots[i] != -1) i = (i + 1) & mask;
        slots[i] = id;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
}

/* Slot holding s, or the empty slot where it would go. */
static size_t strtab_probe(const ag__strtab *t, const char *s, size_t len, uint64_t h) {
    size_t mask = t->nslots - 1, i = (size_t)h & mask;
    for (;; i = (i + 1) & mask) {
        int32_t id = t->slots[i];
        if (id == -1) return i;
        if (t->hash[id] == h && t->len[id] == len && memcmp(t->bytes + t->off[id], s, len) == 0)
            return i;
    }
}

int32_t ag__strtab_find(const ag__strtab *t, const char *s, size_t len) {
    if (t->nslots == 0) return -1;
    return t->slots[strtab_probe(t, s, len, fnv1a(s, len))];
}

int ag__strtab_intern(ag__strtab *t, const char *s, size_t len, int32_t *id) {
    if (len > UINT32_MAX) return AG_DATA_ELIMIT;
    /* keep the load factor <= 1/2 so probes stay short */
    if ((size_t)t->n + 1 > t->nslots / 2) {
        if (t->nslots > SIZE_MAX / 4) return AG_DATA_ENOMEM;
        int rc = strtab_rehash(t, t->nslots ? t->nslots * 2 : 64);
        if (rc) return rc;
    }
    uint64_t h = fnv1a(s, len);
    size_t slot = strtab_probe(t, s, len, h);
    if (t->slots[slot] != -1) {
        *id = t->slots[slot];
        return 0;
    }
    if (t->n == INT32_MAX) return AG_DATA_ELIMIT;
    size_t need = (size_t)t->n + 1, cap = (size_t)t->cap, c2 = cap, c3 = cap;
    if (ag__data_grow((void **)&t->off, &cap, need, sizeof *t->off) ||
        ag__data_grow((void **)&t->len, &c2, need, sizeof *t->len) ||
        ag__data_grow((void **)&t->hash, &c3, need, sizeof *t->hash))
        return AG_DATA_ENOMEM;
    /* the three arrays grow in step; cap stays an int32 because n does */
    t->cap = cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
    if (t->nbytes > SIZE_MAX - len - 1) return AG_DATA_ENOMEM;
    if (ag__data_grow((void **)&t->bytes, &t->capbytes, t->nbytes + len + 1, 1)) return AG_DATA_ENOMEM;
    memcpy(t->bytes + t->nbytes, s, len);
    t->bytes[t->nbytes + len] = 0;
    int32_t nid = t->n++;
    t->off[nid] = t->nbytes;
    t->len[nid] = (uint32_t)len;
    t->hash[nid] = h;
    t->nbytes += len + 1;
    t->slots[slot] = nid;
    *id = nid;
    return 0;
}

/* ---- vocabulary ------------------------------------------------------------- */

struct ag_vocab {
    ag__strtab tab; /* id == strtab id */
};

void ag_vocab_free(ag_vocab *v) {
    if (!v) return;
    ag__strtab_free(&v->tab);
    free(v);
}

int32_t ag_vocab_size(const ag_vocab *v) { return v->tab.n; }

uint64_t ag_vocab_fingerprint(const ag_vocab *v) {
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a 64 offset basis and prime */
    for (int32_t id = 0; id < v->tab.n; id++)
        for (const unsigned char *c = (const unsigned char *)ag__strtab_str(&v->tab, id);; c++) {
            h = (h ^ (*c ? *c : '\n')) * 0x100000001b3u;
            if (!*c) break;
        }
    return h;
}

const char *ag_vocab_token(const ag_vocab *v, int32_t id) {
    return id >= 0 && id < v->tab.n ? ag__strtab_str(&v->tab, id) : NULL;
}

int32_t ag_vocab_find(const ag_vocab *v, const char *tok, size_t len) {
    return ag__strtab_find(&v->tab, tok, len);
}

int32_t ag_vocab_id(const ag_vocab *v, const char *tok, size_t len) {
    int32_t id = ag__strtab_find(&v->tab, tok, len);
    /* a literal "<pad>" in text must not turn into padding */
    return id <= AG_PAD_ID ? AG_UNK_ID : id;
}

static int is_reserved(const char *s, size_t len) {
    return (len == 5 && memcmp(s, AG_PAD_TOKEN, 5) == 0) ||
           (len == 5 && memcmp(s, AG_UNK_TOKEN, 5) == 0);
}

static ag_vocab *vocab_new_with_specials(void) {
    ag_vocab *v = calloc(1, sizeof *v);
    int32_t id;
    if (!v || ag__strtab_intern(&v->tab, AG_PAD_TOKEN, 5, &id) ||
        ag__strtab_intern(&v->tab, AG_UNK_TOKEN, 5, &id)) {
        ag_vocab_free(v);
        return NULL;
    }
    return v;
}

/* A token a vocab file can hold: non-empty, no whitespace or control bytes. */
static const char *token_problem(const char *s, size_t len) {
    if (len == 0) return "empty token";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_space(c)) return "token contains whitespace";
        if (c < 0x20 || c == 0x7f) return "token contains a control byte";
    }
    return NULL;
}

int ag_vocab_from_list(const char *const *tokens, int32_t n, ag_vocab **out, char *err,
                       size_t errlen) {
    *out = NULL;
    if (n < 2 || strcmp(tokens[0], AG_PAD_TOKEN) != 0 || strcmp(tokens[1], AG_UNK_TOKEN) != 0)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL,
                            "vocab list must start with %s, %s", AG_PAD_TOKEN, AG_UNK_TOKEN);
    ag_vocab *v = calloc(1, sizeof *v);
    if (!v) return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        size_t len = strlen(tokens[i]);
        const char *why = token_problem(tokens[i], len);
        int32_t id;
        int rc = why ? AG_DATA_EINVAL : ag__strtab_intern(&v->tab, tokens[i], len, &id);
        if (!why && !rc && id != i) why = "duplicate token", rc = AG_DATA_EINVAL;
        if (rc) {
            ag_vocab_free(v);
            return ag__data_fail(err, errlen, rc, "vocab list entry %d: %s", (int)i,
                                why ? why : "out of memory");
        }
    }
    *out = v;
    return 0;
}

typedef struct {
    int64_t count;
    const char *s;
    uint32_t len;
} vocab_cand;

/* descending count, then byte order (shorter prefix first) */
static int cand_cmp(const void *pa, const void *pb) {
    const vocab_cand *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    size_t m = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->s, b->s, m);
    if (c) return c;
    return (a->len > b->len) - (a->len < b->len);
}

static void count_span(int64_t *counts, const int32_t *raw, int64_t n) {
    for (int64_t i = 0; i < n; i++) counts[raw[i]]++;
}

int ag_vocab_build(const ag_dataset *ds, const int64_t *subset, int64_t n,
                   const ag_vocab_opts *opts, ag_vocab **out, char *err, size_t errlen) {
    *out = NULL;
    ag_vocab_opts o = opts ? *opts : (ag_vocab_opts){1, 0};
    if (!ds || !ds->store) return ag__data_fail(err, errlen, AG_DATA_EINVAL, "vocab: no dataset");
    if (o.min_count < 1) o.min_count = 1;
    if (o.max_size != 0 && o.max_size < 2)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL, "vocab: max_size %d < 2",
                            (int)o.max_size);
    const ag_dataset_store *st = ds->store;
    int32_t ntypes = st->types.n;
    if (!subset) n = ds->n;
    int64_t *counts = calloc((size_t)ntypes + 1, sizeof *counts);
    vocab_cand *cand = malloc(((size_t)ntypes + 1) * sizeof *cand);
    ag_vocab *v = vocab_new_with_specials();
    int rc = 0;
    if (!counts || !cand || !v) {
        rc = ag__data_fail(err, errlen, AG_DATA_ENOMEM, "vocab: out of memory");
        goto done;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t i = subset ? subset[k] : k;
        if (i < 0 || i >= ds->n) {
            rc = ag__data_fail(err, errlen, AG_DATA_EINVAL, "vocab: subset index %lld out of range",
                              (long long)i);
            goto done;
        }
        /* full_len: words clipped off long LM sentences still count */
        count_span(counts, st->raw + st->off_a[i], ds->ex[i].full_len);
        if (st->off_b) count_span(counts, st->raw + st->off_b[i], ds->ex[i].len_b);
    }
    int32_t nc = 0;
    for (int32_t t = 0; t < ntypes; t++) {
        const char *s = ag__strtab_str(&st->types, t);
        uint32_t len = st->types.len[t];
        if (counts[t] >= o.min_count && !is_reserved(s, len))
            cand[nc++] = (vocab_cand){counts[t], s, len};
    }
    qsort(cand, (size_t)nc, sizeof *cand, cand_cmp);
    if (o.max_size && nc > o.max_size - 2) nc = o.max_size - 2;
    for (int32_t k = 0; k < nc; k++) {
        int32_t id;
        if ((rc = ag__strtab_intern(&v->tab, cand[k].s, cand[k].len, &id))) {
            rc = ag__data_fail(err, errlen, rc, "vocab: out of memory");
            goto done;
        }
    }
done:
    free(counts);
    free(cand);
    if (rc) ag_vocab_free(v);
    else *out = v;
    return rc;
}

int ag_vocab_save(const ag_vocab *v, const char *path, char *err, size_t errlen) {
    ag__atomic_file file; /* a vocabulary written whole, or the old one kept */
    int e = ag__atomic_open(&file, path);
    if (e) return ag__data_fail(err, errlen, AG_DATA_EIO, "%s: cannot write: %s", path, strerror(e));
    for (int32_t id = 0; id < v->tab.n; id++) {
        fwrite(ag__strtab_str(&v->tab, id), 1, v->tab.len[id], file.f);
        fputc('\n', file.f);
    }
    if ((e = ag__atomic_close(&file)) != 0) /* why: a full disk says so, not just that it failed */
        return ag__data_fail(err, errlen, AG_DATA_EIO, "%s: write failed: %s", path, strerror(e));
    return 0;
}

/* A file (mem NULL) or bytes in memory named `path`. */
static int vocab_load(const char *path, const void *mem, size_t mem_len, ag_vocab **out, char *err, size_t errlen) {
    *out = NULL;
    ag__data_line_reader lr;
    int rc = mem ? ag__data_lines_open_mem(&lr, path, mem, mem_len, (size_t)1 << 20, err, errlen)
                 : ag__data_lines_open(&lr, path, (size_t)1 << 20, err, errlen);
    if (rc) return rc;
    ag_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        ag__data_lines_close(&lr);
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "out of memory");
    }
    while ((rc = ag__data_lines_next(&lr, err, errlen)) == 1) {
        long long ln = (long long)lr.lineno;
        const char *why = token_problem(lr.buf, lr.len);
        if (!why && ln == 1 && strcmp(lr.buf, AG_PAD_TOKEN) != 0) why = "line 1 must be " AG_PAD_TOKEN;
        if (!why && ln == 2 && strcmp(lr.buf, AG_UNK_TOKEN) != 0) why = "line 2 must be " AG_UNK_TOKEN;
        if (why) {
            rc = ag__data_fail(err, errlen, AG_DATA_EFORMAT, "%s:%lld: %s", path, ln, why);
            break;
        }
        int32_t id, before = v->tab.n;
        if ((rc = ag__strtab_intern(&v->tab, lr.buf, lr.len, &id))) {
            rc = ag__data_fail(err, errlen, rc, "%s:%lld: out of memory or too many tokens",
                              path, ln);
            break;
        }
        if (v->tab.n == before) {
            rc = ag__data_fail(err, errlen, AG_DATA_EFORMAT,
                              "%s:%lld: duplicate token '%s' (first on line %d)", path, ln,
                              lr.buf, (int)id + 1);
            break;
        }
    }
    ag__data_lines_close(&lr);
    if (rc == 0 && v->tab.n < 2)
        rc = ag__data_fail(err, errlen, AG_DATA_EFORMAT, "%s: vocab needs at least %s and %s",
                          path, AG_PAD_TOKEN, AG_UNK_TOKEN);
    if (rc < 0) {
        ag_vocab_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

int ag_vocab_load(const char *path, ag_vocab **out, char *err, size_t errlen) {
    return vocab_load(path, NULL, 0, out, err, errlen);
}

int ag_vocab_load_mem(const char *name, const void *bytes, size_t n, ag_vocab **out, char *err, size_t errlen) {
    return vocab_load(name, n ? bytes : "", n, out, err, errlen);
}
