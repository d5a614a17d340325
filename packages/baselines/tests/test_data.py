"""The random train/test split."""

from __future__ import annotations

import pytest
import torch

from amorgp.baselines.data import train_test_split


def test_train_test_split_is_a_deterministic_partition() -> None:
    a_tr, a_te = train_test_split(50, 30, 10, torch.Generator().manual_seed(3))
    b_tr, b_te = train_test_split(50, 30, 10, torch.Generator().manual_seed(3))
    assert torch.equal(a_tr, b_tr)
    assert torch.equal(a_te, b_te)
    assert len(a_tr) == 30
    assert len(a_te) == 10
    assert not set(a_tr.tolist()) & set(a_te.tolist())
    _, full = train_test_split(50, 30, None, torch.Generator().manual_seed(3))
    assert sorted(torch.cat([a_tr, full]).tolist()) == list(range(50))
    with pytest.raises(ValueError, match="n_train"):
        train_test_split(5, 5, None, torch.Generator())
