"""The ``realdata`` prior: slot roles, amplitude scaling, standardised targets, its laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure
from amorgp.lazy_kernels import slot_table
from amorgp.simulator import Simulator, SimulatorConfig, sample_input_columns
from amorgp.simulator import realdata as rd


def test_slot_roles_of_the_paper_vocabulary() -> None:
    """Written out by hand from the registry's formulas."""
    t = slot_table(PAPER_VOCABULARY)
    # SE: variance, lengthscale | LIN: variance, offset | PER: variance, lengthscale, period
    # SE*LIN: variance, se_lengthscale, lin_offset | SE*PER: variance, se_ls, per_ls, period
    # LIN*PER: variance, lin_offset, per_lengthscale, per_period
    ls = {"SE": [1], "LIN": [], "PER": [], "SE*LIN": [1], "SE*PER": [1], "LIN*PER": []}
    amp = {"SE": [0], "LIN": [0, 1], "PER": [0], "SE*LIN": [0], "SE*PER": [0], "LIN*PER": [0]}
    for i, name in enumerate(PAPER_VOCABULARY.symbols, start=1):
        assert t.input_lengthscale[i].nonzero().flatten().tolist() == ls[name], name
        assert t.amplitude[i].nonzero().flatten().tolist() == amp[name], name
    assert not t.input_lengthscale[0].any()
    assert not t.amplitude[0].any()


@pytest.mark.parametrize("seed", range(4))
def test_scale_amplitudes_scales_the_kernel(seed: int) -> None:
    """The numpy reference kernel of the scaled parameters is ``c`` times the original."""
    gen = torch.Generator().manual_seed(seed)
    sim = Simulator(SimulatorConfig(n_min=12, n_max=12, d_max=3, p_dims=0.4))
    b = sim.sample(6, gen)
    factor = torch.exp(torch.randn(6, generator=gen, dtype=torch.float64))
    scaled = rd.scale_amplitudes(b.params, b.true_symbols, b.true_symbol_mask, b.vocab, factor)
    for i, s in enumerate(b.true_structures()):
        X = b.X[i, :12, : s.n_dims].numpy()
        p0 = b.params[i, : s.n_dims, : s.max_addends].numpy()
        p1 = scaled[i, : s.n_dims, : s.max_addends].numpy()
        np.testing.assert_allclose(
            s.reference(X, X, p1), float(factor[i]) * s.reference(X, X, p0), rtol=1e-10
        )


def test_standardise_targets_against_numpy() -> None:
    rng = np.random.default_rng(0)
    y = rng.normal(3.0, 2.5, size=(3, 10))
    train = np.zeros((3, 10), dtype=bool)
    train[:, :7] = True
    train[2, 4:7] = False
    valid = torch.tensor([True, True, False])
    out, s = rd.standardise_targets(torch.tensor(y), torch.tensor(train), valid)
    for b in range(2):
        m, sd = y[b, train[b]].mean(), y[b, train[b]].std()
        np.testing.assert_allclose(out[b].numpy(), (y[b] - m) / sd, rtol=1e-12)
        assert float(s[b]) == pytest.approx(sd, rel=1e-12)
    np.testing.assert_array_equal(out[2].numpy(), y[2])  # a failed draw is left alone
    assert float(s[2]) == 1.0


def test_realdata_targets_are_standardised_and_truth_matches() -> None:
    """Training targets have mean 0 and variance 1; padding stays 0; under the scaled truth
    the standardised targets are as likely as a draw of unit scale (per-point NLL ~ 1.42
    at most noise-free levels would be far off if the truth were not rescaled)."""
    cfg = SimulatorConfig.realdata(n_min=40, n_max=60, d_max=3, n_test=5)
    b = Simulator(cfg).sample(64, torch.Generator().manual_seed(3))
    assert b.valid.all()
    n = b.point_mask.sum(1)
    y = torch.where(b.point_mask, b.y, 0.0)
    mean = y.sum(1) / n
    var = (torch.where(b.point_mask, (b.y - mean[:, None]) ** 2, 0.0)).sum(1) / n
    np.testing.assert_allclose(mean.numpy(), 0.0, atol=1e-10)
    np.testing.assert_allclose(var.numpy(), 1.0, rtol=1e-10)
    assert (b.y[~b.point_mask] == 0).all()
    # the truth explains the standardised targets: the mean per-point NLL under it is
    # close to that of a unit-variance Gaussian fit or better (a GP with the right kernel)
    nll = []
    for i, s in enumerate(b.true_structures()):
        k = int(n[i])
        X = b.X[i, :k, : s.n_dims].numpy()
        p = b.params[i, : s.n_dims, : s.max_addends].numpy()
        K = s.reference(X, X, p) + float(b.noise[i]) * np.eye(k)
        nll.append(
            -stats.multivariate_normal(np.zeros(k), K, allow_singular=True).logpdf(
                b.y[i, :k].numpy()
            )
            / k
        )
    assert np.median(nll) < 0.5 * math.log(2 * math.pi) + 0.5  # N(0, 1): 1.419


