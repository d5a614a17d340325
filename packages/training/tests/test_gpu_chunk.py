"""The end of a GPU chunk (``amorgp.training.gpu_chunk``) and ``tools/gpu_chunk.sh``.

The oracles are the run directories' own files, read independently of the module: the
training recipe (batch size x steps = datasets), ``metrics.jsonl``'s last validation
line, the float32 weights rounded by torch, and the file sizes on disk.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from amorgp.amortizer.networks.checkpoint import load_checkpoint, save_checkpoint
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import build_model
from amorgp.core.errors import CheckpointError, OptionError
from amorgp.training import train
from amorgp.training.gpu_chunk import LOG_FILE, export_compact, finish_chunk

ROOT = Path(__file__).resolve().parents[3]
TINY = PRESETS["tiny"]
BATCH, STEPS = 4, 2


def _chunk(tmp: Path, start: Path | None, name: str) -> tuple[Path, Path]:
    """Phase 1 (from ``start``) and phase 2 of the tiny network, 2 steps each."""
    cfg = TINY.train.__class__(
        **{**TINY.train.to_dict(), "batch_size": BATCH, "val_size": 4, "n_max": 20}
    )
    p1, p2 = tmp / f"{name}-p1", tmp / f"{name}-p2"
    train(p1, network=None if start else TINY.network, train_cfg=cfg, init_from=start,
          max_steps=STEPS, progress=False)  # fmt: skip
    cfg2 = cfg.__class__(**{**cfg.to_dict(), "phase": 2})
    train(p2, train_cfg=cfg2, init_from=p1 / "last", max_steps=STEPS, progress=False)
    return p1, p2


@pytest.fixture(scope="module")
def scratch_chunk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """:func:`_chunk` from a fresh network, shared: its run directories are read only."""
    return _chunk(tmp_path_factory.mktemp("scratch-chunk"), None, "a")


def _last_validation(run: Path) -> float:
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    return float([x for x in lines if x.get("kind") == "validation"][-1]["nll"])


def test_two_chunks_export_bf16_and_log_the_datasets_they_add(
    tmp_path: Path, scratch_chunk: tuple[Path, Path]
) -> None:
    p1, p2 = scratch_chunk
    rec = finish_chunk(p1, p2, tmp_path / "out1" / "medium", start="scratch", device="cpu",
                       revision="abc")  # fmt: skip
    out = tmp_path / "out1" / "medium"
    assert rec["datasets"] == rec["datasets_total"] == BATCH * STEPS
    assert rec["phase1"]["datasets"] == BATCH * STEPS
    assert rec["phase2"]["datasets"] == BATCH * STEPS
    assert rec["validation_nll"] == pytest.approx(_last_validation(p2), rel=1e-12)
    assert rec["phase1"]["validation_nll"] == pytest.approx(_last_validation(p1), rel=1e-12)
    assert rec["device"].startswith("cpu")
    assert rec["revision"] == "abc"
    assert rec["exported"] == "phase 2"
    # the weights: phase 2's, rounded to bfloat16, loaded as float32
    with safe_open(str(out / "model.safetensors"), framework="pt") as fh:
        assert {fh.get_slice(k).get_dtype() for k in fh.keys()} == {"BF16"}  # noqa: SIM118
    ref = load_checkpoint(p2 / "last").model.state_dict()
    got = load_checkpoint(out)
    assert got.meta["campaign"] == rec
    for name, value in got.model.state_dict().items():
        assert torch.equal(value, ref[name].to(torch.bfloat16).to(torch.float32)), name
    assert not got.optimizer_tensors
    log1 = [json.loads(x) for x in (out / LOG_FILE).read_text().splitlines()]
    assert log1 == [rec]

    # a second chunk from the export: the log keeps the first line and adds the second
    q1, q2 = _chunk(tmp_path, out, "b")
    rec2 = finish_chunk(q1, q2, tmp_path / "out2" / "medium", start=str(out), device="cpu",
                        revision="def", log=out / LOG_FILE)  # fmt: skip
    assert rec2["datasets"] == BATCH * STEPS
    assert rec2["datasets_total"] == 2 * BATCH * STEPS
    log2 = [
        json.loads(x) for x in (tmp_path / "out2" / "medium" / LOG_FILE).read_text().splitlines()
    ]
    assert log2 == [rec, rec2]
    files = [p for p in (tmp_path / "out2" / "medium").iterdir()]
    assert len(files) <= 8


def test_without_phase_2_the_phase_1_weights_are_exported_with_a_warning(
    tmp_path: Path, scratch_chunk: tuple[Path, Path]
) -> None:
    p1, _ = scratch_chunk
    with pytest.warns(UserWarning, match="did not finish: exporting the phase-1 weights"):
        rec = finish_chunk(p1, None, tmp_path / "out", start="x", device="cpu", revision="r")
    assert rec["phase2"] is None
    assert rec["exported"].startswith("phase 1")
    ref = load_checkpoint(p1 / "last").model.state_dict()
    for name, value in load_checkpoint(tmp_path / "out").model.state_dict().items():
        assert torch.equal(value, ref[name].to(torch.bfloat16).to(torch.float32)), name


def test_medium_export_fits_the_transfer_limits(tmp_path: Path) -> None:
    """The medium preset (13.8 M parameters) exports as bfloat16 in files under 16 MiB,
    about half its float32 size; an export over the limits is refused and removed."""
    network = PRESETS["medium"].network
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(network)
    src = save_checkpoint(tmp_path / "src", model, network)
    out = export_compact(src, tmp_path / "out")
    files = list(out.iterdir())
    assert len(files) <= 7
    assert all(f.stat().st_size < 16 * 2**20 for f in files)
    n_params = sum(p.numel() for p in model.parameters())
    data = sum(f.stat().st_size for f in files if f.suffix == ".safetensors")
    assert 2 * n_params <= data < 2 * n_params + 2**20
    with pytest.raises(CheckpointError, match="does not fit the transfer limits"):
        export_compact(src, tmp_path / "big", weights_dtype="float32", max_files=3)
    assert not (tmp_path / "big").exists()
    with pytest.raises(OptionError, match="not a storage type"):
        export_compact(src, tmp_path / "x", weights_dtype="int8")


def _smoke_chunk(tmp_path: Path, start: Path, **env: str) -> None:
    """``tools/gpu_chunk.sh`` in its smoke form (CPU, the ``tiny`` preset) from ``start``
    into ``tmp_path / "OUT"``, its runs in ``tmp_path / "runs"``, ``env`` added; it must
    succeed."""
    env = {
        **os.environ,
        "AMORGP_CHUNK_SMOKE": "1",
        "AMORGP_CHUNK_PRESET": "tiny",
        "AMORGP_CHUNK_FROM": str(start),
        "AMORGP_CHUNK_RUNS": str(tmp_path / "runs"),
        "PYTHON": sys.executable,
        **env,
    }
    res = subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu_chunk.sh"), str(tmp_path / "OUT"), "1"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_chunk_script_smoke_run(tmp_path: Path, scratch_chunk: tuple[Path, Path]) -> None:
    """``tools/gpu_chunk.sh`` with ``AMORGP_CHUNK_SMOKE=1`` on the CPU: phase 1 and 2 of
    two steps each from a tiny checkpoint, the export and the log line."""
    _p1, p2 = scratch_chunk
    _smoke_chunk(tmp_path, p2 / "last")
    out = tmp_path / "OUT" / "medium"
    log = [json.loads(x) for x in (out / LOG_FILE).read_text().splitlines()]
    assert len(log) == 1
    assert log[0]["phase1"]["steps"] == 2
    assert log[0]["phase2"]["steps"] == 2
    assert log[0]["datasets_total"] == BATCH * STEPS + 2 * 8  # the start's + 2 steps of 8
    assert log[0]["validation_nll"] == pytest.approx(_last_validation(tmp_path / "runs" / "p2"))
    assert load_checkpoint(out).meta["weights_dtype"] == "bfloat16"
    assert len(list((tmp_path / "OUT").rglob("*"))) <= 8 + 1  # + the folder medium/


@pytest.mark.slow
def test_chunk_script_mixes_real_tables_in_phase_1(
    tmp_path: Path, scratch_chunk: tuple[Path, Path]
) -> None:
    """``AMORGP_CHUNK_REAL_TABLES``: the phase-1 run mixes the pool's tables at the asked
    share (its recipe says so; the mixing itself: ``test_realtables.py``), phase 2 stays
    simulated."""
    from amorgp.training.realtables import RealTables

    _p1, p2 = scratch_chunk
    pool = tmp_path / "pool.npz"
    x = torch.arange(1.0, 61.0, dtype=torch.float64)
    RealTables.from_arrays([torch.stack([x, x**2, x**3], 1).numpy()], ["t"]).save(pool)
    _smoke_chunk(
        tmp_path,
        p2 / "last",
        AMORGP_CHUNK_REAL_TABLES=str(pool),
        AMORGP_CHUNK_REAL_SHARE="1",
    )
    p1 = load_checkpoint(tmp_path / "runs" / "p1" / "last").meta["train"]
    assert (p1["real_tables"], p1["real_share"]) == (str(pool), 1.0)
    assert load_checkpoint(tmp_path / "runs" / "p2" / "last").meta["train"]["real_share"] == 0.0
    assert "real tables" in (tmp_path / "OUT" / "chunk.log").read_text()


def test_committed_medium_weights_load_as_float32() -> None:
    """``models/medium``: the ``medium`` preset with period and relevance tokens in
    bfloat16 shards under 16 MiB, loaded by ``Amortizer.from_pretrained`` as float32
    weights that bfloat16 represents exactly."""
    from amorgp.amortizer import Amortizer

    where = ROOT / "models" / "medium"
    meta = json.loads((where / "checkpoint.json").read_text())
    assert meta["weights_dtype"] == "bfloat16"
    assert all((where / f).stat().st_size < 16 * 2**20 for f in meta["shards"]["model"])
    ckpt = load_checkpoint(where)
    preset = PRESETS["medium"].network
    assert ckpt.network == dataclasses.replace(preset, period_tokens=True, relevance_tokens=True)
    weights = ckpt.model.state_dict()
    assert sum(p.numel() for p in ckpt.model.parameters()) == 13_837_593
    for name, value in weights.items():
        assert value.dtype == torch.float32, name
        assert torch.equal(value, value.to(torch.bfloat16).to(torch.float32)), name
    log = [json.loads(x) for x in (where / LOG_FILE).read_text().splitlines()]
    assert log[-1]["datasets_total"] == sum(r["datasets"] for r in log)
    amz = Amortizer.from_pretrained(where)
    x = torch.linspace(0, 1, 40, dtype=torch.float64)[:, None]
    fit = amz.infer(x.numpy(), torch.sin(6 * x[:, 0]).numpy(), "SE")
    mean, var = fit.predict(x.numpy())
    assert float(abs(torch.as_tensor(mean) - torch.sin(6 * x[:, 0])).max()) < 0.1
    assert bool((torch.as_tensor(var) > 0).all())
