"""Complex-valued data are refused, as scikit-learn's ``check_array`` refuses them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.utils import check_array

from amorgp.core.data import as_dataset, as_inputs
from amorgp.core.errors import DataError

CASES = {
    "numpy complex": np.array([[1.0 + 2.0j], [2.0], [3.0]]),
    "numpy complex with zero imaginary part": np.array([[1.0 + 0j], [2.0], [3.0]]),
    "list holding a complex": [[1.0], [2.0 + 1.0j], [3.0]],
    "torch complex": torch.ones(3, 1, dtype=torch.complex128),
}


@pytest.mark.parametrize("case", list(CASES))
def test_complex_inputs_are_refused_like_scikit_learn(case: str) -> None:
    X = CASES[case]
    if not isinstance(X, torch.Tensor):  # the oracle: scikit-learn refuses them too
        with pytest.raises(ValueError, match=r"[Cc]omplex"):
            check_array(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning on the way
        with pytest.raises(DataError, match="complex"):
            as_inputs(X)
        with pytest.raises(DataError, match="y holds complex"):
            as_dataset(np.ones((3, 1)), np.array([1.0, 2.0 + 1j, 3.0]))


def test_real_data_still_pass() -> None:
    X, y = as_dataset([[1.0], [2.0], [3.0]], [1, 2, 4])
    assert X.dtype == torch.float64
    assert y.tolist() == [1.0, 2.0, 4.0]
