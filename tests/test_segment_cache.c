/* test_segment_cache.c - which recorded GPU segments replay as CUDA
 * graphs (graph/segment_cache.c, the part of graph/cuda_graph.cu that
 * needs no GPU): seen once eager, twice captured, then replayed; a byte's
 * difference is another segment; small ones and failed captures stay
 * eager; the least recently used graph is the one let go; alternating
 * segments are captured whatever their keys. */
#include "../graph/segment_cache.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static int destroyed;
static void destroy(void *exec) {
    (void)exec;
    destroyed++;
}

/* A segment's bytes: 64 of them, from a tag. */
static void segment(char *bytes, int tag) {
    for (int i = 0; i < 64; i++) bytes[i] = (char)(tag * 31 + i);
}

/* base with word n at byte 8: as many distinct segments as wanted */
static void variant(char *bytes, const char *base, uint32_t n) {
    memcpy(bytes, base, 64);
    memcpy(bytes + 8, &n, sizeof n);
    bytes[12] ^= 0x55; /* none equals base */
}

static ag__seg_action decide(ag__seg_cache *c, const char *bytes, int records, uint64_t *key, ag__seg_entry **hit) {
    return ag__seg_decide(c, bytes, 64, records, key, hit);
}

static void lifecycle(void) {
    ag__seg_cache c = {.destroy = destroy};
    char a[64], b[64];
    segment(a, 1);
    memcpy(b, a, sizeof b);
    b[40] ^= 1; /* one bit apart */
    uint64_t key;
    ag__seg_entry *hit;
    CHECK(decide(&c, a, 10, &key, &hit) == AG_SEG_EAGER && !hit, "first sighting: eager");
    CHECK(decide(&c, a, 10, &key, &hit) == AG_SEG_CAPTURE, "second sighting: captured");
    ag__seg_entry *kept = ag__seg_keep(&c, key, a, 64, (void *)0x1);
    CHECK(kept && kept->exec == (void *)0x1, "the capture kept");
    CHECK(decide(&c, a, 10, &key, &hit) == AG_SEG_REPLAY && hit == kept, "third sighting: replayed");
    CHECK(decide(&c, b, 10, &key, &hit) == AG_SEG_EAGER, "a bit's difference: another segment, seen once");
    CHECK(decide(&c, b, 10, &key, &hit) == AG_SEG_CAPTURE, "... then captured");
    ag__seg_failed(&c, key);
    CHECK(decide(&c, b, 10, &key, &hit) == AG_SEG_EAGER && decide(&c, b, 10, &key, &hit) == AG_SEG_EAGER,
          "a failed capture: eager from then on");
    CHECK(decide(&c, a, 10, &key, &hit) == AG_SEG_REPLAY, "the other segment still replays");
    /* fewer than AG_SEG_MIN_RECORDS records: never captured */
    char s[64];
    segment(s, 2);
    for (int i = 0; i < 3; i++)
        CHECK(decide(&c, s, AG_SEG_MIN_RECORDS - 1, &key, &hit) == AG_SEG_EAGER, "a small segment: eager (%d)", i);
    ag__seg_clear(&c);
    CHECK(destroyed == 1, "clear lets the one graph go (%d)", destroyed);
    CHECK(decide(&c, a, 10, &key, &hit) == AG_SEG_EAGER, "after clear: seen afresh");
    ag__seg_clear(&c);
}

/* A full cache lets the least recently used graph go: fill it, replay the
 * first, then one more capture must evict the second. */
