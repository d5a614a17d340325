"""MAT52 in the bridge: GPyTorch's MaternKernel(nu=2.5) read and written (GPyTorch's own
kernel matrix and the registry's numpy reference are the oracles)."""

from __future__ import annotations

import gpytorch.kernels as gk
import numpy as np
import pytest
import torch

from amorgp.core.errors import OptionError
from amorgp.gpytorch.kernels import build_kernel, read_kernel
from amorgp.kernel_grammar import EXTENDED_VOCABULARY, DimWiseStructure


def test_matern_read_and_written() -> None:
    k = gk.ScaleKernel(gk.MaternKernel(nu=2.5)).double()
    k.base_kernel.lengthscale = 0.37
    k.outputscale = 1.9
    km = read_kernel(k, 1)
    assert km.structure.dims == (("MAT52",),)
    params = km.read()
    assert float(params[0, 0, 0]) == pytest.approx(1.9)
    assert float(params[0, 0, 1]) == pytest.approx(0.37)
    x = torch.linspace(0, 1, 9, dtype=torch.float64)[:, None]
    ref = km.structure.reference(x.numpy(), x.numpy(), params.numpy())
    with torch.no_grad():
        np.testing.assert_allclose(k(x).to_dense().numpy(), ref, rtol=1e-10)
    params[0, 0, 1] = 0.8
    km.write(params)
    assert float(k.base_kernel.lengthscale) == pytest.approx(0.8)


def test_matern_built_from_a_structure() -> None:
    s = DimWiseStructure.coerce("MAT52 + LIN", 1, EXTENDED_VOCABULARY)
    assert s.dims == (("LIN", "MAT52"),)  # canonical order: LIN (variance, offset), MAT52
    params = torch.tensor([[[0.5, 0.3, 1.0, 1.0], [1.3, 0.25, 1.0, 1.0]]], dtype=torch.float64)
    kernel = build_kernel(s, params)
    x = torch.linspace(-1, 2, 7, dtype=torch.float64)[:, None]
    with torch.no_grad():
        got = kernel(x).to_dense().numpy()
    np.testing.assert_allclose(got, s.reference(x.numpy(), x.numpy(), params.numpy()), rtol=1e-10)


def test_other_matern_smoothness_is_refused() -> None:
    with pytest.raises(OptionError, match=r"nu=2\.5"):
        read_kernel(gk.MaternKernel(nu=1.5), 1)
