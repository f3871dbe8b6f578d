/* f32_vs_f64.c - runs the op table's forward (test_ops --dump) in the f32
 * and the f64 build and checks that they agree to ~1e-5, relative to each
 * output's scale (elementwise relative error is meaningless where values
 * cancel to ~0).  Each dump is "case SIZE NAME" and SIZE values per case,
 * then "end CASES": a dump that stops early, or whose case lists differ,
 * fails rather than comparing less. */
#include "check.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *run(const char *exe) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --dump", exe);
    FILE *f = popen(cmd, "r");
    if (!f) {
        perror(cmd);
        exit(2);
    }
    return f;
}

/* The next header line: a case (its size and name, true) or the end
 * (*n = its case count, false). */
static bool next_case(FILE *f, long long *n, char *name, size_t cap, bool *ended) {
    char line[512];
    *ended = false;
    if (!fgets(line, sizeof line, f)) return false;
    line[strcspn(line, "\n")] = 0;
    int at = 0;
    if (sscanf(line, "case %lld %n", n, &at) == 1 && at > 0) {
        snprintf(name, cap, "%s", line + at);
        return true;
    }
    if (sscanf(line, "end %lld", n) == 1) *ended = true;
    return false;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: f32_vs_f64 TEST_OPS_F32 TEST_OPS_F64\n");
        return 2;
    }
    FILE *a = run(argv[1]), *b = run(argv[2]);
    char name_a[256], name_b[256];
    long long na, nb;
    bool end_a, end_b;
    int cases = 0;
    while (next_case(a, &na, name_a, sizeof name_a, &end_a)) {
        if (!next_case(b, &nb, name_b, sizeof name_b, &end_b) || strcmp(name_a, name_b) || na != nb) {
            CHECK(0, "case lists differ at %s", name_a);
            break;
        }
        double *va = malloc((size_t)(na ? na : 1) * sizeof *va), *vb = malloc((size_t)(na ? na : 1) * sizeof *vb);
        double scale = 1e-3;
        for (long long i = 0; i < na; i++) {
            if (fscanf(a, "%lf ", &va[i]) != 1 || fscanf(b, "%lf ", &vb[i]) != 1) {
                CHECK(0, "%s: short output", name_a);
                break;
            }
            if (fabs(vb[i]) > scale) scale = fabs(vb[i]);
        }
        double worst = 0;
        for (long long i = 0; i < na; i++) worst = check_worst(worst, fabs(va[i] - vb[i]) / scale);
        CHECK(worst <= 2e-5, "%s: f32 and f64 differ by %.3g of the output scale", name_a, worst);
        free(va);
        free(vb);
        cases++;
    }
    if (end_a) next_case(b, &nb, name_b, sizeof name_b, &end_b);
    CHECK(end_a && end_b && na == cases && nb == cases, "the dumps ended early: %d cases compared", cases);
    CHECK(cases > 0, "no cases were compared");
    printf("compared %d cases\n", cases);
    pclose(a);
    pclose(b);
    return check_summary("f32_vs_f64");
}
