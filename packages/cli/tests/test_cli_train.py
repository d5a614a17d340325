"""Tests of ``amorgp train`` and ``amorgp model-info``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import build_model, count_parameters
from amorgp.cli import main
from amorgp.cli.train import parse_overrides
from amorgp.training.rundir import LOCK

TINY_SETS = [
    "--set", "batch_size=4", "--set", "n_max=12", "--set", "max_dims=2",
    "--set", "val_size=4", "--set", "val_every=2", "--set", "num_workers=0",
]  # fmt: skip


def test_model_info_counts_match_the_model() -> None:
    result = CliRunner().invoke(main, ["model-info", "--preset", "small"])
    assert result.exit_code == 0, result.output
    n = count_parameters(build_model(PRESETS["small"].network))
    assert f"{n:,d} parameters" in result.output


def test_train_resume_phase2_and_model_info(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--no-progress",
        *TINY_SETS,
    ]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["step"] == 2
    result = runner.invoke(
        main, ["train", "--out", str(out), "--resume", "--max-steps", "3", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["step"] == 3
    result = runner.invoke(
        main,
        [
            "train",
            "--phase",
            "2",
            "--from",
            str(out / "last"),
            "--out",
            str(tmp_path / "p2"),
            "--max-steps",
            "1",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["model-info", str(tmp_path / "p2" / "last")])
    assert result.exit_code == 0, result.output
    assert '"phase": 2' in result.output


def test_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["train", "--phase", "2", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "--from" in result.output
    result = runner.invoke(
        main, ["train", "--out", str(tmp_path / "x"), "--set", "bogus=1", "--max-steps", "1"]
    )
    assert result.exit_code == 2
    assert "unknown training option" in result.output
    result = runner.invoke(
        main, ["train", "--out", str(tmp_path / "x"), "--resume", "--max-steps", "1"]
    )
    assert result.exit_code == 2  # the library's OptionError: --resume without a run
    assert "nothing to resume" in result.output
    (tmp_path / "bad").mkdir()
    result = runner.invoke(main, ["model-info", str(tmp_path / "bad")])
    assert result.exit_code == 1
    assert "not an amorgp checkpoint" in result.output


@pytest.mark.parametrize(
    "budget",
    [
        ["--max-steps", "0"],
        ["--max-steps", "-5"],
        ["--max-minutes", "-1"],
        ["--max-minutes", "0"],
        ["--max-datasets", "0"],
    ],
)
def test_budgets_that_allow_no_step_are_refused(tmp_path: Path, budget: list[str]) -> None:
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["train", "--preset", "tiny", "--out", str(out), *budget])
    assert res.exit_code == 2, res.output
    assert budget[0] in res.output
    assert not out.exists()  # nothing ran, no checkpoint


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("lr=abc", "lr expects a number, got 'abc'"),
        ("lr=nan", "lr must be finite"),
        ("lr=inf", "lr must be finite"),
        ("batch_size=1.5", "batch_size expects an integer"),
        ("phase=2", "the phase is chosen by --phase"),
        ("lr=-1", "lr must be positive"),
        ("n_min=50", "n_min=50 exceeds n_max"),
        ("novalue", "expects KEY=VALUE"),
        ("bogus=1", "unknown training option 'bogus'"),
    ],
)
def test_set_values_are_parsed_by_field_type(
    refused_set: Callable[[str, str], None], item: str, message: str
) -> None:
    refused_set(item, message)


def test_parse_overrides_types() -> None:
    got = parse_overrides(("lr=1e-4", "batch_size=64", "grad-clip=0"))
    assert got == {"lr": 1e-4, "batch_size": 64, "grad_clip": 0.0}
    assert type(got["batch_size"]) is int
    assert type(got["grad_clip"]) is float


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--preset", "tiny"], "--preset"),
        (["--set", "lr=1e-3"], "--set"),
        (["--phase", "2"], "--phase"),
        (["--model", "ahgp-se-ard"], "--model"),
    ],
)
def test_resume_refuses_options_it_would_ignore(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    out = tmp_path / "run"
    (out / "last").mkdir(parents=True)
    res = CliRunner().invoke(
        main, ["train", "--out", str(out), "--resume", "--max-steps", "5", *extra]
    )
    assert res.exit_code == 2, res.output
    assert f"{named} conflict(s) with --resume" in res.output


def test_resume_help_says_what_it_refuses() -> None:
    res = CliRunner().invoke(main, ["train", "--help"])
    assert "--set and --from are refused" in " ".join(res.output.split())


def test_existing_run_names_the_cli_option(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / "last").mkdir(parents=True)
    res = CliRunner().invoke(
        main, ["train", "--preset", "tiny", "--out", str(out), "--max-steps", "1"]
    )
    assert res.exit_code == 2, res.output
    assert "add --resume" in res.output
    assert "resume=True" not in res.output


def test_a_second_run_in_the_same_folder_is_refused(tmp_path: Path) -> None:
    fcntl = pytest.importorskip("fcntl")
    out = tmp_path / "run"
    out.mkdir()
    with open(out / LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a run in progress
        res = CliRunner().invoke(
            main,
            ["train", "--preset", "tiny", "--out", str(out), "--max-steps", "1", *TINY_SETS],
        )
    assert res.exit_code == 1, res.output
    assert "is in use" in res.output
    assert "Traceback" not in res.output
    assert not (out / "last").exists()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--device", "nonsense"], 2, "--device"),
        (["--out", "FILE"], 2, "is a file"),
    ],
)
def test_train_usage_errors(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    (tmp_path / "f").write_text("x")
    args = [a.replace("FILE", str(tmp_path / "f")) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "run")]
    res = CliRunner().invoke(main, ["train", "--preset", "tiny", "--max-steps", "1", *args])
    assert res.exit_code == code, res.output
    assert message in res.output


def test_a_diverging_run_is_an_error_and_keeps_no_nan_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = CliRunner().invoke(
        main,
        ["train", "--preset", "tiny", "--out", str(out), "--max-steps", "60", "--no-progress",
         "--set", "lr=1e6", "--set", "grad_clip=0", *TINY_SETS],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    # caught at a training step or, when the weights blow up between two validations
    # (lr 1e6: which comes first depends on float rounding), at the validation
    assert "diverged" in res.output or "every validation dataset failed" in res.output
    assert "Lower lr" in res.output
    assert "Traceback" not in res.output
    if (out / "last").exists():  # a checkpoint from before the divergence: finite
        ckpt = load_checkpoint(out / "last")
        assert all(torch.isfinite(v).all() for v in ckpt.model.state_dict().values())


def test_resume_past_its_budget_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "--out", str(out), "--no-progress"]
    res = CliRunner().invoke(main, [*args, "--preset", "tiny", "--max-steps", "2", *TINY_SETS])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, [*args, "--resume", "--max-steps", "2"])
    assert res.exit_code == 2, res.output
    assert "already at 2" in res.output


def _steps(run: Path, kind: str) -> list[int]:
    log = run / "metrics.jsonl"
    lines = log.read_text().splitlines() if log.exists() else []
    return [r["step"] for r in map(json.loads, lines) if r["kind"] == kind]


@pytest.mark.slow
def test_kill_9_then_resume_and_a_truncated_last(tmp_path: Path) -> None:
    """A real ``kill -9`` of ``amorgp train``; ``--resume`` continues with every metrics
    step once and no temporary left; a truncated ``last`` falls back to an intact one."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "amorgp.cli"]
    proc = subprocess.Popen(
        [*cmd, "train", "--preset", "tiny", "--out", str(run), "--no-progress", *TINY_SETS],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600  # a guard against a hung child, not a timing
        while not (run / "last").exists() or len(_steps(run, "validation")) < 2:
            assert proc.poll() is None, "the training process stopped by itself"
            assert time.monotonic() < deadline, "no second checkpoint"
            time.sleep(0.2)
    finally:
        proc.kill()  # SIGKILL: no clean-up runs
        proc.wait()
    done = int(load_checkpoint(run / "last").meta["progress"]["step"])
    target = done + 4
    res = subprocess.run(
        [*cmd, "train", "--out", str(run), "--resume", "--max-steps", str(target), "--no-progress"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["step"] == target
    train_steps = _steps(run, "train")
    assert len(train_steps) == len(set(train_steps))  # no step logged twice
    assert not [p.name for p in run.iterdir() if p.name.startswith(".step-")]
    newest = (run / "last").resolve()
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    res = subprocess.run(
        [*cmd, "train", "--out", str(run), "--resume", "--max-steps", str(target + 2), "--no-progress"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert newest.name in res.stderr  # the warning names the broken checkpoint
    assert "Traceback" not in res.stderr
    assert json.loads(res.stdout.splitlines()[-1])["step"] == target + 2


@pytest.mark.parametrize("blocked", ["amorgp.training", "amorgp.simulator"])
def test_without_the_training_package_the_command_names_it(tmp_path: Path, blocked: str) -> None:
    """``amorgp train`` and ``amorgp campaign`` in one Python without ``blocked``."""
    from amorgp.amortizer.testing import python_without

    commands = {
        "train": ["train", "--out", str(tmp_path / "run"), "--max-steps", "1"],
        "campaign": ["campaign", "--state", str(tmp_path / "state.json")],
    }
    code = (
        "import json\n"
        "from click.testing import CliRunner\n"
        "from amorgp.cli import main\n"
        f"for command, args in {commands!r}.items():\n"
        "    r = CliRunner().invoke(main, args)\n"
        "    print(json.dumps([command, r.exit_code, r.output]))\n"
    )
    out = python_without(code, blocked=(blocked,))
    assert out.returncode == 0, out.stderr
    results = [json.loads(line) for line in out.stdout.strip().splitlines()]
    assert [command for command, _, _ in results] == ["train", "campaign"]
    for command, exit_code, output in results:
        assert exit_code != 0, output
        assert f"amorgp {command} needs amorgp-training" in output
        assert "pip install 'amorgp-cli[train]'" in output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("source", ["preset", "from"])
def test_n_max_past_the_step_memory_is_a_usage_error_and_creates_nothing(
    tmp_path: Path, tiny_checkpoint: Path, source: str
) -> None:
    """``--set n_max=20000 --set n_min=20000`` passed the linear size check, allocated
    gigabytes of kernel matrices and left ``run/.lock``."""
    out = tmp_path / "run"
    start = ["--preset", "tiny"] if source == "preset" else ["--from", str(tiny_checkpoint)]
    args = ["train", *start, "--out", str(out), "--max-steps", "1"]
    res = CliRunner().invoke(main, [*args, "--set", "n_max=20000", "--set", "n_min=20000"])
    assert res.exit_code == 2, res.output
    assert "n_max=20000: a step holds" in res.output
    assert "GB, more than the 4.29 GB (4 GiB) a step may use" in res.output
    assert "Traceback" not in res.output
    assert not out.exists()


def test_model_info_names_the_token_features(tmp_path: Path) -> None:
    import dataclasses

    from amorgp.amortizer import testing

    tiny = PRESETS["tiny"].network
    plain = testing.seeded_checkpoint(tmp_path / "plain", tiny)
    both = testing.seeded_checkpoint(
        tmp_path / "both", dataclasses.replace(tiny, period_tokens=True, relevance_tokens=True)
    )
    runner = CliRunner()
    out = runner.invoke(main, ["model-info", str(plain)]).output
    assert "reads: the data\n" in out
    out = runner.invoke(main, ["model-info", str(both)]).output
    assert "reads: the data, period tokens, relevance tokens" in out
    assert "period_proj" in out
    doc = json.loads(runner.invoke(main, ["model-info", str(both), "--json"]).output)
    assert doc["checkpoint"]["tokens"] == ["period", "relevance"]
    assert doc["checkpoint"]["learned_gate"] is False
    gated = testing.seeded_checkpoint(
        tmp_path / "gated", dataclasses.replace(tiny, period_tokens=True, learned_gate=True)
    )
    out = runner.invoke(main, ["model-info", str(gated)]).output
    assert "reads: the data, period tokens (a learnt gate)\n" in out
    assert "gate_proj" in out
    doc = json.loads(runner.invoke(main, ["model-info", str(gated), "--json"]).output)
    assert doc["checkpoint"]["learned_gate"] is True
