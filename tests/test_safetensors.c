/* test_safetensors.c - the safetensors layer: the exact bytes we write
 * (against a file built by hand here), round trips, a strict reader that
 * refuses every kind of damage (truncation at every length, flipped bytes,
 * bad JSON, wrong shapes, overlaps, gaps), and atomic writes that survive
 * being killed mid-way.
 *
 *   test_safetensors                    run the tests
 *   test_safetensors --write-example F  write the interop example file F
 *   test_safetensors --dump F           print F's tensors and metadata, one
 *                                       per line (both for read_safetensors.py) */
#include "optim_util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64]; /* a fresh folder for this run's files */

static char *path_in_dir(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* (not through path_in_dir: its buffers are what callers hold) */
static void unlink_in_dir(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    unlink(p);
}

static unsigned char *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* ---- the interop example: hand-built bytes ---- */

static const int64_t ex_ids[3] = {1, -1, 300};
static const double ex_scalar = 0.25;
static const float ex_weight[4] = {1.0f, -2.0f, 0.5f, 0.0f};

static ag_status write_example(const char *path) {
    ag_st_writer w = {0};
    ag_st_add(&w, "weight", AG_F32, 2, (int64_t[]){2, 2}, ex_weight);
    ag_st_add(&w, "ids", AG_I64, 1, (int64_t[]){3}, ex_ids);
    ag_st_add(&w, "scalar", AG_F64, 0, NULL, &ex_scalar);
    ag_st_set_meta(&w, "step", "7");
    ag_st_set_meta(&w, "name", "x\"y");
    ag_status st = ag_st_write(&w, path);
    ag_st_writer_free(&w);
    return st;
}

static void test_exact_bytes(void) {
    /* Keys sorted at every level, no spaces, padded to 8 + 224 bytes; data
     * of 8-byte dtypes first (ids, scalar), then weight. */
    const char header[] = "{\"__metadata__\":{\"name\":\"x\\\"y\",\"step\":\"7\"},"
                          "\"ids\":{\"data_offsets\":[0,24],\"dtype\":\"I64\",\"shape\":[3]},"
                          "\"scalar\":{\"data_offsets\":[24,32],\"dtype\":\"F64\",\"shape\":[]},"
                          "\"weight\":{\"data_offsets\":[32,48],\"dtype\":\"F32\",\"shape\":[2,2]}}    ";
    const unsigned char data[48] = {
        0x01, 0, 0, 0, 0, 0, 0, 0,                          /* ids: 1 */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,     /* -1 */
        0x2c, 0x01, 0, 0, 0, 0, 0, 0,                       /* 300 */
        0, 0, 0, 0, 0, 0, 0xd0, 0x3f,                       /* scalar: 0.25 */
        0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0, 0, 0, 0x3f, 0, 0, 0, 0, /* weight: 1, -2, 0.5, 0 */
    };
    unsigned char want[8 + 224 + 48] = {0xe0, 0, 0, 0, 0, 0, 0, 0}; /* N = 224 */
    CHECK(sizeof header - 1 == 224);
    memcpy(want + 8, header, 224);
    memcpy(want + 232, data, 48);

    const char *path = path_in_dir("example.safetensors");
    CHECK(write_example(path) == AG_OK, "%s", ag_errmsg());
    size_t n;
    unsigned char *got = read_whole(path, &n);
    CHECK(got && n == sizeof want, "file is %zu bytes, want %zu", n, sizeof want);
    if (got && n == sizeof want) {
        for (size_t i = 0; i < n; i++)
            if (got[i] != want[i]) {
                CHECK(0, "byte %zu is 0x%02x, want 0x%02x", i, got[i], want[i]);
                break;
            }
    }
    free(got);
    /* and it reads back */
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK, "%s", ag_errmsg());
    CHECK(f.count == 3 && f.n_meta == 2);
    const ag_st_tensor *ids = ag_st_get(&f, "ids"), *w = ag_st_get(&f, "weight"), *s = ag_st_get(&f, "scalar");
    CHECK(ids && ids->dtype == AG_I64 && ids->ndim == 1 && ids->shape[0] == 3 && ids->numel == 3);
    CHECK(w && w->dtype == AG_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 2);
    CHECK(s && s->dtype == AG_F64 && s->ndim == 0 && s->numel == 1);
    int64_t iv[3];
    ag_real wv[4], sv;
    ag_st_to_i64(ids, iv);
    ag_st_to_real(w, wv);
    ag_st_to_real(s, &sv);
    CHECK(iv[0] == 1 && iv[1] == -1 && iv[2] == 300);
    CHECK(wv[0] == 1 && wv[1] == -2 && wv[2] == (ag_real)0.5 && wv[3] == 0 && sv == (ag_real)0.25);
    CHECK(!strcmp(ag_st_meta(&f, "name"), "x\"y") && !strcmp(ag_st_meta(&f, "step"), "7") && !ag_st_meta(&f, "x"));
    CHECK(ag_st_get(&f, "nope") == NULL && ag_st_get(&f, "__metadata__") == NULL);
    ag_st_close(&f);
}

