/* test_heatmap.c - every model exposes its attention distributions when
 * asked, they have the batch's shape and say what their axes are, and the
 * SVG writer makes a complete picture. */
#include "check.h"
#include "attngrad/model.h"
#include "../train/internal.h"

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
    /* several title lines, and a long label cut so it cannot widen the picture */
    const char *long_rows[] = {"a", "<unk>(supercalifragilisticexpialidocious)"};
    CHECK(ag_heatmap_svg(path, "first line\nsecond line", w, 2, 3, long_rows, NULL) == AG_OK, "%s", ag_errmsg());
    f = fopen(path, "r");
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strstr(buf, ">first line</text>") && strstr(buf, ">second line</text>"), "one <text> per title line");
    CHECK(strstr(buf, ">&lt;unk&gt;(supercalifragili..</text>") != NULL, "labels cut at 24 characters");
    CHECK(strstr(buf, ">2</text>") != NULL, "no column labels: indices");
    unlink(path);
    CHECK(ag_heatmap_svg("/nonexistent-dir/x.svg", "t", w, 2, 3, NULL, NULL) == AG_ERR_IO);
    CHECK(strstr(ag_errmsg(), "/nonexistent-dir/x.svg") != NULL, "%s", ag_errmsg());
}

/* XML 1.0 forbids control bytes other than tab, newline and CR, even as
 * character references: a label holding one (a user's word) is refused
 * before the file is made, and any other text shows '?' in its place. */
static void test_svg_control_bytes(void) {
    char path[] = "/tmp/ag_heatmap_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    unlink(path);
    ag_real w[6] = {0.1, 0.9, 0, 0.5, 0.5, 0};
    const char *rows[] = {"the", "cat"}, *cols[] = {"a", "b\x01", "d"};
    CHECK(ag_heatmap_svg(path, "t", w, 2, 3, rows, cols) == AG_ERR_ARG);
    CHECK(strstr(ag_errmsg(), path) && strstr(ag_errmsg(), "binary data (byte 0x01) in the label of column 2"), "%s",
          ag_errmsg());
    CHECK(access(path, F_OK) != 0, "a refused heatmap left %s", path);

    CHECK(ag_heatmap_svg(path, "a\x01" "b\x1f\x0b\x0c\tc", w, 2, 3, rows, NULL) == AG_OK, "%s", ag_errmsg());
    FILE *f = fopen(path, "r");
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)buf[i];
        CHECK(c >= 0x20 || c == '\t' || c == '\n' || c == '\r', "byte 0x%02x at %zu: not well-formed XML", c, i);
    }
    CHECK(strstr(buf, ">a?b???\tc</text>") != NULL, "control bytes of the title as '?'");
    unlink(path);
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
        ag_model_batch_free(&b);
        ag_model_free(&m);
    }
}

/* What the axes of a map are: the second sentence of a pair, features of
 * dual-axial's feature axis, the sentence otherwise. */
static void test_map_axes(void) {
    struct {
        const char *model;
        ag_task task;
    } cases[] = {{"ms_san", AG_TASK_PAIR}, {"dual_axial", AG_TASK_CLASSIFY}, {"mpsan", AG_TASK_CLASSIFY}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const ag_model_kind *kind = ag_model_find(cases[c].model);
        ag_model_config cfg = ag_model_tiny(kind);
        cfg.task = cases[c].task;
        ag_model m;
        ag_model_init(&m, kind, &cfg);
        ag_batch b;
        ag_tiny_batch(&m, &b, 3);
        m.capture_maps = true;
        bool was = ag_set_grad_enabled(false);
        ag_model_forward(&m, &b, false);
        ag_set_grad_enabled(was);
        int counts[3] = {0, 0, 0};
        for (int i = 0; i < m.n_maps; i++) {
            int axes = m.maps[i].axes;
            CHECK(axes >= AG_MAP_SENTENCE && axes <= AG_MAP_FEATURES, "%s: axes %d", cases[c].model, axes);
            if (axes < AG_MAP_SENTENCE || axes > AG_MAP_FEATURES) continue;
            counts[axes]++;
            const ag_tensor *w = m.maps[i].w;
            int want = axes == AG_MAP_FEATURES ? cfg.dim : axes == AG_MAP_SENTENCE_B ? b.width_b : b.width;
            CHECK(w->shape[w->ndim - 1] == want && w->shape[w->ndim - 2] == want, "%s/%s: %d x %d, want %d",
                  cases[c].model, m.maps[i].name, w->shape[w->ndim - 2], w->shape[w->ndim - 1], want);
        }
        if (!strcmp(cases[c].model, "ms_san"))
            CHECK(counts[AG_MAP_SENTENCE] == 1 && counts[AG_MAP_SENTENCE_B] == 1, "pair: one map per sentence");
        else if (!strcmp(cases[c].model, "dual_axial"))
            CHECK(counts[AG_MAP_SENTENCE] == 1 && counts[AG_MAP_FEATURES] == 1, "text and feature axes");
        else
            CHECK(counts[AG_MAP_SENTENCE] == m.n_maps && m.n_maps == 4, "mpsan: four maps over the sentence");
        ag_step_end();
        ag_model_batch_free(&b);
        ag_model_free(&m);
    }
}

int main(void) {
    test_svg();
    test_svg_control_bytes();
    test_models_capture();
    test_map_axes();
    ag_shutdown();
    return check_summary("test_heatmap");
}
