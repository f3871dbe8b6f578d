/* lstm.c - a multi-layer LSTM over whole padded sequences, with backward
 * through time.  One layer, gates i,f,g,o in that column order:
 *
 *     a_t = x_t W_ih + b_ih + h_{t-1} W_hh + b_hh          [B,4H]
 *     i, f, o = sigmoid(a_i, a_f, a_o),  g = tanh(a_g)
 *     c_t = f c_{t-1} + i g,   h_t = o tanh(c_t)
 *
 * Speed comes from the shape of the work: the input projection of every
 * timestep is one tall GEMM ([T*B, in] x [in, 4H]) hoisted out of the time
 * loop, and each step runs one [B, H] x [H, 4H] GEMM for the whole batch.
 * Internally everything is time-major ([T, B, ...]) so that a step's rows
 * are contiguous for BLAS.  All buffers come from the arena once per layer;
 * the time loops allocate nothing.
 *
 * Lengths: at t >= len[b] the state of example b is frozen (h, c carried
 * over) and its output is 0.  T = max(len) steps run; none past it.
 *
 * Each layer records its own tape node (inputs: x, w_ih, w_hh, b_ih, b_hh,
 * h0, c0), so dropout between layers is just a per-element scale that the
 * next layer applies to its input. */
#include "vecmath.h"

typedef struct {
    int32_t *len; /* [B] */
    int T, layer;
    /* The active rows (t < len[b]) in time-major order: step t's are
     * act_b[act_off[t] .. act_off[t+1]) (their b), act_tb the same as rows
     * t*B + b of the [T,B,...] buffers.  Frozen rows run no gate: their
     * products are skipped (fewer rows, same sums; see matmul.c). */
    int32_t *act_b, *act_tb, *act_off;
    ag_real *drop;  /* [T,B,in] dropout scale of the input (0 or 1/keep), or NULL */
    ag_real *xin;   /* [T,B,in] the input as the GEMM saw it (dropout applied) */
    ag_real *gates; /* [T,B,4H] activated i, f, g, o */
    ag_real *c;     /* [T+1,B,H] c[0] = c_{-1}, c[t+1] = c_t */
    ag_real *h;     /* [T+1,B,H] likewise */
    ag_real *tc;    /* [T,B,H] tanh(c_t) */
} lstm_saved;

/* Gate nonlinearities and state update of one row (vectorisable: the
 * activations are branch-free, see vecmath.h). */
static void cell_row_forward(ag_real *restrict a, const ag_real *restrict c_prev, ag_real *restrict c,
                             ag_real *restrict h, ag_real *restrict tc, int H) {
    ag_real *ai = a, *af = a + H, *ag = a + 2 * H, *ao = a + 3 * H;
    for (int j = 0; j < H; j++) {
        ag_real i = ag__vsigmoid(ai[j]), f = ag__vsigmoid(af[j]), g = ag__vtanh(ag[j]), o = ag__vsigmoid(ao[j]);
        ai[j] = i, af[j] = f, ag[j] = g, ao[j] = o;
        ag_real cj = f * c_prev[j] + i * g, t = ag__vtanh(cj);
        c[j] = cj;
        tc[j] = t;
        h[j] = o * t;
    }
}

/* One timestep for the whole batch: rows still inside their sequence step,
 * frozen rows carry their state. */
static void lstm_cell_forward(ag_real *gates, const ag_real *c_prev, const ag_real *h_prev, ag_real *c, ag_real *h,
                              ag_real *tc, const int32_t *len, int t, int B, int H) {
    for (int b = 0; b < B; b++) {
        ag_real *a = gates + (int64_t)b * 4 * H;
        int64_t o = (int64_t)b * H;
        if (t < len[b]) {
            cell_row_forward(a, c_prev + o, c + o, h + o, tc + o, H);
            continue;
        }
        memcpy(c + o, c_prev + o, (size_t)H * sizeof *c);
        memcpy(h + o, h_prev + o, (size_t)H * sizeof *h);
        memset(a, 0, (size_t)4 * H * sizeof *a);
        memset(tc + o, 0, (size_t)H * sizeof *tc);
    }
}

/* One row of the step backwards: from dh (from above and from t+1) and dc
 * (from t+1) to the gate pre-activation gradients d, and dc for t-1 in place. */
