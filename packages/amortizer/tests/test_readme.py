"""The README's quick-start Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_quick_start_example_runs() -> None:
    text = README.read_text()
    section = text[text.index("## Quick start: amortized inference") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), str(README), "exec"), namespace)
    mean, var = namespace["mean"], namespace["var"]
    assert mean.shape == (1,)  # type: ignore[attr-defined]
    assert float(var[0]) > 0  # type: ignore[index]
    assert len(namespace["many"]) == 3  # type: ignore[arg-type]
    better, res = namespace["better"], namespace["res"]
    assert better.log_marginal_likelihood >= res.log_marginal_likelihood  # type: ignore[attr-defined]
