"""``fit`` rejects bad data with the one data error of lazy-kernels' suite."""

from __future__ import annotations

import pytest

from amorgp.baselines import fit
from amorgp.lazy_kernels.testing import check_rejects_bad_data


@pytest.mark.parametrize("method", ["gp-ml", "map"])
def test_fit_rejects_every_bad_dataset(method: str) -> None:
    check_rejects_bad_data(lambda X, y: fit(X, y, "SE", method=method))
