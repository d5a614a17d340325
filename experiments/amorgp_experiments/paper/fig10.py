"""Fig. 10 of the paper: the network with vs without the noise fine-tuning phase.

The two checkpoints of ``config.fig10_models`` (without, with fine-tuning; default
``("default-phase1", "small-d8-c1142k")``, the same network before and after) on the simulated test set of Fig. 2b, each network
alone (method ``network@MODEL``: without the candidate networks a checkpoint may name,
so that the rows differ by the fine-tuning only).  A name that is not a bundled model falls back, for the phase-1 network,
to ``docs/training/campaign/phase1-latest`` where that folder exists (a repository
checkout), else the experiment is skipped with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.fig2b import sim_settings
from amorgp_experiments.paper.simulated import markdown_table, simulated_cells, summarise_methods

__all__ = ["PHASE1_FALLBACK", "resolve_models", "run"]

PHASE1_FALLBACK = Path("docs/training/campaign/phase1-latest")


def resolve_models(ctx: RunContext) -> dict[str, str] | None:
    """``{"without fine-tuning": model, "with fine-tuning": model}``, or ``None`` (noted)."""
    without, with_ = ctx.config.fig10_models
    if ctx.identity(without) is None and (PHASE1_FALLBACK / "checkpoint.json").exists():
        ctx.note("fig10", f"{without!r} is not a bundled model; using {PHASE1_FALLBACK}")
        without = str(PHASE1_FALLBACK)
    missing = [m for m in (without, with_) if ctx.identity(m) is None]
    if missing:
        ctx.note("fig10", f"model(s) {', '.join(missing)} not available; Fig. 10 skipped")
        return None
    return {"without fine-tuning": without, "with fine-tuning": with_}


def run(ctx: RunContext) -> dict[str, Any] | None:
    """Both networks (and the ground truth) on the simulated set of Fig. 2b."""
    models = resolve_models(ctx)
    if models is None:
        return None
    methods = [f"network@{m}" for m in models.values()]
    per = simulated_cells(ctx, "prior", sim_settings(ctx), [*methods, "ground truth"], 1, "fig10")
    labels = dict(zip(methods, models, strict=True)) | {"ground truth": "ground truth"}
    per = {labels[m]: v for m, v in per.items()}
    return {"models": models, "pairs": per, "summary": summarise_methods(per)}


def markdown(result: dict[str, Any]) -> list[str]:
    models = ", ".join(f"{k}: `{v}`" for k, v in result["models"].items())
    return [f"Simulated set of Fig. 2b; {models}.", "", *markdown_table(result["summary"]), ""]


def figure(result: dict[str, Any], path: Any) -> bool:
    return False


def findings(result: dict[str, Any]) -> str:
    s = result["summary"]
    keys = ("without fine-tuning", "with fine-tuning")
    if not all(k in s for k in keys):
        return "Not every network was computed."
    a, b = (s[k]["nll"]["median"] for k in keys)
    return (
        f"Median test NLL per point {a:.3f} without and {b:.3f} with noise fine-tuning "
        f"({'better' if b < a else 'not better'} with it). The paper introduces the "
        "phase to improve the noise estimate (its Fig. 10 numbers are not in this repository)."
    )
