/* test_data.c - the data pipeline: tokenizer, vocab, loaders, batches,
 * splits, synthetic tasks. Fixtures are written to a mkdtemp() folder;
 * the real benchmark files are only read when AG_DATA_DIR is set. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attngrad/data.h"
#include "check.h"

/* check.h expands a message-less CHECK(cond) to fprintf(stderr, ""), which
 * -Wall (-Wformat-zero-length) flags at every such call site. */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

static char tmpdir[] = "/tmp/ag_test_data_XXXXXX";
static char paths[128][512];
static int npaths;
static char err[AG_ERR_LEN];

/* Writes a fixture file into tmpdir and returns its path. */
static const char *fixture(const char *name, const char *bytes, size_t n) {
    if (npaths == 128) abort(); /* raise the table size */
    char *p = paths[npaths++];
    snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    return p;
}
#define FIXTURE(name, lit) fixture(name, lit, sizeof(lit) - 1)

static const char *tmp_path(const char *name) {
    if (npaths == 128) abort();
    char *p = paths[npaths++];
    snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
    return p;
}

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* Expect a load with options `o` (NULL: the defaults) to fail with a
 * message naming "path:line:" (line 0: the file alone). */
static void expect_load_error_opts(const char *name, const char *text, ag_format fmt,
                                   const ag_load_opts *o, int line, const char *why) {
    const char *p = fixture(name, text, strlen(text));
    ag_dataset ds;
    err[0] = 0;
    int rc = ag_dataset_load(p, fmt, o, NULL, &ds, err, sizeof err);
    char where[600];
    if (line) snprintf(where, sizeof where, "%s:%d:", p, line);
    else snprintf(where, sizeof where, "%s:", p); /* file-level problem */
    CHECK(rc == AG_DATA_EFORMAT, "%s: rc %d", name, rc);
    CHECK(contains(err, where), "%s: message '%s' should name %s", name, err, where);
    CHECK(contains(err, why), "%s: message '%s' should say '%s'", name, err, why);
    CHECK(ds.n == 0 && ds.ex == NULL && ds.store == NULL);
    ag_dataset_free(&ds);
}

static void expect_load_error(const char *name, const char *text, ag_format fmt, int line,
                              const char *why) {
    expect_load_error_opts(name, text, fmt, NULL, line, why);
}

/* ---- tokenizer ----------------------------------------------------------- */

static void test_tokenize(void) {
    char s[] = "  Hello\tWORLD\r\n clich\xC9s \xE9t\xE9  ";
    ag_span sp[8];
    size_t n = ag_tokenize(s, strlen(s), 1, sp, 8);
    CHECK(n == 4);
    CHECK(sp[0].start == 2 && sp[0].len == 5 && memcmp(s + 2, "hello", 5) == 0);
    CHECK(memcmp(s + sp[1].start, "world", 5) == 0 && sp[1].len == 5);
    CHECK(sp[2].len == 7 && memcmp(s + sp[2].start, "clich\xC9s", 7) == 0, "Latin-1 kept");
    CHECK(sp[3].len == 3 && memcmp(s + sp[3].start, "\xE9t\xE9", 3) == 0);
    CHECK(ag_tokenize(s, strlen(s), 0, sp, 2) == 4, "count beyond max_spans");
    CHECK(ag_tokenize(s, 0, 0, sp, 8) == 0);
    char blank[] = " \t\r\n\v\f";
    CHECK(ag_tokenize(blank, strlen(blank), 0, NULL, 0) == 0);
}

/* ---- vocab ---------------------------------------------------------------- */

static void test_vocab_build(void) {
    /* counts: b 3, a 3, c 2, <unk> 1 (literal), d 1, e 1; ties by byte order */
    const char *p = FIXTURE("vocab_train.all", "0 b a c\n1 a b d\n0 c b a <unk>\n1 e\n");
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    ag_vocab *v = NULL;
    CHECK(ag_vocab_build(&ds, NULL, 0, &(ag_vocab_opts){1, 0}, &v, err, sizeof err) == 0);
    const char *want[] = {"<pad>", "<unk>", "a", "b", "c", "d", "e"};
    CHECK(ag_vocab_size(v) == 7, "size %d", ag_vocab_size(v));
    for (int i = 0; i < 7 && i < ag_vocab_size(v); i++)
        CHECK(strcmp(ag_vocab_token(v, i), want[i]) == 0, "id %d = %s", i, ag_vocab_token(v, i));
    CHECK(ag_vocab_token(v, 7) == NULL && ag_vocab_token(v, -1) == NULL);
    CHECK(ag_vocab_find(v, "c", 1) == 4 && ag_vocab_find(v, "zz", 2) == -1);
    CHECK(ag_vocab_id(v, "zz", 2) == AG_UNK_ID && ag_vocab_id(v, "<pad>", 5) == AG_UNK_ID);

    /* min_count 2 drops d, e; max_size 4 keeps the two most frequent */
    ag_vocab *v2 = NULL, *v3 = NULL, *v4 = NULL;
    CHECK(ag_vocab_build(&ds, NULL, 0, &(ag_vocab_opts){2, 0}, &v2, err, sizeof err) == 0);
    CHECK(ag_vocab_size(v2) == 5 && ag_vocab_find(v2, "d", 1) == -1);
    CHECK(ag_vocab_build(&ds, NULL, 0, &(ag_vocab_opts){1, 4}, &v3, err, sizeof err) == 0);
    CHECK(ag_vocab_size(v3) == 4 && strcmp(ag_vocab_token(v3, 3), "b") == 0);
    /* from a subset: examples 1 and 3 only ("a b d", "e") */
    int64_t sub[] = {1, 3};
    CHECK(ag_vocab_build(&ds, sub, 2, NULL, &v4, err, sizeof err) == 0);
    CHECK(ag_vocab_size(v4) == 6 && ag_vocab_find(v4, "c", 1) == -1);
    ag_vocab *v5 = NULL;
    CHECK(ag_vocab_build(&ds, NULL, 0, &(ag_vocab_opts){1, 1}, &v5, err, sizeof err) ==
          AG_DATA_EINVAL && v5 == NULL);
    int64_t badsub[] = {7};
    CHECK(ag_vocab_build(&ds, badsub, 1, NULL, &v5, err, sizeof err) == AG_DATA_EINVAL && !v5);

    /* encode: literal <unk> -> 1; test data with unseen words -> 1, OOV counted */
    CHECK(ag_dataset_encode(&ds, v, err, sizeof err) == 0);
    CHECK(ds.ex[2].tokens[3] == AG_UNK_ID && ds.ex[0].tokens[0] == 3);
    CHECK(ds.stats.unk == 1 && ds.stats.oov == 0, "unk %lld", (long long)ds.stats.unk);
    const char *pt = FIXTURE("vocab_test.all", "1 a zz b\n0 yy\n");
    ag_dataset te;
    CHECK(ag_dataset_load(pt, AG_FORMAT_LABELED, NULL, v, &te, err, sizeof err) == 0, "%s", err);
    CHECK(te.encoded && te.ex[0].tokens[1] == AG_UNK_ID && te.ex[1].tokens[0] == AG_UNK_ID);
    CHECK(te.stats.tokens == 4 && te.stats.oov == 2 && te.stats.unk == 2);
    CHECK_NEAR(te.stats.oov_rate, 0.5, 1e-12, 0);

    /* determinism: a second build is identical */
    ag_vocab *again = NULL;
    CHECK(ag_vocab_build(&ds, NULL, 0, NULL, &again, err, sizeof err) == 0);
    int same = ag_vocab_size(again) == ag_vocab_size(v);
    for (int i = 0; same && i < ag_vocab_size(v); i++)
        same = strcmp(ag_vocab_token(v, i), ag_vocab_token(again, i)) == 0;
    CHECK(same);

    /* save / load round trip */
    const char *vp = tmp_path("vocab.txt");
    CHECK(ag_vocab_save(v, vp, err, sizeof err) == 0, "%s", err);
    ag_vocab *lv = NULL;
    CHECK(ag_vocab_load(vp, &lv, err, sizeof err) == 0, "%s", err);
    same = lv && ag_vocab_size(lv) == ag_vocab_size(v);
    for (int i = 0; same && i < ag_vocab_size(v); i++)
        same = strcmp(ag_vocab_token(v, i), ag_vocab_token(lv, i)) == 0 &&
               ag_vocab_find(lv, ag_vocab_token(v, i), strlen(ag_vocab_token(v, i))) == i;
    CHECK(same, "vocab round trip");

    ag_vocab_free(v);
    ag_vocab_free(v2);
    ag_vocab_free(v3);
    ag_vocab_free(v4);
    ag_vocab_free(again);
    ag_vocab_free(lv);
    ag_dataset_free(&ds);
    ag_dataset_free(&te);
}

static void expect_vocab_error(const char *name, const char *text, int line, const char *why) {
    const char *p = fixture(name, text, strlen(text));
    ag_vocab *v = (ag_vocab *)1;
    err[0] = 0;
    int rc = ag_vocab_load(p, &v, err, sizeof err);
    char where[600];
    if (line) snprintf(where, sizeof where, "%s:%d:", p, line);
    else snprintf(where, sizeof where, "%s:", p);
    CHECK(rc == AG_DATA_EFORMAT && v == NULL, "%s rc %d", name, rc);
    CHECK(contains(err, where) && contains(err, why), "%s: '%s'", name, err);
}

static void test_vocab_files(void) {
    expect_vocab_error("v1.txt", "<unk>\n<pad>\na\n", 1, "<pad>");
    expect_vocab_error("v2.txt", "<pad>\na\n", 2, "<unk>");
    expect_vocab_error("v3.txt", "<pad>\n<unk>\na\nb\na\n", 5, "duplicate token 'a' (first on line 3)");
    expect_vocab_error("v4.txt", "<pad>\n<unk>\n\nb\n", 3, "empty token");
    expect_vocab_error("v5.txt", "<pad>\n<unk>\na b\n", 3, "whitespace");
    expect_vocab_error("v6.txt", "<pad>\n<unk>\na\001\n", 3, "control byte");
    expect_vocab_error("v7.txt", "", 0, "needs at least");
    ag_vocab *v = NULL;
    CHECK(ag_vocab_load(tmp_path("missing_vocab.txt"), &v, err, sizeof err) == AG_DATA_EIO);
    CHECK(contains(err, "missing_vocab.txt") && contains(err, "cannot open"), "%s", err);
    /* Latin-1 tokens and CRLF lines are fine */
    const char *p = FIXTURE("v8.txt", "<pad>\r\n<unk>\r\nclich\xE9s\r\n");
    CHECK(ag_vocab_load(p, &v, err, sizeof err) == 0, "%s", err);
    CHECK(v && ag_vocab_size(v) == 3 && ag_vocab_find(v, "clich\xE9s", 7) == 2);
    ag_vocab_free(v);
    const char *list[] = {"<pad>", "<unk>", "x", "x"};
    CHECK(ag_vocab_from_list(list, 4, &v, err, sizeof err) == AG_DATA_EINVAL && v == NULL);
    CHECK(ag_vocab_from_list(list, 3, &v, err, sizeof err) == 0 && ag_vocab_size(v) == 3);
    ag_vocab_free(v);
}

