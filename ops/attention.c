/* attention.c - fused masked scaled-dot-product attention, and the head
 * split/merge permutes around it.
 *
 * Fused attention computes, for every leading (batch, head) slice,
 *     P = softmax(Q K^T * scale + M),   out = P V
 * with two GEMMs and one pass of the softmax row kernel over P in place.
 * Backward keeps nothing but P:
 *     dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)) * scale,
 *     dQ = dS K,    dK = dS^T Q
 * Compared with matmul + masked softmax + matmul this saves the score
 * tensor and its gradient ([B,h,Nq,Nk] twice) and two passes over them.
 * ag_attention_recompute keeps not even P: backward makes it again.
 *
 * On the CPU both run a slice's query rows in blocks (below), and a block's
 * products span only the keys its rows' mask leaves open.  On the GPU the
 * same steps run over all slices at once: each product is one
 * strided-batched cuBLAS call, the softmax is the masked softmax kernel
 * over P in place, and backward's dP/dS is one [slices, Nq, Nk] buffer,
 * released when backward returns. */
#include "softmax_rows.h"
#include "attention.h"
#include "dispatch.h"
#include "../graph/device.h"

/* C [M, N] (rows ldc apart) = alpha op(A) op(B), overwriting C.  OpenBLAS
 * implements beta = 0 as a separate zeroing pass that profiled at 9% of
 * attention's time on these small products; memset + beta = 1 (which it
 * skips) costs half of that. */
static void gemm_overwrite(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda,
                           const ag_real *B, int ldb, ag_real *C, int ldc) {
    if (ldc == N)
        memset(C, 0, (size_t)M * N * sizeof *C);
    else
        for (int i = 0; i < M; i++) memset(C + (int64_t)i * ldc, 0, (size_t)N * sizeof *C);
    ag__gemm_serial_ld(ta, tb, M, N, K, alpha, A, lda, B, ldb, 1, C, ldc);
}

/* The geometry of one attention call, saved for backward: ops/attention.h's. */
typedef ag__kattn attn_plan;

/* ---- the CPU's work: blocks of query rows ----
 *
 * A slice's query rows go through in blocks of about ATTN_BLOCK
 * probabilities (at least ATTN_MIN_ROWS rows, for the products' sake).  Keys
 * outside the span a block's rows may see (the mask's -inf head and tail:
 * under a causal mask the keys past the block's last row, under a sliding
 * window also those before its first row's window, in a padded batch the
 * padding) take no part in its products, and their probabilities are 0: a
 * causal block costs what its triangle does, not a square, and a window of
 * w keys makes attention O(N w).
 *
 * ag_attention writes each block's P into probs, where backward reads it.
 * ag_attention_recompute (probs NULL) keeps a block's scores, softmax and
 * P V in the cache and no [Nq, Nk] buffer exists: backward makes the
 * block's P again with the same calls on the same rows, so it is the
 * forward's to the bit, then takes that block's share of every gradient
 * (flash attention's trade: one more product and softmax per block for
 * O(Nq Nk) less memory).  In the same blocks the two give the same values
 * and gradients (a stored slice with no mask to trim is one block).
 *
 * The pool runs parts of whole units: a unit is the `group` query slices
 * that read one key-value slice (one slice without groups).  A unit is one
 * thread's work from start to end with single-threaded GEMMs, so dK and dV
 * have one writer and the results do not depend on threads or parts. */
enum { ATTN_BLOCK = 1 << 15, ATTN_MIN_ROWS = 16, ATTN_MAX_PARTS = 64 };

int ag__attention_block_rows;

typedef struct {
    const attn_plan *p;
    const ag_real *Q, *K, *V, *G;
    ag_real *out, *GQ, *GK, *GV;
    ag_real *scratch;         /* per thread (ag__worker): a block's P (recomputed) and, in backward, its dP/dS */
    int64_t per_part;         /* units */
} attn_job;

static int64_t units_of(const attn_plan *p) { return p->slices / p->group; }

/* Units [part * per_part, ...) of the job. */
static int64_t units_end(const attn_job *j, int64_t part) {
    int64_t end = (part + 1) * j->per_part, units = units_of(j->p);
    return end < units ? end : units;
}

/* Query rows a block.  Stored probabilities with no mask have no span to
 * trim: the slice is one block, one product. */
