/* metrics.c - agreement of predicted with gold scores (SICK relatedness):
 * Pearson's r, Spearman's rho, mean squared error.  All in double, over
 * plain arrays, so the evaluation loop and the tests call them alike. */
#include "attngrad/train.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>

/* Two passes (means first, then centred sums): no cancellation when the
 * values are large and close together. */
double ag_pearson(const double *x, const double *y, int64_t n) {
    if (n < 2) return NAN;
    double mx = 0, my = 0;
    for (int64_t i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= (double)n, my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) {
        double dx = x[i] - mx, dy = y[i] - my;
        sxy += dx * dy, sxx += dx * dx, syy += dy * dy;
    }
    if (sxx == 0 || syy == 0) return NAN; /* a constant side: no correlation is defined */
    double r = sxy / sqrt(sxx * syy);
    return r > 1 ? 1 : r < -1 ? -1 : r; /* rounding may step just outside */
}

typedef struct {
    double value;
    int64_t index;
} keyed;

static int by_value(const void *a, const void *b) {
    double va = ((const keyed *)a)->value, vb = ((const keyed *)b)->value;
    return (va > vb) - (va < vb);
}

/* rank[i] = 1-based rank of v[i]; a run of equal values gets the mean of
 * the ranks it spans (two values tied for 2nd and 3rd both get 2.5). */
static void ranks(const double *v, int64_t n, keyed *work, double *rank) {
    for (int64_t i = 0; i < n; i++) work[i] = (keyed){v[i], i};
    qsort(work, (size_t)n, sizeof *work, by_value);
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j + 1 < n && work[j + 1].value == work[i].value) j++;
        double mean = 0.5 * (double)(i + j) + 1;
        for (int64_t k = i; k <= j; k++) rank[work[k].index] = mean;
        i = j + 1;
    }
}

double ag_spearman(const double *x, const double *y, int64_t n) {
    if (n < 2) return NAN;
    for (int64_t i = 0; i < n; i++)
        if (isnan(x[i]) || isnan(y[i])) return NAN; /* NaN has no rank */
    keyed *work = malloc((size_t)n * sizeof *work);
    double *rx = malloc((size_t)n * sizeof *rx), *ry = malloc((size_t)n * sizeof *ry);
    double rho = NAN;
    if (work && rx && ry) {
        ranks(x, n, work, rx);
        ranks(y, n, work, ry);
        rho = ag_pearson(rx, ry, n);
    }
    free(work);
    free(rx);
    free(ry);
    return rho;
}

double ag_mean_sq_error(const double *x, const double *y, int64_t n) {
    if (n < 1) return NAN;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (x[i] - y[i]) * (x[i] - y[i]);
    return sum / (double)n;
}