/* ---- round trips ---- */

static void test_round_trip(void) {
    ag_params ps = {0};
    ag_tensor *t = ag_param(&ps, "enc.w", 3, (int[]){2, 3, 4});
    ag_rng rng;
    ag_rng_seed(&rng, 9);
    ag_init_normal(t, 0, 1, &rng);
    const int32_t small[5] = {-7, 0, 1, 2147483647, -2147483647 - 1};
    const char *odd = "we\xc3\xa9ird \"name\"\\\ttab\x01";
    ag_st_writer w = {0};
    ag_st_add_tensor(&w, "enc.w", t);
    ag_st_add(&w, "lengths", AG_I32, 1, (int64_t[]){5}, small);
    ag_st_add(&w, "empty", AG_F32, 2, (int64_t[]){0, 3}, NULL);
    ag_st_add(&w, odd, AG_F64, 1, (int64_t[]){1}, &(double){3.5});
    ag_st_set_meta(&w, "config", "model=mpsan,d=300\nline two");
    ag_st_set_meta(&w, "config", "replaced"); /* the last value wins */
    ag_st_set_meta(&w, "empty", "");
    const char *path = path_in_dir("round.safetensors");
    CHECK(ag_st_write(&w, path) == AG_OK, "%s", ag_errmsg());
    ag_st_writer_free(&w);
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK, "%s", ag_errmsg());
    const ag_st_tensor *a = ag_st_get(&f, "enc.w");
    CHECK(a && a->dtype == (IS_F64 ? AG_F64 : AG_F32) && a->ndim == 3 && a->shape[2] == 4);
    ag_real back[24];
    ag_st_to_real(a, back);
    CHECK(memcmp(back, t->data, sizeof back) == 0, "parameters come back bit for bit");
    int64_t l[5];
    ag_st_to_i64(ag_st_get(&f, "lengths"), l);
    for (int i = 0; i < 5; i++) CHECK(l[i] == small[i]);
    const ag_st_tensor *e = ag_st_get(&f, "empty");
    CHECK(e && e->numel == 0 && e->ndim == 2 && e->shape[0] == 0);
    const ag_st_tensor *o = ag_st_get(&f, odd);
    CHECK(o && o->numel == 1, "a name with quotes, backslash, tab and UTF-8 survives");
    CHECK(!strcmp(ag_st_meta(&f, "config"), "replaced") && !strcmp(ag_st_meta(&f, "empty"), ""));
    /* data offsets: 8-byte dtypes are 8-aligned in the file */
    for (int i = 0; i < f.count; i++) {
        size_t at = (size_t)((const unsigned char *)f.tensors[i].data - f.bytes);
        size_t esize = f.tensors[i].dtype == AG_F64 || f.tensors[i].dtype == AG_I64 ? 8 : 4;
        CHECK(at % esize == 0, "%s at byte %zu", f.tensors[i].name, at);
    }
    ag_st_close(&f);
    /* an empty file set is valid too: "{}" padded */
    ag_st_writer none = {0};
    CHECK(ag_st_write(&none, path) == AG_OK);
    CHECK(ag_st_read(path, &f) == AG_OK && f.count == 0 && f.n_meta == 0);
    ag_st_close(&f);
    ag_params_free(&ps);
}

/* ---- the reader refuses damage ---- */

/* A file from a header string and data bytes (the length is the header's). */
static size_t make_file(unsigned char *out, const char *header, const void *data, size_t n_data) {
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(out + 8, header, h);
    if (n_data) memcpy(out + 8 + h, data, n_data);
    return 8 + h + n_data;
}

static int parse_case(const char *header, size_t n_data, ag_st_file *f) {
    static unsigned char buf[4096];
    unsigned char data[256] = {0};
    size_t n = make_file(buf, header, data, n_data);
    return ag_st_parse("case.safetensors", buf, n, f);
}

