/* cuda_uploads.c - small uploads the GPU only reads, sent once while they
 * repeat (ag__cuda_upload_const; docs/design.md "Uploads sent once"); the
 * copies themselves, staged through pinned memory, are graph/cuda.c's.
 * Built without CUDA, the same functions say so. */
#include "device.h"

#include <stdlib.h>
#include <string.h>

#ifdef AG_HAVE_CUDA

#include <cuda_runtime_api.h>

/* A step uploads the same small arrays again and again, a launch each: the
 * tables of parameters that zero_grad, the norms and the optimizer send
 * (the same every step), the batch's lengths (read by several ops), the
 * LSTM's schedule (the same for every layer).  ag__cuda_upload_const sends
 * such bytes once:
 * - Again in the same step: the step's earlier copy in the arena (a memo
 *   of this step's uploads, compared byte for byte with a host copy), as
 *   long as the arena was not rewound past it (ag__cuda_arena_rewind).
 * - The same in every step: a copy kept in one of KEPT_SLOTS slots of
 *   device memory beside a host shadow, once the bytes came in each of
 *   the last KEPT_AFTER steps (a ring of recent hashes counts the run).
 * - Anything else goes to the step arena as any upload, at its
 *   deterministic address.  Bytes that recur now and then (a cycle of
 *   batches, two models in turn) are not kept: they would push out what
 *   repeats every step and move from slot to slot, and a CUDA graph
 *   replays only a stretch whose addresses stay.
 * Safe eagerly and in graphs: a slot's device bytes equal its shadow at
 * the stream's tail, since every change of the shadow enqueues the copy
 * that makes them so; a lookup hands a slot out only for its shadow's
 * bytes, so whatever is enqueued next reads what it asked for, and a
 * replayed graph's records (copies included) are this step's own.  A slot
 * handed out in this step is not taken for other bytes before the step
 * ends (an op's backward reads the lengths it saved), so kept bytes live
 * at least as long as the arena's would.  Callers never write them.
 * Off under AG_CUDA_EXACT_ALLOC (memcheck sees each upload's own bounds). */
enum { KEPT_SLOTS = 64, KEPT_MAX = 16 << 10, KEPT_SEEN = 128, KEPT_AFTER = 3, STEP_MEMO = 32 };

typedef struct {
    size_t bytes; /* 0: empty */
    uint64_t hash;
    uint64_t step_used; /* the step that last handed it out */
    uint64_t last_used; /* for the least recently used */
} kept_slot;

static kept_slot kept[KEPT_SLOTS];
static char *kept_dev, *kept_shadow; /* KEPT_SLOTS x KEPT_MAX each, made on first use */
static uint64_t kept_step = 1, kept_clock;
static struct {
    uint64_t hash, step; /* the last step the bytes came in */
    int run;             /* in that many steps in a row, up to it */
} kept_seen[KEPT_SEEN];
static unsigned kept_seen_next;
static struct {
    uint64_t hash, era;
    size_t bytes;
    const void *there; /* in the step arena; the host's copy is memo_host's slot */
} memo[STEP_MEMO];
static char *memo_host; /* STEP_MEMO x KEPT_MAX */
static unsigned memo_next;
static uint64_t memo_era = 1; /* a new one each step and each rewind of the arena */
static int64_t kept_hits;

int64_t ag__cuda_kept_uploads(void) { return kept_hits; }

