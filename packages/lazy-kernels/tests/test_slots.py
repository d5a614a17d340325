"""The per-vocabulary slot table and its positive transform, against the parameter specs."""

from __future__ import annotations

import pytest
import torch

from amorgp.kernel_grammar import (
    EXTENDED_VOCABULARY,
    FLOORS,
    PAPER_VOCABULARY,
    positive,
    positive_inverse,
)
from amorgp.lazy_kernels import PARAM_KINDS, UNUSED_SLOT_VALUE, slot_table


@pytest.mark.parametrize("vocab", [PAPER_VOCABULARY, EXTENDED_VOCABULARY])
def test_table_matches_every_symbols_specs(vocab) -> None:
    t = slot_table(vocab)
    assert t.kind.shape == (len(vocab) + 1, vocab.max_params)
    assert not bool(t.used[0].any())
    for i, sym in enumerate(vocab, start=1):  # oracle: the specs one by one
        assert int(t.used[i].sum()) == len(sym.params)
        for j, spec in enumerate(sym.params):
            assert PARAM_KINDS[int(t.kind[i, j])] == spec.kind
            assert t.priors[int(t.prior_index[i, j])] == spec.prior
            assert float(t.prior_mean[i, j]) == pytest.approx(spec.prior.mean)
            assert float(t.floor[i, j]) == FLOORS[spec.kind]
    assert slot_table(vocab) is t
    assert t.to("cpu") is t


def test_constrain_applies_each_slots_own_transform_and_fills_unused() -> None:
    vocab = EXTENDED_VOCABULARY
    t = slot_table(vocab)
    g = torch.Generator().manual_seed(0)
    symbols = torch.randint(0, len(vocab) + 1, (3, 2, 4), generator=g)
    mask = (symbols > 0) & (torch.rand(3, 2, 4, generator=g) < 0.8)
    raw = torch.randn(3, 2, 4, vocab.max_params, generator=g, dtype=torch.float64)
    out = t.constrain(raw, symbols, mask)
    for b, d, a in torch.cartesian_prod(torch.arange(3), torch.arange(2), torch.arange(4)).tolist():
        s = int(symbols[b, d, a])
        specs = vocab.symbol(s).params if s and mask[b, d, a] else ()
        for j in range(vocab.max_params):
            got = out[b, d, a, j]
            if j < len(specs):
                torch.testing.assert_close(got, positive(raw[b, d, a, j], specs[j].kind))
            else:
                assert float(got) == UNUSED_SLOT_VALUE
    back = t.unconstrain(out, symbols, mask)
    used = t.used_slots(symbols, mask)
    torch.testing.assert_close(back[used], raw[used], rtol=1e-9, atol=1e-9)
    assert bool((back[~used] == 0).all())


def test_raw_prior_mean_maps_to_the_prior_means() -> None:
    t = slot_table(PAPER_VOCABULARY)
    raw = t.raw_prior_mean()
    for i, sym in enumerate(PAPER_VOCABULARY, start=1):
        for j, spec in enumerate(sym.params):
            expect = float(
                positive_inverse(torch.tensor(spec.prior.mean, dtype=torch.float64), spec.kind)
            )
            assert float(raw[i, j]) == pytest.approx(expect, rel=1e-12)
