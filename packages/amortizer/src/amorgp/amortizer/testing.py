"""Reusable checks for amortization networks (any module mapping a padded batch to a Prediction).

A network ``model(batch) -> Prediction`` (``batch`` a
:class:`~amorgp.lazy_kernels.PaddedBatch`) must be

* invariant to shuffling the data points,
* equivariant to permuting the input dimensions (data and structure together),
* equivariant to reordering the addends within a dimension,
* unchanged by padding (a dataset alone vs inside a padded batch).

Run these in float64 (``model.double()``) so the comparisons are tight.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from amorgp.amortizer.networks.config import NetworkConfig, TrainConfig
from amorgp.amortizer.networks.registry import build_model
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary
from amorgp.lazy_kernels import PaddedBatch

__all__ = [
    "TINY_TRAIN",
    "assert_addend_equivariant",
    "assert_dimension_equivariant",
    "assert_padding_invariant",
    "assert_point_invariant",
    "crop",
    "edited_checkpoint",
    "oracle_log_marginal_likelihood",
    "planted_period_1d",
    "python_without",
    "random_model",
    "random_padded_batch",
    "seeded_checkpoint",
    "tiny_checkpoint",
]


def random_padded_batch(
    generator: torch.Generator,
    vocab: Vocabulary,
    batch: int = 3,
    n_max: int = 12,
    d_max: int = 3,
    l_max: int = 3,
    dtype: torch.dtype = torch.float64,
    single_se: bool = False,
) -> PaddedBatch:
    """Random ragged datasets and structures, padded (padding filled with junk values).

    Each element has ``n ~ U{2..n_max}`` points, ``d ~ U{1..d_max}`` dimensions and per
    dimension ``U{1..l_max}`` addends of random symbols.  Padded X/y entries hold large
    values so a leak would be visible.  ``single_se`` gives one SE per dimension.
    """
    g = generator
    n = torch.randint(2, n_max + 1, (batch,), generator=g)
    n[0] = n_max
    d = torch.randint(1, d_max + 1, (batch,), generator=g)
    d[0] = d_max
    point_mask = torch.arange(n_max)[None, :] < n[:, None]
    dim_mask = torch.arange(d_max)[None, :] < d[:, None]
    X = torch.rand(batch, n_max, d_max, generator=g, dtype=dtype)
    y = torch.randn(batch, n_max, generator=g, dtype=dtype)
    X = torch.where(point_mask[:, :, None] & dim_mask[:, None, :], X, torch.full_like(X, 1e3))
    y = torch.where(point_mask, y, torch.full_like(y, -1e3))
    if single_se:
        l_max = 1
        n_add = torch.ones(batch, d_max, dtype=torch.long)
        symbols = torch.full((batch, d_max, 1), vocab.id("SE"), dtype=torch.long)
    else:
        n_add = torch.randint(1, l_max + 1, (batch, d_max), generator=g)
        symbols = torch.randint(1, len(vocab) + 1, (batch, d_max, l_max), generator=g)
    symbol_mask = (torch.arange(l_max)[None, None, :] < n_add[..., None]) & dim_mask[..., None]
    symbols = torch.where(symbol_mask, symbols, torch.zeros_like(symbols))
    return PaddedBatch(X, y, point_mask, dim_mask, symbols, symbol_mask, vocab)


def random_model(config: NetworkConfig, seed: int = 0) -> nn.Module:
    """The network of ``config`` in float64 and eval mode, every weight and bias moved by
    ``0.05 N(0, 1)`` (so that every output slot depends on the network), seeded by
    ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    model = build_model(config).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval()


def _close(a: Tensor, b: Tensor, what: str, atol: float) -> None:
    if not torch.allclose(a, b, rtol=1e-9, atol=atol):
        err = (a - b).abs().max().item()
        raise AssertionError(f"{what}: max abs difference {err:.3e} exceeds {atol:.1e}")


def _assert_permuted(
    model: nn.Module,
    batch: PaddedBatch,
    permuted: PaddedBatch,
    permute_params: Callable[[Tensor], Tensor],
    what: str,
    atol: float,
) -> None:
    """On ``permuted`` (``batch`` after ``what``) the model predicts the same noise and its
    parameters on ``batch`` permuted by ``permute_params``."""
    ref = model(batch)
    out = model(permuted)
    _close(out.params, permute_params(ref.params), f"params after {what}", atol)
    _close(out.noise, ref.noise, f"noise after {what}", atol)


def assert_point_invariant(
    model: nn.Module, batch: PaddedBatch, generator: torch.Generator, atol: float = 1e-10
) -> None:
    """Shuffling the point axis (data and mask together) leaves the prediction unchanged."""
    perm = torch.randperm(batch.X.shape[1], generator=generator)
    permuted = batch.take_points(perm.expand(len(batch), -1))
    _assert_permuted(model, batch, permuted, lambda p: p, "shuffling points", atol)


def assert_dimension_equivariant(
    model: nn.Module, batch: PaddedBatch, generator: torch.Generator, atol: float = 1e-10
) -> None:
    """Permuting dimensions of data and structure permutes the predicted parameters."""
    perm = torch.randperm(batch.X.shape[2], generator=generator)
    permuted = replace(
        batch,
        X=batch.X[:, :, perm],
        dim_mask=batch.dim_mask[:, perm],
        symbols=batch.symbols[:, perm],
        symbol_mask=batch.symbol_mask[:, perm],
    )
    _assert_permuted(model, batch, permuted, lambda p: p[:, perm], "permuting dimensions", atol)


