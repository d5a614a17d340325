"""The README's quick-start Python example runs as written."""

from __future__ import annotations

from pathlib import Path

from amorgp.core.testing import run_readme_block

README = Path(__file__).parents[1] / "README.md"


def test_quick_start_example_runs() -> None:
    namespace = run_readme_block(README, after="## Quick start: amortized inference")
    mean, var = namespace["mean"], namespace["var"]
    assert mean.shape == (1,)  # type: ignore[attr-defined]
    assert float(var[0]) > 0  # type: ignore[index]
    assert len(namespace["many"]) == 3  # type: ignore[arg-type]
    fast, res = namespace["fast"], namespace["res"]
    assert res.log_marginal_likelihood >= fast.log_marginal_likelihood  # type: ignore[attr-defined]
    assert res.refine_steps > 0  # type: ignore[attr-defined]
    # noiseless data: the noise at its floor, where the steps may stall (and say so)
    assert res.refine_status in ("converged", "stalled")  # type: ignore[attr-defined]
    assert fast.refine_steps == 0  # type: ignore[attr-defined]
    assert fast.refine_status == "none"  # type: ignore[attr-defined]


def test_many_datasets_example_runs() -> None:
    namespace = run_readme_block(README, after="## Many datasets at once")
    fits = namespace["fits"]
    assert len(fits) == 21  # type: ignore[arg-type]
    assert sum(f.ok for f in fits) == 20  # type: ignore[attr-defined,union-attr]
    assert "DataError" in fits[-1].error  # type: ignore[index]
    assert fits[-1].index == 20  # type: ignore[index]
    assert float(namespace["var"][0]) > 0  # type: ignore[index]