static int block_rows(const attn_plan *p) {
    if (p->block_rows > 0) return p->block_rows < p->nq ? p->block_rows : p->nq;
    if (p->probs && !p->mask) return p->nq > 0 ? p->nq : 1;
    int rows = ATTN_BLOCK / (p->nk > 0 ? p->nk : 1);
    if (rows < ATTN_MIN_ROWS) rows = ATTN_MIN_ROWS;
    return p->nq < rows ? (p->nq > 0 ? p->nq : 1) : rows;
}

/* The units cut into parts (at most ATTN_MAX_PARTS: the split does not
 * change a bit of the results). */
static attn_job attention_job(const attn_plan *p, int64_t *parts) {
    int64_t units = units_of(p), per = ag__units_per_part((int64_t)p->group * p->nq * p->nk);
    if ((units + per - 1) / per > ATTN_MAX_PARTS) per = (units + ATTN_MAX_PARTS - 1) / ATTN_MAX_PARTS;
    *parts = (units + per - 1) / per;
    return (attn_job){.p = p, .per_part = per};
}

/* The keys rows r0.. of slice s may attend to: [first, end), the span
 * outside which every row's mask is -inf (each row read from both ends,
 * up to the span found so far); empty (end 0) when every row is fully
 * masked.  The probabilities outside it are 0. */
typedef struct {
    int first, end;
} key_span;

static key_span block_keys(const attn_plan *p, int64_t s, int r0, int rows) {
    if (!p->mask) return (key_span){0, p->nk};
    const ag__mask_plan *mp = p->mask_plan;
    const ag_real *m = p->mask + (s / mp->rows3[1]) * mp->stride3[0] + (s % mp->rows3[1]) * mp->stride3[1];
    key_span span = {p->nk, 0};
    for (int r = 0; r < rows && (span.first > 0 || span.end < p->nk); r++) {
        const ag_real *row = m + (int64_t)(r0 + r) * mp->stride3[2];
        int first = 0, end = p->nk;
        while (first < span.first && row[first] == -INFINITY) first++;
        if (first == p->nk) continue; /* fully masked */
        while (end > span.end && row[end - 1] == -INFINITY) end--;
        span.first = first < span.first ? first : span.first;
        span.end = end > span.end ? end : span.end;
    }
    return span.end > span.first ? span : (key_span){0, 0};
}

/* The stored op's forward keeps each block's span in p->spans (two ints a
 * block), so its backward reads neither the mask (which may have changed
 * since) nor the scan again; the recomputed op's backward reads the mask
 * as its forward did. */
static int32_t *span_slot(const attn_plan *p, int64_t s, int r0, int block) {
    return p->spans + 2 * (s * ((p->nq + block - 1) / block) + r0 / block);
}

static key_span backward_keys(const attn_plan *p, int64_t s, int r0, int rows, int block) {
    if (!p->spans) return block_keys(p, s, r0, rows);
    const int32_t *k = span_slot(p, s, r0, block);
    return (key_span){k[0], k[1]};
}

/* Where the block (s, r0) with keys k has its probabilities: column
 * k.first of its rows in probs (*ld = Nk), or, recomputed, the part's
 * scratch (*ld = the span's width). */
static ag_real *block_at(const attn_job *j, ag_real *scratch, int64_t s, int r0, key_span k, int *ld) {
    const attn_plan *p = j->p;
    if (!p->probs) {
        *ld = k.end - k.first;
        return scratch;
    }
    *ld = p->nk;
    return p->probs + (s * p->nq + r0) * (int64_t)p->nk + k.first;
}

/* P [rows, keys] (rows ld apart) = softmax(scale Q K^T + mask) over rows
 * r0.. of slice s and its keys k. */
static void block_probs(const attn_job *j, int64_t s, int r0, int rows, key_span k, ag_real *P, int ld) {
    const attn_plan *p = j->p;
    gemm_overwrite(false, true, rows, k.end - k.first, p->d, p->scale, j->Q + (s * p->nq + r0) * p->d, p->d,
                   j->K + (s / p->group * p->nk + k.first) * p->d, p->d, P, ld);
    ag__mask_plan block = *p->mask_plan;
    block.rows3[2] = rows;             /* the slice's rows r0..r0 + rows - 1, */
    block.cols = k.end - k.first;      /* their keys' columns (the mask's rows keep their stride) */
    const ag_real *mask = p->mask ? p->mask + r0 * block.stride3[2] + k.first : NULL;
    ag__softmax_slice(&block, mask, (int)(s / block.rows3[1]), (int)(s % block.rows3[1]), P, ld, 1, P);
}

