"""The re-exported data contract and the random train/test split."""

from __future__ import annotations

import pytest
import torch

import amorgp.baselines as bl
import amorgp.baselines.data as bl_data
import amorgp.lazy_kernels as lk
from amorgp.baselines.data import train_test_split


@pytest.mark.parametrize("module", [bl, bl_data])
@pytest.mark.parametrize("name", ["Normalizer", "as_dataset", "as_inputs"])
def test_data_contract_is_the_lazy_kernels_one(module: object, name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"amorgp.lazy_kernels.{name}"):
        old = getattr(module, name)
    assert old is getattr(lk, name)
    assert name not in module.__all__  # type: ignore[attr-defined]


def test_old_names_still_import() -> None:
    with pytest.warns(DeprecationWarning, match="amorgp.lazy_kernels.as_dataset"):
        from amorgp.baselines import as_dataset
    assert as_dataset is lk.as_dataset
    with pytest.raises(AttributeError):
        bl.no_such_name  # noqa: B018


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
