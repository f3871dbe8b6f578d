/* test_embeddings.c - pretrained word vectors: the three formats and their
 * detection, the lowercase fallback and its switch, every bad-file error
 * (path:line, nothing half-loaded), duplicates, coverage of a data set, the
 * rows a model's embedding gets, and frozen parameters (no gradient, no
 * optimizer state, no L2 term, unchanged by steps, absent from checkpoints).
 * Every file is also read from memory (ag_vectors_read_mem), which must
 * answer the same.  Every vectors file is written here, in a scratch folder. */
#include "attngrad/model.h"
#include "../train/internal.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];

/* Writes n bytes to dir/name; returns the path (static, one at a time). */
static const char *put(const char *name, const void *bytes, size_t n) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    return path;
}

static const char *text(const char *name, const char *s) { return put(name, s, strlen(s)); }

static ag_vocab *vocab_of(const char *const *words, int n) {
    ag_vocab *v;
    char err[AG_ERR_LEN];
    if (ag_vocab_from_list(words, n, &v, err, sizeof err)) {
        fprintf(stderr, "vocab: %s\n", err);
        exit(1);
    }
    return v;
}

/* ids: <pad> 0, <unk> 1, the 2, The 3, cat 4, DOG 5, über 6, missing 7 */
static const char *const WORDS[] = {"<pad>", "<unk>", "the", "The", "cat", "DOG", "\xc3\xbc" "ber", "missing"};
enum { V = 8, THE = 2, THE_CAP = 3, CAT = 4, DOG = 5, UBER = 6, MISSING = 7 };

static bool row_is(const ag_vectors *v, int id, const float *want) {
    return !memcmp(v->rows + (size_t)id * v->dim, want, (size_t)v->dim * sizeof(float));
}

/* A file's bytes (malloc'd; NULL if it cannot be read). */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (size_t got = 1; got;) {
        if (*n == cap && !(buf = realloc(buf, cap = 2 * cap + 4096))) abort();
        *n += got = fread(buf + *n, 1, cap - *n, f);
    }
    fclose(f);
    return buf;
}

static bool same_vectors(const ag_vectors *a, const ag_vectors *b) {
    size_t rows = (size_t)a->vocab * (size_t)a->dim;
    return a->format == b->format && a->dim == b->dim && a->vocab == b->vocab && a->n_exact == b->n_exact &&
           a->n_lower == b->n_lower && a->records == b->records && a->spaced == b->spaced &&
           a->duplicates == b->duplicates && !strcmp(a->first_warning, b->first_warning) && !a->rows == !b->rows &&
           (!a->rows || !memcmp(a->rows, b->rows, rows * sizeof(float))) && !a->found == !b->found &&
           (!a->found || !memcmp(a->found, b->found, (size_t)a->vocab));
}

/* The file read, and the same bytes read from memory (ag_vectors_read_mem,
 * what the fuzzer drives) checked to give the same answer, error included. */
static int read_vec(const char *path, const ag_vocab *vocab, int exact_only, ag_vectors *out, char *err) {
    ag_vec_opts o = {.exact_only = exact_only};
    int rc = ag_vectors_read(path, vocab, &o, out, err, AG_ERR_LEN);
    size_t n;
    unsigned char *bytes = slurp(path, &n);
    if (bytes) {
        char merr[AG_ERR_LEN] = "";
        ag_vectors m;
        int mrc = ag_vectors_read_mem(path, bytes, n, vocab, &o, &m, merr, sizeof merr);
        CHECK(mrc == rc && (!rc || !strcmp(merr, err)), "%s from memory: rc %d '%s', from the file rc %d '%s'", path, mrc,
              merr, rc, err);
        CHECK(same_vectors(&m, out), "%s: read from memory, other vectors than from the file", path);
        ag_vectors_free(&m);
        free(bytes);
    }
    return rc;
}