static void cell_row_backward(ag_real *restrict d, const ag_real *restrict a, const ag_real *restrict c_prev,
                              const ag_real *restrict tc, const ag_real *restrict dh, const ag_real *restrict dy,
                              ag_real *restrict dc, int H) {
    for (int j = 0; j < H; j++) {
        ag_real i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
        ag_real dht = dh[j] + dy[j];
        ag_real dct = dc[j] + dht * o * (1 - tc[j] * tc[j]);
        d[j] = dct * g * i * (1 - i);
        d[H + j] = dct * c_prev[j] * f * (1 - f);
        d[2 * H + j] = dct * i * (1 - g * g);
        d[3 * H + j] = dht * tc[j] * o * (1 - o);
        dc[j] = dct * f;
    }
}

/* The step backwards for the whole batch.  A frozen row ran no gate: its dG
 * is 0 (and its dh, dc are 0 too, see lstm_layer_backward). */
static void lstm_cell_backward(ag_real *dG, const ag_real *gates, const ag_real *c_prev, const ag_real *tc,
                               const ag_real *dh, ag_real *dc, const ag_real *dy, int64_t dy_stride,
                               const int32_t *len, int t, int B, int H) {
    for (int b = 0; b < B; b++) {
        int64_t o = (int64_t)b * H, o4 = 4 * o;
        if (t < len[b]) cell_row_backward(dG + o4, gates + o4, c_prev + o, tc + o, dh + o, dy + b * dy_stride, dc + o, H);
        else memset(dG + o4, 0, (size_t)4 * H * sizeof *dG);
    }
}

static void lstm_layer_backward(ag_node *n) {
    const lstm_saved *s = n->saved;
    ag_tensor *x = n->in[0], *w_ih = n->in[1], *w_hh = n->in[2], *b_ih = n->in[3], *b_hh = n->in[4];
    ag_tensor *h0 = n->in[5], *c0 = n->in[6];
    int B = x->shape[0], N = x->shape[1], in = x->shape[2], H = w_hh->shape[0], T = s->T;
    int64_t TB = (int64_t)T * B;
    const ag_real *dY = n->out->grad;

    ag_real *dG = ag_arena_alloc((size_t)(TB * 4 * H + 1) * sizeof *dG);
    ag_real *dh = ag_arena_zalloc((size_t)B * H * sizeof *dh + 1);
    ag_real *dc = ag_arena_zalloc((size_t)B * H * sizeof *dc + 1);
    /* Time loop.  dh of a frozen row stays 0: outputs past len are the
     * constant 0 and no final state leaves the op, so no gradient reaches
     * a frozen state, and writing the GEMM's 0 there is exact. */
    bool want_h0 = h0 && ag__wants(n, 5);
    ag_real *dgc = ag_arena_alloc((size_t)B * 4 * H * sizeof *dgc + 1), *dhc = ag_arena_alloc((size_t)B * H * sizeof *dhc + 1);
    for (int t = T - 1; t >= 0; t--) {
        int64_t o = (int64_t)t * B;
        lstm_cell_backward(dG + o * 4 * H, s->gates + o * 4 * H, s->c + o * H, s->tc + o * H, dh, dc,
                           dY + (int64_t)t * H, (int64_t)N * H, s->len, t, B, H);
        if (!(t > 0 || want_h0)) continue;
        int ba = s->act_off[t + 1] - s->act_off[t];
        if (ba == B) {
            ag__gemm(false, true, B, H, 4 * H, 1, dG + o * 4 * H, w_hh->data, 0, dh);
        } else { /* a frozen row's dG is 0, so is its dh: the product on the active rows only */
            const int32_t *rows = s->act_b + s->act_off[t];
            for (int i = 0; i < ba; i++)
                memcpy(dgc + (int64_t)i * 4 * H, dG + (o + rows[i]) * 4 * H, (size_t)4 * H * sizeof *dgc);
            memset(dhc, 0, (size_t)ba * H * sizeof *dhc);
            ag__gemm(false, true, ba, H, 4 * H, 1, dgc, w_hh->data, 1, dhc);
            memset(dh, 0, (size_t)B * H * sizeof *dh);
            ag__scatter_add_rows(dh, dhc, H, rows, ba);
        }
    }
    if (want_h0) {
        ag_real *g = ag__grad(h0) + (int64_t)s->layer * B * H;
        for (int64_t k = 0; k < (int64_t)B * H; k++) g[k] += dh[k];
    }
    if (c0 && ag__wants(n, 6)) {
        ag_real *g = ag__grad(c0) + (int64_t)s->layer * B * H;
        for (int64_t k = 0; k < (int64_t)B * H; k++) g[k] += dc[k];
    }

    /* The weights see all timesteps at once: one GEMM each, over the active
     * rows (a frozen row's dG is 0). */
    int na = s->act_off[T];
    bool packed = na < TB;
    const ag_real *dGa = packed && (ag__wants(n, 0) || ag__wants(n, 1) || ag__wants(n, 2))
                             ? ag__gather_rows(dG, 4 * H, s->act_tb, na)
                             : dG;
    if (ag__wants(n, 2)) {
        const ag_real *ha = packed ? ag__gather_rows(s->h, H, s->act_tb, na) : s->h; /* h_{t-1} of row t*B+b */
        ag__gemm(true, false, H, 4 * H, na, 1, ha, dGa, 1, ag__grad(w_hh));
    }
    if (ag__wants(n, 1)) {
        const ag_real *xa = packed ? ag__gather_rows(s->xin, in, s->act_tb, na) : s->xin;
        ag__gemm(true, false, in, 4 * H, na, 1, xa, dGa, 1, ag__grad(w_ih));
    }
    bool want_bih = b_ih && ag__wants(n, 3), want_bhh = b_hh && ag__wants(n, 4);
    if (want_bih || want_bhh) {
        ag_real *db = ag_arena_zalloc((size_t)4 * H * sizeof *db);
        for (int64_t r = 0; r < TB; r++)
            for (int j = 0; j < 4 * H; j++) db[j] += dG[r * 4 * H + j];
        ag_real *g1 = want_bih ? ag__grad(b_ih) : NULL, *g2 = want_bhh ? ag__grad(b_hh) : NULL;
        for (int j = 0; j < 4 * H; j++) {
            if (g1) g1[j] += db[j];
            if (g2) g2[j] += db[j];
        }
    }
    if (ag__wants(n, 0)) { /* dx of the active rows; a frozen row's is 0 */
        ag_real *dxin = ag_arena_zalloc((size_t)((int64_t)na * in + 1) * sizeof *dxin);
        ag__gemm(false, true, na, in, 4 * H, 1, dGa, w_ih->data, 1, dxin);
        ag_real *gx = ag__grad(x);
        for (int i = 0; i < na; i++) {
            int t = s->act_tb[i] / B, b = s->act_tb[i] % B;
            const ag_real *src = dxin + (int64_t)i * in;
            const ag_real *m = s->drop ? s->drop + ((int64_t)t * B + b) * in : NULL;
            ag_real *dst = gx + ((int64_t)b * N + t) * in;
            if (m)
                for (int k = 0; k < in; k++) dst[k] += src[k] * m[k];
            else
                for (int k = 0; k < in; k++) dst[k] += src[k];
        }
    }
}

