"""Simulated held-out pairs and the exact-GP predictive quality of hyperparameters on them.

Pairs ``(D, S)`` are drawn from the simulator (positive pairs: the structure is the
generating one) with test points from the same GP; the GP posterior predictive at the
test points is computed exactly (float64, one Cholesky).  Used by the training campaign
(held-out quality of each segment) and by the paper's simulated experiments
(``amorgp_experiments.paper.simulated``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from amorgp.lazy_kernels import PaddedBatch

__all__ = ["gp_batches", "network_parameters_batch", "predictive_metrics", "simulated_pairs"]

Params = tuple[Tensor, Tensor]


def predictive_metrics(
    batch: PaddedBatch,
    params: Tensor,
    noise: Tensor,
    X_test: Tensor,
    y_test: Tensor,
    test_mask: Tensor,
) -> dict[str, Tensor]:
    """Per-pair test RMSE, test NLL per point and training NLL per point (float64).

    Args:
        batch: ``B`` padded training sets with their structures.
        params: ``(B, D, L, P)`` hyperparameters; noise: ``(B,)`` noise variances.
        X_test: ``(B, M, D)``; y_test: ``(B, M)``; test_mask: ``(B, M)``.

    Returns:
        ``{"rmse", "nll", "train_nll"}``, each ``(B,)`` (NaN where the Cholesky failed).
    """
    from amorgp.baselines import exact_predictive
    from amorgp.baselines.gp import log_marginal_likelihood

    params, noise = params.double(), noise.double()
    mean, var = exact_predictive(batch, params, noise, X_test)
    m = test_mask.double()
    n_test = m.sum(1)
    err = (mean - y_test) ** 2
    rmse = ((err * m).sum(1) / n_test).sqrt()
    nlpd = 0.5 * torch.log(2 * math.pi * var) + err / (2 * var)
    nll = (torch.where(test_mask, nlpd, torch.zeros_like(nlpd))).sum(1) / n_test
    lml = log_marginal_likelihood(batch, params, noise)
    train_nll = -lml / batch.point_mask.sum(1).double()
    return {"rmse": rmse, "nll": nll, "train_nll": train_nll}


def network_parameters_batch(model: torch.nn.Module, batch: PaddedBatch, chunk: int = 50) -> Params:
    """The network's parameters for every pair of ``batch`` (float32 network on its own
    device, in chunks; returned float64 on the CPU)."""
    ps, ns = [], []
    dev = next(model.parameters()).device
    with torch.inference_mode():
        for s in range(0, batch.batch_size, chunk):
            sl = slice(s, s + chunk)
            pred = model(
                batch.X[sl].float().to(dev),
                batch.y[sl].float().to(dev),
                batch.point_mask[sl].to(dev),
                batch.dim_mask[sl].to(dev),
                batch.symbols[sl].to(dev),
                batch.symbol_mask[sl].to(dev),
            )
            ps.append(pred.params.double().cpu())
            ns.append(pred.noise.double().cpu())
    return torch.cat(ps), torch.cat(ns)


def simulated_pairs(cfg: Any, n_pairs: int, seed: int, chunk: int = 25) -> list[Any]:
    """``n_pairs`` valid positive pairs with test points, sorted by ``n`` in chunks of ``chunk``.

    The pairs are drawn in one call of the simulator (seeded); invalid ones are
    dropped.  Sorting by ``n`` and trimming each chunk's padding keeps the batched
    Type-2 ML cheap.
    """
    from amorgp.simulator import Simulator

    sim = Simulator(cfg)
    g = torch.Generator().manual_seed(seed)
    b = sim.sample(n_pairs, g)
    b = b.select(b.valid.nonzero().flatten())
    order = torch.argsort(b.n_points, stable=True)
    out = []
    for s in range(0, len(order), chunk):
        c = b.select(order[s : s + chunk])
        n = int(c.n_points.max())
        out.append(replace(c, X=c.X[:, :n], y=c.y[:, :n], point_mask=c.point_mask[:, :n]))
    return out


def gp_batches(b: Any, vocab: Any) -> tuple[PaddedBatch, PaddedBatch]:
    """The batch with the presented structure and with the generating one (equal for positives)."""
    common = (b.X, b.y, b.point_mask, b.dim_mask)
    return (
        PaddedBatch(*common, b.symbols, b.symbol_mask, vocab),
        PaddedBatch(*common, b.true_symbols, b.true_symbol_mask, vocab),
    )
