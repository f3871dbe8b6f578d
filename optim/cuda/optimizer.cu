/* optimizer.cu - the CUDA side of optim/optimizer.c and optim/gradients.c:
 * one thread an element, the same expressions as the CPU kernels (nvcc
 * runs with -fmad=false, and sqrt and division are IEEE-rounded by
 * default), so a step on the GPU updates to the CPU's bits. */
#include "../../graph/prelude.cuh"
#include "../kernels.h"

/* The coefficients are read from device memory, not passed by value: they
 * change every step (Adam's bias corrections) or epoch (the learning rate),
 * and a recorded launch whose arguments stay the same replays as a CUDA
 * graph (graph/cuda_graph.cu).  gate, when not NULL, is a value on the
 * device that skips the update unless finite (the training step's loss and
 * gradient norm: the host learns of it after the step, not before). */
__device__ static inline void sgd_element(const ag__ksgd &c, ag_real *P, const ag_real *G, ag_real *buf, int64_t j) {
    ag_real g = G[j];
    if (c.wd != 0) g += c.wd * P[j];
    if (buf) {
        buf[j] = c.first ? g : c.mu * buf[j] + c.keep * g;
        g = c.nesterov ? g + c.mu * buf[j] : buf[j];
    }
    P[j] -= c.lr * g;
}

__device__ static inline void adam_element(const ag__kadam &c, ag_real *P, const ag_real *G, ag_real *m, ag_real *v,
                                           ag_real *vmax, int64_t j) {
    ag_real g = G[j];
    if (c.coupled_decay) g += c.l2 * P[j];
    if (c.decoupled_decay) P[j] *= c.decay;
    m[j] = c.b1 * m[j] + c.one_b1 * g;
    v[j] = c.b2 * v[j] + c.one_b2 * g * g;
    ag_real second = v[j];
    if (vmax) second = vmax[j] = v[j] > vmax[j] ? v[j] : vmax[j];
    P[j] -= c.step_size * m[j] / (sqrt(second) / c.bc2_sqrt + c.eps);
}

__device__ static inline void adadelta_element(const ag__kadadelta &c, ag_real *P, const ag_real *G, ag_real *v,
                                               ag_real *u, int64_t j) {
    ag_real g = G[j];
    if (c.wd != 0) g += c.wd * P[j];
    v[j] = c.rho * v[j] + c.one_rho * g * g;
    ag_real delta = sqrt(u[j] + c.eps) / sqrt(v[j] + c.eps) * g;
    u[j] = c.rho * u[j] + c.one_rho * delta * delta;
    P[j] -= c.lr * delta;
}

__device__ static inline void adagrad_element(const ag__kadagrad &c, ag_real *P, const ag_real *G, ag_real *sum,
                                              int64_t j) {
    ag_real g = G[j];
    if (c.wd != 0) g += c.wd * P[j];
    sum[j] += g * g;
    P[j] -= c.clr * (g / (sqrt(sum[j]) + c.eps));
}

__device__ static inline void rmsprop_element(const ag__krmsprop &c, ag_real *P, const ag_real *G, ag_real *v,
                                              ag_real *buf, ag_real *gavg, int64_t j) {
    ag_real g = G[j];
    if (c.wd != 0) g += c.wd * P[j];
    v[j] = c.alpha * v[j] + c.one_alpha * g * g;
    ag_real second = v[j];
    if (gavg) {
        gavg[j] += c.one_alpha * (g - gavg[j]);
        second = v[j] - gavg[j] * gavg[j];
    }
    ag_real d = sqrt(second) + c.eps;
    if (buf) {
        buf[j] = c.mu * buf[j] + g / d;
        P[j] -= c.lr * buf[j];
    } else {
        P[j] -= c.lr * (g / d);
    }
}

/* ---- many arrays in one launch (the *_all entries) ----
 * blockIdx.y is the array (a span, or a table entry); the x blocks stride
 * over its elements, those past a small array's end returning at once.  A
 * step's update, norms, clipping and L2 term took one launch per parameter
 * each; the table of arrays goes over in one staged copy per launch. */
#define AG_FOR_ARRAY(i, n) AG_CUDA_FOR(i, n)

