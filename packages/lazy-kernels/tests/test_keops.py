"""KeOps backend against the dense backend (float64 values and gradients).

KeOps compiles every formula with a C++ compiler on first use (tens of seconds on
CPU), so this module uses ONE structure, covering all five elementary kernels,
and one right-hand-side width: later runs find the binaries in KeOps' cache.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import DimWiseKernel
from amorgp.lazy_kernels.keops import KeOpsKernel, keops_available, keops_formula, warm_up

pytestmark = pytest.mark.skipif(not keops_available(), reason="pykeops is not installed")

STRUCTURE = DimWiseStructure.parse("(SE + PER*RQ)@0 * (LIN + MAT52*LIN)@1")


def _setup(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    params = 0.4 + torch.rand(2, 2, 5, generator=g, dtype=torch.float64)
    X1 = torch.rand(40, 2, generator=g, dtype=torch.float64)
    X2 = torch.rand(30, 2, generator=g, dtype=torch.float64)
    V = torch.randn(30, 1, generator=g, dtype=torch.float64)
    return params, X1, X2, V


def test_formula_is_one_expression_of_packed_inputs() -> None:
    formula = keops_formula(STRUCTURE)
    for alias in ("Elem(X, 1)", "Elem(Y, 0)", "Elem(T, "):
        assert alias in formula
    assert "IntInv" not in formula


def test_values_match_dense() -> None:
    params, X1, X2, V = _setup(0)
    out = KeOpsKernel(STRUCTURE, params).matmul(X1, X2, V)
    dense = DimWiseKernel(STRUCTURE, params)(X1, X2) @ V
    torch.testing.assert_close(out, dense, rtol=1e-12, atol=1e-12)
    vec = KeOpsKernel(STRUCTURE, params).matmul(X1, X2, V[:, 0])
    torch.testing.assert_close(vec, dense[:, 0], rtol=1e-12, atol=1e-12)


def test_gradients_match_dense() -> None:
    params, X1, X2, V = _setup(1)
    params.requires_grad_()
    X1.requires_grad_()
    X2.requires_grad_()
    out = KeOpsKernel(STRUCTURE, params).matmul(X1, X2, V)
    w = torch.linspace(-1, 1, out.shape[0], dtype=torch.float64)[:, None]
    gk = torch.autograd.grad((out * w).sum(), [params, X1, X2])
    dense = DimWiseKernel(STRUCTURE, params)(X1, X2) @ V
    gd = torch.autograd.grad((dense * w).sum(), [params, X1, X2])
    for a, b in zip(gk, gd):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-11)


def test_warm_up_then_cached() -> None:
    warm_up([STRUCTURE], backward=False)
    params, X1, X2, V = _setup(2)
    out = KeOpsKernel(STRUCTURE, params).matmul(X1, X2, V)
    assert torch.isfinite(out).all()


def test_rejects_bad_shapes() -> None:
    params, X1, X2, V = _setup(3)
    with pytest.raises(ValueError, match="params must have shape"):
        KeOpsKernel(STRUCTURE, params[:1])
    k = KeOpsKernel(STRUCTURE, params)
    with pytest.raises(ValueError, match="X1 must have shape"):
        k.matmul(X1[:, :1], X2, V)
    with pytest.raises(ValueError, match="rows"):
        k.matmul(X1, X2, V[:3])


_PROBE = """
import fcntl, sys
with open(sys.argv[1], "w") as fh:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("held")
    else:
        print("free")
"""


def _lock_state_from_another_process() -> str:
    import os
    import subprocess
    import sys

    import pykeops

    path = os.path.join(pykeops.get_build_folder(), "amorgp.lock")
    out = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True, text=True)
    return out.stdout.strip()


def test_build_lock_covers_compilation_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call compiles on two points under the lock, then evaluates the real input
    with the lock released (checked from a second process).  A stand-in for the compiled
    KeOps routine records the calls, so the test needs no C++ compiler."""
    from amorgp.lazy_kernels import keops

    calls: list[tuple[int, bool, str]] = []

    def fake(X1, X2, T, V, backend):  # type: ignore[no-untyped-def]
        calls.append((X1.shape[0], keops._LOCK_DEPTH > 0, _lock_state_from_another_process()))
        return (X1.sum(1, keepdim=True) * T.sum() * V.sum()).expand(-1, V.shape[1])

    monkeypatch.setattr(keops, "_genred", lambda *a: fake)
    monkeypatch.setattr(keops, "_WARM", set())
    params, X1, X2, V = _setup(5)
    params.requires_grad_()
    k = KeOpsKernel(STRUCTURE, params)
    k.matmul(X1, X2, V).sum().backward()
    assert calls[0] == (2, True, "held")  # compile on two points, lock held
    assert calls[1] == (40, False, "free")  # the real evaluation runs unlocked
    assert params.grad is not None
    calls.clear()
    k.matmul(X1, X2, V)  # compiled already: no second compile, no lock
    assert calls == [(40, False, "free")]


