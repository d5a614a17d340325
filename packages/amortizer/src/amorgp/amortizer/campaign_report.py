"""The campaign log as a report: a Markdown table of every run and a learning-curve figure.

Reads ``campaign.jsonl`` (one record per segment, see :mod:`amorgp.amortizer.campaign`)
and writes a Markdown section (runs, datasets, minutes, validation, real-data scores)
and, if matplotlib is available, a PNG with the validation NLL against datasets seen.
The model card includes the section.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["campaign_report", "read_campaign_log"]


def read_campaign_log(log: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a campaign log (torn or invalid lines are skipped)."""
    out = []
    for line in Path(log).read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "datasets_total" in record:
            out.append(record)
    return out


def _runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per run (a machine session): its segments' first and last records."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        runs.setdefault(str(r.get("run", "?")), []).append(r)
    out = []
    for run, rs in runs.items():
        scored = [r for r in rs if "validation" in r]
        out.append(
            {
                "run": run,
                "segments": len(rs),
                "stages": sorted({str(r.get("stage_name", r.get("stage"))) for r in rs}),
                "datasets_from": min(r["datasets_total"] for r in rs),
                "datasets_to": max(r["datasets_total"] for r in rs),
                "minutes_to": max(float(r.get("minutes_total", 0.0)) for r in rs),
                "best_nll": min(float(r["best_nll"]) for r in rs if r.get("best_nll") is not None),
                "last_validation": scored[-1]["validation"]["nll"] if scored else None,
                "exports": sum(bool(r.get("improved")) for r in rs),
            }
        )
    return out


def campaign_report(
    log: str | os.PathLike[str],
    markdown: str | os.PathLike[str],
    figure: str | os.PathLike[str] | None = None,
) -> str:
    """Write the report of ``log`` to ``markdown`` (and ``figure``); returns the Markdown."""
    records = read_campaign_log(log)
    lines = [
        "## Training campaign",
        "",
        f"{len(records)} segments; {records[-1]['datasets_total'] if records else 0:,} datasets of the paper prior "
        f"(d <= 8) in {records[-1].get('minutes_total', 0.0) / 60 if records else 0:.1f} hours of training "
        "(wall clock, one thread at low priority on a shared machine; stretches paused with "
        "SIGSTOP are left out since session 9, earlier totals include at least 131 paused minutes (session 8)) "
        "(validation: the fixed campaign set, 256 paper-prior datasets, mean per-point NLL of the noise-fine-tuned copy; "
        "lower is better)."
        + (
            f" The bundled model the campaign started from scores {base:.4f} on this set."
            if (
                base := next(
                    (r["baseline_nll"] for r in records if r.get("baseline_nll") is not None), None
                )
            )
            is not None
            else ""
        ),
        "",
        *_swa_lines(records),
        "| run | segments | stages | datasets | hours (cumulative) | last validation NLL | best so far | exports |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in _runs(records):
        last = "-" if r["last_validation"] is None else f"{r['last_validation']:.4f}"
        lines.append(
            f"| {r['run']} | {r['segments']} | {', '.join(r['stages'])} | {r['datasets_from']:,}-{r['datasets_to']:,} | "
            f"{r['minutes_to'] / 60:.2f} | {last} | {r['best_nll']:.4f} | {r['exports']} |"
        )
    real = [r for r in records if "real" in r]
    if real:
        names = sorted(real[-1]["real"])
        lines += [
            "",
            "Real data (median test RMSE over the first 6 paper kernels, one split, standardised units), per segment:",
            "",
            "| datasets | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for r in real:
            cells = " | ".join(
                f"{r['real'][n]['rmse']:.3f}" if n in r["real"] else "-" for n in names
            )
            lines.append(f"| {r['datasets_total']:,} | {cells} |")
    if figure is not None and records:
        try:
            _figure(records, Path(figure))
            lines += ["", f"![campaign learning curve]({Path(figure).name})"]
        except ImportError:
            pass
    text = "\n".join(lines) + "\n"
    out = Path(markdown)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return text


def _swa_lines(records: list[dict[str, Any]]) -> list[str]:
    """A sentence on the segments evaluated from a weight average (none: no lines)."""
    swa = [r for r in records if "swa" in r]
    if not swa:
        return []
    first, last = swa[0], swa[-1]
    return [
        f"From {first['datasets_total']:,} datasets on ({len(swa)} segment"
        f"{'s' if len(swa) != 1 else ''}), the evaluated copy "
        f"is fine-tuned from the average of the phase-1 weights of the last "
        f"{len(last['swa']['members'])} segment ends (stochastic weight averaging); the average "
        f"itself scored {last['swa']['phase1_nll']:.4f} at {last['datasets_total']:,} datasets.",
        "",
    ]


def _figure(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scored = [r for r in records if "validation" in r]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = [r["datasets_total"] for r in scored]
    ax.plot(x, [r["validation"]["nll"] for r in scored], "o-", label="noise-fine-tuned copy")
    if all("validation_phase1" in r for r in scored):
        ax.plot(x, [r["validation_phase1"]["nll"] for r in scored], "s--", label="phase-1 weights")
    swa = [r for r in scored if "swa" in r]
    if swa:
        ax.plot(
            [r["datasets_total"] for r in swa],
            [r["swa"]["phase1_nll"] for r in swa],
            "^:",
            label="phase-1 weight average",
        )
    ax.set_xlabel("datasets seen")
    ax.set_ylabel("validation NLL per point")
    ax.set_title("campaign learning curve (paper prior, d <= 8)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
