/* bump.c - the chunked bump allocator of graph/device.h, for memory the
 * engine gets from an allocator it is handed (the step's device arena;
 * tests run it over malloc). */
#include "device.h"

static bool new_chunk(ag__bump *a, size_t bytes) {
    if (a->n == AG_BUMP_MAX_CHUNKS) return false;
    size_t cap = bytes > a->min_chunk ? bytes : a->min_chunk;
    char *base = a->alloc(cap, a->ctx);
    if (!base) return false;
    a->allocs++;
    a->chunk[a->n].base = base;
    a->chunk[a->n].cap = cap;
    a->chunk[a->n].used = 0;
    a->cur = a->n++;
    a->reserved += cap;
    return true;
}

void *ag__bump_alloc(ag__bump *a, size_t bytes) {
    size_t align = a->align ? a->align : 64;
    bytes = (bytes + align - 1) / align * align;
    if (bytes == 0) bytes = align; /* distinct pointers for empty tensors */
    while (a->n == 0 || a->chunk[a->cur].used + bytes > a->chunk[a->cur].cap) {
        if (a->n > 0 && a->cur + 1 < a->n) { /* a chunk left from before the reset's rewind */
            a->chunk[++a->cur].used = 0;
            continue;
        }
        /* doubling the reserve keeps the number of chunks logarithmic */
        if (!new_chunk(a, bytes > a->reserved ? bytes : a->reserved)) return NULL;
    }
    char *p = a->chunk[a->cur].base + a->chunk[a->cur].used;
    a->chunk[a->cur].used += bytes;
    a->step_used += bytes;
    if (a->step_used > a->high) a->high = a->step_used;
    return p;
}

void ag__bump_release_all(ag__bump *a) {
    for (int i = 0; i < a->n; i++) {
        a->release(a->chunk[i].base, a->ctx);
        a->releases++;
    }
    a->n = a->cur = 0;
    a->reserved = a->step_used = 0;
}

void ag__bump_reset(ag__bump *a) {
    if (a->n > 1) { /* coalesce: the next step of these shapes fits in one chunk */
        size_t total = a->reserved;
        ag__bump_release_all(a);
        (void)new_chunk(a, total); /* on failure the next step allocates as it goes, and reports */
    }
    a->cur = 0;
    if (a->n) a->chunk[0].used = 0;
    a->step_used = 0;
}

void ag__bump_mark(const ag__bump *a, size_t *pos, int *chunk) {
    *chunk = a->cur;
    *pos = a->n ? a->chunk[a->cur].used : 0;
}

void ag__bump_rewind(ag__bump *a, size_t pos, int chunk) {
    if (a->n == 0) return;
    size_t dropped = a->chunk[chunk].used - pos;
    for (int i = chunk + 1; i <= a->cur; i++) dropped += a->chunk[i].used;
    a->cur = chunk;
    a->chunk[chunk].used = pos;
    a->step_used -= dropped;
}
