"""Period tokens: what the periodogram sees, as the structured network reads it.

A network built with ``NetworkConfig(period_tokens=True)`` computes, for every input
dimension of every dataset it encodes, the strongest peak of the Lomb-Scargle periodogram
and its false-alarm probability (:func:`strongest_periods`) and uses them twice:

* as an input of the kernel tokens: ``[log period, power, has peak, gate]`` of the
  dimension (:func:`period_features`), projected to the token width and added to the
  embedding of every addend of that dimension (the projection starts at zero, so a
  converted network starts from the old network's tokens);
* as the anchor of the periods it predicts: a period slot is the geometric blend
  ``anchor^g own^(1 - g)`` of the peak's period and the head's own period, with a gate
  ``g`` (:func:`anchor_gate`): a peak the noise would rarely reach
  (false-alarm probability well below :data:`FALSE_ALARM`), that explains at least
  :data:`MIN_POWER` of the targets' variance and that repeats at least
  :data:`MIN_CYCLES` times over the input range is followed, any other leaves the
  network's own period (as before the tokens).  A peak of one or two cycles is most often
  the residual of a trend: on one-input periodic datasets of the ``realdata`` prior, 92 of
  the 577 open-gate peaks of fewer than three cycles were within 5 % of a true period,
  242 of the 489 of three or more.  A dimension without a peak (fewer than
  four points, a constant input) has ``g = 0``.  A network with a learnt gate
  (``NetworkConfig(learned_gate=True)``, :func:`learned_gate`) opens the fixed gate from
  :data:`LEARNED_GATE_CYCLES` cycles and adds a correction to its logit, read from the
  dimension's embedding and its features, so that it can tell a few-cycle period from a
  trend's residual.

The periodogram is the one of :mod:`amorgp.amortizer.stages.periodogram` (the classical
Lomb-Scargle power of the centred targets, of the residual of a linear fit in all inputs
and of the residual of a cubic fit in the dimension, each as a share of the targets'
variance, the best of the three) on one frequency grid for the batch, from ``1.5`` cycles per range
of the dimension in steps of ``0.2`` up to half the number of distinct input values of the
dataset (at most :data:`MAX_FREQUENCIES`), with padded points weighted zero.  The period
is the fundamental of the strongest peak: where a fraction ``1/2 ... 1/5`` of its frequency
holds a clear peak of its own (a cycle sharper than a sinusoid, whose harmonics share its
power), that one (:data:`HARMONICS`, :data:`HARMONIC_SHARE`, :data:`HARMONIC_Z`); the
peak is refined by a parabola.  Computed in float64 without gradients; the
features go to the network in its own dtype.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "CHUNK",
    "DEVICE_BLOCK_ELEMENTS",
    "DF",
    "F_LO",
    "HARMONICS",
    "HARMONIC_SHARE",
    "HARMONIC_Z",
    "GATE_SCALE",
    "LEARNED_GATE_CYCLES",
    "MAX_FREQUENCIES",
    "MIN_CYCLES",
    "MIN_POWER",
    "FALSE_ALARM",
    "N_FEATURES",
    "OVERSAMPLE",
    "anchor_gate",
    "learned_gate",
    "period_features",
    "strongest_periods",
]

F_LO = 1.5
"""Lowest frequency of the grid, in cycles per range of the dimension (period 2/3)."""

DF = 0.2
"""Frequency step of the grid, in cycles per range (5x oversampled)."""

MAX_FREQUENCIES = 2000
"""Most frequencies of the grid."""

CHUNK = 64
"""Most frequencies per block of the trigonometric tables (memory ``B D N CHUNK``)."""

BLOCK_ELEMENTS = 2**18
"""Elements of one trigonometric table (``B D N`` times the block's frequencies, at least
8 of them; 2 MiB in float64): small enough for a block's tables to stay near the cache
(16 frequencies per block were 1.5x faster than 64 on a 16 x 500 x 8 batch here)."""

DEVICE_BLOCK_ELEMENTS = 2**24
""":data:`BLOCK_ELEMENTS` on an accelerator, where a block costs its kernel launches more
than its memory traffic (a training batch of 128 datasets of 100 points in 8 inputs: 4
blocks of 64 frequencies instead of 31 of 8)."""


def _on_accelerator(device: torch.device) -> bool:
    """Whether ``device`` takes the accelerator's sizes (:data:`DEVICE_BLOCK_ELEMENTS`, the
    frequency grid from the padded number of points, so that the host never waits for
    the device)."""
    return device.type != "cpu"


N_FEATURES = 4
"""Features per dimension: ``log period``, normalised power, has a peak, the gate."""

MIN_POWER = 0.2
"""Share of the targets' variance a peak must explain to anchor the periods."""

