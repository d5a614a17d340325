"""The simulator settings of a training run come from the network's registry entry."""

from __future__ import annotations

import dataclasses

import pytest

from amorgp.amortizer.networks.config import PRESETS, NetworkConfig, TrainConfig
from amorgp.amortizer.networks.registry import (
    _REGISTRY,
    SE_VOCABULARY,
    NetworkSpec,
    network_spec,
    register_network,
)
from amorgp.kernel_grammar import PAPER_VOCABULARY
from amorgp.training.train import simulator_config

TINY = PRESETS["tiny"].network


def test_simulator_adjustments_come_from_the_spec() -> None:
    tc = TrainConfig(n_max=20, max_dims=2)
    plain = simulator_config(TINY, tc)
    assert plain.positive_ratio == 0.5
    ahgp = simulator_config(network_spec("ahgp-se-ard").configure(TINY), tc)
    assert ahgp.max_addends == 1
    assert ahgp.positive_ratio == 1.0
    assert ahgp.vocabulary == SE_VOCABULARY
    with pytest.raises(ValueError, match="trained with the vocabulary"):
        simulator_config(dataclasses.replace(TINY, model="ahgp-se-ard"), tc)


def test_a_user_network_s_simulator_settings_reach_the_run() -> None:
    structured = network_spec("structured").target
    spec = NetworkSpec("user-net", structured, "test network", simulator={"positive_ratio": 1.0})
    register_network(spec)
    try:
        net = NetworkConfig(model="user-net", vocabulary=PAPER_VOCABULARY)
        assert simulator_config(net, TrainConfig()).positive_ratio == 1.0
    finally:
        _REGISTRY.pop("user-net", None)
