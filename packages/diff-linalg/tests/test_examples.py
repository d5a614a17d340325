import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.diff_linalg import blr_log_evidence, kalman_nll, sparse_gp_titsias_bound
from amorgp.diff_linalg.testing import assert_gradients, random_spd


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _se(a: torch.Tensor, b: torch.Tensor, ls: float = 0.3) -> torch.Tensor:
    return torch.exp(-0.5 * (a[..., :, None] - b[..., None, :]) ** 2 / ls**2)


def _sparse_problem(gen, batch=(2,), n=12, m=4):
    x = torch.rand(*batch, n, dtype=torch.float64, generator=gen)
    z = torch.linspace(0.1, 0.9, m, dtype=torch.float64).expand(*batch, m)
    Kuu = _se(z, z) + 1e-6 * torch.eye(m, dtype=torch.float64)
    Kuf = _se(z, x)
    kff = torch.ones(*batch, n, dtype=torch.float64)
    y = torch.sin(6 * x) + 0.1 * torch.randn(*batch, n, dtype=torch.float64, generator=gen)
    noise = (
        torch.tensor([0.05, 0.2], dtype=torch.float64)[: batch[0]] if batch else torch.tensor(0.1)
    )
    return Kuu, Kuf, kff, y, noise


def test_titsias_bound_matches_dense_oracle():
    Kuu, Kuf, kff, y, noise = _sparse_problem(_gen())
    out = sparse_gp_titsias_bound(Kuu, Kuf, kff, y, noise)
    for b in range(2):
        Kuu_b, Kuf_b = Kuu[b].numpy(), Kuf[b].numpy()
        Qff = Kuf_b.T @ np.linalg.solve(Kuu_b, Kuf_b)
        s2 = noise[b].item()
        ref = multivariate_normal(np.zeros(12), Qff + s2 * np.eye(12), allow_singular=False).logpdf(
            y[b].numpy()
        )
        ref -= (kff[b].numpy().sum() - np.trace(Qff)) / (2 * s2)
        np.testing.assert_allclose(out[b].item(), ref, rtol=1e-9)


def test_titsias_bound_is_exact_when_inducing_points_are_the_data_and_below_evidence():
    gen = _gen(1)
    x = torch.rand(6, dtype=torch.float64, generator=gen)
    y = torch.randn(6, dtype=torch.float64, generator=gen)
    K = _se(x, x) + 1e-9 * torch.eye(6, dtype=torch.float64)
    exact = multivariate_normal(np.zeros(6), K.numpy() + 0.1 * np.eye(6)).logpdf(y.numpy())
    bound = sparse_gp_titsias_bound(K, K, K.diagonal(), y, 0.1)
    np.testing.assert_allclose(bound.item(), exact, rtol=1e-6)
    z = x[:2]
    loose = sparse_gp_titsias_bound(
        _se(z, z) + 1e-9 * torch.eye(2, dtype=torch.float64), _se(z, x), K.diagonal(), y, 0.1
    )
    assert loose.item() < exact


def test_titsias_bound_gradcheck():
    Kuu, Kuf, kff, y, noise = _sparse_problem(_gen(2), batch=(1,), n=4, m=2)
    Kuf.requires_grad_(True)
    y.requires_grad_(True)
    noise = noise.clone().requires_grad_(True)
    assert_gradients(
        lambda a, b, c: sparse_gp_titsias_bound(Kuu, a, kff, b, c),
        [Kuf, y, noise],
        second_order=False,
    )


@pytest.mark.parametrize("method", ["potrf", "gelqf"])
def test_blr_evidence_matches_dense_gaussian(method):
    gen = _gen(3)
    X = torch.randn(2, 9, 3, dtype=torch.float64, generator=gen)
    y = torch.randn(2, 9, dtype=torch.float64, generator=gen)
    tau2 = torch.tensor([0.5, 2.0], dtype=torch.float64)
    s2 = torch.tensor([0.1, 0.7], dtype=torch.float64)
    out = blr_log_evidence(X, y, prior_var=tau2, noise=s2, method=method)
    for b in range(2):
        cov = s2[b].item() * np.eye(9) + tau2[b].item() * X[b].numpy() @ X[b].numpy().T
        ref = multivariate_normal(np.zeros(9), cov).logpdf(y[b].numpy())
        np.testing.assert_allclose(out[b].item(), ref, rtol=1e-10)


