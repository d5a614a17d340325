"""Bad inputs to ``KernelEnsemble.fit`` and ``structure_search`` raise their typed error
up front (never "every member failed"); a single kernel text is one kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.core.errors import DataError, OptionError
from amorgp.ensembles import KernelEnsemble, structure_search
from amorgp.ensembles.testing import PriorMeanInference
from amorgp.kernel_grammar import DimWiseStructure, KernelSyntaxError


def _data(n: int = 30, d: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 4, (n, d))
    return X, np.sin(3 * X.sum(1)) + 0.1 * rng.standard_normal(n)


def _nan_y() -> tuple[np.ndarray, np.ndarray]:
    X, y = _data()
    y[4] = np.nan
    return X, y


def _huge_y() -> tuple[np.ndarray, np.ndarray]:
    X, y = _data()
    return X, y * 1e300


BAD_DATA = {
    "nan in y": (_nan_y, "NaN"),
    "n = 2": (lambda: _data(2), "at least 3"),
    "constant y": (lambda: (_data()[0], np.ones(30)), "constant"),
    "y of two columns": (lambda: (_data()[0], np.ones((30, 2))), "shape"),
    "y x 1e300": (_huge_y, "standard deviation"),
    "complex X": (lambda: (_data()[0] * (1 + 1j), _data()[1]), "complex"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_data_raises_data_error_before_any_fit(case: str) -> None:
    make, words = BAD_DATA[case]
    X, y = make()
    inf = PriorMeanInference()
    with pytest.raises(DataError, match=words):
        KernelEnsemble.fit(inf, X, y, ["SE", "PER"])
    with pytest.raises(DataError, match=words):
        structure_search(inf, X, y, depth=1)
    assert inf.calls == []  # refused before the inference method ran


def test_kernel_errors_are_typed() -> None:
    X, y = _data()
    inf = PriorMeanInference()
    with pytest.raises(KernelSyntaxError):
        KernelEnsemble.fit(inf, X, y, ["SEE", "PRE"])
    with pytest.raises(KernelSyntaxError):
        structure_search(inf, X, y, start=["SE +"])
    with pytest.raises(DataError, match="2 input dimension"):
        KernelEnsemble.fit(inf, X, y, [DimWiseStructure.parse("SE", 2)])
    with pytest.raises(OptionError, match="at least one kernel"):
        KernelEnsemble.fit(inf, X, y, [])
    with pytest.raises(OptionError, match="weighting"):
        KernelEnsemble.fit(inf, X, y, ["SE"], weighting="best")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="max_addends"):
        structure_search(inf, X, y, max_addends=0)
    assert inf.calls == []


def test_a_single_kernel_text_is_one_kernel() -> None:
    X, y = _data()
    ens = KernelEnsemble.fit(PriorMeanInference(), X, y, "SE + PER")
    assert ens.n_members == 1
    assert str(ens.kernels[0]) == str(DimWiseStructure.parse("SE + PER", 1))
    assert float(ens.weights[0]) == 1.0
    res = structure_search(PriorMeanInference(), X, y, start="SE", depth=0)
    assert [c.structure for c in res.levels[0]] == [DimWiseStructure.parse("SE", 1)]
    torch.testing.assert_close(ens.weights.sum(), torch.tensor(1.0, dtype=torch.float64))
