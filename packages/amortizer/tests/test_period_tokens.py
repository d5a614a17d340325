"""Tests of the period tokens: the periodogram's strongest peak per dimension (against
scipy's Lomb-Scargle periodogram) and the network that reads it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy.signal import lombscargle

from amorgp.amortizer import testing
from amorgp.amortizer.networks.config import PRESETS, NetworkConfig
from amorgp.amortizer.networks.period_tokens import DF, F_LO, anchor_gate, strongest_periods
from amorgp.kernel_grammar import PAPER_VOCABULARY, ParamKind
from amorgp.lazy_kernels import PARAM_KINDS, PaddedBatch, slot_table

TINY = PRESETS["tiny"].network


def _oracle(x: np.ndarray, y: np.ndarray, X: np.ndarray, f_max: float) -> tuple[float, float]:
    """The strongest peak of one dimension by scipy: the three signals by numpy's least
    squares, scipy's Lomb-Scargle power on the same grid as a share of the targets'
    variance, the best and its parabola-refined frequency; ``(period, power)`` in the units
    of ``x``."""
    n = len(y)
    lo, span = x.min(), x.max() - x.min()
    u = (x - lo) / span
    yc = y - y.mean()
    A = np.column_stack([np.ones(n), (X - X.min(0)) / np.ptp(X, 0)])
    lin = yc - A @ np.linalg.lstsq(A, yc, rcond=None)[0]
    V = np.column_stack([np.ones(n), u - 0.5, (u - 0.5) ** 2, (u - 0.5) ** 3])
    cubic = yc - V @ np.linalg.lstsq(V, yc, rcond=None)[0]
    freqs = F_LO + DF * np.arange(math.floor((f_max - F_LO) / DF) + 1)
    best = np.zeros(len(freqs))
    for s in (yc, lin, cubic):
        s = s - s.mean()
        p = lombscargle(u, s, 2 * np.pi * freqs)
        best = np.maximum(best, 2 * p / (n * np.mean(yc * yc)))
    k = int(np.argmax(best))
    left, mid, right = best[k - 1], best[k], best[k + 1]
    shift = 0.5 * (left - right) / (left - 2 * mid + right)
    return span / (freqs[k] + shift * DF), mid


def test_strongest_period_matches_scipy() -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        n, d = 50, 2
        X = rng.uniform(0, 3, size=(n, d))
        p = rng.uniform(0.2, 0.8)
        y = np.sin(2 * np.pi * X[:, 1] / p) + 0.3 * X[:, 0] + 0.3 * rng.normal(size=n)
        period, power, fap = strongest_periods(torch.tensor(X)[None], torch.tensor(y)[None])
        f_max = 0.5 * (n - 1)
        want, wpow = _oracle(X[:, 1], y, X, f_max)
        assert period[0, 1].item() == pytest.approx(want, rel=1e-7)
        assert power[0, 1].item() == pytest.approx(wpow, rel=1e-7)
        assert abs(period[0, 1].item() / p - 1) < 0.05  # the planted period
        # the false-alarm probability in closed form: M independent frequencies
        m = 3 * (math.floor((f_max - F_LO) / DF) + 1) / 5
        z = 0.5 * n * wpow
        assert fap[0, 1].item() == pytest.approx(1 - (1 - math.exp(-z)) ** m, rel=1e-6, abs=1e-12)


def test_fundamental_of_a_harmonic_peak() -> None:
    """A cycle whose second harmonic carries the most power: the strongest peak (scipy's)
    is at half the period, the period returned is the planted one; the peak's power is
    still the strongest peak's.  A sinusoid on a trend keeps its own period."""
    rng = np.random.default_rng(1)
    n, p = 150, 0.23
    x = np.sort(rng.uniform(0, 3, size=n))
    w = 2 * np.pi * x / p
    y = 0.7 * np.cos(w) + 1.0 * np.cos(2 * w + 0.4) + 0.5 * np.cos(3 * w + 1.0)
    y = y + 0.05 * rng.normal(size=n)
    X = x[:, None]
    harmonic, wpow = _oracle(x, y, X, 0.5 * (n - 1))
    assert abs(harmonic / (p / 2) - 1) < 0.05  # scipy's strongest peak: the harmonic
    period, power, _ = strongest_periods(torch.tensor(X)[None], torch.tensor(y)[None])
    assert abs(period[0, 0].item() / p - 1) < 0.05
    assert power[0, 0].item() == pytest.approx(wpow, rel=1e-7)
    trend = np.sin(2 * np.pi * x / p) + 2.0 * x + 0.3 * rng.normal(size=n)
    period, _, _ = strongest_periods(torch.tensor(X)[None], torch.tensor(trend)[None])
    assert abs(period[0, 0].item() / p - 1) < 0.05


def test_padding_and_missing_peaks() -> None:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(3, 40, 2, generator=g, dtype=torch.float64)
    y = torch.sin(2 * math.pi * X[..., 0] / 0.3) + 0.1 * torch.randn(3, 40, generator=g)
    y = y.to(torch.float64)
    pm = torch.ones(3, 40, dtype=torch.bool)
    pm[1, 25:] = False
    dm = torch.tensor([[True, True], [True, True], [True, False]])
    Xp, yp = X.clone(), y.clone()
    Xp[1, 25:], yp[1, 25:] = 5.0, 99.0  # padding never read
    Xp[2, :, 1] = -7.0
    period, power, fap = strongest_periods(Xp, yp, pm, dm)
    own = strongest_periods(X[1:2, :25], y[1:2, :25])
    for got, want in zip((period, power, fap), own, strict=True):
        assert torch.allclose(got[1], want[0], rtol=1e-12)
    assert torch.isnan(period[2, 1])  # padded dimension
    assert power[2, 1] == 0
    assert fap[2, 1] == 1
    const = X.clone()
    const[0, :, 1] = 0.5  # a constant input has no peak
    period, power, _ = strongest_periods(const, y)
    assert torch.isnan(period[0, 1])
    assert power[0, 1] == 0
    few, _, _ = strongest_periods(X[:, :3], y[:, :3])
    assert torch.isnan(few).all()
    # noise: the peaks the noise explains are not followed
    noise = torch.randn(4, 60, generator=g, dtype=torch.float64)
    _, pw, fap = strongest_periods(torch.rand(4, 60, 1, generator=g, dtype=torch.float64), noise)
    assert (fap > 0.05).all()
    assert (anchor_gate(fap, pw, torch.full_like(pw, 0.1)) < 0.1).all()


def test_accelerator_sizes_give_the_same_peaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerator's path (the grid from the padded width, read without waiting for
    the device, and blocks of 64 frequencies) gives every dataset's peak as the CPU's
    path (the grid up to the batch's highest frequency, here 30 of 44 cycles, in blocks of
    8): a batch of datasets of different sizes, padded to 90 points, with repeated inputs
    (fewer distinct values than points) and one too short to have a peak."""
    from amorgp.amortizer.networks import period_tokens

    g = torch.Generator().manual_seed(7)
    B, N, D = 6, 90, 3
    X = torch.rand(B, N, D, generator=g, dtype=torch.float64)
    X[1, :, 2] = (X[1, :, 2] * 7).floor() / 7  # 7 distinct values
    X[2, :, 0] = (X[2, :, 0] * 20).floor() / 20
    periods = torch.tensor([0.13, 0.3, 0.21, 0.5, 0.09, 0.4], dtype=torch.float64)
    y = torch.sin(2 * math.pi * X[..., 0] / periods[:, None]) + 0.5 * X[..., 1]
    y = y + 0.2 * torch.randn(B, N, generator=g, dtype=torch.float64)
    pm = torch.ones(B, N, dtype=torch.bool)
    pm[:, 61:] = False  # at most 61 points: the batch's grid ends at 30 cycles
    pm[3, 40:] = False
    pm[4, 3:] = False  # three points: no peak
    dm = torch.ones(B, D, dtype=torch.bool)
    dm[5, 2] = False
    monkeypatch.setattr(period_tokens, "BLOCK_ELEMENTS", 1)  # blocks of 8 frequencies
    cpu = strongest_periods(X, y, pm, dm)
    monkeypatch.setattr(period_tokens, "_on_accelerator", lambda device: True)
    acc = strongest_periods(X, y, pm, dm)
    assert torch.isfinite(cpu[0]).sum() >= 12  # most dimensions have a peak
    for got, want in zip(acc, cpu, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, equal_nan=True)


def _pair(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A random tiny network and the same weights with period tokens (the new layers at
    zero), the conversion ``add_period_tokens`` does."""
    old = testing.random_model(TINY, seed)
    new = testing.random_model(dataclasses.replace(TINY, period_tokens=True), seed + 1)
    missing, unexpected = new.load_state_dict(old.state_dict(), strict=False)
    assert not unexpected
    assert sorted(missing) == ["period_proj.bias", "period_proj.weight"]
    with torch.no_grad():  # a new network's new layers start at zero
        new.period_proj.weight.zero_()
        new.period_proj.bias.zero_()
    return old.eval(), new.eval()


