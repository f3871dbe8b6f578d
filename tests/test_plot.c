/* test_plot.c - the SVG plots of tools/plot_curves.c: tick choices on
 * linear and log axes, and what a written chart contains (escaped text,
 * one polyline per unbroken run of points, a legend entry per label). */
#include "check.h"
#include "../tools/plot_curves.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

static void test_nice_ticks(void) {
    double t[64], step;
    int n = plot_nice_ticks(0.13, 0.87, 6, t, 64, &step);
    CHECK(step == 0.1 || fabs(step - 0.1) < 1e-15, "step %g", step);
    CHECK(n == 9 && fabs(t[0] - 0.1) < 1e-12 && fabs(t[n - 1] - 0.9) < 1e-12, "%d ticks %g..%g", n, t[0], t[n - 1]);
    n = plot_nice_ticks(1, 2500, 8, t, 64, &step);
    CHECK(step == 500 && t[0] == 0 && t[n - 1] == 2500, "step %g, %g..%g", step, t[0], t[n - 1]);
    n = plot_nice_ticks(-3, 7, 5, t, 64, &step);
    CHECK(step == 2 && t[0] == -4 && t[n - 1] == 8);
    for (int i = 0; i < n; i++) CHECK(t[i] == 0 || fabs(t[i]) >= 1, "no -0.0000001 style ticks: %g", t[i]);
    n = plot_nice_ticks(5, 5, 5, t, 64, &step); /* one value: a range opens around it */
    CHECK(n >= 2 && t[0] < 5 && t[n - 1] > 5);
}

static void test_log_ticks(void) {
    double t[64];
    bool major[64];
    /* narrow: ends at 1-2-5 values, 1x 2x 5x labelled */
    int n = plot_log_ticks(0.18, 1.75, t, major, 64);
    CHECK(n > 0 && fabs(t[0] - 0.1) < 1e-12 && fabs(t[n - 1] - 2) < 1e-12, "%g..%g", t[0], t[n - 1]);
    int labelled = 0;
    for (int i = 0; i < n; i++) labelled += major[i];
    CHECK(labelled == 5, "0.1 0.2 0.5 1 2: %d", labelled); /* 0.1, 0.2, 0.5, 1, 2 */
    n = plot_log_ticks(0.3, 0.45, t, major, 64);
    CHECK(fabs(t[0] - 0.2) < 1e-12 && fabs(t[n - 1] - 0.5) < 1e-12 && major[0] && major[n - 1]);
    /* wide: whole decades, only powers of ten labelled */
    n = plot_log_ticks(3e-5, 20, t, major, 64);
    CHECK(fabs(t[0] - 1e-5) < 1e-18 && fabs(t[n - 1] - 100) < 1e-9, "%g..%g", t[0], t[n - 1]);
    labelled = 0;
    for (int i = 0; i < n; i++) labelled += major[i];
    CHECK(labelled == 8, "1e-5 .. 1e2: %d", labelled);
}

static void test_svg(void) {
    char path[] = "/tmp/ag_plot_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    double x[6] = {1, 2, 3, 4, 5, 6};
    double a[6] = {2.0, 1.0, NAN, 0.5, 0.4, 0.3};   /* a NaN breaks the line */
    double b[6] = {1.5, 1.2, 1.0, -1, 0.8, 0.7};    /* -1 cannot be drawn on a log axis */
    plot_series s[3] = {{"sgd:lr=0.1 <&> \"q\"", x, a, 6, 0, 0, 0}, {"adam", x, b, 6, 1, 2.5, 0.5}, {NULL, x, b, 6, 1, 1, 0.2}};
    plot_spec spec = {"Loss & such", "step", "loss", true, 640, 400, s, 3};
    CHECK(plot_svg(&spec, path) == 0);
    FILE *f = fopen(path, "r");
    char *svg = calloc(1, 1 << 16);
    size_t n = fread(svg, 1, (1 << 16) - 1, f);
    fclose(f);
    CHECK(n > 0 && !strncmp(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"400\"", 64));
    CHECK(strstr(svg, "</svg>\n") && count(svg, "<svg") == 1);
    CHECK(strstr(svg, "sgd:lr=0.1 &lt;&amp;&gt; &quot;q&quot;") && strstr(svg, "Loss &amp; such"), "text escaped");
    CHECK(!strstr(svg, "<&>"));
    CHECK(count(svg, "<polyline") == 6, "2 runs per series: %d polylines", count(svg, "<polyline"));
    CHECK(count(svg, "stroke-width=\"3\"") == 2, "two legend entries");
    CHECK(strstr(svg, "(log scale)") && strstr(svg, ">0.2<") && strstr(svg, ">2<"));
    CHECK(!strstr(svg, "nan,") && !strstr(svg, ",nan") && !strstr(svg, ",-nan") && !strstr(svg, "inf"), "no NaN point");
    /* linear axis: the negative value is drawn, one polyline per series */
    spec.log_y = false;
    spec.series = s + 1;
    spec.n_series = 1;
    CHECK(plot_svg(&spec, path) == 0);
    f = fopen(path, "r");
    n = fread(svg, 1, (1 << 16) - 1, f);
    svg[n] = 0;
    fclose(f);
    CHECK(count(svg, "<polyline") == 1 && !strstr(svg, "(log scale)") && strstr(svg, ">-1.0<"), "%s", svg);
    /* nothing to draw still makes a valid empty chart; a bad path fails */
    spec.n_series = 0;
    CHECK(plot_svg(&spec, path) == 0);
    CHECK(plot_svg(&spec, "/nonexistent-dir/x.svg") == -1);
    /* a device is written in place (a rename would replace the node), a
     * folder is refused by name */
    CHECK(plot_svg(&spec, "/dev/null") == 0, "/dev/null: %s", strerror(errno));
    CHECK(plot_svg(&spec, "/tmp") == -1 && errno == EISDIR, "a folder: %s", strerror(errno));
    free(svg);
    unlink(path);
}

int main(void) {
    test_nice_ticks();
    test_log_ticks();
    test_svg();
    return check_summary("test_plot");
}