def _paper_draws(
    cfg: SimulatorConfig, B: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dims, symbols, mask, params)``: ``B`` sizes, structures and the paper's parameter
    draws of ``cfg``'s simulator, before any realdata law."""
    from amorgp.simulator import sample_parameters, sample_structures

    sim = Simulator(cfg)
    _n, d = sim.sample_sizes(B, gen)
    sym, mask = sample_structures(d, cfg, gen, max_dims=int(d.max()))
    params, _ = sample_parameters(sym, mask, sim.prior_table, gen)
    return d, sym, mask, params


def test_realdata_laws() -> None:
    """Long lengthscales in about LONG_PROB of the dimensions; short periods and
    near-noiseless data as often as their probabilities say (binomial 5-sigma bounds)."""
    cfg = SimulatorConfig.realdata(n_min=10, n_max=12, d_max=4)
    gen = torch.Generator().manual_seed(0)
    d, sym, mask, params = _paper_draws(cfg, 3000, gen)
    moved = rd.realdata_parameters(params, sym, mask, d, cfg.vocabulary, gen)
    t = slot_table(cfg.vocabulary)
    ids = torch.where(mask, sym, 0)
    is_ls = t.input_lengthscale[ids] & mask[..., None]
    # one-input datasets (growth 1): P(l >= LONG_LOW) = p + (1 - p) P(G e^{s z} >= LONG_LOW)
    # with G ~ Gamma(2, rate 5), z ~ N(0, 1) (scipy quadrature as the oracle)
    from scipy import integrate

    def tail(z: float) -> float:
        g = stats.gamma(2.0, scale=1 / 5.0).sf(rd.LONG_LOW / math.exp(rd.LENGTHSCALE_SPREAD * z))
        return g * stats.norm.pdf(z)

    p = rd.LONG_PROB
    expected = p + (1 - p) * integrate.quad(tail, -12, 12)[0]
    one = (d == 1)[:, None, None, None] & is_ls
    frac = float((moved[one] >= rd.LONG_LOW).double().mean())
    m = int(one.sum())
    assert abs(frac - expected) < 5 * math.sqrt(expected * (1 - expected) / m)
    assert float(moved[is_ls].max()) <= rd.LONG_HIGH
    # unused slots and non-lengthscale, non-period slots are untouched
    is_per = (t.kind[ids] == 2) & mask[..., None]  # PARAM_KINDS: variance, lengthscale, period
    keep = ~(is_ls | is_per)
    assert torch.equal(moved[keep], params[keep])
    noise = rd.realdata_noise(torch.full((20000,), 0.5, dtype=torch.float64), gen)
    quiet = float((noise <= rd.LOW_NOISE_HIGH).double().mean())
    assert abs(quiet - rd.LOW_NOISE_PROB) < 5 * math.sqrt(0.21 / 20000)
    loud = float((noise != 0.5).double().mean()) - quiet  # the paper's draws were all 0.5
    assert abs(loud - rd.HIGH_NOISE_PROB) < 5 * math.sqrt(0.21 / 20000)
    noisy = noise[(noise != 0.5) & (noise > rd.LOW_NOISE_HIGH)]
    assert float(noisy.min()) >= rd.HIGH_NOISE_LOW
    assert float(noisy.max()) <= rd.HIGH_NOISE_HIGH
    assert float(noise.min()) >= 1e-6