def test_blr_two_ways_agree_in_value_and_gradient():
    gen = _gen(4)
    X = torch.randn(7, 3, dtype=torch.float64, generator=gen).requires_grad_(True)
    y = torch.randn(7, dtype=torch.float64, generator=gen)
    tau2 = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    grads = []
    for method in ("potrf", "gelqf"):
        v = blr_log_evidence(X, y, prior_var=tau2, noise=0.3, method=method)
        grads.append((v.detach(), *torch.autograd.grad(v, (X, tau2))))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
    assert_gradients(
        lambda x, t: blr_log_evidence(x, y[:4], prior_var=t, noise=0.3, method="gelqf"),
        [X.detach()[:4].clone().requires_grad_(True), tau2],
        second_order=False,
    )


def _kalman_dense_nll(y, F, H, Q, R, m0, P0):
    """-log N(vec y | mean, cov) of the joint Gaussian x = G e, y = (I kron H) x + r."""
    T = y.shape[0]
    s = F.shape[0]
    G = np.zeros((T * s, T * s))
    for t in range(T):
        for u in range(t + 1):
            G[t * s : (t + 1) * s, u * s : (u + 1) * s] = np.linalg.matrix_power(F, t - u)
    cov_e = np.zeros((T * s, T * s))
    cov_e[:s, :s] = P0
    for t in range(1, T):
        cov_e[t * s : (t + 1) * s, t * s : (t + 1) * s] = Q
    mean_e = np.zeros(T * s)
    mean_e[:s] = m0
    Hb = np.kron(np.eye(T), H)
    mean_y = Hb @ G @ mean_e
    cov_y = Hb @ G @ cov_e @ G.T @ Hb.T + np.kron(np.eye(T), R)
    return -multivariate_normal(mean_y, cov_y).logpdf(y.reshape(-1))


def _kalman_problem(gen, T=6, s=2, k=1):
    th = 0.3
    F = 0.95 * torch.tensor(
        [[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]], dtype=torch.float64
    )
    H = torch.randn(k, s, dtype=torch.float64, generator=gen)
    Q = random_spd(s, cond=3.0, generator=gen) * 0.1
    R = random_spd(k, generator=gen) * 0.2
    m0 = torch.randn(s, dtype=torch.float64, generator=gen)
    P0 = random_spd(s, generator=gen)
    y = torch.randn(T, k, dtype=torch.float64, generator=gen)
    return y, F, H, Q, R, m0, P0


@pytest.mark.parametrize("k", [1, 2])
def test_kalman_nll_matches_dense_joint_gaussian(k):
    args = _kalman_problem(_gen(5), T=7, k=k)
    out = kalman_nll(*args)
    ref = _kalman_dense_nll(*[a.numpy() for a in args])
    np.testing.assert_allclose(out.item(), ref, rtol=1e-10)


def test_kalman_nll_batched_and_gradcheck():
    gen = _gen(6)
    y, F, H, Q, R, m0, P0 = _kalman_problem(gen, T=3)
    yb = torch.stack([y, 2 * y])
    out = kalman_nll(yb, F, H, Q, R, m0, P0)
    assert out.shape == (2,)
    torch.testing.assert_close(out[1], kalman_nll(2 * y, F, H, Q, R, m0, P0))
    F = F.clone().requires_grad_(True)
    R = R.clone().requires_grad_(True)
    assert_gradients(lambda f, r: kalman_nll(y, f, H, Q, r, m0, P0), [F, R], second_order=False)


def test_example_input_errors():
    gen = _gen(7)
    with pytest.raises(ValueError, match="shapes do not match"):
        sparse_gp_titsias_bound(
            torch.eye(3, dtype=torch.float64),
            torch.zeros(2, 5, dtype=torch.float64),
            torch.ones(5),
            torch.zeros(5),
            0.1,
        )
    X = torch.randn(5, 2, dtype=torch.float64, generator=gen)
    with pytest.raises(ValueError, match="unknown method"):
        blr_log_evidence(
            X, torch.zeros(5, dtype=torch.float64), prior_var=1.0, noise=1.0, method="svd"
        )  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        blr_log_evidence(X, torch.zeros(5, dtype=torch.float64), prior_var=1.0, noise=0.0)
    y, F, H, Q, R, m0, P0 = _kalman_problem(gen)
    with pytest.raises(ValueError, match="shapes do not match"):
        kalman_nll(y, F, H.mT, Q, R, m0, P0)
