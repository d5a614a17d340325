"""The conformance check itself must catch broken kernels."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from amorgp.kernel_grammar import registry
from amorgp.kernel_grammar.testing import check_base_symbol


@pytest.fixture
def broken_se(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    se = registry.ELEMENTARY["SE"]

    def not_psd(x1: np.ndarray, x2: np.ndarray, p: dict[str, float]) -> np.ndarray:
        return np.cos(10.0 * (x1[:, None] - x2[None, :])) - 0.5  # symmetric, indefinite

    monkeypatch.setitem(
        registry.ELEMENTARY, "SE", registry.ElementaryKernel("SE", se.formula, se.params, not_psd)
    )
    registry.base_symbol.cache_clear()
    yield
    registry.base_symbol.cache_clear()


@pytest.mark.usefixtures("broken_se")
def test_check_detects_indefinite_kernel() -> None:
    with pytest.raises(AssertionError, match="SE: not PSD"):
        check_base_symbol("SE", np.random.default_rng(0), n=20)


def test_check_detects_broken_product_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    sym = registry.base_symbol("SE*LIN")
    real = registry.BaseSymbol.reference

    def doubled(
        self: registry.BaseSymbol, x1: np.ndarray, x2: np.ndarray, params: dict
    ) -> np.ndarray:  # type: ignore[type-arg]
        out = real(self, x1, x2, params)
        return 2.0 * out if self.name == "SE*LIN" else out

    monkeypatch.setattr(registry.BaseSymbol, "reference", doubled)
    with pytest.raises(AssertionError, match="product rule"):
        check_base_symbol(sym.name, np.random.default_rng(0))
