"""Warnings name the caller's line, however deep inside amorgp they are raised.

The oracle is the test's own source: the line number of the call, read from the frame
that makes it (``inspect``), and this file's name.
"""

from __future__ import annotations

import inspect
import sys
import types
import warnings
from collections.abc import Callable, Iterator

import pytest

from amorgp.core.warn import caller_stacklevel, warn

_LIBRARY_SOURCE = """
import functools

from amorgp.core.warn import warn


def inner(message):
    warn(message, RuntimeWarning)


def outer(message):
    return inner(message)


def decorated(f):
    @functools.wraps(f)
    def wrapper(*args):
        return f(*args)
    return wrapper


@decorated
def through_a_decorator(message):
    return outer(message)
"""


@pytest.fixture
def library() -> Iterator[types.ModuleType]:
    """A module named like one of amorgp's, whose functions warn from two frames deep."""
    name = "amorgp.core_test_fake_library"
    module = types.ModuleType(name)
    exec(compile(_LIBRARY_SOURCE, "<fake amorgp module>", "exec"), module.__dict__)
    sys.modules[name] = module
    yield module
    del sys.modules[name]


def _caught(call: Callable[[], object]) -> warnings.WarningMessage:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    (w,) = caught
    return w


@pytest.mark.parametrize("entry", ["inner", "outer", "through_a_decorator"])
def test_warning_names_the_callers_line(library: types.ModuleType, entry: str) -> None:
    f = getattr(library, entry)
    frame = inspect.currentframe()
    assert frame is not None
    w = _caught(lambda: f("deep"))
    line = frame.f_lineno - 1  # the line above, where the call is written
    assert w.filename == __file__
    assert w.lineno == line
    assert w.category is RuntimeWarning
    assert str(w.message) == "deep"


def test_a_direct_call_names_the_line_of_the_call() -> None:
    frame = inspect.currentframe()
    assert frame is not None
    w = _caught(lambda: warn("here"))
    assert (w.filename, w.lineno) == (__file__, frame.f_lineno - 1)
    assert w.category is UserWarning


def test_stacklevel_outside_the_library_is_the_warning_line_itself() -> None:
    """Called from code outside amorgp (this test module), the frame calling
    ``warnings.warn`` is already the caller's: stacklevel 1, its own line."""

    def warns() -> int:
        return caller_stacklevel()

    assert warns() == 1
