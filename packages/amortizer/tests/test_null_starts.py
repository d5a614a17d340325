"""Null starts: the prior mean and the median heuristic, alone and inside the multi-start."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.stages.null_starts import (
    NULL_RULES,
    NullNetwork,
    _median_distance,
    null_parameters,
)
from amorgp.amortizer.stages.start_proposals import is_relevance, ladder_factor
from amorgp.amortizer.testing import oracle_log_marginal_likelihood
from amorgp.kernel_grammar import NOISE, PAPER_VOCABULARY, DimWiseStructure, base_symbol


def _structures(texts: list[str], d: int) -> list[DimWiseStructure]:
    return [DimWiseStructure.coerce(t, d, PAPER_VOCABULARY) for t in texts]


def test_prior_mean_rule_gives_the_registry_means() -> None:
    """Every used slot holds its parameter's prior mean (read from the registry)."""
    X = torch.rand(30, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    texts = ["SE + LIN", "SE*PER", "LIN*PER + PER"]
    structures = _structures(texts, 2)
    params, noise = null_parameters("prior-mean", X, X[:, 0], structures, PAPER_VOCABULARY)
    assert torch.allclose(noise, torch.full_like(noise, NOISE.prior.mean), rtol=1e-6)
    for k, s in enumerate(structures):
        for d, addends in enumerate(s.dims):
            for a, name in enumerate(addends):
                means = [p.prior.mean for p in base_symbol(name).params]
                got = params[k, d, a, : len(means)].tolist()
                np.testing.assert_allclose(got, means, rtol=1e-6)


def test_heuristic_lengthscales_are_median_distances() -> None:
    """Input-scaled lengthscales equal numpy's median pairwise distance per dimension;
    variances and offsets stay at the prior mean."""
    rng = np.random.default_rng(1)
    X = rng.random((40, 3)) ** np.array([1.0, 2.0, 0.5])
    i, j = np.triu_indices(40, k=1)
    median = np.median(np.abs(X[i] - X[j]), axis=0)
    structures = _structures(["SE + LIN", "SE*LIN"], 3)
    params, _ = null_parameters(
        "heuristic",
        torch.tensor(X),
        torch.tensor(rng.normal(size=40)),
        structures,
        PAPER_VOCABULARY,
    )
    np.testing.assert_allclose(params[0, :, 0, 1].numpy(), median, rtol=1e-6)  # SE lengthscale
    np.testing.assert_allclose(params[1, :, 0, 1].numpy(), median, rtol=1e-6)  # SE*LIN's
    np.testing.assert_allclose(params[0, :, 1, 1].numpy(), 2 / 3, rtol=1e-6)  # LIN offset


def test_median_distance_matches_numpy_for_equal_and_different_counts() -> None:
    """Per dataset and dimension, numpy's median over the pairs of present points: all
    present (odd pair count), as many present everywhere at different places (even count,
    with ties) and different counts."""
    rng = np.random.default_rng(4)
    X = rng.random((4, 30, 2))
    X[1] = np.round(X[1] * 5) / 5  # ties
    everywhere = np.ones((4, 30), dtype=bool)
    equal = everywhere.copy()
    for b in range(4):
        equal[b, rng.choice(30, 6, replace=False)] = False
    different = everywhere.copy()
    different[0, 20:] = False
    different[2, ::4] = False
    for mask in (everywhere, equal, different):
        got = _median_distance(torch.tensor(X), torch.tensor(mask)).numpy()
        for b in range(4):
            Xb = X[b][mask[b]]
            i, j = np.triu_indices(len(Xb), k=1)
            want = np.median(np.abs(Xb[i] - Xb[j]), axis=0)
            np.testing.assert_allclose(got[b], want, rtol=1e-15, atol=0.0)


def test_heuristic_period_on_a_sinusoid() -> None:
    x = np.linspace(0, 1, 120)
    y = np.sin(2 * np.pi * x / 0.125)
    structures = _structures(["PER"], 1)
    params, _ = null_parameters(
        "heuristic", torch.tensor(x[:, None]), torch.tensor(y), structures, PAPER_VOCABULARY
    )
    assert float(params[0, 0, 0, 2]) == pytest.approx(0.125, rel=0.03)


def test_unknown_rule() -> None:
    with pytest.raises(ValueError, match="rule must be one of"):
        NullNetwork(PAPER_VOCABULARY, "zero")


@pytest.mark.parametrize("kernel", ["SE", "SE + LIN"])
def test_multistart_is_never_worse_than_a_null_start(amz: Amortizer, kernel: str) -> None:
    """With the default multi-start, the result's likelihood (scipy oracle at its
    hyperparameters) is at least that of each null rule run alone through the pipeline."""
    rng = np.random.default_rng(4)
    X = rng.random((60, 2))
    y = np.sin(7 * X[:, 0]) + 0.3 * X[:, 1] + 0.05 * rng.normal(size=60)
    res = amz.infer(X, y, kernel, refine=0)
    best = []
    for rule in NULL_RULES:
        null = Amortizer(NullNetwork(amz.vocabulary, rule), amz.meta, device="cpu")
        r = null.infer(X, y, kernel, starts=1, refine=0)
        best.append(r.log_marginal_likelihood)
    assert res.log_marginal_likelihood >= max(best) - 1e-6
    # a start of a kernel without a period: the network's, a null rule, a stretched or
    # ladder start or a relevance start (no periodic one)
    assert (
        res.start in ("network", *NULL_RULES)
        or ladder_factor(res.start) is not None
        or is_relevance(res.start)
    ), res.start


def test_null_network_through_the_pipeline_matches_the_oracle(amz: Amortizer) -> None:
    """The calibrated prior-mean start's likelihood agrees with scipy at its parameters."""
    rng = np.random.default_rng(5)
    X = rng.random((50, 1))
    y = np.cos(5 * X[:, 0]) + 0.1 * rng.normal(size=50)
    null = Amortizer(NullNetwork(amz.vocabulary, "prior-mean"), amz.meta, device="cpu")
    r = null.infer(X, y, "SE + LIN", starts=1, refine=0)
    Xn = (X - X.min(0)) / (X.max(0) - X.min(0))
    ystd = np.std(y, ddof=0) if np.isclose(np.std(y), r.normalizer.y_std) else np.std(y, ddof=1)
    yn = (y - y.mean()) / ystd
    oracle = oracle_log_marginal_likelihood(Xn, yn, r.kernel, r.params.numpy(), r.noise)
    assert r.log_marginal_likelihood == pytest.approx(oracle, rel=1e-8, abs=1e-8)
