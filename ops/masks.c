/* masks.c - additive attention masks (and the dual-axial attenuation factor)
 * built from a small spec.
 *
 * Conventions (docs/models.md, Conventions): M[q, k] with q the query (row) and k the key
 * (column); 0 where attention is allowed, -inf where not, a finite penalty
 * for distances.  Masks that depend only on (spec, N) are built on first use
 * and kept in a small persistent cache, so a training loop never rebuilds or
 * allocates them; ag_shutdown frees the cache.  It holds one entry per
 * distinct (spec, N) ever asked for: a loop over length buckets keeps one
 * mask per bucket.  The cache stops at MASK_CACHE_BYTES: every width up to
 * W costs ~W^3/3 entries in all, so data with a few very long sentences
 * would otherwise fill memory with masks; past the budget a mask is built
 * in the step arena on each call (an N^2 fill, small beside the N^2 d
 * attention it masks).  Masks of one batch (tree distances, padding) are
 * built into the step arena.
 *
 * Every mask is built on the host and handed out on the current device
 * (ag_set_device): a cached one keeps a device copy beside it, made on first
 * use and freed with the cache; a step one is copied once into the device
 * step arena.  So a model that sets the device before building its masks
 * gets GPU masks and uploads each cached one once per run.  A batch's
 * masks are the cached planes, the lengths and, for tree heads, the
 * sentences' distances, so the device composes them itself (ops/masks.h's
 * pad_planes): MPSAN's [64,4,30,30] is neither filled on the host nor sent
 * each step, and MS-SAN sends its distances [32,30,30], not [32,6,30,30].
 *
 * The log distance -ln|q-k| is -ln(max(|q-k|, 1)): 0 on the diagonal, like
 * at distance 1, rather than +inf.  (docs/models.md only uses it with strict
 * PAST/FUTURE, where the diagonal is masked anyway.) */
#include "../graph/device.h"
#include "dispatch.h"
#include "masks.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- the value of one entry ---- */

static bool direction_allows(ag_mask_dir dir, int q, int k) {
    switch (dir) {
    case AG_MASK_PAST: return k < q;
    case AG_MASK_FUTURE: return k > q;
    case AG_MASK_PAST_INCL: return k <= q;
    case AG_MASK_FUTURE_INCL: return k >= q;
    default: return true;
    }
}

static double spec_weight(const ag_mask_spec *s) { return s->weight != 0 ? s->weight : 1.0; }

/* M[q, k] of one spec; tree_dist is used by AG_DIST_TREE only. */
static double spec_entry(const ag_mask_spec *s, int q, int k, int tree_dist) {
    int dist = abs(k - q);
    if (!direction_allows(s->dir, q, k)) return -INFINITY;
    if (s->faraway > 0 && (dist < 1 || dist > s->faraway)) return -INFINITY;
    if (s->window > 0 && dist >= s->window) return -INFINITY;
    switch (s->dist) {
    case AG_DIST_WORD: return -spec_weight(s) * dist;
    case AG_DIST_LOG: return -spec_weight(s) * log(dist > 1 ? (double)dist : 1.0);
    case AG_DIST_TREE: return -spec_weight(s) * tree_dist;
    default: return 0;
    }
}

static void check_spec(const char *op, const ag_mask_spec *s, int head) {
    if ((int)s->dir < AG_MASK_NONE || (int)s->dir > AG_MASK_FUTURE_INCL)
        ag__fatal(op, "spec %d: unknown direction %d", head, (int)s->dir);
    if ((int)s->dist < AG_DIST_NONE || (int)s->dist > AG_DIST_TREE)
        ag__fatal(op, "spec %d: unknown distance kind %d", head, (int)s->dist);
    if (s->faraway < 0) ag__fatal(op, "spec %d: faraway %d < 0", head, s->faraway);
    if (s->window < 0) ag__fatal(op, "spec %d: window %d < 0 (0: none)", head, s->window);
    if (!isfinite(s->weight)) ag__fatal(op, "spec %d: weight %g is not finite", head, s->weight);
}

/* ---- the persistent cache of (spec, N) masks ---- */

typedef enum { KIND_MASK, KIND_ATTENUATION } mask_kind;

typedef struct cache_entry {
    struct cache_entry *next;
    mask_kind kind;
    int ndim, heads, N;     /* ndim 2: [N,N], ndim 3: [heads,N,N] */
    ag_mask_spec *specs;    /* heads copies (KIND_MASK) */
    double w, c;            /* KIND_ATTENUATION */
    ag_tensor t;
    ag_tensor dev;          /* t's copy on the GPU, once asked for there (dev.data NULL until then) */
} cache_entry;

