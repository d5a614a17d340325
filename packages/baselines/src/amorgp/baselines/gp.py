"""The exact-GP objective on a padded batch of (dataset, kernel) pairs.

A :class:`GPBatch` holds ``B`` pairs in the padded contract of ARCHITECTURE §3;
kernel parameters are optimised *unconstrained* as ``raw (B, D, L, P)`` and
``raw_noise (B,)`` and mapped to positive values by the shared transform
``positive(raw, kind)`` of :mod:`amorgp.kernel_grammar.transforms`, slot by
slot according to each symbol's :class:`~amorgp.kernel_grammar.ParamSpec`.

Per element ``b`` the objective is the exact log marginal likelihood

.. math::

    \\log p(y_b \\mid \\theta_b) = -\\tfrac12 y_b^T (K_b + \\sigma_b^2 I)^{-1} y_b
        - \\tfrac12 \\log\\det(K_b + \\sigma_b^2 I) - \\tfrac{n_b}{2} \\log 2\\pi

(batched evaluator :func:`amorgp.lazy_kernels.kernel_matrix_dimwise`, one
Cholesky per matrix in :func:`amorgp.diff_linalg.gp_log_marginal_likelihood`),
optionally plus the log prior ``sum_j log p(theta_j) + log p(sigma^2)`` of the
parameter specs (MAP).  Elements whose kernel matrix is not finite or whose
Cholesky fails even with jitter get NaN, never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from torch import Tensor

from amorgp.diff_linalg import gp_log_marginal_likelihood, robust_cholesky
from amorgp.kernel_grammar import (
    NOISE,
    PAPER_VOCABULARY,
    DimWiseStructure,
    ParamKind,
    Prior,
    Vocabulary,
    encode,
    positive,
    positive_inverse,
)
from amorgp.lazy_kernels import kernel_diag_dimwise, kernel_matrix_dimwise, validate_dimwise

__all__ = [
    "GPBatch",
    "ParamTables",
    "constrain",
    "exact_predictive",
    "initial_raw",
    "log_marginal_likelihood",
    "log_prior",
    "prior_raw",
    "unconstrain",
]

KINDS: tuple[ParamKind, ...] = tuple(ParamKind)


@dataclass(frozen=True)
class ParamTables:
    """Per vocabulary id and parameter slot: kind index, used flag and prior index.

    Attributes:
        kind: ``(V + 1, P)`` index into ``list(ParamKind)``.
        used: ``(V + 1, P)`` bool, False for padding and unused slots.
        prior: ``(V + 1, P)`` index into ``priors``.
        priors: the distinct priors of the vocabulary's parameter specs.
    """

    kind: Tensor
    used: Tensor
    prior: Tensor
    priors: tuple[Prior, ...]


@cache
def _tables(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[Prior, ...]]:
    kind, used = vocab.param_kind_table()
    priors: list[Prior] = []
    prior_idx = np.zeros_like(kind)
    for i, sym in enumerate(vocab, start=1):
        for j, spec in enumerate(sym.params):
            if spec.prior not in priors:
                priors.append(spec.prior)
            prior_idx[i, j] = priors.index(spec.prior)
    return kind, used, prior_idx, tuple(priors)


def param_tables(vocab: Vocabulary, device: torch.device | str = "cpu") -> ParamTables:
    """:class:`ParamTables` of ``vocab`` on ``device``."""
    kind, used, prior_idx, priors = _tables(vocab)
    dev = torch.device(device)
    return ParamTables(
        torch.as_tensor(kind, device=dev),
        torch.as_tensor(used, device=dev),
        torch.as_tensor(prior_idx, device=dev),
        priors,
    )


@dataclass(frozen=True)
class GPBatch:
    """``B`` (dataset, dimension-wise kernel) pairs, padded (float64).

    Attributes:
        X: ``(B, N, D)`` normalised inputs (0 where padded).
        y: ``(B, N)`` normalised targets (0 where padded).
        point_mask: ``(B, N)`` bool.
        dim_mask: ``(B, D)`` bool.
        symbols: ``(B, D, L)`` int64 vocabulary ids (0 = padding).
        symbol_mask: ``(B, D, L)`` bool.
        vocab: the vocabulary of the ids.
        structures: the ``B`` structures (for reporting).
    """

    X: Tensor
    y: Tensor
    point_mask: Tensor
    dim_mask: Tensor
    symbols: Tensor
    symbol_mask: Tensor
    vocab: Vocabulary
    structures: tuple[DimWiseStructure, ...]

    @classmethod
    def from_pairs(
        cls,
        datasets: Sequence[tuple[Tensor, Tensor]],
        structures: Sequence[DimWiseStructure],
        vocab: Vocabulary = PAPER_VOCABULARY,
    ) -> GPBatch:
        """Pad ``B`` datasets ``(X (n_b, d_b), y (n_b,))`` with one structure each.

        Raises:
            ValueError: different numbers of datasets and structures, or a structure
                whose number of dimensions differs from its dataset's.
        """
        if len(datasets) != len(structures) or not datasets:
            raise ValueError(
                f"need one structure per dataset (got {len(datasets)} datasets, {len(structures)} structures)"
            )
        B = len(datasets)
        N = max(int(X.shape[0]) for X, _ in datasets)
        D = max(int(X.shape[1]) for X, _ in datasets)
        X = torch.zeros(B, N, D, dtype=torch.float64)
        y = torch.zeros(B, N, dtype=torch.float64)
        pm = torch.zeros(B, N, dtype=torch.bool)
        dm = torch.zeros(B, D, dtype=torch.bool)
        for b, ((Xb, yb), s) in enumerate(zip(datasets, structures, strict=True)):
            n, d = Xb.shape
            if s.n_dims != d:
                raise ValueError(
                    f"pair {b}: kernel {s} has {s.n_dims} input dimensions but the data has {d}"
                )
            X[b, :n, :d] = Xb
            y[b, :n] = yb
            pm[b, :n] = True
            dm[b, :d] = True
        sym, smask = encode(list(structures), vocab, max_dims=D)
        return cls(
            X, y, pm, dm, torch.as_tensor(sym), torch.as_tensor(smask), vocab, tuple(structures)
        )

    @property
    def batch_size(self) -> int:
        return int(self.X.shape[0])

    @property
    def param_shape(self) -> tuple[int, int, int, int]:
        B, _, D = self.X.shape
        return (B, D, int(self.symbols.shape[2]), self.vocab.max_params)

    def tables(self) -> ParamTables:
        return param_tables(self.vocab, self.X.device)

    def slot_kind(self) -> tuple[Tensor, Tensor]:
        """``(kind (B, D, L, P), used (B, D, L, P))`` of every parameter slot."""
        t = self.tables()
        return t.kind[self.symbols], t.used[self.symbols] & self.symbol_mask[..., None]

    def repeat(self, r: int) -> GPBatch:
        """Each element repeated ``r`` times consecutively (``b * r + i``), for restarts."""
        rep = lambda t: t.repeat_interleave(r, dim=0)  # noqa: E731
        return GPBatch(
            rep(self.X),
            rep(self.y),
            rep(self.point_mask),
            rep(self.dim_mask),
            rep(self.symbols),
            rep(self.symbol_mask),
            self.vocab,
            tuple(s for s in self.structures for _ in range(r)),
        )

    def select(self, index: Tensor | slice | int) -> GPBatch:
        """The sub-batch of the given elements."""
        idx = torch.arange(self.batch_size)[index].reshape(-1)
        return GPBatch(
            self.X[idx],
            self.y[idx],
            self.point_mask[idx],
            self.dim_mask[idx],
            self.symbols[idx],
            self.symbol_mask[idx],
            self.vocab,
            tuple(self.structures[int(i)] for i in idx),
        )

    def validate(self) -> None:
        """Check the batch against the evaluator's contract (raises ``ValueError``)."""
        ones = torch.ones(self.param_shape, dtype=self.X.dtype, device=self.X.device)
        validate_dimwise(
            self.X, self.X, self.symbols, self.symbol_mask, ones, self.vocab, self.dim_mask
        )
        if not bool(self.point_mask.any(-1).all()):
            raise ValueError("every batch element needs at least one valid point")


