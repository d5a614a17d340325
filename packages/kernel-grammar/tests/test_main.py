"""Tests of the command line (``python -m amorgp.kernel_grammar``)."""

from __future__ import annotations

import pytest

from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, encode
from amorgp.kernel_grammar.__main__ import main


def test_demo_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["se+per", "--dims", "3"]) == 0
    out = capsys.readouterr().out
    s = DimWiseStructure.parse("SE + PER", 3)
    assert f"canonical form   : {s}" in out
    assert "canonical form   : (SE + PER)@0 * (SE + PER)@1 * (SE + PER)@2" in out
    for d in range(3):
        assert f"dim {d}: SE + PER" in out
    assert f"parameters ({s.n_params} kernel + 1 noise)" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("  0    1")]
    assert [r[3] for r in rows] == ["variance", "lengthscale", "period"]
    assert "Exponential(rate=44.4444)" in out
    assert "softplus + 0.0001" in out
    symbols, _ = encode([s], PAPER_VOCABULARY)
    assert str(symbols[0]).splitlines()[0] in out


def test_indexed_expression_infers_dims_and_prints_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["(SE x LIN + SE)@0 * (SE + PER)@1", "--tree"]) == 0
    out = capsys.readouterr().out
    assert "input dimensions : 2" in out
    assert "SE*LIN  lin_offset" in out
    assert "├── Sum @0" in out


def test_extended_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["SE*MAT52 + RQ", "--vocabulary", "extended"]) == 0
    assert "mat52_lengthscale" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["SE + PRE"], "hint: did you mean 'PER'?"),
        (["SE@2", "--dims", "2"], "dimension index 2 out of range"),
        (["SE@0 + PER@1"], "inside a sum"),
        (["SE*MAT52", "--vocabulary", "paper"], "hint: --vocabulary extended (or the default"),
        (["SE", "--dims", "0"], "--dims must be a positive integer"),
    ],
)
def test_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.startswith("error: ")
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_caret_in_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["SE + PRE"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[1] == "  SE + PRE"
    assert lines[2] == "       ^^^"


def test_the_default_vocabulary_takes_every_registered_base_kernel(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``amorgp-grammar "SE + MAT52"`` works without options (the extended vocabulary's
    ids); a paper-vocabulary expression keeps the paper's ids."""
    from amorgp.kernel_grammar import EXTENDED_VOCABULARY

    assert main(["SE + MAT52"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary       : extended" in out
    symbols, _ = encode(
        [DimWiseStructure.parse("SE + MAT52", 1, EXTENDED_VOCABULARY)], EXTENDED_VOCABULARY
    )
    assert str(symbols[0]).splitlines()[0] in out
    assert main(["SE + PER"]) == 0
    assert "vocabulary       : paper" in capsys.readouterr().out
