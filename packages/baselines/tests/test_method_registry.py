"""The baselines method registry: names users pass, method objects, dispatch and errors."""

from __future__ import annotations

import math

import pytest
import torch

from amorgp.baselines import METHODS, Baseline, fit_many
from amorgp.baselines.api import (
    _REGISTRY,
    BaselineMethod,
    FitResult,
    Type2MLMethod,
    get_method,
    register_method,
)
from amorgp.baselines.testing import dense_log_marginal_likelihood
from amorgp.baselines.testing import synthetic_dataset as make_data
from amorgp.core.errors import OptionError


def test_every_name_is_a_registered_method_object() -> None:
    assert tuple(_REGISTRY) == METHODS
    for name in METHODS:
        method = get_method(name)
        assert isinstance(method, BaselineMethod)
        assert method.name == name
        assert issubclass(method.result_type, FitResult)
        assert get_method(method) is method


def test_presets_of_the_type2ml_methods() -> None:
    lbfgs = get_method("map-lbfgs")
    assert isinstance(lbfgs, Type2MLMethod)
    settings = lbfgs.settings({"max_iters": 7})
    assert (settings.map, settings.optimizer, settings.max_iters) == (True, "lbfgs", 7)
    assert get_method("gp-ml-multistart").settings({}).restarts == 10  # type: ignore[attr-defined]


def test_unknown_and_duplicate_names_are_option_errors() -> None:
    with pytest.raises(OptionError, match="unknown method 'gp-mll'"):
        get_method("gp-mll")
    with pytest.raises(OptionError, match="unknown method"):
        fit_many(torch.zeros(3, 1), torch.zeros(3), ["SE"], "nope")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="unknown method"):
        Baseline("nope")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="already registered"):
        register_method(Type2MLMethod("gp-ml", "again"))


def test_a_method_object_runs_like_its_name_and_matches_the_dense_lml() -> None:
    X, y = make_data(20, 1, seed=4)
    by_name = fit_many(X, y, ["SE", "PER"], "gp-ml", max_iters=20)
    by_object = get_method("gp-ml").fit_many(X, y, ["SE", "PER"], max_iters=20)
    custom = Type2MLMethod("gp-ml-short", "gp-ml with 20 steps", max_iters=20)
    by_custom = Baseline(custom).fit_many(X, y, ["SE", "PER"])
    for a, b, c in zip(by_name, by_object, by_custom, strict=True):
        assert (a.method, b.method, c.method) == ("gp-ml", "gp-ml", "gp-ml-short")
        torch.testing.assert_close(a.params, b.params, rtol=0, atol=0)
        torch.testing.assert_close(a.params, c.params, rtol=0, atol=0)
        Xn, yn = a.normalizer.transform_x(X).numpy(), a.normalizer.transform_y(y).numpy()
        ref = dense_log_marginal_likelihood(Xn, yn, a.kernel, a.hyperparameters, a.noise)
        assert math.isclose(a.objective_value, ref, rel_tol=1e-8, abs_tol=1e-8)