static void active_rows(lstm_saved *s, int B) {
    int T = s->T;
    s->act_off = ag_arena_alloc((size_t)(T + 1) * sizeof *s->act_off);
    s->act_b = ag_arena_alloc((size_t)((int64_t)T * B + 1) * sizeof *s->act_b);
    s->act_tb = ag_arena_alloc((size_t)((int64_t)T * B + 1) * sizeof *s->act_tb);
    int k = 0;
    for (int t = 0; t < T; t++) {
        s->act_off[t] = k;
        for (int b = 0; b < B; b++)
            if (t < s->len[b]) {
                s->act_b[k] = b;
                s->act_tb[k++] = t * B + b;
            }
    }
    s->act_off[T] = k;
}

/* Initial state of one layer at t = -1: the layer's slice of s0, or zeros. */
static void initial_state(ag_real *dst, const ag_tensor *s0, int layer, int B, int H) {
    if (s0) memcpy(dst, s0->data + (int64_t)layer * B * H, (size_t)B * H * sizeof *dst);
    else memset(dst, 0, (size_t)B * H * sizeof *dst);
}

/* One layer over the sequence.  keep < 1 applies inverted dropout to x. */
static ag_tensor *lstm_layer(ag_tensor *x, const ag_lstm_layer *p, int layer, int32_t *len, int T, ag_tensor *h0,
                             ag_tensor *c0, double keep, ag_rng *rng) {
    int B = x->shape[0], N = x->shape[1], in = x->shape[2], H = p->w_hh->shape[0];
    int64_t TB = (int64_t)T * B;
    lstm_saved s = {.len = len, .T = T, .layer = layer};
    s.xin = ag_arena_alloc((size_t)(TB * in + 1) * sizeof(ag_real));
    s.gates = ag_arena_alloc((size_t)(TB * 4 * H + 1) * sizeof(ag_real));
    s.c = ag_arena_alloc((size_t)((TB + B) * H + 1) * sizeof(ag_real));
    s.h = ag_arena_alloc((size_t)((TB + B) * H + 1) * sizeof(ag_real));
    s.tc = ag_arena_alloc((size_t)(TB * H + 1) * sizeof(ag_real));
    if (keep < 1) {
        s.drop = ag_arena_alloc((size_t)(TB * in + 1) * sizeof(ag_real));
        ag_real scale = (ag_real)(1 / keep);
        uint8_t *kept = ag_arena_alloc((size_t)(TB * in + 1));
        ag__dropout_mask(kept, TB * in, keep, rng);
        for (int64_t k = 0; k < TB * in; k++) s.drop[k] = kept[k] ? scale : 0;
    }

    /* Time-major copy of the input, then the hoisted input projection. */
    for (int t = 0; t < T; t++)
        for (int b = 0; b < B; b++) {
            const ag_real *src = x->data + ((int64_t)b * N + t) * in;
            ag_real *dst = s.xin + ((int64_t)t * B + b) * in;
            if (s.drop) {
                const ag_real *m = s.drop + ((int64_t)t * B + b) * in;
                for (int k = 0; k < in; k++) dst[k] = src[k] * m[k];
            } else {
                memcpy(dst, src, (size_t)in * sizeof *dst);
            }
        }
    ag_real *bias = ag_arena_alloc((size_t)4 * H * sizeof *bias); /* both biases enter every step together */
    for (int j = 0; j < 4 * H; j++) bias[j] = (p->b_ih ? p->b_ih->data[j] : 0) + (p->b_hh ? p->b_hh->data[j] : 0);
    for (int64_t r = 0; r < TB; r++) memcpy(s.gates + r * 4 * H, bias, (size_t)4 * H * sizeof *bias);
    ag__gemm(false, false, (int)TB, 4 * H, in, 1, s.xin, p->w_ih->data, 1, s.gates);

    initial_state(s.h, h0, layer, B, H);
    initial_state(s.c, c0, layer, B, H);
    active_rows(&s, B);
    ag_real *hc = ag_arena_alloc((size_t)B * H * sizeof *hc + 1), *pc = ag_arena_alloc((size_t)B * 4 * H * sizeof *pc + 1);
    for (int t = 0; t < T; t++) {
        int64_t o = (int64_t)t * B;
        ag_real *gates = s.gates + o * 4 * H;
        int ba = s.act_off[t + 1] - s.act_off[t];
        if (ba == B) {
            ag__gemm(false, false, B, 4 * H, H, 1, s.h + o * H, p->w_hh->data, 1, gates);
        } else { /* frozen rows' gates are discarded: h W_hh on the active rows only */
            const int32_t *rows = s.act_b + s.act_off[t];
            for (int i = 0; i < ba; i++) memcpy(hc + (int64_t)i * H, s.h + (o + rows[i]) * H, (size_t)H * sizeof *hc);
            memset(pc, 0, (size_t)ba * 4 * H * sizeof *pc);
            ag__gemm(false, false, ba, 4 * H, H, 1, hc, p->w_hh->data, 1, pc);
            ag__scatter_add_rows(gates, pc, 4 * H, rows, ba);
        }
        lstm_cell_forward(gates, s.c + o * H, s.h + o * H, s.c + (o + B) * H, s.h + (o + B) * H, s.tc + o * H, len, t,
                          B, H);
    }

    ag_tensor *out = ag__empty(3, (int[]){B, N, H});
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            ag_real *dst = out->data + ((int64_t)b * N + t) * H;
            if (t < len[b]) memcpy(dst, s.h + ((int64_t)(t + 1) * B + b) * H, (size_t)H * sizeof *dst);
            else memset(dst, 0, (size_t)H * sizeof *dst);
        }
    ag_node *n = ag__record("ag_lstm", lstm_layer_backward, out, 7,
                            (ag_tensor *[]){x, p->w_ih, p->w_hh, p->b_ih, p->b_hh, h0, c0});
    if (n) {
        lstm_saved *sp = ag_arena_alloc(sizeof *sp);
        *sp = s;
        n->saved = sp;
    }
    return out;
}

