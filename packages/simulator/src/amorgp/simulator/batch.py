"""The simulator's output: a padded batch of (dataset, structure) pairs with ground truth."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Self

import torch

from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, decode
from amorgp.lazy_kernels import PaddedBatch

__all__ = ["SimulatedBatch"]

_OPTIONAL = ("X_test", "y_test", "test_mask")
_COUNTERS = ("n_gamma_rejections", "n_negative_fallback")


@dataclass(frozen=True, kw_only=True)
class SimulatedBatch(PaddedBatch):
    """A :class:`~amorgp.lazy_kernels.PaddedBatch` of ``B`` simulated pairs with ground truth.

    The inherited fields hold what a network sees (``symbols`` is the structure
    *presented* with the data, equal to the generating one for positive pairs);
    ``params`` and ``noise`` are the ground truth of the *generating* structure
    ``true_symbols`` (:meth:`param_structure`), so :meth:`truth` is the batch whose
    parameters fit its kernels.

    Shapes: ``N`` padded training points, ``T`` test points, ``D`` padded
    dimensions, ``L`` / ``L_true`` padded addends, ``P`` parameter slots.

    Attributes:
        X: ``(B, N, D)`` float64 inputs (0 at padding).
        y: ``(B, N)`` float64 noisy targets (0 at padding and for invalid elements).
        point_mask: ``(B, N)`` bool, the first ``n[b]`` points are real.
        dim_mask: ``(B, D)`` bool, the first ``d[b]`` dimensions are real.
        symbols: ``(B, D, L)`` int64 structure presented with the data (0 = padding).
        symbol_mask: ``(B, D, L)`` bool.
        vocab: the vocabulary of the ids.
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

    @property
    def n_failed(self) -> int:
        """Number of elements whose draw was rejected (Cholesky failure after jitter)."""
        return int((~self.valid).sum())

    @property
    def has_test(self) -> bool:
        return self.X_test is not None

    def param_structure(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(true_symbols, true_symbol_mask)``: the ground truth belongs to these."""
        return self.true_symbols, self.true_symbol_mask

    def presented(self) -> PaddedBatch:
        """The pairs as a network sees them: the presented structures, no parameters."""
        return self.with_params(None, None)

    def truth(self) -> PaddedBatch:
        """The pairs with their generating structures and ground-truth parameters."""
        return PaddedBatch(
            self.X,
            self.y,
            self.point_mask,
            self.dim_mask,
            self.true_symbols,
            self.true_symbol_mask,
            self.vocab,
            self.params,
            self.noise,
        )

    def true_structures(self, vocab: Vocabulary | None = None) -> list[DimWiseStructure]:
        """The structures the data was drawn from."""
        return decode(
            self.true_symbols.cpu().numpy(),
            self.true_symbol_mask.cpu().numpy(),
            vocab or self.vocab,
        )

    def counters(self) -> dict[str, int]:
        """The integer counters (JSON-ready)."""
        return {name: int(getattr(self, name)) for name in _COUNTERS}

    @classmethod
    def from_tensors(
        cls,
        tensors: dict[str, torch.Tensor],
        counters: dict[str, Any] | None = None,
        *,
        vocab: Vocabulary,
    ) -> SimulatedBatch:
        """Inverse of :meth:`tensors` and :meth:`counters`.

        Raises:
            ValueError: a required tensor is missing or an unknown name is present.
        """
        names = {f.name for f in fields(cls)} - set(_COUNTERS) - {"vocab"}
        required = names - set(_OPTIONAL)
        missing = required - set(tensors)
        if missing:
            raise ValueError(f"simulated batch is missing tensors {sorted(missing)}")
        unknown = set(tensors) - names
        if unknown:
            raise ValueError(f"simulated batch has unknown tensors {sorted(unknown)}")
        counts: dict[str, Any] = {k: int(v) for k, v in (counters or {}).items() if k in _COUNTERS}
        kwargs: dict[str, Any] = {**tensors, **counts}
        return cls(vocab=vocab, **kwargs)

    def select(self, index: torch.Tensor | slice | int | Sequence[int]) -> Self:
        """The sub-batch ``index`` along the batch axis (padding is kept as is).

        Counters are per batch and are not split: the sub-batch reports zero.
        """
        return replace(super().select(index), n_gamma_rejections=0, n_negative_fallback=0)
