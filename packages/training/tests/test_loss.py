"""Tests of the training losses against a dense numpy/scipy oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer import testing
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import Prediction, build_model
from amorgp.kernel_grammar import PAPER_VOCABULARY
from amorgp.lazy_kernels import PaddedBatch
from amorgp.simulator.testing import dense_covariance, structure_of
from amorgp.training.loss import gp_nll_per_point, phase1_loss, phase2_loss

VOCAB = PAPER_VOCABULARY


def _oracle_nll(batch: PaddedBatch, params: torch.Tensor, noise: torch.Tensor) -> np.ndarray:
    """Dense float64 numpy/scipy per-point NLL, one dataset at a time."""
    out = []
    for b in range(batch.X.shape[0]):
        pts = batch.point_mask[b].nonzero().squeeze(-1).numpy()
        dims = batch.dim_mask[b].nonzero().squeeze(-1).numpy()
        symbols = torch.where(batch.symbol_mask, batch.symbols, torch.zeros_like(batch.symbols))
        X = batch.X[b].numpy()[np.ix_(pts, dims)]
        cov = dense_covariance(X, structure_of(symbols, params, b, VOCAB), float(noise[b]))
        n = len(pts)
        out.append(-multivariate_normal(np.zeros(n), cov).logpdf(batch.y[b, pts].numpy()) / n)
    return np.array(out)


@pytest.fixture
def batch() -> PaddedBatch:
    g = torch.Generator().manual_seed(7)
    b = testing.random_padded_batch(g, VOCAB, batch=4, n_max=9, d_max=2, l_max=2)
    # padding must hold valid numbers for the kernel evaluator; shuffle points so that
    # the present ones are not a prefix
    X = torch.where(b.point_mask[:, :, None] & b.dim_mask[:, None, :], b.X, torch.zeros_like(b.X))
    y = torch.where(b.point_mask, b.y, torch.zeros_like(b.y))
    perm = torch.randperm(X.shape[1], generator=g)
    return PaddedBatch(
        X[:, perm], y[:, perm], b.point_mask[:, perm], b.dim_mask, b.symbols, b.symbol_mask, VOCAB
    )


def _random_params(batch: PaddedBatch, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    B, D, L = batch.symbols.shape
    params = 0.2 + torch.rand(B, D, L, VOCAB.max_params, generator=g, dtype=torch.float64)
    noise = 0.05 + 0.1 * torch.rand(B, generator=g, dtype=torch.float64)
    return params, noise


def test_nll_matches_dense_oracle(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    nll, failed = gp_nll_per_point(batch, params, noise)
    assert not bool(failed.any())
    np.testing.assert_allclose(nll.numpy(), _oracle_nll(batch, params, noise), rtol=1e-9)
    out = phase1_loss(Prediction(params, noise), batch)
    np.testing.assert_allclose(float(out.loss), _oracle_nll(batch, params, noise).mean(), rtol=1e-9)


def test_failed_and_invalid_elements_are_masked_and_counted(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    params = params.clone()
    params[1, 0, 0, 0] = float("nan")  # a diverged prediction
    valid = torch.tensor([True, True, True, False])
    out = phase1_loss(Prediction(params, noise), batch, valid=valid)
    oracle = _oracle_nll(batch, *_random_params(batch))
    assert out.n_failed == 1
    assert out.used.tolist() == [True, False, True, False]
    np.testing.assert_allclose(float(out.loss), oracle[[0, 2]].mean(), rtol=1e-9)


def test_an_overflowing_kernel_is_a_failed_element_not_an_error(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    params = params.clone()
    params[2] = 1e300  # finite parameters whose kernel matrix overflows
    nll, failed = gp_nll_per_point(batch, params, noise)
    assert failed.tolist() == [False, False, True, False]
    assert bool(nll[2].isnan())
    out = phase1_loss(Prediction(params, noise), batch)
    oracle = _oracle_nll(batch, *_random_params(batch))
    assert int(out.n_failed) == 1
    np.testing.assert_allclose(float(out.loss), oracle[[0, 1, 3]].mean(), rtol=1e-9)


def test_gradient_flows_only_from_used_elements(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    params.requires_grad_(True)
    valid = torch.tensor([True, False, True, True])
    phase1_loss(Prediction(params, noise), batch, valid=valid).loss.backward()
    assert params.grad is not None
    assert bool((params.grad[1] == 0).all())
    assert bool(params.grad[0].abs().sum() > 0)


def test_phase1_gradient_matches_finite_differences(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    noise = noise.clone().requires_grad_(True)

    def f(nz: torch.Tensor) -> torch.Tensor:
        return phase1_loss(Prediction(params, nz), batch).loss

    torch.autograd.gradcheck(f, (noise,), eps=1e-6, atol=1e-6)


def test_phase2_loss_is_alpha_nll_plus_beta_std_mse(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    true_noise = torch.tensor([0.01, 0.04, 0.09, 0.16], dtype=torch.float64)
    positive = torch.tensor([True, True, False, True])
    out = phase2_loss(
        Prediction(params, noise),
        batch,
        true_noise=true_noise,
        is_positive=positive,
    )
    oracle = _oracle_nll(batch, params, noise)
    keep = positive.numpy()
    mse = ((np.sqrt(true_noise.numpy()) - np.sqrt(noise.numpy())) ** 2)[keep].mean()
    np.testing.assert_allclose(float(out.noise_mse), mse, rtol=1e-12)
    np.testing.assert_allclose(float(out.loss), 10 * oracle[keep].mean() + mse, rtol=1e-9)


def test_model_loss_falls_on_fixed_batch() -> None:
    """A tiny model fitted to one simulated batch lowers its mean per-point NLL."""
    from amorgp.simulator.config import SimulatorConfig
    from amorgp.simulator.simulator import Simulator

    torch.manual_seed(0)
    sim = Simulator(SimulatorConfig(n_min=10, n_max=20, d_max=2, vocabulary=VOCAB))
    b = sim.sample(6, torch.Generator().manual_seed(0))
    model = build_model(PRESETS["tiny"].network)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    shown = b.presented()
    losses = []
    for _ in range(25):
        out = phase1_loss(model(shown), shown, valid=b.valid)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(float(out.loss.detach()))
    assert losses[-1] < losses[0] - 0.05, losses


def test_nll_reads_parameters_from_the_batch(batch: PaddedBatch) -> None:
    params, noise = _random_params(batch)
    with_params = batch.with_params(params, noise)
    a, _ = gp_nll_per_point(with_params)
    b, _ = gp_nll_per_point(batch, params, noise)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match="needs params"):
        gp_nll_per_point(batch)


def test_nll_is_unchanged_by_extra_padding(batch: PaddedBatch) -> None:
    """An extra padded point, dimension and addend (junk values) change no element's NLL."""
    params, noise = _random_params(batch)
    ref, _ = gp_nll_per_point(batch, params, noise)
    B, N, D = batch.X.shape
    L = batch.symbols.shape[2]
    pad = lambda t, *p, v=0: torch.nn.functional.pad(t, p, value=v)  # noqa: E731
    wider = PaddedBatch(
        pad(batch.X, 0, 1, 0, 1, v=0.37),
        pad(batch.y, 0, 1, v=-2.5),
        pad(batch.point_mask, 0, 1, v=False),
        pad(batch.dim_mask, 0, 1, v=False),
        pad(batch.symbols, 0, 1, 0, 1, v=1),
        pad(batch.symbol_mask, 0, 1, 0, 1, v=False),
        VOCAB,
    )
    wider_params = pad(params, 0, 0, 0, 1, 0, 1, v=7.0)
    assert wider.X.shape == (B, N + 1, D + 1)
    assert wider.symbols.shape[2] == L + 1
    out, _ = gp_nll_per_point(wider, wider_params, noise)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_loss_reads_no_value_back_from_the_device() -> None:
    """The training loss on a batch moved with ``PaddedBatch.to`` runs forward and backward
    on the ``meta`` device, which holds no values: any read-back (``.cpu()``, ``.item()``,
    ``bool(t)``, ``nonzero``) would raise.  It stands in for a CUDA step in
    synchronisation-debug mode."""
    from amorgp.amortizer import testing
    from amorgp.kernel_grammar import PAPER_VOCABULARY as V
    from amorgp.training.loss import gp_nll_per_point

    g = torch.Generator().manual_seed(7)
    b = testing.random_padded_batch(g, V, batch=4, n_max=9, d_max=3, l_max=3)
    B, D, L = b.symbols.shape
    params = 0.2 + torch.rand(B, D, L, V.max_params, generator=g, dtype=torch.float64)
    noise = 0.05 + 0.1 * torch.rand(B, generator=g, dtype=torch.float64)
    moved = b.to("meta")
    p = params.to("meta").requires_grad_()
    nll, _ = gp_nll_per_point(moved.with_params(p, noise.to("meta")))
    nll.sum().backward()
    assert p.grad is not None
    assert p.grad.shape == params.shape


