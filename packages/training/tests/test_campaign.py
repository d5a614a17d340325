"""Tests of the training campaign: segments, log records, stages, resume, export rule."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from amorgp.amortizer.networks.checkpoint import load_checkpoint, save_checkpoint
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import build_model
from amorgp.core.errors import TrainingError
from amorgp.training import campaign_plan, campaign_segments
from amorgp.training import trainer as trainer_module
from amorgp.training.campaign import CampaignStage, run_campaign, score_checkpoint

NET = PRESETS["tiny"].network
STAGES = (
    CampaignStage("small-n", n_max=16, lr=1e-3, datasets=8, warmup_steps=1),
    CampaignStage("larger-n", n_max=24, lr=1e-3, datasets=None, warmup_steps=1),
)
FAST: dict[str, Any] = {
    "stages": STAGES,
    "batch_size": 4,
    "segment_datasets": 8,
    "finetune_steps": 1,
    "valset_batches": 1,
    "segment_minutes": 30.0,
    "heldout_pairs_count": 6,
}


def _init_checkpoint(folder: Path) -> Path:
    torch.manual_seed(0)
    return save_checkpoint(folder / "init", build_model(NET), NET)


@pytest.fixture
def init(tmp_path: Path) -> Path:
    return _init_checkpoint(tmp_path)


@contextmanager
def _evaluation_at_test_scale() -> Iterator[None]:
    """The campaign's evaluation at test scale: a validation set of 8 datasets (not 32),
    stage runs validated on 8 datasets (not 64), a phase-2 copy drawn with ``n <= 24`` and
    validated on 8 (not ``n <= 250`` and 32).  Every other field of the recipes is the
    campaign's own; :func:`test_segment_records_real_data_scores` runs a segment at the
    production sizes."""
    stage_config, finetune_config = (
        campaign_segments.stage_train_config,
        campaign_segments.finetune_config,
    )

    def small_stage(*args: Any) -> Any:
        return dataclasses.replace(stage_config(*args), val_size=8)

    def small_finetune(*args: Any) -> Any:
        return dataclasses.replace(finetune_config(*args), n_max=24, val_size=8)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(campaign_plan, "VALSET_BATCH_SIZE", 8)
        mp.setattr(campaign_segments, "stage_train_config", small_stage)
        mp.setattr(campaign_segments, "finetune_config", small_finetune)
        yield


@pytest.fixture
def small_evaluation() -> Iterator[None]:
    with _evaluation_at_test_scale():
        yield


@dataclasses.dataclass(frozen=True)
class FirstSegment:
    """One segment from :func:`init` whose result beats the status's ``best_nll`` of 1e9
    (so it exports): the folders are shared, read them only (or :meth:`copy` them)."""

    init: Path
    state: Path
    export: Path
    record: dict[str, Any]

    def copy(self, to: Path) -> tuple[Path, Path]:
        """The state and export folders copied under ``to`` (to run further segments)."""
        state, export = to / "state", to / "export"
        shutil.copytree(self.state, state, symlinks=True)
        shutil.copytree(self.export, export, symlinks=True)
        return state, export


@pytest.fixture(scope="module")
def first_segment(tmp_path_factory: pytest.TempPathFactory) -> FirstSegment:
    folder = tmp_path_factory.mktemp("first-segment")
    init = _init_checkpoint(folder)
    state, export = folder / "state", folder / "export"
    state.mkdir()
    _status(state, best_nll=1e9)  # anything beats it: the first segment exports
    with _evaluation_at_test_scale():
        record = run_campaign(state, export, init=init, max_segments=1, **FAST)
    return FirstSegment(init, state, export, record)


def _log(export: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (export / "campaign.jsonl").read_text().splitlines()]


def _status(state: Path, **values: Any) -> None:
    status = {"stage": 0, "stage_offset": 0, "total_offset": 0, "seed": 1, "minutes_offset": 0.0}
    (state / "campaign.json").write_text(json.dumps({**status, **values}))


@pytest.mark.usefixtures("small_evaluation")
def test_segments_advance_stages_and_export_only_when_improved(
    tmp_path: Path, first_segment: FirstSegment
) -> None:
    state, export = first_segment.copy(tmp_path)
    init, first = first_segment.init, first_segment.record
    assert first["stopped_by"] == "max_datasets"
    assert first["improved"] is True
    assert (first["stage"], first["stage_datasets"], first["datasets_total"]) == (0, 8, 8)
    best = export / "best"
    assert score_checkpoint(best, _valset(state))["nll"] == pytest.approx(
        first["validation"]["nll"], rel=1e-12
    )
    assert load_checkpoint(best).meta["campaign"]["validation"] == first["validation"]
    # its phase-1 start (one segment end: the latest weights) is exported beside it
    pair = load_checkpoint(export / "best-phase1")
    assert pair.meta["campaign"]["validation"] == first["validation"]
    phase1 = load_checkpoint(export / "phase1-latest").model.state_dict()
    for name, value in pair.model.state_dict().items():
        assert torch.equal(value, phase1[name]), name
    status = json.loads((state / "campaign.json").read_text())
    assert (status["stage"], status["total_offset"]) == (1, 8)  # stage 0's 8 datasets done
    assert status["best_nll"] == first["validation"]["nll"]

    _status(state, **{**status, "best_nll": -1e9})  # nothing beats it: no export
    best_bytes = (best / "model.safetensors").read_bytes()
    second = run_campaign(state, export, init=init, max_segments=1, **FAST)
    assert second["improved"] is False
    assert (second["stage"], second["stage_name"]) == (1, "larger-n")
    assert (second["stage_datasets"], second["datasets_total"]) == (8, 16)
    assert second["best_nll"] == -1e9
    assert (best / "model.safetensors").read_bytes() == best_bytes
    # stage 1 started from the exported phase-1 weights of stage 0
    history = load_checkpoint(state / "stage-1" / "last").meta["history"]
    assert history[-1]["from"] == str(export / "phase1-latest")
    assert [r["datasets_total"] for r in _log(export)] == [8, 16]


def _valset(state: Path) -> list[Any]:
    from amorgp.simulator import read_fixed_set

    return list(read_fixed_set(state / "valset").batches)


@pytest.mark.usefixtures("small_evaluation")
def test_interrupted_segment_resumes_without_counting_twice(
    tmp_path: Path,
    init: Path,
    raise_in_training_loss: Callable[[int, type[BaseException]], Callable[[], None]],
) -> None:
    state, export = tmp_path / "state", tmp_path / "export"
    restore_training_loss = raise_in_training_loss(2, KeyboardInterrupt)  # at the second step
    first = run_campaign(state, export, init=init, baseline=init, **FAST)
    assert first["stopped_by"] == "interrupted"
    assert first["datasets_total"] == 4  # one step of 4 datasets, checkpointed on Ctrl-C
    assert "improved" not in first
    assert not (export / "best").exists()
    baseline_nll = json.loads((state / "campaign.json").read_text())["best_nll"]
    assert baseline_nll == pytest.approx(score_checkpoint(init, _valset(state))["nll"])

    restore_training_loss()
    second = run_campaign(state, export, init=init, max_segments=1, **FAST)
    assert second["stopped_by"] == "max_datasets"
    assert (second["stage_datasets"], second["datasets_total"]) == (8, 8)
    assert second["improved"] is (second["validation"]["nll"] < baseline_nll)
    assert (export / "best").exists() is second["improved"]
    steps = [
        json.loads(line)["step"]
        for line in (state / "stage-0" / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "validation"
    ]
    assert steps == [2]  # the Ctrl-C checkpoint at step 1 is not validated
    assert load_checkpoint(state / "stage-0" / "last").meta["progress"]["step"] == 2
    assert [r["stopped_by"] for r in _log(export)] == ["interrupted", "max_datasets"]


@pytest.mark.usefixtures("small_evaluation")
def test_diverging_segment_logs_a_failure_and_raises(
    tmp_path: Path, init: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, export = tmp_path / "state", tmp_path / "export"
    real = trainer_module.training_loss

    def nan_loss(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(trainer_module, "training_loss", nan_loss)
    with pytest.raises(TrainingError, match="diverged"):
        run_campaign(state, export, init=init, max_segments=1, **FAST)
    record = _log(export)[-1]
    assert record["stopped_by"] == "failed"
    assert "diverged" in record["error"]
    assert not (export / "phase1-latest").exists()


def test_real_data_scores_beat_the_constant_predictor(tmp_path: Path, monkeypatch) -> None:
    """The campaign's real-data learning curve: the bundled model on airline predicts
    far better than the training mean (RMSE 1 in standardised units), and it scores the
    network, not the refinement after it: every fit is the amortized answer (no
    refinement step)."""
    import shutil

    from amorgp.amortizer.frontends.inference import PRETRAINED_DIR, Amortizer
    from amorgp.amortizer.networks.bundled import DATA_DIR
    from amorgp.training.campaign_plan import real_data_scores

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(DATA_DIR / "airline.csv", data)
    seen: list[list[int]] = []
    infer_many = Amortizer.infer_many

    def recording(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        fits = infer_many(self, *args, **kwargs)
        seen.append([f.refine_steps for f in fits])
        return fits

    monkeypatch.setattr(Amortizer, "infer_many", recording)
    scores = real_data_scores(PRETRAINED_DIR, data, n_kernels=2)
    assert set(scores) == {"airline"}
    assert 0.0 < scores["airline"]["rmse"] < 0.6
    assert torch.isfinite(torch.tensor(scores["airline"]["nll"]))
    assert seen == [[0, 0]]


def test_segment_records_real_data_scores(tmp_path: Path, init: Path) -> None:
    """A segment at the production evaluation sizes (the other segment tests shrink them)
    scores its copy on a folder of real datasets too."""
    import numpy as np

    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (40, 2))
    y = np.sin(6 * X[:, 0]) + X[:, 1]
    np.savetxt(
        data / "toy.csv", np.column_stack([X, y]), delimiter=",", header="a,b,y", comments=""
    )
    state, export = tmp_path / "state", tmp_path / "export"
    record = run_campaign(state, export, init=init, max_segments=1, real_data=data, **FAST)
    assert set(record["real"]) == {"toy"}
    assert _log(export)[-1]["real"]["toy"]["rmse"] == record["real"]["toy"]["rmse"]


def test_average_weights_is_the_mean_of_the_state_dicts(tmp_path: Path) -> None:
    from amorgp.core.errors import CheckpointError
    from amorgp.training.campaign_plan import average_weights

    paths = []
    for seed in range(3):
        torch.manual_seed(seed)
        paths.append(save_checkpoint(tmp_path / f"m{seed}", build_model(NET), NET))
    average_weights(paths, tmp_path / "avg", {"swa_members": [0, 1, 2]})
    avg = load_checkpoint(tmp_path / "avg")  # verified: hashes, finite weights
    states = [load_checkpoint(p).model.state_dict() for p in paths]
    for name, value in avg.model.state_dict().items():
        expected = sum(s[name].double() for s in states) / 3
        torch.testing.assert_close(value.double(), expected, rtol=0, atol=1e-7)
    assert avg.meta["swa_members"] == [0, 1, 2]
    other = PRESETS["small"].network
    save_checkpoint(tmp_path / "other", build_model(other), other)
    with pytest.raises(CheckpointError, match="another architecture"):
        average_weights([paths[0], tmp_path / "other"], tmp_path / "bad", {})


@pytest.mark.usefixtures("small_evaluation")
def test_segments_evaluate_the_average_of_the_last_segment_ends(
    tmp_path: Path, first_segment: FirstSegment
) -> None:
    """From the second segment on, the phase-2 copy starts from the average of the kept
    segment ends (at most ``swa_members``), whose phase-1 score is logged."""
    state, export = first_segment.copy(tmp_path)  # one segment end kept: no average yet
    for _ in range(2):
        run_campaign(state, export, init=first_segment.init, max_segments=1, swa_members=2, **FAST)
    log = _log(export)
    assert "swa" not in log[0]  # one segment end: the latest weights themselves
    assert log[1]["swa"]["members"] == [8, 16]
    assert log[2]["swa"]["members"] == [16, 24]
    kept = sorted(int(p.name) for p in (state / "swa").iterdir())
    assert kept == [16, 24]
    valset = _valset(state)
    assert score_checkpoint(state / "swa-average", valset)["nll"] == pytest.approx(
        log[2]["swa"]["phase1_nll"], rel=1e-12
    )
    ft = load_checkpoint(state / "finetune" / "last").meta["history"]
    assert ft[-1]["from"] == str(state / "swa-average")


def test_segments_log_held_out_predictive_quality(first_segment: FirstSegment) -> None:
    """Each evaluated copy's median test NLL and RMSE on held-out simulated pairs are
    logged, equal to a recomputation from the exported weights."""
    from amorgp.training.campaign_plan import heldout_pairs, heldout_scores

    assert first_segment.record["improved"] is True  # exported
    held = first_segment.record["heldout"]
    assert 0 < held["pairs"] <= 6
    assert held["rmse"] > 0
    assert math.isfinite(held["nll"])
    again = heldout_scores(first_segment.export / "best", heldout_pairs(NET, 6))
    assert again == pytest.approx(held, rel=1e-12)


def test_compare_on_heldout_is_paired_over_the_same_pairs(tmp_path: Path) -> None:
    """The shipping comparison: medians and paired differences equal a recomputation per
    pair, the sign test equals scipy's normal tail, and a network against itself ties."""
    from scipy.stats import norm

    from amorgp.amortizer.testing import seeded_checkpoint
    from amorgp.training.campaign_plan import (
        compare_on_heldout,
        heldout_pairs,
        heldout_per_pair,
    )

    a = seeded_checkpoint(tmp_path / "a", NET, seed=1)
    b = seeded_checkpoint(tmp_path / "b", NET, seed=2)
    got = compare_on_heldout(a, b, n_pairs=8, seed=3)
    chunks = heldout_pairs(NET, 8, 3)
    (na, ra), (nb, rb) = heldout_per_pair(a, chunks), heldout_per_pair(b, chunks)
    assert got["pairs"] == na.numel() > 0
    assert got["base_nll"] == pytest.approx(float(na.median()))
    assert got["new_rmse"] == pytest.approx(float(rb.median()))
    assert got["median_nll_difference"] == pytest.approx(float((nb - na).median()))
    assert got["median_rmse_difference"] == pytest.approx(float((rb - ra).median()))
    wins = int((nb < na).sum())
    m = int((nb != na).sum())
    assert got["new_better_fraction"] == pytest.approx(wins / m)
    z = (wins - m / 2) / math.sqrt(m / 4)
    assert got["sign_test_p"] == pytest.approx(2 * norm.sf(abs(z)))
    same = compare_on_heldout(a, a, n_pairs=8, seed=3)
    assert same["median_nll_difference"] == 0.0
    assert same["sign_test_p"] == 1.0