static void expect_bad(const char *header, size_t n_data, const char *why) {
    ag_st_file f;
    ag_status st = parse_case(header, n_data, &f);
    CHECK(st == AG_ERR_FORMAT, "accepted %s: %s", why, header);
    CHECK(strstr(ag_errmsg(), "case.safetensors"), "message names the file: %s", ag_errmsg());
    if (!st) ag_st_close(&f);
}

static void expect_good(const char *header, size_t n_data, int count, const char *why) {
    ag_st_file f;
    ag_status st = parse_case(header, n_data, &f);
    CHECK(st == AG_OK, "refused %s: %s", why, ag_errmsg());
    if (!st) {
        CHECK(f.count == count, "%s: %d tensors", why, f.count);
        ag_st_close(&f);
    }
}

#define T(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_bad_json(void) {
    expect_good("{}", 0, 0, "an empty header");
    expect_good("{" T("a", "F32", "[2]", 0, 8) "}", 8, 1, "one tensor, keys in the reference order");
    expect_good("{ \n\"a\" : { \"shape\" : [ 2 ] ,\n \"data_offsets\":[0,8],\"dtype\":\"F32\" } }   ", 8, 1,
                "whitespace and any key order");
    expect_good("{" T("a", "F32", "[0]", 0, 0) "," T("b", "I32", "[]", 0, 4) "}", 4, 2, "a zero-size tensor");
    expect_good("{\"__metadata__\":{}," T("\\u00e9\\ud83d\\ude00", "F64", "[1]", 0, 8) "}", 8, 1, "escapes");
    expect_good("{" T("b", "F32", "[1]", 4, 8) "," T("a", "F32", "[1]", 0, 4) "}", 8, 2, "offsets in any order");

    expect_bad("", 0, "an empty header");
    expect_bad("[]", 0, "an array");
    expect_bad(" {}", 0, "a header not starting with '{'");
    expect_bad("{", 0, "an unclosed object");
    expect_bad("{}x", 0, "bytes after the object");
    expect_bad("{} {}", 0, "two objects");
    expect_bad("{}\x01", 0, "a control byte after the object");
    CHECK(strstr(ag_errmsg(), "unexpected byte 0x01"), "the control byte shown by its code: %s", ag_errmsg());
    expect_bad("{\"a\"\x02", 0, "a control byte for the colon");
    CHECK(strstr(ag_errmsg(), "expected ':', found byte 0x02"), "%s", ag_errmsg());
    expect_bad("{" T("a", "F32", "[2]", 0, 8) ",}", 8, "a trailing comma");
    expect_bad("{\"a\" {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a missing colon");
    expect_bad("{'a':{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "single quotes");
    expect_bad("{\"a:{\"dtype\":\"F32\"}", 0, "an unterminated string");
    expect_bad("{\"a\tb\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "a raw tab in a string");
    expect_bad("{\"a\\x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "an invalid escape");
    expect_bad("{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "a lone surrogate");
    expect_bad("{\"a\\udc00x\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "a lone low surrogate");
    expect_bad("{\"a\\u0000\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "\\u0000");
    expect_bad("{\"a\\u12\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "a short \\u escape");
    expect_bad("{\"\xff\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "invalid UTF-8");
    expect_bad("{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "overlong UTF-8");
    expect_bad("{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "an encoded surrogate");
    expect_bad("{\"\xe2\x82\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "cut UTF-8");
    expect_bad("{" T("a", "F32", "[-2]", 0, 8) "}", 8, "a negative dim");
    expect_bad("{" T("a", "F32", "[2.0]", 0, 8) "}", 8, "a fractional dim");
    expect_bad("{" T("a", "F32", "[2e0]", 0, 8) "}", 8, "an exponent");
    expect_bad("{" T("a", "F32", "[02]", 0, 8) "}", 8, "a leading zero");
    expect_bad("{" T("a", "F32", "[99999999999999999999]", 0, 8) "}", 8, "a dim beyond int64");
    expect_bad("{" T("a", "F32", "[\"2\"]", 0, 8) "}", 8, "a dim as a string");
    expect_bad("{" T("a", "F32", "[1,1,1,1,1,1,1,1,2]", 0, 8) "}", 8, "9 dims");
    expect_bad("{" T("a", "F32", "[2,]", 0, 8) "}", 8, "a trailing comma in an array");
    expect_bad("{" T("a", "F32", "2", 0, 8) "}", 8, "a shape that is not an array");
    expect_bad("{" T("a", "F17", "[2]", 0, 8) "}", 8, "an unknown dtype");
    expect_bad("{" T("a", "U8", "[8]", 0, 8) "}", 8, "an unsupported dtype");
    expect_bad("{" T("a", "F16", "[2]", 0, 8) "}", 8, "F16 [2] in 8 bytes");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "no data_offsets");
    expect_bad("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "no dtype");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "no shape");
    expect_bad("{\"a\":{}}", 0, "an empty tensor entry");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a key twice");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"offsets\":[0,8]}}", 8, "an unknown key");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, "three offsets");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, "one offset");
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "," T("a", "F32", "[2]", 8, 16) "}", 16, "a duplicate name");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "a metadata number");
    expect_bad("{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "a metadata key twice");
    expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "metadata twice");
    expect_bad("{\"__metadata__\":[]}", 0, "metadata as an array");
    expect_bad("{\"a\":[0,8]}", 8, "a tensor that is not an object");
    expect_bad("{\"a\":null}", 0, "null");

    /* shapes, sizes and offsets */
    expect_bad("{" T("a", "F32", "[2,2]", 0, 12) "}", 12, "bytes that do not match the shape");
    expect_bad("{" T("a", "I64", "[2]", 0, 8) "}", 8, "bytes that do not match the dtype");
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "}", 4, "offsets past the end of the data (truncated)");
    expect_bad("{" T("a", "F32", "[2]", 8, 0) "}", 8, "reversed offsets");
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4, 12) "}", 12, "overlapping tensors");
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0, 8) "}", 8, "two tensors on the same bytes");
    expect_bad("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8, 12) "}", 12, "a gap");
    expect_bad("{" T("a", "F32", "[1]", 4, 8) "}", 8, "data not starting at 0");
    expect_bad("{" T("a", "F32", "[2]", 0, 8) "}", 9, "a byte after the last tensor");
    expect_bad("{}", 4, "data that belongs to no tensor");
    expect_bad("{" T("a", "F32", "[4294967296,4294967296,4]", 0, 8) "}", 8, "a shape whose size overflows");

    /* the length prefix */
    ag_st_file f;
    unsigned char b[64] = {0};
    for (size_t n = 0; n < 8; n++) {
        CHECK(ag_st_parse("short.safetensors", b, n, &f) == AG_ERR_FORMAT);
        CHECK(strstr(ag_errmsg(), "short.safetensors") && strstr(ag_errmsg(), "too short"), "%s", ag_errmsg());
    }
    b[0] = 100; /* N = 100 in a 40-byte file */
    CHECK(ag_st_parse("len.safetensors", b, 40, &f) == AG_ERR_FORMAT && strstr(ag_errmsg(), "runs past"), "%s", ag_errmsg());
    memset(b, 0xff, 8); /* N = 2^64 - 1 */
    CHECK(ag_st_parse("len.safetensors", b, 40, &f) == AG_ERR_FORMAT && strstr(ag_errmsg(), "100 MB"), "%s", ag_errmsg());
    uint64_t big = 200000000; /* over the 100 MB limit, in a file that is not that big */
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(big >> (8 * i));
    CHECK(ag_st_parse("len.safetensors", b, 40, &f) == AG_ERR_FORMAT && strstr(ag_errmsg(), "100 MB"), "%s", ag_errmsg());
    memset(b, 0, 8);
    CHECK(ag_st_parse("len.safetensors", b, 40, &f) == AG_ERR_FORMAT && strstr(ag_errmsg(), "'{'"), "%s", ag_errmsg());

    /* unaligned data (a writer that does not pad) reads correctly */
    unsigned char buf[128];
    double v = -1.25;
    size_t n = make_file(buf, "{" T("x", "F64", "[1]", 0, 8) "}", &v, 8); /* header length is odd */
    CHECK((8 + strlen("{" T("x", "F64", "[1]", 0, 8) "}")) % 8 != 0);
    CHECK(ag_st_parse("unaligned", buf, n, &f) == AG_OK, "%s", ag_errmsg());
    ag_real r;
    ag_st_to_real(ag_st_get(&f, "x"), &r);
    CHECK(r == (ag_real)-1.25);
    ag_st_close(&f);
}

