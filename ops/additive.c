/* additive.c - scalar additive self-attention whose values are its inputs:
 * MPSAN's masked unit (docs/models.md, MPSAN's masked units) as one op,
 *
 *     z[q,k] = (h_k.u + h_q.v) + bias,   e = c tanh(z / c)   (or ELU(z / c)),
 *     p[q,:] = softmax_k(e[q,k] + mask[q,k]),   out_q = sum_k p[q,k] h_k,
 *
 * in place of the ops the model composed it from (two products, two adds,
 * the scaled tanh, the masked softmax, the weighted sum), 30 launches a
 * unit on the GPU with their backward: here forward is one kernel and
 * backward three (ops/cuda/additive.cu).  The scores are [B,N,N], one per
 * pair, as the composition's were: no [B,N,N,d] tensor.  Forward keeps p
 * and (h_t.u, h_t.v) per position; backward, with G = dout:
 *
 *     dp[q,k] = G_q.h_k,   dz = p (dp - sum_k' p dp) f'(z),   f' = 1 - tanh^2 (ELU: 1 or e + 1, over c),
 *     dh_k = sum_q p[q,k] G_q + (sum_q dz[q,k]) u + (sum_k' dz[k,k']) v,
 *     du = sum h_k sum_q dz[q,k],   dv = sum h_q sum_k dz[q,k],   dbias = sum dz.
 *
 * On the CPU an example is a part of the pool, its products p h and p^T G
 * single-thread GEMMs; du, dv and dbias are summed after the parts, in one
 * order, the GPU's (see pair_dots). */
#include "vecmath.h"
#include "dispatch.h"
#include "additive.h"
#include "softmax_rows.h" /* the row softmax and dot of ag_masked_softmax, and its mask rules */
#include "../graph/device.h"

#include <string.h> /* memcpy: pair_dots' lane loads */

/* The mask row (offset) of score row r = b N + q (ops/softmax.h). */
static inline int64_t mask_row(const ag__kmask *m, int64_t r) {
    int64_t i2 = r % m->rows3[2], i01 = r / m->rows3[2];
    return i01 / m->rows3[1] * m->stride3[0] + i01 % m->rows3[1] * m->stride3[1] + i2 * m->stride3[2];
}

/* The score before the mask: the composition's order, (hu_k + hv_q) + bias,
 * then z * (1/c) (ag_mul_scalar) and the scaled tanh or the ELU. */
static inline ag_real score_of(ag_real z, ag_real inv_c, ag_real c, bool elu) {
    ag_real x = z * inv_c;
    return elu ? ag__velu(x) : ag__vtanh(x) * c;
}

/* de/dz at z (see score_of). */
static inline ag_real score_slope(ag_real z, ag_real inv_c, bool elu) {
    ag_real x = z * inv_c;
    if (elu) return (x > 0 ? 1 : ag__velu(x) + 1) * inv_c;
    ag_real t = ag__vtanh(x);
    return 1 - t * t;
}

typedef struct {
    const ag__kadd *p;
    const ag_real *h, *u, *v, *bias, *mask, *g;
    ag_real *out, *gh, *dhu, *dhv;
    bool fresh_h;
    ag_real *dz; /* backward: dp, then dz [B,N,N] */
    int64_t per_part;
} add_job;

/* Parts of examples on the pool: at most MAX_PARTS, fixed by the shape. */
enum { MAX_PARTS = 64 };

static int64_t job_parts(add_job *j) {
    int64_t B = j->p->B, parts = B < MAX_PARTS ? B : MAX_PARTS;
    j->per_part = parts ? (B + parts - 1) / parts : 1;
    return parts ? (B + j->per_part - 1) / j->per_part : 0;
}

/* ---- forward ---- */

AG_SIMD_CLONES /* the scores' tanh and the softmax in 256-bit lanes where the CPU has them (the same bits) */
static void forward_example(const add_job *j, int64_t b) {
    const ag__kadd *p = j->p;
    int N = p->N, d = p->d;
    const ag_real *h = j->h + b * N * d;
    ag_real *huv = p->huv + b * N * 2, *P = p->probs + b * N * N, inv_c = 1 / p->c;
    for (int t = 0; t < N; t++) {
        huv[2 * t] = ag__dot_row(h + (int64_t)t * d, j->u, d);
        huv[2 * t + 1] = ag__dot_row(h + (int64_t)t * d, j->v, d);
    }
    for (int q = 0; q < N; q++) {
        ag_real *row = P + (int64_t)q * N;
        for (int k = 0; k < N; k++) row[k] = score_of((huv[2 * k] + huv[2 * q + 1]) + j->bias[0], inv_c, p->c, p->elu);
        ag__softmax_row(row, j->mask ? j->mask + mask_row(&p->mask, b * N + q) : NULL, 1, row, N);
    }
    if (d > 0) ag__gemm_serial(false, false, N, d, N, 1, P, h, 0, j->out + b * N * d);
}

