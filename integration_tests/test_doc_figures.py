"""The speed and regret figures of README, the package READMEs and the guide are those of
the benchmark JSON (``tools/doc_figures.py`` writes them; ``nox -s figures``)."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool(script: Callable[[str, str], ModuleType]) -> ModuleType:
    return script("tools/doc_figures.py", "doc_figures")


def test_every_page_holds_the_figures_of_the_json(tool: ModuleType) -> None:
    assert tool.stale() == [], "run `nox -s figures` (python tools/doc_figures.py)"


def test_every_page_has_figures_and_no_unknown_marker(tool: ModuleType) -> None:
    values = {name: fn() for name, fn in tool.FIGURES.items()}
    for page in tool.PAGES:
        text = (ROOT / page).read_text()
        names = re.findall(r"<!-- fig:([a-z0-9-]+) -->", text)
        assert names, f"{page} has no generated figure"
        assert set(names) <= set(values), page
        assert text.count("<!-- /fig -->") == len(names), page


def test_the_botorch_speed_up_in_readme_is_the_json_median_ratio() -> None:
    """Recomputed here from the raw fit times: median over all fits of all seeds."""
    data = json.loads((ROOT / "docs/benchmarks/botorch.json").read_text())
    readme = (ROOT / "README.md").read_text()
    for name, label in (("branin", "Branin"), ("hartmann6", "Hartmann-6")):
        res = data["results"][name]
        times = {
            m: statistics.median([t for run in res[m]["runs"] for t in run["fit_times"]])
            for m in ("botorch", "amortized")
        }
        assert f"{times['botorch'] / times['amortized']:.1f}x ({label})" in readme


def test_render_replaces_only_the_marked_text_and_refuses_unknown_names(
    tool: ModuleType,
) -> None:
    text = "a <!-- fig:x -->old<!-- /fig --> b | <!-- fig:y -->1<!-- /fig --> |"
    assert tool.render(text, {"x": "new", "y": "2"}) == (
        "a <!-- fig:x -->new<!-- /fig --> b | <!-- fig:y -->2<!-- /fig --> |"
    )
    with pytest.raises(KeyError, match="unknown figure 'x'"):
        tool.render(text, {"y": "2"})
