import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import multivariate_normal

from amorgp.diff_linalg import gp_log_marginal_likelihood
from amorgp.diff_linalg.testing import (
    assert_gradients,
    dense_gp_log_marginal_likelihood,
    random_spd,
)

STRATEGIES = ["pad", "bucket", "loop", "auto"]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _se_batch(n_per: list[int], N: int, gen: torch.Generator):
    """Padded SE kernel batch with random (non-prefix) masks and garbage in the padding."""
    B = len(n_per)
    X = torch.rand(B, N, 1, dtype=torch.float64, generator=gen)
    ls = 0.1 + torch.rand(B, 1, 1, dtype=torch.float64, generator=gen)
    K = torch.exp(-0.5 * (X - X.mT) ** 2 / ls**2)
    y = torch.randn(B, N, dtype=torch.float64, generator=gen)
    mask = torch.zeros(B, N, dtype=torch.bool)
    for i, n in enumerate(n_per):
        mask[i, torch.randperm(N, generator=gen)[:n]] = True
    junk = 1e3 * torch.randn(B, N, N, dtype=torch.float64, generator=gen)
    pad2 = ~(mask.unsqueeze(-1) & mask.unsqueeze(-2))
    K = torch.where(pad2, junk, K)
    y = torch.where(mask, y, 1e3 * torch.ones_like(y))
    noise = 0.05 + torch.rand(B, dtype=torch.float64, generator=gen)
    return K, y, noise, mask


def _scipy_lml(K, y, noise, mask):
    out = []
    for i in range(K.shape[0]):
        m = mask[i].numpy()
        Ki = K[i].numpy()[np.ix_(m, m)] + noise[i].item() * np.eye(m.sum())
        out.append(multivariate_normal(mean=np.zeros(m.sum()), cov=Ki).logpdf(y[i].numpy()[m]))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("fused", [True, False])
def test_unpadded_matches_scipy(fused):
    gen = _gen()
    K = random_spd(7, cond=100.0, batch_shape=(2, 3), generator=gen)
    y = torch.randn(2, 3, 7, dtype=torch.float64, generator=gen)
    noise = torch.full((2, 3), 0.3, dtype=torch.float64)
    out = gp_log_marginal_likelihood(K, y, noise, fused=fused)
    assert out.shape == (2, 3)
    mask = torch.ones(6, 7, dtype=torch.bool)
    ref = _scipy_lml(K.reshape(6, 7, 7), y.reshape(6, 7), noise.reshape(6), mask).reshape(2, 3)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("fused", [True, False])
def test_padding_changes_nothing(strategy, fused):
    K, y, noise, mask = _se_batch([3, 12, 7, 12, 1, 9], 12, _gen(1))
    out = gp_log_marginal_likelihood(K, y, noise, mask, strategy=strategy, fused=fused)
    torch.testing.assert_close(out, _scipy_lml(K, y, noise, mask), atol=1e-8, rtol=1e-10)


@pytest.mark.parametrize("strategy", ["pad", "bucket", "loop"])
@pytest.mark.parametrize("fused", [True, False])
def test_padded_gradients_match_unpadded_dense_autograd(strategy, fused):
    n_per = [4, 9, 6, 2, 9]
    K, y, noise, mask = _se_batch(n_per, 9, _gen(2))
    K.requires_grad_(True)
    y.requires_grad_(True)
    noise.requires_grad_(True)
    w = torch.linspace(0.5, 1.5, len(n_per), dtype=torch.float64)
    out = gp_log_marginal_likelihood(K, y, noise, mask, strategy=strategy, fused=fused)
    gK, gy, gn = torch.autograd.grad((w * out).sum(), (K, y, noise))
    for i in range(len(n_per)):
        m = mask[i]
        Ki = K[i][m][:, m].detach().requires_grad_(True)
        yi = y[i][m].detach().requires_grad_(True)
        ni = noise[i].detach().requires_grad_(True)
        ref = w[i] * dense_gp_log_marginal_likelihood(Ki, yi, ni)
        rK, ry, rn = torch.autograd.grad(ref, (Ki, yi, ni))
        torch.testing.assert_close(gK[i][m][:, m], rK, atol=1e-9, rtol=1e-8)
        torch.testing.assert_close(gy[i][m], ry, atol=1e-9, rtol=1e-8)
        torch.testing.assert_close(gn[i], rn, atol=1e-9, rtol=1e-8)
        # padding receives no gradient
        assert torch.all(gy[i][~m] == 0)
        assert torch.all(gK[i][~m] == 0)


