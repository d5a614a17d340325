"""Tests of the trainer: divergence, best checkpoint, budgets, resume checks, interrupted runs."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import PRESETS, preset
from amorgp.amortizer.testing import TINY_TRAIN
from amorgp.core.errors import CheckpointError, OptionError, TrainingError
from amorgp.training import trainer as trainer_module
from amorgp.training.rundir import RunDirectory
from amorgp.training.train import train

NET = PRESETS["tiny"].network
TC = TINY_TRAIN


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path).model.state_dict()


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=0, atol=0, msg=name)


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 3 steps (validated and checkpointed at step 3), shared: read it, or
    :func:`_copy` it to resume or damage it."""
    run = tmp_path_factory.mktemp("three-steps") / "run"
    train(run, NET, TC, max_steps=3, progress=False)
    return run


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 6 steps without interruption, every step logged (shared: read it only)."""
    run = tmp_path_factory.mktemp("six-steps") / "run"
    train(run, NET, TC, max_steps=6, progress=False, log_every=1)
    return run


def _copy(run: Path, to: Path) -> Path:
    """A copy of the run directory ``run`` at ``to`` (its links stay relative)."""
    shutil.copytree(run, to, symlinks=True)
    return to


def _poison_loss_from_call(monkeypatch: pytest.MonkeyPatch, first_bad: int) -> None:
    """Make the training loss NaN (and so every gradient) from the ``first_bad``-th call on."""
    real = trainer_module.training_loss
    calls = {"n": 0}

    def poisoned(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        out = real(*args, **kwargs)
        if calls["n"] >= first_bad:
            out = dataclasses.replace(out, loss=out.loss * float("nan"))
        return out

    monkeypatch.setattr(trainer_module, "training_loss", poisoned)


# -- divergence -------------------------------------------------------------------------
def test_diverging_run_raises_and_writes_no_non_finite_checkpoint(tmp_path: Path) -> None:
    """The issue's run (tiny preset, lr 1e6, no clipping) stops with an error."""
    tiny = preset("tiny", lr=1e6, grad_clip=0.0)
    with pytest.raises(TrainingError, match="diverged at step"):
        train(tmp_path / "run", tiny.network, tiny.train, max_steps=60, progress=False)
    assert not (tmp_path / "run" / "last").exists()
    assert list((tmp_path / "run").glob("step-*")) == []
    failure = _records(tmp_path / "run")[-1]
    assert failure["kind"] == "failure"
    assert not any(r["kind"] == "validation" for r in _records(tmp_path / "run"))


def test_divergence_keeps_the_last_finite_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _poison_loss_from_call(monkeypatch, first_bad=5)  # steps 1-4 fine, step 5 NaN
    with pytest.raises(TrainingError, match=r"step 5: the training loss is nan.*step-00000003"):
        train(tmp_path / "run", NET, TC, max_steps=9, progress=False)
    run = tmp_path / "run"
    assert (run / "last").resolve().name == "step-00000003"
    assert sorted(p.name for p in run.glob("step-*")) == ["step-00000003"]
    ckpt = load_checkpoint(run / "last")  # loads: every tensor finite
    assert all(torch.isfinite(v).all() for v in ckpt.model.state_dict().values())
    assert _records(run)[-1]["kind"] == "failure"


