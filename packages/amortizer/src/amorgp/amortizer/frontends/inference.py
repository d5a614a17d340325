"""The :class:`Amortizer`: a trained network turned into GP hyperparameters for user data.

The steps of :meth:`Amortizer.infer_many` are described in :mod:`amorgp.amortizer.api`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from amorgp.amortizer.frontends.io import MIN_POINTS
from amorgp.amortizer.frontends.options import check_device, check_inference_options
from amorgp.amortizer.networks.bundled import PRETRAINED_DIR, resolve_checkpoint
from amorgp.amortizer.networks.config import NetworkConfig
from amorgp.amortizer.networks.forward import warn_binary_target, warn_outside_training
from amorgp.amortizer.networks.network import AmortizationNetwork
from amorgp.amortizer.networks.selection import (
    any_structure,
    check_candidates,
    load_candidates,
    load_network,
)
from amorgp.amortizer.networks.structures import KernelBatch
from amorgp.amortizer.stages import candidates, pipeline
from amorgp.amortizer.stages.calibrate import check_calibrate
from amorgp.amortizer.stages.constraints import (
    Name,
    check_constraints,
    warn_at_noise_floor,
)
from amorgp.amortizer.stages.multistart import check_starts, resolve_starts
from amorgp.amortizer.stages.refine import check_refine
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.data import Normalizer, as_dataset
from amorgp.core.errors import OptionError
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary
from amorgp.lazy_kernels import MEMORY_BUDGET, check_backend

__all__ = [
    "AmortizedMethod",
    "DEFAULT_ENCODER_POINTS",
    "DEFAULT_MAX_ADDENDS",
    "DEFAULT_PRECOND_RANK",
    "PRETRAINED_DIR",
    "Amortizer",
    "Progress",
]

"""The bundled default checkpoint (replaced by the trained model, same format)."""

DEFAULT_ENCODER_POINTS = 250
"""Encoder subset size when the checkpoint does not state its training range."""

DEFAULT_MAX_ADDENDS = 6
"""Addends per dimension of the paper prior's simulator (its cap), assumed when the
checkpoint does not record its simulator configuration."""

DEFAULT_PRECOND_RANK = 256
"""Rank of the CG backends' pivoted-Cholesky preconditioner.  ``SE + PER``, n = 3000: rank 64
took 87 CG iterations and missed the exact LML by 4.7 nats, rank 256 took 2 and matched it
(smooth kernels stop earlier: the factorisation ends when the remainder is negligible)."""

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: stages ``"network"``, ``"refine"`` (iterations) and
``"likelihood"`` (kernels)."""

logger = logging.getLogger(__name__)


