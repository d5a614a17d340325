"""Amortized multi-start (:mod:`amorgp.amortizer.stages.multistart`) against independent oracles:
planted periods, dense float64 likelihoods, scipy's Lomb-Scargle periodogram."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.signal import lombscargle
from scipy.stats import multivariate_normal

from amorgp.amortizer import Amortizer
from amorgp.amortizer.stages.calibrate import calibrate
from amorgp.amortizer.stages.multistart import (
    DEFAULT_STARTS,
    check_starts,
    has_periodic,
    lomb_scargle,
    period_candidates,
)
from amorgp.amortizer.stages.periodogram import _uniform_blocks
from amorgp.amortizer.testing import planted_period_1d
from amorgp.core.errors import OptionError


@pytest.fixture(scope="module")
def amz() -> Amortizer:
    return Amortizer.from_pretrained(device="cpu")


def _planted_3d(n: int = 150, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Period 2.3 over [0, 10] in input 1 of 3, a linear trend in input 0."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (n, 3))
    y = np.sin(2 * np.pi * X[:, 1] / 2.3) + 0.15 * X[:, 0] + 0.2 * rng.normal(size=n)
    return X, y


def _periods(r: object, dim: int) -> list[float]:
    return [h.original for h in r.table if h.dim == dim and "period" in h.name]  # type: ignore[attr-defined]


def _dense_lml(r: object, X: np.ndarray, y: np.ndarray) -> float:
    norm = r.normalizer  # type: ignore[attr-defined]
    Xn, yn = norm.transform_x(X).numpy(), norm.transform_y(y).numpy()
    K = r.kernel.reference(Xn, Xn, r.params.numpy())  # type: ignore[attr-defined]
    cov = K + r.noise * np.eye(len(yn))  # type: ignore[attr-defined]
    return float(multivariate_normal(np.zeros(len(yn)), cov).logpdf(yn))


def test_finds_a_planted_period_the_single_start_misses(amz: Amortizer) -> None:
    x, y = planted_period_1d()
    one = amz.infer(x, y, "SE + PER", starts=1, refine=0)
    many = amz.infer(x, y, "SE + PER", refine=0)
    assert one.start == "network"
    assert abs(_periods(one, 0)[0] / 2.3 - 1) > 0.2  # the network's guess is elsewhere
    assert many.start.startswith("periodogram")
    assert _periods(many, 0)[0] == pytest.approx(2.3, rel=0.03)
    assert _dense_lml(many, x, y) > _dense_lml(one, x, y) + 5.0


def test_finds_a_planted_period_in_one_dimension_of_three(amz: Amortizer) -> None:
    X, y = _planted_3d()
    kernel = "SE@0 * (SE + PER)@1 * SE@2"
    one = amz.infer(X, y, kernel, starts=1, refine=0)
    many = amz.infer(X, y, kernel, refine=0)
    assert abs(_periods(one, 1)[0] / 2.3 - 1) > 0.2
    assert many.start.startswith("periodogram")
    assert _periods(many, 1)[0] == pytest.approx(2.3, rel=0.03)
    assert _dense_lml(many, X, y) > _dense_lml(one, X, y) + 5.0


@pytest.mark.parametrize("kernel", ["SE + PER", "LIN + SE*PER", "SE + LIN*PER"])
def test_winner_likelihood_is_the_dense_float64_one(amz: Amortizer, kernel: str) -> None:
    """The reported likelihood is the dense float64 one at the winning parameters, and
    never below the network's start."""
    x, y = planted_period_1d(n=80, seed=4)
    r = amz.infer(x, y, kernel, refine=0)
    assert r.log_marginal_likelihood == pytest.approx(_dense_lml(r, x, y), rel=1e-9, abs=1e-9)
    one = amz.infer(x, y, kernel, starts=1, refine=0)
    assert r.log_marginal_likelihood >= one.log_marginal_likelihood - 1e-9


def test_starts_one_is_the_network_and_calibration_alone(amz: Amortizer) -> None:
    """``starts=1`` returns the calibrated network prediction, computed here step by step."""
    x, y = planted_period_1d(n=60, seed=5)
    kernels = ["SE + PER", "LIN + SE*PER"]
    got = amz.infer_many(x, y, kernels, starts=1, refine=0)
    _, Xn, yn, structures = amz.prepare(x, y, kernels)
    params, noise, _, _ = amz.predict_networks(Xn, yn, structures)
    cal = calibrate(Xn, yn, structures, amz.vocabulary, params, noise, seed=amz.seed)
    for i, r in enumerate(got):
        s = structures[i]
        want = cal.params[i, : s.n_dims, : s.max_addends].to(torch.float64)
        assert torch.equal(r.params, want)
        assert r.noise == float(cal.noise[i])
        assert r.start == "network"


