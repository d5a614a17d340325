"""Simulated test sets from the paper prior and their cells (Fig. 2b, 9, 10).

Pairs ``(D, S)`` are drawn from the simulator (positive pairs: the structure is the
generating one) with held-out test points from the same GP.  For every pair the GP
posterior predictive at the test points is computed exactly (float64, one Cholesky)
with each method's hyperparameters, and the per-pair test RMSE and mean per-point
test NLL ``0.5 log(2 pi v) + (y - m)^2 / (2 v)`` (``v`` includes the noise) are stored.

A cell ``("sim", set, chunk, "-", method, config)`` holds the lists ``rmse``, ``nll``
and ``train_nll`` over the pairs of one chunk and the method's ``time_s``.  Methods:
``amortized`` / ``amortized@NAME`` (one network pass), ``type2ml`` (GP-ML, Adam, the
best of ``restarts`` starts) and ``ground truth`` (the generating hyperparameters).
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.networks.selection import select_by_likelihood
from amorgp.lazy_kernels import PaddedBatch
from amorgp.training.heldout import (
    gp_batches,
    network_parameters_batch,
    predictive_metrics,
    simulated_pairs,
)
from amorgp_experiments.paper.cache import CellKey, config_hash
from amorgp_experiments.paper.context import RunContext

__all__ = [
    "gp_batches",
    "network_parameters_batch",
    "predictive_metrics",
    "simulated_cells",
    "simulated_pairs",
    "summary",
]

Params = tuple[Tensor, Tensor]


def summary(values: Tensor) -> dict[str, float]:
    """Median and quartiles over the finite entries (NaN = failed, counted)."""
    v = values[torch.isfinite(values)].double()
    if v.numel() == 0:
        nan = math.nan
        return {"median": nan, "q25": nan, "q75": nan, "n": 0, "n_failed": int(values.numel())}
    q = torch.quantile(v, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    return {
        "median": float(q[1]),
        "q25": float(q[0]),
        "q75": float(q[2]),
        "n": int(v.numel()),
        "n_failed": int(values.numel() - v.numel()),
    }


def _method_params(
    ctx: RunContext, method: str, b: Any, gb: PaddedBatch, restarts: int, seed: int
) -> tuple[Params, float]:
    t0 = time.perf_counter()
    if method == "type2ml":
        from amorgp.baselines import Type2MLSettings, fit_type2ml_batch

        s = Type2MLSettings(restarts=restarts, init="default")
        fit = fit_type2ml_batch(gb, s, generator=torch.Generator().manual_seed(seed))
        return (fit.params, fit.noise), fit.time_s
    if method == "ground truth":
        return (b.params, b.noise), 0.0
    model = method.split("@", 1)[1] if "@" in method else ctx.config.model
    amz = ctx.amortizer(model, solo=method.startswith("network@"))
    nets = (amz.model, *amz.candidates.values())
    preds = [network_parameters_batch(net, in_vocabulary(gb, net.vocabulary)) for net in nets]
    if len(preds) == 1:
        params, noise = preds[0]
    else:
        params, noise, _ = select_by_likelihood(gb, preds)  # as Amortizer.infer_many does
    if method.split("@", 1)[0].endswith("+calibrate"):
        params, noise = calibrate_pairs(gb, params, noise)
    return (params, noise), time.perf_counter() - t0


def in_vocabulary(batch: PaddedBatch, vocab: Any) -> PaddedBatch:
    """``batch`` with its symbol ids in ``vocab``'s numbering (the same symbols by name;
    addend order is unchanged where ``vocab`` orders the batch's symbols alike, as every
    vocabulary that extends the paper's does)."""
    import dataclasses

    if batch.vocab.symbols == vocab.symbols:
        return batch
    ids = torch.tensor([0, *(vocab.id(name) for name in batch.vocab.symbols)])
    return dataclasses.replace(batch, symbols=ids[batch.symbols.long()], vocab=vocab)


def calibrate_pairs(batch: PaddedBatch, params: Tensor, noise: Tensor) -> Params:
    """:func:`~amorgp.amortizer.stages.calibrate.calibrate` of every pair of ``batch`` (each its
    own dataset and structure; ``params (B, D, L, P)``, ``noise (B,)``)."""
    from amorgp.amortizer.stages.calibrate import calibrate

    params, noise = params.clone(), noise.clone()
    structures = batch.structures()
    for i, s in enumerate(structures):  # one dataset per pair: one eigendecomposition each
        n, d = int(batch.n_points[i]), s.n_dims
        dims = batch.dim_mask[i].nonzero().flatten()
        cal = calibrate(
            batch.X[i, :n][:, dims],
            batch.y[i, :n],
            [s],
            batch.vocab,
            params[i : i + 1, dims],
            noise[i : i + 1],
        )
        params[i, dims] = cal.params[0, :d]
        noise[i] = cal.noise[0]
    return params, noise


