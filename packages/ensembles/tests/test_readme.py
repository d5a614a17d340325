"""The README's example runs."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_example_runs() -> None:
    text = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
