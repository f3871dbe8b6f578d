/* dropout.c - inverted dropout: each unit is kept with probability `keep`
 * and scaled by 1/keep, so the expected activation is unchanged and
 * evaluation needs no rescaling.  The mask is keyed by one draw from the
 * caller's rng, so a seeded run is reproducible, and saved for backward.
 *
 * On the GPU the mask is drawn there (ops/cuda/dropout.cu) from the same
 * draw by the same generator (ops/dropout_mask.h): a seeded GPU run drops
 * exactly the units the CPU run drops, and no mask is copied.  The loops
 * here are the CPU's kernels (ops/dropout.h).
 *
 * ag__dropout_copies is `copies` such calls on one input, stacked, in one
 * op: MPSAN drops its input apart before each of its four attention units,
 * and on the GPU that was four launches each way.  ag__dropout_planes is
 * such a call on each plane of a stack, from draws the caller took: MTSA's
 * heads as one stack.  Both run on the same kernels, an input shared by
 * the planes or one a plane. */
#include "dispatch.h"
#include "dropout.h"
#include "dropout_mask.h"
#include "../graph/device.h"

AG_SIMD_CLONES
static void dropout_backward_loop(const uint8_t *restrict kept, const ag_real *restrict G, ag_real scale,
                                  ag_real *restrict GX, int64_t n, bool fresh) {
    if (fresh) /* a new gradient buffer: store, dropped units get 0 */
        for (int64_t i = 0; i < n; i++) GX[i] = kept[i] ? scale * G[i] : 0;
    else
        for (int64_t i = 0; i < n; i++) GX[i] = kept[i] ? GX[i] + scale * G[i] : GX[i];
}

AG_SIMD_CLONES
static void dropout_apply(const uint8_t *restrict kept, const ag_real *restrict x, ag_real scale,
                          ag_real *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kept[i] ? scale * x[i] : 0;
}

/* The mask's application and its backward run in ranges on the pool. */
typedef struct {
    const uint8_t *kept;
    const ag_real *x;
    ag_real *y;
    ag_real scale;
    bool fresh;
} dropout_job;

static void apply_range(void *ctx, int64_t i0, int64_t i1) {
    const dropout_job *j = ctx;
    dropout_apply(j->kept + i0, j->x + i0, j->scale, j->y + i0, i1 - i0);
}

/* No mask (kept NULL): every unit kept at scale 1, the gradient as is. */
AG_SIMD_CLONES
static void add_loop(const ag_real *restrict G, ag_real *restrict GX, int64_t n, bool fresh) {
    if (fresh) memcpy(GX, G, (size_t)n * sizeof *GX);
    else
        for (int64_t i = 0; i < n; i++) GX[i] += G[i];
}

static void backward_range(void *ctx, int64_t i0, int64_t i1) {
    const dropout_job *j = ctx;
    if (j->kept) dropout_backward_loop(j->kept + i0, j->x + i0, j->scale, j->y + i0, i1 - i0, j->fresh);
    else add_loop(j->x + i0, j->y + i0, i1 - i0, j->fresh);
}

static void apply_cpu(const uint8_t *kept, const ag_real *x, ag_real scale, ag_real *y, int64_t n) {
    dropout_job j = {kept, x, y, scale, false};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, apply_range, &j);
}

static void backward_cpu(const uint8_t *kept, const ag_real *g, ag_real scale, ag_real *gx, int64_t n, bool fresh) {
    dropout_job j = {kept, g, gx, scale, fresh};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, backward_range, &j);
}

/* n->saved: the mask, in the output's device memory; n->farg[0]: 1/keep. */
static void dropout_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__dropout_on(n->op, n->out->device)
        ->backward(n->saved, n->out->grad, (ag_real)n->farg[0], gx, n->out->size, fresh);
}

