"""Null starts: hyperparameters that need no trained network.

A trained network earns its place only where it beats starts that anyone could write
down without it.  Two such rules are :class:`NullNetwork` s, so they run through exactly
the pipeline the network runs through (calibration, multi-start, scoring, refinement):

``"prior-mean"``
    every hyperparameter at the mean of its training prior (``kernel_grammar``:
    variances, offsets and periods ``2/3``, lengthscales ``0.4`` in normalised units,
    noise ``0.0225``); the untrained network predicts the same.
``"heuristic"``
    the prior mean, with every lengthscale in input units set to the median pairwise
    distance of the training inputs in its dimension (the *median heuristic*) and every
    period to the strongest Lomb-Scargle peak of its dimension
    (:func:`~amorgp.amortizer.stages.periodogram.period_candidates`), where one exists.

:data:`NULL_RULES` lists them.  :func:`null_parameters` gives their parameters for a set
of structures on one dataset; :mod:`amorgp.amortizer.stages.multistart` adds them to every
kernel's starts, so the pipeline's winner is never worse, by exact likelihood, than a
null start.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import torch
from torch import Tensor

from amorgp.amortizer.networks.network import AmortizationNetwork, DatasetEncoding, Prediction
from amorgp.amortizer.networks.structures import encoded
from amorgp.amortizer.stages.periodogram import period_candidates
from amorgp.kernel_grammar import NOISE, DimWiseStructure, ParamKind, Vocabulary
from amorgp.lazy_kernels import PARAM_KINDS, PaddedBatch, slot_table

__all__ = ["HEURISTIC_POINTS", "NULL_RULES", "NullNetwork", "null_parameters"]

NULL_RULES: tuple[str, ...] = ("prior-mean", "heuristic")
"""The null rules (module docstring)."""

HEURISTIC_POINTS = 256
"""Most points whose pairwise distances give the median heuristic (the first ones)."""


def _median_distance(X: Tensor, mask: Tensor) -> Tensor:
    """``(B, D)`` median of ``|x_i - x_j|`` over pairs ``i < j`` of present points (``nan``
    differences left out), as ``nanquantile(0.5)`` gives it."""
    X, mask = X[:, :HEURISTIC_POINTS], mask[:, :HEURISTIC_POINTS]
    B, N, D = X.shape
    if N < 2:
        return torch.full((B, D), torch.nan, dtype=X.dtype, device=X.device)
    i, j = torch.triu_indices(N, N, 1, device=X.device)
    Xt = X.transpose(1, 2).contiguous()  # (B, D, N)
    # advanced indexing: several times faster than index_select along the last dimension
    diff = (Xt[..., i] - Xt[..., j]).abs()  # (B, D, N(N-1)/2)
    pair = ~torch.isnan(diff)
    if not bool(mask.all()):
        pair &= (mask[:, i] & mask[:, j])[:, None, :]
    elif bool(pair.all()):  # every pair counts (the common case)
        return _middle(diff, diff.shape[-1])
    count = pair.sum(-1)  # (B, D)
    c = int(count.flatten()[0]) if count.numel() else 0
    if c > 0 and bool((count == c).all()):  # as many pairs everywhere: the others sort last
        return _middle(torch.where(pair, diff, torch.inf), c)
    return torch.where(pair, diff, torch.nan).nanquantile(0.5, dim=-1)


def _middle(d: Tensor, c: int) -> Tensor:
    """The median of the ``c`` smallest values of each row of ``d (..., Q)``, interpolated
    as ``torch.quantile``'s default (``"linear"``) does: its order statistics (0-based)
    ``(c - 1) // 2`` and ``c // 2``."""
    lo = (c - 1) // 2
    below = d.kthvalue(lo + 1, -1).values
    above = below
    if c % 2 == 0:  # the next order statistic: below again if tied, else the next value
        tied = (d <= below[..., None]).sum(-1) > lo + 1
        above = torch.where(tied, below, torch.where(d > below[..., None], d, torch.inf).amin(-1))
    return torch.lerp(below, above, 0.5 * (c - 1) - lo)


