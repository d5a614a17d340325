"""A random train/test split.

The dataset validation and the normalisation contract (:class:`Normalizer`,
:func:`as_dataset`, :func:`as_inputs`) are owned by :mod:`amorgp.lazy_kernels`
(``docs/architecture.md`` §3); their old names here still resolve, with a
:class:`DeprecationWarning`.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import OptionError

__all__ = ["train_test_split"]

_MOVED = ("Normalizer", "as_dataset", "as_inputs")
"""Names of :mod:`amorgp.lazy_kernels` once re-exported here."""


def moved_name(name: str, where: str) -> Any:
    """The lazy-kernels object ``name`` once re-exported by ``where``, with a
    :class:`DeprecationWarning` naming its owner (:mod:`amorgp.lazy_kernels`)."""
    if name not in _MOVED:
        raise AttributeError(f"module {where!r} has no attribute {name!r}")
    warnings.warn(
        f"{where}.{name} is deprecated: import amorgp.lazy_kernels.{name} (its owner) instead",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module("amorgp.lazy_kernels"), name)


def __getattr__(name: str) -> Any:
    return moved_name(name, __name__)


def train_test_split(
    n: int, n_train: int, n_test_max: int | None, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Uniform random split of ``range(n)``: ``n_train`` indices, the rest (capped) for testing.

    Raises:
        OptionError: if ``n_train`` is not in ``1..n-1``.
    """
    if not 0 < n_train < n:
        raise OptionError(f"n_train must be in 1..{n - 1}, got {n_train}")
    perm = torch.randperm(n, generator=generator)
    test = perm[n_train:]
    if n_test_max is not None:
        test = test[:n_test_max]
    return perm[:n_train], test