static void test_vocab_many(void) {
    /* 20000 distinct tokens: the hash table grows and every lookup hits */
    enum { N = 20000 };
    char **toks = malloc(N * sizeof *toks);
    for (int i = 0; i < N; i++) {
        toks[i] = malloc(16);
        if (i == 0) strcpy(toks[i], "<pad>");
        else if (i == 1) strcpy(toks[i], "<unk>");
        else snprintf(toks[i], 16, "t%d", i);
    }
    ag_vocab *v = NULL;
    CHECK(ag_vocab_from_list((const char *const *)toks, N, &v, err, sizeof err) == 0);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= ag_vocab_find(v, toks[i], strlen(toks[i])) == i;
    CHECK(ok && ag_vocab_find(v, "t20000", 6) == -1);
    for (int i = 0; i < N; i++) free(toks[i]);
    free(toks);
    ag_vocab_free(v);
}

/* ---- loaders ---------------------------------------------------------------- */

static void test_labeled(void) {
    const char *p = FIXTURE("trec.all",
                            "0 How did serfdom develop ?\r\n"
                            "\n"
                            "5 What is the sister\xF0" "city of X ?\n"
                            "   \t \n"
                            "3 Who   wrote\tit ?"); /* no final newline */
    ag_load_opts o = ag_load_opts_default();
    o.lowercase = 1;
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 3 && ds.n_classes == 6 && !ds.encoded && ds.ex[0].tokens == NULL);
    CHECK(ds.stats.lines == 5 && ds.stats.blank == 2 && ds.stats.tokens == 5 + 7 + 4);
    CHECK(ds.ex[0].label == 0 && ds.ex[1].label == 5 && ds.ex[2].label == 3);
    CHECK(ds.ex[0].line == 1 && ds.ex[1].line == 3 && ds.ex[2].line == 5);
    CHECK(ds.ex[0].len == 5 && ds.ex[1].len == 7 && ds.ex[2].len == 4);
    CHECK(strcmp(ag_dataset_word(&ds, 0, 0, 0), "how") == 0, "lower-cased");
    CHECK(strcmp(ag_dataset_word(&ds, 0, 0, 4), "?") == 0, "\\r stripped");
    CHECK(strcmp(ag_dataset_word(&ds, 1, 0, 3), "sister\xF0" "city") == 0, "Latin-1 byte kept");
    CHECK(ag_dataset_word(&ds, 0, 0, 5) == NULL && ag_dataset_word(&ds, 0, 1, 0) == NULL);
    CHECK(ag_dataset_word(&ds, 3, 0, 0) == NULL);
    int32_t ml;
    ag_dataset_max_len(&ds, &ml, NULL);
    CHECK(ml == 7);
    ag_dataset_free(&ds);
    ag_dataset_free(&ds); /* twice is harmless */

    /* without lowercase the case stays */
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0);
    CHECK(strcmp(ag_dataset_word(&ds, 0, 0, 0), "How") == 0);
    ag_dataset_free(&ds);

    /* a very long line (2 MB, 500k tokens) loads; a cap turns it into an error */
    size_t n = 2 + 4 * 500000 + 1;
    char *big = malloc(n + 1);
    strcpy(big, "1");
    for (size_t i = 0; i < 500000; i++) memcpy(big + 1 + 4 * i, " abc", 4);
    big[n - 2] = '\n';
    big[n - 1] = 0;
    const char *bp = fixture("long.all", big, n - 1);
    free(big);
    CHECK(ag_dataset_load(bp, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 1 && ds.ex[0].len == 500000);
    ag_dataset_free(&ds);
    o = ag_load_opts_default();
    o.max_line_bytes = 1000;
    CHECK(ag_dataset_load(bp, AG_FORMAT_LABELED, &o, NULL, &ds, err, sizeof err) == AG_DATA_ELIMIT);
    CHECK(contains(err, "long.all:1:") && contains(err, "longer than 1000"), "%s", err);
}

static void test_labeled_errors(void) {
    expect_load_error("e1.all", "0 fine\nhello world\n", AG_FORMAT_LABELED, 2, "label 'hello'");
    expect_load_error("e2.all", "0 fine\n1 ok\n1.5 half\n", AG_FORMAT_LABELED, 3, "label '1.5'");
    expect_load_error("e3.all", "-1 neg\n", AG_FORMAT_LABELED, 1, "label '-1'");
    expect_load_error("e4.all", "0 fine\n3\n", AG_FORMAT_LABELED, 2, "empty sentence");
    expect_load_error("e6.all", "99999999 x\n", AG_FORMAT_LABELED, 1, "label '99999999'");
    expect_load_error("e7.all", "0 a\n1 b\x01\n", AG_FORMAT_LABELED, 2, "binary data");
    expect_load_error("e8.all", "\n \n", AG_FORMAT_LABELED, 0, "no examples");

    /* the NUL fixture needs its explicit size */
    const char nul[] = "0 fine\n1 bin\0ary\n2 ok\nbad\n";
    const char *p = fixture("e9.all", nul, sizeof nul - 1);
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == AG_DATA_EFORMAT);
    CHECK(contains(err, "e9.all:2:") && contains(err, "byte 0x00 at column 6"), "%s", err);
    ag_load_opts o = ag_load_opts_default();
    o.skip_bad_lines = 1;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.stats.skipped == 2 && ds.ex[1].label == 2 && ds.ex[1].line == 3);
    CHECK(contains(ds.stats.first_warning, "e9.all:2:"), "%s", ds.stats.first_warning);
    CHECK(ds.stats.tokens == 2);
    ag_dataset_free(&ds);

    /* files that cannot be read, bad formats */
    CHECK(ag_dataset_load(tmp_path("nope.all"), AG_FORMAT_LABELED, NULL, NULL, &ds, err,
                          sizeof err) == AG_DATA_EIO);
    CHECK(contains(err, "nope.all") && contains(err, "cannot open"), "%s", err);
    CHECK(ag_dataset_load(tmpdir, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) ==
          AG_DATA_EIO, "directory");
    CHECK(contains(err, tmpdir), "%s", err);
    CHECK(ag_dataset_load(p, (ag_format)42, NULL, NULL, &ds, err, sizeof err) == AG_DATA_EINVAL);
    ag_format f;
    CHECK(ag_format_parse("sick", &f) == 0 && f == AG_FORMAT_SICK);
    CHECK(ag_format_parse("xml", &f) == AG_DATA_EINVAL);
    CHECK(strcmp(ag_format_name(AG_FORMAT_CONLLU), "conllu") == 0);
    const ag_benchmark *b = ag_benchmark_find("trec");
    CHECK(b && b->format == AG_FORMAT_LABELED && b->dev == NULL && b->n_classes == 6);
    CHECK(ag_benchmark_find("cr")->cv && ag_benchmark_find("cr")->label_only_lines == 4);
    CHECK(ag_benchmark_find("imagenet") == NULL);
}

static const char sick_text[] =
    "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    "1\tA group of kids is playing\tKids are playing\t4.5\tENTAILMENT\n"
    "2\tA man is cooking\tNo man is cooking\t3.6\tCONTRADICTION\r\n"
    "\n"
    "3\tTwo dogs run\tA cat sleeps\t1.2\tNEUTRAL\r\n";