def test_per_point_normalisation():
    n_per = [3, 8, 5]
    K, y, noise, mask = _se_batch(n_per, 8, _gen(3))
    total = gp_log_marginal_likelihood(K, y, noise, mask)
    per = gp_log_marginal_likelihood(K, y, noise, mask, per_point=True)
    torch.testing.assert_close(
        per, _scipy_lml(K, y, noise, mask) / torch.tensor(n_per, dtype=torch.float64)
    )
    torch.testing.assert_close(per * torch.tensor(n_per, dtype=torch.float64), total)


def test_gradcheck_fused_and_gradgradcheck_unfused():
    gen = _gen(4)
    K = random_spd(3, batch_shape=(2,), generator=gen).requires_grad_(True)
    y = torch.randn(2, 3, dtype=torch.float64, generator=gen).requires_grad_(True)
    noise = torch.tensor([0.2, 0.5], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, False, True], [True, True, True]])

    def f(fused):
        return lambda k, yy, nn: gp_log_marginal_likelihood(
            0.5 * (k + k.mT), yy, nn, mask, strategy="pad", fused=fused
        )

    assert_gradients(f(True), [K, y, noise], second_order=False)
    assert_gradients(f(False), [K, y, noise], second_order=True)


@pytest.mark.parametrize("fused", [True, False])
def test_failed_element_is_nan_and_isolated(fused):
    gen = _gen(5)
    K = random_spd(5, batch_shape=(3,), generator=gen)
    K[1] = -10.0 * torch.eye(5, dtype=torch.float64)  # K + noise I negative definite
    K.requires_grad_(True)
    y = torch.randn(3, 5, dtype=torch.float64, generator=gen)
    noise = torch.full((3,), 0.1, dtype=torch.float64)
    out, failed = gp_log_marginal_likelihood(
        K, y, noise, return_failed=True, fused=fused, max_tries=2
    )
    assert failed.tolist() == [False, True, False]
    assert torch.isnan(out[1])
    keep = [0, 2]
    mask = torch.ones(2, 5, dtype=torch.bool)
    ref = _scipy_lml(K.detach()[keep], y[keep], noise[keep], mask)
    torch.testing.assert_close(out[keep], ref)
    (g,) = torch.autograd.grad(out[~failed].sum(), K)
    assert torch.isfinite(g).all()
    assert torch.all(g[1] == 0)


def test_scalar_noise_and_single_matrix():
    gen = _gen(6)
    K = random_spd(5, generator=gen)
    y = torch.randn(5, dtype=torch.float64, generator=gen)
    out = gp_log_marginal_likelihood(K, y, 0.25)
    assert out.shape == ()
    ref = _scipy_lml(K[None], y[None], torch.tensor([0.25]), torch.ones(1, 5, dtype=torch.bool))
    torch.testing.assert_close(out, ref[0])


