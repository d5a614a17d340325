"""The plan of the training campaign (stages, recipes, validation set) and its files.

See :mod:`amorgp.training.campaign` for the campaign itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer import jsonlog
from amorgp.amortizer.jsonlog import write_text_atomic
from amorgp.amortizer.networks.checkpoint import load_checkpoint, save_checkpoint
from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.core.errors import CheckpointError, DataError, shorten
from amorgp.kernel_grammar import Vocabulary
from amorgp.simulator import SimulatorConfig, generate_fixed_set, read_fixed_set
from amorgp.training.runstate import training_record
from amorgp.training.train import validate

__all__ = [
    "CAMPAIGN_STAGES",
    "SHIP_SEED",
    "SWA_MEMBERS",
    "VALSET_BATCHES",
    "VALSET_BATCH_SIZE",
    "VALSET_SEED",
    "CampaignStage",
    "average_weights",
    "campaign_validation_set",
    "compare_on_heldout",
    "heldout_pairs",
    "heldout_per_pair",
    "heldout_scores",
    "in_vocabulary",
    "real_data_scores",
    "score_checkpoint",
    "shared_vocabulary",
]

VALSET_SEED = 20_261_122
"""Seed of the fixed campaign validation set (paper prior, ``d <= 8``, ``n <= 250``)."""

VALSET_BATCHES, VALSET_BATCH_SIZE = 8, 32

SWA_MEMBERS = 4
"""Segment-end phase-1 weights averaged into the evaluated copy (stochastic weight
averaging along the campaign's constant-learning-rate trajectory).  Measured at 272 k
datasets: the average of the last four segment ends (245 k-280 k datasets) scored 0.577
on the campaign validation set before fine-tuning and 0.576 after, against 0.599 and 0.582
for the latest weights alone."""


@dataclass(frozen=True)
class CampaignStage:
    """One stage of the curriculum.

    Attributes:
        name: label in the log.
        n_max: largest dataset size drawn (``n ~ U{10..n_max}``).
        lr: RAdam learning rate (after ``warmup_steps``).
        datasets: datasets to train in this stage before the next one (``None``: open-ended).
    """

    name: str
    n_max: int
    lr: float
    datasets: int | None
    warmup_steps: int = 20


CAMPAIGN_STAGES: tuple[CampaignStage, ...] = (
    CampaignStage("d8-n100", n_max=100, lr=5e-4, datasets=150_000),
    CampaignStage("d8-n250", n_max=250, lr=3e-4, datasets=1_200_000),
    CampaignStage("d8-n250-lr1e-4", n_max=250, lr=1e-4, datasets=None),
)
"""The curriculum: small datasets first, then the paper's ``n <= 250``, then a step
decay of the learning rate once the validation NLL of the constant-rate stage had
levelled off (0.4775 at 1.14 M datasets, 0.4749 at 1.29 M and 1.35 M)."""


def _campaign_config(phase: int, seed: int, batch_size: int, **fields: Any) -> TrainConfig:
    """A recipe of the campaign: up to 8 dimensions, 4 size buckets, no worker processes."""
    return TrainConfig(
        phase=phase,
        batch_size=batch_size,
        max_dims=8,
        size_buckets=4,
        num_workers=0,
        seed=seed,
        **fields,
    )


def stage_train_config(stage: CampaignStage, seed: int, batch_size: int) -> TrainConfig:
    return _campaign_config(
        1,
        seed,
        batch_size,
        lr=stage.lr,
        warmup_steps=stage.warmup_steps,
        n_max=stage.n_max,
        encoder_points=0,
        val_size=64,
        val_every=100,
    )


def finetune_config(seed: int, batch_size: int) -> TrainConfig:
    return _campaign_config(
        2, seed, batch_size, lr=3e-4, warmup_steps=10, n_max=250, val_size=32, val_every=10_000
    )


def campaign_validation_set(
    state: Path, network: NetworkConfig, n_batches: int = VALSET_BATCHES
) -> list[Any]:
    """The fixed campaign validation set (written to ``state/valset`` once, then read)."""
    path = state / "valset"
    if path.exists():
        return list(read_fixed_set(path).batches)
    cfg = SimulatorConfig(n_min=10, n_max=250, d_max=8, vocabulary=network.vocabulary)
    return list(
        generate_fixed_set(
            path, cfg, n_batches=n_batches, batch_size=VALSET_BATCH_SIZE, seed=VALSET_SEED
        ).batches
    )


HELDOUT_SEED = 20_261_125
"""Seed of the campaign's held-out pairs (not Fig. 2b's: the benchmark stays unseen)."""


def heldout_pairs(
    network: NetworkConfig, n_pairs: int = 200, seed: int = HELDOUT_SEED
) -> list[Any]:
    """Positive paper-prior pairs (``n <= 250``, ``d <= 8``) with 50 test points each,
    drawn like the pairs of paper Fig. 2b but from ``seed`` (default
    :data:`HELDOUT_SEED`)."""
    from amorgp.training.heldout import simulated_pairs

    cfg = SimulatorConfig(
        n_min=10, n_max=250, d_max=8, n_test=50, positive_ratio=1.0, vocabulary=network.vocabulary
    )
    return simulated_pairs(cfg, n_pairs, seed)


def in_vocabulary(batch: Any, vocab: Vocabulary) -> Any:
    """``batch`` (a simulated batch) with its symbol ids (presented and true) renumbered
    into ``vocab``, which has every symbol of the batch's vocabulary
    (:func:`shared_vocabulary`)."""
    if batch.vocab == vocab:
        return batch
    lut = torch.tensor([0, *(vocab.id(s) for s in batch.vocab.symbols)], dtype=torch.long)
    lut = lut.to(batch.symbols.device)
    return replace(
        batch, symbols=lut[batch.symbols], true_symbols=lut[batch.true_symbols], vocab=vocab
    )


def heldout_per_pair(checkpoint: Path, chunks: list[Any]) -> tuple[Tensor, Tensor]:
    """Per pair of :func:`heldout_pairs`: the test NLL per point and the test RMSE of the
    exact-GP predictive with the checkpoint's network's hyperparameters."""
    from amorgp.training.heldout import (
        gp_batches,
        network_parameters_batch,
        predictive_metrics,
    )

    ckpt = load_checkpoint(checkpoint)
    vocab = ckpt.network.vocabulary
    nll, rmse = [], []
    for b in chunks:
        gb, _ = gp_batches(in_vocabulary(b, vocab), vocab)
        params, noise = network_parameters_batch(ckpt.model, gb)
        m = predictive_metrics(gb, params, noise, b.X_test, b.y_test, b.test_mask)
        nll.append(m["nll"])
        rmse.append(m["rmse"])
    return torch.cat(nll), torch.cat(rmse)


def heldout_scores(checkpoint: Path, chunks: list[Any]) -> dict[str, float]:
    """Median test NLL per point and test RMSE of the exact-GP predictive with the
    checkpoint's hyperparameters over the pairs of :func:`heldout_pairs` (the quality
    the targets measure, which the validation NLL of the training points does not)."""
    n, r = heldout_per_pair(checkpoint, chunks)
    return {"nll": float(n.nanmedian()), "rmse": float(r.nanmedian()), "pairs": int(n.numel())}


def shared_vocabulary(a: Vocabulary, b: Vocabulary) -> Vocabulary:
    """The vocabulary of pairs both networks read: whichever of ``a`` and ``b`` has only
    symbols of the other (``a`` when they have the same).

    Raises:
        DataError: each has a symbol the other lacks.
    """
    if set(a.symbols) <= set(b.symbols):
        return a
    if set(b.symbols) <= set(a.symbols):
        return b
    raise DataError(
        f"the networks read different kernels ({a.name!r} has "
        f"{', '.join(sorted(set(a.symbols) - set(b.symbols)))}, {b.name!r} has "
        f"{', '.join(sorted(set(b.symbols) - set(a.symbols)))}): no held-out pairs fit both"
    )


SHIP_SEED = 77_777
"""Seed of the 1000 pairs that decide whether an export replaces the default."""


def compare_on_heldout(
    base: Path, new: Path, n_pairs: int = 1000, seed: int = SHIP_SEED
) -> dict[str, float]:
    """``new`` against ``base`` pair by pair on ``n_pairs`` held-out simulated pairs.

    The pairs are drawn in the vocabulary both networks read (:func:`shared_vocabulary`).
    The campaign's 200-pair median moves by a few hundredths of a nat between exports, so
    a shipping decision compares the two networks on the same, larger set of pairs.

    Returns:
        The medians of each, the median paired differences ``new - base`` of the test NLL
        and RMSE (negative: ``new`` is better), the fraction of pairs where ``new`` has the
        lower test NLL, and the two-sided sign-test p-value of that fraction (normal
        approximation).
    """
    net_a, net_b = load_checkpoint(base).network, load_checkpoint(new).network
    shared = shared_vocabulary(net_a.vocabulary, net_b.vocabulary)
    chunks = heldout_pairs(net_a if shared == net_a.vocabulary else net_b, n_pairs, seed)
    (na, ra), (nb, rb) = heldout_per_pair(base, chunks), heldout_per_pair(new, chunks)
    ok = ~(na.isnan() | nb.isnan() | ra.isnan() | rb.isnan())
    d_nll, d_rmse = (nb - na)[ok], (rb - ra)[ok]
    wins, ties = int((d_nll < 0).sum()), int((d_nll == 0).sum())
    m = int(ok.sum()) - ties
    z = (wins - m / 2) / math.sqrt(m / 4) if m > 0 else 0.0
    return {
        "pairs": int(ok.sum()),
        "base_nll": float(na[ok].median()),
        "new_nll": float(nb[ok].median()),
        "base_rmse": float(ra[ok].median()),
        "new_rmse": float(rb[ok].median()),
        "median_nll_difference": float(d_nll.median()),
        "median_rmse_difference": float(d_rmse.median()),
        "new_better_fraction": wins / m if m > 0 else 0.5,
        "sign_test_p": math.erfc(abs(z) / math.sqrt(2.0)),
    }


def score_checkpoint(checkpoint: Path, batches: list[Any]) -> dict[str, float]:
    """Validation metrics (see :func:`~amorgp.training.train.validate`) of a checkpoint."""
    ckpt = load_checkpoint(checkpoint)
    return validate(ckpt.model, batches, ckpt.network.vocabulary, torch.device("cpu"))


PAPER_N_TRAIN = {"airline": 100, "yacht": 250}
"""Training-set sizes of the paper's real-data protocol (500 for the other datasets)."""


