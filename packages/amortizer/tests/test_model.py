"""Tests of the structured amortization network: symmetries, padding, heads, validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from amorgp.amortizer import testing
from amorgp.amortizer.networks.config import PRESETS, NetworkConfig
from amorgp.amortizer.networks.model import AmortizedGP, build_model, count_parameters
from amorgp.kernel_grammar import EXTENDED_VOCABULARY, PAPER_VOCABULARY, base_symbol

TINY = PRESETS["tiny"].network
_FIELDS = ("X", "y", "point_mask", "dim_mask", "symbols", "symbol_mask")


def _model(config: NetworkConfig = TINY, seed: int = 0) -> torch.nn.Module:
    return testing.random_model(config, seed)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize("vocab", [PAPER_VOCABULARY, EXTENDED_VOCABULARY])
def test_point_shuffle_invariance(gen: torch.Generator, vocab) -> None:
    model = _model(dataclasses.replace(TINY, vocabulary=vocab))
    batch = testing.random_padded_batch(gen, vocab, batch=3, n_max=10, d_max=3, l_max=3)
    testing.assert_point_invariant(model, batch, gen)


def test_dimension_equivariance(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=3, n_max=10, d_max=4, l_max=2)
    testing.assert_dimension_equivariant(model, batch, gen)


def test_addend_equivariance(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=3, n_max=10, d_max=2, l_max=4)
    testing.assert_addend_equivariant(model, batch, gen)


def test_padding_invariance(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=4, n_max=11, d_max=3, l_max=3)
    testing.assert_padding_invariant(model, batch)


def test_padded_values_do_not_leak_even_if_nan(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=3, n_max=10, d_max=3, l_max=2)
    ref = model(batch)
    pad = ~(batch.point_mask[:, :, None] & batch.dim_mask[:, None, :])
    X = torch.where(pad, torch.full_like(batch.X, float("nan")), batch.X)
    y = torch.where(batch.point_mask, batch.y, torch.full_like(batch.y, float("inf")))
    out = model(dataclasses.replace(batch, X=X, y=y))
    torch.testing.assert_close(out.params, ref.params, rtol=0, atol=0)
    torch.testing.assert_close(out.noise, ref.noise, rtol=0, atol=0)


def test_structure_changes_prediction(gen: torch.Generator) -> None:
    """The kernel encoder is not ignored: another symbol in dimension 0 changes the parameters."""
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=2, n_max=8, d_max=2, l_max=2)
    ref = model(batch)
    symbols = batch.symbols.clone()
    symbols[:, 0, 0] = symbols[:, 0, 0] % len(PAPER_VOCABULARY) + 1
    out = model(dataclasses.replace(batch, symbols=symbols))
    assert not torch.allclose(out.params[:, 1], ref.params[:, 1])


def test_output_contract_and_transform(gen: torch.Generator) -> None:
    """Parameters exceed their kind's floor, unused slots and padding hold 1.0."""
    from amorgp.kernel_grammar import FLOORS

    vocab = EXTENDED_VOCABULARY
    model = _model(dataclasses.replace(TINY, vocabulary=vocab))
    batch = testing.random_padded_batch(gen, vocab, batch=3, n_max=9, d_max=3, l_max=3)
    with torch.no_grad():
        out = model(batch)
    B, D, L = batch.symbols.shape
    assert out.params.shape == (B, D, L, vocab.max_params)
    assert out.noise.shape == (B,)
    assert bool((out.noise > FLOORS["noise"]).all())
    for b in range(B):
        for d in range(D):
            for a in range(L):
                row = out.params[b, d, a]
                if not batch.symbol_mask[b, d, a]:
                    assert bool((row == 1.0).all())
                    continue
                sym = vocab.symbol(int(batch.symbols[b, d, a]))
                for j, spec in enumerate(sym.params):
                    assert float(row[j]) > FLOORS[spec.kind]
                assert bool((row[len(sym.params) :] == 1.0).all())


def test_untrained_heads_predict_prior_means() -> None:
    """With zeroed last-layer weights, every slot is the prior mean of its parameter."""
    from amorgp.kernel_grammar import NOISE

    torch.manual_seed(0)
    model = AmortizedGP(TINY).double()
    with torch.no_grad():
        model.heads.w2.zero_()
        model.noise_head.mlp[-1].weight.zero_()
    batch = testing.random_padded_batch(torch.Generator().manual_seed(0), PAPER_VOCABULARY)
    out = model(batch)
    for b, d, a in batch.symbol_mask.nonzero().tolist():
        sym = PAPER_VOCABULARY.symbol(int(batch.symbols[b, d, a]))
        expect = torch.tensor([p.prior.mean for p in sym.params], dtype=torch.float64)
        torch.testing.assert_close(out.params[b, d, a, : len(expect)], expect)
    torch.testing.assert_close(out.noise, torch.full_like(out.noise, NOISE.prior.mean))


