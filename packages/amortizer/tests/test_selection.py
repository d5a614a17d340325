"""Candidate networks: per kernel, the prediction of highest log marginal likelihood.

Oracle for the likelihood: a dense SE kernel written out in numpy and
``scipy.stats.multivariate_normal`` (independent of the batched GP code), and, for the
amortizer, each network's own single-network prediction.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer import Amortizer
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.selection import select_by_likelihood
from amorgp.amortizer.testing import seeded_checkpoint
from amorgp.core.errors import CheckpointError, OptionError
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary
from amorgp.lazy_kernels import PaddedBatch


def _se_lml(x: np.ndarray, y: np.ndarray, var: float, ls: float, noise: float) -> float:
    r2 = (x[:, None] - x[None, :]) ** 2
    K = var * np.exp(-0.5 * r2 / ls**2) + noise * np.eye(len(x))
    return float(multivariate_normal(np.zeros(len(x)), K).logpdf(y))


def test_selection_picks_the_highest_likelihood_per_element() -> None:
    rng = np.random.default_rng(0)
    datasets, xs, ys = [], [], []
    for b in range(4):
        x = np.sort(rng.uniform(0, 1, 30 + 5 * b))
        y = np.sin((3 + 4 * b) * x) + 0.1 * rng.normal(size=len(x))
        xs.append(x)
        ys.append(y)
        datasets.append((torch.tensor(x[:, None]), torch.tensor(y)))
    batch = PaddedBatch.from_datasets(datasets, [DimWiseStructure.parse("SE", 1)] * 4)
    D, L, P = batch.param_shape[1:]
    cands = []
    for ls in (0.05, 0.3, 1.5):  # (B, D, L, P): the SE slot holds (variance, lengthscale)
        p = torch.zeros(4, D, L, P, dtype=torch.float64)
        p[..., 0], p[..., 1] = 1.0, ls
        cands.append((p, torch.full((4,), 0.05, dtype=torch.float64)))
    params, noise, index = select_by_likelihood(batch, cands)
    for b in range(4):
        want = int(np.argmax([_se_lml(xs[b], ys[b], 1.0, ls, 0.05) for ls in (0.05, 0.3, 1.5)]))
        assert int(index[b]) == want
        assert torch.equal(params[b], cands[want][0][b])
        assert float(noise[b]) == 0.05
    assert len(set(index.tolist())) > 1  # the data make different candidates win


def test_selection_ties_and_failures_go_to_the_first_candidate() -> None:
    x = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
    se = DimWiseStructure.parse("SE", 1)
    batch = PaddedBatch.from_datasets([(x, torch.sin(6 * x[:, 0]))] * 2, [se] * 2)
    D, L, P = batch.param_shape[1:]
    p = torch.ones(2, D, L, P, dtype=torch.float64) * 0.3
    n = torch.full((2,), 0.1, dtype=torch.float64)
    assert select_by_likelihood(batch, [(p, n), (p.clone(), n.clone())])[2].tolist() == [0, 0]
    bad = p.clone()
    bad[0] = float("nan")  # the first candidate cannot be evaluated on pair 0
    assert select_by_likelihood(batch, [(bad, n), (p, n)])[2].tolist() == [1, 0]
    with pytest.raises(ValueError, match="at least one"):
        select_by_likelihood(batch, [])
    with pytest.raises(ValueError, match="different shapes"):
        select_by_likelihood(batch, [(p, n), (p[:1], n[:1])])


@pytest.fixture(scope="module")
def two_networks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cands")
    net = PRESETS["tiny"].network
    return seeded_checkpoint(root / "a", net, seed=1), seeded_checkpoint(root / "b", net, seed=2)


def test_amortizer_keeps_each_kernels_most_likely_prediction(
    two_networks: tuple[Path, Path],
) -> None:
    a, b = two_networks
    # the networks' own predictions (calibration, the default, follows the selection)
    both = Amortizer.from_pretrained(a, device="cpu", candidates=[b], calibrate=False)
    solo = [
        Amortizer.from_pretrained(p, device="cpu", candidates=(), calibrate=False) for p in (a, b)
    ]
    assert both.network_names == ["a", "b"]
    rng = np.random.default_rng(3)
    X = rng.uniform(0, 5, (35, 2))
    y = np.sin(X[:, 0]) * X[:, 1] + 0.1 * rng.normal(size=35)
    kernels = ["SE", "SE + PER", "LIN * SE", "PER", "SE + LIN"]
    got = both.infer_many(X, y, kernels, refine=0)
    ref = [s.infer_many(X, y, kernels, evaluate_lml=True, refine=0) for s in solo]
    for k, r in enumerate(got):  # 35 points: the encoder read them all, so the full LML
        lml = [ref[0][k].log_marginal_likelihood, ref[1][k].log_marginal_likelihood]
        win = int(np.argmax(lml))
        assert r.network == ["a", "b"][win]
        assert torch.allclose(r.params, ref[win][k].params)
        assert r.noise == pytest.approx(ref[win][k].noise)
        assert r.log_marginal_likelihood == pytest.approx(max(lml), rel=1e-9, abs=1e-9)
        assert r.to_dict()["network"] == r.network


def test_candidates_from_the_checkpoint_and_bad_candidates(
    two_networks: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = two_networks
    c = tmp_path / "c"
    shutil.copytree(a, c)
    meta = json.loads((c / "checkpoint.json").read_text())
    meta["candidates"] = [str(b)]
    (c / "checkpoint.json").write_text(json.dumps(meta))
    assert list(Amortizer.from_pretrained(c, device="cpu").candidates) == ["b"]
    assert Amortizer.from_pretrained(c, device="cpu", candidates=()).candidates == {}
    meta["candidates"] = "b"
    (c / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="'candidates' must be a list"):
        Amortizer.from_pretrained(c, device="cpu")
    with pytest.raises(OptionError, match="given twice"):
        Amortizer.from_pretrained(a, device="cpu", candidates=[b, b])
    with pytest.raises(CheckpointError):
        Amortizer.from_pretrained(a, device="cpu", candidates=[tmp_path / "missing"])
    other = Amortizer.from_pretrained(b, device="cpu").model
    other.vocabulary = Vocabulary(("SE", "LIN"))  # type: ignore[misc]
    base = Amortizer.from_pretrained(a, device="cpu", candidates=()).model
    with pytest.raises(OptionError, match="vocabulary"):
        Amortizer(base, candidates={"x": other})


@pytest.mark.parametrize("name", ["default", "small-d8-c376k"])
def test_bundled_checkpoints_load_the_candidates_they_name(name: str) -> None:
    from amorgp.amortizer.networks.bundled import resolve_checkpoint

    meta = json.loads((resolve_checkpoint(name) / "checkpoint.json").read_text())
    amz = Amortizer.from_pretrained(name, device="cpu")
    assert amz.network_names == [name, *meta.get("candidates", [])]


def _calibrated_se_lml(x: np.ndarray, y: np.ndarray, var: float, ls: float, noise: float) -> float:
    """The SE likelihood at its best global scale and noise (scipy's optimum)."""
    from scipy.optimize import minimize

    r2 = (x[:, None] - x[None, :]) ** 2
    base = var * np.exp(-0.5 * r2 / ls**2)

    def neg(z: np.ndarray) -> float:
        K = np.exp(z[0]) * base + noise * np.exp(z[1]) * np.eye(len(x))
        sign, logdet = np.linalg.slogdet(K)
        if sign <= 0 or not np.all(np.abs(z) < 20):
            return 1e10
        return 0.5 * (y @ np.linalg.solve(K, y) + logdet + len(x) * np.log(2 * np.pi))

    best = min(
        (
            minimize(neg, z0, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10})
            for z0 in ([0.0, 0.0], [-3.0, 0.0], [0.0, -3.0])
        ),
        key=lambda r: r.fun,
    )
    return -float(best.fun)