def test_network_reads_the_periodogram() -> None:
    old, new = _pair()
    g = torch.Generator().manual_seed(5)
    batch = testing.random_padded_batch(g, PAPER_VOCABULARY, batch=4, n_max=30, d_max=3, l_max=3)
    with torch.no_grad():
        a, b = old(batch), new(batch)
    table = slot_table(PAPER_VOCABULARY)
    ids = torch.where(batch.symbol_mask, batch.symbols, 0).long()
    is_period = (table.kind[ids] == PARAM_KINDS.index(ParamKind.PERIOD)) & table.used[ids]
    is_period &= batch.symbol_mask[..., None]
    assert is_period.any()
    # every other parameter and the noise exactly as before
    assert torch.equal(a.noise, b.noise)
    assert torch.equal(a.params[~is_period], b.params[~is_period])
    # periods: the geometric blend of the dimension's strongest peak and the old period
    # by the gate (0 where the dimension has no peak)
    period, power, fap = strongest_periods(batch.X, batch.y, batch.point_mask, batch.dim_mask)
    found = torch.isfinite(period)
    g = torch.where(found, anchor_gate(fap, power, torch.where(found, period, 1.0)), 0.0)
    g = g[:, :, None, None]
    logp = torch.where(torch.isfinite(period), period, 1.0).log()[:, :, None, None]
    want = torch.exp(g * logp + (1 - g) * a.params.double().log())
    assert torch.allclose(b.params[is_period].double(), want[is_period], rtol=1e-5)