def _chunk_cell(
    ctx: RunContext, method: str, b: Any, vocab: Any, restarts: int, seed: int, _: list[int]
) -> list[dict[str, Any]]:
    """The one cell of ``method`` on chunk ``b`` (per-pair metrics and the time)."""
    gb, gt = gp_batches(b, vocab)
    p, dt = _method_params(ctx, method, b, gb, restarts, seed)
    batch = gt if method == "ground truth" else gb
    metrics = predictive_metrics(batch, *p, b.X_test, b.y_test, b.test_mask)
    return [{k: v.tolist() for k, v in metrics.items()} | {"time_s": dt}]


def simulated_cells(
    ctx: RunContext,
    label: str,
    sim_settings: dict[str, Any],
    methods: list[str],
    restarts: int,
    experiment: str,
) -> dict[str, dict[str, Any]]:
    """Per method, the per-pair metrics over the set ``label`` (cached per chunk).

    Args:
        label: the set's name in the cell keys (``"prior"``, ``"n=50"``).
        sim_settings: :class:`~amorgp.simulator.SimulatorConfig` fields plus ``pairs``
            and ``seed``.
        methods: ``amortized``, ``amortized@NAME``, ``network@NAME`` (the checkpoint's
            own network, without its candidates), ``type2ml``, ``ground truth``.
        restarts: Type-2 ML starts.

    Returns:
        ``{method: {"rmse": [...], "nll": [...], "train_nll": [...], "time_s": total}}``.
    """
    from amorgp.simulator import SimulatorConfig

    fields = {k: v for k, v in sim_settings.items() if k not in ("pairs", "seed")}
    pairs, seed = int(sim_settings["pairs"]), int(sim_settings["seed"])
    hashes: dict[str, str] = {}
    for m in methods:
        settings: dict[str, Any] = {"sim": sim_settings, "method": m, "protocol": 1}
        if m == "type2ml":
            settings["restarts"] = restarts
        elif m.startswith(("amortized", "network@")):
            ident = ctx.identity(m.split("@", 1)[1] if "@" in m else ctx.config.model)
            if ident is None:
                ctx.note(experiment, f"method {m}: its model is not available; skipped")
                continue
            settings["model"] = ident
        hashes[m] = config_hash(settings)
    from amorgp.kernel_grammar import PAPER_VOCABULARY

    vocab = PAPER_VOCABULARY  # the paper's experiment; each network reads it in its own ids
    cfg = SimulatorConfig(**fields, n_test=50, positive_ratio=1.0, vocabulary=vocab)
    chunks = simulated_pairs(cfg, pairs, seed)
    out: dict[str, dict[str, Any]] = {
        m: {"rmse": [], "nll": [], "train_nll": [], "time_s": 0.0} for m in hashes
    }
    with ctx.bar(len(chunks) * len(hashes), f"{experiment}: {label}") as bar:
        for i, b in enumerate(chunks):
            for m, h in hashes.items():
                compute = functools.partial(_chunk_cell, ctx, m, b, vocab, restarts, seed + i)
                value = ctx.cache.get_many([CellKey("sim", label, i, "-", m, h)], compute)[0]
                if value is not None:
                    for k in ("rmse", "nll", "train_nll"):
                        out[m][k].extend(value[k])
                    out[m]["time_s"] += value["time_s"]
                bar.update(1)
    return out


def summarise_methods(per: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Median and quartiles per metric and method (``None`` = failed pair)."""
    out: dict[str, dict[str, Any]] = {}
    for m, r in per.items():
        out[m] = {
            k: summary(
                torch.tensor([math.nan if x is None else x for x in r[k]], dtype=torch.float64)
            )
            for k in ("rmse", "nll", "train_nll")
        }
        out[m]["time_s"] = r["time_s"]
    return out


def markdown_table(summ: dict[str, dict[str, Any]]) -> list[str]:
    """One row per method: RMSE, test NLL, train NLL (median [quartiles]), failures, time."""

    def cell(s: dict[str, Any]) -> str:
        if not s["n"]:
            return "-"
        return f"{s['median']:.3f} [{s['q25']:.3f}, {s['q75']:.3f}]"

    lines = [
        "| method | test RMSE | test NLL / point | train NLL / point | failed | time (s) |",
        "|---|---|---|---|---|---|",
    ]
    for m, r in summ.items():
        lines.append(
            f"| {m} | {cell(r['rmse'])} | {cell(r['nll'])} | {cell(r['train_nll'])} | "
            f"{r['nll']['n_failed']} | {r['time_s']:.2f} |"
        )
    return lines