def test_calibrated_selection_scores_each_prediction_at_its_best_scale_and_noise() -> None:
    """``best_prediction(calibrated=True)`` keeps, per pair, the prediction whose
    likelihood at its Type-2 ML scale and noise is highest; here that is another
    prediction than the one the likelihood as predicted prefers."""
    from amorgp.amortizer.stages.pairs import best_prediction

    rng = np.random.default_rng(5)
    vocab = Vocabulary(("SE",))
    xs, ys = [], []  # three datasets, the kernel SE (symbol 1 in one slot)
    for _ in range(3):
        x = np.sort(rng.uniform(0, 1, 40))
        xs.append(x)
        ys.append(np.sin(9 * x) + 0.1 * rng.normal(size=40))
    X = torch.tensor(np.stack(xs))[..., None]
    Y = torch.tensor(np.stack(ys))
    sym = torch.ones(1, 1, 1, dtype=torch.long)
    msk = torch.ones(1, 1, 1, dtype=torch.bool)
    # a: a good lengthscale, scale and noise 30x too large; b: a longer lengthscale
    a = (
        torch.tensor([[[[30.0, 0.12]]]] * 3, dtype=torch.float64),
        torch.full((3,), 0.3, dtype=torch.float64),
    )
    b = (
        torch.tensor([[[[1.0, 0.3]]]] * 3, dtype=torch.float64),
        torch.full((3,), 0.01, dtype=torch.float64),
    )
    a[0][2, 0, 0, 1] = 0.9  # dataset 2: a's lengthscale is the worse one
    got = {}
    for calibrated in (False, True):
        got[calibrated] = best_prediction(X, Y, sym, msk, [a, b], vocab, calibrated)
    for i in range(3):
        x, y = xs[i], ys[i]
        raw = [_se_lml(x, y, *p[0][i, 0, 0].tolist(), float(p[1][i])) for p in (a, b)]
        cal = [_calibrated_se_lml(x, y, *p[0][i, 0, 0].tolist(), float(p[1][i])) for p in (a, b)]
        for calibrated, score in ((False, raw), (True, cal)):
            params, noise, index = got[calibrated]
            win = int(np.argmax(score))
            assert int(index[i]) == win, (i, calibrated, score)
            chosen = (a, b)[win]
            assert torch.equal(params[i], chosen[0][i])
            assert float(noise[i]) == float(chosen[1][i])
    assert bool((got[False][2] != got[True][2]).any())  # the criterion matters here