/* Lazy spans: live[r] = whether row r's gradient holds a nonzero (the
 * CPU's find_live_rows).  A warp a row: its lanes read the row side by
 * side, so each load is one run of memory (a thread a row made every load
 * of a warp touch 32 rows' lines), then OR what they saw by shuffles.  r
 * is the same for a warp's 32 lanes, so all of them reach the shuffles. */
__global__ void live_rows_all_kernel(const ag__update_span *spans, const double *gate) {
    const ag__update_span u = spans[blockIdx.y];
    if (u.row <= 0) return;
    const bool counted = u.missed && !(gate && !isfinite(*gate)); /* lazy adadelta's steps, where the step is taken */
    const int lane = threadIdx.x % 32;
    const int64_t rows = u.n / u.row, warps = (int64_t)gridDim.x * blockDim.x / 32;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
        const ag_real *g = u.g + r * u.row;
        unsigned any = 0;
        for (int64_t i = lane; i < u.row; i += 32) any |= g[i] != 0;
        for (int o = 16; o > 0; o /= 2) any |= __shfl_xor_sync(0xffffffffu, any, o);
        if (lane == 0) {
            u.live[r] = any != 0;
            if (counted) ag__lazy_row_steps(&u, r, any != 0);
        }
    }
}

/* g_clear: each thread zeroes the gradient elements it updated, once read
 * (the training step's zero_grad without a launch of its own).  A lazy
 * span's dead rows are skipped: their gradient is zero already. */
#define SPAN_ELEMENTS(j, u) \
    AG_FOR_ARRAY(j, u.n) if (u.row <= 0 || u.live[j / u.row])
__global__ void update_all_kernel(int kind, const ag__update_span *spans, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag__update_span u = spans[blockIdx.y];
    switch (kind) {
    case AG__OPTIM_SGD: {
        const ag__ksgd c = *(const ag__ksgd *)u.coef;
        SPAN_ELEMENTS(j, u) {
            sgd_element(c, u.p, u.g, u.s0, j);
            if (u.g_clear) u.g_clear[j] = 0;
        }
        break;
    }
    case AG__OPTIM_ADAM:
    case AG__OPTIM_ADAMW: {
        const ag__kadam c = *(const ag__kadam *)u.coef;
        SPAN_ELEMENTS(j, u) {
            adam_element(c, u.p, u.g, u.s0, u.s1, u.s2, j);
            if (u.g_clear) u.g_clear[j] = 0;
        }
        break;
    }
    case AG__OPTIM_ADADELTA: {
        const ag__kadadelta c = *(const ag__kadadelta *)u.coef;
        SPAN_ELEMENTS(j, u) {
            if (u.catchup) ag__lazy_missed_steps(u.decay, u.s0 + j, u.s1 + j, u.catchup[j / u.row]);
            adadelta_element(c, u.p, u.g, u.s0, u.s1, j);
            if (u.g_clear) u.g_clear[j] = 0;
        }
        break;
    }
    case AG__OPTIM_ADAGRAD: {
        const ag__kadagrad c = *(const ag__kadagrad *)u.coef;
        SPAN_ELEMENTS(j, u) {
            adagrad_element(c, u.p, u.g, u.s0, j);
            if (u.g_clear) u.g_clear[j] = 0;
        }
        break;
    }
    case AG__OPTIM_RMSPROP: {
        const ag__krmsprop c = *(const ag__krmsprop *)u.coef;
        SPAN_ELEMENTS(j, u) {
            if (u.catchup) ag__lazy_missed_steps(u.decay, u.s0 + j, NULL, u.catchup[j / u.row]); /* no momentum, centering */
            rmsprop_element(c, u.p, u.g, u.s0, u.s1, u.s2, j);
            if (u.g_clear) u.g_clear[j] = 0;
        }
        break;
    }
    default: break;
    }
}

/* Thread (b, l) sums lane l of block b: elements b*4096 + l + 8k in
 * increasing k, as the CPU's lane l does; lane 0 then adds the 8 lanes in
 * order.  A block of 8 threads per 4096 elements is slow next to a tree,
 * and bit-equal to the CPU, which is what the clipping's norm needs. */
/* live (not NULL): rows of `row` elements, the dead ones read as 0 (a
 * lazy update's squares: the CPU's live_block_squares). */
