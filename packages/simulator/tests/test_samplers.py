"""Samplers against scipy's distributions (KS / chi-square at fixed seeds)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from amorgp.kernel_grammar import Exponential, Gamma
from amorgp.simulator import (
    sample_exponential,
    sample_gamma,
    sample_geometric,
    sample_prior,
    sample_subsets,
    sample_uniform_int,
)

ALPHA = 1e-3  # a correct sampler fails a test with probability 1e-3 at most


@pytest.mark.parametrize(
    ("shape", "rate"), [(0.3, 1.0), (1.0, 2.0), (2.0, 3.0), (2.0, 5.0), (9.5, 0.5)]
)
def test_gamma_matches_scipy(gen: torch.Generator, shape: float, rate: float) -> None:
    draw = sample_gamma(torch.full((4000,), shape), rate, gen)
    assert draw.values.dtype == torch.float64
    assert bool((draw.values > 0).all())
    p = stats.kstest(draw.values.numpy(), stats.gamma(shape, scale=1.0 / rate).cdf).pvalue
    assert p > ALPHA


def test_gamma_single_round_still_exact(gen: torch.Generator) -> None:
    # with one proposal per pass, rejected elements go through further passes
    draw = sample_gamma(torch.full((3000,), 1.2), 1.0, gen, rounds=1)
    assert draw.n_rejected > 0
    assert stats.kstest(draw.values.numpy(), stats.gamma(1.2).cdf).pvalue > ALPHA


def test_gamma_rejection_rate_matches_theory(gen: torch.Generator) -> None:
    # Marsaglia-Tsang acceptance for a = 2 is about 0.98 (squeeze-free bound > 0.95)
    n = 20000
    draw = sample_gamma(torch.full((n,), 2.0), 1.0, gen)
    rate = draw.n_rejected / (n + draw.n_rejected)
    assert 0.0 < rate < 0.05


def test_gamma_heterogeneous_parameters_per_element(gen: torch.Generator) -> None:
    shape = torch.tensor([0.5, 2.0, 5.0]).repeat(3000)
    rate = torch.tensor([1.0, 5.0, 0.5]).repeat(3000)
    values = sample_gamma(shape, rate, gen).values.reshape(3000, 3)
    for j, (a, b) in enumerate([(0.5, 1.0), (2.0, 5.0), (5.0, 0.5)]):
        assert stats.kstest(values[:, j].numpy(), stats.gamma(a, scale=1 / b).cdf).pvalue > ALPHA


def test_exponential_matches_scipy(gen: torch.Generator) -> None:
    rate = 1.0 / 0.15**2
    x = sample_exponential(rate, (5000,), gen)
    assert stats.kstest(x.numpy(), stats.expon(scale=1 / rate).cdf).pvalue > ALPHA


@pytest.mark.parametrize("prior", [Gamma(2.0, 3.0), Exponential(4.0)])
def test_sample_prior_follows_declaration(gen: torch.Generator, prior: Gamma | Exponential) -> None:
    x = sample_prior(prior, (4000,), gen).values.numpy()
    ref = (
        stats.gamma(prior.shape, scale=1 / prior.rate)
        if isinstance(prior, Gamma)
        else stats.expon(scale=1 / prior.rate)
    )
    assert stats.kstest(x, ref.cdf).pvalue > ALPHA


@pytest.mark.parametrize("p", [0.25, 0.6, 1.0])
def test_geometric_pmf_chi_square(gen: torch.Generator, p: float) -> None:
    k = sample_geometric(p, (20000,), gen).numpy()
    assert k.min() >= 1
    if p == 1.0:
        assert (k == 1).all()
        return
    top = 12
    observed = np.array([(k == i).sum() for i in range(1, top)] + [(k >= top).sum()])
    pmf = stats.geom(p).pmf(np.arange(1, top))  # scipy's geom has support {1, 2, ...}
    expected = np.append(pmf, 1 - pmf.sum()) * k.size
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_uniform_int_chi_square(gen: torch.Generator) -> None:
    x = sample_uniform_int(10, 25, (16000,), gen).numpy()
    assert x.min() == 10
    assert x.max() == 25
    observed = np.bincount(x - 10, minlength=16)
    assert stats.chisquare(observed).pvalue > ALPHA


def test_subsets_are_uniform_distinct_and_sorted(gen: torch.Generator) -> None:
    counts = torch.full((12000,), 2)
    ids, mask = sample_subsets(counts, 4, gen)
    assert ids.shape == (12000, 2)
    assert bool(mask.all())
    assert bool((ids[:, 0] < ids[:, 1]).all())
    code = (ids[:, 0] - 1) * 4 + (ids[:, 1] - 1)
    observed = np.bincount(code.numpy(), minlength=16)
    pairs = [a * 4 + b for a in range(4) for b in range(a + 1, 4)]
    assert observed[[c for c in range(16) if c not in pairs]].sum() == 0
    assert stats.chisquare(observed[pairs]).pvalue > ALPHA


def test_subsets_padding_and_width(gen: torch.Generator) -> None:
    counts = torch.tensor([[0, 3], [1, 2]])
    ids, mask = sample_subsets(counts, 5, gen, width=7)
    assert ids.shape == (2, 2, 7)
    assert mask.sum(-1).tolist() == counts.tolist()
    assert bool((ids[~mask] == 0).all())
    with pytest.raises(ValueError, match="width"):
        sample_subsets(counts, 5, gen, width=2)
    with pytest.raises(ValueError, match="counts"):
        sample_subsets(torch.tensor([6]), 5, gen)


def test_same_seed_same_draws() -> None:
    a = sample_gamma(torch.full((50,), 2.0), 3.0, torch.Generator().manual_seed(1)).values
    b = sample_gamma(torch.full((50,), 2.0), 3.0, torch.Generator().manual_seed(1)).values
    c = sample_gamma(torch.full((50,), 2.0), 3.0, torch.Generator().manual_seed(2)).values
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda g: sample_gamma(torch.tensor([1.0, -1.0]), 1.0, g), "shape"),
        (lambda g: sample_gamma(1.0, float("inf"), g), "rate"),
        (lambda g: sample_gamma(1.0, 1.0, g, rounds=0), "rounds"),
        (lambda g: sample_exponential(0.0, 3, g), "rate"),
        (lambda g: sample_geometric(0.0, 3, g), "p must"),
        (lambda g: sample_uniform_int(5, 4, 3, g), "low <= high"),
        (lambda g: sample_uniform_int(1, 4, (-1,), g), "non-negative"),
    ],
)
def test_bad_sampler_arguments(gen: torch.Generator, call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(gen)
