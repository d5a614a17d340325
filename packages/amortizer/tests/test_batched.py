"""The batched inference path (one evaluator call, the calibration on its matrices, one
batched factorisation) against the per-kernel dense reference and numpy oracles."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.networks.structures import KernelBatch
from amorgp.amortizer.stages import batched
from amorgp.amortizer.stages.calibrate import calibrate
from amorgp.amortizer.stages.results import conditioned_posterior
from amorgp.amortizer.stages.spectra import Tridiagonal, _tridiagonal
from amorgp.amortizer.testing import oracle_log_marginal_likelihood as _oracle_lml
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import CholeskySolver, SolverPlan

DENSE = SolverPlan(CholeskySolver, memory_budget=2**30)
"""A dense plan: the reference posteriors factor their own matrices."""

KERNELS = ["SE", "LIN", "(SE + PER)@0 * LIN@1", "SE*PER + LIN", "(LIN + SE)@0 * (SE*PER)@1"]


def _data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 5, size=(n, d)) * np.arange(1, d + 1)
    y = np.sin(X).sum(1) * 3 + 10 + 0.3 * rng.normal(size=n)
    return X, y


def _noisy(pred: tuple[torch.Tensor, torch.Tensor | None], noise: torch.Tensor) -> tuple:
    """A latent predictive plus the noise variance (the observed predictive)."""
    mean, var = pred
    assert var is not None
    return mean, var + noise


@pytest.mark.parametrize("calibrated", [True, False])
def test_batched_path_matches_the_per_kernel_dense_reference(
    amz: Amortizer, calibrated: bool
) -> None:
    """Hyperparameters, likelihoods and predictions of the batched path equal those of the
    per-kernel path (calibration by one eigendecomposition per kernel on its own matrix, a
    posterior that factors its own matrix), and the likelihood a numpy oracle's."""
    X, y = _data(60, 2)
    Xt = _data(15, 2, seed=3)[0]
    fast = amz.infer_many(X, y, KERNELS, calibrate=calibrated, starts=1, refine=0)
    norm, Xn, yn, st = amz.prepare(X, y, KERNELS)
    params, noise, _, _ = amz.predict_networks(Xn, yn, st)
    if calibrated:
        cal = calibrate(Xn, yn, st, amz.vocabulary, params, noise, method="eigh")
        params, noise = cal.params, cal.noise
    for i, (s, r) in enumerate(zip(st, fast, strict=True)):
        assert r.factored  # the likelihood came with the batched factor
        ref_params = params[i, : s.n_dims, : s.max_addends].double()
        torch.testing.assert_close(r.params, ref_params, rtol=1e-9, atol=1e-12)
        assert r.noise == pytest.approx(float(noise[i]), rel=1e-9)
        ref = conditioned_posterior(s, params[i], float(noise[i]), Xn, yn, plan=DENSE)
        assert r.log_marginal_likelihood == pytest.approx(
            float(ref.log_marginal_likelihood()), rel=1e-10
        )
        expect = _oracle_lml(Xn.numpy(), yn.numpy(), s, r.params.numpy(), r.noise)
        assert r.log_marginal_likelihood == pytest.approx(expect, rel=1e-8)
        Xq = norm.transform_x(torch.as_tensor(Xt)).to(Xn)
        mean, var = r._predict_normalized(Xq, include_noise=True)
        ref_mean, ref_var = _noisy(ref.predict(Xq), ref.noise)
        torch.testing.assert_close(mean, ref_mean, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(var, ref_var, rtol=1e-9, atol=1e-10)
        assert r.posterior.factorizations == 1  # predictions reuse the batched factor


def test_multistart_winners_are_factored_once_at_their_own_parameters(amz: Amortizer) -> None:
    """With several starts (the default), a kernel whose winner is not the network's
    prediction is factored again at the winner's parameters: its likelihood is the numpy
    oracle's at the returned parameters, and predictions reuse that one factor."""
    X, y = _data(60, 2)
    Xt = _data(15, 2, seed=3)[0]
    fits = amz.infer_many(X, y, KERNELS, refine=0)
    norm, Xn, yn, st = amz.prepare(X, y, KERNELS)
    for s, r in zip(st, fits, strict=True):
        expect = _oracle_lml(Xn.numpy(), yn.numpy(), s, r.params.numpy(), r.noise)
        assert r.log_marginal_likelihood == pytest.approx(expect, rel=1e-8)
        ref = conditioned_posterior(s, r.params, r.noise, Xn, yn, plan=DENSE)
        Xq = norm.transform_x(torch.as_tensor(Xt)).to(Xn)
        mean, var = r._predict_normalized(Xq, include_noise=True)
        ref_mean, ref_var = _noisy(ref.predict(Xq), ref.noise)
        torch.testing.assert_close(mean, ref_mean, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(var, ref_var, rtol=1e-9, atol=1e-10)
        assert r.posterior.factorizations == 1


def test_score_matches_a_dense_oracle() -> None:
    """``batched.score`` of several parameter sets (one structure repeated) is the numpy
    multivariate-normal log density of each."""
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V

    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = np.sin(X).sum(1) + 0.1 * rng.normal(size=40)
    st = [DimWiseStructure.parse(k, 2, V) for k in ("SE + PER", "SE + PER", "LIN", "SE*LIN")]
    g = torch.Generator().manual_seed(0)
    params = 0.3 + 2 * torch.rand(4, 2, 2, V.max_params, generator=g, dtype=torch.float64)
    noise = torch.tensor([0.1, 0.01, 0.3, 0.05], dtype=torch.float64)
    got = batched.score(torch.as_tensor(X), torch.as_tensor(y), st, V, params, noise)
    for i, s in enumerate(st):
        p = params[i, :, : s.max_addends].numpy()
        assert float(got[i]) == pytest.approx(_oracle_lml(X, y, s, p, float(noise[i])), rel=1e-9)
    # a small chunk budget factors one kernel at a time: the same values
    one = batched.score(
        torch.as_tensor(X), torch.as_tensor(y), st, V, params, noise, budget=8 * 40 * 40
    )
    torch.testing.assert_close(one, got, rtol=1e-12, atol=0)


def test_score_marks_an_indefinite_matrix_minus_infinity() -> None:
    K = torch.tensor([[[1.0, 2.0], [2.0, 1.0]], [[2.0, 0.5], [0.5, 1.0]]], dtype=torch.float64)
    f = batched.factor(K.clone(), torch.tensor([1.0, -1.0]), torch.zeros(2), max_tries=0)
    assert bool(f.failed[0])
    assert f.lml[0] == -math.inf
    A = K[1].numpy()
    expect = multivariate_normal(np.zeros(2), A).logpdf([1.0, -1.0])
    assert float(f.lml[1]) == pytest.approx(expect, rel=1e-12)


def test_tridiagonal_profile_matches_the_closed_form() -> None:
    """``y^T (K + rI)^{-1} y`` and ``log det(K + rI)`` from the tridiagonal recurrence
    give the profile likelihood that numpy's solve and slogdet give."""
    rng = np.random.default_rng(2)
    n = 30
    X = rng.normal(size=(n, 3))
    Ks = np.stack(
        [np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1) / ell**2) for ell in (0.5, 2.0)]
    )
    y = rng.normal(size=n)
    spec = _tridiagonal(torch.as_tensor(Ks), torch.as_tensor(y))
    assert isinstance(spec, Tridiagonal)
    log_r = torch.tensor([[-6.0, -1.0, 2.0], [-3.0, 0.0, 4.0]], dtype=torch.float64)
    lml, s = spec.profile(log_r)
    for b in range(2):
        for j in range(3):
            A = Ks[b] + math.exp(float(log_r[b, j])) * np.eye(n)
            quad = y @ np.linalg.solve(A, y)
            logdet = np.linalg.slogdet(A)[1]
            s_exp = quad / n
            lml_exp = -0.5 * (n * (math.log(s_exp) + 1 + math.log(2 * math.pi)) + logdet)
            assert float(s[b, j]) == pytest.approx(s_exp, rel=1e-9)
            assert float(lml[b, j]) == pytest.approx(lml_exp, rel=1e-9)
    noise = torch.tensor([[0.1], [0.02]], dtype=torch.float64)
    exact = spec.exact(noise)
    for b in range(2):
        cov = Ks[b] + float(noise[b, 0]) * np.eye(n)
        expect = multivariate_normal(np.zeros(n), cov).logpdf(y)
        assert float(exact[b, 0]) == pytest.approx(expect, rel=1e-9)