def test_fleet_and_one_dataset_choose_the_same_network(two_networks: tuple[Path, Path]) -> None:
    """Candidate networks in ``infer_datasets`` (every network one batched forward, the
    rows chosen together) give each dataset what ``infer_many`` gives it, calibrated or
    not."""
    a, b = two_networks
    both = Amortizer.from_pretrained(a, device="cpu", candidates=[b])
    rng = np.random.default_rng(11)
    fleet = []
    for _ in range(4):
        X = rng.uniform(0, 5, (30, 2))
        fleet.append(
            (X, np.sin(X[:, 0] * rng.uniform(0.5, 3)) * X[:, 1] + 0.1 * rng.normal(size=30))
        )
    kernels = ["SE", "SE + PER", "LIN * SE"]
    won: set[str] = set()
    for calibrate in (False, True):
        for exact in (False, True):
            fits = both.infer_datasets(
                fleet, kernels, refine=0, starts=1, calibrate=calibrate, exact_network=exact
            )
            for (X, y), fit in zip(fleet, fits, strict=True):
                assert fit.ok, fit.error
                ref = both.infer_many(X, y, kernels, refine=0, starts=1, calibrate=calibrate)
                for r, s in zip(fit.results, ref, strict=True):
                    assert r.network == s.network
                    torch.testing.assert_close(r.params, s.params, rtol=1e-4, atol=1e-6)
                    won.add(r.network)
    assert won == {"a", "b"}  # both networks win rows


@pytest.mark.parametrize("calibrated", [False, True])
def test_a_prediction_that_cannot_be_scored_never_wins(calibrated: bool) -> None:
    """A non-finite prediction loses to any scorable one; where none is scorable the
    first (the primary network's) is kept."""
    from amorgp.amortizer.stages.pairs import best_prediction

    rng = np.random.default_rng(2)
    x = np.sort(rng.uniform(0, 1, 30))
    X = torch.tensor(np.stack([x, x]))[..., None]
    Y = torch.tensor(np.stack([np.sin(6 * x), np.cos(6 * x)]))
    sym = torch.ones(1, 1, 1, dtype=torch.long)
    msk = torch.ones(1, 1, 1, dtype=torch.bool)
    good = (torch.tensor([[[[1.0, 0.2]]]] * 2, dtype=torch.float64), torch.full((2,), 0.01))
    poor = (torch.tensor([[[[1.0, 5.0]]]] * 2, dtype=torch.float64), torch.full((2,), 0.01))
    bad = (good[0].clone(), good[1].clone().double())
    bad[0][0, 0, 0, 1] = float("nan")  # row 0: a NaN lengthscale
    bad[1][1] = float("nan")  # row 1: a NaN noise
    vocab = Vocabulary(("SE",))
    poor = (poor[0], poor[1].double())
    _, _, index = best_prediction(X, Y, sym, msk, [bad, poor], vocab, calibrated)
    assert index.tolist() == [1, 1]
    _, _, index = best_prediction(X, Y, sym, msk, [bad, bad], vocab, calibrated)
    assert index.tolist() == [0, 0]