static cache_entry *cache;
static void masks_release(void);
static size_t cache_bytes;
#define MASK_CACHE_BYTES ((size_t)64 << 20)

static bool same_spec(const ag_mask_spec *a, const ag_mask_spec *b) {
    return a->dir == b->dir && a->faraway == b->faraway && a->dist == b->dist && spec_weight(a) == spec_weight(b) &&
           a->window == b->window;
}

static cache_entry *cache_find(mask_kind kind, int ndim, int heads, int N, const ag_mask_spec *specs, double w,
                               double c) {
    for (cache_entry *e = cache; e; e = e->next) {
        if (e->kind != kind || e->ndim != ndim || e->heads != heads || e->N != N) continue;
        if (kind == KIND_ATTENUATION) {
            if (e->w == w && e->c == c) return e;
            continue;
        }
        bool same = true;
        for (int i = 0; same && i < heads; i++) same = same_spec(&e->specs[i], &specs[i]);
        if (same) return e;
    }
    return NULL;
}

/* A new cache entry, or NULL when the mask would take the cache past its
 * budget: the caller then builds it in step memory (*t). */
static cache_entry *cache_add(mask_kind kind, int ndim, int heads, int N, ag_tensor **t) {
    int shape[3] = {heads, N, N};
    size_t bytes = (size_t)heads * N * N * sizeof(ag_real);
    if (cache_bytes + bytes > MASK_CACHE_BYTES) {
        *t = ag__empty(ndim, shape + 3 - ndim);
        return NULL;
    }
    cache_entry *e = ag__calloc(1, sizeof *e);
    e->kind = kind;
    e->ndim = ndim;
    e->heads = heads;
    e->N = N;
    e->t.ndim = ndim;
    for (int i = 0; i < AG_MAX_DIMS; i++) e->t.shape[i] = i < ndim ? shape[i + 3 - ndim] : 1;
    e->t.size = (int64_t)heads * N * N;
    e->t.data = ag__malloc(bytes ? bytes : 1);
    e->t.persistent = true; /* not step memory; requires_grad stays false */
    e->next = cache;
    if (!cache) ag__at_shutdown(masks_release);
    cache = e;
    cache_bytes += bytes;
    *t = &e->t;
    return e;
}

/* At ag_shutdown (registered with the first entry). */
static void masks_release(void) {
    while (cache) {
        cache_entry *e = cache;
        cache = e->next;
        ag__free(e->specs);
        ag__free(e->t.data);
        if (e->dev.data) ag__cuda_free(e->dev.data);
        ag__free(e);
    }
    cache_bytes = 0;
}

/* A mask built on the host (t, in cache entry e or, with e NULL, in step
 * memory) on the current device. */
static ag_tensor *on_current(cache_entry *e, ag_tensor *t) {
    if (ag_get_device() == AG_CPU) return t;
    if (!e) return ag__on_current(t);
    if (!e->dev.data) {
        size_t bytes = (size_t)e->t.size * sizeof(ag_real);
        e->dev = e->t;
        e->dev.device = AG_CUDA;
        e->dev.data = ag__cuda_malloc(bytes ? bytes : 1, "the mask cache");
        ag__cuda_copy(e->dev.data, AG_CUDA, e->t.data, AG_CPU, bytes);
    }
    return &e->dev;
}

/* One [N,N] plane of spec (no tree term). */
static void fill_plane(ag_real *M, const ag_mask_spec *s, int N) {
    for (int q = 0; q < N; q++)
        for (int k = 0; k < N; k++) M[(int64_t)q * N + k] = (ag_real)spec_entry(s, q, k, 0);
}

/* The host mask of (specs, N) in *t; its cache entry, or NULL when it was
 * built in step memory. */
static cache_entry *cached_mask(const char *op, const ag_mask_spec *specs, int heads, int ndim, int N,
                                ag_tensor **t) {
    if (N < 0) ag__fatal(op, "negative length N = %d", N);
    if (heads < 1) ag__fatal(op, "%d heads (at least 1)", heads);
    for (int i = 0; i < heads; i++) {
        check_spec(op, &specs[i], i);
        if (specs[i].dist == AG_DIST_TREE)
            ag__fatal(op, "spec %d: tree distances differ per sentence and are not cached (use ag_mask_batch)", i);
    }
    cache_entry *e = cache_find(KIND_MASK, ndim, heads, N, specs, 0, 0);
    if (e) {
        *t = &e->t;
        return e;
    }
    if ((e = cache_add(KIND_MASK, ndim, heads, N, t))) {
        e->specs = ag__malloc((size_t)heads * sizeof *e->specs);
        memcpy(e->specs, specs, (size_t)heads * sizeof *specs);
    }
    for (int i = 0; i < heads; i++) fill_plane((*t)->data + (int64_t)i * N * N, &specs[i], N);
    return e;
}

