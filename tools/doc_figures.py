"""The speed and regret figures of README, the package READMEs and the guide, written from
the benchmark JSON so that the pages cannot disagree with it or with each other.

A page holds a figure between inline markers, ``<!-- fig:NAME -->text<!-- /fig -->``
(HTML comments: invisible in the rendered Markdown, inside a table cell too).  This
script computes every ``NAME`` from ``docs/benchmarks/*.json`` and rewrites the text
between the markers; a marker whose name it does not know is an error.

Usage: ``python tools/doc_figures.py`` writes the pages; ``--check`` only reports the
pages whose figures differ from the JSON (exit status 1), as the test
``integration_tests/test_doc_figures.py`` does; ``nox -s figures`` runs the first.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "benchmarks"
PAGES = (
    "README.md",
    "packages/gpytorch/README.md",
    "docs/guide/gpytorch.md",
)
MARKER = re.compile(r"(<!-- fig:([a-z0-9-]+) -->)(.*?)(<!-- /fig -->)", re.DOTALL)
PROBLEMS = {"branin": "Branin", "hartmann6": "Hartmann-6", "trend": "trend"}


def _load(name: str) -> dict[str, Any]:
    return json.loads((BENCH / name).read_text())


def _fit_median(res: dict[str, Any], method: str) -> float:
    return statistics.median(t for r in res[method]["runs"] for t in r["fit_times"])


def _regret_median(res: dict[str, Any], method: str) -> float:
    return statistics.median(r["regret"][-1] for r in res[method]["runs"])


def _worst_gap(res: dict[str, Any], method: str) -> float:
    return min(g for r in res[method]["runs"] for g in r.get("mll_gaps", []))


def _each(text: Callable[[str, dict[str, Any]], str], methods: tuple[str, ...]) -> str:
    """``text(problem, result)`` joined over the problems of ``botorch.json`` that ran
    every one of ``methods``."""
    results = _load("botorch.json")["results"]
    parts = [
        text(name, res)
        for name, res in results.items()
        if all(m in res and res[m]["runs"] for m in methods)
    ]
    return ", ".join(parts)


def botorch_speedup() -> str:
    """``AmortizedFit()`` against ``fit_gpytorch_mll``: median fit time ratio per problem."""
    return _each(
        lambda n, r: (
            f"{_fit_median(r, 'botorch') / _fit_median(r, 'amortized'):.1f}x ({PROBLEMS[n]})"
        ),
        ("botorch", "amortized"),
    )


def botorch_protocol() -> str:
    meta = _load("botorch.json")["meta"]
    return (
        f"{meta['seeds']} seeds x {meta['iters']} iterations, qLogEI, one CPU thread of "
        f"a shared {meta['machine']} machine"
    )


def botorch_lean() -> str:
    """``AmortizedFit()`` against the closed-form objective from BoTorch's default start:
    time ratio and worst MLL gaps to ``fit_gpytorch_mll``."""
    return _each(
        lambda n, r: (
            f"{PROBLEMS[n]} {_fit_median(r, 'amortized') / _fit_median(r, 'lean-default'):.2f}x "
            f"the time, worst gap {_worst_gap(r, 'amortized'):.2g} vs "
            f"{_worst_gap(r, 'lean-default'):.2g}"
        ),
        ("amortized", "lean-default"),
    )


def botorch_regret_0() -> str:
    """Final regret (median over seeds) of ``AmortizedFit(0)``, of the network's start
    alone without calibration, and of ``fit_gpytorch_mll``."""
    return _each(
        lambda n, r: (
            f"{_regret_median(r, 'amortized-0'):.2g} on {PROBLEMS[n]} "
            f"(network alone {_regret_median(r, 'network-0'):.2g}, `fit_gpytorch_mll` "
            f"{_regret_median(r, 'botorch'):.2g})"
        ),
        ("amortized-0", "network-0", "botorch"),
    )


def _evaluations_median(res: dict[str, Any], method: str) -> float:
    return statistics.median(e for r in res[method]["runs"] for e in r["evaluations"])


def botorch_evaluations() -> str:
    """L-BFGS-B evaluations per fit (median) from the network's tuned start alone and from
    the model's default start (the closed-form objective, no network)."""
    return _each(
        lambda n, r: (
            f"{_evaluations_median(r, 'amortized-network'):.0f} against "
            f"{_evaluations_median(r, 'lean-default'):.0f} ({PROBLEMS[n]})"
        ),
        ("amortized-network", "lean-default"),
    )


def sklearn_speed() -> str:
    """One SE kernel at n = 500, d = 6, calibrated: fit + predict against scikit-learn's
    one-start ``GaussianProcessRegressor`` (``speed.json``)."""
    speed = _load("speed.json")
    sk = speed["after"]["timing"]["sklearn"]
    one, before = speed["after"]["timing"]["one"], speed["before"]["timing"]["one"]
    return (
        f"{sk / one:.0f}x faster ({1e3 * one:.0f} ms vs {sk:.2f} s; {sk / before:.0f}x before "
        "this release, same run)"
    )


FIGURES: dict[str, Callable[[], str]] = {
    "botorch-speedup": botorch_speedup,
    "botorch-protocol": botorch_protocol,
    "botorch-lean": botorch_lean,
    "botorch-regret-0": botorch_regret_0,
    "botorch-evaluations": botorch_evaluations,
    "sklearn-speed": sklearn_speed,
}


def render(text: str, values: dict[str, str]) -> str:
    """``text`` with every marked figure replaced by its value.

    Raises:
        KeyError: a marker names no known figure.
    """

    def repl(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in values:
            raise KeyError(f"unknown figure {name!r} (known: {', '.join(sorted(values))})")
        return f"{m.group(1)}{values[name]}{m.group(4)}"

    return MARKER.sub(repl, text)


def stale(root: Path = ROOT) -> list[str]:
    """The pages whose figures differ from the JSON."""
    values = {name: fn() for name, fn in FIGURES.items()}
    out = []
    for page in PAGES:
        text = (root / page).read_text()
        if render(text, values) != text:
            out.append(page)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale pages only")
    args = parser.parse_args()
    if args.check:
        pages = stale()
        for page in pages:
            print(f"{page}: figures differ from docs/benchmarks/*.json", file=sys.stderr)
        return 1 if pages else 0
    values = {name: fn() for name, fn in FIGURES.items()}
    for page in PAGES:
        path = ROOT / page
        text = path.read_text()
        new = render(text, values)
        if new != text:
            path.write_text(new)
            print(f"updated {page}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
