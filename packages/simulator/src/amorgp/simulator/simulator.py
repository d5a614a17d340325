"""The simulator: batched draws from ``p(D, S)`` in the padded batch contract.

One call of :meth:`Simulator.sample` draws ``B`` (dataset, structure) pairs:

1. sizes: ``n_b ~ U{n_min..n_max}``, ``d_b = min(Geometric(p_dims), d_max)``;
2. structures ``S_b`` of ``d_b`` dimensions (:mod:`amorgp.simulator.structures`);
3. pairs: ``is_positive_b ~ Bernoulli(positive_ratio)``; a negative presents a
   distinct structure ``S~_b`` of the same ``d_b``;
4. parameters ``theta_b ~ p(theta | S_b)`` and noise ``sigma_b^2 ~ p(sigma^2)``
   (priors of kernel-grammar);
   (with ``config.prior`` ``"realdata"``, ``"realdata-series"``,
   ``"realdata-irrelevant"`` or ``"realdata-ard"``, moved to the laws
   of :mod:`amorgp.simulator.realdata`);
5. inputs ``X_b ~ U[x_low, x_high]^(d_b)`` (or another law of
   :mod:`amorgp.simulator.inputs`, rescaled to ``[x_low, x_high]``), ``n_b`` training and ``n_test`` test points;
6. targets: ``[y_b; y*_b] ~ N(0, K_{S_b}(X, X) + sigma_b^2 I)`` jointly over training
   and test points, via the batched heterogeneous kernel evaluator
   (``amorgp.lazy_kernels.kernel_matrix_dimwise``), a float64 batched Cholesky with
   per-element escalating jitter (``amorgp.diff_linalg.robust_cholesky``) and
   ``y = L z``, ``z ~ N(0, I)``; the ``realdata`` prior then standardises ``y`` on the
   training points and scales the truth with it.  Both run per group of similar ``n``
   (``config.size_buckets`` groups, a cost knob that does not change the draws).

Padded points get an identity block in the covariance (so they never touch the
real ones) and ``z = 0`` (so ``y = 0`` there).  An element whose covariance
cannot be factorised even with jitter is marked ``valid = False`` (its ``y`` is
0) and counted in ``SimulatedBatch.n_failed``; nothing is resampled.  There is
no Python loop over datasets, dimensions or addends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from amorgp.diff_linalg import robust_cholesky
from amorgp.lazy_kernels import kernel_matrix_dimwise, size_buckets
from amorgp.simulator.batch import SimulatedBatch
from amorgp.simulator.config import SimulatorConfig
from amorgp.simulator.inputs import sample_input_columns
from amorgp.simulator.parameters import PriorTable, sample_noise, sample_parameters
from amorgp.simulator.realdata import (
    PRIOR_LAWS,
    ard_structures,
    realdata_noise,
    realdata_parameters,
    scale_amplitudes,
    series_law,
    standardise_targets,
)
from amorgp.simulator.samplers import sample_geometric, sample_uniform_int
from amorgp.simulator.structures import sample_negative_structures, sample_structures

__all__ = ["Inputs", "Simulator", "TargetDraw"]

_F64 = torch.float64


@dataclass(frozen=True)
class Inputs:
    """Inputs of a batch: ``X_all (B, N + T, D)`` with training points first.

    Attributes:
        X_all: training points ``[:, :N]`` then test points ``[:, N:]`` (0 at padding).
        mask_all: ``(B, N + T)`` bool, real points.
        dim_mask: ``(B, D)`` bool, real dimensions.
        n_train: ``N``, the padded number of training points.
    """

    X_all: torch.Tensor
    mask_all: torch.Tensor
    dim_mask: torch.Tensor
    n_train: int


@dataclass(frozen=True)
class TargetDraw:
    """Targets drawn from the GP prior.

    Attributes:
        y_all: ``(B, N + T)`` float64 (0 at padding and for failed elements).
        valid: ``(B,)`` bool, False where the Cholesky failed after jitter.
        jitter: ``(B,)`` absolute diagonal jitter used.
    """

    y_all: torch.Tensor
    valid: torch.Tensor
    jitter: torch.Tensor


class Simulator:
    """Draws batches of simulated GP datasets with their kernel structures.

    Args:
        config: the prior; default :meth:`SimulatorConfig.paper`.
        device: where tensors are created; the generators passed to the
            sampling methods must live on the same device.

    Example:
        >>> import torch
        >>> sim = Simulator(SimulatorConfig(n_max=30))
        >>> batch = sim.sample(8, torch.Generator().manual_seed(0))
        >>> batch.X.shape[0], batch.y.dtype
        (8, torch.float64)
    """

    def __init__(
        self, config: SimulatorConfig | None = None, *, device: torch.device | str = "cpu"
    ) -> None:
        self.config = config if config is not None else SimulatorConfig.paper()
        if not isinstance(self.config, SimulatorConfig):
            raise ValueError(f"config must be a SimulatorConfig, got {type(self.config)}")
        self.device = torch.device(device)
        self.vocabulary = self.config.vocabulary
        self.prior_table = PriorTable.from_vocabulary(self.vocabulary)

    def __repr__(self) -> str:
        return f"Simulator({self.config!r}, device={str(self.device)!r})"

    def _check_generator(self, generator: torch.Generator) -> None:
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator)}")
        if generator.device.type != self.device.type:
            raise ValueError(
                f"generator lives on {generator.device} but the simulator on {self.device}"
            )

    # ---------------------------------------------------------------- stages
    def sample_sizes(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``n (B,)`` training points and ``d (B,)`` dimensions per dataset (int64)."""
        cfg = self.config
        n = sample_uniform_int(cfg.n_min, cfg.n_max, (batch_size,), generator)
        d = sample_geometric(cfg.p_dims, (batch_size,), generator).clamp_max(cfg.d_max)
        return n, d

    def sample_inputs(self, n: torch.Tensor, d: torch.Tensor, generator: torch.Generator) -> Inputs:
        """Inputs (law ``config.inputs``) for ``n`` training and ``config.n_test`` test points.

        Args:
            n: ``(B,)`` training points per dataset.
            d: ``(B,)`` dimensions per dataset.
            generator: the random source.
        """
        cfg = self.config
        batch = n.shape[0]
        n_train = cfg.n_max if cfg.fixed_shapes else int(n.max())
        width = cfg.d_max if cfg.fixed_shapes else int(d.max())
        total = n_train + cfg.n_test
        slots = torch.arange(total, device=n.device)
        mask_all = (slots < n[:, None]) | (slots >= n_train)
        dim_mask = torch.arange(width, device=n.device) < d[:, None]
        if cfg.inputs == "uniform":
            u = torch.rand((batch, total, width), generator=generator, dtype=_F64, device=n.device)
        else:
            u = sample_input_columns(
                cfg.inputs, (batch, total, width), slots < n[:, None], generator
            )
        X = cfg.x_low + (cfg.x_high - cfg.x_low) * u
        X = torch.where(mask_all[:, :, None] & dim_mask[:, None, :], X, 0.0)
        return Inputs(X, mask_all, dim_mask, n_train)

    def covariance(
        self,
        inputs: Inputs,
        symbols: torch.Tensor,
        symbol_mask: torch.Tensor,
        params: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """``K(X, X) + sigma^2 I`` of every dataset, identity on padded points.

        Returns:
            ``(B, N + T, N + T)`` float64.
        """
        X = inputs.X_all
        K = kernel_matrix_dimwise(
            X, X, symbols, symbol_mask, params, self.vocabulary, inputs.dim_mask, validate=False
        )
        m = inputs.mask_all
        # in place: zero the padded rows/columns, then noise (real) or 1 (padded) on the diagonal
        K.mul_(m[:, :, None] & m[:, None, :])
        K.diagonal(dim1=-2, dim2=-1).add_(torch.where(m, noise[:, None], 1.0))
        return K

    def sample_targets(
        self,
        covariance: torch.Tensor,
        mask_all: torch.Tensor,
        generator: torch.Generator,
        *,
        z: torch.Tensor | None = None,
    ) -> TargetDraw:
        """``y = L z`` with ``L L^T = covariance`` (+ jitter where needed), ``z ~ N(0, I)``.

        Args:
            covariance: ``(B, M, M)`` float64 covariances (identity on padding).
            mask_all: ``(B, M)`` bool, real points (``z = 0`` elsewhere).
            generator: the random source (unused when ``z`` is given).
            z: ``(B, M)`` standard normal draws to use instead of fresh ones.
        """
        cfg = self.config
        chol = robust_cholesky(covariance, jitter=cfg.jitter, max_tries=cfg.max_tries)
        if z is None:
            z = torch.randn(mask_all.shape, generator=generator, dtype=_F64, device=mask_all.device)
        z = torch.where(mask_all, z, 0.0)
        y = (chol.L @ z[..., None]).squeeze(-1)
        valid = ~chol.failed
        y = torch.where(valid[:, None], y, 0.0)
        return TargetDraw(y, valid, chol.jitter)

    def size_groups(self, n: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
        """Batch elements grouped by similar ``n`` (``config.size_buckets`` equal-count groups).

        Returns:
            ``[(indices, width), ...]`` with ``width`` the largest ``n`` of the group
            (:func:`amorgp.lazy_kernels.size_buckets`).
        """
        return size_buckets(n, self.config.size_buckets)

    def draw_targets(
        self,
        inputs: Inputs,
        n: torch.Tensor,
        symbols: torch.Tensor,
        symbol_mask: torch.Tensor,
        params: torch.Tensor,
        noise: torch.Tensor,
        generator: torch.Generator,
    ) -> TargetDraw:
        """Targets of every dataset, with kernel and Cholesky computed per size group.

        ``z ~ N(0, I)`` is drawn once for the padded batch; each group of
        :meth:`size_groups` then builds :meth:`covariance` on its training points
        (up to the group's largest ``n``) and all test points, factors it and
        writes ``y = L z`` back.  The loop runs over at most ``size_buckets``
        groups, never over datasets.
        """
        X_all, mask_all = inputs.X_all, inputs.mask_all
        B, M = mask_all.shape
        N = inputs.n_train
        z = torch.randn((B, M), generator=generator, dtype=_F64, device=X_all.device)
        y = torch.zeros((B, M), dtype=_F64, device=X_all.device)
        valid = torch.ones(B, dtype=torch.bool, device=X_all.device)
        jitter = torch.zeros(B, dtype=_F64, device=X_all.device)
        test_cols = torch.arange(N, M, device=X_all.device)
        for idx, width in self.size_groups(n):
            cols = torch.cat([torch.arange(width, device=X_all.device), test_cols])
            sub = Inputs(X_all[idx][:, cols], mask_all[idx][:, cols], inputs.dim_mask[idx], width)
            cov = self.covariance(sub, symbols[idx], symbol_mask[idx], params[idx], noise[idx])
            part = self.sample_targets(cov, sub.mask_all, generator, z=z[idx][:, cols])
            y[idx[:, None], cols[None, :]] = part.y_all
            valid[idx] = part.valid
            jitter[idx] = part.jitter
        return TargetDraw(y, valid, jitter)

    # ---------------------------------------------------------------- whole batch
    def sample(self, batch_size: int, generator: torch.Generator) -> SimulatedBatch:
        """Draw ``batch_size`` (dataset, structure) pairs.

        Args:
            batch_size: ``B >= 1``.
            generator: the random source, on the simulator's device.  The same
                generator state gives the same batch.

        Returns:
            A :class:`SimulatedBatch`.

        Raises:
            ValueError: ``batch_size < 1`` or a generator on another device.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self._check_generator(generator)
        cfg = self.config
        width_l = cfg.addend_cap if cfg.fixed_shapes else None
        n, d = self.sample_sizes(batch_size, generator)
        want_positive = (
            torch.rand((batch_size,), generator=generator, dtype=_F64, device=self.device)
            < cfg.positive_ratio
        )
        inputs = self.sample_inputs(n, d, generator)
        width_d = inputs.dim_mask.shape[1]
        true_symbols, true_mask = sample_structures(
            d, cfg, generator, max_dims=width_d, max_addends=width_l
        )
        laws = PRIOR_LAWS[cfg.prior]
        if laws.ard:
            true_symbols, true_mask, _ = ard_structures(
                true_symbols, true_mask, d, self.vocabulary, generator
            )
        shown = sample_negative_structures(
            true_symbols, d, want_positive, cfg, generator, max_addends=width_l
        )
        params, n_rejected = sample_parameters(
            true_symbols,
            true_mask,
            self.prior_table,
            generator,
            clamp_to_floors=cfg.clamp_to_floors,
        )
        noise = sample_noise(batch_size, generator, clamp_to_floors=cfg.clamp_to_floors)
        if laws.realdata:
            params = realdata_parameters(
                params, true_symbols, true_mask, d, self.vocabulary, generator, laws.long_high
            )
            noise = realdata_noise(noise, generator)
        if laws.series:
            params, noise, _ = series_law(
                params, noise, true_symbols, true_mask, d, self.vocabulary, generator
            )
        draw = self.draw_targets(inputs, n, true_symbols, true_mask, params, noise, generator)
        N = inputs.n_train
        if laws.realdata:  # standardised targets, the truth scaled with them
            train = inputs.mask_all.clone()
            train[:, N:] = False
            y_std, s = standardise_targets(draw.y_all, train, draw.valid)
            y_std = torch.where(inputs.mask_all, y_std, 0.0)
            inv_var = 1.0 / s**2
            params = scale_amplitudes(params, true_symbols, true_mask, self.vocabulary, inv_var)
            noise = noise * inv_var
            draw = TargetDraw(y_std, draw.valid, draw.jitter)
        test: dict[str, torch.Tensor] = {}
        if cfg.n_test > 0:
            test = {
                "X_test": inputs.X_all[:, N:],
                "y_test": draw.y_all[:, N:],
                "test_mask": inputs.mask_all[:, N:],
            }
        return SimulatedBatch(
            X=inputs.X_all[:, :N],
            y=draw.y_all[:, :N],
            point_mask=inputs.mask_all[:, :N],
            dim_mask=inputs.dim_mask,
            symbols=shown.symbols,
            symbol_mask=shown.symbol_mask,
            vocab=cfg.vocabulary,
            true_symbols=true_symbols,
            true_symbol_mask=true_mask,
            params=params,
            noise=noise,
            is_positive=shown.is_positive,
            valid=draw.valid,
            jitter=draw.jitter,
            n_gamma_rejections=n_rejected,
            n_negative_fallback=shown.n_fallback,
            **test,
        )
