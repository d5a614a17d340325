"""Adding a base kernel is one entry per package that must know it, and the conformance
suites find it (``docs/architecture.md``, "Adding a base kernel").

The test registers the exponential (Matérn-1/2) kernel ``EXP`` exactly as the how-to says,
one entry in kernel-grammar's registry and one in lazy-kernels' table, and nothing else;
then every suite and package that iterates the registry must accept it: the parser (with
an alias), the evaluator conformance suite (against the registry's numpy formula and
GPyTorch's ``MaternKernel(nu=0.5)``), the operator suite (dense, expression, block), the
normalisation contract, the slot tables and the simulator's priors (and the KeOps
operator where pykeops is installed).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from amorgp.kernel_grammar import (
    ELEMENTARY,
    ElementaryKernel,
    ParamKind,
    ParamSpec,
    Vocabulary,
    base_symbol,
    parse,
    register_elementary,
    unregister_elementary,
)
from amorgp.kernel_grammar.priors import Gamma
from amorgp.lazy_kernels import (
    KeOpsFormula,
    Normalizer,
    TorchElementary,
    register_torch_elementary,
    unregister_torch_elementary,
)
from amorgp.lazy_kernels.keops import keops_available
from amorgp.lazy_kernels.testing import (
    CONFORMANCE_CHECKS,
    all_base_symbols,
    run_operator_conformance,
    symbol_case,
)
from amorgp.lazy_kernels.testing.operators import OPERATOR_FACTORIES


def _exp_numpy(x1: np.ndarray, x2: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    return np.exp(-np.abs(np.subtract.outer(x1, x2)) / p["lengthscale"])


def _exp_log_r(r: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    return -r.abs() / theta[..., 0]


def _exp_gpytorch(gk: Any, p: dict[str, torch.Tensor], dims: Any, _: Any) -> Any:
    k = gk.MaternKernel(nu=0.5, active_dims=dims).double()
    k.lengthscale = p["lengthscale"]
    return k


@pytest.fixture
def exp_kernel() -> Iterator[str]:
    lengthscale = ParamSpec("lengthscale", ParamKind.LENGTHSCALE, Gamma(2.0, 5.0), "l")
    register_elementary(
        ElementaryKernel(
            "EXP", "s^2 exp(-|x-x'| / l)", (lengthscale,), _exp_numpy, aliases=("MATERN12",)
        )
    )
    register_torch_elementary(
        TorchElementary(
            "EXP",
            log_unit=lambda x1, x2, th: _exp_log_r(x1 - x2, th),
            log_unit_r=_exp_log_r,
            keops=KeOpsFormula(
                lambda r, xy, th: f"Exp({th[0]} * Abs({r}))", lambda p: [-1 / p[0]], 1
            ),
            gpytorch=_exp_gpytorch,
        )
    )
    try:
        yield "EXP"
    finally:
        unregister_torch_elementary("EXP")
        unregister_elementary("EXP")


def test_the_parser_reads_the_new_kernel_and_its_alias(exp_kernel: str) -> None:
    assert str(parse("SE + Matern12")) == str(parse("SE + EXP"))
    assert base_symbol("exp*se").name == "SE*EXP"  # registry order: SE first
    assert base_symbol("SE*EXP").param_names == ("variance", "se_lengthscale", "exp_lengthscale")


def test_the_conformance_suites_find_the_new_kernel(exp_kernel: str) -> None:
    symbols = [s for s in all_base_symbols() if "EXP" in s.factors]
    assert {s.name for s in symbols} == {
        "EXP",
        "SE*EXP",
        "LIN*EXP",
        "PER*EXP",
        "MAT52*EXP",
        "RQ*EXP",
    }
    for sym in symbols:
        for i, check in enumerate(CONFORMANCE_CHECKS.values()):  # incl. GPyTorch as oracle
            check(sym, torch.Generator().manual_seed(i))
        for name in ("dense", "expression", "block", *(("keops",) if keops_available() else ())):
            structure, params = symbol_case(sym, torch.Generator().manual_seed(1))
            run_operator_conformance(OPERATOR_FACTORIES[name], structure, params)


def test_the_gpytorch_oracle_is_really_used(exp_kernel: str) -> None:
    from amorgp.lazy_kernels.testing import gpytorch_kernel_matrix

    x = torch.linspace(0.0, 2.0, 5, dtype=torch.float64)
    K = gpytorch_kernel_matrix("EXP", x, x, {"variance": 1.5, "lengthscale": 0.7})
    assert K is not None
    expected = 1.5 * np.exp(-np.abs(np.subtract.outer(x.numpy(), x.numpy())) / 0.7)
    np.testing.assert_allclose(K.numpy(), expected, rtol=1e-6)


def test_normalisation_and_simulator_priors_know_the_new_kernel(exp_kernel: str) -> None:
    X = torch.tensor([[0.0], [2.0], [5.0]], dtype=torch.float64)
    norm = Normalizer.fit(X, torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64))
    assert norm.to_original(0, "EXP", 1, 0.5) == pytest.approx(2.5)  # a lengthscale: x range
    assert norm.to_original(0, "LIN*EXP", 0, 0.5) is None  # LIN is not stationary

    from amorgp.simulator.parameters import PriorTable, sample_parameters

    vocab = Vocabulary.with_products(("SE", "EXP"), "with-exp")
    table = PriorTable.from_vocabulary(vocab)
    exp_id = vocab.id("EXP")
    assert (table.shape[exp_id, 1], table.rate[exp_id, 1]) == (2.0, 5.0)  # its declared prior
    symbols = torch.tensor([[[exp_id, vocab.id("SE*EXP")]]])
    mask = torch.ones_like(symbols, dtype=torch.bool)
    params, _ = sample_parameters(symbols, mask, table, torch.Generator().manual_seed(0))
    assert params.shape == (1, 1, 2, vocab.max_params)
    assert bool((params[0, 0, 0, :2] > 0).all())
    assert bool((params[0, 0, 1, :3] > 0).all())
    assert math.isfinite(float(params[0, 0, 1, :3].sum()))
    assert "EXP" in ELEMENTARY


def test_refinement_differentiates_the_new_kernel(exp_kernel: str) -> None:
    """The amortizer's refinement objective needs no code for the new kernel: its
    gradient (forward-mode through lazy-kernels' form) equals central differences."""
    from amorgp.amortizer.refine import LogMarginalLikelihood
    from amorgp.kernel_grammar import DimWiseStructure

    g = torch.Generator().manual_seed(3)
    X = torch.rand(15, 2, generator=g, dtype=torch.float64)
    y = torch.sin(5.0 * X[:, 0]) + 0.1 * torch.randn(15, generator=g, dtype=torch.float64)
    structure = DimWiseStructure.parse("(SE*EXP + EXP)@0 * (LIN + EXP)@1")
    f = LogMarginalLikelihood(X, y, structure)
    z = 0.3 * torch.randn(f.floors.shape[0], generator=g, dtype=torch.float64)
    value, grad = f.value_and_grad(z)
    assert math.isfinite(float(value))
    h = 1e-6
    for i in range(z.shape[0]):
        e = torch.zeros_like(z)
        e[i] = h
        fd = (f.value_and_grad(z + e)[0] - f.value_and_grad(z - e)[0]) / (2 * h)
        assert float(grad[i]) == pytest.approx(float(fd), rel=1e-5, abs=1e-6), i
