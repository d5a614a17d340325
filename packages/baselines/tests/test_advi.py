from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from amorgp.baselines.advi import (
    ETA_GRID,
    ADVIResult,
    Family,
    LogDensity,
    advi,
    elbo_estimate,
    paper_gradients,
    positive_log_density,
)
from amorgp.kernel_grammar import ParamKind, positive

MEAN = torch.tensor([1.0, -2.0], dtype=torch.float64)
COV = torch.tensor([[1.0, 0.6], [0.6, 0.8]], dtype=torch.float64)
PREC = torch.linalg.inv(COV)


def gauss(z: torch.Tensor) -> torch.Tensor:
    r = z - MEAN
    return -0.5 * ((r @ PREC) * r).sum(-1)


def gauss_grad(z: torch.Tensor) -> torch.Tensor:
    return -(z - MEAN) @ PREC


def _fit(family: str, seed: int = 0, **kw: object) -> object:
    opts = dict(eta=1.0, n_grad_samples=30, max_iters=2500, tol_rel_obj=1e-4)
    opts.update(kw)
    return advi(
        gauss,
        torch.zeros(2, dtype=torch.float64),
        family=family,
        generator=torch.Generator().manual_seed(seed),
        **opts,
    )  # type: ignore[arg-type]


def _long_advi_1d(
    log_joint: LogDensity,
    family: Family,
    *,
    seed: int,
    n_elbo_samples: int,
) -> ADVIResult:
    """ADVI of a one-parameter model from 0, long and precise enough to compare its ELBO
    with a closed-form evidence."""
    return advi(
        log_joint,
        torch.zeros(1, dtype=torch.float64),
        family=family,
        generator=torch.Generator().manual_seed(seed),
        n_grad_samples=5,
        max_iters=1500,
        eta=1.0,
        n_elbo_samples=n_elbo_samples,
        tol_rel_obj=1e-4,
    )


def test_fullrank_recovers_mean_and_covariance() -> None:
    res = _fit("fullrank")
    torch.testing.assert_close(res.mean, MEAN, atol=0.08, rtol=0)  # type: ignore[attr-defined]
    torch.testing.assert_close(res.covariance, COV, atol=0.1, rtol=0)  # type: ignore[attr-defined]


def test_meanfield_recovers_diagonal_of_precision() -> None:
    res = _fit("meanfield")
    torch.testing.assert_close(res.mean, MEAN, atol=0.08, rtol=0)  # type: ignore[attr-defined]
    # KL(q || p) with diagonal q matches the precision's diagonal: var_k = 1 / P_kk
    torch.testing.assert_close(
        torch.diagonal(res.covariance), 1.0 / torch.diagonal(PREC), atol=0.05, rtol=0
    )  # type: ignore[attr-defined]
    assert float(res.covariance[0, 1]) == 0.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", ["meanfield", "fullrank"])
def test_autograd_equals_paper_gradient_formulas(family: str) -> None:
    g = torch.Generator().manual_seed(5)
    mu = torch.randn(2, generator=g, dtype=torch.float64).requires_grad_(True)
    if family == "meanfield":
        scale = (0.3 * torch.randn(2, generator=g, dtype=torch.float64)).requires_grad_(True)
    else:
        scale = torch.tensor([[0.9, 0.0], [0.4, -0.7]], dtype=torch.float64).requires_grad_(True)
    eta = torch.randn(7, 2, generator=g, dtype=torch.float64)
    elbo = elbo_estimate(gauss, family, mu, scale, eta)  # type: ignore[arg-type]
    a_mu, a_s = torch.autograd.grad(elbo, (mu, scale))
    p_mu, p_s = paper_gradients(gauss_grad, family, mu.detach(), scale.detach(), eta)  # type: ignore[arg-type]
    torch.testing.assert_close(a_mu, p_mu, rtol=1e-12, atol=1e-12)
    if family == "fullrank":
        a_s = torch.tril(a_s)
    torch.testing.assert_close(a_s, p_s, rtol=1e-12, atol=1e-12)


