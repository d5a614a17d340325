"""The fit-result base (`amorgp.core.fit.KernelFit`) on an exact GP of lazy-kernels' `Posterior`,
against dense numpy/scipy oracles in original units."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from scipy.stats import norm as normal
from torch import Tensor

from amorgp.core.data import Normalizer
from amorgp.core.errors import DataError
from amorgp.core.fit import HyperparameterInference, KernelFit
from amorgp.diff_linalg.testing import dense_gp_log_marginal_likelihood, dense_gp_predictive
from amorgp.kernel_grammar import DimWiseStructure, base_symbol
from amorgp.lazy_kernels import DimWiseKernel, Posterior


@dataclass(frozen=True, eq=False, kw_only=True)
class _ExactFit(KernelFit):
    """The smallest concrete fit: an exact GP on the normalised data."""

    Xn: Tensor
    yn: Tensor

    def _gp(self) -> Posterior:
        kernel = DimWiseKernel(self.kernel, self.params)
        return Posterior.from_kernel(kernel, self.Xn, self.yn, self.noise, backend="cholesky")

    @property
    def log_marginal_likelihood(self) -> float:
        return float(self._gp().log_marginal_likelihood())

    def _predict_normalized(self, Xn: Tensor, include_noise: bool) -> tuple[Tensor, Tensor]:
        mean, var = self._gp().predict(Xn)
        assert var is not None
        return mean, var + self.noise if include_noise else var


def _fit(kernel: str = "(SE + PER)@0 * SE@1") -> tuple[_ExactFit, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.uniform([-3.0, 100.0], [5.0, 300.0], size=(25, 2))
    y = 40.0 + 7.0 * np.sin(X[:, 0]) + 0.01 * X[:, 1] + rng.normal(0, 0.3, 25)
    s = DimWiseStructure.parse(kernel, 2)
    norm = Normalizer.fit(X, y)
    params = torch.as_tensor(rng.uniform(0.3, 1.5, size=(2, s.max_addends, 4)))
    fit = _ExactFit(
        kernel=s,
        params=params,
        noise=0.05,
        normalizer=norm,
        n_points=25,
        time_s=0.5,
        call_time_s=1.0,
        Xn=norm.transform_x(X),
        yn=norm.transform_y(y),
    )
    return fit, X, y


def _dense(fit: _ExactFit, X: np.ndarray, y: np.ndarray, Xq: np.ndarray) -> tuple:
    """Exact GP in original units from the original-unit hyperparameters (numpy)."""
    s, p = fit.kernel, fit.params.numpy().copy()
    for h in fit.table:
        assert h.original is not None
        p[h.dim, h.addend, next(pn.slot for pn in s.param_names() if pn.param == h.name)] = (
            h.original
        )
    noise = fit.noise_original
    K = s.reference(X, X, p)
    r = y - fit.normalizer.y_mean
    mean, var = dense_gp_predictive(
        K, s.reference(X, Xq, p), np.diag(s.reference(Xq, Xq, p)), r, noise
    )
    lml = dense_gp_log_marginal_likelihood(K, r, noise)
    return fit.normalizer.y_mean + mean, var, lml


def test_original_units_reproduce_the_gp_in_original_units() -> None:
    """predict, the LML and the log predictive density in original units equal an exact
    GP built directly on the original data with the original-unit hyperparameters."""
    fit, X, y = _fit()
    Xq = X[:6] + 0.3
    mean, var = fit.predict(Xq)
    m_ref, v_ref, lml_ref = _dense(fit, X, y, Xq)
    np.testing.assert_allclose(mean.numpy(), m_ref, rtol=1e-9)
    np.testing.assert_allclose(var.numpy(), v_ref, rtol=1e-8)
    assert fit.log_marginal_likelihood_original == pytest.approx(lml_ref, rel=1e-9)
    yq = y[:6]
    lpd = fit.log_predictive_density(Xq, yq).numpy()
    np.testing.assert_allclose(lpd, normal.logpdf(yq, m_ref, np.sqrt(v_ref)), rtol=1e-9)
    _, var_f = fit.predict(Xq, include_noise=False)
    np.testing.assert_allclose(var.numpy() - var_f.numpy(), fit.noise_original, rtol=1e-9)


def test_names_and_summary() -> None:
    fit, _, _ = _fit("SE + PER")
    assert fit.kernel_text == "SE + PER"
    assert set(fit.hyperparameters) == {
        (p.dim, p.addend, p.param) for p in fit.kernel.param_names()
    }
    for h in fit.table:
        assert fit.hyperparameters[(h.dim, h.addend, h.name)] == h.value
        assert fit.hyperparameters_original[(h.dim, h.addend, h.name)] == h.original
    d = json.loads(json.dumps(fit.to_dict(), allow_nan=False))
    assert d["kernel"] == "SE + PER"
    assert d["time_s"] == 0.5
    assert d["call_time_s"] == 1.0
    assert len(d["hyperparameters"]) == len(fit.table)


def test_predict_validates_inputs() -> None:
    fit, X, y = _fit()
    with pytest.raises(DataError, match=r"shape \(m, 2\)"):
        fit.predict(np.ones((3, 3)))
    with pytest.raises(DataError, match="NaN"):
        fit.predict(np.array([[np.nan, 1.0]]))
    with pytest.raises(DataError, match="3 values for 2 inputs"):
        fit.log_predictive_density(X[:2], y[:3])


def test_base_is_abstract_and_the_protocol_is_structural() -> None:
    with pytest.raises(TypeError):
        KernelFit()  # type: ignore[abstract,call-arg]

    class _Method:
        def fit_many(self, X: object, y: object, kernels: object) -> list[KernelFit]:
            return []

    assert isinstance(_Method(), HyperparameterInference)


def test_original_units_reproduce_the_kernel() -> None:
    """The map the table uses (the grammar's units, the normalisation's to_original): the
    kernel evaluated on original data with original-unit values equals s_y^2 times the
    normalised kernel on normalised data (lengthscales, periods, variances)."""
    rng = np.random.default_rng(1)
    X = rng.uniform([10, -2], [30, 7], size=(15, 2))
    y = rng.normal(100, 20, 15)
    norm = Normalizer.fit(X, y)
    s = DimWiseStructure.parse("(SE + PER)@0 * (SE*PER)@1")
    params = rng.uniform(0.3, 2.0, size=(2, 2, 4))
    orig = params.copy()
    for pn in s.param_names():
        unit = base_symbol(pn.symbol).param_units[pn.slot]
        value = norm.to_original(pn.dim, unit, params[pn.dim, pn.addend, pn.slot])
        assert value is not None
        orig[pn.dim, pn.addend, pn.slot] = value
    Xn = norm.transform_x(torch.as_tensor(X)).numpy()
    K_norm = s.reference(Xn, Xn, params)
    K_orig = s.reference(X, X, orig)
    np.testing.assert_allclose(K_orig, norm.y_std**2 * K_norm, rtol=1e-10)
    assert norm.noise_to_original(0.5) == pytest.approx(0.5 * y.var())
    assert norm.lml_offset(15) == pytest.approx(-15 * np.log(y.std()))


def test_lin_and_constant_columns_have_no_original_units() -> None:
    with pytest.warns(UserWarning, match="constant"):
        norm = Normalizer.fit(torch.tensor([[1.0, 5.0], [2.0, 5.0], [4.0, 5.0]]), torch.ones(3))

    def original(dim: int, symbol: str, slot: int, value: float) -> float | None:
        return norm.to_original(dim, base_symbol(symbol).param_units[slot], value)

    assert original(0, "LIN", 0, 1.0) is None
    assert original(0, "SE*LIN", 2, 1.0) is None  # lin_offset
    assert original(0, "SE*LIN", 1, 1.0) == 3.0  # its lengthscale still maps
    assert original(1, "SE", 1, 0.5) is None  # lengthscale of a constant column
