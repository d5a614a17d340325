from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.diff_linalg.testing import (
    assert_gradients,
    dense_gp_log_marginal_likelihood,
    dense_gp_predictive,
    random_full_rank,
    random_lower_triangular,
    random_orthogonal,
    random_spd,
    random_symmetric,
    torch_settings,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("cond", [1.0, 10.0, 1e4])
def test_random_spd_condition_number(cond):
    A = random_spd(6, cond=cond, batch_shape=(3,), generator=_gen())
    torch.testing.assert_close(A, A.mT)
    ev = torch.linalg.eigvalsh(A)
    assert torch.all(ev > 0)
    torch.testing.assert_close(
        ev[..., -1] / ev[..., 0], torch.full((3,), cond, dtype=torch.float64)
    )


def test_generators_are_deterministic_and_well_formed():
    a = random_spd(4, generator=_gen(5))
    b = random_spd(4, generator=_gen(5))
    assert torch.equal(a, b)
    Q = random_orthogonal(5, batch_shape=(2,), generator=_gen(1))
    torch.testing.assert_close(Q @ Q.mT, torch.eye(5, dtype=torch.float64).expand(2, 5, 5))
    L = random_lower_triangular(5, cond=100.0, generator=_gen(2))
    assert torch.all(L.triu(1) == 0)
    assert torch.all(L.diagonal() > 0)
    M = random_full_rank(3, 6, cond=50.0, generator=_gen(3))
    s = torch.linalg.svdvals(M)
    torch.testing.assert_close(s[0] / s[-1], torch.tensor(50.0, dtype=torch.float64))
    S = random_symmetric(4, gap=0.3, generator=_gen(4))
    ev = torch.linalg.eigvalsh(S)
    torch.testing.assert_close(ev.diff(), torch.full((3,), 0.3, dtype=torch.float64))
    assert random_spd(3, dtype=torch.float32, generator=_gen()).dtype == torch.float32
    with pytest.raises(ValueError, match="cond"):
        random_spd(3, cond=0.5, generator=_gen())


class _WrongSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * x  # should be 2 g x


def test_assert_gradients_detects_wrong_backward_and_accepts_right_one():
    x = torch.randn(3, dtype=torch.float64, generator=_gen()).requires_grad_(True)
    with pytest.raises(AssertionError, match="gradcheck failed"):
        assert_gradients(_WrongSquare.apply, [x], second_order=False)
    assert_gradients(lambda t: t * t, [x])
    with pytest.raises(ValueError, match="float64"):
        assert_gradients(lambda t: t * t, [x.float().detach().requires_grad_(True)])


def test_dense_lml_matches_scipy_batched_and_numpy() -> None:
    K = random_spd(5, cond=50.0, batch_shape=(3,), generator=_gen(4))
    y = torch.randn(3, 5, dtype=torch.float64, generator=_gen(5))
    noise = torch.tensor([0.1, 0.5, 2.0], dtype=torch.float64)
    ref = [
        multivariate_normal(np.zeros(5), K[b].numpy() + noise[b].item() * np.eye(5)).logpdf(
            y[b].numpy()
        )
        for b in range(3)
    ]
    out = dense_gp_log_marginal_likelihood(K, y, noise)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (3,)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)
    as_numpy = dense_gp_log_marginal_likelihood(K.numpy(), y.numpy(), noise.numpy())
    assert isinstance(as_numpy, np.ndarray)
    np.testing.assert_allclose(as_numpy, ref, rtol=1e-12)
    single = dense_gp_log_marginal_likelihood(K[0].numpy(), y[0].numpy(), 0.1)
    assert isinstance(single, float)
    assert single == pytest.approx(ref[0], rel=1e-12)


def test_dense_lml_is_nan_when_not_positive_definite_and_checks_shapes() -> None:
    K = -torch.eye(3, dtype=torch.float64)
    assert torch.isnan(dense_gp_log_marginal_likelihood(K, torch.ones(3), 0.5))
    with pytest.raises(ValueError, match="square"):
        dense_gp_log_marginal_likelihood(torch.ones(2, 3), torch.ones(3), 0.1)
    with pytest.raises(ValueError, match="y must have shape"):
        dense_gp_log_marginal_likelihood(torch.eye(3), torch.ones(4), 0.1)


def test_dense_lml_gradient_in_the_noise_is_the_closed_form() -> None:
    # d/dnoise log N(y | 0, A) = 1/2 (alpha^T alpha - tr A^{-1}),  alpha = A^{-1} y
    K = random_spd(4, cond=10.0, generator=_gen(6))
    y = torch.randn(4, dtype=torch.float64, generator=_gen(7))
    noise = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(dense_gp_log_marginal_likelihood(K, y, noise), noise)
    A_inv = torch.linalg.inv(K + 0.3 * torch.eye(4, dtype=torch.float64))
    alpha = A_inv @ y
    torch.testing.assert_close(g, 0.5 * (alpha @ alpha - torch.trace(A_inv)))


def test_dense_predictive_is_the_gaussian_conditional() -> None:
    # condition the joint Gaussian of (f_train + noise, f_new) on the training targets
    full = random_spd(7, cond=30.0, generator=_gen(8)).numpy()
    K, Ks, Kss = full[:4, :4], full[:4, 4:], full[4:, 4:]
    y = np.array([0.3, -1.0, 0.5, 2.0])
    noise = 0.2
    cov = np.block([[K + noise * np.eye(4), Ks], [Ks.T, Kss]])
    prec = np.linalg.inv(cov)
    # conditional of the last block given the first, via the joint precision
    cond_cov = np.linalg.inv(prec[4:, 4:])
    cond_mean = -cond_cov @ prec[4:, :4] @ y
    mean, var = dense_gp_predictive(K, Ks, np.diag(Kss), y, noise)
    np.testing.assert_allclose(mean, cond_mean, rtol=1e-10)
    np.testing.assert_allclose(var, np.diag(cond_cov) + noise, rtol=1e-10)
    m_t, v_t = dense_gp_predictive(
        *(torch.from_numpy(np.array(a)) for a in (K, Ks, np.diag(Kss), y)),
        noise,
        include_noise=False,
    )
    torch.testing.assert_close(m_t, torch.as_tensor(cond_mean))
    torch.testing.assert_close(v_t, torch.from_numpy(np.diag(cond_cov).copy()))


def test_torch_settings_restores_threads_and_tf32_even_on_error() -> None:
    threads = torch.get_num_threads()
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    other = not tf32[0]
    seen = []

    def body() -> None:
        with torch_settings(num_threads=threads + 1, allow_tf32=other):
            seen.append(
                (
                    torch.get_num_threads(),
                    torch.backends.cuda.matmul.allow_tf32,
                    torch.backends.cudnn.allow_tf32,
                )
            )
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        body()
    assert seen == [(threads + 1, other, other)]
    assert torch.get_num_threads() == threads
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == tf32
    with pytest.raises(ValueError, match="num_threads"), torch_settings(num_threads=0):
        pass


def test_torch_settings_restores_the_deterministic_mode_even_on_error() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    seen = []

    def body() -> None:
        with torch_settings(deterministic=not before):
            seen.append(
                (
                    torch.are_deterministic_algorithms_enabled(),
                    torch.is_deterministic_algorithms_warn_only_enabled(),
                )
            )
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        body()
    assert seen == [(not before, True)]
    assert torch.are_deterministic_algorithms_enabled() == before
