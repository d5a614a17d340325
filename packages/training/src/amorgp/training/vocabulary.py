"""Grow a trained network's vocabulary: new base kernels start from a stand-in's weights.

A structured network (:class:`~amorgp.amortizer.networks.model.AmortizedGP`) knows its symbols
through four vocabulary-indexed tensors: the kernel encoder's symbol embedding
``(V + 1, K)`` (row 0 is padding) and the symbol heads ``w1 (K, V * H)``, ``b1 (V, H)``,
``w2 (V, H, P)`` and ``b2 (V, P)``.  Every other weight is shared by all symbols.

:func:`extend_vocabulary` builds the same architecture over a larger vocabulary and
copies every known symbol's rows to its new id; a new symbol gets the rows of its
*stand-in*: the symbol with each new elementary kernel replaced by the old kernel given
for it (``{"MAT52": "SE"}``: ``MAT52`` starts as ``SE``, ``LIN*MAT52`` as ``SE*LIN``,
``SE*MAT52`` as ``SE``), and each of its parameter slots the head column of the
stand-in's parameter of the same role (``mat52_lengthscale`` -> ``se_lengthscale``, or
``lengthscale`` where the stand-in is one kernel).  The grown network predicts for old
kernels exactly what the network predicted before, and for a new one what it predicted
for the stand-in; training then tells them apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from amorgp.amortizer.networks.config import NetworkConfig
from amorgp.amortizer.networks.model import AmortizedGP
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import Vocabulary, base_symbol, canonical_symbol_name

__all__ = [
    "add_learned_gate",
    "add_period_tokens",
    "add_relevance_tokens",
    "convert_checkpoint",
    "extend_vocabulary",
    "stand_in_symbol",
]


def stand_in_symbol(
    name: str, stand_ins: Mapping[str, str], old: Vocabulary
) -> tuple[str, dict[str, str]]:
    """The old symbol standing in for ``name`` and the map of its parameter names.

    Raises:
        OptionError: a factor that is neither in ``old`` nor given a stand-in, or a
            stand-in that ``old`` does not hold.
    """
    sym = base_symbol(name)
    factors = [stand_ins.get(f, f) for f in sym.factors]
    unique = list(dict.fromkeys(factors))
    source = canonical_symbol_name(unique)
    if source not in old.symbols:
        raise OptionError(f"no stand-in for {name!r} in the vocabulary {list(old.symbols)}")
    src = base_symbol(source)
    mapping: dict[str, str] = {}
    for f, g in zip(sym.factors, factors, strict=True):
        mine = sym.factor_param_names(f)
        theirs = src.factor_param_names(g)
        for elem, new_name in mine.items():
            # the stand-in's parameter of the same role (elementary parameter names agree
            # between a kernel and its stand-in: variance, lengthscale...)
            mapping[new_name] = theirs.get(elem, theirs.get("lengthscale", "variance"))
    mapping["variance"] = "variance"
    return source, mapping


def extend_vocabulary(
    model: AmortizedGP, network: NetworkConfig, vocabulary: Vocabulary, stand_ins: Mapping[str, str]
) -> tuple[AmortizedGP, NetworkConfig]:
    """``model`` grown to ``vocabulary`` (module docstring).

    Args:
        model: a trained structured network over ``network.vocabulary``.
        network: its architecture.
        vocabulary: the new vocabulary; it must contain every old symbol.
        stand_ins: for each new elementary kernel, the old one whose weights it starts from.

    Returns:
        The new network (float32, on the CPU) and its architecture.

    Raises:
        OptionError: an old symbol missing from ``vocabulary``, or a symbol without a
            stand-in.
    """
    old = network.vocabulary
    missing = [s for s in old.symbols if s not in vocabulary.symbols]
    if missing:
        raise OptionError(f"the new vocabulary drops {missing}; it must extend the old one")
    new_cfg = replace(network, vocabulary=vocabulary)
    grown = AmortizedGP(new_cfg)
    src = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out = {k: v.clone() for k, v in src.items()}
    H = model.heads.hidden
    V_new, P_new = len(vocabulary), vocabulary.max_params
    K = src["heads.w1"].shape[0]
    emb = torch.zeros(V_new + 1, src["kernel_encoder.embed.weight"].shape[1])
    w1 = torch.zeros(K, V_new * H)
    b1 = torch.zeros(V_new, H)
    w2 = torch.zeros(V_new, H, P_new)
    b2 = torch.zeros(V_new, P_new)
    for i, name in enumerate(vocabulary.symbols):
        source, params = stand_in_symbol(name, stand_ins, old)
        j = old.symbols.index(source)
        emb[i + 1] = src["kernel_encoder.embed.weight"][j + 1]
        w1[:, i * H : (i + 1) * H] = src["heads.w1"][:, j * H : (j + 1) * H]
        b1[i] = src["heads.b1"][j]
        theirs = base_symbol(source).param_names
        for p, pname in enumerate(base_symbol(name).param_names):
            q = theirs.index(params[pname])
            w2[i, :, p] = src["heads.w2"][j, :, q]
            b2[i, p] = src["heads.b2"][j, q]
    out.update(
        {
            "kernel_encoder.embed.weight": emb,
            "heads.w1": w1,
            "heads.b1": b1,
            "heads.w2": w2,
            "heads.b2": b2,
        }
    )
    grown.load_state_dict(out)
    return grown, new_cfg


def add_period_tokens(
    model: AmortizedGP, network: NetworkConfig
) -> tuple[AmortizedGP, NetworkConfig]:
    """``model`` with period tokens (module docstring).

    Returns:
        The new network (float32, on the CPU) and its architecture
        (``period_tokens=True``).

    Raises:
        OptionError: the network has period tokens already.
    """
    return _with_tokens(model, network, "period_tokens")


def add_relevance_tokens(
    model: AmortizedGP, network: NetworkConfig
) -> tuple[AmortizedGP, NetworkConfig]:
    """``model`` with relevance tokens (:mod:`amorgp.amortizer.networks.relevance_tokens`):
    every weight kept, the new projection at zero; every output is as before except
    lengthscales whose raw value is above the tail's knee (a lengthscale above about 2.1
    input ranges), which grow faster.

    Raises:
        OptionError: the network has relevance tokens already.
    """
    return _with_tokens(model, network, "relevance_tokens")


def add_learned_gate(
    model: AmortizedGP, network: NetworkConfig
) -> tuple[AmortizedGP, NetworkConfig]:
    """``model`` (with period tokens) with a learnt gate of its period anchors
    (``NetworkConfig.learned_gate``): every weight kept, the gate's correction at zero, so
    the gate opens from :data:`~amorgp.amortizer.networks.period_tokens.LEARNED_GATE_CYCLES`
    cycles instead of :data:`~amorgp.amortizer.networks.period_tokens.MIN_CYCLES` until
    fine-tuning learns the correction; every output is as before except periods anchored
    at peaks of those few cycles.

    Raises:
        OptionError: the network has no period tokens, or a learnt gate already.
    """
    if not network.period_tokens:
        raise OptionError("a learnt gate needs a network with period tokens")
    return _with_tokens(model, network, "learned_gate")


def _with_tokens(
    model: AmortizedGP, network: NetworkConfig, flag: str
) -> tuple[AmortizedGP, NetworkConfig]:
    if getattr(network, flag):
        raise OptionError(f"the network reads {flag.replace('_', ' ')} already")
    on: dict[str, Any] = {flag: True}
    new_cfg = replace(network, **on)
    grown = AmortizedGP(new_cfg)
    weights = {k: v.detach().cpu().to(torch.float32) for k, v in model.state_dict().items()}
    missing, unexpected = grown.load_state_dict(weights, strict=False)
    new = {
        "period_tokens": ("period_proj.",),
        "relevance_tokens": ("relevance_proj.",),
        "learned_gate": ("gate_proj.",),
    }[flag]
    if unexpected or not all(k.startswith(new) for k in missing):
        raise OptionError(f"the weights do not fit the network: {unexpected or missing}")
    return grown, new_cfg


def convert_checkpoint(
    source: str | Path,
    out: str | Path,
    *,
    period: bool = True,
    relevance: bool = True,
    learned_gate: bool = False,
) -> Path:
    """Write ``source`` (a checkpoint directory) to ``out`` with period and/or relevance
    tokens added (:func:`add_period_tokens`, :func:`add_relevance_tokens`), keeping its
    training recipe and record (:data:`~amorgp.training.runstate.TRAINING_RECORD`), so
    that ``amorgp train --from out`` continues with it and counts the datasets the source
    had seen.  With ``learned_gate``, also the learnt gate of the period anchors
    (:func:`add_learned_gate`; it needs the period tokens, asked for or present).  Kinds
    the network has already are left as they are.

    Raises:
        OptionError: nothing asked for, ``out`` exists, or a learnt gate without period
            tokens.
    """
    from amorgp.amortizer.networks.checkpoint import load_checkpoint, save_checkpoint
    from amorgp.training.runstate import training_record

    if not (period or relevance or learned_gate):
        raise OptionError(
            "nothing to add: ask for period tokens, relevance tokens or a learnt gate"
        )
    out = Path(out)
    if out.exists():
        raise OptionError(f"{out} exists; give a new folder for the converted checkpoint")
    ckpt = load_checkpoint(source)
    network = ckpt.network
    model = ckpt.model
    if not isinstance(model, AmortizedGP):
        raise OptionError(f"{source} holds no structured network (AmortizedGP) to convert")
    if period and not network.period_tokens:
        model, network = add_period_tokens(model, network)
    if relevance and not network.relevance_tokens:
        model, network = add_relevance_tokens(model, network)
    if learned_gate and not network.learned_gate:
        model, network = add_learned_gate(model, network)
    return save_checkpoint(out, model.float(), network, meta=training_record(ckpt.meta))


def main(argv: list[str] | None = None) -> None:
    """``python -m amorgp.training.vocabulary SOURCE OUT [--no-period] [--no-relevance]
    [--learned-gate]``:
    :func:`convert_checkpoint` (for a GPU machine without a shell to write Python in)."""
    import argparse

    ap = argparse.ArgumentParser(description="Add period and relevance tokens to a checkpoint.")
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--no-period", action="store_true")
    ap.add_argument("--no-relevance", action="store_true")
    ap.add_argument(
        "--learned-gate", action="store_true", help="also learn the gate of the period anchors"
    )
    a = ap.parse_args(argv)
    try:
        path = convert_checkpoint(
            a.source,
            a.out,
            period=not a.no_period,
            relevance=not a.no_relevance,
            learned_gate=a.learned_gate,
        )
    except OptionError as exc:
        ap.exit(2, f"error: {exc}\n")
    print(path)


if __name__ == "__main__":
    main()
