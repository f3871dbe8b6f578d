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
 * Records live in one growing buffer (no allocation once warm); which
 * segment runs how, and the cache of the last AG_SEG_CACHE graphs, is
 * graph/segment_cache.c's, tested without a GPU. */
#include "prelude.cuh"
#include "segment_cache.h"

#include <cstdio>
#include <cstdlib>

extern "C" [[noreturn]] void ag__fatal(const char *op, const char *fmt, ...);

namespace {

/* A record: its header, then the payload its run function reads, 16-byte
 * aligned like malloc's memory. */
struct header {
    int (*run)(const void *payload); /* issues the record: 0, or its error (CUDA's or cuBLAS's) */
    size_t bytes;    /* the payload's, rounded up to 16 */
    const char *op;  /* the op that launched it, for a failure's message (not compared) */
    size_t unused;   /* 32 bytes: the payload stays aligned */
};
static_assert(sizeof(header) % 16 == 0, "records keep 16-byte alignment");

void destroy_exec(void *exec) { cudaGraphExecDestroy((cudaGraphExec_t)exec); }

bool on;
char *buf;
size_t len, cap, labeled; /* the records before `labeled` have their op */
int records;
ag__seg_cache cache; /* graph/segment_cache.c: what runs how (destroy set when graphs go on) */
long long replays, captures, eager_segments, short_segments;

/* Runs n bytes of records on the stream, one by one.  check: a record that
 * fails ends the process, named by its op; else (under a capture, which
 * must end) the run stops there and returns the failing record's index
 * (its error in *error: CUDA's, or the record's own code); -1: all ran. */
int run_records(const char *b, size_t n, bool check, char *error, size_t error_n) {
    int k = 0;
    for (size_t at = 0; at < n; k++) {
        const header *h = (const header *)(b + at);
        int e = h->run(b + at + sizeof(header));
        cudaError_t last = cudaGetLastError();
        if (e != 0 || last != cudaSuccess) {
            if (!check) {
                if (last != cudaSuccess) snprintf(error, error_n, "%s", cudaGetErrorString(last));
                else snprintf(error, error_n, "error %d (cuBLAS's or CUDA's)", e);
                return k;
            }
            if (last != cudaSuccess)
                ag__fatal(h->op ? h->op : "cuda graph", "CUDA launch failed: %s", cudaGetErrorString(last));
            ag__fatal(h->op ? h->op : "cuda graph", "a recorded CUDA call failed: error %d (cuBLAS's or CUDA's)", e);
        }
        at += sizeof(header) + h->bytes;
    }
    return -1;
}

/* The records' op names go aside while the segment is compared and
 * captured: a name is a pointer that says nothing about what runs. */
const char **names;
int names_cap;

void stash_labels(char *b, size_t n, int count) {
    if (count > names_cap) {
        names_cap = count * 2;
        names = (const char **)realloc(names, (size_t)names_cap * sizeof *names);
        if (!names) ag__fatal("cuda graph", "out of memory for %d launch records", count);
    }
    int k = 0;
    for (size_t at = 0; at < n; k++) {
        header *h = (header *)(b + at);
        names[k] = h->op, h->op = nullptr;
        at += sizeof(header) + h->bytes;
    }
}

void restore_labels(char *b, size_t n) {
    int k = 0;
    for (size_t at = 0; at < n; k++) {
        header *h = (header *)(b + at);
        h->op = names[k];
        at += sizeof(header) + h->bytes;
    }
}

/* Captures the records into an executable graph; NULL (the records not
 * run) when the capture fails, said once with the op whose record failed
 * (the labels are stashed in names[] meanwhile). */
cudaGraphExec_t capture(const char *b, size_t n) {
    cudaStream_t s = ag__cuda_stream();
    char why[160] = "";
    int failed = -1;
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    cudaGraph_t graph = nullptr;
    if (e == cudaSuccess) {
        failed = run_records(b, n, false, why, sizeof why);
        e = cudaStreamEndCapture(s, &graph); /* always: the stream leaves capture mode */
    }
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess && failed < 0) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e == cudaSuccess && failed < 0) return exec;
    cudaGetLastError();
    static bool told;
    if (!told) {
        if (failed >= 0)
            fprintf(stderr, "attngrad: a CUDA graph capture failed at %s's launch (%s); that segment runs eagerly\n",
                    names[failed] ? names[failed] : "an unnamed op", why);
        else
            fprintf(stderr, "attngrad: a CUDA graph capture failed (%s); that segment runs eagerly\n",
                    cudaGetErrorString(e));
    }
    told = true;
    return nullptr;
}

} // namespace

/* Every operation the host puts on the stream (a kernel, a cuBLAS call, a
 * copy, a fill) passes here, recorded or not: their count is the launch
 * count of ag_memstats, the GPU step's fixed cost on small models. */
static int64_t enqueued;

extern "C" void ag__count_launch(void) { enqueued++; }
extern "C" int64_t ag__launches(void) { return enqueued; }

extern "C" void *ag__record_begin(size_t bytes, int (*run)(const void *)) {
    enqueued++;
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
    /* the segment is taken out of the record first: a failure below (a
     * fatal error the caller catches) leaves no records to run twice */
    size_t n = len;
    int count = records;
    len = labeled = 0;
    records = 0;
    bool small = count < AG_SEG_MIN_RECORDS;
    if (!small) stash_labels(buf, n, count);
    uint64_t key;
    ag__seg_entry *hit;
    ag__seg_action action = ag__seg_decide(&cache, buf, n, count, &key, &hit);
    if (action == AG_SEG_CAPTURE) {
        cudaGraphExec_t exec = capture(buf, n);
        hit = exec ? ag__seg_keep(&cache, key, buf, n, exec) : nullptr;
        if (exec && !hit) cudaGraphExecDestroy(exec);
        if (hit) captures++;
        else ag__seg_failed(&cache, key);
    }
    if (!small) restore_labels(buf, n);
    if (hit) {
        cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)hit->exec, ag__cuda_stream());
        if (e != cudaSuccess) ag__fatal("cuda graph", "cudaGraphLaunch failed: %s", cudaGetErrorString(e));
        replays++;
    } else {
        eager_segments++;
        short_segments += small;
        run_records(buf, n, true, nullptr, 0);
    }
}

extern "C" void ag__graph_enable(bool enable) {
    cache.destroy = destroy_exec;
    if (!enable) ag__graph_flush();
    on = enable;
}

extern "C" bool ag__graph_enabled(void) { return on; }

extern "C" void ag__graph_stats(int64_t *graph_launches, int64_t *graph_captures, int64_t *eager, int64_t *short_ones) {
    *graph_launches = replays, *graph_captures = captures, *eager = eager_segments, *short_ones = short_segments;
}

/* Tests only (tests/test_graph_records.c, no GPU needed): the segment
 * recorded so far as the cache compares it (labels aside), up to cap bytes
 * into out, and dropped unrun; its length in bytes. */
extern "C" size_t ag__graph_take(char *out, size_t cap) {
    size_t n = len;
    stash_labels(buf, n, records);
    if (n) memcpy(out, buf, n < cap ? n : cap);
    len = labeled = 0;
    records = 0;
    return n;
}

/* Before the stream and the memory the graphs name go away. */
extern "C" void ag__graph_release(void) {
    ag__graph_flush();
    ag__seg_clear(&cache);
}
