/* test_trees.c - SST's bracketed trees (ag_trees_load) and dependency
 * parses matched to data files (ag_dataset_attach_parses): good files, each
 * kind of bad one, parses that do not fit their data.  With AG_DATA_DIR,
 * the real SST trees and every data set's conllu/ folder too. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attngrad/data.h"
#include "check.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length"

static char tmpdir[] = "/tmp/ag_test_trees_XXXXXX";
static char paths[64][512];
static int npaths;
static char err[AG_ERR_LEN];

static const char *fixture(const char *name, const char *text) {
    if (npaths == 64) abort();
    char *p = paths[npaths++];
    snprintf(p, sizeof paths[0], "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "wb");
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return p;
}

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* The words of example i joined by spaces. */
static const char *words(const ag_dataset *ds, int64_t i, int second) {
    static char buf[512];
    size_t k = 0;
    int32_t n = second ? ds->ex[i].len_b : ds->ex[i].len;
    for (int32_t t = 0; t < n && k < sizeof buf; t++)
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", t ? " " : "", ag_dataset_word(ds, i, second, t));
    return buf;
}

static int heads_are(const int32_t *h, const int32_t *want, int n) { return h && !memcmp(h, want, (size_t)n * sizeof *h); }

/* ---- trees ------------------------------------------------------------------ */

static const char two_trees[] =
    "(3 (2 (2 The) (2 Rock)) (4 (3 (2 is) (4 great)) (2 .)))\n"
    "\n"
    "(1 (2 -LRB-) (1 (0 bad\\/worse) (2 -RRB-)))\n";

