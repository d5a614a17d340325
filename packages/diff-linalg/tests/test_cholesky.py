import pytest
import torch

from amorgp.diff_linalg import robust_cholesky
from amorgp.diff_linalg.testing import assert_gradients, random_spd


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_torch_cholesky_on_spd_batch(dtype):
    A = random_spd(6, cond=100.0, batch_shape=(3, 2), dtype=dtype, generator=_gen())
    res = robust_cholesky(A)
    assert res.L.shape == (3, 2, 6, 6)
    assert res.jitter.shape == (3, 2)
    assert res.failed.shape == (3, 2)
    assert not res.failed.any()
    assert torch.all(res.jitter == 0)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(res.L, torch.linalg.cholesky(A), atol=tol, rtol=tol)


def test_jitter_only_on_failing_elements():
    gen = _gen(1)
    A = random_spd(5, cond=10.0, batch_shape=(4,), generator=gen)
    v = torch.randn(5, 1, dtype=torch.float64, generator=gen)
    A[2] = v @ v.mT  # rank one: not positive definite
    res = robust_cholesky(A, jitter=1e-6, max_tries=5)
    assert not res.failed.any()
    assert res.jitter[2] > 0
    assert torch.all(res.jitter[[0, 1, 3]] == 0)
    # the factor reproduces the jittered matrix
    eye = torch.eye(5, dtype=torch.float64)
    torch.testing.assert_close(res.L[2] @ res.L[2].mT, A[2] + res.jitter[2] * eye)
    torch.testing.assert_close(res.L[[0, 1, 3]], torch.linalg.cholesky(A[[0, 1, 3]]))


def test_jitter_escalates_relative_to_diagonal():
    gen = _gen(2)
    v = torch.randn(4, 1, dtype=torch.float64, generator=gen)
    A = 1e3 * (v @ v.mT) - 1e-2 * torch.eye(4, dtype=torch.float64)  # needs jitter > 1e-2
    res = robust_cholesky(A, jitter=1e-9, max_tries=10)
    assert not res.failed
    scale = A.diagonal().abs().mean()
    k = torch.log10(res.jitter / (1e-9 * scale))
    assert torch.isclose(k, k.round(), atol=1e-9)  # a power of ten times the first jitter
    assert res.jitter > 1e-2
    assert res.jitter / 10 < 1e-2 + 1e-9 * scale  # the previous level would not have sufficed


def test_failure_is_per_element_and_finite_gradient():
    gen = _gen(3)
    A = random_spd(4, batch_shape=(3,), generator=gen)
    A[1] = -torch.eye(4, dtype=torch.float64)  # negative definite: jitter cannot fix it
    A.requires_grad_(True)
    res = robust_cholesky(A, jitter=1e-8, max_tries=3)
    assert res.failed.tolist() == [False, True, False]
    torch.testing.assert_close(res.L[1], torch.eye(4, dtype=torch.float64))
    loss = res.L[~res.failed].sum()
    loss.backward()
    assert A.grad is not None
    assert torch.isfinite(A.grad).all()
    assert torch.all(A.grad[1] == 0)


def test_gradient_matches_torch_autograd():
    gen = _gen(4)
    A = random_spd(5, cond=50.0, batch_shape=(2,), generator=gen).requires_grad_(True)
    w = torch.randn(2, 5, 5, dtype=torch.float64, generator=gen)
    (g1,) = torch.autograd.grad((robust_cholesky(A).L * w).sum(), A)
    (g2,) = torch.autograd.grad((torch.linalg.cholesky(A) * w).sum(), A)
    torch.testing.assert_close(g1, g2)


def test_gradcheck_and_gradgradcheck():
    gen = _gen(5)
    A = random_spd(4, cond=10.0, batch_shape=(2,), generator=gen).requires_grad_(True)
    assert_gradients(lambda a: robust_cholesky(0.5 * (a + a.mT)).L, [A])


