"""The network's side of an :class:`~amorgp.amortizer.Amortizer`: which points the dataset
encoder reads, and the hyperparameters its network (and any candidate networks, per
kernel the one of highest likelihood) predicts for normalised data."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import torch
from torch import Tensor

from amorgp.amortizer.networks.forward import encode_structures, encoder_subset, network_parameters
from amorgp.amortizer.networks.network import AmortizationNetwork
from amorgp.amortizer.networks.selection import check_finite, predict_with
from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import PaddedBatch

__all__ = ["NetworkPrediction"]

logger = logging.getLogger(__name__)


class NetworkPrediction:
    """Network prediction for a class with a primary network ``model`` named ``name``,
    ``candidates`` (``{name: network}``), ``device``, ``dtype``, ``encoder_points`` and
    ``seed``."""

    model: AmortizationNetwork
    name: str
    candidates: dict[str, AmortizationNetwork]
    device: torch.device
    dtype: torch.dtype
    encoder_points: int
    seed: int

    def encoder_subset(self, n: int) -> Tensor | None:
        """Indices of the points the dataset encoder reads, or ``None`` for all of them
        (see :func:`amorgp.amortizer.networks.forward.encoder_subset`; seeded by ``seed``)."""
        return encoder_subset(n, self.encoder_points, self.seed)

    def predict_parameters(
        self, Xn: Tensor, yn: Tensor, structures: Sequence[DimWiseStructure]
    ) -> tuple[Tensor, Tensor, int]:
        """The network's prediction for normalised data and ``K`` structures.

        The dataset encoder runs once (on :meth:`encoder_subset` of the points); the
        kernel encoder-decoder, the symbol heads and the noise head run on all ``K``
        structures in one padded batch.  With candidate networks each of them does the
        same, and each kernel keeps the prediction of highest log marginal likelihood on
        the encoder's points.

        Args:
            Xn: ``(n, d)`` normalised inputs.
            yn: ``(n,)`` standardised targets.
            structures: ``K`` structures with ``d`` dimensions each.

        Returns:
            ``params (K, d, L, P)`` and ``noise (K,)`` in ``self.dtype`` and the number
            of points the encoder read.

        Raises:
            CheckpointError: the network's output is not finite (broken weights).
        """
        params, noise, n_enc, _ = self.predict_networks(Xn, yn, structures)
        return params, noise, n_enc

    def predict_networks(
        self, Xn: Tensor, yn: Tensor, structures: Sequence[DimWiseStructure]
    ) -> tuple[Tensor, Tensor, int, list[str]]:
        """:meth:`predict_parameters` and the name of the winning network per kernel."""
        t0 = time.perf_counter()
        n, d = Xn.shape
        idx = self.encoder_subset(n)
        Xe, ye = (Xn, yn) if idx is None else (Xn[idx.to(Xn.device)], yn[idx.to(yn.device)])
        encoded = encode_structures(structures, self.model.vocabulary, d, self.device)
        networks = [(self.name, self.model), *self.candidates.items()]
        params, noise, index = predict_with(
            networks, Xe, ye, structures, encoded, self.model.vocabulary, self.dtype
        )
        names = self.network_names
        logger.debug(
            "network: %d kernel(s), the encoder read %d of %d points (d = %d), %d network(s), "
            "%.1f ms",
            len(structures),
            Xe.shape[0],
            n,
            d,
            len(networks),
            1e3 * (time.perf_counter() - t0),
        )
        return params.clone(), noise.clone(), int(Xe.shape[0]), [names[i] for i in index]

    @property
    def network_names(self) -> list[str]:
        """The primary network's name, then the candidates' (``KernelResult.network``)."""
        return [self.name, *self.candidates]

    def encoder_points_of(self, X: Tensor, Y: Tensor) -> tuple[Tensor, Tensor]:
        """The points the dataset encoder reads of ``B`` datasets of equal size ``X (B, n,
        d)``, ``Y (B, n)`` (:meth:`encoder_subset`, the same for every dataset)."""
        idx = self.encoder_subset(X.shape[1])
        if idx is None:
            return X, Y
        return X[:, idx.to(X.device)], Y[:, idx.to(Y.device)]

    def network_predictions(
        self, X: Tensor, Y: Tensor, symbols: Tensor, symbol_mask: Tensor, exact: bool
    ) -> list[tuple[Tensor, Tensor]]:
        """Every network's prediction, the primary network's first and then the
        candidates', for ``B`` datasets of equal size ``X (B, n, d)``, ``Y (B, n)``
        (normalised) and ``K`` encoded structures ``(K, d, L)``: ``params (B K, d, L, P)``
        and ``noise (B K,)`` in ``self.dtype`` per network, pair ``b K + k``.  Each
        network runs one batched forward (the dataset encoder reads the datasets as one
        batch, each on :meth:`encoder_subset` of its points; the kernel encoder-decoder
        and the heads decode the ``B K`` pairs), or with ``exact`` one forward per dataset
        (:func:`~amorgp.amortizer.networks.forward.network_parameters`, the forward of
        ``infer_many``).

        Raises:
            CheckpointError: a network's output is not finite (broken weights).
        """
        t0 = time.perf_counter()
        Xe, Ye = self.encoder_points_of(X, Y)
        out = []
        for label, net in [(self.name, self.model), *self.candidates.items()]:
            if exact:
                parts = [
                    network_parameters(net, x, y, symbols, symbol_mask)
                    for x, y in zip(Xe, Ye, strict=True)
                ]
                params = torch.cat([p for p, _ in parts])
                noise = torch.cat([q for _, q in parts])
            else:
                params, noise = _forward_datasets(net, Xe, Ye, symbols, symbol_mask)
            check_finite(label, params, noise)
            out.append((params.to(self.dtype).clone(), noise.to(self.dtype).clone()))
        B, n, d = X.shape
        logger.debug(
            "network: %d kernel(s), the encoder read %d of %d points (d = %d), %d dataset(s), "
            "%d network(s), %.1f ms",
            symbols.shape[0],
            Xe.shape[1],
            n,
            d,
            B,
            len(out),
            1e3 * (time.perf_counter() - t0),
        )
        return out


def _forward_datasets(
    net: AmortizationNetwork, Xe: Tensor, Ye: Tensor, symbols: Tensor, symbol_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """``net``'s ``params (B K, d, L, P)`` and ``noise (B K,)`` for the encoder's points
    ``Xe (B, m, d)``, ``Ye (B, m)`` of ``B`` datasets and ``K`` encoded structures, in one
    forward: the dataset encoder reads the datasets as one batch, the kernel
    encoder-decoder and the heads decode the ``B K`` pairs."""
    B, m, d = Xe.shape
    K = symbols.shape[0]
    net_dtype = next(net.parameters()).dtype
    with torch.inference_mode():
        padded = PaddedBatch(
            Xe.to(net_dtype),
            Ye.to(net_dtype),
            torch.ones(B, m, dtype=torch.bool, device=Xe.device),
            torch.ones(B, d, dtype=torch.bool, device=Xe.device),
            symbols[:1].expand(B, -1, -1),
            symbol_mask[:1].expand(B, -1, -1),
            net.vocabulary,
        )
        enc = net.encode_dataset(padded)
        pairs = enc.repeat_interleave(K)
        pred = net.decode(pairs, symbols.repeat(B, 1, 1), symbol_mask.repeat(B, 1, 1))
    return pred.params, pred.noise