def constrain(batch: GPBatch, raw: Tensor, raw_noise: Tensor) -> tuple[Tensor, Tensor]:
    """Positive ``params (B, D, L, P)`` and ``noise (B,)`` from unconstrained values.

    Each used slot goes through ``positive(raw, kind)`` with its own kind; unused
    slots are set to 1.0.  Differentiable.
    """
    kind, used = batch.slot_kind()
    out = torch.ones_like(raw)
    for k, name in enumerate(KINDS):
        sel = used & (kind == k)
        if bool(sel.any()):
            out = torch.where(sel, positive(raw, name), out)
    return out, positive(raw_noise, ParamKind.NOISE)


def unconstrain(batch: GPBatch, params: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`constrain` on used slots (unused slots get 0)."""
    kind, used = batch.slot_kind()
    raw = torch.zeros_like(params)
    for k, name in enumerate(KINDS):
        sel = used & (kind == k)
        if bool(sel.any()):
            raw[sel] = positive_inverse(params[sel], name)
    return raw, positive_inverse(noise, ParamKind.NOISE)


def initial_raw(
    batch: GPBatch, value: float = 1.0, noise_std: float = 0.2
) -> tuple[Tensor, Tensor]:
    """Unconstrained start with every kernel parameter ``value`` and noise variance ``noise_std^2``.

    The defaults are the paper's Type-2 ML initialisation (Appendix A).
    """
    B = batch.batch_size
    params = torch.full(batch.param_shape, float(value), dtype=torch.float64, device=batch.X.device)
    noise = torch.full((B,), float(noise_std) ** 2, dtype=torch.float64, device=batch.X.device)
    return unconstrain(batch, params, noise)


def prior_raw(batch: GPBatch, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Unconstrained start drawn from the parameter priors (for random restarts).

    Draws use a numpy generator seeded from ``generator`` (the priors' samplers are
    numpy-based); values are clipped to at least ten times the transform floor.
    """
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    t = batch.tables()
    idx = t.prior[batch.symbols]
    shape = batch.param_shape
    params = np.ones(shape)
    for j, prior in enumerate(t.priors):
        draws = prior.sample(rng, shape)
        params = np.where(idx.cpu().numpy() == j, draws, params)
    noise = NOISE.prior.sample(rng, (batch.batch_size,))
    params_t = torch.as_tensor(params, dtype=torch.float64, device=batch.X.device).clamp_min(1e-3)
    noise_t = torch.as_tensor(noise, dtype=torch.float64, device=batch.X.device).clamp_min(1e-5)
    return unconstrain(batch, params_t, noise_t)


def log_prior(batch: GPBatch, params: Tensor, noise: Tensor) -> Tensor:
    """``(B,)`` log prior density of the constrained parameters and the noise variance."""
    t = batch.tables()
    idx = t.prior[batch.symbols]
    _, used = batch.slot_kind()
    total = NOISE.prior.log_prob(noise)
    safe = torch.where(used, params, torch.ones_like(params))
    for j, prior in enumerate(t.priors):
        sel = used & (idx == j)
        if bool(sel.any()):
            lp = prior.log_prob(safe)
            total = total + torch.where(sel, lp, torch.zeros_like(lp)).sum((1, 2, 3))
    return total


def kernel_matrix(batch: GPBatch, params: Tensor, X2: Tensor | None = None) -> Tensor:
    """``(B, N, M)`` kernel matrices (no noise) between training inputs and ``X2``."""
    return kernel_matrix_dimwise(
        batch.X,
        batch.X if X2 is None else X2,
        batch.symbols,
        batch.symbol_mask,
        params,
        batch.vocab,
        batch.dim_mask,
        validate=False,
    )


def log_marginal_likelihood(batch: GPBatch, params: Tensor, noise: Tensor) -> Tensor:
    """``(B,)`` exact log marginal likelihoods; NaN for elements that fail.

    An element fails when its kernel matrix or noise is not finite (e.g. an
    overflowing parameter) or its Cholesky fails after jitter escalation.
    """
    K = kernel_matrix(batch, params)
    bad = ~torch.isfinite(K).all(-1).all(-1) | ~torch.isfinite(noise) | (noise <= 0)
    if bool(bad.any()):
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device).expand_as(K)
        K = torch.where(bad[:, None, None], eye, K)
        noise = torch.where(bad, torch.ones_like(noise), noise)
    value, _failed = gp_log_marginal_likelihood(
        K, batch.y, noise, batch.point_mask, return_failed=True
    )
    return torch.where(bad, torch.full_like(value, float("nan")), value)