/* ---- argument checks ---- */

static void check_matrix(const ag_tensor *x, const ag_tensor *w, const char *what, int layer, int rows, int cols) {
    char sw[64], sx[64];
    if (!w) ag__fatal("ag_lstm", "layer %d: %s is NULL", layer, what);
    ag__check_device("ag_lstm", x, w);
    bool ok = cols < 0 ? w->ndim == 1 && w->shape[0] == rows : w->ndim == 2 && w->shape[0] == rows && w->shape[1] == cols;
    if (!ok) {
        if (cols < 0)
            ag__fatal("ag_lstm", "layer %d: %s %s does not fit x %s (want [%d])", layer, what,
                      ag_shape_str(w, sw, sizeof sw), ag_shape_str(x, sx, sizeof sx), rows);
        ag__fatal("ag_lstm", "layer %d: %s %s does not fit x %s (want [%d,%d])", layer, what,
                  ag_shape_str(w, sw, sizeof sw), ag_shape_str(x, sx, sizeof sx), rows, cols);
    }
}

static void check_state(const ag_tensor *x, const ag_tensor *s0, const char *what, int L, int B, int H) {
    if (!s0) return;
    ag__check_device("ag_lstm", x, s0);
    if (s0->ndim != 3 || s0->shape[0] != L || s0->shape[1] != B || s0->shape[2] != H) {
        char ss[64], sx[64];
        ag__fatal("ag_lstm", "%s %s does not fit x %s (want [layers=%d,B=%d,H=%d])", what,
                  ag_shape_str(s0, ss, sizeof ss), ag_shape_str(x, sx, sizeof sx), L, B, H);
    }
}

