"""Should a campaign export replace the default?  The decisive check, side by side.

Runs the paper benchmark's Fig. 3 amortizer rows (``amortized``: the network alone,
``amortized+calibrate``: the library's default) for a base model and a candidate on the
full paper protocol (24 kernels x 5 datasets x 3 splits; ``--quick``: airline, 2 kernels,
one split), each in its own output folder seeded with the committed cells of
``docs/benchmarks/paper`` (so the base's and the Type-2 ML cells are read, not
recomputed), and compares them cell by cell:

* per dataset, the median over cells of the candidate's test RMSE divided by the base's,
  the share of cells where the candidate is better, and the median NLL difference;
* the median RMSE ratio of each to 5-start L-BFGS Type-2 ML (``gp-ml-lbfgs``) on the
  cells that have it;
* over all cells of each method: the median and geometric mean of the ratios and the
  shares of cells where the candidate is better or worse by more than 0.1 % (the
  per-dataset share counts any ratio below 1, so ties within rounding count there), and
  the same apart for the kernels with a periodic factor and those without;
* optionally (``--heldout N``) both networks on ``N`` held-out simulated pairs
  (:func:`amorgp.training.campaign_plan.compare_on_heldout`; the primary
  network alone, also with ``--with-candidate``).

``--with-candidate NAME`` (repeatable) checks the candidate as the primary network with
``NAME`` (a bundled name or a directory) as its candidate network: both predict and the
exact likelihood picks per kernel.  The pair is written as a checkpoint folder in the work
folder (links to the candidate's tensor files, its ``checkpoint.json`` with
``"candidates"``).

A per-cell ratio below 1 on every dataset is what shipping asks for; differences of 1-2 %
per cell are within the spread of the noise fine-tuning's seed
(``docs/training/input-laws.md``).

Usage::

    python -m amorgp_experiments.ship_check docs/training/campaign/best [--base default] [--heldout 1000]
    python -m amorgp_experiments.ship_check docs/training/campaign/best-phase1 --base default-phase1
    python -m amorgp_experiments.ship_check models/medium --with-candidate default
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
COMMITTED_CELLS = ROOT / "docs" / "benchmarks" / "paper" / "cells"
METHODS = ("amortized", "amortized+calibrate")
REFERENCE = "gp-ml-lbfgs"
DATASETS = ("airline", "concrete", "energy", "housing", "yacht")
QUICK_KERNELS = (0, 1)

Cells = dict[tuple[str, int, str, str], dict[str, Any]]


def fig3_cells(model: str, work: Path, quick: bool) -> Cells:
    """The Fig. 3 cells of ``model`` (computed where not cached) and the cached baselines."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "cells").mkdir(exist_ok=True)
    if COMMITTED_CELLS.exists() and not (work / "cells" / "real.jsonl").exists():
        shutil.copyfile(COMMITTED_CELLS / "real.jsonl", work / "cells" / "real.jsonl")
    cmd = [
        sys.executable, "-m", "amorgp.cli", "benchmark", "paper",
        "--model", model, "--experiments", "fig3", "--methods", ",".join(METHODS),
        "--out", str(work), "--no-progress",
    ]  # fmt: skip
    if quick:
        ids = ",".join(str(i) for i in QUICK_KERNELS)
        cmd += ["--datasets", "airline", "--kernels", ids, "--splits", "1"]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    results = json.loads((work / "results.json").read_text())
    cells = {
        (c["dataset"], int(c["split"]), c["kernel"], c["method"]): c
        for c in results["experiments"]["fig3"]["cells"]
    }
    if quick:  # the report also lists cached cells outside the quick subset
        from amorgp_experiments.paper.real import kernel_templates

        kernels = set(kernel_templates(QUICK_KERNELS))
        cells = {
            k: v for k, v in cells.items() if k[0] == "airline" and k[1] == 0 and k[2] in kernels
        }
    return cells


def _ok(cell: dict[str, Any] | None) -> bool:
    return cell is not None and cell.get("rmse") is not None and cell.get("nll") is not None


