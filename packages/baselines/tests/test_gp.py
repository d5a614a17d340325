from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from amorgp.baselines.gp import (
    constrain,
    exact_predictive,
    initial_raw,
    log_marginal_likelihood,
    log_of_raw,
    log_prior,
    prior_raw,
    raw_of_log,
    slot_kind,
    unconstrain,
)
from amorgp.baselines.testing import dense_log_marginal_likelihood, dense_predictive
from amorgp.baselines.testing import synthetic_dataset as make_data
from amorgp.kernel_grammar import NOISE, PAPER_VOCABULARY, DimWiseStructure, base_symbol
from amorgp.lazy_kernels import PaddedBatch

STRUCTS = ["SE + PER", "(SE*LIN + LIN)@0 * (SE*PER)@1", "LIN*PER + SE"]


def _random_params(batch: PaddedBatch, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    params = 0.3 + torch.rand(batch.param_shape, generator=g, dtype=torch.float64)
    noise = 0.05 + 0.1 * torch.rand(batch.batch_size, generator=g, dtype=torch.float64)
    return params, noise


def _hyper(structure: DimWiseStructure, params: torch.Tensor) -> dict[tuple[int, int, str], float]:
    return {
        (p.dim, p.addend, p.param): float(params[p.dim, p.addend, p.slot])
        for p in structure.param_names()
    }


def _ragged_batch() -> tuple[
    PaddedBatch, list[tuple[torch.Tensor, torch.Tensor]], list[DimWiseStructure]
]:
    datasets = [make_data(12, 2, seed=1), make_data(7, 2, seed=2), make_data(9, 1, seed=3)]
    structs = [
        DimWiseStructure.parse(STRUCTS[0], 2),
        DimWiseStructure.parse(STRUCTS[1]),
        DimWiseStructure.parse(STRUCTS[2], 1),
    ]
    return PaddedBatch.from_datasets(datasets, structs), datasets, structs


def test_log_marginal_likelihood_matches_dense_numpy_on_a_ragged_batch() -> None:
    batch, datasets, structs = _ragged_batch()
    params, noise = _random_params(batch, 0)
    value = log_marginal_likelihood(batch, params, noise)
    for b, ((X, y), s) in enumerate(zip(datasets, structs, strict=True)):
        ref = dense_log_marginal_likelihood(
            X.numpy(), y.numpy(), s, _hyper(s, params[b]), float(noise[b])
        )
        assert float(value[b]) == pytest.approx(ref, rel=1e-10)


def test_padding_does_not_change_the_likelihood() -> None:
    batch, _, _ = _ragged_batch()
    params, noise = _random_params(batch, 1)
    together = log_marginal_likelihood(batch, params, noise)
    for b in range(batch.batch_size):
        alone = batch.select(b)
        n = int(alone.point_mask.sum())
        d = int(alone.dim_mask.sum())
        cropped = PaddedBatch.from_datasets(
            [(alone.X[0, :n, :d], alone.y[0, :n])], alone.structures()
        )
        p = params[b : b + 1, :d, : cropped.symbols.shape[2]]
        torch.testing.assert_close(
            log_marginal_likelihood(cropped, p, noise[b : b + 1])[0],
            together[b],
            rtol=1e-12,
            atol=1e-12,
        )


def test_failed_element_is_nan_and_others_are_unaffected() -> None:
    batch, _, _ = _ragged_batch()
    params, noise = _random_params(batch, 2)
    ok = log_marginal_likelihood(batch, params, noise)
    params = params.clone()
    params[1, 0, 0, 0] = math.inf
    value = log_marginal_likelihood(batch, params, noise)
    assert math.isnan(float(value[1]))
    torch.testing.assert_close(value[[0, 2]], ok[[0, 2]])


def test_constrain_is_the_shared_transform_and_inverts() -> None:
    batch, _, _ = _ragged_batch()
    params, noise = _random_params(batch, 3)
    raw, raw_noise = unconstrain(batch, params, noise)
    p2, n2 = constrain(batch, raw, raw_noise)
    _, used = slot_kind(batch)
    torch.testing.assert_close(p2[used], params[used], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(n2, noise, rtol=1e-12, atol=1e-12)
    assert bool((p2[~used] == 1.0).all())


def test_log_space_is_log_of_theta_minus_floor_and_inverts() -> None:
    """``z = log(theta - floor)``: ``exp(z) = softplus(raw)`` in closed form, both ways, with
    finite unit-free gradients in the linear tail and beyond exp's range."""
    raw = torch.tensor(
        [-800.0, -40.0, -30.5, -29.5, -5.0, 0.0, 3.0, 50.0, 700.0],
        dtype=torch.float64,
        requires_grad=True,
    )
    z = log_of_raw(raw)
    exact = [math.log(math.log1p(math.exp(r))) if r > -700 else r for r in raw.tolist()]
    torch.testing.assert_close(z, torch.tensor(exact, dtype=torch.float64), rtol=1e-12, atol=1e-12)
    back = raw_of_log(z)
    torch.testing.assert_close(back, raw.detach(), rtol=1e-12, atol=1e-12)
    (g,) = torch.autograd.grad(back.sum(), raw)
    torch.testing.assert_close(g, torch.ones_like(g), rtol=1e-9, atol=1e-9)
    batch, _, _ = _ragged_batch()
    params, noise = _random_params(batch, 4)
    raw_p, raw_n = unconstrain(batch, params, noise)
    p2, n2 = constrain(batch, raw_of_log(log_of_raw(raw_p)), raw_of_log(log_of_raw(raw_n)))
    _, used = slot_kind(batch)
    torch.testing.assert_close(p2[used], params[used], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(n2, noise, rtol=1e-12, atol=1e-12)


def test_initial_raw_is_the_paper_start() -> None:
    batch, _, _ = _ragged_batch()
    params, noise = constrain(batch, *initial_raw(batch))
    _, used = slot_kind(batch)
    torch.testing.assert_close(params[used], torch.ones_like(params[used]))
    torch.testing.assert_close(noise, torch.full_like(noise, 0.04))


def test_log_prior_matches_scipy() -> None:
    batch, _, structs = _ragged_batch()
    params, noise = _random_params(batch, 4)
    lp = log_prior(batch, params, noise)
    for b, s in enumerate(structs):
        ref = scipy.stats.expon(scale=1.0 / NOISE.prior.rate).logpdf(float(noise[b]))
        for p in s.param_names():
            prior = base_symbol(p.symbol).params[p.slot].prior
            ref += scipy.stats.gamma(prior.shape, scale=1.0 / prior.rate).logpdf(
                float(params[b, p.dim, p.addend, p.slot])
            )
        assert float(lp[b]) == pytest.approx(ref, rel=1e-10)


def test_prior_raw_is_deterministic_and_valid() -> None:
    batch, _, _ = _ragged_batch()
    a = prior_raw(batch, torch.Generator().manual_seed(9))
    b = prior_raw(batch, torch.Generator().manual_seed(9))
    torch.testing.assert_close(a, b)
    params, noise = constrain(batch, *a)
    assert bool(torch.isfinite(log_marginal_likelihood(batch, params, noise)).all())


def test_exact_predictive_matches_dense_numpy() -> None:
    batch, datasets, structs = _ragged_batch()
    params, noise = _random_params(batch, 5)
    g = torch.Generator().manual_seed(0)
    X_new = torch.rand(3, 4, 2, generator=g, dtype=torch.float64)
    mean, var = exact_predictive(batch, params, noise, X_new)
    for b, ((X, y), s) in enumerate(zip(datasets, structs, strict=True)):
        d = X.shape[1]
        m_ref, v_ref = dense_predictive(
            X.numpy(), y.numpy(), X_new[b, :, :d].numpy(), s, _hyper(s, params[b]), float(noise[b])
        )
        np.testing.assert_allclose(mean[b].numpy(), m_ref, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(var[b].numpy(), v_ref, rtol=1e-8, atol=1e-10)
    _, var_f = exact_predictive(batch, params, noise, X_new, include_noise=False)
    torch.testing.assert_close(var - var_f, noise[:, None].expand_as(var))


def test_from_pairs_rejects_mismatches() -> None:
    X, y = make_data(5, 2)
    with pytest.raises(ValueError, match="one structure per dataset"):
        PaddedBatch.from_datasets([(X, y)], [])
    with pytest.raises(ValueError, match="dimensions"):
        PaddedBatch.from_datasets([(X, y)], [DimWiseStructure.parse("SE", 1)])
    with pytest.raises(ValueError, match="vocabulary"):
        PaddedBatch.from_datasets([(X, y)], [DimWiseStructure.parse("MAT52", 2)], PAPER_VOCABULARY)