/* A larger real file: every truncation fails, every flipped header byte
 * either fails cleanly or (when the flip keeps the document valid, e.g. a
 * letter of a name) still gives a self-consistent file. */
static void test_damage(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "layer.weight", 2, (int[]){3, 5});
    ag_tensor *b = ag_param(&ps, "layer.bias", 1, (int[]){5});
    ag_rng rng;
    ag_rng_seed(&rng, 4);
    ag_init_uniform(w, -1, 1, &rng);
    ag_init_uniform(b, -1, 1, &rng);
    ag_st_writer wr = {0};
    ag_st_add_tensor(&wr, w->name, w);
    ag_st_add_tensor(&wr, b->name, b);
    ag_st_add(&wr, "batch.tokens", AG_I64, 2, (int64_t[]){2, 3}, (int64_t[]){5, 6, 7, 8, 9, 0});
    ag_st_set_meta(&wr, "step", "12");
    const char *path = path_in_dir("damage.safetensors");
    CHECK(ag_st_write(&wr, path) == AG_OK);
    ag_st_writer_free(&wr);
    size_t size;
    unsigned char *good = read_whole(path, &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];

    ag_st_file f;
    int refused = 0;
    for (size_t n = 0; n < size; n++) { /* every length short of the whole */
        ag_status st = ag_st_parse("cut.safetensors", good, n, &f);
        refused += st == AG_ERR_FORMAT && strstr(ag_errmsg(), "cut.safetensors") != NULL;
        if (!st) ag_st_close(&f);
    }
    CHECK(refused == (int)size, "%d of %zu truncations refused", refused, size);
    CHECK(ag_st_parse("whole", good, size, &f) == AG_OK);
    ag_st_close(&f);

    unsigned char *bad = malloc(size);
    const unsigned char masks[] = {0x01, 0x02, 0x10, 0x20, 0x40, 0x80, 0xff};
    int tried = 0, failed = 0, prefix_failed = 0;
    for (size_t i = 0; i < 8 + hlen; i++)
        for (size_t m = 0; m < sizeof masks; m++) {
            memcpy(bad, good, size);
            bad[i] ^= masks[m];
            ag_status st = ag_st_parse("flip.safetensors", bad, size, &f);
            tried++;
            if (st) {
                failed++;
                prefix_failed += i < 8;
                CHECK(st == AG_ERR_FORMAT && strstr(ag_errmsg(), "flip.safetensors"), "%s", ag_errmsg());
                continue;
            }
            /* accepted: it must describe the data consistently */
            int64_t total = 0;
            for (int k = 0; k < f.count; k++) {
                const ag_st_tensor *t = &f.tensors[k];
                int64_t bytes = t->numel * (t->dtype == AG_F64 || t->dtype == AG_I64 ? 8 : 4);
                CHECK((const unsigned char *)t->data >= f.bytes + 8 + hlen &&
                      (const unsigned char *)t->data + bytes <= f.bytes + size);
                total += bytes;
            }
            CHECK(total == (int64_t)(size - 8 - hlen));
            ag_st_close(&f);
        }
    CHECK(prefix_failed == 8 * (int)sizeof masks, "every change of the length prefix is refused");
    /* random damage: a few bytes of the header set to random values, often
     * JSON punctuation; the reader must never misbehave (run under ASan) */
    ag_rng r;
    ag_rng_seed(&r, 2718);
    const char punct[] = "{}[]:,\"\\u0123456789 -.eE";
    int random_refused = 0;
    for (int round = 0; round < 3000; round++) {
        memcpy(bad, good, size);
        int changes = 1 + (int)(ag_rng_next(&r) % 4);
        for (int c = 0; c < changes; c++) {
            size_t at = 8 + ag_rng_next(&r) % hlen;
            bad[at] = ag_rng_next(&r) % 2 ? (unsigned char)punct[ag_rng_next(&r) % (sizeof punct - 1)]
                                          : (unsigned char)ag_rng_next(&r);
        }
        ag_status st = ag_st_parse("random.safetensors", bad, size, &f);
        random_refused += st != AG_OK;
        if (!st) ag_st_close(&f);
    }
    CHECK(random_refused > 2500, "%d of 3000 random damages refused", random_refused);
    printf("  %zu truncations refused; %d of %d flipped header bytes refused, the rest still consistent; "
           "%d of 3000 random damages refused\n", size, failed, tried, random_refused);
    free(bad);
    free(good);
    ag_params_free(&ps);
}

