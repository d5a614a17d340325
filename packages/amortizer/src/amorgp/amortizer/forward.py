"""Prediction helpers of the :class:`~amorgp.amortizer.inference.Amortizer`: the network
forward for one dataset and many kernels, the encoder's subset of a large dataset, and the
warnings for inputs outside the network's training range."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import Tensor

from amorgp.amortizer.network import AmortizationNetwork
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, encode
from amorgp.lazy_kernels import PaddedBatch

__all__ = ["encode_structures", "encoder_subset", "network_parameters", "warn_outside_training"]


def warn_outside_training(
    d: int, structures: Sequence[DimWiseStructure], max_dims: int | None, max_addends: int
) -> None:
    """Warn (``UserWarning``) about inputs the network never saw in training: more input
    dimensions than ``max_dims`` or more addends in one dimension than ``max_addends``."""
    hint = "its predictions may be poor (consider refine='auto')"
    if max_dims is not None and d > max_dims:
        warnings.warn(
            f"the data have {d} input dimensions but the network was trained on at most "
            f"{max_dims}; {hint}",
            UserWarning,
            stacklevel=4,
        )
    most = max(len(a) for s in structures for a in s.dims)
    if most > max_addends:
        warnings.warn(
            f"a kernel has {most} addends in one dimension but the network was trained "
            f"with at most {max_addends} per dimension; {hint}",
            UserWarning,
            stacklevel=4,
        )


def encode_structures(
    structures: Sequence[DimWiseStructure], vocabulary: Vocabulary, d: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``symbols (K, d, L)`` and ``symbol_mask (K, d, L)`` of ``K`` structures on ``device``."""
    sym, smask = encode(list(structures), vocabulary, max_dims=d)
    return torch.as_tensor(sym, device=device), torch.as_tensor(smask, device=device)


def encoder_subset(n: int, encoder_points: int, seed: int) -> Tensor | None:
    """Indices of the points the dataset encoder reads, or ``None`` for all of them.

    For ``n > encoder_points``: the first ``encoder_points`` entries of a random
    permutation drawn from ``torch.Generator().manual_seed(seed)``, sorted (so the same
    data and seed give the same subset).
    """
    if n <= encoder_points:
        return None
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:encoder_points].sort().values


def network_parameters(
    model: AmortizationNetwork, Xe: Tensor, ye: Tensor, symbols: Tensor, symbol_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """The network's ``params (K, d, L, P)`` and ``noise (K,)`` for one dataset, ``K`` kernels.

    The dataset encoder runs once on ``Xe (m, d)``, ``ye (m,)`` (normalised; the points
    it reads); the kernel encoder-decoder, the symbol heads and the noise head run on all
    ``K`` structures in one padded batch with the shared dataset embedding (paper
    Fig. 4c).  Runs under ``torch.inference_mode`` in the network's dtype.
    """
    K, d = symbols.shape[0], Xe.shape[1]
    device = symbols.device
    net_dtype = next(model.parameters()).dtype
    with torch.inference_mode():
        one = PaddedBatch(
            Xe[None].to(net_dtype),
            ye[None].to(net_dtype),
            torch.ones(1, Xe.shape[0], dtype=torch.bool, device=device),
            torch.ones(1, d, dtype=torch.bool, device=device),
            symbols[:1],
            symbol_mask[:1],
            model.vocabulary,
        )
        encoding = model.encode_dataset(one).expand(K)  # the dataset encoder runs once
        pred = model.decode(encoding, symbols, symbol_mask)
        params, noise = pred.params, pred.noise
    return params, noise
