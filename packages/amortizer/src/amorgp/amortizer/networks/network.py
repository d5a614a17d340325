"""What every amortization network is: encode a dataset once, decode any number of kernels.

An amortization network maps a padded batch
(:class:`~amorgp.lazy_kernels.PaddedBatch`) to GP hyperparameters in two steps::

    encoding   = net.encode_dataset(batch)                       data only: X, y, masks
    prediction = net.decode(encoding, symbols, symbol_mask)      kernels: (B, D, L) ids

``net(batch)`` is ``decode(encode_dataset(batch), batch.symbols, batch.symbol_mask)``
after :meth:`~amorgp.lazy_kernels.PaddedBatch.validate`.  Because the encoding
does not depend on the kernels, inference on one dataset and ``K`` kernels
encodes once and decodes the ``K`` kernels as one batch
(:meth:`DatasetEncoding.expand`).  Networks are looked up by name in
:mod:`amorgp.amortizer.networks.registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from amorgp.amortizer.networks.registry import network_names, network_spec
from amorgp.core.errors import DataError
from amorgp.kernel_grammar import Vocabulary
from amorgp.lazy_kernels import PaddedBatch, check_structures

__all__ = ["AmortizationNetwork", "DatasetEncoding", "Prediction"]


@dataclass
class Prediction:
    """Predicted GP hyperparameters in the padded contract.

    Attributes:
        params: ``(B, D, L, P)`` positive kernel parameters, slot order as
            ``base_symbol(name).params``; padded addends/dimensions and unused
            slots hold 1.0.
        noise: ``(B,)`` observation-noise variances ``sigma^2``.
    """

    params: Tensor
    noise: Tensor


@dataclass(frozen=True)
class DatasetEncoding:
    """A network's encoding of ``B`` datasets, independent of the kernels.

    Attributes:
        h: ``(B, D, H)`` per-dimension dataset embeddings (0 on padded dimensions).
        dim_mask: ``(B, D)`` bool, present input dimensions.
        periods: ``(B, D, 3)`` float64 ``[period, power, false alarm]`` of each dimension's
            strongest periodogram peak (period NaN without a peak), for networks with period
            tokens
            (:mod:`amorgp.amortizer.networks.period_tokens`); ``None`` otherwise.
        relevance: ``(B, D, 2)`` float64 nearest-neighbour relevance features of each
            dimension, for networks with relevance tokens
            (:mod:`amorgp.amortizer.networks.relevance_tokens`); ``None`` otherwise.
    """

    h: Tensor
    dim_mask: Tensor
    periods: Tensor | None = None
    relevance: Tensor | None = None

    def __len__(self) -> int:
        return int(self.h.shape[0])

    def expand(self, k: int) -> DatasetEncoding:
        """The encoding of one dataset repeated for ``k`` kernels (views, no copy).

        Raises:
            ValueError: the encoding holds more than one dataset.
        """
        if len(self) != 1:
            raise ValueError(f"expand needs the encoding of one dataset, got {len(self)}")
        return self._map(lambda t: t.expand(k, *t.shape[1:]))

    def select(self, index: Tensor | slice) -> DatasetEncoding:
        """The encodings of the datasets ``index``."""
        return self._map(lambda t: t[index])

    def repeat_interleave(self, k: int) -> DatasetEncoding:
        """Each dataset's encoding repeated ``k`` times in a row (``k`` kernels each)."""
        return self._map(lambda t: t.repeat_interleave(k, 0))

    def _map(self, fn: Callable[[Tensor], Tensor]) -> DatasetEncoding:
        """``fn`` applied to every tensor along the dataset axis."""
        return DatasetEncoding(
            fn(self.h),
            fn(self.dim_mask),
            None if self.periods is None else fn(self.periods),
            None if self.relevance is None else fn(self.relevance),
        )


