"""The README's example runs and its parameter table matches the registry."""

from __future__ import annotations

import re
from pathlib import Path

from amorgp.core.testing import readme_output
from amorgp.kernel_grammar import EXTENDED_VOCABULARY, FLOORS, NOISE

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_example_runs_and_prints_what_the_readme_says() -> None:
    out, expected = readme_output(README)
    assert out.endswith(expected)


def test_parameter_table_matches_registry() -> None:
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in README.read_text(encoding="utf-8").splitlines()
        if re.match(r"\|\s*(`[A-Z0-9*]+`|noise.*)?\s*\|\s*(\d+|–)\s*\|", line)
    ]
    expected = []
    for s in EXTENDED_VOCABULARY:
        for j, p in enumerate(s.params):
            expected.append(
                [
                    f"`{s.name}`" if j == 0 else "",
                    str(j),
                    f"`{p.name}`",
                    p.kind.value,
                    f"floor {FLOORS[p.kind]:g}",
                    str(p.prior),
                ]
            )
    expected.append(
        [
            "noise (one per dataset)",
            "–",
            "`noise`",
            "noise",
            f"floor {FLOORS[NOISE.kind]:g}",
            str(NOISE.prior),
        ]
    )
    assert rows == expected
