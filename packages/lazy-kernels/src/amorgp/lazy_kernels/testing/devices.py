"""The devices a device-parametrised test runs on."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["device_params"]


def device_params() -> list[Any]:
    """``"cpu"`` and ``"cuda"`` for ``pytest.mark.parametrize``: the CUDA case is marked
    ``cuda`` and skipped where no CUDA device is available (pytest is imported here, on
    the call, not with the package)."""
    import pytest

    return [
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
            ],
        ),
    ]
