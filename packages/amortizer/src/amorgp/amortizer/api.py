"""Amortized inference for users: :class:`Amortizer` and its :class:`KernelResult`.

One forward pass of the amortization network maps a dataset and a kernel
structure to GP hyperparameters; the GP then conditions on the data with those
hyperparameters.  Steps of :meth:`Amortizer.infer_many`:

1. validate ``X (n, d)``, ``y (n,)`` and normalise them (ARCHITECTURE §3, see
   :mod:`amorgp.amortizer.io`);
2. the **dataset encoder** runs once on the normalised data.  If ``n`` exceeds
   ``encoder_points`` (default: what the network read in training, the
   checkpoint's ``train.encoder_points`` if set, else its largest dataset
   ``train.n_max``, else 250) it reads a uniformly random subset of
   ``encoder_points`` points, drawn with a ``torch.Generator`` seeded by
   ``seed``: the encoder is permutation invariant, so a subset is a smaller
   sample of the same dataset;
3. the kernel encoder-decoder and the heads run for **all kernels in one
   padded batch** (the dataset embedding is shared, paper Fig. 4c);
4. the GP conditions on **all** ``n`` points in float64, with the backend that
   ``backend="auto"`` of :class:`amorgp.lazy_kernels.ExactGP` picks for ``n``
   and ``memory_budget``: dense Cholesky (then the log marginal likelihoods of
   all kernels are one batched kernel evaluation and one Cholesky each,
   :func:`amorgp.diff_linalg.gp_log_marginal_likelihood`), dense CG, or KeOps
   CG (O(n) memory; the log-determinant is a stochastic Lanczos quadrature
   estimate).  With the CG backends the log marginal likelihood is computed on
   first access to :attr:`KernelResult.log_marginal_likelihood` (predictions do
   not need it);
5. optionally ``refine=k``: ``k`` L-BFGS iterations of Type-2 ML
   (:mod:`amorgp.baselines`, dense, so only where the dense backend applies)
   started from the amortized hyperparameters.

Everything runs under ``torch.inference_mode`` (except the refinement, which
needs gradients) on the chosen device; the network in float32, the GP algebra
in ``dtype`` (float64 by default).
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from amorgp.amortizer.checkpoint import load_checkpoint
from amorgp.amortizer.config import NetworkConfig
from amorgp.amortizer.io import as_dataset
from amorgp.amortizer.layers import masked_mean
from amorgp.amortizer.model import AmortizedGP
from amorgp.baselines.data import Normalizer
from amorgp.diff_linalg import gp_log_marginal_likelihood
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, base_symbol, encode
from amorgp.lazy_kernels import DimWiseKernel, ExactGP, choose_backend, kernel_matrix_dimwise

__all__ = [
    "DEFAULT_ENCODER_POINTS",
    "PRETRAINED_DIR",
    "Amortizer",
    "Hyperparameter",
    "KernelResult",
]

PRETRAINED_DIR = Path(__file__).parent / "pretrained" / "default"
"""The bundled default checkpoint (replaced by the trained model, same format)."""

DEFAULT_ENCODER_POINTS = 250
"""Encoder subset size when the checkpoint does not state its training range."""

_MEMORY_BUDGET = 2**30
_CHUNK_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Hyperparameter:
    """One kernel hyperparameter of a result.

    Attributes:
        dim: input dimension.
        addend: index of the addend within the dimension's sum.
        symbol: base-symbol name, e.g. ``"SE*PER"``.
        name: parameter name of the symbol, e.g. ``"per_period"``.
        kind: parameter kind (``variance``, ``lengthscale``, ``period``, ``offset``...).
        value: value in normalised units.
        original: value in original units, ``None`` where no exact map exists
            (see :mod:`amorgp.amortizer.io`).
    """

    dim: int
    addend: int
    symbol: str
    name: str
    kind: str
    value: float
    original: float | None


@dataclass
class KernelResult:
    """Hyperparameters of one kernel on one dataset, with the GP they define.

    Attributes:
        kernel: the dimension-wise structure.
        params: ``(D, L, P)`` float64 parameters, normalised units, padded layout.
        noise: noise variance, normalised units.
        noise_original: noise variance in original units (``noise * std(y)^2``).
        table: every kernel hyperparameter as a :class:`Hyperparameter`.
        time_s: wall-clock time of the call that produced this result (shared by
            all kernels of one :meth:`Amortizer.infer_many` call).
        refine_steps: L-BFGS iterations of Type-2 ML applied after the network.
        n_points: points the GP conditions on.
        encoder_points: points the dataset encoder read.
        normalization: the data normalisation.

    The log marginal likelihoods are properties: computed by :meth:`Amortizer.infer_many`
    when the dense backend applies, on first access otherwise (a CG solve and a
    stochastic log-determinant on all ``n`` points, which is most of the cost at large
    ``n`` and not needed for predictions).
    """

    kernel: DimWiseStructure
    params: Tensor
    noise: float
    noise_original: float
    table: tuple[Hyperparameter, ...]
    time_s: float
    refine_steps: int
    n_points: int
    encoder_points: int
    normalization: Normalizer
    _gp: _GPData | None = field(default=None, repr=False)
    _lml: float | None = field(default=None, repr=False)

    @property
    def log_marginal_likelihood(self) -> float:
        """``log p(y~ | theta, S)`` of the normalised targets on all ``n`` points.

        Exact with the dense backend; with the CG backends the solve is exact to the CG
        tolerance and the log-determinant a stochastic Lanczos quadrature estimate.
        """
        if self._lml is None:
            if self._gp is None:
                raise ValueError("this result holds no data to evaluate the likelihood on")
            self._lml = self._gp.log_marginal_likelihood(self.params, self.noise)
        return self._lml

    @property
    def log_marginal_likelihood_original(self) -> float:
        """The same density of the original targets: ``- n log std(y)`` added."""
        return self.log_marginal_likelihood + self.normalization.lml_offset(self.n_points)

    @property
    def kernel_text(self) -> str:
        """The kernel as text: ``"SE + PER"`` if every dimension has the same sum, else indexed."""
        s = self.kernel
        return " + ".join(s.dims[0]) if s.is_uniform else str(s)

    @property
    def hyperparameters(self) -> dict[tuple[int, int, str], float]:
        """``(dim, addend, name) -> value`` in normalised units (baselines' ``KernelFit``)."""
        return {(h.dim, h.addend, h.name): h.value for h in self.table}

    @property
    def hyperparameters_original(self) -> dict[tuple[int, int, str], float | None]:
        """``(dim, addend, name) -> value`` in original units (``None`` where not exact)."""
        return {(h.dim, h.addend, h.name): h.original for h in self.table}

    def predict(self, X_new: Any, *, include_noise: bool = True) -> tuple[Tensor, Tensor]:
        """GP predictive at ``X_new (m, d)`` in original units.

        ``mean = K_*^T (K + sigma^2 I)^{-1} y`` and
        ``var = k_** - diag(K_*^T (K + sigma^2 I)^{-1} K_*)`` (+ ``sigma^2`` with
        ``include_noise``), mapped back by the normalisation.

        Returns:
            ``(mean (m,), variance (m,))`` float64 tensors on the CPU.

        Raises:
            ValueError: wrong number of columns or non-finite inputs.
        """
        if self._gp is None:
            raise ValueError("this result holds no data to condition on")
        Xq, _ = as_dataset(X_new)
        Xn = self.normalization.transform_x(Xq)
        mean, var = self._gp.predict(self.params, self.noise, Xn, include_noise)
        return self.normalization.unnormalize_predictive(
            mean.to("cpu", torch.float64), var.to("cpu", torch.float64)
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (kernel text, hyperparameters in both units, noise, LML, time)."""
        return {
            "kernel": self.kernel_text,
            "hyperparameters": [
                {
                    "dim": h.dim,
                    "addend": h.addend,
                    "symbol": h.symbol,
                    "name": h.name,
                    "normalised": h.value,
                    "original": h.original,
                }
                for h in self.table
            ],
            "noise": self.noise,
            "noise_original": self.noise_original,
            "log_marginal_likelihood": self.log_marginal_likelihood,
            "log_marginal_likelihood_original": self.log_marginal_likelihood_original,
            "time_s": self.time_s,
            "refine_steps": self.refine_steps,
            "n_points": self.n_points,
            "encoder_points": self.encoder_points,
        }


@dataclass
class _GPData:
    """Normalised training data of one kernel, for predictions through lazy-kernels' ExactGP."""

    X: Tensor  # (n, d)
    y: Tensor  # (n,)
    structure: DimWiseStructure
    memory_budget: float
    gp_options: Mapping[str, Any]

    def log_marginal_likelihood(self, params: Tensor, noise: float) -> float:
        gp = _exact_gp(
            self.structure, params, noise, self.X, self.y, self.memory_budget, self.gp_options
        )
        with torch.inference_mode():
            return float(gp.log_marginal_likelihood())

    def predict(
        self, params: Tensor, noise: float, Xn: Tensor, include_noise: bool
    ) -> tuple[Tensor, Tensor]:
        X = self.X
        Xq = torch.as_tensor(Xn, dtype=X.dtype, device=X.device)
        gp = _exact_gp(
            self.structure, params, noise, X, self.y, self.memory_budget, self.gp_options
        )
        rows = max(1, _CHUNK_BYTES // (8 * X.shape[0]))
        means, variances = [], []
        with torch.inference_mode():
            for start in range(0, Xq.shape[0], rows):  # memory chunks of test points
                mean, var = gp.predict(Xq[start : start + rows])
                assert var is not None
                means.append(mean)
                variances.append(var)
        mean, var = torch.cat(means), torch.cat(variances)
        return mean, var + noise if include_noise else var


def _exact_gp(
    structure: DimWiseStructure,
    params: Tensor,
    noise: float,
    X: Tensor,
    y: Tensor,
    memory_budget: float,
    options: Mapping[str, Any],
) -> ExactGP:
    """lazy-kernels' exact GP with ``backend="auto"`` (dense Cholesky, dense CG or KeOps CG)."""
    p = params[: structure.n_dims, : structure.max_addends].to(device=X.device, dtype=X.dtype)
    kernel = DimWiseKernel(structure, p)
    return ExactGP(
        kernel, float(noise), X, y, backend="auto", memory_budget=memory_budget, **options
    )


def _dense_lml(
    X: Tensor,
    y: Tensor,
    symbols: Tensor,
    symbol_mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocab: Vocabulary,
) -> Tensor:
    """``(K,)`` exact LMLs of ``K`` kernels on one dataset; kernels chunked by memory."""
    n = X.shape[0]
    per = max(1, _CHUNK_BYTES // (8 * n * n))
    out = []
    for s in range(0, symbols.shape[0], per):  # memory chunks of kernels, not a per-kernel loop
        sl = slice(s, s + per)
        k = symbols[sl].shape[0]
        Xb = X[None].expand(k, -1, -1)
        Kb = kernel_matrix_dimwise(
            Xb, Xb, symbols[sl], symbol_mask[sl], params[sl], vocab, validate=False
        )
        value = gp_log_marginal_likelihood(Kb, y[None].expand(k, -1), noise[sl])
        assert isinstance(value, Tensor)
        out.append(value)
    return torch.cat(out)


class Amortizer:
    """Amortized GP hyperparameter inference with a trained network.

    Args:
        model: a structured :class:`~amorgp.amortizer.model.AmortizedGP`.
        meta: the checkpoint's JSON metadata (training range, vocabulary...).
        device: device of the network and the GP algebra.
        dtype: dtype of the GP algebra (float64 default; the network stays float32).
        encoder_points: most points the dataset encoder reads (default: the
            checkpoint's ``train.encoder_points`` if set, else ``train.n_max``, else
            :data:`DEFAULT_ENCODER_POINTS`).
        seed: seed of the encoder subset of large datasets.
        memory_budget: bytes the dense GP backends may use; ExactGP's ``"auto"``
            backend rule picks dense Cholesky, dense CG or KeOps CG with it.
        gp_options: more :class:`~amorgp.lazy_kernels.ExactGP` options for the CG
            backends (``cg_tol``, ``max_cg_iter``, ``precond_rank``, ``n_probes``).

    Example:
        >>> import numpy as np
        >>> amz = Amortizer.from_pretrained()
        >>> x = np.linspace(0, 10, 50)
        >>> res = amz.infer(x, np.sin(x), "SE + PER")
        >>> sorted({h.name for h in res.table})
        ['lengthscale', 'period', 'variance']
    """

    def __init__(
        self,
        model: AmortizedGP,
        meta: Mapping[str, Any] | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
        encoder_points: int | None = None,
        seed: int = 0,
        memory_budget: float = _MEMORY_BUDGET,
        gp_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(model, AmortizedGP):
            raise ValueError(
                f"Amortizer needs a structured AmortizedGP network, got {type(model).__name__} "
                "(the ahgp-se-ard model predicts a fixed SE-ARD kernel only)"
            )
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.meta: dict[str, Any] = dict(meta or {})
        train = self.meta.get("train", {}) if isinstance(self.meta.get("train"), dict) else {}
        if encoder_points is None:
            trained_subset = int(train.get("encoder_points", 0) or 0)
            encoder_points = trained_subset or int(train.get("n_max", DEFAULT_ENCODER_POINTS))
        if encoder_points < 1:
            raise ValueError(f"encoder_points must be >= 1, got {encoder_points}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.dtype = dtype
        self.encoder_points = int(encoder_points)
        self.max_dims = int(train["max_dims"]) if "max_dims" in train else None
        self.seed = int(seed)
        self.memory_budget = float(memory_budget)
        self.gp_options: dict[str, Any] = dict(gp_options or {})
        unknown = set(self.gp_options) - {"cg_tol", "max_cg_iter", "precond_rank", "n_probes"}
        if unknown:
            raise ValueError(f"unknown gp_options {sorted(unknown)}")

    @property
    def vocabulary(self) -> Vocabulary:
        """The base symbols the network knows."""
        return self.model.vocabulary

    @property
    def network(self) -> NetworkConfig:
        return self.model.config

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        device: str | torch.device | None = None,
        **kwargs: Any,
    ) -> Amortizer:
        """Load a checkpoint directory (default: the bundled :data:`PRETRAINED_DIR`).

        The checkpoint's SHA-256 checksums, format tag and architecture are verified.

        Args:
            path: checkpoint directory; ``None`` for the bundled default.
            device: ``"cpu"``, ``"cuda"``...; default CUDA if available.
            **kwargs: more :class:`Amortizer` options (``dtype``, ``encoder_points``...).

        Raises:
            ValueError: a missing directory or file, a corrupted file (checksum), an
                unknown format, weights that do not fit the stored architecture, or a
                checkpoint of a model other than the structured network.
        """
        where = Path(path) if path is not None else PRETRAINED_DIR
        if not where.exists():
            raise ValueError(
                f"no checkpoint at {where}"
                + (
                    " (the bundled weights are missing from this installation)"
                    if path is None
                    else ""
                )
            )
        dev = torch.device(device) if device is not None else _default_device()
        ckpt = load_checkpoint(where, device=dev)
        if ckpt.network.model != "structured":
            raise ValueError(
                f"checkpoint {where} holds the {ckpt.network.model!r} model; the Amortizer "
                "needs the structured network"
            )
        model = ckpt.model
        assert isinstance(model, AmortizedGP)
        return cls(model, ckpt.meta, device=dev, **kwargs)

    # -- structures -----------------------------------------------------------------------
    def structure(self, kernel: str | DimWiseStructure, n_dims: int) -> DimWiseStructure:
        """Parse ``kernel`` for data with ``n_dims`` columns and check it against the network.

        Raises:
            ValueError: the text does not parse, does not match ``n_dims``, or uses a
                symbol outside the network's vocabulary.
        """
        return DimWiseStructure.coerce(kernel, n_dims, self.vocabulary)

    # -- inference --------------------------------------------------------------------------
    def infer(
        self, X: Any, y: Any, kernel: str | DimWiseStructure, *, refine: int = 0
    ) -> KernelResult:
        """Hyperparameters of one kernel (see :meth:`infer_many`)."""
        return self.infer_many(X, y, [kernel], refine=refine)[0]

    def infer_many(
        self,
        X: Any,
        y: Any,
        kernels: Sequence[str | DimWiseStructure],
        *,
        refine: int = 0,
    ) -> list[KernelResult]:
        """Hyperparameters of several kernels on one dataset in one batch.

        Args:
            X: inputs ``(n, d)`` (or ``(n,)``), original units.
            y: targets ``(n,)``.
            kernels: kernel expressions (``"SE + PER"`` is the same sum in every
                dimension; ``"(SE + LIN)@0 * PER@1"`` per dimension) or structures.
            refine: L-BFGS iterations of Type-2 ML started from the prediction.

        Returns:
            One :class:`KernelResult` per kernel, in order.

        Raises:
            ValueError: invalid data (shapes, NaN/Inf, fewer than 3 points, constant
                targets), a kernel that does not parse or fit the data, a negative
                ``refine``.
        """
        t0 = time.perf_counter()
        if isinstance(kernels, str | DimWiseStructure):
            raise ValueError("kernels must be a list; use infer() for one kernel")
        if len(kernels) == 0:
            raise ValueError("kernels is empty")
        if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
            raise ValueError(f"refine must be a non-negative integer, got {refine!r}")
        Xa, ya = as_dataset(X, y)
        assert ya is not None
        n, d = Xa.shape
        structures = [self.structure(k, d) for k in kernels]
        if self.max_dims is not None and d > self.max_dims:
            warnings.warn(
                f"the data have {d} input dimensions but the network was trained on at most "
                f"{self.max_dims}; its predictions may be poor (consider refine=k)",
                UserWarning,
                stacklevel=2,
            )
        norm = Normalizer.fit(Xa, ya)
        Xn = torch.as_tensor(norm.transform_x(Xa), dtype=self.dtype, device=self.device)
        yn = torch.as_tensor(norm.transform_y(ya), dtype=self.dtype, device=self.device)
        params, noise, n_enc = self.predict_parameters(Xn, yn, structures)
        sym, smask = self._encode(structures, d)
        dense = self.gp_backend(n, sum(len(a) for s in structures for a in s.dims)) == "cholesky"
        steps = 0
        if refine > 0:
            if not dense:
                raise ValueError(
                    f"refine={refine} runs dense Type-2 ML, which n = {n} points exceed "
                    f"(dense limit of the memory budget {self.memory_budget:.3g} bytes); "
                    "use refine=0 or a subset of the data"
                )
            params, noise = self._refine(Xn, yn, structures, params, noise, refine)
            steps = refine
        lml: list[float | None] = [None] * len(structures)
        if dense:  # all kernels in one batch; lazily per kernel on the CG backends
            with torch.inference_mode():
                lml = _dense_lml(Xn, yn, sym, smask, params, noise, self.vocabulary).tolist()
        elapsed = time.perf_counter() - t0
        results = []
        for i, s in enumerate(structures):  # assembling per-kernel reports (not a hot path)
            p = params[i, : s.n_dims, : s.max_addends].detach().to("cpu", torch.float64)
            table = tuple(
                Hyperparameter(
                    pn.dim,
                    pn.addend,
                    pn.symbol,
                    pn.param,
                    base_symbol(pn.symbol).params[pn.slot].kind.value,
                    float(p[pn.dim, pn.addend, pn.slot]),
                    norm.to_original(
                        pn.dim, pn.symbol, pn.slot, float(p[pn.dim, pn.addend, pn.slot])
                    ),
                )
                for pn in s.param_names()
            )
            nz = float(noise[i])
            gp = _GPData(Xn, yn, s, self.memory_budget, self.gp_options)
            results.append(
                KernelResult(
                    kernel=s,
                    params=p,
                    noise=nz,
                    noise_original=norm.noise_to_original(nz),
                    table=table,
                    time_s=elapsed,
                    refine_steps=steps,
                    n_points=n,
                    encoder_points=n_enc,
                    normalization=norm,
                    _gp=gp,
                    _lml=lml[i],
                )
            )
        return results

    def fit_many(
        self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]
    ) -> list[KernelResult]:
        """:meth:`infer_many` under the name of the inference protocol
        (``amorgp.baselines.protocol.HyperparameterInference``) that model averaging and
        structure search consume, so the amortizer and the baselines are interchangeable."""
        return self.infer_many(X, y, kernels)

    def gp_backend(self, n: int, n_terms: int = 1) -> str:
        """The ExactGP backend for ``n`` points and ``n_terms`` addends evaluated at once:
        ``"cholesky"``, ``"cg"`` or ``"keops"``."""
        return choose_backend(n, self.dtype, self.device, self.memory_budget, n_terms=n_terms)

    def _encode(self, structures: Sequence[DimWiseStructure], d: int) -> tuple[Tensor, Tensor]:
        sym, smask = encode(list(structures), self.vocabulary, max_dims=d)
        return (
            torch.as_tensor(sym, device=self.device),
            torch.as_tensor(smask, device=self.device),
        )

    def encoder_subset(self, n: int) -> Tensor | None:
        """Indices of the points the dataset encoder reads, or ``None`` for all of them.

        For ``n > encoder_points``: the first ``encoder_points`` entries of a random
        permutation drawn from ``torch.Generator().manual_seed(seed)`` (so the same
        data and seed give the same subset).
        """
        if n <= self.encoder_points:
            return None
        g = torch.Generator().manual_seed(self.seed)
        return torch.randperm(n, generator=g)[: self.encoder_points].sort().values

    def predict_parameters(
        self, Xn: Tensor, yn: Tensor, structures: Sequence[DimWiseStructure]
    ) -> tuple[Tensor, Tensor, int]:
        """The network's prediction for normalised data and ``K`` structures.

        The dataset encoder runs once; the kernel encoder-decoder, the symbol heads
        and the noise head run on all ``K`` structures in one padded batch.

        Args:
            Xn: ``(n, d)`` normalised inputs.
            yn: ``(n,)`` standardised targets.
            structures: ``K`` structures with ``d`` dimensions each.

        Returns:
            ``params (K, d, L, P)`` and ``noise (K,)`` in ``self.dtype`` and the number
            of points the encoder read.
        """
        n, d = Xn.shape
        idx = self.encoder_subset(n)
        Xe, ye = (Xn, yn) if idx is None else (Xn[idx.to(Xn.device)], yn[idx.to(yn.device)])
        sym, smask = self._encode(structures, d)
        K = sym.shape[0]
        model = self.model
        net_dtype = next(model.parameters()).dtype
        with torch.inference_mode():
            X1 = Xe[None].to(net_dtype)
            y1 = ye[None].to(net_dtype)
            pm = torch.ones(1, X1.shape[1], dtype=torch.bool, device=self.device)
            dm = torch.ones(1, d, dtype=torch.bool, device=self.device)
            h = model.dataset_encoder(X1, y1, pm, dm).expand(K, -1, -1)  # shared, once
            dmK = dm.expand(K, -1)
            tokens, v = model.kernel_encoder(sym, smask, h, dmK)
            params = model.heads(tokens, sym, smask)
            features = torch.cat([masked_mean(v, dmK, 1), masked_mean(h, dmK, 1)], dim=-1)
            noise = model.noise_head(features)
        return params.to(self.dtype).clone(), noise.to(self.dtype).clone(), int(Xe.shape[0])

    def _refine(
        self,
        Xn: Tensor,
        yn: Tensor,
        structures: Sequence[DimWiseStructure],
        params: Tensor,
        noise: Tensor,
        steps: int,
    ) -> tuple[Tensor, Tensor]:
        """``steps`` L-BFGS iterations of Type-2 ML warm-started at the amortized prediction.

        The baselines' ``GP-ML (L-BFGS)`` fit (same objective, transform and
        optimiser) with ``init`` = the network's ``params (K, D, L, P)`` and
        ``noise (K,)``; a kernel whose refinement fails keeps its last finite
        iterate.  Returns refined copies of the same shapes, dtype and device.
        """
        from amorgp.baselines import GPBatch, Type2MLSettings, fit_type2ml_batch

        X64, y64 = (t.detach().to("cpu", torch.float64) for t in (Xn, yn))
        batch = GPBatch.from_pairs(
            [(X64, y64)] * len(structures), list(structures), self.vocabulary
        )
        D, L, P = batch.param_shape[1:]
        start = params.detach().to("cpu", torch.float64)[:, :D, :L, :P]
        fit = fit_type2ml_batch(
            batch,
            Type2MLSettings(optimizer="lbfgs", max_iters=steps),
            init=(start, noise.detach().to("cpu", torch.float64)),
        )
        refined = params.detach().clone()
        refined[:, :D, :L, :P] = fit.params.to(device=params.device, dtype=params.dtype)
        return refined, fit.noise.to(device=noise.device, dtype=noise.dtype)

    def __repr__(self) -> str:
        return (
            f"Amortizer({self.network.model}, vocabulary={list(self.vocabulary.symbols)}, "
            f"device={self.device}, encoder_points={self.encoder_points})"
        )


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
