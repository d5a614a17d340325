"""The typed errors of amorgp, one module for every package (the lowest package owns them).

Every error amorgp raises on purpose derives from :class:`AmorgpError`, so callers
(and the command line, which maps classes to exit codes without reading messages)
can tell "the input is wrong" from "the run failed" from a bug:

===========================  ==============================================  =========
class                        raised for                                       CLI exit
===========================  ==============================================  =========
:class:`OptionError`         an option or argument value out of its domain    2 (usage)
``KernelSyntaxError``        kernel text that does not parse (an              2 (usage)
                             ``OptionError``, :mod:`amorgp.kernel_grammar`)
:class:`DataError`           data that cannot be used (NaN, shapes, columns)  1
:class:`CheckpointError`     a missing, corrupted or mismatched checkpoint    1
:class:`TrainingError`       a training run that cannot go on (divergence)    1
:class:`MissingExtraError`   a command whose optional dependencies are absent 1
===========================  ==============================================  =========

``OptionError``, ``DataError`` and ``CheckpointError`` are also ``ValueError`` (so
``except ValueError`` catches them), ``TrainingError`` a ``RuntimeError`` and
``MissingExtraError`` a ``ModuleNotFoundError``.  ``KernelSyntaxError`` stays with the
parser, which adds the caret pointing at the offending character.

This module imports nothing: the command line's ``--help`` loads it without torch.
"""

from __future__ import annotations

__all__ = [
    "AmorgpError",
    "CheckpointError",
    "DataError",
    "MissingExtraError",
    "OptionError",
    "TrainingError",
]


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


class MissingExtraError(AmorgpError, ModuleNotFoundError):
    """An optional part (training, the paper's experiments) whose dependencies are not
    installed; the message says what to install."""