ag_tensor *ag_mask(const ag_mask_spec *spec, int N) {
    ag_tensor *t;
    cache_entry *e = cached_mask("ag_mask", spec, 1, 2, N, &t);
    return on_current(e, t);
}

ag_tensor *ag_mask_heads(const ag_mask_spec *specs, int h, int N) {
    ag_tensor *t;
    cache_entry *e = cached_mask("ag_mask_heads", specs, h, 3, N, &t);
    return on_current(e, t);
}

ag_tensor *ag_mask_attenuation(double w, double c, int N) {
    const char *op = "ag_mask_attenuation";
    if (N < 0) ag__fatal(op, "negative length N = %d", N);
    /* ln(w|q-k| + c) must be > 0 for every distance: c > 1 and w >= 0. */
    if (!(c > 1) || !(w >= 0) || !isfinite(w) || !isfinite(c))
        ag__fatal(op, "1/ln(w|q-k| + c) needs c > 1 and w >= 0, got w = %g, c = %g", w, c);
    cache_entry *e = cache_find(KIND_ATTENUATION, 2, 1, N, NULL, w, c);
    if (e) return on_current(e, &e->t);
    ag_tensor *t;
    if ((e = cache_add(KIND_ATTENUATION, 2, 1, N, &t))) {
        e->w = w;
        e->c = c;
    }
    for (int q = 0; q < N; q++)
        for (int k = 0; k < N; k++) t->data[(int64_t)q * N + k] = (ag_real)(1.0 / log(w * abs(q - k) + c));
    return on_current(e, t);
}

/* ---- padding ---- */

static void check_lengths(const char *op, const int32_t *lengths, int B, int N) {
    if (B < 0 || N < 0) ag__fatal(op, "negative batch %d or length %d", B, N);
    ag__need_array(op, "the lengths array", lengths);
    for (int b = 0; b < B; b++)
        if (lengths[b] < 0 || lengths[b] > N)
            ag__fatal(op, "lengths[%d] = %d is outside [0, %d]", b, (int)lengths[b], N);
}

ag_tensor *ag_mask_padding(const int32_t *lengths, int B, int N, int ndim, bool queries) {
    const char *op = "ag_mask_padding";
    if (ndim != 3 && ndim != 4) ag__fatal(op, "ndim %d (3 for scores [B,N,N], 4 for [B,h,N,N])", ndim);
    check_lengths(op, lengths, B, N);
    int rows = queries ? N : 1;
    int shape[4] = {B, 1, rows, N};
    ag_tensor *m = ndim == 4 ? ag__empty(4, shape) : ag__empty(3, (int[]){B, rows, N});
    for (int b = 0; b < B; b++)
        for (int q = 0; q < rows; q++) {
            ag_real *row = m->data + ((int64_t)b * rows + q) * N;
            bool row_padded = queries && q >= lengths[b];
            for (int k = 0; k < N; k++) row[k] = (row_padded || k >= lengths[b]) ? -INFINITY : 0;
        }
    return on_current(NULL, m);
}

/* ---- dependency-tree distances ---- */

/* Checks heads and fills dist[n*n] by one BFS per source over the undirected
 * tree (edges child-parent).  scratch holds 3n + 1 ints. */
