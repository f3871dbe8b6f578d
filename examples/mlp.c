/* mlp.c - the smallest complete attngrad program: a 2-layer network learns
 * to tell three interleaved spirals apart, with plain SGD.
 *
 *   build/examples/mlp [steps]
 *
 * It prints a falling loss and the final accuracy. */
#include "attngrad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N_PER_CLASS = 100, CLASSES = 3, N = N_PER_CLASS * CLASSES, HIDDEN = 64 };

/* Three arms of a spiral, with a little noise: not linearly separable. */
static void make_spirals(ag_real *x, int32_t *y, ag_rng *rng) {
    for (int c = 0; c < CLASSES; c++)
        for (int i = 0; i < N_PER_CLASS; i++) {
            double r = (double)i / N_PER_CLASS;
            double t = c * 4.0 + 4.0 * r + 0.2 * ag_rng_normal(rng);
            int k = c * N_PER_CLASS + i;
            x[2 * k] = (ag_real)(r * sin(t));
            x[2 * k + 1] = (ag_real)(r * cos(t));
            y[k] = c;
        }
}

static void init_uniform(ag_tensor *t, double bound, ag_rng *rng) {
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(bound * (2 * ag_rng_uniform(rng) - 1));
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    static ag_real x[N * 2];
    static int32_t y[N];
    make_spirals(x, y, &rng);

    ag_params params = {0};
    ag_tensor *w1 = ag_param(&params, "l1.weight", 2, (int[]){2, HIDDEN});
    ag_tensor *b1 = ag_param(&params, "l1.bias", 1, (int[]){HIDDEN});
    ag_tensor *w2 = ag_param(&params, "l2.weight", 2, (int[]){HIDDEN, CLASSES});
    ag_tensor *b2 = ag_param(&params, "l2.bias", 1, (int[]){CLASSES});
    init_uniform(w1, sqrt(6.0 / (2 + HIDDEN)), &rng); /* Glorot uniform */
    init_uniform(w2, sqrt(6.0 / (HIDDEN + CLASSES)), &rng);

    const double lr = 1.0;
    for (int step = 0; step <= steps; step++) {
        ag_tensor *inputs = ag_tensor_from(x, 2, (int[]){N, 2});
        ag_tensor *logits = ag_linear(ag_tanh(ag_linear(inputs, w1, b1)), w2, b2);
        ag_tensor *loss = ag_cross_entropy(logits, y, -1);

        ag_params_zero_grad(&params);
        ag_backward(loss);
        /* never train on a broken state: a finite gradient norm before the
         * update, finite parameters after it (one norm each; the message
         * names the tensor that holds the inf or NaN) */
        if (ag_check_grads_finite(&params, ag_grad_norm(&params))) {
            fprintf(stderr, "step %d: %s\n", step, ag_errmsg());
            return 1;
        }
        for (int p = 0; p < params.count; p++) { /* plain SGD */
            ag_tensor *t = params.items[p];
            for (int64_t i = 0; i < t->size; i++) t->data[i] -= (ag_real)lr * t->grad[i];
        }
        if (ag_check_params_finite(&params, NULL)) {
            fprintf(stderr, "step %d: %s\n", step, ag_errmsg());
            return 1;
        }

        if (step % (steps / 10 ? steps / 10 : 1) == 0 || step == steps) {
            int correct = 0;
            for (int i = 0; i < N; i++) {
                const ag_real *row = logits->data + i * CLASSES;
                int best = 0;
                for (int c = 1; c < CLASSES; c++)
                    if (row[c] > row[best]) best = c;
                correct += best == y[i];
            }
            printf("step %5d  loss %.4f  accuracy %.1f%%\n", step, (double)ag_item(loss), 100.0 * correct / N);
        }
        ag_step_end(); /* frees everything made this step */
    }
    ag_params_free(&params);
    ag_shutdown();
    return 0;
}
