"""scikit-learn's ``GaussianProcessRegressor`` on the evaluation kernels it can express.

scikit-learn kernels act on all input columns at once, so a dimension-wise structure
is expressible when the data have one input (any sum of products of elementary kernels
whose lazy-kernels registration has a scikit-learn conversion,
:attr:`amorgp.lazy_kernels.TorchElementary.sklearn`) or when it is SE-ARD (``SE`` in
every dimension: ``C * RBF(ARD)``; a kernel whose conversion sets ``sklearn_ard``).  The
conversions map the grammar's kernels exactly, e.g.:

* ``SE``: ``s^2 exp(-(x - x')^2 / (2 l^2))`` = ``C * RBF(l)``;
* ``PER``: ``s^2 exp(-sin^2(pi |x - x'| / p) / (2 l^2))`` = ``C * ExpSineSquared(2 l, p)``
  (scikit-learn writes ``exp(-2 sin^2(pi d / p) / l_sk^2)``);
* ``LIN``: ``s^2 x x' + c^2`` = ``C * DotProduct(sigma_0 = c / s)``;

a product of symbols carries one constant factor, the noise is a ``WhiteKernel``.  Every
start value is 1 in the grammar's parameters (``ExpSineSquared(2, 1)``) and the
bounds are scikit-learn's default ``(1e-5, 1e5)``.
Inputs are min-max scaled on the training data (the contract of the other methods),
``normalize_y=True``, one L-BFGS-B start (plus ``restarts``).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

__all__ = ["expressible", "sklearn_gpr", "sklearn_kernel"]

_BOUNDS = (1e-5, 1e5)


def _forms() -> dict[str, Any]:
    """The registered elementary kernels with a scikit-learn conversion, by name."""
    from amorgp.kernel_grammar import ELEMENTARY
    from amorgp.lazy_kernels import TORCH_ELEMENTARY

    return {
        name: TORCH_ELEMENTARY[name]
        for name in ELEMENTARY
        if name in TORCH_ELEMENTARY and TORCH_ELEMENTARY[name].sklearn is not None
    }


def _terms(kernel: str) -> list[list[str]] | None:
    """The template's addends as lists of base symbols, or ``None`` if not a plain sum."""
    forms = _forms()
    terms = [[f.strip() for f in t.split("*")] for t in kernel.split("+")]
    if any(not f or f not in forms for t in terms for f in t):
        return None
    return terms


def _ard(kernel: str) -> bool:
    form = _forms().get(kernel.strip())
    return form is not None and form.sklearn_ard


def expressible(kernel: str, d: int) -> bool:
    """Whether the evaluation template ``kernel`` on ``d`` inputs has a scikit-learn kernel."""
    return _ard(kernel) or (d == 1 and _terms(kernel) is not None)


def _factor(sk: Any, name: str, d: int) -> tuple[Any, float]:
    """Elementary kernel ``name`` at start values 1 (per column on ``d > 1`` inputs) by the
    conversion of its registration; ``(kernel, factor of the constant)``."""
    from amorgp.kernel_grammar import ELEMENTARY

    form = _forms()[name]
    p: dict[str, Any] = {q.name: np.ones(d) if d > 1 else 1.0 for q in ELEMENTARY[name].params}
    return form.sklearn(sk, p, lambda _: _BOUNDS, 0.0, 1.0)


def sklearn_kernel(kernel: str, d: int) -> Any:
    """The scikit-learn kernel of template ``kernel`` on ``d`` inputs, noise included.

    Raises:
        ValueError: the structure is not expressible (see :func:`expressible`).
    """
    from sklearn.gaussian_process import kernels as sk

    if not expressible(kernel, d):
        raise ValueError(f"{kernel!r} on {d} inputs has no scikit-learn kernel")
    terms = [[kernel.strip()]] if d > 1 else _terms(kernel)
    assert terms is not None
    total = None
    for term in terms:
        c = 1.0
        parts = []
        for symbol in term:
            part, factor = _factor(sk, symbol, d)
            parts.append(part)
            c *= factor
        k = sk.ConstantKernel(c)
        for part in parts:
            k = k * part
        total = k if total is None else total + k
    return total + sk.WhiteKernel(0.1)


def sklearn_gpr(
    Xtr: np.ndarray, ytr: np.ndarray, Xte: np.ndarray, kernel: str, restarts: int = 0
) -> tuple[np.ndarray, np.ndarray, float]:
    """Fit and predict with scikit-learn's GPR; timed.

    Returns:
        Predictive mean and variance (noise included) at ``Xte`` and the seconds taken.
    """
    from sklearn.gaussian_process import GaussianProcessRegressor

    t0 = time.perf_counter()
    lo, span = Xtr.min(0), np.ptp(Xtr, axis=0)
    span = np.where(span > 0, span, 1.0)
    gpr = GaussianProcessRegressor(
        kernel=sklearn_kernel(kernel, Xtr.shape[1]),
        normalize_y=True,
        n_restarts_optimizer=restarts,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpr.fit((Xtr - lo) / span, ytr)
        mean, std = gpr.predict((Xte - lo) / span, return_std=True)
    return mean, std**2, time.perf_counter() - t0
