/* shape.c - reshape, permute/transpose, concat, slice, index-select and
 * embedding lookup.  Reshape is a view: it shares the input's data.
 *
 * The loops here are the CPU's kernels (ops/shape.h); on the GPU
 * (ops/cuda/shape.cu) every copy is one strided copy.  The gathers'
 * gradient, on either device, sums each destination row's sources in
 * increasing position, listed by a counting sort of the index: one writer
 * per element, no atomics, the same order of sums. */
#include "dispatch.h"
#include "shape.h"
#include "../graph/device.h"

/* ---- blocks of rows: a reshape's gradient, concat parts, slices ----
 *
 * The copies and gradient adds of this file run on the pool, in ranges of
 * rows (or of elements, for one row); every element is written once, so
 * results do not depend on the thread count. */

typedef struct {
    const ag_real *src;
    ag_real *dst;
    int64_t cols, src_ld, dst_ld;
    bool add;              /* add to dst instead of storing */
} rows_job;

AG_SIMD_CLONES static void add_range(void *ctx, int64_t i0, int64_t i1) {
    const rows_job *j = ctx;
    if (!j->add) memcpy(j->dst + i0, j->src + i0, (size_t)(i1 - i0) * sizeof(ag_real));
    else
        for (int64_t i = i0; i < i1; i++) j->dst[i] += j->src[i];
}

AG_SIMD_CLONES static void copy_rows_range(void *ctx, int64_t r0, int64_t r1) {
    const rows_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const ag_real *src = j->src + r * j->src_ld;
        ag_real *dst = j->dst + r * j->dst_ld;
        if (!j->add) memcpy(dst, src, (size_t)j->cols * sizeof(ag_real));
        else
            for (int64_t k = 0; k < j->cols; k++) dst[k] += src[k];
    }
}

static void copy_rows_cpu(int64_t rows, int64_t cols, const ag_real *src, int64_t src_ld, ag_real *dst,
                          int64_t dst_ld, bool add) {
    if (rows <= 0 || cols <= 0) return;
    rows_job j = {src, dst, cols, src_ld, dst_ld, add};
    if (rows == 1) ag__parallel_range(cols, AG_GRAIN_ELEMENTWISE, add_range, &j);
    else ag__parallel_range(rows, ag__units_per_part(cols), copy_rows_range, &j);
}

/* A strided copy over 4 dims (ops/shape.h), row by row along the last. */
static void strided_copy_cpu(const ag__kstrided *p, const ag_real *src, ag_real *dst, bool add) {
    for (int64_t i0 = 0; i0 < p->shape[0]; i0++)
        for (int64_t i1 = 0; i1 < p->shape[1]; i1++)
            for (int64_t i2 = 0; i2 < p->shape[2]; i2++) {
                const ag_real *s = src + i0 * p->src_stride[0] + i1 * p->src_stride[1] + i2 * p->src_stride[2];
                ag_real *d = dst + i0 * p->dst_stride[0] + i1 * p->dst_stride[1] + i2 * p->dst_stride[2];
                for (int64_t k = 0; k < p->shape[3]; k++) {
                    ag_real v = s[k * p->src_stride[3]];
                    d[k * p->dst_stride[3]] = add ? d[k * p->dst_stride[3]] + v : v;
                }
            }
}

/* ---- reshape: a zero-copy view; backward adds the gradient back ---- */

/* The view's gradient is x's, element for element: where x has none yet
 * (a step tensor's first gradient), x takes the view's buffer as its own -
 * no copy, no launch (the view's gradient is not read again: its node is
 * done).  A parameter's, or one already started, gets it added. */
static void reshape_backward(ag_node *n) {
    ag_tensor *x = n->in[0];
    if (!x->grad && !x->persistent) {
        x->grad = n->out->grad;
        return;
    }
    bool fresh;
    ag_real *gx = ag__grad_write(x, &fresh);
    ag__shape_on(n->op, n->out->device)->copy_rows(1, n->out->size, n->out->grad, 0, gx, 0, !fresh);
}

