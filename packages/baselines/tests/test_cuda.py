"""Type-2 ML and MAP on a device: the batched fit against the dense numpy oracle and, on
CUDA, against the same fit on the CPU.  Device-parametrised: the CPU case runs in the unit
tests, the CUDA case (``cuda`` marker) where a CUDA device is visible."""

from __future__ import annotations

import pytest
import torch

from amorgp.baselines.testing import dense_log_marginal_likelihood
from amorgp.baselines.testing import synthetic_dataset as make_data
from amorgp.baselines.type2ml import Type2MLSettings, fit_type2ml_batch
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import PaddedBatch
from amorgp.lazy_kernels.testing import device_params

DEVICES = device_params()


def _batch() -> tuple[PaddedBatch, list[tuple[torch.Tensor, torch.Tensor]], list[DimWiseStructure]]:
    datasets = [make_data(30, 2, seed=1), make_data(24, 1, seed=2), make_data(30, 2, seed=3)]
    structs = [
        DimWiseStructure.parse("SE + PER", 2),
        DimWiseStructure.parse("LIN + SE*PER", 1),
        DimWiseStructure.parse("(SE*LIN)@0 * (SE + LIN)@1"),
    ]
    return PaddedBatch.from_datasets(datasets, structs), datasets, structs


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
@pytest.mark.parametrize("map_", [False, True], ids=["ml", "map"])
@pytest.mark.parametrize("device", DEVICES)
def test_type2ml_on_a_device_matches_the_cpu_and_the_dense_oracle(
    device: str, map_: bool, optimizer: str
) -> None:
    batch, datasets, structs = _batch()
    settings = Type2MLSettings(max_iters=40, map=map_, optimizer=optimizer)  # type: ignore[arg-type]
    on_device = fit_type2ml_batch(batch.to(device), settings)
    on_cpu = fit_type2ml_batch(batch, settings)
    assert on_device.params.device.type == device
    # the same optimiser path: equal up to the rounding of the device's reductions
    torch.testing.assert_close(
        on_device.log_marginal_likelihood.cpu(),
        on_cpu.log_marginal_likelihood,
        rtol=1e-6,
        atol=1e-6,
    )
    torch.testing.assert_close(on_device.noise.cpu(), on_cpu.noise, rtol=1e-5, atol=1e-8)
    # the reported LML is the dense numpy value at the reported hyperparameters
    for b, ((X, y), s) in enumerate(zip(datasets, structs)):
        params = on_device.params[b].cpu()
        hyper = {
            (p.dim, p.addend, p.param): float(params[p.dim, p.addend, p.slot])
            for p in s.param_names()
        }
        lml = dense_log_marginal_likelihood(
            X.numpy(), y.numpy(), s, hyper, float(on_device.noise[b])
        )
        assert float(on_device.log_marginal_likelihood[b]) == pytest.approx(lml, rel=1e-8)