/* ---- writing ---- */

static int count_temp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void remove_temp_files(void) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp.")) unlink_in_dir(e->d_name);
    if (d) closedir(d);
}

/* One version of a checkpoint: every value equal to v, v in the metadata. */
static ag_status write_version(const char *path, float *buf, int64_t n, int v) {
    for (int64_t i = 0; i < n; i++) buf[i] = (float)v;
    ag_st_writer w = {0};
    char s[16];
    snprintf(s, sizeof s, "%d", v);
    ag_st_add(&w, "values", AG_F32, 1, (int64_t[]){n}, buf);
    ag_st_set_meta(&w, "version", s);
    ag_status st = ag_st_write(&w, path);
    ag_st_writer_free(&w);
    return st;
}

/* A child rewrites the checkpoint in a loop and is killed at random
 * moments: what is left under the name must always be one whole version. */
static void test_killed_writer(void) {
    const char *path = path_in_dir("killed.safetensors");
    const int64_t n = 1 << 18; /* 1 MiB of floats: a write takes a while */
    float *buf = malloc((size_t)n * sizeof *buf);
    CHECK(write_version(path, buf, n, 0) == AG_OK);
    srand(12345);
    int killed = 0;
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (int v = 1;; v++) write_version(path, buf, n, round * 100000 + v);
        }
        struct timespec ts = {0, 1000000L * (1 + rand() % 20)}; /* 1-20 ms */
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        killed += WIFSIGNALED(status);
        ag_st_file f;
        ag_status st = ag_st_read(path, &f);
        CHECK(st == AG_OK, "after a kill: %s", ag_errmsg());
        if (st) continue;
        int v = atoi(ag_st_meta(&f, "version"));
        const ag_st_tensor *t = ag_st_get(&f, "values");
        CHECK(t && t->numel == n);
        bool whole = true;
        for (int64_t i = 0; t && i < n; i++) whole &= ((const float *)t->data)[i] == (float)v;
        CHECK(whole, "round %d: values do not all match version %d", round, v);
        ag_st_close(&f);
    }
    CHECK(killed == 12);
    remove_temp_files(); /* a killed writer leaves its temporary file */
    CHECK(write_version(path, buf, n, 1) == AG_OK);
    CHECK(count_temp_files() == 0, "a completed write leaves no temporary file");
    free(buf);
}