def _oracle_profile(batch: PaddedBatch, params: torch.Tensor, b: int) -> tuple[float, float, float]:
    """``(min over s, sigma^2 of the dense per-point NLL of s K + sigma^2 I, s, sigma^2)``
    of element ``b``: scipy's Nelder-Mead on ``(log s, log sigma^2)``, numpy evaluating."""
    from scipy.optimize import minimize

    pts = batch.point_mask[b].nonzero().squeeze(-1).numpy()
    dims = batch.dim_mask[b].nonzero().squeeze(-1).numpy()
    symbols = torch.where(batch.symbol_mask, batch.symbols, torch.zeros_like(batch.symbols))
    X = batch.X[b].numpy()[np.ix_(pts, dims)]
    C0 = dense_covariance(X, structure_of(symbols, params, b, VOCAB), 0.0)
    y, n = batch.y[b, pts].numpy(), len(pts)

    def nll(u: np.ndarray) -> float:
        cov = np.exp(u[0]) * C0 + np.exp(u[1]) * np.eye(n)
        return -multivariate_normal(np.zeros(n), cov, allow_singular=True).logpdf(y) / n

    best = min(
        (minimize(nll, np.array(u0), method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-12})
         for u0 in ([0.0, -2.0], [0.0, -6.0], [1.0, 0.0])),
        key=lambda r: r.fun,
    )  # fmt: skip
    return float(best.fun), float(np.exp(best.x[0])), float(np.exp(best.x[1]))


