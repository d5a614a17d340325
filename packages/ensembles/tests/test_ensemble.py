"""Kernel ensembles and structure search with the reference (prior-mean) inference method."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.ensembles import (
    KernelEnsemble,
    describe_structure,
    format_description,
    structure_search,
)
from amorgp.ensembles.testing import GridInference, PriorMeanInference, prior_mean_params
from amorgp.kernel_grammar import DimWiseStructure


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(40, 1, generator=gen, dtype=torch.float64) * 4
    y = torch.sin(5 * X[:, 0]) + 0.1 * torch.randn(40, generator=gen, dtype=torch.float64)
    return X, y


def test_bma_ensemble_is_the_weighted_mixture_of_its_members(data) -> None:
    X, y = data
    kernels = ["SE", "PER", "SE + PER", "LIN"]
    inf = PriorMeanInference(scale=0.5)
    ens = KernelEnsemble.fit(inf, X, y, kernels)
    assert inf.calls == [4]  # one fit_many call for every kernel (the batched path)
    fits = inf.fit_many(X, y, kernels)
    lml = np.array([f.log_marginal_likelihood for f in fits])
    w_ref = np.exp(lml - lml.max()) / np.exp(lml - lml.max()).sum()
    np.testing.assert_allclose(ens.weights.numpy(), w_ref, rtol=1e-10)
    Xq = torch.linspace(0, 4, 7, dtype=torch.float64)[:, None]
    means = np.stack([f.predict(Xq)[0].numpy() for f in fits])
    variances = np.stack([f.predict(Xq)[1].numpy() for f in fits])
    mean_ref = (w_ref[:, None] * means).sum(0)
    var_ref = (w_ref[:, None] * (variances + means**2)).sum(0) - mean_ref**2
    mean, std = ens.predict(Xq, return_std=True)
    np.testing.assert_allclose(mean.numpy(), mean_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(std.numpy() ** 2, var_ref, rtol=1e-7, atol=1e-12)


def test_failed_member_gets_weight_zero(data) -> None:
    X, y = data
    inf = PriorMeanInference(fail=("PER",))
    with pytest.warns(RuntimeWarning, match="PER"):
        ens = KernelEnsemble.fit(inf, X, y, ["SE", "PER", "LIN"])
    assert float(ens.weights[1]) == 0.0
    assert ens.table()[1]["status"] == "failed"
    assert bool(torch.isfinite(ens.log_predictive_density(X[:5], y[:5])).all())


def test_uniform_and_stacking_weights(data) -> None:
    X, y = data
    ens = KernelEnsemble.fit(PriorMeanInference(), X, y, ["SE", "PER", "LIN"], weighting="uniform")
    torch.testing.assert_close(ens.weights, torch.full((3,), 1 / 3, dtype=torch.float64))
    gen = torch.Generator().manual_seed(1)
    X_val = torch.rand(25, 1, generator=gen, dtype=torch.float64) * 4
    y_val = torch.sin(5 * X_val[:, 0]) + 0.1 * torch.randn(25, generator=gen, dtype=torch.float64)
    kernels = ["SE", "PER", "LIN"]
    st = KernelEnsemble.fit(
        PriorMeanInference(scale=0.5),
        X,
        y,
        kernels,
        weighting="stacking",
        validation=(X_val, y_val),
    )
    assert st.weighting == "stacking"
    assert abs(float(st.weights.sum()) - 1.0) < 1e-12
    # stacking maximises the held-out log score over the simplex: no worse than uniform
    # weights or any single member on the held-out points
    score = float(st.log_predictive_density(X_val, y_val).mean())
    uni = KernelEnsemble.fit(PriorMeanInference(scale=0.5), X, y, kernels, weighting="uniform")
    assert score >= float(uni.log_predictive_density(X_val, y_val).mean()) - 1e-6
    for k in kernels:
        single = KernelEnsemble.fit(PriorMeanInference(scale=0.5), X, y, [k])
        assert score >= float(single.log_predictive_density(X_val, y_val).mean()) - 1e-6
    split = KernelEnsemble.fit(
        PriorMeanInference(),
        X,
        y,
        kernels,
        weighting="stacking",
        generator=torch.Generator().manual_seed(0),
    )
    assert abs(float(split.weights.sum()) - 1.0) < 1e-12
    with pytest.raises(ValueError, match="at least one kernel"):
        KernelEnsemble.fit(PriorMeanInference(), X, y, [])
    with pytest.raises(ValueError, match="unknown weighting"):
        KernelEnsemble.fit(PriorMeanInference(), X, y, ["SE"], weighting="median")  # type: ignore[arg-type]


def _planted(dims: tuple[tuple[str, ...], ...], seed: int, n: int = 100):
    planted = DimWiseStructure(dims)
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, len(dims)))
    K = planted.reference(X, X, prior_mean_params(planted)) + 0.0225 * np.eye(n)
    return planted, X, np.linalg.cholesky(K) @ rng.normal(size=n)


def test_search_recovers_a_planted_structure() -> None:
    """Data drawn from a GP with PER at the prior means: a beam search scored by BIC, with a
    grid Type-2 ML whose grid contains the true hyperparameters, finds PER."""
    planted, X, y = _planted((("PER",),), seed=0)
    res = structure_search(GridInference(), X, y, depth=2, beam=2, criterion="bic")
    assert res.best.structure == planted
    assert res.n_scored > 6


def test_search_finds_at_least_the_planted_score() -> None:
    planted, X, y = _planted((("SE", "PER"),), seed=1)
    res = structure_search(GridInference(), X, y, depth=2, beam=2, criterion="bic")
    fit = GridInference().fit_many(X, y, [planted])[0]
    bic = fit.log_marginal_likelihood - 0.5 * (planted.n_params + 1) * np.log(len(y))
    assert res.best.score >= bic - 1e-9


def test_search_arguments_and_refinement(data) -> None:
    X, y = data
    with pytest.raises(ValueError, match="beam"):
        structure_search(PriorMeanInference(), X, y, beam=0)
    with pytest.raises(ValueError, match="criterion"):
        structure_search(PriorMeanInference(), X, y, criterion="aic")  # type: ignore[arg-type]
    seen = []
    res = structure_search(
        PriorMeanInference(),
        X,
        y,
        depth=1,
        refine=PriorMeanInference(scale=0.5),
        refine_top=2,
        progress=lambda lvl, n, best: seen.append((lvl, n)),
    )
    assert len(res.refined) == 2
    assert res.best in res.refined
    assert seen[0] == (0, 6)  # the six symbols of the paper vocabulary


def test_describe_shares_and_text(data) -> None:
    X, y = data
    fit = PriorMeanInference().fit_many(X, y, ["SE + PER"])[0]
    terms = describe_structure(fit, X)
    assert [t.symbol for t in terms] == ["SE", "PER"]
    # stationary terms: share = variance / sum of variances (both at the prior mean here)
    np.testing.assert_allclose([t.share for t in terms], [0.5, 0.5], rtol=1e-12)
    text = format_description(terms, ["year"])
    assert "dimension 0 (year)" in text
    assert "50.0% of variance" in text


def test_batched_member_predictive_equals_each_members_dense_predictive(data) -> None:
    from amorgp.ensembles.batched import batched_member_predictive

    X, y = data
    kernels = ["SE", "PER", "SE + PER", "LIN*PER", "SE*LIN + PER"]
    fits = GridInference().fit_many(X, y, kernels)
    Xq = torch.linspace(-0.5, 4.5, 11, dtype=torch.float64)[:, None]
    out = batched_member_predictive(fits, X, y, Xq, chunk=4)
    assert out is not None
    for m, fit in enumerate(fits):
        mean, var = fit.predict(Xq)
        torch.testing.assert_close(out[0][m], mean, rtol=1e-8, atol=1e-9)
        torch.testing.assert_close(out[1][m], var, rtol=1e-8, atol=1e-9)
