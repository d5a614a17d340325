"""The inference runtime loads neither training, the simulator nor the experiments; the
commands that need them fail with one line naming what to install; moved names still
import, with a DeprecationWarning naming the new path."""

from __future__ import annotations

import json
import sys
import warnings

import pytest

from amorgp.amortizer.testing import python_without as _python


def test_plain_inference_imports_neither_training_nor_the_simulator() -> None:
    code = """
import json, sys
import numpy as np
from amorgp.amortizer import Amortizer
rng = np.random.default_rng(0)
X = rng.uniform(0, 1, (40, 1))
y = np.sin(6 * X[:, 0]) + 0.1 * rng.normal(size=40)
result = Amortizer.from_pretrained().infer(X, y, "SE + PER")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("amorgp", "sklearn")))))
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    assert "amorgp.amortizer.inference" in modules  # the probe saw the runtime
    assert not [m for m in modules if m.startswith("amorgp.simulator")]
    assert not [m for m in modules if m.startswith("amorgp.amortizer.train")]
    assert not [m for m in modules if m.startswith("amorgp_experiments")]
    assert "sklearn" not in modules  # the estimator (and scikit-learn) load on first use


def test_inference_works_without_the_simulator_installed() -> None:
    code = """
import numpy as np
from amorgp.amortizer import Amortizer
X = np.linspace(0, 1, 30)[:, None]
y = np.sin(6 * X[:, 0])
print(Amortizer.from_pretrained().infer(X, y, "SE").noise > 0)
"""
    out = _python(code, blocked=("amorgp.simulator",))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("True")


def test_old_module_paths_are_the_moved_modules_with_a_warning() -> None:
    import importlib

    import amorgp.amortizer as amortizer

    loss = importlib.import_module("amorgp.amortizer.training.loss")
    train = importlib.import_module("amorgp.amortizer.training.train")

    for old, new in (("amorgp.amortizer.loss", loss), ("amorgp.amortizer.train", train)):
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=new.__name__):
            module = importlib.import_module(old)
        assert module is new
        assert module.__spec__ is not None
        assert module.__spec__.name == new.__name__
    # importing the old module path leaves the package's ``train`` the function
    with pytest.warns(DeprecationWarning, match="amorgp.amortizer.training"):
        fn = amortizer.train
    assert fn is train.train


def test_moved_errors_are_caught_by_their_deprecated_aliases() -> None:
    import amorgp.kernel_grammar as kg
    from amorgp.amortizer.errors import CheckpointError, TrainingError

    with pytest.warns(DeprecationWarning, match=r"amorgp\.amortizer\.errors\.CheckpointError"):
        old_checkpoint = kg.CheckpointError
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from amorgp.kernel_grammar.errors import TrainingError as old_training
    with pytest.raises(old_checkpoint):
        raise CheckpointError("x")
    with pytest.raises(old_training):
        raise TrainingError("x")
    assert issubclass(CheckpointError, ValueError)
    assert issubclass(TrainingError, RuntimeError)


@pytest.mark.parametrize(
    ("old", "blocked", "install"),
    [
        ("amorgp.amortizer.cli", "amorgp.cli", "pip install amorgp-cli"),
        ("amorgp.amortizer.plotting", "amorgp.cli", "pip install amorgp-cli"),
        ("amorgp.amortizer.bridge", "amorgp.gpytorch", "pip install amorgp-gpytorch"),
        ("amorgp.amortizer.bridge.fit", "amorgp.gpytorch", "pip install amorgp-gpytorch"),
    ],
)
def test_an_old_path_of_a_package_not_installed_names_it(
    old: str, blocked: str, install: str
) -> None:
    code = f"""
from amorgp.amortizer.errors import MissingExtraError
try:
    import {old}
except MissingExtraError as err:
    print(type(err).__name__, err)
"""
    out = _python(code, blocked=(blocked,))
    assert out.returncode == 0, out.stderr
    (line,) = out.stdout.strip().splitlines()
    assert line.startswith("MissingExtraError amorgp.amortizer.")
    assert f" moved to {blocked}" in line
    assert line.endswith(install)
