"""Hostile inputs through the command line (issue 64, items 7, 9, 12-18): devices and wide
tables as data, cross-field training bounds, bundled names for ``model-info``, output to
standard error or through a dangling link, ``--split-mode``, JSON errors, a corrupted
campaign log.  The library's side is in ``packages/amortizer/tests/test_hostile_input.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner, Result

from amorgp.cli import main


def _run(args: list[str], ckpt: Path | None = None) -> Result:
    full = [*args, "--checkpoint", str(ckpt)] if ckpt is not None else args
    return CliRunner().invoke(main, full)


def test_train_set_points_per_step_is_checked_before_anything_is_created(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(
        ["train", "--preset", "tiny", "--out", str(out), "--max-steps", "1",
         "--set", "batch_size=4096", "--set", "n_max=20000", "--set", "n_min=20000"]
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "batch_size x n_max = 4096 x 20000 = 81920000 points per step" in res.output
    assert "Traceback" not in res.output
    assert not out.exists()  # no .lock


def test_a_device_as_data_is_one_clean_error(tiny_checkpoint: Path) -> None:
    res = _run(["infer", "/dev/zero", "-k", "SE"], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert (
        res.stderr.strip() == "Error: cannot read /dev/zero: it is a device or socket, not a file"
    )


def test_a_wide_test_file_gives_a_short_message(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    test = tmp_path / "wide.csv"
    names = ["time", *(f"extra_column_{j}" for j in range(1000))]
    test.write_text(",".join(names) + "\n" + ",".join(["0.5"] * len(names)) + "\n")
    res = _run(["predict", str(data_1d), "-k", "SE", "--test", str(test)], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert "unexpected column(s) ['extra_column_0'" in res.stderr
    assert "(1000 in all)" in res.stderr
    assert len(res.stderr) < 500
    wider = tmp_path / "wider.csv"
    wider.write_text(",".join(f"c{j}" for j in range(5000)) + "\n" + ",".join(["1"] * 5000) + "\n")
    res = _run(["predict", str(data_1d), "-k", "SE", "--test", str(wider)], tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert res.stderr.strip() == f"Error: {wider}, line 1: 5000 columns; at most 1024 are supported"


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="needs a machine without MPS")
def test_device_mps_without_mps_is_a_usage_error(data_1d: Path, tiny_checkpoint: Path) -> None:
    res = _run(["infer", str(data_1d), "-k", "SE", "--device", "mps"], tiny_checkpoint)
    assert res.exit_code == 2, res.output
    assert "Invalid value for --device: mps: no MPS device is available" in res.output
    assert "Traceback" not in res.output


def test_model_info_takes_a_bundled_name() -> None:
    res = _run(["model-info", "default", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["checkpoint"]["path"] == "default"
    assert doc["checkpoint"]["parameters"]["total"] > 0
    res = _run(["model-info", "no-such-model"])
    assert res.exit_code == 1, res.output
    assert "no checkpoint at no-such-model; give a checkpoint directory or the name of a" in (
        res.stderr
    )


def test_output_to_standard_error_writes_the_stream(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    res = _run(
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--output", "/dev/stderr"],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("time,") or ln[:1].isdigit()]
    assert lines[0] == "time,mean,std"
    assert len(lines) == 1 + 6  # 20 % of 30 rows
    assert "time,mean,std" not in res.stdout


def test_a_dangling_link_as_output_names_the_link(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    link = tmp_path / "pred.csv"
    link.symlink_to(tmp_path / "gone" / "pred.csv")
    res = _run(
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--output", str(link)],
        tiny_checkpoint,
    )
    assert res.exit_code == 2, res.output
    assert (
        f"Invalid value for --output: {link} is a symbolic link to {tmp_path / 'gone' / 'pred.csv'}"
        f", and the folder {tmp_path / 'gone'} does not exist"
    ) in res.output
    fine = tmp_path / "fine.csv"
    fine.symlink_to(tmp_path / "target.csv")  # dangling, but its folder exists
    res = _run(
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--output", str(fine)],
        tiny_checkpoint,
    )
    assert res.exit_code == 0, res.output
    assert fine.is_symlink()
    assert (tmp_path / "target.csv").read_text().startswith("time,mean,std\n")


@pytest.mark.parametrize("command", ["predict", "ensemble"])
def test_split_help_says_which_rows_and_offers_both(command: str) -> None:
    res = _run([command, "--help"])
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "--split-mode [random|last]" in text
    assert "the last rows of the file" in text
    assert "random rows" in text


def test_split_mode_last_holds_out_the_end_of_the_series(
    data_1d: Path, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    table = np.loadtxt(data_1d, delimiter=",", skiprows=1)
    outputs = {}
    for mode in ("last", "random"):
        out = tmp_path / f"{mode}.csv"
        res = _run(
            ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--split-mode", mode,
             "--output", str(out)],
            tiny_checkpoint,
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        outputs[mode] = np.loadtxt(out, delimiter=",", skiprows=1)[:, 0]
    np.testing.assert_array_equal(outputs["last"], table[-6:, 0])  # 20 % of 30 rows
    assert not np.array_equal(outputs["random"], table[-6:, 0])
    res = _run(
        ["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--split-mode", "last", "--json"],
        tiny_checkpoint,
    )
    assert json.loads(res.stdout)["split"] == {"fraction": 0.2, "mode": "last"}
    res = _run(["predict", str(data_1d), "-k", "SE", "--split", "0.2", "--split-mode", "first"])
    assert res.exit_code == 2
    assert "'first' is not one of 'random', 'last'" in res.output


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["infer", "missing.csv", "-k", "SE"], 1, "cannot read missing.csv"),
        (["infer", "DATA", "-k", "SE + "], 2, "Invalid value for --kernel"),
        (["infer", "DATA", "-k", "SE", "--refine", "abc"], 2, "'abc' is neither"),
        (["predict", "DATA", "-k", "SE"], 2, "give exactly one of --test"),
    ],
)
def test_with_json_an_error_is_one_json_object(
    data_1d: Path, tiny_checkpoint: Path, args: list[str], code: int, words: str
) -> None:
    args = [str(data_1d) if a == "DATA" else a for a in args]
    res = _run([*args, "--json"], tiny_checkpoint)
    assert res.exit_code == code, res.output
    doc = json.loads(res.stdout)  # the whole of stdout is one JSON document
    assert doc["schema_version"] == 1
    assert doc["command"] == args[0]
    assert doc["error"]["exit_code"] == code
    assert doc["error"]["usage"] is (code == 2)
    assert words in doc["error"]["message"]
    assert "Error:" in res.stderr  # the one-line message stays on stderr
    plain = _run(args, tiny_checkpoint)
    assert plain.stdout == ""  # without --json, nothing on stdout


def test_a_corrupted_campaign_log_is_an_error_naming_the_file(tmp_path: Path) -> None:
    export = tmp_path / "export"
    export.mkdir()
    log = export / "campaign.jsonl"
    log.write_text('{"stage": 0}\nnot json at all\n{"stage": 0}\n')
    res = _run(
        ["campaign", "--state", str(tmp_path / "state"), "--export", str(export),
         "--max-minutes", "0.01"]
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    assert res.stderr.strip() == (
        f"Error: {log}, line 2: not a JSON object (a corrupted log line); repair or remove "
        "that line"
    )


def test_a_seed_beyond_64_bits_is_a_usage_error(data_1d: Path, tiny_checkpoint: Path) -> None:
    res = _run(["infer", str(data_1d), "-k", "SE", "--seed", str(2**70)], tiny_checkpoint)
    assert res.exit_code == 2, res.output
    assert "seed must lie in [0, 9223372036854775807], got 1180591620717411303424" in res.stderr
    assert "Traceback" not in res.output
