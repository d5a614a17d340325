"""Which network a name loads: the wheel's bundled models, the repository's ``models/``
folder (source checkout only) and a local folder of the same name (issue 56 item 10)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from amorgp.amortizer import Amortizer
from amorgp.amortizer.networks.bundled import (
    PRETRAINED_ROOT,
    REPOSITORY_MODELS,
    pretrained_names,
    repository_model_names,
    resolve_checkpoint,
)
from amorgp.core.errors import CheckpointError

ROOT = Path(__file__).resolve().parents[3]
AIRLINE = PRETRAINED_ROOT.parent / "data" / "airline.csv"


def test_the_wheel_bundles_the_default_and_the_ahgp_network_only() -> None:
    assert pretrained_names() == ["ahgp-se-ard-d4-v1", "default"]
    size = sum(p.stat().st_size for p in PRETRAINED_ROOT.rglob("*") if p.is_file())
    assert size <= 6 * 2**20


def test_repository_models_load_by_path_and_by_name_with_a_note() -> None:
    assert REPOSITORY_MODELS == ROOT / "models"
    assert "small-d8-c640k" in repository_model_names()
    X = np.linspace(0, 1, 30)[:, None]
    y = np.sin(6 * X[:, 0])
    # starts=1: the networks' own predictions (a null start may win for both)
    by_path = Amortizer.from_pretrained(ROOT / "models" / "small-d8-c640k").infer(
        X, y, "SE", starts=1
    )
    with pytest.warns(UserWarning, match=r"models/ folder .*small-d8-c640k"):
        by_name = Amortizer.from_pretrained("small-d8-c640k").infer(X, y, "SE", starts=1)
    default = Amortizer.from_pretrained().infer(X, y, "SE", starts=1)
    np.testing.assert_array_equal(by_name.params.numpy(), by_path.params.numpy())
    assert not np.array_equal(by_name.params.numpy(), default.params.numpy())


def test_a_local_folder_named_like_a_bundled_model_is_loaded_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(PRETRAINED_ROOT / "ahgp-se-ard-d4-v1", tmp_path / "default")
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match=r"loaded the folder .*default, not the bundled model"):
        where = resolve_checkpoint("default")
    assert where.resolve() == (tmp_path / "default").resolve()
    assert resolve_checkpoint(None) == PRETRAINED_ROOT / "default"


def test_a_one_part_path_resolves_like_the_name() -> None:
    assert resolve_checkpoint(Path("ahgp-se-ard-d4-v1")) == PRETRAINED_ROOT / "ahgp-se-ard-d4-v1"
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        resolve_checkpoint(Path("no-such-model"))
