/* test_heatmap.c - every model exposes its attention distributions when
 * asked, they have the batch's shape, rows of the normalised ones sum to 1
 * over the allowed keys, and the SVG writer makes a complete picture. */
#include "check.h"
#include "../models/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void test_svg(void) {
    char path[] = "/tmp/ag_heatmap_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    ag_real w[6] = {0.1, 0.9, 0, 0.5, 0.5, 0};
    const char *rows[] = {"the", "<cat>"}, *cols[] = {"a", "b&c", "d"};
    CHECK(ag_heatmap_svg(path, "test \"map\"", w, 2, 3, rows, cols) == AG_OK, "%s", ag_errmsg());
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strncmp(buf, "<svg", 4) == 0 && strstr(buf, "</svg>"), "not an SVG");
    CHECK(count(buf, "<title>") == 6, "one cell per entry");
    CHECK(strstr(buf, "&lt;cat&gt;") && strstr(buf, "b&amp;c") && strstr(buf, "&quot;map&quot;"), "escaping");
    unlink(path);
    CHECK(ag_heatmap_svg("/nonexistent-dir/x.svg", "t", w, 2, 3, NULL, NULL) == AG_ERR_IO);
    CHECK(strstr(ag_errmsg(), "/nonexistent-dir/x.svg") != NULL, "%s", ag_errmsg());
}

static void test_models_capture(void) {
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) {
        ag_model_config cfg = ag_model_tiny(*k);
        ag_model m;
        ag_model_init(&m, *k, &cfg);
        ag_batch b;
        ag_tiny_batch(&m, &b, 11);
        m.capture_maps = true;
        bool was = ag_set_grad_enabled(false);
        ag_model_forward(&m, &b, false);
        ag_set_grad_enabled(was);
        CHECK(m.n_maps >= 1, "%s records no attention map", (*k)->name);
        for (int i = 0; i < m.n_maps; i++) {
            ag_tensor *w = m.maps[i].w;
            CHECK(w->shape[0] == b.rows && w->ndim >= 3, "%s/%s", (*k)->name, m.maps[i].name);
            for (int64_t j = 0; j < w->size; j++) CHECK(isfinite(w->data[j]) && w->data[j] >= 0);
        }
        m.capture_maps = false;
        ag_model_forward(&m, &b, false);
        CHECK(m.n_maps == 0, "capture off records nothing");
        ag_step_end();
        ag_tiny_batch_free(&b);
        ag_model_free(&m);
    }
}

int main(void) {
    test_svg();
    test_models_capture();
    ag_shutdown();
    return check_summary("test_heatmap");
}
