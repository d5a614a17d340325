"""Several networks, one answer: pick each kernel's prediction by its marginal likelihood.

An :class:`~amorgp.amortizer.frontends.inference.Amortizer` may hold candidate networks beside its
primary one (e.g. two exports of the training campaign that are good on different
kinds of data).  Every network predicts the hyperparameters of every kernel; for each
kernel the prediction with the highest exact log marginal likelihood of the data wins,
the criterion a Type-2 ML fit optimises (a multi-start fit whose starts are
predictions).  The likelihood is evaluated on the points the dataset encoder read (at
most ``encoder_points``, so one dense Cholesky per kernel and network, batched); ties
and likelihoods that cannot be evaluated go to the primary network.  This module's
:func:`predict_with` scores the predictions as they are (what
:meth:`~amorgp.amortizer.networks.prediction.NetworkPrediction.predict_parameters`
returns, e.g. to the GPyTorch bridge); the fits of the pipeline choose every row of a
batch at once, at each prediction's calibrated scale and noise where the fit calibrates
(:func:`amorgp.amortizer.stages.pairs.best_prediction`).

Measured on the bundled datasets (6 kernels x 3 splits, median test RMSE, standardised):
the campaign's 375 k export alone is better than its 206 k predecessor on yacht and
energy and worse on concrete and housing; choosing per kernel by the likelihood keeps the
better of the two on each of them.  Later exports
are better alone than with either as a candidate, so the default names none.

This module also loads and checks the networks an :class:`Amortizer` holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.networks.bundled import resolve_checkpoint
from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.forward import network_parameters
from amorgp.amortizer.networks.network import AmortizationNetwork
from amorgp.amortizer.networks.registry import network_names, network_spec
from amorgp.core.errors import CheckpointError, OptionError
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary
from amorgp.lazy_kernels import PaddedBatch

__all__ = [
    "Params",
    "any_structure",
    "check_candidates",
    "load_candidates",
    "load_network",
    "predict_with",
    "select_by_likelihood",
]

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


def any_structure(model: Any) -> bool:
    """Whether the registry says ``model`` predicts any structure of its vocabulary."""
    name = getattr(getattr(model, "config", None), "model", None)
    return name is None or name not in network_names() or network_spec(name).any_structure


def load_network(where: Path, device: torch.device) -> tuple[AmortizationNetwork, dict[str, Any]]:
    """The verified checkpoint's network and metadata.

    Raises:
        CheckpointError: the checkpoint does not load or is not an amortization network.
    """
    ckpt = load_checkpoint(where, device=device)
    if not isinstance(ckpt.model, AmortizationNetwork):
        raise CheckpointError(
            f"checkpoint {where} holds the {ckpt.network.model!r} network, which is not an "
            "amortization network"
        )
    return ckpt.model, dict(ckpt.meta)


def load_candidates(
    where: Path,
    meta: Mapping[str, Any],
    candidates: Sequence[str | os.PathLike[str]] | None,
    device: torch.device,
) -> dict[str, AmortizationNetwork]:
    """The candidate networks by name: ``candidates`` (directories or bundled names), or
    where it is ``None`` the bundled names the checkpoint ``where`` lists in its
    ``"candidates"``.

    Raises:
        CheckpointError: a malformed ``"candidates"`` entry or a candidate that does not load.
        OptionError: a candidate given twice.
    """
    if candidates is None:
        named = meta.get("candidates", [])
        if not isinstance(named, list) or not all(isinstance(c, str) for c in named):
            raise CheckpointError(
                f"{where / 'checkpoint.json'}: 'candidates' must be a list of bundled "
                f"model names, got {named!r}"
            )
        candidates = named
    others: dict[str, AmortizationNetwork] = {}
    for c in candidates:
        label = Path(c).name
        if label in others:
            raise OptionError(f"candidate {label!r} given twice")
        others[label] = load_network(resolve_checkpoint(c), device)[0]
    return others


def check_candidates(
    primary: AmortizationNetwork, candidates: Mapping[str, AmortizationNetwork], name: str
) -> dict[str, AmortizationNetwork]:
    """``candidates`` as a dict, checked against the ``primary`` network named ``name``.

    Raises:
        OptionError: a candidate that is not a structured amortization network, has
            another vocabulary, or takes the primary network's name.
    """
    others = dict(candidates)
    for label, net in others.items():
        if not isinstance(net, AmortizationNetwork) or not any_structure(net):
            raise OptionError(
                f"candidate {label!r} is not a structured amortization network "
                f"({type(net).__name__})"
            )
        if tuple(net.vocabulary.symbols) != tuple(primary.vocabulary.symbols):
            raise OptionError(
                f"candidate {label!r} has the vocabulary {list(net.vocabulary.symbols)}, "
                f"the primary network {list(primary.vocabulary.symbols)}"
            )
    if name in others:
        raise OptionError(f"candidate name {name!r} is the primary network's name")
    return others


def check_finite(label: str, params: Tensor, noise: Tensor) -> None:
    """Raise :class:`~amorgp.core.errors.CheckpointError` unless the network ``label``'s
    predicted ``params`` and ``noise`` are finite (else its weights are broken)."""
    if not bool(torch.isfinite(params).all() and torch.isfinite(noise).all()):
        raise CheckpointError(
            f"the network {label!r} predicted non-finite hyperparameters for normalised "
            "data: its weights are broken (e.g. a diverged training run); use another "
            "checkpoint"
        )


def predict_with(
    networks: Sequence[tuple[str, AmortizationNetwork]],
    Xe: Tensor,
    ye: Tensor,
    structures: Sequence[DimWiseStructure],
    encoded: tuple[Tensor, Tensor],
    vocabulary: Vocabulary,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor, list[int]]:
    """Every network's prediction for the encoder's points ``Xe``, ``ye`` and the encoded
    ``structures`` (symbols and mask), and per kernel the one of highest log marginal
    likelihood there (:func:`select_by_likelihood`; one network: its prediction).

    Returns:
        ``params (K, d, L, P)`` and ``noise (K,)`` in ``dtype`` and the index of the
        winning network per kernel.

    Raises:
        CheckpointError: a network's output is not finite (broken weights).
    """
    preds = []
    for label, net in networks:
        params, noise = network_parameters(net, Xe, ye, *encoded)
        check_finite(label, params, noise)
        preds.append((params.to(dtype), noise.to(dtype)))
    if len(preds) == 1:
        return preds[0][0], preds[0][1], [0] * len(structures)
    batch = PaddedBatch.from_datasets(
        [(Xe.to(dtype), ye.to(dtype))] * len(structures), list(structures), vocabulary
    )
    params, noise, won = select_by_likelihood(batch, preds)
    return params, noise, [int(i) for i in won.tolist()]