static void forward_part(void *ctx, int64_t part) {
    const add_job *j = ctx;
    int64_t end = (part + 1) * j->per_part < j->p->B ? (part + 1) * j->per_part : j->p->B;
    for (int64_t b = part * j->per_part; b < end; b++) forward_example(j, b);
}

/* Unit g's plan: its probs and huv (a unit is the one-unit op on its slices). */
static ag__kadd unit_plan(const ag__kadd *p, int g) {
    ag__kadd one = *p;
    one.G = 1;
    one.probs += (int64_t)g * p->B * p->N * p->N;
    one.huv += (int64_t)g * p->B * p->N * 2;
    return one;
}

static void forward_cpu(const ag__kadd *p, const ag_real *h, const ag_real *u, const ag_real *v, const ag_real *bias,
                        const ag_real *mask, ag_real *out) {
    int64_t plane = (int64_t)p->B * p->N * p->d;
    for (int g = 0; g < p->G; g++) { /* unit after unit, each over the pool */
        ag__kadd one = unit_plan(p, g);
        add_job j = {.p = &one, .h = h + g * plane, .u = u + (int64_t)g * p->d, .v = v + (int64_t)g * p->d,
                     .bias = bias + g, .mask = mask ? mask + g * p->mask_group : NULL, .out = out + g * plane};
        ag__parallel(job_parts(&j), forward_part, &j);
    }
}

/* ---- backward ---- */

/* dp[q,k] = G_q.h_k of one example, each pair in ag__dot_row's order:
 * the GPU's lanes compute it so (ops/cuda/additive.cu).  dz = p (dp -
 * sum p dp) f' sums to nearly 0 over a row (exactly, without f'), so the
 * gradients of u, v and the bias are heavily cancelled sums of dz; with dz
 * the same bits on both devices (p, dp and every sum after them in one
 * order) they agree to the last bit, not to the cancellation's 1e-4. */
/* AG_LANES lanes as one value (GCC's vector extension): lane l of a product
 * and a sum is the scalar code's lane l, the same bits. */
typedef ag_real lanes __attribute__((vector_size(AG_LANES * sizeof(ag_real))));

/* (by pointer: a vector passed by value changes the ABI between the clones) */
static inline void load_lanes(lanes *v, const ag_real *p) { memcpy(v, p, sizeof *v); }

static inline ag_real lane_sum(const lanes *acc) { /* ag__dot_row's last sum */
    ag_real s = 0;
    for (int l = 0; l < AG_LANES; l++) s += (*acc)[l];
    return s;
}

/* Four pairs (q, k..k+3) at a time, each lane of each pair in ag__dot_row's
 * order (the same bits): four chains of adds in flight where one pair at a
 * time waited on its own (MPSAN's step spent 10 ms here, 2026-12-07). */
AG_SIMD_CLONES
static void pair_dots(const ag_real *G, const ag_real *h, int N, int d, ag_real *dp) {
    for (int q = 0; q < N; q++) {
        const ag_real *g = G + (int64_t)q * d;
        int k = 0;
        for (; k + 4 <= N; k += 4) {
            const ag_real *h0 = h + (int64_t)k * d, *h1 = h0 + d, *h2 = h1 + d, *h3 = h2 + d;
            lanes a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            int j = 0;
            for (; j + AG_LANES <= d; j += AG_LANES) {
                lanes x, y0, y1, y2, y3;
                load_lanes(&x, g + j), load_lanes(&y0, h0 + j), load_lanes(&y1, h1 + j), load_lanes(&y2, h2 + j);
                load_lanes(&y3, h3 + j);
                a0 += x * y0, a1 += x * y1, a2 += x * y2, a3 += x * y3;
            }
            for (; j < d; j++) {
                int l = j % AG_LANES;
                a0[l] += g[j] * h0[j], a1[l] += g[j] * h1[j], a2[l] += g[j] * h2[j], a3[l] += g[j] * h3[j];
            }
            ag_real *out = dp + (int64_t)q * N + k;
            out[0] = lane_sum(&a0), out[1] = lane_sum(&a1), out[2] = lane_sum(&a2), out[3] = lane_sum(&a3);
        }
        for (; k < N; k++) dp[(int64_t)q * N + k] = ag__dot_row(g, h + (int64_t)k * d, d);
    }
}

