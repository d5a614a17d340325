"""Tests of the inference API against independent dense float64 oracles."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.linalg import cho_factor, cho_solve

from amorgp.amortizer.api import PRETRAINED_DIR, Amortizer, KernelResult
from amorgp.amortizer.networks.checkpoint import save_checkpoint
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import build_model
from amorgp.amortizer.testing import oracle_log_marginal_likelihood as _oracle_lml
from amorgp.diff_linalg.testing import dense_gp_predictive, torch_settings
from amorgp.kernel_grammar import DimWiseStructure, encode
from amorgp.lazy_kernels import EVALUATOR_MATRICES_NO_GRAPH, EVALUATOR_MATRICES_PER_TERM


def _fit_oracle_lml(r: KernelResult, X: np.ndarray, y: np.ndarray) -> float:
    """The dense oracle's log marginal likelihood of the fit ``r`` on its normalised data."""
    norm = r.normalizer
    Xn, yn = norm.transform_x(X).numpy(), norm.transform_y(y).numpy()
    return _oracle_lml(Xn, yn, r.kernel, r.params.numpy(), r.noise)


def _data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 5, size=(n, d)) * np.arange(1, d + 1)
    y = np.sin(X).sum(1) * 3 + 10 + 0.1 * rng.normal(size=n)
    return X, y


def test_infer_many_equals_the_full_network_per_kernel(amz: Amortizer) -> None:
    """One encoder pass for all kernels gives the network's own forward for each kernel."""
    X, y = _data(30, 2)
    kernels = ["SE", "(SE + PER)@0 * LIN@1", "SE*PER + LIN"]
    results = amz.infer_many(X, y, kernels, calibrate=False, refine=0)
    norm = results[0].normalizer
    Xn = torch.as_tensor(norm.transform_x(X), dtype=torch.float32)[None]
    yn = torch.as_tensor(norm.transform_y(y), dtype=torch.float32)[None]
    for k, r in zip(kernels, results, strict=True):
        s = DimWiseStructure.parse(k, 2)
        sym, mask = encode([s], amz.vocabulary)
        with torch.no_grad():
            pred = amz.model(
                Xn,
                yn,
                torch.ones(1, 30, dtype=torch.bool),
                torch.ones(1, 2, dtype=torch.bool),
                torch.as_tensor(sym),
                torch.as_tensor(mask),
            )
        L = s.max_addends
        used = (
            torch.as_tensor(amz.vocabulary.param_kind_table()[1])[torch.as_tensor(sym[0])]
            & torch.as_tensor(mask[0])[..., None]
        )
        torch.testing.assert_close(
            r.params[used], pred.params[0, :, :L][used].double(), rtol=1e-5, atol=1e-6
        )
        assert r.noise == pytest.approx(float(pred.noise[0]), rel=1e-5)


@pytest.mark.parametrize("kernel", ["SE + PER", "(LIN + SE)@0 * (SE*PER)@1"])
def test_log_marginal_likelihood_matches_dense_oracle(amz: Amortizer, kernel: str) -> None:
    X, y = _data(25, 2, seed=1)
    r = amz.infer(X, y, kernel)
    norm = r.normalizer
    Xn, yn = norm.transform_x(X).numpy(), norm.transform_y(y).numpy()
    expect = _oracle_lml(Xn, yn, r.kernel, r.params.numpy(), r.noise)
    assert r.log_marginal_likelihood == pytest.approx(expect, rel=1e-9)
    # original units: y = mean + std * y~; the covariance scales by std^2
    K = norm.y_std**2 * (r.kernel.reference(Xn, Xn, r.params.numpy()) + r.noise * np.eye(25))
    # scipy's Cholesky, not multivariate_normal: its eigendecomposition loses digits at the
    # near-noiseless fits (condition 4e8 here: 1e-9 relative, where a factorisation's
    # error is 1e-12 against 50-digit arithmetic)
    factor = cho_factor(K, lower=True)
    d = y - norm.y_mean
    orig = -0.5 * d @ cho_solve(factor, d) - np.log(np.diag(factor[0])).sum()
    orig -= 12.5 * np.log(2 * np.pi)
    assert r.log_marginal_likelihood_original == pytest.approx(orig, rel=1e-9)
    assert r.noise_original == pytest.approx(r.noise * y.std() ** 2)