__device__ static inline void sum_squares_blocks_of(const ag_real *X, int64_t n, double *block_sq, int64_t blocks,
                                                    int64_t b, int64_t row = 0, const uint8_t *live = NULL) {
    __shared__ double lane[32][AG_SQ_LANES];
    double acc = 0;
    if (b < blocks) {
        int64_t begin = b * AG_SQ_BLOCK, end = begin + AG_SQ_BLOCK < n ? begin + AG_SQ_BLOCK : n;
        for (int64_t i = begin + threadIdx.x; i < end; i += AG_SQ_LANES)
            if (!live || live[i / row]) acc += (double)X[i] * (double)X[i];
    }
    lane[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0 && b < blocks) {
        double s = 0;
        for (int l = 0; l < AG_SQ_LANES; l++) s += lane[threadIdx.y][l];
        block_sq[b] = s;
    }
}

__global__ void sum_squares_kernel(const ag_real *X, int64_t n, double *block_sq, int64_t blocks) {
    sum_squares_blocks_of(X, n, block_sq, blocks, blockIdx.x * (int64_t)blockDim.y + threadIdx.y);
}

/* One array of the *_all entries' table: squares read x into block_sq,
 * scaling writes y, axpy reads x into y. */
typedef struct {
    const ag_real *x;
    ag_real *y;
    int64_t n;
    double *block_sq;
    int64_t row;          /* squares of a lazy update: its rows, */
    const uint8_t *live;  /* and which are live (NULL: all) */
} array_entry;

/* The squares of table[blockIdx.y] (the grid's x covers the largest
 * array's blocks; the whole CUDA block takes one array, so all its
 * threads meet at the barrier). */
__global__ void sum_squares_all_kernel(const array_entry *table) {
    const array_entry a = table[blockIdx.y];
    int64_t blocks = (a.n + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
    sum_squares_blocks_of(a.x, a.n, a.block_sq, blocks, blockIdx.x * (int64_t)blockDim.y + threadIdx.y, a.row, a.live);
}

/* One thread adds the blocks in the CPU's order: each array's blocks in a
 * sum of their own, then the arrays' sums (per_array: the norms), or one
 * running sum over every block (the L2 term). */
__global__ void sum_blocks_in_order_kernel(const double *block_sq, const int64_t *first, int arrays, bool per_array,
                                           double init, double *out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    *out = ag__sum_blocks_in_order(block_sq, first, arrays, per_array, init);
}

/* torch's clip_grad_norm_ coefficient, from the sum of squares: as the
 * host computes it (IEEE sqrt and division in double, the same bits). */
__global__ void clip_coef_kernel(const double *sq, double max_norm, double *coef) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *coef = max_norm / (sqrt(*sq) + 1e-6);
}

/* x *= coef when coef < 1 (not when it is NaN: the caller sees the norm). */
__global__ void scale_below_one_kernel(ag_real *X, int64_t n, const double *coef) {
    const double c = *coef;
    if (!(c < 1)) return;
    const ag_real s = (ag_real)c;
    AG_CUDA_FOR(i, n) X[i] *= s;
}

__global__ void axpy_kernel(ag_real a, const ag_real *X, ag_real *Y, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] += a * X[i];
}

__global__ void scale_below_one_all_kernel(const array_entry *table, const double *coef) {
    const double c = *coef;
    if (!(c < 1)) return;
    const ag_real s = (ag_real)c;
    const array_entry a = table[blockIdx.y];
    AG_FOR_ARRAY(i, a.n) a.y[i] *= s;
}

__global__ void axpy_all_kernel(ag_real alpha, const array_entry *table) {
    const array_entry a = table[blockIdx.y];
    AG_FOR_ARRAY(i, a.n) a.y[i] += alpha * a.x[i];
}

#define LAUNCH(kernel, n, ...) \
    if ((n) > 0) ag__launch(kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, __VA_ARGS__)