/* dz of example b (dp first, in place), its row sums into dhv and column
 * sums into dhu, and dh (+)= p^T G + dhu u + dhv v. */
AG_SIMD_CLONES
static void backward_example(const add_job *j, int64_t b) {
    const ag__kadd *p = j->p;
    int N = p->N, d = p->d;
    const ag_real *h = j->h + b * N * d, *G = j->g + b * N * d, *P = p->probs + b * N * N, *huv = p->huv + b * N * 2;
    ag_real *dp = j->dz + b * N * N, *dhu = j->dhu + b * N, *dhv = j->dhv + b * N, inv_c = 1 / p->c;
    pair_dots(G, h, N, d, dp);
    for (int q = 0; q < N; q++) {
        const ag_real *prow = P + (int64_t)q * N;
        ag_real *row = dp + (int64_t)q * N, dot = ag__dot_row(row, prow, N), sum = 0;
        for (int k = 0; k < N; k++) { /* masked: p = 0, so dz = 0 */
            ag_real z = (huv[2 * k] + huv[2 * q + 1]) + j->bias[0];
            row[k] = prow[k] * (row[k] - dot) * score_slope(z, inv_c, p->elu);
            sum += row[k];
        }
        dhv[q] = sum;
    }
    for (int k = 0; k < N; k++) {
        ag_real sum = 0;
        for (int q = 0; q < N; q++) sum += dp[(int64_t)q * N + k];
        dhu[k] = sum;
    }
    if (!j->gh || d == 0) return;
    ag_real *gh = j->gh + b * N * d;
    ag__gemm_serial(true, false, N, d, N, 1, P, G, j->fresh_h ? 0 : 1, gh);
    for (int t = 0; t < N; t++)
        for (int l = 0; l < d; l++) gh[(int64_t)t * d + l] += dhu[t] * j->u[l] + dhv[t] * j->v[l];
}

static void backward_part(void *ctx, int64_t part) {
    const add_job *j = ctx;
    int64_t end = (part + 1) * j->per_part < j->p->B ? (part + 1) * j->per_part : j->p->B;
    for (int64_t b = part * j->per_part; b < end; b++) backward_example(j, b);
}

/* g (+)= sum over the rows r of w[r] h[r,:] (du from dhu, dv from dhv),
 * each feature's sum in row order from 0, as the GPU's. */
AG_SIMD_CLONES
static void weighted_rows(const ag_real *w, const ag_real *h, int64_t rows, int d, ag_real *g, bool fresh) {
    ag_real *sum = ag__arena_zalloc((size_t)(d + 1) * sizeof *sum);
    for (int64_t r = 0; r < rows; r++)
        for (int l = 0; l < d; l++) sum[l] += w[r] * h[r * d + l];
    for (int l = 0; l < d; l++) g[l] = fresh ? sum[l] : g[l] + sum[l];
}

static void backward_unit(const ag__kadd *p, const ag_real *h, const ag_real *u, const ag_real *v, const ag_real *bias,
                          const ag_real *g, ag_real *work, ag_real *gh, bool fresh_h, ag_real *gu, bool fresh_u,
                          ag_real *gv, bool fresh_v, ag_real *gbias, bool fresh_bias) {
    int64_t rows = (int64_t)p->B * p->N;
    add_job j = {.p = p, .h = h, .u = u, .v = v, .bias = bias, .g = g, .gh = gh, .fresh_h = fresh_h,
                 .dz = work, .dhu = work + rows * p->N, .dhv = work + rows * (p->N + 1)};
    ag__parallel(job_parts(&j), backward_part, &j);
    if (gu) weighted_rows(j.dhu, h, rows, p->d, gu, fresh_u);
    if (gv) weighted_rows(j.dhv, h, rows, p->d, gv, fresh_v);
    if (gbias) {
        ag_real sum = 0;
        for (int64_t r = 0; r < rows; r++) sum += j.dhv[r];
        gbias[0] = fresh_bias ? sum : gbias[0] + sum;
    }
}