def _read_back_every(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """Make the trainer read its step diagnostics every ``k`` steps (as off the CPU)."""
    real_init = trainer_module.Trainer.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self._read_every = k

    monkeypatch.setattr(trainer_module.Trainer, "__init__", init)


def test_deferred_read_back_logs_the_same_steps_as_reading_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = dataclasses.replace(TC, val_every=7)
    now = train(tmp_path / "now", NET, cfg, max_steps=10, progress=False, log_every=1)
    _read_back_every(monkeypatch, 4)
    later = train(tmp_path / "later", NET, cfg, max_steps=10, progress=False, log_every=1)
    assert later.losses == now.losses
    assert len(now.losses) == 10
    keys = ("step", "datasets_seen", "loss", "n_used", "n_failed", "lr", "grad_norm")
    rows = [
        [tuple(r[k] for k in keys) for r in _records(run) if r["kind"] == "train"]
        for run in (tmp_path / "now", tmp_path / "later")
    ]
    assert rows[0] == rows[1]
    assert [r[0] for r in rows[0]] == list(range(1, 11))
    _assert_same_weights(tmp_path / "now" / "last", tmp_path / "later" / "last")


def test_deferred_read_back_names_the_step_that_diverged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _read_back_every(monkeypatch, 4)  # steps 1-4 read at 4, step 5 is read at the chunk end
    _poison_loss_from_call(monkeypatch, first_bad=5)
    cfg = dataclasses.replace(TC, val_every=7)
    with pytest.raises(TrainingError, match=r"at step 5: the training loss is nan"):
        train(tmp_path / "run", NET, cfg, max_steps=20, progress=False)
    assert not (tmp_path / "run" / "last").exists()  # nothing written from a diverged state


def test_validation_with_every_dataset_failed_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = trainer_module.validate

    def all_failed(*args: Any, **kwargs: Any) -> dict[str, float]:
        metrics = real(*args, **kwargs)
        return {**metrics, "nll": 0.0, "n_datasets": 0.0, "n_failed": 8.0}

    monkeypatch.setattr(trainer_module, "validate", all_failed)
    with pytest.raises(TrainingError, match="every validation dataset failed"):
        train(tmp_path / "run", NET, TC, max_steps=3, progress=False)
    assert list((tmp_path / "run").glob("step-*")) == []
    assert not any(r["kind"] == "validation" for r in _records(tmp_path / "run"))


# -- best checkpoint --------------------------------------------------------------------
def test_best_checkpoint_is_kept_beside_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``best`` names the lowest validation NLL, and survives pruning and resume."""
    real = trainer_module.validate
    scores = iter([2.0, 1.0, 3.0, 4.0, 0.5])

    def scripted(*args: Any, **kwargs: Any) -> dict[str, float]:
        return {**real(*args, **kwargs), "nll": next(scores)}

    monkeypatch.setattr(trainer_module, "validate", scripted)
    run = tmp_path / "run"
    result = train(run, NET, TC, max_steps=12, progress=False)
    assert result.best_checkpoint == (run / "step-00000006").resolve()
    assert (run / "best").resolve().name == "step-00000006"
    assert (run / "last").resolve().name == "step-00000012"
    # pruning keeps the newest two and the best
    names = ["step-00000006", "step-00000009", "step-00000012"]
    assert sorted(p.name for p in run.glob("step-*")) == names
    meta = load_checkpoint(run / "last").meta
    assert meta["progress"]["best"] == {"step": 6, "nll": 1.0}
    assert load_checkpoint(run / "best").meta["validation"]["nll"] == 1.0
    resumed = train(run, resume=True, max_steps=15, progress=False)
    assert resumed.best_checkpoint == (run / "step-00000015").resolve()
    assert not (run / "step-00000006").exists()


# -- budgets ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("budget", "match"),
    [
        ({"max_steps": 0}, "max_steps must be a positive integer"),
        ({"max_steps": -5}, "max_steps must be a positive integer"),
        ({"max_steps": 2.5}, "max_steps must be a positive integer"),
        ({"max_datasets": 0}, "max_datasets must be a positive integer"),
        ({"max_minutes": -1}, "max_minutes must be positive"),
        ({"max_minutes": 0}, "max_minutes must be positive"),
        ({"max_minutes": float("nan")}, "max_minutes must be positive"),
        ({}, "give at least one budget"),
    ],
)
def test_invalid_budgets_are_rejected_before_any_work(
    tmp_path: Path, budget: dict[str, Any], match: str
) -> None:
    with pytest.raises(OptionError, match=match):
        train(tmp_path / "run", NET, TC, progress=False, **budget)
    assert not (tmp_path / "run").exists()


def test_resume_past_the_budget_is_rejected(tmp_path: Path, three_steps: Path) -> None:
    run = _copy(three_steps, tmp_path / "run")
    before = (run / "metrics.jsonl").read_text()
    for budget in ({"max_steps": 2}, {"max_steps": 3}, {"max_datasets": 12}):
        with pytest.raises(OptionError, match="already at"):
            train(run, resume=True, progress=False, **budget)
    assert sorted(p.name for p in run.glob("step-*")) == ["step-00000003"]
    assert (run / "metrics.jsonl").read_text() == before


# -- configuration on resume ------------------------------------------------------------
def test_resume_rejects_a_different_configuration_listing_the_fields(
    tmp_path: Path, three_steps: Path
) -> None:
    run = _copy(three_steps, tmp_path / "run")
    other_net = dataclasses.replace(NET, d_data=32, d_kernel=32)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"train_cfg": dataclasses.replace(TC, lr=1e6)}, r"lr: given 1000000\.0, stored 0\.001"),
        ({"network": other_net}, r"network\.d_data: given 32, stored 16.*network\.d_kernel"),
        ({"train_overrides": {"lr": 5.0, "batch_size": 4}}, r"differ from it: lr: given 5\.0"),
        ({"train_overrides": {"nonsense": 1}}, "unknown training config keys"),
    ]
    for kwargs, match in cases:
        with pytest.raises(OptionError, match=match):
            train(run, resume=True, max_steps=6, progress=False, **kwargs)
    # the same values as stored are accepted (nothing is ignored silently)
    result = train(
        run,
        NET,
        TC,
        resume=True,
        max_steps=6,
        progress=False,
        train_overrides={"lr": TC.lr, "batch_size": 4},
    )
    assert result.step == 6


def test_init_from_applies_overrides_to_the_stored_recipe(tmp_path: Path) -> None:
    train(tmp_path / "p1", NET, TC, max_steps=1, progress=False)
    result = train(
        tmp_path / "p2",
        init_from=tmp_path / "p1" / "last",
        train_overrides={"phase": 2, "lr": 5e-4},
        max_steps=1,
        progress=False,
    )
    meta = load_checkpoint(result.last_checkpoint).meta  # type: ignore[arg-type]
    assert meta["train"] == {**TC.to_dict(), "phase": 2, "lr": 5e-4}
    with pytest.raises(OptionError, match="already holds a run"):
        train(tmp_path / "p2", init_from=tmp_path / "p1" / "last", max_steps=1, progress=False)


def test_train_only_updates_the_named_parameters_and_keeps_every_other_weight(
    tmp_path: Path, three_steps: Path
) -> None:
    start = three_steps / "last"
    result = train(
        tmp_path / "heads",
        init_from=start,
        train_overrides={"train_only": "heads.,noise_head."},
        max_steps=2,
        progress=False,
    )
    before, after = _weights(start), _weights(result.last_checkpoint)  # type: ignore[arg-type]
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved, "no named parameter was trained"
    assert all(n.startswith(("heads.", "noise_head.")) for n in moved), sorted(moved)
    assert any(n.startswith("heads.") for n in moved)
    with pytest.raises(OptionError, match=r"'decoder\.' names no parameter"):
        train(
            tmp_path / "bad",
            init_from=start,
            train_overrides={"train_only": "heads.,decoder."},
            max_steps=1,
            progress=False,
        )
    assert not (tmp_path / "bad" / "last").exists()
    assert not (tmp_path / "bad").exists()  # refused before work: no half-created run
    with pytest.raises(ValueError, match="empty entry"):
        dataclasses.replace(TC, train_only="heads.,")


# -- interrupted runs -------------------------------------------------------------------
class _Killed(Exception):
    """Stands for kill -9: nothing after it runs."""


def test_killed_run_resumes_with_each_metrics_step_once(
    tmp_path: Path,
    six_steps: Path,
    raise_in_training_loss: Callable[[int, type[BaseException]], Callable[[], None]],
) -> None:
    straight = six_steps
    run = tmp_path / "run"
    train(run, NET, TC, max_steps=3, progress=False, log_every=1)
    restore_training_loss = raise_in_training_loss(3, _Killed)  # at step 6
    with pytest.raises(_Killed):
        train(run, resume=True, max_steps=6, progress=False, log_every=1)
    restore_training_loss()
    steps = [r["step"] for r in _records(run) if r["kind"] == "train"]
    assert steps == [1, 2, 3, 4, 5]  # 4 and 5 were written after the checkpoint at 3
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"kind": "train", "phase": 1, "st')  # torn by the kill
    train(run, resume=True, max_steps=6, progress=False, log_every=1)
    records = _records(run)
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in records if r["kind"] == "validation"] == [3, 6]
    expected = [r["loss"] for r in _records(straight) if r["kind"] == "train"]
    assert [r["loss"] for r in records if r["kind"] == "train"] == expected
    _assert_same_weights(straight / "last", run / "last")


def test_stale_temporaries_are_removed_on_start(tmp_path: Path, three_steps: Path) -> None:
    run = _copy(three_steps, tmp_path / "run")
    stale = run / ".step-00000006.k1ll3d"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    (run / ".last.tmp").symlink_to("step-00000006")
    old = time.time() - 3600
    for p in (stale, stale / "model.safetensors"):
        os.utime(p, (old, old))
    os.utime(run / ".last.tmp", (old, old), follow_symlinks=False)
    fresh = run / ".step-00000009.inuse"  # newer than this process's start: kept
    fresh.mkdir()
    future = time.time() + 3600
    os.utime(fresh, (future, future))
    train(run, resume=True, max_steps=6, progress=False)
    assert not stale.exists()
    assert not (run / ".last.tmp").is_symlink()
    assert fresh.exists()


def test_corrupted_last_falls_back_to_the_newest_intact_checkpoint(
    tmp_path: Path, six_steps: Path, caplog: pytest.LogCaptureFixture
) -> None:
    straight = tmp_path / "straight"
    train(straight, NET, TC, max_steps=9, progress=False)
    run = _copy(six_steps, tmp_path / "run")
    weights = run / "step-00000006" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(run / "last")
    with caplog.at_level(logging.WARNING, logger="amorgp.training.rundir"):
        result = train(run, resume=True, max_steps=9, progress=False)
    assert "step-00000006" in caplog.text
    assert "resuming from" in caplog.text
    assert "step-00000003" in caplog.text
    assert result.step == 9
    _assert_same_weights(straight / "last", run / "last")  # exact from step 3
    val_steps = [r["step"] for r in _records(run) if r["kind"] == "validation"]
    assert val_steps == [3, 6, 9]


def test_no_intact_checkpoint_lists_the_problems(tmp_path: Path, three_steps: Path) -> None:
    run = _copy(three_steps, tmp_path / "run")
    (run / "step-00000003" / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no intact checkpoint to resume"):
        train(run, resume=True, max_steps=6, progress=False)


def test_a_second_process_cannot_train_in_a_locked_directory(
    tmp_path: Path, three_steps: Path
) -> None:
    run = _copy(three_steps, tmp_path / "run")
    holder = RunDirectory(run)
    holder.lock()
    try:
        with pytest.raises(TrainingError, match="is in use"):
            train(run, resume=True, max_steps=6, progress=False)
    finally:
        holder.close()
    assert train(run, resume=True, max_steps=6, progress=False).step == 6


def test_rewind_metrics_drops_late_and_torn_records(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path)
    lines = [{"kind": "train", "step": s} for s in (1, 2, 3, 4)]
    text = "".join(json.dumps(r) + "\n" for r in lines) + '{"kind": "tr'
    (tmp_path / "metrics.jsonl").write_text(text)
    assert run.rewind_metrics(2) == 3
    assert [r["step"] for r in _records(tmp_path)] == [1, 2]
    assert run.rewind_metrics(2) == 0


def test_stale_validation_set_of_other_settings_is_drawn_again(
    tmp_path: Path, three_steps: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A validation set left by a killed run with other settings is not reused silently."""
    train(tmp_path / "other", NET, dataclasses.replace(TC, n_max=30), max_steps=3, progress=False)
    run = tmp_path / "run"
    run.mkdir()
    (tmp_path / "other" / "validation").rename(run / "validation")
    with caplog.at_level(logging.WARNING, logger="amorgp.training.rundir"):
        train(run, NET, TC, max_steps=3, progress=False)
    assert "drawn with other settings" in caplog.text
    reference = three_steps  # the same run with its own validation set
    scores = [
        [r["nll"] for r in _records(d) if r["kind"] == "validation"] for d in (run, reference)
    ]
    assert scores[0] == scores[1]  # scored on the run's own validation set


def test_ctrl_c_stops_at_a_step_boundary_and_resumes_exactly(
    tmp_path: Path, six_steps: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first Ctrl-C finishes the step, validates and checkpoints; resuming is exact."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is handled by the test runner here")
    straight = six_steps  # logged every step: the weights are the same
    real = trainer_module.training_loss
    calls = {"n": 0}

    def ctrl_c_during_step_2(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "training_loss", ctrl_c_during_step_2)
    run = tmp_path / "run"
    first = train(run, NET, TC, max_steps=6, progress=False)
    assert (first.stopped_by, first.step) == ("interrupted", 2)
    assert first.validation  # validated at the stop
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    monkeypatch.setattr(trainer_module, "training_loss", real)
    assert train(run, resume=True, max_steps=6, progress=False).step == 6
    _assert_same_weights(straight / "last", run / "last")


def test_a_file_is_not_a_run_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(OptionError, match="is a file"):
        train(tmp_path / "file", NET, TC, max_steps=1, progress=False)
    with pytest.raises(OptionError, match="nothing to resume"):
        train(tmp_path / "file", resume=True, max_steps=1, progress=False)
