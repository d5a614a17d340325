"""The relevance starts (the inputs the network reads as least relevant, stretched) and the
successive halving that guards a kernel whose best start is one of them, or that chooses
between the two basins of a plain kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import multivariate_normal

from amorgp.amortizer import Amortizer
from amorgp.amortizer.stages.fisher import fisher_refine
from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
from amorgp.amortizer.stages.multistart import RELEVANCE, RELEVANCE_STRETCH, _ranked
from amorgp.amortizer.stages.refine_rows import halve_rows
from amorgp.amortizer.stages.start_proposals import RELEVANCE_STARTS, relevance_starts
from amorgp.amortizer.testing import oracle_covariance
from amorgp.kernel_grammar import DimWiseStructure


def _symbols(amz: Amortizer, kernel: str, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    s = DimWiseStructure.coerce(kernel, d)
    vocab = amz.vocabulary
    L = s.max_addends
    sym = torch.zeros(d, L, dtype=torch.long)
    mask = torch.zeros(d, L, dtype=torch.bool)
    for j, dim in enumerate(s.dims):
        for a, name in enumerate(dim):
            sym[j, a] = vocab.id(name)
            mask[j, a] = True
    return sym, mask


def test_the_least_relevant_inputs_are_stretched(amz: Amortizer) -> None:
    """``"relevance k"`` multiplies the input lengthscales of the ``k`` dimensions with the
    longest ones (per dataset) by RELEVANCE_STRETCH and changes nothing else: not the
    variances, not the periodic factor's own (unit-free) lengthscale or its period."""
    sym, mask = _symbols(amz, "SE@0 * SE@1 * (SE*PER)@2", 3)
    S = amz.vocabulary.max_params
    g = torch.Generator().manual_seed(0)
    params = torch.rand(2, 3, sym.shape[1], S, generator=g, dtype=torch.float64) + 0.5
    # slot 1: SE's lengthscale, SE*PER's decay lengthscale (both in input units);
    # dataset 0: dimension 1 longest, then 0; dataset 1: dimension 2 longest, then 0
    params[0, 0, 0, 1], params[0, 1, 0, 1], params[0, 2, 0, 1] = 2.0, 4.0, 0.3
    params[1, 0, 0, 1], params[1, 1, 0, 1], params[1, 2, 0, 1] = 0.2, 0.1, 3.0
    starts = relevance_starts(params, sym, mask, amz.vocabulary)
    assert [name for name, _ in starts] == [f"{RELEVANCE} 1", f"{RELEVANCE} 2"]
    want = {0: ([1], [1, 0]), 1: ([2], [2, 0])}
    for k, (_, block) in enumerate(starts):
        for b in range(2):
            stretched = want[b][k]
            ratio = block[b] / params[b]
            for j in range(3):
                for a in range(sym.shape[1]):
                    if not mask[j, a]:
                        continue
                    name = str(amz.vocabulary.symbol(int(sym[j, a])))
                    for p in range(S):
                        is_input_ls = p == 1 and name in ("SE", "SE*PER")
                        expect = RELEVANCE_STRETCH if is_input_ls and j in stretched else 1.0
                        assert float(ratio[j, a, p]) == pytest.approx(expect, rel=1e-12), (
                            b,
                            k,
                            j,
                            a,
                            p,
                        )


def test_no_relevance_start_with_fewer_than_two_input_dimensions(amz: Amortizer) -> None:
    sym, mask = _symbols(amz, "SE + SE*PER", 1)
    params = torch.ones(2, 1, sym.shape[1], 3, dtype=torch.float64)
    assert relevance_starts(params, sym, mask, amz.vocabulary) == []


def test_many_inputs_get_at_most_the_cap_of_relevance_starts(amz: Amortizer) -> None:
    """With 20 input dimensions: RELEVANCE_STARTS starts, from 1 to 19 inputs stretched,
    each stretching exactly its count of the longest ones."""
    d = 20
    sym, mask = _symbols(amz, "SE", d)
    ls = torch.linspace(0.1, 2.0, d, dtype=torch.float64)
    params = torch.ones(1, d, 1, amz.vocabulary.max_params, dtype=torch.float64)
    params[0, :, 0, 1] = ls
    starts = relevance_starts(params, sym, mask, amz.vocabulary)
    counts = [int(name.split()[-1]) for name, _ in starts]
    assert len(counts) == RELEVANCE_STARTS
    assert counts[0] == 1
    assert counts[-1] == d - 1
    assert counts == sorted(set(counts))
    for k, (_, block) in zip(counts, starts, strict=True):
        stretched = (block[0, :, 0, 1] / ls - 1.0).abs() > 1e-12
        assert stretched.tolist() == [j >= d - k for j in range(d)]


def test_the_kept_starts_hold_one_that_stretches_no_input() -> None:
    """Where every kept start is a relevance start, the last kept is the best other one."""
    names = [f"{RELEVANCE} 1", f"{RELEVANCE} 2", f"{RELEVANCE} 3", "network", "prior-mean"]
    score = [5.0, 4.0, 3.0, 1.0, 2.0]
    params = torch.arange(5, dtype=torch.float64)[:, None, None, None]
    noise = torch.ones(5, dtype=torch.float64)
    (alt,) = _ranked(1, [0] * 5, names, score, params, noise, 3)
    assert [a[0] for a in alt] == [f"{RELEVANCE} 1", f"{RELEVANCE} 2", "prior-mean"]
    names2 = ["network", f"{RELEVANCE} 1", "prior-mean"]
    (alt2,) = _ranked(1, [0] * 3, names2, [1.0, 3.0, 2.0], params[:3], noise[:3], 3)
    assert [a[0] for a in alt2] == [f"{RELEVANCE} 1", "prior-mean", "network"]


