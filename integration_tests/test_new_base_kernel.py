"""Adding a base kernel is one entry per package that must know it, and every path finds
it (``docs/architecture.md``, "Adding a base kernel").

The test registers the exponential (Matérn-1/2) kernel ``EXP`` exactly as the how-to says,
one entry in kernel-grammar's registry and one in lazy-kernels' table (with its closed-form
derivatives, its scikit-learn conversion ``Matern(nu=0.5)`` and its GPyTorch module
``MaternKernel(nu=0.5)``), and nothing else; then every suite and package that iterates the
registry must accept it: the parser (with an alias), the evaluator conformance suite
(against the registry's numpy formula and GPyTorch's module), the operator suite (dense,
expression, block), the normalisation contract, the slot tables and the simulator's priors
(and the KeOps operator where pykeops is installed), the amortizer's refinement (gradient
against finite differences, closed form and forward mode), the scikit-learn conversion of
the fitted kernel (against scikit-learn's kernel matrix) and the GPyTorch/BoTorch bridge
(build, read, write, export; against GPyTorch's kernel matrix and marginal likelihood).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import torch

from amorgp.core.data import Normalizer
from amorgp.core.errors import OptionError
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
    TORCH_ELEMENTARY,
    DimWiseKernel,
    GPyTorchModule,
    KeOpsFormula,
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


def _exp_unit_and_grads(
    p: dict[str, torch.Tensor], r: torch.Tensor, r2: torch.Tensor, xx: torch.Tensor
) -> tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]:
    ell = p["lengthscale"]
    a = r.abs() / ell
    t = (-a).exp()
    return t, [("lengthscale", t * a / ell)]  # d/dl exp(-|r| / l) = exp(-|r| / l) |r| / l^2


def _exp_sklearn(sk: Any, p: dict[str, Any], bounds: Any, center: float, scale: float) -> Any:
    return sk.Matern(p["lengthscale"], bounds(p["lengthscale"]), nu=0.5), 1.0


def _lengthscale(p: dict[str, Any]) -> dict[str, Any]:
    return {"lengthscale": p["lengthscale"]}


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
            unit_and_grads=_exp_unit_and_grads,
            sklearn=_exp_sklearn,
            gpytorch_module=GPyTorchModule(
                "MaternKernel", _lengthscale, _lengthscale, kwargs=(("nu", 0.5),)
            ),
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


def _exp_symbols() -> list[Any]:
    symbols = [s for s in all_base_symbols() if "EXP" in s.factors]
    assert {s.name for s in symbols} == {
        "EXP",
        "SE*EXP",
        "LIN*EXP",
        "PER*EXP",
        "MAT52*EXP",
        "RQ*EXP",
    }
    return symbols


def test_the_conformance_suites_find_the_new_kernel(exp_kernel: str) -> None:
    """Every conformance check and operator of every symbol with the new kernel; the KeOps
    operator (where pykeops works) of the kernel alone, since each symbol compiles its own
    formulas (about a minute each on two cores): all of them in the slow test below."""
    for sym in _exp_symbols():
        for i, check in enumerate(CONFORMANCE_CHECKS.values()):  # incl. GPyTorch as oracle
            check(sym, torch.Generator().manual_seed(i))
        keops = ("keops",) if keops_available() and sym.name == "EXP" else ()
        for name in ("dense", "expression", "block", *keops):
            structure, params = symbol_case(sym, torch.Generator().manual_seed(1))
            run_operator_conformance(OPERATOR_FACTORIES[name], structure, params)


@pytest.mark.slow
def test_the_keops_operator_finds_every_symbol_of_the_new_kernel(exp_kernel: str) -> None:
    if not keops_available():
        pytest.skip("pykeops is not installed or cannot compile here")
    for sym in _exp_symbols():
        structure, params = symbol_case(sym, torch.Generator().manual_seed(1))
        run_operator_conformance(OPERATOR_FACTORIES["keops"], structure, params)


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
    exp, lin_exp = base_symbol("EXP").param_units, base_symbol("LIN*EXP").param_units
    assert norm.to_original(0, exp[1], 0.5) == pytest.approx(2.5)  # a lengthscale: x range
    assert norm.to_original(0, lin_exp[0], 0.5) is None  # LIN is not stationary

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


@pytest.mark.parametrize("grads", ["closed form", "forward mode"])
def test_refinement_differentiates_the_new_kernel(
    exp_kernel: str, grads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The amortizer's refinement objective needs no code for the new kernel: its gradient
    (the registration's closed form, or forward mode through lazy-kernels' form without
    one) equals central differences."""
    from amorgp.amortizer.stages.objective import LogMarginalLikelihood
    from amorgp.kernel_grammar import DimWiseStructure

    if grads == "forward mode":
        monkeypatch.setitem(
            TORCH_ELEMENTARY, "EXP", replace(TORCH_ELEMENTARY["EXP"], unit_and_grads=None)
        )
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


def _fitted(structure_text: str, X: torch.Tensor, seed: int) -> Any:
    """A FittedKernel of ``structure_text`` with random parameters on data ``X``."""
    from amorgp.amortizer.frontends.fitted_kernel import FittedKernel
    from amorgp.kernel_grammar import DimWiseStructure

    structure = DimWiseStructure.parse(structure_text)
    g = torch.Generator().manual_seed(seed)
    P = max(len(base_symbol(s).params) for row in structure.dims for s in row)
    params = 0.3 + torch.rand(structure.n_dims, structure.max_addends, P, generator=g).double()
    y = torch.sin(3.0 * X[:, 0])
    return FittedKernel(structure, params, 0.05, Normalizer.fit(X, y))


