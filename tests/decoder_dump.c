/* decoder_dump.c - one forward and backward of ag_decoder_layer_forward in
 * double precision, written to a safetensors file for
 * tests/torch_decoder.py, which runs PyTorch's nn.TransformerDecoderLayer on
 * the same numbers:
 *
 *     decoder_dump CASE FILE     CASE: post  post-LN, ReLU (the 2017 block)
 *                                      pre   pre-LN, GELU
 *
 * Tensors: x [B, Nt, d], memory [B, Ns, d], len and tlen (I64, the
 * memory's and the target's lengths), every parameter under its name
 * (self.attn.qkv.weight, ..., cross.q.weight, ...), y, the loss's seed dy
 * (loss = sum(y dy), dy 0 at the target's padding), and grad.<name> of x,
 * the memory and every parameter. */
#include "attngrad.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(ag_real) == 8, "decoder_dump is built against libattngrad-f64");

enum { B = 3, NT = 4, NS = 5, D = 8, HEADS = 2, DFF = 12 };

static ag_tensor *uniform(ag_rng *r, double lo, double hi, bool grad, int ndim, const int *shape) {
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(lo + (hi - lo) * ag_rng_uniform(r));
    t->requires_grad = grad;
    return t;
}

/* t's gradient under grad.<name>, as F64: the build's reals. */
static void add_grad(ag_st_writer *w, const char *name, const ag_tensor *t) {
    int64_t shape[8];
    char key[96];
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
    snprintf(key, sizeof key, "grad.%s", name);
    ag_st_add(w, key, AG_F64, t->ndim, shape, t->grad);
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "post") && strcmp(argv[1], "pre"))) {
        fprintf(stderr, "usage: decoder_dump post|pre FILE\n");
        return 2;
    }
    bool pre = !strcmp(argv[1], "pre");
    ag_rng r;
    ag_rng_seed(&r, 42);
    ag_params ps = {0};
    ag_decoder_layer l = ag_decoder_layer_new(
        &ps, &(ag_encoder_config){.d_model = D, .heads = HEADS, .d_ff = DFF, .pre_norm = pre,
                                  .act = pre ? AG_ACT_GELU : AG_ACT_RELU}, &r);
    for (int p = 0; p < ps.count; p++) /* biases and gains off 0 and 1: every term shows */
        if (ps.items[p]->ndim == 1)
            for (int64_t i = 0; i < ps.items[p]->size; i++) ps.items[p]->data[i] += (ag_real)(0.2 * sin(3 * i + p));
    static const int32_t lens[2][B] = {{5, 1, 3}, {5, 3, 2}}, tlens[2][B] = {{4, 2, 3}, {4, 4, 1}};
    const int32_t *len = lens[pre], *tlen = tlens[pre];
    ag_tensor *x = uniform(&r, -1, 1, true, 3, (int[]){B, NT, D});
    ag_tensor *memory = uniform(&r, -1, 1, true, 3, (int[]){B, NS, D});
    ag_tensor *y = ag_decoder_layer_forward(&l, x, tlen, memory, len, false, NULL);
    ag_tensor *dy = uniform(&r, -1, 1, false, y->ndim, y->shape);
    for (int b = 0; b < B; b++) /* the target's padding counts for nothing in the loss, as a masked label */
        for (int64_t i = (int64_t)(b * NT + tlen[b]) * D; i < (int64_t)(b + 1) * NT * D; i++) dy->data[i] = 0;
    ag_backward(ag_sum(ag_mul(y, dy)));

    ag_st_writer w = {0};
    int64_t len64[B], tlen64[B];
    for (int b = 0; b < B; b++) len64[b] = len[b], tlen64[b] = tlen[b];
    ag_st_add(&w, "len", AG_I64, 1, (int64_t[]){B}, len64);
    ag_st_add(&w, "tlen", AG_I64, 1, (int64_t[]){B}, tlen64);
    ag_st_add_tensor(&w, "x", x), add_grad(&w, "x", x);
    ag_st_add_tensor(&w, "memory", memory), add_grad(&w, "memory", memory);
    ag_st_add_tensor(&w, "y", y), ag_st_add_tensor(&w, "dy", dy);
    for (int p = 0; p < ps.count; p++) ag_st_add_tensor(&w, ps.items[p]->name, ps.items[p]), add_grad(&w, ps.items[p]->name, ps.items[p]);
    ag_status st = ag_st_write(&w, argv[2]);
    ag_st_writer_free(&w);
    ag_step_end();
    ag_params_free(&ps);
    if (st != AG_OK) {
        fprintf(stderr, "decoder_dump: %s\n", ag_errmsg());
        return 1;
    }
    return 0;
}