def real_data_scores(
    checkpoint: Path, data_dir: Path, *, n_kernels: int = 6, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Amortized test RMSE and NLL of ``checkpoint`` on every ``data_dir/*.csv``.

    One random split per dataset (paper sizes: ``n_train`` 500, airline 100, yacht 250;
    at most 1000 test points), the first ``n_kernels`` paper evaluation kernels in every
    dimension, no refinement; medians over the kernels, in standardised target units
    (training mean and standard deviation).  A cheap real-data learning curve for the
    campaign log, not the full benchmark (``benchmarks/bench_model_quality.py``).
    """
    import warnings

    import numpy as np

    from amorgp.amortizer.frontends.inference import Amortizer
    from amorgp.amortizer.frontends.io import read_csv
    from amorgp.kernel_grammar import paper_evaluation_set

    amz = Amortizer.from_pretrained(checkpoint, device="cpu", calibrate=False)
    out: dict[str, dict[str, float]] = {}
    for path in sorted(Path(data_dir).glob("*.csv")):
        table = read_csv(path)
        X, y = table.X, table.y
        assert y is not None
        n_train = min(PAPER_N_TRAIN.get(path.stem, 500), len(y) - 10)
        perm = np.random.default_rng(seed).permutation(len(y))
        tr, te = perm[:n_train], perm[n_train : n_train + 1000]
        mu, sd = float(y[tr].mean()), float(y[tr].std())
        kernels = [t.broadcast(X.shape[1]) for t in paper_evaluation_set(0)[:n_kernels]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits = amz.infer_many(X[tr], y[tr], kernels, refine=0)
        rmse, nll = [], []
        t = (y[te] - mu) / sd
        for f in fits:
            m, v = (np.asarray(a) for a in f.predict(X[te]))
            m, v = (m - mu) / sd, v / sd**2
            rmse.append(float(np.sqrt(np.mean((m - t) ** 2))))
            nll.append(float(np.mean(0.5 * (np.log(2 * np.pi * v) + (t - m) ** 2 / v))))
        out[path.stem] = {"rmse": float(np.median(rmse)), "nll": float(np.median(nll))}
    return out


def read_json(path: Path, default: dict[str, Any]) -> dict[str, Any]:
    """The JSON object in ``path`` (a copy of ``default`` if there is no such file).

    Raises:
        DataError: the file is not a JSON object (torn or edited), naming it.
    """
    if not path.exists():
        return dict(default)
    try:
        data = json.loads(jsonlog.read_bounded(path).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise DataError(
            f"{path} is corrupted (invalid JSON: {shorten(str(err))}); remove it to rebuild "
            "the campaign state from the log"
        ) from None
    if not isinstance(data, dict):
        raise DataError(f"{path} is corrupted: it holds no JSON object")
    return data


_KINDS = {
    "count": "an integer >= 0",
    "minutes": "a finite number >= 0",
    "nll": "a finite number or null",
}


def _fits(value: object, kind: str) -> bool:
    if isinstance(value, bool):
        return False
    if kind == "count":
        return isinstance(value, int) and value >= 0
    if kind == "nll" and value is None:
        return True
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return kind == "nll" or value >= 0


def check_fields(where: str, record: dict[str, Any], fields: dict[str, str], fix: str) -> None:
    """Check that ``record`` (a campaign state or log record read from ``where``) holds
    each of ``fields`` (name -> ``"count"``, ``"minutes"`` or ``"nll"``) with a value of
    that kind.

    Raises:
        DataError: one line naming ``where``, the field, its value and the record (cut
            short), and ``fix``.
    """
    for name, kind in fields.items():
        if name not in record:
            problem = f"has no {name!r}"
        elif not _fits(record[name], kind):
            value = json.dumps(record[name], default=str)
            problem = f"has {name}={shorten(value, 40)}, not {_KINDS[kind]}"
        else:
            continue
        shown = shorten(json.dumps(record, sort_keys=True, default=str))
        raise DataError(f"{where}: the record {shown} {problem}; {fix}")


STATE_FIELDS = {
    "stage": "count",
    "stage_offset": "count",
    "total_offset": "count",
    "seed": "count",
    "best_nll": "nll",
    "minutes_offset": "minutes",
}
"""The fields of the campaign state ``STATE/campaign.json`` and their kinds."""

RECORD_FIELDS = {"stage": "count", "stage_datasets": "count", "datasets_total": "count"}
"""The fields of a campaign log record that a new campaign state continues from."""
RECORD_OPTIONAL = {"seed": "count", "minutes_total": "minutes"}
"""Fields of a campaign log record that older records may lack, checked where present."""


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


def last_record(log: Path) -> dict[str, Any] | None:
    """The last whole record of ``log`` (a torn last line is ignored, a corrupted line is
    a :class:`~amorgp.core.errors.DataError` naming the file and line)."""
    return jsonlog.last_record(log)


def append_record(log: Path, record: dict[str, Any]) -> None:
    """Append ``record`` to ``log``, first cutting off a torn last line."""
    jsonlog.append_record(log, record)


def average_weights(sources: list[Path], target: Path, meta: dict[str, Any]) -> None:
    """Write the uniform average of the weights of ``sources`` to ``target`` atomically.

    Floating-point tensors are averaged in float64 and stored in their own dtype; other
    tensors and the metadata come from the last source.  No optimiser state.

    Raises:
        CheckpointError: no source, or sources of different architectures.
    """
    if not sources:
        raise CheckpointError("average_weights needs at least one checkpoint")
    ckpts = [load_checkpoint(s) for s in sources]
    ref = ckpts[-1]
    for path, ckpt in zip(sources, ckpts, strict=True):
        if ckpt.network != ref.network:
            raise CheckpointError(
                f"{path} holds another architecture than {sources[-1]}; cannot average them"
            )
    states = [c.model.state_dict() for c in ckpts]
    average = {
        name: (
            (sum(st[name].double() for st in states) / len(states)).to(value.dtype)
            if value.is_floating_point()
            else value
        )
        for name, value in states[-1].items()
    }
    ref.model.load_state_dict(average)
    keep = training_record(ref.meta)
    save_checkpoint(target, ref.model, ref.network, meta={**keep, **meta}, overwrite=True)


def export_weights(source: Path, target: Path, meta: dict[str, Any]) -> None:
    """Write the weights of ``source`` (no optimiser state) to ``target`` atomically."""
    ckpt = load_checkpoint(source)
    keep = training_record(ckpt.meta)
    save_checkpoint(target, ckpt.model, ckpt.network, meta={**keep, **meta}, overwrite=True)
