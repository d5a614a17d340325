import numpy as np
import pytest
import scipy.linalg
import torch

from amorgp.diff_linalg import (
    copyltu,
    gelqf,
    gemm2,
    potrf,
    potri,
    sumlogdiag,
    syevd,
    syrk,
    trmm,
    trsm,
)
from amorgp.diff_linalg.testing import (
    assert_gradients,
    random_full_rank,
    random_lower_triangular,
    random_spd,
    random_symmetric,
)

SIDES = [(t, r) for t in (False, True) for r in (False, True)]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sym(a: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a + a.mT)


def _rhs(n: int, k: int, rightside: bool, gen: torch.Generator) -> torch.Tensor:
    b = torch.randn(2, n, k, dtype=torch.float64, generator=gen)
    return (b.mT if rightside else b).contiguous()


def _sign_fix(U: torch.Tensor) -> torch.Tensor:
    idx = U.abs().argmax(dim=-2, keepdim=True)
    return torch.sign(torch.gather(U, -2, idx))


# ------------------------------------------------------------------------ references
def _ref_trsm(L, B, transpose, rightside, alpha):
    op = L.tril().mT if transpose else L.tril()
    return alpha * torch.linalg.solve_triangular(op, B, upper=transpose, left=not rightside)


def _ref_trmm(L, B, transpose, rightside, alpha):
    op = L.tril().mT if transpose else L.tril()
    return alpha * (B @ op if rightside else op @ B)


def _ref_gelqf(A):
    q, r = torch.linalg.qr(A.mT)
    s = torch.sign(r.diagonal(dim1=-2, dim2=-1)).detach()
    return r.mT * s.unsqueeze(-2), q.mT * s.unsqueeze(-1)


def _ref_syevd(A):
    lam, U = torch.linalg.eigh(A)
    return U * _sign_fix(U).detach(), lam


def _compare_gradients(fn, ref, inputs, gen):
    """Random linear functional of the outputs: gradients of ``fn`` and ``ref`` agree."""
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    ws = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    loss = sum((w * o).sum() for w, o in zip(ws, outs))
    g1 = torch.autograd.grad(loss, inputs)
    rout = ref(*inputs)
    routs = rout if isinstance(rout, tuple) else (rout,)
    for o, r in zip(outs, routs):
        torch.testing.assert_close(o, r, atol=1e-10, rtol=1e-9)
    rloss = sum((w * o).sum() for w, o in zip(ws, routs))
    g2 = torch.autograd.grad(rloss, inputs)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=1e-8)


# ------------------------------------------------------------------------ gradchecks
@pytest.mark.parametrize(("transpose", "rightside"), SIDES)
@pytest.mark.parametrize("op", [trsm, trmm])
def test_triangular_gradcheck(op, transpose, rightside):
    gen = _gen(1)
    L = random_lower_triangular(4, cond=20.0, generator=gen).requires_grad_(True)
    B = _rhs(4, 3, rightside, gen).requires_grad_(True)
    assert_gradients(
        lambda t, b: op(t, b, transpose=transpose, rightside=rightside, alpha=0.7), [L, B]
    )


@pytest.mark.parametrize(("transpose", "rightside"), SIDES)
@pytest.mark.parametrize(("op", "ref"), [(trsm, _ref_trsm), (trmm, _ref_trmm)])
def test_triangular_matches_torch(op, ref, transpose, rightside):
    gen = _gen(2)
    L = random_lower_triangular(5, cond=50.0, batch_shape=(2,), generator=gen)
    L = (L + torch.triu(torch.ones(5, 5, dtype=torch.float64), 1)).requires_grad_(
        True
    )  # upper ignored
    B = _rhs(5, 3, rightside, gen).requires_grad_(True)
    _compare_gradients(
        lambda t, b: op(t, b, transpose=transpose, rightside=rightside, alpha=-1.3),
        lambda t, b: ref(t, b, transpose, rightside, -1.3),
        (L, B),
        gen,
    )


@pytest.mark.parametrize("transpose", [False, True])
def test_trsm_left_matches_scipy(transpose):
    gen = _gen(3)
    L = random_lower_triangular(6, cond=100.0, generator=gen)
    B = torch.randn(6, 2, dtype=torch.float64, generator=gen)
    ref = scipy.linalg.solve_triangular(L.numpy(), B.numpy(), lower=True, trans=int(transpose))
    np.testing.assert_allclose(trsm(L, B, transpose=transpose).numpy(), ref, rtol=1e-10)


