/* test_device.c - what the CUDA backend does that needs no GPU: the device
 * arena's accounting (the bump allocator over malloc), the answer of a
 * machine or build without a GPU, device-mismatch errors naming both
 * devices and the caller's line, and ops without a CUDA implementation
 * refusing CUDA tensors by name.  tests/test_cuda_ops.c checks the kernels
 * on a GPU. */
#include "check.h"
#include "fatal.h"
#include "attngrad.h"
#include "../graph/device.h"

#include <stdlib.h>

/* ---- the bump allocator, over malloc ---- */

/* 256-byte aligned chunks, as cudaMalloc gives */
static void *heap_alloc(size_t bytes, void *ctx) {
    (void)ctx;
    if (bytes > ((size_t)1 << 40)) return NULL; /* "the device is full" */
    return aligned_alloc(256, (bytes + 255) / 256 * 256);
}
static void heap_release(void *p, void *ctx) {
    (void)ctx;
    free(p);
}

/* A "step" of n allocations of 1000 bytes each. */
static void step(ag__bump *a, int n, char **last) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char *p = ag__bump_alloc(a, 1000);
        bad += !p || ((uintptr_t)p % 256) != 0;
        if (p) p[999] = 1; /* the memory is there (ASan) */
        if (last) *last = p;
    }
    CHECK(bad == 0, "%d of the step's %d allocations failed or were not 256-byte aligned", bad, n);
}

static void test_bump_arena(void) {
    ag__bump a = {.alloc = heap_alloc, .release = heap_release, .align = 256, .min_chunk = 4096};
    step(&a, 20, NULL); /* 20 x 1024 bytes: spills over several chunks */
    CHECK(a.n > 1, "the first step spilled into %d chunks", a.n);
    CHECK(a.high == 20 * 1024, "high-water mark %zu", a.high);
    ag__bump_reset(&a);
    CHECK(a.n == 1 && a.chunk[0].cap >= 20 * 1024, "reset coalesced into one chunk of %zu", a.chunk[0].cap);
    int64_t allocs = a.allocs;
    for (int s = 0; s < 10; s++) { /* steady state: the same step fits, nothing allocated */
        step(&a, 20, NULL);
        ag__bump_reset(&a);
    }
    CHECK(a.allocs == allocs, "10 steady steps called the allocator %lld times", (long long)(a.allocs - allocs));
    /* mark and rewind inside a step give the same memory back */
    char *p0, *p1;
    step(&a, 3, NULL);
    size_t pos;
    int chunk;
    ag__bump_mark(&a, &pos, &chunk);
    step(&a, 2, &p0);
    ag__bump_rewind(&a, pos, chunk);
    step(&a, 2, &p1);
    CHECK(p0 == p1 && a.step_used == 5 * 1024, "after a rewind the same bytes again (%p, %p), %zu used",
          (void *)p0, (void *)p1, a.step_used);
    ag__bump_reset(&a);
    ag__bump_release_all(&a);
    CHECK(a.releases == a.allocs && a.reserved == 0, "%lld chunks allocated, %lld released", (long long)a.allocs,
          (long long)a.releases);
    /* an allocator that fails: NULL, no crash, and the state stays usable */
    ag__bump none = {.alloc = heap_alloc, .release = heap_release, .align = 64, .min_chunk = 64};
    CHECK(ag__bump_alloc(&none, (size_t)1 << 62) == NULL, "an impossible chunk gives NULL");
    CHECK(ag__bump_alloc(&none, 100) != NULL, "and a later small one works");
    ag__bump_release_all(&none);
}

/* ---- no GPU: ag_cuda_available says why, and every way onto the GPU
 * stops with that reason ---- */

static bool have_gpu;

/* A CUDA build opens cuBLAS at the first GPU use, not at its start (its
 * constructors took 0.3 s of every program's start, a CPU run's too): not
 * in this process yet; and where the build was compiled (the toolkit is
 * here) it opens, with every call the build makes, GPU or none. */