static void test_sick(void) {
    const char *p = fixture("SICK_train.txt", sick_text, sizeof sick_text - 1);
    ag_dataset ds;
    ag_load_opts o = ag_load_opts_default();
    o.lowercase = 1;
    CHECK(ag_dataset_load(p, AG_FORMAT_SICK, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 3 && ds.n_classes == 3 && ds.stats.blank == 1 && ds.stats.lines == 5);
    CHECK(ds.ex[0].label == 1 && ds.ex[1].label == 2 && ds.ex[2].label == 0);
    CHECK_NEAR(ds.ex[0].score, 4.5, 1e-6, 0);
    CHECK_NEAR(ds.ex[2].score, 1.2, 1e-6, 0);
    CHECK(ds.ex[0].len == 6 && ds.ex[0].len_b == 3 && ds.ex[1].len_b == 4);
    CHECK(strcmp(ag_dataset_word(&ds, 1, 1, 0), "no") == 0);
    CHECK(strcmp(ag_dataset_word(&ds, 2, 1, 2), "sleeps") == 0);
    CHECK(ds.stats.tokens == 6 + 3 + 4 + 4 + 3 + 3);
    ag_dataset_free(&ds);

    /* columns found by header name, whatever their order */
    const char *q = FIXTURE("sick_reordered.txt",
                            "entailment_judgment\tpair_ID\trelatedness_score\tsentence_B\tsentence_A\n"
                            "NEUTRAL\t9\t2.5\tb words\ta words here\n");
    CHECK(ag_dataset_load(q, AG_FORMAT_SICK, NULL, NULL, &ds, err, sizeof err) == AG_DATA_EFORMAT,
          "header must start with pair_ID");
    q = FIXTURE("sick_reordered2.txt",
                "pair_ID\tentailment_judgment\trelatedness_score\tsentence_B\tsentence_A\textra\n"
                "9\tNEUTRAL\t2.5\tb words\ta words here\tx\n");
    CHECK(ag_dataset_load(q, AG_FORMAT_SICK, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 1 && ds.ex[0].len == 3 && ds.ex[0].len_b == 2 && ds.ex[0].label == 0);
    ag_dataset_free(&ds);

    const char *H = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n";
    char buf[512];
#define SICK_ERR(name, line2, why)                                                 \
    do {                                                                           \
        snprintf(buf, sizeof buf, "%s1\ta b\tc d\t3\tNEUTRAL\n%s", H, line2);     \
        expect_load_error(name, buf, AG_FORMAT_SICK, 3, why);                      \
    } while (0)
    SICK_ERR("s1.txt", "2\ta b\tc d\t3\n", "expected 5 tab-separated columns, found 4");
    SICK_ERR("s2.txt", "2\ta b\tc d\t3\tNEUTRAL\textra\n", "found 6");
    SICK_ERR("s3.txt", "2\ta b\tc d\tabc\tNEUTRAL\n", "score 'abc'");
    SICK_ERR("s4.txt", "2\ta b\tc d\tnan\tNEUTRAL\n", "score 'nan'");
    SICK_ERR("s5.txt", "2\ta b\tc d\t\tNEUTRAL\n", "score ''");
    SICK_ERR("s6.txt", "2\ta b\tc d\t2.0\tMAYBE\n", "label 'MAYBE'");
    SICK_ERR("s7.txt", "2\t  \tc d\t2.0\tNEUTRAL\n", "empty sentence_A");
    SICK_ERR("s8.txt", "2\ta\t\t2.0\tNEUTRAL\n", "empty sentence_B");
    SICK_ERR("s9.txt", "2 a b c d 2.0 NEUTRAL\n", "found 1");
#undef SICK_ERR
    expect_load_error("s10.txt", "1\ta\tb\t3\tNEUTRAL\n", AG_FORMAT_SICK, 1, "header");
    expect_load_error("s11.txt", "pair_ID\tsentence_A\tsentence_B\tscore\tentailment_judgment\n",
                      AG_FORMAT_SICK, 1, "no column 'relatedness_score'");
    expect_load_error("s12.txt", "", AG_FORMAT_SICK, 0, "no SICK header");

    /* skip mode keeps the good pairs */
    snprintf(buf, sizeof buf, "%s1\ta b\tc d\t3\tNEUTRAL\n2\tx\ty\t9e\tNEUTRAL\n3\te\tf\t1\tENTAILMENT\n", H);
    q = fixture("s13.txt", buf, strlen(buf));
    o = ag_load_opts_default();
    o.skip_bad_lines = 1;
    CHECK(ag_dataset_load(q, AG_FORMAT_SICK, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.stats.skipped == 1 && ds.ex[1].label == 1 && ds.ex[1].len == 1);
    CHECK(contains(ds.stats.first_warning, "s13.txt:3:"), "%s", ds.stats.first_warning);
    ag_dataset_free(&ds);
}

static const char conllu_text[] =
    "# sent_id = 1\n"
    "# label = 2\n"
    "1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "1\tDo\tdo\tAUX\t_\t_\t3\taux\t_\t_\n"
    "2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_\n"
    "3\tGo\tgo\tVERB\t_\t_\t0\troot\t_\t_\n"
    "3.1\tnull\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "4\t!\t!\tPUNCT\t_\t_\t3\tpunct\t_\t_\n"
    "\n"
    "\n"
    "# text = the dog\n"
    "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n"
    "2\tdog\tdog\tNOUN\t_\t_\t0\troot\t_\t_"; /* no blank line at the end */

static void test_conllu(void) {
    const char *p = fixture("a.conllu", conllu_text, sizeof conllu_text - 1);
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.ex[0].len == 4 && ds.ex[1].len == 2);
    CHECK(ds.ex[0].label == 2 && ds.ex[1].label == -1 && ds.n_classes == 3);
    CHECK(ds.ex[0].line == 1 && ds.ex[1].line == 11);
    const int32_t h0[] = {2, 2, -1, 2}, h1[] = {1, -1};
    CHECK(memcmp(ds.ex[0].heads, h0, sizeof h0) == 0 && memcmp(ds.ex[1].heads, h1, sizeof h1) == 0);
    CHECK(strcmp(ag_dataset_word(&ds, 0, 0, 1), "n't") == 0);
    CHECK(strcmp(ag_dataset_word(&ds, 0, 0, 3), "!") == 0, "empty node skipped");
    ag_dataset_free(&ds);

    const char *tok = "1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s\n1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n2\tb\t_\t_\t_\t_\t7\t_\t_\t_\n", tok);
    expect_load_error("c1.conllu", buf, AG_FORMAT_CONLLU, 4, "sentence 2: token 2: head 7 out of range");
    snprintf(buf, sizeof buf, "%s\n1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n2\tb\t_\t_\t_\t_\t2\t_\t_\t_\n", tok);
    expect_load_error("c2.conllu", buf, AG_FORMAT_CONLLU, 4, "sentence 2: token 2: head points to itself");
    expect_load_error("c3.conllu", "1\ta\t_\t_\t_\t_\t0\t_\t_\n", AG_FORMAT_CONLLU, 1,
                      "expected 10 tab-separated columns, found 9");
    expect_load_error("c4.conllu", "1\ta\t_\t_\t_\t_\troot\t_\t_\t_\n", AG_FORMAT_CONLLU, 1,
                      "HEAD 'root'");
    expect_load_error("c5.conllu", "1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n3\tb\t_\t_\t_\t_\t1\t_\t_\t_\n",
                      AG_FORMAT_CONLLU, 2, "token ID '3', expected 2");
    expect_load_error("c6.conllu", "# label = x\n1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n", AG_FORMAT_CONLLU,
                      1, "label");
    expect_load_error("c7.conllu", "1\t\t_\t_\t_\t_\t0\t_\t_\t_\n", AG_FORMAT_CONLLU, 1, "empty FORM");
    expect_load_error("c8.conllu", "# only a comment\n\n", AG_FORMAT_CONLLU, 1, "no word tokens");
    /* one byte and no token: the sentence's heads were never allocated, and
     * with bad lines skipped its end asked for them (a NULL pointer plus an
     * offset, which clang's UBSan stops on: tests/fuzz/corpus/conllu/pipe-only) */
    expect_load_error("c10.conllu", "|", AG_FORMAT_CONLLU, 1, "expected 10 tab-separated columns, found 1");
    ag_load_opts skip = ag_load_opts_default();
    skip.skip_bad_lines = 1;
    expect_load_error_opts("c11.conllu", "|", AG_FORMAT_CONLLU, &skip, 0, "no examples");

    /* skip mode drops the whole bad sentence, keeps the rest */
    snprintf(buf, sizeof buf, "%s\n1\ta\t_\t_\t_\t_\t5\t_\t_\t_\n\n%s", tok, tok);
    p = fixture("c9.conllu", buf, strlen(buf));
    ag_load_opts o = ag_load_opts_default();
    o.skip_bad_lines = 1;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.stats.skipped == 1 && ds.ex[1].line == 5);
    CHECK(contains(ds.stats.first_warning, "c9.conllu:3: sentence 2"), "%s", ds.stats.first_warning);
    ag_dataset_free(&ds);
}

static void test_lm(void) {
    const char *p = FIXTURE("ptb.train.txt",
                            " the cat sat \n"
                            " \n"
                            " a b c d e f g h \n"
                            " the dog \n");
    ag_load_opts o = ag_load_opts_default();
    o.lm_max_len = 5;
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LM, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 3 && ds.stats.blank == 1 && ds.stats.lines == 4 && ds.stats.tokens == 13);
    CHECK(ds.n_classes == 0 && ds.ex[0].label == -1 && ds.lm_max_len == 5);
    CHECK(ds.ex[0].len == 4 && ds.ex[0].full_len == 4, "3 words + <eos>");
    CHECK(strcmp(ag_dataset_word(&ds, 0, 0, 3), "<eos>") == 0);
    CHECK(ds.ex[1].len == 6 && ds.ex[1].full_len == 9 && ds.stats.clipped == 1, "clipped to 5+1");
    ag_vocab *v = NULL;
    CHECK(ag_vocab_build(&ds, NULL, 0, NULL, &v, err, sizeof err) == 0);
    /* <eos> 3, the 2, then a..h, cat, dog, sat (clipped words still counted) */
    CHECK(ag_vocab_size(v) == 2 + 2 + 8 + 3, "size %d", ag_vocab_size(v));
    CHECK(ag_vocab_find(v, "<eos>", 5) == 2 && ag_vocab_find(v, "the", 3) == 3);
    CHECK(ag_vocab_find(v, "h", 1) > 0);
    CHECK(ag_dataset_encode(&ds, v, err, sizeof err) == 0 && ds.stats.oov == 0);

    const char *q = FIXTURE("ptb.valid.txt", " the zebra sat \n the <unk> \n");
    ag_dataset va;
    CHECK(ag_dataset_load(q, AG_FORMAT_LM, NULL, v, &va, err, sizeof err) == 0, "%s", err);
    CHECK(va.stats.tokens == 5 && va.stats.oov == 1 && va.stats.unk == 2);
    CHECK_NEAR(va.stats.oov_rate, 0.2, 1e-12, 0);
    CHECK(va.ex[0].tokens[1] == AG_UNK_ID && va.ex[0].tokens[3] == 2);
    ag_vocab_free(v);
    ag_dataset_free(&ds);
    ag_dataset_free(&va);

    const char junk[] = "fine line\nbad \x7f line\n";
    expect_load_error("lm_junk.txt", junk, AG_FORMAT_LM, 2, "byte 0x7f");
    o.lm_max_len = 0;
    CHECK(ag_dataset_load(p, AG_FORMAT_LM, &o, NULL, &ds, err, sizeof err) == AG_DATA_EINVAL);
}

/* Example i's words joined by spaces, <eos> included. */
static const char *example_text(const ag_dataset *ds, int64_t i) {
    static char buf[512];
    size_t n = 0;
    buf[0] = 0;
    for (int32_t t = 0; t < ds->ex[i].full_len && n < sizeof buf; t++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", t ? " " : "", ag_dataset_word(ds, i, 0, t));
    return buf;
}

/* WikiText-2's lines are paragraphs; its paper trains a sentence an example. */
static void test_lm_sentences(void) {
    const char *p = FIXTURE("wiki.txt",
                            " = Heading = \n"
                            " \n"
                            " He went to the U.S. in 1990 . It rained ! ? Then Dr. Who came ... and left \n"
                            " . a b . \n"
                            " one \" two \" . \" Three \" \n");
    ag_load_opts o = ag_load_opts_default();
    o.lm_sentences = 1;
    o.lm_max_len = 4;
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LM, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    static const char *want[] = {
        "= Heading = <eos>",
        "He went to the U.S. in 1990 . <eos>", /* abbreviations keep their point */
        "It rained ! ? <eos>",                  /* a run of end tokens stays whole */
        "Then Dr. Who came ... and left <eos>", /* "..." does not end a sentence */
        ". <eos>",
        "a b . <eos>",                           /* the line's last token cuts nothing */
        "one \" two \" . <eos>",
        "\" Three \" <eos>",
    };
    static const int64_t line[] = {1, 3, 3, 3, 4, 4, 5, 5};
    int n = (int)(sizeof want / sizeof *want);
    CHECK(ds.n == n && ds.stats.lines == 5 && ds.stats.blank == 1, "%lld examples", (long long)ds.n);
    for (int i = 0; i < n && i < ds.n; i++) {
        CHECK(!strcmp(example_text(&ds, i), want[i]), "sentence %d: '%s', want '%s'", i, example_text(&ds, i),
              want[i]);
        CHECK(ds.ex[i].line == line[i], "sentence %d on line %lld", i, (long long)ds.ex[i].line);
        int32_t full = ds.ex[i].full_len;
        CHECK(ds.ex[i].len == (full > 5 ? 5 : full), "each sentence clipped to 4 + 1 on its own");
    }
    CHECK(ds.stats.clipped == 3 && ds.stats.tokens == 3 + 8 + 4 + 7 + 1 + 3 + 5 + 3);
    ag_dataset_free(&ds);

    o.lm_sentences = 0; /* a line an example */
    CHECK(ag_dataset_load(p, AG_FORMAT_LM, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 4 && ds.ex[1].full_len == 19 + 1 && ds.ex[1].line == 3);
    ag_dataset_free(&ds);
}

/* ---- input the fuzz campaign found loading silently ---------------------------- */

static void test_conllu_require_labels(void) {
    /* sentence 2 (lines 4-5) has no label: fine for a parse, not for classification */
    const char *text = "# label = 1\n1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n\n"
                       "# text = b\n1\tb\t_\t_\t_\t_\t0\t_\t_\t_\n";
    ag_load_opts o = ag_load_opts_default();
    o.require_labels = 1;
    expect_load_error_opts("l1.conllu", text, AG_FORMAT_CONLLU, &o, 4,
                           "sentence 2: no '# label = N' line");
    expect_load_error_opts("l2.conllu", "1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n", AG_FORMAT_CONLLU, &o, 1,
                           "sentence 1: no '# label = N' line");

    /* without the option label -1 stays: parses and round trips need no label */
    const char *p = fixture("l3.conllu", text, strlen(text));
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.ex[0].label == 1 && ds.ex[1].label == -1);
    ag_dataset_free(&ds);

    /* skip mode drops the unlabelled sentence and names it */
    o.skip_bad_lines = 1;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 1 && ds.stats.skipped == 1 && ds.ex[0].label == 1);
    CHECK(contains(ds.stats.first_warning, "l3.conllu:4: sentence 2"), "%s", ds.stats.first_warning);
    ag_dataset_free(&ds);
}

