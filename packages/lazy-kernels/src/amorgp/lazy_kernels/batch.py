"""The padded batch: many (dataset, dimension-wise kernel) pairs in one set of tensors.

Shapes: ``B`` pairs, ``N`` padded points, ``D`` padded input dimensions, ``L``
padded addends per dimension, ``P = vocab.max_params`` parameter slots.

==============  ===================  ===================================================
field           shape, dtype         meaning
==============  ===================  ===================================================
``X``           ``(B, N, D)`` float  inputs (any finite or junk value at padding)
``y``           ``(B, N)`` float     targets (likewise)
``point_mask``  ``(B, N)`` bool      present points
``dim_mask``    ``(B, D)`` bool      present input dimensions
``symbols``     ``(B, D, L)`` int    vocabulary ids of the addends, 0 = padding
``symbol_mask`` ``(B, D, L)`` bool   present addends
``vocab``       :class:`Vocabulary`  what the ids mean
``params``      ``(B, D, L, P)``     optional positive kernel parameters, slot order of
                float                each symbol (:mod:`amorgp.lazy_kernels.slots`)
``noise``       ``(B,)`` float       optional observation-noise variances
==============  ===================  ===================================================

The kernel of pair ``b`` is ``prod_{d present} sum_{l present} k_{symbols[b,d,l]}``;
a padded dimension contributes nothing, a padded addend nothing, a padded point
nothing.  Padding never changes a result: every consumer (kernel evaluator, log
marginal likelihood, network) must give for a pair inside a padded batch what it
gives for the pair alone.  :meth:`PaddedBatch.validate` states the contract as
checks; the simulator's batch extends this type with its ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Self

import torch
from torch import Tensor

from amorgp.core.errors import DataError
from amorgp.kernel_grammar import PAPER_VOCABULARY, DimWiseStructure, Vocabulary, decode, encode
from amorgp.lazy_kernels.slots import size_buckets, slot_table

__all__ = [
    "PaddedBatch",
    "check_finite_inputs",
    "check_params",
    "check_structures",
    "check_symbol_layout",
]

Index = Tensor | slice | int | Sequence[int]


def _fail(msg: str) -> None:
    raise DataError(msg)


def _check_tensor(t: object, name: str, shape: tuple[int, ...], kind: str) -> None:
    if not isinstance(t, Tensor):
        _fail(f"{name} must be a tensor, got {type(t).__name__}")
    assert isinstance(t, Tensor)
    if tuple(t.shape) != shape:
        _fail(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    ok = {
        "float": t.is_floating_point(),
        "bool": t.dtype == torch.bool,
        "int": not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool,
    }[kind]
    if not ok:
        _fail(f"{name} must be a {kind} tensor, got {t.dtype}")


def check_structures(
    symbols: Tensor, symbol_mask: Tensor, dim_mask: Tensor, vocab: Vocabulary
) -> None:
    """Check padded structures ``symbols``/``symbol_mask (B, D, L)`` against ``dim_mask (B, D)``.

    Part of the one padded-batch validation (:meth:`PaddedBatch.validate`,
    :func:`~amorgp.lazy_kernels.validate_dimwise`, the amortizer's kernel check).  Ids must
    lie in ``0..V`` with present addends non-padding, addends only in present dimensions,
    every pair needs a present dimension and every present dimension an addend.

    Raises:
        DataError: naming the first problem found.
    """
    B, D = (int(s) for s in dim_mask.shape)
    if symbols.ndim != 3 or tuple(symbols.shape[:2]) != (B, D):
        _fail(f"symbols must have shape (B, D, L) = ({B}, {D}, L), got {tuple(symbols.shape)}")
    _check_tensor(symbols, "symbols", tuple(int(s) for s in symbols.shape), "int")
    _check_tensor(symbol_mask, "symbol_mask", tuple(int(s) for s in symbols.shape), "bool")
    _check_tensor(dim_mask, "dim_mask", (B, D), "bool")
    check_symbol_layout(symbols, symbol_mask, dim_mask, vocab)


def check_symbol_layout(
    symbols: Tensor, symbol_mask: Tensor, dim_mask: Tensor, vocab: Vocabulary
) -> None:
    """The values of well-shaped ``symbols``/``symbol_mask (B, D, L)`` and ``dim_mask (B, D)``
    (see :func:`check_structures`, which checks the shapes and dtypes first).

    Raises:
        DataError: naming the first problem found.
    """
    V = len(vocab)
    out_of_range = (symbols < 0) | (symbols > V)
    if bool((out_of_range | (symbol_mask & (symbols == 0))).any()):  # one host sync
        if bool(out_of_range.any()):
            _fail(
                f"unknown symbol id {int(symbols[out_of_range][0])}: symbol ids must lie in "
                f"0..{V} (vocabulary {vocab.name!r}; 0 is padding)"
            )
        _fail("unknown symbol id 0 under symbol_mask: it marks a padding id 0 as present")
    stray = symbol_mask & ~dim_mask[..., None]
    if bool(stray.any()):
        b, d, _ = (int(v) for v in stray.nonzero()[0])
        _fail(
            f"batch element {b} places a symbol in dimension {d}, which its data does not "
            "have (dim_mask is False there; a dimension index exceeds the data)"
        )
    empty = dim_mask & ~symbol_mask.any(-1)
    if bool(empty.any()):
        b, d = (int(v) for v in empty.nonzero()[0])
        _fail(
            f"batch element {b}: present dimension {d} has no addend in symbol_mask "
            "(its kernel factor would be 0)"
        )
    no_dim = ~dim_mask.any(-1)
    if bool(no_dim.any()):
        _fail(
            f"batch element {int(no_dim.nonzero()[0, 0])} has no active dimension "
            "(a dim_mask row is all False; every dataset needs at least one dimension)"
        )


def check_finite_inputs(
    X: Tensor,
    name: str,
    where: str,
    *,
    point_mask: Tensor | None = None,
    dim_mask: Tensor | None = None,
) -> None:
    """``X (B, N)`` or ``(B, N, D)`` is finite at present points (``point_mask (B, N)``)
    of present dimensions (``dim_mask (B, D)``); ``None`` masks mean all present.

    Reduces over the points before masking (``X * 0`` is 0 where finite, NaN elsewhere),
    so the check costs one pass over ``X`` and no gather.

    Raises:
        DataError: ``"<name> contains NaN or infinite values <where>"``.
    """
    z = X * 0.0
    if point_mask is not None:
        z = z.masked_fill(~(point_mask if X.ndim == 2 else point_mask[..., None]), 0.0)
    ok = torch.isfinite(z.sum(1))
    if dim_mask is not None:
        ok = ok | ~dim_mask
    if not bool(ok.all()):
        _fail(f"{name} contains NaN or infinite values {where}")


def check_params(params: Tensor, symbols: Tensor, symbol_mask: Tensor, vocab: Vocabulary) -> None:
    """``params (B, D, L, P >= vocab.max_params)`` is finite and positive in every slot a
    present addend reads (other slots may hold anything).

    Raises:
        DataError: naming the problem.
    """
    used = slot_table(vocab, symbols.device).used_slots(symbols, symbol_mask)
    vals = params[..., : vocab.max_params][used]
    if not bool(torch.isfinite(vals).all()):
        _fail("params contains NaN or infinite values in used slots")
    if not bool((vals > 0).all()):
        _fail("params must be positive in every used slot (got a value <= 0)")


@dataclass(frozen=True)
class PaddedBatch:
    """``B`` (dataset, dimension-wise kernel) pairs, padded (see the module docstring).

    Frozen: methods return new batches.  Construct directly from tensors, or with
    :meth:`from_datasets` from ragged datasets and structures; check with
    :meth:`validate`.
    """

    X: Tensor
    y: Tensor
    point_mask: Tensor
    dim_mask: Tensor
    symbols: Tensor
    symbol_mask: Tensor
    vocab: Vocabulary
    params: Tensor | None = None
    noise: Tensor | None = None

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_datasets(
        cls,
        datasets: Sequence[tuple[Tensor, Tensor]],
        structures: Sequence[DimWiseStructure],
        vocab: Vocabulary = PAPER_VOCABULARY,
        *,
        dtype: torch.dtype = torch.float64,
    ) -> PaddedBatch:
        """Pad ``B`` datasets ``(X (n_b, d_b), y (n_b,))`` with one structure each.

        Padding holds zeros; the structures are encoded with
        :func:`amorgp.kernel_grammar.encode`.

        Raises:
            DataError: no pairs, different numbers of datasets and structures, or a
                structure whose number of dimensions differs from its dataset's.
        """
        if len(datasets) != len(structures) or not datasets:
            _fail(
                f"need one structure per dataset (got {len(datasets)} datasets, "
                f"{len(structures)} structures)"
            )
        B = len(datasets)
        N = max(int(X.shape[0]) for X, _ in datasets)
        D = max(int(X.shape[1]) for X, _ in datasets)
        X = torch.zeros(B, N, D, dtype=dtype)
        y = torch.zeros(B, N, dtype=dtype)
        pm = torch.zeros(B, N, dtype=torch.bool)
        dm = torch.zeros(B, D, dtype=torch.bool)
        for b, ((Xb, yb), s) in enumerate(zip(datasets, structures, strict=True)):
            n, d = Xb.shape
            if s.n_dims != d:
                _fail(f"pair {b}: kernel {s} has {s.n_dims} input dimensions but the data has {d}")
            X[b, :n, :d] = Xb
            y[b, :n] = yb
            pm[b, :n] = True
            dm[b, :d] = True
        sym, smask = encode(list(structures), vocab, max_dims=D)
        return PaddedBatch(X, y, pm, dm, torch.as_tensor(sym), torch.as_tensor(smask), vocab)

    # ------------------------------------------------------------------ sizes
    def __len__(self) -> int:
        return int(self.X.shape[0])

    @property
    def batch_size(self) -> int:
        return len(self)

    @property
    def n_points(self) -> Tensor:
        """``(B,)`` number of present points per pair."""
        return self.point_mask.sum(dim=1)

    @property
    def n_dims(self) -> Tensor:
        """``(B,)`` number of present input dimensions per pair."""
        return self.dim_mask.sum(dim=1)

    @property
    def param_shape(self) -> tuple[int, int, int, int]:
        """``(B, D, L, P)`` of parameters for ``symbols``."""
        B, D, L = self.symbols.shape
        return (int(B), int(D), int(L), self.vocab.max_params)

    @property
    def device(self) -> torch.device:
        return self.X.device

    def param_structure(self) -> tuple[Tensor, Tensor]:
        """``(symbols, symbol_mask)`` that ``params`` belong to (here ``symbols``)."""
        return self.symbols, self.symbol_mask

    def structures(self, vocab: Vocabulary | None = None) -> list[DimWiseStructure]:
        """The ``B`` kernels as kernel-grammar structures (``vocab`` defaults to the batch's)."""
        return decode(
            self.symbols.cpu().numpy(), self.symbol_mask.cpu().numpy(), vocab or self.vocab
        )

    def used_slots(self) -> Tensor:
        """``(B, D, L', P)`` bool: the parameter entries the kernels of ``params`` read."""
        symbols, mask = self.param_structure()
        return slot_table(self.vocab, self.device).used_slots(symbols, mask)

    # ------------------------------------------------------------------ transforms
    def tensors(self) -> dict[str, Tensor]:
        """All tensor fields by name (optional ones only when present)."""
        out: dict[str, Tensor] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                out[f.name] = value
        return out

    def select(self, index: Index) -> Self:
        """The sub-batch ``index`` along the batch axis (an int keeps the axis)."""
        if isinstance(index, int) or (isinstance(index, Sequence) and not isinstance(index, slice)):
            index = torch.arange(len(self))[index].reshape(-1)
        picked: dict[str, Any] = {k: v[index] for k, v in self.tensors().items()}
        return replace(self, **picked)

    def to(
        self,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        non_blocking: bool = False,
    ) -> Self:
        """The batch on ``device`` with floating tensors in ``dtype`` (masks and ids unchanged).

        Moved off the CPU, the ids and masks keep their host copies
        (:func:`~amorgp.lazy_kernels.evaluation.remember_host_copy`): evaluating the
        batch's kernels then never waits for the device."""
        from amorgp.lazy_kernels.evaluation import remember_host_copy

        moved: dict[str, Any] = {}
        for k, v in self.tensors().items():
            target = dtype if dtype is not None and v.is_floating_point() else v.dtype
            moved[k] = v.to(device=device or v.device, dtype=target, non_blocking=non_blocking)
            if not v.is_floating_point() and v.device.type == "cpu":
                remember_host_copy(moved[k], v)
        return replace(self, **moved)

    def pin_memory(self) -> Self:
        """Page-locked copy (called by ``DataLoader(pin_memory=True)``)."""
        pinned: dict[str, Any] = {k: v.pin_memory() for k, v in self.tensors().items()}
        return replace(self, **pinned)

    def repeat(self, r: int) -> Self:
        """Each pair repeated ``r`` times consecutively (pair ``b`` becomes ``b * r + i``)."""
        return self.select(torch.arange(len(self), device=self.device).repeat_interleave(r))

    def with_params(self, params: Tensor | None, noise: Tensor | None) -> PaddedBatch:
        """A plain :class:`PaddedBatch` of the same pairs with the given parameters."""
        return PaddedBatch(
            self.X,
            self.y,
            self.point_mask,
            self.dim_mask,
            self.symbols,
            self.symbol_mask,
            self.vocab,
            params,
            noise,
        )

    def points_first(self, width: int | None = None) -> Self:
        """Present points moved to the front (stable) and the point axis cropped to ``width``.

        ``width`` defaults to the largest number of present points; a smaller one
        drops present points.  Point order within a pair is kept.
        """
        m = int(self.n_points.max()) if width is None else int(width)
        order = torch.argsort((~self.point_mask).to(torch.int8), dim=1, stable=True)[:, :m]
        return self.take_points(order)

    def take_points(self, index: Tensor) -> Self:
        """The points ``index (B, M)`` of every pair (``X``, ``y`` and ``point_mask`` gathered)."""
        X = torch.gather(self.X, 1, index[:, :, None].expand(-1, -1, self.X.shape[2]))
        return replace(
            self,
            X=X,
            y=torch.gather(self.y, 1, index),
            point_mask=torch.gather(self.point_mask, 1, index),
        )

    def subsample_points(self, max_points: int, generator: torch.Generator | None) -> Self:
        """At most ``max_points`` present points per pair, uniformly without replacement.

        The point axis shrinks to ``max_points``; with ``max_points <= 0`` or at least
        the padded size the batch is returned as is.
        """
        N = self.X.shape[1]
        if max_points <= 0 or max_points >= N:
            return self
        scores = torch.rand(self.point_mask.shape, generator=generator, device=self.device)
        scores = torch.where(self.point_mask, scores, torch.full_like(scores, 2.0))
        return self.take_points(torch.argsort(scores, dim=1)[:, :max_points])

    def size_buckets(self, n_buckets: int) -> list[tuple[Tensor, Self]]:
        """The batch split into ``n_buckets`` groups of similar size, each cropped to its own.

        Returns:
            ``[(indices, sub_batch), ...]`` (see :func:`~amorgp.lazy_kernels.slots.size_buckets`);
            each sub-batch has its present points first and its point axis cropped to
            its largest number of points.
        """
        return [
            (idx, self.select(idx).points_first(width))
            for idx, width in size_buckets(self.n_points, n_buckets)
        ]

    # ------------------------------------------------------------------ contract
    def validate(self) -> Self:
        """Check the batch against the padded contract; returns ``self``.

        Checks types, shapes and dtypes; devices; non-empty axes; ids in ``0..V``,
        present addends with a non-padding id and only in present dimensions; at
        least one point and one dimension per pair and an addend in every present
        dimension; finite ``X`` and ``y`` at present entries; and, when given,
        finite positive ``params`` in used slots and finite positive ``noise``.

        Raises:
            DataError: naming the first problem found.
        """
        self._validate_layout()
        self._validate_values()
        if self.params is not None or self.noise is not None:
            self._validate_params()
        return self

    def _validate_layout(self) -> None:
        if not isinstance(self.X, Tensor) or self.X.ndim != 3:
            _fail(f"X must have shape (B, N, D), got {tuple(getattr(self.X, 'shape', ()))}")
        B, N, D = self.X.shape
        _check_tensor(self.X, "X", (B, N, D), "float")
        _check_tensor(self.y, "y", (B, N), "float")
        _check_tensor(self.point_mask, "point_mask", (B, N), "bool")
        _check_tensor(self.dim_mask, "dim_mask", (B, D), "bool")
        if not isinstance(self.symbols, Tensor) or self.symbols.ndim != 3:
            _fail(f"symbols must be a (B, D, L) = ({B}, {D}, L) tensor")
        if tuple(self.symbols.shape[:2]) != (B, D):
            _fail(
                f"symbols must have shape (B, D, L) = ({B}, {D}, L), got "
                f"{tuple(self.symbols.shape)}"
            )
        L = int(self.symbols.shape[2])
        _check_tensor(self.symbols, "symbols", (B, D, L), "int")
        _check_tensor(self.symbol_mask, "symbol_mask", (B, D, L), "bool")
        devices = {t.device for t in self.tensors().values()}
        if len(devices) > 1:
            _fail(f"the batch's tensors lie on different devices: {sorted(map(str, devices))}")
        if B == 0 or N == 0 or D == 0 or L == 0:
            _fail(f"empty batch axes: B={B}, N={N}, D={D}, L={L}")

    def _validate_values(self) -> None:
        check_structures(self.symbols, self.symbol_mask, self.dim_mask, self.vocab)
        if not bool(self.point_mask.any(-1).all()):
            _fail("every dataset needs at least one point (a point_mask row is all False)")
        check_finite_inputs(
            self.X, "X", "at present entries", point_mask=self.point_mask, dim_mask=self.dim_mask
        )
        check_finite_inputs(self.y, "y", "at present points", point_mask=self.point_mask)

    def _validate_params(self) -> None:
        B = len(self)
        if self.params is None or self.noise is None:
            raise DataError("params and noise must be given together")
        symbols, symbol_mask = self.param_structure()
        shape = (*symbols.shape, self.vocab.max_params)
        _check_tensor(self.params, "params", tuple(int(s) for s in shape), "float")
        _check_tensor(self.noise, "noise", (B,), "float")
        check_params(self.params, symbols, symbol_mask, self.vocab)
        if not bool((torch.isfinite(self.noise) & (self.noise > 0)).all()):
            _fail("noise variances must be finite and positive")
