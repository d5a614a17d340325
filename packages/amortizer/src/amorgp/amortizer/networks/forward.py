"""Prediction helpers of the :class:`~amorgp.amortizer.frontends.inference.Amortizer`: the network
forward for one dataset and many kernels, the encoder's subset of a large dataset, and the
warnings for inputs outside the network's training range.

On the CPU the forward of one dataset is a few hundred small tensor operations, so its
cost is per-operation overhead in the Python interpreter (most of an amortized
Bayesian-optimisation fit at a few dozen points; ``docs/benchmarks/botorch.md``).  Where every symbol slot is present (e.g.
``SE`` in every dimension, BoTorch's default model) the structured network's forward is
therefore traced on its second use per network (TorchScript's tracer, which shares the
network's parameters) and replayed, which halves that cost; the first call runs eagerly,
because tracing costs about ten forwards, which a one-shot process (a CLI call) would
never earn back.  The traced graph contains no shape
constants (tested against the eager forward for other ``n``, ``d``, ``K`` and ``L``).
Set ``AMORGP_JIT=0`` to always run eagerly; where tracing is unavailable or fails, the
eager forward runs.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from amorgp.amortizer.networks.model import AmortizedGP
from amorgp.amortizer.networks.network import AmortizationNetwork, DatasetEncoding
from amorgp.core.warn import warn
from amorgp.kernel_grammar import DimWiseStructure, Vocabulary, encode
from amorgp.lazy_kernels import PaddedBatch

__all__ = [
    "encode_structures",
    "encoder_subset",
    "network_parameters",
    "traced_forward",
    "warn_binary_target",
    "warn_outside_training",
]


def warn_outside_training(
    d: int,
    structures: Sequence[DimWiseStructure],
    max_dims: int | None,
    max_addends: int,
    refine: int | str | None = None,
) -> None:
    """Warn (``UserWarning``) about inputs the network never saw in training: more input
    dimensions than ``max_dims`` or more addends in one dimension than ``max_addends``.
    The advice depends on ``refine`` (the call's, as checked; ``None``: the default,
    which refines as ``"auto"`` where Fisher scoring applies): ``refine='auto'`` is
    recommended only where it is not already set."""
    if refine in ("auto", None):
        hint = (
            "its start may be poor; the refinement (refine='auto', the default's where it "
            "applies) takes it to a Type-2 ML optimum (more starts= may find a better one)"
        )
    else:
        hint = "its predictions may be poor (consider refine='auto')"
    if max_dims is not None and d > max_dims:
        warn(
            f"the data have {d} input dimensions but the network was trained on at most "
            f"{max_dims}; {hint}",
            UserWarning,
        )
    most = max(len(a) for s in structures for a in s.dims)
    if most > max_addends:
        warn(
            f"a kernel has {most} addends in one dimension but the network was trained "
            f"with at most {max_addends} per dimension; {hint}",
            UserWarning,
        )


def warn_binary_target(y: Tensor) -> None:
    """Warn (``UserWarning``) when the targets ``y (n,)`` take two distinct values only:
    GP regression treats them as continuous."""
    others = y[y != y[0]]
    if others.numel() and bool((others == others[0]).all()):
        warn(
            "y takes only 2 distinct values (a binary target?): GP regression treats it as "
            "continuous and predicts real values, not classes or probabilities; for class "
            "labels use a classifier (e.g. sklearn's GaussianProcessClassifier)",
            UserWarning,
        )


def encode_structures(
    structures: Sequence[DimWiseStructure], vocabulary: Vocabulary, d: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """``symbols (K, d, L)`` and ``symbol_mask (K, d, L)`` of ``K`` structures on ``device``
    (a :class:`~amorgp.amortizer.networks.structures.KernelBatch`'s own encoding where it fits)."""
    from amorgp.amortizer.networks.structures import KernelBatch

    ready = structures.on(vocabulary, device) if isinstance(structures, KernelBatch) else None
    if ready is not None and ready[0].shape[1] == d:
        return ready
    sym, smask = encode(list(structures), vocabulary, max_dims=d)
    return torch.as_tensor(sym, device=device), torch.as_tensor(smask, device=device)


def encoder_subset(n: int, encoder_points: int, seed: int) -> Tensor | None:
    """Indices of the points the dataset encoder reads, or ``None`` for all of them.

    For ``n > encoder_points``: the first ``encoder_points`` entries of a random
    permutation drawn from ``torch.Generator().manual_seed(seed)``, sorted (so the same
    data and seed give the same subset).
    """
    if n <= encoder_points:
        return None
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g)[:encoder_points].sort().values