static ag_status tree_distance(const int32_t *heads, int n, int32_t *dist, int32_t *scratch) {
    for (int i = 0; i < n; i++) {
        if (heads[i] < -1 || heads[i] >= n)
            return ag__fail(AG_ERR_FORMAT, "position %d: head %d is outside [-1, %d]", i, (int)heads[i], n - 1);
        if (heads[i] == i) return ag__fail(AG_ERR_FORMAT, "position %d: head points to itself", i);
    }
    /* Every chain of heads must reach a root within n steps, or it cycles. */
    for (int i = 0; i < n; i++) {
        int at = i, steps = 0;
        while (at >= 0 && steps <= n) at = heads[at], steps++;
        if (at >= 0) return ag__fail(AG_ERR_FORMAT, "position %d: its heads form a cycle and reach no root", i);
    }
    /* Children lists in CSR form: the children of u are child[first[u]..first[u+1]). */
    int32_t *first = scratch, *child = scratch + n + 1, *queue = scratch + 2 * n + 1;
    memset(first, 0, (size_t)(n + 1) * sizeof *first);
    for (int i = 0; i < n; i++)
        if (heads[i] >= 0) first[heads[i] + 1]++;
    for (int u = 0; u < n; u++) first[u + 1] += first[u];
    int32_t *next = queue; /* the queue, not yet in use, holds the fill pointers */
    memcpy(next, first, (size_t)n * sizeof *next);
    for (int i = 0; i < n; i++)
        if (heads[i] >= 0) child[next[heads[i]]++] = i;
    for (int src = 0; src < n; src++) {
        int32_t *d = dist + (int64_t)src * n;
        for (int k = 0; k < n; k++) d[k] = -1;
        int qh = 0, qt = 0;
        d[src] = 0;
        queue[qt++] = src;
        while (qh < qt) {
            int u = queue[qh++];
            if (heads[u] >= 0 && d[heads[u]] < 0) {
                d[heads[u]] = d[u] + 1;
                queue[qt++] = heads[u];
            }
            for (int c = first[u]; c < first[u + 1]; c++)
                if (d[child[c]] < 0) {
                    d[child[c]] = d[u] + 1;
                    queue[qt++] = child[c];
                }
        }
        for (int k = 0; k < n; k++)
            if (d[k] < 0) d[k] = n; /* another tree of the forest */
    }
    return AG_OK;
}

ag_status ag_tree_distance(const int32_t *heads, int n, int32_t *dist) {
    if (n < 0) return ag__fail(AG_ERR_ARG, "negative sentence length %d", n);
    ag_mark_t m = ag_mark(); /* the scratch is released before returning */
    int32_t *scratch = ag__arena_alloc((size_t)(3 * n + 1) * sizeof *scratch);
    ag_status st = tree_distance(heads, n, dist, scratch);
    ag_rewind(m);
    return st;
}

/* ---- the masks of one batch ---- */

ag_status ag_mask_batch(const ag_mask_spec *specs, int h, int B, int N, const int32_t *lengths, const int32_t *heads,
                        ag_tensor **out) {
    const char *op = "ag_mask_batch";
    *out = NULL;
    check_lengths(op, lengths, B, N);
    if (h < 1) ag__fatal(op, "%d heads (at least 1)", h);
    bool tree = false;
    for (int i = 0; i < h; i++) {
        check_spec(op, &specs[i], i);
        tree |= specs[i].dist == AG_DIST_TREE;
    }
    if (tree && !heads) ag__fatal(op, "a spec uses AG_DIST_TREE but heads is NULL");

    /* The positional part of every head from the cache; the tree terms
     * from the distances, found on the host (a sentence's tree is checked
     * there), composed with the padding where the masks are used: a GPU
     * gets the distances [B,N,N], not the masks [B,h,N,N]. */
    ag_mask_spec *positional = ag__arena_alloc((size_t)h * sizeof *positional);
    ag_real *weight = ag__arena_alloc((size_t)h * sizeof *weight); /* a tree head's; 0: no tree term */
    for (int i = 0; i < h; i++) {
        positional[i] = specs[i];
        weight[i] = 0;
        if (specs[i].dist == AG_DIST_TREE) {
            positional[i] = (ag_mask_spec){.dir = specs[i].dir, .faraway = specs[i].faraway, .window = specs[i].window};
            weight[i] = (ag_real)spec_weight(&specs[i]);
        }
    }
    int32_t *dists = NULL;
    if (tree) {
        dists = ag__arena_zalloc(((size_t)B * N * N + 1) * sizeof *dists); /* every byte sent is set */
        int32_t *dist = ag__arena_alloc(((size_t)N * N + 1) * sizeof *dist);
        int32_t *scratch = ag__arena_alloc((size_t)(3 * N + 1) * sizeof *scratch);
        for (int b = 0; b < B; b++) {
            int len = lengths[b];
            if (tree_distance(heads + (int64_t)b * N, len, dist, scratch) != AG_OK) {
                char why[512];
                snprintf(why, sizeof why, "%s", ag_errmsg());
                return ag__fail(AG_ERR_FORMAT, "sentence %d: %s", b, why);
            }
            for (int q = 0; q < len; q++) /* rows and columns past len are padding: 0, never read */
                memcpy(dists + ((int64_t)b * N + q) * N, dist + (int64_t)q * len, (size_t)len * sizeof *dists);
        }
    }
    ag_tensor *pos_mask;
    cache_entry *e = cached_mask(op, positional, h, 3, N, &pos_mask);
    ag_tensor *pos_here = on_current(e, pos_mask);
    ag_device dev = ag_get_device();
    ag_tensor *m = ag__empty_on(dev, 4, (int[]){B, h, N, N});
    const ag__masks_kernels *k = ag__masks_on(op, dev);
    k->pad_planes(pos_here->data, ag__step_i32_on(dev, lengths, B), tree ? ag__step_i32_on(dev, dists, (int64_t)B * N * N) : NULL,
                  tree ? ag__step_copy_on(dev, weight, (size_t)h * sizeof *weight) : NULL, m->data, B, h, N);
    ag__kernels_done(op, dev);
    if (ag__prof_on) ag__prof_untaped(op); /* no node: its kernel and uploads are its own line's */
    *out = m;
    return AG_OK;
}

