"""The GPyTorch modules equal to amorgp's base symbols (see :mod:`amorgp.lazy_kernels.gpytorch_modules`)."""

from amorgp.lazy_kernels.gpytorch_modules import gpytorch_kernel_matrix, gpytorch_symbol_kernel

__all__ = ["gpytorch_kernel_matrix", "gpytorch_symbol_kernel"]
