"""Reusable checks and fixtures (conformance suites) for lazy-kernels and its dependants.

* :mod:`.operators` — the kernel-operator suite, run over every
  :class:`~amorgp.lazy_kernels.KernelOperator` implementation (:data:`OPERATOR_FACTORIES`:
  dense evaluator, ``ExpressionKernel``, KeOps): values, matvecs, diagonal, columns,
  symmetry/PSD, other inputs and gradients against numpy float64 oracles.
* :mod:`.evaluator` — the batched evaluator's suite (padded batches: batch vs loop,
  padding invariance, ...), run on every registered base symbol.
* :mod:`.gpytorch_bridge` — the equivalent GPyTorch modules (an external oracle).
* :mod:`.data` — the bad-data suite: every fitting entry point rejects the same bad
  datasets with :class:`~amorgp.core.errors.DataError` and a one-line message.
* :mod:`.devices` — the devices of device-parametrised tests.
* :mod:`.posteriors` — two ways to the same posterior predict alike.
"""

from amorgp.lazy_kernels.testing.data import (
    BAD_DATASETS,
    BadDataset,
    bad_datasets,
    check_rejects_bad_data,
)
from amorgp.lazy_kernels.testing.devices import device_params
from amorgp.lazy_kernels.testing.evaluator import (
    CONFORMANCE_CHECKS,
    DimWiseBatch,
    Evaluator,
    all_base_symbols,
    check_batch_equals_loop,
    check_diag,
    check_gpytorch,
    check_gradients,
    check_padding_invariance,
    check_psd,
    check_reference,
    check_symmetry,
    random_dimwise_batch,
    random_symbol_params,
    reference_diag_dimwise,
    reference_kernel_dimwise,
    run_conformance,
)
from amorgp.lazy_kernels.testing.gpytorch_bridge import (
    gpytorch_kernel_matrix,
    gpytorch_symbol_kernel,
)
from amorgp.lazy_kernels.testing.operators import (
    OPERATOR_CHECKS,
    OPERATOR_FACTORIES,
    OperatorFactory,
    block_operator,
    check_operator_columns,
    check_operator_diag,
    check_operator_gradients,
    check_operator_on,
    check_operator_protocol,
    check_operator_reference,
    check_operator_symmetry_psd,
    dense_operator,
    expression_operator,
    keops_operator,
    reference_structure,
    run_operator_conformance,
    symbol_case,
)
from amorgp.lazy_kernels.testing.posteriors import check_same_predictions

__all__ = [
    "BAD_DATASETS",
    "BadDataset",
    "CONFORMANCE_CHECKS",
    "DimWiseBatch",
    "Evaluator",
    "OPERATOR_CHECKS",
    "OPERATOR_FACTORIES",
    "OperatorFactory",
    "all_base_symbols",
    "bad_datasets",
    "check_batch_equals_loop",
    "check_diag",
    "check_gpytorch",
    "check_gradients",
    "check_operator_columns",
    "check_operator_diag",
    "check_operator_gradients",
    "check_operator_on",
    "check_operator_protocol",
    "check_operator_reference",
    "check_operator_symmetry_psd",
    "check_padding_invariance",
    "check_psd",
    "check_rejects_bad_data",
    "check_same_predictions",
    "check_reference",
    "check_symmetry",
    "dense_operator",
    "device_params",
    "expression_operator",
    "gpytorch_kernel_matrix",
    "gpytorch_symbol_kernel",
    "block_operator",
    "keops_operator",
    "random_dimwise_batch",
    "random_symbol_params",
    "reference_diag_dimwise",
    "reference_kernel_dimwise",
    "reference_structure",
    "run_conformance",
    "run_operator_conformance",
    "symbol_case",
]
