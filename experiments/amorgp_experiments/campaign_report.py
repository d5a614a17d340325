"""The campaign log as a report: a Markdown table of every run and a learning-curve figure.

Reads ``campaign.jsonl`` (one record per segment, see :mod:`amorgp.training.campaign`)
and writes a Markdown section (runs, datasets, minutes, validation, real-data scores)
and, if matplotlib is available, a PNG with the validation NLL against datasets seen.
The model card includes the section.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["campaign_report", "read_campaign_log", "splice_section"]


def read_campaign_log(log: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The segment records of a campaign log (a torn last line or a corrupted line is
    skipped with a warning naming the file; failure records carry no counters)."""
    from amorgp.amortizer.jsonlog import read_records

    records = read_records(log, strict=False, stacklevel=3)
    return [r for r in records if "datasets_total" in r]


def _runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per run (one campaign process on one machine): its segments' first and last records."""
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
    card: str | os.PathLike[str] | None = None,
) -> str:
    """Write the report of ``log`` to ``markdown`` (and ``figure``); returns the Markdown.

    With ``card`` (a Markdown file), the tables also replace
    what stands in that file between the lines ``<!-- campaign:begin -->`` and
    ``<!-- campaign:end -->``, so the card shows every run; a card without both markers raises ``ValueError`` and is
    left as it was (the report is written first).
    """
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
        *_tables(records),
    ]
    if figure is not None and records:
        try:
            _figure(records, Path(figure))
            lines += ["", f"![campaign learning curve]({Path(figure).name})"]
        except ImportError:
            pass
    text = "\n".join(lines) + "\n"
    _write_atomic(Path(markdown), text)
    if card is not None:
        card_text = Path(card).read_text()
        try:
            spliced = splice_section(card_text, "campaign", "\n".join(_tables(records)))
        except ValueError as err:
            raise ValueError(f"{card}: {err}") from None
        _write_atomic(Path(card), spliced)
    return text


def splice_section(document: str, name: str, body: str) -> str:
    """``document`` with the lines between ``<!-- name:begin -->`` and ``<!-- name:end -->``
    replaced by ``body`` (the marker lines stay).

    Raises:
        ValueError: a marker is missing, repeated, or the end comes before the begin.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    lines = document.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    stops = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(starts) != 1 or len(stops) != 1 or stops[0] < starts[0]:
        raise ValueError(
            f"expected one line {begin!r} followed by one line {end!r}; found "
            f"{len(starts)} begin and {len(stops)} end marker(s)"
            + (" in the wrong order" if starts and stops and stops[0] < starts[0] else "")
        )
    return "\n".join([*lines[: starts[0] + 1], "", body.strip("\n"), "", *lines[stops[0] :]])


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _tables(records: list[dict[str, Any]]) -> list[str]:
    """The runs table and, where segments were scored on real data, the per-segment table."""
    lines = [
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
    return lines


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
