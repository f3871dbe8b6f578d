/* memory.c - the counting allocator and the per-step arena.
 *
 * Every heap allocation of the library goes through ag__malloc so a test can
 * prove that a training step in the steady state allocates nothing.  Step
 * memory is a bump arena made of chunks; when a step needed more than one
 * chunk, ag_step_end() replaces them by a single chunk big enough for the
 * whole step, so from then on the same step fits without allocating. */
#include "device.h" /* ag__cuda_arena_high */

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static ag_mem_stats stats;
double ag__arena_bytes_limit;

void *ag__malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ag__fatal("alloc", "out of memory allocating %zu bytes", bytes);
    stats.allocs++;
    return p;
}

void *ag__try_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p) stats.allocs++;
    return p;
}

void *ag__calloc(size_t n, size_t size) {
    void *p = ag__try_calloc(n, size);
    if (!p) ag__fatal("alloc", "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *ag__realloc(void *old, size_t bytes) {
    void *p = realloc(old, bytes ? bytes : 1);
    if (!p) ag__fatal("alloc", "out of memory reallocating %zu bytes", bytes);
    stats.allocs++;
    if (old) stats.frees++;
    return p;
}

void ag__free(void *p) {
    if (!p) return;
    stats.frees++;
    free(p);
}

char *ag__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = ag__malloc(n);
    memcpy(d, s, n);
    return d;
}

/* ---- the arena ---- */

#define ARENA_ALIGN 64
#define ARENA_MIN_CHUNK ((size_t)1 << 20)
#define ARENA_MAX_CHUNKS 64

/* Under AddressSanitizer the arena tells it what is handed out: a chunk
 * starts poisoned, each allocation is unpoisoned to its exact size and
 * followed by a poisoned red zone, and a step's memory is poisoned again
 * when the step ends or a mark is rewound.  So an op that reads or writes
 * past its tensor, or a tensor used after its step, is reported where it
 * happens, as for malloc'd memory; without it every step tensor would be
 * inside one big allocation that ASan sees as valid throughout.  Where
 * valgrind's header is (and ASan is not), the same marks go to memcheck,
 * a new block undefined until written, without the red zone (the layout
 * of a release build stays as it is).  The lifetime check that reads a
 * finished step's tensor on purpose (ag__check_live) is exempt. */
#ifdef AG_ASAN /* graph/internal.h */
#include <sanitizer/asan_interface.h>
#define ARENA_REDZONE ARENA_ALIGN
#define poison(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#elif defined(AG_VALGRIND) /* graph/internal.h; a few instructions each outside valgrind */
#define ARENA_REDZONE 0
#define poison(p, n) VALGRIND_MAKE_MEM_NOACCESS(p, n)
#define unpoison(p, n) VALGRIND_MAKE_MEM_UNDEFINED(p, n)
#else
#define ARENA_REDZONE 0
#define poison(p, n) ((void)(p), (void)(n))
#define unpoison(p, n) ((void)(p), (void)(n))
#endif

typedef struct {
    char *base;
    size_t cap, used;
} chunk;

static chunk chunks[ARENA_MAX_CHUNKS];
static int n_chunks, cur_chunk;
static size_t step_used; /* bytes handed out this step, all chunks */

static const char *mib_or_gib(double bytes, char *buf, size_t n) {
    if (bytes >= (1 << 30)) snprintf(buf, n, "%.1f GiB", bytes / (1 << 30));
    else snprintf(buf, n, "%.0f MiB", bytes / (1 << 20));
    return buf;
}

static void chunk_new(size_t cap) {
    if (n_chunks == ARENA_MAX_CHUNKS) ag__fatal("arena", "more than %d chunks in one step", ARENA_MAX_CHUNKS);
    chunk *c = &chunks[n_chunks];
    c->base = aligned_alloc(ARENA_ALIGN, cap);
    if (!c->base) { /* not counted: the arena stays usable for a caller that recovers (ag_try) */
        char want[32], held[32];
        ag__fatal("arena", "out of memory allocating a %s chunk (the step holds %s already): the batch is too large "
                  "for this process (fewer or shorter sequences per batch)", mib_or_gib((double)cap, want, sizeof want),
                  mib_or_gib((double)step_used, held, sizeof held));
    }
    n_chunks++;
    stats.allocs++;
    c->cap = cap;
    c->used = 0;
    stats.arena_bytes += cap;
    poison(c->base, cap);
}

