"""The campaign report: runs summarised from the log, torn lines skipped, figure written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from amorgp_experiments.campaign_report import campaign_report, read_campaign_log, splice_section


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
    with pytest.warns(UserWarning, match=r"campaign\.jsonl: ignoring a torn last line"):
        assert [r["datasets_total"] for r in read_campaign_log(log)] == [1000, 2000, 3000]
    with pytest.warns(UserWarning, match="torn last line"):
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


def test_splice_section_replaces_between_markers_only() -> None:
    doc = "intro\n<!-- t:begin -->\nold 1\nold 2\n<!-- t:end -->\noutro\n"
    out = splice_section(doc, "t", "new\n")
    assert out == "intro\n<!-- t:begin -->\n\nnew\n\n<!-- t:end -->\noutro\n"
    # idempotent: splicing the same body again changes nothing
    assert splice_section(out, "t", "new") == out


@pytest.mark.parametrize(
    "doc",
    [
        "no markers\n",
        "<!-- t:begin -->\nbody\n",
        "<!-- t:end -->\n<!-- t:begin -->\n",
        "<!-- t:begin -->\n<!-- t:begin -->\n<!-- t:end -->\n",
    ],
)
def test_splice_section_rejects_bad_markers(doc: str) -> None:
    with pytest.raises(ValueError, match=r"<!-- t:begin -->"):
        splice_section(doc, "t", "x")


def test_report_rewrites_the_card_tables_and_keeps_the_rest(tmp_path: Path) -> None:
    log = tmp_path / "campaign.jsonl"
    log.write_text(json.dumps(_record("a", 1000, 0.80, 0.80, True)) + "\n")
    card = tmp_path / "card.md"
    card.write_text("# Card\n<!-- campaign:begin -->\nstale\n<!-- campaign:end -->\nprose\n")
    campaign_report(log, tmp_path / "out.md", card=card)
    text = card.read_text()
    assert "stale" not in text
    assert text.startswith("# Card\n<!-- campaign:begin -->")
    assert text.endswith("<!-- campaign:end -->\nprose\n")
    assert "| a | 1 | d8-n100 | 1,000-1,000 |" in text
    assert "| 1,000 | 0.300 |" in text  # the real-data table
    # a card without markers: the report is still written, the card is left as it was
    bad = tmp_path / "bad.md"
    bad.write_text("no markers\n")
    (tmp_path / "out.md").unlink()
    with pytest.raises(ValueError, match=r"bad\.md"):
        campaign_report(log, tmp_path / "out.md", card=bad)
    assert bad.read_text() == "no markers\n"
    assert (tmp_path / "out.md").is_file()


def test_cli_report_only_writes_report_and_card(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from amorgp.cli import main

    export = tmp_path / "campaign"
    export.mkdir()
    (export / "campaign.jsonl").write_text(json.dumps(_record("a", 2000, 0.7, 0.7, True)) + "\n")
    card = tmp_path / "card.md"
    card.write_text("<!-- campaign:begin -->\n<!-- campaign:end -->\n")
    args = ["campaign", "--report-only", "--export", str(export), "--card", str(card)]
    ok = CliRunner().invoke(main, args)
    assert ok.exit_code == 0, ok.output
    assert "2,000 datasets" in (tmp_path / "campaign.md").read_text()
    assert "| a | 1 | d8-n100 | 2,000-2,000 |" in card.read_text()
    assert not (tmp_path / "state").exists()  # nothing trained
    # a card without markers and --card without --report-only are usage errors
    card.write_text("plain\n")
    bad = CliRunner().invoke(main, args)
    assert bad.exit_code == 2
    assert "campaign:begin" in bad.output
    assert card.read_text() == "plain\n"
    misuse = CliRunner().invoke(
        main, ["campaign", "--state", str(tmp_path / "state"), "--card", str(card)]
    )
    assert misuse.exit_code == 2
    assert "--card needs --report-only" in misuse.output
    assert not (tmp_path / "state").exists()
    empty = CliRunner().invoke(main, ["campaign", "--report-only", "--export", str(tmp_path)])
    assert empty.exit_code == 2
    assert "no campaign log" in empty.output