static void test_cublas_opened_late(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[1024];
    bool mapped = false;
    while (maps && fgets(line, sizeof line, maps)) mapped |= strstr(line, "libcublas") != NULL;
    if (maps) fclose(maps);
    CHECK(!mapped, "libcublas is in the process before any GPU use");
    char why[512] = "";
    bool opens = ag__cuda_cublas_loadable(why, sizeof why);
    if (strstr(why, "built without CUDA")) return;
    CHECK(opens, "cuBLAS: %s", why);
}

static void test_no_gpu(void) {
    char why[256] = "";
    have_gpu = ag_cuda_available(why, sizeof why);
    if (have_gpu) {
        printf("note: a CUDA device is present; the no-GPU answers are not checked here\n");
        return;
    }
    CHECK(strstr(why, "built without CUDA") || strstr(why, "no CUDA device"), "the reason: \"%s\"", why);
    printf("no GPU: %s\n", why);
    char why_n[256] = ""; /* a GPU by index (--device cuda:N): the same answer */
    CHECK(!ag_cuda_use(1, why_n, sizeof why_n) && !strcmp(why_n, why), "ag_cuda_use(1): \"%s\"", why_n);
    ag_tensor *x = ag_tensor_fill(1, 1, (int[]){3});
    EXPECT_FATAL(ag_to(x, AG_CUDA), "ag_to", "cuda");
    EXPECT_FATAL(ag_set_device(AG_CUDA), "ag_set_device", "cuda");
    CHECK(ag_get_device() == AG_CPU, "the current device stays the CPU");
    ag_params ps = {0};
    ag_param(&ps, "w", 1, (int[]){4});
    EXPECT_FATAL(ag_params_to(&ps, AG_CUDA), "ag_params_to");
    CHECK(ps.items[0]->device == AG_CPU, "a refused move leaves the parameter on the CPU");
    ag_params_free(&ps);
    CHECK(ag_to(x, AG_CPU) == x, "ag_to the tensor's own device is the tensor itself");
    /* CUDA graphs need a GPU: asking for them is a no-op, and CPU work runs as before */
    ag_cuda_graphs(true);
    CHECK(!ag_cuda_graphs_on(), "CUDA graphs on without a GPU");
    ag_tensor *y = ag_mul_scalar(x, 2);
    CHECK(y->data[0] == 2 && ag_memstats().graph_launches == 0 && ag_memstats().eager_segments == 0,
          "CPU work with CUDA graphs asked for");
    ag_cuda_graphs(false);
    ag_step_end();
}

/* ---- dispatch and mismatch errors, with a tensor that claims the GPU (a
 * header only: every check below happens before any data is touched) ---- */

static ag_tensor fake_cuda(int n) {
    return (ag_tensor){.ndim = 1, .shape = {n, 1, 1, 1}, .size = n, .device = AG_CUDA};
}

static void custom_forward(ag_custom_call *c) { (void)c; }

static void test_dispatch_errors(void) {
    ag_tensor c = fake_cuda(3);
    ag_tensor *x = ag_tensor_fill(1, 1, (int[]){3});
    /* ops with a CUDA path: mixing devices names both, and the caller's line */
    EXPECT_FATAL_AT(ag_add(x, &c), "ag_add", "different devices (cpu and cuda)");
    EXPECT_FATAL_AT(ag_mul(&c, x), "ag_mul", "(cuda and cpu)");
    ag_tensor *m = ag_tensor_fill(1, 2, (int[]){3, 3});
    ag_tensor c2 = {.ndim = 2, .shape = {3, 3, 1, 1}, .size = 9, .device = AG_CUDA};
    EXPECT_FATAL_AT(ag_matmul(m, &c2), "ag_matmul", "different devices");
    /* a CPU mask with GPU scores (or the other way) is refused, naming both, not copied */
    EXPECT_FATAL_AT(ag_masked_softmax(&c2, m, 1.0), "ag_masked_softmax", "mask [3,3] is on cpu",
                    "scores [3,3] are on cuda", "ag_set_device");
    EXPECT_FATAL_AT(ag_masked_softmax(m, &c2, 1.0), "ag_masked_softmax", "mask [3,3] is on cuda", "are on cpu");
    EXPECT_FATAL_AT(ag_attention(&c2, &c2, &c2, m, 1.0, NULL), "ag_attention", "mask [3,3] is on cpu");
    EXPECT_FATAL_AT(ag_attention(&c2, m, &c2, NULL, 1.0, NULL), "ag_attention", "different devices");
    EXPECT_FATAL_AT(ag_softmax_mix(&c2, (ag_tensor *[]){m}, 1), "ag_softmax_mix", "different devices");
    ag_tensor *pieces[2] = {x, &c};
    EXPECT_FATAL_AT(ag_concat(pieces, 2, 0), "ag_concat", "different devices (cpu and cuda)");
    /* ops without one refuse a CUDA tensor by name: a custom op's functions
     * read host memory */
    ag_custom_fn fn = {.name = "my_op", .forward = custom_forward};
    ag_tensor *in[1] = {&c};
    int shape[1] = {3};
    EXPECT_FATAL_AT(ag_custom_op(&fn, in, 1, 1, shape, NULL, 0), "my_op", "no cuda implementation yet", "ag_to");
    ag_step_end();
}