def _segment_on(
    device: str, tmp_path: Path, first_segment: FirstSegment
) -> tuple[dict[str, Any], Path, Path]:
    """One segment on this machine (``first_segment``), then one on ``device`` with a new
    state directory (another machine: a lent GPU) over the same export folder."""
    _, export = first_segment.copy(tmp_path)
    there, init, first = tmp_path / "there", first_segment.init, first_segment.record
    phase1 = load_checkpoint(export / "phase1-latest").model.state_dict()
    second = run_campaign(there, export, init=init, max_segments=1, device=device, **FAST)
    assert (first["datasets_total"], second["datasets_total"]) == (8, 16)
    assert (second["stage"], second["stage_name"]) == (1, "larger-n")  # from the log
    assert second["seed"] == first["seed"] + 1  # a new data stream, not a replay
    run = load_checkpoint(there / "stage-1" / "last")
    assert run.meta["history"][-1]["from"] == str(export / "phase1-latest")
    # the state it continued from is the first machine's last phase-1 weights
    start = load_checkpoint(export / "phase1-latest").model.state_dict()
    assert any(not torch.equal(start[k], phase1[k].to(start[k].device)) for k in phase1)
    assert [r["datasets_total"] for r in _log(export)] == [8, 16]
    assert [r["device"] for r in _log(export)] == ["cpu", torch.device(device).type]
    return second, there, export


