"""Many datasets per call (amorgp.amortizer.frontends.many): results against per-dataset infer_many,
per-dataset errors, the fallback path, buckets and progress."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from amorgp.amortizer.api import Amortizer
from amorgp.amortizer.frontends.many import BUDGET, bucket_size
from amorgp.amortizer.stages.fisher import GAIN_TOL
from amorgp.amortizer.stages.objective import LogMarginalLikelihood
from amorgp.amortizer.stages.periodogram import period_candidates, period_candidates_many
from amorgp.core.errors import OptionError

KERNELS = ["SE + PER", "LIN + SE*PER"]


def _series(rng: np.random.Generator, n: int, d: int = 1) -> tuple[np.ndarray, np.ndarray]:
    X = rng.uniform(0.0, 10.0, (n, d))
    period = rng.uniform(1.0, 3.0)
    y = 0.2 * X.sum(1) + np.sin(2 * np.pi * X[:, 0] / period) + 0.1 * rng.standard_normal(n)
    return X, y


@pytest.fixture(scope="module")
def fleet() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    data = [_series(rng, 24) for _ in range(3)]
    data += [_series(rng, 16)]
    data += [_series(rng, 16, d=2)]
    return data


_REFERENCE: dict[tuple[int, str], list] = {}


def _reference(amz: Amortizer, X: np.ndarray, y: np.ndarray, **opts) -> list:
    """Per-dataset infer_many (the oracle), computed once per dataset and options."""
    opts = {"refine": 0, **opts}  # the stages before the refinement, to rounding
    key = (id(X), repr(sorted(opts.items())))
    if key not in _REFERENCE:
        _REFERENCE[key] = amz.infer_many(X, y, KERNELS, **opts)
    return _REFERENCE[key]


def _compare(fits, fleet, amz: Amortizer, rtol: float, lml_atol: float, **opts) -> None:
    for f, (X, y) in zip(fits, fleet, strict=True):
        assert f.ok, f.error
        ref = _reference(amz, X, y, **opts)
        for got, want in zip(f.results, ref, strict=True):
            assert got.kernel_text == want.kernel_text
            torch.testing.assert_close(got.params, want.params, rtol=rtol, atol=0.0)
            assert got.noise == pytest.approx(want.noise, rel=rtol)
            assert got.log_marginal_likelihood == pytest.approx(
                want.log_marginal_likelihood, abs=lml_atol
            )
            assert got.start == want.start
            assert got.n_points == want.n_points
            assert got.encoder_points == want.encoder_points
            assert got.calibrated == want.calibrated


def test_exact_network_equals_infer_many(amz: Amortizer, fleet) -> None:
    """The batched float64 stages give infer_many's numbers to rounding."""
    fits = amz.infer_datasets(fleet, KERNELS, exact_network=True, refine=0)
    assert [f.index for f in fits] == list(range(len(fleet)))
    assert all(f.batched for f in fits)
    _compare(fits, fleet, amz, rtol=1e-8, lml_atol=1e-8)
    # the multi-start moved some pairs: the batched scoring is exercised
    assert any(r.start != "network" for f in fits for r in f.results)


def test_batched_network_equals_infer_many_to_float32(amz: Amortizer, fleet) -> None:
    """One network forward per bucket: equal to infer_many up to the float32 rounding of
    the network carried through the float64 stages."""
    fits = amz.infer_datasets(fleet, KERNELS, refine=0)
    _compare(fits, fleet, amz, rtol=1e-4, lml_atol=1e-3)


def test_without_calibration_and_starts(amz: Amortizer, fleet) -> None:
    fits = amz.infer_datasets(fleet[:2], KERNELS, calibrate=False, exact_network=True, refine=0)
    _compare(fits, fleet[:2], amz, rtol=1e-8, lml_atol=1e-8, calibrate=False)
    fits = amz.infer_datasets(fleet[:2], KERNELS, starts=1, exact_network=True, refine=0)
    _compare(fits, fleet[:2], amz, rtol=1e-8, lml_atol=1e-8, starts=1)


