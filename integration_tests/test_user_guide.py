"""Every Python example of the user guide (``docs/guide/*.md``) runs as written.

The ```python blocks of one page run in order in one namespace, from the repository
root (the examples read ``data/*.csv`` by relative path).  A block whose first line is
``# not run`` (it needs a GPU, KeOps or a long run) is skipped; one whose first line is
``# requires: a, b`` runs only where those modules import (e.g. the ``gpytorch`` extra),
else the page's later blocks are skipped with it.  The test also checks that skipped
blocks stay few, so that the guide remains executed.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = "# not run"
REQUIRES = "# requires:"
PAGES = sorted(GUIDE.glob("*.md"))


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of ``page``, in order."""
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def test_the_guide_has_runnable_examples() -> None:
    blocks = [b for page in PAGES for b in python_blocks(page)]
    skipped = [b for b in blocks if b.lstrip().startswith(NOT_RUN)]
    assert len(blocks) >= 10, "the guide lost its Python examples"
    assert len(skipped) <= len(blocks) // 3, f"{len(skipped)} of {len(blocks)} blocks are not run"


def _modules(line: str) -> list[str]:
    """The module names of a ``# requires: a, b`` line."""
    return [m.strip() for m in line.removeprefix(REQUIRES).split(",") if m.strip()]


def test_every_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.name for p in PAGES if f"guide/{p.name}" not in nav]
    assert not missing, f"add {missing} to the nav of mkdocs.yml"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page_examples_run(page: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": f"guide_{page.stem}"}
    for i, block in enumerate(python_blocks(page)):
        first = block.lstrip().splitlines()[0] if block.strip() else ""
        if first.startswith(NOT_RUN):
            continue
        if first.startswith(REQUIRES):
            missing = [m for m in _modules(first) if importlib.util.find_spec(m) is None]
            if missing:
                pytest.skip(f"{page.name} needs {', '.join(missing)} from block {i + 1} on")
        code = compile(block, f"{page.relative_to(ROOT)} (python block {i + 1})", "exec")
        exec(code, namespace)
    assert os.getcwd() == str(ROOT)
