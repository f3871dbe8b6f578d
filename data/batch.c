/* batch.c - seeded RNG, CV folds and splits, sampler, padded batches.
 *
 * Determinism is the point: the same seed gives the same folds, the same
 * epoch order and the same batches on every machine (no rand(), no libc
 * sort instability: sort keys are made unique before sorting). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "../graph/xoshiro.h"

/* ---- RNG: xoshiro256** (Blackman & Vigna), seeded by splitmix64 ---------- */

void ag_data_rng_seed(ag_data_rng *r, uint64_t seed) { ag__xoshiro_seed(r->s, seed); }

uint64_t ag_data_rng_next(ag_data_rng *r) { return ag__xoshiro_next(r->s); }

uint64_t ag_data_rng_below(ag_data_rng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t floor = (0 - n) % n; /* reject the short top range: no modulo bias */
    for (;;) {
        uint64_t x = ag_data_rng_next(r);
        if (x >= floor) return x % n;
    }
}

double ag_data_rng_uniform(ag_data_rng *r) {
    return (double)(ag_data_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

void ag_data_rng_shuffle(ag_data_rng *r, int64_t *a, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)ag_data_rng_below(r, (uint64_t)i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* ---- splits --------------------------------------------------------------- */

int ag_cv_assign(int64_t n, int k, uint64_t seed, int32_t *fold) {
    if (n < 0 || k < 2 || k > n) return AG_DATA_EINVAL;
    ag_data_rng r;
    ag_data_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) fold[i] = (int32_t)(i % k); /* balanced sizes */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ag_data_rng_below(&r, (uint64_t)i + 1);
        int32_t t = fold[i];
        fold[i] = fold[j];
        fold[j] = t;
    }
    return 0;
}

int ag_cv_split(const int32_t *fold, int64_t n, int k, int test_fold, int dev_fold,
                int64_t *train, int64_t *n_train, int64_t *dev, int64_t *n_dev, int64_t *test,
                int64_t *n_test) {
    if (test_fold < 0 || test_fold >= k || dev_fold >= k || dev_fold == test_fold ||
        (dev_fold >= 0 && !dev))
        return AG_DATA_EINVAL;
    int64_t a = 0, b = 0, c = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fold[i] == test_fold) test[c++] = i;
        else if (fold[i] == dev_fold) dev[b++] = i;
        else train[a++] = i;
    }
    *n_train = a;
    *n_test = c;
    if (n_dev) *n_dev = b;
    return 0;
}