static void eviction(void) {
    ag__seg_cache c = {.destroy = destroy};
    destroyed = 0;
    static char seg[AG_SEG_CACHE + 1][64];
    uint64_t key;
    ag__seg_entry *hit;
    for (int t = 0; t <= AG_SEG_CACHE; t++) segment(seg[t], 100 + t);
    for (int t = 0; t < AG_SEG_CACHE; t++) {
        decide(&c, seg[t], 10, &key, &hit);
        CHECK(decide(&c, seg[t], 10, &key, &hit) == AG_SEG_CAPTURE, "segment %d captured", t);
        ag__seg_keep(&c, key, seg[t], 64, (void *)(intptr_t)(t + 1));
    }
    CHECK(destroyed == 0, "a cache of %d holds %d graphs", AG_SEG_CACHE, AG_SEG_CACHE);
    CHECK(decide(&c, seg[0], 10, &key, &hit) == AG_SEG_REPLAY, "the first replays");
    decide(&c, seg[AG_SEG_CACHE], 10, &key, &hit);
    CHECK(decide(&c, seg[AG_SEG_CACHE], 10, &key, &hit) == AG_SEG_CAPTURE, "one more captured");
    ag__seg_keep(&c, key, seg[AG_SEG_CACHE], 64, (void *)(intptr_t)999);
    CHECK(destroyed == 1, "one graph let go (%d)", destroyed);
    CHECK(decide(&c, seg[0], 10, &key, &hit) == AG_SEG_REPLAY, "the recently replayed first stays");
    CHECK(decide(&c, seg[1], 10, &key, &hit) != AG_SEG_REPLAY, "the least recently used second went");
    CHECK(decide(&c, seg[AG_SEG_CACHE], 10, &key, &hit) == AG_SEG_REPLAY && hit->exec == (void *)(intptr_t)999,
          "the newest replays");
    ag__seg_clear(&c);
    CHECK(destroyed == AG_SEG_CACHE + 1, "clear lets the other %d go (%d in all)", AG_SEG_CACHE, destroyed);
}

/* Two segments that alternate step after step are each captured on their
 * second sighting, whatever their keys: not if one's sighting made the set
 * of seen keys forget the other's (a set indexed by key % size did, for
 * keys equal mod its size: both ran eagerly for ever, one run in ~100). */
static void alternating(void) {
    ag__seg_cache c = {.destroy = destroy};
    char a[64], b[64];
    segment(a, 7);
    uint64_t ka = ag__seg_fingerprint(a, 64), kb = 0;
    for (uint32_t n = 0; kb % AG_SEG_SEEN != ka % AG_SEG_SEEN || kb == ka; n++) /* ~128 tries */
        variant(b, a, n), kb = ag__seg_fingerprint(b, 64);
    uint64_t key;
    ag__seg_entry *hit;
    int replays = 0;
    for (int step = 0; step < 4; step++) {
        char *seg[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            ag__seg_action act = decide(&c, seg[k], 10, &key, &hit);
            if (act == AG_SEG_CAPTURE) ag__seg_keep(&c, key, seg[k], 64, (void *)(intptr_t)(k + 1));
            replays += act == AG_SEG_REPLAY;
        }
    }
    CHECK(replays == 4, "two alternating segments whose keys agree mod %d: %d of 4 later sightings replayed",
          AG_SEG_SEEN, replays);
    /* the set forgets the oldest key first: AG_SEG_SEEN others seen once each */
    ag__seg_clear(&c);
    decide(&c, a, 10, &key, &hit);
    static char other[AG_SEG_SEEN][64];
    for (int t = 0; t < AG_SEG_SEEN; t++) variant(other[t], a, 1000 + (uint32_t)t), decide(&c, other[t], 10, &key, &hit);
    CHECK(decide(&c, a, 10, &key, &hit) == AG_SEG_EAGER, "after %d newer keys, the oldest is forgotten", AG_SEG_SEEN);
    CHECK(decide(&c, other[AG_SEG_SEEN - 1], 10, &key, &hit) == AG_SEG_CAPTURE, "the newest is still known");
    ag__seg_clear(&c);
}

int main(void) {
    lifecycle();
    eviction();
    alternating();
    CHECK(ag__seg_fingerprint("abcdefgh", 8) != ag__seg_fingerprint("abcdefgi", 8), "the hash sees the last byte");
    return check_summary("segment_cache");
}