/* Stored probabilities outside the span: 0 (the whole rows when k is empty). */
static void zero_outside(ag_real *row0, int rows, int nk, key_span k) {
    for (int r = 0; r < rows; r++, row0 += nk) {
        memset(row0, 0, (size_t)k.first * sizeof *row0);
        memset(row0 + k.end, 0, (size_t)(nk - k.end) * sizeof *row0);
    }
}

static void forward_part(void *ctx, int64_t part) {
    const attn_job *j = ctx;
    const attn_plan *p = j->p;
    int block = block_rows(p);
    ag_real *scratch = p->probs ? NULL : j->scratch + (int64_t)ag__worker() * block * p->nk; /* a recomputed P */
    for (int64_t u = part * j->per_part; u < units_end(j, part); u++)
        for (int64_t s = u * p->group; s < (u + 1) * p->group; s++)
            for (int r0 = 0; r0 < p->nq; r0 += block) {
                int rows = p->nq - r0 < block ? p->nq - r0 : block, ld;
                key_span k = block_keys(p, s, r0, rows);
                if (p->spans) span_slot(p, s, r0, block)[0] = k.first, span_slot(p, s, r0, block)[1] = k.end;
                if (p->probs) zero_outside(p->probs + (s * p->nq + r0) * (int64_t)p->nk, rows, p->nk, k);
                ag_real *out = j->out + (s * p->nq + r0) * p->dv;
                if (k.end == 0) { /* every row fully masked */
                    memset(out, 0, (size_t)rows * p->dv * sizeof *out);
                    continue;
                }
                ag_real *P = block_at(j, scratch, s, r0, k, &ld);
                block_probs(j, s, r0, rows, k, P, ld);
                gemm_overwrite(false, false, rows, p->dv, k.end - k.first, 1, P, ld,
                               j->V + (u * p->nk + k.first) * p->dv, p->dv, out, p->dv);
            }
}

static void backward_part(void *ctx, int64_t part) {
    const attn_job *j = ctx;
    const attn_plan *p = j->p;
    int block = block_rows(p);
    ag_real *dS = j->scratch + (int64_t)ag__worker() * (p->probs ? 1 : 2) * block * p->nk;
    ag_real *scratch = p->probs ? NULL : dS + (int64_t)block * p->nk; /* a recomputed P */
    for (int64_t u = part * j->per_part; u < units_end(j, part); u++)
        for (int64_t s = u * p->group; s < (u + 1) * p->group; s++)
            for (int r0 = 0; r0 < p->nq; r0 += block) {
                int rows = p->nq - r0 < block ? p->nq - r0 : block, ld;
                key_span k = backward_keys(p, s, r0, rows, block);
                if (k.end == 0) continue; /* every row fully masked: no gradient */
                int keys = k.end - k.first;
                int64_t at = s * p->nq + r0, kv = u * p->nk + k.first; /* the block's first key row */
                const ag_real *Gb = j->G + at * p->dv;
                ag_real *P = block_at(j, scratch, s, r0, k, &ld);
                if (!p->probs) block_probs(j, s, r0, rows, k, P, ld);
                if (j->GV) ag__gemm_serial_ld(true, false, keys, p->dv, rows, 1, P, ld, Gb, p->dv, 1, j->GV + kv * p->dv, p->dv);
                if (!j->GQ && !j->GK) continue;
                gemm_overwrite(false, true, rows, keys, p->dv, 1, Gb, p->dv, j->V + kv * p->dv, p->dv, dS, keys); /* dP = dO V^T */
                ag__softmax_rows_grad(P, ld, dS, p->scale, dS, rows, keys, false);
                if (j->GQ) ag__gemm_serial(false, false, rows, p->d, keys, 1, dS, j->K + kv * p->d, 1, j->GQ + at * p->d);
                if (j->GK) ag__gemm_serial(true, false, keys, p->d, rows, 1, dS, j->Q + at * p->d, 1, j->GK + kv * p->d);
            }
}

/* Runs fn over the job's parts, with `blocks` blocks of scratch a thread. */
static void attention_run(attn_job *j, int64_t parts, int blocks, ag__part_fn fn) {
    ag__parallel_scratch(parts, fn, j, &j->scratch, blocks * block_rows(j->p) * (int64_t)j->p->nk);
}

