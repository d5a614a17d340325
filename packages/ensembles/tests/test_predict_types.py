"""``KernelEnsemble.predict`` follows ``KernelResult.predict``: numpy arrays for numpy (or
list) input, float64 CPU tensors for a tensor (issue 64, item 8)."""

from __future__ import annotations

import numpy as np
import torch

from amorgp.ensembles import KernelEnsemble
from amorgp.ensembles.testing import PriorMeanInference


def _ensemble() -> KernelEnsemble:
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(30, 1, generator=gen, dtype=torch.float64) * 4
    y = torch.sin(5 * X[:, 0]) + 0.1 * torch.randn(30, generator=gen, dtype=torch.float64)
    return KernelEnsemble.fit(PriorMeanInference(), X.numpy(), y.numpy(), ["SE", "PER", "LIN"])


def test_numpy_in_numpy_out_tensor_in_tensor_out() -> None:
    ens = _ensemble()
    Xq = np.linspace(0.0, 4.0, 7)[:, None]
    mean, std = ens.predict(Xq, return_std=True)
    assert isinstance(mean, np.ndarray)
    assert isinstance(std, np.ndarray)
    assert mean.dtype == np.float64
    assert mean.shape == std.shape == (7,)
    only_mean = ens.predict(Xq.tolist())
    assert isinstance(only_mean, np.ndarray)
    t_mean, t_std = ens.predict(torch.from_numpy(Xq), return_std=True)
    assert isinstance(t_mean, torch.Tensor)
    assert isinstance(t_std, torch.Tensor)
    mix = ens.predictive(Xq)  # the oracle: the mixture's own moments
    np.testing.assert_allclose(mean, mix.mean().numpy(), rtol=0, atol=0)
    np.testing.assert_allclose(std, mix.variance().sqrt().numpy(), rtol=0, atol=0)
    np.testing.assert_array_equal(t_mean.numpy(), mean)
    np.testing.assert_array_equal(only_mean, mean)


def test_ensemble_warnings_name_the_callers_line() -> None:
    import warnings

    gen = torch.Generator().manual_seed(0)
    X = torch.rand(30, 1, generator=gen, dtype=torch.float64) * 4
    y = torch.sin(5 * X[:, 0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        KernelEnsemble.fit(PriorMeanInference(fail=("PER",)), X, y, ["SE", "PER", "LIN"])
    ours = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert ours
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]
