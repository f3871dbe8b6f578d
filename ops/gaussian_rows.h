/* gaussian_rows.h - the mean recurrence of the positional attention, one
 * example's row at a time, shared by the CPU loop (ops/gaussian.c) and the
 * CUDA kernel (ops/cuda/gaussian.cu, one thread per example): both run
 * exactly this code (AG_HD, vecmath.h).
 *
 *   mu_t = max(m_t . [mu_{t-1}, 1/len, (t+1)/len], t/len),  t < len
 *
 * Rows are [N] (mu, above, g) and [N,3] (m, gm); positions t >= len are
 * padding, with mu and gm 0 there. */
#ifndef AG_GAUSSIAN_ROWS_H
#define AG_GAUSSIAN_ROWS_H

#include "vecmath.h"

/* above[t] is 1 where mu_t took m_t . b_t, 0 where it sat on the floor t/len
 * (a tie goes to the floor, like ag_maximum(a, floor)). */
AG_HD static inline void ag__gaussian_mu_row(const ag_real *m, int len, ag_real *mu, uint8_t *above, int N) {
    ag_real L = (ag_real)len, prev = 0;
    for (int t = 0; t < N; t++) {
        if (t >= len) {
            mu[t] = 0;
            above[t] = 0;
            continue;
        }
        const ag_real *mt = m + (int64_t)t * 3;
        ag_real a = mt[0] * prev + mt[1] / L + mt[2] * (ag_real)(t + 1) / L;
        ag_real floor_t = (ag_real)t / L;
        above[t] = a > floor_t;
        prev = mu[t] = a > floor_t ? a : floor_t;
    }
}

/* Backward runs the recurrence in reverse: d(mu_{t-1}) picks up
 * d(mu_t) * m_t[0] only at steps where the max took the first argument.
 * Every element of gm's row is written (0 on the floor and on padding), so
 * a fresh gradient needs no zeroing first. */
AG_HD static inline void ag__gaussian_mu_grad_row(const ag_real *m, const ag_real *mu, const ag_real *g, int len,
                                                  const uint8_t *above, ag_real *gm, int N, bool fresh) {
    ag_real L = (ag_real)len, carry = 0;
    for (int t = N - 1; t >= 0; t--) {
        ag_real d0 = 0, d1 = 0, d2 = 0;
        if (t < len) {
            ag_real d = g[t] + carry;
            carry = 0;
            if (above[t]) {
                ag_real prev = t > 0 ? mu[t - 1] : 0;
                d0 = d * prev;
                d1 = d / L;
                d2 = d * (ag_real)(t + 1) / L;
                carry = d * m[(int64_t)t * 3];
            }
        }
        ag_real *gt = gm + (int64_t)t * 3;
        gt[0] = fresh ? d0 : gt[0] + d0;
        gt[1] = fresh ? d1 : gt[1] + d1;
        gt[2] = fresh ? d2 : gt[2] + d2;
    }
}

#endif