static void sum_squares_blocks(const ag_real *x, int64_t n, double *block_sq) {
    int64_t blocks = (n + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
    if (blocks == 0) return;
    dim3 threads(AG_SQ_LANES, 32); /* 32 blocks of the sum per CUDA block: a warp is 4 of them */
    ag__launch(sum_squares_kernel, (unsigned)((blocks + 31) / 32), threads, 0, x, n, block_sq, blocks);
}

static void sum_blocks_in_order(const double *block_sq, const int64_t *first, int arrays, bool per_array,
                                             double init, double *out) {
    ag__launch(sum_blocks_in_order_kernel, 1, 1, 0, block_sq, first, arrays, per_array, init, out);
}

/* A thread per array, adding its blocks in order as sum_blocks_in_order's
 * single thread does for one array. */
__global__ void sum_blocks_each_kernel(const double *block_sq, const int64_t *first, int arrays, double *out) {
    AG_CUDA_FOR(a, arrays) out[a] = ag__sum_blocks_in_order(block_sq, first + a, 1, false, 0);
}

static void sum_blocks_each(const double *block_sq, const int64_t *first, int arrays, double *out) {
    LAUNCH(sum_blocks_each_kernel, arrays, block_sq, first, arrays, out);
}

/* The training step's gate (the gradient's sum of squares, or NaN when the
 * loss is not finite) and, after the update, its three values side by side
 * for one read: the loss, the gradient's and the parameters' sums of squares. */
__global__ void step_gate_kernel(const ag_real *loss, const double *sq, double *gate) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *gate = isfinite((double)*loss) ? *sq : NAN;
}

__global__ void step_values_kernel(const ag_real *loss, const double *sq, const double *psq, double *out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = (double)*loss, out[1] = *sq, out[2] = *psq;
}

static void step_gate(const ag_real *loss, const double *sq, double *gate) {
    ag__launch(step_gate_kernel, 1, 1, 0, loss, sq, gate);
}

static void step_values(const ag_real *loss, const double *sq, const double *psq, double *out) {
    ag__launch(step_values_kernel, 1, 1, 0, loss, sq, psq, out);
}

static void clip_coef(const double *sq, double max_norm, double *coef) {
    ag__launch(clip_coef_kernel, 1, 1, 0, sq, max_norm, coef);
}

static void scale_below_one(ag_real *x, int64_t n, const double *coef) {
    LAUNCH(scale_below_one_kernel, n, x, n, coef);
}

static void axpy(ag_real a, const ag_real *x, ag_real *y, int64_t n) {
    LAUNCH(axpy_kernel, n, a, x, y, n);
}

/* Arrays per launch of the *_all entries: the table is built in the
 * caller's frame (no step memory on the host); more arrays take a launch
 * per TABLE of them. */
enum { TABLE = 64 };

static const array_entry *send(const array_entry *table, int count) {
    return (const array_entry *)ag__cuda_step_upload(table, (size_t)count * sizeof *table);
}

/* The grid of a table: y the arrays, x the largest one's elements (or its
 * sum blocks, 32 to a CUDA block of 8 x 32 threads). */