static void test_glove(const ag_vocab *vocab) {
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    const char *path = text("glove.txt", "the 1 2 3\ncat 4 5 6\ndog 7 8 9\nfoo 1 1 1\n\xc3\xbc" "ber -1 -2.5e-1 3.\n");
    CHECK(read_vec(path, vocab, 0, &v, err) == 0, "%s", err);
    CHECK(v.format == AG_VEC_GLOVE && v.dim == 3 && v.vocab == V && v.records == 5);
    CHECK(v.n_exact == 3 && v.n_lower == 2, "exact %d lower %d", v.n_exact, v.n_lower);
    CHECK(row_is(&v, THE, (float[]){1, 2, 3}) && row_is(&v, THE_CAP, (float[]){1, 2, 3}));
    CHECK(row_is(&v, DOG, (float[]){7, 8, 9}) && row_is(&v, UBER, (float[]){-1, -0.25f, 3}));
    CHECK(v.found[THE] == AG_VEC_EXACT && v.found[THE_CAP] == AG_VEC_LOWER && v.found[DOG] == AG_VEC_LOWER);
    CHECK(!v.found[AG_PAD_ID] && !v.found[AG_UNK_ID] && !v.found[MISSING] && row_is(&v, MISSING, (float[]){0, 0, 0}));
    ag_vectors_free(&v);

    /* exact only: the capitalised words find nothing */
    CHECK(read_vec(path, vocab, 1, &v, err) == 0, "%s", err);
    CHECK(v.n_exact == 3 && v.n_lower == 0 && !v.found[THE_CAP] && !v.found[DOG]);
    ag_vectors_free(&v);

    /* an exact record wins over the lowercase one, before or after it; a
     * capitalised record never serves other capitalisations ("THE" is no
     * lowercase form); <pad> and <unk> in a file are not used */
    const char *orders[] = {"the 1 1\nThe 2 2\nTHE 3 3\n<pad> 9 9\n<unk> 9 9\n", "THE 3 3\nThe 2 2\nthe 1 1\n"};
    for (int i = 0; i < 2; i++) {
        CHECK(read_vec(text("order.txt", orders[i]), vocab, 0, &v, err) == 0, "%s", err);
        CHECK(row_is(&v, THE_CAP, (float[]){2, 2}) && row_is(&v, THE, (float[]){1, 1}), "order %d", i);
        CHECK(v.found[THE_CAP] == AG_VEC_EXACT && v.n_exact == 2 && v.n_lower == 0);
        CHECK(!v.found[AG_PAD_ID] && !v.found[AG_UNK_ID]);
        ag_vectors_free(&v);
    }

    /* glove.840B has records whose word holds spaces: skipped, counted */
    CHECK(read_vec(text("spaced.txt", "the 1 2\nat name@domain.com 3 4\n. . . 5 6\ncat 7 8\n"), vocab, 0, &v, err) == 0,
          "%s", err);
    CHECK(v.spaced == 2 && v.records == 2 && v.n_exact == 2 && row_is(&v, CAT, (float[]){7, 8}));
    ag_vectors_free(&v);

    /* CRLF line ends, a BOM, blank lines, tabs */
    CHECK(read_vec(text("crlf.txt", "\xEF\xBB\xBFthe\t1 2\r\n\r\ncat 3  4\r\n"), vocab, 0, &v, err) == 0, "%s", err);
    CHECK(v.dim == 2 && v.n_exact == 2 && row_is(&v, THE, (float[]){1, 2}) && row_is(&v, CAT, (float[]){3, 4}));
    ag_vectors_free(&v);
}

static void test_duplicates(const ag_vocab *vocab) {
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    CHECK(read_vec(text("dup.txt", "the 1 2\ncat 3 4\nthe 5 6\nfoo 0 0\nfoo 1 1\n"), vocab, 0, &v, err) == 0, "%s", err);
    CHECK(v.duplicates == 1 && row_is(&v, THE, (float[]){1, 2}) && row_is(&v, THE_CAP, (float[]){1, 2}));
    CHECK(strstr(v.first_warning, "'the' on line 3 again: line 1's vector is used"), "%s", v.first_warning);
    ag_vectors_free(&v);
}

static void test_word2vec_text(const ag_vocab *vocab) {
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    /* word2vec's C tool writes a space after every value */
    CHECK(read_vec(text("w2v.txt", "3 2\nthe 0.5 -0.5 \ncat 1e-2 2E+1 \nzebra 0 0 \n"), vocab, 0, &v, err) == 0, "%s", err);
    CHECK(v.format == AG_VEC_W2V_TEXT && v.dim == 2 && v.records == 3 && v.n_exact == 2);
    CHECK(row_is(&v, CAT, (float[]){0.01f, 20}) && row_is(&v, THE_CAP, (float[]){0.5f, -0.5f}));
    ag_vectors_free(&v);
}