def test_heads_match_per_symbol_mlp(gen: torch.Generator) -> None:
    """The gathered head equals applying symbol s's own MLP to the token (loop oracle)."""
    from amorgp.kernel_grammar import positive

    model = _model()
    heads = model.heads
    tokens = torch.randn(2, 3, 4, TINY.d_kernel, generator=gen, dtype=torch.float64)
    symbols = torch.randint(1, len(PAPER_VOCABULARY) + 1, (2, 3, 4), generator=gen)
    mask = torch.ones_like(symbols, dtype=torch.bool)
    out = heads(tokens, symbols, mask)
    H = heads.hidden
    for idx in torch.cartesian_prod(torch.arange(2), torch.arange(3), torch.arange(4)).tolist():
        s = int(symbols[tuple(idx)])
        t = tokens[tuple(idx)]
        w1 = heads.w1[:, (s - 1) * H : s * H]
        a = torch.nn.functional.gelu(t @ w1 + heads.b1[s - 1])
        raw = a @ heads.w2[s - 1] + heads.b2[s - 1]
        sym = base_symbol(PAPER_VOCABULARY.symbols[s - 1])
        for j, spec in enumerate(sym.params):
            torch.testing.assert_close(out[tuple(idx)][j], positive(raw[j], spec.kind))


def test_gradients_reach_every_parameter(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=4, n_max=8, d_max=3, l_max=3)
    out = model(batch)
    (out.params.log().sum() + out.noise.log().sum()).backward()
    missing = [
        n for n, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)
    ]
    # the embedding row of the padding id never receives gradient by design
    assert missing == [], missing


@pytest.mark.parametrize(
    ("field", "make", "message"),
    [
        ("X", lambda b: b.X[..., None], "X must have shape"),
        ("y", lambda b: b.y[:, :-1], "y must have shape"),
        ("point_mask", lambda b: b.point_mask.long(), "point_mask must be a bool"),
        ("symbol_mask", lambda b: b.symbol_mask[:, :, :1], "symbol_mask must have shape"),
        ("symbols", lambda b: b.symbols + 10, "symbol ids must lie"),
        ("point_mask", lambda b: torch.zeros_like(b.point_mask), "at least one point"),
        (
            "X",
            lambda b: b.X.masked_fill(torch.ones_like(b.X, dtype=torch.bool), float("nan")),
            "NaN",
        ),
        ("symbol_mask", lambda b: torch.ones_like(b.symbol_mask), "padding id 0"),
    ],
)
def test_bad_input_raises(gen: torch.Generator, field: str, make, message: str) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=2, n_max=6, d_max=2, l_max=2)
    batch.symbols[0, 0, 1] = 0
    batch.symbol_mask[0, 0, 1] = False
    bad = dataclasses.replace(batch, **{field: make(batch)})
    with pytest.raises(ValueError, match=message):
        model(bad)
    with pytest.raises(ValueError, match=message):
        model(**{**{k: getattr(bad, k) for k in _FIELDS}})


def test_presets_sizes() -> None:
    """medium stays under 15 M parameters (64 MB of float32); paper is ~43 M."""
    assert count_parameters(build_model(PRESETS["medium"].network)) <= 15_000_000
    # mid: between small and medium, 2-4 M parameters, at least 32 channels per head
    mid = PRESETS["mid"].network
    assert 2_000_000 <= count_parameters(build_model(mid)) <= 4_000_000
    assert mid.d_data // mid.n_heads >= 32
    assert mid.d_kernel // mid.n_heads >= 32
    assert min(mid.head_hidden, mid.noise_hidden) >= 32
    paper = count_parameters(build_model(PRESETS["paper"].network))
    assert 38_000_000 < paper < 48_000_000


