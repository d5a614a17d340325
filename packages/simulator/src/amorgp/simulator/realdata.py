"""The ``realdata`` prior: the paper's structures with laws that look like real data.

The paper's prior (``prior="paper"``) draws every lengthscale from ``Gamma(2, 5)`` (mean
0.4 on inputs scaled to [0, 1]), periods from ``Gamma(2, 3)``, noise from
``Exp(1/0.15^2)`` and raw GP targets.  Real data differ in five ways, and the
``realdata`` prior (:meth:`SimulatorConfig.realdata
<amorgp.simulator.SimulatorConfig.realdata>`) adds each of them on top of the paper's
draws (structures, variances and offsets stay the paper's):

=========================  ===============================================================
what                       law (constants of this module)
=========================  ===============================================================
irrelevant or near-linear  each input dimension, with probability :data:`LONG_PROB`, has
inputs                     every input-scaled lengthscale drawn ``LogUniform[LONG_LOW,
                           LONG_HIGH]`` (the kernel is nearly constant or linear there)
lengthscales grow with d   the other input-scaled lengthscales are the paper's draw times
                           ``d ** LENGTHSCALE_POWER * exp(LENGTHSCALE_SPREAD * z)``,
                           ``z ~ N(0, 1)`` (BoTorch's default prior also grows as sqrt(d))
short periods              with probability :data:`SHORT_PERIOD_PROB` a period is
                           ``LogUniform[SHORT_PERIOD_LOW, SHORT_PERIOD_HIGH]`` (many cycles
                           in the input range, as in monthly or daily series)
near-noiseless and noisy   with probability :data:`LOW_NOISE_PROB` the noise variance is
targets                    ``LogUniform[LOW_NOISE_LOW, LOW_NOISE_HIGH]``, with probability
                           :data:`HIGH_NOISE_PROB` ``LogUniform[HIGH_NOISE_LOW,
                           HIGH_NOISE_HIGH]`` (weak signals: real targets often have
                           ``R^2`` of 0.1-0.7); else the paper's
non-uniform inputs         the ``realistic`` input law (:mod:`amorgp.simulator.inputs`):
                           uniform, clusters, discrete levels, skewed, heavy-tailed columns
=========================  ===============================================================

The ``realdata-series`` prior adds a sixth: **seasonal series**.  A one-input dataset
whose structure has a periodic addend follows, with probability :data:`SERIES_PROB`, the
law of a real seasonal series (:func:`series_law`): a smooth trend (every input-scaled
lengthscale outside the periodic addends ``LogUniform[SERIES_TREND_LOW,
SERIES_TREND_HIGH]``), a season that repeats for many cycles (the decay lengthscale of a
periodic addend ``LogUniform[SERIES_DECAY_LOW, SERIES_DECAY_HIGH]``, its period
``LogUniform[SERIES_PERIOD_LOW, SERIES_PERIOD_HIGH]``, as in monthly or daily data over
years), a smooth seasonal shape (the periodic kernel's own, unit-free lengthscale
``LogUniform[SERIES_SHAPE_LOW, SERIES_SHAPE_HIGH]``; the paper's ``Gamma(2, 5)`` has mean
0.4, a peaked shape) and little noise (``LogUniform[SERIES_NOISE_LOW, SERIES_NOISE_HIGH]``).

The ``realdata-irrelevant`` prior is ``realdata-series`` with **irrelevant inputs**: the
long lengthscales of an input (probability :data:`LONG_PROB`) are drawn
``LogUniform[LONG_LOW, IRRELEVANT_HIGH]`` instead of up to :data:`LONG_HIGH`, so about
half of them are over 30 input ranges, where the function no longer varies along that
input (as for Friedman's noise inputs) and Type-2 ML's lengthscales run to hundreds or
thousands of ranges.  Under ``realdata`` the longest is 30 ranges.

The ``realdata-ard`` prior is ``realdata-irrelevant`` with **ARD structures**: a dataset
of two or more inputs gets, with probability :data:`ARD_PROB`, one ``SE`` or ``MAT52``
addend per input and nothing else (:func:`ard_structures`; ``MAT52`` where the
vocabulary has it, half of the time), the structure of Friedman's regression tasks and of
most real regression fits, where a long lengthscale is what the likelihood wants for an
input that carries nothing.  Under the other priors such an input's addend is most often
one of a sum or a product whose other terms vary.

and the targets are **standardised** as real targets are before they reach the network
(training mean 0, standard deviation 1): ``y <- (y - m) / s``.  The ground truth follows
exactly (:func:`scale_amplitudes`): the kernel of the first dimension's addends and the
noise variance are divided by ``s^2`` (the product over dimensions then scales by
``1 / s^2``); the mean shift is not part of the truth (the GP has mean zero), as for
standardised real data.

Input-scaled lengthscales are those of kind ``LENGTHSCALE`` that the elementary kernel
measures in input units (``ElementaryKernel.input_scaled``): SE's and MAT52's lengthscale
and the SE factor of ``SE*PER``, not PER's own lengthscale (it divides ``sin^2`` and is
unit free).  Every draw goes through the same generator; no loop over datasets,
dimensions or addends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from amorgp.kernel_grammar import FLOORS, ParamKind, Vocabulary
from amorgp.lazy_kernels import PARAM_KINDS, slot_table

__all__ = [
    "LENGTHSCALE_POWER",
    "LENGTHSCALE_SPREAD",
    "LONG_HIGH",
    "LONG_LOW",
    "LONG_PROB",
    "LOW_NOISE_HIGH",
    "LOW_NOISE_LOW",
    "LOW_NOISE_PROB",
    "HIGH_NOISE_HIGH",
    "HIGH_NOISE_LOW",
    "HIGH_NOISE_PROB",
    "IRRELEVANT_HIGH",
    "ARD_PROB",
    "ard_structures",
    "PRIORS",
    "PRIOR_LAWS",
    "PriorLaws",
    "SHORT_PERIOD_HIGH",
    "SHORT_PERIOD_LOW",
    "SHORT_PERIOD_PROB",
    "SERIES_DECAY_HIGH",
    "SERIES_DECAY_LOW",
    "SERIES_NOISE_HIGH",
    "SERIES_NOISE_LOW",
    "SERIES_PERIOD_HIGH",
    "SERIES_PERIOD_LOW",
    "SERIES_PROB",
    "SERIES_TREND_HIGH",
    "SERIES_TREND_LOW",
    "SERIES_SHAPE_HIGH",
    "SERIES_SHAPE_LOW",
    "amplitude_slots",
    "input_lengthscale_slots",
    "realdata_noise",
    "realdata_parameters",
    "scale_amplitudes",
    "series_law",
    "standardise_targets",
]


LONG_PROB = 0.25
"""Probability that an input dimension is irrelevant or near-linear (long lengthscales)."""
LONG_LOW, LONG_HIGH = 1.5, 30.0
"""Range of the long lengthscales (log-uniform), in units of the input range."""
ARD_PROB = 0.3
"""``realdata-ard``: probability that a dataset of two or more inputs has an ARD
structure (one ``SE`` or ``MAT52`` addend per input)."""
IRRELEVANT_HIGH = 1000.0
"""``realdata-irrelevant``: upper end of the long lengthscales (log-uniform from
:data:`LONG_LOW`), in units of the input range."""
LENGTHSCALE_POWER = 0.5
"""Growth of the other lengthscales with the number of inputs: ``d ** LENGTHSCALE_POWER``."""
LENGTHSCALE_SPREAD = 0.5
"""Log-normal spread multiplied onto the other lengthscales (a heavier tail than Gamma)."""
SHORT_PERIOD_PROB = 0.4
"""Probability that a period is drawn from the short-period law."""
SHORT_PERIOD_LOW, SHORT_PERIOD_HIGH = 0.02, 0.4
"""Range of the short periods (log-uniform), in units of the input range."""
LOW_NOISE_PROB = 0.3
"""Probability that the noise variance is drawn from the near-noiseless law."""
LOW_NOISE_LOW, LOW_NOISE_HIGH = 1e-6, 1e-2
"""Range of the near-noiseless noise variances (log-uniform, before standardisation)."""
HIGH_NOISE_PROB = 0.3
"""Probability that the noise variance is drawn from the noisy law."""
HIGH_NOISE_LOW, HIGH_NOISE_HIGH = 0.1, 3.0
"""Range of the noisy noise variances (log-uniform, before standardisation; a kernel
variance's prior mean is 2/3)."""

SERIES_PROB = 0.8
"""``realdata-series``: probability that a one-input dataset with a periodic addend
follows the seasonal-series law."""
SERIES_TREND_LOW, SERIES_TREND_HIGH = 0.3, 3.0
"""Range of the trend's lengthscales (log-uniform), in units of the input range."""
SERIES_DECAY_LOW, SERIES_DECAY_HIGH = 0.3, 5.0
"""Range of a periodic addend's decay lengthscale (log-uniform), in input ranges."""
SERIES_PERIOD_LOW, SERIES_PERIOD_HIGH = 0.02, 0.25
"""Range of the periods of a seasonal series (log-uniform), in input ranges."""
SERIES_SHAPE_LOW, SERIES_SHAPE_HIGH = 0.5, 3.0
"""Range of the periodic kernel's own lengthscale (log-uniform, unit free: it divides
``sin^2``) in a seasonal series."""
SERIES_NOISE_LOW, SERIES_NOISE_HIGH = 1e-3, 0.1
"""Range of a seasonal series' noise variance (log-uniform, before standardisation)."""


def _log_uniform(low: float, high: float, shape: tuple[int, ...], g: torch.Generator) -> Tensor:
    u = torch.rand(shape, generator=g, dtype=torch.float64, device=g.device)
    return torch.exp(math.log(low) + u * (math.log(high) - math.log(low)))


def input_lengthscale_slots(vocab: Vocabulary) -> Tensor:
    """``(V + 1, P)`` bool: the slots holding a lengthscale in input units (module doc)."""
    return slot_table(vocab).input_lengthscale


def amplitude_slots(vocab: Vocabulary) -> Tensor:
    """``(V + 1, P)`` bool: the slots that multiply a whole addend (``c k`` for ``c > 0``).

    A variance always; LIN's offset too where LIN stands alone (``s^2 x x' + c^2``); in a
    product symbol only the variance (``s^2 kt_A kt_B``).
    """
    return slot_table(vocab).amplitude


@dataclass(frozen=True)
class PriorLaws:
    """What a named prior draws beyond the paper's (module doc).

    Attributes:
        realdata: the ``realdata`` laws (:func:`realdata_parameters`,
            :func:`realdata_noise`) and standardised targets.
        series: the seasonal-series law (:func:`series_law`).
        long_high: upper end of the long lengthscales (``realdata`` laws only).
        ard: ARD structures (:func:`ard_structures`).
    """

    realdata: bool = True
    series: bool = False
    long_high: float = LONG_HIGH
    ard: bool = False


PRIOR_LAWS: dict[str, PriorLaws] = {
    "paper": PriorLaws(realdata=False),
    "realdata": PriorLaws(),
    "realdata-series": PriorLaws(series=True),
    "realdata-irrelevant": PriorLaws(series=True, long_high=IRRELEVANT_HIGH),
    "realdata-ard": PriorLaws(series=True, long_high=IRRELEVANT_HIGH, ard=True),
}
"""The named priors and their laws."""

PRIORS: tuple[str, ...] = tuple(PRIOR_LAWS)
"""Named priors of :class:`~amorgp.simulator.SimulatorConfig` (field ``prior``)."""


def realdata_parameters(
    params: Tensor,
    symbols: Tensor,
    symbol_mask: Tensor,
    dims: Tensor,
    vocab: Vocabulary,
    generator: torch.Generator,
    long_high: float = LONG_HIGH,
) -> Tensor:
    """The paper's draws ``params (B, D, L, P)`` moved to the ``realdata`` laws (module doc).

    Args:
        params: parameters drawn from the paper's priors.
        symbols, symbol_mask: ``(B, D, L)`` the structures.
        dims: ``(B,)`` number of input dimensions of each dataset.
        vocab: the vocabulary of ``symbols``.
        generator: the random source.
        long_high: upper end of the long lengthscales (:data:`LONG_HIGH`; the
            ``realdata-irrelevant`` prior's :data:`IRRELEVANT_HIGH`).

    Returns:
        A new tensor (unused slots unchanged).
    """
    table = slot_table(vocab, params.device)
    ls_t = table.input_lengthscale
    per_t = table.kind == PARAM_KINDS.index(ParamKind.PERIOD)
    ids = torch.where(symbol_mask, symbols, 0).long()
    used = symbol_mask[..., None]
    is_ls = ls_t[ids] & used
    is_per = per_t[ids] & used & table.used[ids]
    B, D, L, P = params.shape
    g = generator
    long_dim = torch.rand((B, D), generator=g, dtype=torch.float64, device=g.device) < LONG_PROB
    long_ls = _log_uniform(LONG_LOW, long_high, (B, D, L, P), g)
    z = torch.randn((B, D, L, P), generator=g, dtype=torch.float64, device=g.device)
    growth = dims.to(torch.float64)[:, None, None, None] ** LENGTHSCALE_POWER
    grown = params * growth * torch.exp(LENGTHSCALE_SPREAD * z)
    ls = torch.where(long_dim[:, :, None, None], long_ls, grown)
    short = torch.rand((B, D, L, P), generator=g, dtype=torch.float64, device=g.device)
    short_p = _log_uniform(SHORT_PERIOD_LOW, SHORT_PERIOD_HIGH, (B, D, L, P), g)
    out = torch.where(is_ls, ls.clamp_min(FLOORS[ParamKind.LENGTHSCALE]), params)
    return torch.where(is_per & (short < SHORT_PERIOD_PROB), short_p, out)


def ard_structures(
    symbols: Tensor,
    symbol_mask: Tensor,
    dims: Tensor,
    vocab: Vocabulary,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """The ``realdata-ard`` structures: with probability :data:`ARD_PROB` a dataset of
    ``dims >= 2`` inputs gets one ``SE`` (or, half of the time where the vocabulary has
    it, ``MAT52``) addend in each of its inputs and nothing else.

    Args:
        symbols, symbol_mask: ``(B, D, L)`` structures as drawn (id 0 pads).
        dims: ``(B,)`` inputs of each dataset.
        vocab: the vocabulary (it must have ``SE``).
        generator: the random source.

    Returns:
        ``(symbols, symbol_mask, ard)``: new tensors, and ``(B,)`` the rows made ARD.
    """
    g = generator
    B, D, _ = symbols.shape
    se = vocab.symbols.index("SE") + 1
    mat = vocab.symbols.index("MAT52") + 1 if "MAT52" in vocab.symbols else se
    u = torch.rand((B,), generator=g, dtype=torch.float64, device=g.device)
    ard = (u < ARD_PROB) & (dims.to(g.device) >= 2)
    pick = torch.rand((B, D), generator=g, dtype=torch.float64, device=g.device) < 0.5
    in_dim = torch.arange(D, device=g.device) < dims.to(g.device)[:, None]  # (B, D)
    first = torch.zeros_like(symbol_mask)
    first[..., 0] = True
    new_sym = torch.where(pick, mat, se)[..., None].expand_as(symbols).to(symbols.dtype)
    new_mask = first & in_dim[..., None]
    row = ard[:, None, None]
    out_mask = torch.where(row, new_mask, symbol_mask)
    out_sym = torch.where(row, torch.where(new_mask, new_sym, 0), symbols)
    return out_sym, out_mask, ard


def realdata_noise(noise: Tensor, generator: torch.Generator) -> Tensor:
    """The paper's noise draws ``(B,)`` with :data:`LOW_NOISE_PROB` of them near-noiseless
    and :data:`HIGH_NOISE_PROB` of them noisy (one uniform draw per dataset picks the law)."""
    g = generator
    u = torch.rand(noise.shape, generator=g, dtype=torch.float64, device=g.device)
    quiet = _log_uniform(LOW_NOISE_LOW, LOW_NOISE_HIGH, tuple(noise.shape), g)
    loud = _log_uniform(HIGH_NOISE_LOW, HIGH_NOISE_HIGH, tuple(noise.shape), g)
    out = torch.where(u < LOW_NOISE_PROB, quiet, noise)
    out = torch.where(u >= 1.0 - HIGH_NOISE_PROB, loud, out)
    return out.clamp_min(FLOORS[ParamKind.NOISE])


def series_law(
    params: Tensor,
    noise: Tensor,
    symbols: Tensor,
    symbol_mask: Tensor,
    dims: Tensor,
    vocab: Vocabulary,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """The seasonal-series law of the ``realdata-series`` prior (module doc).

    Args:
        params: ``(B, D, L, P)`` parameters (the ``realdata`` draws).
        noise: ``(B,)`` noise variances (the ``realdata`` draws).
        symbols, symbol_mask: ``(B, D, L)`` the structures.
        dims: ``(B,)`` number of input dimensions.
        vocab: the vocabulary of ``symbols``.
        generator: the random source.

    Returns:
        ``(params, noise, seasonal)``: new tensors, and ``(B,)`` bool, the datasets that
        follow the law (the others unchanged).
    """
    table = slot_table(vocab, params.device)
    ids = torch.where(symbol_mask, symbols, 0).long()
    used = symbol_mask[..., None]
    per_slot = (table.kind == PARAM_KINDS.index(ParamKind.PERIOD)) & table.used
    periodic = per_slot[ids].any(-1) & symbol_mask  # (B, D, L) addends with a period
    is_ls = table.input_lengthscale[ids] & used
    B, D, L, P = params.shape
    g = generator
    pick = torch.rand((B,), generator=g, dtype=torch.float64, device=g.device) < SERIES_PROB
    seasonal = pick & (dims == 1) & periodic.flatten(1).any(1)
    trend = _log_uniform(SERIES_TREND_LOW, SERIES_TREND_HIGH, (B, D, L, P), g)
    decay = _log_uniform(SERIES_DECAY_LOW, SERIES_DECAY_HIGH, (B, D, L, P), g)
    period = _log_uniform(SERIES_PERIOD_LOW, SERIES_PERIOD_HIGH, (B, D, L, P), g)
    shape = _log_uniform(SERIES_SHAPE_LOW, SERIES_SHAPE_HIGH, (B, D, L, P), g)
    quiet = _log_uniform(SERIES_NOISE_LOW, SERIES_NOISE_HIGH, (B,), g)
    row = seasonal[:, None, None, None]
    in_periodic = periodic[..., None]
    out = torch.where(row & is_ls & ~in_periodic, trend, params)
    out = torch.where(row & is_ls & in_periodic, decay, out)
    out = torch.where(row & per_slot[ids] & used, period, out)
    own_ls = (table.kind == PARAM_KINDS.index(ParamKind.LENGTHSCALE)) & table.used
    is_shape = own_ls[ids] & used & ~is_ls & in_periodic
    out = torch.where(row & is_shape, shape, out)
    return out, torch.where(seasonal, quiet, noise), seasonal


def scale_amplitudes(
    params: Tensor, symbols: Tensor, symbol_mask: Tensor, vocab: Vocabulary, factor: Tensor
) -> Tensor:
    """Parameters of the kernel ``factor * K``: the first dimension's amplitudes times it.

    ``K = prod_d sum_l k_dl``; multiplying every addend of dimension 0 by ``factor (B,)``
    multiplies the product by it (:func:`amplitude_slots` says which slots scale an addend).
    """
    amp = slot_table(vocab, params.device).amplitude
    ids = torch.where(symbol_mask, symbols, 0).long()
    first = torch.zeros(params.shape[1], dtype=torch.bool, device=params.device)
    first[0] = True
    scale = amp[ids] & symbol_mask[..., None] & first[None, :, None, None]
    return torch.where(scale, params * factor[:, None, None, None], params)


def standardise_targets(y_all: Tensor, train: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """``(y - m) / s`` with the training points' mean ``m`` and standard deviation ``s``.

    Args:
        y_all: ``(B, M)`` targets (training and test points).
        train: ``(B, M)`` bool, the training points (the statistics' support).
        valid: ``(B,)`` bool, elements whose draw succeeded (others keep ``y`` and ``s = 1``).

    Returns:
        The standardised targets (0 off ``train`` stays 0 on padding) and ``s (B,)``.
    """
    w = train.to(y_all.dtype)
    count = w.sum(1).clamp_min(1.0)
    mean = (y_all * w).sum(1) / count
    var = ((y_all - mean[:, None]) ** 2 * w).sum(1) / count
    s = torch.where(valid & (var > 0), var.sqrt(), torch.ones_like(var))
    m = torch.where(valid & (var > 0), mean, torch.zeros_like(mean))
    y = (y_all - m[:, None]) / s[:, None]
    return y, s
