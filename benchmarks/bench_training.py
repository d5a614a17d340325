"""Training throughput on this machine: optimiser steps of the amortization network.

Writes ``docs/training/throughput.md`` (and ``.json``): milliseconds per optimiser step
and datasets per second for each preset on the paper prior (``d <= 8``,
``n ~ U{10..n_max}``, batch 16, the encoder reading every point), with the
step split into simulation, forward (network + loss) and backward, for

* **padded**: the dataset encoder on the padded ``(B, D, N)`` layout and one size bucket
  (the training step before the CPU optimisations);
* **packed + buckets**: present (dataset, dimension) pairs packed before the point-wise
  stages (the CPU default) and 4 size buckets (``TrainConfig.size_buckets``);
* optionally (``--bf16``) the network under bf16 autocast on the CPU.

With ``--device cuda`` the batches are moved to the GPU and the network runs under the
trainer's bf16 autocast (the GP loss stays in float64); every stage boundary is
synchronised, so the split is exact but the total includes those syncs.  The table then
goes to ``throughput-cuda.md`` unless ``--out`` names another file.

The variants run interleaved (A, B, A, B, ...) in one process on the same batches, and
the medians are reported; the machine is shared, so ratios hold better than absolute times.

Usage::

    python benchmarks/bench_training.py [--presets small,medium] [--steps 12] [--quick]
    python benchmarks/bench_training.py --device cuda --presets small,medium --batch-size 16,128
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.networks.config import preset
from amorgp.amortizer.networks.model import build_model
from amorgp.training.train import make_stream, simulator_config, training_loss

ROOT = Path(__file__).resolve().parents[1]


def _variant_model(model: torch.nn.Module, packed: bool) -> None:
    enc = model.dataset_encoder  # type: ignore[attr-defined]
    if packed:
        enc.__dict__.pop("forward", None)
    else:
        enc.forward = enc._forward_padded


def _clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def run(
    preset_name: str,
    steps: int,
    n_max: int,
    bf16: bool,
    device: torch.device,
    batch_size: int = 16,
) -> dict[str, Any]:
    p = preset(
        preset_name,
        batch_size=batch_size,
        n_max=n_max,
        max_dims=8,
        encoder_points=0,
        num_workers=0,
    )
    torch.manual_seed(0)
    model = build_model(p.network).to(device).train()
    opt = torch.optim.RAdam(model.parameters(), lr=1e-5)
    sim = simulator_config(p.network, p.train)
    it = iter(make_stream(sim, batch_size, 0, 0, 0, 10_000))
    # on a GPU the encoder always runs padded (DatasetEncoder.forward), so only the buckets differ
    variants = {
        "padded": (False, 1, False),
        "packed + 4 buckets" if device.type == "cpu" else "padded + 4 buckets": (True, 4, False),
    }
    if bf16:
        variants["packed + 4 buckets, bf16"] = (True, 4, True)
    times: dict[str, dict[str, list[float]]] = {
        k: {"sim": [], "fwd": [], "bwd": []} for k in variants
    }
    for step in range(steps + 1):
        for name, (packed, buckets, low) in variants.items():
            t0 = _clock(device)
            batch = next(it).to(device)
            t1 = _clock(device)
            _variant_model(model, packed)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
                out = training_loss(
                    model, batch, p.network.vocabulary, p.train, size_buckets=buckets
                )
            t2 = _clock(device)
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            t3 = _clock(device)
            if step > 0:  # the first round warms up
                times[name]["sim"].append(t1 - t0)
                times[name]["fwd"].append(t2 - t1)
                times[name]["bwd"].append(t3 - t2)
    res: dict[str, Any] = {
        "preset": preset_name,
        "n_params": sum(q.numel() for q in model.parameters()),
        "batch_size": batch_size,
    }
    for name, t in times.items():
        total = [a + b + c for a, b, c in zip(t["sim"], t["fwd"], t["bwd"], strict=True)]
        res[name] = {k: 1e3 * statistics.median(v) for k, v in t.items()}
        res[name]["step_ms"] = 1e3 * statistics.median(total)
        res[name]["datasets_per_s"] = batch_size / statistics.median(total)
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", default="small")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--n-max", type=int, default=250)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cpu", help="cpu (one thread) or cuda")
    ap.add_argument(
        "--batch-size", default="16", help="datasets per step, one value or one per preset"
    )
    a = ap.parse_args(argv)
    if a.quick:
        a.presets, a.steps, a.n_max = "tiny", 2, 40
    device = torch.device(a.device)
    names = a.presets.split(",")
    sizes = [int(b) for b in a.batch_size.split(",")]
    sizes = sizes * len(names) if len(sizes) == 1 else sizes
    if len(sizes) != len(names):
        ap.error(f"--batch-size gives {len(sizes)} values for {len(names)} presets")
    if device.type == "cpu":
        torch.set_num_threads(1)
        machine = f"{platform.machine()} CPU, 1 torch thread, torch {torch.__version__}"
        title = "CPU, one thread"
    else:
        gpu = torch.cuda.get_device_name(device)
        machine = f"{gpu}, torch {torch.__version__}, bf16 autocast, GP loss in float64"
        title = f"GPU, {gpu}"
    default_out = "throughput.md" if device.type == "cpu" else f"throughput-{device.type}.md"
    out = a.out or ROOT / "docs" / "training" / default_out
    results = [
        run(name, a.steps, a.n_max, a.bf16, device, b) for name, b in zip(names, sizes, strict=True)
    ]
    lines = [
        f"# Training throughput ({title})",
        "",
        f"Generated by `benchmarks/bench_training.py --device {a.device} --presets {a.presets} "
        f"--batch-size {a.batch_size} --steps {a.steps}` on {machine} (medians of {a.steps} "
        f"interleaved steps per variant). Paper prior, d <= 8, n ~ U{{10..{a.n_max}}}, "
        "simulation in the training process on the CPU (no worker; the trainer draws it in "
        "worker processes), the encoder reading every point.",
        "",
        "| preset | parameters | batch | variant | simulation ms | forward ms | backward + step ms | ms / step | datasets / s | speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base = r["padded"]["step_ms"]
        for name in (k for k in r if isinstance(r[k], dict)):
            v = r[name]
            lines.append(
                f"| {r['preset']} | {r['n_params']:,} | {r['batch_size']} | {name} | {v['sim']:.0f} | "
                f"{v['fwd']:.0f} | {v['bwd']:.0f} | {v['step_ms']:.0f} | {v['datasets_per_s']:.1f} | "
                f"x{base / v['step_ms']:.2f} |"
            )
    lines.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(
        json.dumps({"machine": machine, "results": results}, indent=1)
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