def network_parameters(
    model: AmortizationNetwork, Xe: Tensor, ye: Tensor, symbols: Tensor, symbol_mask: Tensor
) -> tuple[Tensor, Tensor]:
    """The network's ``params (K, d, L, P)`` and ``noise (K,)`` for one dataset, ``K`` kernels.

    The dataset encoder runs once on ``Xe (m, d)``, ``ye (m,)`` (normalised; the points
    it reads); the kernel encoder-decoder, the symbol heads and the noise head run on all
    ``K`` structures in one padded batch with the shared dataset embedding (paper
    Fig. 4c).  Runs under ``torch.inference_mode`` in the network's dtype; on the CPU,
    with every symbol slot present, through :func:`traced_forward`.
    """
    K, d = symbols.shape[0], Xe.shape[1]
    device = symbols.device
    net_dtype = next(model.parameters()).dtype
    with torch.inference_mode():
        X1, y1 = Xe[None].to(net_dtype), ye[None].to(net_dtype)
        fast = None
        if device.type == "cpu" and bool(symbol_mask.all()):
            fast = traced_forward(model, X1, y1, symbols, symbol_mask)
        if fast is not None:
            params, noise = fast(X1, y1, symbols, symbol_mask)
            return params, noise
        one = PaddedBatch(
            X1,
            y1,
            torch.ones(1, Xe.shape[0], dtype=torch.bool, device=device),
            torch.ones(1, d, dtype=torch.bool, device=device),
            symbols[:1],
            symbol_mask[:1],
            model.vocabulary,
        )
        encoding = model.encode_dataset(one).expand(K)  # the dataset encoder runs once
        pred = model.decode(encoding, symbols, symbol_mask)
        params, noise = pred.params, pred.noise
    return params, noise


class _OneDataset(nn.Module):
    """The structured network's forward for one unpadded dataset and ``K`` kernels whose
    symbol slots are all present: ``(X (1, n, d), y (1, n), symbols (K, d, L),
    symbol_mask (K, d, L)) -> (params (K, d, L, P), noise (K,))`` (what is traced)."""

    def __init__(self, net: AmortizedGP) -> None:
        super().__init__()
        self.net = net

    def forward(
        self, X: Tensor, y: Tensor, symbols: Tensor, symbol_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        net = self.net
        assert isinstance(net, AmortizedGP)
        h = net.dataset_encoder._forward_dense(X, y)  # (1, d, H)
        dims = torch.ones_like(symbols[:1, :, 0], dtype=torch.bool)
        encoding = DatasetEncoding(h, dims).expand(symbols.shape[0])
        pred = net.decode(encoding, symbols, symbol_mask)
        return pred.params, pred.noise


Forward = Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]
_UNTRACED = "untraced"
"""Marks a network and dtype seen once: the next call traces."""
_TRACES: weakref.WeakKeyDictionary[nn.Module, tuple[torch.dtype, Forward | str | None]] = (
    weakref.WeakKeyDictionary()
)


def traced_forward(
    model: AmortizationNetwork, X: Tensor, y: Tensor, symbols: Tensor, symbol_mask: Tensor
) -> Forward | None:
    """The traced single-dataset forward of ``model`` (see the module docstring), traced on
    the second use per network and dtype with these example inputs, then cached; ``None``
    on the first use and where it does not apply (not the structured network, token features,
    ``AMORGP_JIT=0``, tracing failed): then the eager forward runs."""
    if os.environ.get("AMORGP_JIT", "1") == "0" or type(model) is not AmortizedGP:
        return None
    if model.config.period_tokens or model.config.relevance_tokens:  # data features: eager
        return None
    dtype = X.dtype
    cached = _TRACES.get(model)
    if cached is None or cached[0] != dtype:
        _TRACES[model] = (dtype, _UNTRACED)
        return None
    if not isinstance(cached[1], str):
        return cached[1]
    fn: Forward | None
    try:
        with warnings.catch_warnings():  # the tracer's deprecation and shape notes
            warnings.simplefilter("ignore")
            with torch.inference_mode(False), torch.no_grad():
                fn = torch.jit.trace(
                    _OneDataset(model),
                    (X.clone(), y.clone(), symbols, symbol_mask),
                    check_trace=False,
                )
    except Exception:
        fn = None
    _TRACES[model] = (dtype, fn)
    return fn