/* ---- how much memory the process may take ----
 *
 * In a container (docker, a systemd slice, a batch scheduler) the kernel's
 * OOM killer strikes at the cgroup's memory limit, not at the machine's
 * memory, and MemAvailable does not see that limit.  So both are read and
 * the tighter wins.  All of this reads files: only for sizing decisions,
 * never on a step's path. */
const char *ag__cgroup_dir;

/* A number of bytes from dir/file; -1 when absent or unlimited ("max", or
 * cgroup v1's 2^63 rounded down to a page). */
static double read_bytes(const char *dir, const char *file) {
    char path[1200], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double v = -1;
    if (fgets(buf, sizeof buf, f)) {
        char *end;
        v = strtod(buf, &end);
        if (end == buf) v = -1;
    }
    fclose(f);
    return v >= 0 && v < 0x1p60 ? v : -1;
}

/* The value of `key` in dir/memory.stat, or 0. */
static double stat_bytes(const char *dir, const char *key) {
    char path[1200], line[256];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    double v = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ' ') {
            v = strtod(line + n + 1, NULL);
            break;
        }
    if (f) fclose(f);
    return v;
}

/* One cgroup folder's limit and (left not NULL) what is left under it
 * (v2's names, else v1's), folded into the tightest so far.  Usage counts the page cache,
 * whose inactive part the kernel reclaims before it kills: that part is
 * left too (docker's "working set"). */
static void fold_cgroup_dir(const char *dir, double *limit, double *left) {
    double max = read_bytes(dir, "memory.max");
    bool is_v2 = max >= 0;
    if (!is_v2) max = read_bytes(dir, "memory.limit_in_bytes");
    if (max < 0) return;
    if (*limit < 0 || max < *limit) *limit = max;
    if (!left) return; /* the limit alone: usage and memory.stat cost more to read */
    double used = read_bytes(dir, is_v2 ? "memory.current" : "memory.usage_in_bytes");
    if (used >= 0) used -= stat_bytes(dir, is_v2 ? "inactive_file" : "total_inactive_file");
    double rest = used < 0 ? max : used < max ? max - used : 0;
    if (*left < 0 || rest < *left) *left = rest;
}

/* The cgroup at base + path and each of its ancestors down to base: a
 * parent's limit binds its children too. */
static void fold_cgroup_path(const char *base, const char *path, double *limit, double *left) {
    char dir[1024];
    size_t root = strlen(base);
    snprintf(dir, sizeof dir, "%s%s", base, strcmp(path, "/") ? path : "");
    for (;;) {
        fold_cgroup_dir(dir, limit, left);
        char *slash = strlen(dir) > root ? strrchr(dir + root, '/') : NULL;
        if (!slash) break;
        *slash = 0;
    }
}

static bool lists_memory(const char *controllers) {
    for (const char *c = controllers; *c; c += strcspn(c, ",") + (c[strcspn(c, ",")] == ',')) {
        size_t n = strcspn(c, ",");
        if (n == 6 && !strncmp(c, "memory", 6)) return true;
    }
    return false;
}

/* The memory limit of this process's cgroups (v2 "0::/path", v1
 * "N:memory:/path" in /proc/self/cgroup) and, left not NULL, what is left
 * under it; -1 when none is set. */
static void cgroup_room(double *limit, double *left) {
    *limit = -1;
    if (left) *left = -1;
    if (ag__cgroup_dir) {
        fold_cgroup_dir(ag__cgroup_dir, limit, left);
        return;
    }
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        const char *base;
        if (!strcmp(line, "0") && c1 + 1 == c2)
            base = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
        else if (lists_memory(c1 + 1)) base = "/sys/fs/cgroup/memory";
        else continue;
        fold_cgroup_path(base, c2 + 1, limit, left);
    }
    if (f) fclose(f);
}

/* Linux's MemAvailable, else free pages; -1 when unknown. */
static double machine_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    if (kib >= 0) return kib * 1024;
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : -1;
}