ag_tensor *ag_lstm(ag_tensor *x, const ag_lstm_layer *layers, int num_layers, const ag_lstm_opts *opts) {
    char sx[64];
    static const ag_lstm_opts defaults = {0};
    const ag_lstm_opts *o = opts ? opts : &defaults;
    ag__check_device("ag_lstm", x, NULL);
    if (x->ndim != 3) ag__fatal("ag_lstm", "x %s must be [B,N,in]", ag_shape_str(x, sx, sizeof sx));
    if (num_layers < 1 || !layers) ag__fatal("ag_lstm", "%d layers (need at least 1)", num_layers);
    int B = x->shape[0], N = x->shape[1];
    const ag_tensor *w0 = layers[0].w_hh;
    if (!w0 || w0->ndim != 2 || w0->shape[1] != 4 * w0->shape[0]) {
        char sw[64];
        ag__fatal("ag_lstm", "layer 0: w_hh %s must be [H,4H]", w0 ? ag_shape_str(w0, sw, sizeof sw) : "NULL");
    }
    int H = w0->shape[0];
    for (int l = 0; l < num_layers; l++) {
        const ag_lstm_layer *p = &layers[l];
        check_matrix(x, p->w_hh, "w_hh", l, H, 4 * H);
        check_matrix(x, p->w_ih, "w_ih", l, l == 0 ? x->shape[2] : H, 4 * H);
        if (p->b_ih) check_matrix(x, p->b_ih, "b_ih", l, 4 * H, -1);
        if (p->b_hh) check_matrix(x, p->b_hh, "b_hh", l, 4 * H, -1);
    }
    check_state(x, o->h0, "h0", num_layers, B, H);
    check_state(x, o->c0, "c0", num_layers, B, H);
    double keep = o->keep == 0 ? 1 : o->keep;
    if (!(keep > 0 && keep <= 1)) ag__fatal("ag_lstm", "keep %g is outside (0, 1]", o->keep);
    bool dropout = o->training && keep < 1 && num_layers > 1;
    if (dropout && !o->rng) ag__fatal("ag_lstm", "dropout (keep %g) needs an rng", keep);

    int32_t *len = ag_arena_alloc((size_t)(B ? B : 1) * sizeof *len);
    int T = 0;
    for (int b = 0; b < B; b++) {
        len[b] = o->len ? o->len[b] : N;
        if (len[b] < 0 || len[b] > N) ag__fatal("ag_lstm", "len[%d] = %d is outside [0, %d]", b, (int)len[b], N);
        if (len[b] > T) T = len[b];
    }

    ag_tensor *h = x;
    for (int l = 0; l < num_layers; l++)
        h = lstm_layer(h, &layers[l], l, len, T, o->h0, o->c0, l > 0 && dropout ? keep : 1, o->rng);
    return h;
}
