"""The lengthscale ladder of a kernel without a period: its rungs, its local maxima, the
successive halving's third start, and a two-basin dataset the default now gets right."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import multivariate_normal

from amorgp.amortizer import Amortizer
from amorgp.amortizer.stages.multistart import _ranked
from amorgp.amortizer.stages.start_proposals import (
    LADDER,
    STRETCHES,
    is_rung,
    ladder_factor,
    ladder_peaks,
    stretched_starts,
)
from amorgp.amortizer.testing import oracle_covariance
from amorgp.kernel_grammar import DimWiseStructure


def test_the_ladder_multiplies_every_input_lengthscale(amz: Amortizer) -> None:
    """``ladder=True`` adds one start per rung, each the network's start with every
    lengthscale in input units times the rung's factor and nothing else changed; a
    periodic kernel's call (``shorter=False``, no ladder) keeps the stretches above 1."""
    s = DimWiseStructure.coerce("SE + LIN", 2)
    sym = torch.tensor([[amz.vocabulary.id(a) for a in dim] for dim in s.dims])
    msk = torch.ones_like(sym, dtype=torch.bool)
    gen = torch.Generator().manual_seed(0)
    params = 0.5 + torch.rand(3, 2, 2, 4, dtype=torch.float64, generator=gen)
    out = dict(stretched_starts(params, sym, msk, amz.vocabulary, True, True))
    assert set(out) == {f"lengthscales {label}" for _, label in (*STRETCHES, *LADDER)}
    for name, block in out.items():
        f = ladder_factor(name)
        assert f is not None
        ratio = block / params
        changed = (ratio - 1.0).abs() > 1e-12
        # SE's lengthscale (slot 1 of addend 0) in both dimensions, nothing else
        assert torch.allclose(ratio[:, :, 0, 1], torch.full_like(ratio[:, :, 0, 1], f))
        assert int(changed.sum()) == 3 * 2
    few = dict(stretched_starts(params, sym, msk, amz.vocabulary, False, False))
    assert set(few) == {f"lengthscales {label}" for f, label in STRETCHES if f > 1.0}
    assert all(is_rung(f"lengthscales {label}") for _, label in LADDER)
    assert not any(is_rung(f"lengthscales {label}") for _, label in STRETCHES)
    assert ladder_factor("network") == 1.0
    assert ladder_factor("prior-mean") is None


def test_ladder_peaks_are_the_local_maxima_in_factor_order() -> None:
    """Listed out of order, a profile with two humps and a flat top: the peaks are the
    starts at least as high as both neighbours by factor (hand-computed)."""
    factors = [9.0, 0.25, 1.0, 0.0625, 0.5, 2.0, 3.0]
    scores = [1.0, 5.0, 4.0, 2.0, 3.0, 4.0, 4.0]
    # by factor: 0.0625:2, 0.25:5, 0.5:3, 1:4, 2:4, 3:4, 9:1
    assert sorted(ladder_peaks(factors, scores)) == sorted([1, 2, 5, 6])
    assert ladder_peaks([1.0], [0.0]) == [0]
    assert ladder_peaks([], []) == []


NAMES = [
    "network", "lengthscales x1/2", "lengthscales x3", "lengthscales x9",
    "lengthscales x1/16", "lengthscales x1/4", "lengthscales x2", "prior-mean",
]  # fmt: skip
"""Eight starts of one kernel: the network's, three stretches, three rungs, a null start."""

_PARAMS = (
    torch.arange(8, dtype=torch.float64)[:, None, None, None],
    torch.ones(8, dtype=torch.float64),
)
"""Each start's parameters (its index) and noise."""


def _kept(score: list[float], periodic: bool) -> list[str]:
    """The names of the halving's candidates of :data:`NAMES` scored ``score``."""
    (alt,) = _ranked(1, [0] * 8, NAMES, score, *_PARAMS, 3, [periodic])
    return [a[0] for a in alt]


def test_a_rung_joins_the_halving_as_a_third_start_and_displaces_none() -> None:
    """A kernel without a period keeps its best two starts that are not rungs, even where
    a rung scores above both, and adds the best local maximum of its ladder that is not
    kept; a periodic kernel keeps its best three as before."""
    # ladder by factor: 1/16: 9, 1/4: 3, 1/2: 2, 1: 6, 2: 5, 3: 1, 9: 0 -> peaks x1/16, network
    score = [6.0, 2.0, 1.0, 0.0, 9.0, 3.0, 5.0, 7.0]
    assert _kept(score, False) == ["prior-mean", "network", "lengthscales x1/16"]
    assert _kept(score, True) == ["lengthscales x1/16", "prior-mean", "network"]
    # the ladder's best peak already kept: the next peak joins; none left: two starts
    score2 = [9.0, 2.0, 1.0, 0.0, 3.0, 4.0, 5.0, 7.0]  # peaks: network (9), x1/4 (4)
    assert _kept(score2, False) == ["network", "prior-mean", "lengthscales x1/4"]
    score3 = [9.0, 2.0, 1.0, 0.0, 0.5, 1.5, 5.0, 7.0]  # one peak: the network's, kept
    assert _kept(score3, False) == ["network", "prior-mean"]