static void test_conllu_cycles(void) {
#define TOK(id, form, head) id "\t" form "\t_\t_\t_\t_\t" head "\t_\t_\t_\n"
    /* sentence 2: 1 -> 2 -> 3 -> 2; token 2 (line 4) is on the cycle */
    expect_load_error("y1.conllu", TOK("1", "a", "0") "\n" TOK("1", "a", "2") TOK("2", "b", "3") TOK("3", "c", "2"),
                      AG_FORMAT_CONLLU, 4, "sentence 2: token 2: its heads form a cycle");
    /* no root at all */
    expect_load_error("y2.conllu", TOK("1", "a", "2") TOK("2", "b", "1"), AG_FORMAT_CONLLU, 1,
                      "sentence 1: token 1: its heads form a cycle");
    /* a root elsewhere in the sentence does not make up for a cycle */
    expect_load_error("y3.conllu", TOK("1", "a", "0") TOK("2", "b", "3") TOK("3", "c", "2"),
                      AG_FORMAT_CONLLU, 2, "sentence 1: token 2: its heads form a cycle");

    /* trees whose chains meet, forests and deep chains are fine */
    const char *p = FIXTURE("y4.conllu", TOK("1", "a", "3") TOK("2", "b", "3") TOK("3", "c", "0") "\n"
                                         TOK("1", "a", "0") TOK("2", "b", "0") "\n"
                                         TOK("1", "a", "2") TOK("2", "b", "3") TOK("3", "c", "4") TOK("4", "d", "0"));
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    const int32_t chain[] = {1, 2, 3, -1};
    CHECK(ds.n == 3 && memcmp(ds.ex[2].heads, chain, sizeof chain) == 0);
    ag_dataset_free(&ds);

    /* skip mode drops the sentence with the cycle and keeps the rest */
    p = FIXTURE("y5.conllu", TOK("1", "a", "0") "\n" TOK("1", "a", "2") TOK("2", "b", "1") "\n" TOK("1", "a", "0"));
    ag_load_opts o = ag_load_opts_default();
    o.skip_bad_lines = 1;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, &o, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.stats.skipped == 1 && ds.ex[1].line == 6);
    CHECK(contains(ds.stats.first_warning, "y5.conllu:3: sentence 2: token 1"), "%s", ds.stats.first_warning);
    ag_dataset_free(&ds);
#undef TOK
}

static void test_label_range(void) {
    ag_load_opts o = ag_load_opts_default();
    o.n_classes = 6; /* TREC */
    expect_load_error_opts("r1.all", "0 a\n5 b\n0 c\n99 d\n", AG_FORMAT_LABELED, &o, 4,
                           "label 99 is outside [0, 5] (the data set has 6 classes)");
    expect_load_error_opts("r2.all", "2 a\n6 b\n", AG_FORMAT_LABELED, &o, 2, "label 6 is outside [0, 5]");
    o.n_classes = 2;
    expect_load_error_opts("r3.conllu", "# label = 2\n1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n", AG_FORMAT_CONLLU, &o, 1,
                           "label 2 is outside [0, 1]");

    /* a file of no known data set still counts its classes from the labels */
    const char *p = FIXTURE("r4.all", "0 a\n99 d\n");
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.n_classes == 100);
    ag_dataset_free(&ds);

    /* CR and MPQA skip their label-only lines, but not this: labels 1 and 2
     * for 0 and 1 would drop a class with no more than a count of skipped lines */
    o.skip_bad_lines = 1;
    expect_load_error_opts("r5.all", "0 good\n1\n2 out of range\n1 fine\n", AG_FORMAT_LABELED, &o, 3,
                           "label 2 is outside [0, 1] (the data set has 2 classes)");
}

static void test_cr_line_endings(void) {
    /* old Mac files (CR alone ends each line) used to read as one giant line */
    expect_load_error("m1.all", "0 a b\r1 c d\r", AG_FORMAT_LABELED, 1, "carriage return inside a line, at column 6");
    expect_load_error("m2.txt", " the cat \r the dog \r", AG_FORMAT_LM, 1,
                      "(old Mac line endings? convert with dos2unix -c mac)");
    expect_load_error("m3.conllu", "1\ta\t_\t_\t_\t_\t0\t_\t_\t_\r\r", AG_FORMAT_CONLLU, 1, "carriage return");
    /* a stray CR in a CRLF file */
    expect_load_error("m4.all", "0 a\r\n1 b\r\n0 c\rd\r\n", AG_FORMAT_LABELED, 3, "carriage return inside a line");
    expect_vocab_error("m5_vocab.txt", "<pad>\r<unk>\ra\r", 1, "carriage return inside a line");

    /* skipping bad lines does not hide it: the file's lines are wrong, not one line */
    const char *p = FIXTURE("m6.all", "0 a\r1 b\r");
    ag_load_opts o = ag_load_opts_default();
    o.skip_bad_lines = 1;
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, &o, NULL, &ds, err, sizeof err) == AG_DATA_EFORMAT);
    CHECK(contains(err, "m6.all:1: carriage return"), "%s", err);

    /* CRLF, and a CR just before the end of the file, still end lines */
    p = FIXTURE("m7.all", "0 a\r\n1 b\r\n2 c\r");
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 3 && strcmp(ag_dataset_word(&ds, 2, 0, 0), "c") == 0);
    ag_dataset_free(&ds);
}

static void test_sick_decimal_scores(void) {
    const char *H = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n";
    /* strtod takes all of these; a SICK score is written in decimal */
    static const char *bad[] = {"0x3", "0X1p1", "inf", "infinity", "1e999", "3.5e", ".", "+", "3,5", "\v3", "4.5.1"};
    char buf[512], name[32], why[64];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(buf, sizeof buf, "%s1\ta b\tc d\t3\tNEUTRAL\n2\ta b\tc d\t%s\tNEUTRAL\n", H, bad[i]);
        snprintf(name, sizeof name, "d%zu.txt", i);
        snprintf(why, sizeof why, "score '%s' is not a decimal number", bad[i]);
        expect_load_error(name, buf, AG_FORMAT_SICK, 3, why);
    }
    /* sign, point and exponent are decimal (ag_dataset_save writes %g) */
    snprintf(buf, sizeof buf, "%s1\ta\tb\t+2.\tNEUTRAL\n2\ta\tb\t.5\tNEUTRAL\n3\ta\tb\t45E-1\tNEUTRAL\n", H);
    const char *p = fixture("d_ok.txt", buf, strlen(buf));
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_SICK, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 3 && ds.ex[0].score == 2.0f && ds.ex[1].score == 0.5f && ds.ex[2].score == 4.5f);
    ag_dataset_free(&ds);
}

static void test_dataset_path(void) {
    /* what lets the trainer's own checks (SICK scores) name the file, not the data set */
    const char *p = FIXTURE("path.all", "0 a\n");
    ag_dataset ds;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ag_dataset_path(&ds) && strcmp(ag_dataset_path(&ds), p) == 0);
    ag_dataset_free(&ds);
    CHECK(ag_dataset_path(&ds) == NULL, "freed");
    ag_synth_opts so = ag_synth_opts_default(AG_SYNTH_PAIR);
    so.n = 4;
    CHECK(ag_synth(AG_SYNTH_PAIR, &so, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ag_dataset_path(&ds) == NULL, "generated");
    ag_dataset_free(&ds);
}

/* ---- batches ------------------------------------------------------------------ */

static void test_bigram(void) {
    /* hand-computed: 1 + (w*1000003 + v) mod (n-1) */
    CHECK(ag_bigram_id(5, 7, 10) == 1);     /* 5000022 = 9 * 555558 */
    CHECK(ag_bigram_id(3, 4, 10) == 8);     /* 3000013 mod 9 = 7 */
    CHECK(ag_bigram_id(12, 13, 1000) == 62); /* 12000049 - 999*12012 = 61 */
    CHECK(ag_bigram_id(2000000000, 1999999999, 50000) == 10019, "needs 64-bit");
    CHECK(ag_bigram_id(9, 2, 2) == 1);
    CHECK(ag_bigram_id(9, 2, 1) == 0 && ag_bigram_id(9, 2, 0) == 0);
}

static void encode_all(ag_dataset *ds, ag_vocab **v) {
    CHECK(ag_vocab_build(ds, NULL, 0, NULL, v, err, sizeof err) == 0, "%s", err);
    CHECK(ag_dataset_encode(ds, *v, err, sizeof err) == 0, "%s", err);
}

