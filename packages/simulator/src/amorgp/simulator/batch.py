"""The simulator's output: a padded batch of (dataset, structure) pairs with ground truth."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, decode

__all__ = ["SimulatedBatch"]

_OPTIONAL = ("X_test", "y_test", "test_mask")
_COUNTERS = ("n_gamma_rejections", "n_negative_fallback")


@dataclass(frozen=True)
class SimulatedBatch:
    """A batch of ``B`` simulated datasets in the padded contract (ARCHITECTURE §3).

    Shapes: ``N`` padded training points, ``T`` test points, ``D`` padded
    dimensions, ``L`` (``L_true``) padded addends, ``P`` parameter slots.

    Attributes:
        X: ``(B, N, D)`` float64 inputs (0 at padding).
        y: ``(B, N)`` float64 noisy targets (0 at padding and for invalid elements).
        point_mask: ``(B, N)`` bool, the first ``n[b]`` points are real.
        dim_mask: ``(B, D)`` bool, the first ``d[b]`` dimensions are real.
        symbols: ``(B, D, L)`` int64 structure presented with the data (0 = padding).
        symbol_mask: ``(B, D, L)`` bool.
        true_symbols: ``(B, D, L_true)`` int64 structure the data was drawn from.
        true_symbol_mask: ``(B, D, L_true)`` bool.
        params: ``(B, D, L_true, P)`` float64 parameters of ``true_symbols`` (slot order of
            the symbol, variance first; 1.0 in unused slots).
        noise: ``(B,)`` float64 observation-noise variance ``sigma^2``.
        is_positive: ``(B,)`` bool, True where ``symbols`` equals ``true_symbols``.
        valid: ``(B,)`` bool, False where the covariance could not be factorised
            even with escalated jitter (the element's ``y`` is then 0; mask it out).
        jitter: ``(B,)`` float64 absolute diagonal jitter that was added (0 mostly).
        X_test: ``(B, T, D)`` test inputs, drawn jointly with the training points
            from the same GP (None without test points).
        y_test: ``(B, T)`` noisy test targets (None without test points).
        test_mask: ``(B, T)`` bool (None without test points).
        n_gamma_rejections: rejected Marsaglia--Tsang proposals in this batch.
        n_negative_fallback: requested negatives that stayed positive.
    """

    X: torch.Tensor
    y: torch.Tensor
    point_mask: torch.Tensor
    dim_mask: torch.Tensor
    symbols: torch.Tensor
    symbol_mask: torch.Tensor
    true_symbols: torch.Tensor
    true_symbol_mask: torch.Tensor
    params: torch.Tensor
    noise: torch.Tensor
    is_positive: torch.Tensor
    valid: torch.Tensor
    jitter: torch.Tensor
    X_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    test_mask: torch.Tensor | None = None
    n_gamma_rejections: int = 0
    n_negative_fallback: int = 0

    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def batch_size(self) -> int:
        return len(self)

    @property
    def n_points(self) -> torch.Tensor:
        """``(B,)`` number of training points per dataset."""
        return self.point_mask.sum(dim=1)

    @property
    def n_dims(self) -> torch.Tensor:
        """``(B,)`` number of input dimensions per dataset."""
        return self.dim_mask.sum(dim=1)

    @property
    def n_failed(self) -> int:
        """Number of elements whose draw was rejected (Cholesky failure after jitter)."""
        return int((~self.valid).sum())

    @property
    def has_test(self) -> bool:
        return self.X_test is not None

    def structures(self, vocab: Vocabulary) -> list[DimWiseStructure]:
        """The presented structures ``symbols`` as kernel-grammar objects."""
        return decode(self.symbols.cpu().numpy(), self.symbol_mask.cpu().numpy(), vocab)

    def true_structures(self, vocab: Vocabulary) -> list[DimWiseStructure]:
        """The structures the data was drawn from."""
        return decode(self.true_symbols.cpu().numpy(), self.true_symbol_mask.cpu().numpy(), vocab)

    def tensors(self) -> dict[str, torch.Tensor]:
        """All tensor fields by name (optional ones only when present)."""
        out: dict[str, torch.Tensor] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                out[f.name] = value
        return out

    def counters(self) -> dict[str, int]:
        """The integer counters (JSON-ready)."""
        return {name: int(getattr(self, name)) for name in _COUNTERS}

    @classmethod
    def from_tensors(
        cls, tensors: dict[str, torch.Tensor], counters: dict[str, Any] | None = None
    ) -> SimulatedBatch:
        """Inverse of :meth:`tensors` and :meth:`counters`.

        Raises:
            ValueError: a required tensor is missing or an unknown name is present.
        """
        names = {f.name for f in fields(cls)} - set(_COUNTERS)
        required = names - set(_OPTIONAL)
        missing = required - set(tensors)
        if missing:
            raise ValueError(f"simulated batch is missing tensors {sorted(missing)}")
        unknown = set(tensors) - names
        if unknown:
            raise ValueError(f"simulated batch has unknown tensors {sorted(unknown)}")
        counts: dict[str, Any] = {k: int(v) for k, v in (counters or {}).items() if k in _COUNTERS}
        kwargs: dict[str, Any] = {**tensors, **counts}
        return cls(**kwargs)

    def to(self, device: torch.device | str) -> SimulatedBatch:
        """The batch on ``device`` (dtypes unchanged)."""
        moved: dict[str, Any] = {k: v.to(device) for k, v in self.tensors().items()}
        return replace(self, **moved)

    def pin_memory(self) -> SimulatedBatch:
        """Page-locked copy (called by ``DataLoader(pin_memory=True)``)."""
        pinned: dict[str, Any] = {k: v.pin_memory() for k, v in self.tensors().items()}
        return replace(self, **pinned)

    def select(self, index: torch.Tensor | slice) -> SimulatedBatch:
        """The sub-batch ``index`` along the batch axis (padding is kept as is).

        Counters are per batch and are not split: the sub-batch reports zero.
        """
        picked: dict[str, Any] = {k: v[index] for k, v in self.tensors().items()}
        return replace(self, **picked, n_gamma_rejections=0, n_negative_fallback=0)
