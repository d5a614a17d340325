"""Parameters and noise follow the priors declared in kernel-grammar (KS tests)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from amorgp.kernel_grammar import (
    EXTENDED_VOCABULARY,
    FLOORS,
    NOISE,
    PAPER_VOCABULARY,
    Exponential,
    Gamma,
    Prior,
)
from amorgp.simulator import PriorTable, sample_noise, sample_parameters

ALPHA = 1e-3


def _scipy(prior: Prior) -> stats.rv_continuous:
    if isinstance(prior, Gamma):
        return stats.gamma(prior.shape, scale=1.0 / prior.rate)
    assert isinstance(prior, Exponential)
    return stats.expon(scale=1.0 / prior.rate)


@pytest.mark.parametrize("vocab", [PAPER_VOCABULARY, EXTENDED_VOCABULARY], ids=lambda v: v.name)
def test_every_slot_follows_its_declared_prior(gen: torch.Generator, vocab) -> None:
    table = PriorTable.from_vocabulary(vocab)
    V, n = len(vocab), 1500
    # every symbol n times, in one (B, D, L) tensor with padding mixed in
    ids = torch.arange(1, V + 1).repeat(n).reshape(n, V, 1)
    ids = torch.cat([ids, torch.zeros_like(ids)], dim=-1)  # a padded addend slot
    params, _ = sample_parameters(ids, ids > 0, table, gen, clamp_to_floors=False)
    assert params.shape == (n, V, 2, vocab.max_params)
    assert bool((params[:, :, 1] == 1.0).all())  # padding holds the unused value
    for i, sym in enumerate(vocab):
        for j, spec in enumerate(sym.params):
            x = params[:, i, 0, j].numpy()
            p = stats.kstest(x, _scipy(spec.prior).cdf).pvalue
            assert p > ALPHA / 40, f"{sym.name}.{spec.name}: KS p = {p:.2e}"
        assert bool((params[:, i, 0, len(sym.params) :] == 1.0).all())


def test_noise_follows_declared_prior(gen: torch.Generator) -> None:
    noise = sample_noise(5000, gen, clamp_to_floors=False)
    assert stats.kstest(noise.numpy(), _scipy(NOISE.prior).cdf).pvalue > ALPHA


def test_floors_are_applied(gen: torch.Generator) -> None:
    noise = sample_noise(200000, gen, clamp_to_floors=True)
    floor = FLOORS[NOISE.kind]
    assert float(noise.min()) >= floor
    # about 4.4e-5 of the Exp(1/0.15^2) mass lies below 1e-6: some draws were raised
    assert int((noise == floor).sum()) > 0


def test_table_rows_and_padding() -> None:
    table = PriorTable.from_vocabulary(PAPER_VOCABULARY)
    assert table.shape.shape == (len(PAPER_VOCABULARY) + 1, PAPER_VOCABULARY.max_params)
    assert not table.slot_mask[0].any()
    per = PAPER_VOCABULARY.id("PER")
    assert table.slot_mask[per].sum() == 3


def test_mismatched_masks_and_unknown_ids_are_rejected(gen: torch.Generator) -> None:
    table = PriorTable.from_vocabulary(PAPER_VOCABULARY)
    with pytest.raises(ValueError, match="differ"):
        sample_parameters(
            torch.ones(2, 1, 1, dtype=torch.int64),
            torch.ones(2, 1, 2, dtype=torch.bool),
            table,
            gen,
        )
    ids = torch.full((1, 1, 1), 9)
    with pytest.raises(ValueError, match="symbol ids"):
        sample_parameters(ids, ids > 0, table, gen)
