/* test_buffer.c - ag_buffer (core.h): memory kept between steps, read
 * through views and written from op results, on every device the build
 * has; its misuse refused by name. */
#include "attngrad.h"
#include "check.h"
#include "fatal.h"

/* A buffer's life on device d: zeros, writes of op results at offsets,
 * views of a later step reading them, a view as an op's input without a
 * gradient of its own, and the values read back. */
static void roundtrip(ag_device d) {
    const char *dn = ag_device_name(d);
    ag_buffer *b = ag_buffer_new(d, 12, "test state");
    CHECK(b && ag_buffer_size(b) == 12 && ag_buffer_device(b) == d, "%s: a buffer of 12", dn);
    if (!b) return;
    ag_set_device(d);
    ag_real got[12];
    ag_tensor_read(ag_buffer_view(b, 0, 2, (int[]){3, 4}), got);
    bool zeros = true;
    for (int i = 0; i < 12; i++) zeros &= got[i] == 0;
    CHECK(zeros, "%s: a new buffer holds zeros", dn);

    /* step 1: an op's result into elements [4, 10) */
    ag_tensor *x = ag_tensor_from((ag_real[]){1, 2, 3, 4, 5, 6}, 2, (int[]){2, 3});
    ag_buffer_write(b, 4, ag_mul_scalar(x, 2));
    ag_step_end();

    /* step 2: the values are still there; a view feeds an op whose other
     * input is a parameter, and the gradient reaches the parameter only */
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){2, 3});
    ag_tensor_read(ag_buffer_view(b, 0, 1, (int[]){12}), got);
    const ag_real want[12] = {0, 0, 0, 0, 2, 4, 6, 8, 10, 12, 0, 0};
    bool same = true;
    for (int i = 0; i < 12; i++) same &= got[i] == want[i];
    CHECK(same, "%s: the write of the last step is read back", dn);
    ag_params_to(&ps, d);
    ag_tensor *v = ag_buffer_view(b, 4, 2, (int[]){2, 3});
    CHECK(!v->requires_grad && v->device == d && v->data != NULL, "%s: a view is a constant on the buffer's device", dn);
    ag_backward(ag_sum(ag_mul(v, w)));
    ag_real g[6];
    ag_params_to(&ps, AG_CPU);
    for (int i = 0; i < 6; i++) g[i] = w->grad[i];
    CHECK(g[0] == 2 && g[5] == 12, "%s: d sum(view * w) / dw is the view (%g, %g)", dn, (double)g[0], (double)g[5]);

    /* a view of the buffer written into another part of it */
    ag_tensor *moved = ag_buffer_write(b, 0, ag_buffer_view(b, 4, 1, (int[]){4}));
    CHECK(moved->ndim == 1 && moved->shape[0] == 4 && moved->device == d, "%s: the write returns its view", dn);
    ag_tensor_read(moved, got);
    CHECK(got[0] == 2 && got[3] == 8, "%s: a view written elsewhere in its buffer", dn);
    ag_step_end();
    ag_set_device(AG_CPU);
    ag_params_free(&ps);
    ag_buffer_free(b);
}

static void misuse(void) {
    ag_buffer *b = ag_buffer_new(AG_CPU, 8, "kv cache");
    EXPECT_FATAL_AT(ag_buffer_view(b, 6, 1, (int[]){3}), "ag_buffer_view", "[6, 9) of 'kv cache'", "holds 8");
    EXPECT_FATAL_AT(ag_buffer_view(b, -1, 1, (int[]){1}), "ag_buffer_view", "[-1, 0)");
    EXPECT_FATAL_AT(ag_buffer_view(b, 0, 1, (int[]){-2}), "ag_buffer_view", "negative dim");
    EXPECT_FATAL_AT(ag_buffer_view(NULL, 0, 1, (int[]){1}), "ag_buffer_view", "NULL");
    EXPECT_FATAL_AT(ag_buffer_write(b, 7, ag_tensor_new(1, (int[]){2})), "ag_buffer_write", "[7, 9) of 'kv cache'");
    EXPECT_FATAL_AT(ag_buffer_write(b, 0, NULL), "ag_buffer_write", "src is NULL");
    EXPECT_FATAL_AT(ag_buffer_write(b, 1, ag_buffer_view(b, 0, 1, (int[]){4})), "ag_buffer_write", "overlaps");
    EXPECT_FATAL(ag_buffer_new(AG_CPU, 0, "empty"), "ag_buffer_new", "0 elements");
    /* a view of a finished step is refused as any step tensor is */
    ag_tensor *old = ag_buffer_view(b, 0, 1, (int[]){2});
    ag_tensor *src = ag_tensor_new(1, (int[]){2});
    ag_step_end();
    EXPECT_FATAL(ag_item(old), "ag_buffer_view in step", "finished step");
    EXPECT_FATAL(ag_buffer_write(b, 0, src), "ag_buffer_write");
    ag_step_end();
    ag_buffer_free(b);
    ag_buffer_free(NULL);
}

/* A CPU tensor written into a GPU buffer is refused, naming both. */
static void across_devices(void) {
    ag_buffer *b = ag_buffer_new(AG_CUDA, 4, "gpu state");
    EXPECT_FATAL_AT(ag_buffer_write(b, 0, ag_tensor_new_host(1, (int[]){2})), "ag_buffer_write", "on the cpu",
                    "'gpu state' on the cuda");
    ag_step_end();
    ag_buffer_free(b);
}

int main(void) {
    roundtrip(AG_CPU);
    misuse();
    char why[256];
    if (ag_cuda_available(why, sizeof why)) {
        roundtrip(AG_CUDA);
        across_devices();
    } else printf("the GPU half not run: %s\n", why);
    ag_shutdown();
    return check_summary("buffer");
}
