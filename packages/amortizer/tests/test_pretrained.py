"""The bundled default weights: they load, they are intact, and they are trained.

The quality check compares, on a fixed simulated set drawn from the training prior
(positive pairs, seeded), the per-point negative log marginal likelihood of the GP
with the network's parameters against the GP with a fixed naive choice: every
parameter at its prior mean (exactly what an untrained network predicts, since its
heads start at the prior means).  The NLL is computed independently of the
training code: kernel matrices from the dense numpy reference of each structure
(``DimWiseStructure.reference``) and the Gaussian log density from
``scipy.stats.multivariate_normal``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer import load_checkpoint
from amorgp.amortizer.api import PRETRAINED_DIR, Amortizer
from amorgp.kernel_grammar import NOISE
from amorgp.simulator import Simulator, SimulatorConfig

N_PAIRS = 48


@pytest.fixture(scope="module")
def bundled():
    return load_checkpoint(PRETRAINED_DIR)


@pytest.fixture(scope="module")
def fixed_set(bundled):
    train = bundled.meta["train"]
    cfg = SimulatorConfig(
        n_min=20,
        n_max=min(int(train["n_max"]), 60),
        d_max=min(int(train["max_dims"]), 3),
        positive_ratio=1.0,
        vocabulary=bundled.network.vocabulary,
    )
    batch = Simulator(cfg).sample(N_PAIRS, torch.Generator().manual_seed(20_231_117))
    return batch.select(batch.valid.nonzero().flatten())


def _reference_nll(batch, vocab, params, noise) -> np.ndarray:
    """Per-point NLL of each element: dense numpy kernel, scipy's Gaussian density.

    ``K = prod_d sum_l k_{s_dl}(x_d, x_d'; theta_dl) + sigma^2 I`` with the reference
    formula of every base symbol (``BaseSymbol.reference``), addend by addend.
    """
    out = []
    for b in range(len(batch)):
        n = int(batch.point_mask[b].sum())
        X = batch.X[b, :n].numpy()
        y = batch.y[b, :n].numpy()
        K = np.ones((n, n))
        for d in range(int(batch.dim_mask[b].sum())):
            Kd = np.zeros((n, n))
            for l_ in range(batch.symbols.shape[2]):
                if not bool(batch.symbol_mask[b, d, l_]):
                    continue
                sym = vocab.symbol(int(batch.symbols[b, d, l_]))
                theta = dict(zip(sym.param_names, params[b, d, l_].tolist(), strict=False))
                Kd += sym.reference(X[:, d], X[:, d], theta)
            K *= Kd
        K += noise[b] * np.eye(n)
        out.append(-multivariate_normal(np.zeros(n), K).logpdf(y) / n)
    return np.asarray(out)


def test_bundled_weights_load_through_from_pretrained(bundled):
    amz = Amortizer.from_pretrained(device="cpu")
    assert amz.network == bundled.network
    meta = json.loads((PRETRAINED_DIR / "checkpoint.json").read_text())
    assert set(meta["sha256"]) == {"model.safetensors"}  # model only, no optimiser state
    assert (PRETRAINED_DIR / "model.safetensors").stat().st_size < 16 * 2**20
    assert "reproduce" in meta
    assert "amorgp train" in meta["reproduce"]


def test_bundled_model_beats_prior_mean_parameters(bundled, fixed_set):
    vocab = bundled.network.vocabulary
    b = fixed_set
    with torch.inference_mode():
        pred = bundled.model(
            b.X.float(), b.y.float(), b.point_mask, b.dim_mask, b.symbols, b.symbol_mask
        )
    net_params, net_noise = pred.params.double().numpy(), pred.noise.double().numpy()

    table = np.ones((len(vocab) + 1, vocab.max_params))
    for i, sym in enumerate(vocab, start=1):
        for j, spec in enumerate(sym.params):
            table[i, j] = spec.prior.mean
    prior_params = table[b.symbols.numpy()]
    prior_noise = np.full(len(b), NOISE.prior.mean)

    nll_net = _reference_nll(b, vocab, net_params, net_noise)
    nll_prior = _reference_nll(b, vocab, prior_params, prior_noise)
    improvement = nll_prior - nll_net
    # A trained network is better on most pairs and by a clear margin on average;
    # untrained weights reproduce the prior means (improvement ~ 0 everywhere).
    assert np.median(improvement) > 0.05
    assert np.mean(improvement) > 0.1
    assert np.mean(improvement > 0) > 0.6