class Amortizer(candidates.Fitter):
    """Amortized GP hyperparameter inference with a trained network.

    Args:
        model: an :class:`~amorgp.amortizer.networks.network.AmortizationNetwork` registered for any
            kernel structure (e.g. the structured :class:`~amorgp.amortizer.networks.model.AmortizedGP`).
        meta: the checkpoint's JSON metadata (training range, vocabulary...).
        device: device of the network and the GP algebra.
        dtype: dtype of the GP algebra (float64 default; the network stays float32).
        encoder_points: most points the dataset encoder reads (default: the
            checkpoint's ``train.encoder_points`` if set, else ``train.n_max``, else
            :data:`DEFAULT_ENCODER_POINTS`).
        seed: seed of the encoder subset of large datasets.
        memory_budget: bytes the dense GP backends may use (default 4 GiB,
            :data:`~amorgp.lazy_kernels.MEMORY_BUDGET`); the ``"auto"`` backend picks the
            solver (dense Cholesky, dense CG, KeOps or block CG) with it.
        backend: the GP backend of the posteriors: ``"auto"`` (default: by the memory
            rule of :func:`~amorgp.lazy_kernels.plan_solver`), ``"cholesky"``, ``"cg"``,
            ``"keops"``, ``"block"`` or ``"dense"``.  One plan per call
            (:meth:`solver_plan`) is read by every stage.
        gp_options: more :class:`~amorgp.lazy_kernels.Posterior` options for the CG
            solvers (``cg_tol``, ``max_cg_iter``, ``precond_rank`` (default
            :data:`DEFAULT_PRECOND_RANK`), ``n_probes``).
        candidates: more networks of the same vocabulary, as ``{name: network}``: every
            network predicts every kernel, and per kernel the prediction with the highest
            log marginal likelihood on the encoder's points is kept
            (:mod:`amorgp.amortizer.networks.selection`; ``KernelResult.network`` names the
            winner).  A checkpoint may name its candidates (``"candidates"``, e.g.
            ``small-d8-c376k``; the default names none); :meth:`from_pretrained` loads them.
        name: the primary network's name in ``KernelResult.network``.
        calibrate: the default of :meth:`infer_many`'s ``calibrate`` (also for
            :meth:`fit_many`, through which model averaging and structure search score
            kernels): ``True`` (the default) sets every kernel's global scale and noise
            to their exact Type-2 ML values after the network, ``False`` keeps the
            network's prediction alone (the paper's amortized method, faster:
            ``docs/benchmarks/speed.md``).
        starts: the default of :meth:`infer_many`'s ``starts`` (``None``: see there).

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
        model: AmortizationNetwork,
        meta: Mapping[str, Any] | None = None,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float64,
        encoder_points: int | None = None,
        seed: int = 0,
        memory_budget: float = MEMORY_BUDGET,
        backend: str = "auto",
        gp_options: Mapping[str, Any] | None = None,
        candidates: Mapping[str, AmortizationNetwork] | None = None,
        name: str = "primary",
        calibrate: bool = True,
        starts: int | None = None,
    ) -> None:
        if not isinstance(model, AmortizationNetwork):
            raise OptionError(
                f"Amortizer needs an amortization network, got {type(model).__name__}"
            )
        check_inference_options(
            device=device,
            encoder_points=encoder_points,
            seed=seed,
            memory_budget=memory_budget,
            gp_options=gp_options,
        )
        others = check_candidates(model, candidates or {}, name)
        if dtype not in (torch.float32, torch.float64):
            raise OptionError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.calibrate = check_calibrate(calibrate)
        self.starts = None if starts is None else check_starts(starts)
        self.meta: dict[str, Any] = dict(meta or {})
        train = _section(self.meta, "train")
        if encoder_points is None:
            trained_subset = int(train.get("encoder_points", 0) or 0)
            encoder_points = trained_subset or int(train.get("n_max", DEFAULT_ENCODER_POINTS))
        if encoder_points < 1:
            raise OptionError(f"encoder_points must be >= 1, got {encoder_points}")
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.name = name
        self.candidates = {k: v.to(self.device).eval() for k, v in others.items()}
        self.dtype = dtype
        self.encoder_points = int(encoder_points)
        self.max_dims = int(train["max_dims"]) if "max_dims" in train else None
        sim = _section(_section(self.meta, "simulator"), "config")
        self.max_addends = int(sim.get("max_addends", DEFAULT_MAX_ADDENDS))
        self.seed = int(seed)
        self.memory_budget = float(memory_budget)
        self.backend = check_backend(backend)
        self.gp_options: dict[str, Any] = {
            "precond_rank": DEFAULT_PRECOND_RANK,
            **dict(gp_options or {}),
        }
        unknown = set(self.gp_options) - {"cg_tol", "max_cg_iter", "precond_rank", "n_probes"}
        if unknown:
            raise OptionError(f"unknown gp_options {sorted(unknown)}")

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
        candidates: Sequence[str | os.PathLike[str]] | None = None,
        **kwargs: Any,
    ) -> Amortizer:
        """Load a checkpoint directory or a bundled model by name (default: :data:`PRETRAINED_DIR`).

        The checkpoint's SHA-256 checksums, format tag and architecture are verified, and
        so are those of its candidate networks.

        Args:
            path: checkpoint directory, the name of a bundled model (see
                :func:`pretrained_names`; earlier defaults stay loadable by name), or
                ``None`` for the bundled default.
            device: ``"cpu"``, ``"cuda"``...; default CUDA if available.
            candidates: checkpoints (directories or bundled names) whose networks compete
                with this one per kernel (see :class:`Amortizer`); ``None``: the ones the
                checkpoint names in its ``"candidates"`` (the bundled default names none;
                ``small-d8-c376k`` names ``small-d8-c206k``), ``()``: none.
            **kwargs: more :class:`Amortizer` options (``dtype``, ``encoder_points``...).

        Raises:
            CheckpointError: a missing directory or file, a corrupted file (checksum), an
                unknown format, weights that do not fit the stored architecture, or a
                network that predicts a fixed kernel only.
        """
        where = resolve_checkpoint(path)
        dev = check_device(device) if device is not None else _default_device()
        model, meta = load_network(where, dev)
        others = load_candidates(where, meta, candidates, dev)
        label = "default" if path is None else Path(path).name
        return cls(model, meta, device=dev, candidates=others, name=label, **kwargs)

    # -- structures -----------------------------------------------------------------------
    def structure(self, kernel: str | DimWiseStructure, n_dims: int) -> DimWiseStructure:
        """Parse ``kernel`` for data with ``n_dims`` columns and check it against the network.

        Raises:
            ValueError: the text does not parse, does not match ``n_dims``, or uses a
                symbol outside the network's vocabulary.
        """
        structure = DimWiseStructure.coerce(kernel, n_dims, self.vocabulary)
        if not any_structure(self.model) and any(a != ("SE",) for a in structure.dims):
            raise OptionError(
                f"the {self.model.config.model!r} network predicts the SE-ARD kernel only "
                f"(SE in every dimension, kernel 'SE'), not {kernel!s}"
            )
        return structure

    # -- inference --------------------------------------------------------------------------
    def infer(
        self,
        X: Any,
        y: Any,
        kernel: str | DimWiseStructure,
        *,
        refine: int | Literal["auto"] | None = None,
        calibrate: bool | None = None,
        evaluate_lml: bool | None = None,
        progress: Progress | None = None,
        starts: int | None = None,
        noise_floor: float | None = None,
        fixed: Mapping[Name, float] | None = None,
        bounds: Mapping[Name, tuple[float, float]] | None = None,
        priors: bool = False,
    ) -> KernelResult:
        """Hyperparameters of one kernel (see :meth:`infer_many`)."""
        return self.infer_many(
            X,
            y,
            [kernel],
            refine=refine,
            calibrate=calibrate,
            evaluate_lml=evaluate_lml,
            progress=progress,
            starts=starts,
            noise_floor=noise_floor,
            fixed=fixed,
            bounds=bounds,
            priors=priors,
        )[0]

    def infer_many(
        self,
        X: Any,
        y: Any,
        kernels: Sequence[str | DimWiseStructure],
        *,
        refine: int | Literal["auto"] | None = None,
        calibrate: bool | None = None,
        evaluate_lml: bool | None = None,
        progress: Progress | None = None,
        starts: int | None = None,
        noise_floor: float | None = None,
        fixed: Mapping[Name, float] | None = None,
        bounds: Mapping[Name, tuple[float, float]] | None = None,
        priors: bool = False,
    ) -> list[KernelResult]:
        """Hyperparameters of several kernels on one dataset in one batch.

        Args:
            X: inputs ``(n, d)`` (or ``(n,)``), original units.
            y: targets ``(n,)``.
            kernels: kernel expressions (``"SE + PER"`` is the same sum in every
                dimension; ``"(SE + LIN)@0 * PER@1"`` per dimension) or structures.
            refine: Type-2 ML from the prediction.  ``None`` (the default): every kernel
                whose predicted gain of one more Fisher-scoring step is above
                :data:`~amorgp.amortizer.stages.fisher.GAIN_TOL` (0.01 nats) is refined until
                it is not, the best few periodic starts first by successive halving (as
                ``"auto"``), wherever Fisher scoring applies (dense float64 algebra, at most
                :data:`~amorgp.amortizer.stages.fisher.MAX_POINTS` points, within the memory
                budget), and above that by L-BFGS rounds up to
                :data:`~amorgp.amortizer.stages.refine.DEFAULT_POINTS` points (float64, within
                the dense limit); above, on a seeded subset of
                :data:`~amorgp.amortizer.stages.refine.SUBSET_POINTS` points
                (``refine_status`` ``"subset"``: the subset's optimum;
                :func:`~amorgp.amortizer.stages.refine.default_subset`); elsewhere nothing
                is refined and ``refine_status`` says ``"skipped"``
                (:func:`~amorgp.amortizer.stages.refine.default_refines`).
                ``"auto"``: the same, and L-BFGS rounds until the likelihood stops
                improving where Fisher scoring does not apply.  ``k`` (any integral
                number): at most ``k`` iterations.  ``0``: the amortized answer alone (see
                :mod:`amorgp.amortizer.stages.refine`, :mod:`amorgp.amortizer.stages.fisher`).
            calibrate: after the network, set each kernel's global scale and noise
                variance to their exact Type-2 ML values given its other
                hyperparameters (one tridiagonalisation per kernel on the CPU, one
                eigendecomposition elsewhere, on at most
                :data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS` points; the log marginal
                likelihood never decreases; see :mod:`amorgp.amortizer.stages.calibrate`).
                Runs before ``refine``, which then starts from the calibrated values.
                ``None``: the amortizer's own ``calibrate`` setting (default on).
            evaluate_lml: compute every kernel's log marginal likelihood before returning
                (``None``: only where the dense backend makes it cheap; else on first
                access).  Each likelihood factors its kernel's posterior, which the result
                keeps for its predictions.  On the dense backend (float64, one kernel
                matrix within :data:`~amorgp.amortizer.stages.batched.CHUNK_BYTES`) the kernel
                matrices of all kernels are evaluated in one call, shared by the
                calibration, and factored together (:mod:`amorgp.amortizer.stages.batched`).
            starts: starts per kernel with a periodic term, the network's prediction
                included: the periodogram's periods, harmonics and lengthscale rescalings,
                each calibrated, the best by exact log marginal likelihood kept
                (:mod:`amorgp.amortizer.stages.multistart`; ``KernelResult.start`` names the
                winner; ``refine="auto"`` refines the best few).  ``1``: the prediction
                alone.  ``None``: the amortizer's ``starts``, else
                :data:`~amorgp.amortizer.stages.multistart.DEFAULT_STARTS` with ``calibrate``
                and 1 without.
            progress: called as ``progress(stage, done, total)`` while working (see
                :data:`Progress`), e.g. to drive a progress bar.
            noise_floor: the smallest noise variance returned, normalised units (the
                targets standardised); ``None``: ``1e-6``, the transform's floor.  Lower it
                (down to :data:`~amorgp.amortizer.stages.constraints.MIN_NOISE_FLOOR`) for
                near-noiseless data, with ``refine`` to reach the optimum.
            fixed: ``{name: value}`` held fixed by calibration and refinement, names as
                :attr:`KernelResult.hyperparameters` (``(dim, addend, name)``) or
                ``"noise"``, values in normalised units (:mod:`amorgp.amortizer.stages.constraints`).
            bounds: ``{name: (low, high)}`` within which ``refine`` optimises (the start
                clipped into them), same names and units.
            priors: ``True``: ``refine`` maximises the log marginal likelihood plus the log
                density of the grammar's prior of every free hyperparameter (a MAP fit, in
                normalised units: each parameter's ``ParamSpec.prior``, the noise's
                ``NOISE.prior``); needs ``refine``.  The reported log marginal likelihood
                stays the likelihood.

        Returns:
            One :class:`~amorgp.amortizer.stages.results.KernelResult` per kernel, in order.

        Raises:
            DataError: invalid data (shapes, NaN/Inf, fewer than 3 points, constant
                targets, scales float64 cannot represent).
            OptionError: a kernel that does not parse or fit the data, an invalid
                ``refine``, ``calibrate``, ``noise_floor``, ``fixed`` or ``bounds``
                (unknown name, ``low >= high``, a non-positive value, a value below its
                floor), refinement above the dense limit.

        Warns:
            UserWarning: more input dimensions or addends than the network was trained
                with, or constant input columns.
            NoiseFloorWarning: a kernel's noise ended at ``noise_floor`` while the
                likelihood still rises towards lower noise
                (:class:`~amorgp.amortizer.stages.constraints.NoiseFloorWarning`).
        """
        t0 = time.perf_counter()
        if isinstance(kernels, str | DimWiseStructure):
            raise OptionError("kernels must be a list; use infer() for one kernel")
        if len(kernels) == 0:
            raise OptionError("kernels is empty")
        steps = check_refine(refine)
        calibrate = self.calibrate if calibrate is None else check_calibrate(calibrate)
        cons = check_constraints(fixed, bounds, noise_floor, priors)
        cons.check_refine(steps)
        norm, Xn, yn, parsed = self.prepare(X, y, kernels, steps)
        structures = KernelBatch(parsed, self.vocabulary, self.device)  # encoded once
        n, K = Xn.shape[0], len(structures)
        terms = candidates.addends(structures)
        run, idle, groups, subset = candidates.refine_plan(
            self, n, terms, steps, cons
        )  # or refused
        opts = candidates.FitOptions(
            steps=run,
            calibrate=calibrate,
            starts=resolve_starts(starts, self.starts, calibrate),
            constraints=cons,
            kernel_constraints=cons.resolve(structures),
            groups=groups,
            evaluate_lml=evaluate_lml,
            progress=progress,
            idle=idle,
            subset=subset,
        )
        batch = pipeline.run(self, candidates.new_batch(self, Xn[None], yn[None], structures), opts)
        elapsed = time.perf_counter() - t0
        evaluate = bool(evaluate_lml) or (batch.plan.dense and evaluate_lml is None)
        results = pipeline.kernel_results(self, batch, 0, norm, opts, elapsed, evaluate)
        logger.info(
            "%d kernel(s) on n = %d points: %.3f s (calibrate=%s, starts=%d, refine=%s)",
            K, n, elapsed, calibrate, opts.starts, refine,
        )  # fmt: skip
        warn_at_noise_floor(
            Xn, yn, opts.kernel_constraints, batch.params, batch.noise, batch.factors,
            self.vocabulary,
        )  # fmt: skip
        return results

    def prepare(
        self,
        X: Any,
        y: Any,
        kernels: Sequence[str | DimWiseStructure],
        refine: int | str | None = None,
    ) -> tuple[Normalizer, Tensor, Tensor, list[DimWiseStructure]]:
        """Validated, normalised data on the device and the checked structures (warns
        about inputs outside the training range, advice by ``refine``, and binary targets)."""
        Xa, ya = as_dataset(X, y, min_points=MIN_POINTS, training=True)
        d = Xa.shape[1]
        structures = [self.structure(k, d) for k in kernels]
        warn_outside_training(d, structures, self.max_dims, self.max_addends, refine)
        warn_binary_target(ya)
        norm = Normalizer.fit(Xa, ya)
        Xn = norm.transform_x(Xa).to(self.device, self.dtype)
        yn = norm.transform_y(ya).to(self.device, self.dtype)
        return norm, Xn, yn, structures

    def fit_many(
        self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]
    ) -> list[KernelResult]:
        """:meth:`infer_many` under the name of the inference protocol
        (:class:`amorgp.core.fit.HyperparameterInference`) that model averaging and
        structure search consume, so the amortizer and the baselines are interchangeable."""
        return self.infer_many(X, y, kernels)

    def method(
        self, *, refine: int | Literal["auto"] | None = None, calibrate: bool | None = None
    ) -> AmortizedMethod:
        """This amortizer as an inference method whose ``fit_many`` runs :meth:`infer_many`
        with ``refine`` and ``calibrate`` (``None``: the amortizer's own setting), for model
        averaging and structure search, e.g. ``structure_search(amz, ..., refine=
        amz.method(refine=5))``.

        Raises:
            OptionError: an invalid ``refine`` or ``calibrate``.
        """
        check_refine(refine)
        if calibrate is not None:
            check_calibrate(calibrate)
        return AmortizedMethod(self, refine, calibrate)

    def infer_datasets(
        self,
        datasets: Sequence[tuple[Any, Any]],
        kernels: Sequence[str | DimWiseStructure],
        **options: Any,
    ) -> list[Any]:
        """Hyperparameters of ``kernels`` on each of many datasets ``[(X, y), ...]``, batched
        over datasets of equal size: one :class:`~amorgp.amortizer.frontends.many.DatasetFit` per
        dataset, in order, with its :class:`KernelResult` list (as :meth:`infer_many`) or
        its one-line error.  Options: ``refine``, ``calibrate``, ``starts``, ``noise_floor``,
        ``fixed``, ``bounds``, ``priors`` (as :meth:`infer_many`), ``budget``,
        ``exact_network``, ``progress``; see :func:`amorgp.amortizer.frontends.many.iter_datasets`."""
        from amorgp.amortizer.frontends.many import infer_datasets

        return infer_datasets(self, datasets, kernels, **options)

    def __repr__(self) -> str:
        more = f", candidates={list(self.candidates)}" if self.candidates else ""
        more += "" if self.calibrate else ", calibrate=False"
        return (
            f"Amortizer({self.network.model}, vocabulary={list(self.vocabulary.symbols)}, "
            f"device={self.device}, encoder_points={self.encoder_points}{more})"
        )


@dataclass(frozen=True)
class AmortizedMethod:
    """An :class:`Amortizer` with fixed ``refine`` and ``calibrate``, as an inference method
    (:meth:`Amortizer.method`)."""

    amortizer: Amortizer
    refine: int | Literal["auto"] | None = None
    calibrate: bool | None = None

    @property
    def vocabulary(self) -> Vocabulary:
        """The amortizer's symbol vocabulary (kernels are checked against it)."""
        return self.amortizer.vocabulary

    def fit_many(
        self, X: Any, y: Any, kernels: Sequence[str | DimWiseStructure]
    ) -> list[KernelResult]:
        return self.amortizer.infer_many(
            X, y, kernels, refine=self.refine, calibrate=self.calibrate
        )


def _section(meta: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = meta.get(key)
    return value if isinstance(value, Mapping) else {}


def _default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
