"""The GPyTorch bridge's bad arguments and bad data: one typed, one-line error each
(``DataError`` for data, ``OptionError`` for arguments), never a ZeroDivisionError,
GPyTorch's index error, a silent complex cast or an AttributeError."""

from __future__ import annotations

import pytest
import torch

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.errors import DataError, OptionError
from amorgp.gpytorch import AmortizedFit, fit_amortized, to_gpytorch


@pytest.fixture(scope="module")
def fit() -> tuple[KernelResult, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(30, 1, generator=g, dtype=torch.float64)
    y = torch.sin(6 * X[:, 0]) + 0.1 * torch.randn(30, generator=g, dtype=torch.float64)
    return Amortizer.from_pretrained().infer(X, y, "SE"), X, y


def _one_line(err: pytest.ExceptionInfo[BaseException]) -> None:
    assert "\n" not in str(err.value)


def test_constant_targets_are_a_data_error(fit) -> None:  # type: ignore[no-untyped-def]
    r, X, _ = fit
    with pytest.raises(DataError, match="train_Y is constant") as err:
        to_gpytorch(r, X, torch.ones(X.shape[0]))
    _one_line(err)


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_points_are_a_data_error(fit, n: int) -> None:  # type: ignore[no-untyped-def]
    r, X, y = fit
    with pytest.raises(DataError, match=f"at least 2 training points, got {n}") as err:
        to_gpytorch(r, X[:n], y[:n])
    _one_line(err)


def test_nan_targets_are_a_data_error(fit) -> None:  # type: ignore[no-untyped-def]
    r, X, y = fit
    bad = y.clone()
    bad[3] = float("nan")
    with pytest.raises(DataError, match=r"train_Y contains NaN or infinite values") as err:
        to_gpytorch(r, X, bad)
    _one_line(err)


def test_nan_inputs_are_a_data_error(fit) -> None:  # type: ignore[no-untyped-def]
    r, X, y = fit
    bad = X.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(DataError, match=r"train_X contains NaN or infinite values"):
        to_gpytorch(r, bad, y)


def test_complex_data_are_refused_not_cast(fit) -> None:  # type: ignore[no-untyped-def]
    r, X, y = fit
    with pytest.raises(DataError, match="train_X") as err:
        to_gpytorch(r, X.to(torch.complex128), y)
    _one_line(err)
    with pytest.raises(DataError, match="train_Y"):
        to_gpytorch(r, X, y.to(torch.complex128) * (1 + 1j))


def test_only_one_of_x_and_y_is_an_option_error(fit) -> None:  # type: ignore[no-untyped-def]
    r, X, y = fit
    with pytest.raises(OptionError, match="pass both train_X and train_Y, or neither"):
        to_gpytorch(r, X, None)
    with pytest.raises(OptionError, match="pass both train_X and train_Y, or neither"):
        to_gpytorch(r, None, y)


def test_valid_data_still_export(fit) -> None:  # type: ignore[no-untyped-def]
    r, X, y = fit
    model = to_gpytorch(r, X.numpy(), y.tolist())
    assert model.train_inputs[0].shape == (30, 1)


@pytest.mark.parametrize("bad", [None, 42, "mll"])
def test_fit_of_something_not_an_mll_is_an_option_error(bad: object) -> None:
    with pytest.raises(OptionError, match="marginal log likelihood") as err:
        fit_amortized(bad)  # type: ignore[arg-type]
    _one_line(err)
    with pytest.raises(OptionError, match=f"got {type(bad).__name__}$"):
        AmortizedFit()(bad)
