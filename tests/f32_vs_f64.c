/* f32_vs_f64.c - runs the op table's forward in the f32 and the f64 build
 * and checks that they agree to ~1e-5, relative to each output's scale
 * (elementwise relative error is meaningless where values cancel to ~0). */
#include "check.h"

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

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: f32_vs_f64 TEST_OPS_F32 TEST_OPS_F64\n");
        return 2;
    }
    FILE *a = run(argv[1]), *b = run(argv[2]);
    char name_a[256], name_b[256];
    long long na, nb;
    int cases = 0;
    while (fscanf(a, " case %255s %lld", name_a, &na) == 2) {
        if (fscanf(b, " case %255s %lld", name_b, &nb) != 2 || strcmp(name_a, name_b) || na != nb) {
            CHECK(0, "case lists differ at %s", name_a);
            break;
        }
        double *va = malloc((size_t)(na ? na : 1) * sizeof *va), *vb = malloc((size_t)(nb ? nb : 1) * sizeof *vb);
        double scale = 1e-3;
        for (long long i = 0; i < na; i++) {
            if (fscanf(a, "%lf", &va[i]) != 1 || fscanf(b, "%lf", &vb[i]) != 1) {
                CHECK(0, "%s: short output", name_a);
                break;
            }
            if (fabs(vb[i]) > scale) scale = fabs(vb[i]);
        }
        double worst = 0;
        for (long long i = 0; i < na; i++) {
            double e = fabs(va[i] - vb[i]) / scale;
            if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
        }
        CHECK(worst <= 2e-5, "%s: f32 and f64 differ by %.3g of the output scale", name_a, worst);
        free(va);
        free(vb);
        cases++;
    }
    CHECK(cases > 0, "no cases were compared");
    printf("compared %d cases\n", cases);
    pclose(a);
    pclose(b);
    return check_summary("f32_vs_f64");
}