static dim3 elements_grid(int64_t most, int count) { return dim3(ag__cuda_blocks(most), (unsigned)count); }
static dim3 squares_grid(int64_t most, int count) {
    int64_t blocks = (most + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
    return dim3((unsigned)((blocks + 31) / 32 > 0 ? (blocks + 31) / 32 : 1), (unsigned)count);
}

static void squares_table(const array_entry *table, int count, int64_t most) {
    if (count > 0 && most > 0)
        ag__launch(sum_squares_all_kernel, squares_grid(most, count), dim3(AG_SQ_LANES, 32), 0, send(table, count));
}

static void update_all(int kind, const ag__update_span *spans, int count, const double *gate) {
    for (int at = 0; at < count; at += TABLE) {
        int here = count - at < TABLE ? count - at : TABLE;
        int64_t most = 0, most_rows = 0;
        array_entry sq[TABLE];
        int squares = 0;
        int64_t most_sq = 0;
        for (int s = at; s < at + here; s++) {
            most = spans[s].n > most ? spans[s].n : most;
            int64_t rows = spans[s].row > 0 ? spans[s].n / spans[s].row : 0;
            most_rows = rows > most_rows ? rows : most_rows;
            if (spans[s].block_sq && spans[s].n > 0) { /* the values after the update, in the CPU's blocks */
                sq[squares++] = {spans[s].p, NULL, spans[s].n, spans[s].block_sq, spans[s].row, spans[s].live};
                most_sq = spans[s].n > most_sq ? spans[s].n : most_sq;
            }
        }
        if (most > 0) {
            const ag__update_span *there =
                (const ag__update_span *)ag__cuda_step_upload(spans + at, (size_t)here * sizeof *spans);
            if (most_rows > 0) /* a warp a row */
                ag__launch(live_rows_all_kernel, elements_grid(32 * most_rows, here), AG_CUDA_THREADS, 0, there, gate);
            ag__launch(update_all_kernel, elements_grid(most, here), AG_CUDA_THREADS, 0, kind, there, gate);
        }
        squares_table(sq, squares, most_sq);
    }
}

/* The entries of arrays [at, at + here) of x (and y), their largest length in *most. */
static int table_of(const ag_real *const *x, ag_real *const *y, const int64_t *n, int at, int here,
                    array_entry *table, int64_t *most) {
    int used = 0;
    *most = 0;
    for (int a = at; a < at + here; a++) {
        if (n[a] <= 0) continue;
        table[used++] = {x ? x[a] : NULL, y ? y[a] : NULL, n[a], NULL, 0, NULL};
        *most = n[a] > *most ? n[a] : *most;
    }
    return used;
}

static void sum_squares_blocks_all(const ag_real *const *x, const int64_t *n, int count, double *block_sq) {
    int64_t first = 0; /* array a's blocks after array a-1's */
    for (int at = 0; at < count; at += TABLE) {
        int here = count - at < TABLE ? count - at : TABLE, used = 0;
        array_entry table[TABLE];
        int64_t most = 0;
        for (int a = at; a < at + here; a++) {
            if (n[a] > 0) {
                table[used++] = {x[a], NULL, n[a], block_sq + first, 0, NULL};
                most = n[a] > most ? n[a] : most;
            }
            first += (n[a] + AG_SQ_BLOCK - 1) / AG_SQ_BLOCK;
        }
        squares_table(table, used, most);
    }
}

static void scale_below_one_all(ag_real *const *x, const int64_t *n, int count, const double *coef) {
    for (int at = 0; at < count; at += TABLE) {
        array_entry table[TABLE];
        int64_t most;
        int used = table_of(NULL, x, n, at, count - at < TABLE ? count - at : TABLE, table, &most);
        if (used) ag__launch(scale_below_one_all_kernel, elements_grid(most, used), AG_CUDA_THREADS, 0, send(table, used), coef);
    }
}

static void axpy_all(ag_real a, const ag_real *const *x, ag_real *const *y, const int64_t *n, int count) {
    for (int at = 0; at < count; at += TABLE) {
        array_entry table[TABLE];
        int64_t most;
        int used = table_of(x, y, n, at, count - at < TABLE ? count - at : TABLE, table, &most);
        if (used) ag__launch(axpy_all_kernel, elements_grid(most, used), AG_CUDA_THREADS, 0, a, send(table, used));
    }
}

/* The parameters' average: y = lerp(y, x, *w) (x the values, y the
 * average), unless the gate is off; and the swap of x and y.  The weight
 * is read on the device, as the updates' coefficients are. */
__global__ void average_all_kernel(const ag_real *w, const array_entry *table, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag_real wt = *w;
    const array_entry a = table[blockIdx.y];
    AG_FOR_ARRAY(i, a.n) a.y[i] = ag__lerp(a.y[i], a.x[i], wt);
}

__global__ void swap_all_kernel(const array_entry *table) {
    const array_entry a = table[blockIdx.y];
    ag_real *x = (ag_real *)a.x; /* the table's x is read-only for the other kernels */
    AG_FOR_ARRAY(i, a.n) {
        ag_real t = x[i];
        x[i] = a.y[i], a.y[i] = t;
    }
}

/* Lookahead's step back: y (the slow weights) = lerp(y, x, *w), x = y. */
__global__ void lookahead_all_kernel(const ag_real *w, const array_entry *table, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag_real wt = *w;
    const array_entry a = table[blockIdx.y];
    ag_real *x = (ag_real *)a.x;
    AG_FOR_ARRAY(i, a.n) x[i] = a.y[i] = ag__lerp(a.y[i], x[i], wt);
}

static void lookahead_all(const ag_real *w, ag_real *const *slow, ag_real *const *x, const int64_t *n, int count,
                          const double *gate) {
    for (int at = 0; at < count; at += TABLE) {
        array_entry table[TABLE];
        int64_t most;
        int used = table_of((const ag_real *const *)x, slow, n, at, count - at < TABLE ? count - at : TABLE, table, &most);
        if (used) ag__launch(lookahead_all_kernel, elements_grid(most, used), AG_CUDA_THREADS, 0, w, send(table, used), gate);
    }
}

static void average_all(const ag_real *w, ag_real *const *avg, const ag_real *const *x, const int64_t *n, int count,
                        const double *gate) {
    for (int at = 0; at < count; at += TABLE) {
        array_entry table[TABLE];
        int64_t most;
        int used = table_of(x, avg, n, at, count - at < TABLE ? count - at : TABLE, table, &most);
        if (used) ag__launch(average_all_kernel, elements_grid(most, used), AG_CUDA_THREADS, 0, w, send(table, used), gate);
    }
}

static void swap_all(ag_real *const *x, ag_real *const *y, const int64_t *n, int count) {
    for (int at = 0; at < count; at += TABLE) {
        array_entry table[TABLE];
        int64_t most;
        int used = table_of((const ag_real *const *)x, y, n, at, count - at < TABLE ? count - at : TABLE, table, &most);
        if (used) ag__launch(swap_all_kernel, elements_grid(most, used), AG_CUDA_THREADS, 0, send(table, used));
    }
}

/* The spans' coefficients are read on the device (a CUDA graph needs it). */
/* A decaying lazy rule's state brought up to date: a thread a row, the
 * steps it missed on each of its elements, then its count 0. */
__global__ void catch_up_all_kernel(const ag__update_span *spans) {
    const ag__update_span u = spans[blockIdx.y];
    AG_FOR_ARRAY(r, u.n / u.row) {
        for (int64_t j = r * u.row; j < (r + 1) * u.row; j++)
            ag__lazy_missed_steps(u.decay, u.s0 + j, u.s1 ? u.s1 + j : NULL, u.missed[r]);
        u.missed[r] = 0;
    }
}

static void catch_up_all(const ag__update_span *spans, int count) {
    for (int at = 0; at < count; at += TABLE) {
        int here = count - at < TABLE ? count - at : TABLE;
        int64_t most_rows = 0;
        for (int s = at; s < at + here; s++)
            most_rows = spans[s].n / spans[s].row > most_rows ? spans[s].n / spans[s].row : most_rows;
        if (most_rows > 0)
            ag__launch(catch_up_all_kernel, elements_grid(most_rows, here), AG_CUDA_THREADS, 0,
                       (const ag__update_span *)ag__cuda_step_upload(spans + at, (size_t)here * sizeof *spans));
    }
}

/* ---- Muon's elementwise passes (its products: cuBLAS, through the matmul family) ---- */

/* A launch covers a table of matrices, blockIdx.y the matrix (as update_all's). */
__global__ void muon_momentum_kernel(const ag__muon_span *spans, ag_real mu, ag_real one_mu, bool nesterov,
                                     const double *gate) {
    const bool keep = !gate || isfinite(*gate);
    const ag__muon_span a = spans[blockIdx.y];
    AG_CUDA_FOR(i, a.n) {
        ag_real b;
        a.u[i] = ag__muon_direction(a.b[i], a.g[i], mu, one_mu, nesterov, &b);
        if (keep) a.b[i] = b;
    }
}

/* As the CPU: each slice's norm rounded to ag_real, floored at eps, each element divided by it. */
__global__ void muon_normalize_kernel(ag_real *U, int64_t n, int64_t total, const double *sq, ag_real eps) {
    AG_CUDA_FOR(i, total) {
        const ag_real norm = (ag_real)sqrt(sq[i / n]), d = norm > eps ? norm : eps;
        U[i] /= d;
    }
}

__global__ void axpby_kernel(ag_real a, const ag_real *X, ag_real b, ag_real *Y, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] = a * X[i] + b * Y[i];
}

