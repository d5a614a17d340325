"""The prior p(dataset, kernel structure) of amorgp: fast batched GP dataset simulation."""

__all__: list[str] = []