def test_tridiagonal_and_eigh_calibrations_agree(amz: Amortizer) -> None:
    X, y = _data(80, 2, seed=4)
    _norm, Xn, yn, st = amz.prepare(X, y, KERNELS)
    params, noise, _, _ = amz.predict_networks(Xn, yn, st)
    a = calibrate(Xn, yn, st, amz.vocabulary, params, noise, method="tridiagonal")
    b = calibrate(Xn, yn, st, amz.vocabulary, params, noise, method="eigh")
    torch.testing.assert_close(a.scale, b.scale, rtol=1e-7, atol=0)
    torch.testing.assert_close(a.noise, b.noise, rtol=1e-7, atol=0)
    torch.testing.assert_close(a.gain, b.gain, rtol=1e-6, atol=1e-9)


def test_batched_path_reads_no_value_back_from_the_device() -> None:
    """Kernel matrices, calibration (its device route, batched ``eigh``) and the batched
    factorisation run on the ``meta`` device, where any read-back would raise: on a GPU
    they queue without waiting."""
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V

    st = [DimWiseStructure.parse(k, 2, V) for k in ("SE + PER", "LIN", "SE*LIN")]
    meta = {"dtype": torch.float64, "device": "meta"}
    X, y = torch.randn(30, 2, **meta), torch.randn(30, **meta)
    params = torch.rand(3, 2, 2, V.max_params, **meta)
    noise = torch.rand(3, **meta)
    assert batched.score(X, y, st, V, params, noise).shape == (3,)
    Km = batched.kernel_matrices(X, st, V, params)
    cal = calibrate(X, y, st, V, params, noise, matrices=Km)
    f = batched.factor(Km, y, cal.noise, cal.scale)
    assert f.L.shape == (3, 30, 30)
    assert f.lml.device.type == "meta"