ag_tensor *ag_reshape(ag_tensor *x, int ndim, const int *shape) {
    ag__check_same_device("ag_reshape", x, NULL); /* a view: on x's device */
    char sx[64];
    if (ndim < 0 || ndim > AG_MAX_DIMS) ag__fatal("ag_reshape", "%d dims (at most %d)", ndim, AG_MAX_DIMS);
    if (ndim > 0) ag__need_array("ag_reshape", "the shape", shape);
    int s[AG_MAX_DIMS], infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            if (infer >= 0) ag__fatal("ag_reshape", "more than one -1 in the new shape");
            infer = i;
        } else {
            if (s[i] < 0) ag__fatal("ag_reshape", "negative dim %d", s[i]);
            known *= s[i];
        }
    }
    if (infer >= 0) s[infer] = known ? (int)(x->size / known) : 0;
    int64_t size = 1;
    for (int i = 0; i < ndim; i++) size *= s[i];
    if (size != x->size) {
        ag_tensor tmp = {.ndim = ndim};
        for (int i = 0; i < ndim; i++) tmp.shape[i] = s[i];
        char st[64];
        ag__fatal("ag_reshape", "cannot view %s as %s (sizes %lld and %lld)", ag_shape_str(x, sx, sizeof sx),
                  ag_shape_str(&tmp, st, sizeof st), (long long)x->size, (long long)size);
    }
    ag_tensor *out = ag__arena_zalloc(sizeof *out);
    *out = (ag_tensor){.ndim = ndim, .size = size, .data = x->data, .device = x->device};
    for (int i = 0; i < AG_MAX_DIMS; i++) out->shape[i] = i < ndim ? s[i] : 1;
    ag__record("ag_reshape", reshape_backward, out, 1, &x);
    return out;
}

/* ---- permute and transpose: a strided copy ----
 *
 * Both shapes are padded at the front to 4 dims.  The output is walked row
 * by row (a row is its last dim) while `ix` follows the matching input
 * element through the input strides of the permuted dims; backward walks
 * the same path and adds the output gradient back where each element came
 * from.  When the last dim stays last (head split and merge) rows are
 * contiguous on both sides. */

typedef ag__kpermute permute_plan; /* ops/shape.h: the output shape and the input strides, padded */

/* Output row r (its first element io = r * shape[3]) starts at input
 * offset ix; a permutation maps rows to disjoint input elements, so the
 * rows split over the pool both ways. */
static inline int64_t permute_row_input(const permute_plan *p, int64_t r) {
    int64_t i2 = r % p->shape[2], i01 = r / p->shape[2];
    return (i01 / p->shape[1]) * p->stride[0] + (i01 % p->shape[1]) * p->stride[1] + i2 * p->stride[2];
}

typedef struct {
    permute_plan p;
    const ag_real *x;
    ag_real *y;
    bool fresh;           /* backward: y is a new gradient buffer */
} permute_job;

static inline void gather_row(ag_real *dst, const ag_real *src, int n, int64_t stride) {
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * sizeof *dst);
        return;
    }
    for (int i = 0; i < n; i++) dst[i] = src[i * stride];
}

static inline void scatter_add_row(ag_real *dst, int64_t stride, const ag_real *src, int n) {
    if (stride == 1) {
        for (int i = 0; i < n; i++) dst[i] += src[i];
        return;
    }
    for (int i = 0; i < n; i++) dst[i * stride] += src[i];
}

static void permute_rows(void *ctx, int64_t r0, int64_t r1) {
    const permute_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        gather_row(j->y + r * j->p.shape[3], j->x + permute_row_input(&j->p, r), j->p.shape[3], j->p.stride[3]);
}

static void permute_grad_rows(void *ctx, int64_t r0, int64_t r1) {
    const permute_job *j = ctx; /* x: the output's gradient, y: the input's */
    for (int64_t r = r0; r < r1; r++) {
        ag_real *dst = j->y + permute_row_input(&j->p, r);
        const ag_real *src = j->x + r * j->p.shape[3];
        if (j->fresh) /* a permutation writes every input element once */
            for (int i = 0; i < j->p.shape[3]; i++) dst[i * j->p.stride[3]] = src[i];
        else
            scatter_add_row(dst, j->p.stride[3], src, j->p.shape[3]);
    }
}

static void run_permute(permute_job *j, ag__range_fn fn) {
    int64_t rows = (int64_t)j->p.shape[0] * j->p.shape[1] * j->p.shape[2];
    if (j->p.shape[3] > 0) ag__parallel_range(rows, ag__units_per_part(j->p.shape[3]), fn, j);
}

static void permute_cpu(const permute_plan *p, const ag_real *src, ag_real *dst, bool grad, bool add) {
    permute_job j = {*p, src, dst, !add};
    run_permute(&j, grad ? permute_grad_rows : permute_rows);
}