__global__ void muon_apply_kernel(const ag__muon_span *spans, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag__muon_span a = spans[blockIdx.y];
    AG_CUDA_FOR(i, a.n) {
        ag_real shrunk = a.p[i] * a.decay;
        a.p[i] = shrunk - a.rate * a.u[i];
        if (a.g_clear) a.g_clear[i] = 0;
    }
}

/* Tables of up to TABLE matrices (a grid's y), each one launch. */
static void muon_tables(const ag__muon_span *spans, int count, bool momentum, ag_real mu, ag_real one_mu,
                        bool nesterov, const double *gate) {
    for (int at = 0; at < count; at += TABLE) {
        int here = count - at < TABLE ? count - at : TABLE;
        int64_t most = 0;
        for (int s = at; s < at + here; s++) most = spans[s].n > most ? spans[s].n : most;
        if (most == 0) continue;
        const ag__muon_span *there =
            (const ag__muon_span *)ag__cuda_step_upload(spans + at, (size_t)here * sizeof *spans);
        if (momentum)
            ag__launch(muon_momentum_kernel, elements_grid(most, here), AG_CUDA_THREADS, 0, there, mu, one_mu, nesterov,
                       gate);
        else
            ag__launch(muon_apply_kernel, elements_grid(most, here), AG_CUDA_THREADS, 0, there, gate);
    }
}

