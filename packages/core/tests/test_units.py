"""Each unit maps a value back to original units as its documentation says.

The oracles are the formulas written out here with numpy: the column range
``max - min`` and the population standard deviation of the targets.
"""

from __future__ import annotations

import numpy as np
import pytest

from amorgp.core.data import Normalizer
from amorgp.core.units import Unit

X = np.array([[1.0, -3.0, 7.0], [4.0, 5.0, 7.0], [2.5, 1.0, 7.0]])  # third column constant
Y = np.array([10.0, -2.0, 4.0])
RANGE = np.array([3.0, 8.0, 0.0])
S2 = float(np.var(Y))  # population variance


@pytest.fixture(scope="module")
def norm() -> Normalizer:
    with pytest.warns(UserWarning, match="constant"):
        return Normalizer.fit(X, Y)


def test_units_are_the_four_documented_ones() -> None:
    assert [u.value for u in Unit] == ["input", "free", "variance", "inexact"]


@pytest.mark.parametrize("dim", [0, 1])
def test_input_lengths_scale_with_the_column_range(norm: Normalizer, dim: int) -> None:
    assert norm.to_original(dim, Unit.INPUT, 0.25) == pytest.approx(0.25 * RANGE[dim])


def test_a_constant_column_has_no_length(norm: Normalizer) -> None:
    assert norm.to_original(2, Unit.INPUT, 0.25) is None


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_unit_free_values_are_unchanged(norm: Normalizer, dim: int) -> None:
    assert norm.to_original(dim, Unit.FREE, 0.7) == 0.7


def test_the_target_variance_goes_to_dimension_zero(norm: Normalizer) -> None:
    assert norm.to_original(0, Unit.VARIANCE, 0.5) == pytest.approx(0.5 * S2, rel=1e-12)
    assert norm.to_original(1, Unit.VARIANCE, 0.5) == 0.5
    assert norm.to_original(2, Unit.VARIANCE, 0.5) == 0.5


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_inexact_values_have_none(norm: Normalizer, dim: int) -> None:
    assert norm.to_original(dim, Unit.INEXACT, 0.5) is None


def test_a_value_that_overflows_is_none() -> None:
    norm = Normalizer.fit(np.array([[0.0], [1.0], [2.0]]), np.array([0.0, 1e150, 2e150]))
    assert norm.to_original(0, Unit.VARIANCE, 1e100) is None  # 1e100 * (8e149)^2 overflows
    assert norm.to_original(0, Unit.VARIANCE, 1.0) == pytest.approx(np.var([0.0, 1.0, 2.0]) * 1e300)
