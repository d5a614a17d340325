"""The GPyTorch modules equal to amorgp's base symbols.

Used by the conformance suites (GPyTorch as an external oracle) and by the amortizer's
GPyTorch/BoTorch bridge (export of fitted kernels).  Needs ``gpytorch`` (imported on use).
Every module is created in float64 before its values are set, so no value is rounded
through float32.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import ELEMENTARY, BaseSymbol, base_symbol
from amorgp.lazy_kernels.elementary import TORCH_ELEMENTARY

__all__ = ["gpytorch_kernel_matrix", "gpytorch_symbol_kernel"]


def gpytorch_symbol_kernel(
    symbol: BaseSymbol | str, params: dict[str, float], active_dim: int | None = None
) -> Any:
    """The GPyTorch module equal to base symbol ``symbol`` with ``params`` (float64), acting on
    input column ``active_dim`` (all columns if None), or None if GPyTorch lacks a factor.

    SE = ``RBFKernel``, PER = ``PeriodicKernel`` with ``l_gp = 4 l^2`` (GPyTorch's code
    computes ``exp(-2 sin^2 / l_gp)``; its docstring says ``l_gp^2``), MAT52 =
    ``MaternKernel(nu=2.5)``, RQ = ``RQKernel``, the unit LIN factor =
    ``LinearKernel(variance=1) + ConstantKernel(c^2)``; a symbol is ``ScaleKernel(s^2)``
    of the product of its factors.  Each factor's module is built by its
    :attr:`~amorgp.lazy_kernels.TorchElementary.gpytorch` entry.
    """
    import gpytorch.kernels as gk

    sym = base_symbol(symbol) if isinstance(symbol, str) else symbol
    dims = None if active_dim is None else [active_dim]
    variance = torch.tensor(float(params["variance"]), dtype=torch.float64)
    mods = []
    for f in sym.factors:
        build = TORCH_ELEMENTARY[f].gpytorch if f in TORCH_ELEMENTARY else None
        if build is None:
            return None
        p = {
            k: torch.tensor(float(params[v]), dtype=torch.float64)
            for k, v in sym.factor_param_names(f).items()
        }
        alone = len(sym.factors) == 1 and not ELEMENTARY[f].variance_scales_all
        mods.append(build(gk, p, dims, variance if alone else None))
    prod = mods[0] if len(mods) == 1 else gk.ProductKernel(*mods)
    scaled = gk.ScaleKernel(prod).double()
    scaled.outputscale = torch.tensor(float(params["variance"]), dtype=torch.float64)
    return scaled.double()


def gpytorch_kernel_matrix(
    symbol: BaseSymbol | str, x1: Tensor, x2: Tensor, params: dict[str, float]
) -> Tensor | None:
    """The same one-dimensional kernel evaluated by GPyTorch modules (see
    :func:`gpytorch_symbol_kernel`), or None if GPyTorch lacks a factor.
    ``x1 (n,)``, ``x2 (m,)`` float64; returns ``(n, m)``."""
    k = gpytorch_symbol_kernel(symbol, params)
    if k is None:
        return None
    with torch.no_grad():
        return k(x1.reshape(-1, 1), x2.reshape(-1, 1)).to_dense()