@pytest.mark.usefixtures("small_evaluation")
def test_a_new_state_directory_continues_from_the_export(
    tmp_path: Path, first_segment: FirstSegment
) -> None:
    second, there, _ = _segment_on("cpu", tmp_path, first_segment)
    assert math.isfinite(second["validation"]["nll"])
    assert load_checkpoint(there / "stage-1" / "last").meta["progress"]["device"] == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.usefixtures("small_evaluation")
def test_campaign_segments_train_on_cuda(tmp_path: Path, first_segment: FirstSegment) -> None:
    second, there, _ = _segment_on("cuda", tmp_path, first_segment)
    assert math.isfinite(second["validation"]["nll"])
    assert load_checkpoint(there / "stage-1" / "last").meta["progress"]["device"] == "cuda"


@pytest.mark.parametrize(
    ("record", "expected"),
    [  # (stage, stage_datasets, datasets_total) -> (stage, stage_offset, total_offset)
        ((0, 5, 5), (0, 5, 5)),  # mid-stage: the new run directory adds to the counters
        ((0, 8, 8), (1, 0, 8)),  # the record ended stage 0 (8 datasets): stage 1 starts
        ((1, 30, 38), (1, 30, 38)),  # the last stage has no end
    ],
)
def test_a_new_state_takes_its_counters_from_the_log(
    tmp_path: Path, record: tuple[int, int, int], expected: tuple[int, int, int]
) -> None:
    from amorgp.training.campaign import _initial_status

    k, done, total = record
    line = {"stage": k, "stage_datasets": done, "datasets_total": total, "seed": 4}
    (tmp_path / "campaign.jsonl").write_text(json.dumps({**line, "best_nll": 0.5}) + "\n")
    status = _initial_status(tmp_path / "campaign.jsonl", STAGES)
    assert (status["stage"], status["stage_offset"], status["total_offset"]) == expected
    assert (status["seed"], status["best_nll"]) == (5, 0.5)


