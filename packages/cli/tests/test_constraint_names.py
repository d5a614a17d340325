"""``--fixed``/``--bounds`` names: indices are ASCII digits of bounded length; anything
else is one usage line (exit 2), never a traceback, and the name is echoed cut short."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from amorgp.cli import main
from amorgp.cli._common import _constraint_name


@pytest.mark.parametrize(
    "name",
    [
        "².0.lengthscale",  # a superscript digit: str.isdigit() is True, int() refuses it
        "0.³.lengthscale",
        "١.0.lengthscale",  # an Arabic-Indic digit: int() would read it as 1
        "1234567.0.lengthscale",  # seven digits: past the bound
        "0." + "9" * 5000 + ".lengthscale",  # past int's 4300-digit limit
    ],
)
def test_non_ascii_or_overlong_indices_are_a_usage_error(name: str) -> None:
    with pytest.raises(click.BadParameter, match=r"is not a hyperparameter name") as info:
        _constraint_name(name, "--fixed")
    assert len(info.value.format_message()) < 400


def test_ascii_indices_up_to_six_digits_are_names() -> None:
    assert _constraint_name("0.0.lengthscale", "--fixed") == (0, 0, "lengthscale")
    assert _constraint_name("999999.12.period", "--bounds") == (999_999, 12, "period")
    assert _constraint_name("noise", "--fixed") == "noise"


@pytest.mark.parametrize(
    "flags",
    [
        ["--fixed", "².0.lengthscale=1"],
        ["--bounds", "0." + "7" * 5000 + ".lengthscale=0.1:0.2"],
    ],
)
def test_the_command_line_gives_one_usage_line(flags: list[str], tmp_path: Path) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text("x,y\n0,1\n1,2\n2,3\n")
    res = CliRunner().invoke(main, ["infer", str(csv), "-k", "SE", *flags])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "is not a hyperparameter name" in res.output
    assert "Traceback" not in res.output
    assert len(res.output) < 1500


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("noise", "noise"),
        ("noise_level", "noise"),
        ("0.0.lengthscale", (0, 0, "lengthscale")),
        ("d0.0.lengthscale", (0, 0, "lengthscale")),
        ("d1.2.SE.lengthscale", (1, 2, "lengthscale")),
    ],
)
def test_the_estimators_printed_names_are_read_too(text: str, name: object) -> None:
    """One naming scheme: what the estimator prints is accepted on the command line."""
    assert _constraint_name(text, "--fixed") == name