def test_refinement_is_batched_and_each_dataset_is_its_own(amz: Amortizer, fleet) -> None:
    """``refine=k`` runs in the buckets (Fisher scoring, fisher.py): a dataset's result
    does not depend on the others of its bucket, never lowers the likelihood of the
    unrefined fit, and says how it ended."""
    fits = amz.infer_datasets(fleet[:3], KERNELS, refine=3, exact_network=True)
    plain = amz.infer_datasets(fleet[:3], KERNELS, exact_network=True, refine=0)
    assert all(f.batched for f in fits)
    for i, (f, p) in enumerate(zip(fits, plain, strict=True)):
        (alone,) = amz.infer_datasets([fleet[i]], KERNELS, refine=3, exact_network=True)
        for got, one, start in zip(f.results, alone.results, p.results, strict=True):
            torch.testing.assert_close(got.params, one.params, rtol=1e-7, atol=1e-12)
            assert got.log_marginal_likelihood >= start.log_marginal_likelihood - 1e-9
            assert 0 <= got.refine_steps <= 3
            assert got.refine_status in {"converged", "max_iters", "stalled"}
            assert math.isfinite(got.refine_gain)
            assert got.refine_gain >= 0.0
            if got.refine_status == "converged":
                assert got.refine_gain < GAIN_TOL


def test_auto_refinement_stops_at_an_optimum(amz: Amortizer, fleet) -> None:
    """``refine="auto"`` in the buckets stops on the predicted gain: from a pair marked
    converged, many more L-BFGS iterations (the oracle) gain less than a few tenths."""
    fits = amz.infer_datasets(fleet[:2], KERNELS[:1], refine="auto")
    for f, (X, y) in zip(fits, fleet[:2], strict=True):
        (r,) = f.results
        assert r.refine_status == "converged", r.refine_status
        assert r.refine_gain < GAIN_TOL
        Xn, yn = (torch.as_tensor(r.normalizer.transform_x(torch.as_tensor(X)), dtype=torch.float64),
                  torch.as_tensor(r.normalizer.transform_y(torch.as_tensor(y)), dtype=torch.float64))  # fmt: skip
        obj = LogMarginalLikelihood(Xn, yn, r.kernel)
        z = obj.to_log(r.params, torch.tensor(r.noise, dtype=torch.float64))
        _, best, *_ = obj.maximise(z, 300)
        assert best - r.log_marginal_likelihood < 0.1
        assert best - r.log_marginal_likelihood > -1e-6


def test_errors_stay_per_dataset(amz: Amortizer, fleet) -> None:
    X, y = fleet[0]
    bad_y = y.copy()
    bad_y[4] = math.nan
    data = [
        fleet[0],
        (X, np.ones_like(y)),  # constant target
        (X, bad_y),  # NaN
        (X[:2], y[:2]),  # too few points
        "not a pair",
        fleet[1],
    ]
    fits = amz.infer_datasets(data, ["SE + PER"])
    assert [f.ok for f in fits] == [True, False, False, False, False, True]
    assert fits[1].error.startswith("DataError: y is constant")
    assert "NaN" in fits[2].error
    assert "row 5" in fits[2].error
    assert fits[3].error.startswith("DataError: need at least")
    assert fits[4].error == "OptionError: dataset 4 is not a pair (X, y)"
    assert all("\n" not in f.error for f in fits if not f.ok)
    assert fits[0].results[0].log_marginal_likelihood == pytest.approx(
        amz.infer(*fleet[0], "SE + PER").log_marginal_likelihood, abs=1e-3
    )


def test_kernel_that_does_not_fit_some_datasets(amz: Amortizer, fleet) -> None:
    """A kernel for two inputs fails on the one-input datasets only."""
    fits = amz.infer_datasets([fleet[0], fleet[4]], ["SE@0 * PER@1"])
    assert not fits[0].ok
    assert "dimension index 1 out of range" in fits[0].error
    assert fits[1].ok


def test_budget_buckets_and_progress(amz: Amortizer, fleet) -> None:
    calls: list[tuple[str, int, int]] = []
    assert bucket_size(30, len(KERNELS), 8, 1.0) == 1  # one dataset per bucket
    assert bucket_size(100, 1, 8, 2**24) == 11  # 16 n^2 bytes per kernel and start
    assert bucket_size(30, 1, 8, BUDGET) > 100
    fits = amz.infer_datasets(
        fleet, KERNELS, budget=1.0, exact_network=True, progress=lambda *a: calls.append(a)
    )
    assert len(calls) == len(fleet)  # one bucket per dataset
    assert calls[-1] == ("datasets", len(fleet), len(fleet))
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)
    assert [f.index for f in fits] == list(range(len(fleet)))


