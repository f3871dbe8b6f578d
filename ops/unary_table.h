/* unary_table.h - the elementwise unary ops, one line each: name, forward
 * y = f(x), derivative f' written in x and y.  Expanded by ops/elementwise.c
 * into the CPU loops and by ops/cuda/elementwise.cu into the CUDA kernels,
 * from the same expressions (ops/vecmath.h compiles for both). */
#ifndef AG_UNARY_TABLE_H
#define AG_UNARY_TABLE_H

/*        name          forward                 derivative */
#define AG_UNARY_TABLE(X)                                              \
    X(exp,          ag__vexp_full(x),       y)                        \
    X(log,          ag__vlog(x),            1 / x)                    \
    X(sqrt,         sqrt(x),                (ag_real)0.5 / y)         \
    X(square,       x * x,                  2 * x)                    \
    X(abs,          fabs(x),                (x > 0) - (x < 0))        \
    X(tanh,         ag__vtanh(x),           1 - y * y)                \
    X(sigmoid,      ag__vsigmoid(x),        y * (1 - y))              \
    X(relu,         x > 0 ? x : 0,          x > 0)                    \
    X(elu,          ag__velu(x),            x > 0 ? 1 : y + 1)        \
    X(softplus,     ag__vsoftplus(x),       ag__vsigmoid(x))          \
    X(log_sigmoid,  ag__vlog_sigmoid(x),    ag__vsigmoid(-x))          \
    X(gelu,         ag__vgelu(x),           ag__vgelu_grad(x))         \
    X(silu,         x * ag__vsigmoid(x),    ag__vsigmoid(x) * (1 - y) + y)

/* AG_UNARY_exp, AG_UNARY_log, ...: the op's index, for the CUDA launchers. */
#define AG_UNARY_ENUM(NAME, FWD, DERIV) AG_UNARY_##NAME,
enum { AG_UNARY_TABLE(AG_UNARY_ENUM) AG_UNARY_COUNT };
#undef AG_UNARY_ENUM

#endif