def test_upcast_computes_in_float64():
    gen = _gen(6)
    A64 = random_spd(6, cond=1e5, generator=gen)
    res = robust_cholesky(A64.float(), upcast=True)
    assert res.L.dtype == torch.float32
    ref = torch.linalg.cholesky(A64.float().double()).float()
    torch.testing.assert_close(res.L, ref, atol=0, rtol=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_rejects_non_finite(bad):
    A = torch.eye(3, dtype=torch.float64)
    A[0, 1] = bad
    with pytest.raises(ValueError, match="NaN"):
        robust_cholesky(A)


def test_rejects_bad_shapes_and_options():
    with pytest.raises(ValueError, match="square"):
        robust_cholesky(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="floating"):
        robust_cholesky(torch.eye(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="jitter"):
        robust_cholesky(torch.eye(3), jitter=0.0)
    with pytest.raises(ValueError, match="max_tries"):
        robust_cholesky(torch.eye(3), max_tries=-1)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    A = random_spd(8, batch_shape=(3,), generator=_gen(7))
    A[1] = -torch.eye(8, dtype=torch.float64)
    res_cpu = robust_cholesky(A)
    res_gpu = robust_cholesky(A.cuda())
    torch.testing.assert_close(res_gpu.L.cpu(), res_cpu.L)
    assert res_gpu.failed.cpu().tolist() == res_cpu.failed.tolist()


def _mixed_batch() -> torch.Tensor:
    """Fine, needs the first jitter, needs escalation, beyond repair, fine."""
    gen = _gen(11)
    A = random_spd(5, cond=10.0, batch_shape=(5,), generator=gen)
    v = torch.randn(5, 1, dtype=torch.float64, generator=gen)
    A[1] = v @ v.mT  # rank one
    A[2] = 1e3 * (v @ v.mT) - 1e-2 * torch.eye(5, dtype=torch.float64)
    A[3] = -torch.eye(5, dtype=torch.float64)
    return A


@pytest.mark.parametrize("max_tries", [0, 1, 8])
def test_ladder_equals_the_lazy_retries(max_tries):
    from amorgp.diff_linalg.cholesky import jittered_cholesky_ex

    A = _mixed_batch()
    L0, eps0, failed0 = jittered_cholesky_ex(A.clone(), 1e-9, max_tries, ladder=False)
    L1, eps1, failed1 = jittered_cholesky_ex(A.clone(), 1e-9, max_tries, ladder=True)
    assert failed1.tolist() == failed0.tolist()
    torch.testing.assert_close(eps1, eps0, rtol=1e-14, atol=0.0)
    torch.testing.assert_close(L1, L0, rtol=1e-12, atol=1e-12)
    eye = torch.eye(5, dtype=torch.float64)
    ok = ~failed1
    torch.testing.assert_close(  # the dense oracle: L L^T = A + eps I
        L1[ok] @ L1[ok].mT, A[ok] + eps1[ok, None, None] * eye, rtol=1e-10, atol=1e-10
    )
    if max_tries == 8:
        assert failed1.tolist() == [False, False, False, True, False]
        assert eps1[2] > eps1[1] > 0


def test_ladder_gradient_equals_the_lazy_one():
    A = _mixed_batch()[[0, 1, 2, 4]]
    grads = []
    for ladder in (False, True):
        X = A.clone().requires_grad_(True)
        res = robust_cholesky(X, jitter=1e-9, max_tries=8, ladder=ladder)
        (res.L.tril() ** 2).sum().backward()
        grads.append(X.grad)
    torch.testing.assert_close(grads[1], grads[0])


def test_validate_false_skips_only_the_value_check():
    A = torch.eye(3, dtype=torch.float64)
    A[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        robust_cholesky(A)
    robust_cholesky(A, validate=False)  # no value check: the caller vouches for A
    with pytest.raises(ValueError):
        robust_cholesky(torch.ones(2, 3, dtype=torch.float64), validate=False)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_ladder_never_synchronises():
    A = _mixed_batch().cuda().requires_grad_(True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        res = robust_cholesky(A, jitter=1e-9, max_tries=8, validate=False)
        res.L.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert res.failed.cpu().tolist() == [False, False, False, True, False]
