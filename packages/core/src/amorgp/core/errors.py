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

:func:`shorten` cuts input echoed in a message (a kernel string, a file's record) to a
bounded length.  This module imports nothing: the command line's ``--help`` loads it
without torch.
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


def shorten(text: object, limit: int = 80, *, quote: bool = False) -> str:
    """``text`` for an error message (a string as it is, anything else as its ``repr``):
    whole when at most ``limit`` characters, else its first ``limit`` characters and
    ``"... (N characters)"``, so a message never echoes unbounded input.  ``quote``: the
    kept part of a string in quotes, as ``repr`` writes it (``'SE+SE'... (N characters)``).
    An integer too long for ``repr`` (over 4300 digits) is described by its size."""
    if isinstance(text, str):
        shown = text
    else:
        try:
            shown = repr(text)
        except ValueError:  # int's digit limit
            bits = text.bit_length() if isinstance(text, int) else 0
            return f"<an integer of {bits} bits>"
        quote = False
    if len(shown) <= limit:
        return repr(shown) if quote else shown
    head = repr(shown[:limit]) if quote else shown[:limit]
    return f"{head}... ({len(shown)} characters)"
