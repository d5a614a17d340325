"""A readable account of a fitted structure: per dimension its terms, their
hyperparameters (original units where exact) and the share of variance each explains.

For dimension ``d`` with addends ``k_dl``, the share of addend ``l`` is
``mean_i k_dl(x_id, x_id) / sum_l' mean_i k_dl'(x_id, x_id)`` over the training inputs
(min-max normalised, as the GP sees them): for stationary terms (SE, PER and their
products) this is the signal variance ``s^2`` of the term relative to the others;
for terms with LIN it averages ``s^2 x^2 + c^2`` over the data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from amorgp.kernel_grammar import base_symbol

__all__ = ["TermSummary", "describe_structure", "format_description"]


@dataclass(frozen=True)
class TermSummary:
    """One addend of one dimension.

    Attributes:
        dim, addend: its position; symbol: its base symbol.
        share: its share of the dimension's prior variance (see the module docstring).
        hyperparameters: ``name -> value`` in normalised units.
        original: ``name -> value`` in original units (``None`` where not exact).
    """

    dim: int
    addend: int
    symbol: str
    share: float
    hyperparameters: dict[str, float]
    original: dict[str, float | None]


def _originals(fit: Any) -> dict[tuple[int, int, str], float | None]:
    h = getattr(fit, "hyperparameters_original", None)
    if h is None:
        return {}
    return dict(h() if callable(h) else h)


def describe_structure(fit: Any, X: Any) -> list[TermSummary]:
    """Terms of ``fit.kernel`` with hyperparameters and variance shares on inputs ``X (n, d)``.

    Raises:
        ValueError: ``X`` does not have the structure's number of columns.
    """
    s = fit.kernel
    Xa = np.asarray(X, dtype=np.float64)
    Xa = Xa[:, None] if Xa.ndim == 1 else Xa
    if Xa.ndim != 2 or Xa.shape[1] != s.n_dims:
        raise ValueError(f"X must have shape (n, {s.n_dims}) for {s}, got {Xa.shape}")
    lo, hi = Xa.min(0), Xa.max(0)
    Xn = np.where(hi > lo, (Xa - lo) / np.where(hi > lo, hi - lo, 1.0), 0.5)
    hyper = dict(fit.hyperparameters)
    orig = _originals(fit)
    out: list[TermSummary] = []
    for d, addends in enumerate(s.dims):
        x = Xn[:, d]
        means = []
        for a, name in enumerate(addends):
            sym = base_symbol(name)
            values = {p: hyper[(d, a, p)] for p in sym.param_names}
            diag = np.array(
                [
                    sym.reference(x[i : i + 1], x[i : i + 1], values)[0, 0]
                    for i in range(min(len(x), 512))
                ]
            )
            means.append(float(diag.mean()))
        total = sum(means) or 1.0
        for a, name in enumerate(addends):
            sym = base_symbol(name)
            out.append(
                TermSummary(
                    d,
                    a,
                    name,
                    means[a] / total,
                    {p: hyper[(d, a, p)] for p in sym.param_names},
                    {p: orig.get((d, a, p)) for p in sym.param_names},
                )
            )
    return out


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def format_description(terms: list[TermSummary], columns: list[str] | None = None) -> str:
    """The terms as indented text: one block per dimension, one line per term."""
    lines: list[str] = []
    for d in sorted({t.dim for t in terms}):
        name = columns[d] if columns is not None and d < len(columns) else f"x{d}"
        lines.append(f"dimension {d} ({name}):")
        for t in (t for t in terms if t.dim == d):
            pars = ", ".join(
                f"{p} {_num(t.original.get(p)) if t.original.get(p) is not None else _num(v) + ' (normalised)'}"
                for p, v in t.hyperparameters.items()
            )
            lines.append(f"  {t.symbol:<8} {100 * t.share:5.1f}% of variance   {pars}")
    return "\n".join(lines)