/* The mask (dropout_mask.h defines it), on the CPU.  The tensor is seen as
 * rows (its first dim, the batch, when it has 2 or more) of row_len
 * elements; row r is global row row_base + r (ag_set_dropout_row_base: a
 * data-parallel rank's first example, 0 in one process).  So an element's
 * bit depends on the draw, its example's global index and its index within
 * the row only: not on the thread count, not on how many rows this process
 * holds, and - for [B,N,d] - not on the padded width N either (element
 * (t, j) of a row is at t*d + j whatever N is).  A rank holding rows 8..15
 * of a global batch thus drops what one process would drop on those rows.
 * The blocks run on the pool, and a block's eight streams run in two
 * vectors of four lanes (GCC vector extensions: SSE2 or AVX2 by the clone;
 * the multiplies by 5 and 9 are shifts and adds). */
enum { MASK_BLOCK = AG_MASK_BLOCK, MASK_STEP = AG_MASK_STEP, MASK_GRAIN = 16384 /* elements per pool chunk */ };

typedef uint64_t v4u64 __attribute__((vector_size(32))); /* unsigned: the generator's sums wrap, defined */
typedef int64_t v4i64 __attribute__((vector_size(32)));
typedef uint8_t v4u8 __attribute__((vector_size(4)));

typedef struct {
    uint8_t *kept;
    int64_t row_len, blocks_per_row, row_base;
    uint64_t seed;
    int64_t below;
} mask_job;
typedef struct {
    v4u64 s0, s1, s2, s3;
} xoshiro4;

#define ROTL4(x, k) (((x) << (k)) | ((x) >> (64 - (k))))

/* (Vectors pass through pointers: by value they would change the psABI
 * between the SSE2 and AVX2 clones.) */
static inline void next4(xoshiro4 *g, v4u64 *r) {
    v4u64 x5 = (g->s1 << 2) + g->s1, rot = ROTL4(x5, 7);
    *r = (rot << 3) + rot;
    v4u64 t = g->s1 << 17;
    g->s2 ^= g->s0, g->s3 ^= g->s1, g->s1 ^= g->s2, g->s0 ^= g->s3, g->s2 ^= t;
    g->s3 = ROTL4(g->s3, 45);
}

/* Streams 0-3 in a's lanes, 4-7 in b's, each taking its four splitmix64
 * outputs in turn (ag__mask_stream_seed). */
static void seed4(xoshiro4 *g, uint64_t *x) {
    for (int l = 0; l < 4; l++) {
        g->s0[l] = ag__splitmix64(x), g->s1[l] = ag__splitmix64(x);
        g->s2[l] = ag__splitmix64(x), g->s3[l] = ag__splitmix64(x);
    }
}

/* 16 mask bytes from one draw of each of the 8 streams: the low halves of
 * streams 0-7, then their high halves (ag__mask_stream). */
static inline void mask_step(xoshiro4 *a, xoshiro4 *b, int64_t below, uint8_t out[MASK_STEP]) {
    const v4u64 low = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff};
    v4u64 ra, rb;
    next4(a, &ra);
    next4(b, &rb);
    /* signed compares (AVX2 has no unsigned 64-bit one): both sides are below 2^33 */
    v4i64 c[4] = {(v4i64)(ra & low) < below, (v4i64)(rb & low) < below, (v4i64)(ra >> 32) < below,
                  (v4i64)(rb >> 32) < below};
    for (int k = 0; k < 4; k++) {
        v4u8 bytes = __builtin_convertvector(c[k], v4u8) & 1;
        memcpy(out + 4 * k, &bytes, 4);
    }
}

/* Jobs are (row, block) pairs, row-major. */
AG_SIMD_CLONES static void mask_blocks(void *ctx, int64_t j0, int64_t j1) {
    const mask_job *j = ctx;
    for (int64_t job = j0; job < j1; job++) {
        int64_t row = job / j->blocks_per_row, blk = job % j->blocks_per_row;
        uint64_t x = ag__mask_block_key(j->seed, j->row_base + row, blk);
        xoshiro4 a, b;
        seed4(&a, &x);
        seed4(&b, &x);
        int64_t first = blk * MASK_BLOCK, left = j->row_len - first, n = left < MASK_BLOCK ? left : MASK_BLOCK, i = 0;
        uint8_t *kept = j->kept + row * j->row_len + first;
        for (; i + MASK_STEP <= n; i += MASK_STEP) mask_step(&a, &b, j->below, kept + i);
        if (i < n) {
            uint8_t tail[MASK_STEP];
            mask_step(&a, &b, j->below, tail);
            memcpy(kept + i, tail, (size_t)(n - i));
        }
    }
}

