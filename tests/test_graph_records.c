/* test_graph_records.c - the side of CUDA graphs that needs no GPU
 * (graph/cuda_graph.cu, graph/prelude.cuh's ag__launch): a recorded
 * launch's bytes are its identity, so equal launches must record equal
 * bytes whatever the caller's stack held in the structs it passed (a padded
 * argument type is refused at compile time; this catches one at run time),
 * an op's label must be no part of them, and any changed argument must be.
 * Then a segment of real records goes through graph/segment_cache.c: eager,
 * captured, replayed.  CUDA builds only; nothing is launched (the records
 * are taken out unrun), so it runs on a machine without a GPU. */
#include "../graph/device.h"
#include "../graph/segment_cache.h"
#include "../ops/softmax.h"
#include "check.h"

#include <string.h>

enum { CAP = 1 << 14 };

/* Device addresses that are never dereferenced: nothing runs. */
#define DEV(a) ((ag__kreal *)(uintptr_t)(a))

/* The masked softmax's launch, its plan first filled with `stack` (what the
 * caller's stack held) and then given its fields. */
static size_t softmax_launch(char *out, unsigned char stack, int64_t rows, const char *op) {
    ag__kmask p;
    memset(&p, stack, sizeof p);
    p.rows3[0] = 2, p.rows3[1] = 3, p.rows3[2] = 5, p.cols = 7;
    p.stride3[0] = 5, p.stride3[1] = 0, p.stride3[2] = 1;
    ag__softmax_cuda.rows_forward(DEV(0x10000), DEV(0x20000), &p, (ag__kreal)0.5, DEV(0x30000), rows);
    ag__cuda_check_launch(op);
    return ag__graph_take(out, CAP);
}

/* The softmax mixture's launch, its job filled with `stack` first. */
static size_t mix_launch(char *out, unsigned char stack, int d) {
    ag__kmix j;
    memset(&j, stack, sizeof j);
    j.z = DEV(0x1000), j.out = DEV(0x2000), j.dout = NULL, j.gate = DEV(0x3000), j.y = DEV(0x4000), j.dz = NULL;
    for (int g = 0; g < AG_KMIX_MAX_SOURCES; g++) {
        j.src[g] = g < 2 ? DEV(0x5000 + 0x100 * g) : NULL;
        j.dsrc[g] = NULL;
        j.fresh_src[g] = false;
    }
    j.n = 2, j.d = d, j.nz = 1, j.N = 4, j.len = NULL, j.fresh_z = false;
    memset(j.unused, 0, sizeof j.unused); /* a named field is set, as ops/softmax.c's initializer does */
    ag__softmax_cuda.mix_forward(&j, 8);
    ag__cuda_check_launch("ag_softmax_mix");
    return ag__graph_take(out, CAP);
}

static void equal_launches(void) {
    static char a[CAP], b[CAP];
    size_t na = softmax_launch(a, 0xAA, 30, "ag_masked_softmax"), nb = softmax_launch(b, 0x55, 30, "ag_attention");
    CHECK(na > 0 && na % 16 == 0 && na <= CAP, "the softmax's launch recorded (%zu bytes)", na);
    CHECK(na == nb && !memcmp(a, b, na), "equal softmax launches under another op's label: equal bytes");
    nb = softmax_launch(b, 0xAA, 31, "ag_masked_softmax");
    CHECK(na == nb && memcmp(a, b, na), "one more row: other bytes");

    na = mix_launch(a, 0xAA, 3), nb = mix_launch(b, 0x55, 3);
    CHECK(na > 0 && na == nb && !memcmp(a, b, na), "equal softmax-mix launches: equal bytes (%zu, %zu)", na, nb);
    nb = mix_launch(b, 0xAA, 4);
    CHECK(na == nb && memcmp(a, b, na), "another width: other bytes");

    CHECK(ag__graph_take(a, CAP) == 0, "taken: nothing left recorded");
}

/* A segment of real records: seen once eagerly, captured the second time,
 * replayed from the third; the same launches with another row count are
 * another segment. */
static void segment_of_records(void) {
    static char seg[CAP], other[CAP];
    size_t n = 0, m = 0;
    for (int i = 0; i < AG_SEG_MIN_RECORDS; i++) {
        n += softmax_launch(seg + n, (unsigned char)i, 30, "ag_masked_softmax");
        m += softmax_launch(other + m, (unsigned char)i, 29, "ag_masked_softmax");
    }
    ag__seg_cache c = {0};
    uint64_t key;
    ag__seg_entry *hit;
    CHECK(ag__seg_decide(&c, seg, n, AG_SEG_MIN_RECORDS, &key, &hit) == AG_SEG_EAGER, "first sighting: eager");
    CHECK(ag__seg_decide(&c, seg, n, AG_SEG_MIN_RECORDS, &key, &hit) == AG_SEG_CAPTURE, "second: captured");
    CHECK(ag__seg_keep(&c, key, seg, n, (void *)0x1) != NULL, "the graph kept");
    CHECK(ag__seg_decide(&c, seg, n, AG_SEG_MIN_RECORDS, &key, &hit) == AG_SEG_REPLAY && hit->exec == (void *)0x1,
          "third: replayed");
    CHECK(ag__seg_decide(&c, other, m, AG_SEG_MIN_RECORDS, &key, &hit) == AG_SEG_EAGER,
          "a row fewer: another segment, seen once");
    ag__seg_clear(&c);
}

int main(void) {
    ag__graph_enable(true); /* recording needs no GPU; nothing here is ever run */
    equal_launches();
    segment_of_records();
    ag__graph_enable(false); /* nothing left to run */
    return check_summary("graph_records");
}
