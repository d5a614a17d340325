"""Fisher scoring of a batch of rows (fisher.py) against dense float64 oracles: numpy
kernels from the registry's references, scipy's Gaussian log density, finite differences
and scipy's L-BFGS-B run to convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.stats import multivariate_normal

from amorgp.amortizer.stages.constraints import KernelConstraints
from amorgp.amortizer.stages.fisher import GAIN_TOL, fisher_refine, predicted_gain
from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
from amorgp.amortizer.stages.refine_rows import refine_pairs
from amorgp.amortizer.testing import oracle_covariance
from amorgp.kernel_grammar import DimWiseStructure


def _structure(text: str, d: int) -> DimWiseStructure:
    return DimWiseStructure.coerce(text, d)


def _oracle(X: np.ndarray, y: np.ndarray, s: DimWiseStructure, floors: np.ndarray):
    """The log marginal likelihood as a function of ``z = log(theta - floors)``, and the
    covariance as one."""

    def cov(z: np.ndarray) -> np.ndarray:
        return oracle_covariance(X, s, floors + np.exp(z))

    def lml(z: np.ndarray) -> float:
        return float(multivariate_normal(np.zeros(len(y)), cov(z)).logpdf(y))

    return lml, cov


def _data(B: int, n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(B, n, d, generator=g, dtype=torch.float64)
    f = torch.sin(6 * X).sum(-1)
    y = f + 0.3 * torch.randn(B, n, generator=g, dtype=torch.float64)
    return X, (y - y.mean(1, keepdim=True)) / y.std(1, keepdim=True)


@pytest.mark.parametrize(
    ("kernel", "d"),
    [
        ("SE + SE*PER", 1),
        ("SE*LIN + MAT52", 2),
        ("SE", 3),
        ("LIN", 2),
        ("(SE*PER)@0 * (SE + LIN)@1", 2),
        ("RQ + PER + LIN*PER", 1),
    ],
)
def test_value_gradient_and_fisher_match_dense_oracles(kernel: str, d: int) -> None:
    X, y = _data(3, 25, d, 0)
    s = _structure(kernel, d)
    obj = BatchLogMarginalLikelihood(X, y, s)
    m = obj.floors.numel()
    z = 0.4 * torch.randn(3, m, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lml, grad, fisher = obj.evaluate(z)
    floors = obj.floors.numpy()
    h = 1e-5
    for b in range(3):
        f, cov = _oracle(X[b].numpy(), y[b].numpy(), s, floors)
        zb = z[b].numpy()
        assert float(lml[b]) == pytest.approx(f(zb), rel=1e-10, abs=1e-9)
        fd = np.array([(f(zb + h * e) - f(zb - h * e)) / (2 * h) for e in np.eye(m)])
        np.testing.assert_allclose(grad[b].numpy(), fd, rtol=1e-5, atol=1e-6)
        Ainv = np.linalg.inv(cov(zb))
        dA = [(cov(zb + h * e) - cov(zb - h * e)) / (2 * h) for e in np.eye(m)]
        F = np.array([[0.5 * np.trace(Ainv @ a @ Ainv @ c) for c in dA] for a in dA])
        np.testing.assert_allclose(fisher[b].numpy(), F, rtol=1e-5, atol=1e-7)


def test_a_batch_equals_its_rows_one_at_a_time() -> None:
    X, y = _data(5, 30, 1, 2)
    s = _structure("SE + PER", 1)
    obj = BatchLogMarginalLikelihood(X, y, s)
    m = obj.floors.numel()
    z0 = 0.5 * torch.randn(5, m, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    params, noise = obj.from_log_rows(z0)
    whole = fisher_refine(obj, params, noise, 15)
    for b in range(5):
        one = BatchLogMarginalLikelihood(X[b : b + 1], y[b : b + 1], s)
        r = fisher_refine(one, params[b : b + 1], noise[b : b + 1], 15)
        assert r.status[0] == whole.status[b]
        assert int(r.iterations[0]) == int(whole.iterations[b])
        torch.testing.assert_close(r.params[0], whole.params[b], rtol=1e-5, atol=1e-9)
        torch.testing.assert_close(r.noise[0], whole.noise[b], rtol=1e-5, atol=1e-9)


def test_evaluations_of_different_sizes_share_the_workspace_safely() -> None:
    """The Fisher information's buffers are kept between evaluations of one objective: a
    smaller chunk after a larger one, and the larger again, give what a fresh objective
    gives, and the dense oracle's Fisher information."""
    X, y = _data(3, 20, 2, 5)
    s = _structure("(SE*PER)@0 * (SE + LIN)@1", 2)
    obj = BatchLogMarginalLikelihood(X, y, s)
    m = obj.floors.numel()
    z = 0.3 * torch.randn(3, m, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    first = obj.evaluate(z)
    one = obj.evaluate(z[1:2], torch.tensor([1]))
    again = obj.evaluate(z)
    fresh = BatchLogMarginalLikelihood(X, y, s).evaluate(z)
    for a, b in zip(again, fresh, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(first, fresh, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(one, fresh, strict=True):
        torch.testing.assert_close(a[0], b[1], rtol=1e-10, atol=1e-10)
    _, cov = _oracle(X[1].numpy(), y[1].numpy(), s, obj.floors.numpy())
    zb, h = z[1].numpy(), 1e-5
    Ainv = np.linalg.inv(cov(zb))
    dA = [(cov(zb + h * e) - cov(zb - h * e)) / (2 * h) for e in np.eye(m)]
    F = np.array([[0.5 * np.trace(Ainv @ a @ Ainv @ c) for c in dA] for a in dA])
    np.testing.assert_allclose(one[2][0].numpy(), F, rtol=1e-5, atol=1e-7)


def _scipy_optimum(f, z: np.ndarray) -> tuple[np.ndarray, float]:
    """The local optimum near ``z`` by scipy's L-BFGS-B on the dense oracle (central
    differences), run to tight tolerances."""
    h = 1e-6

    def neg(v: np.ndarray) -> tuple[float, np.ndarray]:
        g = np.array([(f(v + h * e) - f(v - h * e)) / (2 * h) for e in np.eye(len(v))])
        return -f(v), -g

    res = minimize(neg, z, jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-9})
    return res.x, -float(res.fun)


def test_the_stopping_rule_against_the_optimum_of_a_dense_oracle() -> None:
    """A row that stops as converged is within a few tenths of a nat of the optimum
    that scipy's L-BFGS-B reaches from there; a row that did not converge said so."""
    X, y = _data(4, 30, 1, 4)
    s = _structure("SE + LIN", 1)
    obj = BatchLogMarginalLikelihood(X, y, s)
    m = obj.floors.numel()
    z0 = 0.5 * torch.randn(4, m, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    params, noise = obj.from_log_rows(z0)
    ref = fisher_refine(obj, params, noise, 100)
    floors = obj.floors.numpy()
    converged = 0
    for b in range(4):
        f, _ = _oracle(X[b].numpy(), y[b].numpy(), s, floors)
        assert float(ref.start_gain[b]) > GAIN_TOL  # a random start is not an optimum
        zb = obj.to_log_rows(ref.params[b : b + 1], ref.noise[b : b + 1])[0].numpy()
        _, best = _scipy_optimum(f, zb)
        lml = float(ref.log_marginal_likelihood[b])
        assert lml == pytest.approx(f(zb), abs=1e-8)
        if ref.status[b] == "converged":
            converged += 1
            assert best - lml < 3 * GAIN_TOL
            assert float(ref.gain[b]) < GAIN_TOL
        else:
            assert float(ref.gain[b]) >= GAIN_TOL
    assert converged >= 3


def test_an_ard_kernels_variances_move_as_one_product() -> None:
    """``SE`` on three inputs has a variance per input that enters ``K`` only through their
    product: the refinement holds all but the first where they start (the gauge), and
    still reaches the optimum of scipy's L-BFGS-B on the dense oracle."""
    X, y = _data(2, 30, 3, 9)
    s = _structure("SE", 3)
    obj = BatchLogMarginalLikelihood(X, y, s)
    assert obj.gauge.tolist() == [2, 4]  # (variance, lengthscale) per input, then noise
    m = obj.floors.numel()
    z0 = 0.4 * torch.randn(2, m, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    params, noise = obj.from_log_rows(z0)
    ref = fisher_refine(obj, params, noise, 100)
    z = obj.to_log_rows(ref.params, ref.noise)
    torch.testing.assert_close(z[:, obj.gauge], z0[:, obj.gauge], rtol=0, atol=1e-12)
    for b in range(2):
        f, _ = _oracle(X[b].numpy(), y[b].numpy(), s, obj.floors.numpy())
        _, best = _scipy_optimum(f, z0[b].numpy())
        assert ref.status[b] == "converged"
        assert best - float(ref.log_marginal_likelihood[b]) < 3 * GAIN_TOL


@pytest.mark.parametrize(("kernel", "d"), [("SE", 2), ("SE + SE*PER", 1)])
def test_above_the_probe_limit_the_fisher_information_is_estimated_closely(
    kernel: str, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above ``PROBE_POINTS`` the Fisher information comes from random probes: close to
    the exact one (oracle: the exact path, itself checked against finite differences
    above), the same on every call, and the value and gradient are unchanged."""
    import amorgp.amortizer.stages.fisher_objective as fisher_module

    n = fisher_module.PROBE_POINTS + 100
    X, y = _data(1, n, d, 8)
    obj = BatchLogMarginalLikelihood(X, y, _structure(kernel, d))
    z = 0.3 * torch.randn(
        1, obj.floors.numel(), generator=torch.Generator().manual_seed(2), dtype=torch.float64
    )
    lml, grad, probed = obj.evaluate(z)
    _, _, again = obj.evaluate(z)
    torch.testing.assert_close(probed, again, rtol=0.0, atol=0.0)
    monkeypatch.setattr(fisher_module, "PROBE_POINTS", 10**9)
    lml_x, grad_x, exact = obj.evaluate(z)
    assert float(lml[0]) == float(lml_x[0])
    torch.testing.assert_close(grad, grad_x, rtol=1e-10, atol=1e-10)
    assert float((probed - exact).norm() / exact.norm()) < 0.05
    # a Gram matrix of the probes: positive semi-definite, as the exact information is
    eig = torch.linalg.eigvalsh(probed)
    assert float(eig.min()) >= -1e-10 * float(eig.max())
    gain, gain_x = predicted_gain(probed, grad), predicted_gain(exact, grad)
    assert float(gain[0]) == pytest.approx(float(gain_x[0]), rel=0.2)


def test_a_start_at_the_optimum_stops_at_once() -> None:
    X, y = _data(1, 30, 1, 6)
    s = _structure("SE", 1)
    obj = BatchLogMarginalLikelihood(X, y, s)
    f, _ = _oracle(X[0].numpy(), y[0].numpy(), s, obj.floors.numpy())
    zopt, _ = _scipy_optimum(f, np.zeros(obj.floors.numel()))
    params, noise = obj.from_log_rows(torch.tensor(zopt)[None])
    ref = fisher_refine(obj, params, noise, 20)
    assert ref.status == ["converged"]
    assert int(ref.iterations[0]) == 0
    assert float(ref.start_gain[0]) < 1e-6
    _, grad, fisher = obj.evaluate(torch.tensor(zopt)[None])
    assert float(predicted_gain(fisher, grad)[0]) < 1e-6


def test_constraints_fixed_and_bounded_parameters() -> None:
    X, y = _data(2, 30, 1, 7)
    s = _structure("SE", 1)
    cons = KernelConstraints(
        s, fixed={(0, 0, "variance"): 0.8}, bounds={(0, 0, "lengthscale"): (0.05, 0.12)}
    )
    obj = BatchLogMarginalLikelihood(X, y, s, cons)
    params = torch.tensor([[[[0.8, 0.1]]], [[[0.8, 0.07]]]], dtype=torch.float64)
    ref = fisher_refine(obj, params, torch.tensor([0.3, 0.3], dtype=torch.float64), 50)
    assert torch.all(ref.params[:, 0, 0, 0] == 0.8)
    ls = ref.params[:, 0, 0, 1]
    assert torch.all((ls >= 0.05) & (ls <= 0.12))
    # the oracle: the likelihood over the free parameters, bounded, by scipy
    floors = obj.floors.numpy()
    for b in range(2):

        def f(v: np.ndarray, b: int = b) -> float:
            theta = np.array([0.8, v[0], v[1]])
            cov = oracle_covariance(X[b].numpy(), s, theta)
            return float(multivariate_normal(np.zeros(30), cov).logpdf(y[b].numpy()))

        res = minimize(
            lambda v: -f(v), [0.1, 0.3], method="L-BFGS-B",
            bounds=[(0.05, 0.12), (floors[-1] * 1.001, 10.0)],
        )  # fmt: skip
        assert float(ref.log_marginal_likelihood[b]) >= -res.fun - 3 * GAIN_TOL


def test_refine_pairs_puts_each_structure_back_in_its_rows() -> None:
    X, y = _data(3, 25, 1, 8)
    structures = [_structure("SE", 1), _structure("SE + PER", 1)]
    D, L, P = 1, 2, 3
    params = torch.ones(6, D, L, P, dtype=torch.float64)
    params[:, 0, 0, :2] = torch.tensor([1.0, 0.2], dtype=torch.float64)
    params[1::2, 0, 1, :3] = torch.tensor([0.5, 1.0, 0.3], dtype=torch.float64)
    noise = torch.full((6,), 0.2, dtype=torch.float64)
    out = refine_pairs(X, y, structures, params, noise, "auto")
    for k, s in enumerate(structures):
        rows = list(range(k, 6, 2))
        obj = BatchLogMarginalLikelihood(X, y, s)
        alone = fisher_refine(obj, params[rows, :1, : s.max_addends], noise[rows], 100)
        S = alone.params.shape[-1]
        torch.testing.assert_close(out.params[rows, :1, : s.max_addends, :S], alone.params)
        assert [out.status[p] for p in rows] == alone.status
    assert torch.all(out.params[0::2, 0, 1] == 1.0)  # the SE pairs' unused addend
    assert all(math.isfinite(v) for v in out.log_marginal_likelihood)


@pytest.mark.parametrize("constrained", [False, True])
@pytest.mark.parametrize("probed", [False, True])
def test_the_ard_se_closed_form_equals_the_general_path(
    constrained: bool, probed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ARD SE kernel's own evaluation (one exponential, derivatives from the stacked
    squared differences) gives the general path's likelihood, gradient and Fisher
    information, with fixed and bounded parameters and priors, on rows out of order."""
    import amorgp.amortizer.stages.fisher_objective as fisher_mod

    if probed:  # the Fisher information from probes (above PROBE_POINTS points)
        monkeypatch.setattr(fisher_mod, "PROBE_POINTS", 10)
    X, y = _data(4, 30, 3, 7)
    s = _structure("SE", 3)
    cons = (
        KernelConstraints(
            s,
            fixed={(1, 0, "lengthscale"): 0.3},
            bounds={(0, 0, "lengthscale"): (0.05, 2.0)},
            priors=True,
        )
        if constrained
        else None
    )
    fast = BatchLogMarginalLikelihood(X, y, s, cons)
    monkeypatch.setattr(fisher_mod, "SE_ARD", False)
    slow = BatchLogMarginalLikelihood(X, y, s, cons)
    assert fast.se_ard
    assert not slow.se_ard
    m = fast.index.numel()
    z = 0.4 * torch.randn(3, m, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    rows = torch.tensor([3, 0, 2])
    for with_fisher in (True, False):
        a = fast.evaluate(z, rows, with_fisher)
        b = slow.evaluate(z, rows, with_fisher)
        for u, v in zip(a, b, strict=True):
            torch.testing.assert_close(u, v, rtol=1e-10, atol=1e-10)


def test_packed_pairs_match_the_full_matrices_above_the_cached_sizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pairs' indices of a size above ``CACHED_PAIRS`` are built for the objective
    alone, and give the cached ones' values; the packed kernel matrix is the upper
    triangle of the dense oracle's covariance (the noise left out)."""
    import amorgp.amortizer.stages.packed as packed_mod

    X, y = _data(2, 20, 2, 11)
    s = _structure("SE*PER + LIN", 2)
    cached = BatchLogMarginalLikelihood(X, y, s)
    monkeypatch.setattr(packed_mod, "CACHED_PAIRS", 10)
    built = BatchLogMarginalLikelihood(X, y, s)
    assert built.pairs is not None
    assert cached.pairs is not None
    assert built.pairs[0] is not cached.pairs[0]
    m = cached.floors.numel()
    z = 0.3 * torch.randn(2, m, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for with_fisher in (True, False):
        for u, v in zip(
            cached.evaluate(z, None, with_fisher), built.evaluate(z, None, with_fisher), strict=True
        ):
            torch.testing.assert_close(u, v, rtol=0, atol=0)
    theta = cached.floors + z[0].exp()
    cov = oracle_covariance(X[0].numpy(), s, theta.numpy())
    i, j = cached.pairs
    K = cov - float(theta[-1]) * np.eye(20)
    full = torch.empty(20, 20, dtype=torch.float64)
    packed = torch.tensor(K[i.numpy(), j.numpy()])
    np.testing.assert_allclose(cached._unpack(full, packed).numpy(), K, rtol=0, atol=1e-15)
