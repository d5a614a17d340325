"""Periods suggested by the data: the Lomb-Scargle periodogram of the targets and of the
residuals of simple fits, per input dimension (the ``"periodogram"`` starts of
:mod:`amorgp.amortizer.stages.multistart`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "MAX_FREQUENCIES",
    "PEAKS",
    "lomb_scargle",
    "period_candidates",
    "period_candidates_many",
]

PEAKS = 4
"""Periodogram peaks proposed per kernel (the strongest over all dimensions and signals)."""

MAX_FREQUENCIES = 2000
"""Most frequencies of the periodogram grid."""

_OVERSAMPLE = 5


def _uniform_blocks(freqs: Tensor) -> tuple[int, Tensor] | None:
    """``(m, dw)`` when the ``F`` frequencies are a uniform grid to rounding (``freqs[b m +
    a] = freqs[b m] + a dw`` within ``64`` ulps of the largest), ``m = ceil(sqrt(F))``;
    ``None`` otherwise."""
    F = freqs.shape[0]
    m = math.isqrt(F - 1) + 1
    dw = (freqs[-1] - freqs[0]) / max(F - 1, 1)
    k = torch.arange(F, device=freqs.device)
    rebuilt = freqs[k - k % m] + (k % m).to(freqs.dtype) * dw
    tol = 64.0 * torch.finfo(freqs.dtype).eps * freqs.abs().max()
    return None if bool(((rebuilt - freqs).abs() > tol).any()) else (m, dw)


def lomb_scargle(x: Tensor, y: Tensor, freqs: Tensor) -> Tensor:
    """Classical Lomb-Scargle periodogram of ``B`` unevenly sampled signals.

    .. math::

        P(\\omega) = \\tfrac12 \\Big[ \\frac{(\\sum_i y_i \\cos \\omega(x_i - \\tau))^2}
            {\\sum_i \\cos^2 \\omega(x_i - \\tau)} + \\frac{(\\sum_i y_i \\sin
            \\omega(x_i - \\tau))^2}{\\sum_i \\sin^2 \\omega(x_i - \\tau)} \\Big],
        \\quad \\tan 2\\omega\\tau = \\frac{\\sum_i \\sin 2\\omega x_i}{\\sum_i \\cos 2\\omega x_i}

    (``scipy.signal.lombscargle(x, y, freqs)`` with its defaults; ``y`` is used as given,
    centre it first).

    Computed from the sums ``YC + i YS = sum_i y_i e^{i omega x_i}`` and ``C_2 + i S_2 =
    sum_i e^{2 i omega x_i}``: with ``R = |C_2 + i S_2|``, the denominators are
    ``n/2 +- R/2`` and the numerators ``cos(omega tau) YC + sin(omega tau) YS`` and
    ``cos(omega tau) YS - sin(omega tau) YC``.  On a uniform grid ``omega_k = omega_0 + k
    d omega`` (to rounding), ``k = b m + a`` with ``m = ceil(sqrt(F))``, the exponential
    factors as ``e^{i omega_{bm} x} e^{i a d omega x}``, two tables of about ``sqrt(F)``
    directly computed sines and cosines per sample, and the sums are matrix products
    over the samples (``y`` and the squares of the tables folded in); other grids take one
    table of all ``F``.  Where ``sum sin^2`` is under ``n/100`` (the closed form would
    lose digits to cancellation, e.g. at the Nyquist frequency of a regular grid) the
    sine term is summed directly.

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
    G, F = x.shape[0], freqs.shape[0]
    R = B // G
    if F == 0:
        return y.new_zeros(B, 0)
    blocks = _uniform_blocks(freqs)
    if blocks is not None:  # omega_{bm + a} = omega_{bm} + a d omega
        m, dw = blocks
        nb = -(-F // m)
        coarse = freqs[::m][:, None] * x[:, None, :]  # (G, nb, n)
        fine = (torch.arange(m, dtype=x.dtype, device=x.device) * dw)[:, None] * x[:, None, :]
    else:  # every frequency its own block
        m, nb = 1, F
        coarse = freqs[:, None] * x[:, None, :]
        fine = torch.zeros_like(x)[:, None, :]
    P = nb * m  # the grid padded to whole blocks
    T = torch.stack([torch.cos(coarse), torch.sin(coarse)], 1)  # (G, 2, nb, n)
    fine = fine.transpose(1, 2)  # samples first
    U = torch.stack([torch.cos(fine), torch.sin(fine)], 2)  # (G, n, 2, m)
    yg = y.reshape(R, G, n).permute(1, 2, 0).contiguous()  # (G, n, R)
    # sum_i y_i e^{i omega_{bm} x_i} e^{i a d omega x_i}: T against y U, per row of x
    yU = (yg[..., None, None] * U[:, :, None]).reshape(G, n, R * 2 * m)
    M = torch.bmm(T.view(G, 2 * nb, n), yU).view(G, 2, nb, R, 2, m)
    YC = M[:, 0, :, :, 0] - M[:, 1, :, :, 1]  # (G, nb, R, m)
    YS = M[:, 1, :, :, 0] + M[:, 0, :, :, 1]
    # sum_i e^{2 i omega x_i}: the same with the tables squared (double angles)
    tc, ts, uc, us = T[:, 0], T[:, 1], U[:, :, 0], U[:, :, 1]
    T2 = torch.stack([(tc - ts) * (tc + ts), 2.0 * tc * ts], 1).view(G, 2 * nb, n)
    U2 = torch.stack([(uc - us) * (uc + us), 2.0 * uc * us], 2).view(G, n, 2 * m)
    M2 = torch.bmm(T2, U2).view(G, 2, nb, 1, 2, m)
    C2 = M2[:, 0, :, :, 0] - M2[:, 1, :, :, 1]  # (G, nb, 1, m)
    S2 = M2[:, 1, :, :, 0] + M2[:, 0, :, :, 1]
    tau2 = torch.atan2(S2, C2)  # 2 omega tau
    st, ct = torch.sin(0.5 * tau2), torch.cos(0.5 * tau2)
    half = 0.5 * torch.sqrt(C2 * C2 + S2 * S2)
    cc = 0.5 * n + half  # sum cos^2 omega (x - tau)
    ss = 0.5 * n - half  # sum sin^2 omega (x - tau)
    yc = ct * YC + st * YS
    ys = ct * YS - st * YC
    sine = ys * ys / ss.clamp_min(1e-300)
    k = torch.arange(P, device=x.device).view(nb, 1, m)
    gi, bi, _, ai = ((ss < 0.01 * n) & (k < F)).nonzero(as_tuple=True)
    if len(gi):  # cancellation in n/2 - R/2: those sums directly
        wx = freqs[bi * m + ai][:, None] * x[gi]  # (L, n)
        sw, cw = torch.sin(wx), torch.cos(wx)
        t2 = torch.atan2((2.0 * sw * cw).sum(-1), (cw * cw - sw * sw).sum(-1))[:, None]
        s = sw * torch.cos(0.5 * t2) - cw * torch.sin(0.5 * t2)  # sin omega (x - tau)
        ysd = torch.bmm(s[:, None, :], yg[gi])[:, 0]  # (L, R)
        sine[gi, bi, :, ai] = ysd * ysd / (s * s).sum(-1, keepdim=True).clamp_min(1e-300)
    power = 0.5 * (yc * yc / cc.clamp_min(1e-300) + sine)  # (G, nb, R, m)
    return power.permute(2, 0, 1, 3).reshape(R, G, P)[..., :F].reshape(B, F)


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
    return period_candidates_many(X[None], y[None], peaks)[0]


def period_candidates_many(
    X: Tensor, Y: Tensor, peaks: int = PEAKS
) -> list[list[tuple[int, float, float]]]:
    """:func:`period_candidates` of ``B`` datasets of equal size at once: ``X (B, n, d)``,
    ``Y (B, n)``; one periodogram call for the datasets that share a frequency grid (the
    same number of distinct input values), then per dataset its strongest peaks."""
    X = X.detach().to(torch.float64)
    Y = Y.detach().to(torch.float64)
    B, n, d = X.shape
    if n < 4:
        return [[] for _ in range(B)]
    span = (X.amax(1) - X.amin(1)).clamp_min(1e-12)  # (B, d)
    srt = X.sort(1).values
    distinct = ((srt[:, 1:] != srt[:, :-1]).sum(1) + 1).amax(1).clamp_max(n)  # (B,)
    out: list[list[tuple[int, float, float]]] = [[] for _ in range(B)]
    # datasets with the same number of distinct inputs share a frequency grid
    for m in torch.unique(distinct).tolist():  # a few groups at most
        rows = (distinct == m).nonzero()[:, 0]
        f_max = max(2.0, 0.5 * (m - 1))
        f_lo, df = 1.5, 1.0 / _OVERSAMPLE
        F = int(min(MAX_FREQUENCIES, max(8, (f_max - f_lo) / df)))
        f = torch.linspace(f_lo, f_max, F, dtype=torch.float64, device=X.device)
        G = len(rows)
        sig = _signals(X[rows], Y[rows])  # (3, G, d, n)
        xs = (X[rows] / span[rows][:, None, :]).transpose(1, 2).reshape(G * d, n)
        power = lomb_scargle(xs, sig.reshape(3 * G * d, n), 2.0 * math.pi * f)
        var = (sig.reshape(3 * G * d, n) ** 2).mean(-1).clamp_min(1e-300)
        power = (2.0 * power / (n * var[:, None])).view(3, G, d, F).amax(0)  # (G, d, F)
        inner = (power[..., 1:-1] > power[..., :-2]) & (power[..., 1:-1] >= power[..., 2:])
        gi, dims, idx = inner.nonzero(as_tuple=True)
        idx = idx + 1
        left, mid = power[gi, dims, idx - 1], power[gi, dims, idx]
        right = power[gi, dims, idx + 1]
        curv = left - 2.0 * mid + right
        shift = torch.where(curv < 0, 0.5 * (left - right) / curv, torch.zeros_like(curv))
        freq = f[idx] + shift.clamp(-1.0, 1.0) * (f[1] - f[0])
        period = (span[rows][gi, dims] / freq).tolist()
        dl, ml = dims.tolist(), mid.tolist()
        ends = torch.bincount(gi, minlength=G).cumsum(0).tolist()  # gi is sorted
        for g, b in enumerate(rows.tolist()):  # bookkeeping: a few dozen peaks per dataset
            mine = sorted(range(ends[g - 1] if g else 0, ends[g]), key=lambda i: -ml[i])
            got = out[b]
            for i in mine:
                j, p = dl[i], period[i]
                if any(j == j2 and abs(p / p2 - 1.0) < 0.1 for j2, p2, _ in got):
                    continue
                got.append((j, p, ml[i]))
                if len(got) >= peaks:
                    break
    return out


def _signals(X: Tensor, Y: Tensor) -> Tensor:
    """``(3, B, d, n)`` centred signals per dataset ``X (B, n, d)``, ``Y (B, n)`` and input
    dimension: the targets, the residual of a least-squares linear fit in all inputs, the
    residual of a cubic fit in that input (the fits batched)."""
    B, n, d = X.shape
    A = torch.cat([torch.ones(B, n, 1, dtype=X.dtype, device=X.device), X], 2)
    lin = Y - (A @ torch.linalg.lstsq(A, Y[..., None]).solution)[..., 0]  # (B, n)
    xc = X.transpose(1, 2) - 0.5  # (B, d, n)
    V = torch.stack([torch.ones_like(xc), xc, xc**2, xc**3], -1)  # (B, d, n, 4)
    coef = torch.linalg.lstsq(V, Y[:, None, :, None].expand(B, d, n, 1)).solution
    cubic = Y[:, None, :] - (V @ coef)[..., 0]
    sig = torch.stack([Y[:, None, :].expand(B, d, n), lin[:, None, :].expand(B, d, n), cubic])
    return sig - sig.mean(-1, keepdim=True)
