"""The campaign report: runs summarised from the log, torn lines skipped, figure written."""

from __future__ import annotations

import json
from pathlib import Path

from amorgp.amortizer.campaign_report import campaign_report, read_campaign_log


def _record(run: str, total: int, nll: float, best: float, improved: bool) -> dict:
    return {
        "run": run,
        "stage": 0,
        "stage_name": "d8-n100",
        "datasets_total": total,
        "minutes_total": total / 1000,
        "validation": {"nll": nll},
        "validation_phase1": {"nll": nll - 0.01},
        "best_nll": best,
        "improved": improved,
        "baseline_nll": 0.9,
        "real": {"airline": {"rmse": 0.3, "nll": 0.5}},
    }


def test_report_summarises_runs_and_skips_torn_lines(tmp_path: Path) -> None:
    log = tmp_path / "campaign.jsonl"
    rows = [
        _record("a", 1000, 0.80, 0.80, True),
        _record("a", 2000, 0.82, 0.80, False),
        _record("b", 3000, 0.70, 0.70, True),
    ]
    log.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"run": "b", "datas')
    assert [r["datasets_total"] for r in read_campaign_log(log)] == [1000, 2000, 3000]
    text = campaign_report(log, tmp_path / "out.md", tmp_path / "curve.png")
    assert "3 segments; 3,000 datasets" in text
    assert "started from scores 0.9000" in text
    assert "| a | 2 | d8-n100 | 1,000-2,000 |" in text
    assert "| 0.8200 | 0.8000 | 1 |" in text  # run a: last validation, best, exports
    assert "| b | 1 |" in text
    assert (tmp_path / "curve.png").stat().st_size > 1000
    assert (tmp_path / "out.md").read_text() == text


def test_report_names_the_weight_averaged_segments(tmp_path: Path) -> None:
    log = tmp_path / "campaign.jsonl"
    rows = [_record("a", 1000, 0.80, 0.80, True), _record("a", 2000, 0.78, 0.78, True)]
    rows.append({**_record("a", 3000, 0.75, 0.75, True)})
    rows[1]["swa"] = {"members": [1000, 2000], "phase1_nll": 0.765}
    rows[2]["swa"] = {"members": [1000, 2000, 3000], "phase1_nll": 0.7512}
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    text = campaign_report(log, tmp_path / "out.md", tmp_path / "curve.png")
    assert "From 2,000 datasets on (2 segments)" in text
    assert "last 3 segment ends" in text
    assert "scored 0.7512 at 3,000 datasets" in text
    assert (tmp_path / "curve.png").stat().st_size > 0
    plain = [_record("a", 1000, 0.80, 0.80, True)]
    log.write_text(json.dumps(plain[0]) + "\n")
    assert "weight averaging" not in campaign_report(log, tmp_path / "o2.md")
