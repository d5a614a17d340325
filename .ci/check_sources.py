"""Fail if an ``amorgp-*`` distribution did not come from this repository.

Usage: ``python .ci/check_sources.py kernel-grammar diff-linalg ...``: each named
package must be installed editable from ``packages/<name>``; any other
``amorgp-*`` distribution found in the environment is an error too.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]


def main(expected: list[str]) -> int:
    problems = []
    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.startswith("amorgp-"):
            continue
        raw = dist.read_text("direct_url.json")
        info = json.loads(raw) if raw else {}
        url = info.get("url", "")
        path = Path(unquote(urlparse(url).path)).resolve() if url.startswith("file:") else None
        editable = info.get("dir_info", {}).get("editable", False)
        ok = path is not None and editable and path.parent == ROOT / "packages"
        found[name] = path
        if not ok:
            problems.append(
                f"{name} {dist.version} was not installed editable from {ROOT}/packages "
                f"(source: {url or 'a package index'})"
            )
    for pkg in expected:
        if f"amorgp-{pkg}" not in found:
            problems.append(f"amorgp-{pkg} is not installed")
    for p in problems:
        print(f"check_sources: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
