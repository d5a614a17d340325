"""Kernel structures encoded once per call: :class:`KernelBatch` (the structures and their
padded symbols), read by the network's forward pass and by every stage of the pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import torch
from torch import Tensor

from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, encode

__all__ = ["KernelBatch", "encoded", "pick"]


class KernelBatch(Sequence[DimWiseStructure]):
    """``K`` kernel structures and their padded encoding, made once per call.

    A sequence of its structures (so every function taking structures takes it), whose
    ``symbols (K, D, L)`` and ``mask (K, D, L)`` (:func:`amorgp.kernel_grammar.encode`:
    vocabulary ids and the addend mask, ``D`` dimensions, ``L`` the most addends) every
    stage reads instead of encoding again; indexing by a slice or a list of positions
    gives the sub-batch with the same padding.  On another device than the CPU the host
    copies are recorded for the evaluator's index plan (no read-back).
    """

    def __init__(
        self,
        structures: Sequence[DimWiseStructure],
        vocabulary: Vocabulary,
        device: torch.device | str = "cpu",
        *,
        _tensors: tuple[Tensor, Tensor, Tensor, Tensor] | None = None,
    ) -> None:
        from amorgp.lazy_kernels.evaluation import remember_host_copy

        self.structures = tuple(structures)
        self.vocabulary = vocabulary
        if _tensors is None:
            host = tuple(torch.as_tensor(a) for a in encode(list(structures), vocabulary))
            moved = tuple(h.to(device, non_blocking=True) for h in host)
            _tensors = (moved[0], moved[1], host[0], host[1])
        self.symbols, self.mask, self._host_symbols, self._host_mask = _tensors
        remember_host_copy(self.symbols, self._host_symbols)
        remember_host_copy(self.mask, self._host_mask)

    def __len__(self) -> int:
        return len(self.structures)

    @overload
    def __getitem__(self, index: int) -> DimWiseStructure: ...

    @overload
    def __getitem__(self, index: slice | Sequence[int]) -> KernelBatch: ...

    def __getitem__(self, index: int | slice | Sequence[int]) -> DimWiseStructure | KernelBatch:
        if isinstance(index, int):
            return self.structures[index]
        if isinstance(index, slice):
            picked = list(range(len(self.structures)))[index]
        else:
            picked = [int(i) for i in index]
        at_host = torch.tensor(picked, dtype=torch.long)
        at = at_host.to(self.symbols.device)
        return KernelBatch(
            [self.structures[i] for i in picked],
            self.vocabulary,
            _tensors=(
                self.symbols.index_select(0, at),
                self.mask.index_select(0, at),
                self._host_symbols.index_select(0, at_host),
                self._host_mask.index_select(0, at_host),
            ),
        )

    def on(self, vocabulary: Vocabulary, device: torch.device) -> tuple[Tensor, Tensor] | None:
        """``(symbols, mask)`` if this batch was encoded with ``vocabulary`` on ``device``."""
        if vocabulary is self.vocabulary and self.symbols.device == torch.device(device):
            return self.symbols, self.mask
        return None


def pick(structures: Sequence[DimWiseStructure], rows: Sequence[int]) -> Sequence[DimWiseStructure]:
    """The structures at ``rows`` (repeats allowed): a sub-batch of a :class:`KernelBatch`
    (its encoding read, not made again), else a list."""
    if isinstance(structures, KernelBatch):
        return structures[list(rows)]
    return [structures[int(i)] for i in rows]


def encoded(
    structures: Sequence[DimWiseStructure], vocabulary: Vocabulary, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``symbols (K, D, L)`` and ``symbol_mask (K, D, L)`` of the structures on ``device``:
    a :class:`KernelBatch`'s own encoding, else encoded here (host copies recorded for
    the evaluator's index plan: no read-back)."""
    if (
        isinstance(structures, KernelBatch)
        and (ready := structures.on(vocabulary, device)) is not None
    ):
        return ready
    batch = KernelBatch(structures, vocabulary, device)
    return batch.symbols, batch.mask
