"""The inference runtime loads neither training, the simulator nor the experiments; the
amortizer's own errors derive from the shared base classes."""

from __future__ import annotations

import json

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
    assert "amorgp.amortizer.frontends.inference" in modules  # the probe saw the runtime
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