def test_config_round_trip_and_errors() -> None:
    for p in PRESETS.values():
        assert NetworkConfig.from_dict(p.network.to_dict()) == p.network
    with pytest.raises(ValueError, match="divisible"):
        NetworkConfig(d_data=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown network config"):
        NetworkConfig.from_dict({"widht": 3})
    with pytest.raises(ValueError, match="unknown model"):
        NetworkConfig(model="gpt")  # type: ignore[arg-type]


def test_packed_dataset_encoder_equals_padded_layout() -> None:
    """The CPU path packs present (dataset, dimension) pairs; values and gradients equal
    those of the padded layout used on other devices (float64)."""
    torch.manual_seed(3)
    model = build_model(PRESETS["tiny"].network).double().train()
    enc = model.dataset_encoder
    batch = testing.random_padded_batch(
        torch.Generator().manual_seed(5), model.vocabulary, dtype=torch.float64
    )
    args = (batch.X, batch.y, batch.point_mask, batch.dim_mask)
    assert not bool(batch.dim_mask.all()), "the test batch must contain padded dimensions"
    packed, padded = enc._forward_packed(*args), enc._forward_padded(*args)
    torch.testing.assert_close(packed, padded, rtol=0, atol=1e-12)
    params = list(enc.parameters())
    g_packed = torch.autograd.grad(packed.square().sum(), params)
    g_padded = torch.autograd.grad(padded.square().sum(), params)
    for a, b in zip(g_packed, g_padded, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("single_se", [True, False])
def test_unpadded_fast_path_equals_the_masked_path(gen: torch.Generator, single_se: bool) -> None:
    """A dataset without padding (every mask True) runs without masking operations; its
    prediction equals that of the same dataset inside a padded batch (masked path)."""
    model = _model()
    batch = testing.random_padded_batch(
        gen, PAPER_VOCABULARY, batch=4, n_max=9, d_max=3, l_max=3, single_se=single_se
    )
    assert not bool(batch.point_mask.all()), "the batch must contain padded points"
    ref = model(batch)
    for b in range(len(batch)):
        alone = testing.crop(batch, b)
        assert bool(alone.point_mask.all())
        assert bool(alone.dim_mask.all())
        if single_se:  # every symbol slot is present: the kernel encoder is unmasked too
            assert bool(alone.symbol_mask.all())
        out = model(alone)
        d, L = out.params.shape[1:3]
        torch.testing.assert_close(out.params[0], ref.params[b, :d, :L], rtol=0, atol=1e-12)
        torch.testing.assert_close(out.noise[0], ref.noise[b], rtol=0, atol=1e-12)
        enc = model.dataset_encoder
        X, y = alone.X, alone.y
        torch.testing.assert_close(
            enc._forward_dense(X, y),
            enc._forward_padded(X, y, alone.point_mask, alone.dim_mask),
            rtol=0,
            atol=1e-12,
        )


def test_keyword_and_positional_forms_equal_the_batch_form(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=3, n_max=7, d_max=2, l_max=2)
    ref = model(batch)
    by_name = model(**{k: getattr(batch, k) for k in _FIELDS})
    by_position = model(*(getattr(batch, k) for k in _FIELDS))
    for out in (by_name, by_position):
        torch.testing.assert_close(out.params, ref.params, rtol=0, atol=0)
        torch.testing.assert_close(out.noise, ref.noise, rtol=0, atol=0)
    with pytest.raises(ValueError, match="missing"):
        model(X=batch.X, y=batch.y)


def test_encode_once_decode_many_equals_the_forward(gen: torch.Generator) -> None:
    """One dataset encoded once and decoded with K kernels equals K forwards of the pair."""
    model = _model()
    batch = testing.random_padded_batch(gen, PAPER_VOCABULARY, batch=4, n_max=9, d_max=2, l_max=3)
    one = testing.crop(batch, 0)  # d = 2 (the first element has d_max dimensions)
    K = 3
    symbols = batch.symbols[:K, :2]
    symbol_mask = batch.symbol_mask[:K, :2]
    ok = symbol_mask.any(-1).all(-1)
    symbols, symbol_mask = symbols[ok], symbol_mask[ok]
    enc = model.encode_dataset(one)
    model.check_kernels(symbols, symbol_mask, enc.expand(len(symbols)).dim_mask)
    pred = model.decode(enc.expand(len(symbols)), symbols, symbol_mask)
    for k in range(len(symbols)):
        pair = dataclasses.replace(
            one, symbols=symbols[k : k + 1], symbol_mask=symbol_mask[k : k + 1]
        )
        ref = model(pair)
        torch.testing.assert_close(pred.params[k], ref.params[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(pred.noise[k], ref.noise[0], rtol=1e-12, atol=1e-12)


def test_batch_over_another_vocabulary_is_refused(gen: torch.Generator) -> None:
    model = _model()
    batch = testing.random_padded_batch(gen, EXTENDED_VOCABULARY, batch=2, n_max=6, d_max=2)
    with pytest.raises(ValueError, match="vocabulary"):
        model(batch)
