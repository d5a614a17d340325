"""Typed library errors to exit codes, in one place: :class:`AmorgpCommand`.

Every ``amorgp`` command is an :class:`AmorgpCommand` (the group's
``command_class``), whose :meth:`~AmorgpCommand.invoke` converts the errors the
library raises on purpose by their class, never by their text:

=======================================================  =======================
raised by the library (:mod:`amorgp.core.errors`)        the user sees
=======================================================  =======================
:class:`~amorgp.core.errors.OptionError`                 ``Error: ...``, exit 2
(and :class:`~amorgp.kernel_grammar.KernelSyntaxError`)  with the usage line
:class:`~amorgp.core.errors.DataError`,                  ``Error: ...``, exit 1
``CheckpointError``, ``TrainingError``,
``MissingExtraError``, any other ``ValueError``
``OSError`` (a file that cannot be read or written)      ``Error: ...``, exit 1
``BrokenPipeError`` on stdout (``amorgp ... | head``)    nothing more, exit 1
=======================================================  =======================

No traceback is printed for these; anything else is a bug and keeps its traceback.
The command runs inside :func:`~amorgp.cli._output.results_only_on_stdout`:
its results (written with :func:`~amorgp.cli._output.emit`) are the only
thing on stdout.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import Any, TextIO

import click

from amorgp.cli._output import (
    emit,
    json_document,
    json_text,
    results_only_on_stdout,
    silence_stdout,
)

__all__ = ["AmorgpCommand", "AmorgpGroup", "as_click_exception", "emit_json_error"]


def as_click_exception(err: BaseException, ctx: click.Context | None) -> click.ClickException:
    """The click exception shown for a library error ``err`` (exit 2 or 1).

    Raises:
        TypeError: ``err`` is not an error the command line maps (a bug: re-raise it).
    """
    from amorgp.core.errors import AmorgpError, OptionError

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


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Library warnings as one ``Warning: ...`` line each on stderr, as they happen (each
    text once), never Python's two-line ``file:line: Category: text`` form; deprecation
    notices of other libraries (``torch.jit.script is deprecated``) go to the
    ``amorgp.cli`` log (``-v``), as do matplotlib's and KeOps' log messages below ERROR."""
    for name in ("matplotlib", "PIL", "pykeops", "keopscore"):
        logging.getLogger(name).setLevel(logging.ERROR)
    seen: set[str] = set()

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        lines = str(message).strip().splitlines()
        text = lines[0] if lines else ""
        if not text or text in seen:
            return
        seen.add(text)
        foreign = "amorgp" not in str(filename)
        if foreign and issubclass(
            category, DeprecationWarning | PendingDeprecationWarning | FutureWarning
        ):
            logging.getLogger("amorgp.cli").info("library notice: %s", text)
        else:
            click.echo(f"Warning: {text}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        yield


def _mapped(err: BaseException) -> bool:
    """Whether the command line maps ``err`` (imports the errors module only when a
    library error can have been raised, i.e. when it is loaded already)."""
    if isinstance(err, ValueError | OSError):
        return True
    errors = sys.modules.get("amorgp.core.errors")
    return errors is not None and isinstance(err, errors.AmorgpError)


def set_verbose(verbose: bool) -> None:
    """Log amorgp's INFO messages (size, backend, time estimates) to stderr when
    ``verbose``; otherwise warnings only.  A stderr handler is installed on the root
    logger where none is (``logging.basicConfig``)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("amorgp").setLevel(logging.INFO if verbose else logging.NOTSET)


def _verbose_option(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        set_verbose(True)


class AmorgpCommand(click.Command):
    """A click command that turns typed library errors into exit codes (see module doc),
    with ``-v/--verbose`` accepted after the command name too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not any("--verbose" in getattr(p, "opts", ()) for p in self.params):
            self.params.append(
                click.Option(
                    ["-v", "--verbose"],
                    is_flag=True,
                    expose_value=False,
                    callback=_verbose_option,
                    help="Log progress messages (size, backend, time estimate) to stderr.",
                )
            )

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        options = args[: args.index("--")] if "--" in args else args
        as_json = "--json" in options
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as err:  # a usage error met while parsing
            if as_json:
                emit_json_error(info_name or self.name or "amorgp", err)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with results_only_on_stdout(), one_line_warnings():
                return super().invoke(ctx)
        except BrokenPipeError:  # stdout's reader went away (`| head`): stop quietly
            silence_stdout()
            ctx.exit(1)
        except Exception as err:
            if not (_mapped(err) or isinstance(err, click.ClickException)):
                raise
            shown = as_click_exception(err, ctx)
            if ctx.params.get("as_json"):
                emit_json_error(ctx.info_name or self.name or "amorgp", shown)
            raise shown from None


def emit_json_error(command: str, err: click.ClickException) -> None:
    """With ``--json``, an error is one JSON document on stdout too (the ``Error: ...``
    line still goes to stderr): ``{"schema_version": 1, "command": ..., "error":
    {"message": ..., "exit_code": 1 or 2, "usage": bool}}``."""
    error = {
        "message": err.format_message(),
        "exit_code": err.exit_code,
        "usage": isinstance(err, click.UsageError),
    }
    with contextlib.suppress(OSError):  # a closed or broken stdout: stderr still says it
        emit(json_text(json_document(command, {"error": error})))


class AmorgpGroup(click.Group):
    """The ``amorgp`` group: its commands are :class:`AmorgpCommand` instances."""

    command_class = AmorgpCommand
