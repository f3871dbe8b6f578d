/* plot_curves.c - see plot_curves.h.  The chart is built in one pass over
 * a fixed layout: title on top, y label on the left, x label below, the
 * legend in whichever inside corner the curves cross least. */
#include "plot_curves.h"
#include "../data/atomic_file.h" /* a plot replaces an old one whole, or not at all */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const palette[10] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

enum { MAX_TICKS = 64 };

int plot_nice_ticks(double lo, double hi, int max_ticks, double *ticks, int cap, double *step) {
    if (!(hi > lo)) { /* one value: open a small range around it */
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    double raw = (hi - lo) / (max_ticks > 1 ? max_ticks : 1);
    double mag = pow(10, floor(log10(raw))), norm = raw / mag;
    double s = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    double first = floor(lo / s) * s, last = ceil(hi / s) * s;
    int n = (int)lround((last - first) / s) + 1;
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) {
        ticks[i] = first + i * s;
        if (fabs(ticks[i]) < s * 1e-9) ticks[i] = 0; /* no "-1.4e-17" labels */
    }
    *step = s;
    return n;
}

/* The nearest of 1, 2, 5 times a power of ten below (up = false) or above v. */
static double snap125(double v, bool up) {
    double mag = pow(10, floor(log10(v))), m = v / mag;
    static const double steps[] = {1, 2, 5, 10};
    if (up) {
        for (int i = 0; i < 4; i++)
            if (steps[i] >= m * (1 - 1e-12)) return steps[i] * mag;
        return 10 * mag;
    }
    for (int i = 3; i >= 0; i--)
        if (steps[i] <= m * (1 + 1e-12)) return steps[i] * mag;
    return mag;
}

int plot_log_ticks(double lo, double hi, double *ticks, bool *major, int cap) {
    if (!(hi > lo)) hi = lo * 10;
    /* a narrow range ends on 1-2-5 values; a wide one on whole decades */
    bool fine = log10(hi / lo) <= 3;
    lo = fine ? snap125(lo, false) : pow(10, floor(log10(lo) + 1e-12));
    hi = fine ? snap125(hi, true) : pow(10, ceil(log10(hi) - 1e-12));
    int n = 0;
    for (int k = (int)floor(log10(lo) + 1e-12); k <= (int)ceil(log10(hi) - 1e-12) && n < cap; k++)
        for (int m = 1; m <= 9 && n < cap; m++) {
            double v = m * pow(10, k);
            if (v < lo * (1 - 1e-12) || v > hi * (1 + 1e-12)) continue;
            ticks[n] = v;
            major[n++] = m == 1 || (fine && (m == 2 || m == 5));
        }
    return n;
}

/* ---- layout ---- */

typedef struct {
    double x0, x1, y0, y1;      /* plot area in pixels (y0 top) */
    double xmin, xmax, ymin, ymax;
    bool log_y;
} frame;

static double px(const frame *f, double x) { return f->x0 + (x - f->xmin) / (f->xmax - f->xmin) * (f->x1 - f->x0); }

static double py(const frame *f, double y) {
    double t = f->log_y ? (log10(y) - log10(f->ymin)) / (log10(f->ymax) - log10(f->ymin))
                        : (y - f->ymin) / (f->ymax - f->ymin);
    return f->y1 - t * (f->y1 - f->y0);
}

static bool usable(const frame *f, double x, double y) { return isfinite(x) && isfinite(y) && (!f->log_y || y > 0); }

static void put_escaped(FILE *out, const char *s) {
    for (; s && *s; s++) switch (*s) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(*s, out);
        }
}

/* A tick label: as many decimals as the step needs; %g for the extremes. */
static void tick_label(double v, double step, bool log_axis, char *buf, size_t n) {
    if (v != 0 && (fabs(v) >= 1e4 || fabs(v) < 1e-3)) { /* 2e-05 -> "2e-5", 1e+06 -> "1e6" */
        int k = (int)floor(log10(fabs(v)) + 1e-9);
        snprintf(buf, n, "%.3ge%d", v / pow(10, k), k);
        return;
    }
    if (log_axis || v == 0) {
        snprintf(buf, n, "%g", v);
        return;
    }
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    snprintf(buf, n, "%.*f", decimals > 10 ? 10 : decimals, v);
}

/* Points of all series inside a box: the legend goes where this is least. */
static int points_inside(const plot_spec *p, const frame *f, double bx, double by, double bw, double bh) {
    int count = 0;
    for (int s = 0; s < p->n_series; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!usable(f, x, y)) continue;
            double X = px(f, x), Y = py(f, y);
            count += X >= bx && X <= bx + bw && Y >= by && Y <= by + bh;
        }
    return count;
}

static void draw_legend(FILE *out, const plot_spec *p, const frame *f) {
    int entries = 0;
    size_t longest = 0;
    for (int s = 0; s < p->n_series; s++)
        if (p->series[s].label) {
            entries++;
            if (strlen(p->series[s].label) > longest) longest = strlen(p->series[s].label);
        }
    if (!entries) return;
    double bw = 44 + 7.2 * (double)longest, bh = 10 + 18.0 * entries, pad = 10;
    double cx[4] = {f->x1 - bw - pad, f->x0 + pad, f->x1 - bw - pad, f->x0 + pad};
    double cy[4] = {f->y0 + pad, f->y0 + pad, f->y1 - bh - pad, f->y1 - bh - pad};
    int best = 0, least = -1;
    for (int c = 0; c < 4; c++) {
        int k = points_inside(p, f, cx[c], cy[c], bw, bh);
        if (least < 0 || k < least) least = k, best = c;
    }
    double bx = cx[best], by = cy[best];
    fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"white\" fill-opacity=\"0.9\" "
                 "stroke=\"#bbbbbb\"/>\n", bx, by, bw, bh);
    int row = 0;
    for (int s = 0; s < p->n_series; s++) {
        const plot_series *se = &p->series[s];
        if (!se->label) continue;
        double y = by + 14 + 18.0 * row++;
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", bx + 8,
                y - 4, bx + 30, y - 4, palette[((se->color % 10) + 10) % 10]);
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", bx + 36, y);
        put_escaped(out, se->label);
        fputs("</text>\n", out);
    }
}

