"""End to end: kernel-grammar structures -> amortizer -> lazy-kernels + diff-linalg.

A briefly trained tiny network predicts hyperparameters for structures written in
the kernel grammar; the predicted parameters must give the same log marginal
likelihood through the amortizer's loss as through a dense numpy/scipy oracle
built from kernel-grammar's reference formulas, and the checkpoint reloads to the
same predictions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy.stats import multivariate_normal

from amorgp.amortizer import PRESETS, TrainConfig, load_checkpoint
from amorgp.kernel_grammar import DimWiseStructure, encode
from amorgp.lazy_kernels import PaddedBatch
from amorgp.training import gp_nll_per_point, train


def test_grammar_to_prediction_to_likelihood(tmp_path: Path) -> None:
    net = PRESETS["tiny"].network
    tc = TrainConfig(batch_size=4, n_max=16, max_dims=3, val_size=4, val_every=2, num_workers=0)
    result = train(tmp_path / "run", net, tc, max_steps=2, progress=False)
    model = load_checkpoint(result.last_checkpoint).model

    vocab = net.vocabulary
    structures = [
        DimWiseStructure.parse("SE*LIN + PER", 2),
        DimWiseStructure.parse("(SE)@0 * (LIN + SE*PER)@1 * (PER)@2", 3),
    ]
    symbols_np, mask_np = encode(structures, vocab)
    symbols, symbol_mask = torch.as_tensor(symbols_np), torch.as_tensor(mask_np)
    g = torch.Generator().manual_seed(0)
    n = [12, 9]
    X = torch.rand(2, 12, 3, generator=g, dtype=torch.float64)
    X[0, :, 2] = 0.0
    y = torch.sin(6 * X[..., 0]) + 0.1 * torch.randn(2, 12, generator=g, dtype=torch.float64)
    point_mask = torch.arange(12)[None] < torch.tensor(n)[:, None]
    y = torch.where(point_mask, y, torch.zeros_like(y))
    dim_mask = symbol_mask.any(-1)
    batch = PaddedBatch(X, y, point_mask, dim_mask, symbols, symbol_mask, vocab).validate()
    with torch.no_grad():
        pred = model(batch)
        nll, failed = gp_nll_per_point(batch, pred.params, pred.noise)
    assert not bool(failed.any())
    for b, s in enumerate(structures):
        x = X[b, : n[b]].numpy()
        K = np.ones((n[b], n[b]))
        for d, names in enumerate(s.dims):
            Kd = np.zeros_like(K)
            for a in range(len(names)):
                sym = vocab.symbol(int(symbols[b, d, a]))
                p = {k: float(pred.params[b, d, a, j]) for j, k in enumerate(sym.param_names)}
                Kd += sym.reference(x[:, d], x[:, d], p)
            K *= Kd
        cov = K + float(pred.noise[b]) * np.eye(n[b])
        oracle = -multivariate_normal(np.zeros(n[b]), cov).logpdf(y[b, : n[b]].numpy()) / n[b]
        np.testing.assert_allclose(float(nll[b]), oracle, rtol=1e-6)