def test_irrelevant_prior_draws_long_lengthscales_to_its_high_end() -> None:
    """``realdata-irrelevant``: the lengthscales above the ``realdata`` range (over
    LONG_HIGH, which only a long input reaches) are log-uniform on [LONG_HIGH,
    IRRELEVANT_HIGH] (Kolmogorov-Smirnov against scipy), in the share of the long
    inputs that the log-uniform law on [LONG_LOW, IRRELEVANT_HIGH] puts there (binomial
    5-sigma bound); the ``realdata`` law with the same draws stays below LONG_HIGH."""
    cfg = SimulatorConfig.realdata(n_min=10, n_max=12, d_max=4, prior="realdata-irrelevant")
    d, sym, mask, params = _paper_draws(cfg, 3000, torch.Generator().manual_seed(4))
    wide = rd.realdata_parameters(
        params, sym, mask, d, cfg.vocabulary, torch.Generator().manual_seed(9), rd.IRRELEVANT_HIGH
    )
    narrow = rd.realdata_parameters(
        params, sym, mask, d, cfg.vocabulary, torch.Generator().manual_seed(9)
    )
    t = slot_table(cfg.vocabulary)
    ids = torch.where(mask, sym, 0)
    is_ls = t.input_lengthscale[ids] & mask[..., None]
    assert float(narrow[is_ls].max()) <= rd.LONG_HIGH
    assert float(wide[is_ls].max()) <= rd.IRRELEVANT_HIGH
    # the same uniforms: a long draw of the narrow law is long in the wide one
    long = is_ls & (narrow >= rd.LONG_LOW) & (wide >= rd.LONG_LOW) & (wide != narrow)
    top = wide[long] > rd.LONG_HIGH
    share = math.log(rd.IRRELEVANT_HIGH / rd.LONG_HIGH) / math.log(rd.IRRELEVANT_HIGH / rd.LONG_LOW)
    m = int(long.sum())
    assert m > 500
    assert abs(float(top.double().mean()) - share) < 5 * math.sqrt(share * (1 - share) / m)
    ks = stats.kstest(
        wide[long][top].numpy(), stats.loguniform(rd.LONG_HIGH, rd.IRRELEVANT_HIGH).cdf
    )
    assert ks.pvalue > 1e-4
    sim = Simulator(cfg).sample(8, torch.Generator().manual_seed(1))
    assert bool(sim.valid.any())


def test_ard_structures() -> None:
    """``realdata-ard``: about ARD_PROB of the datasets with two or more inputs (binomial
    5-sigma bound) get exactly one ``SE`` or ``MAT52`` addend in each input, each kind
    about half of the time; one-input datasets and the other rows are untouched."""
    from amorgp.kernel_grammar import Vocabulary

    vocab = Vocabulary.with_products(("SE", "LIN", "PER", "MAT52"), "paper-mat52")
    cfg = SimulatorConfig.realdata(
        n_min=10, n_max=12, d_max=6, prior="realdata-ard", vocabulary=vocab
    )
    gen = torch.Generator().manual_seed(8)
    d, sym, mask, _ = _paper_draws(cfg, 4000, gen)
    out, out_mask, ard = rd.ard_structures(sym, mask, d, cfg.vocabulary, gen)
    multi = d >= 2
    assert not bool((ard & ~multi).any())
    m = int(multi.sum())
    frac = float(ard[multi].double().mean())
    assert abs(frac - rd.ARD_PROB) < 5 * math.sqrt(rd.ARD_PROB * (1 - rd.ARD_PROB) / m)
    assert torch.equal(out[~ard], sym[~ard])
    assert torch.equal(out_mask[~ard], mask[~ard])
    names = ("", *cfg.vocabulary.symbols)
    kinds = []
    for b in torch.nonzero(ard).flatten().tolist()[:300]:
        for j in range(out.shape[1]):
            used = [names[int(i)] for i, k in zip(out[b, j], out_mask[b, j], strict=True) if k]
            if j < int(d[b]):
                assert len(used) == 1
                assert used[0] in ("SE", "MAT52")
                kinds.append(used[0] == "SE")
            else:
                assert used == []
    share = sum(kinds) / len(kinds)
    assert abs(share - 0.5) < 5 * math.sqrt(0.25 / len(kinds))
    batch = Simulator(cfg).sample(8, torch.Generator().manual_seed(1))
    assert bool(batch.valid.any())


def test_realdata_config() -> None:
    cfg = SimulatorConfig.realdata()
    assert (cfg.prior, cfg.inputs, cfg.n_max) == ("realdata", "realistic", 500)
    assert SimulatorConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(ValueError, match="prior must be one of"):
        SimulatorConfig(prior="gaussian")
    assert SimulatorConfig().prior == "paper"


def test_paper_prior_unchanged_by_the_new_field() -> None:
    """The paper prior's draws do not depend on the realdata code path."""
    a = Simulator(SimulatorConfig(n_max=30)).sample(8, torch.Generator().manual_seed(5))
    b = Simulator(SimulatorConfig(n_max=30, prior="paper")).sample(
        8, torch.Generator().manual_seed(5)
    )
    assert torch.equal(a.y, b.y)
    assert torch.equal(a.params, b.params)


def test_heavy_inputs_bunch_most_points() -> None:
    """Student-t(1.5) columns after min-max scaling: most points lie in a narrow band
    (the interquartile range is a small share of the unit range), unlike uniform inputs."""
    train = torch.ones(200, 300, 1, dtype=torch.bool)[..., 0]
    X = sample_input_columns("heavy", (200, 300, 1), train, torch.Generator().manual_seed(1))
    q = np.quantile(X[..., 0].numpy(), [0.25, 0.75], axis=1)
    assert np.median(q[1] - q[0]) < 0.2  # uniform: 0.5
    Xr = sample_input_columns(
        "realistic", (50, 40, 6), train[:50, :40], torch.Generator().manual_seed(2)
    )
    assert float(Xr.min()) == 0.0
    assert float(Xr.max()) == 1.0


