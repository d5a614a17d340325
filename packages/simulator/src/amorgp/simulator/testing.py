"""Reusable checks for code that produces or consumes simulated batches.

:func:`check_batch` asserts the padded batch contract (``docs/architecture.md`` §3) and the
simulator's ground-truth invariants; downstream packages (the amortizer's data
pipeline, fixed-set loaders) can call it on anything that claims to be a
:class:`~amorgp.simulator.batch.SimulatedBatch`.  :func:`dense_covariance` is a
dense float64 numpy oracle of one dataset's covariance built on
:meth:`amorgp.kernel_grammar.DimWiseStructure.reference` (the registry's reference
formulas, independent of the batched evaluator); :func:`structure_of` reads one
element of a padded batch in that form.
"""

from __future__ import annotations

import numpy as np
import torch

from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, symbol_sort_key
from amorgp.lazy_kernels import UNUSED_SLOT_VALUE
from amorgp.simulator.batch import SimulatedBatch
from amorgp.simulator.config import SimulatorConfig

__all__ = ["check_batch", "dense_covariance", "structure_of"]


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def check_batch(batch: SimulatedBatch, config: SimulatorConfig) -> None:
    """Assert that ``batch`` satisfies the contract for ``config``.

    First the padded-batch contract itself (:meth:`~amorgp.lazy_kernels.PaddedBatch.validate`:
    shapes, dtypes, ids, masks, finite data, positive ground truth), then the
    simulator's invariants: float64 data; masks that are prefixes (real points,
    dimensions and addends first); zeros at padding (``X``, ``y``, ids); ``n`` and
    ``d`` in their ranges; ids distinct and sorted within a dimension; 1.0 in unused
    parameter slots; ``is_positive`` exactly "presented structure equals true
    structure"; ``y = 0`` for invalid elements; and the test-point fields when present.

    Raises:
        AssertionError: naming the first violated property.
    """
    try:
        batch.validate()
    except ValueError as err:
        raise AssertionError(f"padded batch contract: {err}") from None
    _require(batch.vocab == config.vocabulary, "batch vocabulary differs from the config's")
    B, _, D = batch.X.shape
    V = len(config.vocabulary)
    _require(batch.X.dtype == torch.float64, f"X must be float64, got {batch.X.dtype}")
    for name in ("symbols", "true_symbols"):
        sym = getattr(batch, name)
        mask = getattr(batch, name.replace("symbols", "symbol_mask"))
        _require(sym.dtype == torch.int64, f"{name} must be int64")
        _require(sym.shape[:2] == (B, D), f"{name} shape {tuple(sym.shape)} != (B, D, L)")
        _require(bool(torch.equal(mask, sym > 0)), f"{name} mask must equal {name} > 0")
        _require(bool(((sym >= 0) & (sym <= V)).all()), f"{name} ids outside 0..{V}")
        active = mask.any(-1)
        _require(
            bool(torch.equal(active, batch.dim_mask)),
            f"{name}: real dimensions must have addends and padded ones none",
        )
        big = torch.where(mask, sym, V + 1)
        _require(
            bool((big[..., 1:] > big[..., :-1]).where(mask[..., 1:], True).all()),
            f"{name}: addends must be distinct and sorted by id",
        )
        _require(bool((mask[..., 1:] <= mask[..., :-1]).all()), f"{name}: padding must come last")
        _require(
            int(mask.sum(-1).max()) <= config.addend_cap,
            f"{name}: more than {config.addend_cap} addends in a dimension",
        )
    n, d = batch.point_mask.sum(1), batch.dim_mask.sum(1)
    _require(bool(((n >= config.n_min) & (n <= config.n_max)).all()), "n outside [n_min, n_max]")
    _require(bool(((d >= 1) & (d <= config.d_max)).all()), "d outside [1, d_max]")
    _require(
        bool((batch.point_mask[:, 1:] <= batch.point_mask[:, :-1]).all()),
        "point_mask must be a prefix",
    )
    _require(
        bool((batch.dim_mask[:, 1:] <= batch.dim_mask[:, :-1]).all()), "dim_mask must be a prefix"
    )
    real_x = batch.point_mask[:, :, None] & batch.dim_mask[:, None, :]
    _require(bool((batch.X[~real_x] == 0).all()), "X must be 0 at padding")
    xr = batch.X[real_x]
    _require(bool(((xr >= config.x_low) & (xr <= config.x_high)).all()), "X outside its box")
    _require(bool((batch.y[~batch.point_mask] == 0).all()), "y must be 0 at padded points")
    _require(bool(torch.isfinite(batch.y).all()), "y must be finite")
    _require(bool((batch.y[~batch.valid] == 0).all()), "invalid elements must have y = 0")
    unused = batch.params[~batch.used_slots()]
    _require(bool((unused == UNUSED_SLOT_VALUE).all()), "unused parameter slots must hold 1.0")
    w = max(batch.symbols.shape[-1], batch.true_symbols.shape[-1])
    pad = torch.nn.functional.pad
    same = (
        (
            pad(batch.symbols, (0, w - batch.symbols.shape[-1]))
            == pad(batch.true_symbols, (0, w - batch.true_symbols.shape[-1]))
        )
        .flatten(1)
        .all(1)
    )
    _require(
        bool(torch.equal(same, batch.is_positive)),
        "is_positive must equal (symbols == true_symbols)",
    )
    if config.positive_ratio == 1.0:
        _require(bool(batch.is_positive.all()), "finetune mode must give positives only")
    _require(
        batch.valid.dtype == torch.bool and batch.valid.shape == (B,), "valid must be bool (B,)"
    )
    if config.n_test > 0:
        if batch.X_test is None or batch.y_test is None or batch.test_mask is None:
            raise AssertionError("test points missing")
        _require(batch.X_test.shape == (B, config.n_test, D), "X_test shape")
        _require(batch.y_test.shape == (B, config.n_test), "y_test shape")
        _require(
            bool((batch.X_test[~batch.dim_mask[:, None, :].expand_as(batch.X_test)] == 0).all()),
            "X_test must be 0 in padded dimensions",
        )
    else:
        _require(batch.X_test is None, "no test points expected")


