/* gradients.c - what happens to gradients between backward and the
 * optimizer step: global-norm clipping and the L2 penalty of MODELS.md.
 * Sums run in double so the norm does not depend on the real type's
 * rounding more than it must. */
#include "../graph/internal.h"

double ag_clip_grad_norm(ag_params *ps, double max_norm) {
    double sq = 0;
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *p = ps->items[i];
        if (!p->grad) continue;
        for (int64_t j = 0; j < p->size; j++) sq += (double)p->grad[j] * (double)p->grad[j];
    }
    double norm = sqrt(sq);
    /* torch.nn.utils.clip_grad_norm_: the 1e-6 keeps the clipped norm just
     * under max_norm and the division finite.  A non-finite norm is
     * returned untouched for the caller to act on (skip the step). */
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
        const ag_real c = (ag_real)coef;
        for (int i = 0; i < ps->count; i++) {
            ag_tensor *p = ps->items[i];
            if (!p->grad) continue;
            for (int64_t j = 0; j < p->size; j++) p->grad[j] *= c;
        }
    }
    return norm;
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

bool ag_is_weight_matrix(const ag_tensor *p) {
    if (p->ndim < 2) return false;
    return !(p->name && (starts_with(p->name, "embed") || starts_with(p->name, "bigram")));
}

double ag_l2_penalty(ag_params *ps, double gamma) {
    double half_sq = 0;
    const ag_real g = (ag_real)gamma;
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (!ag_is_weight_matrix(p)) continue;
        if (!p->grad) ag__fatal("ag_l2_penalty", "parameter '%s' has no gradient buffer", p->name);
        for (int64_t j = 0; j < p->size; j++) {
            half_sq += 0.5 * (double)p->data[j] * (double)p->data[j];
            p->grad[j] += g * p->data[j];
        }
    }
    return gamma * half_sq;
}
