"""``KernelEnsemble.fit`` rejects bad data with the one data error of lazy-kernels' suite."""

from __future__ import annotations

from amorgp.ensembles import KernelEnsemble
from amorgp.ensembles.testing import PriorMeanInference
from amorgp.lazy_kernels.testing import check_rejects_bad_data


def test_ensemble_fit_rejects_every_bad_dataset() -> None:
    check_rejects_bad_data(
        lambda X, y: KernelEnsemble.fit(PriorMeanInference(), X, y, ["SE", "SE + LIN"])
    )
