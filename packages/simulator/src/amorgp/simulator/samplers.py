"""Vectorised samplers driven by an explicit ``torch.Generator``.

Every function draws from the generator it is given (never the global RNG), in
float64 for continuous laws, and is vectorised over arbitrary shapes: no Python
loop over elements.  The same generator state gives the same draws on CPU.

* :func:`sample_gamma` -- Gamma(shape, rate) by Marsaglia and Tsang's squeeze
  method (ACM TOMS 2000), ``rounds`` proposals per element drawn at once; the
  rare element with no accepted proposal is redrawn in a further vectorised
  pass (exact rejection sampling) and every rejected proposal is counted.
  Shapes ``a < 1`` use the boost ``Gamma(a) = Gamma(a + 1) U^(1/a)``.
* :func:`sample_exponential` -- inverse CDF, ``-log(1 - U) / rate``.
* :func:`sample_geometric` -- on ``{1, 2, ...}`` by inverse CDF,
  ``1 + floor(log(1 - U) / log(1 - p))``.
* :func:`sample_uniform_int` -- ``U{low..high}`` (both ends included).
* :func:`sample_prior` -- a kernel-grammar prior (Gamma or Exponential).
* :func:`sample_subsets` -- uniformly random subsets of ``{1..V}`` of given
  sizes, without replacement, returned sorted and zero-padded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from amorgp.kernel_grammar import Exponential, Gamma, Prior

__all__ = [
    "GammaDraw",
    "gamma_parameters",
    "sample_exponential",
    "sample_gamma",
    "sample_geometric",
    "sample_prior",
    "sample_subsets",
    "sample_uniform_int",
]

_F64 = torch.float64


@dataclass(frozen=True)
class GammaDraw:
    """Result of :func:`sample_gamma`.

    Attributes:
        values: the Gamma draws, float64, the broadcast shape of ``shape`` and ``rate``.
        n_rejected: number of rejected Marsaglia--Tsang proposals (all elements).
    """

    values: torch.Tensor
    n_rejected: int


def _size(size: int | tuple[int, ...] | torch.Size) -> tuple[int, ...]:
    if isinstance(size, int):
        size = (size,)
    out = tuple(int(s) for s in size)
    if any(s < 0 for s in out):
        raise ValueError(f"sample size must be non-negative, got {out}")
    return out


def sample_gamma(
    shape: torch.Tensor | float,
    rate: torch.Tensor | float,
    generator: torch.Generator,
    *,
    rounds: int = 4,
    max_passes: int = 64,
) -> GammaDraw:
    """Draw ``Gamma(shape, rate)`` (density ``b^a x^(a-1) e^(-b x) / Gamma(a)``).

    Marsaglia--Tsang: with ``d = a - 1/3``, ``c = 1 / sqrt(9 d)``, ``x ~ N(0, 1)``,
    ``v = (1 + c x)^3`` and ``u ~ U(0, 1)``, accept ``d v`` when ``v > 0`` and
    ``log u < x^2 / 2 + d - d v + d log v``.  The acceptance probability is above
    0.95 for ``a >= 1``, so ``rounds = 4`` proposals leave an element unresolved
    with probability below ``1e-5``; unresolved elements get another pass.

    Args:
        shape: shape parameters ``a > 0`` (tensor or float).
        rate: rate parameters ``b > 0``; broadcast against ``shape``.
        generator: the random source (its device is the device of the draws).
        rounds: proposals per element and pass.
        max_passes: bound on passes (reaching it is practically impossible).

    Returns:
        :class:`GammaDraw` with float64 ``values`` and the rejection count.

    Raises:
        ValueError: non-finite or non-positive ``shape``/``rate``, ``rounds < 1``.
    """
    if rounds < 1:
        raise ValueError(f"sample_gamma: rounds must be >= 1, got {rounds}")
    device = generator.device
    a_in = torch.as_tensor(shape, dtype=_F64, device=device)
    b_in = torch.as_tensor(rate, dtype=_F64, device=device)
    a_in, b_in = torch.broadcast_tensors(a_in, b_in)
    if not bool(torch.isfinite(a_in).all() and (a_in > 0).all()):
        raise ValueError("sample_gamma: every shape must be finite and > 0")
    if not bool(torch.isfinite(b_in).all() and (b_in > 0).all()):
        raise ValueError("sample_gamma: every rate must be finite and > 0")
    boost = a_in < 1.0
    a = torch.where(boost, a_in + 1.0, a_in).reshape(-1)
    d = a - 1.0 / 3.0
    c = 1.0 / torch.sqrt(9.0 * d)
    out = torch.empty_like(d)
    todo = torch.arange(d.numel(), device=device)
    n_rejected = 0
    for _ in range(max_passes):
        m = todo.numel()
        if m == 0:
            break
        dd, cc = d[todo], c[todo]
        x = torch.randn((rounds, m), generator=generator, dtype=_F64, device=device)
        u = torch.rand((rounds, m), generator=generator, dtype=_F64, device=device)
        v = (1.0 + cc * x) ** 3
        log_v = torch.where(v > 0, torch.log(v.clamp_min(1e-300)), -math.inf)
        ok = (v > 0) & (torch.log(u) < 0.5 * x**2 + dd - dd * v + dd * log_v)
        any_ok = ok.any(dim=0)
        first = ok.to(torch.int8).argmax(dim=0)
        chosen = dd * v.gather(0, first[None]).squeeze(0)
        n_rejected += int(first[any_ok].sum()) + rounds * int((~any_ok).sum())
        out[todo[any_ok]] = chosen[any_ok]
        todo = todo[~any_ok]
    else:
        if todo.numel():
            raise RuntimeError(
                f"sample_gamma: {todo.numel()} elements unresolved after {max_passes} passes"
            )
    out = out.reshape(a_in.shape)
    if bool(boost.any()):
        u = torch.rand(a_in.shape, generator=generator, dtype=_F64, device=device)
        out = torch.where(boost, out * u ** (1.0 / a_in), out)
    return GammaDraw(out / b_in, n_rejected)


def sample_exponential(
    rate: torch.Tensor | float,
    size: int | tuple[int, ...] | torch.Size,
    generator: torch.Generator,
) -> torch.Tensor:
    """Draw ``Exponential(rate)`` (density ``b e^(-b x)``) by ``-log(1 - U) / b``.

    Args:
        rate: rate ``b > 0`` (float or tensor broadcastable to ``size``).
        size: output shape.
        generator: the random source.

    Returns:
        float64 tensor of shape ``size``.
    """
    b = torch.as_tensor(rate, dtype=_F64, device=generator.device)
    if not bool(torch.isfinite(b).all() and (b > 0).all()):
        raise ValueError("sample_exponential: rate must be finite and > 0")
    u = torch.rand(_size(size), generator=generator, dtype=_F64, device=generator.device)
    return -torch.log1p(-u) / b


def sample_geometric(
    p: float,
    size: int | tuple[int, ...] | torch.Size,
    generator: torch.Generator,
) -> torch.Tensor:
    """Draw ``Geometric(p)`` on ``{1, 2, ...}``: ``P(k) = (1 - p)^(k - 1) p``.

    Args:
        p: success probability in ``(0, 1]``.
        size: output shape.
        generator: the random source.

    Returns:
        int64 tensor of shape ``size``.
    """
    if not (math.isfinite(p) and 0.0 < p <= 1.0):
        raise ValueError(f"sample_geometric: p must lie in (0, 1], got {p}")
    u = torch.rand(_size(size), generator=generator, dtype=_F64, device=generator.device)
    if p == 1.0:
        return torch.ones_like(u, dtype=torch.int64)
    k = torch.floor(torch.log1p(-u) / math.log1p(-p)) + 1.0
    return k.clamp_max(2**62).to(torch.int64)


def sample_uniform_int(
    low: int,
    high: int,
    size: int | tuple[int, ...] | torch.Size,
    generator: torch.Generator,
) -> torch.Tensor:
    """Draw uniformly from ``{low, ..., high}`` (both included); int64."""
    if high < low:
        raise ValueError(f"sample_uniform_int: need low <= high, got {low} > {high}")
    return torch.randint(
        low, high + 1, _size(size), generator=generator, dtype=torch.int64, device=generator.device
    )


def gamma_parameters(prior: Prior) -> tuple[float, float]:
    """``(shape, rate)`` of a prior as a Gamma law (``Exponential(b) = Gamma(1, b)``)."""
    if isinstance(prior, Gamma):
        return prior.shape, prior.rate
    if isinstance(prior, Exponential):
        return 1.0, prior.rate
    raise ValueError(f"unsupported prior {prior!r}: expected Gamma or Exponential")


def sample_prior(
    prior: Prior,
    size: int | tuple[int, ...] | torch.Size,
    generator: torch.Generator,
) -> GammaDraw:
    """Draw ``size`` values from a kernel-grammar prior (float64).

    Exponential priors use :func:`sample_exponential` (no rejections), Gamma
    priors :func:`sample_gamma`.
    """
    if isinstance(prior, Exponential):
        return GammaDraw(sample_exponential(prior.rate, size, generator), 0)
    shape, rate = gamma_parameters(prior)
    full = torch.full(_size(size), shape, dtype=_F64, device=generator.device)
    return sample_gamma(full, rate, generator)


def sample_subsets(
    counts: torch.Tensor,
    n_items: int,
    generator: torch.Generator,
    *,
    width: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Uniform random subsets of ``{1..n_items}`` without replacement, sorted.

    For every entry of ``counts`` (shape ``S``), ``counts[s]`` distinct ids are drawn
    uniformly (a random permutation via argsort of i.i.d. uniform keys, truncated)
    and returned in increasing order, padded with id ``0``.

    Args:
        counts: int tensor ``S`` with values in ``0..n_items``.
        n_items: number of items ``V``.
        generator: the random source.
        width: length of the last axis of the output (default ``max(counts)``);
            must be ``>= max(counts)``.

    Returns:
        ``ids (*S, width)`` int64 and ``mask (*S, width)`` bool.
    """
    if n_items < 1:
        raise ValueError(f"sample_subsets: n_items must be >= 1, got {n_items}")
    counts = counts.to(torch.int64)
    if counts.numel() and bool((counts < 0).any() or (counts > n_items).any()):
        raise ValueError(f"sample_subsets: counts must lie in 0..{n_items}")
    top = int(counts.max()) if counts.numel() else 0
    width = top if width is None else width
    if width < top:
        raise ValueError(f"sample_subsets: width {width} < largest count {top}")
    keys = torch.rand(
        (*counts.shape, n_items), generator=generator, dtype=_F64, device=generator.device
    )
    perm = torch.argsort(keys, dim=-1) + 1
    slots = torch.arange(n_items, device=counts.device)
    take = slots < counts[..., None]
    ids = torch.where(take, perm, n_items + 1).sort(dim=-1).values
    ids = torch.where(ids > n_items, 0, ids)
    if width <= n_items:
        ids = ids[..., :width]
    else:
        pad = torch.zeros((*counts.shape, width - n_items), dtype=torch.int64, device=ids.device)
        ids = torch.cat([ids, pad], dim=-1)
    return ids, ids > 0
