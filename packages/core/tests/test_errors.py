"""The error classes: their bases, written out here as the module's table documents them."""

from __future__ import annotations

import pytest

import amorgp.core.errors as errors
from amorgp.core.errors import (
    AmorgpError,
    CheckpointError,
    DataError,
    MissingExtraError,
    OptionError,
    TrainingError,
)

# class -> the built-in exception an ``except`` clause written for it may use
BUILTIN = {
    OptionError: ValueError,
    DataError: ValueError,
    CheckpointError: ValueError,
    TrainingError: RuntimeError,
    MissingExtraError: ModuleNotFoundError,
}


@pytest.mark.parametrize("cls", list(BUILTIN), ids=lambda c: c.__name__)
def test_every_error_is_an_amorgp_error_and_its_builtin(cls: type[Exception]) -> None:
    assert issubclass(cls, AmorgpError)
    assert issubclass(cls, BUILTIN[cls])
    with pytest.raises(BUILTIN[cls], match="the message"):
        raise cls("the message")


def test_usage_and_run_errors_are_apart() -> None:
    """The command line exits 2 for usage errors (OptionError) and 1 for the others, by
    class: none of the others may be an OptionError."""
    for cls in (DataError, CheckpointError, TrainingError, MissingExtraError):
        assert not issubclass(cls, OptionError)
    assert not issubclass(OptionError, DataError)
    assert issubclass(MissingExtraError, ImportError)  # ``except ImportError`` still works


def test_the_module_lists_every_class_in_its_table() -> None:
    assert sorted(errors.__all__) == sorted(
        [
            "AmorgpError",
            "OptionError",
            "DataError",
            "CheckpointError",
            "TrainingError",
            "MissingExtraError",
        ]
    )
    doc = errors.__doc__ or ""
    for name in errors.__all__:
        if name != "AmorgpError":
            assert f":class:`{name}`" in doc, name
