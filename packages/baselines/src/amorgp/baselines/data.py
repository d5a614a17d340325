"""A random train/test split.

The dataset validation and the normalisation contract (:class:`Normalizer`,
:func:`as_dataset`, :func:`as_inputs`) are :mod:`amorgp.core.data`'s
(``docs/architecture.md`` §3).
"""

from __future__ import annotations

import torch
from torch import Tensor

from amorgp.core.errors import OptionError

__all__ = ["train_test_split"]


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
