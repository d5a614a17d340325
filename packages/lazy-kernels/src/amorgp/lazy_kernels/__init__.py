"""Kernel operators from amorgp grammar expressions (dense torch, torch by row blocks, KeOps), exact GPs at large n."""

from amorgp.lazy_kernels.backends import (
    CHOLESKY_MAX_N,
    EVALUATOR_MATRICES_BLOCKWISE,
    EVALUATOR_MATRICES_NO_GRAPH,
    EVALUATOR_MATRICES_NO_GRAPH_DEVICE,
    EVALUATOR_MATRICES_PER_TERM,
    SolverPlan,
    backend_plan,
    check_backend,
    choose_backend,
    plan_solver,
)
from amorgp.lazy_kernels.batch import (
    PaddedBatch,
    check_finite_inputs,
    check_params,
    check_structures,
    check_symbol_layout,
)
from amorgp.lazy_kernels.block import BlockKernelOperator
from amorgp.lazy_kernels.budgets import CHUNK_BYTES, MEMORY_BUDGET
from amorgp.lazy_kernels.dense_posterior import DensePosterior
from amorgp.lazy_kernels.dimwise import (
    kernel_diag_dimwise,
    kernel_matrix_dimwise,
    validate_dimwise,
)
from amorgp.lazy_kernels.elementary import (
    TORCH_ELEMENTARY,
    GPyTorchModule,
    KeOpsFormula,
    TorchElementary,
    keops_elementary,
    register_keops_formula,
    register_torch_elementary,
    torch_elementary,
)
from amorgp.lazy_kernels.factory import kernel_operator
from amorgp.lazy_kernels.keops import (
    KeOpsKernel,
    KeOpsOperator,
    keops_available,
    keops_formula,
    warm_up,
)
from amorgp.lazy_kernels.operators import (
    DenseKernel,
    DenseKernelOperator,
    KernelOperator,
)
from amorgp.lazy_kernels.posterior import Posterior
from amorgp.lazy_kernels.probe import KeOpsProbe, keops_usable, probe_keops
from amorgp.lazy_kernels.slots import (
    PARAM_KINDS,
    UNUSED_SLOT_VALUE,
    SlotTable,
    size_buckets,
    slot_table,
)
from amorgp.lazy_kernels.solvers import (
    BlockSolver,
    CGSolver,
    CholeskySolver,
    KeOpsSolver,
    LazyCGSolver,
    PivotedCholeskyPreconditioner,
    Solver,
    pcg,
    pivoted_cholesky,
    slq_logdet,
    solver_type,
)
from amorgp.lazy_kernels.structure import DimWiseKernel, ExpressionKernel
from amorgp.lazy_kernels.tables import (
    CompiledSymbol,
    SymbolTables,
    compile_symbol,
    evaluate_symbol,
    symbol_tables,
    unregister_torch_elementary,
)

__all__ = [
    "CHUNK_BYTES",
    "MEMORY_BUDGET",
    "PARAM_KINDS",
    "UNUSED_SLOT_VALUE",
    "PaddedBatch",
    "check_finite_inputs",
    "check_params",
    "check_structures",
    "check_symbol_layout",
    "SlotTable",
    "size_buckets",
    "slot_table",
    "CHOLESKY_MAX_N",
    "KeOpsKernel",
    "KeOpsOperator",
    "KeOpsProbe",
    "BlockKernelOperator",
    "keops_usable",
    "probe_keops",
    "KernelOperator",
    "DenseKernel",
    "DenseKernelOperator",
    "DensePosterior",
    "Posterior",
    "Solver",
    "CholeskySolver",
    "CGSolver",
    "LazyCGSolver",
    "KeOpsSolver",
    "BlockSolver",
    "solver_type",
    "SolverPlan",
    "backend_plan",
    "check_backend",
    "plan_solver",
    "kernel_operator",
    "PivotedCholeskyPreconditioner",
    "EVALUATOR_MATRICES_BLOCKWISE",
    "EVALUATOR_MATRICES_NO_GRAPH",
    "EVALUATOR_MATRICES_NO_GRAPH_DEVICE",
    "EVALUATOR_MATRICES_PER_TERM",
    "choose_backend",
    "keops_available",
    "keops_formula",
    "pcg",
    "pivoted_cholesky",
    "slq_logdet",
    "warm_up",
    "TORCH_ELEMENTARY",
    "CompiledSymbol",
    "DimWiseKernel",
    "ExpressionKernel",
    "SymbolTables",
    "TorchElementary",
    "GPyTorchModule",
    "KeOpsFormula",
    "keops_elementary",
    "register_keops_formula",
    "compile_symbol",
    "evaluate_symbol",
    "kernel_diag_dimwise",
    "kernel_matrix_dimwise",
    "register_torch_elementary",
    "symbol_tables",
    "torch_elementary",
    "unregister_torch_elementary",
    "validate_dimwise",
]
