/* cuda_graph.cu - a step's launches as CUDA graphs (ag_cuda_graphs).
 *
 * A tape is define-by-run: each step the host runs the model's code again,
 * and that code also does host work a graph cannot hold (the batch's ids
 * and lengths, a gather's counting sort, masks, the optimizer's
 * coefficients) whose results it uploads.  So the host still runs every
 * step, but with graphs on it launches nothing: every kernel, cuBLAS call,
 * device copy and memset is appended to a record of the segment, and
 * uploads are copied into pinned staging at once (their DMA is recorded).
 * A segment ends where the host needs the GPU's results (a value read, a
 * wait, the step's end: ag__graph_flush), and then runs:
 *   - as the CUDA graph captured from a segment with the same bytes (the
 *     same kernels with the same arguments by value: the same shapes, the
 *     same arena and staging addresses), launched with one call;
 *   - else eagerly, record by record; the second time the same bytes are
 *     seen they are captured into a graph for the next time.
 * Equal bytes mean the graph does what the eager launches would, so a
 * segment that differs in any argument (a learning rate that changed, a
 * new batch width) runs eagerly or gets its own graph: correctness never
 * rests on which arguments vary.  The step arena gives the same addresses
 * to the same sequence of allocations, and staging alternates between two
 * arenas by step, so a training step of a fixed shape becomes a handful of
 * graphs that replay from then on.  What varies each step travels as data
 * (dropout's seed, Adam's bias corrections, the clipping scale live in
 * device memory), not as arguments.
 *
 * Records live in one growing buffer (no allocation once warm); the cache
 * keeps the last CACHE_SIZE graphs. */
#include "../ops/cuda/prelude.cuh"

#include <cstdio>
#include <cstdlib>

extern "C" [[noreturn]] void ag__fatal(const char *op, const char *fmt, ...);

namespace {

enum { CACHE_SIZE = 64, SEEN_SIZE = 128, MIN_RECORDS = 4 };

/* A record: its header, then the payload its run function reads, 16-byte
 * aligned like malloc's memory. */
struct header {
    void (*run)(const void *payload);
    size_t bytes;    /* the payload's, rounded up to 16 */
    const char *op;  /* the op that launched it, for a failure's message (not compared) */
    size_t unused;   /* 32 bytes: the payload stays aligned */
};
static_assert(sizeof(header) % 16 == 0, "records keep 16-byte alignment");

struct cached {
    uint64_t key;
    char *bytes; /* the segment's records, op names zeroed */
    size_t n;
    cudaGraphExec_t exec;
    uint64_t used; /* the flush count when last launched: the oldest goes first */
};

bool on;
char *buf;
size_t len, cap, labeled; /* the records before `labeled` have their op */
int records;
cached cache[CACHE_SIZE];
uint64_t seen[SEEN_SIZE]; /* keys run once eagerly: the next sighting is captured */
uint64_t failed[SEEN_SIZE]; /* keys whose capture failed: always eager */
uint64_t flushes;
long long replays, captures, eager_segments;

/* A hash of the records (their length is a multiple of 16: headers of 32
 * bytes, payloads rounded to 16), a word at a time: a step's records are
 * some 100 KB, hashed every step.  The op names are zeroed meanwhile. */
uint64_t fingerprint(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    return h;
}

bool in(const uint64_t *set, uint64_t key) {
    for (int i = 0; i < SEEN_SIZE; i++)
        if (set[i] == key) return true;
    return false;
}

void add(uint64_t *set, uint64_t key) { set[key % SEEN_SIZE] = key; }

/* Runs the records on the stream, one by one; a launch that fails is named
 * by its op. */
void run_records(bool check) {
    for (size_t at = 0; at < len;) {
        const header *h = (const header *)(buf + at);
        h->run(buf + at + sizeof(header));
        if (check) {
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                ag__fatal(h->op ? h->op : "cuda graph", "CUDA kernel launch failed: %s", cudaGetErrorString(e));
        }
        at += sizeof(header) + h->bytes;
    }
}

/* The records' op names go aside while the segment is compared and
 * captured: a name is a pointer that says nothing about what runs. */
const char **names;
int names_cap;

void stash_labels() {
    if (records > names_cap) {
        names_cap = records * 2;
        names = (const char **)realloc(names, (size_t)names_cap * sizeof *names);
        if (!names) ag__fatal("cuda graph", "out of memory for %d launch records", records);
    }
    int k = 0;
    for (size_t at = 0; at < len; k++) {
        header *h = (header *)(buf + at);
        names[k] = h->op, h->op = nullptr;
        at += sizeof(header) + h->bytes;
    }
}

void restore_labels() {
    int k = 0;
    for (size_t at = 0; at < len; k++) {
        header *h = (header *)(buf + at);
        h->op = names[k];
        at += sizeof(header) + h->bytes;
    }
}

cached *lookup(uint64_t key) {
    for (int i = 0; i < CACHE_SIZE; i++)
        if (cache[i].exec && cache[i].key == key && cache[i].n == len && !memcmp(cache[i].bytes, buf, len))
            return &cache[i];
    return nullptr;
}

void drop(cached *c) {
    if (c->exec) cudaGraphExecDestroy(c->exec);
    free(c->bytes);
    *c = cached{};
}

/* Captures the records into a graph and keeps it; nullptr (the records not
 * run) when the capture fails. */
cached *capture(uint64_t key) {
    cudaStream_t s = ag__cuda_stream();
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    run_records(false);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cudaGetLastError();
        static bool told;
        if (!told) fprintf(stderr, "attngrad: a CUDA graph capture failed (%s); that segment runs eagerly\n",
                           cudaGetErrorString(e));
        told = true;
        return nullptr;
    }
    cached *slot = &cache[0];
    for (int i = 0; i < CACHE_SIZE; i++) {
        if (!cache[i].exec) {
            slot = &cache[i];
            break;
        }
        if (cache[i].used < slot->used) slot = &cache[i];
    }
    drop(slot);
    char *copy = (char *)malloc(len);
    if (!copy) {
        cudaGraphExecDestroy(exec);
        return nullptr;
    }
    memcpy(copy, buf, len);
    *slot = cached{key, copy, len, exec, flushes};
    captures++;
    return slot;
}

} // namespace

