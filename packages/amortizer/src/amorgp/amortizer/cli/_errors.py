"""Typed library errors to exit codes, in one place: :class:`AmorgpCommand`.

Every ``amorgp`` command is an :class:`AmorgpCommand` (the group's
``command_class``), whose :meth:`~AmorgpCommand.invoke` converts the errors the
library raises on purpose by their class, never by their text:

==========================================================  =======================
raised by the library                                       the user sees
==========================================================  =======================
:class:`~amorgp.kernel_grammar.errors.OptionError`           ``Error: ...``, exit 2
(and :class:`~amorgp.kernel_grammar.KernelSyntaxError`)      with the usage line
:class:`~amorgp.kernel_grammar.errors.DataError`,            ``Error: ...``, exit 1
``CheckpointError``, ``TrainingError``,
``MissingExtraError`` (:mod:`amorgp.amortizer.errors`),
any other ``ValueError``
``OSError`` (a file that cannot be read or written)          ``Error: ...``, exit 1
``BrokenPipeError`` on stdout (``amorgp ... | head``)        nothing more, exit 1
==========================================================  =======================

No traceback is printed for these; anything else is a bug and keeps its traceback.
The command runs inside :func:`~amorgp.amortizer.cli._output.results_only_on_stdout`:
its results (written with :func:`~amorgp.amortizer.cli._output.emit`) are the only
thing on stdout.
"""

from __future__ import annotations

from typing import Any

import click

from amorgp.amortizer.cli._output import results_only_on_stdout, silence_stdout
from amorgp.kernel_grammar.errors import AmorgpError, OptionError

__all__ = ["AmorgpCommand", "AmorgpGroup", "as_click_exception"]


def as_click_exception(err: BaseException, ctx: click.Context | None) -> click.ClickException:
    """The click exception shown for a library error ``err`` (exit 2 or 1).

    Raises:
        TypeError: ``err`` is not an error the command line maps (a bug: re-raise it).
    """
    if isinstance(err, click.ClickException):
        return err
    if isinstance(err, OptionError):
        return click.UsageError(str(err), ctx)
    if isinstance(err, ValueError | AmorgpError):  # data, checkpoint, training, missing extra
        return click.ClickException(str(err))
    if isinstance(err, OSError):
        where = f" {err.filename}" if err.filename else ""
        return click.ClickException(f"cannot access{where}: {err.strerror or err}")
    raise TypeError(f"not a mapped error: {type(err).__name__}")


_MAPPED = (OptionError, ValueError, AmorgpError, OSError)


class AmorgpCommand(click.Command):
    """A click command that turns typed library errors into exit codes (see module doc)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with results_only_on_stdout():
                return super().invoke(ctx)
        except BrokenPipeError:  # stdout's reader went away (`| head`): stop quietly
            silence_stdout()
            ctx.exit(1)
        except _MAPPED as err:
            raise as_click_exception(err, ctx) from None


class AmorgpGroup(click.Group):
    """The ``amorgp`` group: its commands are :class:`AmorgpCommand` instances."""

    command_class = AmorgpCommand
