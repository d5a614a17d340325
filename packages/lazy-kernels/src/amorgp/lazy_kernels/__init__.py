"""Kernel operators from amorgp grammar expressions (dense torch and KeOps) and exact GPs at large n."""

__all__: list[str] = []
