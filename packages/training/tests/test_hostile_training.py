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
    from amorgp.training import launch
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
        monkeypatch.setattr(launch, "start_run", full)
    out = tmp_path / "run"
    with pytest.raises(TrainingError) as info:
        train(out, init_from=tiny_checkpoint, max_steps=1)
    assert str(info.value) == (
        f"cannot start the run in {out}: no space left on device; {out} was removed"
    )
    assert not out.exists()


def test_the_quadratic_memory_of_a_step_is_bounded() -> None:
    """``batch_size * n_max`` passed the linear bound while the step's float64 kernel
    matrices (``n_max^2 x 8`` bytes each) took gigabytes."""
    from amorgp.amortizer.networks.config import TrainConfig
    from amorgp.core.errors import OptionError
    from amorgp.training.runstate import MAX_KERNEL_BYTES, check_step_memory

    assert MAX_KERNEL_BYTES == 4 * 2**30
    check_step_memory(TrainConfig(batch_size=128, n_max=250))  # the paper's: 64 MB
    check_step_memory(TrainConfig(batch_size=1, n_max=23_170, val_size=1))  # 4.2948e9 B
    with pytest.raises(OptionError) as info:
        check_step_memory(TrainConfig(batch_size=1, n_max=23_171, val_size=1))
    assert "1 x 23171^2 x 8 = 4.3 GB, more than the 4.29 GB (4 GiB)" in str(info.value)
    with pytest.raises(OptionError) as info:  # 2 x 20000^2 x 8 bytes = 6.4 GB
        check_step_memory(TrainConfig(batch_size=2, n_min=20_000, n_max=20_000, val_size=1))
    assert str(info.value) == (
        "batch_size=2, val_size=1, n_max=20000: a step holds 2 float64 kernel matrices of "
        "n_max^2 x 8 bytes, 2 x 20000^2 x 8 = 6.4 GB, more than the 4.29 GB (4 GiB) a step "
        "may use; lower n_max (at most 16384 with these batch sizes) or batch_size and "
        "val_size"
    )
    with pytest.raises(OptionError, match=r"a step holds 64 float64 kernel matrices"):
        check_step_memory(TrainConfig(batch_size=1, n_max=3000, val_size=500))


def test_a_run_past_the_memory_bound_is_refused_and_leaves_no_folder(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    from amorgp.core.errors import OptionError
    from amorgp.training.train import train

    out = tmp_path / "run"
    with pytest.raises(OptionError, match=r"n_max=20000: .* GB, more than the 4.29 GB"):
        train(
            out,
            init_from=tiny_checkpoint,
            train_overrides={"n_min": 20_000, "n_max": 20_000},
            max_steps=1,
        )
    assert not out.exists()  # no .lock


def _no_space(*args: object, **kwargs: object) -> None:
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_writing_the_lock_leaves_no_lock(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder's line failed to flush, then failed again when the cleanup closed the
    lock: ``run/.lock`` stayed and the ``OSError`` was a traceback."""
    import os

    from amorgp.core.errors import TrainingError
    from amorgp.training import rundir
    from amorgp.training.train import train

    real_write = os.write

    def write(fd: int, data: bytes) -> int:
        if data.startswith(b"pid "):
            _no_space()
        return real_write(fd, data)

    monkeypatch.setattr(rundir.os, "write", write)
    out = tmp_path / "run"
    with pytest.raises(TrainingError) as info:
        train(out, init_from=tiny_checkpoint, max_steps=1)
    assert str(info.value) == (
        f"cannot start the run in {out}: no space left on device; {out} was removed"
    )
    assert not out.exists()


class _FailingClose:
    """A file whose close fails like a full disk's flush (the file is closed anyway)."""

    def __init__(self, handle: object) -> None:
        self.handle = handle

    def close(self) -> None:
        self.handle.close()  # type: ignore[attr-defined]
        _no_space()


def test_a_failing_close_still_releases_the_lock_and_removes_a_new_run(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amorgp.core.errors import TrainingError
    from amorgp.training import launch
    from amorgp.training.rundir import RunDirectory
    from amorgp.training.train import train

    real_lock = RunDirectory.lock

    def lock(self: RunDirectory) -> None:
        real_lock(self)
        self._lock = _FailingClose(self._lock)  # type: ignore[assignment]

    monkeypatch.setattr(RunDirectory, "lock", lock)
    monkeypatch.setattr(launch, "start_run", _no_space)
    out = tmp_path / "run"
    with pytest.raises(TrainingError, match=r"no space left on device; .* was removed$"):
        train(out, init_from=tiny_checkpoint, max_steps=1)
    assert not out.exists()


def test_closing_a_run_releases_the_lock_when_the_metrics_log_fails(tmp_path: Path) -> None:
    from amorgp.training.rundir import RunDirectory

    run = RunDirectory(tmp_path / "run")
    run.lock()
    run.log({"step": 1})
    run._metrics = _FailingClose(run._metrics)  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space left"):
        run.close()
    assert not run.locked
    other = RunDirectory(tmp_path / "run")
    other.lock()  # the flock is free again
    assert (tmp_path / "run" / ".lock").read_text().startswith(f"pid {__import__('os').getpid()}")
    other.close()


_COUNTERS = {"stage_datasets": 5, "datasets_total": 5, "seed": 1}
_STATE = {"stage_offset": 0, "total_offset": 0, "seed": 1, "best_nll": None, "minutes_offset": 0.0}


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (_COUNTERS, "has no 'stage'"),
        ({**_COUNTERS, "stage": -5}, "has stage=-5, not an integer >= 0"),
        ({**_COUNTERS, "stage": "1"}, 'has stage="1", not an integer >= 0'),
        ({**_COUNTERS, "stage": True}, "has stage=true, not an integer >= 0"),
        ({**_COUNTERS, "stage": 0, "datasets_total": None}, "has datasets_total=null"),
        ({**_COUNTERS, "stage": 0, "minutes_total": "x"}, "not a finite number >= 0"),
    ],
)
def test_a_campaign_log_record_of_the_wrong_shape_is_one_data_error(
    tmp_path: Path, record: dict[str, object], problem: str
) -> None:
    """A valid JSON record without ``stage`` (or a negative one) gave a KeyError or an
    IndexError traceback."""
    import json

    from amorgp.training.campaign import _initial_status
    from amorgp.training.campaign_plan import CAMPAIGN_STAGES

    log = tmp_path / "campaign.jsonl"
    log.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError) as info:
        _initial_status(log, CAMPAIGN_STAGES)
    message = str(info.value)
    assert message.startswith(f"{log}, last record: the record {{")
    assert problem in message
    assert message.endswith("; repair or remove that line")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        ({"stage": 0}, "has no 'stage_offset'"),
        ({**_STATE, "stage": -5}, "has stage=-5"),
        ({**_STATE, "stage": 0, "best_nll": "low"}, 'has best_nll="low", not a finite number'),
    ],
)
def test_a_campaign_state_of_the_wrong_shape_is_one_data_error(
    tmp_path: Path, state: dict[str, object], problem: str
) -> None:
    import json

    from amorgp.training.campaign import _read_status

    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(state))
    with pytest.raises(DataError) as info:
        _read_status(path)
    assert str(info.value).startswith(f"{path}: the record {{")
    assert problem in str(info.value)
    assert str(info.value).endswith("remove it to rebuild the campaign state from the log")
    full = {**_STATE, "stage": 1, "stage_offset": 3, "best_nll": 0.5, "minutes_offset": 1.5}
    path.write_text(json.dumps(full))
    assert _read_status(path) == full


