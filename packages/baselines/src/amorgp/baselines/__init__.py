"""GP hyperparameter baselines for amorgp: Type-2 ML, MAP, SVGP, ADVI."""

__all__: list[str] = []