MIN_CYCLES = 3.0
"""Cycles over the input range a peak needs to anchor the periods (the gate is one half
there, near zero below 2.7 and near one above 3.3)."""

FALSE_ALARM = 0.01
"""False-alarm probability at which the gate is one half."""

LEARNED_GATE_CYCLES = 2.0
"""Cycles over the input range from which the gate of a network with a learnt gate
(``NetworkConfig(learned_gate=True)``) opens before its correction: on trend + sine series
with periods of 2.7-4 cycles the fixed gate at :data:`MIN_CYCLES` keeps the network's own
period, which is then wrong; on real series a peak of two or three cycles is often a
trend's residual, which the correction is there to close."""

GATE_SCALE = 10.0
"""Multiplier of the learnt gate correction's linear layer (its outputs move this much
faster than its weights, so a layer added at zero to a trained network learns at the
network's fine-tuning rate)."""

OVERSAMPLE = 5
"""Frequencies of the grid per independent frequency (``1 / DF``)."""

HARMONICS = 5
"""Highest harmonic the strongest peak is tested for (``f / 2 ... f / 5`` as fundamentals)."""

HARMONIC_SHARE = 0.3
"""Power a fundamental's peak needs, as a share of the strongest peak's."""

HARMONIC_Z = 12.0
"""Classical normalised power (``n power / 2``) a fundamental's peak needs: noise reaches it
at one frequency with probability ``e^-12`` (the residual of a trend leaves peaks at low
frequencies that a lower threshold takes for fundamentals)."""


def _masked_lstsq(A: Tensor, y: Tensor, ridge: float = 1e-9) -> Tensor:
    """Least squares ``argmin ||A c - y||`` of ``A (..., n, k)``, ``y (..., n)`` with rows
    already weighted (zero rows for padded points): normal equations with a tiny ridge
    relative to each column's scale, so all-zero columns (padded inputs) get 0."""
    AtA = A.transpose(-1, -2) @ A
    scale = AtA.diagonal(dim1=-2, dim2=-1).amax(-1).clamp_min(1.0)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    Aty = (A.transpose(-1, -2) @ y[..., None])[..., 0]
    return torch.linalg.solve(AtA + ridge * scale[..., None, None] * eye, Aty)


