"""What the commands write: clean stdout, strict JSON, validated and atomic output files.

* :func:`results_only_on_stdout` (around every command) and :func:`emit`: stdout is
  for results only; anything a library prints (KeOps' ``[KeOps] Warning ...``,
  compiler output of C extensions) goes to stderr, at the Python and at the
  file-descriptor level.
* :func:`json_text` / :func:`non_finite`: JSON without ``NaN``/``Infinity`` tokens.
* :func:`check_output_path`, :func:`check_plot_path`: validate a path before the
  work starts (writable folder, a supported plot format).
* :func:`atomic_write`: write to a private temporary file in the target folder and
  rename, so an interrupted write or two concurrent runs never leave a torn file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import click

from amorgp.amortizer.strictjson import json_text

__all__ = [
    "atomic_write",
    "check_output_path",
    "check_plot_path",
    "SCHEMA_VERSION",
    "emit",
    "is_stderr",
    "is_stdout",
    "json_document",
    "json_option",
    "plot_option",
    "json_text",
    "non_finite",
    "results_only_on_stdout",
    "silence_stdout",
]


_RESULTS: list[TextIO | None] = []
"""The real stdout of each command running (a stack; ``None``: stdout is closed), where
:func:`emit` writes."""


@contextlib.contextmanager
def results_only_on_stdout() -> Iterator[None]:
    """Run a command with stdout reserved for its results (see :func:`emit`).

    Inside the block ``sys.stdout`` is stderr, so anything a library prints (KeOps'
    ``[KeOps] Warning ...``) lands on stderr; when ``sys.stdout`` is file descriptor 1,
    descriptor 1 is pointed at stderr too (C-level writes, compilers run by KeOps) and
    restored afterwards (also when writing the results failed).  :func:`emit` writes to
    the real stdout.
    """
    real: TextIO | None = sys.stdout
    saved = _stdout_fd()
    if saved is not None:
        sys.stdout.flush()  # (saved is set only when sys.stdout is descriptor 1)
        saved = os.dup(1)
        real = io.TextIOWrapper(
            io.FileIO(saved, "w", closefd=False),
            encoding=sys.stdout.encoding,
            errors=sys.stdout.errors,
            line_buffering=True,
        )
        os.dup2(2, 1)
    _RESULTS.append(real)
    try:
        with contextlib.redirect_stdout(LibraryOutput(sys.stderr)):
            yield
    finally:
        _RESULTS.pop()
        try:
            if real is not None:
                real.flush()
        finally:
            if saved is not None:
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.flush()
                os.dup2(saved, 1)
                os.close(saved)


_CHATTER = re.compile(r"^\s*\[(py)?KeOps\]", re.IGNORECASE)
"""Lines libraries print that are no message to the user (KeOps' start-up and compile
notes): logged (``-v`` shows them) instead of printed."""


class LibraryOutput(io.TextIOBase):
    """What libraries print while a command runs: passed on to ``target`` (stderr) line
    by line, except KeOps' chatter (:data:`_CHATTER`), which goes to the ``amorgp.cli``
    log at INFO level (shown with ``-v``)."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        if _CHATTER.match(line):
            logging.getLogger("amorgp.cli").info("%s", line.strip())
        else:
            self.target.write(line + "\n")

    def flush(self) -> None:
        if self._pending:
            self._line(self._pending)
            self._pending = ""
        self.target.flush()

    def fileno(self) -> int:
        return self.target.fileno()


def emit(text: str = "") -> None:
    """Print a result line on the real stdout (outside a command: on ``sys.stdout``;
    nothing when stdout is closed)."""
    if not _RESULTS:
        click.echo(text)
    elif _RESULTS[-1] is not None:
        click.echo(text, file=_RESULTS[-1])


def silence_stdout() -> None:
    """Point file descriptor 1 at the null device (after its reader went away), so that
    nothing more is written to a broken pipe, not even at interpreter exit."""
    if _stdout_fd() == 1:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)


def _stdout_fd() -> int | None:
    """1 when ``sys.stdout`` writes to file descriptor 1 (not e.g. click's CliRunner)."""
    try:
        return 1 if sys.stdout.fileno() == 1 else None
    except (AttributeError, OSError, ValueError):
        return None


