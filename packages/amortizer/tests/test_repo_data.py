"""The repository's top-level ``data/`` is a byte-identical copy of the package's bundled
datasets (a real folder, so copying the checkout keeps it)."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src/amorgp/amortizer/data"
REPO = Path(__file__).resolve().parents[3] / "data"


@pytest.mark.skipif(not REPO.is_dir(), reason="not run from a repository checkout")
def test_the_top_level_data_folder_is_a_real_identical_copy() -> None:
    assert not REPO.is_symlink()
    package = sorted(p.name for p in PACKAGE.iterdir() if p.is_file())
    repo = sorted(p.name for p in REPO.iterdir() if p.is_file())
    assert repo == package
    for name in package:
        assert (REPO / name).read_bytes() == (PACKAGE / name).read_bytes(), name