static void test_trees_sentences(void) {
    ag_dataset ds;
    ag_tree_opts o = {.lowercase = 1};
    CHECK(ag_trees_load(fixture("t.txt", two_trees), &o, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 2 && ds.format == AG_FORMAT_LABELED && ds.n_classes == 4);
    CHECK(!strcmp(words(&ds, 0, 0), "the rock is great ."), "%s", words(&ds, 0, 0));
    CHECK(!strcmp(words(&ds, 1, 0), "-lrb- bad\\/worse -rrb-"), "escapes kept as the stsa files keep them: %s",
          words(&ds, 1, 0));
    CHECK(ds.ex[0].label == 3 && ds.ex[1].label == 1 && ds.ex[0].line == 1 && ds.ex[1].line == 3);
    CHECK(ds.ex[0].heads == NULL && ds.stats.blank == 1);
    ag_dataset_free(&ds);

    o.lowercase = 0; /* cased, as the trees are */
    CHECK(ag_trees_load(fixture("t.txt", two_trees), &o, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(words(&ds, 0, 0), "The Rock is great ."));
    ag_dataset_free(&ds);
}

static void test_trees_phrases(void) {
    ag_dataset ds;
    ag_tree_opts o = {.lowercase = 1, .phrases = 1};
    CHECK(ag_trees_load(fixture("t.txt", two_trees), &o, &ds, err, sizeof err) == 0, "%s", err);
    /* 9 nodes in the first tree, 5 in the second: the sentence first, then
     * its phrases in the order they close (leaves included) */
    CHECK(ds.n == 14, "%lld", (long long)ds.n);
    static const char *want[] = {"the rock is great .", "the", "rock", "the rock", "is", "great", "is great",
                                 ".", "is great .", "-lrb- bad\\/worse -rrb-", "-lrb-", "bad\\/worse", "-rrb-",
                                 "bad\\/worse -rrb-"};
    static const int32_t labels[] = {3, 2, 2, 2, 2, 4, 3, 2, 4, 1, 2, 0, 2, 1};
    for (int i = 0; i < 14; i++) {
        CHECK(!strcmp(words(&ds, i, 0), want[i]), "phrase %d: '%s', want '%s'", i, words(&ds, i, 0), want[i]);
        CHECK(ds.ex[i].label == labels[i], "phrase %d: label %d", i, ds.ex[i].label);
        CHECK(ds.ex[i].line == (i < 9 ? 1 : 3));
    }
    ag_dataset_free(&ds);

    /* SST-2: neutral nodes dropped, 0-1 -> 0, 3-4 -> 1 */
    o.binary = 1;
    CHECK(ag_trees_load(fixture("t.txt", two_trees), &o, &ds, err, sizeof err) == 0, "%s", err);
    static const char *want2[] = {"the rock is great .", "great", "is great", "is great .", "-lrb- bad\\/worse -rrb-",
                                  "bad\\/worse", "bad\\/worse -rrb-"};
    static const int32_t labels2[] = {1, 1, 1, 1, 0, 0, 0};
    CHECK(ds.n == 7 && ds.n_classes == 2, "%lld", (long long)ds.n);
    for (int i = 0; i < 7 && i < ds.n; i++)
        CHECK(!strcmp(words(&ds, i, 0), want2[i]) && ds.ex[i].label == labels2[i], "binary phrase %d: '%s' %d", i,
              words(&ds, i, 0), ds.ex[i].label);
    ag_dataset_free(&ds);

    /* SST-2 sentences: a neutral sentence is left out, as stsa.binary does */
    o.phrases = 0;
    CHECK(ag_trees_load(fixture("t2.txt", "(2 (2 so) (2 so))\n(0 (0 awful) (2 .))\n"), &o, &ds, err, sizeof err) == 0);
    CHECK(ds.n == 1 && ds.ex[0].label == 0 && ds.ex[0].line == 2 && ds.n_classes == 2);
    ag_dataset_free(&ds);
}

static void expect_tree_error(const char *text, int line, int col, const char *why) {
    ag_dataset ds;
    ag_tree_opts o = {.phrases = 1};
    const char *p = fixture("bad.txt", text);
    err[0] = 0;
    int rc = ag_trees_load(p, &o, &ds, err, sizeof err);
    char where[600];
    snprintf(where, sizeof where, "%s:%d: column %d: ", p, line, col);
    CHECK(rc == AG_DATA_EFORMAT, "'%s': rc %d", text, rc);
    CHECK(contains(err, where) && contains(err, why), "'%s': message '%s', want '%s' and '%s'", text, err, where, why);
    CHECK(ds.n == 0 && ds.store == NULL);
}

static void test_trees_errors(void) {
    expect_tree_error("(3 (2 a) (2 b))\n(3 (2 a) (2 b)\n", 2, 15, "the line ends inside the tree");
    expect_tree_error("(3 (2 a) (2 b)))\n", 1, 16, "text after the tree's closing ')'");
    expect_tree_error("(5 (2 a) (2 b))\n", 1, 2, "expected a label 0-4");
    expect_tree_error("(12 a)\n", 1, 3, "expected a space after the label");
    expect_tree_error("(3 )\n", 1, 4, "empty word");
    expect_tree_error("(3 (2 a b))\n", 1, 8, "a word ends at ')'");
    expect_tree_error("3 (2 a)\n", 1, 1, "expected '(' opening a node");
    expect_tree_error("(3 (2 a) x)\n", 1, 10, "expected '(' or ')'");
    expect_tree_error("(3 (2 a\x01) (2 b))\n", 1, 8, "binary data (byte 0x01)");
    expect_tree_error("(3 (2 a) (2 \x7f))\n", 1, 13, "binary data (byte 0x7f)");
    expect_tree_error("(3 (2 wo(rd)) (2 b))\n", 1, 9, "a word ends at ')'");
    ag_dataset ds;
    CHECK(ag_trees_load(fixture("e.txt", "\n\n"), NULL, &ds, err, sizeof err) == AG_DATA_EFORMAT && contains(err, "no trees"));
    CHECK(ag_trees_load("/nonexistent/trees.txt", NULL, &ds, err, sizeof err) == AG_DATA_EIO &&
          contains(err, "/nonexistent/trees.txt: cannot open"), "%s", err);
    /* nesting as deep as the line allows: no recursion to run out of */
    size_t depth = 200000;
    char *deep = malloc(depth * 8 + 16), *w = deep;
    for (size_t i = 0; i < depth; i++) w += sprintf(w, "(1 ");
    w += sprintf(w, "(2 x)");
    for (size_t i = 0; i < depth; i++) *w++ = ')';
    ag_tree_opts o = {0};
    CHECK(ag_trees_load_mem("deep", deep, (size_t)(w - deep), &o, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 1 && ds.ex[0].len == 1 && ds.ex[0].label == 1);
    ag_dataset_free(&ds);
    free(deep);
}

/* ---- parses ---------------------------------------------------------------- */

#define TOK(id, form, head) #id "\t" form "\t_\t_\t_\t_\t" #head "\t_\t_\t_\n"

/* "The Rock is great ." : great <- is, Rock <- is, The <- Rock, . <- is */
static const char rock_parse[] = "# sent_id = x:1\n# text = The Rock is great .\n" TOK(1, "The", 2) TOK(2, "Rock", 3)
    TOK(3, "is", 0) TOK(4, "great", 3) TOK(5, ".", 3) "\n";
static const char lrb_parse[] = "# sent_id = x:3\n" TOK(1, "-LRB-", 2) TOK(2, "bad\\/worse", 0) TOK(3, "-RRB-", 2) "\n";

static int load_parses(const char *name, const char *text, ag_dataset *p) {
    return ag_dataset_load(fixture(name, text), AG_FORMAT_CONLLU, NULL, NULL, p, err, sizeof err);
}

static void test_trees_with_parses(void) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%s", lrb_parse, rock_parse); /* any order: found by the words */
    ag_dataset p, ds;
    CHECK(load_parses("p.conllu", buf, &p) == 0, "%s", err);
    ag_tree_opts o = {.lowercase = 1, .phrases = 1, .parses = &p};
    CHECK(ag_trees_load(fixture("t.txt", two_trees), &o, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ds.n == 14);
    /* the sentence keeps its parse; a phrase the heads inside it */
    CHECK(heads_are(ds.ex[0].heads, (int32_t[]){1, 2, -1, 2, 2}, 5));
    CHECK(heads_are(ds.ex[3].heads, (int32_t[]){1, -1}, 2), "the rock: The <- Rock, Rock's head outside");
    CHECK(heads_are(ds.ex[6].heads, (int32_t[]){-1, 0}, 2), "is great");
    CHECK(heads_are(ds.ex[8].heads, (int32_t[]){-1, 0, 0}, 3), "is great .");
    CHECK(heads_are(ds.ex[1].heads, (int32_t[]){-1}, 1), "one word: a root");
    CHECK(heads_are(ds.ex[13].heads, (int32_t[]){-1, 0}, 2), "bad\\/worse -rrb-");
    ag_dataset_free(&ds);

    /* a tree whose sentence has no parse: named with the parses' file */
    ag_dataset q;
    CHECK(load_parses("only.conllu", rock_parse, &q) == 0);
    o.parses = &q;
    const char *t = fixture("t.txt", two_trees);
    CHECK(ag_trees_load(t, &o, &ds, err, sizeof err) == AG_DATA_EFORMAT);
    snprintf(buf, sizeof buf, "%s:3: no parse of this sentence in %s", t, paths[npaths - 2]);
    CHECK(contains(err, buf), "%s", err);
    ag_dataset_free(&q);
    ag_dataset_free(&p);
}

/* A word the parser split at a no-break space, as SST's "8 1/2". */
static void test_nbsp_word(void) {
    ag_dataset p, ds;
    CHECK(load_parses("n.conllu", "# sent_id = l.txt:1\n" TOK(1, "like", 0) TOK(2, "8", 3) TOK(3, "1\\/2", 1) TOK(4, ".", 1)
                      "\n", &p) == 0, "%s", err);
    CHECK(ag_dataset_load(fixture("l.txt", "1 like 8\xc2\xa0" "1\\/2 .\n"), AG_FORMAT_LABELED, NULL, NULL, &ds, err,
                          sizeof err) == 0);
    CHECK(ds.ex[0].len == 3);
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == 0, "%s", err);
    CHECK(heads_are(ds.ex[0].heads, (int32_t[]){-1, 0, 0}, 3), "the word takes the head of its piece nearest the root");
    ag_dataset_free(&ds);
    ag_tree_opts o = {.parses = &p};
    CHECK(ag_trees_load(fixture("nt.txt", "(3 (2 like) (3 (2 8\xc2\xa0" "1\\/2) (2 .)))\n"), &o, &ds, err, sizeof err) == 0,
          "%s", err);
    CHECK(ds.n == 1 && heads_are(ds.ex[0].heads, (int32_t[]){-1, 0, 0}, 3));
    ag_dataset_free(&ds);
    ag_dataset_free(&p);
}

static void test_attach(void) {
    ag_dataset p, ds;
    const char *data = fixture("x", "3 The Rock is great .\n\n1 -lrb- bad\\/worse -rrb-\n");
    ag_load_opts lower = ag_load_opts_default();
    lower.lowercase = 1;
    CHECK(ag_dataset_load(data, AG_FORMAT_LABELED, &lower, NULL, &ds, err, sizeof err) == 0);
    char buf[2048];
    snprintf(buf, sizeof buf, "%s%s", lrb_parse, rock_parse); /* by sent_id, in any order */
    CHECK(load_parses("x.conllu", buf, &p) == 0, "%s", err);
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == 0, "%s", err);
    CHECK(heads_are(ds.ex[0].heads, (int32_t[]){1, 2, -1, 2, 2}, 5) && heads_are(ds.ex[1].heads, (int32_t[]){1, -1, 1}, 3));
    CHECK(ds.ex[0].label == 3 && !strcmp(ag_dataset_word(&ds, 0, 0, 1), "rock"), "the words stay the data's");
    /* encoded batches carry the parse; the batcher's chain is gone */
    ag_vocab *v = NULL;
    CHECK(ag_vocab_build(&ds, NULL, 0, NULL, &v, err, sizeof err) == 0 && ag_dataset_encode(&ds, v, err, sizeof err) == 0);
    ag_batch b;
    ag_batch_opts bo = {.heads = 1};
    CHECK(ag_batch_alloc(&b, &ds, 2, &bo, err, sizeof err) == 0);
    CHECK(ag_batch_fill(&b, &ds, (int64_t[]){1, 0}, 2, err, sizeof err) == 0);
    CHECK(heads_are(b.heads, (int32_t[]){1, -1, 1, AG_HEAD_PAD, AG_HEAD_PAD, 1, 2, -1, 2, 2}, 10));
    ag_batch_free(&b);
    ag_vocab_free(v);
    ag_dataset_free(&p);

    /* without sent_ids: by order */
    snprintf(buf, sizeof buf, "%s%s", rock_parse + 16, lrb_parse + 16);
    CHECK(load_parses("x2.conllu", buf, &p) == 0);
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == 0, "%s", err);
    CHECK(heads_are(ds.ex[1].heads, (int32_t[]){1, -1, 1}, 3));
    ag_dataset_free(&p);
    ag_dataset_free(&ds);
}

