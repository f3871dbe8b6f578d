/* segment_cache.c - see segment_cache.h. */
#include "segment_cache.h"

#include <stdlib.h>
#include <string.h>

uint64_t ag__seg_fingerprint(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    return h;
}

static bool in(const uint64_t *set, uint64_t key) {
    for (int i = 0; i < AG_SEG_SEEN; i++)
        if (set[i] == key) return true;
    return false;
}

/* A small set that forgets its oldest key first.  Not a slot picked by
 * the key's value: two segments that alternate each step with keys equal
 * modulo the size would make it forget each other for ever, and neither
 * would ever be captured (in about one run of a hundred: the keys hash
 * device addresses, which vary run to run). */
static void add(uint64_t *set, unsigned *next, uint64_t key) {
    set[*next] = key;
    *next = (*next + 1) % AG_SEG_SEEN;
}

static ag__seg_entry *lookup(ag__seg_cache *c, uint64_t key, const char *bytes, size_t n) {
    for (int i = 0; i < AG_SEG_CACHE; i++) {
        ag__seg_entry *e = &c->entry[i];
        if (e->exec && e->key == key && e->n == n && !memcmp(e->bytes, bytes, n)) return e;
    }
    return NULL;
}

ag__seg_action ag__seg_decide(ag__seg_cache *c, const char *bytes, size_t n, int records, uint64_t *key,
                              ag__seg_entry **hit) {
    c->clock++;
    *hit = NULL;
    *key = 0;
    if (records < AG_SEG_MIN_RECORDS) return AG_SEG_EAGER;
    *key = ag__seg_fingerprint(bytes, n);
    ag__seg_entry *e = lookup(c, *key, bytes, n);
    if (e) {
        e->used = c->clock;
        *hit = e;
        return AG_SEG_REPLAY;
    }
    if (in(c->failed, *key)) return AG_SEG_EAGER;
    if (in(c->seen, *key)) return AG_SEG_CAPTURE;
    add(c->seen, &c->seen_next, *key);
    return AG_SEG_EAGER;
}

static void drop(ag__seg_cache *c, ag__seg_entry *e) {
    if (e->exec && c->destroy) c->destroy(e->exec);
    free(e->bytes);
    *e = (ag__seg_entry){0};
}

ag__seg_entry *ag__seg_keep(ag__seg_cache *c, uint64_t key, const char *bytes, size_t n, void *exec) {
    ag__seg_entry *slot = &c->entry[0];
    for (int i = 0; i < AG_SEG_CACHE; i++) {
        if (!c->entry[i].exec) {
            slot = &c->entry[i];
            break;
        }
        if (c->entry[i].used < slot->used) slot = &c->entry[i];
    }
    char *copy = malloc(n ? n : 1);
    if (!copy) return NULL;
    memcpy(copy, bytes, n);
    drop(c, slot);
    *slot = (ag__seg_entry){.key = key, .bytes = copy, .n = n, .exec = exec, .used = c->clock};
    return slot;
}

void ag__seg_failed(ag__seg_cache *c, uint64_t key) { add(c->failed, &c->failed_next, key); }

void ag__seg_clear(ag__seg_cache *c) {
    for (int i = 0; i < AG_SEG_CACHE; i++) drop(c, &c->entry[i]);
    memset(c->seen, 0, sizeof c->seen);
    memset(c->failed, 0, sizeof c->failed);
    c->seen_next = c->failed_next = 0;
}
