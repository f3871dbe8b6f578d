#!/usr/bin/env python3
"""Fits the Mills ratio that ops/vecmath.h's float Phi uses, and prints the
coefficients and their errors.

M(a) = Phi(-a) / phi(a) is written 1 / (a + g(a)) with g = P / Q, P of
degree 3, Q of degree 4 with Q(0) = 1, evaluated as M = Q / (a Q + P).  The
fit is Lawson's iteration over a linearised least-squares problem on
Chebyshev points of [0, 13.3] (where Phi(-a) is a normal float), weighted so
its error is M's relative error.  It then evaluates the float coefficients
in float arithmetic (no fused multiply-add, as the project compiles) and
prints that error too, the one tests/test_vecmath.c sees.

Needs numpy; not part of the build or the tests.
    python3 tools/fit_mills.py
"""
import math

import numpy as np

DEG_P, DEG_Q, A_MAX, POINTS = 3, 4, 13.3, 4000
UNIT = 2.0**-24  # relative units, as tests/test_vecmath.c counts them


def mills(a):
    """Phi(-a) / phi(a) in double: erfc is accurate to ~1e-16 relative."""
    return 0.5 * math.erfc(a / math.sqrt(2)) / (math.exp(-0.5 * a * a) / math.sqrt(2 * math.pi))


def fit(a, m, iters=80):
    g = 1 / m - a
    vander = np.vander(a, DEG_Q + 1, increasing=True)
    weights = np.full(len(a), 1.0 / len(a))
    q_prev = np.ones(len(a))
    best = None
    for _ in range(iters):
        # P(a) - g Q(a) = 0, scaled to M's relative error: 1 / (Q (a + g))
        scale = np.sqrt(weights) / (q_prev * (a + g))
        lhs = np.hstack([vander[:, :DEG_P + 1], -g[:, None] * vander[:, 1:]]) * scale[:, None]
        sol, *_ = np.linalg.lstsq(lhs, g * scale, rcond=None)
        p, q = sol[:DEG_P + 1], np.concatenate([[1.0], sol[DEG_P + 1:]])
        qv, pv = vander @ q, vander[:, :DEG_P + 1] @ p
        err = np.abs(qv / (a * qv + pv) - m) / m
        if best is None or err.max() < best[0]:
            best = (err.max(), p, q)
        q_prev = qv
        weights = weights * (err + 1e-30)  # Lawson: weight the worst points up
        weights /= weights.sum()
    return best


def horner_f32(coeffs, x):
    r = np.float32(coeffs[-1])
    for c in coeffs[-2::-1]:
        r = np.float32(np.float32(r * x) + np.float32(c))
    return r


def main():
    t = np.cos(np.pi * (np.arange(POINTS) + 0.5) / POINTS)
    a = (t + 1) / 2 * A_MAX
    err, p, q = fit(a, np.array([mills(x) for x in a]))
    print("P:", ", ".join(repr(float(c)) for c in p))
    print("Q:", ", ".join(repr(float(c)) for c in q))
    print("exact arithmetic: %.3f units of 2^-24" % (err / UNIT))
    a32 = np.float32(np.linspace(0, 13.2, 200001))
    pf, qf = [np.float32(c) for c in p], [np.float32(c) for c in q]
    qv, pv = horner_f32(qf, a32), horner_f32(pf, a32)
    m32 = (qv / np.float32(np.float32(a32 * qv) + pv)).astype(np.float64)
    want = np.array([mills(float(x)) for x in a32])
    rel = np.abs(m32 - want) / want
    print("float evaluation: %.3f units of 2^-24 (at a = %g)" % (rel.max() / UNIT, a32[rel.argmax()]))


if __name__ == "__main__":
    main()