static void test_batch_labeled(void) {
    const char *p = FIXTURE("b.all", "0 a b c\n1 a\n2 b c a b c\n1 c b\n");
    ag_dataset ds;
    ag_vocab *v;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0);
    encode_all(&ds, &v); /* ids: b 2 (4x), c 3 (4x), a 4 (3x) */
    CHECK(ag_vocab_find(v, "b", 1) == 2 && ag_vocab_find(v, "c", 1) == 3);
    ag_batch b;
    ag_batch_opts bo = {.heads = 1, .n_bigram = 10};
    CHECK(ag_batch_alloc(&b, &ds, 3, &bo, err, sizeof err) == 0, "%s", err);
    CHECK(b.max_width == 5 && b.targets == NULL && b.tokens_b == NULL && b.scores == NULL);
    int32_t *tok0 = b.tokens;
    int64_t idx[] = {0, 1, 3};
    CHECK(ag_batch_fill(&b, &ds, idx, 3, err, sizeof err) == 0, "%s", err);
    CHECK(b.rows == 3 && b.width == 3, "width = longest row");
    const int32_t tok[] = {4, 2, 3, 4, 0, 0, 3, 2, 0};
    const int32_t len[] = {3, 1, 2}, lab[] = {0, 1, 1};
    const int32_t heads[] = {1, 2, -1, -1, -2, -2, 1, -1, -2};
    const int32_t bi[] = {ag_bigram_id(4, 2, 10), ag_bigram_id(2, 3, 10), 0, 0, 0, 0,
                          ag_bigram_id(3, 2, 10), 0, 0};
    CHECK(memcmp(b.tokens, tok, sizeof tok) == 0);
    CHECK(memcmp(b.lengths, len, sizeof len) == 0 && memcmp(b.labels, lab, sizeof lab) == 0);
    CHECK(memcmp(b.heads, heads, sizeof heads) == 0, "chain heads, padding marked");
    CHECK(memcmp(b.bigrams, bi, sizeof bi) == 0);
    CHECK(b.index[2] == 3);
    /* refilling reuses the same buffers */
    int64_t idx2[] = {2};
    CHECK(ag_batch_fill(&b, &ds, idx2, 1, err, sizeof err) == 0 && b.width == 5);
    CHECK(b.tokens == tok0 && b.lengths[0] == 5);
    ag_batch_free(&b);

    /* fixed length L = 3 (dual-axial): truncation, bigrams stop at the cut */
    bo = (ag_batch_opts){.fixed_len = 3, .n_bigram = 10};
    CHECK(ag_batch_alloc(&b, &ds, 4, &bo, err, sizeof err) == 0);
    int64_t all[] = {0, 1, 2, 3};
    CHECK(ag_batch_fill(&b, &ds, all, 4, err, sizeof err) == 0);
    CHECK(b.width == 3 && b.lengths[1] == 1 && b.lengths[2] == 3);
    const int32_t row2[] = {2, 3, 4}; /* "b c a" of "b c a b c" */
    CHECK(memcmp(b.tokens + 6, row2, sizeof row2) == 0);
    CHECK(b.bigrams[6] == ag_bigram_id(2, 3, 10) && b.bigrams[7] == ag_bigram_id(3, 4, 10) &&
          b.bigrams[8] == 0, "t+1 < capped len only");
    CHECK(b.heads == NULL);
    ag_batch_free(&b);

    /* misuse is reported, not crashed on */
    bo = (ag_batch_opts){.max_width = 2};
    CHECK(ag_batch_alloc(&b, &ds, 2, &bo, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &ds, idx, 2, err, sizeof err) == AG_DATA_ELIMIT);
    CHECK(contains(err, "max_width"), "%s", err);
    CHECK(ag_batch_fill(&b, &ds, idx, 3, err, sizeof err) == AG_DATA_EINVAL, "too many rows");
    int64_t bad[] = {9};
    CHECK(ag_batch_fill(&b, &ds, bad, 1, err, sizeof err) == AG_DATA_EINVAL);
    ag_batch_free(&b);
    CHECK(ag_batch_alloc(&b, &ds, 0, NULL, err, sizeof err) == AG_DATA_EINVAL);
    ag_dataset raw;
    CHECK(ag_dataset_load(p, AG_FORMAT_LABELED, NULL, NULL, &raw, err, sizeof err) == 0);
    CHECK(ag_batch_alloc(&b, &raw, 2, NULL, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &raw, idx, 1, err, sizeof err) == AG_DATA_EINVAL, "not encoded");
    ag_batch_free(&b);
    ag_dataset_free(&raw);
    ag_vocab_free(v);
    ag_dataset_free(&ds);
}

static void test_batch_conllu_lm_pair(void) {
    /* CoNLL-U heads, and truncation turning a cut-off parent into a root */
    const char *p = fixture("b.conllu", conllu_text, sizeof conllu_text - 1);
    ag_dataset ds;
    ag_vocab *v;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, NULL, NULL, &ds, err, sizeof err) == 0);
    encode_all(&ds, &v);
    ag_batch b;
    CHECK(ag_batch_alloc(&b, &ds, 2, &(ag_batch_opts){.heads = 1}, err, sizeof err) == 0);
    int64_t idx[] = {0, 1};
    CHECK(ag_batch_fill(&b, &ds, idx, 2, err, sizeof err) == 0);
    const int32_t h[] = {2, 2, -1, 2, 1, -1, -2, -2};
    CHECK(b.width == 4 && memcmp(b.heads, h, sizeof h) == 0);
    CHECK(b.labels[0] == 2 && b.labels[1] == -1);
    ag_batch_free(&b);
    CHECK(ag_batch_alloc(&b, &ds, 2, &(ag_batch_opts){.heads = 1, .fixed_len = 2}, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &ds, idx, 2, err, sizeof err) == 0);
    const int32_t h2[] = {-1, -1, 1, -1};
    CHECK(memcmp(b.heads, h2, sizeof h2) == 0);
    ag_batch_free(&b);
    /* max_len (--max-len): the same cut, but a batch of short rows stays narrow */
    CHECK(ag_batch_alloc(&b, &ds, 2, &(ag_batch_opts){.heads = 1, .max_len = 2}, err, sizeof err) == 0);
    CHECK(b.max_width == 2);
    CHECK(ag_batch_fill(&b, &ds, idx, 2, err, sizeof err) == 0);
    CHECK(b.width == 2 && b.lengths[0] == 2 && b.lengths[1] == 2 && memcmp(b.heads, h2, sizeof h2) == 0);
    ag_batch_free(&b);
    CHECK(ag_batch_alloc(&b, &ds, 2, &(ag_batch_opts){.heads = 1, .max_len = 9}, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &ds, idx, 2, err, sizeof err) == 0);
    CHECK(b.width == 4 && memcmp(b.heads, h, sizeof h) == 0, "a cut longer than every row changes nothing");
    ag_batch_free(&b);
    CHECK(ag_batch_alloc(&b, &ds, 2, &(ag_batch_opts){.max_len = -1}, err, sizeof err) == AG_DATA_EINVAL);
    ag_vocab_free(v);
    ag_dataset_free(&ds);

    /* LM: x = s[0:len], y = s[1:len+1], len = min(|s|-1, max_len) */
    p = FIXTURE("blm.txt", "a b c\nb\nc a b c a b c a\n");
    ag_load_opts o = ag_load_opts_default();
    o.lm_max_len = 4;
    CHECK(ag_dataset_load(p, AG_FORMAT_LM, &o, NULL, &ds, err, sizeof err) == 0);
    encode_all(&ds, &v);
    int32_t A = ag_vocab_find(v, "a", 1), B = ag_vocab_find(v, "b", 1), C = ag_vocab_find(v, "c", 1);
    int32_t E = ag_vocab_find(v, "<eos>", 5);
    CHECK(ag_batch_alloc(&b, &ds, 3, NULL, err, sizeof err) == 0);
    CHECK(b.max_width == 4 && b.targets != NULL);
    int64_t all[] = {0, 1, 2};
    CHECK(ag_batch_fill(&b, &ds, all, 3, err, sizeof err) == 0);
    const int32_t x[] = {A, B, C, 0, B, 0, 0, 0, C, A, B, C};
    const int32_t y[] = {B, C, E, 0, E, 0, 0, 0, A, B, C, A};
    const int32_t l[] = {3, 1, 4};
    CHECK(b.width == 4 && memcmp(b.tokens, x, sizeof x) == 0 && memcmp(b.targets, y, sizeof y) == 0);
    CHECK(memcmp(b.lengths, l, sizeof l) == 0);
    ag_batch_free(&b);
    /* max_len cuts inputs and their targets alike */
    CHECK(ag_batch_alloc(&b, &ds, 3, &(ag_batch_opts){.max_len = 2}, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &ds, all, 3, err, sizeof err) == 0);
    const int32_t x2[] = {A, B, B, 0, C, A}, y2[] = {B, C, E, 0, A, B}, l2[] = {2, 1, 2};
    CHECK(b.width == 2 && memcmp(b.tokens, x2, sizeof x2) == 0 && memcmp(b.targets, y2, sizeof y2) == 0);
    CHECK(memcmp(b.lengths, l2, sizeof l2) == 0);
    ag_batch_free(&b);
    ag_vocab_free(v);
    ag_dataset_free(&ds);

    /* pairs */
    p = fixture("bsick.txt", sick_text, sizeof sick_text - 1);
    CHECK(ag_dataset_load(p, AG_FORMAT_SICK, NULL, NULL, &ds, err, sizeof err) == 0);
    encode_all(&ds, &v);
    CHECK(ag_batch_alloc(&b, &ds, 3, &(ag_batch_opts){.heads = 1, .n_bigram = 7}, err, sizeof err) == 0);
    CHECK(b.tokens_b && b.lengths_b && b.scores && b.heads_b && b.bigrams_b);
    CHECK(ag_batch_fill(&b, &ds, all, 3, err, sizeof err) == 0);
    CHECK(b.width == 6 && b.width_b == 4 && b.lengths_b[0] == 3 && b.lengths_b[1] == 4);
    CHECK(b.labels[1] == 2 && b.scores[0] == 4.5f);
    CHECK(b.tokens_b[0] == ag_vocab_find(v, "Kids", 4) && b.tokens_b[3] == 0, "row 0 padded");
    CHECK(b.heads_b[2] == -1 && b.heads_b[3] == AG_HEAD_PAD);
    CHECK(b.bigrams_b[0] == ag_bigram_id(b.tokens_b[0], b.tokens_b[1], 7) && b.bigrams_b[2] == 0);
    ag_batch_free(&b);
    /* max_len cuts both sentences of a pair */
    CHECK(ag_batch_alloc(&b, &ds, 3, &(ag_batch_opts){.max_len = 3}, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &ds, all, 3, err, sizeof err) == 0);
    CHECK(b.width == 3 && b.width_b == 3 && b.lengths[0] == 3 && b.lengths_b[0] == 3 && b.lengths_b[1] == 3);
    ag_batch_free(&b);
    ag_vocab_free(v);
    ag_dataset_free(&ds);
}

/* Every subset index appears in exactly one batch, batches are full but the last. */
static int covers_exactly(const ag_sampler *s, const int64_t *subset, int64_t n, int64_t ds_n) {
    int *seen = calloc((size_t)ds_n, sizeof *seen);
    int ok = 1;
    int64_t total = 0;
    for (int64_t i = 0; i < s->n_batches; i++) {
        int32_t rows;
        const int64_t *ix = ag_sampler_batch(s, i, &rows);
        for (int32_t r = 0; r < rows; r++) seen[ix[r]]++;
        total += rows;
    }
    for (int64_t k = 0; k < n; k++) ok &= seen[subset ? subset[k] : k] == 1;
    free(seen);
    return ok && total == n;
}