def test_a_relevance_winner_is_halved_against_its_best_other_start() -> None:
    """An ``SE`` kernel on two inputs of which the first carries the signal: a start that
    stretches the first input (the gradient along its lengthscale nearly vanishes there)
    listed first, the moderate start second.  The halving refines both and keeps the one
    that ends higher: the result is within 1 nat of the optimum scipy's L-BFGS-B reaches
    on the dense float64 likelihood from the moderate start, where the stretched start
    alone stays far below it."""
    rng = np.random.default_rng(4)
    n = 60
    X = rng.uniform(0, 1, (n, 2))
    y = np.sin(2 * np.pi * 1.5 * X[:, 0]) + 0.05 * rng.normal(size=n)
    y = (y - y.mean()) / y.std()
    s = DimWiseStructure.coerce("SE", 2)
    # params (D, L=1, S=2): [variance, lengthscale] per dimension
    moderate = torch.tensor([[[1.0, 0.3]], [[1.0, 1.0]]], dtype=torch.float64)
    flat = moderate.clone()
    flat[0, 0, 1] = 30.0
    noise = torch.tensor(0.1, dtype=torch.float64)
    alternatives = [[(f"{RELEVANCE} 1", flat, noise), ("network", moderate, noise)]]
    Xt, yt = torch.tensor(X)[None], torch.tensor(y)[None]
    p, nz, names, spent = halve_rows(
        Xt, yt, [s], alternatives, flat[None].clone(), noise[None].clone(), [f"{RELEVANCE} 1"], 5
    )

    def lml(theta: np.ndarray) -> float:
        K = oracle_covariance(X, s, theta)  # the noise (last) included
        return float(multivariate_normal(np.zeros(n), K, allow_singular=True).logpdf(y))

    def theta_of(params: torch.Tensor, noise: float) -> np.ndarray:
        return np.array(
            [float(params[0, 0, 0]), float(params[0, 0, 1]), float(params[1, 0, 0]),
             float(params[1, 0, 1]), noise]
        )  # fmt: skip

    start = theta_of(moderate, 0.1)
    res = minimize(
        lambda z: -lml(np.exp(z) + 1e-6), np.log(start), method="L-BFGS-B",
        options={"maxiter": 500},
    )  # fmt: skip
    optimum = -res.fun
    assert names[0] == "network"
    assert spent[0] > 0
    assert lml(theta_of(p[0], float(nz[0]))) > lml(theta_of(flat, 0.1)) + 10.0
    # the refinement goes on from the halving's winner, as the pipeline's does
    obj = BatchLogMarginalLikelihood(Xt, yt, s)
    ref = fisher_refine(obj, p, nz, 100)
    got = lml(theta_of(ref.params[0], float(ref.noise[0])))
    assert got > optimum - 1.0
    assert math.isfinite(got)


def test_a_plain_kernel_is_halved_between_its_best_two_starts() -> None:
    """``SE`` on a fast sine with noise has two basins: a long lengthscale that calls
    everything noise, and a short one that fits the sine.  Listed first (the best
    score), a start in the long basin; second, a start in the short one.  The halving
    refines both and keeps the short one; refined on from there the result is within 1
    nat of the optimum scipy's L-BFGS-B reaches on the dense float64 likelihood from
    the short start, more than 10 nats above the long basin's own optimum."""
    rng = np.random.default_rng(3)
    n = 40
    x = np.sort(rng.uniform(0, 1, n))
    y = 0.6 * np.sin(2 * np.pi * 6 * x) + 0.1 * rng.normal(size=n)
    y = (y - y.mean()) / y.std()
    X = x[:, None]
    s = DimWiseStructure.coerce("SE", 1)
    long = torch.tensor([[[1.0, 2.0]]], dtype=torch.float64)  # (D, L, [variance, lengthscale])
    short = torch.tensor([[[1.0, 0.04]]], dtype=torch.float64)
    noise_long = torch.tensor(0.5, dtype=torch.float64)
    noise_short = torch.tensor(0.1, dtype=torch.float64)
    alternatives = [
        [("lengthscales x3", long, noise_long), ("lengthscales x1/2", short, noise_short)]
    ]
    Xt, yt = torch.tensor(X)[None], torch.tensor(y)[None]
    p, nz, names, spent = halve_rows(
        Xt, yt, [s], alternatives, long[None].clone(), noise_long[None].clone(),
        ["lengthscales x3"], 5,
    )  # fmt: skip

    def lml(theta: np.ndarray) -> float:
        K = oracle_covariance(X, s, theta)  # the noise (last) included
        return float(multivariate_normal(np.zeros(n), K, allow_singular=True).logpdf(y))

    def optimum(start: np.ndarray) -> float:
        res = minimize(
            lambda z: -lml(np.exp(z) + 1e-6), np.log(start), method="L-BFGS-B",
            options={"maxiter": 500},
        )  # fmt: skip
        return -float(res.fun)

    high, low = optimum(np.array([1.0, 0.04, 0.1])), optimum(np.array([1.0, 2.0, 0.5]))
    assert high > low + 10.0
    assert names[0] == "lengthscales x1/2"
    assert spent[0] > 0
    ref = fisher_refine(BatchLogMarginalLikelihood(Xt, yt, s), p, nz, 100)
    theta = np.array(
        [float(ref.params[0, 0, 0, 0]), float(ref.params[0, 0, 0, 1]), float(ref.noise[0])]
    )
    assert lml(theta) > high - 1.0