/* Each way parses can fail to fit: the message names both files and lines,
 * and the data keeps what it had. */
static void expect_attach_error(const char *parses, const char *want1, const char *want2) {
    ag_dataset p, ds;
    const char *data = fixture("x", "3 The Rock is great .\n\n1 -lrb- bad\\/worse -rrb-\n");
    CHECK(ag_dataset_load(data, AG_FORMAT_LABELED, NULL, NULL, &ds, err, sizeof err) == 0);
    if (load_parses("bad.conllu", parses, &p)) {
        CHECK(0, "parses did not load: %s", err);
        ag_dataset_free(&ds);
        return;
    }
    err[0] = 0;
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == AG_DATA_EFORMAT);
    CHECK(contains(err, want1) && contains(err, want2), "message '%s', want '%s' and '%s'", err, want1, want2);
    CHECK(ds.ex[0].heads == NULL && ds.ex[1].heads == NULL, "no half-attached parse");
    ag_dataset_free(&p);
    ag_dataset_free(&ds);
}

static void test_attach_errors(void) {
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", rock_parse); /* line 3 has no parse */
    expect_attach_error(buf, "/x:3: no parse of this sentence in", "bad.conllu (no sent_id names this line)");
    snprintf(buf, sizeof buf, "%s# sent_id = x:3\n" TOK(1, "-LRB-", 2) TOK(2, "good", 0) TOK(3, "-RRB-", 2) "\n", rock_parse);
    expect_attach_error(buf, "/x:3: word 2 is 'bad\\/worse', but its parse at ", "bad.conllu:9 has 'good' (token 2)");
    snprintf(buf, sizeof buf, "%s# sent_id = x:3\n" TOK(1, "-LRB-", 2) TOK(2, "bad\\/worse", 0) "\n", rock_parse);
    expect_attach_error(buf, "/x:3 has 3 words, but its parse at ", "bad.conllu:9 has 2 tokens");
    snprintf(buf, sizeof buf, "%s%s# sent_id = x:2\n" TOK(1, "stray", 0) "\n", rock_parse, lrb_parse);
    expect_attach_error(buf, "bad.conllu:14: a parse of ", "/x:2, which holds no such sentence");
    /* a line number far past the data's end: refused at once, no index that long */
    snprintf(buf, sizeof buf, "%s%s# sent_id = x:999999999\n" TOK(1, "stray", 0) "\n", rock_parse, lrb_parse);
    expect_attach_error(buf, "bad.conllu:14: a parse of ", "/x:999999999, which holds no such sentence");
    snprintf(buf, sizeof buf, "%s%s%s", rock_parse, lrb_parse, rock_parse);
    expect_attach_error(buf, "bad.conllu:14: a second parse of x:1", "(the first at line 1)");
    snprintf(buf, sizeof buf, "# sent_id = y:1\n%s", rock_parse + 16);
    expect_attach_error(buf, "bad.conllu:1: sent_id names file 'y', but the data file is ", "/x");
    snprintf(buf, sizeof buf, "%s", rock_parse + 16); /* by order, one short */
    expect_attach_error(buf, "bad.conllu holds 1 parses", "has 2 sentences: cannot match them by order");

    ag_dataset a, b;
    CHECK(load_parses("p.conllu", rock_parse, &a) == 0 && load_parses("q.conllu", rock_parse, &b) == 0);
    CHECK(ag_dataset_attach_parses(&a, &b, err, sizeof err) == AG_DATA_EINVAL, "parses onto parses");
    ag_dataset_free(&a);
    ag_dataset_free(&b);
}