def test_normal_conjugate_elbo_reaches_exact_evidence() -> None:
    # y_i ~ N(theta, 1), theta ~ N(0, 4): the posterior is Gaussian, so the optimal
    # full-rank ELBO equals log p(y) and never exceeds it.
    y = np.array([0.3, 1.1, 0.7, 1.9, 0.2])
    yt = torch.as_tensor(y)

    def log_joint(z: torch.Tensor) -> torch.Tensor:
        th = z[:, 0]
        lik = -0.5 * ((yt[None] - th[:, None]) ** 2).sum(1) - 0.5 * len(y) * math.log(2 * math.pi)
        return lik - 0.5 * th**2 / 4.0 - 0.5 * math.log(2 * math.pi * 4.0)

    evidence = scipy.stats.multivariate_normal(np.zeros(5), np.eye(5) + 4.0).logpdf(y)
    res = _long_advi_1d(log_joint, "fullrank", seed=0, n_elbo_samples=2000)
    assert res.elbo <= evidence + 1e-6
    # stochastic optimisation: within a few hundredths of a nat of the bound
    assert res.elbo >= evidence - 0.03
    post_var = 1.0 / (len(y) + 0.25)
    assert float(res.mean[0]) == pytest.approx(post_var * y.sum(), abs=0.07)
    assert float(res.covariance[0, 0]) == pytest.approx(post_var, rel=0.3)


def test_gamma_poisson_elbo_bounds_exact_evidence() -> None:
    # lambda ~ Gamma(a, b), y_i ~ Poisson(lambda): closed-form evidence; ADVI in the
    # softplus space of the shared transform, with its log-Jacobian.
    a, b = 2.0, 1.0
    y = np.array([3, 5, 2, 4, 6, 3])
    n, s = len(y), y.sum()
    log_ev = (
        a * math.log(b)
        - math.lgamma(a)
        + math.lgamma(a + s)
        - (a + s) * math.log(b + n)
        - scipy.special.gammaln(y + 1).sum()
    )
    yt = torch.as_tensor(y, dtype=torch.float64)

    def log_joint(theta: torch.Tensor) -> torch.Tensor:
        lam = theta[:, 0]
        lp = a * math.log(b) - math.lgamma(a) + (a - 1) * lam.log() - b * lam
        return lp + (yt[None] * lam[:, None].log() - lam[:, None] - torch.lgamma(yt[None] + 1)).sum(
            1
        )

    dens = positive_log_density(log_joint, [ParamKind.VARIANCE])
    res = _long_advi_1d(dens, "meanfield", seed=1, n_elbo_samples=4000)
    assert res.elbo <= log_ev + 0.005
    assert res.elbo >= log_ev - 0.05


def test_positive_log_density_adds_the_transform_log_jacobian() -> None:
    zeta = torch.tensor([[-3.0, 0.2], [4.0, -0.5]], dtype=torch.float64)
    dens = positive_log_density(
        lambda th: torch.zeros(th.shape[0], dtype=th.dtype), ["lengthscale", "noise"]
    )
    expected = []
    for row in zeta:
        jac = 0.0
        for k, kind in enumerate(["lengthscale", "noise"]):
            z = row[k].clone().requires_grad_(True)
            (d,) = torch.autograd.grad(positive(z, kind), z)
            jac += math.log(float(d))
        expected.append(jac)
    torch.testing.assert_close(
        dens(zeta), torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=1e-12
    )
    with pytest.raises(ValueError, match="coordinates"):
        dens(torch.zeros(1, 3, dtype=torch.float64))


def test_eta_search_and_stopping_rule() -> None:
    # the rule is relative, so the target carries a normalising constant of -100
    res = advi(
        lambda z: gauss(z) - 100.0,
        torch.zeros(2, dtype=torch.float64),
        generator=torch.Generator().manual_seed(2),
        n_grad_samples=5,
        max_iters=5000,
        adapt_iters=30,
    )
    assert res.eta in ETA_GRID
    assert res.converged
    assert res.status.startswith("converged")
    assert res.iterations < 5000
    assert res.iterations % 100 == 0
    # the rule fired on relative ELBO changes below the tolerance
    (i1, e1), (i2, e2) = res.elbo_history[-2:]
    assert i2 - i1 == 100
    assert abs((e2 - e1) / e1) < 0.05


def test_no_finite_step_size_is_reported_not_raised() -> None:
    res = advi(
        lambda z: z.sum(-1) * math.nan,
        torch.zeros(2, dtype=torch.float64),
        generator=torch.Generator().manual_seed(0),
    )
    assert res.status == "failed"
    assert not res.converged
    assert math.isnan(res.elbo)


def test_advi_rejects_bad_arguments() -> None:
    g = torch.Generator()
    with pytest.raises(ValueError, match="family"):
        advi(gauss, torch.zeros(2), family="diag", generator=g)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="init"):
        advi(gauss, torch.zeros(2, 2), generator=g)
    with pytest.raises(ValueError, match="NaN"):
        advi(gauss, torch.tensor([0.0, math.nan]), generator=g)
    with pytest.raises(ValueError, match="positive"):
        advi(gauss, torch.zeros(2), generator=g, max_iters=0)