static int cmp_i64(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

int ag_split_holdout(const int64_t *idx, int64_t n, double dev_frac, uint64_t seed,
                     int64_t *train, int64_t *n_train, int64_t *dev, int64_t *n_dev) {
    if (n < 0 || !(dev_frac >= 0.0 && dev_frac <= 1.0)) return AG_DATA_EINVAL;
    /* shuffle in the train buffer, then cut: no scratch allocation */
    for (int64_t i = 0; i < n; i++) train[i] = idx ? idx[i] : i;
    qsort(train, (size_t)n, sizeof *train, cmp_i64); /* the input order must not matter */
    ag_data_rng r;
    ag_data_rng_seed(&r, seed);
    ag_data_rng_shuffle(&r, train, n);
    int64_t nd = (int64_t)(dev_frac * (double)n + 0.5);
    if (nd > n) nd = n;
    memcpy(dev, train, (size_t)nd * sizeof *dev);
    memmove(train, train + nd, (size_t)(n - nd) * sizeof *train);
    qsort(dev, (size_t)nd, sizeof *dev, cmp_i64);
    qsort(train, (size_t)(n - nd), sizeof *train, cmp_i64);
    *n_dev = nd;
    *n_train = n - nd;
    return 0;
}

/* ---- sampler ----------------------------------------------------------------- */

void ag_sampler_free(ag_sampler *s) {
    free(s->subset);
    free(s->order);
    free(s->batch_perm);
    free(s->sort_keys);
    memset(s, 0, sizeof *s);
}

int ag_sampler_init(ag_sampler *s, const ag_dataset *ds, const int64_t *subset, int64_t n,
                    const ag_sampler_opts *opts, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (!subset) n = ds->n;
    if (!opts || opts->batch_size < 1 || opts->bucket_chunks < 0 || n < 0)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL, "sampler: bad batch size/options");
    if (n > (int64_t)1 << 32)
        return ag__data_fail(err, errlen, AG_DATA_ELIMIT, "sampler: too many examples");
    for (int64_t k = 0; subset && k < n; k++)
        if (subset[k] < 0 || subset[k] >= ds->n)
            return ag__data_fail(err, errlen, AG_DATA_EINVAL,
                                "sampler: subset index %lld out of range", (long long)subset[k]);
    s->opts = *opts;
    s->ds = ds;
    s->n = n;
    int64_t B = opts->batch_size;
    s->n_batches = opts->drop_last ? n / B : (n + B - 1) / B;
    size_t m = (size_t)n + 1; /* +1: malloc(0) may return NULL */
    s->subset = malloc(m * sizeof *s->subset);
    s->order = malloc(m * sizeof *s->order);
    s->batch_perm = malloc(((size_t)s->n_batches + 1) * sizeof *s->batch_perm);
    s->sort_keys = malloc(m * sizeof *s->sort_keys);
    if (!s->subset || !s->order || !s->batch_perm || !s->sort_keys) {
        ag_sampler_free(s);
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "sampler: out of memory");
    }
    for (int64_t k = 0; k < n; k++) s->subset[k] = subset ? subset[k] : k;
    ag_sampler_epoch(s, NULL); /* usable before the first explicit epoch */
    return 0;
}

static int cmp_u64(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return (a > b) - (a < b);
}

static int32_t bucket_len(const ag_example *e) { return e->len > e->len_b ? e->len : e->len_b; }

/* Sorts order[lo..hi) by length. The key packs (length, position in the
 * chunk), so keys are unique: the sort is stable and libc-independent.
 * The sorted keys are then overwritten with the indices they point at. */
static void sort_chunk(ag_sampler *s, int64_t lo, int64_t hi) {
    uint64_t *key = s->sort_keys;
    int64_t m = hi - lo;
    for (int64_t i = 0; i < m; i++) {
        uint64_t len = (uint64_t)bucket_len(&s->ds->ex[s->order[lo + i]]);
        key[i] = (len << 32) | (uint64_t)i;
    }
    qsort(key, (size_t)m, sizeof *key, cmp_u64);
    for (int64_t i = 0; i < m; i++) key[i] = (uint64_t)s->order[lo + (int64_t)(key[i] & 0xffffffffu)];
    for (int64_t i = 0; i < m; i++) s->order[lo + i] = (int64_t)key[i];
}

void ag_sampler_epoch(ag_sampler *s, ag_data_rng *rng) {
    int64_t n = s->n, B = s->opts.batch_size;
    int shuffle = s->opts.shuffle && rng;
    /* start from the sorted subset so the epoch depends on the rng only */
    memcpy(s->order, s->subset, (size_t)n * sizeof *s->order);
    if (shuffle) ag_data_rng_shuffle(rng, s->order, n);
    if (s->opts.bucket_chunks > 0) {
        int64_t chunk = B * s->opts.bucket_chunks;
        for (int64_t lo = 0; lo < n; lo += chunk) sort_chunk(s, lo, lo + chunk < n ? lo + chunk : n);
    }
    for (int64_t i = 0; i < s->n_batches; i++) s->batch_perm[i] = i;
    if (shuffle) ag_data_rng_shuffle(rng, s->batch_perm, s->n_batches);
}

const int64_t *ag_sampler_batch(const ag_sampler *s, int64_t i, int32_t *rows) {
    if (i < 0 || i >= s->n_batches) {
        *rows = 0;
        return NULL;
    }
    int64_t B = s->opts.batch_size, start = s->batch_perm[i] * B;
    int64_t left = s->n - start;
    *rows = (int32_t)(left < B ? left : B);
    return s->order + start;
}

