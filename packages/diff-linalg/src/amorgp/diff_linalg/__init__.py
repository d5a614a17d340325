"""Differentiable linear algebra (Seeger et al.) and GP building blocks for amorgp."""

__all__: list[str] = []
