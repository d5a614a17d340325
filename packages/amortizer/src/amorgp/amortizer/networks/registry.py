"""The registry of amortization networks: a name in a config -> what to build and how to train it.

A :class:`NetworkSpec` says, for one value of ``NetworkConfig.model``, which class
implements the network, which vocabularies it accepts, how the training prior is
adjusted for it and whether it predicts any structure of its vocabulary.  Code that
must behave differently per network reads the spec instead of testing names::

    spec = network_spec(config.model)
    model = spec.build(config)              # == build_model(config)
    sim_cfg = spec.adjust_simulator(sim_cfg)

Registered here:

===============  ===================================================================
``structured``   :class:`~amorgp.amortizer.networks.model.AmortizedGP`, the paper's network
                 (any dimension-wise structure of its vocabulary)
``ahgp-se-ard``  :class:`~amorgp.amortizer.networks.ahgp.AHGPSEARD`, the fixed SE-ARD comparison
                 model (one SE per dimension; trained with :data:`SE_VOCABULARY`,
                 one addend, positive pairs only)
===============  ===================================================================

The classes are referenced as ``"module:Class"`` and imported on first use, so
the registry sits below the modules that define the networks (no import cycle).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from amorgp.kernel_grammar import Vocabulary

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "SE_VOCABULARY",
    "NetworkSpec",
    "build_model",
    "network_names",
    "network_spec",
    "register_network",
]

SE_VOCABULARY = Vocabulary(("SE",), "se")
"""Vocabulary of the AHGP-SE-ARD model (one SE per dimension)."""

_C = TypeVar("_C")


class _Network(Protocol):
    """What a spec reads of a network configuration
    (:class:`~amorgp.amortizer.networks.config.NetworkConfig`, which reads this registry)."""

    @property
    def model(self) -> str: ...

    @property
    def vocabulary(self) -> Vocabulary: ...


_N = TypeVar("_N", bound=_Network)


@dataclass(frozen=True)
class NetworkSpec:
    """One registered network.

    Attributes:
        name: the value of ``NetworkConfig.model``.
        target: the network class, or ``"module:Class"`` imported on first use; it is
            called with the :class:`~amorgp.amortizer.networks.config.NetworkConfig`.
        description: one line for help texts.
        required_symbols: symbols every vocabulary of this network must contain.
        training_vocabulary: the one vocabulary the network is trained with (None:
            the config's).
        simulator: ``SimulatorConfig`` fields overridden when training this network.
        any_structure: True when the network predicts parameters for any structure
            of its vocabulary (False for a fixed kernel family).
    """

    name: str
    target: str | type[Any]
    description: str = ""
    required_symbols: tuple[str, ...] = ()
    training_vocabulary: Vocabulary | None = None
    simulator: Mapping[str, Any] = field(default_factory=dict)
    any_structure: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "simulator", MappingProxyType(dict(self.simulator)))

    def network_class(self) -> type[nn.Module]:
        """The class that implements the network (imported on first use)."""
        if not isinstance(self.target, str):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def check_vocabulary(self, vocab: Vocabulary) -> None:
        """Raise ``ValueError`` if ``vocab`` lacks a symbol the network needs."""
        for symbol in self.required_symbols:
            if symbol not in vocab:
                raise ValueError(f"the {self.name} model needs {symbol} in its vocabulary")

    def check_training(self, vocab: Vocabulary) -> None:
        """Raise ``ValueError`` if the network is not trained with ``vocab``."""
        if self.training_vocabulary is not None and vocab != self.training_vocabulary:
            raise ValueError(
                f"the {self.name} model is trained with the vocabulary "
                f"{list(self.training_vocabulary.symbols)}, got {list(vocab.symbols)}"
            )

    def configure(self, network: _N) -> _N:
        """``network`` switched to this model (and to its training vocabulary, if any)."""
        vocab = self.training_vocabulary or network.vocabulary
        return dataclasses.replace(network, model=self.name, vocabulary=vocab)  # type: ignore[type-var]

    def adjust_simulator(self, config: _C) -> _C:
        """``config`` (a ``SimulatorConfig``) with this network's overrides applied."""
        if not self.simulator:
            return config
        return dataclasses.replace(config, **self.simulator)  # type: ignore[type-var]

    def build(self, config: _Network) -> nn.Module:
        """A freshly initialised network for ``config``."""
        return self.network_class()(config)


_REGISTRY: dict[str, NetworkSpec] = {}


def register_network(spec: NetworkSpec, *, replace: bool = False) -> NetworkSpec:
    """Add ``spec`` to the registry (``replace=True`` to overwrite a name).

    Raises:
        ValueError: the name is taken and ``replace`` is False, or it is empty.
    """
    if not spec.name:
        raise ValueError("a network needs a non-empty name")
    if spec.name in _REGISTRY and not replace:
        raise ValueError(f"a network named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def network_names() -> tuple[str, ...]:
    """The registered network names, in registration order (e.g. for a CLI choice)."""
    return tuple(_REGISTRY)


def network_spec(name: str) -> NetworkSpec:
    """The spec registered as ``name``.

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(n) for n in _REGISTRY)
        raise ValueError(f"unknown model {name!r}; use one of {known}") from None


def build_model(config: _Network) -> nn.Module:
    """Instantiate the network named by ``config.model``."""
    return network_spec(config.model).build(config)


register_network(
    NetworkSpec(
        "structured",
        "amorgp.amortizer.networks.model:AmortizedGP",
        "the paper's network: any dimension-wise structure of its vocabulary",
    )
)
register_network(
    NetworkSpec(
        "ahgp-se-ard",
        "amorgp.amortizer.networks.ahgp:AHGPSEARD",
        "the fixed SE-ARD kernel comparison model",
        required_symbols=("SE",),
        training_vocabulary=SE_VOCABULARY,
        simulator={"max_addends": 1, "positive_ratio": 1.0},
        any_structure=False,
    )
)
