"""Structure sampling: addend-count law, uniform symbols, distinct negatives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, decode, encode
from amorgp.simulator import (
    SimulatorConfig,
    sample_negative_structures,
    sample_structures,
    structures_equal,
)

ALPHA = 1e-3


def _truncated_geometric(p: float, cap: int) -> np.ndarray:
    pmf = stats.geom(p).pmf(np.arange(1, cap))
    return np.append(pmf, 1 - pmf.sum())


@pytest.mark.parametrize(("p", "cap"), [(0.6, 6), (0.3, 3)])
def test_addend_counts_follow_clipped_geometric(gen: torch.Generator, p: float, cap: int) -> None:
    cfg = SimulatorConfig(p_addends=p, max_addends=cap)
    d = torch.full((3000,), 3)
    _, mask = sample_structures(d, cfg, gen)
    counts = mask.sum(-1).flatten().numpy()
    observed = np.bincount(counts, minlength=cap + 1)[1:]
    expected = _truncated_geometric(p, cap) * counts.size
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_symbols_uniform_distinct_sorted_and_only_in_real_dims(gen: torch.Generator) -> None:
    cfg = SimulatorConfig()
    d = torch.tensor([1, 4, 2, 8] * 500)
    symbols, mask = sample_structures(d, cfg, gen, max_dims=8)
    assert symbols.shape[:2] == (2000, 8)
    real = torch.arange(8) < d[:, None]
    assert torch.equal(mask.any(-1), real)
    big = torch.where(mask, symbols, 99)
    assert bool((big[..., 1:] > big[..., :-1])[mask[..., 1:]].all())
    ids = symbols[mask].numpy()
    observed = np.bincount(ids, minlength=len(cfg.vocabulary) + 1)[1:]
    assert stats.chisquare(observed).pvalue > ALPHA


def test_structures_are_canonical_for_kernel_grammar(gen: torch.Generator) -> None:
    cfg = SimulatorConfig()
    d = torch.tensor([1, 3, 2, 5, 1, 2])
    symbols, mask = sample_structures(d, cfg, gen)
    structures = decode(symbols.numpy(), mask.numpy(), cfg.vocabulary)
    assert [s.n_dims for s in structures] == d.tolist()
    re_symbols, _ = encode(structures, cfg.vocabulary, symbols.shape[1], symbols.shape[2])
    np.testing.assert_array_equal(re_symbols, symbols.numpy())
    assert all(isinstance(s, DimWiseStructure) for s in structures)


def test_negatives_differ_and_keep_dimension(gen: torch.Generator) -> None:
    cfg = SimulatorConfig()
    d = torch.tensor([1, 2, 3, 8] * 100)
    truth, _ = sample_structures(d, cfg, gen)
    want = torch.zeros(400, dtype=torch.bool)
    want[::3] = True
    neg = sample_negative_structures(truth, d, want, cfg, gen)
    assert neg.n_fallback == 0
    same = structures_equal(neg.symbols, truth)
    assert torch.equal(same, neg.is_positive)
    assert torch.equal(neg.is_positive, want)
    assert torch.equal(neg.symbol_mask.any(-1), torch.arange(truth.shape[1]) < d[:, None])


def test_negative_fallback_is_counted_not_hidden(gen: torch.Generator) -> None:
    # one symbol, one addend, d = 1: a distinct structure does not exist
    cfg = SimulatorConfig(vocabulary=Vocabulary(("SE",)), d_max=1)
    d = torch.ones(10, dtype=torch.int64)
    truth, _ = sample_structures(d, cfg, gen)
    neg = sample_negative_structures(truth, d, torch.zeros(10, dtype=torch.bool), cfg, gen)
    assert neg.n_fallback == 10
    assert bool(neg.is_positive.all())
    assert torch.equal(neg.symbols, truth)


def test_structures_equal_ignores_padding_width() -> None:
    a = torch.tensor([[[1, 2], [3, 0]]])
    b = torch.tensor([[[1, 2, 0], [3, 0, 0]]])
    c = torch.tensor([[[1, 2, 0], [4, 0, 0]]])
    assert structures_equal(a, b).tolist() == [True]
    assert structures_equal(a, c).tolist() == [False]


def test_bad_dimensions_are_rejected(gen: torch.Generator) -> None:
    cfg = SimulatorConfig(d_max=3)
    with pytest.raises(ValueError, match="n_dims must lie"):
        sample_structures(torch.tensor([4]), cfg, gen)
    with pytest.raises(ValueError, match="n_dims must lie"):
        sample_structures(torch.tensor([0]), cfg, gen)
    with pytest.raises(ValueError, match="width"):
        sample_structures(torch.tensor([3]), cfg, gen, max_dims=2)


def test_negative_law_is_the_prior_conditioned_on_differing(gen: torch.Generator) -> None:
    # d = 1, V = 3, cap 3: seven structures (non-empty subsets); truth fixed to {SE}
    from itertools import combinations
    from math import comb

    cfg = SimulatorConfig(vocabulary=Vocabulary(("SE", "LIN", "PER")), p_addends=0.5)
    B = 9000
    d = torch.ones(B, dtype=torch.int64)
    truth = torch.zeros(B, 1, 1, dtype=torch.int64)
    truth[:, 0, 0] = 1
    neg = sample_negative_structures(truth, d, torch.zeros(B, dtype=torch.bool), cfg, gen)
    assert neg.n_fallback == 0
    subsets = [s for k in (1, 2, 3) for s in combinations((1, 2, 3), k) if s != (1,)]
    length = _truncated_geometric(0.5, 3)
    prior = np.array([length[len(s) - 1] / comb(3, len(s)) for s in subsets])
    rows = [tuple(int(v) for v in row if v) for row in neg.symbols[:, 0].tolist()]
    observed = np.array([rows.count(s) for s in subsets])
    assert observed.sum() == B
    assert stats.chisquare(observed, prior / prior.sum() * B).pvalue > ALPHA