/* A word2vec binary file: "count dim\n", then per record "word " and dim
 * little-endian float32, '\n' after each when newlines.  buf holds 32
 * bytes, and for each record 16 for its word (and its separators) and
 * 4 * dim. */
static size_t binary(unsigned char *buf, const char *const *words, const float *vals, int n, int dim, bool newlines) {
    size_t k = (size_t)snprintf((char *)buf, 32, "%d %d\n", n, dim);
    for (int i = 0; i < n; i++) {
        k += (size_t)snprintf((char *)buf + k, 15, "%s ", words[i]);
        for (int j = 0; j < dim; j++) {
            uint32_t u;
            memcpy(&u, &vals[i * dim + j], 4);
            for (int b = 0; b < 4; b++) buf[k++] = (unsigned char)(u >> (8 * b));
        }
        if (newlines) buf[k++] = '\n';
    }
    return k;
}

static void test_word2vec_binary(const ag_vocab *vocab) {
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    float newline_bytes; /* a value whose bytes are all '\n' must not read as record ends */
    memcpy(&newline_bytes, (unsigned char[]){10, 10, 10, 10}, 4);
    const char *words[] = {"the", "dog", "cat"};
    const float vals[] = {0.25f, -1, 2, newline_bytes, 0, 0.125f, 1e-3f, 3, -7};
    unsigned char buf[256];
    for (int nl = 0; nl < 2; nl++) {
        size_t n = binary(buf, words, vals, 3, 3, nl);
        CHECK(read_vec(put("w2v.bin", buf, n), vocab, 0, &v, err) == 0, "%s", err);
        CHECK(v.format == AG_VEC_W2V_BINARY && v.dim == 3 && v.records == 3, "newlines %d", nl);
        CHECK(row_is(&v, THE, vals) && row_is(&v, DOG, vals + 3) && row_is(&v, CAT, vals + 6) && v.n_lower == 2);
        ag_vectors_free(&v);
    }
    /* truncated: inside the values of the last record, inside a word, and
     * after fewer records than the header promises */
    size_t n = binary(buf, words, vals, 3, 3, true);
    CHECK(read_vec(put("cut.bin", buf, n - 5), vocab, 0, &v, err) == AG_DATA_EFORMAT);
    CHECK(strstr(err, "cut.bin: record 3 (byte ") && strstr(err, "truncated: 'cat' has 8 of its 12 bytes of values"),
          "%s", err);
    CHECK(!v.rows && !v.found, "nothing half-loaded");
    n = binary(buf, words, vals, 2, 3, true);
    buf[0] = '3'; /* "3 3": one record short */
    memcpy(buf + n, "ca", 2);
    CHECK(read_vec(put("cut.bin", buf, n + 2), vocab, 0, &v, err) == AG_DATA_EFORMAT);
    CHECK(strstr(err, "record 3") && strstr(err, "the file ends inside a word"), "%s", err);
    CHECK(read_vec(put("cut.bin", buf, n), vocab, 0, &v, err) == AG_DATA_EFORMAT);
    CHECK(strstr(err, "truncated: the header promises 3 vectors, the file ends after 2"), "%s", err);
    buf[0] = '1';
    CHECK(read_vec(put("long.bin", buf, n), vocab, 0, &v, err) == AG_DATA_EFORMAT);
    CHECK(strstr(err, "record 2") && strstr(err, "more than the 1 vectors the header promises"), "%s", err);
    /* a word that is not UTF-8 */
    const char *latin1[] = {"caf\xe9"};
    n = binary(buf, latin1, vals, 1, 3, true);
    CHECK(read_vec(put("latin1.bin", buf, n), vocab, 0, &v, err) == AG_DATA_EFORMAT);
    CHECK(strstr(err, "latin1.bin: record 1 (byte 0 after the header)") && strstr(err, "not UTF-8 (byte 0xe9 at offset 3"), "%s", err);
    float inf = INFINITY;
    n = binary(buf, words, (float[]){1, inf, 0}, 1, 3, true);
    CHECK(read_vec(put("inf.bin", buf, n), vocab, 0, &v, err) == AG_DATA_EFORMAT);
    CHECK(strstr(err, "value 2 is not a finite float"), "%s", err);
}