def test_kernels_without_a_period_get_the_stretched_and_null_starts(amz: Amortizer) -> None:
    """A kernel without a period (stretched, ladder and null starts) keeps the calibrated prediction where the network's start
    wins (up to the rounding of a kernel matrix evaluated in another batch); where a
    stretched start wins, its lengthscales are exactly the network's times the factor
    (calibration moves only the scale and the noise) and its exact likelihood is above the
    network's (dense float64, numpy's multivariate normal, as the oracle)."""
    from scipy.stats import multivariate_normal

    from amorgp.amortizer.stages.fisher_objective import BatchLogMarginalLikelihood
    from amorgp.amortizer.stages.start_proposals import LADDER, STRETCHES
    from amorgp.amortizer.testing import oracle_covariance

    x, y = planted_period_1d(n=60, seed=6)
    a = amz.infer_many(x, y, ["SE", "LIN + SE"], refine=0)
    b = amz.infer_many(x, y, ["SE", "LIN + SE"], starts=1, refine=0)
    factors = {f"lengthscales {label}": f for f, label in (*STRETCHES, *LADDER)}
    seen = set()
    for ra, rb in zip(a, b, strict=True):
        seen.add(ra.start)
        if ra.start == "network":
            torch.testing.assert_close(ra.params, rb.params, rtol=1e-9, atol=0.0)
            assert ra.noise == pytest.approx(rb.noise, rel=1e-9)
            continue
        assert ra.start in factors, ra.start
        f = factors[ra.start]
        for key, value in rb.hyperparameters.items():
            if key[2] == "lengthscale":
                assert ra.hyperparameters[key] == pytest.approx(f * value, rel=1e-9)

        def dense(r: object) -> float:
            norm = r.normalizer  # type: ignore[attr-defined]
            Xn = norm.transform_x(x).to(torch.float64)
            yn = norm.transform_y(y).to(torch.float64)
            obj = BatchLogMarginalLikelihood(Xn[None], yn[None], r.kernel)  # type: ignore[attr-defined]
            theta = obj.flat_rows(r.params[None], torch.tensor([r.noise]))[0]  # type: ignore[attr-defined]
            K = oracle_covariance(Xn.numpy(), r.kernel, theta.numpy())  # type: ignore[attr-defined]
            return float(multivariate_normal(np.zeros(len(yn)), K).logpdf(yn.numpy()))

        assert dense(ra) > dense(rb)
    assert seen & set(factors)  # the case exercises a stretched start


def test_lomb_scargle_matches_scipy() -> None:
    rng = np.random.default_rng(7)
    x = np.sort(rng.uniform(0, 3, 90))
    y = np.sin(2 * np.pi * x / 0.4) + 0.3 * rng.normal(size=90)
    y = y - y.mean()
    w = np.linspace(0.5, 60.0, 300)
    want = lombscargle(x, y, w)
    got = lomb_scargle(torch.tensor(x)[None], torch.tensor(y)[None], torch.tensor(w))[0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-9 * want.max())