/* SICK: sentence A and B of a pair, ":A" and ":B" in the sent_id. */
static void test_attach_pairs(void) {
    const char *data = fixture("SICK_x.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
                                             "1\tA dog runs\tThe dog sleeps\t3.5\tNEUTRAL\n");
    ag_dataset ds, p;
    CHECK(ag_dataset_load(data, AG_FORMAT_SICK, NULL, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(load_parses("SICK_x.conllu", "# sent_id = SICK_x.txt:2:B\n" TOK(1, "The", 2) TOK(2, "dog", 3) TOK(3, "sleeps", 0)
                      "\n# sent_id = SICK_x.txt:2:A\n" TOK(1, "A", 2) TOK(2, "dog", 3) TOK(3, "runs", 0) "\n", &p) == 0,
          "%s", err);
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == 0, "%s", err);
    CHECK(heads_are(ds.ex[0].heads, (int32_t[]){1, 2, -1}, 3) && heads_are(ds.ex[0].heads_b, (int32_t[]){1, 2, -1}, 3));
    ag_dataset_free(&p);
    CHECK(load_parses("SICK_y.conllu", "# sent_id = SICK_x.txt:2:A\n" TOK(1, "A", 2) TOK(2, "dog", 3) TOK(3, "runs", 0) "\n",
                      &p) == 0);
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == AG_DATA_EFORMAT && contains(err, "pair's sentence B"),
          "%s", err);
    ag_dataset_free(&p);
    ag_dataset_free(&ds);
}

