import numpy as np
import pytest
import scipy.special
import scipy.stats
import torch

from amorgp.diff_linalg import (
    InverseWishart,
    kl_inverse_wishart,
    multivariate_digamma,
    multivariate_lgamma,
)
from amorgp.diff_linalg.testing import random_spd


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("p", [1, 3, 5])
def test_multivariate_lgamma_and_digamma_against_scipy(p):
    a = torch.tensor([2.6, 3.1, 7.25], dtype=torch.float64) + (p - 1) / 2
    ref = np.array([scipy.special.multigammaln(v, p) for v in a.numpy()])
    np.testing.assert_allclose(multivariate_lgamma(a, p).numpy(), ref, rtol=1e-12)
    h = 1e-6
    fd = np.array(
        [
            (scipy.special.multigammaln(v + h, p) - scipy.special.multigammaln(v - h, p)) / (2 * h)
            for v in a.numpy()
        ]
    )
    np.testing.assert_allclose(multivariate_digamma(a, p).numpy(), fd, rtol=1e-7)


def test_multivariate_gamma_domain_errors():
    with pytest.raises(ValueError, match="a > "):
        multivariate_lgamma(torch.tensor([0.9], dtype=torch.float64), 3)
    with pytest.raises(ValueError, match="p must be"):
        multivariate_digamma(torch.tensor([2.0]), 0)


def test_log_prob_matches_scipy():
    gen = _gen()
    psi = random_spd(3, cond=5.0, batch_shape=(2,), generator=gen)
    df = torch.tensor([4.5, 7.0], dtype=torch.float64)
    iw = InverseWishart(psi, df)
    sigma = random_spd(3, cond=20.0, batch_shape=(4, 2), generator=gen)
    lp = iw.log_prob(sigma)
    assert lp.shape == (4, 2)
    for i in range(4):
        for b in range(2):
            ref = scipy.stats.invwishart(df=df[b].item(), scale=psi[b].numpy()).logpdf(
                sigma[i, b].numpy()
            )
            np.testing.assert_allclose(lp[i, b].item(), ref, rtol=1e-10)


def test_rsample_moments_and_support():
    gen = _gen(1)
    psi = random_spd(3, cond=4.0, generator=gen)
    df = 9.0
    iw = InverseWishart(psi, df)
    s = iw.rsample((20000,), generator=gen)
    assert s.shape == (20000, 3, 3)
    torch.testing.assert_close(s, s.mT)
    assert torch.all(torch.linalg.eigvalsh(s) > 0)
    mean = s.mean(0)
    se = s.std(0) / np.sqrt(s.shape[0])
    assert torch.all((mean - iw.mean).abs() < 5 * se)
    # E[log det Sigma] = log|Psi| - p log 2 - psi_3(nu/2)
    ld = torch.linalg.slogdet(s)[1]
    ref = (
        torch.linalg.slogdet(psi)[1]
        - 3 * np.log(2.0)
        - multivariate_digamma(torch.tensor(df / 2, dtype=torch.float64), 3)
    )
    assert abs(ld.mean() - ref) < 5 * ld.std() / np.sqrt(ld.numel())


def test_rsample_is_differentiable_in_df():
    """Pathwise gradient of E[log det Sigma] in nu equals -1/2 sum_j trigamma(nu/2 + (1-j)/2)."""
    gen = _gen(2)
    psi = random_spd(3, generator=gen)
    df = torch.tensor(7.0, dtype=torch.float64, requires_grad=True)
    s = InverseWishart(psi, df).rsample((20000,), generator=gen)
    (g,) = torch.autograd.grad(torch.linalg.slogdet(s)[1].mean(), df)
    a = 3.5 + (1 - np.arange(1, 4)) / 2
    ref = -0.5 * scipy.special.polygamma(1, a).sum()
    assert abs(g.item() - ref) < 0.05 * abs(ref)


def test_kl_matches_monte_carlo():
    gen = _gen(3)
    q = InverseWishart(random_spd(3, cond=3.0, generator=gen), 8.0)
    p = InverseWishart(random_spd(3, cond=6.0, generator=gen), 6.0)
    kl = kl_inverse_wishart(q, p)
    s = q.sample((40000,), generator=gen)
    diff = q.log_prob(s) - p.log_prob(s)
    assert abs(kl - diff.mean()) < 5 * diff.std() / np.sqrt(diff.numel())
    assert kl > 0
    torch.testing.assert_close(kl_inverse_wishart(q, q), torch.tensor(0.0, dtype=torch.float64))


def test_invalid_parameters():
    with pytest.raises(ValueError, match="df must exceed"):
        InverseWishart(torch.eye(3, dtype=torch.float64), 1.5)
    with pytest.raises(ValueError, match="not positive definite"):
        InverseWishart(-torch.eye(3, dtype=torch.float64), 5.0)
    with pytest.raises(ValueError, match="NaN"):
        InverseWishart(torch.full((2, 2), float("nan"), dtype=torch.float64), 5.0)
    iw = InverseWishart(torch.eye(3, dtype=torch.float64), 5.0)
    with pytest.raises(ValueError, match="3 x 3"):
        iw.log_prob(torch.eye(2, dtype=torch.float64))