/* n->saved: the plan. */
static void permute_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__shape_on(n->op, n->out->device)->permute(n->saved, n->out->grad, gx, true, !fresh);
}

static const char *perm_str(const int *perm, int n, char *buf, size_t size) {
    ag_tensor t = {.ndim = n};
    for (int i = 0; i < n; i++) t.shape[i] = perm[i];
    return ag_shape_str(&t, buf, size);
}

static ag_tensor *permute(const char *op, ag_tensor *x, const int *perm) {
    ag_device dev = ag__check_same_device(op, x, NULL);
    ag__need_array(op, "the permutation", perm);
    int nd = x->ndim;
    bool seen[AG_MAX_DIMS] = {0};
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || seen[perm[i]]) {
            char sx[64], sp[64];
            ag__fatal(op, "%s is not a permutation of the %d dims of %s", perm_str(perm, nd, sp, sizeof sp), nd,
                      ag_shape_str(x, sx, sizeof sx));
        }
        seen[perm[i]] = true;
    }
    int64_t in_stride[AG_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        in_stride[d] = s;
        s *= x->shape[d];
    }
    permute_plan p;
    int out_shape[AG_MAX_DIMS];
    for (int i = 0; i < 4; i++) {
        int k = i - (4 - nd); /* output dim, or < 0 for padding */
        p.shape[i] = k < 0 ? 1 : x->shape[perm[k]];
        p.stride[i] = k < 0 ? 0 : in_stride[perm[k]];
        if (k >= 0) out_shape[k] = p.shape[i];
    }
    ag_tensor *out = ag__empty_on(dev, nd, out_shape);
    ag__shape_on(op, dev)->permute(&p, x->data, out->data, false, false);
    ag_node *n = ag__record(op, permute_backward, out, 1, &x);
    if (n) {
        permute_plan *saved = ag__arena_alloc(sizeof *saved);
        *saved = p;
        n->saved = saved;
    }
    return out;
}

ag_tensor *ag_permute(ag_tensor *x, const int *perm) { return permute("ag_permute", x, perm); }

