"""The traced single-dataset forward against the eager network."""

from __future__ import annotations

import pytest
import torch

from amorgp.amortizer.networks import forward
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.forward import encode_structures, network_parameters, traced_forward
from amorgp.amortizer.networks.model import build_model
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(PRESETS["tiny"].network)
    with torch.no_grad():  # move every weight off its initialisation
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def _inputs(n: int, d: int, kernels: list[str], seed: int):
    g = torch.Generator().manual_seed(seed)
    X, y = torch.rand(n, d, generator=g), torch.randn(n, generator=g)
    structures = [DimWiseStructure.coerce(k, d, PAPER_VOCABULARY) for k in kernels]
    sym, mask = encode_structures(structures, PAPER_VOCABULARY, d, torch.device("cpu"))
    return X, y, sym, mask


def _eager(model, X, y, sym, mask, monkeypatch):
    with monkeypatch.context() as m:
        m.setenv("AMORGP_JIT", "0")
        return network_parameters(model, X, y, sym, mask)


# shapes unlike the one traced first: other n, d, number of kernels K and addends L
CASES = [
    (13, 3, ["SE + PER", "LIN * SE + PER"]),
    (5, 1, ["SE", "PER", "LIN"]),
    (31, 4, ["SE + LIN + PER"]),
    (2, 2, ["SE"]),
]


def test_traced_forward_equals_eager_for_other_shapes(monkeypatch) -> None:
    model = _net()
    X, y, sym, mask = _inputs(7, 2, ["SE"], seed=0)
    assert traced_forward(model, X[None], y[None], sym, mask) is None  # first use: eager
    assert traced_forward(model, X[None], y[None], sym, mask) is not None
    for i, (n, d, kernels) in enumerate(CASES):
        X, y, sym, mask = _inputs(n, d, kernels, seed=i + 1)
        assert bool(mask.all())
        fast = network_parameters(model, X, y, sym, mask)
        ref = _eager(model, X, y, sym, mask, monkeypatch)
        for a, b in zip(fast, ref, strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_traced_forward_shares_the_network_parameters(monkeypatch) -> None:
    model = _net(1)
    X, y, sym, mask = _inputs(9, 2, ["SE"], seed=3)
    network_parameters(model, X, y, sym, mask)  # the first use runs eagerly
    before = network_parameters(model, X, y, sym, mask)
    with torch.no_grad():
        model.noise_head.mlp[-1].bias.add_(0.5)
    after = network_parameters(model, X, y, sym, mask)
    ref = _eager(model, X, y, sym, mask, monkeypatch)
    torch.testing.assert_close(after[1], ref[1], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(after[1], before[1])


def test_traced_forward_scope(monkeypatch) -> None:
    """Eager on first use, then traced once per network and dtype; off with AMORGP_JIT=0;
    a padded symbol mask runs the eager (masked) forward, equal to the one-dataset batch
    forward."""
    model = _net(2)
    X, y, sym, mask = _inputs(6, 2, ["SE"], seed=4)
    assert traced_forward(model, X[None], y[None], sym, mask) is None
    first = traced_forward(model, X[None], y[None], sym, mask)
    assert first is not None
    assert traced_forward(model, X[None], y[None], sym, mask) is first
    assert forward._TRACES[model][0] == torch.float32
    monkeypatch.setenv("AMORGP_JIT", "0")
    assert traced_forward(model, X[None], y[None], sym, mask) is None
    monkeypatch.delenv("AMORGP_JIT")
    # "SE" on one dimension, "SE + PER" on the other: a padded addend slot
    structures = [DimWiseStructure.coerce("SE@0 * (SE + PER)@1", 2, PAPER_VOCABULARY)]
    sym, mask = encode_structures(structures, PAPER_VOCABULARY, 2, torch.device("cpu"))
    assert not bool(mask.all())
    params, noise = network_parameters(model, X, y, sym, mask)
    assert torch.isfinite(params).all()
    assert torch.isfinite(noise).all()


@pytest.mark.parametrize("dtype", [torch.float64])
def test_traced_forward_follows_the_network_dtype(dtype, monkeypatch) -> None:
    model = _net(3).to(dtype)
    X, y, sym, mask = _inputs(8, 2, ["SE + PER"], seed=5)
    network_parameters(model, X.to(dtype), y.to(dtype), sym, mask)
    fast = network_parameters(model, X.to(dtype), y.to(dtype), sym, mask)
    assert forward._TRACES[model][0] == dtype
    assert not isinstance(forward._TRACES[model][1], str)
    ref = _eager(model, X.to(dtype), y.to(dtype), sym, mask, monkeypatch)
    torch.testing.assert_close(fast[0], ref[0], rtol=1e-10, atol=1e-12)