static void draw_series(FILE *out, const plot_spec *p, const frame *f) {
    for (int s = 0; s < p->n_series; s++) {
        const plot_series *se = &p->series[s];
        const char *color = palette[((se->color % 10) + 10) % 10];
        bool open = false;
        for (int i = 0; i <= se->n; i++) {
            bool ok = i < se->n && usable(f, se->x[i], se->y[i]);
            if (ok && !open) {
                fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.2f\" stroke-opacity=\"%.2f\" "
                             "stroke-linejoin=\"round\" clip-path=\"url(#plot-area)\" points=\"",
                        color, se->width > 0 ? se->width : 1.8, se->opacity > 0 ? se->opacity : 1.0);
                open = true;
            }
            if (ok) fprintf(out, "%.2f,%.2f ", px(f, se->x[i]), py(f, se->y[i]));
            if (!ok && open) {
                fputs("\"/>\n", out);
                open = false;
            }
        }
    }
}

int plot_svg(const plot_spec *p, const char *path) {
    const double W = p->width > 0 ? p->width : 760, H = p->height > 0 ? p->height : 460;
    frame f = {.x0 = 78, .x1 = W - 24, .y0 = 44, .y1 = H - 56, .log_y = p->log_y};
    bool any = false;
    for (int s = 0; s < p->n_series; s++)
        for (int i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!usable(&f, x, y)) continue;
            if (!any) f.xmin = f.xmax = x, f.ymin = f.ymax = y, any = true;
            f.xmin = fmin(f.xmin, x), f.xmax = fmax(f.xmax, x);
            f.ymin = fmin(f.ymin, y), f.ymax = fmax(f.ymax, y);
        }
    if (!any) f.xmin = 0, f.xmax = 1, f.ymin = f.log_y ? 0.1 : 0, f.ymax = 1;
    if (f.xmax == f.xmin) f.xmin -= 0.5, f.xmax += 0.5;

    double xt[MAX_TICKS], yt[MAX_TICKS], xstep, ystep = 0;
    bool ymajor[MAX_TICKS];
    int nx = plot_nice_ticks(f.xmin, f.xmax, 8, xt, MAX_TICKS, &xstep), ny;
    if (f.log_y) {
        ny = plot_log_ticks(f.ymin, f.ymax, yt, ymajor, MAX_TICKS);
        f.ymin = yt[0];
        f.ymax = yt[ny - 1];
    } else {
        ny = plot_nice_ticks(f.ymin, f.ymax, 6, yt, MAX_TICKS, &ystep);
        for (int i = 0; i < ny; i++) ymajor[i] = true;
        f.ymin = yt[0];
        f.ymax = yt[ny - 1];
    }

    ag__atomic_file file;
    if ((errno = ag__atomic_open(&file, path)) != 0) return -1;
    FILE *out = file.f;
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                 "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"#222222\">\n", W, H, W, H);
    fprintf(out, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
    fprintf(out, "<defs><clipPath id=\"plot-area\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath></defs>\n",
            f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);
    if (p->title) {
        fprintf(out, "<text x=\"%.1f\" y=\"26\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">", (f.x0 + f.x1) / 2);
        put_escaped(out, p->title);
        fputs("</text>\n", out);
    }
    /* grid and tick labels */
    char label[64];
    for (int i = 0; i < ny; i++) {
        double y = py(&f, yt[i]);
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"%s\"/>\n", f.x0, y, f.x1, y,
                ymajor[i] ? "#dddddd" : "#f0f0f0");
        if (!ymajor[i]) continue;
        tick_label(yt[i], ystep, f.log_y, label, sizeof label);
        fprintf(out, "<text x=\"%.1f\" y=\"%.2f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n", f.x0 - 6, y,
                label);
    }
    for (int i = 0; i < nx; i++) {
        if (xt[i] < f.xmin - 1e-9 * xstep || xt[i] > f.xmax + 1e-9 * xstep) continue;
        double x = px(&f, xt[i]);
        fprintf(out, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#dddddd\"/>\n", x, f.y0, x, f.y1);
        tick_label(xt[i], xstep, false, label, sizeof label);
        fprintf(out, "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, f.y1 + 18, label);
    }
    fprintf(out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#444444\"/>\n", f.x0,
            f.y0, f.x1 - f.x0, f.y1 - f.y0);
    if (p->xlabel) {
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (f.x0 + f.x1) / 2, H - 14);
        put_escaped(out, p->xlabel);
        fputs("</text>\n", out);
    }
    if (p->ylabel) {
        fprintf(out, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">", (f.y0 + f.y1) / 2);
        put_escaped(out, p->ylabel);
        if (f.log_y) fputs(" (log scale)", out);
        fputs("</text>\n", out);
    }
    draw_series(out, p, &f);
    draw_legend(out, p, &f);
    fputs("</svg>\n", out);
    errno = ag__atomic_close(&file);
    return errno ? -1 : 0;
}