/* Binary records past the reader's 1 MiB buffer, the vocabulary's words
 * among them, the last one at the very end of the file. */
static void test_word2vec_binary_large(const ag_vocab *vocab) {
    enum { N = 60000, D = 4 };
    static char names[N][16];
    static const char *words[N];
    static float vals[N * D];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "w%d", i);
        words[i] = names[i];
        for (int j = 0; j < D; j++) vals[i * D + j] = (float)(i % 1000) / 64 + (float)j;
    }
    words[50000] = "cat"; /* past the first megabyte */
    words[N - 1] = "the";
    unsigned char *buf = malloc((size_t)N * (16 + 4 * D) + 32);
    if (!buf) abort();
    size_t n = binary(buf, words, vals, N, D, true);
    CHECK(n > (1u << 20) + (64u << 10), "the file spans %zu bytes", n);
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    CHECK(read_vec(put("large.bin", buf, n), vocab, 0, &v, err) == 0, "%s", err);
    CHECK(v.records == N && v.n_exact == 2 && row_is(&v, CAT, vals + 50000 * D) && row_is(&v, THE, vals + (N - 1) * D));
    ag_vectors_free(&v);
    free(buf);
}

/* Each bad file: the status, and the message holds every string. */
static void expect_error(const ag_vocab *vocab, const char *name, const char *content, size_t n, int want,
                         const char *a, const char *b) {
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    int rc = read_vec(put(name, content, n), vocab, 0, &v, err);
    CHECK(rc == want, "%s: rc %d, want %d (%s)", name, rc, want, err);
    CHECK(strstr(err, a) && (!b || strstr(err, b)), "%s: message '%s' lacks '%s' or '%s'", name, err, a, b ? b : "");
    CHECK(!v.rows && !v.found && !v.dim, "%s: something half-loaded", name);
}
#define BAD(name, s, want, a, b) expect_error(vocab, name, s, sizeof s - 1, want, a, b)