static int64_t row_base; /* ag_set_dropout_row_base */

int64_t ag_set_dropout_row_base(int64_t base) {
    int64_t old = row_base;
    row_base = base;
    return old;
}

static void mask_cpu(uint8_t *kept, int64_t rows, int64_t row_len, int64_t first_row, ag__seed seed, int64_t below) {
    if (rows <= 0 || row_len <= 0) return;
    mask_job j = {.kept = kept, .row_len = row_len, .blocks_per_row = (row_len + MASK_BLOCK - 1) / MASK_BLOCK,
                  .row_base = first_row, .seed = seed.value, .below = below};
    int64_t per_job = row_len < MASK_BLOCK ? row_len : MASK_BLOCK;
    ag__parallel_range(rows * j.blocks_per_row, (MASK_GRAIN + per_job - 1) / per_job, mask_blocks, &j);
}

/* The CPU's forward: the mask, then its application (each on the pool). */
static void forward_cpu(uint8_t *kept, const ag_real *x, ag_real scale, ag_real *y, int64_t rows, int64_t row_len,
                        int64_t first_row, ag__seed seed, int64_t below) {
    mask_cpu(kept, rows, row_len, first_row, seed, below);
    apply_cpu(kept, x, scale, y, rows * row_len);
}

/* The planes' forward: each as forward_cpu makes it, from its draw, its
 * input x or x's plane. */
static void copies_forward_cpu(uint8_t *kept, const ag_real *x, bool stacked, ag_real scale, ag_real *y, int copies,
                               int64_t rows, int64_t row_len, int64_t first_row, ag__seeds seeds, int64_t below) {
    int64_t n = rows * row_len;
    for (int c = 0; c < copies && n > 0; c++) {
        const ag_real *xc = stacked ? x + c * n : x;
        if (kept)
            forward_cpu(kept + c * n, xc, scale, y + c * n, rows, row_len, first_row,
                        (ag__seed){.value = seeds.value[c]}, below);
        else
            memcpy(y + c * n, xc, (size_t)n * sizeof *y);
    }
}

/* Their backwards in tape order, the last plane's first: into one gx, it
 * alone fresh; stacked, each into its own plane of gx. */
static void copies_backward_cpu(const uint8_t *kept, const ag_real *g, ag_real scale, ag_real *gx, bool stacked,
                                int copies, int64_t n, bool fresh) {
    for (int c = copies - 1; c >= 0; c--, fresh = fresh && stacked)
        backward_cpu(kept ? kept + c * n : NULL, g + c * n, scale, stacked ? gx + c * n : gx, n, fresh);
}

void ag__dropout_mask(uint8_t *kept, int64_t rows, int64_t row_len, double keep, ag_rng *rng) {
    ag__seed seed = {.value = ag_rng_next(rng)}; /* taken whatever the size: the rng advances as on any batch */
    mask_cpu(kept, rows, row_len, row_base, seed, ag__mask_below(keep));
}

/* Where a launch captured in a CUDA graph reads n draws: each step's copy
 * in dev's step memory, the launch being the same from step to step; NULL
 * where launches run eagerly and carry the draws by value. */
static const uint64_t *draws_for_graph(ag_device dev, const uint64_t *draws, int n) {
    if (!(dev == AG_CUDA && ag_cuda_graphs_on())) return NULL;
    int32_t words[2 * AG_DROPOUT_MAX_COPIES];
    memcpy(words, draws, (size_t)n * sizeof *draws);
    return (const uint64_t *)(const void *)ag__step_i32_on(dev, words, 2 * n); /* step memory: aligned */
}

/* One draw from rng, for a mask on dev (ag__seed): by value, or under
 * graphs in device memory (value 0 then: a record's bytes are its
 * identity, and the graph's launch must match from step to step). */
static ag__seed draw_on(ag_device dev, ag_rng *rng) {
    uint64_t draw = ag_rng_next(rng);
    const uint64_t *at = draws_for_graph(dev, &draw, 1);
    return at ? (ag__seed){.at = at} : (ag__seed){.value = draw};
}