/* The address-space limit (ulimit -v) and, left not NULL, what of it this
 * process has not mapped yet; -1 when unlimited.  Read rather than left to
 * malloc to enforce: some kernels (gVisor's) report the limit but never
 * refuse a mapping, and the same batch must be refused everywhere. */
static void address_space_room(double *limit, double *left) {
    struct rlimit rl;
    *limit = -1;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
    *limit = (double)rl.rlim_cur;
    if (!left) return;
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;
    long page = sysconf(_SC_PAGE_SIZE);
    if (f && fscanf(f, "%llu", &pages) == 1 && page > 0) *left = *limit - (double)pages * (double)page;
    if (f) fclose(f);
}

ag__mem_room ag__memory_room(bool with_free) {
    ag__mem_room r = {.total = -1, .free = -1, .total_what = "this machine's memory",
                      .free_what = "available on this machine"};
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) r.total = (double)pages * (double)page;
    if (with_free) r.free = machine_available();
    /* The limit of the process's own cgroups is read once: ag_param asks
     * for every parameter, and a VM's syscalls make a read ~0.2 ms. */
    static double own_limit;
    static bool own_limit_known;
    double limit, left = -1;
    if (with_free || ag__cgroup_dir || !own_limit_known) {
        cgroup_room(&limit, with_free ? &left : NULL);
        if (!ag__cgroup_dir) own_limit = limit, own_limit_known = true;
    } else {
        limit = own_limit;
    }
    if (limit >= 0 && (r.total < 0 || limit < r.total)) r.total = limit, r.total_what = "its cgroup's memory limit";
    if (with_free && left >= 0 && (r.free < 0 || left < r.free))
        r.free = left, r.free_what = "left under its cgroup's memory limit";
    double as_limit, as_left = -1;
    address_space_room(&as_limit, with_free ? &as_left : NULL);
    if (as_limit >= 0 && (r.total < 0 || as_limit < r.total))
        r.total = as_limit, r.total_what = "its address-space limit (ulimit -v)";
    if (with_free && as_left >= 0 && (r.free < 0 || as_left < r.free))
        r.free = as_left, r.free_what = "left under its address-space limit (ulimit -v)";
    return r;
}

/* The size of the next chunk: the arena doubles, unless doubling would not
 * fit in memory and the request alone would.  A step that cannot fit (a
 * batch of very long sentences: attention is n^2 per sentence) is refused
 * here by name rather than granted by an overcommitting malloc and ended by
 * the OOM killer. */
static size_t next_chunk_size(size_t bytes) {
    size_t cap = stats.arena_bytes > ARENA_MIN_CHUNK ? stats.arena_bytes : ARENA_MIN_CHUNK;
    if (cap < bytes) cap = bytes;
    if (cap < ((size_t)1 << 28)) return cap; /* small: not worth reading /proc */
    ag__mem_room room = ag__memory_room(true);
    double have = ag__arena_bytes_limit > 0 ? ag__arena_bytes_limit : room.free;
    if (have < 0 || (double)cap <= have) return cap;
    if ((double)bytes <= have) return bytes;
    char need[32], held[32], avail[32];
    ag__fatal("arena", "the step needs %s more memory (it holds %s already), but %s is %s: the batch is too "
              "large for this process (fewer or shorter sequences per batch)", mib_or_gib((double)bytes, need, sizeof need),
              mib_or_gib((double)step_used, held, sizeof held), mib_or_gib(have, avail, sizeof avail),
              ag__arena_bytes_limit > 0 ? "available" : room.free_what);
}

void *ag__arena_alloc(size_t bytes) {
    if (ag__in_parallel()) { /* an engine bug, maybe on a worker thread: no handler can recover from it */
        fputs("attngrad: internal error: arena allocation inside a parallel part (the arena is not thread-safe)\n",
              stderr);
        abort();
    }
    size_t asked = bytes;
    bytes = ((bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1)) + ARENA_REDZONE;
    while (n_chunks == 0 || chunks[cur_chunk].used + bytes > chunks[cur_chunk].cap) {
        if (n_chunks > 0 && cur_chunk + 1 < n_chunks) {
            chunks[++cur_chunk].used = 0; /* reuse a chunk left over from a rewind */
            continue;
        }
        chunk_new(next_chunk_size(bytes));
        cur_chunk = n_chunks - 1;
    }
    chunk *c = &chunks[cur_chunk];
    void *p = c->base + c->used;
    c->used += bytes;
    step_used += bytes;
    if (step_used > stats.arena_high) stats.arena_high = step_used;
    unpoison(p, asked);
    return p;
}