/* ---- the real data ------------------------------------------------------------ */

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int by_text(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

/* Every parse of the real data sets fits its file. */
static void real_attach(const char *dir, const char *data_rel, const char *parse_rel, ag_format fmt, int skip_bad) {
    char dp[1024], pp[1024];
    snprintf(dp, sizeof dp, "%s/%s", dir, data_rel);
    snprintf(pp, sizeof pp, "%s/%s", dir, parse_rel);
    if (!file_exists(dp) || !file_exists(pp)) return;
    ag_load_opts lo = ag_load_opts_default();
    lo.skip_bad_lines = skip_bad;
    ag_dataset ds, p;
    CHECK(ag_dataset_load(dp, fmt, &lo, NULL, &ds, err, sizeof err) == 0, "%s", err);
    CHECK(ag_dataset_load(pp, AG_FORMAT_CONLLU, NULL, NULL, &p, err, sizeof err) == 0, "%s", err);
    CHECK(ag_dataset_attach_parses(&ds, &p, err, sizeof err) == 0, "%s", err);
    ag_dataset_free(&p);
    ag_dataset_free(&ds);
}

static void test_real_data(void) {
    const char *dir = getenv("AG_DATA_DIR");
    struct stat st;
    if (!dir || !*dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("test_trees: real-data checks skipped (AG_DATA_DIR unset or missing)\n");
        return;
    }
    static const struct { const char *data, *parse; ag_format fmt; int skip; } sets[] = {
        {"sst/stsa.fine.train", "sst/conllu/stsa.fine.train.conllu", AG_FORMAT_LABELED, 0},
        {"sst/stsa.fine.dev", "sst/conllu/stsa.fine.dev.conllu", AG_FORMAT_LABELED, 0},
        {"sst/stsa.fine.test", "sst/conllu/stsa.fine.test.conllu", AG_FORMAT_LABELED, 0},
        {"sst/stsa.binary.train", "sst/conllu/stsa.binary.train.conllu", AG_FORMAT_LABELED, 0},
        {"sst/stsa.binary.dev", "sst/conllu/stsa.binary.dev.conllu", AG_FORMAT_LABELED, 0},
        {"sst/stsa.binary.test", "sst/conllu/stsa.binary.test.conllu", AG_FORMAT_LABELED, 0},
        {"trec/TREC.train.all", "trec/conllu/TREC.train.all.conllu", AG_FORMAT_LABELED, 0},
        {"trec/TREC.test.all", "trec/conllu/TREC.test.all.conllu", AG_FORMAT_LABELED, 0},
        {"cr/custrev.all", "cr/conllu/custrev.all.conllu", AG_FORMAT_LABELED, 1},
        {"mpqa/mpqa.all", "mpqa/conllu/mpqa.all.conllu", AG_FORMAT_LABELED, 1},
        {"subj/subj.all", "subj/conllu/subj.all.conllu", AG_FORMAT_LABELED, 0},
        {"mr/rt-polarity.all", "mr/conllu/rt-polarity.all.conllu", AG_FORMAT_LABELED, 0},
        {"sick/SICK_train.txt", "sick/conllu/SICK_train.conllu", AG_FORMAT_SICK, 0},
        {"sick/SICK_trial.txt", "sick/conllu/SICK_trial.conllu", AG_FORMAT_SICK, 0},
        {"sick/SICK_test_annotated.txt", "sick/conllu/SICK_test_annotated.conllu", AG_FORMAT_SICK, 0},
    };
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) real_attach(dir, sets[i].data, sets[i].parse, sets[i].fmt, sets[i].skip);

    /* SST's trees: the phrase counts PROVENANCE.md gives, and the roots,
     * lower-cased, are the stsa sentences with their labels */
    static const struct { const char *tree, *stsa, *parse; int64_t nodes, sentences; } splits[] = {
        {"sst/trees/train.txt", "sst/stsa.fine.train", "sst/conllu/stsa.fine.train.conllu", 318582, 8544},
        {"sst/trees/dev.txt", "sst/stsa.fine.dev", "sst/conllu/stsa.fine.dev.conllu", 41447, 1101},
        {"sst/trees/test.txt", "sst/stsa.fine.test", "sst/conllu/stsa.fine.test.conllu", 82600, 2210}};
    for (int s = 0; s < 3; s++) {
        char tp[1024], sp[1024], pp[1024];
        snprintf(tp, sizeof tp, "%s/%s", dir, splits[s].tree);
        snprintf(sp, sizeof sp, "%s/%s", dir, splits[s].stsa);
        snprintf(pp, sizeof pp, "%s/%s", dir, splits[s].parse);
        if (!file_exists(tp) || !file_exists(sp) || !file_exists(pp)) continue;
        ag_dataset phrases, roots, stsa, p;
        CHECK(ag_dataset_load(pp, AG_FORMAT_CONLLU, NULL, NULL, &p, err, sizeof err) == 0, "%s", err);
        ag_tree_opts o = {.lowercase = 1, .phrases = 1, .parses = &p};
        CHECK(ag_trees_load(tp, &o, &phrases, err, sizeof err) == 0, "%s", err); /* every tree finds its parse */
        CHECK(phrases.n == splits[s].nodes, "%s: %lld phrases", splits[s].tree, (long long)phrases.n);
        o.phrases = 0;
        o.parses = NULL;
        CHECK(ag_trees_load(tp, &o, &roots, err, sizeof err) == 0, "%s", err);
        CHECK(ag_dataset_load(sp, AG_FORMAT_LABELED, NULL, NULL, &stsa, err, sizeof err) == 0, "%s", err);
        CHECK(roots.n == splits[s].sentences && stsa.n == roots.n);
        /* the same multiset of (label, sentence): sort both by text */
        int same = roots.n == stsa.n;
        char **a = calloc((size_t)roots.n, sizeof *a), **b = calloc((size_t)roots.n, sizeof *b);
        for (int64_t i = 0; same && i < roots.n; i++) {
            a[i] = malloc(4096);
            b[i] = malloc(4096);
            snprintf(a[i], 4096, "%d %s", roots.ex[i].label, words(&roots, i, 0));
            snprintf(b[i], 4096, "%d %s", stsa.ex[i].label, words(&stsa, i, 0));
        }
        qsort(a, (size_t)roots.n, sizeof *a, by_text);
        qsort(b, (size_t)roots.n, sizeof *b, by_text);
        for (int64_t i = 0; same && i < roots.n; i++) same = !strcmp(a[i], b[i]);
        CHECK(same, "%s: the roots are %s's sentences", splits[s].tree, splits[s].stsa);
        for (int64_t i = 0; i < roots.n; i++) {
            free(a[i]);
            free(b[i]);
        }
        free(a);
        free(b);
        ag_dataset_free(&phrases);
        ag_dataset_free(&roots);
        ag_dataset_free(&stsa);
        ag_dataset_free(&p);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_trees_sentences();
    test_trees_phrases();
    test_trees_errors();
    test_trees_with_parses();
    test_nbsp_word();
    test_attach();
    test_attach_errors();
    test_attach_pairs();
    test_real_data();
    for (int i = 0; i < npaths; i++) remove(paths[i]);
    rmdir(tmpdir);
    return check_summary("test_trees");
}