/* n (<= AG_DROPOUT_MAX_COPIES) draws for masks on dev, the same way (one
 * staged copy for them all). */
static ag__seeds seeds_on(ag_device dev, const uint64_t *draws, int n) {
    ag__seeds s = {0};
    memcpy(s.value, draws, (size_t)n * sizeof *draws);
    const uint64_t *at = draws_for_graph(dev, s.value, n);
    return at ? (ag__seeds){.at = at} : s;
}

void ag__dropout_draws(ag_rng *rng, bool training, double keep, uint64_t *out, int n) {
    if (!(training && keep < 1)) return; /* ag_dropout returns x: no draw */
    if (!rng) ag__fatal("ag__dropout_draws", "training mode needs an rng");
    for (int i = 0; i < n; i++) out[i] = ag_rng_next(rng);
}

void ag__dropout_mask_device(uint8_t *kept, int64_t rows, int64_t row_len, double keep, ag_rng *rng) {
    ag__dropout_on("dropout mask", AG_CUDA)
        ->mask(kept, rows, row_len, row_base, draw_on(AG_CUDA, rng), ag__mask_below(keep));
}

ag_tensor *ag_dropout(ag_tensor *x, double keep, bool training, ag_rng *rng) {
    ag_device dev = ag__check_same_device("ag_dropout", x, NULL);
    if (!(keep > 0 && keep <= 1)) ag__fatal("ag_dropout", "keep probability %g is not in (0, 1]", keep);
    /* Nothing to do: no copy, no tape node; the gradient flows to x as is. */
    if (!training || keep == 1) return x;
    if (!rng) ag__fatal("ag_dropout", "training mode needs an rng");
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    int64_t rows = x->ndim >= 2 ? x->shape[0] : 1; /* the batch's examples; a vector is one row */
    int64_t row_len = rows ? x->size / rows : 0;
    const ag__dropout_kernels *k = ag__dropout_on("ag_dropout", dev);
    uint8_t *kept = ag__step_alloc_on(dev, (size_t)(x->size > 0 ? x->size : 1));
    k->forward(kept, x->data, (ag_real)(1 / keep), out->data, rows, row_len, row_base, draw_on(dev, rng),
               ag__mask_below(keep));
    ag_node *n = ag__record("ag_dropout", dropout_backward, out, 1, &x);
    if (n) {
        n->saved = kept;
        n->farg[0] = 1 / keep;
    }
    return out;
}

/* Both ops': n->saved: the masks [copies, plane] (NULL: none, eval);
 * iarg[0]: copies; iarg[1]: stacked (planes: x a plane each); farg[0]:
 * 1/keep (1 without masks). */
static void dropout_copies_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    int copies = n->iarg[0];
    ag__dropout_on(n->op, n->out->device)
        ->copies_backward(n->saved, n->out->grad, (ag_real)n->farg[0], gx, n->iarg[1], copies,
                          n->out->size / copies, fresh);
}

/* The copies' op from their draws (unread without masks). */
static ag_tensor *copies_op(const char *op, ag_tensor *x, int copies, double keep, bool training,
                            const uint64_t *draws) {
    ag_device dev = x->device;
    bool masks = training && keep < 1; /* else ag_dropout would return x: no draw */
    ag__seeds seeds = masks ? seeds_on(dev, draws, copies) : (ag__seeds){0};
    int shape[AG_MAX_DIMS] = {copies};
    memcpy(shape + 1, x->shape, (size_t)x->ndim * sizeof *shape);
    ag_tensor *out = ag__empty_on(dev, x->ndim + 1, shape);
    int64_t rows = x->ndim >= 2 ? x->shape[0] : 1; /* ag_dropout's rows, of x's shape */
    int64_t row_len = rows ? x->size / rows : 0;
    ag_real scale = masks ? (ag_real)(1 / keep) : 1;
    uint8_t *kept = masks ? ag__step_alloc_on(dev, (size_t)(out->size > 0 ? out->size : 1)) : NULL;
    ag__dropout_on(op, dev)->copies_forward(kept, x->data, false, scale, out->data, copies, rows, row_len, row_base,
                                            seeds, ag__mask_below(keep));
    ag_node *n = ag__record(op, dropout_copies_backward, out, 1, &x);
    if (n) {
        n->saved = kept;
        n->iarg[0] = copies;
        n->iarg[1] = false;
        n->farg[0] = masks ? 1 / keep : 1;
    }
    return out;
}