/* Unit after unit on its slices (NULL gradients stay NULL). */
static void backward_cpu(const ag__kadd *p, const ag_real *h, const ag_real *u, const ag_real *v, const ag_real *bias,
                         const ag_real *g, ag_real *work, ag_real *gh, bool fresh_h, ag_real *gu, bool fresh_u, ag_real *gv,
                         bool fresh_v, ag_real *gbias, bool fresh_bias) {
    int64_t plane = (int64_t)p->B * p->N * p->d, d = p->d, per_work = (int64_t)p->B * p->N * (p->N + 2);
#define AT(ptr, stride) ((ptr) ? (ptr) + unit * (stride) : NULL)
    for (int unit = 0; unit < p->G; unit++) {
        ag__kadd one = unit_plan(p, unit);
        backward_unit(&one, h + unit * plane, u + unit * d, v + unit * d, bias + unit, g + unit * plane,
                      work + unit * per_work, AT(gh, plane), fresh_h, AT(gu, d), fresh_u, AT(gv, d), fresh_v,
                      AT(gbias, 1), fresh_bias);
    }
#undef AT
}

/* ---- the op ---- */

static void additive_backward(ag_node *n) {
    const ag__kadd *p = n->saved;
    ag_tensor *h = n->in[0], *u = n->in[1], *v = n->in[2], *bias = n->in[3];
    bool fh = false, fu = false, fv = false, fb = false;
    ag_real *gh = ag__wants(n, 0) ? ag__grad_write(h, &fh) : NULL;
    ag_real *gu = ag__wants(n, 1) ? ag__grad_write(u, &fu) : NULL;
    ag_real *gv = ag__wants(n, 2) ? ag__grad_write(v, &fv) : NULL;
    ag_real *gb = ag__wants(n, 3) ? ag__grad_write(bias, &fb) : NULL;
    ag_real *work =
        ag__step_alloc_on(n->out->device, (size_t)((int64_t)p->G * p->B * p->N * (p->N + 2) + 1) * sizeof(ag_real));
    ag__additive_on(n->op, n->out->device)
        ->backward(p, h->data, u->data, v->data, bias->data, n->out->grad, work, gh, fh, gu, fu, gv, fv, gb, fb);
}

/* h [B,N,d] with u, v [d] and bias [1] (grouped: h [G,B,N,d] with u, v
 * [G,d] and bias [G]), all on one device, c finite and positive. */
static void check_shapes(const char *op, const ag_tensor *h, const ag_tensor *u, const ag_tensor *v,
                         const ag_tensor *bias, double c, bool grouped) {
    char sh[64], su[64], sv[64], sb[64];
    ag__check_same_device(op, h, u);
    ag__check_same_device(op, h, v);
    ag__check_same_device(op, h, bias);
    int lead = grouped, G = grouped && h->ndim == 4 ? h->shape[0] : 1, d = h->ndim == 3 + lead ? h->shape[2 + lead] : -1;
    bool ok = h->ndim == 3 + lead && u->ndim == 1 + lead && u->shape[lead] == d && v->ndim == 1 + lead &&
              v->shape[lead] == d && bias->size == G && (!grouped || (u->shape[0] == G && v->shape[0] == G));
    if (!ok)
        ag__fatal(op, "h %s, u %s, v %s, bias %s: want %s", ag_shape_str(h, sh, sizeof sh),
                  ag_shape_str(u, su, sizeof su), ag_shape_str(v, sv, sizeof sv), ag_shape_str(bias, sb, sizeof sb),
                  grouped ? "h [G,B,N,d], u and v [G,d], bias [G]" : "h [B,N,d], u and v [d], bias of one element");
    if (!(c > 0) || !isfinite(c)) ag__fatal(op, "c = %g: want a finite c > 0 (the scores are c tanh(z / c))", c);
}

