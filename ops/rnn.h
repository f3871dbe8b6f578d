/* rnn.h - the recurrent layers' kernels (ops/dispatch.h), the LSTM's and
 * the GRU's: the CPU's in ops/rnn.c, CUDA's in ops/cuda/rnn.c (cuBLAS's
 * products around the kernels of ops/cuda/rnn.cu).  The two devices run
 * the same steps in different pieces (the CPU a loop of its own, CUDA many
 * launches and GEMMs per time step), so an entry is a whole step of the
 * op: a layer's forward or backward.  Both cells share the packed rows
 * below; G is their gates' count (LSTM 4, GRU 3). */
#ifndef AG_OPS_RNN_H
#define AG_OPS_RNN_H

#include "../graph/kreal.h"

#ifdef __cplusplus
typedef struct ag__rnn_host_rng ag_rng; /* attngrad.h's: only the host draws from it */
#else
#include "attngrad.h"
#endif

AG_KERNELS_BEGIN

/* One layer over its packed rows: only active rows (t < len[b]) are stored
 * and computed, in time-major order: step t's rows are k in
 * [off[t], off[t+1]), for the examples row_b[k] in increasing order.  An
 * example active at t is active at t-1, so prev[k] is its row at t-1 (-1
 * at t = 0).  The index (len, off, row_b, prev, last) is on the host: it
 * drives the loops; the arrays are in the device's memory. */
typedef struct {
    int32_t *len; /* [B] */
    int T, layer;
    int32_t *off, *row_b, *prev;
    int na;          /* active rows in all */
    uint8_t *kept;   /* [na,in] dropout mask of the input in packed order, or NULL */
    ag__kreal scale;  /* 1/keep */
    ag__kreal *xin;   /* [na,in] the input as the GEMM saw it (dropout applied) */
    ag__kreal *gates; /* [na,GH] activated: the LSTM's i, f, g, o; the GRU's r, z, n */
    ag__kreal *hprev; /* [na,H] h_{t-1} of each row (h0 or 0 at t = 0) */
    ag__kreal *cprev; /* [na,H] LSTM: c_{t-1} likewise */
    ag__kreal *h;     /* [na,H] h_t */
    ag__kreal *tc;    /* [na,H] LSTM: tanh(c_t) */
    ag__kreal *hg;    /* [na,3H] GRU: h_{t-1} W_hh + b_hh (its n part is scaled by r) */
    int32_t *last;   /* [B] each example's last row, or -1 (len 0) */
    /* [B,H] gradients of this layer's final h and c (ag_lstm_opts.h_n/c_n),
     * set by the final states' backward, which runs first, or NULL */
    ag__kreal *dh_final, *dc_final;
    /* CUDA: the kernels' copies of row_b, of src (row k's position b*N + t
     * in x and the output) and of next (row k's row at t+1, or -1), made by
     * the forward; NULL on the CPU */
    const int32_t *row_b_dev, *src_dev, *next_dev;
} ag__krnn;

/* A layer's operands: x [B,N,in], W_ih [in,GH], W_hh [H,GH], the biases
 * [GH] (or NULL), h0 and c0 the layer's [B,H] slice of the initial states
 * (or NULL: zeros; the GRU has no c0). */
typedef struct {
    const ag__kreal *x, *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0;
    int B, N, in, H;
} ag__krnn_args;

/* Their gradients, added to (NULL: not wanted; h0 and c0 the layer's slice). */
typedef struct {
    ag__kreal *x, *w_ih, *w_hh, *b_ih, *b_hh, *h0, *c0;
} ag__krnn_grads;

typedef struct {
    /* The LSTM layer forward: the dropout mask drawn from rng into s->kept
     * (rng NULL: none), the saved arrays filled, c [na,H] the cell states,
     * out [B,N,H] the outputs (0 past each length), and h_final, c_final
     * [B,H] (or NULL) each example's state after its last step. */
    void (*lstm_forward)(ag__krnn *s, const ag__krnn_args *a, ag__kreal *c, ag__kreal *out, ag__kreal *h_final,
                         ag__kreal *c_final, double keep, ag_rng *rng);
    /* Backward through time from dY [B,N,H] and s's dh_final, dc_final
     * (consumed: set to NULL). */
    void (*lstm_backward)(ag__krnn *s, const ag__krnn_args *a, const ag__kreal *dY, const ag__krnn_grads *g);
    /* The GRU's, likewise (no cell state: c0, c_final and dc_final are NULL). */
    void (*gru_forward)(ag__krnn *s, const ag__krnn_args *a, ag__kreal *out, ag__kreal *h_final, double keep,
                        ag_rng *rng);
    void (*gru_backward)(ag__krnn *s, const ag__krnn_args *a, const ag__kreal *dY, const ag__krnn_grads *g);
    /* dst = src, n reals (the final states' gradients handed to a layer). */
    void (*copy)(ag__kreal *dst, const ag__kreal *src, int64_t n);
} ag__rnn_kernels;

extern const ag__rnn_kernels ag__rnn_cuda;

AG_KERNELS_END

#ifndef __cplusplus
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__rnn_kernels *ag__rnn_on(const char *op, ag_device dev);
#endif

#endif