static void test_sampler(void) {
    ag_synth_opts so = ag_synth_opts_default(AG_SYNTH_ORDER);
    so.n = 203;
    ag_dataset ds;
    CHECK(ag_synth(AG_SYNTH_ORDER, &so, &ds, err, sizeof err) == 0, "%s", err);
    ag_sampler s;
    ag_sampler_opts o = {.batch_size = 10, .shuffle = 0};
    CHECK(ag_sampler_init(&s, &ds, NULL, 0, &o, err, sizeof err) == 0);
    CHECK(s.n_batches == 21 && covers_exactly(&s, NULL, 203, ds.n));
    int32_t rows;
    const int64_t *ix = ag_sampler_batch(&s, 20, &rows);
    CHECK(rows == 3 && ix[0] == 200, "no shuffle: file order");
    CHECK(ag_sampler_batch(&s, 21, &rows) == NULL && rows == 0);
    ag_sampler_free(&s);

    /* shuffle + bucketing: deterministic per rng state, sorted inside chunks */
    o = (ag_sampler_opts){.batch_size = 8, .shuffle = 1, .bucket_chunks = 4};
    CHECK(ag_sampler_init(&s, &ds, NULL, 0, &o, err, sizeof err) == 0);
    ag_data_rng r;
    ag_data_rng_seed(&r, 7);
    ag_data_rng saved = r;
    ag_sampler_epoch(&s, &r);
    CHECK(covers_exactly(&s, NULL, ds.n, ds.n));
    int sorted = 1;
    for (int64_t lo = 0; lo < s.n; lo += 32)
        for (int64_t i = lo + 1; i < lo + 32 && i < s.n; i++)
            sorted &= ds.ex[s.order[i - 1]].len <= ds.ex[s.order[i]].len;
    CHECK(sorted, "lengths ascend inside each chunk of k*batch");
    int64_t *first = malloc((size_t)s.n * sizeof *first), perm0 = s.batch_perm[0];
    memcpy(first, s.order, (size_t)s.n * sizeof *first);
    ag_sampler_epoch(&s, &r);
    CHECK(memcmp(first, s.order, (size_t)s.n * sizeof *first) != 0, "next epoch differs");
    ag_sampler_epoch(&s, &saved);
    CHECK(memcmp(first, s.order, (size_t)s.n * sizeof *first) == 0 && s.batch_perm[0] == perm0,
          "restoring the rng state restores the epoch");
    int spread = 0; /* batch order shuffled too */
    for (int64_t i = 0; i < s.n_batches; i++) spread += s.batch_perm[i] != i;
    CHECK(spread > 0);
    free(first);
    ag_sampler_free(&s);

    /* a subset with drop_last */
    int64_t sub[25];
    for (int i = 0; i < 25; i++) sub[i] = 200 - 8 * i;
    o = (ag_sampler_opts){.batch_size = 4, .shuffle = 1, .drop_last = 1};
    CHECK(ag_sampler_init(&s, &ds, sub, 25, &o, err, sizeof err) == 0);
    ag_data_rng_seed(&r, 1);
    ag_sampler_epoch(&s, &r);
    CHECK(s.n_batches == 6);
    int ok = 1;
    for (int64_t i = 0; i < s.n_batches; i++) {
        ix = ag_sampler_batch(&s, i, &rows);
        ok &= rows == 4;
        for (int32_t k = 0; k < rows; k++) ok &= ix[k] % 8 == 0 && ix[k] <= 200;
    }
    CHECK(ok);
    ag_sampler_free(&s);
    int64_t badsub[] = {5000};
    CHECK(ag_sampler_init(&s, &ds, badsub, 1, &o, err, sizeof err) == AG_DATA_EINVAL);
    o.batch_size = 0;
    CHECK(ag_sampler_init(&s, &ds, NULL, 0, &o, err, sizeof err) == AG_DATA_EINVAL);
    ag_dataset_free(&ds);
}

/* ---- RNG and splits ------------------------------------------------------------ */

static void test_rng(void) {
    ag_data_rng r;
    ag_data_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafull, "splitmix64(0) reference value");
    ag_data_rng_seed(&r, 42);
    /* from an independent Python implementation of xoshiro256** */
    CHECK(ag_data_rng_next(&r) == 0x15780b2e0c2ec716ull);
    CHECK(ag_data_rng_next(&r) == 0x6104d9866d113a7eull);
    CHECK(ag_data_rng_next(&r) == 0xae17533239e499a1ull);
    int ok = 1;
    for (int i = 0; i < 10000; i++) {
        ok &= ag_data_rng_below(&r, 7) < 7;
        double u = ag_data_rng_uniform(&r);
        ok &= u >= 0.0 && u < 1.0;
    }
    CHECK(ok && ag_data_rng_below(&r, 1) == 0 && ag_data_rng_below(&r, 0) == 0);
}

static void test_cv(void) {
    enum { N = 103 };
    int32_t fold[N], fold2[N];
    CHECK(ag_cv_assign(N, 10, 123, fold) == 0 && ag_cv_assign(N, 10, 123, fold2) == 0);
    CHECK(memcmp(fold, fold2, sizeof fold) == 0, "same seed, same folds");
    ag_cv_assign(N, 10, 124, fold2);
    CHECK(memcmp(fold, fold2, sizeof fold) != 0, "other seed, other folds");
    int size[10] = {0};
    for (int i = 0; i < N; i++) size[fold[i]]++;
    int balanced = 1;
    for (int k = 0; k < 10; k++) balanced &= size[k] == 10 || size[k] == 11;
    CHECK(balanced);
    int64_t tr[N], dv[N], te[N], ntr, ndv, nte;
    int in_test[N] = {0};
    for (int k = 0; k < 10; k++) {
        CHECK(ag_cv_split(fold, N, 10, k, (k + 1) % 10, tr, &ntr, dv, &ndv, te, &nte) == 0);
        int seen[N] = {0}, ok = ntr + ndv + nte == N && nte == size[k] && ndv == size[(k + 1) % 10];
        for (int64_t i = 0; i < ntr; i++) seen[tr[i]]++, ok &= fold[tr[i]] != k;
        for (int64_t i = 0; i < ndv; i++) seen[dv[i]]++;
        for (int64_t i = 0; i < nte; i++) seen[te[i]]++, in_test[te[i]]++, ok &= i == 0 || te[i] > te[i - 1];
        for (int i = 0; i < N; i++) ok &= seen[i] == 1;
        CHECK(ok, "fold %d partitions the data", k);
    }
    int once = 1;
    for (int i = 0; i < N; i++) once &= in_test[i] == 1;
    CHECK(once, "every example is tested exactly once over the 10 folds");
    CHECK(ag_cv_split(fold, N, 10, 3, -1, tr, &ntr, NULL, NULL, te, &nte) == 0 && ntr + nte == N);
    CHECK(ag_cv_split(fold, N, 10, 3, 3, tr, &ntr, dv, &ndv, te, &nte) == AG_DATA_EINVAL);
    CHECK(ag_cv_assign(5, 10, 1, fold) == AG_DATA_EINVAL);

    /* holdout dev split */
    int64_t idx[50], a[50], b[50], na, nb, a2[50], b2[50], na2, nb2;
    for (int i = 0; i < 50; i++) idx[i] = 2 * i;
    CHECK(ag_split_holdout(idx, 50, 0.1, 9, a, &na, b, &nb) == 0 && na == 45 && nb == 5);
    CHECK(ag_split_holdout(idx, 50, 0.1, 9, a2, &na2, b2, &nb2) == 0);
    CHECK(memcmp(a, a2, sizeof(int64_t) * 45) == 0 && memcmp(b, b2, sizeof(int64_t) * 5) == 0);
    int seen[100] = {0}, ok = 1;
    for (int i = 0; i < na; i++) seen[a[i]]++, ok &= i == 0 || a[i] > a[i - 1];
    for (int i = 0; i < nb; i++) seen[b[i]]++;
    for (int i = 0; i < 100; i++) ok &= seen[i] == (i % 2 == 0);
    CHECK(ok, "holdout partitions the given indices");
    CHECK(ag_split_holdout(NULL, 10, 1.5, 9, a, &na, b, &nb) == AG_DATA_EINVAL);
}

/* ---- synthetic tasks ------------------------------------------------------------- */

static int same_words(const ag_dataset *x, const ag_dataset *y) {
    if (x->n != y->n || x->format != y->format) return 0;
    for (int64_t i = 0; i < x->n; i++) {
        const ag_example *a = &x->ex[i], *b = &y->ex[i];
        if (a->full_len != b->full_len || a->len != b->len || a->len_b != b->len_b ||
            a->label != b->label || a->score != b->score)
            return 0;
        for (int32_t t = 0; t < a->full_len; t++)
            if (strcmp(ag_dataset_word(x, i, 0, t), ag_dataset_word(y, i, 0, t))) return 0;
        for (int32_t t = 0; t < a->len_b; t++)
            if (strcmp(ag_dataset_word(x, i, 1, t), ag_dataset_word(y, i, 1, t))) return 0;
        if (a->heads && memcmp(a->heads, b->heads, sizeof(int32_t) * (size_t)a->len)) return 0;
    }
    return 1;
}

static void check_deterministic(ag_synth_task task, const ag_synth_opts *o) {
    ag_dataset a, b, c;
    ag_synth_opts o2 = *o;
    o2.seed = o->seed + 1;
    CHECK(ag_synth(task, o, &a, err, sizeof err) == 0, "%s", err);
    CHECK(ag_synth(task, o, &b, err, sizeof err) == 0, "%s", err);
    CHECK(ag_synth(task, &o2, &c, err, sizeof err) == 0, "%s", err);
    CHECK(same_words(&a, &b), "task %d: same seed, same data", (int)task);
    CHECK(!same_words(&a, &c), "task %d: other seed, other data", (int)task);
    /* save in the loader's format and load back */
    char name[32];
    snprintf(name, sizeof name, "synth%d.txt", (int)task);
    const char *p = tmp_path(name);
    CHECK(ag_dataset_save(&a, p, err, sizeof err) == 0, "%s", err);
    ag_dataset l;
    ag_load_opts lo = ag_load_opts_default();
    lo.lm_max_len = a.lm_max_len ? a.lm_max_len : 35;
    CHECK(ag_dataset_load(p, a.format, &lo, NULL, &l, err, sizeof err) == 0, "%s", err);
    CHECK(same_words(&a, &l), "task %d: save/load round trip", (int)task);
    ag_dataset_free(&a);
    ag_dataset_free(&b);
    ag_dataset_free(&c);
    ag_dataset_free(&l);
}

static void test_synth_order(void) {
    ag_synth_opts o = ag_synth_opts_default(AG_SYNTH_ORDER);
    o.n = 2000;
    check_deterministic(AG_SYNTH_ORDER, &o);
    ag_dataset ds;
    CHECK(ag_synth(AG_SYNTH_ORDER, &o, &ds, err, sizeof err) == 0);
    CHECK(ds.format == AG_FORMAT_LABELED && ds.n_classes == 4 && ds.n == 2000);
    int ok = 1, count[4] = {0};
    int64_t len_sum[4] = {0};
    for (int64_t i = 0; i < ds.n; i++) {
        const ag_example *e = &ds.ex[i];
        int pa = -1, pb = -1, na = 0, nb = 0;
        for (int32_t t = 0; t < e->len; t++) {
            const char *w = ag_dataset_word(&ds, i, 0, t);
            if (!strcmp(w, "A")) pa = t, na++;
            else if (!strcmp(w, "B")) pb = t, nb++;
            else ok &= w[0] == 'w';
        }
        int d = pa > pb ? pa - pb : pb - pa;
        int label = (pb < pa) + 2 * (d > o.near);
        ok &= na == 1 && nb == 1 && label == e->label && e->len >= 4 && e->len <= 20;
        count[e->label]++;
        len_sum[e->label] += e->len;
    }
    CHECK(ok, "labels follow the order/distance of A and B");
    for (int k = 0; k < 4; k++) {
        CHECK(count[k] > 400 && count[k] < 600, "class %d has %d", k, count[k]);
        CHECK_NEAR((double)len_sum[k] / count[k], 12.0, 0.8, 0); /* length says nothing */
    }
    ag_dataset_free(&ds);
    o.min_len = 3;
    CHECK(ag_synth(AG_SYNTH_ORDER, &o, &ds, err, sizeof err) == AG_DATA_EINVAL);
    CHECK(contains(err, "min_len"), "%s", err);
}