def test_triangular_broadcast_gradient_shape():
    gen = _gen(4)
    L = random_lower_triangular(3, generator=gen).requires_grad_(True)
    B = torch.randn(4, 3, 2, dtype=torch.float64, generator=gen).requires_grad_(True)
    _compare_gradients(
        lambda t, b: trsm(t, b), lambda t, b: _ref_trsm(t, b, False, False, 1.0), (L, B), gen
    )
    out = trmm(L, B)
    (gL,) = torch.autograd.grad(out.sum(), L)
    assert gL.shape == L.shape


def test_potrf():
    gen = _gen(5)
    A = random_spd(4, cond=30.0, batch_shape=(2,), generator=gen).requires_grad_(True)
    assert_gradients(lambda a: potrf(_sym(a)), [A])
    _compare_gradients(
        lambda a: potrf(_sym(a)), lambda a: torch.linalg.cholesky(_sym(a)), (A,), gen
    )
    ref = scipy.linalg.cholesky(A[0].detach().numpy(), lower=True)
    np.testing.assert_allclose(potrf(A.detach())[0].numpy(), ref, rtol=1e-12)


def test_potri():
    gen = _gen(6)
    L = random_lower_triangular(4, cond=30.0, batch_shape=(2,), generator=gen).requires_grad_(True)
    assert_gradients(potri, [L])
    _compare_gradients(potri, lambda t: torch.cholesky_inverse(t.tril()), (L,), gen)
    Ld = L[1].detach().numpy()
    np.testing.assert_allclose(potri(L.detach())[1].numpy(), np.linalg.inv(Ld @ Ld.T), rtol=1e-10)


@pytest.mark.parametrize("transpose", [False, True])
def test_syrk(transpose):
    gen = _gen(7)
    A = torch.randn(2, 4, 3, dtype=torch.float64, generator=gen).requires_grad_(True)
    assert_gradients(lambda a: syrk(a, transpose=transpose, alpha=0.4), [A])
    _compare_gradients(
        lambda a: syrk(a, transpose=transpose, alpha=0.4),
        lambda a: 0.4 * (a.mT @ a if transpose else a @ a.mT),
        (A,),
        gen,
    )


@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_gemm2(ta, tb):
    gen = _gen(8)
    A = torch.randn(2, 3, 4, dtype=torch.float64, generator=gen)
    B = torch.randn(2, 4, 2, dtype=torch.float64, generator=gen)
    A = (A.mT if ta else A).contiguous().requires_grad_(True)
    B = (B.mT if tb else B).contiguous().requires_grad_(True)
    fn = lambda a, b: gemm2(a, b, transpose_a=ta, transpose_b=tb, alpha=1.7)  # noqa: E731
    assert_gradients(fn, [A, B])
    _compare_gradients(
        fn, lambda a, b: 1.7 * ((a.mT if ta else a) @ (b.mT if tb else b)), (A, B), gen
    )


def test_sumlogdiag_and_copyltu():
    gen = _gen(9)
    L = random_lower_triangular(4, batch_shape=(2,), generator=gen).requires_grad_(True)
    assert_gradients(sumlogdiag, [L])
    _compare_gradients(sumlogdiag, lambda t: t.diagonal(dim1=-2, dim2=-1).log().sum(-1), (L,), gen)
    A = torch.randn(2, 4, 4, dtype=torch.float64, generator=gen).requires_grad_(True)
    assert_gradients(copyltu, [A])
    _compare_gradients(copyltu, lambda a: a.tril() + a.tril(-1).mT, (A,), gen)
    # the paper's log-determinant identity
    S = random_spd(5, cond=1e3, generator=gen)
    torch.testing.assert_close(2 * sumlogdiag(potrf(S)), torch.linalg.slogdet(S)[1])


@pytest.mark.parametrize(("m", "n"), [(3, 5), (4, 4)])
def test_gelqf(m, n):
    gen = _gen(10)
    A = random_full_rank(m, n, cond=10.0, batch_shape=(2,), generator=gen).requires_grad_(True)
    assert_gradients(gelqf, [A])
    _compare_gradients(lambda a: tuple(gelqf(a)), _ref_gelqf, (A,), gen)
    L, Q = gelqf(A.detach())
    torch.testing.assert_close(L @ Q, A.detach())
    torch.testing.assert_close(Q @ Q.mT, torch.eye(m, dtype=torch.float64).expand(2, m, m))
    assert torch.all(L.diagonal(dim1=-2, dim2=-1) > 0)
    assert torch.all(L.triu(1) == 0)
    # scipy oracle: LQ of A is the transposed QR of A^T, unique with a positive diagonal
    _, r = scipy.linalg.qr(A[0].detach().numpy().T, mode="economic")
    s = np.sign(np.diag(r))
    np.testing.assert_allclose(L[0].numpy(), (r.T * s), rtol=1e-10, atol=1e-12)