/* What both forms of the copies refuse, fatal naming op. */
static void check_copies(const char *op, const ag_tensor *x, int copies, double keep) {
    ag__check_same_device(op, x, NULL);
    if (!(keep > 0 && keep <= 1)) ag__fatal(op, "keep probability %g is not in (0, 1]", keep);
    if (copies < 1 || copies > AG_DROPOUT_MAX_COPIES)
        ag__fatal(op, "%d copies: want 1 to %d (the draws ride in a launch's arguments)", copies,
                  AG_DROPOUT_MAX_COPIES);
    if (x->ndim >= AG_MAX_DIMS) ag__fatal(op, "x has %d dims: the copies' axis makes one too many", x->ndim);
}

ag_tensor *ag__dropout_copies(ag_tensor *x, int copies, double keep, bool training, ag_rng *rng) {
    const char *op = "ag__dropout_copies";
    check_copies(op, x, copies, keep);
    if (training && keep < 1 && !rng) ag__fatal(op, "training mode needs an rng");
    uint64_t draws[AG_DROPOUT_MAX_COPIES];
    ag__dropout_draws(rng, training, keep, draws, copies); /* before anything else, as the calls */
    return copies_op(op, x, copies, keep, training, draws);
}

ag_tensor *ag__dropout_copies_drawn(ag_tensor *x, int copies, double keep, bool training, const uint64_t *draws) {
    const char *op = "ag__dropout_copies_drawn";
    check_copies(op, x, copies, keep);
    if (training && keep < 1 && !draws) ag__fatal(op, "training mode needs draws (NULL)");
    return copies_op(op, x, copies, keep, training, draws);
}

ag_tensor *ag__dropout_planes(ag_tensor *x, double keep, bool training, const uint64_t *draws) {
    const char *op = "ag__dropout_planes";
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (!(keep > 0 && keep <= 1)) ag__fatal(op, "keep probability %g is not in (0, 1]", keep);
    char sx[64];
    if (x->ndim < 2)
        ag__fatal(op, "x %s has %d dim: want a stack [G, ...] of 2 or more", ag_shape_str(x, sx, sizeof sx), x->ndim);
    int planes = x->shape[0];
    if (planes < 1 || planes > AG_DROPOUT_MAX_COPIES)
        ag__fatal(op, "x %s has %d planes: want 1 to %d (the draws ride in a launch's arguments)",
                  ag_shape_str(x, sx, sizeof sx), planes, AG_DROPOUT_MAX_COPIES);
    if (!training || keep == 1) return x; /* as ag_dropout: no node, the gradient flows to x as is */
    if (!draws) ag__fatal(op, "training mode needs draws (NULL)");
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    /* ag_dropout's rows, of a plane's shape x.shape[1:] */
    int64_t plane = x->size / planes, rows = x->ndim >= 3 ? x->shape[1] : 1, row_len = rows ? plane / rows : 0;
    uint8_t *kept = ag__step_alloc_on(dev, (size_t)(out->size > 0 ? out->size : 1));
    ag__dropout_on(op, dev)->copies_forward(kept, x->data, true, (ag_real)(1 / keep), out->data, planes, rows,
                                            row_len, row_base, seeds_on(dev, draws, planes), ag__mask_below(keep));
    ag_node *n = ag__record(op, dropout_copies_backward, out, 1, &x);
    if (n) {
        n->saved = kept;
        n->iarg[0] = planes;
        n->iarg[1] = true;
        n->farg[0] = 1 / keep;
    }
    return out;
}

/* ---- the CPU's table (ops/dropout.h; CUDA's is in ops/cuda/dropout.cu) ---- */

static const ag__dropout_kernels dropout_cpu = {
    .mask = mask_cpu,
    .forward = forward_cpu,
    .backward = backward_cpu,
    .copies_forward = copies_forward_cpu,
    .copies_backward = copies_backward_cpu,
};
AG_DISPATCH(dropout, dropout_cpu)
