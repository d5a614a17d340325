"""The torch block kernel operator against the dense float64 oracle: values, gradients,
memory held for backward, and exact GPs (CG, posterior, predictive) on it.

Device-parametrised: the CPU cases run in the unit tests, the CUDA cases (``cuda`` marker)
where a CUDA device is visible.
"""

from __future__ import annotations

import pytest
import torch

from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import (
    BlockKernelOperator,
    DimWiseKernel,
    Posterior,
    choose_backend,
    kernel_operator,
)
from amorgp.lazy_kernels.block import block_rows
from amorgp.lazy_kernels.testing import check_same_predictions, device_params, reference_structure

DEVICES = device_params()
STRUCTURE = DimWiseStructure.parse("(SE + PER*RQ)@0 * (LIN + MAT52*LIN)@1")


def _case(
    n: int, seed: int, device: str, grad: bool = False
) -> tuple[DimWiseKernel, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    params = 0.4 + torch.rand(2, 2, 5, generator=g, dtype=torch.float64)
    params = params.to(device).requires_grad_(grad)
    return DimWiseKernel(STRUCTURE, params), params, X.to(device), y.to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_block_matmul_matches_the_numpy_reference(device: str) -> None:
    kernel, params, X, _ = _case(50, 0, device)
    Xt = X[:13] * 1.3
    V = torch.randn(13, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    op = BlockKernelOperator(kernel, X, Xt, rows=7)  # 50 rows in 8 blocks, the last short
    ref = torch.from_numpy(reference_structure(STRUCTURE, params.cpu(), X.cpu(), Xt.cpu()))
    torch.testing.assert_close(op.matmul(V.to(device)).cpu(), ref @ V, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(op.matmul(V[:, 0].to(device)).cpu(), ref @ V[:, 0])
    torch.testing.assert_close(op.dense().cpu(), ref, rtol=1e-12, atol=1e-12)
    sym = op.on(X)
    full = torch.from_numpy(reference_structure(STRUCTURE, params.cpu(), X.cpu()))
    torch.testing.assert_close(sym.diag().cpu(), torch.diagonal(full), rtol=1e-12, atol=1e-12)
    index = torch.tensor([3, 0, 41], device=device)
    torch.testing.assert_close(sym.columns(index).cpu(), full[:, [3, 0, 41]])


@pytest.mark.parametrize("device", DEVICES)
def test_block_matmul_gradients_match_the_dense_operator(device: str) -> None:
    kernel, params, X, _ = _case(40, 2, device, grad=True)
    X = X.clone().requires_grad_()
    V = torch.randn(40, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    V = V.to(device).requires_grad_()
    W = torch.randn(40, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    grads = []
    for op in (kernel.operator(X), BlockKernelOperator(kernel, X, rows=6)):
        loss = (op.matmul(V) * W.to(device)).sum() + (op.matmul(V) ** 2).sum()
        grads.append(torch.autograd.grad(loss, [params, X, V]))
    for dense, block in zip(*grads):
        torch.testing.assert_close(block, dense, rtol=1e-10, atol=1e-10)


def test_block_backward_keeps_no_kernel_block() -> None:
    """The forward pass saves only the inputs for backward (recomputation): nothing of
    ``n x block`` size, let alone ``n x n``."""
    kernel, _, X, _ = _case(300, 5, "cpu", grad=True)
    V = torch.ones(300, 2, dtype=torch.float64)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    op = BlockKernelOperator(kernel, X, rows=50)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = op.matmul(V)
    assert max(saved) < 50 * 300  # no block of K (50 x 300) is kept
    out.sum().backward()  # and the recomputed backward still runs


def test_block_rows_follow_the_memory_budget() -> None:
    kernel, _, X, _ = _case(100, 6, "cpu")
    op = BlockKernelOperator(kernel, X, memory_budget=8 * 4 * 100 * 10)  # no graph: 4 matrices
    assert op.block_size(graph=False) == 10
    assert op.block_size(graph=True) < 10  # a graph costs more per entry
    assert BlockKernelOperator(kernel, X, memory_budget=1).block_size() == 1
    # off the CPU the evaluator works on whole blocks: 12 matrices without a graph
    assert block_rows(100, 3, torch.float64, 8 * 12 * 100 * 10, False, "cuda") == 10
    assert block_rows(100, 3, torch.float64, 8 * 4 * 100 * 10, False, "cpu") == 10
    with pytest.raises(OptionError, match="rows"):
        BlockKernelOperator(kernel, X, rows=0)
    assert isinstance(kernel_operator(kernel, X, backend="block"), BlockKernelOperator)


@pytest.mark.parametrize("device", DEVICES)
def test_block_gp_predicts_like_cholesky(device: str) -> None:
    kernel, _, X, y = _case(200, 7, device)
    Xt = X[:6] + 0.01
    dense = Posterior.from_kernel(kernel, X, y, 0.05, backend="cholesky")
    block = Posterior.from_kernel(kernel, X, y, 0.05, backend="block", memory_budget=2**18)
    assert block.backend == "block"
    assert isinstance(block.operator, BlockKernelOperator)
    check_same_predictions(
        dense, block, Xt, rtol=1e-6, atol=1e-7, var_rtol=1e-5, var_atol=1e-7, covariance=True
    )


@pytest.mark.parametrize("device", DEVICES)
def test_block_gp_loss_and_gradient_like_dense_cg_and_cholesky(device: str) -> None:
    """Same probes, same solves: block CG equals dense CG up to the CG tolerance; both
    estimate the exact (Cholesky) value and gradient."""
    kernel, params, X, y = _case(150, 8, device, grad=True)
    noise = torch.tensor(0.05, dtype=torch.float64, device=device, requires_grad=True)
    results = []
    for backend in ("cg", "block", "cholesky"):
        gp = Posterior.from_kernel(
            kernel,
            X,
            y,
            noise,
            backend=backend,  # type: ignore[arg-type]
            memory_budget=2**18,
            generator=torch.Generator().manual_seed(0),
            n_probes=30,
        )
        lml = gp.log_marginal_likelihood()
        results.append((lml, *torch.autograd.grad(lml, [params, noise])))
    for a, b in zip(results[0], results[1]):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)
    exact, est = results[2], results[1]
    assert abs(float((est[0] - exact[0]).detach())) < 0.02 * abs(float(exact[0].detach())) + 1.0
    g_exact = torch.cat([exact[1].flatten(), exact[2][None]])
    g_est = torch.cat([est[1].flatten(), est[2][None]])
    cos = float(g_exact @ g_est / (g_exact.norm() * g_est.norm()))
    assert cos > 0.95


def test_posterior_on_a_block_operator_directly() -> None:
    kernel, _, X, y = _case(120, 9, "cpu")
    post = Posterior(BlockKernelOperator(kernel, X, rows=16), y, 0.1, method="cg")
    ref = Posterior(kernel.operator(X), y, 0.1, method="cholesky")
    torch.testing.assert_close(post.alpha(), ref.alpha(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(post.mean(X[:4]), ref.mean(X[:4]), rtol=1e-6, atol=1e-7)


def test_choose_backend_takes_block_without_keops() -> None:
    assert choose_backend(100_000, keops=False) == "block"
    assert choose_backend(100_000, device="cuda", keops=False) == "block"
    assert choose_backend(100, keops=False) == "cholesky"