static void test_write_errors(void) {
    ag_st_writer w = {0};
    ag_st_add(&w, "a", AG_F32, 1, (int64_t[]){1}, &(float){1});
    EXPECT_ERROR(ag_st_write(&w, "/nonexistent-folder/x.safetensors"), AG_ERR_IO, "/nonexistent-folder/x.safetensors");
    /* a write that fails leaves the existing file as it was */
    const char *path = path_in_dir("keep.safetensors");
    CHECK(ag_st_write(&w, path) == AG_OK);
    size_t n0, n1;
    unsigned char *before = read_whole(path, &n0);
    ag_st_set_meta(&w, "bad", "\xff\xfe");
    EXPECT_ERROR(ag_st_write(&w, path), AG_ERR_ARG, "UTF-8");
    unsigned char *after = read_whole(path, &n1);
    CHECK(n0 == n1 && memcmp(before, after, n0) == 0);
    CHECK(count_temp_files() == 0);
    free(before), free(after);
    /* a path that names a pipe or a folder is not replaced by the rename (as
     * root a device such as /dev/null would have been) */
    ag_st_set_meta(&w, "bad", "fine");
    const char *fifo = path_in_dir("pipe.safetensors");
    CHECK(mkfifo(fifo, 0600) == 0);
    EXPECT_ERROR(ag_st_write(&w, fifo), AG_ERR_IO, "not a regular file");
    struct stat sb;
    CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the pipe was replaced");
    EXPECT_ERROR(ag_st_write(&w, dir), AG_ERR_IO, "not a regular file");
    CHECK(count_temp_files() == 0);
    /* misuse */
    EXPECT_FATAL(ag_st_add(&w, "a", AG_F32, 1, (int64_t[]){1}, &(float){1}), "ag_st_add", "'a' added twice");
    EXPECT_FATAL(ag_st_add(&w, "__metadata__", AG_F32, 0, NULL, &(float){1}), "ag_st_add", "__metadata__");
    EXPECT_FATAL(ag_st_add(&w, "big", AG_F32, 9, (int64_t[9]){0}, NULL), "ag_st_add", "9 dims");
    EXPECT_FATAL(ag_st_add(&w, "neg", AG_F32, 1, (int64_t[]){-1}, NULL), "ag_st_add", "'neg'");
    ag_st_writer_free(&w);
    ag_st_file f;
    EXPECT_ERROR(ag_st_read(path_in_dir("missing.safetensors"), &f), AG_ERR_IO, "missing.safetensors");
    EXPECT_ERROR(ag_st_read(dir, &f), AG_ERR_IO, "not a regular file");
}