def test_held_out_pairs_are_drawn_in_the_vocabulary_both_networks_read(tmp_path: Path) -> None:
    """A network of a larger vocabulary reads the smaller one's pairs with its own symbol
    ids (same kernels by name), and the comparison of the two draws the smaller one's
    pairs whichever is the base."""
    from amorgp.amortizer.testing import seeded_checkpoint
    from amorgp.core.errors import DataError
    from amorgp.kernel_grammar import PAPER_VOCABULARY, Vocabulary
    from amorgp.kernel_grammar.registry import EXTENDED_VOCABULARY
    from amorgp.training.campaign_plan import (
        compare_on_heldout,
        heldout_pairs,
        heldout_per_pair,
        in_vocabulary,
        shared_vocabulary,
    )

    wide = dataclasses.replace(NET, vocabulary=EXTENDED_VOCABULARY)
    assert shared_vocabulary(EXTENDED_VOCABULARY, PAPER_VOCABULARY) == PAPER_VOCABULARY
    assert shared_vocabulary(PAPER_VOCABULARY, EXTENDED_VOCABULARY) == PAPER_VOCABULARY
    with pytest.raises(DataError, match="different kernels"):
        shared_vocabulary(Vocabulary(("SE", "MAT52")), PAPER_VOCABULARY)
    chunks = heldout_pairs(NET, 8, 3)
    b = chunks[0]
    moved = in_vocabulary(b, EXTENDED_VOCABULARY)
    assert moved.vocab == EXTENDED_VOCABULARY
    for i in range(len(b.symbols)):
        assert [str(s) for s in moved.structures()[i : i + 1]] == [
            str(s) for s in b.structures()[i : i + 1]
        ]
    assert not torch.equal(moved.symbols, b.symbols)  # PER*SE etc. have other ids there
    small = seeded_checkpoint(tmp_path / "small", NET, seed=1)
    large = seeded_checkpoint(tmp_path / "large", wide, seed=2)
    na, _ = heldout_per_pair(small, chunks)
    got = compare_on_heldout(large, small, n_pairs=8, seed=3)
    assert got["new_nll"] == pytest.approx(float(na.median()))
    assert compare_on_heldout(small, large, n_pairs=8, seed=3)["base_nll"] == got["new_nll"]
