"""The errors the amortizer raises on purpose (besides the shared ones of
:mod:`amorgp.kernel_grammar.errors`: ``OptionError``, ``DataError``).

=========================  ==============================================  =========
class                      raised for                                       CLI exit
=========================  ==============================================  =========
:class:`CheckpointError`   a missing, corrupted or mismatched checkpoint    1
:class:`TrainingError`     a training run that cannot go on (divergence)    1
:class:`MissingExtraError` a command whose optional dependencies are absent 1
=========================  ==============================================  =========

``CheckpointError`` is also a ``ValueError``, ``TrainingError`` a ``RuntimeError`` and
``MissingExtraError`` a ``ModuleNotFoundError``.
"""

from __future__ import annotations

from amorgp.kernel_grammar.errors import AmorgpError

__all__ = ["CheckpointError", "MissingExtraError", "TrainingError"]


class MissingExtraError(AmorgpError, ModuleNotFoundError):
    """An optional part (training, the paper's experiments) whose dependencies are not
    installed; the message says what to install."""


class CheckpointError(AmorgpError, ValueError):
    """A checkpoint that is missing, corrupted, unverifiable or does not fit."""


class TrainingError(AmorgpError, RuntimeError):
    """A training run that cannot continue (non-finite loss or weights, failed validation)."""