@pytest.mark.parametrize("text", ["(EXP)@0", "(SE*EXP + LIN*EXP + EXP + PER)@0"])
def test_scikit_learn_conversion_of_the_new_kernel(exp_kernel: str, text: str) -> None:
    """``FittedKernel.to_sklearn()`` builds the new kernel by its registration's conversion:
    scikit-learn's kernel matrix equals ours (inputs from 0: LIN converts)."""
    g = torch.Generator().manual_seed(5)
    X = torch.cat([torch.zeros(1, 1), 4.0 * torch.rand(11, 1, generator=g)]).double()
    Y = 5.0 * torch.rand(7, 1, generator=g).double()
    k = _fitted(text, X, 1)
    sk = k.to_sklearn()
    assert "Matern(length_scale=" in repr(sk)
    assert "nu=0.5" in repr(sk)
    np.testing.assert_allclose(sk(X.numpy(), Y.numpy()), k(X, Y), rtol=1e-10, atol=1e-12)
    if "LIN" not in text:  # scikit-learn's theta is ours (Matern's length_scale is l)
        np.testing.assert_allclose(sk.theta, k.theta, rtol=0, atol=1e-12)
    two = _fitted("(EXP)@0 * (EXP)@1", torch.rand(9, 2, generator=g).double(), 2)
    with pytest.raises(ValueError, match="no scikit-learn equivalent"):
        two.to_sklearn()  # Matern's ARD length scale is not a product over columns


def test_gpytorch_bridge_builds_reads_and_writes_the_new_kernel(exp_kernel: str) -> None:
    """The bridge writes the new kernel as its registered module, reads a user's
    ``MaternKernel(nu=0.5)`` as ``EXP`` and round-trips the values; GPyTorch's kernel
    matrix equals ours."""
    import gpytorch.kernels as gk

    from amorgp.gpytorch.kernels import build_kernel, read_kernel
    from amorgp.kernel_grammar import DimWiseStructure

    g = torch.Generator().manual_seed(7)
    s = DimWiseStructure.parse("(SE*EXP + EXP)@0 * (LIN + PER*EXP)@1")
    P = max(len(base_symbol(x).params) for row in s.dims for x in row)
    params = 0.3 + torch.rand(2, 2, P, generator=g, dtype=torch.float64)
    X = torch.rand(13, 2, generator=g, dtype=torch.float64)
    k = build_kernel(s, params)
    assert any(type(m).__name__ == "MaternKernel" and float(m.nu) == 0.5 for m in k.modules())
    with torch.no_grad():
        got = k(X).to_dense()
    torch.testing.assert_close(
        got, DimWiseKernel(s, params).operator(X).dense(), atol=1e-12, rtol=0
    )
    km = read_kernel(k, 2)
    assert km.structure == s
    for pn in s.param_names():
        assert float(km.read()[pn.dim, pn.addend, pn.slot]) == pytest.approx(
            float(params[pn.dim, pn.addend, pn.slot]), rel=1e-12
        )
    new = params.clone()
    new[:, :, 1:] *= 1.3
    km.write(new)
    back = km.read()
    for pn in s.param_names():
        assert float(back[pn.dim, pn.addend, pn.slot]) == pytest.approx(
            float(new[pn.dim, pn.addend, pn.slot]), rel=1e-12
        )

    user = gk.ScaleKernel(gk.MaternKernel(nu=0.5)).double()
    user.base_kernel.lengthscale = 0.37
    user.outputscale = 1.9
    mapped = read_kernel(user, 1)
    assert mapped.structure.dims == (("EXP",),)
    values = mapped.read()
    assert (float(values[0, 0, 0]), float(values[0, 0, 1])) == pytest.approx((1.9, 0.37))
    x = torch.linspace(0, 1, 9, dtype=torch.float64)[:, None]
    with torch.no_grad():
        np.testing.assert_allclose(
            user(x).to_dense().numpy(),
            mapped.structure.reference(x.numpy(), x.numpy(), values.numpy()),
            rtol=1e-10,
        )
    with pytest.raises(OptionError, match=r"MaternKernel\(nu=0\.5\) \(EXP\)"):
        read_kernel(gk.MaternKernel(nu=1.5), 1)  # the registered Matérn kernels are listed


def test_botorch_export_of_the_new_kernel(exp_kernel: str) -> None:
    """``to_gpytorch`` exports a fit with the new kernel: GPyTorch's marginal likelihood of
    the exported model is the fit's (as for the built-in kernels)."""
    from amorgp.baselines import fit
    from amorgp.gpytorch import to_gpytorch

    g = torch.Generator().manual_seed(11)
    X = 3.0 * torch.rand(25, 2, generator=g, dtype=torch.float64) + 1.0
    y = torch.sin(2.0 * X[:, 0]) + X[:, 1] + 0.1 * torch.randn(25, generator=g).double()
    vocab = Vocabulary.with_products(("SE", "LIN", "EXP"), "with-exp")
    res = fit(X, y, "(EXP + LIN)@0 * (SE*EXP)@1", method="gp-ml", vocab=vocab)
    model = to_gpytorch(res, X, y)
    import gpytorch

    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    with torch.no_grad(), gpytorch.settings.fast_computations(False, False, False):
        out = model(*model.train_inputs)
        got = float(mll(out, model.train_targets)) * y.numel()
    expect = res.log_marginal_likelihood_original + y.numel() * math.log(float(y.std()))
    assert got == pytest.approx(expect, abs=1e-6)