static void test_synth_lookup(void) {
    ag_synth_opts o = ag_synth_opts_default(AG_SYNTH_LOOKUP);
    o.n = 3000;
    check_deterministic(AG_SYNTH_LOOKUP, &o);
    ag_dataset tr, te;
    o.split = AG_SYNTH_SPLIT_TRAIN;
    CHECK(ag_synth(AG_SYNTH_LOOKUP, &o, &tr, err, sizeof err) == 0, "%s", err);
    o.split = AG_SYNTH_SPLIT_TEST;
    o.seed = 99;
    CHECK(ag_synth(AG_SYNTH_LOOKUP, &o, &te, err, sizeof err) == 0, "%s", err);
    CHECK(tr.format == AG_FORMAT_LM && tr.lm_max_len == 35);
    /* tables are functions: collect t(x) from every step of every sentence */
    int table[8][8], ok = 1;
    memset(table, -1, sizeof table);
    int pair_in_train[8][8] = {{0}}, pair_in_test[8][8] = {{0}};
    for (int which = 0; which < 2; which++) {
        const ag_dataset *ds = which ? &te : &tr;
        for (int64_t i = 0; i < ds->n; i++) {
            const ag_example *e = &ds->ex[i];
            int k = (e->full_len - 3) / 2;
            ok &= e->full_len == 2 * k + 3 && k >= (which ? 2 : 1) && k <= 4;
            ok &= !strcmp(ag_dataset_word(ds, i, 0, k + 1), ":") &&
                  !strcmp(ag_dataset_word(ds, i, 0, 2 * k + 2), "<eos>");
            int v = (int)strtol(ag_dataset_word(ds, i, 0, 0), NULL, 2);
            for (int j = 0; j < k; j++) {
                int t = atoi(ag_dataset_word(ds, i, 0, 1 + j) + 1);
                int out = (int)strtol(ag_dataset_word(ds, i, 0, k + 2 + j), NULL, 2);
                ok &= table[t][v] == -1 || table[t][v] == out;
                table[t][v] = out;
                v = out;
            }
            if (k >= 2) {
                int a1 = atoi(ag_dataset_word(ds, i, 0, 1) + 1), a2 = atoi(ag_dataset_word(ds, i, 0, 2) + 1);
                (which ? pair_in_test : pair_in_train)[a1][a2] = 1;
            }
        }
    }
    CHECK(ok, "answers are consistent compositions of fixed tables");
    int overlap = 0, test_pairs = 0;
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++) overlap += pair_in_train[a][b] && pair_in_test[a][b], test_pairs += pair_in_test[a][b];
    CHECK(overlap == 0 && test_pairs == 8, "held-out compositions: %d shared, %d in test", overlap, test_pairs);
    ag_dataset_free(&tr);
    ag_dataset_free(&te);
    o.max_steps = 1;
    CHECK(ag_synth(AG_SYNTH_LOOKUP, &o, &te, err, sizeof err) == AG_DATA_EINVAL);
}

static void test_synth_pair(void) {
    ag_synth_opts o = ag_synth_opts_default(AG_SYNTH_PAIR);
    o.n = 1500;
    check_deterministic(AG_SYNTH_PAIR, &o);
    ag_dataset ds;
    CHECK(ag_synth(AG_SYNTH_PAIR, &o, &ds, err, sizeof err) == 0);
    CHECK(ds.format == AG_FORMAT_SICK && ds.n_classes == 3);
    int ok = 1, count[3] = {0};
    for (int64_t i = 0; i < ds.n; i++) {
        const ag_example *e = &ds.ex[i];
        ok &= e->score >= 1.0f && e->score <= 5.0f && e->len_b >= 2 && e->len_b <= 5;
        count[e->label]++;
        if (e->label == 0) continue;
        int found = 0; /* b (or reversed b) must be a contiguous span of a */
        for (int32_t s = 0; s + e->len_b <= e->len && !found; s++) {
            int match = 1;
            for (int32_t j = 0; j < e->len_b; j++) {
                int32_t src = e->label == 1 ? s + j : s + e->len_b - 1 - j;
                match &= !strcmp(ag_dataset_word(&ds, i, 0, src), ag_dataset_word(&ds, i, 1, j));
            }
            found = match;
        }
        ok &= found && e->score == 5.0f;
        ok &= strcmp(ag_dataset_word(&ds, i, 1, 0), ag_dataset_word(&ds, i, 1, e->len_b - 1)) != 0;
    }
    CHECK(ok, "entailment = span, contradiction = reversed span");
    CHECK(count[0] > 400 && count[1] > 400 && count[2] > 400);
    ag_dataset_free(&ds);
}

static void test_conllu_roundtrip(void) {
    const char *p = fixture("rt.conllu", conllu_text, sizeof conllu_text - 1);
    ag_dataset a, b;
    CHECK(ag_dataset_load(p, AG_FORMAT_CONLLU, NULL, NULL, &a, err, sizeof err) == 0);
    const char *q = tmp_path("rt2.conllu");
    CHECK(ag_dataset_save(&a, q, err, sizeof err) == 0);
    CHECK(ag_dataset_load(q, AG_FORMAT_CONLLU, NULL, NULL, &b, err, sizeof err) == 0, "%s", err);
    CHECK(same_words(&a, &b), "CoNLL-U save/load round trip");
    ag_dataset_free(&a);
    ag_dataset_free(&b);
}

/* ---- garbage in: never a crash, never silent acceptance of junk ------------------- */

