"""The refinement's objective (:class:`amorgp.amortizer.stages.objective.LogMarginalLikelihood`)
against a dense numpy float64 oracle: values, and gradients by central differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer.stages.objective import LogMarginalLikelihood
from amorgp.amortizer.testing import oracle_covariance
from amorgp.kernel_grammar import FLOORS, DimWiseStructure, ParamKind


def _dense_lml(X: np.ndarray, y: np.ndarray, s: DimWiseStructure, theta: np.ndarray) -> float:
    """The registry's numpy reference covariance, then scipy's logpdf."""
    cov = oracle_covariance(X, s, theta)
    return float(multivariate_normal(np.zeros(len(y)), cov).logpdf(y))


@pytest.mark.parametrize(
    "kernel",
    [
        "SE + PER",
        "(SE + LIN*PER)@0 * (SE*PER + LIN)@1",
        "(MAT52 + RQ)@0 * (SE*LIN + PER)@1",
        "SE",
        "LIN",
    ],
)
def test_value_and_gradient_match_the_dense_oracle(kernel: str) -> None:
    rng = np.random.default_rng(0)
    n = 30
    s = DimWiseStructure.coerce(kernel, 2)
    d = s.n_dims
    X = rng.uniform(0, 1, (n, d))
    y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=n)
    f = LogMarginalLikelihood(torch.tensor(X), torch.tensor(y), s)
    m = f.floors.numel()
    z = torch.tensor(rng.uniform(-1.5, 0.5, m))
    floors = f.floors.numpy()

    def oracle(zz: np.ndarray) -> float:
        return _dense_lml(X, y, s, floors + np.exp(zz))

    value, grad = f.value_and_grad(z)
    assert float(value) == pytest.approx(oracle(z.numpy()), rel=1e-10, abs=1e-9)
    h = 1e-5
    fd = np.array(
        [(oracle(z.numpy() + h * e) - oracle(z.numpy() - h * e)) / (2 * h) for e in np.eye(m)]
    )
    np.testing.assert_allclose(grad.numpy(), fd, rtol=1e-5, atol=1e-6)
    # through autograd, as L-BFGS uses it
    zz = z.clone().requires_grad_(True)
    f.value(zz).backward()
    assert zz.grad is not None
    np.testing.assert_allclose(zz.grad.numpy(), grad.numpy(), rtol=1e-12)
    # the covariance's buffer is reused: another point, then this one again, as fresh
    f.value_and_grad(z + 0.7)
    again, grad_again = f.value_and_grad(z)
    assert float(again) == pytest.approx(float(value), rel=1e-13, abs=1e-12)
    np.testing.assert_allclose(grad_again.numpy(), grad.numpy(), rtol=1e-11, atol=1e-12)


def test_log_parameters_round_trip() -> None:
    s = DimWiseStructure.coerce("SE + SE*PER", 1)
    f = LogMarginalLikelihood(torch.zeros(5, 1, dtype=torch.float64), torch.zeros(5), s)
    params = torch.tensor([[[2.0, 0.3, 1.0, 1.0], [0.5, 0.7, 1.1, 0.2]]], dtype=torch.float64)
    z = f.to_log(params, torch.tensor(0.01, dtype=torch.float64))
    assert float(z[-1]) == pytest.approx(np.log(0.01 - FLOORS[ParamKind.NOISE]))
    back, noise = f.from_log(z)
    torch.testing.assert_close(back[0, 1], params[0, 1], rtol=1e-12, atol=0)
    torch.testing.assert_close(back[0, 0, :2], params[0, 0, :2], rtol=1e-12, atol=0)
    assert float(noise) == pytest.approx(0.01, rel=1e-12)


def test_absorbs_matches_torch_broadcasting() -> None:
    """The in-place test of the summed exponents against torch's broadcasting rules."""
    import itertools

    from amorgp.amortizer.stages.kernel_parts import absorbs

    shapes = [(), (1,), (3,), (1, 1), (4, 1), (1, 3), (4, 3), (2, 4, 3), (2, 1, 3), (1, 4, 1)]
    for a, b in itertools.product(shapes, repeat=2):
        try:
            expected = torch.broadcast_shapes(a, b) == torch.Size(a)
        except RuntimeError:
            expected = False
        assert absorbs(torch.Size(a), torch.Size(b)) == expected, (a, b)


def test_objectives_sharing_their_pairs_match_the_dense_oracle() -> None:
    """The kernels of one refinement share one set of packed pairs and one covariance
    buffer (``share=``); evaluated alternately, each equals the dense oracle."""
    rng = np.random.default_rng(1)
    n = 25
    X = rng.uniform(0, 1, (n, 2))
    y = np.sin(5 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    s1 = DimWiseStructure.coerce("SE", 2)
    s2 = DimWiseStructure.coerce("(SE + PER)@0 * LIN@1", 2)
    f1 = LogMarginalLikelihood(Xt, yt, s1)
    f2 = LogMarginalLikelihood(Xt, yt, s2, share=f1)
    assert f2.r[0] is f1.r[0]  # one set for both
    assert f2.lower is f1.lower
    for _ in range(2):
        for f, s in ((f1, s1), (f2, s2)):
            z = torch.tensor(rng.uniform(-1.5, 0.5, f.floors.numel()))
            theta = (f.floors + z.exp()).numpy()
            value, _ = f.value_and_grad(z)
            assert float(value) == pytest.approx(_dense_lml(X, y, s, theta), rel=1e-10)
    with pytest.raises(ValueError, match="same tensor"):
        LogMarginalLikelihood(Xt.clone(), yt, s2, share=f1)
