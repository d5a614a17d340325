"""The parts of amorgp installed apart from the amortizer, and the check that one is there.

=========================  =================================  ============================
part                       import package                     install
=========================  =================================  ============================
the ``amorgp`` command     :mod:`amorgp.cli`                  ``pip install amorgp-cli``
training the network       :mod:`amorgp.training`             ``pip install amorgp-training``
GPyTorch/BoTorch bridge    :mod:`amorgp.gpytorch`             ``pip install amorgp-gpytorch``
the paper's experiments    ``amorgp_experiments``             the repository's ``experiments/``
=========================  =================================  ============================

:func:`require_experiments` raises :class:`~amorgp.core.errors.MissingExtraError`
(one line: what is missing and how to get it) where the experiments are not importable.
"""

from __future__ import annotations

__all__ = ["EXPERIMENTS_HINT", "INSTALL_HINTS", "require_experiments"]

EXPERIMENTS_HINT = (
    "amorgp_experiments lives in the repository's experiments/ folder, outside the "
    "amorgp-amortizer wheel; from a source checkout, run `pip install -e experiments` "
    "(or `nox -s paper`)"
)

#: top-level import package of a part installed apart -> how to install it.
INSTALL_HINTS: dict[str, str] = {
    "amorgp.cli": "pip install amorgp-cli",
    "amorgp.training": "pip install amorgp-training",
    "amorgp.gpytorch": "pip install amorgp-gpytorch",
    "amorgp_experiments": EXPERIMENTS_HINT,
}


def require_experiments(what: str) -> None:
    """Raise :class:`~amorgp.core.errors.MissingExtraError` (naming ``what`` and how to
    get them) unless the repository's experiments package is importable."""
    try:
        import amorgp_experiments  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name != "amorgp_experiments":
            raise
        from amorgp.core.errors import MissingExtraError

        raise MissingExtraError(
            f"{what} needs the experiments package: {EXPERIMENTS_HINT}", name=err.name
        ) from None
