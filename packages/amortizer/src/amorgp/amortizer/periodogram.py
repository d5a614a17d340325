"""Periods suggested by the data: the Lomb-Scargle periodogram of the targets and of the
residuals of simple fits, per input dimension (the ``"periodogram"`` starts of
:mod:`amorgp.amortizer.multistart`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["MAX_FREQUENCIES", "PEAKS", "lomb_scargle", "period_candidates"]

PEAKS = 4
"""Periodogram peaks proposed per kernel (the strongest over all dimensions and signals)."""

MAX_FREQUENCIES = 2000
"""Most frequencies of the periodogram grid."""

_OVERSAMPLE = 5


def lomb_scargle(x: Tensor, y: Tensor, freqs: Tensor) -> Tensor:
    """Classical Lomb-Scargle periodogram of ``B`` unevenly sampled signals.

    .. math::

        P(\\omega) = \\tfrac12 \\Big[ \\frac{(\\sum_i y_i \\cos \\omega(x_i - \\tau))^2}
            {\\sum_i \\cos^2 \\omega(x_i - \\tau)} + \\frac{(\\sum_i y_i \\sin
            \\omega(x_i - \\tau))^2}{\\sum_i \\sin^2 \\omega(x_i - \\tau)} \\Big],
        \\quad \\tan 2\\omega\\tau = \\frac{\\sum_i \\sin 2\\omega x_i}{\\sum_i \\cos 2\\omega x_i}

    (``scipy.signal.lombscargle(x, y, freqs)`` with its defaults; ``y`` is used as given,
    centre it first).

    Args:
        x: ``(B, n)`` sample positions, or ``(G, n)`` with ``G`` dividing ``B`` where
            signal ``b`` is sampled at row ``b % G`` (its trigonometry computed once).
        y: ``(B, n)`` values.
        freqs: ``(F,)`` angular frequencies ``omega > 0``.

    Returns:
        ``(B, F)`` power.
    """
    B, n = y.shape
    # signals sharing their sample positions share the trigonometry: x (G, n) with
    # G dividing B, signal b sampled at row b % G (period_candidates' layout)
    G = x.shape[0]
    wx = freqs[None, :, None] * x[:, None, :]  # (G, F, n)
    # one sine and one cosine per entry; the others by the double-angle and difference
    # formulas (the same values to rounding, half the transcendental work)
    sw, cw = torch.sin(wx), torch.cos(wx)
    tau2 = torch.atan2((2.0 * sw * cw).sum(-1), (cw * cw - sw * sw).sum(-1))  # 2 omega tau
    st, ct = torch.sin(0.5 * tau2)[..., None], torch.cos(0.5 * tau2)[..., None]
    c, s = cw * ct + sw * st, sw * ct - cw * st  # cos and sin of omega (x - tau)
    yg = y.reshape(B // G, G, n)
    yc = torch.einsum("rgn,gfn->rgf", yg, c).reshape(B, -1)
    ys = torch.einsum("rgn,gfn->rgf", yg, s).reshape(B, -1)
    cc = (c * c).sum(-1).clamp_min(1e-300).repeat(B // G, 1)
    ss = (s * s).sum(-1).clamp_min(1e-300).repeat(B // G, 1)
    return 0.5 * (yc * yc / cc + ys * ys / ss)


def _signals(X: Tensor, y: Tensor) -> Tensor:
    """``(3, d, n)`` centred signals per input dimension: the targets, the residual of a
    least-squares linear fit in all inputs, the residual of a cubic fit in that input."""
    n, d = X.shape
    ones = torch.ones(n, 1, dtype=X.dtype, device=X.device)
    A = torch.cat([ones, X], 1)
    lin = y - A @ torch.linalg.lstsq(A, y[:, None]).solution[:, 0]
    xc = X.T - 0.5  # (d, n)
    V = torch.stack([torch.ones_like(xc), xc, xc**2, xc**3], -1)  # (d, n, 4)
    coef = torch.linalg.lstsq(V, y.expand(d, n)[..., None]).solution  # (d, 4, 1)
    cubic = y - (V @ coef)[..., 0]
    sig = torch.stack([y.expand(d, n), lin.expand(d, n), cubic])
    return sig - sig.mean(-1, keepdim=True)


def period_candidates(X: Tensor, y: Tensor, peaks: int = PEAKS) -> list[tuple[int, float, float]]:
    """Periods suggested by the data, strongest first.

    The Lomb-Scargle periodogram (:func:`lomb_scargle`) of each signal of
    :func:`_signals` against each input dimension, on a grid of frequencies from half a
    cycle to half the number of distinct input values per unit range (at most
    :data:`MAX_FREQUENCIES`, ``5x`` oversampled); its local maxima, refined by a parabola
    in frequency and ranked by the normalised power ``2 P / (n var)`` (the fraction of the
    signal's variance one sinusoid explains; the best over the three signals), with
    peaks within 10 % in period of a stronger one of the same dimension dropped.

    Args:
        X: ``(n, d)`` normalised inputs (range 1 per dimension).
        y: ``(n,)`` targets.
        peaks: most candidates returned.

    Returns:
        ``[(dim, period, power)]``: at most ``peaks`` candidates, periods in the units of
        ``X``, at most ``2/3`` of the dimension's range.
    """
    X = X.detach().to(torch.float64)
    y = y.detach().to(torch.float64)
    n, d = X.shape
    if n < 4:
        return []
    span = (X.max(0).values - X.min(0).values).clamp_min(1e-12)  # (d,)
    distinct = min(n, int(max(len(torch.unique(X[:, j])) for j in range(d))))
    f_max = max(2.0, 0.5 * (distinct - 1))
    f_lo, df = 1.5, 1.0 / _OVERSAMPLE
    F = int(min(MAX_FREQUENCIES, max(8, (f_max - f_lo) / df)))
    f = torch.linspace(f_lo, f_max, F, dtype=torch.float64, device=X.device)  # cycles / range
    sig = _signals(X, y)  # (3, d, n)
    xs = (X / span).T  # (d, n): the three signals of a dimension share its positions
    power = lomb_scargle(xs, sig.reshape(3 * d, n), 2.0 * math.pi * f)
    var = (sig.reshape(3 * d, n) ** 2).mean(-1).clamp_min(1e-300)
    power = (2.0 * power / (n * var[:, None])).view(3, d, F).amax(0)  # (d, F)
    inner = (power[:, 1:-1] > power[:, :-2]) & (power[:, 1:-1] >= power[:, 2:])
    dims, idx = inner.nonzero(as_tuple=True)
    idx = idx + 1
    left, mid, right = power[dims, idx - 1], power[dims, idx], power[dims, idx + 1]
    curv = left - 2.0 * mid + right
    shift = torch.where(curv < 0, 0.5 * (left - right) / curv, torch.zeros_like(curv))
    freq = f[idx] + shift.clamp(-1.0, 1.0) * (f[1] - f[0])
    order = torch.argsort(mid, descending=True)
    out: list[tuple[int, float, float]] = []
    for k in order.tolist():  # a few dozen peaks at most are read
        j, period = int(dims[k]), float(span[dims[k]] / freq[k])
        if any(j == j2 and abs(period / p2 - 1.0) < 0.1 for j2, p2, _ in out):
            continue
        out.append((j, period, float(mid[k])))
        if len(out) >= peaks:
            break
    return out
