"""The memory budgets of the GP backends, defined once.

``MEMORY_BUDGET`` (4 GiB) is what the dense backends may use by default: the solver plan
(:func:`~amorgp.lazy_kernels.backends.choose_backend`) keeps a Cholesky while the dense
evaluator's working memory and the factor fit it.  ``CHUNK_BYTES`` (256 MiB) bounds one
piece of work: a row block of the block operator, a chunk of kernel matrices evaluated
together, the memory a posterior's predictions use at once.
"""

from __future__ import annotations

__all__ = ["CHUNK_BYTES", "MEMORY_BUDGET"]

MEMORY_BUDGET: float = 4 * 2**30
"""Default bytes the dense GP backends may use (4 GiB)."""

CHUNK_BYTES: int = 256 * 2**20
"""Bytes of one chunk of work: a block of rows, a batch of kernel matrices (256 MiB)."""
