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

``OptionError`` and ``DataError`` are also ``ValueError``, so ``except ValueError`` catches
them.  The errors only the amortizer raises (``CheckpointError``, ``TrainingError``,
``MissingExtraError``) live in :mod:`amorgp.amortizer.errors`.
"""

from __future__ import annotations

__all__ = ["AmorgpError", "DataError", "OptionError"]


class AmorgpError(Exception):
    """Base class of the errors amorgp raises on purpose."""


class OptionError(AmorgpError, ValueError):
    """An option or argument value outside its domain (a usage error)."""


class DataError(AmorgpError, ValueError):
    """Data that cannot be used as given: non-finite values, wrong shapes, bad columns."""
