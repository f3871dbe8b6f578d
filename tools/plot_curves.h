/* plot_curves.h - line charts as standalone SVG files, written from C with
 * no dependencies: axes with "nice" ticks, grid, legend, title, and a log
 * scale for the y axis (for losses).  Non-finite points (and non-positive
 * ones on a log axis) break a line instead of spoiling the scale. */
#ifndef PLOT_CURVES_H
#define PLOT_CURVES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *label;  /* legend text; NULL keeps the series out of the legend */
    const double *x, *y;
    int n;
    int color;          /* index into a 10-colour palette (Tableau 10) */
    double width;       /* stroke width in pixels; 0: 1.8 */
    double opacity;     /* 0: opaque */
} plot_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    bool log_y;
    int width, height;  /* pixels; 0: 760 x 460 */
    const plot_series *series;
    int n_series;
} plot_spec;

/* Writes the chart to path, replacing what was there only once it is all
 * written; 0 on success, -1 with errno set otherwise. */
int plot_svg(const plot_spec *p, const char *path);

/* Ticks at 1, 2 or 5 times a power of ten, about max_ticks of them, from
 * the first multiple of the step at or below lo to the first at or above
 * hi.  Returns the count (at most cap) and the step. */
int plot_nice_ticks(double lo, double hi, int max_ticks, double *ticks, int cap, double *step);
/* Log-axis ticks (lo, hi > 0): the integer multiples of powers of ten
 * from lo rounded down to hi rounded up.  Within 3 decades the ends round
 * to 1, 2 or 5 times a power of ten and the 1x, 2x and 5x ticks are major
 * (labelled); over more, the ends round to powers of ten and only those
 * are major.  Minor ticks get a grid line only.  The first and last ticks
 * are the axis range. */
int plot_log_ticks(double lo, double hi, double *ticks, bool *major, int cap);

#endif
