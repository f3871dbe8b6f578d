/* test_axis_errors.c - misuse of the ops for attention along any axis stops
 * with a message naming the op, the shapes and the caller's line: a mask
 * that would align with the wrong axes (the [N,N] mask against [B,N,N,d]
 * scores with d == N, which NumPy's broadcast would take), a mask that
 * requires grad, q/k/v that do not fit, c <= 0, lengths out of range or
 * with cross attention, a feature out of range in ag_feature_map. */
#include "fatal.h"

int main(void) {
    ag_rng r;
    ag_rng_seed(&r, 1);
    ag_tensor *s = ag_tensor_new(4, (int[]){2, 4, 4, 4}); /* d == N: the broadcast would be silent */
    ag_tensor *nn = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 4);
    EXPECT_FATAL_AT(ag_masked_softmax_axis(s, 2, nn, 1.0), "ag_masked_softmax_axis", "[4,4]", "[2,4,4,4]",
                    "[1,Nq,Nk,1]");
    ag_tensor *wrong_len = ag_tensor_new(4, (int[]){1, 4, 3, 1});
    EXPECT_FATAL_AT(ag_masked_softmax_axis(s, 1, wrong_len, 1.0), "ag_masked_softmax_axis", "[1,4,3,1]", "axis 1");
    ag_tensor *grad_mask = ag_tensor_new(4, (int[]){1, 4, 4, 1});
    grad_mask->requires_grad = true;
    EXPECT_FATAL_AT(ag_masked_softmax_axis(s, 2, grad_mask, 1.0), "ag_masked_softmax_axis", "requires grad");
    EXPECT_FATAL_AT(ag_masked_softmax_axis(s, 4, NULL, 1.0), "ag_masked_softmax_axis", "axis");
    /* the last axis keeps ag_masked_softmax's rules: a [3] mask row does not fit 4 keys */
    EXPECT_FATAL_AT(ag_masked_softmax_axis(s, -1, ag_tensor_new(1, (int[]){3}), 1.0), "ag_masked_softmax_axis",
                    "does not broadcast");

    ag_tensor *q = ag_tensor_new(3, (int[]){2, 4, 6}), *k = ag_tensor_new(3, (int[]){2, 5, 6});
    ag_tensor *v = ag_tensor_new(3, (int[]){2, 5, 6}), *v_bad = ag_tensor_new(3, (int[]){2, 5, 7});
    EXPECT_FATAL_AT(ag_feature_attention(q, k, v_bad, NULL, NULL, 5.0, NULL), "ag_feature_attention", "[2,5,7]",
                    "want q [B,Nq,d]");
    EXPECT_FATAL_AT(ag_feature_attention(q, k, v, NULL, NULL, 0.0, NULL), "ag_feature_attention", "c = 0");
    EXPECT_FATAL_AT(ag_feature_attention(q, k, v, NULL, (const int32_t[]){4, 4}, 5.0, NULL), "ag_feature_attention",
                    "self-attention");
    EXPECT_FATAL_AT(ag_feature_attention(q, q, q, NULL, (const int32_t[]){4, 5}, 5.0, NULL), "ag_feature_attention",
                    "lengths[1] = 5");
    EXPECT_FATAL_AT(ag_feature_attention(q, k, v, nn, NULL, 5.0, NULL), "ag_feature_attention", "[4,4]", "[2,4,5]");

    ag_tensor *w = ag_tensor_new(4, (int[]){1, 4, 4, 6});
    EXPECT_FATAL_AT(ag_feature_map(w, 6), "ag_feature_map", "feature 6", "[1,4,4,6]");
    EXPECT_FATAL_AT(ag_feature_map(w, -2), "ag_feature_map", "feature -2");
    ag_step_end();
    ag_shutdown();
    return check_summary("test_axis_errors");
}