def exact_predictive(
    batch: GPBatch,
    params: Tensor,
    noise: Tensor,
    X_new: Tensor,
    *,
    include_noise: bool = True,
) -> tuple[Tensor, Tensor]:
    """Exact GP posterior predictive at ``X_new (B, M, D)`` (normalised units).

    ``mean = K_*^T A^{-1} y`` and ``var = k_** - diag(K_*^T A^{-1} K_*)`` (plus
    ``sigma^2`` with ``include_noise``), ``A = K + sigma^2 I`` factored once;
    padded training points are an identity block with zero targets.  Variances are
    clamped at 0 before the noise is added.

    Returns:
        ``(mean (B, M), var (B, M))``; NaN for elements whose Cholesky failed.
    """
    K = kernel_matrix(batch, params)
    mf = batch.point_mask.to(K.dtype)
    A = K * (mf[:, :, None] * mf[:, None, :]) + torch.diag_embed(noise[:, None] * mf + (1.0 - mf))
    chol = robust_cholesky(A)
    Ks = kernel_matrix(batch, params, X_new) * mf[:, :, None]
    alpha = torch.cholesky_solve((batch.y * mf)[..., None], chol.L)[..., 0]
    mean = (Ks * alpha[..., None]).sum(1)
    V = torch.linalg.solve_triangular(chol.L, Ks, upper=False)
    kss = kernel_diag_dimwise(
        X_new, batch.symbols, batch.symbol_mask, params, batch.vocab, batch.dim_mask, validate=False
    )
    var = (kss - (V * V).sum(1)).clamp_min(0.0)
    if include_noise:
        var = var + noise[:, None]
    nan = torch.full_like(mean, float("nan"))
    return torch.where(chol.failed[:, None], nan, mean), torch.where(chol.failed[:, None], nan, var)