def non_finite(obj: Any, path: str = "") -> list[str]:
    """The paths (``results[0].noise``) of every NaN or infinite float inside ``obj``."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [f"{path} = {obj}"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in non_finite(v, f"{path}.{k}" if path else k)]
    if isinstance(obj, list | tuple):
        return [p for i, v in enumerate(obj) for p in non_finite(v, f"{path}[{i}]")]
    return []


SCHEMA_VERSION = 1
"""Version of the ``--json`` documents of every command: each is one object with
``schema_version``, ``command`` and the command's fields; a field is never renamed or
removed without raising this number."""


def json_document(command: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` document of ``command``: ``{"schema_version", "command", ...fields}``."""
    return {"schema_version": SCHEMA_VERSION, "command": command, **fields}


def json_option(help_text: str = "") -> Callable[[Any], Any]:
    """The ``--json`` flag (parameter ``as_json``) every command offers."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help=help_text
        or "Print one JSON document (schema_version 1) on stdout; messages go to stderr.",
    )


def plot_option(help_text: str, **kwargs: Any) -> Callable[[Any], Any]:
    """The ``--plot`` option (parameter ``plot_path``, a file path) of the commands that
    draw a figure; ``kwargs`` go to :func:`click.option` (a default)."""
    return click.option(
        "--plot",
        "plot_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help=help_text,
        **kwargs,
    )


def is_stdout(path: Path | str) -> bool:
    """Whether an output path means standard output: ``-``, ``/dev/stdout`` or
    ``/dev/fd/1`` (``/proc/self/fd/1``), by name, never by where descriptor 1 points."""
    text = str(path)
    return text == "-" or text in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def is_stderr(path: Path | str) -> bool:
    """Whether an output path names standard error: ``/dev/stderr``, ``/dev/fd/2`` or
    ``/proc/self/fd/2`` (written to the stream, never replaced by a file)."""
    return str(path) in ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2")


def check_output_path(path: Path, option: str) -> None:
    """Check before any work that a file can be written at ``path``.

    An existing device or pipe (``/dev/stdout``) is written in place if writable.

    Raises:
        click.BadParameter: ``path`` is a folder, its folder does not exist or is not
            a folder, or a file cannot be created there (read-only, no permission).
    """
    if is_stdout(path) or is_stderr(path):
        return
    if path.is_dir():
        raise click.BadParameter(f"{path} is a folder; give a file name", param_hint=option)
    target = path.resolve()
    if target.exists() and not target.is_file():
        if not os.access(target, os.W_OK):
            raise click.BadParameter(f"{path} is not writable", param_hint=option)
        return
    parent = target.parent
    link = f"{path} is a symbolic link to {target}, and " if path.is_symlink() else ""
    folder = target.parent if link else path.parent
    if not parent.exists():
        raise click.BadParameter(f"{link}the folder {folder} does not exist", param_hint=option)
    if not parent.is_dir():
        raise click.BadParameter(f"{link}{folder} is not a folder", param_hint=option)
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".check"):
            pass
    except OSError as err:
        raise click.BadParameter(
            f"cannot write in {path.parent}: {err.strerror or err}", param_hint=option
        ) from None


def plot_formats() -> dict[str, str]:
    """File extensions matplotlib writes (``{"png": "Portable Network Graphics", ...}``)."""
    from amorgp.cli.plotting import require_matplotlib

    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    return dict(FigureCanvasBase.get_supported_filetypes())


def check_plot_path(path: Path, option: str = "--plot") -> None:
    """Check before any work that a figure can be written at ``path``.

    Raises:
        click.BadParameter: no extension or one matplotlib cannot write, or see
            :func:`check_output_path`.
        ValueError: matplotlib is not installed.
    """
    formats = plot_formats()
    ext = path.suffix.lower().lstrip(".")
    if ext not in formats:
        what = f"format {ext!r} is not supported" if ext else "the file name has no extension"
        raise click.BadParameter(
            f"{path}: {what}; use one of {', '.join(sorted(formats))}", param_hint=option
        )
    check_output_path(path, option)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a fresh temporary file beside ``path``, then rename it to
    ``path`` (``os.replace``): readers and concurrent writers see the old file or a
    whole new one, never a partial one; the temporary file is removed on failure.

    A symbolic link is followed (its target is replaced, not the link); an existing
    device or pipe (``/dev/stdout``) is written in place, never replaced.
    """
    target = path.resolve()
    try:
        if target.exists() and not target.is_file():
            write(target)
            return
        _replace_atomically(target, write)
    except OSError as err:
        raise click.ClickException(f"cannot write {path}: {err.strerror or err}") from None


def _replace_atomically(target: Path, write: Callable[[Path], None]) -> None:
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=target.suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