/* "name DTYPE d0,d1 v0 v1 ..." per tensor (by name), then "meta key value". */
static int dump(const char *path) {
    ag_st_file f;
    if (ag_st_read(path, &f)) {
        fprintf(stderr, "%s\n", ag_errmsg());
        return 1;
    }
    for (int i = 0; i < f.count; i++) {
        const ag_st_tensor *t = &f.tensors[i];
        printf("%s %s ", t->name, ag_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) printf(d ? ",%lld" : "%lld", (long long)t->shape[d]);
        const unsigned char *p = t->data;
        for (int64_t k = 0; k < t->numel; k++) {
            float x4;
            double x8;
            int32_t i4;
            int64_t i8;
            switch (t->dtype) {
            case AG_F32: memcpy(&x4, p + 4 * k, 4); printf(" %.9g", (double)x4); break;
            case AG_F64: memcpy(&x8, p + 8 * k, 8); printf(" %.17g", x8); break;
            case AG_I32: memcpy(&i4, p + 4 * k, 4); printf(" %d", i4); break;
            case AG_I64: memcpy(&i8, p + 8 * k, 8); printf(" %lld", (long long)i8); break;
            case AG_F16: case AG_BF16: printf(" %.9g", ag_st_real_at(t, k)); break;
            }
        }
        printf("\n");
    }
    for (int i = 0; i < f.n_meta; i++) { /* a line each: line feeds in values (a run's config) as \n */
        printf("meta %s ", f.meta[2 * i]);
        for (const char *c = f.meta[2 * i + 1]; *c; c++) *c == '\n' ? fputs("\\n", stdout) : putchar(*c);
        putchar('\n');
    }
    ag_st_close(&f);
    return 0;
}

/* ---- checksums ---- */

static void test_checksums(void) {
    /* the standard check value of CRC-32C, and RFC 3720's 32 zero bytes;
     * chained calls equal one call over the whole (every tail length) */
    CHECK(ag_crc32c(0, "123456789", 9) == 0xe3069283u, "%08x", ag_crc32c(0, "123456789", 9));
    CHECK(ag_crc32c(0, (unsigned char[32]){0}, 32) == 0x8a9136aau);
    const char *text = "The quick brown fox jumps over the lazy dog";
    for (size_t cut = 0; cut <= strlen(text); cut++)
        CHECK(ag_crc32c(ag_crc32c(0, text, cut), text + cut, strlen(text) - cut) == ag_crc32c(0, text, strlen(text)));
    CHECK(ag_crc32c(0, NULL, 0) == 0);

    ag_st_writer w = {0};
    ag_st_add(&w, "weight", AG_F32, 2, (int64_t[]){2, 2}, ex_weight);
    ag_st_add(&w, "empty", AG_F32, 1, (int64_t[]){0}, NULL);
    ag_st_set_checksums(&w);
    ag_st_add(&w, "ids", AG_I64, 1, (int64_t[]){3}, ex_ids); /* added after: no checksum */
    const char *path = path_in_dir("crc.safetensors");
    CHECK(ag_st_write(&w, path) == AG_OK, "%s", ag_errmsg());
    ag_st_writer_free(&w);
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK, "%s", ag_errmsg());
    CHECK(f.unchecked == 1 && !strcmp(ag_st_meta(&f, "crc32c.empty"), "00000000"), "%d", f.unchecked);
    CHECK(ag_st_meta(&f, "crc32c.weight") && strtoul(ag_st_meta(&f, "crc32c.weight"), NULL, 16) == ag_crc32c(0, ex_weight, 16));
    /* every bit of the checksummed tensor's bytes, flipped alone */
    size_t at = (size_t)((const unsigned char *)ag_st_get(&f, "weight")->data - f.bytes);
    unsigned char *copy = malloc(f.size);
    int refused = 0;
    for (int bit = 0; bit < 16 * 8; bit++) {
        memcpy(copy, f.bytes, f.size);
        copy[at + bit / 8] ^= (unsigned char)(1u << bit % 8);
        ag_st_file g;
        ag_status st = ag_st_parse("mem", copy, f.size, &g);
        refused += st == AG_ERR_FORMAT && strstr(ag_errmsg(), "tensor 'weight' (F32 [2,2]) is damaged");
        if (!st) ag_st_close(&g);
    }
    CHECK(refused == 128, "%d of 128 flipped bits refused: %s", refused, ag_errmsg());
    free(copy);
    CHECK(f.sealed, "a file of ag_st_set_checksums is sealed whole");
    ag_st_close(&f);

    /* A file of attngrad before the seal: every tensor's checksum, no
     * AG_ST_FILE_CRC.  Its tensors are verified, its header cannot be:
     * `sealed` says so, and a bit flipped in a metadata value still loads
     * (what the reader's caller must tell its user).  Neither is a file of
     * another writer sealed. */
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", ag_crc32c(0, ex_weight, 16));
    ag_st_writer old = {0};
    ag_st_add(&old, "weight", AG_F32, 2, (int64_t[]){2, 2}, ex_weight);
    ag_st_set_meta(&old, "crc32c.weight", crc);
    ag_st_set_meta(&old, "config", "l2=1e-07");
    const char *old_path = path_in_dir("unsealed.safetensors");
    CHECK(ag_st_write(&old, old_path) == AG_OK, "%s", ag_errmsg());
    ag_st_writer_free(&old);
    CHECK(ag_st_read(old_path, &f) == AG_OK && f.unchecked == 0 && !f.sealed, "%s", ag_errmsg());
    char *l2 = f.size > 8 ? memmem(f.bytes, f.size, "l2=1", 4) : NULL;
    if (l2) {
        l2[3] = '3';
        ag_st_file g;
        CHECK(ag_st_parse("mem", f.bytes, f.size, &g) == AG_OK && !g.sealed && !strcmp(ag_st_meta(&g, "config"), "l2=3e-07"),
              "%s", ag_errmsg());
        ag_st_close(&g);
    }
    CHECK(l2 != NULL);
    ag_st_close(&f);
}