def test_structures_reference_is_dimwise() -> None:
    """Guard for the oracle used above: a one-dimension SE structure's reference."""
    s = DimWiseStructure.coerce("SE", 1, PAPER_VOCABULARY)
    X = np.array([[0.0], [1.0]])
    p = np.array([[[2.0, 0.5, 1.0, 1.0]]])
    K = s.reference(X, X, p)
    assert K[0, 1] == pytest.approx(2.0 * math.exp(-1.0 / (2 * 0.25)))


def test_series_law() -> None:
    """``realdata-series``: one-input datasets with a periodic addend follow the seasonal
    law in about SERIES_PROB of the cases (binomial 5-sigma bound); their trend, decay,
    period, seasonal shape and noise lie in the law's ranges with log-uniform medians (Kolmogorov-Smirnov
    against scipy's loguniform); every other dataset and slot is untouched."""
    cfg = SimulatorConfig.realdata(n_min=10, n_max=12, d_max=3, prior="realdata-series")
    gen = torch.Generator().manual_seed(3)
    B = 4000
    d, sym, mask, params = _paper_draws(cfg, B, gen)
    noise = torch.full((B,), 0.5, dtype=torch.float64)
    out, new_noise, seasonal = rd.series_law(params, noise, sym, mask, d, cfg.vocabulary, gen)
    t = slot_table(cfg.vocabulary)
    ids = torch.where(mask, sym, 0)
    names = ("", *cfg.vocabulary.symbols)  # id 0 pads
    has_per = torch.tensor(
        [
            bool(d[b] == 1)
            and any("PER" in names[int(ids[b, 0, j])] for j in range(ids.shape[2]) if mask[b, 0, j])
            for b in range(B)
        ]
    )
    assert not bool((seasonal & ~has_per).any())
    m = int(has_per.sum())
    frac = float(seasonal[has_per].double().mean())
    assert abs(frac - rd.SERIES_PROB) < 5 * math.sqrt(0.25 / m)
    # untouched: the other datasets entirely
    assert torch.equal(out[~seasonal], params[~seasonal])
    assert torch.equal(new_noise[~seasonal], noise[~seasonal])
    used = mask[..., None] & t.used[ids]
    row = seasonal[:, None, None, None] & used
    per_addend = torch.tensor(
        [[["PER" in names[int(i)] for i in dim] for dim in b] for b in ids.tolist()]
    )[..., None]
    is_period = (t.kind[ids] == 2) & row
    is_ls = t.input_lengthscale[ids] & row
    is_shape = (t.kind[ids] == 1) & row & ~is_ls & per_addend  # PER's own lengthscale
    checks = [
        (out[is_shape], rd.SERIES_SHAPE_LOW, rd.SERIES_SHAPE_HIGH),
        (out[is_period], rd.SERIES_PERIOD_LOW, rd.SERIES_PERIOD_HIGH),
        (out[is_ls & per_addend], rd.SERIES_DECAY_LOW, rd.SERIES_DECAY_HIGH),
        (out[is_ls & ~per_addend], rd.SERIES_TREND_LOW, rd.SERIES_TREND_HIGH),
        (new_noise[seasonal], rd.SERIES_NOISE_LOW, rd.SERIES_NOISE_HIGH),
    ]
    for values, low, high in checks:
        assert values.numel() > 50
        assert float(values.min()) >= low
        assert float(values.max()) <= high
        ks = stats.kstest(values.numpy(), stats.loguniform(low, high).cdf)
        assert ks.pvalue > 1e-4
    # the seasonal rows' other slots (variances, offsets) are the draws'
    keep = row & ~(is_period | is_ls | is_shape)
    assert torch.equal(out[keep], params[keep])


def test_series_prior_samples_standardised_series() -> None:
    """The ``realdata-series`` prior draws standardised targets like ``realdata``; the
    ``realdata`` prior's draws do not depend on the series code path."""
    cfg = SimulatorConfig.realdata(n_max=30, prior="realdata-series")
    batch = Simulator(cfg).sample(16, torch.Generator().manual_seed(2))
    w = batch.point_mask.double()
    mean = (batch.y * w).sum(1) / w.sum(1)
    ok = batch.valid
    assert torch.allclose(mean[ok], torch.zeros_like(mean[ok]), atol=1e-9)
    a = Simulator(SimulatorConfig.realdata(n_max=30)).sample(8, torch.Generator().manual_seed(5))
    b = Simulator(SimulatorConfig.realdata(n_max=30, prior="realdata")).sample(
        8, torch.Generator().manual_seed(5)
    )
    assert torch.equal(a.y, b.y)