@pytest.mark.parametrize("path", ["batched", "cg"])
def test_result_holds_a_posterior_equal_to_the_exact_gp_path(
    tiny_checkpoint: Path, path: str
) -> None:
    """``KernelResult.posterior`` is a ``lazy_kernels.Posterior`` (the batched factor where
    that path ran, dense CG under a small memory budget) whose predictions and likelihood
    equal those of a posterior built afresh (``Posterior.from_kernel(backend="auto")`` on
    the same normalised data) to 1e-9."""
    from amorgp.lazy_kernels import (
        EVALUATOR_MATRICES_NO_GRAPH,
        CGSolver,
        CholeskySolver,
        DimWiseKernel,
        Posterior,
    )

    n = 40 if path == "batched" else 90
    X, y = _data(n, 2, seed=5)
    budget = 4 * 2**30 if path == "batched" else (EVALUATOR_MATRICES_NO_GRAPH + 1) * 8 * n * n
    a = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", memory_budget=budget)
    fits = a.infer_many(X, y, KERNELS[:3], starts=1, refine=0)
    norm, Xn, yn, st = a.prepare(X, y, KERNELS[:3])
    Xq = norm.transform_x(torch.as_tensor(_data(12, 2, seed=6)[0])).to(Xn)
    for s, r in zip(st, fits, strict=True):
        assert isinstance(r.posterior, Posterior)
        kind = CholeskySolver if path == "batched" else CGSolver
        assert type(r.posterior.solver) is kind
        assert r.factored is (path == "batched")
        old = Posterior.from_kernel(
            DimWiseKernel(s, r.params.clone()),
            Xn,
            yn,
            r.noise,
            backend="auto",
            memory_budget=budget,
            chunk_budget=256 * 2**20,
            **a.gp_options,
        )
        assert old.backend == r.posterior.backend
        mean, var = r.posterior.predict(Xq)
        ref_mean, ref_var = old.predict(Xq)
        assert var is not None
        assert ref_var is not None
        torch.testing.assert_close(mean, ref_mean, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(var, ref_var, rtol=1e-9, atol=1e-9)
        lml = float(old.log_marginal_likelihood())
        assert r.log_marginal_likelihood == pytest.approx(lml, rel=1e-9)


def test_the_structures_are_encoded_once_per_call(
    amz: Amortizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``infer_many`` encodes its kernels once (a ``KernelBatch``); every stage reads that
    encoding, and a sub-batch is the rows of the grammar's own encoding of the whole."""
    from amorgp.amortizer.networks import forward, structures
    from amorgp.amortizer.stages import calibrate as calibration
    from amorgp.amortizer.stages import multistart, null_starts, pipeline
    from amorgp.kernel_grammar import PAPER_VOCABULARY, encode

    calls: list[int] = []
    real = structures.encode

    def counting(structures, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(len(structures))
        return real(structures, *args, **kwargs)

    for module in (structures, batched, forward, calibration, multistart, null_starts, pipeline):
        if hasattr(module, "encode"):
            monkeypatch.setattr(module, "encode", counting)
    X, y = _data(60, 1)
    kernels = ["SE", "SE + PER", "LIN + SE*PER"]
    amz.infer_many(X, y, kernels, refine=2)
    assert calls == [3]
    st = [DimWiseStructure.coerce(k, 1, PAPER_VOCABULARY) for k in kernels]
    batch = KernelBatch(st, PAPER_VOCABULARY)
    sub = batch[[2, 0]]
    sym, mask = (torch.as_tensor(a) for a in encode(st, PAPER_VOCABULARY))
    assert torch.equal(sub.symbols, sym[[2, 0]])
    assert torch.equal(sub.mask, mask[[2, 0]])
    assert list(sub) == [st[2], st[0]]
    assert batch[1:].structures == (st[1], st[2])


def test_log_product_is_the_sum_of_the_logarithms() -> None:
    """The log-determinant's blocks of pivots: the sum of the pivots' logarithms over
    twelve decades, ``nan`` for a negative pivot and ``-inf`` for a zero one."""
    from amorgp.amortizer.stages.spectra import _log_product

    rng = np.random.default_rng(5)
    for n in (1, 7, 8, 30, 81):
        g = 10.0 ** rng.uniform(-9, 3, size=(n, 4, 5))
        np.testing.assert_allclose(_log_product(g), np.log(g).sum(0), rtol=1e-13, atol=1e-12)
    g = 10.0 ** rng.uniform(-3, 3, size=(20, 3))
    g[4, 0], g[5, 0] = -1.0, -2.0  # two negative pivots: their product is positive
    g[7, 1] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _log_product(g)
    assert np.isnan(out[0])
    assert out[1] == -np.inf
    assert out[2] == pytest.approx(np.log(g[:, 2]).sum(), rel=1e-13)


def test_the_coarse_to_fine_search_finds_the_best_grid_value() -> None:
    """The grid search reads a quarter of the grid, then the values near its best: the
    ratio it returns is at least as good as the best of the whole grid, the profile
    computed from a dense eigendecomposition (kernels whose profiles peak at very
    different ratios, some twice)."""
    from amorgp.amortizer.stages import calibrate as cal
    from amorgp.amortizer.stages.spectra import profile_log_likelihood

    rng = np.random.default_rng(8)
    n = 40
    x = np.sort(rng.uniform(0, 1, n))
    mats, ys = [], []
    for ell, per, noise in [(0.05, 0.3, 1e-3), (0.3, 0.1, 0.1), (1.0, 0.5, 1.0), (0.1, 0.07, 1e-6)]:
        K = np.exp(-0.5 * (x[:, None] - x[None]) ** 2 / ell**2)
        K2 = np.exp(-2 * np.sin(np.pi * np.abs(x[:, None] - x[None]) / per) ** 2)
        mats.append(K + 0.3 * K2)
        f = rng.multivariate_normal(np.zeros(n), K + 1e-9 * np.eye(n))
        ys.append(f + np.sqrt(noise) * rng.normal(size=n))
    for y in ys:  # each target against every kernel: well and badly matched pairs
        Km = torch.as_tensor(np.stack(mats))
        yt = torch.as_tensor(y)
        spec = _tridiagonal(Km, yt)
        B = Km.shape[0]
        s_min = torch.zeros(B, dtype=torch.float64)
        noise = torch.full((B,), 0.1, dtype=torch.float64)
        log_r, _, lml, _ = cal._best_ratio(spec, s_min, noise)
        lam, Q = torch.linalg.eigh(Km)
        z2 = (Q.mT @ yt[:, None].expand(B, n, 1))[..., 0] ** 2
        grid = cal._log_grid(noise)
        dense, s_dense = profile_log_likelihood(lam.clamp_min(0), z2, grid)
        dense = cal._valid(dense, s_dense, grid, s_min)
        best = dense.max(-1).values
        assert bool((lml >= best - 1e-7 * best.abs()).all())
        dense_at, _ = profile_log_likelihood(lam.clamp_min(0), z2, log_r[:, None])
        torch.testing.assert_close(lml, dense_at[:, 0], rtol=1e-9, atol=1e-9)


def test_rows_evaluated_and_calibrated_by_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs on their own points, evaluated and tridiagonalised a few at a time: each
    pair's score is the dense likelihood of its calibrated kernel (its matrix from the
    structure's numpy reference), and chunks of one or of all pairs agree."""
    from amorgp.amortizer.stages import pairs
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V
    from amorgp.kernel_grammar import encode

    rng = np.random.default_rng(3)
    st = [DimWiseStructure.parse(t, 1, V) for t in ("SE + PER", "SE*PER + LIN", "SE") * 3]
    sym, msk = (torch.as_tensor(a) for a in encode(st, V))
    P, n = len(st), 25
    X = torch.as_tensor(np.sort(rng.uniform(0, 1, (P, n, 1)), axis=1))
    Y = torch.as_tensor(np.sin(9 * X[..., 0].numpy()) + 0.1 * rng.normal(size=(P, n)))
    params = torch.as_tensor(0.3 + rng.uniform(size=(P, 1, sym.shape[2], V.max_params)))
    noise = torch.full((P,), 0.05, dtype=torch.float64)
    got = {}
    for chunk in (8 * n * n, 8 * n * n * P):
        monkeypatch.setattr(pairs, "CACHE_BYTES", chunk)
        c = pairs.evaluate_and_calibrate(X, Y, sym, msk, params, noise, V)
        score = c.log_marginal_likelihood
        got[chunk] = (c, score)
        for p, structure in enumerate(st):
            Xp = X[p].numpy()
            K = structure.reference(Xp, Xp, c.params[p, :, : structure.max_addends].numpy())
            cov = K + float(c.noise[p]) * np.eye(n)
            expect = multivariate_normal(np.zeros(n), cov).logpdf(Y[p].numpy())
            assert float(score[p]) == pytest.approx(expect, rel=1e-7)
    (a, sa), (b, sb) = got.values()
    # one matrix or a batch: the same arithmetic but BLAS kernels that round differently,
    # which a smooth kernel at a small noise amplifies
    torch.testing.assert_close(sa, sb, rtol=1e-7, atol=0)
    torch.testing.assert_close(a.params, b.params, rtol=1e-7, atol=0)


def test_no_rows_calibrate_to_nothing() -> None:
    """An empty batch of pairs gives an empty calibration (no chunk to concatenate)."""
    from amorgp.amortizer.stages import pairs
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V

    sym = torch.ones(0, 1, 2, dtype=torch.long)
    msk = torch.ones(0, 1, 2, dtype=torch.bool)
    params = torch.ones(0, 1, 2, V.max_params, dtype=torch.float64)
    noise = torch.ones(0, dtype=torch.float64)
    X, Y = torch.zeros(0, 5, 1, dtype=torch.float64), torch.zeros(0, 5, dtype=torch.float64)
    c = pairs.evaluate_and_calibrate(X, Y, sym, msk, params, noise, V)
    assert c.params.shape == params.shape
    assert c.noise.shape == (0,)
    c = pairs.calibrate_rows(
        torch.zeros(0, 5, 5, dtype=torch.float64), Y, sym, msk, params, noise, V
    )
    assert c.log_marginal_likelihood.shape == (0,)


def _covariances(n: int = 12, rows: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` symmetric positive definite ``n x n`` covariances and targets."""
    g = torch.Generator().manual_seed(3)
    F = torch.randn(rows, n, n, generator=g, dtype=torch.float64)
    A = F @ F.mT / n + 0.1 * torch.eye(n, dtype=torch.float64)
    return A, torch.randn(n, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_exact_solve_flags_non_finite_and_indefinite_rows(requires_grad: bool) -> None:
    """Rows with a NaN or an infinity (off the diagonal or on it) or that are not positive
    definite get ``ok`` False, ``-inf`` and the identity as factor; the other rows'
    likelihoods equal scipy's multivariate normal, whatever their neighbours."""
    A, y = _covariances()
    A = A.clone()
    A[1, 4, 2] = A[1, 2, 4] = math.nan
    A[2, 7, 3] = A[2, 3, 7] = math.inf
    A[3, 5, 5] = math.inf
    A[4] -= 5.0 * torch.eye(A.shape[-1], dtype=torch.float64)  # indefinite
    L, alpha, lml, ok = batched.exact_solve(A.requires_grad_(requires_grad), y)
    assert ok.tolist() == [True, False, False, False, False, True]
    eye = torch.eye(A.shape[-1], dtype=torch.float64)
    for b in range(A.shape[0]):
        if bool(ok[b]):
            want = multivariate_normal(np.zeros(len(y)), A[b].detach().numpy()).logpdf(y.numpy())
            assert float(lml[b]) == pytest.approx(want, rel=1e-10)
            solved = np.linalg.solve(A[b].detach().numpy(), y.numpy())
            np.testing.assert_allclose(alpha[b].detach().numpy(), solved, rtol=1e-9)
        else:
            assert float(lml[b]) == -math.inf
            assert torch.equal(L[b].detach(), eye)
            assert torch.isfinite(alpha[b]).all()