def test_subsets_above_the_encoder_and_scoring_points(amz: Amortizer) -> None:
    """n = 300: the encoder reads a subset (the tiny network's 40 points) and the
    multi-start scores its starts on a subset (256 points), then calibrates the winners on
    all points: as infer_many."""
    rng = np.random.default_rng(11)
    data = [_series(rng, 264) for _ in range(2)]
    fits = amz.infer_datasets(data, ["SE + PER"], exact_network=True, refine=0)
    for f, (X, y) in zip(fits, data, strict=True):
        (want,) = amz.infer_many(X, y, ["SE + PER"], refine=0)
        (got,) = f.results
        assert got.encoder_points == want.encoder_points == 40
        assert got.start == want.start
        torch.testing.assert_close(got.params, want.params, rtol=1e-8, atol=0.0)
        assert got.log_marginal_likelihood == pytest.approx(want.log_marginal_likelihood, abs=1e-8)


def test_predictions_match(amz: Amortizer, fleet) -> None:
    fit = amz.infer_datasets(fleet[:1], ["SE + PER"], exact_network=True)[0].results[0]
    ref = amz.infer(*fleet[0], "SE + PER")
    Xs = np.linspace(0, 10, 7)[:, None]
    for a, b in zip(fit.predict(Xs), ref.predict(Xs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8)


def test_period_candidates_many_equal_one_by_one() -> None:
    rng = np.random.default_rng(3)
    X = torch.rand(4, 50, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    X[2, :, 0] = torch.linspace(0, 1, 50, dtype=torch.float64)
    X[3, ::2, 0] = X[3, 1::2, 0]  # fewer distinct inputs: another frequency grid
    Y = torch.from_numpy(np.sin(12 * X[..., 0].numpy()) + 0.1 * rng.standard_normal((4, 50)))
    many = period_candidates_many(X, Y)
    for b in range(4):
        one = period_candidates(X[b], Y[b])
        assert [j for j, _, _ in many[b]] == [j for j, _, _ in one]
        np.testing.assert_allclose([p for _, p, _ in many[b]], [p for _, p, _ in one], rtol=1e-9)


def test_options_are_checked(amz: Amortizer, fleet) -> None:
    with pytest.raises(OptionError, match="list of kernels"):
        amz.infer_datasets(fleet, "SE")
    with pytest.raises(OptionError, match="empty"):
        amz.infer_datasets(fleet, [])
    with pytest.raises(OptionError, match="budget"):
        amz.infer_datasets(fleet, ["SE"], budget=0)
    with pytest.raises(OptionError, match="refine"):
        amz.infer_datasets(fleet, ["SE"], refine=-1)
    assert amz.infer_datasets([], ["SE"]) == []


def test_constraints_reach_every_dataset(amz: Amortizer, fleet) -> None:
    """``fixed``, ``bounds`` and ``noise_floor`` hold on every dataset of a bucket (a
    fixed value is returned exactly, a bounded one stays inside); without a refinement
    the buckets give ``infer_many``'s results."""
    fixed = {"noise": 0.05}
    bounds = {(0, 0, "lengthscale"): (0.05, 0.2)}
    opts = {"fixed": fixed, "bounds": bounds, "noise_floor": 1e-8, "refine": 2}
    fits = amz.infer_datasets(fleet[:2], KERNELS[:1], **opts)
    assert all(f.batched for f in fits)
    for f in fits:
        assert f.ok, f.error
        (r,) = f.results
        assert r.noise == 0.05
        assert 0.05 <= r.hyperparameters[(0, 0, "lengthscale")] <= 0.2
        assert r.fixed == fixed
        assert r.bounds == bounds
        assert r.noise_floor == 1e-8
    plain = {"fixed": fixed, "bounds": bounds}
    fits = amz.infer_datasets(fleet[:2], KERNELS[:1], exact_network=True, **plain)
    assert all(f.batched for f in fits)
    for f, (X, y) in zip(fits, fleet[:2], strict=True):
        (want,) = amz.infer_many(X, y, KERNELS[:1], **plain)
        torch.testing.assert_close(f.results[0].params, want.params, rtol=1e-8, atol=0.0)
        assert f.results[0].noise == want.noise == 0.05


def test_constraint_options_are_checked(amz: Amortizer, fleet) -> None:
    with pytest.raises(OptionError, match="priors=True acts through the refinement"):
        amz.infer_datasets(fleet, ["SE"], priors=True, refine=0)
    with pytest.raises(OptionError, match="low < high"):
        amz.infer_datasets(fleet, ["SE"], bounds={"noise": (0.2, 0.1)})
    with pytest.raises(OptionError, match="noise_floor"):
        amz.infer_datasets(fleet, ["SE"], noise_floor=-1.0)
    # a name no kernel has on a dataset's inputs: that dataset's error, the others fit
    fits = amz.infer_datasets(fleet, ["SE"], fixed={(1, 0, "lengthscale"): 0.3})
    assert [f.ok for f in fits] == [False] * 4 + [True]
    assert "a hyperparameter of none of the kernels" in (fits[0].error or "")
    assert fits[4].results[0].hyperparameters[(1, 0, "lengthscale")] == 0.3


@pytest.mark.parametrize("refine", [3, "auto", None])
def test_batched_and_per_dataset_refinement_agree(amz: Amortizer, fleet, refine) -> None:
    """``infer_many`` refines by the same Fisher scoring as the buckets (n <= 1000): a
    fleet's results equal each dataset's own call (``refine="auto"``: the successive
    halving of the best few starts too, over all rows of the bucket at once; ``None``:
    the default refinement)."""
    fits = amz.infer_datasets(fleet[:3], KERNELS, refine=refine, exact_network=True)
    for f, (X, y) in zip(fits, fleet[:3], strict=True):
        for got, want in zip(f.results, amz.infer_many(X, y, KERNELS, refine=refine), strict=True):
            assert got.start == want.start
            torch.testing.assert_close(got.params, want.params, rtol=1e-6, atol=1e-9)
            assert got.refine_steps == want.refine_steps
            assert got.refine_gain == pytest.approx(want.refine_gain, rel=1e-4, abs=1e-9)


def test_a_noise_floor_of_its_own_is_batched(amz: Amortizer, fleet) -> None:
    """A lower noise floor without a refinement runs in the buckets: the batched
    calibration searches down to it, as infer_many's does (equal results)."""
    x = np.linspace(0.0, 6.0, 24)[:, None]
    data = [*fleet[:2], (x, np.sin(x[:, 0])), (x, np.cos(2 * x[:, 0]))]  # noiseless too
    fits = amz.infer_datasets(data, KERNELS, noise_floor=1e-9, exact_network=True, refine=0)
    assert all(f.batched for f in fits)
    assert min(r.noise for f in fits for r in f.results) < 2e-6  # below the default's reach
    for f, (X, y) in zip(fits, data, strict=True):
        want = amz.infer_many(X, y, KERNELS, noise_floor=1e-9, refine=0)
        for got, w in zip(f.results, want, strict=True):
            torch.testing.assert_close(got.params, w.params, rtol=1e-7, atol=0.0)
            assert got.noise == pytest.approx(w.noise, rel=1e-7)
            assert got.noise_floor == 1e-9


@pytest.mark.parametrize(
    "options",
    [{"dtype": torch.float32}, {"memory_budget": 2e4}],
    ids=["float32", "cg-solver"],
)
def test_every_option_runs_in_the_buckets(tiny_checkpoint, fleet, monkeypatch, options) -> None:
    """Float32 GP algebra and a solver that is not dense Cholesky (a memory budget that
    leaves dense CG) run through the buckets' pipeline, never one ``infer_many`` per dataset, and
    give each dataset's own results (the per-dataset route inside the batch)."""
    amz = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", **options)
    data = fleet[:3]
    assert amz.solver_plan(24, 2, graph=False).dense == ("dtype" in options)
    want = [amz.infer_many(X, y, KERNELS, evaluate_lml=True) for X, y in data]

    def refused(*args, **kwargs):
        raise AssertionError("infer_datasets fell back to infer_many")

    monkeypatch.setattr(Amortizer, "infer_many", refused)
    fits = amz.infer_datasets(data, KERNELS, exact_network=True)
    assert all(f.ok and f.batched for f in fits), [f.error for f in fits]
    for f, w in zip(fits, want, strict=True):
        for got, one in zip(f.results, w, strict=True):
            assert got.start == one.start
            torch.testing.assert_close(got.params, one.params, rtol=1e-5, atol=1e-9)
            assert got.log_marginal_likelihood == pytest.approx(
                one.log_marginal_likelihood, rel=1e-5, abs=1e-4
            )
