"""The typed errors of amorgp, shared by every package (the lowest package owns them).

Every error amorgp raises on purpose derives from :class:`AmorgpError`, so callers
(and the command line, which maps classes to exit codes without reading messages)
can tell "the input is wrong" from "the run failed" from a bug:

=========================  ==============================================  =========
class                      raised for                                       CLI exit
=========================  ==============================================  =========
:class:`OptionError`       an option or argument value out of its domain    2 (usage)
:class:`DataError`         data that cannot be used (NaN, shapes, columns)  1
:class:`KernelSyntaxError` kernel text that does not parse (parser module)  2 (usage)
=========================  ==============================================  =========

``OptionError`` and ``DataError`` are also ``ValueError``, so code that caught the built-in
class keeps working.  ``CheckpointError`` and ``TrainingError`` are raised only by the
amortizer and live in :mod:`amorgp.amortizer.errors`; the names here are deprecated
aliases of their base classes (catching them still catches the amortizer's errors).
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["AmorgpError", "DataError", "OptionError"]


class AmorgpError(Exception):
    """Base class of the errors amorgp raises on purpose."""


class OptionError(AmorgpError, ValueError):
    """An option or argument value outside its domain (a usage error)."""


class DataError(AmorgpError, ValueError):
    """Data that cannot be used as given: non-finite values, wrong shapes, bad columns."""


class _CheckpointError(AmorgpError, ValueError):
    """Base of :class:`amorgp.amortizer.errors.CheckpointError` (deprecated name here)."""


class _TrainingError(AmorgpError, RuntimeError):
    """Base of :class:`amorgp.amortizer.errors.TrainingError` (deprecated name here)."""


_MOVED = {"CheckpointError": _CheckpointError, "TrainingError": _TrainingError}


def moved_error(name: str) -> Any:
    """The deprecated alias ``name`` (``CheckpointError``, ``TrainingError``), with a
    :class:`DeprecationWarning` naming where the error lives now."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"amorgp.kernel_grammar.{name} moved to amorgp.amortizer.errors.{name}; "
        "import it from there",
        DeprecationWarning,
        stacklevel=3,
    )
    return _MOVED[name]


def __getattr__(name: str) -> Any:
    return moved_error(name)
