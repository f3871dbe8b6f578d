/* heatmap.c - attention distributions as SVG: no dependency, opens in any
 * browser, and scales without blurring the cells. */
#include "attngrad/model.h"
#include "internal.h"
#include "../data/atomic_file.h" /* an existing map is replaced whole, or kept */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

enum { LABEL_MAX = 24 }; /* longer labels are cut (with "..") so one word cannot widen the picture */

/* Writes s[0..n) with the five XML specials escaped.  XML 1.0 forbids the
 * control bytes other than tab, newline and CR even as &#x1; references, so
 * a caller that let one through gets '?' rather than a file no reader opens. */
static void xml_text_n(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n && s[i]; i++) {
        switch (s[i]) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        case '\t': case '\n': case '\r': fputc(s[i], f); break;
        default:
            /* bytes >= 0x80 may be Latin-1, which is not valid UTF-8: show '?' */
            fputc((unsigned char)s[i] >= 0x20 && (unsigned char)s[i] < 0x80 ? s[i] : '?', f);
        }
    }
}

/* An axis label: the given one (cut to LABEL_MAX characters) or the index. */
static void write_label(FILE *f, const char *const *labels, int i) {
    if (!labels) {
        fprintf(f, "%d", i);
        return;
    }
    size_t n = strlen(labels[i]);
    xml_text_n(f, labels[i], n > LABEL_MAX ? LABEL_MAX - 2 : n);
    if (n > LABEL_MAX) fputs("..", f);
}

/* Characters of the longest label of an axis (as write_label writes it). */
static int longest_label(const char *const *labels, int n) {
    int longest = 1;
    for (int i = 0; i < n; i++) {
        int len = labels ? (int)strlen(labels[i]) : snprintf(NULL, 0, "%d", i);
        if (len > LABEL_MAX) len = LABEL_MAX;
        if (len > longest) longest = len;
    }
    return longest;
}

/* Refuses labels holding control bytes, as the data loaders and predict
 * refuse such input: the words come from the user (heatmap --sentence) and
 * an SVG cannot show them. */
static ag_status check_labels(const char *path, const char *const *labels, int n, const char *axis) {
    for (int i = 0; labels && i < n; i++) {
        long junk = ag_data_find_junk(labels[i], strlen(labels[i]));
        if (junk >= 0)
            return ag_fail(AG_ERR_ARG, "%s: not written: binary data (byte 0x%02x) in the label of %s %d", path,
                           (unsigned char)labels[i][junk], axis, i + 1);
    }
    return AG_OK;
}

/* White (0) to dark blue (1). */
static void fill_colour(FILE *f, double v) {
    int shade = (int)(255 * (1 - v) + 0.5);
    fprintf(f, "fill=\"rgb(%d,%d,%d)\"", shade, shade, 128 + shade / 2);
}

ag_status ag_heatmap_svg(const char *path, const char *title, const ag_real *w, int rows, int cols,
                         const char *const *row_labels, const char *const *col_labels) {
    /* Layout in pixels, from the label lengths: at 12 px a sans-serif
     * character is at most ~7 px wide (CHAR_W), column labels are rotated by
     * 60 degrees (so they need sin 60 of their length above the grid and
     * cos 60 = half of it to the right), and cells shrink for big maps so a
     * 300 x 300 feature map stays about 1200 px wide. */
    const double CHAR_W = 7.0, SIN60 = 0.866;
    const int LINE = 18, PAD = 10, LEGEND = 70;
    int big = rows > cols ? rows : cols;
    int cell = big <= 50 ? 22 : big <= 1200 / 6 ? 1200 / big : 6;
    int every = cell >= 14 ? 1 : (14 + cell - 1) / cell; /* label every k-th row and column when cells are small */
    ag_status st = check_labels(path, col_labels, cols, "column");
    if (st == AG_OK) st = check_labels(path, row_labels, rows, "row");
    if (st != AG_OK) return st;
    ag__atomic_file file;
    int e = ag__atomic_open(&file, path);
    if (e) return ag_fail(AG_ERR_IO, "%s: cannot write the heatmap: %s", path, strerror(e));
    FILE *f = file.f;

    int title_lines = 0, title_chars = 0;
    for (const char *p = title; p && *p; title_lines++) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (len > title_chars) title_chars = len;
        p = nl ? nl + 1 : p + len;
    }
    int col_chars = longest_label(col_labels, cols), row_chars = longest_label(row_labels, rows);
    int left = PAD + (int)(CHAR_W * row_chars) + 8;
    int top = PAD + LINE * title_lines + 8 + (int)(CHAR_W * SIN60 * col_chars) + 8;
    int grid_right = left + cols * cell;
    int width = grid_right + LEGEND;
    int label_right = left + (cols - 1) * cell + cell / 2 + (int)(CHAR_W * 0.5 * col_chars) + PAD;
    if (label_right > width) width = label_right;
    if (PAD + (int)(CHAR_W * 1.15 * title_chars) > width) width = PAD + (int)(CHAR_W * 1.15 * title_chars);
    int height = top + rows * cell + PAD;
    if (top + 110 + PAD > height) height = top + 110 + PAD; /* the legend */

    double hi = 0;
    for (int64_t i = 0; i < (int64_t)rows * cols; i++)
        if (w[i] > hi) hi = w[i];
    if (hi <= 0) hi = 1;

    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    int line = 0;
    for (const char *p = title; p && *p; line++) { /* the title, one <text> per line, the first larger */
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "<text x=\"%d\" y=\"%d\"%s>", PAD, PAD + 12 + line * LINE, line == 0 ? " font-size=\"14\"" : "");
        xml_text_n(f, p, len);
        fputs("</text>\n", f);
        p = nl ? nl + 1 : p + len;
    }
    for (int c = 0; c < cols; c += every) { /* column labels, rotated, starting just above their column */
        fprintf(f, "<text transform=\"translate(%d,%d) rotate(-60)\">", left + c * cell + cell / 2 + 3, top - 5);
        write_label(f, col_labels, c);
        fputs("</text>\n", f);
    }
    for (int r = 0; r < rows; r++) {
        if (r % every == 0) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, top + r * cell + cell / 2 + 4);
            write_label(f, row_labels, r);
            fputs("</text>\n", f);
        }
        for (int c = 0; c < cols; c++) {
            double v = w[(int64_t)r * cols + c] / hi;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" ", left + c * cell, top + r * cell, cell,
                    cell);
            fill_colour(f, v < 0 ? 0 : v);
            fprintf(f, "%s><title>%.4f</title></rect>\n", cell >= 10 ? " stroke=\"#ddd\"" : "",
                    (double)w[(int64_t)r * cols + c]);
        }
    }
    int lx = grid_right + 16; /* legend: eleven steps from 0 (bottom) to the largest value (top) */
    for (int i = 0; i <= 10; i++) {
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"10\" stroke=\"#ddd\" ", lx, top + (10 - i) * 10);
        fill_colour(f, i / 10.0);
        fputs("/>\n", f);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%.2g</text>\n", lx + 18, top + 9, hi);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\">0</text>\n", lx + 18, top + 109);
    fputs("</svg>\n", f);
    if ((e = ag__atomic_close(&file)) != 0) return ag_fail(AG_ERR_IO, "%s: write failed: %s", path, strerror(e));
    return AG_OK;
}