def test_predict_matches_dense_oracle(amz: Amortizer) -> None:
    X, y = _data(30, 1, seed=2)
    r = amz.infer(X, y, "SE + PER")
    Xq = np.linspace(-3, 7, 11)[:, None]
    mean, var = r.predict(Xq)
    m, v = _oracle_predict(r, X, y, Xq)
    np.testing.assert_allclose(np.asarray(mean), m, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(var), v, rtol=1e-7)
    _, latent = r.predict(Xq, include_noise=False)
    np.testing.assert_allclose(np.asarray(var) - np.asarray(latent), r.noise_original, rtol=1e-7)
    with pytest.raises(ValueError, match="fitted with 1 column"):
        r.predict(np.zeros((2, 2)))


def test_table_names_units_and_json(amz: Amortizer) -> None:
    X, y = _data(20, 1, seed=3)
    r = amz.infer(X, y, "LIN + SE*PER")
    names = [(h.symbol, h.name) for h in r.table]
    assert names == [
        ("LIN", "variance"),
        ("LIN", "offset"),
        ("SE*PER", "variance"),
        ("SE*PER", "se_lengthscale"),
        ("SE*PER", "per_lengthscale"),
        ("SE*PER", "per_period"),
    ]
    by = {(h.symbol, h.name): h for h in r.table}
    assert by[("LIN", "variance")].original is None  # not exactly mappable
    rng = float(np.ptp(X))
    assert by[("SE*PER", "per_period")].original == pytest.approx(
        by[("SE*PER", "per_period")].value * rng
    )
    assert by[("SE*PER", "per_lengthscale")].original == by[("SE*PER", "per_lengthscale")].value
    assert by[("SE*PER", "variance")].original == pytest.approx(
        by[("SE*PER", "variance")].value * y.std() ** 2
    )
    d = json.loads(json.dumps(r.to_dict()))
    assert d["kernel"] == "LIN + SE*PER"
    assert len(d["hyperparameters"]) == 6
    assert r.hyperparameters[(0, 1, "per_period")] == by[("SE*PER", "per_period")].value


def test_large_n_encoder_reads_a_seeded_subset(tiny_checkpoint: Path) -> None:
    X, y = _data(120, 1, seed=4)
    a = Amortizer.from_pretrained(tiny_checkpoint, device="cpu", encoder_points=50, seed=7)
    r = a.infer(X, y, "SE", calibrate=False, refine=0)
    assert r.encoder_points == 50
    assert r.n_points == 120
    idx = a.encoder_subset(120)
    assert idx is not None
    assert len(set(idx.tolist())) == 50
    assert torch.equal(
        idx,
        Amortizer.from_pretrained(tiny_checkpoint, encoder_points=50, seed=7).encoder_subset(120),
    )
    assert not torch.equal(
        idx,
        Amortizer.from_pretrained(tiny_checkpoint, encoder_points=50, seed=8).encoder_subset(120),
    )
    # the network saw exactly the subset: same result as inferring on the subset alone,
    # once the normalisation of the full data is applied
    norm = r.normalizer
    Xn = torch.as_tensor(norm.transform_x(X))
    yn = torch.as_tensor(norm.transform_y(y))
    full = Amortizer.from_pretrained(tiny_checkpoint, encoder_points=1000)
    p_sub, _n_sub, read = full.predict_parameters(Xn[idx], yn[idx], [r.kernel])
    assert read == 50
    torch.testing.assert_close(r.params, p_sub[0, :1, :1])
    # the GP conditions on all points
    expect = _fit_oracle_lml(r, X, y)
    assert r.log_marginal_likelihood == pytest.approx(expect, rel=1e-9)


def test_warns_above_trained_dimension(amz: Amortizer) -> None:
    X, y = _data(15, 4)  # the tiny preset trains on d <= 3
    with pytest.warns(UserWarning, match="trained on at most 3"):
        amz.infer(X, y, "SE")
    with warnings.catch_warnings(record=True) as seen:  # within the trained dimensions
        warnings.simplefilter("always")
        amz.infer(X[:, :3], y, "SE")
    assert not [w for w in seen if "trained on at most" in str(w.message)]


