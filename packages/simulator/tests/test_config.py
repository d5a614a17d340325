"""SimulatorConfig: paper preset, validation, JSON round trip."""

from __future__ import annotations

import json

import pytest

from amorgp.kernel_grammar import EXTENDED_VOCABULARY, NOISE, PAPER_VOCABULARY, base_symbol
from amorgp.simulator import SimulatorConfig


def test_paper_preset_matches_appendix_a() -> None:
    # values of Bitzer et al. (2023), Appendix A (docs/architecture.md §4)
    cfg = SimulatorConfig.paper()
    assert (cfg.n_min, cfg.n_max) == (10, 250)
    assert cfg.d_max == 8
    assert cfg.p_dims == 0.25
    assert cfg.p_addends == 0.6
    assert cfg.vocabulary == PAPER_VOCABULARY
    assert (cfg.x_low, cfg.x_high) == (0.0, 1.0)
    assert 0.0 < cfg.positive_ratio < 1.0
    assert SimulatorConfig() == cfg


def test_finetune_mode_is_positive_only() -> None:
    assert SimulatorConfig.paper_finetune().positive_ratio == 1.0
    assert SimulatorConfig(n_max=20).finetune() == SimulatorConfig(n_max=20, positive_ratio=1.0)


def test_addend_cap_is_min_of_cap_and_vocabulary() -> None:
    assert SimulatorConfig(max_addends=10).addend_cap == len(PAPER_VOCABULARY)
    assert SimulatorConfig(max_addends=2).addend_cap == 2


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"n_min": -3}, "n_min"),
        ({"n_min": 0}, "n_min"),
        ({"n_min": 20, "n_max": 10}, "n_max"),
        ({"n_test": -1}, "n_test"),
        ({"d_max": 0}, "d_max"),
        ({"max_addends": 0}, "max_addends"),
        ({"p_dims": 0.0}, "p_dims"),
        ({"p_dims": 1.5}, "p_dims"),
        ({"p_addends": float("nan")}, "p_addends"),
        ({"positive_ratio": -0.1}, "positive_ratio"),
        ({"positive_ratio": 1.01}, "positive_ratio"),
        ({"jitter": 0.0}, "jitter"),
        ({"x_low": 1.0, "x_high": 1.0}, "x_low < x_high"),
        ({"n_max": 2.5}, "n_max"),
        ({"negative_rounds": 0}, "negative_rounds"),
        ({"size_buckets": 0}, "size_buckets"),
        ({"vocabulary": ("SE",)}, "Vocabulary"),
    ],
)
def test_invalid_configs_fail_at_construction(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SimulatorConfig(**overrides)


def test_empty_vocabulary_is_rejected() -> None:
    from amorgp.kernel_grammar import Vocabulary

    with pytest.raises(ValueError, match="at least one symbol"):
        SimulatorConfig(vocabulary=Vocabulary(()))


def test_json_round_trip_and_recorded_priors() -> None:
    cfg = SimulatorConfig(n_max=99, n_test=7, vocabulary=EXTENDED_VOCABULARY, positive_ratio=0.3)
    back = SimulatorConfig.from_json(cfg.to_json())
    assert back == cfg
    data = json.loads(cfg.to_json())
    assert data["priors"]["noise"] == NOISE.prior.to_dict()
    per = base_symbol("SE*PER")
    assert data["priors"]["SE*PER"] == {p.name: p.prior.to_dict() for p in per.params}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "not a simulator config"),
        ('{"format": "amorgp-simulator-config/1", "config": {"bogus": 1}}', "unknown"),
        ('{"format": "amorgp-simulator-config/1", "config": {"d_max": 0}}', "d_max"),
    ],
)
def test_bad_json_is_rejected(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SimulatorConfig.from_json(text)
