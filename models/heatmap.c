/* heatmap.c - attention distributions as SVG: no dependency, opens in any
 * browser, and scales without blurring the cells. */
#include "models.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Writes s with the five XML specials escaped. */
static void xml_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* bytes >= 0x80 may be Latin-1, which is not valid UTF-8: show '?' */
            fputc((unsigned char)*s < 0x80 ? *s : '?', f);
        }
    }
}

ag_status ag_heatmap_svg(const char *path, const char *title, const ag_real *w, int rows, int cols,
                         const char *const *row_labels, const char *const *col_labels) {
    enum { CELL = 22, LEFT = 110, TOP = 120, LEGEND = 70 };
    FILE *f = fopen(path, "w");
    if (!f) return ag_fail(AG_ERR_IO, "%s: cannot write the heatmap: %s", path, strerror(errno));
    double hi = 0;
    for (int64_t i = 0; i < (int64_t)rows * cols; i++)
        if (w[i] > hi) hi = w[i];
    if (hi <= 0) hi = 1;
    int width = LEFT + cols * CELL + LEGEND, height = TOP + rows * CELL + 20;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n<text x=\"8\" y=\"18\" font-size=\"14\">");
    xml_text(f, title);
    fprintf(f, " (max %.3g)</text>\n", hi);
    for (int c = 0; c < cols; c++) { /* column labels, rotated */
        int x = LEFT + c * CELL + CELL / 2 + 4, y = TOP - 6;
        fprintf(f, "<text transform=\"translate(%d,%d) rotate(-60)\">", x, y);
        if (col_labels) xml_text(f, col_labels[c]);
        else fprintf(f, "%d", c);
        fputs("</text>\n", f);
    }
    for (int r = 0; r < rows; r++) {
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", LEFT - 6, TOP + r * CELL + CELL / 2 + 4);
        if (row_labels) xml_text(f, row_labels[r]);
        else fprintf(f, "%d", r);
        fputs("</text>\n", f);
        for (int c = 0; c < cols; c++) {
            double v = w[(int64_t)r * cols + c] / hi;
            if (v < 0) v = 0;
            int shade = (int)(255 * (1 - v) + 0.5); /* white (0) to dark blue (max) */
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(%d,%d,%d)\" "
                       "stroke=\"#ddd\"><title>%.4f</title></rect>\n",
                    LEFT + c * CELL, TOP + r * CELL, CELL, CELL, shade, shade, 128 + shade / 2,
                    (double)w[(int64_t)r * cols + c]);
        }
    }
    for (int i = 0; i <= 10; i++) { /* legend */
        int shade = (int)(255 * (1 - i / 10.0) + 0.5);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"10\" fill=\"rgb(%d,%d,%d)\"/>\n",
                LEFT + cols * CELL + 20, TOP + (10 - i) * 10, shade, shade, 128 + shade / 2);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\">%.2g</text>\n", LEFT + cols * CELL + 40, TOP + 9, hi);
    fprintf(f, "<text x=\"%d\" y=\"%d\">0</text>\n", LEFT + cols * CELL + 40, TOP + 109);
    fputs("</svg>\n", f);
    bool failed = ferror(f);
    if (fclose(f) != 0 || failed) return ag_fail(AG_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return AG_OK;
}