@torch.no_grad()
def strongest_periods(
    X: Tensor,
    y: Tensor,
    point_mask: Tensor | None = None,
    dim_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """The strongest periodogram peak of every input dimension of ``B`` datasets.

    Args:
        X: ``(B, N, D)`` inputs.
        y: ``(B, N)`` targets.
        point_mask: ``(B, N)`` bool, present points (``None``: all).
        dim_mask: ``(B, D)`` bool, present dimensions (``None``: all).

    Returns:
        ``period (B, D)`` in the units of ``X`` (NaN where a dimension has no peak),
        ``power (B, D)``, the share of the targets' variance one sinusoid at that period
        explains in the best of the three signals (0 where there is no peak), and ``false_alarm (B, D)``, the probability
        that noise alone puts a peak this high somewhere on the grid (1 where there is no
        peak): ``1 - (1 - exp(-z))^M`` with ``z = n power / 2`` (the classical normalised
        Lomb-Scargle power) and ``M`` the independent frequencies searched (the grid's
        frequencies of the dataset over :data:`OVERSAMPLE`, times the three signals);
        float64.
    """
    X = X.detach().to(torch.float64)
    y = y.detach().to(torch.float64)
    B, N, D = X.shape
    dev = X.device
    pm = torch.ones(B, N, dtype=torch.bool, device=dev) if point_mask is None else point_mask
    dm = torch.ones(B, D, dtype=torch.bool, device=dev) if dim_mask is None else dim_mask
    w = pm.to(torch.float64)  # (B, N)
    n = w.sum(1)  # (B,)
    inf = torch.tensor(math.inf, dtype=torch.float64, device=dev)
    present = pm[:, :, None] & dm[:, None, :]  # (B, N, D)
    xmin = torch.where(present, X, inf).amin(1)
    xmax = torch.where(present, X, -inf).amax(1)
    span = torch.where(dm & (xmax > xmin), xmax - xmin, torch.ones_like(xmax))  # (B, D)
    xs = torch.where(present, (X - xmin[:, None]) / span[:, None], torch.zeros_like(X))
    srt = torch.where(present, X, inf).sort(1).values
    steps = (srt[:, 1:] != srt[:, :-1]) & torch.isfinite(srt[:, 1:])
    distinct = torch.where(dm, steps.sum(1) + 1, 0).amax(1).clamp_max(n.long())  # (B,)
    f_max = torch.clamp_min(0.5 * (distinct.to(torch.float64) - 1.0), 2.0)  # (B,)

    # the three signals (B, 3, D, N), centred and zero on padded points
    xt = xs.transpose(1, 2)  # (B, D, N)
    yc = (y - (w * y).sum(1, keepdim=True) / n.clamp_min(1)[:, None]) * w
    A = torch.cat([w[:, :, None], xs * dm[:, None, :]], 2) * w[:, :, None]  # (B, N, D+1)
    lin = yc - (A @ _masked_lstsq(A, yc)[..., None])[..., 0] * w
    u = xt - 0.5
    V = torch.stack([torch.ones_like(u), u, u * u, u * u * u], -1) * w[:, None, :, None]
    yd = yc[:, None, :].expand(B, D, N)
    cubic = yd - (V @ _masked_lstsq(V, yd)[..., None])[..., 0]
    sig = torch.stack([yd, lin[:, None, :].expand(B, D, N), cubic], 1)  # (B, 3, D, N)
    mean = (sig * w[:, None, None]).sum(-1, keepdim=True) / n.clamp_min(1)[:, None, None, None]
    sig = (sig - mean) * w[:, None, None]
    # every signal's power as a share of the targets' variance: a peak must explain a
    # part of the data, not only of a residual's wiggles
    var = (sig[:, :1] * sig[:, :1]).sum(-1) / n.clamp_min(1)[:, None, None]  # (B, 1, D)

    device_sizes = _on_accelerator(dev)
    # the grid up to the batch's highest useful frequency; on an accelerator up to the
    # highest the padded width allows (read without waiting for the device): the
    # frequencies above a dataset's own limit are masked out, so both give its results
    top = max(2.0, 0.5 * (N - 1)) if device_sizes else float(f_max.max()) if B else F_LO
    F = int(min(MAX_FREQUENCIES, max(8, math.floor((top - F_LO) / DF) + 1)))
    freqs = F_LO + DF * torch.arange(F, dtype=torch.float64, device=dev)
    power = torch.zeros(B, D, F, dtype=torch.float64, device=dev)
    half_n = 0.5 * n[:, None, None]
    xw = (2.0 * math.pi) * xt.reshape(B * D, N, 1)
    wd = w[:, None, None, :].expand(B, D, 1, N).reshape(B * D, 1, N)  # the weights per row
    sig_t = sig.transpose(1, 2).reshape(B * D, 3, N)
    # cos and sin of 2 pi x f on the grid f_lo + j DF of every block: those of 2 pi x f_lo
    # rotated by a table of 2 pi x j DF (j < chunk), computed once
    elements = DEVICE_BLOCK_ELEMENTS if device_sizes else BLOCK_ELEMENTS
    chunk = min(F, max(8, min(CHUNK, elements // max(1, B * D * N))))
    step = xw * (DF * torch.arange(chunk, dtype=torch.float64, device=dev))
    tc, ts = torch.cos(step), torch.sin(step)  # (B D, N, chunk)
    c, s, c_c, c_s = (torch.empty_like(tc) for _ in range(4))  # reused by every block
    for lo in range(0, F, chunk):  # blocks of the grid
        f = freqs[lo : lo + chunk]
        if f.shape[0] < tc.shape[-1]:  # the last block, narrower
            width = f.shape[0]
            tc, ts = tc[..., :width].contiguous(), ts[..., :width].contiguous()
            c, s, c_c, c_s = (torch.empty_like(tc) for _ in range(4))
        base = xw * freqs[lo]  # (B D, N, 1)
        cb, sb = torch.cos(base), torch.sin(base)
        torch.mul(cb, tc, out=c).addcmul_(sb, ts, value=-1.0)
        torch.mul(sb, tc, out=s).addcmul_(cb, ts)
        # sum_n w cos 2 omega x = 2 sum_n w c^2 - n and sum_n w sin 2 omega x = 2 sum_n w c s:
        # the sums over the points as products with the weights
        C2 = 2.0 * torch.bmm(wd, torch.mul(c, c, out=c_c)).reshape(B, D, -1) - n[:, None, None]
        S2 = 2.0 * torch.bmm(wd, torch.mul(c, s, out=c_s)).reshape(B, D, -1)  # (B, D, c)
        YC = torch.bmm(sig_t, c).reshape(B, D, 3, -1).transpose(1, 2)  # (B, 3, D, c)
        YS = torch.bmm(sig_t, s).reshape(B, D, 3, -1).transpose(1, 2)
        tau2 = torch.atan2(S2, C2)[:, None]
        ct, st = torch.cos(0.5 * tau2), torch.sin(0.5 * tau2)
        R = 0.5 * torch.sqrt(C2 * C2 + S2 * S2)[:, None]
        cc, ss = half_n[:, None] + R, half_n[:, None] - R
        ycos = ct * YC + st * YS
        ysin = ct * YS - st * YC
        p = 0.5 * (ycos * ycos / cc.clamp_min(1e-300) + ysin * ysin / ss.clamp_min(1e-300))
        p = (2.0 * p / (n[:, None, None, None] * var[..., None]).clamp_min(1e-300)).amax(1)
        # below 1 % of n in sum sin^2 the closed form loses its digits (a regular grid's
        # Nyquist frequency): such frequencies are left out
        ok = (ss[:, 0] > 0.01 * n[:, None, None]) & (f <= f_max[:, None, None])
        power[..., lo : lo + chunk] = torch.where(ok, p, torch.zeros_like(p))

    best, k = power.max(-1)  # (B, D)
    k = _fundamental(power, best, k, n)
    kl, kr = (k - 1).clamp_min(0), (k + 1).clamp_max(F - 1)
    left = power.gather(-1, kl[..., None])[..., 0]
    right = power.gather(-1, kr[..., None])[..., 0]
    at = power.gather(-1, k[..., None])[..., 0]
    curv = left - 2.0 * at + right
    inner = (k > 0) & (k < F - 1) & (left > 0) & (right > 0) & (curv < 0)
    shift = torch.where(inner, 0.5 * (left - right) / torch.where(inner, curv, -1.0), 0.0)
    freq = freqs[k] + shift.clamp(-1.0, 1.0) * DF
    found = dm & (n[:, None] >= 4) & (best > 0) & torch.isfinite(best)
    period = torch.where(found, span / freq, torch.full_like(freq, math.nan))
    power = torch.where(found, best, torch.zeros_like(best))
    searched = ((f_max - F_LO) / DF).floor().clamp_min(0.0) + 1.0  # (B,) grid frequencies
    m = (3.0 * searched / OVERSAMPLE).clamp_min(1.0)[:, None]
    z = 0.5 * n[:, None] * power
    fap = -torch.expm1(m * torch.log1p(-torch.exp(-z).clamp_max(1.0 - 1e-16)))
    return period, power, torch.where(found, fap, torch.ones_like(fap))


def _fundamental(power: Tensor, best: Tensor, k: Tensor, n: Tensor) -> Tensor:
    """The grid index of the fundamental of the strongest peak ``k (B, D)`` of ``power
    (B, D, F)``: of the fractions ``f_k / q`` (``q`` up to :data:`HARMONICS`) that hold a
    significant peak of their own (:data:`HARMONIC_Z`) with at least
    :data:`HARMONIC_SHARE` of the strongest peak's power, within one grid step, the one
    with the most power; ``k`` itself where no fraction does.  A cycle sharper than a sinusoid spreads its power over its harmonics,
    and one draw's strongest is often the second or the third."""
    F = power.shape[-1]
    f_k = F_LO + DF * k.to(torch.float64)
    out = k.clone()
    z_need = 2.0 * HARMONIC_Z / n.clamp_min(1.0)[:, None]  # power whose z is HARMONIC_Z
    need = torch.maximum(HARMONIC_SHARE * best, z_need)
    held = torch.zeros_like(best)  # the power of the fraction chosen so far
    for q in range(2, HARMONICS + 1):  # a few fractions
        centre = torch.round((f_k / q - F_LO) / DF).long()
        near = (centre[..., None] + torch.arange(-1, 2, device=k.device)).clamp(0, F - 1)
        vals = power.gather(-1, near)
        v, i = vals.max(-1)
        idx = near.gather(-1, i[..., None])[..., 0]
        interior = (idx > 0) & (idx < F - 1)
        left = power.gather(-1, (idx - 1).clamp_min(0)[..., None])[..., 0]
        right = power.gather(-1, (idx + 1).clamp_max(F - 1)[..., None])[..., 0]
        peak = interior & (v >= left) & (v >= right)
        ok = (centre >= 1) & peak & (v >= need) & (v > held)
        out = torch.where(ok, idx, out)
        held = torch.where(ok, v, held)
    return out


def anchor_gate(
    false_alarm: Tensor, power: Tensor, period: Tensor, min_cycles: float = MIN_CYCLES
) -> Tensor:
    """``sigmoid((power - MIN_POWER) / 0.02) sigmoid((1 / period - min_cycles) / 0.1) /
    (1 + FAP / FALSE_ALARM)``: near 1 for a peak that the noise would rarely reach, that
    explains at least :data:`MIN_POWER` of the targets' variance and that repeats at least
    ``min_cycles`` times over the input range (``period`` in input ranges, as the
    network reads its inputs), near 0 otherwise."""
    cycles = torch.sigmoid((1.0 / period - min_cycles) / 0.1)
    return torch.sigmoid((power - MIN_POWER) / 0.02) * cycles / (1.0 + false_alarm / FALSE_ALARM)


def period_features(period: Tensor, power: Tensor, false_alarm: Tensor) -> Tensor:
    """``(B, D, 4)`` network features ``[log period, power, has peak, gate]`` (0 without a
    peak)."""
    has = torch.isfinite(period)
    logp = torch.where(has, torch.log(torch.where(has, period, 1.0)), 0.0)
    gate = torch.where(has, anchor_gate(false_alarm, power, torch.where(has, period, 1.0)), 0.0)
    return torch.stack([logp, power, has.to(power.dtype), gate], -1)


def learned_gate(period: Tensor, power: Tensor, false_alarm: Tensor, correction: Tensor) -> Tensor:
    """The gate ``(B, D)`` of a network with a learnt gate: ``sigmoid(logit(g) +
    correction)`` with ``g`` the fixed gate (:func:`anchor_gate`) from
    :data:`LEARNED_GATE_CYCLES` cycles (clamped to ``[1e-6, 1 - 1e-6]``) and
    ``correction (B, D)`` the network's; 0 where a dimension has no peak.  A correction of
    zero (the layer as added) leaves the fixed gate."""
    has = torch.isfinite(period)
    g = anchor_gate(false_alarm, power, torch.where(has, period, 1.0), LEARNED_GATE_CYCLES)
    g = g.clamp(1e-6, 1.0 - 1e-6)
    out = torch.sigmoid(torch.logit(g) + correction.to(g.dtype))
    return torch.where(has, out, torch.zeros_like(out))