class NullNetwork(AmortizationNetwork):
    """An amortization network without weights that applies a null rule (module docstring).

    Args:
        vocabulary: the symbols it accepts (those of the network it stands beside).
        rule: one of :data:`NULL_RULES`.

    Raises:
        ValueError: an unknown rule.
    """

    def __init__(self, vocabulary: Vocabulary, rule: str = "prior-mean") -> None:
        super().__init__()
        if rule not in NULL_RULES:
            raise ValueError(f"rule must be one of {', '.join(NULL_RULES)}, got {rule!r}")
        self.vocabulary = vocabulary
        self.rule = rule
        self.config = SimpleNamespace(model=f"null:{rule}", vocabulary=vocabulary)
        # no weights; one frozen scalar gives the pipeline a device and the network dtype
        self.anchor = torch.nn.Parameter(torch.zeros(()), requires_grad=False)

    def encode_dataset(self, batch: PaddedBatch) -> DatasetEncoding:
        """``h (B, D, 2)``: the median distance and the strongest period of each dimension
        (``nan`` where none; both ``nan`` for ``"prior-mean"``)."""
        candidates = None
        if self.rule == "heuristic":
            candidates = []
            X = batch.X.to(torch.float64)
            for b in range(X.shape[0]):  # null starts serve one dataset at a time (B is 1)
                keep = batch.point_mask[b]
                Xb = X[b][keep][:, batch.dim_mask[b]]
                candidates.append(period_candidates(Xb, batch.y[b][keep].to(torch.float64)))
        return self.encoding(batch.X, batch.point_mask, batch.dim_mask, candidates)

    def encoding(
        self,
        X: Tensor,
        point_mask: Tensor,
        dim_mask: Tensor,
        candidates: Sequence[Sequence[tuple[int, float, float]]] | None,
    ) -> DatasetEncoding:
        """The encoding of ``B`` datasets ``X (B, N, D)`` given each one's periodogram
        ``candidates`` (:func:`~amorgp.amortizer.stages.periodogram.period_candidates`, strongest
        first), e.g. computed for many datasets at once."""
        B, _, D = X.shape
        h = torch.full((B, D, 2), torch.nan, dtype=torch.float64, device=X.device)
        if self.rule == "heuristic":
            h[..., 0] = _median_distance(X.to(torch.float64), point_mask)
            for b, found in enumerate(candidates or ()):  # a few peaks per dataset
                for j, period, _ in found:
                    if torch.isnan(h[b, j, 1]):
                        h[b, j, 1] = period
        return DatasetEncoding(h, dim_mask)

    def decode(self, encoding: DatasetEncoding, symbols: Tensor, symbol_mask: Tensor) -> Prediction:
        """The prior means, with the heuristic's lengthscales and periods where known."""
        table = slot_table(self.vocabulary, symbols.device)
        ids = torch.where(symbol_mask, symbols, 0).long()
        params = table.fill_unused(table.prior_mean[ids], symbols, symbol_mask)
        h = encoding.h.to(params.dtype)[:, :, None, None, :]  # (B, D, 1, 1, 2)
        used = table.used_slots(symbols, symbol_mask)
        is_ls = table.input_lengthscale[ids] & used
        is_per = (table.kind[ids] == PARAM_KINDS.index(ParamKind.PERIOD)) & used
        ls, per = h[..., 0], h[..., 1]
        floor = table.floor[ids]
        params = torch.where(is_ls & ~torch.isnan(ls), torch.maximum(ls, floor), params)
        params = torch.where(is_per & ~torch.isnan(per), torch.maximum(per, floor), params)
        noise = torch.full(
            (symbols.shape[0],), NOISE.prior.mean, dtype=params.dtype, device=params.device
        )
        return Prediction(params.to(torch.float32), noise.to(torch.float32))


def null_parameters(
    rule: str,
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    vocabulary: Vocabulary,
    candidates: Sequence[tuple[int, float, float]] | None = None,
) -> tuple[Tensor, Tensor]:
    """The null rule's ``params (K, d, L, P)`` and ``noise (K,)`` (float64) for the ``K``
    structures on the normalised dataset ``Xn (n, d)``, ``yn (n,)``.

    ``candidates``: the dataset's periodogram peaks if already computed
    (:func:`~amorgp.amortizer.stages.periodogram.period_candidates` of ``Xn``, ``yn``); ``None``
    computes them here."""
    net = NullNetwork(vocabulary, rule)
    n, d = Xn.shape
    dev = Xn.device
    ones = torch.ones(1, n, dtype=torch.bool, device=dev)
    dims = torch.ones(1, d, dtype=torch.bool, device=dev)
    if candidates is None:
        enc = net.encode_dataset(
            SimpleNamespace(X=Xn[None], y=yn[None], point_mask=ones, dim_mask=dims)  # type: ignore[arg-type]
        )
    else:
        enc = net.encoding(Xn[None], ones, dims, [candidates])
    sym, msk = encoded(structures, vocabulary, dev)
    pred = net.decode(enc.expand(len(structures)), sym, msk)
    return pred.params.to(torch.float64), pred.noise.to(torch.float64)