/* A hash of the bytes and their count, 8 at a time. */
static uint64_t bytes_hash(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

static bool kept_ready(void) {
    if (kept_dev) return true;
    kept_shadow = malloc((size_t)KEPT_SLOTS * KEPT_MAX);
    memo_host = malloc((size_t)STEP_MEMO * KEPT_MAX);
    if (!kept_shadow || !memo_host || cudaMalloc((void **)&kept_dev, (size_t)KEPT_SLOTS * KEPT_MAX) != cudaSuccess) {
        cudaGetLastError();
        free(kept_shadow);
        free(memo_host);
        kept_shadow = memo_host = kept_dev = NULL;
        return false;
    }
    return true;
}

static const void *step_upload(const void *host, size_t bytes) {
    void *copy = ag__cuda_arena_alloc(bytes ? bytes : 1);
    ag__cuda_copy(copy, AG_CUDA, host, AG_CPU, bytes);
    return copy;
}

/* How many steps in a row, this one included, the bytes came in. */
static int steps_in_a_row(uint64_t hash) {
    for (int i = 0; i < KEPT_SEEN; i++) {
        if (kept_seen[i].hash != hash || !kept_seen[i].run) continue;
        if (kept_seen[i].step + 1 == kept_step) kept_seen[i].run++;
        else if (kept_seen[i].step != kept_step) kept_seen[i].run = 1;
        kept_seen[i].step = kept_step;
        return kept_seen[i].run;
    }
    unsigned at = kept_seen_next++ % KEPT_SEEN;
    kept_seen[at].hash = hash, kept_seen[at].step = kept_step, kept_seen[at].run = 1;
    return 1;
}

/* This step's earlier copy of the bytes on the GPU, or NULL. */
static const void *memo_find(uint64_t hash, const void *host, size_t bytes) {
    for (int i = 0; i < STEP_MEMO; i++)
        if (memo[i].era == memo_era && memo[i].hash == hash && memo[i].bytes == bytes &&
            !memcmp(memo_host + (size_t)i * KEPT_MAX, host, bytes))
            return memo[i].there;
    return NULL;
}

static const void *memo_upload(uint64_t hash, const void *host, size_t bytes) {
    const void *there = step_upload(host, bytes);
    unsigned at = memo_next++ % STEP_MEMO;
    memcpy(memo_host + (size_t)at * KEPT_MAX, host, bytes);
    memo[at].hash = hash, memo[at].era = memo_era, memo[at].bytes = bytes, memo[at].there = there;
    return there;
}

const void *ag__cuda_upload_const(const void *host, size_t bytes) {
    if (!bytes || bytes > KEPT_MAX || ag__cuda_exact_alloc() || !kept_ready()) return step_upload(host, bytes);
    uint64_t hash = bytes_hash(host, bytes);
    int take = -1;
    for (int i = 0; i < KEPT_SLOTS; i++) {
        kept_slot *k = &kept[i];
        if (k->bytes == bytes && k->hash == hash && !memcmp(kept_shadow + (size_t)i * KEPT_MAX, host, bytes)) {
            k->step_used = kept_step, k->last_used = ++kept_clock;
            kept_hits++;
            return kept_dev + (size_t)i * KEPT_MAX;
        }
        if (k->step_used == kept_step) continue; /* handed out in this step: stays */
        if (take < 0 || (kept[take].bytes && (!k->bytes || k->last_used < kept[take].last_used))) take = i;
    }
    const void *earlier = memo_find(hash, host, bytes);
    if (earlier) {
        kept_hits++;
        return earlier;
    }
    if (steps_in_a_row(hash) < KEPT_AFTER || take < 0) return memo_upload(hash, host, bytes);
    char *there = kept_dev + (size_t)take * KEPT_MAX;
    memcpy(kept_shadow + (size_t)take * KEPT_MAX, host, bytes);
    ag__cuda_copy(there, AG_CUDA, host, AG_CPU, bytes); /* in stream order: after what read the old bytes */
    kept[take] = (kept_slot){.bytes = bytes, .hash = hash, .step_used = kept_step, .last_used = ++kept_clock};
    return there;
}

void ag__cuda_uploads_release(void) {
    if (kept_dev) cudaFree(kept_dev);
    free(kept_shadow);
    free(memo_host);
    kept_dev = kept_shadow = memo_host = NULL;
    memset(kept, 0, sizeof kept);
    memset(kept_seen, 0, sizeof kept_seen);
    memset(memo, 0, sizeof memo);
}

/* The step ended: the slots it held may take other bytes, and its memo's
 * copies went with its arena. */
void ag__cuda_uploads_step_end(void) { kept_step++, memo_era++; }

void ag__cuda_uploads_rewound(void) { memo_era++; }

#else /* no CUDA in this build */

int64_t ag__cuda_kept_uploads(void) { return 0; }
const void *ag__cuda_upload_const(const void *host, size_t bytes) {
    (void)host, (void)bytes;
    ag__fatal("copy", "this attngrad was built without CUDA");
}
void ag__cuda_uploads_step_end(void) {}
void ag__cuda_uploads_rewound(void) {}
void ag__cuda_uploads_release(void) {}

#endif