def test_syevd():
    gen = _gen(11)
    A = random_symmetric(4, gap=0.4, batch_shape=(2,), generator=gen).requires_grad_(True)
    assert_gradients(lambda a: tuple(syevd(_sym(a))), [A])
    _compare_gradients(lambda a: tuple(syevd(_sym(a))), lambda a: _ref_syevd(_sym(a)), (A,), gen)
    U, lam = syevd(A.detach())
    w, v = scipy.linalg.eigh(A[0].detach().numpy())
    np.testing.assert_allclose(lam[0].numpy(), w, rtol=1e-12, atol=1e-12)
    v = v * np.sign(v[np.abs(v).argmax(0), np.arange(4)])
    np.testing.assert_allclose(U[0].numpy(), v, atol=1e-10)
    # sign rule: largest-magnitude entry of each eigenvector is positive
    assert torch.all(torch.gather(U, -2, U.abs().argmax(-2, keepdim=True)) > 0)


def test_syevd_repeated_eigenvalues_give_finite_correct_gradients():
    gen = _gen(12)
    q = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64, generator=gen))[0]
    lam = torch.tensor([0.5, 1.0, 1.0, 1.0, 2.0], dtype=torch.float64)
    A = ((q * lam) @ q.mT).requires_grad_(True)
    W = _sym(torch.randn(5, 5, dtype=torch.float64, generator=gen))

    # eigenvalue-only loss: sum exp(lam) = tr(expm(A)), whose gradient is expm(A)
    (g,) = torch.autograd.grad(syevd(A).lam.exp().sum(), A)
    assert torch.isfinite(g).all()
    torch.testing.assert_close(g, torch.linalg.matrix_exp(A.detach()), atol=1e-10, rtol=1e-10)

    # projector on the simple top eigenvector: smooth in A; oracle = central differences
    def proj_loss(a):
        U = syevd(a).U
        return (W * (U[..., -1:] @ U[..., -1:].mT)).sum()

    (g,) = torch.autograd.grad(proj_loss(A), A)
    assert torch.isfinite(g).all()
    h = 1e-6
    for _ in range(3):
        E = _sym(torch.randn(5, 5, dtype=torch.float64, generator=gen))
        fd = (proj_loss(A.detach() + h * E) - proj_loss(A.detach() - h * E)) / (2 * h)
        torch.testing.assert_close((g * E).sum(), fd, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_dtypes(dtype):
    gen = _gen(13)
    S = random_spd(6, cond=10.0, dtype=dtype, generator=gen)
    L = potrf(S)
    assert L.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(L @ L.mT, S, atol=tol, rtol=tol)
    B = torch.randn(6, 2, dtype=dtype, generator=gen)
    torch.testing.assert_close(trmm(L, trsm(L, B)), B, atol=tol, rtol=tol)
    torch.testing.assert_close(potri(L) @ S, torch.eye(6, dtype=dtype), atol=10 * tol, rtol=tol)
    U, lam = syevd(S)
    torch.testing.assert_close((U * lam) @ U.mT, S, atol=10 * tol, rtol=tol)


def test_operator_input_errors():
    L = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="not positive definite"):
        potrf(-torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="rows"):
        trsm(L, torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="columns"):
        trmm(L, torch.zeros(3, 2, dtype=torch.float64), rightside=True)
    with pytest.raises(ValueError, match="dtype"):
        trsm(L, torch.zeros(3, 2, dtype=torch.float32))
    with pytest.raises(ValueError, match="alpha"):
        trsm(L, torch.zeros(3, 2, dtype=torch.float64), alpha=0.0)
    with pytest.raises(ValueError, match="inner dimensions"):
        gemm2(torch.zeros(2, 3), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="m <= n"):
        gelqf(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="square"):
        syevd(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="floating"):
        copyltu(torch.zeros(2, 2, dtype=torch.int64))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    gen = _gen(14)
    S = random_spd(5, batch_shape=(3,), dtype=dtype, generator=gen)
    B = torch.randn(3, 5, 2, dtype=dtype, generator=gen)
    A = random_full_rank(3, 5, batch_shape=(3,), dtype=dtype, generator=gen)
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)

    def run(s, b, a):
        s = s.clone().requires_grad_(True)
        L = potrf(s)
        out = trsm(L, b, transpose=True).sum() + sumlogdiag(L).sum() + potri(L).sum()
        out = out + gelqf(a).L.sum() + syevd(s).lam.sum() + syrk(b).sum()
        (g,) = torch.autograd.grad(out, s)
        return out.detach(), g

    v_cpu, g_cpu = run(S, B, A)
    v_gpu, g_gpu = run(S.cuda(), B.cuda(), A.cuda())
    torch.testing.assert_close(v_gpu.cpu(), v_cpu, **tol)
    torch.testing.assert_close(g_gpu.cpu(), g_cpu, **tol)
