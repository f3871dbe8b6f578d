/* to_device.c - ag_to: a copy to another device, whose gradient is copied
 * back and added. */
#include "../graph/internal.h"
#include "elementwise.h"
#include "../graph/device.h"

static void to_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *y = n->out;
    size_t bytes = (size_t)y->size * sizeof(ag_real);
    bool fresh;
    ag_real *gx = ag__grad_write(x, &fresh); /* on x's device */
    if (fresh) {
        ag__cuda_copy(gx, x->device, y->grad, y->device, bytes);
        return;
    }
    ag_real *there = ag__step_alloc_on(x->device, bytes ? bytes : 1);
    ag__cuda_copy(there, x->device, y->grad, y->device, bytes);
    ag__elementwise_on(n->op, x->device)->add_into(gx, there, y->size);
    ag__kernels_done(n->op, x->device); /* the sweep checks y's device */
}

ag_tensor *ag_to(ag_tensor *x, ag_device d) {
    ag__need("ag_to", "the tensor", x);
    ag__check_live("ag_to", x);
    ag__need_device("ag_to", d);
    if (x->device == d) return x;
    ag_tensor *y = ag__empty_on(d, x->ndim, x->shape);
    ag__cuda_copy(y->data, d, x->data, x->device, (size_t)x->size * sizeof(ag_real));
    ag__record("ag_to", to_backward, y, 1, &x);
    return y;
}