def test_refine_improves_the_likelihood(amz: Amortizer) -> None:
    X, y = _data(30, 1, seed=5)
    r0, r1 = amz.infer(X, y, "SE + PER", refine=0), amz.infer(X, y, "SE + PER", refine=15)
    assert r1.refine_steps == 15
    assert r1.log_marginal_likelihood > r0.log_marginal_likelihood
    expect = _fit_oracle_lml(r1, X, y)
    assert r1.log_marginal_likelihood == pytest.approx(expect, rel=1e-9)


def test_float32_gp_algebra_agrees(tiny_checkpoint: Path) -> None:
    X, y = _data(25, 1, seed=6)
    r64 = Amortizer.from_pretrained(tiny_checkpoint).infer(X, y, "SE", refine=0)
    r32 = Amortizer.from_pretrained(tiny_checkpoint, dtype=torch.float32).infer(
        X, y, "SE", refine=0
    )
    assert r32.log_marginal_likelihood == pytest.approx(r64.log_marginal_likelihood, rel=1e-3)


@pytest.mark.parametrize(
    ("X", "y", "kernel", "match"),
    [
        (np.array([[0.0], [1.0], [np.nan]]), np.array([1.0, 2.0, 3.0]), "SE", "NaN or infinite"),
        (np.array([[0.0], [1.0]]), np.array([1.0, 2.0]), "SE", "at least 3"),
        (np.array([[0.0], [1.0], [2.0]]), np.array([1.0, 1.0, 1.0]), "SE", "constant"),
        (
            np.zeros((3, 2)),
            np.array([1.0, 2.0, 3.0]),
            "SE@0",
            r"no kernel on input dimension\(s\) \[1\]",
        ),
        (
            np.zeros((3, 1)),
            np.array([1.0, 2.0, 3.0]),
            "SE@0 * PER@1",
            "out of range for data with 1 input dimension",
        ),
        (np.zeros((3, 1)), np.array([1.0, 2.0, 3.0]), "MAT52", "not in vocabulary"),
        (np.zeros((3, 1)), np.array([1.0, 2.0, 3.0]), "SE +", "position"),
    ],
)
def test_bad_input(amz: Amortizer, X: np.ndarray, y: np.ndarray, kernel: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        amz.infer(X, y, kernel)


def test_bad_arguments(amz: Amortizer) -> None:
    X, y = _data(10, 1)
    with pytest.raises(ValueError, match="kernels is empty"):
        amz.infer_many(X, y, [])
    with pytest.raises(ValueError, match="must be a list"):
        amz.infer_many(X, y, "SE")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="refine must be"):
        amz.infer(X, y, "SE", refine=-1)


# -- checkpoints ------------------------------------------------------------------------


def test_bundled_checkpoint_loads_and_predicts() -> None:
    a = Amortizer.from_pretrained(device="cpu")
    data = np.loadtxt(
        Path(__file__).parents[1] / "src/amorgp/amortizer/data/airline.csv",
        delimiter=",",
        skiprows=1,
    )
    r = a.infer(data[:, 0], data[:, 1], "SE + PER")
    assert np.isfinite(r.log_marginal_likelihood)
    assert all(np.isfinite(h.value) and h.value > 0 for h in r.table)
    assert (PRETRAINED_DIR / "checkpoint.json").exists()
    assert not (PRETRAINED_DIR / "optimizer.safetensors").exists()  # model only


def test_missing_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no checkpoint at"):
        Amortizer.from_pretrained(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no checkpoint\.json"):
        Amortizer.from_pretrained(tmp_path / "empty")


def test_corrupted_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    blob = bytearray((bad / "model.safetensors").read_bytes())
    blob[-5] ^= 0xFF
    (bad / "model.safetensors").write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="corrupted"):
        Amortizer.from_pretrained(bad)
    (bad / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"missing model\.safetensors"):
        Amortizer.from_pretrained(bad)


