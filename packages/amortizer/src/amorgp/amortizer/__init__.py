"""The amortized GP hyperparameter inference network of amorgp, its training and CLI."""

__all__: list[str] = []
