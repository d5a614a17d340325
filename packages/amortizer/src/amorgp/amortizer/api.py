"""Amortized inference for users: :class:`Amortizer` and its :class:`KernelResult`.

The front end in small modules, re-exported here:

* :mod:`amorgp.amortizer.frontends.inference` — :class:`Amortizer` (loading, validation,
  warnings, the GP backend rule);
* :mod:`amorgp.amortizer.stages.results` — :class:`KernelResult` (extends the fit-result base
  :class:`amorgp.core.fit.KernelFit`) and the conditioned GP it keeps;
* :mod:`amorgp.amortizer.stages.refine` — Type-2 ML refinement (``refine=k`` or ``"auto"``);
* :mod:`amorgp.amortizer.networks.forward` — the network forward for one dataset and many kernels;
* :class:`Hyperparameter` — one row of a result's table (owned by
  :mod:`amorgp.core.fit`).

Steps of :meth:`Amortizer.infer_many`:

1. validate ``X (n, d)``, ``y (n,)`` and normalise them
   (:class:`amorgp.core.data.Normalizer`, ``docs/architecture.md`` §3);
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
   ``backend="auto"`` of :meth:`amorgp.lazy_kernels.Posterior.from_kernel` picks for ``n``
   and ``memory_budget``: dense Cholesky, dense CG, or KeOps CG (O(n) memory; the
   log-determinant is a stochastic Lanczos quadrature estimate).  Each result keeps one
   :class:`~amorgp.lazy_kernels.Posterior` whose factor serves its log marginal
   likelihood and all its predictions.  With the CG backends the log marginal
   likelihood is computed on first access to :attr:`KernelResult.log_marginal_likelihood`
   unless ``evaluate_lml=True`` (predictions do not need it);
5. optionally ``refine``: L-BFGS iterations of Type-2 ML started from the amortized
   hyperparameters (:mod:`amorgp.amortizer.stages.refine`; dense, so only where the dense
   backend applies).

Everything runs under ``torch.inference_mode`` (except the refinement, which
needs gradients) on the chosen device; the network in float32, the GP algebra
in ``dtype`` (float64 by default).
"""

from amorgp.amortizer.frontends.inference import (
    DEFAULT_ENCODER_POINTS,
    DEFAULT_MAX_ADDENDS,
    PRETRAINED_DIR,
    Amortizer,
    Progress,
)
from amorgp.amortizer.stages.results import KernelResult
from amorgp.core.fit import Hyperparameter

__all__ = [
    "DEFAULT_ENCODER_POINTS",
    "DEFAULT_MAX_ADDENDS",
    "PRETRAINED_DIR",
    "Amortizer",
    "Hyperparameter",
    "KernelResult",
    "Progress",
]
