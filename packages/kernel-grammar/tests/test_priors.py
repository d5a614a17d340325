"""Tests of the priors against scipy.stats."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from amorgp.kernel_grammar import NOISE, PAPER_VOCABULARY, Exponential, Gamma

X = np.array([1e-3, 0.05, 0.3, 1.0, 2.5, 10.0])


@pytest.mark.parametrize(("shape", "rate"), [(2.0, 3.0), (2.0, 5.0), (0.7, 1.3), (5.0, 0.5)])
def test_gamma_against_scipy(shape: float, rate: float) -> None:
    g = Gamma(shape, rate)
    oracle = stats.gamma(shape, scale=1.0 / rate)
    np.testing.assert_allclose(g.log_prob(X), oracle.logpdf(X), rtol=1e-12)
    assert g.mean == pytest.approx(oracle.mean(), rel=1e-14)
    assert g.variance == pytest.approx(oracle.var(), rel=1e-14)
    draws = g.sample(np.random.default_rng(0), 20000)
    # Kolmogorov-Smirnov against the scipy distribution (fixed seed; loose level)
    assert stats.kstest(draws, oracle.cdf).pvalue > 1e-3


@pytest.mark.parametrize("rate", [1.0 / 0.15**2, 1.0, 0.2])
def test_exponential_against_scipy(rate: float) -> None:
    e = Exponential(rate)
    oracle = stats.expon(scale=1.0 / rate)
    np.testing.assert_allclose(e.log_prob(X), oracle.logpdf(X), rtol=1e-12)
    assert e.mean == pytest.approx(oracle.mean(), rel=1e-14)
    assert e.variance == pytest.approx(oracle.var(), rel=1e-14)
    draws = e.sample(np.random.default_rng(1), 20000)
    assert stats.kstest(draws, oracle.cdf).pvalue > 1e-3


def test_paper_priors() -> None:
    # docs/architecture.md §4: s^2, c^2, p ~ Gamma(2, 3); l ~ Gamma(2, 5); noise ~ Exp(1/0.15^2)
    expected = {
        "variance": Gamma(2, 3),
        "offset": Gamma(2, 3),
        "period": Gamma(2, 3),
        "lengthscale": Gamma(2, 5),
    }
    for sym in PAPER_VOCABULARY:
        for p in sym.params:
            assert p.prior == expected[p.kind.value], (sym.name, p.name)
    assert NOISE.prior == Exponential(1.0 / 0.15**2)


def test_torch_log_prob_matches_numpy_and_differentiates() -> None:
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, dtype=torch.float64, requires_grad=True)
    for prior in (Gamma(2.0, 5.0), Exponential(3.0)):
        lp = prior.log_prob(x)
        np.testing.assert_allclose(lp.detach().numpy(), prior.log_prob(X), rtol=1e-13)
        assert torch.autograd.gradcheck(prior.log_prob, (x,))


def test_invalid_parameters_and_printing() -> None:
    with pytest.raises(ValueError, match="Gamma needs shape > 0 and rate > 0"):
        Gamma(0.0, 1.0)
    with pytest.raises(ValueError, match="Exponential needs rate > 0"):
        Exponential(-1.0)
    assert str(Gamma(2, 3)) == "Gamma(shape=2, rate=3)"
    assert Gamma(2, 3).to_dict() == {"family": "gamma", "shape": 2, "rate": 3}
    assert Exponential(2.0).to_dict() == {"family": "exponential", "rate": 2.0}