/* The op, its mask read through plan.mask from mask_data (NULL: none). */
static ag_tensor *additive_unit(const char *op, ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias,
                                ag__kadd plan, const ag_real *mask_data, ag_tensor **probs) {
    ag_device dev = h->device;
    int G = plan.G, B = plan.B, N = plan.N, grouped = h->ndim == 4;
    int scores[4] = {G, B, N, N};
    int64_t n_probs = (int64_t)G * B * N * N;
    plan.probs = ag__step_alloc_on(dev, (size_t)(n_probs + 1) * sizeof(ag_real));
    plan.huv = ag__step_alloc_on(dev, (size_t)(2 * (int64_t)G * B * N + 1) * sizeof(ag_real));
    ag_tensor *out = ag__empty_on(dev, h->ndim, h->shape);
    ag__additive_on(op, dev)->forward(&plan, h->data, u->data, v->data, bias->data, mask_data, out->data);
    /* backward reads p, never the mask: it is no input */
    ag_node *n = ag__record(op, additive_backward, out, 4, (ag_tensor *[]){h, u, v, bias});
    if (n) {
        ag__kadd *saved = ag__arena_alloc(sizeof *saved);
        *saved = plan;
        n->saved = saved;
    }
    if (probs) /* a constant view of p, for heatmaps */
        *probs = ag__view_of(plan.probs, dev, 3 + grouped, scores + !grouped, "ag__additive_self_attention(probs)");
    return out;
}

ag_tensor *ag__additive_self_attention(ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias, ag_tensor *mask,
                                       double c, bool elu, ag_tensor **probs) {
    const char *op = "ag__additive_self_attention";
    check_shapes(op, h, u, v, bias, c, false);
    int B = h->shape[0], N = h->shape[1], scores[3] = {B, N, N};
    ag__kadd plan = {.G = 1, .B = B, .N = N, .d = h->shape[2], .elu = elu, .c = (ag_real)c};
    plan.mask = ag__mask_plan_on(op, 3, scores, h->device, mask); /* the rules of ag_masked_softmax */
    return additive_unit(op, h, u, v, bias, plan, mask ? mask->data : NULL, probs);
}

/* Planes first .. first + G - 1 of masks [B,P,N,N] read where they lie:
 * rows of example b P N N apart, a unit's plane N N after the last one's,
 * no copy (the slice it replaces was a launch a unit). */
static ag_tensor *planes_op(const char *op, ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias,
                            ag_tensor *masks, int first, double c, bool elu, ag_tensor **probs, bool grouped) {
    check_shapes(op, h, u, v, bias, c, grouped);
    int G = grouped ? h->shape[0] : 1, B = h->shape[grouped], N = h->shape[grouped + 1], scores[3] = {B, N, N};
    ag__check_live(op, masks);
    char sm[64], sh[64];
    ag_shape_str(masks, sm, sizeof sm), ag_shape_str(h, sh, sizeof sh);
    if (masks->ndim != 4 || masks->shape[0] != B || masks->shape[2] != N || masks->shape[3] != N || first < 0 ||
        first + G > masks->shape[1])
        ag__fatal(op, "masks %s, plane %d, h %s: want masks [%d,P,%d,%d] and 0 <= plane%s < P", sm, first, sh, B, N, N,
                  grouped ? " + G - 1" : "");
    if (masks->requires_grad) ag__fatal(op, "the masks %s require grad, but masks are constants", sm);
    if (masks->device != h->device)
        ag__fatal(op, "the masks %s are on %s but h %s is on %s", sm, ag_device_name(masks->device), sh,
                  ag_device_name(h->device));
    int64_t per_plane = (int64_t)N * N;
    ag__kadd plan = {.G = G, .B = B, .N = N, .d = h->shape[grouped + 2], .elu = elu, .c = (ag_real)c,
                     .mask_group = per_plane};
    plan.mask = ag__mask_plan_on(op, 3, scores, h->device, NULL); /* the scores' rows, then the plane's strides */
    plan.mask.stride3[0] = 0, plan.mask.stride3[1] = masks->shape[1] * per_plane, plan.mask.stride3[2] = N;
    return additive_unit(op, h, u, v, bias, plan, masks->data + first * per_plane, probs);
}

ag_tensor *ag__additive_self_attention_plane(ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias,
                                             ag_tensor *masks, int plane, double c, bool elu, ag_tensor **probs) {
    return planes_op("ag__additive_self_attention_plane", h, u, v, bias, masks, plane, c, elu, probs, false);
}

ag_tensor *ag__additive_self_attention_planes(ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias,
                                              ag_tensor *masks, int first, double c, bool elu, ag_tensor **probs) {
    return planes_op("ag__additive_self_attention_planes", h, u, v, bias, masks, first, c, elu, probs, true);
}

/* ---- the CPU's table (ops/additive.h; CUDA's is in ops/cuda/additive.cu) ---- */

static const ag__additive_kernels additive_cpu = {
    .forward = forward_cpu,
    .backward = backward_cpu,
};
AG_DISPATCH(additive, additive_cpu)
