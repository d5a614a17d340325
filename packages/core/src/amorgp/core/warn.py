"""Library warnings that point at the caller's line, not at a line inside amorgp.

A warning raised deep inside a call (``Amortizer.infer`` -> ``infer_many`` -> ... ->
``warnings.warn``) would name a library file with a fixed ``stacklevel``, which is right
for one path in and wrong for the others.  :func:`warn` walks the stack instead: the
warning names the first frame outside the ``amorgp`` packages (and outside the
decorator and ``functools`` frames between them), i.e. the user's line.
"""

from __future__ import annotations

import sys
import warnings

__all__ = ["caller_stacklevel", "warn"]

_LIBRARY = ("amorgp.", "torch.utils._contextlib", "contextlib", "functools")
"""Module-name prefixes of the frames skipped (amorgp's own and the wrappers around it)."""


def _library(name: str) -> bool:
    return name == "amorgp" or name.startswith(_LIBRARY)


def caller_stacklevel(skip: int = 1) -> int:
    """The ``stacklevel`` that makes :func:`warnings.warn`, called ``skip`` frames above
    this call, name the first frame outside the library (the caller's own line); if the
    whole stack is library code, the frame just above the warning's.

    Args:
        skip: frames between this call and the one calling ``warnings.warn`` (1: that
            function calls this one directly).
    """
    frame = sys._getframe(skip)  # the function that will call warnings.warn
    level = 1
    while frame is not None and _library(frame.f_globals.get("__name__", "")):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level if frame is not None else 2


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` naming the caller's line (see module doc)."""
    warnings.warn(message, category, stacklevel=caller_stacklevel())