def compare(base: Cells, cand: Cells) -> dict[str, Any]:
    """Per method and dataset: cell-by-cell ratios of ``cand`` to ``base`` and to Type-2 ML."""
    out: dict[str, Any] = {}
    for method in METHODS:
        rows: dict[str, Any] = {}
        for ds in DATASETS:
            keys = [k for k in cand if k[0] == ds and k[3] == method and _ok(cand[k])]
            keys = [k for k in keys if _ok(base.get(k))]
            if not keys:
                continue
            ratio = [cand[k]["rmse"] / base[k]["rmse"] for k in keys]
            ref = [(*k[:3], REFERENCE) for k in keys]
            with_ref = [(k, r) for k, r in zip(keys, ref, strict=True) if _ok(cand.get(r))]
            rows[ds] = {
                "cells": len(keys),
                "rmse_ratio": statistics.median(ratio),
                "better": sum(r < 1 for r in ratio) / len(ratio),
                "nll_diff": statistics.median(cand[k]["nll"] - base[k]["nll"] for k in keys),
                "base_to_ref": statistics.median(
                    base[k]["rmse"] / cand[r]["rmse"] for k, r in with_ref
                )
                if with_ref
                else None,
                "cand_to_ref": statistics.median(
                    cand[k]["rmse"] / cand[r]["rmse"] for k, r in with_ref
                )
                if with_ref
                else None,
            }
        out[method] = rows
    return out


TIE = 1e-3
"""Relative RMSE difference below which a cell counts as a tie in the all-cells summary."""


def _summary(ratio: list[float]) -> dict[str, Any]:
    """Median and geometric mean of test RMSE ratios and the shares better and worse by
    more than :data:`TIE`."""
    return {
        "cells": len(ratio),
        "rmse_ratio": statistics.median(ratio),
        "geometric_mean": math.exp(statistics.fmean(math.log(r) for r in ratio)),
        "better": sum(r < 1 - TIE for r in ratio) / len(ratio),
        "worse": sum(r > 1 + TIE for r in ratio) / len(ratio),
    }


def has_period(kernel: str) -> bool:
    """Whether a paper kernel (e.g. ``"SE + LIN*PER"``) has an addend with a period
    (:func:`amorgp.amortizer.stages.multistart.has_periodic`)."""
    from amorgp.amortizer.stages.multistart import has_periodic
    from amorgp.kernel_grammar import DimWiseStructure

    return has_periodic(DimWiseStructure.coerce(kernel, 1))


KERNEL_GROUPS = ("with PER", "without PER")
"""The all-cells summary's kernel groups: the 20 paper kernels with a periodic factor
(on the regression datasets a period is seldom in the data) and the 4 without."""


def overall(base: Cells, cand: Cells) -> dict[str, Any]:
    """Per method, over all cells both have: median and geometric mean of the RMSE ratios,
    and the shares better and worse by more than :data:`TIE`; the same per kernel group
    (:data:`KERNEL_GROUPS`) under ``"groups"``."""
    out: dict[str, Any] = {}
    for method in METHODS:
        keys = [k for k in cand if k[3] == method and _ok(cand[k]) and _ok(base.get(k))]
        if not keys:
            continue
        ratio = {k: cand[k]["rmse"] / base[k]["rmse"] for k in keys}
        out[method] = _summary(list(ratio.values()))
        groups = {}
        for name, periodic in zip(KERNEL_GROUPS, (True, False), strict=True):
            part = [r for k, r in ratio.items() if has_period(k[2]) == periodic]
            if part:
                groups[name] = _summary(part)
        out[method]["groups"] = groups
    return out