def test_calibrated_nll_is_the_profile_optimum(batch: PaddedBatch) -> None:
    """The calibrated NLL of every element is the minimum over a global scale and the
    noise of the dense NLL (scipy's optimum), to the calibration grid's resolution; the
    scale and noise it uses are scipy's to a few per cent."""
    from amorgp.training.loss import calibrated_nll_per_point, calibrated_scale_noise

    params, _ = _random_params(batch, seed=3)
    nll, failed = calibrated_nll_per_point(batch, params)
    s, noise = calibrated_scale_noise(batch, params)
    assert not bool(failed.any())
    for b in range(batch.X.shape[0]):
        best, s_ref, noise_ref = _oracle_profile(batch, params, b)
        assert best - 1e-9 <= float(nll[b]) <= best + 2e-3
        # (below 1e-3 the oracle's covariance is numerically singular, or the kernel
        # vanishes where the grid's largest noise-to-signal ratio, 1e4, stops the scale)
        if noise_ref > 1e-3:
            assert float(noise[b]) == pytest.approx(noise_ref, rel=0.15)
        else:
            assert float(noise[b]) < 1e-3
        if s_ref > 1e-3:
            assert float(s[b]) == pytest.approx(s_ref, rel=0.15)


def test_calibrated_nll_gradient_is_the_envelope(batch: PaddedBatch) -> None:
    """Its gradient with respect to the network's parameters is the dense NLL's at the
    held scale and noise (central finite differences of the numpy oracle)."""
    from amorgp.training.loss import calibrated_nll_per_point, calibrated_scale_noise

    params, _ = _random_params(batch, seed=4)
    s, noise = calibrated_scale_noise(batch, params)
    p = params.clone().requires_grad_(True)
    nll, _ = calibrated_nll_per_point(batch, p)
    (grad,) = torch.autograd.grad(nll.sum(), p)
    symbols = torch.where(batch.symbol_mask, batch.symbols, torch.zeros_like(batch.symbols))
    b = 0
    pts = batch.point_mask[b].nonzero().squeeze(-1).numpy()
    dims = batch.dim_mask[b].nonzero().squeeze(-1).numpy()
    X, y, n = batch.X[b].numpy()[np.ix_(pts, dims)], batch.y[b, pts].numpy(), len(pts)

    def held(q: torch.Tensor) -> float:
        C = float(s[b]) * dense_covariance(X, structure_of(symbols, q, b, VOCAB), 0.0)
        cov = C + float(noise[b]) * np.eye(n)
        return -multivariate_normal(np.zeros(n), cov).logpdf(y) / n

    used = batch.used_slots()[b].nonzero()
    for j in used[:4].tolist():
        h = 1e-6
        up, down = params.clone(), params.clone()
        up[(b, *j)] += h
        down[(b, *j)] -= h
        fd = (held(up) - held(down)) / (2 * h)
        assert float(grad[(b, *j)]) == pytest.approx(fd, rel=1e-4, abs=1e-7)


