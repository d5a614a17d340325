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
:class:`CheckpointError`   a missing, corrupted or mismatched checkpoint    1
:class:`TrainingError`     a training run that cannot go on (divergence)    1
=========================  ==============================================  =========

``OptionError``, ``DataError`` and ``CheckpointError`` are also ``ValueError`` and
``TrainingError`` a ``RuntimeError``, so code that caught the built-in classes keeps working.
"""

from __future__ import annotations

__all__ = ["AmorgpError", "CheckpointError", "DataError", "OptionError", "TrainingError"]


class AmorgpError(Exception):
    """Base class of the errors amorgp raises on purpose."""


class OptionError(AmorgpError, ValueError):
    """An option or argument value outside its domain (a usage error)."""


class DataError(AmorgpError, ValueError):
    """Data that cannot be used as given: non-finite values, wrong shapes, bad columns."""


class CheckpointError(AmorgpError, ValueError):
    """A checkpoint that is missing, corrupted, unverifiable or does not fit."""


class TrainingError(AmorgpError, RuntimeError):
    """A training run that cannot continue (non-finite loss or weights, failed validation)."""
