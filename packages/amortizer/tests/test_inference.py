"""The Amortizer's front end: no baselines on the plain path, warnings, extreme scales."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from amorgp.amortizer.api import Amortizer
from amorgp.core.errors import DataError
from amorgp.lazy_kernels import EVALUATOR_MATRICES_NO_GRAPH


def _data(n: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 6, size=(n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)


_NO_BASELINES = """
import sys
import numpy as np
from amorgp.amortizer import Amortizer, AmortizedGPRegressor
x = np.linspace(0, 5, 20)
r = Amortizer.from_pretrained({ckpt!r}, device="cpu").infer(x, np.sin(x), "SE + PER")
r.predict(x[:3]); r.log_marginal_likelihood
reg = AmortizedGPRegressor("SE", checkpoint={ckpt!r}, device="cpu").fit(x[:, None], np.cos(x))
reg.predict(x[:2, None], return_std=True)
assert "amorgp.baselines" not in sys.modules, "plain inference imported amorgp.baselines"
r = Amortizer.from_pretrained({ckpt!r}, device="cpu").infer(x, np.sin(x), "SE", refine=1)
assert "amorgp.diff_linalg.optim" in sys.modules  # refinement's L-BFGS
assert "amorgp.baselines" not in sys.modules, "refinement imported amorgp.baselines"
print("ok")
"""


def test_plain_inference_does_not_import_the_baselines(tiny_checkpoint: Path) -> None:
    code = _NO_BASELINES.format(ckpt=str(tiny_checkpoint))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


def test_warns_about_addends_and_constant_columns(amz: Amortizer) -> None:
    X, y = _data()
    many = " + ".join(["SE"] * (amz.max_addends + 1))
    with pytest.warns(
        UserWarning, match=rf"{amz.max_addends + 1} addends .* at most {amz.max_addends}"
    ):
        amz.infer(X, y, many)
    X2 = np.column_stack([X[:, 0], np.full(len(X), 3.0)])
    with pytest.warns(UserWarning, match=r"input column\(s\) 2 \(counting from 1\) are constant"):
        amz.infer(X2, y, "SE")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        amz.infer(X, y, " + ".join(["SE"] * amz.max_addends))


@pytest.mark.parametrize("scale", [1e-140, 1e-60, 1e60, 1e140])
def test_extreme_target_scales_map_exactly(amz: Amortizer, scale: float) -> None:
    """Scaling y by c scales means by c, variances by c^2 and shifts the LML by -n log c;
    the normalised result is unchanged (oracle: the unit-scale run)."""
    X, y = _data()
    ref, r = amz.infer(X, y, "SE + PER"), amz.infer(X, y * scale, "SE + PER")
    assert r.noise == pytest.approx(ref.noise, rel=1e-9)
    assert r.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood, rel=1e-9)
    assert r.log_marginal_likelihood_original == pytest.approx(
        ref.log_marginal_likelihood_original - len(y) * math.log(scale), rel=1e-9
    )
    assert r.noise_original == pytest.approx(ref.noise_original * scale**2, rel=1e-9)
    m, v = r.predict(X[:4])
    m0, v0 = ref.predict(X[:4])
    np.testing.assert_allclose(np.asarray(m), np.asarray(m0) * scale, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(v), np.asarray(v0) * scale**2, rtol=1e-8)
    assert all(h.original is None or math.isfinite(h.original) for h in r.table)


@pytest.mark.parametrize("scale", [1e-300, 1e-162, 1e160, 1e300])
def test_unrepresentable_target_scales_are_refused(amz: Amortizer, scale: float) -> None:
    X, y = _data()
    with pytest.raises(DataError, match=r"standard deviation .* rescale y"):
        amz.infer(X, y * scale, "SE")


def test_input_ranges(amz: Amortizer) -> None:
    X, y = _data()
    Xs = X / 6.0 * 3.4e307 - 1.7e307  # a representable range of 3.4e307
    r = amz.infer(Xs, y, "SE")
    assert math.isfinite(r.log_marginal_likelihood)
    assert bool(np.isfinite(np.asarray(r.predict(Xs[:3])[0])).all())
    with pytest.raises(DataError, match=r"input column 1 spans .* rescale the inputs"):
        amz.infer((X / 6.0 - 0.5) * 2.0 * 1.7e308, y, "SE")


def test_data_rows_count_from_one(amz: Amortizer) -> None:
    X, y = _data(10)
    y[4] = np.nan
    with pytest.raises(DataError, match=r"first at data row 5; counting from 1"):
        amz.infer(X, y, "SE")


@pytest.mark.parametrize("budget", [None, "cg"])
def test_one_factorisation_serves_the_likelihood_and_every_prediction(
    tiny_checkpoint: Path, budget: str | None
) -> None:
    """The result keeps one posterior: LML and repeated predictions share its factor, and
    the predictions equal those of a fresh posterior (dense oracle path)."""
    X, y = _data(120 if budget else 30)
    kwargs = {}
    if budget:  # dense CG: the evaluator (no graph) fits, the Cholesky workspace does not
        kwargs["memory_budget"] = (EVALUATOR_MATRICES_NO_GRAPH + 1) * 8 * len(y) ** 2
    a = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", **kwargs)
    r = a.infer(X, y, "SE + PER")
    assert r._posterior is not None
    assert r.posterior.backend == ("cg" if budget else "cholesky")
    post = r.posterior
    assert math.isfinite(r.log_marginal_likelihood)
    m1, v1 = r.predict(X[:7])
    m2, _ = r.predict(np.linspace(0, 6, 50)[:, None])
    r.log_predictive_density(X[:5], y[:5])
    assert r.posterior is post
    assert post.factorizations == 1
    again = a.infer(X, y, "SE + PER").predict(X[:7])
    np.testing.assert_allclose(np.asarray(m1), np.asarray(again[0]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(v1), np.asarray(again[1]), rtol=1e-6)
    assert m2.shape == (50,)


def test_estimator_keeps_one_posterior(tiny_checkpoint: Path) -> None:
    from amorgp.amortizer import AmortizedGPRegressor

    X, y = _data()
    reg = AmortizedGPRegressor("SE", checkpoint=str(tiny_checkpoint), device="cpu").fit(X, y)
    assert math.isfinite(reg.log_marginal_likelihood_)
    reg.predict(X[:3])
    reg.predict(X[:5], return_std=True)
    assert reg.result_.posterior.factorizations == 1


def test_broken_weights_are_an_error_not_a_result(tiny_checkpoint: Path) -> None:
    import torch

    from amorgp.core.errors import CheckpointError

    a = Amortizer.from_pretrained(tiny_checkpoint, device="cpu")
    with torch.no_grad():
        next(a.model.parameters()).fill_(float("nan"))
    X, y = _data()
    with pytest.raises(CheckpointError, match="non-finite hyperparameters"):
        a.infer(X, y, "SE")


def test_cg_likelihood_with_the_default_preconditioner_is_near_exact() -> None:
    """Above the dense limit the CG backend's LML (SLQ log-determinant) matches the exact
    Cholesky LML of the same hyperparameters; the default preconditioner rank makes the
    preconditioned system nearly the identity (rank 64 missed by ~0.8 nats here)."""
    from amorgp.amortizer.frontends.inference import DEFAULT_PRECOND_RANK

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 400)
    y = np.sin(2 * x) + 0.3 * np.cos(7 * x) + 0.1 * rng.normal(size=400)
    exact = Amortizer.from_pretrained(device="cpu").infer(x, y, "SE + PER", refine=0)
    # the evaluator (no graph) fits the budget, the Cholesky workspace does not
    a = Amortizer.from_pretrained(
        device="cpu", memory_budget=(EVALUATOR_MATRICES_NO_GRAPH + 1) * 8 * 400**2
    )
    assert a.gp_options["precond_rank"] == DEFAULT_PRECOND_RANK
    r = a.infer(x, y, "SE + PER", evaluate_lml=True, refine=0)
    assert r._posterior is not None
    assert r.posterior.backend == "cg"
    assert r.log_marginal_likelihood == pytest.approx(exact.log_marginal_likelihood, abs=1e-2)


def test_ensemble_predictive_reuses_the_members_factors(amz: Amortizer) -> None:
    """Amortized members whose likelihood was evaluated densely keep their Cholesky factor;
    the ensemble's predictive reuses it (no second factorisation) and equals the mixture
    of the batched path, which re-evaluates and re-factors every member's matrix."""
    from amorgp.ensembles import KernelEnsemble
    from amorgp.ensembles.batched import batched_member_predictive

    X, y = _data(35, seed=4)
    kernels = ["SE", "PER", "SE + PER", "LIN*PER"]
    ens = KernelEnsemble.fit(amz, X, y, kernels)
    fits = [f for f in ens.fits if f is not None]
    assert len(fits) == len(kernels)
    assert all(f.factored for f in fits)
    Xq = np.linspace(-0.5, 6.5, 9)[:, None]
    mix = ens.predictive(Xq)
    assert [f.posterior.factorizations for f in fits] == [1] * len(kernels)
    batched = batched_member_predictive(fits, X, y, Xq)
    assert batched is not None
    w = ens.weights[:, None]
    mean = (w * batched[0]).sum(0)
    var = (w * (batched[1] + batched[0] ** 2)).sum(0) - mean**2
    torch.testing.assert_close(mix.mean(), mean, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(mix.variance(), var, rtol=1e-8, atol=1e-10)