static void muon_momentum(const ag__muon_span *spans, int count, ag_real mu, ag_real one_mu, bool nesterov,
                          const double *gate) {
    muon_tables(spans, count, true, mu, one_mu, nesterov, gate);
}

static void muon_normalize(ag_real *u, int64_t n, int count, const double *sq, ag_real eps) {
    LAUNCH(muon_normalize_kernel, n * count, u, n, n * count, sq, eps);
}

static void axpby(ag_real a, const ag_real *x, ag_real b, ag_real *y, int64_t n) {
    LAUNCH(axpby_kernel, n, a, x, b, y, n);
}

static void muon_apply(const ag__muon_span *spans, int count, const double *gate) {
    muon_tables(spans, count, false, 0, 0, false, gate);
}

/* ---- Adafactor's passes (optim/kernels.h): every sum in double, one
 * thread per sum, in the CPU's order: the same bits.  A launch covers
 * every parameter of its table, blockIdx.y the span (as update_all's). ---- */

__global__ void adafactor_rows_kernel(const ag__adafactor_span *spans, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag__adafactor_span a = spans[blockIdx.y];
    if (!a.R) return;
    AG_CUDA_FOR(r, a.batch * a.rows)
        a.R[r] = ag__lerp(a.R[r], (ag_real)(ag__adafactor_row_sq(a.g + r * a.cols, a.cols) / a.cols), a.k->w);
}

/* A thread per column: neighbouring threads read neighbouring columns. */
__global__ void adafactor_cols_kernel(const ag__adafactor_span *spans, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag__adafactor_span a = spans[blockIdx.y];
    if (!a.R) return;
    const int rows = a.rows, cols = a.cols;
    AG_CUDA_FOR(j, a.batch * cols) {
        const ag_real *g = a.g + (j / cols) * rows * cols + j % cols;
        double sq = 0;
        for (int r = 0; r < rows; r++) sq += (double)g[(int64_t)r * cols] * g[(int64_t)r * cols];
        a.C[j] = ag__lerp(a.C[j], (ag_real)(sq / rows), a.k->w);
    }
}

__global__ void adafactor_means_kernel(const ag__adafactor_span *spans) {
    const ag__adafactor_span a = spans[blockIdx.y];
    if (!a.R) return;
    AG_CUDA_FOR(b, a.batch) ag__adafactor_mean(a.R + b * a.rows, a.rows, a.k->eps1, &a.means[b]);
}

/* u of a factored span from R, C and the means, or a vector's from V
 * (moved only where the gate lets the step through). */
__global__ void adafactor_direction_kernel(const ag__adafactor_span *spans, const double *gate) {
    const ag__adafactor_span a = spans[blockIdx.y];
    const int64_t plane = (int64_t)a.rows * a.cols, n = a.batch * plane;
    const ag_real eps1 = a.k->eps1;
    if (a.R) {
        AG_CUDA_FOR(i, n) {
            int64_t b = i / plane;
            a.u[i] = ag__adafactor_direction(a.g[i], a.R[i / a.cols], a.C[b * a.cols + i % a.cols], a.means[b], eps1);
        }
        return;
    }
    const bool keep = !gate || isfinite(*gate);
    AG_CUDA_FOR(i, n) {
        ag_real v = keep ? ag__lerp(a.V[i], a.g[i] * a.g[i], a.k->w) : a.V[i];
        if (keep) a.V[i] = v;
        a.u[i] = ag__adafactor_vector_direction(a.g[i], v, eps1);
    }
}