def test_planted_period_is_predicted() -> None:
    from amorgp.amortizer.stages.periodogram import period_candidates

    _, new = _pair()
    g = torch.Generator().manual_seed(7)
    x = torch.rand(60, 1, generator=g, dtype=torch.float64)
    y = torch.sin(2 * math.pi * x[:, 0] / 0.23) + 0.1 * torch.randn(60, generator=g)
    sym = torch.tensor([[[PAPER_VOCABULARY.symbols.index("PER") + 1]]])
    batch = PaddedBatch(
        x[None].float(),
        y[None].float(),
        torch.ones(1, 60, dtype=torch.bool),
        torch.ones(1, 1, dtype=torch.bool),
        sym,
        torch.ones(1, 1, 1, dtype=torch.bool),
        PAPER_VOCABULARY,
    )
    with torch.no_grad():
        period = new(batch).params[0, 0, 0, 2].item()
    span = float(x.max() - x.min())
    assert abs(period / 0.23 - 1) < 0.02
    # the multi-start's strongest periodogram peak (the stages' own implementation)
    top = period_candidates((x - x.min()) / span, y)[0][1] * span
    assert period == pytest.approx(top, rel=0.01)


def test_a_peak_of_few_cycles_does_not_anchor() -> None:
    """A clear sinusoid of two cycles over the inputs (a trend's shape as often as a
    season) leaves the old network's period; one of five cycles is followed."""
    old, new = _pair()
    g = torch.Generator().manual_seed(8)
    x = torch.rand(80, 1, generator=g, dtype=torch.float64)
    sym = torch.tensor([[[PAPER_VOCABULARY.symbols.index("PER") + 1]]])
    got = {}
    for cycles in (2.0, 5.0):
        y = torch.sin(2 * math.pi * cycles * x[:, 0]) + 0.05 * torch.randn(80, generator=g)
        batch = PaddedBatch(
            x[None].float(),
            y[None].float(),
            torch.ones(1, 80, dtype=torch.bool),
            torch.ones(1, 1, dtype=torch.bool),
            sym,
            torch.ones(1, 1, 1, dtype=torch.bool),
            PAPER_VOCABULARY,
        )
        with torch.no_grad():
            got[cycles] = (
                old(batch).params[0, 0, 0, 2].item(),
                new(batch).params[0, 0, 0, 2].item(),
            )
    before, after = got[2.0]
    assert after == pytest.approx(before, rel=1e-3)
    assert abs(after * 2.0 - 1.0) > 0.05  # not the peak: the old network's own period
    span = float(x.max() - x.min())
    assert got[5.0][1] == pytest.approx(span / 5.0, rel=0.03)


