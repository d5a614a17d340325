"""The README's Python example runs as written, and its commands are the group's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from amorgp.cli import COMMANDS

README = Path(__file__).parents[1] / "README.md"


def test_python_example_runs() -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), str(README), "exec"), namespace)
    result = namespace["result"]
    assert result.exit_code == 0  # type: ignore[attr-defined]
    document = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert document["command"] == "model-info"


def test_every_command_named_in_the_readme_exists() -> None:
    text = README.read_text()
    named = set(re.findall(r"`amorgp ([a-z][a-z-]*)", text))
    named |= set(re.findall(r"^amorgp ([a-z][a-z-]*)", text, re.M))
    assert named <= set(COMMANDS)
    assert set(COMMANDS) <= named | {"search"}  # search shares the ensemble row
