"""The batched member predictive on a device against each member's own (CPU, dense)
predictive.  Device-parametrised: the CPU case runs in the unit tests, the CUDA case
(``cuda`` marker) where a CUDA device is visible."""

from __future__ import annotations

import pytest
import torch

from amorgp.ensembles import KernelEnsemble
from amorgp.ensembles.batched import batched_member_predictive
from amorgp.ensembles.testing import GridInference
from amorgp.lazy_kernels.testing import device_params

DEVICES = device_params()
KERNELS = ["SE", "PER", "SE + PER", "LIN*PER", "SE*LIN + PER"]


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    X = torch.rand(60, 1, generator=gen, dtype=torch.float64) * 4
    y = torch.sin(5 * X[:, 0]) + 0.1 * torch.randn(60, generator=gen, dtype=torch.float64)
    return X, y


@pytest.mark.parametrize("device", DEVICES)
def test_batched_member_predictive_on_a_device(device: str) -> None:
    X, y = _data()
    fits = GridInference().fit_many(X, y, KERNELS)
    Xq = torch.linspace(-0.5, 4.5, 23, dtype=torch.float64)[:, None]
    out = batched_member_predictive(fits, X.to(device), y.to(device), Xq.to(device), chunk=8)
    assert out is not None
    mean, var = out
    assert mean.device.type == "cpu"
    assert mean.shape == (len(KERNELS), 23)
    for m, fit in enumerate(fits):
        ref_mean, ref_var = fit.predict(Xq)
        torch.testing.assert_close(mean[m], ref_mean, rtol=1e-7, atol=1e-8)
        torch.testing.assert_close(var[m], ref_var, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("device", DEVICES)
def test_ensemble_predictive_with_inputs_on_a_device(device: str) -> None:
    X, y = _data()
    ens = KernelEnsemble.fit(GridInference(), X, y, KERNELS)
    Xq = torch.linspace(0.0, 4.0, 9, dtype=torch.float64)[:, None]
    ref = ens.predictive(Xq)
    got = ens.predictive(Xq.to(device))
    torch.testing.assert_close(got.mean(), ref.mean(), rtol=1e-7, atol=1e-8)
    torch.testing.assert_close(got.variance(), ref.variance(), rtol=1e-7, atol=1e-8)