/* ---- padded batches ------------------------------------------------------------- */

int32_t ag_bigram_id(int32_t w, int32_t w_next, int32_t n_bi) {
    if (n_bi < 2 || w < 0 || w_next < 0) return 0;
    uint64_t h = (uint64_t)w * 1000003u + (uint64_t)w_next;
    return (int32_t)(1 + h % (uint64_t)(n_bi - 1));
}

void ag_batch_free(ag_batch *b) {
    free(b->tokens);
    free(b->lengths);
    free(b->targets);
    free(b->labels);
    free(b->scores);
    free(b->tokens_b);
    free(b->lengths_b);
    free(b->heads);
    free(b->heads_b);
    free(b->bigrams);
    free(b->bigrams_b);
    free(b->index);
    memset(b, 0, sizeof *b);
}

static void *alloc_n(size_t n, size_t elem) {
    return n && elem && n <= SIZE_MAX / elem ? calloc(n, elem) : NULL;
}

int ag_batch_alloc(ag_batch *b, const ag_dataset *ds, int32_t max_rows,
                   const ag_batch_opts *opts, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    ag_batch_opts o = opts ? *opts : (ag_batch_opts){0};
    if (max_rows < 1 || o.fixed_len < 0 || o.max_width < 0 || o.max_len < 0 || o.n_bigram < 0 || o.n_bigram == 1)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL, "batch: bad rows/options");
    int32_t la, lb;
    ag_dataset_max_len(ds, &la, &lb);
    if (ds->format == AG_FORMAT_LM) la = la > 0 ? la - 1 : 0; /* inputs stop before the last */
    int32_t w = o.fixed_len ? o.fixed_len : o.max_width ? o.max_width : (la > lb ? la : lb);
    if (o.max_len > 0 && w > o.max_len && !o.fixed_len) w = o.max_len;
    if (w < 1) w = 1;
    b->opts = o;
    b->format = ds->format;
    b->max_rows = max_rows;
    b->max_width = w;
    size_t cells = (size_t)max_rows * (size_t)w, rows = (size_t)max_rows;
    int pair = ds->format == AG_FORMAT_SICK;
    int ok = (b->tokens = alloc_n(cells, sizeof(int32_t))) &&
             (b->lengths = alloc_n(rows, sizeof(int32_t))) &&
             (b->labels = alloc_n(rows, sizeof(int32_t))) &&
             (b->index = alloc_n(rows, sizeof(int64_t)));
    if (ok && ds->format == AG_FORMAT_LM) ok = !!(b->targets = alloc_n(cells, sizeof(int32_t)));
    if (ok && pair)
        ok = (b->scores = alloc_n(rows, sizeof(float))) &&
             (b->tokens_b = alloc_n(cells, sizeof(int32_t))) &&
             (b->lengths_b = alloc_n(rows, sizeof(int32_t)));
    if (ok && o.heads) ok = !!(b->heads = alloc_n(cells, sizeof(int32_t)));
    if (ok && o.heads && pair) ok = !!(b->heads_b = alloc_n(cells, sizeof(int32_t)));
    if (ok && o.n_bigram) ok = !!(b->bigrams = alloc_n(cells, sizeof(int32_t)));
    if (ok && o.n_bigram && pair) ok = !!(b->bigrams_b = alloc_n(cells, sizeof(int32_t)));
    if (!ok) {
        ag_batch_free(b);
        return ag__data_fail(err, errlen, AG_DATA_ENOMEM, "batch: out of memory (%d x %d)",
                            (int)max_rows, (int)w);
    }
    return 0;
}

/* One sentence into row r of [rows, width] arrays: tokens (and heads,
 * bigrams when wanted), padding after n. heads == NULL means no parse: the
 * chain i -> i+1 with the last token as root (docs/models.md, MS-SAN). */