ag_tensor *ag_transpose(ag_tensor *x, int axis0, int axis1) {
    int a = ag__axis("ag_transpose", x, axis0), b = ag__axis("ag_transpose", x, axis1);
    int perm[AG_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return permute("ag_transpose", x, perm);
}

/* ---- concat: every input is a block of columns of [outer, total * inner] ---- */

/* Each input seen as [outer, cols]; its columns start at col0 in each output row. */
typedef struct {
    int64_t outer, out_cols;
    int64_t cols[AG_MAX_INPUTS], col0[AG_MAX_INPUTS];
} concat_plan;

/* n->saved: the plan.  Each wanted input's gradient is its block of columns
 * of the output's. */
static void concat_backward(ag_node *n) {
    const concat_plan *p = n->saved;
    const ag__shape_kernels *k = ag__shape_on(n->op, n->out->device);
    for (int i = 0; i < n->n_in; i++) {
        if (!ag__wants(n, i)) continue;
        bool fresh;
        ag_real *gx = ag__grad_write(n->in[i], &fresh);
        k->copy_rows(p->outer, p->cols[i], n->out->grad + p->col0[i], p->out_cols, gx, p->cols[i], !fresh);
    }
}

static void check_concat_shapes(ag_tensor **xs, int n, int axis) {
    for (int i = 0; i < n; i++) {
        if (!xs[i]) ag__fatal("ag_concat", "input %d is NULL", i);
        ag__check_same_device("ag_concat", xs[0], xs[i]);
        bool ok = xs[i]->ndim == xs[0]->ndim;
        for (int d = 0; ok && d < xs[0]->ndim; d++) ok = d == axis || xs[i]->shape[d] == xs[0]->shape[d];
        if (!ok) {
            char s0[64], si[64];
            ag__fatal("ag_concat", "input %d has shape %s and input 0 has %s: they may differ only along axis %d",
                      i, ag_shape_str(xs[i], si, sizeof si), ag_shape_str(xs[0], s0, sizeof s0), axis);
        }
    }
}

/* At most AG_MAX_INPUTS inputs, shapes already checked. */
static ag_tensor *concat_few(ag_tensor **xs, int n, int axis) {
    const ag_tensor *x0 = xs[0];
    concat_plan p = {.outer = 1};
    int64_t inner = 1;
    for (int d = 0; d < axis; d++) p.outer *= x0->shape[d];
    for (int d = axis + 1; d < x0->ndim; d++) inner *= x0->shape[d];
    int total = 0;
    for (int i = 0; i < n; i++) {
        p.cols[i] = xs[i]->shape[axis] * inner;
        p.col0[i] = p.out_cols;
        p.out_cols += p.cols[i];
        total += xs[i]->shape[axis];
    }
    int shape[AG_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    shape[axis] = total;
    ag_tensor *out = ag__empty_on(x0->device, x0->ndim, shape);
    const ag__shape_kernels *k = ag__shape_on("ag_concat", out->device);
    for (int i = 0; i < n; i++)
        k->copy_rows(p.outer, p.cols[i], xs[i]->data, p.cols[i], out->data + p.col0[i], p.out_cols, false);
    ag_node *node = ag__record("ag_concat", concat_backward, out, n, xs);
    if (node) {
        concat_plan *saved = ag__arena_alloc(sizeof *saved);
        *saved = p;
        node->saved = saved;
    }
    return out;
}

ag_tensor *ag_concat(ag_tensor **xs, int n, int axis) {
    if (n < 1) ag__fatal("ag_concat", "needs at least one input, got %d", n);
    if (!xs[0]) ag__fatal("ag_concat", "input 0 is NULL");
    axis = ag__axis("ag_concat", xs[0], axis);
    check_concat_shapes(xs, n, axis);
    if (n <= AG_MAX_INPUTS) return concat_few(xs, n, axis);
    /* A tape node holds at most AG_MAX_INPUTS inputs: concatenate groups of
     * them, then the groups (concat is associative along one axis). */
    int groups = (n + AG_MAX_INPUTS - 1) / AG_MAX_INPUTS;
    ag_tensor **parts = ag__arena_alloc((size_t)groups * sizeof *parts);
    for (int g = 0; g < groups; g++) {
        int first = g * AG_MAX_INPUTS, count = n - first < AG_MAX_INPUTS ? n - first : AG_MAX_INPUTS;
        parts[g] = concat_few(xs + first, count, axis);
    }
    return ag_concat(parts, groups, axis);
}

/* ---- slice: rows [start, end) of x seen as [outer, dim, inner] ----
 *
 * When every dim before the axis is 1 the slice is one contiguous block, and
 * the output is a zero-copy view of it (like reshape). */

typedef struct {
    int64_t outer, in_rows, out_rows, inner, start;
} rows_plan;

static rows_plan rows_along(const ag_tensor *x, int axis, int start, int out_rows) {
    rows_plan p = {1, x->shape[axis], out_rows, 1, start};
    for (int d = 0; d < axis; d++) p.outer *= x->shape[d];
    for (int d = axis + 1; d < x->ndim; d++) p.inner *= x->shape[d];
    return p;
}

/* n->saved: the plan.  The gradient reaches part of x's: added. */
static void slice_backward(ag_node *n) {
    const rows_plan *p = n->saved;
    int64_t block = p->out_rows * p->inner;
    ag__shape_on(n->op, n->out->device)
        ->copy_rows(p->outer, block, n->out->grad, block, ag__grad(n->in[0]) + p->start * p->inner,
                    p->in_rows * p->inner, true);
}

ag_tensor *ag_slice(ag_tensor *x, int axis, int start, int end) {
    ag_device dev = ag__check_same_device("ag_slice", x, NULL);
    axis = ag__axis("ag_slice", x, axis);
    if (start < 0 || start > end || end > x->shape[axis]) {
        char sx[64];
        ag__fatal("ag_slice", "range [%d, %d) out of bounds for axis %d of shape %s", start, end, axis,
                  ag_shape_str(x, sx, sizeof sx));
    }
    rows_plan p = rows_along(x, axis, start, end - start);
    int shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = end - start;
    ag_tensor *out;
    if (p.outer == 1) {
        out = ag__arena_zalloc(sizeof *out);
        *out = (ag_tensor){.ndim = x->ndim, .size = p.out_rows * p.inner,
                           .data = x->data + p.start * p.inner, .device = x->device};
        memcpy(out->shape, shape, sizeof shape);
    } else {
        out = ag__empty_on(dev, x->ndim, shape);
        int64_t block = p.out_rows * p.inner;
        ag__shape_on("ag_slice", dev)
            ->copy_rows(p.outer, block, x->data + p.start * p.inner, p.in_rows * p.inner, out->data, block, false);
    }
    ag_node *n = ag__record("ag_slice", slice_backward, out, 1, &x);
    if (n) {
        rows_plan *saved = ag__arena_alloc(sizeof *saved);
        *saved = p;
        n->saved = saved;
    }
    return out;
}

/* ---- gather: out[o, i, :] = x[o, index[i], :]; backward scatter-adds ----
 *
 * index_select and embedding are the same gather; they differ in how the
 * output is shaped and in how a bad index is reported. */

typedef struct {
    rows_plan rows;     /* x as [outer, in_rows, inner], out as [outer, n, inner] */
    const int32_t *index;
} gather_plan;

static void gather_cpu(const ag_real *x, const int32_t *index, ag_real *out, int64_t outer, int in_rows, int n,
                       int64_t inner) {
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n; i++)
            memcpy(out + (o * n + i) * inner, x + (o * in_rows + index[i]) * inner, (size_t)inner * sizeof(ag_real));
}

typedef struct {
    const ag_real *g;
    const int32_t *first, *pos;
    ag_real *gx;
    int64_t outer, inner;
    int in_rows, n;
    bool fresh; /* gx is new: every row is written */
} gather_job;

/* Rows [r0, r1) of gx (over every outer slice), whole rows: a repeated
 * index adds up, as it should, in the order of the index array; a fresh
 * gx gets its zeros here, row by row, instead of in a pass of its own.
 * Cut by rows, a part skips the rows no position reads at the cost of one
 * test each (an embedding's gradient: 4K positions over 100K rows), where
 * a cut by columns had every part walk every row. */
AG_SIMD_CLONES static void gather_grad_rows(void *ctx, int64_t r0, int64_t r1) {
    const gather_job *j = ctx;
    const int64_t inner = j->inner;
    for (int64_t o = 0; o < j->outer; o++)
        for (int64_t r = r0; r < r1; r++) {
            ag_real *gx = j->gx + (o * j->in_rows + r) * inner;
            if (j->fresh) memset(gx, 0, (size_t)inner * sizeof *gx);
            for (int32_t p = j->first[r]; p < j->first[r + 1]; p++) {
                const ag_real *g = j->g + (o * j->n + j->pos[p]) * inner;
                for (int64_t k = 0; k < inner; k++) gx[k] += g[k];
            }
        }
}

static void gather_backward_cpu(const ag_real *g, const int32_t *first, const int32_t *pos, ag_real *gx,
                                int64_t outer, int in_rows, int n, int64_t inner, bool fresh) {
    gather_job j = {g, first, pos, gx, outer, inner, in_rows, n, fresh};
    /* rows per part: ~AG_GRAIN_ELEMENTWISE elements of work, a row costing
     * its zeroing (or its test) and, on average, the elements of g added */
    int64_t rows = in_rows > 0 ? in_rows : 1;
    int64_t per_row = outer * (fresh ? inner : 1) + (outer * n * inner + rows - 1) / rows;
    int64_t grain = AG_GRAIN_ELEMENTWISE / (per_row > 0 ? per_row : 1);
    ag__parallel_range(in_rows, grain > 0 ? grain : 1, gather_grad_rows, &j);
}

/* Each element of gx sums its own sources in increasing position: the
 * positions reading each row, listed by a counting sort of the index on
 * the host (pos[first[r] .. first[r+1]) read row r), go to the device with
 * the index's size, in one array (one upload): first, then pos. */
static void gather_backward(ag_node *n) {
    const gather_plan *p = n->saved;
    const rows_plan *r = &p->rows;
    int rows = (int)r->in_rows, count = (int)r->out_rows;
    int32_t *first = ag__arena_zalloc(((size_t)rows + 1 + (size_t)count) * sizeof *first);
    int32_t *next = ag__arena_alloc(((size_t)rows + 1) * sizeof *next); /* where row k's next position goes */
    int32_t *pos = first + rows + 1;
    for (int i = 0; i < count; i++) first[p->index[i] + 1]++;
    for (int k = 0; k < rows; k++) first[k + 1] += first[k];
    memcpy(next, first, ((size_t)rows + 1) * sizeof *next);
    for (int i = 0; i < count; i++) pos[next[p->index[i]]++] = i;
    ag_device dev = n->out->device;
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    const int32_t *there = ag__step_i32_on(dev, first, (int64_t)rows + 1 + count);
    ag__shape_on(n->op, dev)->gather_backward(n->out->grad, there, there + rows + 1, gx, r->outer, rows, count,
                                              r->inner, fresh);
}

/* Indices already checked; out has the gathered size, on x's device. */
static ag_tensor *gather(const char *op, ag_tensor *x, int axis, const int32_t *index, int n, ag_tensor *out) {
    rows_plan r = rows_along(x, axis, 0, n);
    ag__shape_on(op, x->device)
        ->gather(x->data, ag__step_i32_on(x->device, index, n), out->data, r.outer, (int)r.in_rows, n, r.inner);
    ag_node *node = ag__record(op, gather_backward, out, 1, &x);
    if (node) { /* the caller's index array may change before backward runs */
        gather_plan *p = ag__arena_alloc(sizeof *p);
        int32_t *copy = ag__arena_alloc((size_t)n * sizeof *copy);
        if (n) memcpy(copy, index, (size_t)n * sizeof *copy);
        *p = (gather_plan){r, copy};
        node->saved = p;
    }
    return out;
}

ag_tensor *ag_index_select(ag_tensor *x, int axis, const int32_t *index, int n) {
    ag_device dev = ag__check_same_device("ag_index_select", x, NULL);
    if (n > 0) ag__need_array("ag_index_select", "the index", index);
    axis = ag__axis("ag_index_select", x, axis);
    char sx[64];
    if (n < 0) ag__fatal("ag_index_select", "negative index count %d", n);
    for (int i = 0; i < n; i++)
        if (index[i] < 0 || index[i] >= x->shape[axis])
            ag__fatal("ag_index_select", "index %d at position %d out of range [0, %d) for axis %d of shape %s",
                      index[i], i, x->shape[axis], axis, ag_shape_str(x, sx, sizeof sx));
    int shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[axis] = n;
    return gather("ag_index_select", x, axis, index, n, ag__empty_on(dev, x->ndim, shape));
}

/* Each example's valid positions in reverse order, its padding in place:
 * a gather of the rows of x seen as [B*N, ...], by one index for all. */
ag_tensor *ag_reverse_padded(ag_tensor *x, const int32_t *lengths) {
    const char *op = "ag_reverse_padded";
    ag_device dev = ag__check_same_device(op, x, NULL);
    char sx[64];
    if (x->ndim < 2) ag__fatal(op, "x %s: want [B, N, ...]", ag_shape_str(x, sx, sizeof sx));
    int B = x->shape[0], N = x->shape[1];
    int64_t rows = (int64_t)B * N;
    if (rows > INT32_MAX) ag__fatal(op, "x %s: %lld positions (at most %d)", ag_shape_str(x, sx, sizeof sx),
                                    (long long)rows, INT32_MAX);
    int32_t *index = ag__arena_alloc((size_t)(rows + 1) * sizeof *index);
    for (int b = 0; b < B; b++) {
        int len = lengths ? lengths[b] : N;
        if (len < 0 || len > N) ag__fatal(op, "lengths[%d] = %d is outside [0, %d]", b, len, N);
        for (int t = 0; t < N; t++) index[(int64_t)b * N + t] = (int32_t)((int64_t)b * N + (t < len ? len - 1 - t : t));
    }
    int flat[AG_MAX_DIMS]; /* x as [B*N, ...]: the positions one axis */
    flat[0] = (int)rows;
    for (int d = 2; d < x->ndim; d++) flat[d - 1] = x->shape[d];
    ag_tensor *rows_of_x = ag_reshape(x, x->ndim - 1, flat);
    ag_tensor *y = gather(op, rows_of_x, 0, index, (int)rows, ag__empty_on(dev, x->ndim - 1, flat));
    return ag_reshape(y, x->ndim, x->shape);
}

/* "[1,2]": the position of flat element i in a tensor of the given shape. */
static const char *position_str(int64_t i, int ndim, const int *shape, char *buf, size_t size) {
    ag_tensor pos = {.ndim = ndim};
    for (int d = ndim - 1; d >= 0; d--) {
        pos.shape[d] = shape[d] ? (int)(i % shape[d]) : 0;
        i = shape[d] ? i / shape[d] : 0;
    }
    return ag_shape_str(&pos, buf, size);
}

ag_tensor *ag_embedding(ag_tensor *table, const int32_t *ids, int ndim, const int *shape) {
    ag_device dev = ag__check_same_device("ag_embedding", table, NULL);
    char st[64], sp[64];
    if (table->ndim != 2)
        ag__fatal("ag_embedding", "the table must be [V, d], got %s", ag_shape_str(table, st, sizeof st));
    if (ndim < 0 || ndim + 1 > AG_MAX_DIMS)
        ag__fatal("ag_embedding", "ids with %d dims: the output would have more than %d", ndim, AG_MAX_DIMS);
    int out_shape[AG_MAX_DIMS];
    int64_t count = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) ag__fatal("ag_embedding", "negative ids dim %d", shape[d]);
        out_shape[d] = shape[d];
        count *= shape[d];
    }
    out_shape[ndim] = table->shape[1];
    if (count > INT32_MAX) ag__fatal("ag_embedding", "%lld ids (at most %d)", (long long)count, INT32_MAX);
    int vocab = table->shape[0];
    for (int64_t i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            ag__fatal("ag_embedding", "id %d at position %s out of range [0, %d) for table %s", ids[i],
                      position_str(i, ndim, shape, sp, sizeof sp), vocab, ag_shape_str(table, st, sizeof st));
    return gather("ag_embedding", table, 0, ids, (int)count, ag__empty_on(dev, ndim + 1, out_shape));
}

