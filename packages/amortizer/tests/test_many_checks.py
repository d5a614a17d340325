"""Many datasets per call: what needs no data is checked once, before any work (kernels,
the datasets argument, the budget), instead of failing every dataset."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.frontends.many import iter_datasets
from amorgp.core.errors import OptionError


@pytest.fixture(scope="module")
def pair() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 5, (12, 1))
    return [(X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(12))]


@pytest.mark.parametrize(
    ("kernels", "words"),
    [
        (["SE", "FOO"], "unknown kernel 'FOO'"),
        (["SE@3"], "no kernel on input dimension(s) [0, 1, 2]"),
        (["SE", 7], "a kernel is an expression (text) or a DimWiseStructure, got int"),
    ],
)
def test_kernels_checkable_without_data_raise_once(
    amz: Amortizer, pair, kernels: list, words: str
) -> None:
    """``["SE", "FOO"]`` used to fail every dataset (SE's results lost)."""
    with pytest.raises(OptionError, match=re.escape(words)):
        amz.infer_datasets(pair, kernels)
    with pytest.raises(OptionError, match=re.escape(words)):
        next(iter_datasets(amz, pair, kernels))


def test_a_kernel_for_other_inputs_stays_a_per_dataset_error(amz: Amortizer, pair) -> None:
    """What depends on a dataset's inputs is that dataset's error (the others fit)."""
    X2 = np.column_stack([pair[0][0], pair[0][0] ** 2])
    fits = amz.infer_datasets([pair[0], (X2, pair[0][1])], ["SE@0 * PER@1"])
    assert [f.ok for f in fits] == [False, True]
    assert "dimension index 1 out of range" in (fits[0].error or "")


def test_datasets_and_budget_are_checked(amz: Amortizer, pair) -> None:
    gen = (p for p in pair)
    with pytest.raises(OptionError, match=r"^datasets must be a sequence .* got generator"):
        amz.infer_datasets(gen, ["SE"])  # type: ignore[arg-type]
    for budget in (math.inf, math.nan, -1.0, True):
        with pytest.raises(OptionError, match=r"^budget must be a positive finite number"):
            amz.infer_datasets(pair, ["SE"], budget=budget)


def test_a_binary_target_warns_once_per_call(amz: Amortizer, pair) -> None:
    """Datasets whose targets take two values are regressed as continuous, with one
    warning for the call that counts them."""
    X, _ = pair[0]
    binary = (X[:, 0] > np.median(X[:, 0])).astype(float)
    with pytest.warns(UserWarning, match=r"2 dataset\(s\) \(the first: dataset 1\)") as rec:
        fits = amz.infer_datasets([pair[0], (X, binary), (X, 1.0 - binary)], ["SE"])
    assert all(f.ok for f in fits)
    assert sum("distinct values" in str(w.message) for w in rec) == 1