@pytest.fixture
def expo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A user kernel EXPO ``s^2 exp(-|r| / l)`` with a torch form and no KeOps formula,
    registered for one test only."""
    import numpy as np

    from amorgp.kernel_grammar import ELEMENTARY, ElementaryKernel, Gamma, ParamKind, ParamSpec
    from amorgp.kernel_grammar.registry import base_symbol
    from amorgp.lazy_kernels import TORCH_ELEMENTARY, TorchElementary
    from amorgp.lazy_kernels.tables import compile_symbol

    def unit(a, b, p):  # type: ignore[no-untyped-def]
        return np.exp(-np.abs(a[:, None] - b[None, :]) / p["lengthscale"])

    spec = ParamSpec("lengthscale", ParamKind.LENGTHSCALE, Gamma(2.0, 5.0))
    kernel = ElementaryKernel("EXPO", "s^2 exp(-|x-x'| / l)", (spec,), unit)
    monkeypatch.setitem(ELEMENTARY, "EXPO", kernel)
    torch_form = TorchElementary(
        "EXPO",
        log_unit=lambda a, b, th: -(a - b).abs() / th[..., 0],
        log_unit_r=lambda r, th: -r.abs() / th[..., 0],
    )
    monkeypatch.setitem(TORCH_ELEMENTARY, "EXPO", torch_form)
    base_symbol.cache_clear()
    yield
    base_symbol.cache_clear()
    compile_symbol.cache_clear()


@pytest.mark.usefixtures("expo")
def test_symbol_without_keops_formula_fails_naming_it() -> None:
    from amorgp.core.errors import OptionError

    structure = DimWiseStructure.parse("SE*EXPO", 1)
    with pytest.raises(OptionError, match=r"'EXPO' \(a factor of base symbol 'SE\*EXPO'\)"):
        keops_formula(structure)
    with pytest.raises(OptionError, match="register_keops_formula"):
        KeOpsKernel(structure, torch.full((1, 1, 3), 0.5, dtype=torch.float64)).matmul(
            torch.rand(3, 1, dtype=torch.float64),
            torch.rand(3, 1, dtype=torch.float64),
            torch.ones(3, 1, dtype=torch.float64),
        )


@pytest.mark.usefixtures("expo")
def test_registered_keops_formula_serves_a_user_kernel() -> None:
    """Registering the formula beside the torch form gives the user kernel KeOps matvecs
    equal to the dense evaluator (one new formula: compiled once, then cached by KeOps)."""
    from amorgp.lazy_kernels import KeOpsFormula, register_keops_formula

    register_keops_formula(
        "EXPO",
        KeOpsFormula(lambda r, xy, th: f"Exp({th[0]} * Abs({r}))", lambda p: [-1.0 / p[0]], 1),
    )
    with pytest.raises(ValueError, match="already has a KeOps formula"):
        register_keops_formula("EXPO", KeOpsFormula(lambda r, xy, th: r, lambda p: [], 0))
    structure = DimWiseStructure.parse("EXPO", 1)
    assert (
        keops_formula(structure)
        == "(Elem(T, 0) * Exp(Elem(T, 1) * Abs((Elem(X, 0) - Elem(Y, 0)))))"
    )
    g = torch.Generator().manual_seed(4)
    params = 0.4 + torch.rand(1, 1, 2, generator=g, dtype=torch.float64)
    X1 = torch.rand(20, 1, generator=g, dtype=torch.float64)
    X2 = torch.rand(15, 1, generator=g, dtype=torch.float64)
    V = torch.randn(15, 1, generator=g, dtype=torch.float64)
    out = KeOpsKernel(structure, params).matmul(X1, X2, V)
    dense = DimWiseKernel(structure, params)(X1, X2) @ V
    torch.testing.assert_close(out, dense, rtol=1e-12, atol=1e-12)
