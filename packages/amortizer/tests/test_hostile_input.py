"""Regression tests of the hostile inputs met through the library (issue 64, items 12-18):
oversized architectures, devices and FIFOs as checkpoint or data files, a column limit,
``ship_model`` names, torn JSONL logs, option ranges.  Each test is fast."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer.frontends import io as amz_io
from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import NetworkConfig
from amorgp.amortizer.testing import edited_checkpoint
from amorgp.core.errors import CheckpointError, DataError, OptionError


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"data_blocks": [100000, 1, 1, 1]}, r"data_blocks counts must be at most 64"),
        ({"data_blocks": [10**7, 1, 1, 1]}, r"data_blocks counts must be at most 64"),
        ({"kernel_blocks": [10**6, 1, 1]}, r"kernel_blocks counts must be at most 64"),
        ({"d_data": 10**12, "d_kernel": 10**12}, r"d_data must be at most 8192"),
        ({"ff_mult": 10**6}, r"ff_mult must be at most 16"),
        ({"head_hidden": 2**40}, r"head_hidden must be at most 8192"),
        ({"data_blocks": [1.5, 1, 1, 1]}, r"non-negative integer counts"),
        ({"n_heads": True}, r"n_heads must be a positive integer"),
    ],
)
def test_an_architecture_beyond_the_bounds_is_refused_before_building(
    tmp_path: Path, tiny_checkpoint: Path, edit: dict[str, object], message: str
) -> None:
    ckpt = edited_checkpoint(
        tiny_checkpoint, tmp_path / "ck", {f"network.{k}": v for k, v in edit.items()}
    )
    for verify in (True, False):
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(ckpt, verify=verify)


def test_the_bounds_admit_the_presets() -> None:
    from amorgp.amortizer.networks.config import PRESETS

    for p in PRESETS.values():
        assert NetworkConfig.from_dict(p.network.to_dict()) == p.network


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "folder"])
def test_tensor_files_must_be_regular_files(
    tmp_path: Path, tiny_checkpoint: Path, kind: str
) -> None:
    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ckpt)
    weights = ckpt / "model.safetensors"
    weights.unlink()
    if kind == "dev_zero":
        weights.symlink_to("/dev/zero")
    elif kind == "fifo":
        _fifo(weights)
    else:
        weights.mkdir()
    what = {"dev_zero": "a device or socket", "fifo": "a named pipe", "folder": "a folder"}[kind]
    for verify in (True, False):
        with pytest.raises(CheckpointError, match=f"model.safetensors is {what}, not a regular"):
            load_checkpoint(ckpt, verify=verify)


def test_checkpoint_json_must_be_a_bounded_regular_file(
    tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amorgp.amortizer.networks import checkpoint

    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ckpt)
    monkeypatch.setattr(checkpoint, "MAX_META_BYTES", 100)
    with pytest.raises(CheckpointError, match="more than the 100 a checkpoint's metadata"):
        load_checkpoint(ckpt)
    (ckpt / "checkpoint.json").unlink()
    (ckpt / "checkpoint.json").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match=r"checkpoint\.json is a device or socket"):
        load_checkpoint(ckpt)


def _csv(path: Path, n: int = 6) -> Path:
    path.write_text("x,y\n" + "".join(f"{i},{(i * 7) % 5}\n" for i in range(n)))
    return path


def test_a_data_file_is_read_with_a_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataError, match=r"cannot read /dev/zero: it is a device or socket"):
        amz_io.read_csv("/dev/zero")
    link = tmp_path / "zero.csv"
    link.symlink_to("/dev/zero")
    with pytest.raises(DataError, match="it is a device or socket, not a file"):
        amz_io.read_csv(link)
    data = _csv(tmp_path / "d.csv")
    monkeypatch.setattr(amz_io, "MAX_CSV_BYTES", 20)
    with pytest.raises(DataError, match=r"d.csv is larger than 0 MiB"):
        amz_io.read_csv(data)
    monkeypatch.undo()
    assert amz_io.read_csv(data).X.shape == (6, 1)


def test_a_data_file_through_a_pipe_is_still_read(tmp_path: Path) -> None:
    import threading

    fifo = _fifo(tmp_path / "pipe.csv")
    text = _csv(tmp_path / "d.csv").read_text()

    def write() -> None:
        with open(fifo, "w") as fh:
            fh.write(text)

    writer = threading.Thread(target=write)
    writer.start()
    table = amz_io.read_csv(fifo)
    writer.join()
    np.testing.assert_array_equal(table.y, amz_io.read_csv(tmp_path / "d.csv").y)


def test_too_many_columns_is_one_short_message(tmp_path: Path) -> None:
    wide = tmp_path / "wide.csv"
    cols = 20_000
    header = ",".join(f"c{j}" for j in range(cols))
    wide.write_text(header + "\n" + "\n".join(",".join(["1"] * cols) for _ in range(4)) + "\n")
    with pytest.raises(DataError) as info:
        amz_io.read_csv(wide)
    assert str(info.value) == f"{wide}, line 1: {cols} columns; at most 1024 are supported"


def test_column_lists_in_messages_are_short(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    names = [f"column_with_a_long_name_{j}" * 3 for j in range(900)]
    data.write_text(",".join(names) + "\n" + ",".join(["1"] * 900) + "\n")
    with pytest.raises(DataError) as info:
        amz_io.read_csv(data, feature_names=("a", "b"), training=False, require_target=False)
    message = str(info.value)
    assert len(message) < 600
    assert "(900 in all)" in message


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "/abs", "a/b", ".hidden", "x\0"])
def test_ship_model_checks_the_name_first(tmp_path: Path, tiny_checkpoint: Path, name: str) -> None:
    from amorgp.amortizer.networks.bundled import ship_model

    root = tmp_path / "pretrained"
    root.mkdir()
    (root / "keep").mkdir()
    with pytest.raises(OptionError, match="is not a plain folder name"):
        ship_model(tiny_checkpoint, name, provenance="p", reproduce="r", hardware="h", root=root)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["keep", "pretrained"]


def test_a_torn_last_line_is_cut_off_before_the_next_record(tmp_path: Path) -> None:
    from amorgp.amortizer.jsonlog import append_record, last_record, read_records

    log = tmp_path / "campaign.jsonl"
    append_record(log, {"segment": 1})
    with log.open("a") as fh:
        fh.write('{"segment": 2, "datas')  # a writer killed mid-line
    with pytest.warns(UserWarning, match=r"ignoring a torn last line \(21 bytes\)"):
        assert last_record(log) == {"segment": 1}
    with pytest.warns(UserWarning, match=r"dropped a torn last line \(21 bytes\)"):
        append_record(log, {"segment": 3})
    assert log.read_text() == '{"segment": 1}\n{"segment": 3}\n'
    assert last_record(log) == {"segment": 3}
    assert read_records(log) == [{"segment": 1}, {"segment": 3}]


def test_a_torn_line_longer_than_the_tail_read_is_cut_whole(tmp_path: Path) -> None:
    from amorgp.amortizer.jsonlog import append_record, read_records

    log = tmp_path / "log.jsonl"
    log.write_text('{"a": 1}\n' + "x" * 100_000)
    with pytest.warns(UserWarning, match=r"\(100000 bytes\)"):
        append_record(log, {"a": 2})
    assert read_records(log) == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("line", ["{not json", "[1, 2]", "3", "\udcff"])
def test_a_corrupted_log_line_names_the_file_and_line(tmp_path: Path, line: str) -> None:
    from amorgp.amortizer.jsonlog import last_record, read_records

    log = tmp_path / "campaign.jsonl"
    log.write_bytes(b'{"a": 1}\n\n' + line.encode("utf-8", "surrogateescape") + b'\n{"a": 2}\n')
    with pytest.raises(DataError, match=rf"{log}, line 3: not a JSON object"):
        last_record(log)
    with pytest.warns(UserWarning, match=r"skipped 1 corrupted line\(s\) \(line 3 first\)"):
        assert read_records(log, strict=False) == [{"a": 1}, {"a": 2}]


def test_an_atomic_rewrite_leaves_the_old_file_on_failure(tmp_path: Path) -> None:
    from amorgp.amortizer.jsonlog import write_text_atomic

    target = tmp_path / "log.jsonl"
    target.write_text("old\n")

    with pytest.raises(TypeError):
        write_text_atomic(target, 3)  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.jsonl"]
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def _data() -> tuple[np.ndarray, np.ndarray]:
    X = np.linspace(0.0, 1.0, 24)[:, None]
    return X, np.sin(6.0 * X[:, 0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gp_options": {"cg_tol": -1}}, r"cg_tol must be a number in \(0, 1\), got -1"),
        ({"gp_options": {"cg_tol": float("nan")}}, r"cg_tol must be a number in \(0, 1\)"),
        ({"gp_options": {"max_cg_iter": 0}}, r"max_cg_iter must be an integer >= 1, got 0"),
        ({"gp_options": {"n_probes": 0}}, r"n_probes must be an integer >= 1, got 0"),
        ({"gp_options": {"precond_rank": -1}}, r"precond_rank must be an integer >= 0, got -1"),
        ({"gp_options": {"n_probes": 2.5}}, r"n_probes must be an integer >= 1, got 2.5"),
        ({"gp_options": {"n_probes": 10**12}}, r"n_probes must be at most 10000, got 10{12}$"),
        ({"gp_options": {"max_cg_iter": 10**9}}, r"max_cg_iter must be at most 100000, got"),
        ({"gp_options": {"tol": 1e-3}}, r"unknown gp_options \['tol'\]"),
        ({"encoder_points": 2.5}, r"encoder_points must be an integer >= 1, got 2.5"),
        ({"encoder_points": 0}, r"encoder_points must be an integer >= 1, got 0"),
        (
            {"seed": 2**70},
            r"seed must lie in \[0, 9223372036854775807\], got 1180591620717411303424",
        ),
        ({"seed": -1}, r"seed must lie in \[0, "),
        ({"seed": 1.5}, r"seed must be an integer, got 1.5"),
        ({"memory_budget": float("nan")}, r"memory_budget must be a positive number of bytes"),
        ({"memory_budget": 0}, r"memory_budget must be a positive number of bytes"),
        ({"device": "meta"}, r"device 'meta': use cpu, cuda or mps"),
        ({"device": "nonsense"}, r"device 'nonsense' is not a torch device"),
    ],
)
def test_amortizer_options_are_checked_before_any_work(
    tiny_checkpoint: Path, options: dict[str, object], message: str
) -> None:
    from amorgp.amortizer.api import Amortizer

    with pytest.raises(OptionError, match=message):
        Amortizer.from_pretrained(tiny_checkpoint, **options)  # type: ignore[arg-type]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_this_machine_lacks_is_one_clean_error(tiny_checkpoint: Path) -> None:
    from amorgp.amortizer.api import Amortizer
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    with pytest.raises(OptionError, match=r"^device 'cuda': no CUDA device is available; use cpu$"):
        Amortizer.from_pretrained(tiny_checkpoint, device="cuda")
    X, y = _data()
    est = AmortizedGPRegressor(checkpoint=str(tiny_checkpoint), device="cuda")
    with pytest.raises(OptionError, match="no CUDA device is available"):
        est.fit(X, y)
    if not __import__("torch").backends.mps.is_available():
        with pytest.raises(OptionError, match=r"device 'mps': no MPS device is available"):
            Amortizer.from_pretrained(tiny_checkpoint, device="mps")


def test_valid_options_and_an_unlimited_memory_budget_work(tiny_checkpoint: Path) -> None:
    from amorgp.amortizer.api import Amortizer

    X, y = _data()
    ref = Amortizer.from_pretrained(tiny_checkpoint).infer(X, y, "SE")
    amz = Amortizer.from_pretrained(
        tiny_checkpoint,
        memory_budget=float("inf"),
        encoder_points=np.int64(100),
        seed=np.int64(0),
        gp_options={"cg_tol": 1e-6, "max_cg_iter": 50, "n_probes": 4, "precond_rank": 0},
    )
    got = amz.infer(X, y, "SE")
    assert np.isfinite(got.log_marginal_likelihood)
    assert got.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood, rel=1e-9)


def test_points_per_step_are_bounded_across_options() -> None:
    from amorgp.amortizer.networks.config import MAX_POINTS_PER_STEP, PRESETS, TrainConfig

    with pytest.raises(ValueError, match=r"batch_size x n_max = 4096 x 20000 = 81920000 points"):
        TrainConfig(batch_size=4096, n_min=20000, n_max=20000)
    TrainConfig(batch_size=MAX_POINTS_PER_STEP // 20000, n_max=20000)  # at the bound
    for p in PRESETS.values():
        assert p.train.batch_size * p.train.n_max <= MAX_POINTS_PER_STEP


def test_complex_and_nan_values_after_the_fit_are_refused(tiny_checkpoint: Path) -> None:
    import warnings

    import torch

    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    X, y = _data()
    est = AmortizedGPRegressor(checkpoint=str(tiny_checkpoint)).fit(X, y)
    result = est.result_
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # never a numpy ComplexWarning
        with pytest.raises(DataError, match="y_new holds complex values"):
            result.log_predictive_density(X[:3], y[:3] * (1 + 1j))
        with pytest.raises(
            DataError, match=r"y_new contains NaN or infinite values \(nan at position 2\)"
        ):
            result.log_predictive_density(X[:3], [0.0, np.nan, 1.0])
        with pytest.raises(DataError, match="theta holds complex values"):
            est.log_marginal_likelihood(est.kernel_.theta * (1 + 0j) + 1j)
        with pytest.raises(DataError, match="X holds complex values"):
            est.kernel_(X * (1 + 1j))
        with pytest.raises(DataError, match="Y holds complex values"):
            est.kernel_(X, torch.tensor(X) * (1 + 1j))
    lp = result.log_predictive_density(X[:3], y[:3])
    assert torch.isfinite(lp).all()
    assert est.log_marginal_likelihood(est.kernel_.theta) == pytest.approx(
        est.log_marginal_likelihood(list(est.kernel_.theta))
    )


def test_library_warnings_name_the_callers_line(tiny_checkpoint: Path) -> None:
    import warnings

    from amorgp.amortizer.api import Amortizer
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    X, y = _data()
    X2 = np.column_stack([X[:, 0], np.ones(len(y))])  # a constant column warns
    amz = Amortizer.from_pretrained(tiny_checkpoint)
    est = AmortizedGPRegressor(checkpoint=str(tiny_checkpoint), kernel="SE")
    calls = {
        "infer": lambda: amz.infer(X2, y, "SE"),
        "infer_many": lambda: amz.infer_many(X2, y, ["SE"]),
        "fit": lambda: est.fit(X2, y),
        "addends": lambda: amz.infer(X, y, " + ".join(["SE"] * 12)),  # beyond the training
    }
    for name, call in calls.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        ours = [w for w in caught if issubclass(w.category, UserWarning)]
        assert ours, name
        for w in ours:
            assert w.filename == __file__, (name, w.filename, str(w.message))


def test_the_python_api_logs_each_stage_under_amorgp(
    tiny_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from amorgp.amortizer.api import Amortizer
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    X, y = _data()
    with caplog.at_level(logging.DEBUG, logger="amorgp"):
        amz = Amortizer.from_pretrained(tiny_checkpoint)
        res = amz.infer(X, y, "SE + PER")
        res.predict(X[:4])
        AmortizedGPRegressor(checkpoint=str(tiny_checkpoint), kernel="SE", seed=1).fit(X, y)
    ours = [r for r in caplog.records if r.name.startswith("amorgp")]
    by_stage = {(r.name, r.levelname): r.getMessage() for r in ours}
    assert by_stage[("amorgp.amortizer.networks.checkpoint", "INFO")].startswith(
        f"loaded checkpoint {tiny_checkpoint} (structured network, "
    )
    network = by_stage[("amorgp.amortizer.networks.prediction", "DEBUG")]
    assert network.startswith(f"network: 1 kernel(s), the encoder read {len(y)} of {len(y)} points")
    assert any(r.getMessage().startswith("posterior of (SE + PER)@0 on n = 24: ") for r in ours)
    assert any(r.getMessage() == "prediction of SE + PER at 4 point(s)" for r in ours)
    summary = by_stage[("amorgp.amortizer.frontends.inference", "INFO")]
    assert summary.startswith("1 kernel(s) on n = 24 points: ")
    fit = by_stage[("amorgp.amortizer.frontends.estimator", "INFO")]
    assert fit.startswith("fitted SE on n = 24, d = 1: log marginal likelihood ")
    assert all(r.levelno <= logging.INFO for r in ours)  # a plain call never logs louder
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="amorgp"):
        amz.infer(X, y, "SE")
    assert [r.levelname for r in caplog.records if r.name.startswith("amorgp")] == ["INFO"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"seed": 1.5}, r"seed must be an integer, got 1.5"),
        ({"seed": 2**70}, r"seed must lie in \[0, "),
        ({"encoder_points": 2.5}, r"encoder_points must be an integer >= 1, got 2.5"),
        ({"device": "meta"}, r"device 'meta': use cpu, cuda or mps"),
    ],
)
def test_the_estimator_checks_its_options_at_fit(
    tiny_checkpoint: Path, params: dict[str, object], message: str
) -> None:
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    X, y = _data()
    est = AmortizedGPRegressor(checkpoint=str(tiny_checkpoint), **params)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=message):
        est.fit(X, y)
