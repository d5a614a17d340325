"""The repository README's Python example runs as written and without a warning (the
package READMEs have their own tests; the guide's examples are run by the integration
tests)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[3] / "README.md"
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


@pytest.mark.skipif(not README.is_file(), reason="not run from a repository checkout")
def test_the_readme_python_example_runs_without_warnings() -> None:
    blocks = BLOCK.findall(README.read_text(encoding="utf-8"))
    assert blocks, "the README lost its Python example"
    namespace: dict[str, object] = {"__name__": "readme"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i, block in enumerate(blocks):
            exec(compile(block, f"README.md (python block {i + 1})", "exec"), namespace)
    assert "mean" in namespace