/* F16 and BF16 read as their exact values: normals, subnormals, signed
 * zero, infinities, the largest finite F16; ag_st_to_real rounds them once. */
static void test_half_types(void) {
    const uint16_t f16[8] = {0x3c00, 0xc000, 0x3555, 0x0001, 0x8000, 0x7bff, 0x7c00, 0x7e00};
    const double f16_want[7] = {1.0, -2.0, 0.333251953125, 5.9604644775390625e-08, -0.0, 65504.0, INFINITY};
    const uint16_t bf16[4] = {0x3f80, 0xc0a0, 0x0001, 0xff80};
    const double bf16_want[4] = {1.0, -5.0, 9.183549615799121e-41, -INFINITY};
    ag_st_writer w = {0};
    ag_st_add(&w, "h", AG_F16, 1, (int64_t[]){8}, f16);
    ag_st_add(&w, "b", AG_BF16, 2, (int64_t[]){2, 2}, bf16);
    ag_st_add(&w, "odd", AG_F16, 1, (int64_t[]){1}, f16); /* 2 bytes: what follows is not 4-aligned */
    ag_st_set_checksums(&w);
    const char *path = path_in_dir("half.safetensors");
    CHECK(ag_st_write(&w, path) == AG_OK, "%s", ag_errmsg());
    ag_st_writer_free(&w);
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK, "%s", ag_errmsg());
    const ag_st_tensor *h = ag_st_get(&f, "h"), *b = ag_st_get(&f, "b");
    CHECK(h && h->dtype == AG_F16 && b && b->dtype == AG_BF16 && !strcmp(ag_dtype_name(AG_BF16), "BF16"));
    for (int i = 0; h && i < 7; i++)
        CHECK(ag_st_real_at(h, i) == f16_want[i] && signbit(ag_st_real_at(h, i)) == signbit(f16_want[i]), "F16 %d: %g", i,
              ag_st_real_at(h, i));
    CHECK(h && isnan(ag_st_real_at(h, 7)));
    for (int i = 0; b && i < 4; i++) CHECK(ag_st_real_at(b, i) == bf16_want[i], "BF16 %d: %g", i, ag_st_real_at(b, i));
    ag_real r[8];
    if (h) ag_st_to_real(h, r);
    CHECK(r[0] == 1 && r[2] == (ag_real)0.333251953125 && r[5] == 65504);
    CHECK(ag_dtype_is_float(AG_F16) && ag_dtype_is_float(AG_BF16) && !ag_dtype_is_float(AG_I32));
    ag_st_close(&f);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump")) {
        int rc = dump(argv[2]);
        ag_shutdown();
        return rc;
    }
    if (argc == 3 && !strcmp(argv[1], "--write-example")) {
        ag_status st = write_example(argv[2]);
        if (st) fprintf(stderr, "%s\n", ag_errmsg());
        ag_shutdown();
        return st ? 1 : 0;
    }
    strcpy(dir, "/tmp/ag_safetensors.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_exact_bytes();
    test_round_trip();
    test_bad_json();
    test_damage();
    test_killed_writer();
    test_write_errors();
    test_checksums();
    test_half_types();
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') unlink_in_dir(e->d_name);
    if (d) closedir(d);
    rmdir(dir);
    ag_shutdown();
    return check_summary(IS_F64 ? "test_safetensors_f64" : "test_safetensors_f32");
}
