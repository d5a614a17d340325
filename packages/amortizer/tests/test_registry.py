"""The network registry: lookup, building, training adjustments, user registrations."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from amorgp.amortizer import testing
from amorgp.amortizer.networks.ahgp import AHGPSEARD
from amorgp.amortizer.networks.checkpoint import load_checkpoint
from amorgp.amortizer.networks.config import PRESETS, NetworkConfig
from amorgp.amortizer.networks.model import AmortizedGP
from amorgp.amortizer.networks.network import AmortizationNetwork, DatasetEncoding, Prediction
from amorgp.amortizer.networks.registry import (
    _REGISTRY,
    SE_VOCABULARY,
    NetworkSpec,
    build_model,
    network_names,
    network_spec,
    register_network,
)
from amorgp.kernel_grammar import PAPER_VOCABULARY, Vocabulary
from amorgp.lazy_kernels import PaddedBatch

TINY = PRESETS["tiny"].network
ROOT = Path(__file__).resolve().parents[3]


def test_builtin_networks_and_their_specs() -> None:
    assert network_names()[:2] == ("structured", "ahgp-se-ard")
    assert network_spec("structured").network_class() is AmortizedGP
    ahgp = network_spec("ahgp-se-ard")
    assert ahgp.network_class() is AHGPSEARD
    assert not ahgp.any_structure
    assert network_spec("structured").any_structure
    assert isinstance(build_model(TINY), AmortizedGP)
    net = ahgp.configure(TINY)
    assert net.model == "ahgp-se-ard"
    assert net.vocabulary == SE_VOCABULARY
    assert isinstance(build_model(net), AHGPSEARD)
    with pytest.raises(
        ValueError, match="unknown model 'gpt'; use one of 'structured', 'ahgp-se-ard'"
    ):
        network_spec("gpt")


def test_config_validates_names_and_vocabularies_through_the_registry() -> None:
    with pytest.raises(ValueError, match="unknown model"):
        NetworkConfig(model="gpt")
    with pytest.raises(ValueError, match="needs SE"):
        NetworkConfig(model="ahgp-se-ard", vocabulary=Vocabulary(("LIN",)))
    with pytest.raises(ValueError, match="registered as 'ahgp-se-ard'"):
        AHGPSEARD(TINY)
    with pytest.raises(ValueError, match="registered as 'structured'"):
        AmortizedGP(dataclasses.replace(TINY, model="ahgp-se-ard"))


class _MeanNet(AmortizationNetwork):
    """A user network: every parameter 1 + mean(y) ** 2, noise 0.1 (for the registry test)."""

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        self.check_config(config)
        self.config, self.vocabulary = config, config.vocabulary
        self.scale = torch.nn.Parameter(torch.ones(()))

    def encode_dataset(self, batch: PaddedBatch) -> DatasetEncoding:
        m = (batch.y * batch.point_mask).sum(1) / batch.point_mask.sum(1)
        h = (m[:, None, None] * batch.dim_mask[..., None]).to(self.scale.dtype)
        return DatasetEncoding(h, batch.dim_mask)

    def decode(self, encoding: DatasetEncoding, symbols, symbol_mask) -> Prediction:
        B, D, L = symbols.shape
        value = 1.0 + self.scale * encoding.h[:, :1, 0] ** 2  # (B, 1)
        params = value[:, :, None, None].expand(B, D, L, self.vocabulary.max_params)
        return Prediction(params, torch.full((B,), 0.1, dtype=params.dtype))


def test_a_user_network_is_registered_built_and_called_with_a_batch() -> None:
    spec = NetworkSpec("mean-net", _MeanNet, "test network", simulator={"positive_ratio": 1.0})
    register_network(spec)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_network(spec)
        assert "mean-net" in network_names()
        net = NetworkConfig(model="mean-net", vocabulary=PAPER_VOCABULARY)
        model = build_model(net)
        assert isinstance(model, _MeanNet)
        batch = testing.random_padded_batch(torch.Generator().manual_seed(0), PAPER_VOCABULARY)
        out = model(batch)
        m = torch.tensor([float(batch.y[b][batch.point_mask[b]].mean()) for b in range(3)])
        torch.testing.assert_close(out.params[:, 0, 0, 0].double(), 1 + m.double() ** 2)
        assert network_spec("mean-net").simulator == {"positive_ratio": 1.0}
    finally:
        _REGISTRY.pop("mean-net", None)


@pytest.mark.parametrize(
    "path",
    ["packages/amortizer/src/amorgp/amortizer/pretrained/default", "docs/training/phase1"],
)
def test_shipped_checkpoints_load_and_predict(path: str) -> None:
    where = ROOT / path
    if not (where / "checkpoint.json").exists():
        pytest.skip(f"{path} is not in this checkout")
    ckpt = load_checkpoint(where)
    assert ckpt.network.model == "structured"
    model = ckpt.model.eval()
    batch = testing.random_padded_batch(
        torch.Generator().manual_seed(1), model.vocabulary, dtype=torch.float32
    )
    with torch.no_grad():
        out = model(batch)
    assert bool(torch.isfinite(out.params).all())
    assert bool((out.noise > 0).all())