static void fill_row(int32_t *tok_out, int32_t *head_out, int32_t *bi_out, int32_t width,
                     const int32_t *tok, const int32_t *heads, int32_t n, int32_t n_bi) {
    for (int32_t t = 0; t < width; t++) tok_out[t] = t < n ? tok[t] : AG_PAD_ID;
    if (head_out)
        for (int32_t t = 0; t < width; t++) {
            int32_t h = t >= n ? AG_HEAD_PAD : heads ? heads[t] : (t + 1 < n ? t + 1 : AG_HEAD_ROOT);
            head_out[t] = h >= n ? AG_HEAD_ROOT : h; /* parent cut off by truncation */
        }
    if (bi_out)
        for (int32_t t = 0; t < width; t++)
            bi_out[t] = t + 1 < n ? ag_bigram_id(tok[t], tok[t + 1], n_bi) : 0;
}

static int32_t row_width(const ag_batch *b, const ag_dataset *ds, const int64_t *idx,
                         int32_t rows, int second) {
    if (b->opts.fixed_len) return b->opts.fixed_len;
    int32_t w = 1; /* never 0 wide: models can always index column 0 */
    for (int32_t r = 0; r < rows; r++) {
        const ag_example *e = &ds->ex[idx[r]];
        int32_t n = second ? e->len_b : ds->format == AG_FORMAT_LM ? e->len - 1 : e->len;
        if (n > w) w = n;
    }
    return b->opts.max_len > 0 && w > b->opts.max_len ? b->opts.max_len : w;
}

int ag_batch_fill(ag_batch *b, const ag_dataset *ds, const int64_t *idx, int32_t rows,
                  char *err, size_t errlen) {
    if (ds->format != b->format || !ds->encoded)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL,
                            "batch: dataset %s (wrong format or not encoded)",
                            ag_format_name(ds->format));
    if (rows < 0 || rows > b->max_rows)
        return ag__data_fail(err, errlen, AG_DATA_EINVAL, "batch: %d rows, capacity %d",
                            (int)rows, (int)b->max_rows);
    for (int32_t r = 0; r < rows; r++)
        if (idx[r] < 0 || idx[r] >= ds->n)
            return ag__data_fail(err, errlen, AG_DATA_EINVAL, "batch: index %lld out of range",
                                (long long)idx[r]);
    int lm = ds->format == AG_FORMAT_LM, pair = ds->format == AG_FORMAT_SICK;
    int32_t w = row_width(b, ds, idx, rows, 0), wb = pair ? row_width(b, ds, idx, rows, 1) : 0;
    if (w > b->max_width || wb > b->max_width)
        return ag__data_fail(err, errlen, AG_DATA_ELIMIT,
                            "batch: example of length %d exceeds max_width %d (raise "
                            "ag_batch_opts.max_width or use fixed_len)",
                            (int)(w > wb ? w : wb), (int)b->max_width);
    b->rows = rows;
    b->width = w;
    b->width_b = wb;
    int32_t n_bi = b->opts.n_bigram;
    for (int32_t r = 0; r < rows; r++) {
        const ag_example *e = &ds->ex[idx[r]];
        int32_t n = lm ? e->len - 1 : e->len;
        if (n > w) n = w; /* fixed_len truncation */
        b->index[r] = idx[r];
        b->lengths[r] = n;
        b->labels[r] = e->label;
        fill_row(b->tokens + (size_t)r * w, b->heads ? b->heads + (size_t)r * w : NULL,
                 b->bigrams ? b->bigrams + (size_t)r * w : NULL, w, e->tokens, e->heads, n, n_bi);
        if (lm) /* targets: the same sentence shifted left by one */
            fill_row(b->targets + (size_t)r * w, NULL, NULL, w, e->tokens + 1, NULL, n, 0);
        if (pair) {
            int32_t nb = e->len_b < wb ? e->len_b : wb;
            b->lengths_b[r] = nb;
            b->scores[r] = e->score;
            fill_row(b->tokens_b + (size_t)r * wb, b->heads_b ? b->heads_b + (size_t)r * wb : NULL,
                     b->bigrams_b ? b->bigrams_b + (size_t)r * wb : NULL, wb, e->tokens_b, e->heads_b,
                     nb, n_bi);
        }
    }
    return 0;
}