def test_input_validation():
    K = torch.eye(3, dtype=torch.float64).expand(2, 3, 3)
    y = torch.zeros(2, 3, dtype=torch.float64)
    noise = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="y must have shape"):
        gp_log_marginal_likelihood(K, torch.zeros(2, 4, dtype=torch.float64), noise)
    with pytest.raises(ValueError, match="noise must broadcast"):
        gp_log_marginal_likelihood(K, y, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="positive"):
        gp_log_marginal_likelihood(K, y, torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="NaN"):
        gp_log_marginal_likelihood(K, torch.full((2, 3), float("nan"), dtype=torch.float64), noise)
    with pytest.raises(ValueError, match="mask must have shape"):
        gp_log_marginal_likelihood(K, y, noise, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        gp_log_marginal_likelihood(K, y, noise, torch.ones(2, 3))
    with pytest.raises(ValueError, match="at least one valid point"):
        gp_log_marginal_likelihood(K, y, noise, torch.tensor([[True] * 3, [False] * 3]))
    with pytest.raises(ValueError, match="unknown strategy"):
        gp_log_marginal_likelihood(K, y, noise, strategy="magic")  # type: ignore[arg-type]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("strategy", ["pad", "bucket"])
def test_cuda_matches_cpu(strategy):
    K, y, noise, mask = _se_batch([3, 12, 7, 12, 1, 9], 12, _gen(7))
    cpu = gp_log_marginal_likelihood(K, y, noise, mask, strategy=strategy)
    gpu = gp_log_marginal_likelihood(
        K.cuda(), y.cuda(), noise.cuda(), mask.cuda(), strategy=strategy
    )
    torch.testing.assert_close(gpu.cpu(), cpu)


@settings(max_examples=15, deadline=None)
@given(
    n_per=st.lists(st.integers(1, 8), min_size=1, max_size=6),
    extra=st.integers(0, 3),
    strategy=st.sampled_from(["pad", "bucket", "loop"]),
    n_buckets=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_padding_invariance_property(n_per, extra, strategy, n_buckets, seed):
    N = max(n_per) + extra
    K, y, noise, mask = _se_batch(n_per, N, _gen(seed))
    out = gp_log_marginal_likelihood(K, y, noise, mask, strategy=strategy, n_buckets=n_buckets)
    for i in range(len(n_per)):
        m = mask[i]
        ref = dense_gp_log_marginal_likelihood(K[i][m][:, m], y[i][m], noise[i])
        torch.testing.assert_close(out[i], ref, atol=1e-8, rtol=1e-9)


def test_readme_example_runs_and_matches_scipy():
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)
    assert code is not None
    ns: dict = {}
    exec(code.group(1), ns)  # the example prints; its variables are checked here
    K, y, mask, noise = ns["K"].detach(), ns["y"], ns["mask"], ns["noise"]
    ref = _scipy_lml(K, y, noise, mask) / mask.sum(-1)
    torch.testing.assert_close(ns["lml"].detach(), ref)
    assert ns["lengthscale"].grad is not None


@pytest.mark.parametrize("fused", [True, False])
def test_validate_false_gives_the_same_values_and_gradients(fused):
    K, y, noise, mask = _se_batch([3, 12, 7, 12, 1, 9], 12, _gen(3))
    outs = []
    for validate in (True, False):
        Kv = K.clone().requires_grad_(True)
        val, failed = gp_log_marginal_likelihood(
            Kv, y, noise, mask, return_failed=True, fused=fused, validate=validate
        )
        val.sum().backward()
        outs.append((val.detach(), failed, Kv.grad))
    torch.testing.assert_close(outs[1][0], _scipy_lml(K, y, noise, mask), atol=1e-8, rtol=1e-10)
    for a, b in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(a, b)
    bad = K.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        gp_log_marginal_likelihood(bad, y, noise, mask)
    with pytest.raises(ValueError, match="shape"):  # shapes are still checked
        gp_log_marginal_likelihood(K, y[:, :5], noise, mask, validate=False)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_unvalidated_ragged_batch_never_synchronises():
    K, y, noise, mask = _se_batch([3, 12, 7, 12, 1, 9], 12, _gen(7))
    K[2] = -torch.eye(12, dtype=torch.float64)  # a failure is flagged, not read back
    cpu, cpu_failed = gp_log_marginal_likelihood(
        K, y, noise, mask, per_point=True, return_failed=True
    )
    Kc = K.cuda().requires_grad_(True)
    yc, nc, mc = y.cuda(), noise.cuda(), mask.cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        val, failed = gp_log_marginal_likelihood(
            Kc, yc, nc, mc, per_point=True, return_failed=True, validate=False
        )
        torch.where(failed, 0.0, val).sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert failed.cpu().tolist() == cpu_failed.tolist()
    ok = ~cpu_failed
    torch.testing.assert_close(val.detach().cpu()[ok], cpu[ok])