static void attention_forward_cpu(const attn_plan *p, const ag__mask_plan *mp, const ag_real *mask, const ag_real *Q,
                                  const ag_real *K, const ag_real *V, ag_real *out) {
    (void)mp, (void)mask; /* the plan's */
    int64_t parts;
    attn_job j = attention_job(p, &parts);
    j.Q = Q, j.K = K, j.V = V, j.out = out;
    attention_run(&j, parts, p->probs ? 0 : 1, forward_part);
}

/* The blocks add into the gradients, so a fresh buffer is zeroed first;
 * for q = k only the first use is fresh. */
static void attention_backward_cpu(const attn_plan *p, const ag_real *Q, const ag_real *K, const ag_real *V,
                                   const ag_real *G, ag_real *GQ, bool fresh_q, ag_real *GK, bool fresh_k, ag_real *GV,
                                   bool fresh_v) {
    int64_t units = units_of(p), parts;
    if (GV && fresh_v) ag__zero(GV, (size_t)units * p->nk * p->dv * sizeof *GV);
    if (GQ && fresh_q) ag__zero(GQ, (size_t)p->slices * p->nq * p->d * sizeof *GQ);
    if (GK && fresh_k) ag__zero(GK, (size_t)units * p->nk * p->d * sizeof *GK);
    attn_job j = attention_job(p, &parts);
    j.Q = Q, j.K = K, j.V = V, j.G = G, j.GQ = GQ, j.GK = GK, j.GV = GV;
    attention_run(&j, parts, p->probs ? 1 : 2, backward_part); /* dP/dS, and a recomputed P */
}

static void attention_backward(ag_node *n) {
    const attn_plan *p = n->saved;
    ag_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    /* Taken in the order they are written (dV, dQ, dK): a tensor passed
     * twice (self-attention's q = k) is stored by its first use, then added. */
    bool fv = false, fq = false, fk = false;
    ag_real *GV = ag__wants(n, 2) ? ag__grad_write(v, &fv) : NULL;
    ag_real *GQ = ag__wants(n, 0) ? ag__grad_write(q, &fq) : NULL;
    ag_real *GK = ag__wants(n, 1) ? ag__grad_write(k, &fk) : NULL;
    ag__attention_on(n->op, n->out->device)
        ->backward(p, q->data, k->data, v->data, n->out->grad, GQ, fq, GK, fk, GV, fv);
}

/* Q [..., Nq, d], K [..., Nk, d], V [..., Nk, dv] with equal leading dims,
 * but K's and V's dim -3 may divide Q's (grouped-query attention): the
 * query slices per key-value slice. */
static int attention_shapes(const char *op, const ag_tensor *q, const ag_tensor *k, const ag_tensor *v) {
    char sq[64], sk[64], sv[64];
    ag__check_same_device(op, q, k);
    ag__check_same_device(op, q, v);
    bool ok = q->ndim >= 2 && q->ndim == k->ndim && q->ndim == v->ndim;
    int nd = q->ndim, group = 1;
    for (int i = 0; ok && i < nd - 2; i++) {
        bool heads = i == nd - 3 && k->shape[i] > 0 && q->shape[i] % k->shape[i] == 0;
        ok = (q->shape[i] == k->shape[i] || heads) && k->shape[i] == v->shape[i];
        if (heads) group = q->shape[i] / k->shape[i];
    }
    ok = ok && q->shape[nd - 1] == k->shape[nd - 1] && k->shape[nd - 2] == v->shape[nd - 2];
    if (!ok)
        ag__fatal(op,
                  "Q %s, K %s, V %s do not fit (want Q[..., Nq, d], K[..., Nk, d], V[..., Nk, dv], same leading dims, "
                  "but K and V may have fewer heads (dim -3) where their count divides Q's)",
                  ag_shape_str(q, sq, sizeof sq), ag_shape_str(k, sk, sizeof sk), ag_shape_str(v, sv, sizeof sv));
    return group;
}

/* Both attentions: keep_probs stores P for backward (and for *probs),
 * else backward makes it again (the plan keeps the mask for that). */