def assert_addend_equivariant(
    model: nn.Module, batch: PaddedBatch, generator: torch.Generator, atol: float = 1e-10
) -> None:
    """Reordering the addend axis (symbols with their masks) reorders the parameters."""
    perm = torch.randperm(batch.symbols.shape[2], generator=generator)
    permuted = replace(
        batch, symbols=batch.symbols[:, :, perm], symbol_mask=batch.symbol_mask[:, :, perm]
    )
    _assert_permuted(model, batch, permuted, lambda p: p[:, :, perm], "reordering addends", atol)


def crop(batch: PaddedBatch, b: int) -> PaddedBatch:
    """Pair ``b`` alone, cropped to its own ``n``, ``d`` and ``L`` (its present entries first).

    Assumes prefix masks (present points, dimensions and addends first), as
    :func:`random_padded_batch` and the simulator produce.
    """
    one = batch.select(b)
    n = int(one.point_mask.sum())
    d = int(one.dim_mask.sum())
    L = int(one.symbol_mask.sum(-1).max())
    return replace(
        one,
        X=one.X[:, :n, :d],
        y=one.y[:, :n],
        point_mask=one.point_mask[:, :n],
        dim_mask=one.dim_mask[:, :d],
        symbols=one.symbols[:, :d, :L],
        symbol_mask=one.symbol_mask[:, :d, :L],
    )


def assert_padding_invariant(model: nn.Module, batch: PaddedBatch, atol: float = 1e-10) -> None:
    """Each dataset alone (cropped to its own n, d, L) predicts what it predicts in the batch."""
    ref = model(batch)
    for b in range(len(batch)):  # a test helper, not a hot path
        alone = model(crop(batch, b))
        d, L = alone.params.shape[1:3]
        _close(
            alone.params[0], ref.params[b, :d, :L], f"params of dataset {b} alone vs padded", atol
        )
        _close(alone.noise[0], ref.noise[b], f"noise of dataset {b} alone vs padded", atol)


def seeded_checkpoint(directory: Path, network: NetworkConfig, seed: int = 0) -> Path:
    """A checkpoint of ``network`` with weights drawn from ``torch.manual_seed(seed)``
    (the global RNG state is left as it was), with the ``tiny`` preset's recipe as its
    training metadata: a real, loadable network for tests that need one."""
    from amorgp.amortizer.networks.checkpoint import save_checkpoint
    from amorgp.amortizer.networks.config import PRESETS
    from amorgp.amortizer.networks.model import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(network)
    meta = {"train": PRESETS["tiny"].train.to_dict()}
    return save_checkpoint(directory, model, network, meta=meta)


def tiny_checkpoint(directory: Path) -> Path:
    """A ``tiny``-preset checkpoint with seeded random weights (trained range n <= 40,
    d <= 3) in ``directory / "tiny"``: the checkpoint of the test suites' fixtures."""
    from amorgp.amortizer.networks.config import PRESETS

    return seeded_checkpoint(directory / "tiny", PRESETS["tiny"].network)


def edited_checkpoint(src: Path, dst: Path, edit: dict[str, object]) -> Path:
    """A copy at ``dst`` of the checkpoint folder ``src`` whose ``checkpoint.json`` holds
    the values of ``edit`` (a key is a dotted path: ``"network.d_data"``)."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "checkpoint.json").read_text())
    for key, value in edit.items():
        target = meta
        *parents, last = key.split(".")
        for p in parents:
            target = target[p]
        target[last] = value
    (dst / "checkpoint.json").write_text(json.dumps(meta))
    return dst


def planted_period_1d(n: int = 150, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sorted points of a sine of period 2.3 over [0, 10], noise 0.2 (a dataset whose
    period multi-start should find)."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 10, n))
    return x, np.sin(2 * np.pi * x / 2.3) + 0.2 * rng.normal(size=n)


TINY_TRAIN = TrainConfig(
    batch_size=4,
    lr=1e-3,
    warmup_steps=2,
    n_min=5,
    n_max=16,
    max_dims=2,
    val_size=8,
    val_every=3,
    num_workers=0,
)
"""A recipe for tests of the training loop (with the ``tiny`` network: milliseconds a step):
batches of 4 datasets with ``n <= 16``, ``d <= 2``; validation and checkpoint every 3 steps."""


_BLOCK = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in {blocked!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Block())
"""


def python_without(code: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child Python (one thread, warnings ignored) in which the named
    top-level imports fail as if they were not installed; its output is captured."""
    import os
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-c", _BLOCK.format(blocked=blocked) + code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def oracle_log_marginal_likelihood(
    X: np.ndarray, y: np.ndarray, s: DimWiseStructure, params: np.ndarray, noise: float
) -> float:
    """The log marginal likelihood of ``y`` under ``s`` at ``params`` and ``noise``, from the
    structure's numpy reference kernel and scipy's multivariate normal (a test oracle
    independent of the torch evaluators)."""
    from scipy.stats import multivariate_normal

    K = s.reference(X, X, params) + noise * np.eye(len(y))
    return float(multivariate_normal(np.zeros(len(y)), K).logpdf(y))


def oracle_covariance(X: np.ndarray, s: DimWiseStructure, theta: np.ndarray) -> np.ndarray:
    """``prod_j sum_l k_jl + noise I`` of a structure at its flat parameters ``theta (m,)``
    (each addend's parameters in the order of the structure's terms, the noise last), from
    the registry's numpy reference kernels (a test oracle independent of the torch
    evaluators and of the refinement's parameter maps)."""
    from amorgp.kernel_grammar import base_symbol

    n = X.shape[0]
    K = np.ones((n, n))
    i = 0
    for j, dim in enumerate(s.dims):
        S = np.zeros_like(K)
        for sym in dim:
            b = base_symbol(sym)
            p = dict(zip(b.param_names, theta[i : i + len(b.params)], strict=True))
            S += b.reference(X[:, j], X[:, j], p)
            i += len(b.params)
        K *= S
    return K + theta[-1] * np.eye(n)