void *ag__arena_zalloc(size_t bytes) {
    void *p = ag__arena_alloc(bytes);
    ag__zero(p, bytes);
    return p;
}

/* memset(p, 0, bytes), in 256 KB pieces on the pool when large: zeroing a
 * gradient buffer is bound by memory bandwidth, which two cores share
 * better than one uses. */
enum { ZERO_GRAIN = 1 << 18 };

static void zero_range(void *ctx, int64_t begin, int64_t end) { memset((char *)ctx + begin, 0, (size_t)(end - begin)); }

void ag__zero(void *p, size_t bytes) {
    if (bytes < 2 * ZERO_GRAIN) memset(p, 0, bytes);
    else ag__parallel_range((int64_t)bytes, ZERO_GRAIN, zero_range, p);
}

static void zero_span(void *ctx, int s, int64_t begin, int64_t end) {
    memset((char *)((void **)ctx)[s] + begin, 0, (size_t)(end - begin));
}

/* count host arrays in one parallel loop: many arrays below 2 ZERO_GRAIN
 * (a model's 300 x 300 weights) no longer go one by one on the caller. */
void ag__zero_many(void *const *p, const int64_t *bytes, int count) {
    ag__parallel_spans(count, bytes, ZERO_GRAIN, zero_span, (void *)p);
}

static void arena_free_all(void) {
    for (int i = 0; i < n_chunks; i++) {
        unpoison(chunks[i].base, chunks[i].cap);
        free(chunks[i].base);
        stats.frees++;
    }
    n_chunks = cur_chunk = 0;
    stats.arena_bytes = 0;
}

/* Every other step starts one alignment unit in: a step of the same shape
 * then puts no tensor where the last step had one, so a tensor kept past
 * ag_step_end still reads its own (old) step stamp and is refused, instead
 * of aliasing its twin in the new step (graph/error.c, ag__stale). */
void ag__arena_reset(void) {
    static unsigned resets;
    size_t start = (++resets & 1) ? ARENA_ALIGN : 0;
    if (n_chunks > 1) { /* coalesce: next time the whole step fits in one chunk */
        size_t total = stats.arena_bytes + ARENA_ALIGN;
        arena_free_all();
        chunk_new(total);
    }
    for (int i = 0; i <= cur_chunk && i < n_chunks; i++) poison(chunks[i].base, chunks[i].used);
    cur_chunk = 0;
    if (n_chunks) chunks[0].used = start < chunks[0].cap ? start : 0;
    step_used = 0;
}

void ag__arena_mark(size_t *pos, int *chunk_index) {
    *chunk_index = cur_chunk;
    *pos = n_chunks ? chunks[cur_chunk].used : 0;
}

void ag__arena_rewind(size_t pos, int chunk_index) {
    if (n_chunks == 0) return;
    size_t dropped = 0;
    for (int i = chunk_index + 1; i <= cur_chunk; i++) dropped += chunks[i].used;
    dropped += chunks[chunk_index].used - pos;
    for (int i = chunk_index + 1; i <= cur_chunk; i++) poison(chunks[i].base, chunks[i].used);
    poison(chunks[chunk_index].base + pos, chunks[chunk_index].used - pos);
    cur_chunk = chunk_index;
    chunks[cur_chunk].used = pos;
    step_used -= dropped;
}

void ag__arena_shutdown(void) { arena_free_all(); }

void ag_memstats_reset_high(void) {
    stats.arena_high = step_used;
    ag__cuda_arena_reset_high();
}

ag_mem_stats ag_memstats(void) {
    ag_mem_stats s = stats;
    s.device_arena_high = ag__cuda_arena_high();
    s.device_waits = ag__cuda_host_waits();
    s.device_launches = ag__cuda_launches();
    s.device_kept_uploads = ag__cuda_kept_uploads();
    ag__cuda_graph_counts(&s.graph_launches, &s.graph_captures, &s.eager_segments, &s.short_segments);
    return s;
}