static void test_errors(const ag_vocab *vocab) {
    BAD("few.txt", "the 1 2 3\ncat 4 5\n", AG_DATA_EFORMAT, "few.txt:2: 'cat' has 2 values, expected 3", NULL);
    BAD("many.txt", "the 1 2 3\ncat 4 5 6 7\n", AG_DATA_EFORMAT, "many.txt:2: 'cat' has 4 values, expected 3", NULL);
    BAD("many2.txt", "the 1 2 3\ncat 4 x 5 6 7\n", AG_DATA_EFORMAT, "many2.txt:2: 'cat' has 5 values, expected 3", NULL);
    BAD("word.txt", "the 1 2 3\ncat\n", AG_DATA_EFORMAT, "word.txt:2: 'cat' has 0 values, expected 3", NULL);
    BAD("nan.txt", "the 1 2 3\ncat 4 x 6\n", AG_DATA_EFORMAT, "nan.txt:2: value 2 ('x') is not a number", NULL);
    BAD("nan2.txt", "the 1 nan 3\n", AG_DATA_EFORMAT, "nan2.txt:1: value 2 ('nan') is not a number", NULL);
    BAD("hex.txt", "the 1 0x10 3\n", AG_DATA_EFORMAT, "value 2 ('0x10') is not a number", NULL);
    /* an unused record's syntax is checked too; its range only when used */
    BAD("unused.txt", "the 1 2\nfoo 1 2e\n", AG_DATA_EFORMAT, "unused.txt:2: value 2 ('2e') is not a number", NULL);
    BAD("big.txt", "the 1 2\ncat 1 1e999\n", AG_DATA_EFORMAT, "big.txt:2: value 2 ('1e999') is not a finite float", NULL);
    BAD("dim0.txt", "the\ncat\n", AG_DATA_EFORMAT, "dim0.txt:1: dimension 0", NULL);
    BAD("hdr0.txt", "2 0\nthe\ncat\n", AG_DATA_EFORMAT, "hdr0.txt:1: dimension 0", NULL);
    BAD("huge.txt", "2 1000000\nthe 1\n", AG_DATA_ELIMIT, "huge.txt:1: dimension 1000000 is absurd (at most 65536)", NULL);
    BAD("count0.txt", "0 3\n", AG_DATA_EFORMAT, "count0.txt:1: the header promises 0 vectors", NULL);
    BAD("short.txt", "3 2\nthe 1 2\ncat 3 4\n", AG_DATA_EFORMAT, "the header promises 3 vectors, the file holds 2 (truncated?)", NULL);
    BAD("longer.txt", "1 2\nthe 1 2\ncat 3 4\n", AG_DATA_EFORMAT, "the header promises 1 vectors, the file holds 2", NULL);
    BAD("latin1.txt", "the 1 2\ncaf\xe9 3 4\n", AG_DATA_EFORMAT, "latin1.txt:2: the word is not UTF-8 (byte 0xe9 at offset 3", NULL);
    BAD("overlong.txt", "\xc0\xaf 1 2\n", AG_DATA_EFORMAT, "overlong.txt:1: the word is not UTF-8 (byte 0xc0", NULL);
    BAD("empty.txt", "", AG_DATA_EFORMAT, "empty.txt: empty file", NULL);
    BAD("blank.txt", "\n\n", AG_DATA_EFORMAT, "blank.txt: no vectors", NULL);
    BAD("nul.txt", "the 1 2\nc\rat 3 4\n", AG_DATA_EFORMAT, "nul.txt:2: carriage return", NULL);
    /* control bytes are valid UTF-8: a damaged word or value is still refused, not passed over unmatched */
    BAD("nulword.txt", "the 1 2\nc\0at 3 4\n", AG_DATA_EFORMAT, "nulword.txt:2: binary data in the word (byte 0x00 at offset 1)", NULL);
    BAD("ctlword.txt", "\x01the 1 2\n", AG_DATA_EFORMAT, "ctlword.txt:1: binary data in the word (byte 0x01 at offset 0)", NULL);
    BAD("nulvalue.txt", "the 1 2\ncat 3 4\0\n", AG_DATA_EFORMAT, "nulvalue.txt:2: value 2: binary data (byte 0x00 at offset 1)", NULL);
    BAD("nulbin.txt", "1 1\nc\0t \0\0\x80\x3f", AG_DATA_EFORMAT, "nulbin.txt: record 1 (byte 0 after the header): binary data in the word", NULL);
    char err[AG_ERR_LEN];
    ag_vectors v;
    CHECK(read_vec("/nonexistent/vectors.txt", vocab, 0, &v, err) == AG_DATA_EIO && strstr(err, "/nonexistent/vectors.txt"));
    ag_vec_opts small = {.max_dim = 2};
    CHECK(ag_vectors_read(text("three.txt", "the 1 2 3\n"), vocab, &small, &v, err, sizeof err) == AG_DATA_ELIMIT &&
          strstr(err, "dimension 3 is absurd (at most 2)"), "%s", err);
}

/* Coverage: the share of a data set's tokens whose word has a vector. */
static void test_coverage(void) {
    char err[AG_ERR_LEN] = "";
    ag_dataset ds;
    ag_vocab *vocab;
    ag_load_opts lo = ag_load_opts_default();
    CHECK(ag_dataset_load(text("data.txt", "0 the cat sat\n1 The dog\n0 sat sat\n"), AG_FORMAT_LABELED, &lo, NULL, &ds,
                          err, sizeof err) == 0, "%s", err);
    ag_vocab_opts vo = {.min_count = 1};
    CHECK(ag_vocab_build(&ds, NULL, 0, &vo, &vocab, err, sizeof err) == 0, "%s", err);
    CHECK(ag_dataset_encode(&ds, vocab, err, sizeof err) == 0, "%s", err);
    ag_vectors v;
    CHECK(read_vec(text("cov.txt", "the 1\ncat 2\ndog 3\n"), vocab, 0, &v, err) == 0, "%s", err);
    int64_t tokens = 0;
    CHECK(ag_vectors_coverage(&v, &ds, NULL, 0, &tokens) == 4 && tokens == 7, "tokens %lld", (long long)tokens);
    CHECK(v.n_exact == 3 && v.n_lower == 1); /* the, cat, dog; The */
    int64_t first[] = {0, 2};
    CHECK(ag_vectors_coverage(&v, &ds, first, 2, &tokens) == 2 && tokens == 5);
    ag_vectors_free(&v);
    ag_vocab_free(vocab);
    ag_dataset_free(&ds);
}

