"""The amortization network's architecture: :class:`NetworkConfig` (a frozen dataclass that
round-trips through a plain JSON dict, so every checkpoint carries the exact architecture
it was built with; :mod:`amorgp.amortizer.networks.config` gathers it with the training
recipe and the presets)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from amorgp.amortizer.networks.registry import network_spec
from amorgp.kernel_grammar import PAPER_VOCABULARY, Vocabulary

__all__ = ["MAX_BLOCKS", "MAX_FF_MULT", "MAX_WIDTH", "NetworkConfig", "check_positive"]


MAX_WIDTH = 8192
"""Largest width (``d_data``, ``d_kernel``, ``head_hidden``, ``noise_hidden``) of a
:class:`NetworkConfig`: 16 times the paper's 512, far above any trained network."""
MAX_BLOCKS = 64
"""Largest count of each entry of ``data_blocks`` / ``kernel_blocks``."""
MAX_FF_MULT = 16
"""Largest ``ff_mult``."""


def check_positive(obj: object, names: tuple[str, ...], upper: int | None = None) -> None:
    """Raise ``ValueError`` unless every field ``names`` of the config ``obj`` is a positive
    integer (at most ``upper`` where given)."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"{type(obj).__name__}.{name} must be a positive integer, got {value!r}"
            )
        if upper is not None and value > upper:
            raise ValueError(f"{type(obj).__name__}.{name} must be at most {upper}, got {value}")


def _check_blocks(name: str, blocks: Any, count: int) -> tuple[int, ...]:
    """``blocks`` as ``count`` integers in ``[0, MAX_BLOCKS]`` (refused before any layer is built)."""
    ok = (
        isinstance(blocks, (tuple, list))
        and len(blocks) == count
        and all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in blocks)
    )
    if not ok:
        raise ValueError(f"{name} needs {count} non-negative integer counts, got {blocks!r}")
    if max(blocks) > MAX_BLOCKS:
        raise ValueError(f"{name} counts must be at most {MAX_BLOCKS} each, got {list(blocks)}")
    return tuple(int(b) for b in blocks)


_FLAGS = ("period_tokens", "relevance_tokens", "learned_gate")
"""The network's optional features: stored in its config only where on."""


@dataclass(frozen=True)
class NetworkConfig:
    """Architecture of the amortization network (Bitzer et al. 2023, §3.1).

    Attributes:
        model: a name of :mod:`amorgp.amortizer.networks.registry`: ``"structured"`` (the
            paper's network, any dimension-wise structure) or ``"ahgp-se-ard"`` (the
            fixed SE-ARD kernel comparison model).
        vocabulary: the base symbols the kernel encoder and the heads know.
        d_data: width ``H`` of the dataset encoder (embeddings ``h_i``).
        d_kernel: width ``K`` of the kernel encoder-decoder tokens.
        n_heads: attention heads of every Transformer block (divides both widths).
        ff_mult: hidden width of the Transformer feed-forward layers, in multiples of
            the block width.
        data_blocks: Transformer blocks of the dataset encoder's four stages:
            (points within each dimension, points of the dimension mean, points
            within each dimension after concatenation, dimensions).
        kernel_blocks: (Kernel-Encoder-Blocks of the encoder, Transformer blocks over
            dimensions, Kernel-Encoder-Blocks of the decoder).
        head_hidden: hidden width of each per-symbol parameter head.
        noise_hidden: hidden width of the noise head.
        period_tokens: the kernel tokens read the periodogram's strongest peak of their
            dimension, and the predicted periods follow it where it is clear
            (:mod:`amorgp.amortizer.networks.period_tokens`; structured network only).
        relevance_tokens: the kernel tokens read each dimension's nearest-neighbour
            relevance and lengthscales have an exponential tail
            (:mod:`amorgp.amortizer.networks.relevance_tokens`; structured network only).
        learned_gate: the period anchors' gate opens from
            :data:`~amorgp.amortizer.networks.period_tokens.LEARNED_GATE_CYCLES` cycles
            and a learnt correction from the dimension's embedding and its peak closes or
            opens it (:func:`~amorgp.amortizer.networks.period_tokens.learned_gate`;
            needs ``period_tokens``).
    """

    model: str = "structured"
    vocabulary: Vocabulary = PAPER_VOCABULARY
    d_data: int = 64
    d_kernel: int = 64
    n_heads: int = 4
    ff_mult: int = 2
    data_blocks: tuple[int, int, int, int] = (1, 1, 1, 1)
    kernel_blocks: tuple[int, int, int] = (2, 1, 2)
    head_hidden: int = 64
    noise_hidden: int = 64
    period_tokens: bool = False
    relevance_tokens: bool = False
    learned_gate: bool = False

    def __post_init__(self) -> None:
        spec = network_spec(self.model)
        for flag in _FLAGS:
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise ValueError(f"{flag} must be a bool, got {value!r}")
            if value and self.model != "structured":
                raise ValueError(f"{flag} needs the structured network, got {self.model!r}")
        if self.learned_gate and not self.period_tokens:
            raise ValueError("learned_gate needs period_tokens=True")
        check_positive(self, ("d_data", "d_kernel", "head_hidden", "noise_hidden"), MAX_WIDTH)
        check_positive(self, ("n_heads",), MAX_WIDTH)
        check_positive(self, ("ff_mult",), MAX_FF_MULT)
        for width in ("d_data", "d_kernel"):
            if getattr(self, width) % self.n_heads:
                raise ValueError(
                    f"{width}={getattr(self, width)} is not divisible by n_heads={self.n_heads}"
                )
        object.__setattr__(self, "data_blocks", _check_blocks("data_blocks", self.data_blocks, 4))
        object.__setattr__(
            self, "kernel_blocks", _check_blocks("kernel_blocks", self.kernel_blocks, 3)
        )
        spec.check_vocabulary(self.vocabulary)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["vocabulary"] = self.vocabulary.to_dict()
        out["data_blocks"] = list(self.data_blocks)
        out["kernel_blocks"] = list(self.kernel_blocks)
        for flag in _FLAGS:
            if not out[flag]:  # networks without it keep their stored config as it was
                del out[flag]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NetworkConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown network config keys {sorted(unknown)}")
        kwargs = dict(data)
        if "vocabulary" in kwargs:
            kwargs["vocabulary"] = Vocabulary.from_dict(kwargs["vocabulary"])
        for key in ("data_blocks", "kernel_blocks"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)
