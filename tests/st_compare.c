/* st_compare - do two checkpoints hold the same run?  For the data-parallel
 * tests: a run on N ranks against one process.
 *
 *   st_compare A.safetensors B.safetensors TOL
 *
 * Every tensor (parameters, optimizer state) must be in both with the same
 * size and agree to TOL relative to its scale: max |a - b| <= TOL s, s being
 * the tensor's largest |a|, or a thousandth of the largest in its group
 * (the parameters; each optimizer slot) if that is more.  The floor is for
 * tensors whose gradient is zero in exact arithmetic (a bias under a
 * softmax, a shift it cannot see): they hold rounding noise, 1e-18 beside
 * parameters of 0.1, which no summation order reproduces.  The metadata "step" and "rng" (the dropout generator) must be
 * equal, or absent from both (dump-step files: parameters, grad.*, loss).  Prints the worst tensor; exit 0 when all agree, 1 if not, 2 on a
 * bad file. */
#include <attngrad.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameters form one group, each optimizer slot ("optim.adam.m.*") one;
 * the schedule's state ("sched.state": its best score, +-inf until there
 * is one) is none of them.  In the parameters' group its inf made every
 * parameter's scale inf, which let any difference in them pass. */
static bool same_group(const char *a, const char *b) {
    if (!strncmp(a, "sched.", 6) || !strncmp(b, "sched.", 6)) return !strcmp(a, b);
    bool oa = !strncmp(a, "optim.", 6), ob = !strncmp(b, "optim.", 6);
    if (!oa || !ob) return oa == ob;
    const char *ea = strchr(a + 6, '.'), *eb = strchr(b + 6, '.');
    ea = ea ? strchr(ea + 1, '.') : NULL, eb = eb ? strchr(eb + 1, '.') : NULL;
    return ea && eb && ea - a == eb - b && !strncmp(a, b, (size_t)(ea - a));
}

/* Element k of t, through the converting copies (which take whole tensors). */
static void element_real(const ag_st_tensor *t, int64_t k, ag_real *out) {
    size_t bytes = t->dtype == AG_F64 ? 8 : 4;
    ag_st_tensor one = *t;
    one.ndim = 1, one.shape[0] = one.numel = 1, one.data = (const char *)t->data + (size_t)k * bytes;
    ag_st_to_real(&one, out);
}

static void element_i64(const ag_st_tensor *t, int64_t k, int64_t *out) {
    size_t bytes = t->dtype == AG_I64 ? 8 : 4;
    ag_st_tensor one = *t;
    one.ndim = 1, one.shape[0] = one.numel = 1, one.data = (const char *)t->data + (size_t)k * bytes;
    ag_st_to_i64(&one, out);
}

static int fail_meta(const ag_st_file *a, const ag_st_file *b, const char *key) {
    const char *x = ag_st_meta(a, key), *y = ag_st_meta(b, key);
    if (x && y ? !strcmp(x, y) : !x && !y) return 0; /* the same, or in neither (a dump-step file) */
    printf("metadata %s differs: %s against %s\n", key, x ? x : "(none)", y ? y : "(none)");
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: st_compare A.safetensors B.safetensors TOL\n");
        return 2;
    }
    double tol = atof(argv[3]), worst = 0;
    ag_st_file a, b;
    if (ag_st_read(argv[1], &a) || ag_st_read(argv[2], &b)) {
        fprintf(stderr, "st_compare: %s\n", ag_errmsg());
        return 2;
    }
    int bad = fail_meta(&a, &b, "step") + fail_meta(&a, &b, "rng");
    const char *worst_name = "";
    double *scales = calloc((size_t)a.count + 1, sizeof *scales);
    for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < a.count; i++) {
        const ag_st_tensor *x = &a.tensors[i], *y = ag_st_get(&b, x->name);
        if (!y || y->numel != x->numel) {
            if (pass == 0) continue;
            printf("%s: missing or another size in %s\n", x->name, argv[2]);
            bad++;
            continue;
        }
        bool ints = x->dtype == AG_I32 || x->dtype == AG_I64; /* counters, as optim.step */
        double diff = 0, scale = 0;
        if (ints != (y->dtype == AG_I32 || y->dtype == AG_I64)) diff = INFINITY;
        for (int64_t k = 0; isfinite(diff) && k < x->numel; k++) {
            double u, v;
            if (ints) {
                int64_t p, q;
                element_i64(x, k, &p), element_i64(y, k, &q);
                u = (double)p, v = (double)q;
            } else {
                ag_real p, q;
                element_real(x, k, &p), element_real(y, k, &q);
                u = (double)p, v = (double)q;
            }
            diff = fmax(diff, fabs(u - v));
            scale = fmax(scale, fabs(u));
        }
        if (pass == 0) { /* the scales first */
            scales[i] = isfinite(diff) ? scale : 0;
            continue;
        }
        double group = 0;
        for (int j = 0; j < a.count; j++)
            if (same_group(x->name, a.tensors[j].name) && isfinite(scales[j])) group = fmax(group, scales[j]);
        scale = fmax(scale, 1e-3 * group);
        double rel = diff / (scale > 0 ? scale : 1);
        if (!(rel <= tol)) {
            printf("%s: differs by %.3g relative (max |diff| %.3g, max |a| %.3g)\n", x->name, rel, diff, scale);
            bad++;
        }
        if (rel > worst || isnan(rel)) worst = rel, worst_name = x->name;
    }
    free(scales);
    printf("%d tensors, worst relative difference %.3g (%s), tolerance %g: %s\n", a.count, worst, worst_name, tol,
           bad ? "DIFFER" : "same");
    ag_st_close(&a);
    ag_st_close(&b);
    return bad ? 1 : 0;
}
