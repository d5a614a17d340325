"""Hostile inputs met by training: a run refused while starting leaves no folder, a full
disk when a run starts, torn or corrupted campaign and GPU-chunk logs (the inference
ones are in ``packages/amortizer/tests/test_hostile_input.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.core.errors import DataError


def test_a_run_refused_while_starting_leaves_no_folder(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    from amorgp.core.errors import OptionError
    from amorgp.training.train import train

    out = tmp_path / "new-run"
    with pytest.raises(OptionError, match="exceeds n_max"):
        train(
            out, init_from=tiny_checkpoint, train_overrides={"n_min": 50, "n_max": 10}, max_steps=1
        )
    assert not out.exists()  # no .lock, no validation/
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    with pytest.raises(OptionError):
        train(
            existing,
            init_from=tiny_checkpoint,
            train_overrides={"n_min": 50, "n_max": 10},
            max_steps=1,
        )
    assert (existing / "notes.txt").read_text() == "mine"  # a folder that existed is kept


def test_campaign_state_and_log_errors_name_the_file(tmp_path: Path) -> None:
    from amorgp.training.campaign_plan import append_record, last_record, read_json

    state = tmp_path / "campaign.json"
    state.write_text('{"stage": 1, "sta')
    with pytest.raises(DataError, match=rf"{state} is corrupted \(invalid JSON"):
        read_json(state, {})
    log = tmp_path / "campaign.jsonl"
    log.write_text('{"stage": 0}\n{"stage": 1, "x')
    with pytest.warns(UserWarning, match="dropped a torn last line"):
        append_record(log, {"stage": 2})
    assert last_record(log) == {"stage": 2}


def test_gpu_chunk_log_reads_past_a_torn_line_and_is_rewritten_whole(tmp_path: Path) -> None:
    from amorgp.training import gpu_chunk

    log = tmp_path / "campaign.jsonl"
    log.write_text('{"datasets_total": 5}\n{"datasets_tot')
    with pytest.warns(UserWarning, match="torn last line"):
        assert gpu_chunk._last_record(log) == {"datasets_total": 5}
    assert gpu_chunk._whole_lines(log) == '{"datasets_total": 5}\n'
    log.write_text('{"datasets_total": 5}\nnot json\n')
    with pytest.raises(DataError, match="line 2: not a JSON object"):
        gpu_chunk._last_record(log)


@pytest.mark.parametrize("where", ["lock", "start"])
def test_a_full_disk_when_a_run_starts_names_the_run_and_leaves_nothing(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    import errno

    from amorgp.core.errors import TrainingError
    from amorgp.training import trainer
    from amorgp.training.rundir import RunDirectory
    from amorgp.training.train import train

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    if where == "lock":
        real_lock = RunDirectory.lock

        def lock(self: RunDirectory) -> None:
            real_lock(self)
            full()

        monkeypatch.setattr(RunDirectory, "lock", lock)
    else:
        monkeypatch.setattr(trainer, "start_run", full)
    out = tmp_path / "run"
    with pytest.raises(TrainingError) as info:
        train(out, init_from=tiny_checkpoint, max_steps=1)
    assert str(info.value) == (
        f"cannot start the run in {out}: no space left on device; {out} was removed"
    )
    assert not out.exists()