def test_the_network_start_is_always_a_candidate_of_a_kernel_without_a_period() -> None:
    """Where the network's own start is neither of the best two starts nor the ladder's
    peak, a kernel without a period halves it as a fourth candidate; a periodic kernel
    keeps its best three only."""
    # by factor: 1/16: 9, 1/4: 3, 1/2: 0, 1: 1, 2: 2, 3: 8, 9: 4 -> peaks x1/16, x3 (kept)
    score = [1.0, 0.0, 8.0, 4.0, 9.0, 3.0, 2.0, 7.0]
    (alt,) = _ranked(1, [0] * 8, NAMES, score, *_PARAMS, 3, [False])
    assert [a[0] for a in alt] == [
        "lengthscales x3", "prior-mean", "lengthscales x1/16", "network",
    ]  # fmt: skip
    assert alt[-1][1].item() == 0.0  # the network's own parameters
    assert _kept(score, True) == ["lengthscales x1/16", "lengthscales x3", "prior-mean"]
    score[0] = float("nan")  # not finite: not a candidate
    assert "network" not in _kept(score, False)


def test_the_default_finds_the_short_basin_of_a_plain_kernel(amz: Amortizer) -> None:
    """A smooth quadratic trend with a small fast oscillation and almost no noise: ``SE``
    has a long-lengthscale basin that calls the oscillation noise and a short one that
    fits it, about 65 nats higher.  The default fit ends within 1 nat of the best optimum
    scipy's L-BFGS-B reaches on the dense float64 likelihood from a grid of lengthscales;
    without the ladder's rungs it ended in the long basin."""
    rng = np.random.default_rng(14)
    n = 60
    x = np.sort(rng.uniform(0, 1, n))
    y = x**2 + 0.1 * np.sin(2 * np.pi * rng.uniform(5, 15) * x) + 0.005 * rng.normal(size=n)
    X = x[:, None]
    r = amz.infer(X, y, "SE")
    norm = r.normalizer
    Xn = norm.transform_x(X).to(torch.float64).numpy()
    yn = norm.transform_y(y).to(torch.float64).numpy()
    s = DimWiseStructure.coerce("SE", 1)

    def lml(theta: np.ndarray) -> float:
        K = oracle_covariance(Xn, s, theta)  # [variance, lengthscale, noise]
        return float(multivariate_normal(np.zeros(n), K, allow_singular=True).logpdf(yn))

    best = -np.inf
    for ell in np.geomspace(1e-3, 10.0, 13):
        res = minimize(
            lambda z: -lml(np.exp(z) + 1e-6), np.log([1.0, ell, 0.1]), method="L-BFGS-B",
            options={"maxiter": 500},
        )  # fmt: skip
        best = max(best, -float(res.fun))
    got = lml(np.array([float(r.params[0, 0, 0]), float(r.params[0, 0, 1]), r.noise]))
    assert got > best - 1.0
    factor = ladder_factor(r.start)
    assert factor is not None
    assert factor < 0.5


def test_a_kernel_without_a_period_is_halved_in_one_round() -> None:
    """Three starts of ``SE`` (the best two and a ladder peak): one round of 5
    evaluations each, and the winner is the start that ends highest after it, the same
    as refining each start alone by 5 evaluations (rows are independent) and taking the
    best by the dense float64 likelihood."""
    from amorgp.amortizer.stages.fisher import fisher_refine
    from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
    from amorgp.amortizer.stages.refine_rows import halve_rows

    rng = np.random.default_rng(14)
    n = 60
    x = np.sort(rng.uniform(0, 1, n))
    y = x**2 + 0.1 * np.sin(2 * np.pi * rng.uniform(5, 15) * x) + 0.005 * rng.normal(size=n)
    y = (y - y.mean()) / y.std()
    s = DimWiseStructure.coerce("SE", 1)
    starts = [
        ("network", torch.tensor([[[1.0, 0.5]]], dtype=torch.float64), 0.1),
        ("prior-mean", torch.tensor([[[1.0, 1.0]]], dtype=torch.float64), 0.3),
        ("lengthscales x1/16", torch.tensor([[[1.0, 0.03]]], dtype=torch.float64), 0.01),
    ]
    alternatives = [[(name, p, torch.tensor(nz, dtype=torch.float64)) for name, p, nz in starts]]
    Xt, yt = torch.tensor(x[:, None])[None], torch.tensor(y)[None]
    p, nz, names, spent = halve_rows(
        Xt, yt, [s], alternatives, starts[0][1][None].clone(),
        torch.tensor([0.1], dtype=torch.float64), ["network"], 5,
    )  # fmt: skip
    assert 0 < spent[0] <= 5

    def lml(theta: np.ndarray) -> float:
        K = oracle_covariance(x[:, None], s, theta)
        return float(multivariate_normal(np.zeros(n), K, allow_singular=True).logpdf(y))

    alone = []
    for name, prm, noise in starts:
        obj = BatchLogMarginalLikelihood(Xt, yt, s)
        ref = fisher_refine(obj, prm[None], torch.tensor([noise]), 5, final_check=False)
        theta = [float(ref.params[0, 0, 0, 0]), float(ref.params[0, 0, 0, 1]), float(ref.noise[0])]
        alone.append((lml(np.array(theta)), name))
    assert names[0] == max(alone)[1]
    got = lml(np.array([float(p[0, 0, 0, 0]), float(p[0, 0, 0, 1]), float(nz[0])]))
    assert got == pytest.approx(max(alone)[0], abs=1e-6)