/* ---- the model's side ---- */

static ag_model tiny_model(void) {
    ag_model m;
    ag_model_config cfg = ag_model_tiny(ag_model_find("mpsan"));
    cfg.vocab = V;
    cfg.dim = 3;
    if (ag_model_init(&m, ag_model_find("mpsan"), &cfg)) {
        fprintf(stderr, "model: %s\n", ag_errmsg());
        exit(1);
    }
    return m;
}

static void test_embedding_rows(const ag_vocab *vocab) {
    char err[AG_ERR_LEN] = "";
    ag_vectors v;
    CHECK(read_vec(text("rows.txt", "the 1 2 3\ncat 4 5 6\n"), vocab, 1, &v, err) == 0, "%s", err);
    ag_model m = tiny_model();
    ag_tensor *table = ag_model_embedding(&m);
    CHECK(table && table->shape[0] == V && table->shape[1] == 3);
    ag_rng r;
    ag_rng_seed(&r, 5);
    CHECK(ag_embedding_from_vectors(table, &v, AG_PAD_ID, &r) == AG_OK);
    for (int j = 0; j < 3; j++) {
        CHECK(table->data[THE * 3 + j] == j + 1 && table->data[CAT * 3 + j] == j + 4);
        CHECK(table->data[AG_PAD_ID * 3 + j] == 0);
        for (int id = 1; id < V; id++)
            if (!v.found[id]) CHECK(fabs(table->data[id * 3 + j]) <= 0.05 && table->data[id * 3 + j] != 0);
    }
    /* the same seed draws the same rows */
    ag_real first[V * 3];
    memcpy(first, table->data, sizeof first);
    ag_rng_seed(&r, 5);
    ag_embedding_from_vectors(table, &v, AG_PAD_ID, &r);
    CHECK(!memcmp(first, table->data, sizeof first));
    ag_vectors_free(&v);

    /* a table of another width is refused, untouched, both shapes named */
    CHECK(read_vec(text("wide.txt", "the 1 2 3 4\n"), vocab, 0, &v, err) == 0, "%s", err);
    CHECK(ag_embedding_from_vectors(table, &v, AG_PAD_ID, &r) == AG_ERR_SHAPE);
    CHECK(strstr(ag_errmsg(), "embedding 'embed.weight' is [8,3], but the vectors are 4-dimensional for a vocabulary of 8"),
          "%s", ag_errmsg());
    CHECK(!memcmp(first, table->data, sizeof first));
    ag_vectors_free(&v);

    /* a wider table keeps each vector in its first columns, draws the rest */
    CHECK(read_vec(text("narrow.txt", "the 1 2\ncat 4 5\n"), vocab, 0, &v, err) == 0, "%s", err);
    ag_rng_seed(&r, 5);
    CHECK(ag_embedding_from_vectors(table, &v, AG_PAD_ID, &r) == AG_OK, "%s", ag_errmsg());
    CHECK(table->data[THE * 3] == 1 && table->data[THE * 3 + 1] == 2 && table->data[CAT * 3] == 4 &&
          table->data[CAT * 3 + 1] == 5);
    for (int id = 0; id < V; id++)
        for (int j = 0; j < 3; j++) {
            ag_real x = table->data[id * 3 + j];
            if (id == AG_PAD_ID) CHECK(x == 0);
            else if (!v.found[id] || j == 2) CHECK(fabs(x) <= 0.05 && x != 0, "row %d col %d: %g", id, j, (double)x);
        }
    ag_vectors_free(&v);
    ag_model_free(&m);
}

/* One training step of the tiny batch with the L2 term and clipping. */
static void step(ag_model *m, ag_optimizer *opt, const ag_batch *b) {
    ag_params_zero_grad(&m->params);
    ag_backward(ag_model_loss(m, b, true));
    ag_l2_penalty(&m->params, 0.1);
    ag_clip_grad_norm(&m->params, 0.5);
    ag_optim_step(opt);
    ag_step_end();
}

