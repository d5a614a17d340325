"""Several networks, one answer: pick each kernel's prediction by its marginal likelihood.

An :class:`~amorgp.amortizer.inference.Amortizer` may hold candidate networks beside its
primary one (e.g. two exports of the training campaign that are good on different
kinds of data).  Every network predicts the hyperparameters of every kernel; for each
kernel the prediction with the highest exact log marginal likelihood of the data wins,
the criterion a Type-2 ML fit optimises (a multi-start fit whose starts are
predictions).  The likelihood is evaluated on the points the dataset encoder read (at
most ``encoder_points``, so one dense Cholesky per kernel and network, batched); ties
and likelihoods that cannot be evaluated go to the primary network.

Measured on the bundled datasets (6 kernels x 3 splits, median test RMSE, standardised):
the campaign's 375 k export alone is better than its 206 k predecessor on yacht and
energy and worse on concrete and housing; choosing per kernel by the likelihood keeps the
better of the two on each of them (``docs/model-card.md``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from amorgp.lazy_kernels import PaddedBatch

__all__ = ["Params", "select_by_likelihood"]

Params = tuple[Tensor, Tensor]
"""``params (B, D, L, P)`` and ``noise (B,)`` of ``B`` (dataset, kernel) pairs."""


def select_by_likelihood(
    batch: PaddedBatch, candidates: Sequence[Params]
) -> tuple[Tensor, Tensor, Tensor]:
    """Per element of ``batch``, the candidate with the highest log marginal likelihood.

    Args:
        batch: ``B`` (dataset, kernel) pairs in normalised units.
        candidates: ``M >= 1`` predictions ``(params (B, D', L', P'), noise (B,))`` of
            equal shapes; the slots beyond ``batch.param_shape`` are carried, not scored.

    Returns:
        ``params``, ``noise`` (the winners, in the candidates' dtype and device) and
        ``index (B,)``, the winning candidate per element (0 on ties, or where no
        candidate's likelihood is finite).

    Raises:
        ValueError: no candidate, or candidates of different shapes.
    """
    from amorgp.baselines import log_marginal_likelihood

    if len(candidates) == 0:
        raise ValueError("select_by_likelihood needs at least one candidate")
    shape = tuple(candidates[0][0].shape), tuple(candidates[0][1].shape)
    for p, n in candidates[1:]:
        if (tuple(p.shape), tuple(n.shape)) != shape:
            raise ValueError(
                f"candidates of different shapes: {shape} and {(tuple(p.shape), tuple(n.shape))}"
            )
    P = torch.stack([p for p, _ in candidates])
    N = torch.stack([n for _, n in candidates])
    B = batch.batch_size
    index = torch.zeros(B, dtype=torch.long, device=P.device)
    if len(candidates) > 1:
        D, L, S = batch.param_shape[1:]
        M = len(candidates)
        reps = batch.select(torch.arange(B, device=batch.device).repeat(M))  # m * B + b
        flat_p = P[:, :, :D, :L, :S].reshape(M * B, D, L, S)
        with torch.no_grad():
            lml = log_marginal_likelihood(
                reps,
                flat_p.to(reps.X.device, reps.X.dtype),
                N.reshape(M * B).to(reps.X.device, reps.X.dtype),
            ).reshape(M, B)
        lml = torch.nan_to_num(lml, nan=-torch.inf).to(P.device)
        index = lml.argmax(0)  # the first maximum: the primary network on ties
    rows = torch.arange(B, device=P.device)
    return P[index, rows], N[index, rows], index