class AmortizationNetwork(nn.Module):
    """Base class of amortization networks (see the module docstring).

    Subclasses set ``config`` and ``vocabulary`` and implement
    :meth:`encode_dataset` and :meth:`decode`; :meth:`restrict_kernels` may narrow
    the kernels a network accepts.
    """

    config: Any
    vocabulary: Vocabulary

    def check_config(self, config: Any) -> None:
        """Raise ``ValueError`` if the registry builds another class for ``config.model``.

        A class registered under some names only accepts configs naming one of them;
        an unregistered subclass accepts any config.
        """
        mine = [n for n in network_names() if network_spec(n).network_class() is type(self)]
        if mine and config.model not in mine:
            raise ValueError(
                f"{type(self).__name__} is the network registered as "
                f"{' / '.join(repr(n) for n in mine)}, got a config with model={config.model!r}"
            )

    def encode_dataset(self, batch: PaddedBatch) -> DatasetEncoding:
        """Encode the datasets of ``batch`` (``X``, ``y``, ``point_mask``, ``dim_mask``)."""
        raise NotImplementedError

    def decode(self, encoding: DatasetEncoding, symbols: Tensor, symbol_mask: Tensor) -> Prediction:
        """Hyperparameters of the kernels ``symbols (B, D, L)`` for the encoded datasets."""
        raise NotImplementedError

    def check_kernels(self, symbols: Tensor, symbol_mask: Tensor, dim_mask: Tensor) -> None:
        """Check kernels before :meth:`decode`: the padded layout and :meth:`restrict_kernels`.

        Raises:
            DataError: naming the problem.
        """
        check_structures(symbols, symbol_mask, dim_mask, self.vocabulary)
        self.restrict_kernels(symbols, symbol_mask, dim_mask)

    def restrict_kernels(self, symbols: Tensor, symbol_mask: Tensor, dim_mask: Tensor) -> None:
        """Raise ``DataError`` for valid kernels this network cannot predict (default: none)."""

    def as_batch(
        self,
        batch: PaddedBatch | Tensor,
        y: Tensor | None = None,
        point_mask: Tensor | None = None,
        dim_mask: Tensor | None = None,
        symbols: Tensor | None = None,
        symbol_mask: Tensor | None = None,
    ) -> PaddedBatch:
        """A :class:`PaddedBatch` from a batch or from the six tensors (in this order).

        Raises:
            DataError: a tensor missing, or a batch over another vocabulary.
        """
        if isinstance(batch, PaddedBatch):
            if batch.vocab.symbols != self.vocabulary.symbols:
                raise DataError(
                    f"the batch's vocabulary {list(batch.vocab.symbols)} differs from the "
                    f"network's {list(self.vocabulary.symbols)}"
                )
            return batch
        parts = {
            "y": y,
            "point_mask": point_mask,
            "dim_mask": dim_mask,
            "symbols": symbols,
            "symbol_mask": symbol_mask,
        }
        missing = [k for k, v in parts.items() if v is None]
        if missing:
            raise DataError(f"give a PaddedBatch or all six tensors; missing {missing}")
        assert y is not None
        assert point_mask is not None
        assert dim_mask is not None
        assert symbols is not None
        assert symbol_mask is not None
        return PaddedBatch(batch, y, point_mask, dim_mask, symbols, symbol_mask, self.vocabulary)

    def forward(
        self,
        batch: PaddedBatch | Tensor | None = None,
        y: Tensor | None = None,
        point_mask: Tensor | None = None,
        dim_mask: Tensor | None = None,
        symbols: Tensor | None = None,
        symbol_mask: Tensor | None = None,
        *,
        X: Tensor | None = None,
        validate: bool = True,
    ) -> Prediction:
        """Predict hyperparameters for a padded batch.

        Call as ``net(batch)`` or, for users, with the six tensors
        ``net(X, y, point_mask, dim_mask, symbols, symbol_mask)`` (also by keyword):
        ``X (B, N, D)`` normalised to [0, 1], ``y (B, N)`` standardised, masks and
        ``symbols (B, D, L)`` as in the padded contract.

        Args:
            validate: check the batch first (``DataError`` on bad input).

        Returns:
            :class:`Prediction` with ``params (B, D, L, P)`` and ``noise (B,)``.
        """
        source = X if batch is None else batch
        if source is None:
            raise DataError("give a PaddedBatch or the tensors X, y, masks, symbols")
        b = self.as_batch(source, y, point_mask, dim_mask, symbols, symbol_mask)
        if validate:
            b.validate()
            self.restrict_kernels(b.symbols, b.symbol_mask, b.dim_mask)
        return self.decode(self.encode_dataset(b), b.symbols, b.symbol_mask)