def with_candidates(primary: str, candidates: list[str], work: Path) -> Path:
    """A checkpoint folder in ``work``: ``primary``'s weights (linked) and its
    ``checkpoint.json`` naming ``candidates``."""
    from amorgp.amortizer.networks.bundled import resolve_checkpoint

    source = resolve_checkpoint(primary).resolve()
    meta = json.loads((source / "checkpoint.json").read_text())
    target = work / f"{source.name}+{'+'.join(Path(c).name for c in candidates)}"
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in meta.get("sha256", {}):
        (target / name).symlink_to(source / name)
    meta["candidates"] = [str(Path(c).resolve()) if Path(c).exists() else c for c in candidates]
    (target / "checkpoint.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return target


def markdown(
    base: str,
    cand: str,
    table: dict[str, Any],
    heldout: dict[str, float] | None,
    total: dict[str, Any] | None = None,
) -> str:
    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = [
        f"# Ship check: `{cand}` against `{base}`",
        "",
        "Fig. 3 amortizer cells of the paper protocol, compared cell by cell (test RMSE "
        "ratio candidate / base: median over cells; Type-2 ML: 5-start L-BFGS).",
        "",
        "| method | dataset | cells | RMSE ratio | candidate better | NLL difference | "
        "base / Type-2 ML | candidate / Type-2 ML |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, rows in table.items():
        for ds, r in rows.items():
            lines.append(
                f"| {method} | {ds} | {r['cells']} | {r['rmse_ratio']:.3f} | "
                f"{100 * r['better']:.0f} % | {r['nll_diff']:+.3f} | {f(r['base_to_ref'])} | "
                f"{f(r['cand_to_ref'])} |"
            )
    if total:
        lines += [
            "",
            "All cells (ties: within 0.1 %), and apart the kernels with a periodic factor "
            "and those without:",
            "",
            "| method | cells | median RMSE ratio | geometric mean | better | worse |",
            "|---|---|---|---|---|---|",
        ]
        for method, r in total.items():
            for label, g in (("", r), *((f", {k}", v) for k, v in r["groups"].items())):
                lines.append(
                    f"| {method}{label} | {g['cells']} | {g['rmse_ratio']:.3f} | "
                    f"{g['geometric_mean']:.3f} | {100 * g['better']:.0f} % | "
                    f"{100 * g['worse']:.0f} % |"
                )
    if heldout is not None:
        lines += [
            "",
            f"Held-out simulated pairs ({heldout['pairs']}): median paired test NLL difference "
            f"{heldout['median_nll_difference']:+.4f} nats, candidate better on "
            f"{100 * heldout['new_better_fraction']:.1f} % (sign test p = {heldout['sign_test_p']:.2g}).",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("candidate", help="checkpoint directory or bundled model name")
    ap.add_argument(
        "--base", default="default", help="bundled name or directory (default: default)"
    )
    ap.add_argument("--work", type=Path, default=Path("runs/ship-check"), help="scratch folder")
    ap.add_argument("--heldout", type=int, default=0, help="held-out simulated pairs (0: none)")
    ap.add_argument("--quick", action="store_true", help="airline, 2 kernels, one split")
    ap.add_argument(
        "--with-candidate",
        action="append",
        default=[],
        metavar="NAME",
        help="check the candidate with this network as its candidate network (repeatable)",
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    ap.add_argument("--json", type=Path, default=None, help="write the numbers as JSON here")
    a = ap.parse_args(argv)
    # the benchmark runs from the repository root: a relative folder names one place
    # for it and for the reading of its results
    a.work = a.work.resolve()
    candidate = a.candidate
    if a.with_candidate:
        candidate = str(with_candidates(a.candidate, a.with_candidate, a.work))
    base = fig3_cells(a.base, a.work / "base", a.quick)
    cand = fig3_cells(candidate, a.work / "candidate", a.quick)
    table = compare(base, cand)
    total = overall(base, cand)
    heldout = None
    if a.heldout > 0:
        from amorgp.amortizer.networks.bundled import resolve_checkpoint
        from amorgp.training.campaign_plan import compare_on_heldout

        heldout = compare_on_heldout(
            resolve_checkpoint(a.base), resolve_checkpoint(a.candidate), n_pairs=a.heldout
        )
    label = " + ".join([a.candidate, *a.with_candidate])
    text = markdown(a.base, label, table, heldout, total)
    print(text)
    if a.out is not None:
        a.out.write_text(text)
    if a.json is not None:
        a.json.write_text(
            json.dumps({"table": table, "overall": total, "heldout": heldout}, indent=2)
        )


if __name__ == "__main__":
    main()