static ag_tensor *attention(const char *op, ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale,
                            bool keep_probs, ag_tensor **probs) {
    ag__need(op, "q", q), ag__need(op, "k", k), ag__need(op, "v", v);
    int group = attention_shapes(op, q, k, v);
    ag_device dev = q->device;
    int nd = q->ndim;
    attn_plan p = {.nq = q->shape[nd - 2], .nk = k->shape[nd - 2], .d = q->shape[nd - 1], .dv = v->shape[nd - 1],
                   .scale = (ag_real)scale, .slices = 1, .group = group};
    int scores[AG_MAX_DIMS], out_shape[AG_MAX_DIMS];
    for (int i = 0; i < nd - 2; i++) {
        scores[i] = out_shape[i] = q->shape[i];
        p.slices *= q->shape[i];
    }
    scores[nd - 2] = out_shape[nd - 2] = p.nq;
    scores[nd - 1] = p.nk;
    out_shape[nd - 1] = p.dv;
    ag__mask_plan mp = ag__mask_plan_on(op, nd, scores, dev, mask);
    p.mask = mask ? mask->data : NULL;
    p.mask_plan = &mp;

    ag_tensor *out = ag__empty_on(dev, nd, out_shape);
    /* An empty product keeps its few probabilities: the kernels' blocks may then take every size as >= 1 */
    if (!p.slices || !p.nq || !p.nk || !p.d || !p.dv) keep_probs = true;
    p.block_rows = ag__attention_block_rows;
    if (keep_probs) {
        int64_t n_probs = p.slices * (int64_t)p.nq * p.nk;
        p.probs = ag__step_alloc_on(dev, (size_t)(n_probs ? n_probs : 1) * sizeof(ag_real));
    }
    if (keep_probs && mask && dev == AG_CPU) { /* the blocks' key spans, forward's for backward */
        int block = block_rows(&p);
        p.spans = ag__arena_alloc((size_t)(2 * p.slices * ((p.nq + block - 1) / block) + 1) * sizeof *p.spans);
    }
    ag__attention_on(op, dev)->forward(&p, &mp, p.mask, q->data, k->data, v->data, out->data);

    ag_node *n = ag__record(op, attention_backward, out, 3, (ag_tensor *[]){q, k, v});
    if (n) {
        attn_plan *saved = ag__arena_alloc(sizeof *saved);
        ag__mask_plan *saved_mp = ag__arena_alloc(sizeof *saved_mp);
        *saved_mp = mp;
        *saved = p;
        saved->mask_plan = saved_mp;
        n->saved = saved;
    }
    if (probs) *probs = ag__view_of(p.probs, dev, nd, scores, "ag_attention(probs)"); /* for heatmaps */
    return out;
}

ag_tensor *ag_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale, ag_tensor **probs) {
    return attention("ag_attention", q, k, v, mask, scale, true, probs);
}

ag_tensor *ag_attention_recompute(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale) {
    return attention("ag_attention_recompute", q, k, v, mask, scale, false, NULL);
}

/* ---- head split and merge ----
 *
 * [..., N, h*d] <-> [..., h, N, d] is a permute of the middle dims, which no
 * strided view of contiguous row-major storage can express: it is one copy,
 * d contiguous elements at a time.  Backward is the inverse copy, added. */

/* Copies (or adds) blocks of d between [outer, N, h, d] (rows `row` apart)
 * and [outer, h, N, d]. */
static void heads_permute(const ag_real *src, ag_real *dst, int64_t outer, int N, int h, int d, int64_t row,
                          bool to_heads, bool accumulate) {
    for (int64_t o = 0; o < outer; o++)
        for (int t = 0; t < N; t++)
            for (int j = 0; j < h; j++) {
                int64_t merged = (o * N + t) * row + (int64_t)j * d, split = ((o * h + j) * N + t) * d;
                const ag_real *from = src + (to_heads ? merged : split);
                ag_real *to = dst + (to_heads ? split : merged);
                if (accumulate)
                    for (int i = 0; i < d; i++) to[i] += from[i];
                else
                    memcpy(to, from, (size_t)d * sizeof *to);
            }
}

static void split_heads_backward(ag_node *n) {
    const ag_tensor *y = n->out; /* [..., h, N, d] */
    int nd = y->ndim, h = y->shape[nd - 3], N = y->shape[nd - 2], d = y->shape[nd - 1];
    bool fresh; /* a new gradient buffer: every element is written, copy instead of add */
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__attention_on(n->op, y->device)
        ->heads_permute(y->grad, gx, nd == 4 ? y->shape[0] : 1, N, h, d, (int64_t)h * d, false, !fresh);
}

