/* emulator.cpp - the CUDA runtime and cuBLAS calls of attngrad, run on one
 * CPU core, for testing the CUDA backend where there is no GPU (built with
 * -Dgpu_emulator=true; docs/design.md, "Testing the CUDA backend without a
 * GPU").
 *
 * It keeps what makes GPU code go wrong on a GPU, so that the same bugs
 * show here:
 *   - the GPU runs behind the host.  Kernels, copies, memsets and products
 *     are queued in stream order and run only when the host waits (a
 *     synchronize, an event, a copy to pageable memory), so a missing wait
 *     reads stale results, and host memory a queued copy reads from
 *     (pinned staging) is read when the copy runs, not when it was queued;
 *   - the host cannot touch device memory: it is mapped without access
 *     except while queued work runs, and a host access faults, named;
 *   - a kernel that runs past the end of an allocation faults on a guard
 *     page (each allocation ends at one), named, and one given a pointer to
 *     pageable host memory or freed memory is stopped at its launch;
 *   - fresh device memory holds NaNs (all bits set), not zeros;
 *   - a launch with a bad shape, a copy or product outside its allocation,
 *     a copy of the wrong kind, a call a stream capture forbids: the
 *     error the runtime gives;
 *   - a block's threads meet at __syncthreads, __syncwarp and the shuffles
 *     as on a GPU (fibers), and a thread that exits before a barrier its
 *     block or warp waits at is reported, as is a deadlock;
 *   - graphs: a capture records the stream's work without running it, and
 *     a launch replays it.
 *   - no run order is promised: threads and blocks run in index order, or
 *     in reverse (AG_CUDA_EMULATOR_ORDER), so a read that lacks a barrier
 *     before it reads stale values in one order or the other.
 * What it cannot see: races between threads of a kernel beyond what the
 * two orders show (they run one at a time between barriers), the speed of anything, and the GPU's own arithmetic (exp, FMA
 * contraction: nvcc builds with -fmad=false, this with -ffp-contract=off).
 *
 * One CPU thread runs the kernels and copies (the BLAS may use its own
 * threads for a product); the API is guarded by one lock. */
#include "cublas_v2.h"
#include "cuda_runtime.h"

#include <atomic>
#include <cblas.h>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <dlfcn.h>
#include <execinfo.h>
#include <iterator>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
static bool under_valgrind() { return RUNNING_ON_VALGRIND; }
#else
static bool under_valgrind() { return false; } /* without the header, valgrind's users find out by its report */
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cuda emulator: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

std::recursive_mutex api_lock;
#define API std::lock_guard<std::recursive_mutex> guard_(api_lock)

