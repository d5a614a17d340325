"""The one data validation: datasets (``as_dataset``) and padded batches
(``PaddedBatch.validate`` and ``validate_dimwise``, which share their checks) raise one error
type, :class:`DataError` (a ``ValueError``), with the same one-line messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from amorgp.core.data import MIN_POINTS, as_dataset
from amorgp.core.errors import DataError
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure
from amorgp.lazy_kernels import PaddedBatch, kernel_matrix_dimwise, validate_dimwise
from amorgp.lazy_kernels.testing import BAD_DATASETS, check_rejects_bad_data

VOCAB = PAPER_VOCABULARY


def test_as_dataset_rejects_every_bad_dataset() -> None:
    assert len(BAD_DATASETS) >= 10
    check_rejects_bad_data(lambda X, y: as_dataset(X, y, min_points=MIN_POINTS, training=True))


def test_the_suite_fails_an_entry_point_that_accepts_bad_data() -> None:
    with pytest.raises(AssertionError, match="accepted"):
        check_rejects_bad_data(lambda X, y: None)

    def two_lines(X: Any, y: Any) -> None:
        raise DataError("X contains NaN\nsecond line")

    with pytest.raises(AssertionError, match="multi-line"):
        check_rejects_bad_data(two_lines)


def _batch() -> PaddedBatch:
    g = torch.Generator().manual_seed(0)
    sizes = [(5, 2), (3, 1), (6, 3)]
    texts = ["SE + PER", "LIN", "(SE*LIN)@0 * PER@1 * (SE + LIN)@2"]
    data = [
        (
            torch.rand(n, d, generator=g, dtype=torch.float64),
            torch.randn(n, generator=g, dtype=torch.float64),
        )
        for n, d in sizes
    ]
    structs = [DimWiseStructure.parse(t, d) for t, (_, d) in zip(texts, sizes, strict=True)]
    b = PaddedBatch.from_datasets(data, structs, VOCAB)
    params = 0.5 + torch.rand(b.param_shape, generator=g, dtype=torch.float64)
    return b.with_params(params, torch.full((3,), 0.1, dtype=torch.float64))


def _set(t: torch.Tensor, index: tuple[int, ...], value: Any) -> torch.Tensor:
    out = t.clone()
    out[index] = value
    return out


Change = Callable[[PaddedBatch], dict[str, Any]]
SHARED: list[tuple[str, Change, str]] = [
    ("unknown id", lambda b: {"symbols": _set(b.symbols, (0, 0, 0), 7)}, "unknown symbol id 7"),
    (
        "negative id",
        lambda b: {"symbols": _set(b.symbols, (1, 2, 1), -1)},
        "unknown symbol id -1",
    ),
    (
        "padding id marked present",
        lambda b: {"symbol_mask": _set(b.symbol_mask, (1, 0, 1), True)},
        "padding id 0",
    ),
    (
        "addend in a padded dimension",
        lambda b: {"dim_mask": _set(b.dim_mask, (2, 2), False)},
        "batch element 2 places a symbol in dimension 2",
    ),
    (
        "present dimension without addend",
        lambda b: {"symbol_mask": _set(b.symbol_mask, (0, 1), False)},
        "batch element 0: present dimension 1 has no addend",
    ),
    (
        "pair without dimension",
        lambda b: {
            "symbol_mask": _set(b.symbol_mask, (1,), False),
            "dim_mask": _set(b.dim_mask, (1,), False),
        },
        "batch element 1 has no active dimension",
    ),
    (
        "NaN parameter",
        lambda b: {"params": _set(b.params, (0, 0, 0, 0), float("nan"))},
        "params contains NaN or infinite values in used slots",
    ),
    (
        "zero parameter",
        lambda b: {"params": _set(b.params, (2, 1, 0, 1), 0.0)},
        "params must be positive in every used slot",
    ),
]


def _dimwise(b: PaddedBatch) -> None:
    assert b.params is not None
    kernel_matrix_dimwise(b.X, b.X, b.symbols, b.symbol_mask, b.params, b.vocab, b.dim_mask)


@pytest.mark.parametrize(("case", "change", "message"), SHARED, ids=[c[0] for c in SHARED])
def test_batch_and_evaluator_share_one_validation(case: str, change: Change, message: str) -> None:
    b = _batch()
    bad = replace(b, **change(b))
    with pytest.raises(DataError) as batch_err:
        bad.validate()
    with pytest.raises(DataError) as eval_err:
        _dimwise(bad)
    assert message in str(batch_err.value)
    assert str(batch_err.value) == str(eval_err.value)  # the same check, the same words
    assert "\n" not in str(batch_err.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_inputs_at_present_entries(value: float) -> None:
    b = _batch()
    X = _set(b.X, (2, 4, 1), value)
    with pytest.raises(DataError, match="X contains NaN or infinite values at present entries"):
        replace(b, X=X).validate()
    with pytest.raises(DataError, match="X1 contains NaN or infinite values in active dim"):
        validate_dimwise(X, None, b.symbols, b.symbol_mask, b.params, VOCAB, b.dim_mask)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="y contains NaN or infinite values at present points"):
        replace(b, y=_set(b.y, (0, 1), value)).validate()


def test_padding_may_hold_anything() -> None:
    """Junk in padded dimensions (and, for the batch, at padded points) is no error."""
    b = _batch()
    pad = ~(b.point_mask[:, :, None] & b.dim_mask[:, None, :])
    X = b.X.masked_fill(pad & ~b.dim_mask[:, None, :], float("nan"))
    junk = replace(b, X=X, y=b.y.masked_fill(~b.point_mask, float("inf")))
    junk.validate()
    _dimwise(junk)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: {"point_mask": torch.zeros_like(b.point_mask)}, "at least one point"),
        (lambda b: {"X": b.X[..., :2]}, "dim_mask must have shape"),
        (lambda b: {"y": b.y[:, :-1]}, "y must have shape"),
        (lambda b: {"symbols": b.symbols.double()}, "symbols must be a int"),
        (lambda b: {"point_mask": b.point_mask.int()}, "point_mask must be a bool"),
    ],
)
def test_layout_errors_are_data_errors(change: Change, message: str) -> None:
    b = _batch()
    with pytest.raises(DataError, match=message):
        replace(b, **change(b)).validate()


def test_evaluator_layout_errors_are_data_errors() -> None:
    b = _batch()
    assert b.params is not None
    with pytest.raises(DataError, match="X1 and X2 differ"):
        kernel_matrix_dimwise(b.X, b.X.float(), b.symbols, b.symbol_mask, b.params, VOCAB)
    with pytest.raises(DataError, match="slots"):
        kernel_matrix_dimwise(b.X, b.X, b.symbols, b.symbol_mask, b.params[..., :1], VOCAB)
    with pytest.raises(DataError, match="integer ids"):
        kernel_matrix_dimwise(b.X, b.X, b.symbols.double(), b.symbol_mask, b.params, VOCAB)