def test_config_round_trip() -> None:
    cfg = dataclasses.replace(TINY, period_tokens=True)
    assert NetworkConfig.from_dict(cfg.to_dict()) == cfg
    assert "period_tokens" not in TINY.to_dict()  # older networks' stored configs unchanged
    with pytest.raises(ValueError, match="period_tokens"):
        dataclasses.replace(TINY, period_tokens=1)
    with pytest.raises(ValueError, match="structured"):
        dataclasses.replace(TINY, model="ahgp-se-ard", period_tokens=True)


def test_gradients_reach_the_period_tokens() -> None:
    _, new = _pair()
    new.train()
    g = torch.Generator().manual_seed(9)
    batch = testing.random_padded_batch(g, PAPER_VOCABULARY, batch=4, n_max=30, d_max=3, l_max=3)
    out = new(batch)
    (out.params.log().sum() + out.noise.log().sum()).backward()
    assert new.period_proj.weight.grad.abs().sum() > 0


def test_fleet_equals_each_dataset(tmp_path) -> None:
    """A period-token network in the many-datasets path: one forward for the fleet gives
    each dataset's own answer (its own periodogram peaks, not a neighbour's)."""
    from amorgp.amortizer.api import Amortizer

    ckpt = testing.seeded_checkpoint(tmp_path / "pt", dataclasses.replace(TINY, period_tokens=True))
    amz = Amortizer.from_pretrained(ckpt, device="cpu")
    g = torch.Generator().manual_seed(11)
    data = []
    for p in (0.1, 0.15, 0.25):  # 4 to 10 cycles: the peaks anchor
        x = torch.rand(40, 1, generator=g, dtype=torch.float64)
        data.append((x, torch.sin(2 * math.pi * x[:, 0] / p) + 0.1 * torch.randn(40, generator=g)))
    opts = {"refine": 0, "starts": 1, "calibrate": False}
    fleet = amz.infer_datasets(data, ["SE + SE*PER"], **opts)
    for fit, (x, y), p in zip(fleet, data, (0.1, 0.15, 0.25), strict=True):
        own = amz.infer(x, y, "SE + SE*PER", **opts).hyperparameters
        got = fit.results[0].hyperparameters
        for key, value in own.items():
            assert got[key] == pytest.approx(value, rel=1e-5), key
        period = next(v for (_, _, name), v in got.items() if name.endswith("period"))
        span = float(x.max() - x.min())
        assert period * span == pytest.approx(p, rel=0.1)  # its own periodogram's peak
