/* mtsa.c - MTSA's token2token attention, CUDA's table (ops/mtsa.h): the
 * kernels of ops/cuda/mtsa.cu around cuBLAS's strided-batched GEMMs.  Each
 * slice's saved arrays are full blocks, ER [N,N] and [ES | v ⊙ ES],
 * [Z | Num] [N,2dh], 0 on padded queries and keys: one batched GEMM then
 * serves every length, adding exact zeros where the CPU's products over L
 * stop.  Compiled only in CUDA builds. */
#include "../dispatch.h"
#include "../mtsa.h"
#include "../../graph/device.h"
#include "mtsa.cuh"

/* What the kernels of the entries computed directly read (ops/mtsa.h). */
static ag__kmtsa_direct direct_of(const ag__kmtsa *sv, const ag_real *r, const ag_real *s, const ag_real *v) {
    return (ag__kmtsa_direct){.r = r, .s = s, .v = v, .mask = sv->mask, .mask_slices = sv->mask_slices,
                              .mask_run = sv->mask_run, .len = sv->len, .per_b = sv->per_b, .N = sv->N, .dh = sv->dh,
                              .slices = sv->slices, .identity = sv->identity};
}

static void forward(const ag__kmtsa *sv, const ag_real *r, const ag_real *s, const ag_real *v, const ag_real *mask,
                    int mask_slices, int mask_run, ag_real *out) {
    int N = sv->N, dh = sv->dh, S = sv->slices;
    int64_t nn = (int64_t)N * N, n2 = (int64_t)N * 2 * dh;
    ag__mtsa_er_cuda(r, mask, mask_slices, mask_run, sv->len, sv->per_b, sv->er, S, N, sv->identity);
    ag__mtsa_ep_cuda(s, v, sv->len, sv->per_b, sv->ep, S, N, dh);
    if (S > 0 && N > 0 && dh > 0) /* [Z | Num] = ER [ES | v ⊙ ES] */
        ag__cuda_gemm_batched(false, false, N, 2 * dh, N, sv->er, N, nn, sv->ep, 2 * dh, n2, 0, sv->zn, 2 * dh, n2, S);
    ag__kmtsa_direct p = direct_of(sv, r, s, v);
    ag__mtsa_out_cuda(&p, sv->zn, out); /* H, the entries whose Z underflowed computed directly */
}

static void backward(const ag__kmtsa *sv, const ag_real *r, const ag_real *s, const ag_real *v, const ag_real *g,
                     const ag_real *out, ag_real *gr, bool fresh_r, ag_real *gs, bool fresh_s, ag_real *gv, bool fresh_v) {
    int N = sv->N, dh = sv->dh, S = sv->slices;
    int64_t nn = (int64_t)N * N, n2 = (int64_t)N * 2 * dh;
    if (S == 0 || N == 0) return; /* nothing to write */
    ag_real *d = ag__cuda_arena_alloc((size_t)(S * n2 + 1) * sizeof(ag_real));
    ag__mtsa_d_cuda(g, out, sv->zn, sv->len, sv->per_b, d, S, N, dh);
    if (gr) { /* dER = [dZ | dNum] [ES | v ⊙ ES]^T */
        ag_real *der = ag__cuda_arena_alloc((size_t)(S * nn + 1) * sizeof(ag_real));
        if (dh > 0)
            ag__cuda_gemm_batched(false, true, N, N, 2 * dh, d, 2 * dh, n2, sv->ep, 2 * dh, n2, 0, der, N, nn, S);
        else
            ag__cuda_zero(der, (size_t)(S * nn) * sizeof(ag_real));
        ag__mtsa_r_grad_cuda(der, sv->er, r, gr, S * nn, sv->identity, fresh_r);
    }
    if ((gs || gv) && dh > 0) { /* [dES | d(v ⊙ ES)] = ER^T [dZ | dNum] */
        ag_real *dep = ag__cuda_arena_alloc((size_t)(S * n2 + 1) * sizeof(ag_real));
        ag__cuda_gemm_batched(true, false, N, 2 * dh, N, sv->er, N, nn, d, 2 * dh, n2, 0, dep, 2 * dh, n2, S);
        ag__mtsa_sv_grad_cuda(dep, sv->ep, v, sv->len, sv->per_b, gs, gv, S, N, dh, fresh_s, fresh_v);
    }
    ag__kmtsa_direct p = direct_of(sv, r, s, v);
    ag__mtsa_direct_grad_cuda(&p, sv->zn, g, out, gr, gs, gv); /* added to what the products stored */
}

const ag__mtsa_kernels ag__mtsa_cuda = {
    .forward = forward,
    .backward = backward,
};