def _uneven_signals(seed: int, G: int = 2, n: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """``G`` rows of uneven positions in ``[0, 1]`` and three centred noisy sinusoids per
    row: ``y (3G, n)``, signal ``b`` sampled at row ``b % G``."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 1, (G, n)), axis=1)
    phase = 2 * np.pi * np.tile(x, (3, 1)) / rng.uniform(0.03, 0.5, (3 * G, 1))
    y = np.sin(phase + rng.uniform(0, 6, (3 * G, 1))) + 0.5 * rng.normal(size=(3 * G, n))
    return x, y - y.mean(1, keepdims=True)


@pytest.mark.parametrize("uniform", [True, False])
def test_lomb_scargle_grids_match_scipy(uniform: bool) -> None:
    """A uniform grid (factored tables) and another (a table per frequency), up to 40
    cycles per unit range, agree with scipy on signals that share their positions."""
    x, y = _uneven_signals(11)
    f = np.linspace(0.5, 40.0, 200) if uniform else np.geomspace(0.5, 40.0, 200)
    w = 2 * np.pi * f
    assert (_uniform_blocks(torch.tensor(w)) is not None) == uniform
    got = lomb_scargle(torch.tensor(x), torch.tensor(y), torch.tensor(w)).numpy()
    assert got.shape == (6, 200)
    for b in range(6):
        np.testing.assert_allclose(got[b], lombscargle(x[b % 2], y[b], w), rtol=1e-9)


def test_lomb_scargle_degenerate_frequencies_stay_bounded() -> None:
    """Where every sample sits at the same phase mod pi (a regular grid at its Nyquist
    frequency, a two-valued input at half-integer cycles) the sine term is 0/0 up to
    rounding: the power stays finite and within its Cauchy-Schwarz bound ``sum y^2``, and
    matches scipy at the other frequencies."""
    n = 40
    x = np.stack([np.linspace(0, 1, n), (np.arange(n) % 3 == 0).astype(float)])
    y = np.random.default_rng(12).normal(size=(2, n))
    y -= y.mean(1, keepdims=True)
    w = 2 * np.pi * np.linspace(1.5, 19.5, 91)  # half-integers every 5th, Nyquist last
    got = lomb_scargle(torch.tensor(x), torch.tensor(y), torch.tensor(w)).numpy()
    assert np.isfinite(got).all()
    assert (got <= (1 + 1e-9) * (y**2).sum(1, keepdims=True)).all()
    for b in range(2):
        sine_sum = 0.5 * (n - np.abs(np.exp(2j * w[:, None] * x[b]).sum(-1)))
        fine = sine_sum > 1e-6 * n
        assert (~fine).sum() >= 1
        want = lombscargle(x[b], y[b], w)
        np.testing.assert_allclose(got[b, fine], want[fine], rtol=1e-9)


def test_period_candidates_peak_at_the_planted_period_of_each_dimension() -> None:
    rng = np.random.default_rng(8)
    X = rng.uniform(0, 1, (200, 2))
    y = np.cos(2 * np.pi * X[:, 1] / 0.07) + 2 * X[:, 0] + 0.1 * rng.normal(size=200)
    (dim, period, power), *_ = period_candidates(torch.tensor(X), torch.tensor(y))
    assert dim == 1
    assert period == pytest.approx(0.07, rel=0.02)
    assert 0 < power <= 1.0


def test_refine_auto_keeps_the_planted_period(amz: Amortizer) -> None:
    x, y = planted_period_1d(n=100, seed=9)
    r = amz.infer(x, y, "SE + PER", refine="auto")
    assert r.start.startswith("periodogram")
    assert _periods(r, 0)[0] == pytest.approx(2.3, rel=0.03)
    assert r.refine_steps > 0
    assert r.log_marginal_likelihood == pytest.approx(_dense_lml(r, x, y), rel=1e-9)
    plain = amz.infer(x, y, "SE + PER", refine=0)
    assert r.log_marginal_likelihood >= plain.log_marginal_likelihood - 1e-6


def test_planted_periodic_structure_wins_model_averaging(amz: Amortizer) -> None:
    """Bayesian model averaging over the amortizer's likelihoods puts the weight on the
    periodic structure (the network alone would have favoured a smooth one)."""
    from amorgp.ensembles import KernelEnsemble

    x, y = planted_period_1d(n=120, seed=10)
    kernels = ["SE", "LIN", "SE + LIN", "SE + PER"]
    ens = KernelEnsemble.fit(amz, x, y, kernels)
    assert int(torch.as_tensor(ens.weights).argmax()) == 3
    assert float(ens.weights[3]) > 0.99
    one = KernelEnsemble.fit(amz.method(), x, y, kernels)  # same method, default starts
    assert np.allclose(one.log_marginal_likelihoods, ens.log_marginal_likelihoods)
    single = Amortizer(amz.model, amz.meta, starts=1)
    lone = KernelEnsemble.fit(single, x, y, kernels)
    assert float(lone.log_marginal_likelihoods[3]) < float(ens.log_marginal_likelihoods[3]) - 5


def test_structure_search_finds_the_planted_period(amz: Amortizer) -> None:
    from amorgp.ensembles import structure_search

    x, y = planted_period_1d(n=120, seed=11)
    res = structure_search(amz, x, y, depth=1, criterion="bic", vocabulary=amz.vocabulary)
    assert has_periodic(res.best.structure)


def test_invalid_starts() -> None:
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(OptionError, match="starts"):
            check_starts(bad)
    assert check_starts(np.int64(3)) == 3
    assert DEFAULT_STARTS > 1


def test_estimator_starts(amz: Amortizer) -> None:
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    x, y = planted_period_1d(n=80, seed=13)
    one = AmortizedGPRegressor("SE + PER", starts=1, refine=0, device="cpu").fit(x[:, None], y)
    many = AmortizedGPRegressor("SE + PER", refine=0, device="cpu").fit(x[:, None], y)
    assert one.result_.start == "network"
    assert many.result_.start == amz.infer(x, y, "SE + PER", refine=0).start
    assert many.get_params()["starts"] is None


def test_above_the_scoring_subset_the_winner_is_calibrated_on_all_points(amz: Amortizer) -> None:
    """With more than ``SCORE_POINTS`` points the starts are scored on a subset; the winner's
    scale and noise are then the exact Type-2 ML ones on all points (scipy, dense)."""
    from scipy.optimize import minimize

    from amorgp.amortizer.stages.multistart import SCORE_POINTS

    x, y = planted_period_1d(n=SCORE_POINTS + 144, seed=14)
    r = amz.infer(x, y, "SE + PER", refine=0)
    assert r.start.startswith("periodogram")
    assert _periods(r, 0)[0] == pytest.approx(2.3, rel=0.03)
    norm = r.normalizer
    Xn, yn = norm.transform_x(x).numpy(), norm.transform_y(y).numpy()
    K = r.kernel.reference(Xn, Xn, r.params.numpy())

    def nll(t: np.ndarray) -> float:
        cov = np.exp(t[0]) * K + np.exp(t[1]) * np.eye(len(yn))
        return -float(multivariate_normal(np.zeros(len(yn)), cov).logpdf(yn))

    best = minimize(nll, [0.0, np.log(r.noise)], method="L-BFGS-B")
    assert -nll(np.array([0.0, np.log(r.noise)])) == pytest.approx(-best.fun, abs=1e-3)


@pytest.mark.parametrize(
    ("symbol", "decay"),
    [
        ("SE*PER", "se_lengthscale"),
        ("PER*MAT52", "mat52_lengthscale"),
        ("PER*RQ", "rq_lengthscale"),
        ("LIN*PER", None),
        ("PER", None),
    ],
)
def test_every_periodic_product_gets_its_decay_floor(symbol: str, decay: str | None) -> None:
    """The starts read the registry's parameter roles, not names: the lengthscale of the
    factor without the period is the decay, raised to DECAY_PERIODS periods in every
    periodogram start, whatever the kernel (SE*PER, MAT52*PER and RQ*PER alike)."""
    from amorgp.amortizer.stages.start_proposals import (
        DECAY_PERIODS,
        PERIODIC_LENGTHSCALE,
        periodic_starts,
        slot_tables,
    )
    from amorgp.kernel_grammar import Vocabulary, base_symbol

    vocab = Vocabulary.with_products(("SE", "LIN", "PER", "MAT52", "RQ"), "all")
    names = list(base_symbol(symbol).param_names)
    sid = vocab.symbols.index(symbol) + 1
    tables = slot_tables(vocab)
    assert int(tables[2][sid]) == (names.index(decay) if decay else -1)
    params = torch.full((1, 1, 1, 5), 0.01, dtype=torch.float64)  # every lengthscale tiny
    symbols = torch.tensor([[sid]])
    mask = torch.ones(1, 1, dtype=torch.bool)
    block, chosen = periodic_starts(params, symbols, mask, tables, [[(0, 0.3, 1.0)]], 4)
    starts = {name: block[0, j] for name, j in chosen[0]}
    got = starts["periodogram"][0, 0]
    period = names.index("per_period" if "per_period" in names else "period")
    assert float(got[period]) == pytest.approx(0.3)
    per_ls = names.index("per_lengthscale" if "per_lengthscale" in names else "lengthscale")
    assert float(got[per_ls]) == PERIODIC_LENGTHSCALE
    if decay is not None:
        assert float(got[names.index(decay)]) >= DECAY_PERIODS * 0.3


def test_start_constants_are_written_on_the_parameters_device() -> None:
    """The periodic starts' constants (a Python float) land on the parameters' device: on
    the ``meta`` device, as on CUDA, a constant left on the CPU is a device mismatch; on
    the CPU each chosen slot holds the constant and every other value is kept."""
    from amorgp.amortizer.stages.start_proposals import _set_many

    slots = torch.tensor([[1, 3], [2, 1], [0, 0]])
    where = torch.rand(2, 3, 2, generator=torch.Generator().manual_seed(0)) < 0.5
    meta = _set_many(
        torch.zeros(2, 3, 2, 4, dtype=torch.float64, device="meta"),
        slots.to("meta"),
        where.to("meta"),
        1.0,
    )
    assert meta.device.type == "meta"
    params = torch.randn(2, 3, 2, 4, dtype=torch.float64)
    out = _set_many(params, slots, where, 7.0)
    chosen = torch.nn.functional.one_hot(slots, 4).bool() & where[..., None]
    assert bool((out[chosen] == 7.0).all())
    assert torch.equal(out[~chosen], params[~chosen])