ag_tensor *ag_split_heads(ag_tensor *x, int h) {
    const char *op = "ag_split_heads";
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    int nd = x->ndim;
    if (nd < 2 || nd > 3 || h < 1 || x->shape[nd - 1] % h != 0)
        ag__fatal(op, "cannot split %s into %d heads (want [N, h*d] or [B, N, h*d] with h >= 1 dividing the last dim)",
                  ag_shape_str(x, sx, sizeof sx), h);
    int N = x->shape[nd - 2], d = x->shape[nd - 1] / h, B = nd == 3 ? x->shape[0] : 1;
    int shape[AG_MAX_DIMS] = {B, h, N, d};
    ag_tensor *out = nd == 3 ? ag__empty_on(dev, 4, shape) : ag__empty_on(dev, 3, shape + 1);
    ag__attention_on(op, dev)->heads_permute(x->data, out->data, B, N, h, d, (int64_t)h * d, true, false);
    ag__record(op, split_heads_backward, out, 1, &x);
    return out;
}

/* Heads from a column range: y [..., h, N, d] came from columns [col, col
 * + h d) of x; the gradient adds into those columns alone (x's gradient
 * buffer zeroed when new: other ranges, or none, fill the rest). */
typedef struct {
    int col;
} heads_at_saved;

static void split_heads_at_backward(ag_node *n) {
    const ag_tensor *x = n->in[0], *y = n->out;
    int nd = y->ndim, h = y->shape[nd - 3], N = y->shape[nd - 2], d = y->shape[nd - 1];
    int col = ((const heads_at_saved *)n->saved)->col;
    ag_real *gx = ag__grad(n->in[0]);
    ag__attention_on(n->op, y->device)
        ->heads_permute(y->grad, gx + col, nd == 4 ? y->shape[0] : 1, N, h, d, x->shape[x->ndim - 1], false, true);
}

ag_tensor *ag_split_heads_at(ag_tensor *x, int col, int h, int d) {
    const char *op = "ag_split_heads_at";
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    int nd = x->ndim;
    int64_t C = nd >= 2 ? x->shape[nd - 1] : 0;
    if (nd < 2 || nd > 3 || h < 1 || d < 1 || col < 0 || col + (int64_t)h * d > C)
        ag__fatal(op, "cannot take %d heads of %d from column %d of %s (want [N, C] or [B, N, C] with col + h*d <= C)",
                  h, d, col, ag_shape_str(x, sx, sizeof sx));
    int N = x->shape[nd - 2], B = nd == 3 ? x->shape[0] : 1;
    int shape[AG_MAX_DIMS] = {B, h, N, d};
    ag_tensor *out = nd == 3 ? ag__empty_on(dev, 4, shape) : ag__empty_on(dev, 3, shape + 1);
    ag__attention_on(op, dev)->heads_permute(x->data + col, out->data, B, N, h, d, C, true, false);
    ag_node *n = ag__record(op, split_heads_at_backward, out, 1, &x);
    if (n) {
        heads_at_saved *sv = ag__arena_alloc(sizeof *sv);
        sv->col = col;
        n->saved = sv;
    }
    return out;
}

static void merge_heads_backward(ag_node *n) {
    const ag_tensor *x = n->in[0]; /* [..., h, N, d] */
    int nd = x->ndim, h = x->shape[nd - 3], N = x->shape[nd - 2], d = x->shape[nd - 1];
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__attention_on(n->op, x->device)
        ->heads_permute(n->out->grad, gx, nd == 4 ? x->shape[0] : 1, N, h, d, (int64_t)h * d, true, !fresh);
}

ag_tensor *ag_merge_heads(ag_tensor *x) {
    const char *op = "ag_merge_heads";
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    int nd = x->ndim;
    if (nd < 3)
        ag__fatal(op, "cannot merge heads of %s (want [h, N, d] or [B, h, N, d])", ag_shape_str(x, sx, sizeof sx));
    int h = x->shape[nd - 3], N = x->shape[nd - 2], d = x->shape[nd - 1], B = nd == 4 ? x->shape[0] : 1;
    int shape[AG_MAX_DIMS] = {B, N, h * d};
    ag_tensor *out = nd == 4 ? ag__empty_on(dev, 3, shape) : ag__empty_on(dev, 2, shape + 1);
    ag__attention_on(op, dev)->heads_permute(x->data, out->data, B, N, h, d, (int64_t)h * d, false, false);
    ag__record(op, merge_heads_backward, out, 1, &x);
    return out;
}

/* ---- the CPU's table (ops/attention.h; CUDA's is in ops/cuda/attention.c) ---- */

static const ag__attention_kernels attention_cpu = {
    .forward = attention_forward_cpu,
    .backward = attention_backward_cpu,
    .heads_permute = heads_permute,
};
AG_DISPATCH(attention, attention_cpu)