/* ---- the CPU's table (ops/shape.h; CUDA's is in ops/cuda/shape.cu) ---- */

/* ---- differences from a reference block ---- */

static void ref_diff_cpu(const ag_real *x, ag_real *y, int64_t rows, int g, int d) {
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *xr = x + r * (g + 1) * d, *last = xr + (int64_t)g * d;
        ag_real *yr = y + r * g * d;
        for (int k = 0; k < g; k++)
            for (int l = 0; l < d; l++) yr[(int64_t)k * d + l] = xr[(int64_t)k * d + l] - last[l];
    }
}

static void ref_diff_backward_cpu(const ag_real *gy, ag_real *gx, int64_t rows, int g, int d, bool fresh) {
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *gyr = gy + r * g * d;
        ag_real *gxr = gx + r * (g + 1) * d, *last = gxr + (int64_t)g * d;
        for (int64_t i = 0; i < (int64_t)g * d; i++) gxr[i] = fresh ? gyr[i] : gxr[i] + gyr[i];
        for (int l = 0; l < d; l++) {
            ag_real sum = 0;
            for (int k = 0; k < g; k++) sum += gyr[(int64_t)k * d + l];
            last[l] = fresh ? -sum : last[l] - sum;
        }
    }
}

static void ref_differences_backward(ag_node *n) {
    ag_tensor *t = n->in[0];
    int g = n->iarg[0], d = t->shape[t->ndim - 1] / (g + 1);
    bool fresh;
    ag_real *gx = ag__grad_write(t, &fresh);
    ag__shape_on(n->op, t->device)->ref_diff_backward(n->out->grad, gx, d ? t->size / ((int64_t)(g + 1) * d) : 0, g, d,
                                                       fresh);
}