static void test_freeze(void) {
    static const char *const specs[] = {"adam:lr=0.1,weight_decay=0.1", "adadelta:lr=1,weight_decay=0.1",
                                        "sgd:lr=0.5,momentum=0.9,weight_decay=0.1"};
    for (int k = 0; k < 3; k++) {
        ag_model m = tiny_model();
        ag_tensor *table = ag_model_embedding(&m);
        ag_param_freeze(table);
        CHECK(!table->requires_grad);
        ag_optim_config oc;
        ag_optimizer opt;
        CHECK(ag_optim_parse(specs[k], &oc) == AG_OK && ag_optim_init(&opt, &m.params, &oc) == AG_OK);
        const char *slot = ag_optim_slot_name(&opt, 0);
        CHECK(!ag_optim_state(&opt, "embed.weight", slot), "%s keeps state for the frozen table", specs[k]);
        CHECK(ag_optim_state(&opt, "cls.out.weight", slot), "%s", specs[k]);
        ag_real before[V * 3], out_before[3 * 3];
        ag_tensor *out = ag_params_find(&m.params, "cls.out.weight");
        memcpy(before, table->data, sizeof before);
        memcpy(out_before, out->data, sizeof out_before);
        ag_batch b;
        ag_tiny_batch(&m, &b, 11);
        for (int s = 0; s < 3; s++) step(&m, &opt, &b);
        CHECK(!memcmp(before, table->data, sizeof before), "%s changed the frozen table", specs[k]);
        bool zero = true;
        for (int i = 0; i < V * 3; i++) zero &= table->grad[i] == 0;
        CHECK(zero, "%s: the frozen table got a gradient", specs[k]);
        CHECK(memcmp(out_before, out->data, sizeof out_before), "%s: the other parameters must train", specs[k]);

        /* the checkpoint holds the table, but no optimizer state for it, and loads back */
        char path[128], name[128];
        snprintf(path, sizeof path, "%s/frozen.safetensors", dir);
        CHECK(ag_checkpoint_save(path, &m.params, &opt, NULL, NULL) == AG_OK, "%s", ag_errmsg());
        ag_st_file f;
        CHECK(ag_st_read(path, &f) == AG_OK);
        snprintf(name, sizeof name, "optim.%s.%s.embed.weight", ag_optim_name(oc.kind), slot);
        CHECK(ag_st_get(&f, "embed.weight") && !ag_st_get(&f, name), "%s", name);
        snprintf(name, sizeof name, "optim.%s.%s.cls.out.weight", ag_optim_name(oc.kind), slot);
        CHECK(ag_st_get(&f, name), "%s", name);
        ag_st_close(&f);
        ag_model m2 = tiny_model();
        ag_param_freeze(ag_model_embedding(&m2));
        ag_optimizer opt2;
        ag_optim_init(&opt2, &m2.params, &oc);
        CHECK(ag_checkpoint_load(path, &m2.params, &opt2, NULL, NULL) == AG_OK, "%s", ag_errmsg());
        CHECK(!memcmp(before, ag_model_embedding(&m2)->data, sizeof before) && opt2.step == 3);
        ag_optim_free(&opt2);
        ag_model_free(&m2);
        ag_model_batch_free(&b);
        ag_optim_free(&opt);
        ag_model_free(&m);
    }
    /* the L2 term skips a frozen weight matrix */
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){2, 2});
    ag_init_constant(w, 1);
    CHECK_NEAR(ag_l2_penalty(&ps, 1), 2, 0, 1e-12);
    ag_param_freeze(w);
    CHECK(ag_l2_penalty(&ps, 1) == 0 && w->grad[0] == 0);
    ag_params_free(&ps);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/test_embeddings.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    ag_vocab *vocab = vocab_of(WORDS, V);
    test_glove(vocab);
    test_duplicates(vocab);
    test_word2vec_text(vocab);
    test_word2vec_binary(vocab);
    test_word2vec_binary_large(vocab);
    test_errors(vocab);
    test_coverage();
    test_embedding_rows(vocab);
    test_freeze();
    ag_vocab_free(vocab);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    ag_shutdown();
    return check_summary("test_embeddings");
}
