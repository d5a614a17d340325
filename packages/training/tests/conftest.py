"""Shared fixtures: a small random-weight checkpoint (the training tests that load or grow
a network), and a training loss that fails at a given step (interrupted runs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amorgp.amortizer import testing
from amorgp.training import trainer as trainer_module


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`amorgp.amortizer.testing.tiny_checkpoint`, one a session."""
    return testing.tiny_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture
def raise_in_training_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[int, type[BaseException]], Callable[[], None]]:
    """``raise_at(call, error)``: the trainer's ``training_loss`` raises ``error`` on its
    ``call``-th call (counting from 1) and computes the loss otherwise; returns a function
    that puts the real ``training_loss`` back."""

    def raise_at(call: int, error: type[BaseException]) -> Callable[[], None]:
        real = trainer_module.training_loss
        calls = 0

        def failing(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == call:
                raise error
            return real(*args, **kwargs)

        monkeypatch.setattr(trainer_module, "training_loss", failing)
        return lambda: monkeypatch.setattr(trainer_module, "training_loss", real)

    return raise_at