__global__ void adafactor_apply_kernel(const ag__adafactor_span *spans, const double *gate) {
    if (gate && !isfinite(*gate)) return;
    const ag__adafactor_span a = spans[blockIdx.y];
    const int64_t n = a.batch * a.rows * a.cols;
    const ag_real rate = (ag_real)ag__adafactor_rate(a.sq, n, a.k);
    AG_CUDA_FOR(i, n) {
        ag__adafactor_step(a.p, a.m, a.u, i, rate, a.k);
        if (a.g_clear) a.g_clear[i] = 0;
    }
}

/* The spans on the device, in tables of up to TABLE (a grid's y), and
 * each table's largest extent of `what`: elements, rows, columns or
 * planes (0: nothing of that kind to do). */
enum { SPAN_ELEMENTS_OF, SPAN_ROWS_OF, SPAN_COLS_OF, SPAN_PLANES_OF };
static int64_t extent(const ag__adafactor_span *s, int what) {
    switch (what) {
    case SPAN_ROWS_OF: return s->R ? s->batch * s->rows : 0;
    case SPAN_COLS_OF: return s->R ? s->batch * s->cols : 0;
    case SPAN_PLANES_OF: return s->R ? s->batch : 0;
    default: return s->batch * s->rows * s->cols;
    }
}
static int64_t most_of(const ag__adafactor_span *spans, int count, int what) {
    int64_t most = 0;
    for (int s = 0; s < count; s++) most = extent(&spans[s], what) > most ? extent(&spans[s], what) : most;
    return most;
}
static const ag__adafactor_span *send_spans(const ag__adafactor_span *spans, int count) {
    return (const ag__adafactor_span *)ag__cuda_step_upload(spans, (size_t)count * sizeof *spans);
}

static void adafactor_factors(const ag__adafactor_span *spans, int count, const double *gate) {
    for (int at = 0; at < count; at += TABLE) {
        int here = count - at < TABLE ? count - at : TABLE;
        int64_t rows = most_of(spans + at, here, SPAN_ROWS_OF);
        if (rows == 0) continue; /* only vectors */
        const ag__adafactor_span *there = send_spans(spans + at, here);
        ag__launch(adafactor_rows_kernel, elements_grid(rows, here), AG_CUDA_THREADS, 0, there, gate);
        ag__launch(adafactor_cols_kernel, elements_grid(most_of(spans + at, here, SPAN_COLS_OF), here),
                   AG_CUDA_THREADS, 0, there, gate);
        ag__launch(adafactor_means_kernel, elements_grid(most_of(spans + at, here, SPAN_PLANES_OF), here),
                   AG_CUDA_THREADS, 0, there);
    }
}

/* kernel(table, gate) over every element of each table's spans. */
static void per_element(void (*kernel)(const ag__adafactor_span *, const double *), const ag__adafactor_span *spans,
                        int count, const double *gate) {
    for (int at = 0; at < count; at += TABLE) {
        int here = count - at < TABLE ? count - at : TABLE;
        int64_t most = most_of(spans + at, here, SPAN_ELEMENTS_OF);
        if (most > 0)
            ag__launch(kernel, elements_grid(most, here), AG_CUDA_THREADS, 0, send_spans(spans + at, here), gate);
    }
}

static void adafactor_direction(const ag__adafactor_span *spans, int count, const double *gate) {
    per_element(adafactor_direction_kernel, spans, count, gate);
}

static void adafactor_apply(const ag__adafactor_span *spans, int count, const double *gate) {
    per_element(adafactor_apply_kernel, spans, count, gate);
}

extern "C" const ag__optim_kernels ag__optim_cuda = {
    update_all,    average_all,    swap_all, lookahead_all, catch_up_all,      muon_momentum,
    muon_normalize, axpby,         muon_apply, adafactor_factors, adafactor_direction, adafactor_apply};

extern "C" const ag__grads_kernels ag__grads_cuda = {
    sum_squares_blocks, sum_blocks_in_order, sum_blocks_each, clip_coef,           scale_below_one,
    axpy,               step_gate,          step_values,     sum_squares_blocks_all,
    scale_below_one_all, axpy_all,
};
