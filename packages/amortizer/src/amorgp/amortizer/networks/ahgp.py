"""AHGP-SE-ARD: amortized hyperparameters of a fixed SE-ARD kernel.

The model of Liu et al. (2020, "Task-agnostic amortized inference of Gaussian
process hyperparameters"), as adapted by Rehn (2022) from spectral mixtures to
the squared-exponential ARD kernel, used for the paper's fixed-kernel comparison:

.. math::

    k(x, x') = s^2 \\exp\\Big(-\\sum_d \\frac{(x_d - x'_d)^2}{2 l_d^2}\\Big), \\qquad
    y = f(x) + \\varepsilon,\\ \\varepsilon \\sim N(0, \\sigma^2).

A hierarchical attention encoder reads the dataset (local: points within each
dimension; global: across dimensions); the same :class:`DatasetEncoder` as the
structured network is reused.  A per-dimension head predicts ``l_d`` from
``h_d``; a global head predicts ``(s^2, sigma^2)`` from the mean of ``h``.

To share the loss and training loop, the output follows the padded contract of
a dimension-wise product of one SE per dimension: ``symbols`` must hold exactly
one ``SE`` per present dimension (addend slot 0).  ``s^2`` is split evenly over the
``D_b`` present dimensions, ``s_d^2 = (s^2)^{1/D_b}``, so the product of the SE
factors is exactly the SE-ARD kernel above.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from amorgp.amortizer.networks.config import NetworkConfig
from amorgp.amortizer.networks.layers import masked_mean
from amorgp.amortizer.networks.model import DatasetEncoder
from amorgp.amortizer.networks.network import AmortizationNetwork, DatasetEncoding, Prediction
from amorgp.core.errors import DataError
from amorgp.kernel_grammar import NOISE, ParamKind, base_symbol, positive, positive_inverse
from amorgp.lazy_kernels import UNUSED_SLOT_VALUE, PaddedBatch

__all__ = ["AHGPSEARD"]


class AHGPSEARD(AmortizationNetwork):
    """Amortized SE-ARD hyperparameters (variance, one lengthscale per dimension, noise).

    :meth:`encode_dataset` runs the dataset encoder; :meth:`decode` the heads, which
    read only the encoding (the kernels must be one SE per present dimension).
    """

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.check_config(config)
        self.config = config
        self.vocabulary = config.vocabulary
        self.se_id = config.vocabulary.id("SE")
        se = base_symbol("SE")
        c = config
        self.dataset_encoder = DatasetEncoder(c.d_data, c.n_heads, c.ff_mult, c.data_blocks)
        self.lengthscale_head = nn.Sequential(
            nn.Linear(c.d_data, c.head_hidden), nn.GELU(), nn.Linear(c.head_hidden, 1)
        )
        self.global_head = nn.Sequential(
            nn.Linear(c.d_data, c.noise_hidden), nn.GELU(), nn.Linear(c.noise_hidden, 2)
        )
        ls, var = se.params[1], se.params[0]
        with torch.no_grad():
            last = self.lengthscale_head[-1]
            assert isinstance(last, nn.Linear)
            last.weight.mul_(0.01)
            last.bias.fill_(float(positive_inverse(ls.prior.mean, ls.kind)))
            glob = self.global_head[-1]
            assert isinstance(glob, nn.Linear)
            glob.weight.mul_(0.01)
            glob.bias.copy_(
                torch.tensor(
                    [
                        float(positive_inverse(var.prior.mean, var.kind)),
                        float(positive_inverse(NOISE.prior.mean, NOISE.kind)),
                    ]
                )
            )

    def restrict_kernels(self, symbols: Tensor, symbol_mask: Tensor, dim_mask: Tensor) -> None:
        """Only one SE per present dimension (addend slot 0).

        Raises:
            DataError: another structure.
        """
        first = symbol_mask[..., 0]
        rest = symbol_mask[..., 1:]
        if not (bool((first == dim_mask).all()) and not bool(rest.any())):
            raise DataError("AHGP-SE-ARD needs exactly one addend (SE) per present dimension")
        if not bool((symbols[..., 0][first] == self.se_id).all()):
            raise DataError("AHGP-SE-ARD only predicts the SE kernel; got another symbol")

    def encode_dataset(self, batch: PaddedBatch) -> DatasetEncoding:
        """Dimension embeddings ``h (B, D, H)`` of the datasets (network dtype)."""
        dtype = next(self.parameters()).dtype
        X, y = batch.X.to(dtype), batch.y.to(dtype)
        h = self.dataset_encoder(X, y, batch.point_mask, batch.dim_mask)
        return DatasetEncoding(h, batch.dim_mask)

    def decode(self, encoding: DatasetEncoding, symbols: Tensor, symbol_mask: Tensor) -> Prediction:
        """SE-ARD hyperparameters in the padded contract of ``symbols`` (module docstring)."""
        h, dim_mask = encoding.h, encoding.dim_mask
        dtype = next(self.parameters()).dtype
        lengthscale = positive(self.lengthscale_head(h).squeeze(-1), ParamKind.LENGTHSCALE)  # (B,D)
        g = self.global_head(masked_mean(h, dim_mask, 1))  # (B,2)
        variance = positive(g[:, 0], ParamKind.VARIANCE)
        noise = positive(g[:, 1], NOISE.kind)
        n_dims = dim_mask.sum(-1).to(dtype)
        per_dim_var = torch.exp(torch.log(variance) / n_dims)  # (s^2)^(1/D_b)
        B, D, L = symbols.shape
        P = self.vocabulary.max_params
        se_slots = torch.stack([per_dim_var[:, None].expand(B, D), lengthscale], dim=-1)  # (B,D,2)
        ones = torch.full((B, D, L, P), UNUSED_SLOT_VALUE, dtype=dtype, device=h.device)
        first = torch.cat([se_slots, ones[:, :, 0, 2:]], dim=-1)[:, :, None, :]  # (B,D,1,P)
        params = torch.cat([first, ones[:, :, 1:]], dim=2)
        params = torch.where(
            symbol_mask[..., None] & (torch.arange(P, device=h.device) < 2), params, ones
        )
        return Prediction(params=params, noise=noise)

    def se_ard(self, prediction: Prediction, dim_mask: Tensor) -> dict[str, Tensor]:
        """Readable SE-ARD form: ``variance (B,)``, ``lengthscales (B, D)``, ``noise (B,)``."""
        per_dim = prediction.params[:, :, 0, 0]
        variance = torch.where(dim_mask, per_dim, torch.ones_like(per_dim)).prod(-1)
        return {
            "variance": variance,
            "lengthscales": prediction.params[:, :, 0, 1],
            "noise": prediction.noise,
        }