/* ag_backward_seeded_tensor: the same gradients as the host array's
 * seed, on the CPU and (where there is one) on the GPU, where the seed stays
 * in device memory; a seed of another shape or device is refused. */
static void seeded_grads(ag_device d, bool as_tensor, ag_real *gx) {
    ag_real xs[6] = {0.5, -1, 2, 0.25, -0.75, 1.5}, seed[6] = {1, -2, 3, 0.5, 4, -1};
    ag_tensor *x = ag_to(ag_tensor_from(xs, 2, (int[]){2, 3}), d);
    x->requires_grad = true;
    ag_tensor *y = ag_tanh(ag_mul(x, x));
    if (as_tensor) ag_backward_seeded_tensor(y, ag_to(ag_tensor_from(seed, 2, (int[]){2, 3}), d));
    else ag_backward_seeded(y, seed);
    ag_tensor g = {.ndim = 1, .shape = {6, 1, 1, 1}, .size = 6, .data = x->grad, .device = d};
    ag_tensor_read(&g, gx);
    ag_step_end();
}

static void test_seeded_tensor(void) {
    ag_real a[6], b[6];
    seeded_grads(AG_CPU, false, a);
    seeded_grads(AG_CPU, true, b);
    CHECK(!memcmp(a, b, sizeof a), "a seed tensor gives the host seed's gradients on the CPU");
    if (have_gpu) {
        seeded_grads(AG_CUDA, true, b);
        for (int i = 0; i < 6; i++) CHECK_NEAR(b[i], a[i], 1e-12, 1e-12);
    }
    ag_tensor *x = ag_tensor_fill(1, 1, (int[]){3});
    x->requires_grad = true;
    ag_tensor *y = ag_tanh(x);
    EXPECT_FATAL_AT(ag_backward_seeded_tensor(y, ag_tensor_fill(1, 1, (int[]){4})), "backward",
                    "the seed's shape [4] differs from the output's [3]");
    ag_tensor c = fake_cuda(3);
    EXPECT_FATAL_AT(ag_backward_seeded_tensor(y, &c), "backward", "different devices (cpu and cuda)");
    ag_step_end();
}

static void test_device_names(void) {
    CHECK(!strcmp(ag_device_name(AG_CPU), "cpu") && !strcmp(ag_device_name(AG_CUDA), "cuda"), "device names");
    ag_tensor *x = ag_tensor_fill(2, 1, (int[]){3});
    ag_real host[3];
    ag_tensor_read(x, host);
    CHECK(host[0] == 2 && host[2] == 2, "ag_tensor_read of a CPU tensor");
    CHECK(ag_item(ag_scalar(5)) == 5, "ag_item on the CPU");
    ag_step_end();
}

/* On a GPU the runtime started on cuda:0 (ag_cuda_available): that one
 * again is fine, another is refused by name (one GPU per process). */
static void test_cuda_use(void) {
    if (!have_gpu) return;
    char why[256] = "";
    CHECK(ag_cuda_use(0, why, sizeof why), "ag_cuda_use(0) after ag_cuda_available: %s", why);
    CHECK(ag_cuda_use(-1, why, sizeof why), "ag_cuda_use(-1): %s", why);
    CHECK(!ag_cuda_use(99, why, sizeof why) && strstr(why, "already runs on cuda:0"), "ag_cuda_use(99): \"%s\"", why);
}