def test_logs_and_states_that_are_not_regular_files_are_refused_unread(tmp_path: Path) -> None:
    """A log symlinked to ``/dev/zero`` was read without end; a named pipe blocks."""
    import os

    from amorgp.training import gpu_chunk
    from amorgp.training.campaign_plan import append_record, last_record, read_json

    zero = tmp_path / "campaign.jsonl"
    zero.symlink_to("/dev/zero")
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    for path in (zero, pipe):
        kind = "a device or socket" if path == zero else "a named pipe"
        refused = rf"{path} is {kind}, not a regular file; refusing to read it"
        with pytest.raises(DataError, match=refused):
            last_record(path)
        with pytest.raises(DataError, match=refused):
            read_json(path, {})
        with pytest.raises(DataError, match=refused):
            gpu_chunk._whole_lines(path)
        with pytest.raises(DataError, match=refused):
            append_record(path, {"stage": 0})


def test_a_log_larger_than_the_bound_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amorgp.amortizer import jsonlog
    from amorgp.training.campaign_plan import last_record

    assert jsonlog.MAX_LOG_BYTES == 256 * 2**20
    monkeypatch.setattr(jsonlog, "MAX_LOG_BYTES", 100)
    log = tmp_path / "campaign.jsonl"
    log.write_text('{"stage": 0}\n' * 10)  # 130 bytes
    with pytest.raises(DataError, match=rf"{log} holds more than 100 bytes"):
        last_record(log)
    log.write_text('{"stage": 0}\n' * 7)  # 91 bytes
    assert last_record(log) == {"stage": 0}


def test_a_torn_tail_cut_inside_a_utf8_character_is_ignored(tmp_path: Path) -> None:
    """``gpu_chunk`` decoded the whole log, torn tail included: UnicodeDecodeError."""
    from amorgp.training import gpu_chunk

    log = tmp_path / "campaign.jsonl"
    log.write_bytes('{"datasets_total": 5, "device": "é"}\n{"device": "'.encode() + b"\xc3")
    with pytest.warns(UserWarning, match="torn last line"):
        assert gpu_chunk._last_record(log) == {"datasets_total": 5, "device": "é"}
    assert gpu_chunk._whole_lines(log) == '{"datasets_total": 5, "device": "é"}\n'
    log.write_bytes(b'{"datasets_total": 5}\n{"a": "\xff"}\n')
    with pytest.raises(DataError, match=rf"{log}, line 2: not UTF-8 text"):
        gpu_chunk._whole_lines(log)


@pytest.mark.parametrize("total", [-1, "5", None, 2.5, True])
def test_a_gpu_chunk_log_record_with_a_bad_total_names_the_file(
    tmp_path: Path, total: object
) -> None:
    import json

    from amorgp.training import gpu_chunk

    log = tmp_path / "campaign.jsonl"
    log.write_text(json.dumps({"datasets_total": total}) + "\n")
    with pytest.raises(DataError, match=rf"^{log}: the last record has datasets_total="):
        gpu_chunk._last_record(log)