def test_phase1_calibrated_weight_mixes_the_two(batch: PaddedBatch) -> None:
    from amorgp.training.loss import calibrated_nll_per_point

    params, noise = _random_params(batch)
    plain = _oracle_nll(batch, params, noise).mean()
    cal, _ = calibrated_nll_per_point(batch, params)
    out = phase1_loss(Prediction(params, noise), batch, calibrated=0.25)
    np.testing.assert_allclose(float(out.loss), 0.75 * plain + 0.25 * float(cal.mean()), rtol=1e-9)
    assert float(cal.mean()) <= plain  # the calibrated answer is never worse


def test_phase1_calibrated_mask_keeps_the_plain_nll_elsewhere(batch: PaddedBatch) -> None:
    """``calibrated_mask`` (``calibrated_pairs="positive"``): the masked elements mix the
    two terms, the others keep the plain NLL (the scipy oracle) at full weight, and at
    ``w = 1`` a negative pair's noise still learns from it (finite differences)."""
    from amorgp.training.loss import calibrated_nll_per_point

    params, noise = _random_params(batch)
    plain = _oracle_nll(batch, params, noise)
    cal, _ = calibrated_nll_per_point(batch, params)
    mask = torch.tensor([True, False, True, False])
    out = phase1_loss(Prediction(params, noise), batch, calibrated=0.25, calibrated_mask=mask)
    expected = np.where(mask.numpy(), 0.75 * plain + 0.25 * cal.detach().numpy(), plain).mean()
    np.testing.assert_allclose(float(out.loss), expected, rtol=1e-9)
    everywhere = phase1_loss(
        Prediction(params, noise),
        batch,
        calibrated=0.25,
        calibrated_mask=torch.ones(4, dtype=torch.bool),
    )
    unmasked = phase1_loss(Prediction(params, noise), batch, calibrated=0.25)
    np.testing.assert_allclose(float(everywhere.loss), float(unmasked.loss), rtol=1e-12)

    nz = noise.clone().requires_grad_(True)
    full = phase1_loss(Prediction(params, nz), batch, calibrated=1.0, calibrated_mask=mask)
    (grad,) = torch.autograd.grad(full.loss, nz)
    h, b = 1e-6, 1
    up, down = noise.clone(), noise.clone()
    up[b] += h
    down[b] -= h
    fd = (_oracle_nll(batch, params, up)[b] - _oracle_nll(batch, params, down)[b]) / (2 * h) / 4
    assert float(grad[b]) == pytest.approx(fd, rel=1e-5)
    assert float(grad[0]) == 0.0  # a calibrated element's noise is the calibration's


def test_calibrated_pairs_is_checked() -> None:
    from amorgp.amortizer.networks.config import TrainConfig

    assert TrainConfig(calibrated=0.5, calibrated_pairs="positive").calibrated_pairs == "positive"
    with pytest.raises(ValueError, match="calibrated_pairs must be 'all' or 'positive'"):
        TrainConfig(calibrated_pairs="negative")
    with pytest.raises(ValueError, match="a real table's piece has no true structure"):
        TrainConfig(calibrated_pairs="positive", real_tables="pool.npz", real_share=0.5)