StructureParams = tuple[DimWiseStructure, np.ndarray]
"""A structure and its parameters ``(D, L, P)`` in the structure's canonical addend order."""


def dense_covariance(X: np.ndarray, structure: StructureParams, noise: float) -> np.ndarray:
    """Dense float64 ``K(X, X) + noise I`` of one dimension-wise structure (numpy oracle).

    Args:
        X: ``(n, d)`` inputs.
        structure: ``(structure, params (d, L, P))`` as returned by :func:`structure_of`.
        noise: observation-noise variance.

    Returns:
        ``(n, n)`` covariance from :meth:`~amorgp.kernel_grammar.DimWiseStructure.reference`.
    """
    s, params = structure
    X = np.asarray(X, dtype=float)
    return s.reference(X, X, params) + noise * np.eye(X.shape[0])


def structure_of(
    symbols: torch.Tensor, params: torch.Tensor, index: int, vocab: Vocabulary
) -> StructureParams:
    """Element ``index`` of ``symbols (B, D, L)`` (0 = padding) and ``params (B, D, L, P)``
    as a :class:`~amorgp.kernel_grammar.DimWiseStructure` over its real dimensions, with
    the parameters permuted to the structure's canonical (sorted) addend order."""
    ids = symbols[index].tolist()
    values = params[index].detach().cpu().numpy().astype(float)
    dims: list[list[tuple[str, np.ndarray]]] = []
    for d, row in enumerate(ids):
        addends = [(vocab.symbol(i).name, values[d, a]) for a, i in enumerate(row) if i]
        if addends:
            dims.append(sorted(addends, key=lambda t: symbol_sort_key(t[0])))
    aligned = np.ones((len(dims), max(len(a) for a in dims), values.shape[-1]))
    for d, addends in enumerate(dims):
        for a, (_, theta) in enumerate(addends):
            aligned[d, a] = theta
    return DimWiseStructure(tuple(tuple(n for n, _ in a) for a in dims)), aligned
