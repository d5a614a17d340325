"""amorgp.core: the contracts every amorgp package shares.

* :mod:`amorgp.core.errors`: every error amorgp raises on purpose, with its CLI exit code;
* :mod:`amorgp.core.warn`: library warnings that name the caller's line;
* :mod:`amorgp.core.units`: how a hyperparameter maps back to original units (its
  :class:`~amorgp.core.units.Unit`);
* :mod:`amorgp.core.data`: dataset validation (``as_dataset``, ``as_inputs``,
  ``as_real``) and the normalisation (``Normalizer``), on torch tensors;
* :mod:`amorgp.core.fit`: the fit protocol, the fit-result base ``KernelFit`` (with its
  ``Hyperparameter`` rows) and the inference protocol ``HyperparameterInference``;
* :mod:`amorgp.core.memory`: ``tune_malloc``, glibc keeps freed memory for reuse
  (opt-in, process-wide);
* :mod:`amorgp.core.testing`: helpers for the packages' tests (public names, a README's code blocks).

Importing this package (or ``errors``, ``warn``, ``units``) does not load torch or numpy;
only :mod:`amorgp.core.data` and :mod:`amorgp.core.fit` do, so the names here are the
torch-free ones and the data contract and the fit protocol are imported from their modules.
"""

from amorgp.core.errors import (
    AmorgpError,
    CheckpointError,
    DataError,
    MissingExtraError,
    OptionError,
    TrainingError,
)
from amorgp.core.units import Unit
from amorgp.core.warn import caller_stacklevel, warn

__all__ = [
    "AmorgpError",
    "CheckpointError",
    "DataError",
    "MissingExtraError",
    "OptionError",
    "TrainingError",
    "Unit",
    "caller_stacklevel",
    "warn",
]