ag_tensor *ag__ref_differences(ag_tensor *t, int g) {
    const char *op = "ag__ref_differences";
    ag_device dev = ag__check_same_device(op, t, NULL);
    char st[64];
    int last = t->ndim >= 1 ? t->shape[t->ndim - 1] : 0;
    if (t->ndim < 1 || g < 1 || last % (g + 1) != 0)
        ag__fatal(op, "t %s into %d blocks and a reference: want t [..., (g + 1) d] with g >= 1",
                  ag_shape_str(t, st, sizeof st), g);
    int d = last / (g + 1), shape[AG_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[t->ndim - 1] = g * d;
    ag_tensor *out = ag__empty_on(dev, t->ndim, shape);
    ag__shape_on(op, dev)->ref_diff(t->data, out->data, d ? t->size / ((int64_t)(g + 1) * d) : 0, g, d);
    ag_node *n = ag__record(op, ref_differences_backward, out, 1, &t);
    if (n) n->iarg[0] = g;
    return out;
}

static const ag__shape_kernels shape_cpu = {
    .strided_copy = strided_copy_cpu,
    .copy_rows = copy_rows_cpu,
    .permute = permute_cpu,
    .gather = gather_cpu,
    .gather_backward = gather_backward_cpu,
    .ref_diff = ref_diff_cpu,
    .ref_diff_backward = ref_diff_backward_cpu,
};
AG_DISPATCH(shape, shape_cpu)