/* ---- ag_zero_padding: the rows at or past each example's length set to 0 ----
 * One kernel each way, the lengths on the device (sent once a step with
 * the other ops' copies of them), where multiplying by a 0/1 mask built on
 * the host took its upload as well; a padded row's inf or NaN gives 0,
 * as padding should, not NaN. */

typedef struct {
    const int32_t *len;
    int B, N;
    int64_t inner;
} padding_saved;

static void zero_padding_backward(ag_node *n) {
    const padding_saved *s = n->saved;
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__masks_on(n->op, n->out->device)->pad_rows(n->out->grad, s->len, gx, s->B, s->N, s->inner, !fresh);
}

ag_tensor *ag_zero_padding(ag_tensor *x, const int32_t *lengths) {
    const char *op = "ag_zero_padding";
    ag_device dev = ag__check_same_device(op, x, NULL);
    char sx[64];
    if (x->ndim < 2) ag__fatal(op, "x %s: want [B, N, ...]", ag_shape_str(x, sx, sizeof sx));
    int B = x->shape[0], N = x->shape[1];
    check_lengths(op, lengths, B, N);
    int64_t inner = (int64_t)B * N > 0 ? x->size / ((int64_t)B * N) : 0;
    const int32_t *len = ag__step_i32_on(dev, lengths, B);
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ag__masks_on(op, dev)->pad_rows(x->data, len, out->data, B, N, inner, false);
    ag_node *n = ag__record(op, zero_padding_backward, out, 1, &x);
    if (n) {
        padding_saved *s = ag__arena_alloc(sizeof *s);
        *s = (padding_saved){len, B, N, inner};
        n->saved = s;
    }
    return out;
}

/* ---- the CPU's kernels ---- */

static void pad_planes_cpu(const ag_real *pos, const int32_t *lengths, const int32_t *dists, const ag_real *weight,
                           ag_real *out, int B, int h, int N) {
    for (int b = 0; b < B; b++) {
        int len = lengths[b];
        for (int i = 0; i < h; i++) {
            ag_real *plane = out + ((int64_t)b * h + i) * N * N;
            memcpy(plane, pos + (int64_t)i * N * N, (size_t)N * N * sizeof *plane);
            for (int q = 0; q < N; q++) {
                ag_real *row = plane + (int64_t)q * N;
                const int32_t *d = dists ? dists + ((int64_t)b * N + q) * N : NULL;
                if (d && weight[i] != 0 && q < len)
                    for (int k = 0; k < len; k++) row[k] -= weight[i] * (ag_real)d[k];
                for (int k = q >= len ? 0 : len; k < N; k++) row[k] = -INFINITY;
            }
        }
    }
}

static void pad_rows_cpu(const ag_real *x, const int32_t *lengths, ag_real *y, int B, int N, int64_t inner, bool add) {
    for (int64_t row = 0; row < (int64_t)B * N; row++) {
        const ag_real *xr = x + row * inner;
        ag_real *yr = y + row * inner;
        bool kept = row % N < lengths[row / N];
        if (add && kept)
            for (int64_t k = 0; k < inner; k++) yr[k] += xr[k];
        else if (!add && kept)
            memcpy(yr, xr, (size_t)inner * sizeof *yr);
        else if (!add)
            memset(yr, 0, (size_t)inner * sizeof *yr);
    }
}

static const ag__masks_kernels masks_cpu = {pad_planes_cpu, pad_rows_cpu};
AG_DISPATCH(masks, masks_cpu)