static void test_garbage(void) {
    /* random files built from a small alphabet that hits every parser path */
    static const char alphabet[] = "0123 \t\n\r#-._abAB\x80\xff\x01";
    ag_data_rng r;
    ag_data_rng_seed(&r, 2024);
    char buf[400];
    int sane = 1;
    const char *names[2] = {tmp_path("junk_a.txt"), tmp_path("junk_b.txt")};
    for (int iter = 0; iter < 400; iter++) {
        size_t n = (size_t)ag_data_rng_below(&r, sizeof buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = alphabet[ag_data_rng_below(&r, sizeof alphabet)]; /* includes the NUL */
        const char *p = names[iter % 2];
        FILE *fp = fopen(p, "wb");
        fwrite(buf, 1, n, fp);
        fclose(fp);
        for (int f = AG_FORMAT_LABELED; f <= AG_FORMAT_LM; f++) {
            ag_dataset ds;
            err[0] = 0;
            int rc = ag_dataset_load(p, (ag_format)f, NULL, NULL, &ds, err, sizeof err);
            if (rc == 0) { /* accepted: then it really is well formed */
                for (int64_t i = 0; i < ds.n; i++) {
                    sane &= ds.ex[i].len >= 1;
                    for (int32_t t = 0; t < ds.ex[i].full_len; t++) {
                        const char *w = ag_dataset_word(&ds, i, 0, t);
                        for (; *w; w++) sane &= (unsigned char)*w > 0x20 && *w != 0x7f;
                    }
                }
            } else {
                sane &= rc < 0 && err[0] != 0 && contains(err, p);
            }
            ag_dataset_free(&ds);
        }
        ag_vocab *v = NULL;
        int rc = ag_vocab_load(p, &v, err, sizeof err);
        sane &= (rc == 0) == (v != NULL);
        ag_vocab_free(v);
    }
    CHECK(sane, "random bytes: clean errors naming the file, or well-formed data");
}

/* ---- the real benchmark files (only with AG_DATA_DIR) ------------------------------ */

static int load_real(const char *dir, const char *rel, ag_format fmt, int skip, ag_dataset *ds) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    ag_load_opts o = ag_load_opts_default();
    o.skip_bad_lines = skip;
    int rc = ag_dataset_load(p, fmt, &o, NULL, ds, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    return rc == 0;
}

static void label_counts(const ag_dataset *ds, int64_t *c, int k) {
    for (int i = 0; i < k; i++) c[i] = 0;
    for (int64_t i = 0; i < ds->n; i++)
        if (ds->ex[i].label >= 0 && ds->ex[i].label < k) c[ds->ex[i].label]++;
}

/* One policy for text: bytes, never decoded; control bytes refused; lines
 * that are not UTF-8 kept and counted, the first one named. */
static void test_not_utf8(void) {
    static const struct { ag_format fmt; const char *text; int64_t lines; const char *first; } cases[] = {
        {AG_FORMAT_LABELED, "0 caf\xe9 ok\n1 fine words\n1 \xc0\xaf overlong\n", 2, ":1: byte 0xe9 at column 6"},
        {AG_FORMAT_LM, "fine\n\xff\xfe\n", 1, ":2: byte 0xff at column 1"},
        {AG_FORMAT_CONLLU, "1\tok\t_\t_\t_\t_\t0\t_\t_\t_\n\n1\t\xed\xa0\x80\t_\t_\t_\t_\t0\t_\t_\t_\n", 1,
         ":3: byte 0xed at column 3"}, /* a surrogate */
        {AG_FORMAT_SICK, "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
                         "1\tA caf\xe9\tB\t3\tNEUTRAL\n", 1, ":2: byte 0xe9 at column 8"},
        {AG_FORMAT_LABELED, "0 caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n", 0, ""}, /* UTF-8: none */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = fixture("utf8.txt", cases[i].text, strlen(cases[i].text));
        ag_dataset ds;
        CHECK(ag_dataset_load(p, cases[i].fmt, NULL, NULL, &ds, err, sizeof err) == 0, "case %zu: %s", i, err);
        CHECK(ds.stats.not_utf8 == cases[i].lines, "case %zu: %lld lines", i, (long long)ds.stats.not_utf8);
        CHECK(contains(ds.stats.first_not_utf8, cases[i].first) && (cases[i].lines || !ds.stats.first_not_utf8[0]),
              "case %zu: '%s'", i, ds.stats.first_not_utf8);
        ag_dataset_free(&ds);
    }
    CHECK(ag_utf8_error_at("ok \xe2\x82", 5) == 3 && ag_utf8_error_at("\xe2\x82\xac", 3) == -1);
    ag_dataset ds;
    ag_tree_opts to = {0};
    const char *tree = "(2 (2 caf\xe9) (2 x))\n";
    CHECK(ag_trees_load_mem("t", tree, strlen(tree), &to, &ds, err, sizeof err) == 0 &&
          ds.stats.not_utf8 == 1 && contains(ds.stats.first_not_utf8, "t:1: byte 0xe9 at column 10"), "%s",
          ds.stats.first_not_utf8);
    ag_dataset_free(&ds);
}

/* ag_load_opts.max_words / ag_tree_opts.max_words: a sentence of more words
 * is refused naming its line (skip_bad_lines or not), before its words are
 * kept; LM text is not limited (its windows are); 0 is no limit. */
static void test_max_words(void) {
    static const struct { ag_format fmt; const char *text; const char *want; } cases[] = {
        {AG_FORMAT_LABELED, "0 a b c d\n1 a b c d e\n", "w.txt:2: a sentence of 5 words, more than the limit of 4"},
        {AG_FORMAT_SICK, "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
                         "1\ta b\tc d\t3\tNEUTRAL\n2\ta b c\td e\t3\tNEUTRAL\n",
         "w.txt:3: a sentence of 5 words, more than the limit of 4"}, /* a pair's two together */
        {AG_FORMAT_CONLLU, "1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n\n# sent_id = x\n1\ta\t_\t_\t_\t_\t0\t_\t_\t_\n"
                           "2\ta\t_\t_\t_\t_\t1\t_\t_\t_\n3\ta\t_\t_\t_\t_\t1\t_\t_\t_\n4\ta\t_\t_\t_\t_\t1\t_\t_\t_\n"
                           "5\ta\t_\t_\t_\t_\t1\t_\t_\t_\n\n",
         "w.txt:3: a sentence of 5 words, more than the limit of 4"}, /* its first line */
        {AG_FORMAT_LM, "a b c d e f g\n", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = fixture("w.txt", cases[i].text, strlen(cases[i].text));
        for (int skip = 0; skip < 2; skip++) {
            ag_load_opts o = ag_load_opts_default();
            o.max_words = 4;
            o.skip_bad_lines = skip;
            ag_dataset ds;
            err[0] = 0;
            int rc = ag_dataset_load(p, cases[i].fmt, &o, NULL, &ds, err, sizeof err);
            if (cases[i].want)
                CHECK(rc == AG_DATA_ELIMIT && contains(err, cases[i].want), "case %zu: %d '%s'", i, rc, err);
            else
                CHECK(rc == 0 && ds.n == 1, "case %zu: %s", i, err);
            if (rc == 0) ag_dataset_free(&ds);
        }
        ag_load_opts o = ag_load_opts_default(); /* max_words 0: any length */
        ag_dataset ds;
        CHECK(ag_dataset_load(p, cases[i].fmt, &o, NULL, &ds, err, sizeof err) == 0, "case %zu: %s", i, err);
        ag_dataset_free(&ds);
    }
    /* a tree's words, before its phrases are made */
    const char *trees = "(2 (2 a) (2 b))\n(3 (3 (3 (3 a) (2 b)) (2 c)) (2 (2 d) (2 e)))\n";
    ag_tree_opts to = {.phrases = 1, .max_words = 4};
    ag_dataset ds;
    CHECK(ag_trees_load_mem("t", trees, strlen(trees), &to, &ds, err, sizeof err) == AG_DATA_ELIMIT &&
          contains(err, "t:2: a sentence of 5 words, more than the limit of 4"), "%s", err);
    to.max_words = 0;
    CHECK(ag_trees_load_mem("t", trees, strlen(trees), &to, &ds, err, sizeof err) == 0, "%s", err);
    ag_dataset_free(&ds);
}

static void test_real_data(void) {
    const char *dir = getenv("AG_DATA_DIR");
    struct stat st;
    if (!dir || !*dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("test_data: real-data checks skipped (AG_DATA_DIR unset or missing)\n");
        return;
    }
    ag_dataset tr, te;
    int64_t c[6];
    if (load_real(dir, "trec/TREC.train.all", AG_FORMAT_LABELED, 0, &tr) &&
        load_real(dir, "trec/TREC.test.all", AG_FORMAT_LABELED, 0, &te)) {
        CHECK(tr.n == 5452 && te.n == 500 && tr.n_classes == 6);
        label_counts(&tr, c, 6);
        CHECK(c[0] == 1162 && c[1] == 1250 && c[2] == 86 && c[3] == 1223 && c[4] == 835 && c[5] == 896);
        label_counts(&te, c, 6);
        CHECK(c[0] == 138 && c[1] == 94 && c[2] == 9 && c[3] == 65 && c[4] == 81 && c[5] == 113);
        CHECK(strcmp(ag_dataset_word(&tr, 65, 0, 8), "sister\xF0" "city") == 0, "line 66 Latin-1");
        ag_dataset_free(&tr);
        ag_dataset_free(&te);
    }
    if (load_real(dir, "sst/stsa.fine.train", AG_FORMAT_LABELED, 0, &tr)) {
        label_counts(&tr, c, 5);
        CHECK(tr.n == 8544 && c[0] == 1092 && c[1] == 2218 && c[2] == 1624 && c[3] == 2322 && c[4] == 1288);
        ag_dataset_free(&tr);
    }
    static const struct { const char *rel; int64_t n; } sizes[] = {
        {"sst/stsa.fine.dev", 1101},   {"sst/stsa.fine.test", 2210},  {"sst/stsa.binary.train", 6920},
        {"sst/stsa.binary.dev", 872},  {"sst/stsa.binary.test", 1821}, {"mr/rt-polarity.all", 10662},
        {"subj/subj.all", 10000}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (load_real(dir, sizes[i].rel, AG_FORMAT_LABELED, 0, &tr)) {
            CHECK(tr.n == sizes[i].n, "%s: %lld", sizes[i].rel, (long long)tr.n);
            ag_dataset_free(&tr);
        }
    /* CR and MPQA hold label-only lines: strict fails, skipping counts them */
    const char *cvsets[] = {"cr", "mpqa"};
    const int64_t cvn[] = {3775, 10606};
    for (int i = 0; i < 2; i++) {
        const ag_benchmark *b = ag_benchmark_find(cvsets[i]);
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, b->train);
        CHECK(ag_dataset_load(p, b->format, NULL, NULL, &tr, err, sizeof err) == AG_DATA_EFORMAT);
        if (load_real(dir, b->train, b->format, 1, &tr)) {
            CHECK(tr.stats.skipped == b->label_only_lines && tr.n == cvn[i] - b->label_only_lines);
            ag_dataset_free(&tr);
        }
    }
    const char *sick[] = {"sick/SICK_train.txt", "sick/SICK_trial.txt", "sick/SICK_test_annotated.txt"};
    const int64_t sick_n[3][4] = {{4500, 2536, 1299, 665}, {500, 282, 144, 74}, {4927, 2793, 1414, 720}};
    for (int i = 0; i < 3; i++)
        if (load_real(dir, sick[i], AG_FORMAT_SICK, 0, &tr)) {
            label_counts(&tr, c, 3);
            CHECK(tr.n == sick_n[i][0] && c[0] == sick_n[i][1] && c[1] == sick_n[i][2] && c[2] == sick_n[i][3],
                  "%s", sick[i]);
            int in_range = 1;
            for (int64_t k = 0; k < tr.n; k++) in_range &= tr.ex[k].score >= 1.0f && tr.ex[k].score <= 5.0f;
            CHECK(in_range);
            ag_dataset_free(&tr);
        }
    if (load_real(dir, "ptb/ptb.train.txt", AG_FORMAT_LM, 0, &tr) &&
        load_real(dir, "ptb/ptb.valid.txt", AG_FORMAT_LM, 0, &te)) {
        CHECK(tr.n == 42068 && tr.stats.tokens == 887521 && tr.stats.lines == 42068);
        CHECK(te.n == 3370 && te.stats.tokens == 70390);
        ag_vocab *v = NULL;
        CHECK(ag_vocab_build(&tr, NULL, 0, NULL, &v, err, sizeof err) == 0);
        CHECK(v && ag_vocab_size(v) == 10001, "PTB: 10000 + <pad>, got %d", v ? ag_vocab_size(v) : 0);
        CHECK(ag_dataset_encode(&te, v, err, sizeof err) == 0 && te.stats.oov == 0);
        int32_t ml;
        ag_dataset_max_len(&tr, &ml, NULL);
        CHECK(ml == 36, "clipped to 35 + 1");
        ag_vocab_free(v);
        ag_dataset_free(&tr);
        ag_dataset_free(&te);
    }
    if (load_real(dir, "wikitext2/train.txt", AG_FORMAT_LM, 0, &tr)) {
        CHECK(tr.stats.lines == 36718 && tr.stats.blank == 12951 && tr.n == 36718 - 12951);
        CHECK(tr.stats.tokens == 2051910);
        ag_vocab *v = NULL;
        CHECK(ag_vocab_build(&tr, NULL, 0, NULL, &v, err, sizeof err) == 0);
        CHECK(v && ag_vocab_size(v) == 33279, "WikiText-2: 33278 + <pad>");
        ag_vocab_free(v);
        ag_dataset_free(&tr);
    }
    /* As its paper trains it, a sentence an example: the counts of the same
     * rule in a few lines of Python over the files (docs/data.md). */
    static const struct { const char *file; int64_t n, tokens, clipped; } wiki[] = {
        {"wikitext2/train.txt", 83533, 2051910, 15202},
        {"wikitext2/valid.txt", 8734, 213886, 1568},
        {"wikitext2/test.txt", 10112, 241211, 1694},
    };
    for (int i = 0; i < 3; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, wiki[i].file);
        ag_load_opts o = ag_load_opts_default();
        o.lm_sentences = 1;
        CHECK(ag_dataset_load(p, AG_FORMAT_LM, &o, NULL, &tr, err, sizeof err) == 0, "%s", err);
        CHECK(tr.n == wiki[i].n && tr.stats.tokens == wiki[i].tokens && tr.stats.clipped == wiki[i].clipped,
              "%s: %lld sentences, %lld tokens, %lld clipped", wiki[i].file, (long long)tr.n,
              (long long)tr.stats.tokens, (long long)tr.stats.clipped);
        ag_dataset_free(&tr);
    }
    if (load_real(dir, "ptb/ptb.test.txt", AG_FORMAT_LM, 0, &te)) {
        CHECK(te.n == 3761 && te.stats.tokens == 78669);
        ag_dataset_free(&te);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_tokenize();
    test_vocab_build();
    test_vocab_files();
    test_vocab_many();
    test_labeled();
    test_labeled_errors();
    test_sick();
    test_conllu();
    test_conllu_roundtrip();
    test_lm();
    test_lm_sentences();
    test_conllu_require_labels();
    test_conllu_cycles();
    test_label_range();
    test_cr_line_endings();
    test_sick_decimal_scores();
    test_dataset_path();
    test_bigram();
    test_batch_labeled();
    test_batch_conllu_lm_pair();
    test_sampler();
    test_rng();
    test_cv();
    test_synth_order();
    test_synth_lookup();
    test_synth_pair();
    test_garbage();
    test_not_utf8();
    test_max_words();
    test_real_data();
    for (int i = 0; i < npaths; i++) remove(paths[i]);
    rmdir(tmpdir);
    return check_summary("test_data");
}