/* ---- uploads sent once (graph/cuda.c's ag__cuda_upload_const) ---- */

static int64_t launches(void) { return ag_memstats().device_launches; }

/* What the device holds at there equals want[0..n). */
static bool holds(const int32_t *there, const int32_t *want, int n) {
    int32_t back[128];
    ag__read_on(AG_CUDA, back, there, (size_t)n * sizeof *back);
    return !memcmp(back, want, (size_t)n * sizeof *back);
}

static void test_uploads_sent_once(void) {
    if (!have_gpu || getenv("AG_CUDA_EXACT_ALLOC")) return;
    ag_step_end();
    int32_t a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = i * 7 - 3, b[i] = i;
    /* the same bytes again in a step: the step's copy, no launch; other bytes, or the same array changed: a copy */
    int64_t l0 = launches(), k0 = ag_memstats().device_kept_uploads;
    const int32_t *first = ag__to_device_i32(a, 64), *again = ag__to_device_i32(a, 64);
    CHECK(again == first && launches() - l0 == 1 && ag_memstats().device_kept_uploads - k0 == 1,
          "the same 64 ints twice in a step: %lld launches, the same copy %d", (long long)(launches() - l0),
          again == first);
    const int32_t *other = ag__to_device_i32(b, 64);
    a[5] = 1000; /* the caller's array changed: its new bytes go up */
    const int32_t *changed = ag__to_device_i32(a, 64);
    CHECK(other != first && changed != first && launches() - l0 == 3, "other bytes: %lld launches, want 3",
          (long long)(launches() - l0));
    CHECK(holds(changed, a, 64) && holds(other, b, 64), "the device holds each upload's own bytes");
    a[5] = 32;
    CHECK(holds(first, a, 64), "the first copy keeps its bytes");
    /* the arena rewound past a copy: the memo forgets it */
    size_t pos;
    int chunk;
    ag__cuda_arena_mark(&pos, &chunk);
    int32_t c[16] = {9, 8, 7};
    ag__to_device_i32(c, 16);
    ag__cuda_arena_rewind(pos, chunk);
    int64_t l1 = launches();
    const int32_t *after = ag__to_device_i32(c, 16);
    CHECK(launches() - l1 == 1 && holds(after, c, 16), "after a rewind the bytes go up again");
    ag_step_end();
    /* the same bytes every step: kept from the third step on, no launch */
    int64_t per_step[5];
    int32_t d[32];
    for (int i = 0; i < 32; i++) d[i] = 5 - i * i;
    for (int s = 0; s < 5; s++) {
        int64_t l = launches();
        const int32_t *there = ag__to_device_i32(d, 32);
        per_step[s] = launches() - l;
        CHECK(holds(there, d, 32), "step %d: the kept copy holds the bytes", s);
        ag_step_end();
    }
    CHECK(per_step[0] == 1 && per_step[1] == 1 && per_step[2] == 1 && per_step[3] == 0 && per_step[4] == 0,
          "launches per step of one repeated upload: %lld %lld %lld %lld %lld (want 1 1 1 0 0)", (long long)per_step[0],
          (long long)per_step[1], (long long)per_step[2], (long long)per_step[3], (long long)per_step[4]);
    /* more repeated arrays than slots: every step's copies hold their own bytes */
    enum { MANY = 80 };
    static int32_t many[MANY][8];
    bool right = true;
    for (int s = 0; s < 5; s++) {
        const int32_t *there[MANY];
        for (int i = 0; i < MANY; i++) {
            for (int k = 0; k < 8; k++) many[i][k] = i * 100 + k;
            there[i] = ag__to_device_i32(many[i], 8);
        }
        for (int i = 0; i < MANY; i++) right = right && holds(there[i], many[i], 8);
        ag_step_end();
    }
    CHECK(right, "%d arrays repeated every step, more than the slots: a copy lost its bytes", MANY);
}

int main(void) {
    test_cublas_opened_late();
    test_bump_arena();
    test_no_gpu();
    test_cuda_use();
    test_dispatch_errors();
    test_seeded_tensor();
    test_device_names();
    test_uploads_sent_once();
    ag_shutdown();
    return check_summary("test_device");
}
