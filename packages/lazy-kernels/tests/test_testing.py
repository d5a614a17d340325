"""The conformance suite, run on every registered base symbol (discovered from the registry)."""

from __future__ import annotations

import pytest
import torch

from amorgp.kernel_grammar import BaseSymbol
from amorgp.lazy_kernels import kernel_matrix_dimwise
from amorgp.lazy_kernels.testing import CONFORMANCE_CHECKS, all_base_symbols, gpytorch_kernel_matrix

SYMBOLS = all_base_symbols()


def test_discovers_elementary_kernels_and_products() -> None:
    names = {s.name for s in SYMBOLS}
    assert {"SE", "LIN", "PER", "MAT52", "RQ", "SE*LIN", "PER*RQ"} <= names
    assert len(SYMBOLS) == 15


@pytest.mark.parametrize("check", list(CONFORMANCE_CHECKS), ids=str)
@pytest.mark.parametrize("symbol", SYMBOLS, ids=lambda s: s.name)
def test_conformance(symbol: BaseSymbol, check: str) -> None:
    CONFORMANCE_CHECKS[check](
        symbol, torch.Generator().manual_seed(len(check)), kernel_matrix_dimwise
    )


def test_gpytorch_bridge_matches_closed_form() -> None:
    """The GPyTorch bridge itself: PER with l_gp = 2 l equals the paper's formula."""
    x = torch.linspace(0, 1, 5, dtype=torch.float64)
    p = {"variance": 1.3, "lengthscale": 0.4, "period": 0.7}
    K = gpytorch_kernel_matrix("PER", x, x, p)
    r = x[:, None] - x[None, :]
    expected = 1.3 * torch.exp(-(torch.sin(torch.pi * r.abs() / 0.7) ** 2) / (2 * 0.4**2))
    assert K is not None
    torch.testing.assert_close(K, expected, rtol=1e-7, atol=1e-9)


def test_suite_detects_a_broken_evaluator() -> None:
    """A wrong evaluator (lengthscale scaled by 1.001) must fail the reference check."""
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    def broken(*args: object) -> torch.Tensor:
        return kernel_matrix_dimwise(*args) * 1.001  # type: ignore[arg-type]

    with pytest.raises(AssertionError):
        CONFORMANCE_CHECKS["reference"]("SE", torch.Generator().manual_seed(0), broken)
