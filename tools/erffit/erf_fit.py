#!/usr/bin/python3
"""Fits the polynomials of attnrun's float32 erf and Gelu (ops/erf.go,
ops/internal/kernel/erf_amd64.s) and prints their float32 coefficients.

    /usr/bin/python3 tools/erffit/erf_fit.py     (needs numpy and mpmath)

erf(x) = x + x*p(x^2) for |x| <= 0.921875, p of degree 5, fitted for erf's
relative error; erfc(t) = exp(g(t) - t^2) above, g of degree 8 in
t - 2.421875 fitted to log(erfc(t)) + t^2 on [0.921875, T2], T2 the point
where erfc(t) = 2^-25 (erf rounds to 1 past it), for g's absolute error
(erfc's relative error). Minimax by Lawson's iteration (iteratively
reweighted least squares) on a dense grid against mpmath at 50 digits; the
coefficients are rounded to float32 one at a time from the highest,
refitting the lower ones each time.
"""
import struct

import numpy as np
from mpmath import mp, erf, erfc, findroot, log, mpf

mp.dps = 50

SMALL_MAX = 0.921875
MID = 2.421875


def lawson(xs, target, deg, weight, iters=800):
    """Minimax polynomial of degree deg to target (weighted) on xs."""
    a = np.stack([xs**k for k in range(deg + 1)], axis=1)
    w = np.ones_like(xs) / len(xs)
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * (sw * weight)[:, None], sw * weight * target, rcond=None)
        err = np.abs(weight * (a @ c - target))
        w = w * err
        w /= w.sum()
    return c


def fit_float32(xs, target, deg, weight):
    """Coefficients rounded to float32 from the top, refitting the rest."""
    fixed = {}
    for top in range(deg, -1, -1):
        resid = target - sum(np.float64(fixed[k]) * xs**k for k in fixed)
        fixed[top] = np.float32(lawson(xs, resid, top, weight)[top])
    c = np.array([fixed[k] for k in range(deg + 1)], dtype=np.float32)
    a = np.stack([xs**k for k in range(deg + 1)], axis=1)
    return c, np.max(np.abs(weight * (a @ c.astype(np.float64) - target)))


def bits(v):
    return struct.unpack("<I", struct.pack("<f", np.float32(v)))[0]


def main():
    t2 = findroot(lambda t: erfc(t) - mpf(2) ** -25, 3.9)
    print("erfOneAt %r (0x%08x)" % (np.float32(float(t2)), bits(float(t2))))

    xs = np.linspace(1e-5, SMALL_MAX, 6000)
    target = np.array([float(erf(mpf(x)) / mpf(x) - 1) for x in xs])
    erfv = np.array([float(erf(mpf(x))) for x in xs])
    cs, e = fit_float32(xs * xs, target, 5, xs / erfv)
    print("small branch, max relative error of erf %.3g" % e)
    for k, v in enumerate(cs):
        print("  s%d %-16r 0x%08x" % (k, v, bits(v)))

    ts = np.linspace(SMALL_MAX, float(t2), 12000)
    target = np.array([float(log(erfc(mpf(t))) + mpf(t) ** 2) for t in ts])
    cl, e = fit_float32(ts - MID, target, 8, np.ones_like(ts))
    print("large branch, max absolute error of g (relative of erfc) %.3g" % e)
    for k, v in enumerate(cl):
        print("  l%d %-16r 0x%08x" % (k, v, bits(v)))


if __name__ == "__main__":
    main()
