"""Posterior.dense (batched dense matrices) against a dense float64 torch.linalg oracle."""

from __future__ import annotations

import math

import pytest
import torch

from amorgp.core.errors import DataError
from amorgp.lazy_kernels import Posterior


def _problem(B: int, n: int, m: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(B, n + m, 2, generator=g, dtype=torch.float64)
    ls = 0.3 + torch.rand(B, 1, 1, generator=g, dtype=torch.float64)
    d = (X[:, :, None, :] - X[:, None, :, :]).pow(2).sum(-1)
    full = torch.exp(-0.5 * d / ls**2)
    y = torch.randn(B, n, generator=g, dtype=torch.float64)
    noise = 0.05 + 0.1 * torch.rand(B, generator=g, dtype=torch.float64)
    return full[:, :n, :n], full[:, :n, n:], full[:, n:, n:], y, noise


def _oracle(K, Ks, Kss, y, noise):
    A = K + noise * torch.eye(K.shape[0], dtype=K.dtype)
    mean = Ks.T @ torch.linalg.solve(A, y)
    var = Kss.diagonal() - (Ks * torch.linalg.solve(A, Ks)).sum(0)
    lml = -0.5 * y @ torch.linalg.solve(A, y) - 0.5 * torch.linalg.slogdet(A)[1]
    return mean, var, lml - 0.5 * K.shape[0] * math.log(2 * math.pi), torch.linalg.inv(A)


def test_batch_equals_oracle_per_element() -> None:
    K, Ks, Kss, y, noise = _problem(3, 12, 5, 0)
    post = Posterior.dense(K, y, noise)
    mean, var = post.predict(Ks, Kss.diagonal(dim1=-2, dim2=-1), include_noise=True)
    lml, inv = post.log_marginal_likelihood(), post.inverse()
    for b in range(3):
        m_ref, v_ref, l_ref, i_ref = _oracle(K[b], Ks[b], Kss[b], y[b], noise[b])
        torch.testing.assert_close(mean[b], m_ref, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(var[b], v_ref + noise[b], rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(lml[b], l_ref, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(inv[b], i_ref, rtol=1e-9, atol=1e-9)
    assert not post.any_failed
    assert float(post.jitter.abs().max()) == 0.0


def test_padded_points_change_nothing() -> None:
    K, Ks, Kss, y, noise = _problem(2, 10, 4, 1)
    mask = torch.ones(2, 10, dtype=torch.bool)
    mask[1, 6:] = False
    garbage = torch.where(mask[:, :, None] & mask[:, None, :], K, torch.full_like(K, 7.0))
    post = Posterior.dense(garbage, y, noise, point_mask=mask)
    mean, var = post.predict(Ks, Kss.diagonal(dim1=-2, dim2=-1))
    lml = post.log_marginal_likelihood()
    m_ref, v_ref, l_ref, _ = _oracle(K[1, :6, :6], Ks[1, :6], Kss[1], y[1, :6], noise[1])
    torch.testing.assert_close(mean[1], m_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(var[1], v_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lml[1], l_ref, rtol=1e-12, atol=1e-10)


def test_log_marginal_likelihood_gradient_equals_oracle_autograd() -> None:
    K, _, _, y, noise = _problem(2, 8, 1, 2)
    K1, y1, s1 = (t.clone().requires_grad_(True) for t in (K, y, noise))
    K2, y2, s2 = (t.clone().requires_grad_(True) for t in (K, y, noise))
    Posterior.dense(K1, y1, s1).log_marginal_likelihood().sum().backward()
    sum(_oracle(K2[b], K2[b, :, :1], K2[b, :1, :1], y2[b], s2[b])[2] for b in range(2)).backward()
    for a, b in ((K1, K2), (y1, y2), (s1, s2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-10)


def test_absolute_jitter_ladder_and_failures() -> None:
    n = 6
    ones = torch.ones(2, n, n, dtype=torch.float64)  # rank one: needs jitter without noise
    ones[1, 0, 0] = float("nan")
    y = torch.arange(float(n), dtype=torch.float64).expand(2, n)
    post = Posterior.dense(ones, y, 0.0, jitter_ladder=(1e-8, 1e-7, 1e-6))
    assert post.failed.tolist() == [False, True]
    assert float(post.jitter[0]) == 1e-8
    A = torch.ones(n, n, dtype=torch.float64) + 1e-8 * torch.eye(n, dtype=torch.float64)
    torch.testing.assert_close(post.alpha[0], torch.linalg.solve(A, y[0]), rtol=1e-6, atol=0.0)
    lml = post.log_marginal_likelihood()
    assert torch.isfinite(lml[0])
    assert torch.isnan(lml[1])
    # negative definite: fails every retry
    neg = -torch.eye(n, dtype=torch.float64)[None]
    assert Posterior.dense(neg, y[:1], 0.1, jitter_ladder=(1e-8,)).failed.tolist() == [True]
    assert Posterior.dense(neg, y[:1], 0.1).failed.tolist() == [True]


def test_shape_errors_are_data_errors() -> None:
    K, _, _, y, noise = _problem(2, 5, 1, 3)
    with pytest.raises(DataError, match="y must have shape"):
        Posterior.dense(K, y[:, :4], noise)
    with pytest.raises(DataError, match="noise must be"):
        Posterior.dense(K, y, torch.ones(3, dtype=torch.float64))
    with pytest.raises(DataError, match="point_mask"):
        Posterior.dense(K, y, noise, point_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(DataError, match="K must have shape"):
        Posterior.dense(K[..., :4], y, noise)
    with pytest.raises(DataError, match="noise must be a scalar"):
        Posterior.dense(K[0], y[0], [0.1, 0.2])
    with pytest.raises(DataError, match="noise must be a scalar"):
        Posterior.dense(K[0], y[0], noise)


@pytest.mark.parametrize("tensor_noise", [False, True])
def test_unbatched_matrix_equals_oracle(tensor_noise: bool) -> None:
    K, Ks, Kss, y, noise = _problem(1, 15, 4, 4)
    K, Ks, Kss, y = K[0], Ks[0], Kss[0], y[0]
    s = noise[0] if tensor_noise else float(noise[0])
    post = Posterior.dense(K, y, s)
    mean, var = post.predict(Ks, Kss.diagonal(), include_noise=True)
    m_ref, v_ref, l_ref, i_ref = _oracle(K, Ks, Kss, y, noise[0])
    torch.testing.assert_close(mean, m_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(var, v_ref + noise[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(post.log_marginal_likelihood(), l_ref, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(post.inverse(), i_ref, rtol=1e-9, atol=1e-9)
    assert post.L.shape == (15, 15)
    assert post.alpha.shape == (15,)
    assert not post.any_failed
    assert not bool(post.failed)
    assert float(post.jitter) == 0.0
    assert post.failed.shape == ()
    assert post.jitter.shape == ()
    assert post.noise.shape == ()
    assert float(post.noise) == float(noise[0])
    assert post.y.dtype == torch.float64
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = post.nothing  # type: ignore[attr-defined]


def test_unbatched_gradient_equals_oracle_autograd() -> None:
    K, _, _, y, noise = _problem(1, 9, 1, 5)
    K1, y1, s1 = (t[0].clone().requires_grad_(True) for t in (K, y, noise))
    K2, y2, s2 = (t[0].clone().requires_grad_(True) for t in (K, y, noise))
    Posterior.dense(K1, y1, s1).log_marginal_likelihood().backward()
    _oracle(K2, K2[:, :1], K2[:1, :1], y2, s2)[2].backward()
    for a, b in ((K1, K2), (y1, y2), (s1, s2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-10)


def test_unbatched_jitter_and_failures_as_batched() -> None:
    n = 6
    y = torch.arange(float(n), dtype=torch.float64)
    ones = torch.ones(n, n, dtype=torch.float64)  # rank one: needs jitter without noise
    post = Posterior.dense(ones, y, 0.0, jitter_ladder=(1e-8, 1e-7, 1e-6))
    assert float(post.jitter) == 1e-8
    assert not post.any_failed
    A = ones + 1e-8 * torch.eye(n, dtype=torch.float64)
    torch.testing.assert_close(post.alpha, torch.linalg.solve(A, y), rtol=1e-6, atol=0.0)
    K = torch.eye(n, dtype=torch.float64)
    for i, j, value in ((2, 2, math.inf), (0, 3, math.nan), (4, 1, math.nan)):
        bad = K.clone()
        bad[i, j] = value  # +inf on the diagonal factors; NaN above it is not read
        post = Posterior.dense(bad, y, 0.1)
        assert post.any_failed
        assert bool(post.failed)
        assert torch.isnan(post.log_marginal_likelihood())
    neg = -torch.eye(n, dtype=torch.float64)
    assert bool(Posterior.dense(neg, y, 0.1, jitter_ladder=(1e-8,)).failed)
    assert bool(Posterior.dense(neg, y, 0.1).failed)
