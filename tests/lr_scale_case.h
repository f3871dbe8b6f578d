/* lr_scale_case.h - ag_optim_set_lr_scale against the same optimizer at
 * lr * scale, shared by test_optim.c (the CPU, f32 and f64) and
 * test_cuda_train.c (a GPU, or the emulator's CUDA paths).  Needs check.h. */
#ifndef AG_LR_SCALE_CASE_H
#define AG_LR_SCALE_CASE_H

#include "attngrad.h"

#include <stdio.h>
#include <string.h>

static inline bool lr_scale_named(const ag_tensor *p, void *ctx) { return !strcmp(p->name, (const char *)ctx); }

/* w [3, 4] and b [4], every value nonzero, gradients of both signs (fixed:
 * the values still move apart through weight decay and the state), on dev. */
static inline void lr_scale_params(ag_params *ps, ag_device dev) {
    *ps = (ag_params){0};
    ag_tensor *w = ag_param(ps, "w", 2, (int[]){3, 4}), *b = ag_param(ps, "b", 1, (int[]){4});
    for (int k = 0; k < 12; k++) w->data[k] = (ag_real)(0.9 - 0.13 * k), w->grad[k] = (ag_real)(0.3 * sin(1.0 + k));
    for (int k = 0; k < 4; k++) b->data[k] = (ag_real)(0.55 + 0.21 * k), b->grad[k] = (ag_real)(0.4 * cos(2.0 + k));
    if (dev != AG_CPU) ag_params_to(ps, dev);
}

/* Whether parameter i of a and b hold the same bits (read back from dev). */
static inline bool lr_scale_same(const ag_params *a, const ag_params *b, int i) {
    ag_real x[12], y[12];
    ag_tensor_read(a->items[i], x);
    ag_tensor_read(b->items[i], y);
    return !memcmp(x, y, (size_t)a->items[i]->size * sizeof(ag_real));
}

/* Three runs of spec over `steps` steps, each step's rate from a per-step
 * cosine schedule (ag_lr_steps_apply): A with scale s on b; B, spec at lr
 * * s, its rate each step A's times s (what a group's rate is); C, spec as
 * given.  A's b must be B's and A's w C's, to the bit; with s = 0, A's b
 * must be as it started.  On a GPU, D: A again on the CPU, whose bits A's
 * must be (the coefficients are the host's for both), but for Muon. */
static inline void lr_scale_case(const char *spec, double s, ag_device dev, int steps) {
    ag_params ps[4], init;
    ag_optimizer o[4];
    ag_optim_config c;
    ag_lr_steps sched;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    /* no D for Muon: its products are cuBLAS's on a GPU, not the CPU's bits
     * (test_cuda_train's twins hold them to the products' roundoff) */
    const int runs = dev != AG_CPU && c.kind != AG_MUON ? 4 : 3;
    CHECK(ag_lr_steps_parse("cosine:warmup=2,total=8,min_ratio=0.1", &sched) == AG_OK, "%s", ag_errmsg());
    lr_scale_params(&init, AG_CPU);
    for (int r = 0; r < runs; r++) {
        ag_optim_config cr = c;
        if (r == 1) cr.lr = c.lr * s;
        lr_scale_params(&ps[r], r == 3 ? AG_CPU : dev);
        CHECK(ag_optim_init(&o[r], &ps[r], &cr) == AG_OK, "%s: %s", spec, ag_errmsg());
    }
    CHECK(ag_optim_set_lr_scale(&o[0], lr_scale_named, "b", s) == 1, "%s: the scale matched one parameter", spec);
    if (runs == 4) ag_optim_set_lr_scale(&o[3], lr_scale_named, "b", s);
    for (int t = 0; t < steps; t++) {
        ag_lr_steps_apply(&sched, &o[0], c.lr);
        ag_lr_steps_apply(&sched, &o[2], c.lr);
        if (runs == 4) ag_lr_steps_apply(&sched, &o[3], c.lr);
        o[1].lr = o[0].lr * s;
        for (int r = 0; r < runs; r++) ag_optim_step(&o[r]);
    }
    bool b_same = lr_scale_same(&ps[0], &ps[1], 1), w_same = lr_scale_same(&ps[0], &ps[2], 0);
    bool still = s != 0 || lr_scale_same(&ps[0], &init, 1);
    bool host = runs == 3 || (lr_scale_same(&ps[0], &ps[3], 0) && lr_scale_same(&ps[0], &ps[3], 1));
    CHECK(b_same, "%s on the %s: b at scale %g is not the optimizer's at lr * %g", spec, ag_device_name(dev), s, s);
    CHECK(w_same, "%s on the %s: w (no scale) is not the optimizer's as given", spec, ag_device_name(dev));
    CHECK(still, "%s on the %s: b moved at scale 0", spec, ag_device_name(dev));
    CHECK(host, "%s on the %s: the scaled run is not the CPU's", spec, ag_device_name(dev));
    printf("  %-52s scale %-5g %d steps on the %s: %s\n", spec, s, steps, ag_device_name(dev),
           !(b_same && w_same && still && host) ? "DIFFERENT"
           : runs == 4 ? "the bits of lr * scale, and the CPU's" : "the bits of lr * scale");
    for (int r = 0; r < runs; r++) {
        ag_optim_free(&o[r]);
        ag_params_free(&ps[r]);
    }
    ag_params_free(&init);
}

/* Every built-in kind, with the options that read lr in another way
 * (AdamW's decoupled decay, Adagrad's lr_decay, momentum buffers). */
static const char *const lr_scale_specs[] = {
    "sgd:lr=0.1,momentum=0.9,weight_decay=1e-2",
    "sgd:lr=0.1,momentum=0.9,nesterov=1",
    "adam:lr=1e-2,weight_decay=1e-2",
    "adam:lr=1e-2,amsgrad=1",
    "adamw:lr=1e-2,weight_decay=0.1",
    "adadelta:lr=0.5,rho=0.95,weight_decay=1e-3",
    "adagrad:lr=0.1,lr_decay=0.01,weight_decay=1e-3",
    "rmsprop:lr=1e-2,momentum=0.9,centered=1,weight_decay=1e-3",
    "muon:lr=1e-2,weight_decay=0.1",             /* w: Muon's step; b, scaled: its AdamW part */
    "adafactor:lr=0.5,weight_decay=0.1",         /* rho = min(lr, 1/sqrt(t)): lr * s below 1/sqrt(t) */
};

static inline void lr_scale_all(ag_device dev) {
    for (size_t i = 0; i < sizeof lr_scale_specs / sizeof *lr_scale_specs; i++) {
        lr_scale_case(lr_scale_specs[i], 0.1, dev, 6);
        lr_scale_case(lr_scale_specs[i], 0, dev, 6);
    }
}

#endif