extern "C" void *ag__record_begin(size_t bytes, void (*run)(const void *)) {
    if (!on) return nullptr;
    bytes = (bytes + 15) & ~(size_t)15;
    size_t need = len + sizeof(header) + bytes;
    if (need > cap) {
        size_t grown = cap ? cap : (size_t)1 << 16;
        while (grown < need) grown *= 2;
        char *b = (char *)realloc(buf, grown);
        if (!b) ag__fatal("cuda graph", "cannot grow the launch record to %zu bytes", grown);
        buf = b, cap = grown;
    }
    header *h = (header *)(buf + len);
    memset(h, 0, sizeof(header) + bytes);
    h->run = run, h->bytes = bytes;
    len = need;
    records++;
    return h + 1;
}

/* The op whose launches were just recorded (ag__cuda_check_launch). */
extern "C" void ag__record_label(const char *op) {
    for (size_t at = labeled; at < len;) {
        header *h = (header *)(buf + at);
        h->op = op;
        at += sizeof(header) + h->bytes;
    }
    labeled = len;
}

extern "C" void ag__graph_flush(void) {
    if (!len) return;
    flushes++;
    cached *c = nullptr;
    uint64_t key = 0;
    bool small = records < MIN_RECORDS; /* one graph launch would not pay for itself */
    if (!small) {
        stash_labels();
        key = fingerprint(buf, len);
        c = lookup(key);
        if (!c && in(seen, key) && !in(failed, key) && !(c = capture(key))) add(failed, key);
        restore_labels();
    }
    if (c) {
        cudaError_t e = cudaGraphLaunch(c->exec, ag__cuda_stream());
        if (e != cudaSuccess) ag__fatal("cuda graph", "cudaGraphLaunch failed: %s", cudaGetErrorString(e));
        c->used = flushes;
        replays++;
    } else {
        if (!small) add(seen, key);
        run_records(true);
        eager_segments++;
    }
    len = labeled = 0;
    records = 0;
}

extern "C" void ag__graph_enable(bool enable) {
    if (!enable) ag__graph_flush();
    on = enable;
}

extern "C" bool ag__graph_enabled(void) { return on; }

extern "C" void ag__graph_stats(int64_t *graph_launches, int64_t *graph_captures, int64_t *eager) {
    *graph_launches = replays, *graph_captures = captures, *eager = eager_segments;
}

/* Before the stream and the memory the graphs name go away. */
extern "C" void ag__graph_release(void) {
    ag__graph_flush();
    for (int i = 0; i < CACHE_SIZE; i++) drop(&cache[i]);
    memset(seen, 0, sizeof seen);
    memset(failed, 0, sizeof failed);
}
