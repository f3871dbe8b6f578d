/* gru_dump.c - one forward and backward of ag_gru in double precision,
 * written to a safetensors file for tests/torch_gru.py, which runs
 * PyTorch's nn.GRU on the same numbers:
 *
 *     gru_dump CASE FILE     CASE: one      1 layer, full lengths, no h0
 *                                  layers2  2 layers, h0, lengths {5,2,1}, h_n
 *                                  bidir    ag_bigru over lengths {5,3,1}
 *
 * Tensors: x, len (I64), the layers' l<k>.w_ih ... (bidir: fw.* and bw.*),
 * h0, y, h_n where the case has them, the loss's seeds dy and dh_n (loss =
 * sum(y dy) + sum(h_n dh_n)), and grad.<name> of every input. */
#include "attngrad.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(ag_real) == 8, "gru_dump is built against libattngrad-f64");

enum { B = 3, N = 5, I = 4, H = 3 };

static ag_tensor *uniform(ag_rng *r, double lo, double hi, bool grad, int ndim, const int *shape) {
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(lo + (hi - lo) * ag_rng_uniform(r));
    t->requires_grad = grad;
    return t;
}

static ag_gru_layer layer(ag_rng *r, int in) {
    return (ag_gru_layer){uniform(r, -0.6, 0.6, true, 2, (int[]){in, 3 * H}), uniform(r, -0.6, 0.6, true, 2, (int[]){H, 3 * H}),
                          uniform(r, -0.5, 0.5, true, 1, (int[]){3 * H}), uniform(r, -0.5, 0.5, true, 1, (int[]){3 * H})};
}

/* t's shape with other values (its gradient), as F64: the build's reals. */
static void add_values(ag_st_writer *w, const char *name, const ag_tensor *t, const ag_real *values) {
    int64_t shape[8];
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
    ag_st_add(w, name, AG_F64, t->ndim, shape, values);
}

typedef struct {
    const char *name;
    ag_tensor *t;
} named;

static void add_layer(named *in, int *n, const char *prefix, const ag_gru_layer *l) {
    static char names[8][4][32];
    static int used;
    const char *suffix[4] = {"w_ih", "w_hh", "b_ih", "b_hh"};
    ag_tensor *ts[4] = {l->w_ih, l->w_hh, l->b_ih, l->b_hh};
    for (int k = 0; k < 4; k++) {
        snprintf(names[used][k], sizeof names[used][k], "%s.%s", prefix, suffix[k]);
        in[(*n)++] = (named){names[used][k], ts[k]};
    }
    used++;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "one") && strcmp(argv[1], "layers2") && strcmp(argv[1], "bidir"))) {
        fprintf(stderr, "usage: gru_dump one|layers2|bidir FILE\n");
        return 2;
    }
    const char *c = argv[1];
    ag_rng r;
    ag_rng_seed(&r, 42);
    named in[16];
    int n = 0;
    ag_tensor *x = uniform(&r, -1, 1, true, 3, (int[]){B, N, I});
    in[n++] = (named){"x", x};
    int64_t len64[B] = {N, N, N};
    const int32_t *len = NULL;
    ag_tensor *y, *hn = NULL;
    if (!strcmp(c, "one")) {
        ag_gru_layer l = layer(&r, I);
        add_layer(in, &n, "l0", &l);
        y = ag_gru(x, &l, 1, NULL);
    } else if (!strcmp(c, "layers2")) {
        static const int32_t lens[B] = {5, 2, 1};
        len = lens;
        ag_gru_layer ls[2] = {layer(&r, I), layer(&r, H)};
        add_layer(in, &n, "l0", &ls[0]);
        add_layer(in, &n, "l1", &ls[1]);
        ag_tensor *h0 = uniform(&r, -1, 1, true, 3, (int[]){2, B, H});
        in[n++] = (named){"h0", h0};
        y = ag_gru(x, ls, 2, &(ag_gru_opts){.len = len, .h0 = h0, .h_n = &hn});
    } else {
        static const int32_t lens[B] = {5, 3, 1};
        len = lens;
        ag_bigru_layer bl = {layer(&r, I), layer(&r, I)};
        add_layer(in, &n, "fw", &bl.fw);
        add_layer(in, &n, "bw", &bl.bw);
        y = ag_bigru(x, &bl, len);
    }
    if (len)
        for (int b = 0; b < B; b++) len64[b] = len[b];
    ag_tensor *dy = uniform(&r, -1, 1, false, y->ndim, y->shape);
    ag_tensor *loss = ag_sum(ag_mul(y, dy)), *dhn = NULL;
    if (hn) {
        dhn = uniform(&r, -1, 1, false, hn->ndim, hn->shape);
        loss = ag_add(loss, ag_sum(ag_mul(hn, dhn)));
    }
    ag_backward(loss);

    ag_st_writer w = {0};
    ag_st_add(&w, "len", AG_I64, 1, (int64_t[]){B}, len64);
    ag_st_add_tensor(&w, "y", y);
    ag_st_add_tensor(&w, "dy", dy);
    if (hn) ag_st_add_tensor(&w, "h_n", hn), ag_st_add_tensor(&w, "dh_n", dhn);
    for (int k = 0; k < n; k++) {
        char name[48];
        ag_st_add_tensor(&w, in[k].name, in[k].t);
        snprintf(name, sizeof name, "grad.%s", in[k].name);
        add_values(&w, name, in[k].t, in[k].t->grad);
    }
    ag_status st = ag_st_write(&w, argv[2]);
    ag_st_writer_free(&w);
    ag_step_end();
    if (st != AG_OK) {
        fprintf(stderr, "gru_dump: %s\n", ag_errmsg());
        return 1;
    }
    return 0;
}