def test_corrupted_json(tiny_checkpoint: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    (bad / "checkpoint.json").write_text("{ not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        Amortizer.from_pretrained(bad)


def test_mismatched_architecture(tiny_checkpoint: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    meta = json.loads((bad / "checkpoint.json").read_text())
    meta["network"]["d_data"] = 32  # the stored weights are 16 wide
    (bad / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="do not match the architecture"):
        Amortizer.from_pretrained(bad)


def test_fixed_kernel_model_serves_its_kernel_only(tmp_path: Path) -> None:
    """A fixed SE-ARD network (AHGP) loads; SE-ARD predictions equal the exact GP at the
    network's raw outputs (baselines' dense predictive); other kernels get a clear error."""
    from dataclasses import replace

    from amorgp.amortizer.networks.forward import encode_structures, network_parameters
    from amorgp.amortizer.networks.registry import SE_VOCABULARY
    from amorgp.baselines import exact_predictive
    from amorgp.core.data import Normalizer
    from amorgp.core.errors import OptionError
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import PaddedBatch

    network = replace(PRESETS["tiny"].network, model="ahgp-se-ard", vocabulary=SE_VOCABULARY)
    torch.manual_seed(3)
    save_checkpoint(tmp_path / "ahgp", build_model(network), network)
    amz = Amortizer.from_pretrained(tmp_path / "ahgp", device="cpu")
    X, y = _data(30, 2)
    Xs = torch.linspace(0.0, 1.0, 7, dtype=torch.float64)[:, None].repeat(1, 2)
    mean, var = amz.infer(X, y, "SE", calibrate=False, refine=0).predict(Xs)

    norm = Normalizer.fit(X, y)
    Xn, yn = norm.transform_x(X), norm.transform_y(y)
    s = DimWiseStructure((("SE",), ("SE",)))
    sym, smask = encode_structures([s], amz.model.vocabulary, 2, torch.device("cpu"))
    params, noise = network_parameters(amz.model, Xn, yn, sym, smask)
    batch = PaddedBatch.from_datasets([(Xn, yn)], [s], amz.model.vocabulary)
    p = params.double()[:, :2, : batch.symbols.shape[-1]]
    m_ref, v_ref = exact_predictive(batch, p, noise.double(), norm.transform_x(Xs)[None])
    m_ref, v_ref = norm.unnormalize_predictive(m_ref[0], v_ref[0])
    torch.testing.assert_close(mean, m_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(var, v_ref, rtol=1e-5, atol=1e-6)

    with pytest.raises(ValueError, match="not in vocabulary"):
        amz.infer(X, y, "SE + PER", refine=0)
    with pytest.raises(OptionError, match="SE-ARD kernel only"):
        amz.infer(X, y, "SE + SE", refine=0)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(tiny_checkpoint: Path) -> None:
    with torch_settings(allow_tf32=False):
        X, y = _data(40, 2)
        cpu = Amortizer.from_pretrained(tiny_checkpoint, device="cpu").infer_many(
            X, y, ["SE", "SE + PER"]
        )
        gpu = Amortizer.from_pretrained(tiny_checkpoint, device="cuda").infer_many(
            X, y, ["SE", "SE + PER"]
        )
        for a, b in zip(cpu, gpu, strict=True):
            # in log space: a lengthscale refined out onto a flat ridge (8e5 on an H200,
            # 2026-12-04) stops 3e-4 apart in relative terms, where the likelihood and the
            # predictions below agree
            torch.testing.assert_close(a.params.log(), b.params.log(), rtol=0, atol=1e-3)
            assert a.log_marginal_likelihood == pytest.approx(b.log_marginal_likelihood, rel=1e-4)
            ma, _va = a.predict(X[:5])
            mb, _vb = b.predict(X[:5])
            torch.testing.assert_close(ma, mb, rtol=1e-4, atol=1e-4)


# -- large n: lazy-kernels' iterative backends ------------------------------------------------


def _oracle_predict(
    r, X: np.ndarray, y: np.ndarray, Xq: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    norm = r.normalizer
    Xn, yn, Qn = (
        norm.transform_x(X).numpy(),
        norm.transform_y(y).numpy(),
        norm.transform_x(Xq).numpy(),
    )
    p = r.params.numpy()
    m, v = dense_gp_predictive(
        r.kernel.reference(Xn, Xn, p),
        r.kernel.reference(Xn, Qn, p),
        r.kernel.reference(Qn, Qn, p).diagonal(),
        yn,
        r.noise,
    )
    return m * norm.y_std + norm.y_mean, v * norm.y_std**2


def test_cg_backend_above_the_memory_budget(tiny_checkpoint: Path) -> None:
    """With a budget that fits the evaluator (no autograd graph: the block-wise bound) but
    not the Cholesky workspace the GP runs on CG (backend 'auto'); predictions match the
    dense oracle to the CG tolerance, the LML to the SLQ accuracy."""
    X, y = _data(300, 1, seed=8)
    n_terms = 2  # SE + PER
    dense = 8 * 300**2
    a = Amortizer.from_pretrained(
        tiny_checkpoint,
        memory_budget=(EVALUATOR_MATRICES_NO_GRAPH + 1) * dense,
        gp_options={"n_probes": 30},
    )
    assert a.gp_backend(300, n_terms, graph=False) == "cg"
    r = a.infer(X, y, "SE + PER")
    assert r.posterior.backend == "cg"
    Xq = np.linspace(-2, 5, 7)[:, None]
    mean, var = r.predict(Xq)
    m, v = _oracle_predict(r, X, y, Xq)
    np.testing.assert_allclose(np.asarray(mean), m, rtol=1e-5, atol=1e-6 * np.abs(m).max())
    np.testing.assert_allclose(np.asarray(var), v, rtol=1e-4)
    exact = _fit_oracle_lml(r, X, y)
    assert r.log_marginal_likelihood == pytest.approx(exact, rel=0.05)


def test_unknown_gp_options(tiny_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="unknown gp_options"):
        Amortizer.from_pretrained(tiny_checkpoint, gp_options={"tol": 1e-3})


@pytest.mark.slow
def test_keops_backend_matches_dense_oracle(tiny_checkpoint: Path) -> None:
    pytest.importorskip("pykeops")
    X, y = _data(500, 2, seed=9)
    a = Amortizer.from_pretrained(tiny_checkpoint, memory_budget=1e5)
    assert a.gp_backend(500) == "keops"
    r = a.infer(X, y, "SE")
    Xq = X[:5] + 0.01
    mean, var = r.predict(Xq)
    m, v = _oracle_predict(r, X, y, Xq)
    np.testing.assert_allclose(np.asarray(mean), m, rtol=1e-5, atol=1e-6 * np.abs(m).max())
    np.testing.assert_allclose(np.asarray(var), v, rtol=1e-4)


def test_refine_needs_the_dense_backend(tiny_checkpoint: Path) -> None:
    X, y = _data(300, 1, seed=10)
    dense = 8 * 300**2  # a budget for dense CG (evaluator + K) but not the Cholesky workspace
    budget = (EVALUATOR_MATRICES_PER_TERM + 1) * dense + dense
    a = Amortizer.from_pretrained(tiny_checkpoint, memory_budget=budget)
    with pytest.raises(ValueError, match="refine=2 runs dense Type-2 ML"):
        a.infer(X, y, "SE", refine=2)


def test_satisfies_the_inference_protocol(amz: Amortizer) -> None:
    from amorgp.core.fit import HyperparameterInference, KernelFit

    assert isinstance(amz, HyperparameterInference)
    X, y = _data(20, 1, seed=11)
    fits = amz.fit_many(X, y, ["SE", "PER"])
    assert all(isinstance(f, KernelFit) for f in fits)
    assert fits[1].log_marginal_likelihood == amz.infer(X, y, "PER").log_marginal_likelihood


def test_default_encoder_points_follow_the_training_recipe(tmp_path: Path) -> None:
    network = PRESETS["tiny"].network
    model = build_model(network)
    recipe = PRESETS["tiny"].train.to_dict()
    save_checkpoint(
        tmp_path / "a", model, network, meta={"train": {**recipe, "encoder_points": 24}}
    )
    save_checkpoint(tmp_path / "b", model, network, meta={"train": {**recipe, "encoder_points": 0}})
    save_checkpoint(tmp_path / "c", model, network)
    assert Amortizer.from_pretrained(tmp_path / "a").encoder_points == 24
    assert Amortizer.from_pretrained(tmp_path / "b").encoder_points == recipe["n_max"]
    assert Amortizer.from_pretrained(tmp_path / "c").encoder_points == 250
