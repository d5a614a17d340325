"""``amorgp model-info``: parameter counts of a preset or a checkpoint.

Examples::

    amorgp model-info
    amorgp model-info --preset small
    amorgp model-info runs/small/last
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from torch import nn

from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.registry import network_names, network_spec
from amorgp.cli._errors import AmorgpCommand
from amorgp.cli._output import emit, json_document, json_option, json_text

__all__ = ["component_counts", "model_info"]


def component_counts(model: nn.Module) -> list[tuple[str, int]]:
    """``(child name, parameters)`` of each top-level child, then ``("total", n)``."""
    rows = [
        (name, sum(p.numel() for p in child.parameters())) for name, child in model.named_children()
    ]
    return [*rows, ("total", sum(p.numel() for p in model.parameters()))]


@click.command("model-info", cls=AmorgpCommand)
@click.option(
    "--preset", "preset_name", type=click.Choice(sorted(PRESETS)), help="Describe a preset."
)
@click.option(
    "--model",
    type=click.Choice(list(network_names())),
    default="structured",
    show_default=True,
)
@click.argument("checkpoint", required=False, type=click.Path(path_type=Path))
@json_option()
def model_info(preset_name: str | None, model: str, checkpoint: Path | None, as_json: bool) -> None:
    """Parameter counts of a preset (default: all presets) or of a CHECKPOINT (a checkpoint
    directory or the name of a bundled model, e.g. default)."""
    from amorgp.amortizer.networks.bundled import resolve_checkpoint
    from amorgp.amortizer.networks.checkpoint import load_checkpoint
    from amorgp.amortizer.networks.model import build_model

    if checkpoint is not None and preset_name is not None:
        raise click.UsageError("give either --preset or CHECKPOINT, not both")
    doc: dict[str, Any] = {}
    if checkpoint is not None:
        ckpt = load_checkpoint(resolve_checkpoint(checkpoint))
        if as_json:
            doc["checkpoint"] = {
                "path": str(checkpoint),
                "model": ckpt.network.model,
                "vocabulary": list(ckpt.network.vocabulary.symbols),
                "tokens": _tokens(ckpt.network),
                "learned_gate": bool(getattr(ckpt.network, "learned_gate", False)),
                "parameters": dict(component_counts(ckpt.model)),
                "progress": ckpt.meta.get("progress", {}),
                "validation": ckpt.meta.get("validation", {}),
            }
            emit(json_text(json_document("model-info", doc), indent=2))
            return
        emit(
            f"checkpoint {checkpoint}: {ckpt.network.model}, vocabulary {', '.join(ckpt.network.vocabulary.symbols)}"
        )
        tokens = _tokens(ckpt.network)
        gate = " (a learnt gate)" if getattr(ckpt.network, "learned_gate", False) else ""
        emit(f"  reads: the data{''.join(f', {t} tokens' for t in tokens)}{gate}")
        for name, n in component_counts(ckpt.model):
            emit(f"  {name:<18} {n:>12,d}")
        emit(f"  progress: {json_text(ckpt.meta.get('progress', {}))}")
        emit(f"  validation: {json_text(ckpt.meta.get('validation', {}))}")
        return
    names = [preset_name] if preset_name else list(PRESETS)
    for name in names:
        network = PRESETS[name].network
        network = network_spec(model).configure(network)
        counts = component_counts(build_model(network))
        total = counts[-1][1]
        if as_json:
            doc.setdefault("presets", {})[name] = {
                "model": network.model,
                "description": PRESETS[name].description,
                "parameters": dict(counts),
            }
            continue
        emit(
            f"{name} ({network.model}): {total:,d} parameters, {4 * total / 2**20:.1f} MiB float32 — {PRESETS[name].description}"
        )
        for comp, n in counts[:-1]:
            emit(f"  {comp:<18} {n:>12,d}")
    if as_json:
        emit(json_text(json_document("model-info", doc), indent=2))


def _tokens(network: Any) -> list[str]:
    """The data features the network reads beside the points (``period``, ``relevance``)."""
    flags = (("period", "period_tokens"), ("relevance", "relevance_tokens"))
    return [name for name, flag in flags if getattr(network, flag, False)]
