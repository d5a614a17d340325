"""The fit protocol (``amorgp.core.fit``) on a stand-in structure: the table's units, the
predictive and its density in original units, against numpy and scipy."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from scipy.stats import norm as normal
from torch import Tensor

from amorgp.core.data import Normalizer
from amorgp.core.errors import DataError
from amorgp.core.fit import HyperparameterInference, KernelFit
from amorgp.core.units import Unit


class _Name(NamedTuple):
    dim: int
    addend: int
    symbol: str
    param: str
    slot: int


class _Kind(enum.Enum):
    VARIANCE = "variance"
    LENGTHSCALE = "lengthscale"
    OFFSET = "offset"


class _Spec(NamedTuple):
    kind: _Kind


class _Structure:
    """What a fit reads of its structure: a variance and a lengthscale on column 0 (SE),
    a unit-free value and an inexact one on column 1."""

    n_dims = 2
    dims = (("A",), ("B",))
    is_uniform = False
    rows = (
        (_Name(0, 0, "A", "variance", 0), _Kind.VARIANCE, Unit.VARIANCE),
        (_Name(0, 0, "A", "lengthscale", 1), _Kind.LENGTHSCALE, Unit.INPUT),
        (_Name(1, 0, "B", "shape", 0), _Kind.LENGTHSCALE, Unit.FREE),
        (_Name(1, 0, "B", "offset", 1), _Kind.OFFSET, Unit.INEXACT),
    )

    def param_specs(self) -> list[tuple[_Name, _Spec]]:
        return [(n, _Spec(k)) for n, k, _ in self.rows]

    def param_units(self) -> list[Unit]:
        return [u for _, _, u in self.rows]

    def __str__(self) -> str:
        return "A@0 * B@1"


@dataclass(frozen=True, eq=False, kw_only=True)
class _Linear(KernelFit):
    """A fit whose normalised predictive is ``N(x_0 + x_1, 0.25 + noise)``."""

    @property
    def log_marginal_likelihood(self) -> float:
        return -3.5

    def _predict_normalized(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        var = torch.full(
            (Xn.shape[0],), 0.25 + (self.noise if include_noise else 0.0), dtype=torch.float64
        )
        return Xn.sum(1).to(torch.float64), var.to(torch.float64)


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.uniform([-2.0, 10.0], [3.0, 14.0], (20, 2)), 5.0 + 3.0 * rng.normal(size=20)


def _fit(X: np.ndarray, y: np.ndarray) -> _Linear:
    params = torch.tensor([[[0.5, 0.2]], [[0.7, 0.3]]], dtype=torch.float64)
    return _Linear(
        kernel=_Structure(),  # type: ignore[arg-type]
        params=params,
        noise=0.1,
        normalizer=Normalizer.fit(X, y),
        n_points=len(y),
        time_s=0.0,
        call_time_s=0.0,
    )


def test_table_maps_each_unit_to_original_units(data: Any) -> None:
    X, y = data
    fit = _fit(X, y)
    s_y, r = y.std(), X.max(0) - X.min(0)
    got = {(h.dim, h.name): (h.kind, h.value, h.original) for h in fit.table}
    assert got[(0, "variance")] == pytest.approx(("variance", 0.5, 0.5 * s_y**2))
    assert got[(0, "lengthscale")] == pytest.approx(("lengthscale", 0.2, 0.2 * r[0]))
    assert got[(1, "shape")] == ("lengthscale", 0.7, 0.7)
    assert got[(1, "offset")] == ("offset", 0.3, None)
    assert fit.hyperparameters[(0, 0, "lengthscale")] == 0.2
    assert fit.noise_original == pytest.approx(0.1 * s_y**2)
    assert fit.log_marginal_likelihood_original == pytest.approx(-3.5 - 20 * np.log(s_y))
    assert fit.kernel_text == "A@0 * B@1"
    assert fit.to_dict()["hyperparameters"][3]["original"] is None


def test_predictive_and_density_in_original_units(data: Any) -> None:
    X, y = data
    fit = _fit(X, y)
    Xq = np.array([[0.0, 12.0], [2.5, 11.0]])
    lo, r = X.min(0), X.max(0) - X.min(0)
    mu_n = ((Xq - lo) / r).sum(1)
    mean, var = fit.predict(Xq)
    np.testing.assert_allclose(mean.numpy(), y.mean() + y.std() * mu_n, rtol=1e-12)
    np.testing.assert_allclose(var.numpy(), (0.35) * y.std() ** 2, rtol=1e-12)
    y_new = np.array([4.0, 9.0])
    want = normal(y.mean() + y.std() * mu_n, np.sqrt(0.35) * y.std()).logpdf(y_new)
    np.testing.assert_allclose(fit.log_predictive_density(Xq, y_new).numpy(), want, rtol=1e-12)
    with pytest.raises(DataError, match="y_new has 1 values for 2 inputs"):
        fit.log_predictive_density(Xq, y_new[:1])


def test_base_is_abstract_and_the_protocol_is_structural() -> None:
    with pytest.raises(TypeError, match="abstract"):
        KernelFit()  # type: ignore[abstract]

    class Method:
        def fit_many(self, X: Any, y: Any, kernels: Any) -> list[KernelFit]:
            return []

    assert isinstance(Method(), HyperparameterInference)
    assert not isinstance(object(), HyperparameterInference)
