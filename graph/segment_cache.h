/* segment_cache.h - which recorded segments of GPU work replay as CUDA
 * graphs (graph/cuda_graph.cu), without CUDA: the decision, the cache of
 * captured graphs (opaque handles) and its eviction, so that a machine
 * without a GPU tests them (tests/test_segment_cache.c).
 *
 * A segment is the bytes of its records.  The first time bytes are seen
 * they run eagerly; the second time they are captured; from then on the
 * captured graph replays, for as long as it is among the CACHE most
 * recently used.  Bytes whose capture failed always run eagerly, and so do
 * segments of fewer than MIN_RECORDS records (one graph launch would not
 * pay for itself). */
#ifndef AG_SEGMENT_CACHE_H
#define AG_SEGMENT_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { AG_SEG_CACHE = 64, AG_SEG_SEEN = 128, AG_SEG_MIN_RECORDS = 4 };

typedef enum { AG_SEG_EAGER, AG_SEG_CAPTURE, AG_SEG_REPLAY } ag__seg_action;

typedef struct {
    uint64_t key;
    char *bytes; /* a copy of the segment's records */
    size_t n;
    void *exec;    /* the captured graph; NULL: a free slot */
    uint64_t used; /* when last decided on: the least recent goes first */
} ag__seg_entry;

typedef struct {
    ag__seg_entry entry[AG_SEG_CACHE];
    /* keys run once; keys whose capture failed: each a ring that forgets
     * its oldest key first */
    uint64_t seen[AG_SEG_SEEN], failed[AG_SEG_SEEN];
    unsigned seen_next, failed_next;
    uint64_t clock;
    void (*destroy)(void *exec); /* frees a graph the cache lets go */
} ag__seg_cache;

/* A hash of n bytes (n a multiple of 8), a word at a time. */
uint64_t ag__seg_fingerprint(const char *p, size_t n);
/* What to do with a segment of these bytes and records; *key gets its
 * hash, and *hit its entry when the answer is AG_SEG_REPLAY. */
ag__seg_action ag__seg_decide(ag__seg_cache *c, const char *bytes, size_t n, int records, uint64_t *key,
                              ag__seg_entry **hit);
/* After a capture: keep exec for these bytes, in a free slot or the least
 * recently used one's; NULL (exec not kept) when the copy cannot be made. */
ag__seg_entry *ag__seg_keep(ag__seg_cache *c, uint64_t key, const char *bytes, size_t n, void *exec);
/* A capture of these bytes failed: they run eagerly from now on. */
void ag__seg_failed(ag__seg_cache *c, uint64_t key);
/* Lets every graph go, and forgets what was seen. */
void ag__seg_clear(ag__seg_cache *c);

#ifdef __cplusplus
}
#endif

#endif