cudaError_t last_error = cudaSuccess;
cudaError_t fail(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

size_t page_size() {
    static size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* ---- memory ---- */

struct allocation {
    char *p;      /* what cudaMalloc returned */
    size_t bytes; /* asked for */
    char *map;    /* the mapping: the pages holding [p, p + bytes), then a guard page */
    size_t map_len;
    char *lo, *hi; /* the pages touched so far (page-aligned; empty when equal) */
};
std::map<uintptr_t, allocation> device_mem; /* by p */
std::map<uintptr_t, size_t> pinned_mem;     /* cudaMallocHost's, by address */
size_t device_bytes, device_total = (size_t)8 << 30;
volatile sig_atomic_t device_open; /* queued work is running: device memory may be touched */
const void *running_kernel;

/* A kernel, for a report: its symbol where the dynamic table has it, else
 * where addr2line finds it ("addr2line -fCe FILE 0xOFFSET"). */
void name_kernel(const void *kernel, char *buf, size_t n) {
    Dl_info info;
    if (kernel && dladdr(kernel, &info) && info.dli_fname) {
        if (info.dli_sname)
            snprintf(buf, n, "kernel %s", info.dli_sname);
        else
            snprintf(buf, n, "the kernel at %s+%#lx", info.dli_fname,
                     (unsigned long)((uintptr_t)kernel - (uintptr_t)info.dli_fbase));
    } else {
        snprintf(buf, n, "the kernel at %p", kernel);
    }
}
void kernel_name(char *buf, size_t n) { name_kernel(running_kernel, buf, n); }

/* The allocation holding [p, p + bytes), or null. */
allocation *device_range(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = device_mem.upper_bound(a);
    if (it == device_mem.begin()) return nullptr;
    --it;
    allocation &m = it->second;
    uintptr_t begin = (uintptr_t)m.p;
    if (a < begin || a + bytes > begin + (m.bytes ? m.bytes : 1)) return nullptr;
    return &m;
}

bool is_pinned(const void *p) {
    uintptr_t a = (uintptr_t)p;
    auto it = pinned_mem.upper_bound(a);
    if (it == pinned_mem.begin()) return false;
    --it;
    return a < it->first + it->second;
}

/* Device memory is mapped without access, so that the host faults on it.
 * While queued work runs, the pages touched so far are opened; a page
 * touched for the first time faults once, and the handler opens it and
 * fills it with NaNs (on_fault).  mprotect costs in proportion to the
 * resident pages, so an untouched allocation (cuBLAS's workspace, the
 * unused end of an arena chunk) costs nothing at each wait. */
void open_device(bool open) {
    if (open == (bool)device_open) return;
    for (auto &kv : device_mem) {
        allocation &m = kv.second;
        if (m.lo < m.hi && mprotect(m.lo, (size_t)(m.hi - m.lo), open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
            die("mprotect failed");
    }
    device_open = open;
}

/* Opens [from, to) (page-aligned) of m for queued work, with the pages
 * between it and the range already open: the new ones filled with NaNs
 * (all bits set, in float and double) as fresh device memory.  Only while
 * no other thread may touch them: a page another thread wrote between the
 * mprotect and the fill would lose the write.  So a kernel's first touch
 * opens pages from the fault handler (kernels run on this thread alone),
 * and a product opens its operands before the BLAS's threads start. */
bool open_pages(allocation &m, char *from, char *to) {
    bool had = m.lo < m.hi;
    char *lo = had && m.lo < from ? m.lo : from, *hi = had && m.hi > to ? m.hi : to;
    if (had && lo == m.lo && hi == m.hi) return true;
    if (mprotect(lo, (size_t)(hi - lo), PROT_READ | PROT_WRITE) != 0) return false;
    if (had) {
        memset(lo, 0xff, (size_t)(m.lo - lo));
        memset(m.hi, 0xff, (size_t)(hi - m.hi));
    } else {
        memset(lo, 0xff, (size_t)(hi - lo));
    }
    m.lo = lo, m.hi = hi;
    return true;
}

char *page_down(const void *p) { return (char *)((uintptr_t)p & ~(uintptr_t)(page_size() - 1)); }
char *page_up(const void *p) { return page_down((const char *)p + page_size() - 1); }

/* Opens the pages of [p, p + bytes), inside one allocation. */
void open_range(const void *p, size_t bytes) {
    allocation *m = bytes ? device_range(p, bytes) : nullptr;
    if (m && !open_pages(*m, page_down(p), page_up((const char *)p + bytes))) die("mprotect failed");
}

/* ---- the queue: the GPU's work in stream order ---- */

struct op {
    std::function<void()> run;
    cudaStream_t stream;
};

std::deque<op> queue;
uint64_t queued, ran; /* ops ever queued, ever run: op k (from 1) has run when ran >= k */

void drain_to(uint64_t k) {
    if (ran >= k) return;
    open_device(true);
    while (ran < k) {
        op o = std::move(queue.front());
        queue.pop_front();
        o.run();
        ran++;
    }
    open_device(false);
}
void drain_all() { drain_to(queued); }

} // namespace

/* ---- streams, capture ---- */

struct ag__emu_graph {
    std::vector<std::function<void()>> ops;
};
struct ag__emu_graph_exec {
    std::vector<std::function<void()>> ops;
};
struct ag__emu_stream {
    uint64_t last = 0;               /* the last op queued on it */
    ag__emu_graph *capture = nullptr; /* capturing into */
};
struct ag__emu_event {
    uint64_t at = 0; /* complete once op `at` has run */
    bool timing = true, recorded = false;
    double ms = 0; /* when it completed */
    int polls = 0; /* cudaEventQuery's answers "not ready" since it was recorded */
};

namespace {

ag__emu_stream legacy_stream;
ag__emu_stream *stream_of(cudaStream_t s) { return s ? s : &legacy_stream; }
int capturing;       /* streams capturing now */
bool capture_broken; /* a forbidden call since the capture began */

/* A call that a capture forbids (it would wait, or allocate): refused, and
 * the capture invalidated, as the runtime does in the global and
 * thread-local capture modes. */
bool forbidden_in_capture() {
    if (!capturing) return false;
    capture_broken = true;
    (void)fail(cudaErrorStreamCaptureUnsupported);
    return true;
}

double now_ms() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Queues f on s, or adds it to the graph s is capturing. */
void enqueue(cudaStream_t s, std::function<void()> f) {
    ag__emu_stream *st = stream_of(s);
    if (st->capture) {
        st->capture->ops.push_back(std::move(f));
        return;
    }
    queue.push_back({std::move(f), s});
    st->last = ++queued;
    if (queue.size() >= 4096) drain_all(); /* the GPU keeps up, eventually */
}

/* ---- kernels: a block's threads as fibers ---- */

enum { STACK_BYTES = 256 << 10 };

struct fiber {
    void *sp;
    char *stack; /* held while the thread is suspended at a barrier */
    uint3 tid;
    int lane, warp;
    enum { NEW, WAITING_BLOCK, WAITING_WARP, RELEASED, DONE } state;
};

std::vector<char *> free_stacks;
std::vector<fiber> fibers;
std::vector<unsigned char> warp_slots; /* 32 lanes x 8 bytes per warp */
fiber *current;
void *scheduler_sp;
const std::function<void()> *body;
bool barrier_hit;

char *take_stack() {
    if (!free_stacks.empty()) {
        char *s = free_stacks.back();
        free_stacks.pop_back();
        return s;
    }
    size_t guard = page_size();
    char *m = (char *)mmap(nullptr, STACK_BYTES + guard, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) die("no memory for a thread's stack");
    mprotect(m, guard, PROT_NONE); /* a stack overflow faults */
    return m + guard;
}

#if defined(__x86_64__)
/* Saves the callee-saved registers on this stack, stores its pointer in
 * *from, and resumes the stack `to` (System V x86-64). */
extern "C" void ag__emu_switch(void **from, void *to);
asm(".text\n"
    ".globl ag__emu_switch\n"
    ".hidden ag__emu_switch\n"
    ".type ag__emu_switch,@function\n"
    "ag__emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size ag__emu_switch,.-ag__emu_switch\n");

[[noreturn]] void fiber_main();

/* A fresh stack that ag__emu_switch resumes into fiber_main, aligned as
 * after a call. */
void *fresh_context(char *stack) {
    uintptr_t top = ((uintptr_t)stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                             /* fiber_main's return address: it never returns */
    *--sp = (void *)&fiber_main;                 /* ag__emu_switch's ret */
    for (int i = 0; i < 6; i++) *--sp = nullptr; /* rbp rbx r12-r15 */
    return sp;
}
void switch_to(void **from, void *to) { ag__emu_switch(from, to); }
#else
/* Elsewhere ucontext: slower (a system call a switch), the same order. */
std::map<void *, ucontext_t> contexts;
[[noreturn]] void fiber_main();
void *fresh_context(char *stack) {
    ucontext_t &c = contexts[stack];
    getcontext(&c);
    c.uc_stack.ss_sp = stack;
    c.uc_stack.ss_size = STACK_BYTES;
    c.uc_link = nullptr;
    makecontext(&c, (void (*)())fiber_main, 0);
    return &c;
}
ucontext_t scheduler_context;
void switch_to(void **from, void *to) {
    ucontext_t *self = from == &scheduler_sp ? &scheduler_context : &contexts[current->stack];
    *from = self;
    swapcontext(self, (ucontext_t *)to);
}
#endif

void set_coordinates(const fiber &f) { threadIdx = f.tid; }

/* The order threads and blocks run in: AG_CUDA_EMULATOR_ORDER=forward
 * (the default) or reverse.  A GPU promises none, so a kernel whose result
 * depends on it has a race: a thread reading what another writes without a
 * barrier between them reads the new value in one order and the old in the
 * other, whichever thread comes first.  CI runs the op tests both ways. */
bool reverse_order() {
    const char *e = getenv("AG_CUDA_EMULATOR_ORDER");
    if (!e || !*e || !strcmp(e, "forward")) return false;
    if (!strcmp(e, "reverse")) return true;
    die("AG_CUDA_EMULATOR_ORDER=%s: expected forward or reverse", e);
}
bool reversed;

/* fibers[t], t-th in the run order */
fiber &nth(int t, int n) { return fibers[(size_t)(reversed ? n - 1 - t : t)]; }

/* The chain: until a thread of the block meets a barrier, a thread that
 * finishes hands its stack to the next in the run order (chain_next of
 * chain_n) and runs it, as the scheduler would have, without the two
 * switches and a fresh stack a thread (most kernels meet no barrier).
 * The first barrier ends the chain: the waiting thread keeps the stack, and
 * the threads after it start on their own, as they always did. */
int chain_next, chain_n;

void fiber_main() {
    for (;;) {
        (*body)();
        current->state = fiber::DONE;
        if (barrier_hit || chain_next >= chain_n) break;
        fiber &next = nth(chain_next++, chain_n);
        next.stack = current->stack;
        current->stack = nullptr;
        current = &next;
        set_coordinates(next);
        next.state = fiber::RELEASED;
    }
    switch_to(&current->sp, scheduler_sp);
    die("a finished thread was resumed");
}

/* Runs f (and, in the chain, the threads after it) until it finishes or
 * waits at a barrier. */
void resume(fiber &f) {
    current = &f;
    set_coordinates(f);
    if (f.state == fiber::NEW) {
        f.stack = take_stack();
        f.sp = fresh_context(f.stack);
    }
    f.state = fiber::RELEASED;
    switch_to(&scheduler_sp, f.sp);
    fiber *last = current; /* f, or the chain's last thread */
    current = nullptr;
    if (last->state == fiber::DONE) {
        free_stacks.push_back(last->stack);
        last->stack = nullptr;
    }
}

void wait_at(int kind) {
    if (!current) die("a barrier outside a kernel");
    barrier_hit = true;
    current->state = kind == 0 ? fiber::WAITING_BLOCK : fiber::WAITING_WARP;
    switch_to(&current->sp, scheduler_sp);
    set_coordinates(*current);
}

void describe_block(char *buf, size_t n) {
    char name[256];
    kernel_name(name, sizeof name);
    snprintf(buf, n, "%s, block (%u,%u,%u) of (%u,%u,%u), %u x %u x %u threads", name, blockIdx.x, blockIdx.y,
             blockIdx.z, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y, blockDim.z);
}

/* Releases the waiting threads a barrier lets go: a block barrier when
 * every thread of the block waits at one, a warp's when all 32 lanes wait
 * at one.  false when none can go: a deadlock, or threads that exited
 * before a barrier the others wait at. */
bool release(int nthreads) {
    int done = 0, at_block = 0;
    for (auto &f : fibers) {
        done += f.state == fiber::DONE;
        at_block += f.state == fiber::WAITING_BLOCK;
    }
    char where[400];
    if (at_block && at_block + done == nthreads) {
        if (done) {
            describe_block(where, sizeof where);
            die("%s: %d threads wait at __syncthreads while %d have exited (undefined on a GPU)", where, at_block,
                done);
        }
        for (auto &f : fibers) f.state = fiber::RELEASED;
        return true;
    }
    bool any = false;
    int warps = (nthreads + 31) / 32;
    for (int w = 0; w < warps; w++) {
        int lanes = nthreads - 32 * w < 32 ? nthreads - 32 * w : 32, waiting = 0, exited = 0;
        for (int l = 0; l < lanes; l++) {
            waiting += fibers[32 * w + l].state == fiber::WAITING_WARP;
            exited += fibers[32 * w + l].state == fiber::DONE;
        }
        if (!waiting || waiting + exited < lanes) continue;
        if (exited || lanes < 32) {
            describe_block(where, sizeof where);
            die("%s: a full-mask shuffle or __syncwarp in warp %d with %d of 32 lanes (the others %s): undefined on "
                "a GPU",
                where, w, waiting, lanes < 32 ? "do not exist" : "have exited");
        }
        for (int l = 0; l < 32; l++) fibers[32 * w + l].state = fiber::RELEASED;
        any = true;
    }
    return any;
}

void run_block(int nthreads) {
    for (int t = 0; t < nthreads; t++) {
        fiber &f = fibers[t];
        f.state = fiber::NEW;
        f.stack = nullptr;
    }
    barrier_hit = false;
    chain_n = nthreads;
    for (chain_next = 0; chain_next < nthreads;) resume(nth(chain_next++, nthreads));
    if (!barrier_hit) return;
    for (;;) {
        bool all_done = true;
        for (auto &f : fibers) all_done &= f.state == fiber::DONE;
        if (all_done) return;
        if (!release(nthreads)) {
            char where[400];
            describe_block(where, sizeof where);
            die("%s: deadlock: threads wait at different barriers (__syncthreads in one, a shuffle in another)", where);
        }
        for (int t = 0; t < nthreads; t++)
            if (nth(t, nthreads).state == fiber::RELEASED) resume(nth(t, nthreads));
    }
}

void run_kernel(const void *kernel, dim3 grid, dim3 block, const std::function<void()> &thread_body) {
    int nthreads = (int)(block.x * block.y * block.z);
    fibers.assign((size_t)nthreads, fiber{});
    for (int t = 0; t < nthreads; t++) {
        fiber &f = fibers[t];
        f.tid = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
        f.lane = t % 32, f.warp = t / 32;
    }
    warp_slots.assign((size_t)(nthreads + 31) / 32 * 32 * 8, 0);
    gridDim = grid, blockDim = block;
    body = &thread_body;
    running_kernel = kernel;
    reversed = reverse_order();
    unsigned long long blocks = (unsigned long long)grid.x * grid.y * grid.z;
    for (unsigned long long b = 0; b < blocks; b++) {
        unsigned long long k = reversed ? blocks - 1 - b : b;
        blockIdx = {(unsigned)(k % grid.x), (unsigned)(k / grid.x % grid.y), (unsigned)(k / grid.x / grid.y)};
        run_block(nthreads);
    }
    running_kernel = nullptr;
    body = nullptr;
}

} // namespace

void ag__emu_syncthreads(void) { wait_at(0); }

void ag__emu_syncwarp(unsigned mask) {
    if (mask != 0xffffffffu) die("__syncwarp or a shuffle with mask %#x: the emulator knows only full warps", mask);
    wait_at(1);
}

int ag__emu_lane(void) {
    if (!current) die("a shuffle outside a kernel");
    return current->lane;
}

void *ag__emu_warp_slot(int lane) {
    if (lane < 0 || lane > 31) die("shuffle to lane %d", lane);
    return &warp_slots[((size_t)current->warp * 32 + (size_t)lane) * 8];
}

void ag__emu_check_pointer_argument(const void *kernel, int index, const void *p) {
    API;
    /* one past the end counts as inside: an empty slice's pointer */
    if (!p || device_range(p, 1) || device_range((const char *)p - 1, 1) || is_pinned(p)) return;
    char name[300];
    name_kernel(kernel, name, sizeof name);
    die("%s: argument %d is %p, neither a live device allocation nor pinned host memory (so pageable host memory, "
        "or freed): a GPU faults on it",
        name, index, p);
}

void ag__emu_enqueue_kernel(cudaStream_t stream, const void *kernel, dim3 grid, dim3 block, size_t shared,
                           std::function<void()> thread_body) {
    API;
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || !threads || threads > 1024 || block.z > 64 || grid.y > 65535 ||
        grid.z > 65535) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    if (shared) { /* no kernel here declares extern __shared__ */
        fail(cudaErrorInvalidValue);
        fprintf(stderr, "cuda emulator: dynamic shared memory (%zu bytes) is not emulated\n", shared);
        return;
    }
    enqueue(stream, [kernel, grid, block, f = std::move(thread_body)]() { run_kernel(kernel, grid, block, f); });
}

/* For the emulated NCCL (nccl.cpp): f queued on s and run at once, with
 * all the work queued before it, device memory open meanwhile (f opens
 * the pages it touches with ag__emu_open_range).  Not in a capture. */
cudaError_t ag__emu_run_now(cudaStream_t s, std::function<void()> f) {
    API;
    if (stream_of(s)->capture) return fail(cudaErrorStreamCaptureUnsupported);
    enqueue(s, std::move(f));
    drain_all();
    return cudaSuccess;
}

/* Whether [p, p + bytes) lies in one live device allocation. */
bool ag__emu_is_device_range(const void *p, size_t bytes) {
    API;
    return device_range(p, bytes ? bytes : 1) != nullptr;
}

/* Opens [p, p + bytes) of a device allocation, from queued work, before
 * something other than this thread's own loads and stores reads it (a
 * library call, another process). */
void ag__emu_open_range(const void *p, size_t bytes) { open_range(p, bytes); }

/* ---- faults: which allocation, and whose ---- */

namespace {

/* Faults come from this thread (a product opens its operands first), but
 * a stray one from another thread must not interleave with it. */
std::atomic_flag fault_lock = ATOMIC_FLAG_INIT;

void report(const char *msg, int n) {
    if (n <= 0) return;
    ssize_t w = write(2, msg, (size_t)n);
    (void)w;
    void *frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
}

void on_fault(int sig, siginfo_t *info, void *) {
    while (fault_lock.test_and_set(std::memory_order_acquire)) {
    }
    char *a = (char *)info->si_addr;
    char msg[700], name[300];
    kernel_name(name, sizeof name);
    int n = 0;
    for (auto &kv : device_mem) {
        allocation &m = kv.second;
        char *guard = m.map + m.map_len - page_size();
        if (a < m.map || a >= m.map + m.map_len) continue;
        if (a >= guard || (a >= m.p + m.bytes && running_kernel))
            n = snprintf(msg, sizeof msg,
                         "cuda emulator: %s ran past the end of a device allocation of %zu bytes at %p "
                         "(address %p, %zu bytes past its end)\n",
                         running_kernel ? name : "a copy or product", m.bytes, (void *)m.p, (void *)a,
                         (size_t)(a - (m.p + m.bytes)));
        else if (device_open && open_pages(m, page_down(a), page_down(a) + page_size())) {
            fault_lock.clear(std::memory_order_release);
            return;
        } else if (!device_open)
            n = snprintf(msg, sizeof msg,
                         "cuda emulator: the host touched device memory (address %p, in an allocation of %zu bytes "
                         "at %p): only kernels and copies may\n",
                         (void *)a, m.bytes, (void *)m.p);
        break;
    }
    if (!n && running_kernel)
        n = snprintf(msg, sizeof msg, "cuda emulator: %s faulted at %p, outside any device allocation\n", name,
                     (void *)a);
    report(msg, n);
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_fault_handler() {
    static bool done;
    if (done) return;
    done = true;
    static char alt[64 << 10]; /* a fault on a fiber's exhausted stack still reports */
    stack_t ss = {};
    ss.ss_sp = alt, ss.ss_size = sizeof alt;
    sigaltstack(&ss, nullptr);
    struct sigaction sa = {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

/* A count from the environment (unset or empty: dflt); anything but a
 * whole number up to max is refused by name, not read as 0. */
unsigned long long env_count(const char *name, unsigned long long dflt, unsigned long long max) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end = nullptr;
    errno = 0;
    unsigned long long v = strtoull(e, &end, 10);
    if (*e == '-' || *end || errno || v > max) die("%s=%s: expected a whole number from 0 to %llu", name, e, max);
    return v;
}

/* Under valgrind there is no device: device memory is pages the host may
 * not touch, opened by the SIGSEGV handler at a kernel's first touch
 * (open_device, on_fault), which valgrind's memcheck cannot follow (it
 * reports the touch as an invalid write and the program dies).  The tests
 * it runs then take their CPU paths, as on a machine without a GPU. */
int device_count() {
    if (under_valgrind()) return 0;
    return (int)env_count("AG_CUDA_EMULATOR_DEVICES", 1, 64);
}
int current_device;

} // namespace

/* ---- the runtime API ---- */

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    API;
    *count = device_count();
    return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    API;
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    current_device = device;
    device_total = (size_t)env_count("AG_CUDA_EMULATOR_MEMORY", device_total, 1ULL << 50);
    install_fault_handler();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "attngrad CUDA emulator (CPU)");
    snprintf(prop->uuid.bytes, sizeof prop->uuid.bytes, "agemu%d", device & 0xffff);
    prop->totalGlobalMem = device_total;
    prop->major = 0, prop->minor = 0;
    prop->multiProcessorCount = 1;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
    *version = 13000;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *version) {
    *version = 13000;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    API;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    drain_all();
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError(void) {
    API;
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

cudaError_t cudaMalloc(void **p, size_t bytes) {
    API;
    *p = nullptr;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    if (device_bytes + bytes > device_total) return fail(cudaErrorMemoryAllocation);
    install_fault_handler();
    /* The allocation ends at a guard page, 8-byte aligned: cudaMalloc's
     * 256 would leave up to 255 unguarded bytes past the end, and no kernel
     * here loads more than 8 bytes at once (no float4).  So one double past
     * the end faults, as does one float past an even count. */
    size_t span = round_up(bytes ? bytes : 1, 8), len = round_up(span, page_size()) + page_size();
    char *map = (char *)mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
    char *guard = map + len - page_size();
    allocation m = {guard - span, bytes, map, len, nullptr, nullptr}; /* its pages open (NaN) as work touches them */
    device_mem[(uintptr_t)m.p] = m;
    device_bytes += bytes;
    *p = m.p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    API;
    if (!p) return cudaSuccess;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    drain_all(); /* cudaFree waits for the device */
    auto it = device_mem.find((uintptr_t)p);
    if (it == device_mem.end()) return fail(cudaErrorInvalidDevicePointer);
    munmap(it->second.map, it->second.map_len);
    device_bytes -= it->second.bytes;
    device_mem.erase(it);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    API;
    *p = nullptr;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    void *m = aligned_alloc(4096, round_up(bytes ? bytes : 1, 4096));
    if (!m) return fail(cudaErrorMemoryAllocation);
    pinned_mem[(uintptr_t)m] = bytes ? bytes : 1;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    API;
    if (!p) return cudaSuccess;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    drain_all();
    auto it = pinned_mem.find((uintptr_t)p);
    if (it == pinned_mem.end()) return fail(cudaErrorInvalidValue);
    pinned_mem.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    API;
    *free_bytes = device_total - device_bytes;
    *total_bytes = device_total;
    return cudaSuccess;
}

} // extern "C"

namespace {

/* A copy's pointers must be what its kind says, and inside their
 * allocations. */
bool copy_ok(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((dst_dev ? device_range(dst, bytes) != nullptr : !ag__emu_is_device_pointer(dst)) &&
        (src_dev ? device_range(src, bytes) != nullptr : !ag__emu_is_device_pointer(src)))
        return true;
    fprintf(stderr, "cuda emulator: a copy of %zu bytes, kind %d, from %p to %p: %s\n", bytes, (int)kind, src, dst,
            "a pointer is not of that kind, or the bytes run past its allocation");
    return false;
}

/* Queues a copy; returns after it ran where the host may read or reuse its
 * buffer at once (pageable memory), as the runtime does. */
cudaError_t copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s, bool sync) {
    if (!bytes) return cudaSuccess;
    if (!copy_ok(dst, src, bytes, kind)) return fail(cudaErrorInvalidValue);
    bool pageable_src = kind == cudaMemcpyHostToDevice && !is_pinned(src);
    bool pageable_dst = kind == cudaMemcpyDeviceToHost && !is_pinned(dst);
    if ((sync || pageable_src || pageable_dst || kind == cudaMemcpyHostToHost) && forbidden_in_capture())
        return cudaErrorStreamCaptureUnsupported;
    if (pageable_src) { /* the runtime stages pageable bytes before it returns */
        std::vector<char> staged((const char *)src, (const char *)src + bytes);
        enqueue(s, [dst, staged = std::move(staged)]() { memcpy(dst, staged.data(), staged.size()); });
    } else {
        enqueue(s, [dst, src, bytes]() { memcpy(dst, src, bytes); });
    }
    if (sync || pageable_dst || kind == cudaMemcpyHostToHost) drain_to(stream_of(s)->last);
    return cudaSuccess;
}

} // namespace

extern "C" {

int ag__emu_is_device_pointer(const void *p) { return device_range(p, 1) != nullptr; }

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    API;
    return copy(dst, src, bytes, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    API;
    return copy(dst, src, bytes, kind, s, false);
}

/* Device to device only: the one kind attngrad asks for (ag__cuda_copy_rows). */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
    API;
    if (!width || !height) return cudaSuccess;
    if (kind != cudaMemcpyDeviceToDevice || width > dpitch || width > spitch) {
        fprintf(stderr, "cuda emulator: a 2-D copy of kind %d, width %zu, pitches %zu and %zu: only device to device, "
                "rows no wider than their pitches, are emulated\n", (int)kind, width, dpitch, spitch);
        return fail(cudaErrorInvalidValue);
    }
    if (!copy_ok(dst, (const char *)src + (height - 1) * spitch, width, kind) || !copy_ok(dst, src, width, kind) ||
        !copy_ok((char *)dst + (height - 1) * dpitch, src, width, kind))
        return fail(cudaErrorInvalidValue);
    enqueue(s, [=]() {
        for (size_t r = 0; r < height; r++) memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    });
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    API;
    if (!bytes) return cudaSuccess;
    if (!device_range(p, bytes)) {
        fprintf(stderr, "cuda emulator: a memset of %zu bytes at %p runs past its device allocation\n", bytes, p);
        return fail(cudaErrorInvalidValue);
    }
    enqueue(s, [p, value, bytes]() { memset(p, value, bytes); });
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    API;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
    drain_all();
    return e;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = new ag__emu_stream;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    (void)flags; /* one queue: every stream is ordered with every other, a legal schedule */
    return cudaStreamCreate(s);
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    API;
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    drain_to(s->last);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    API;
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    drain_to(stream_of(s)->last);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new ag__emu_event;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new ag__emu_event;
    (*e)->timing = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    API;
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    drain_to(e->at); /* the queued stamp names it */
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    API;
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (stream_of(s)->capture) { /* an event node: not emulated, and attngrad records none in a capture */
        fprintf(stderr, "cuda emulator: cudaEventRecord in a stream capture is not emulated\n");
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    e->recorded = true;
    e->polls = 0;
    enqueue(s, [e]() { e->ms = now_ms(); });
    e->at = stream_of(s)->last;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    API;
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    if (ran >= e->at) return cudaSuccess;
    /* Not yet, and the GPU is as late as it may be: the host must wait.
     * Only a host that keeps asking (a polling loop) sees it catch up. */
    if (++e->polls >= 1000) drain_to(e->at);
    return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    API;
    if (!e) return fail(cudaErrorInvalidResourceHandle);
    if (forbidden_in_capture()) return cudaErrorStreamCaptureUnsupported;
    drain_to(e->at);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    API;
    if (!a || !b || !a->timing || !b->timing) return fail(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded || ran < a->at || ran < b->at) return fail(cudaErrorNotReady);
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    API;
    (void)mode;
    ag__emu_stream *st = stream_of(s);
    if (!s || st->capture) return fail(cudaErrorInvalidValue); /* the legacy stream cannot be captured */
    st->capture = new ag__emu_graph;
    capture_broken = false;
    capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    API;
    ag__emu_stream *st = stream_of(s);
    *graph = nullptr;
    if (!st->capture) return fail(cudaErrorStreamCaptureUnmatched);
    capturing--;
    ag__emu_graph *g = st->capture;
    st->capture = nullptr;
    if (capture_broken) {
        delete g;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    API;
    (void)flags;
    if (!graph) return fail(cudaErrorInvalidValue);
    *exec = new ag__emu_graph_exec{graph->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    API;
    if (!exec) return fail(cudaErrorInvalidValue);
    for (auto &f : exec->ops) enqueue(s, f);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    API;
    drain_all(); /* a launched graph may still be queued: its ops are copies */
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    API;
    delete graph;
    return cudaSuccess;
}

} // extern "C"

/* ---- cuBLAS, on the build's CBLAS ---- */

struct ag__emu_cublas {
    cudaStream_t stream = nullptr;
    cublasPointerMode_t pointers = CUBLAS_POINTER_MODE_HOST;
};

namespace {

/* The elements an operand spans: rows x cols of a column-major matrix with
 * leading dimension ld (the op's transpose already applied to rows/cols). */
size_t span(int rows, int cols, int ld) { return rows && cols ? (size_t)ld * (size_t)(cols - 1) + (size_t)rows : 0; }

template <typename T> cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const T *alpha, const T *A, int lda, long long sa, const T *B, int ldb,
                                          long long sb, const T *beta, T *C, int ldc, long long sc, int batch) {
    API;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || ta == CUBLAS_OP_C || tb == CUBLAS_OP_C ||
        lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1)) ||
        ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1)) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n || !batch) return CUBLAS_STATUS_SUCCESS;
    size_t ea = ta == CUBLAS_OP_N ? span(m, k, lda) : span(k, m, lda);
    size_t eb = tb == CUBLAS_OP_N ? span(k, n, ldb) : span(n, k, ldb), ec = span(m, n, ldc);
    for (int i = 0; i < batch; i++) {
        bool ok = (!ea || device_range(A + i * sa, ea * sizeof(T))) &&
                  (!eb || device_range(B + i * sb, eb * sizeof(T))) && device_range(C + i * sc, ec * sizeof(T));
        if (!ok) {
            fprintf(stderr,
                    "cuda emulator: gemm %dx%dx%d (batch %d of %d): an operand runs past its device allocation\n", m, n,
                    k, i, batch);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    bool dev = h->pointers == CUBLAS_POINTER_MODE_DEVICE;
    if (dev && (!device_range(alpha, sizeof(T)) || !device_range(beta, sizeof(T)))) return CUBLAS_STATUS_INVALID_VALUE;
    T a = dev ? T(0) : *alpha, b = dev ? T(0) : *beta; /* host scalars are read now */
    CBLAS_TRANSPOSE ca = ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                    cb = tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
    enqueue(h->stream, [=]() {
        T av = dev ? *alpha : a, bv = dev ? *beta : b;
        for (int i = 0; i < batch; i++) { /* opened here: the BLAS's threads must not fault (open_pages) */
            open_range(A + i * sa, ea * sizeof(T));
            open_range(B + i * sb, eb * sizeof(T));
            open_range(C + i * sc, ec * sizeof(T));
        }
        for (int i = 0; i < batch; i++) {
            if constexpr (sizeof(T) == sizeof(float))
                cblas_sgemm(CblasColMajor, ca, cb, m, n, k, av, A + i * sa, lda, B + i * sb, ldb, bv, C + i * sc, ldc);
            else
                cblas_dgemm(CblasColMajor, ca, cb, m, n, k, av, A + i * sa, lda, B + i * sb, ldb, bv, C + i * sc, ldc);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new ag__emu_cublas;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    (void)mode;
    return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    return !bytes || device_range(workspace, bytes) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->pointers = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc) {
    return gemm<float>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double *alpha, const double *A, int lda, const double *B, int ldb, const double *beta,
                           double *C, int ldc) {
    return gemm<double>(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                                         long long sc, int batch) {
    return gemm<float>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double *alpha, const double *A, int lda, long long sa,
                                         const double *B, int ldb, long long sb, const double *beta, double *C, int ldc,
                                         long long sc, int batch) {
    return gemm<double>(h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

} // extern "C"
