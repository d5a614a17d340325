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
from amorgp.kernel_grammar import OptionError


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
