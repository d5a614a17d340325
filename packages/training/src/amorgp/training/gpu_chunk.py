"""The end of a GPU training chunk: export the weights compactly and log the chunk.

``tools/gpu_chunk.sh`` runs, on a lent GPU machine, phase 1 of the ``medium`` network
from the committed weights (``models/medium``) for a number of minutes and then the noise
fine-tuning (phase 2), each with ``amorgp train``.  This module does what follows, on any
machine:

* :func:`export_compact` writes the phase-2 weights without optimiser state, in bfloat16
  shards of at most 15 MiB (a lent machine brings back at most 8 files of 16 MiB), and
  checks the count and size of the files written;
* :func:`chunk_record` builds the chunk's line of the GPU campaign log (datasets, minutes,
  device, validation NLLs, date, code revision) from the two run directories, and
  :func:`finish_chunk` appends it to ``campaign.jsonl`` inside the export (so the log
  travels with the weights) and stores it in the export's ``checkpoint.json``
  (``"campaign"``).

Command line (what the chunk script calls)::

    python -m amorgp.training.gpu_chunk --phase1 RUN1 --phase2 RUN2 \\
        --start models/medium --out OUTDIR/medium --log models/medium/campaign.jsonl \\
        --device cuda --revision abc1234

Without ``--phase2`` (noise fine-tuning did not finish) the phase-1 weights are exported,
a warning says so and the record's ``"exported"`` names phase 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.jsonlog import last_record, whole_lines, write_text_atomic
from amorgp.amortizer.networks.checkpoint import (
    META_FILE,
    SHARD_BYTES,
    WEIGHT_DTYPES,
    load_checkpoint,
    save_checkpoint,
)
from amorgp.core.errors import CheckpointError, DataError, OptionError, shorten
from amorgp.training.runstate import training_record

__all__ = [
    "EXPORT_SHARD_BYTES",
    "LOG_FILE",
    "MAX_FILES",
    "chunk_record",
    "export_compact",
    "finish_chunk",
    "main",
    "phase1_datasets",
]

MAX_FILES = 8
"""Most files a lent GPU machine brings back (each at most :data:`SHARD_BYTES`)."""
EXPORT_SHARD_BYTES = 15 * 2**20
"""Tensor bytes per exported shard: below 16 MiB with the safetensors header."""
LOG_FILE = "campaign.jsonl"
"""The GPU campaign log, kept inside the exported checkpoint folder."""


def export_compact(
    source: str | Path,
    target: str | Path,
    *,
    weights_dtype: str = "bfloat16",
    meta: dict[str, Any] | None = None,
    max_files: int = MAX_FILES - 1,
    max_file_bytes: int = SHARD_BYTES,
) -> Path:
    """Write the weights of ``source`` (no optimiser state) to ``target`` in
    ``weights_dtype`` shards of at most :data:`EXPORT_SHARD_BYTES` of tensor data.

    Args:
        source: a checkpoint directory (e.g. ``runs/p2/last``).
        target: the export directory (replaced if it exists).
        weights_dtype: ``"bfloat16"`` (default), ``"float16"`` or ``"float32"``.
        meta: more ``checkpoint.json`` entries; ``train``, ``simulator``, ``progress``,
            ``history`` and ``validation`` of ``source`` are kept.
        max_files: most files the export may hold, ``checkpoint.json`` included (default
            7: one file of the 8 stays free for the campaign log).
        max_file_bytes: largest file allowed.

    Returns:
        ``target``.

    Raises:
        OptionError: an unknown ``weights_dtype``.
        CheckpointError: ``source`` does not load, or the export has more files or a
            larger file than allowed (the export is removed then).
    """
    if weights_dtype not in WEIGHT_DTYPES:
        raise OptionError(
            f"weights_dtype {weights_dtype!r} is not a storage type; choose one of "
            f"{', '.join(WEIGHT_DTYPES)}"
        )
    ckpt = load_checkpoint(source)
    body = training_record(ckpt.meta)
    body.update({k: ckpt.meta[k] for k in ("validation", "campaign") if k in ckpt.meta})
    body.update(meta or {})
    out = save_checkpoint(
        target,
        ckpt.model,
        ckpt.network,
        meta=body,
        overwrite=True,
        max_shard_bytes=EXPORT_SHARD_BYTES,
        weights_dtype=WEIGHT_DTYPES[weights_dtype],
    )
    files = sorted(p for p in out.iterdir() if p.is_file())
    big = [
        f"{p.name} ({p.stat().st_size} bytes)" for p in files if p.stat().st_size > max_file_bytes
    ]
    if len(files) > max_files or big:
        shutil.rmtree(out, ignore_errors=True)
        raise CheckpointError(
            f"the export of {source} does not fit the transfer limits: {len(files)} files "
            f"(at most {max_files}), larger than {max_file_bytes} bytes: {', '.join(big) or 'none'}"
        )
    return out


def phase1_datasets(meta: dict[str, Any]) -> int:
    """Phase-1 datasets seen by a checkpoint's weights in all, over its ``history`` chain
    and its own ``progress``."""
    records = [
        *meta.get("history", []),
        {"phase": meta.get("train", {}).get("phase"), **meta.get("progress", {})},
    ]
    return int(sum(int(r.get("datasets_seen", 0)) for r in records if r.get("phase") == 1))


def _read_meta(run: Path) -> dict[str, Any]:
    last = run / "last" if (run / "last").exists() else run
    try:
        meta = json.loads((last / META_FILE).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CheckpointError(f"cannot read the checkpoint of run {run}: {err}") from err
    return dict(meta)


def _phase_summary(meta: dict[str, Any]) -> dict[str, Any]:
    progress = meta.get("progress", {})
    validation = meta.get("validation", {})
    return {
        "datasets": int(progress.get("datasets_seen", 0)),
        "steps": int(progress.get("step", 0)),
        "minutes": round(float(progress.get("elapsed_s", 0.0)) / 60.0, 3),
        "validation_nll": validation.get("nll"),
        "validation_nll_true": validation.get("nll_true"),
        "n_max": meta.get("train", {}).get("n_max"),
    }


def device_name(device: str) -> str:
    """A readable name of ``device`` (the GPU's model on CUDA, else the processor)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{device}: {torch.cuda.get_device_name(torch.device(device))}"
    return f"{device}: {platform.processor() or platform.machine()}"


def _previous_total(
    previous: dict[str, Any] | None, source: str = "the campaign log"
) -> int | None:
    """``datasets_total`` of the log's last record (``None`` without one).

    Raises:
        DataError: the record holds one that is not an integer >= 0.
    """
    if not previous or "datasets_total" not in previous:
        return None
    total = previous["datasets_total"]
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise DataError(
            f"{source}: the last record has datasets_total={shorten(json.dumps(total), 40)}, "
            "not an "
            f"integer >= 0 ({shorten(json.dumps(previous, sort_keys=True))}); repair or "
            "remove that line"
        )
    return total


def chunk_record(
    phase1: Path,
    phase2: Path | None,
    *,
    start: str,
    device: str,
    revision: str,
    previous: dict[str, Any] | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """The GPU campaign log line of one chunk, from its two run directories.

    Args:
        phase1, phase2: the run directories (or checkpoints) of phase 1 and of the noise
            fine-tuning (``None``: it did not finish).
        start: the weights the chunk started from.
        device: the torch device it ran on.
        revision: the code revision.
        previous: the log's last record, whose ``datasets_total`` the chunk adds to.
        date: ISO date (default: now, UTC).
    """
    m1 = _read_meta(phase1)
    m2 = _read_meta(phase2) if phase2 is not None else None
    final = m2 if m2 is not None else m1
    total = phase1_datasets(final)
    before = _previous_total(previous)
    p1 = _phase_summary(m1)
    p2 = _phase_summary(m2) if m2 is not None else None
    return {
        "date": date or dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "revision": revision,
        "device": device_name(device),
        "torch": torch.__version__,
        "start": start,
        "phase1": p1,
        "phase2": p2,
        "datasets": total - before if before is not None else p1["datasets"],
        "datasets_total": total,
        "minutes": round(p1["minutes"] + (p2["minutes"] if p2 else 0.0), 3),
        "validation_nll": final.get("validation", {}).get("nll"),
        "exported": "phase 2" if m2 is not None else "phase 1 (noise fine-tuning did not finish)",
    }


def _last_record(log: Path) -> dict[str, Any] | None:
    """The last whole record of ``log`` (a torn last line ignored, with a warning; a
    corrupted line, or a ``datasets_total`` that is not a count, is a ``DataError``
    naming the file)."""
    record = last_record(log)
    _previous_total(record, str(log))
    return record


def _whole_lines(log: Path | None) -> str:
    """The text of ``log`` up to its last newline (a torn last line left out, also one
    cut inside a UTF-8 character; the read is bounded, see
    :func:`~amorgp.amortizer.jsonlog.whole_lines`)."""
    return whole_lines(log)


def finish_chunk(
    phase1: str | Path,
    phase2: str | Path | None,
    out: str | Path,
    *,
    start: str,
    device: str,
    revision: str,
    log: str | Path | None = None,
    weights_dtype: str = "bfloat16",
) -> dict[str, Any]:
    """Export the chunk's weights to ``out`` and append its record to ``out/campaign.jsonl``
    (a copy of ``log``, the committed log, plus the new line).

    Returns:
        The record appended.
    """
    phase1, out = Path(phase1), Path(out)
    phase2 = Path(phase2) if phase2 is not None else None
    old_log = Path(log) if log is not None else None
    previous = _last_record(old_log) if old_log is not None else None
    history = _whole_lines(old_log)
    if phase2 is None:
        warnings.warn(
            f"the noise fine-tuning did not finish: exporting the phase-1 weights of {phase1}",
            stacklevel=2,
        )
    record = chunk_record(
        phase1, phase2, start=start, device=device, revision=revision, previous=previous
    )
    record["weights_dtype"] = weights_dtype
    source = phase2 if phase2 is not None else phase1
    source = source / "last" if (source / "last").exists() else source
    target = export_compact(source, out, weights_dtype=weights_dtype, meta={"campaign": record})
    write_text_atomic(target / LOG_FILE, history + json.dumps(record, sort_keys=True) + "\n")
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Export a GPU chunk's weights and log the chunk.")
    ap.add_argument("--phase1", type=Path, required=True, help="phase-1 run directory")
    ap.add_argument("--phase2", type=Path, default=None, help="phase-2 run directory")
    ap.add_argument("--out", type=Path, required=True, help="export directory")
    ap.add_argument("--start", required=True, help="the weights the chunk started from")
    ap.add_argument("--log", type=Path, default=None, help="the committed campaign log")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--revision", default="unknown")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(WEIGHT_DTYPES))
    a = ap.parse_args(argv)
    record = finish_chunk(
        a.phase1,
        a.phase2,
        a.out,
        start=a.start,
        device=a.device,
        revision=a.revision,
        log=a.log,
        weights_dtype=a.dtype,
    )
    print(json.dumps(record, sort_keys=True))


if __name__ == "__main__":
    main()
