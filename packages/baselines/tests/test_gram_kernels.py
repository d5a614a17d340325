from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.gaussian_process.kernels import RBF, Matern

from amorgp.baselines.gram_kernels import (
    GRAM_KERNELS,
    GramBlocks,
    gram_kernel,
    squared_distances,
    squared_distances_cross,
)
from amorgp.core.errors import OptionError


def _features(n: int = 9, m: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, m))


def _relu_oracle(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Arc-cosine kernel of order 1 from features: |a| |b| (sin t + (pi - t) cos t) / pi."""
    na, nb = np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1)
    cos = np.clip(A @ B.T / np.outer(na, nb), -1, 1)
    t = np.arccos(cos)
    return np.outer(na, nb) * (np.sin(t) + (np.pi - t) * cos) / np.pi


def test_squared_distances_from_the_gram_matrix_equal_feature_distances() -> None:
    F = _features()
    G = torch.as_tensor(F @ F.T)
    np.testing.assert_allclose(squared_distances(G).numpy(), cdist(F, F) ** 2, atol=1e-12)
    Fa, Fb = F[:4], F[4:]
    R = squared_distances_cross(
        torch.as_tensor((Fa**2).sum(1)), torch.as_tensor(Fa @ Fb.T), torch.as_tensor((Fb**2).sum(1))
    )
    np.testing.assert_allclose(R.numpy(), cdist(Fa, Fb) ** 2, atol=1e-12)


@pytest.mark.parametrize(("name", "ls", "var"), [("SE", 0.7, 1.3), ("MAT52", 1.9, 0.4)])
def test_stationary_kernel_from_gram_equals_kernel_from_features(
    name: str, ls: float, var: float
) -> None:
    F = _features()
    oracle = RBF(ls) if name == "SE" else Matern(ls, nu=2.5)
    K = gram_kernel(name).matrix(torch.as_tensor(F @ F.T), ls, var)
    np.testing.assert_allclose(K.numpy(), var * oracle(F), rtol=1e-10, atol=1e-12)


def test_relu_kernel_from_gram_equals_closed_form_and_monte_carlo_of_features() -> None:
    F = _features(6, 3)
    K = gram_kernel("RELU").matrix(torch.as_tensor(F @ F.T), variance=2.0).numpy()
    np.testing.assert_allclose(K, 2.0 * _relu_oracle(F, F), rtol=1e-10, atol=1e-12)
    # independent: the covariance of sqrt(2) relu(w . x), w ~ N(0, I), by Monte Carlo
    w = np.random.default_rng(1).normal(size=(400_000, 3))
    h = np.sqrt(2.0) * np.maximum(w @ F.T, 0.0)
    mc = h.T @ h / len(w)
    np.testing.assert_allclose(K / 2.0, mc, rtol=0.02, atol=0.02 * np.abs(mc).max())


@pytest.mark.parametrize("name", list(GRAM_KERNELS))
def test_submatrix_commutes_with_the_kernel_and_blocks_agree(name: str) -> None:
    F = _features(10, 5, seed=2)
    G = torch.as_tensor(F @ F.T)
    k = gram_kernel(name)
    K = k.matrix(G, 0.8, 1.5)
    idx = torch.tensor([7, 2, 5, 0])
    sub = G[idx][:, idx]
    torch.testing.assert_close(k.matrix(sub, 0.8, 1.5), K[idx][:, idx], rtol=1e-12, atol=1e-12)
    i, t = torch.arange(4), torch.arange(4, 10)
    blocks = GramBlocks(G[i][:, i], G[t][:, i], G.diagonal()[t])
    Kb = k.blocks(blocks, 0.8, 1.5)
    torch.testing.assert_close(Kb.ii, K[i][:, i], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Kb.ti, K[t][:, i], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(Kb.tt, K.diagonal()[t], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(GRAM_KERNELS))
def test_batched_parameters_equal_a_loop_and_matrices_are_psd(name: str) -> None:
    g = torch.Generator().manual_seed(3)
    F = torch.randn(3, 8, 4, generator=g, dtype=torch.float64)
    G = F @ F.mT
    ls = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    var = torch.tensor([1.0, 0.3, 2.0], dtype=torch.float64)
    k = gram_kernel(name)
    K = k.matrix(G, ls, var)
    for b in range(3):
        torch.testing.assert_close(K[b], k.matrix(G[b], float(ls[b]), float(var[b])))
    assert bool((torch.linalg.eigvalsh(K) > -1e-10).all())
    torch.testing.assert_close(K, K.mT)


@pytest.mark.parametrize("name", list(GRAM_KERNELS))
def test_gradients_match_finite_differences(name: str) -> None:
    F = torch.as_tensor(_features(5, 3, seed=4)).requires_grad_(True)
    ls = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)
    k = gram_kernel(name)
    assert torch.autograd.gradcheck(lambda F, ls: k.matrix(F @ F.T, ls, 1.2), (F, ls))


def test_unknown_kernel_is_refused() -> None:
    with pytest.raises(OptionError, match="SE, MAT52, RELU"):
        gram_kernel("periodic")
    assert gram_kernel("se") is GRAM_KERNELS["SE"]


def test_se_cross_block_gradients_in_every_input_match_finite_differences() -> None:
    """The SE cross block's closed-form derivatives (diagonals, cross Gram, batched
    lengthscale and variance) against finite differences, and its value against the
    feature-space SE kernel."""
    gen = torch.Generator().manual_seed(3)
    A = torch.randn(2, 6, 3, generator=gen, dtype=torch.float64)
    B = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    da = (A * A).sum(-1).requires_grad_(True)
    db = (B * B).sum(-1).requires_grad_(True)
    G = (A @ B.mT).requires_grad_(True)
    ls = torch.tensor([0.8, 1.7], dtype=torch.float64, requires_grad=True)
    var = torch.tensor([1.3, 0.6], dtype=torch.float64, requires_grad=True)
    k = gram_kernel("SE")
    assert torch.autograd.gradcheck(lambda *a: k.cross(*a), (da, G, db, ls, var))
    R = torch.cdist(A, B) ** 2
    expected = var[:, None, None] * torch.exp(-R / (2.0 * ls[:, None, None] ** 2))
    torch.testing.assert_close(k.cross(da, G, db, ls, var), expected)
    # scalar (0-d and float) parameters
    ls0 = torch.tensor(1.1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda G, ls0: k.cross(da.detach(), G, db.detach(), ls0, 0.7), (G, ls0)
    )


def test_se_cross_clamps_negative_squared_distances_like_the_composed_expression() -> None:
    """Inconsistent Gram inputs (``R < 0``): the value is ``s^2`` and no gradient flows
    through the clamped entries, as with ``clamp_min`` on ``R``."""
    d = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    G = torch.tensor([[1.2, 0.1], [0.3, 1.0], [0.0, 0.9]], dtype=torch.float64)
    db = torch.tensor([1.0, 0.5], dtype=torch.float64)  # R[0, 0] = -0.4, R[2, 1] = -0.8
    G.requires_grad_(True)
    K = gram_kernel("SE").cross(d, G, db, 0.9, 1.5)
    (g,) = torch.autograd.grad((K * torch.arange(1.0, 7.0).view(3, 2)).sum(), G)
    Gc = G.detach().clone().requires_grad_(True)
    R = squared_distances_cross(d, Gc, db)
    Kc = 1.5 * torch.exp(-R / (2 * 0.81))
    (gc,) = torch.autograd.grad((Kc * torch.arange(1.0, 7.0).view(3, 2)).sum(), Gc)
    torch.testing.assert_close(K, Kc)
    torch.testing.assert_close(g, gc)
    assert float(K[0, 0].detach()) == 1.5
    assert float(g[0, 0]) == 0.0
    assert float(g[2, 1]) == 0.0
