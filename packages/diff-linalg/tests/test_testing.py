from typing import Any

import pytest
import torch

from amorgp.diff_linalg.testing import (
    assert_gradients,
    random_full_rank,
    random_lower_triangular,
    random_orthogonal,
    random_spd,
    random_symmetric,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("cond", [1.0, 10.0, 1e4])
def test_random_spd_condition_number(cond):
    A = random_spd(6, cond=cond, batch_shape=(3,), generator=_gen())
    torch.testing.assert_close(A, A.mT)
    ev = torch.linalg.eigvalsh(A)
    assert torch.all(ev > 0)
    torch.testing.assert_close(
        ev[..., -1] / ev[..., 0], torch.full((3,), cond, dtype=torch.float64)
    )


def test_generators_are_deterministic_and_well_formed():
    a = random_spd(4, generator=_gen(5))
    b = random_spd(4, generator=_gen(5))
    assert torch.equal(a, b)
    Q = random_orthogonal(5, batch_shape=(2,), generator=_gen(1))
    torch.testing.assert_close(Q @ Q.mT, torch.eye(5, dtype=torch.float64).expand(2, 5, 5))
    L = random_lower_triangular(5, cond=100.0, generator=_gen(2))
    assert torch.all(L.triu(1) == 0)
    assert torch.all(L.diagonal() > 0)
    M = random_full_rank(3, 6, cond=50.0, generator=_gen(3))
    s = torch.linalg.svdvals(M)
    torch.testing.assert_close(s[0] / s[-1], torch.tensor(50.0, dtype=torch.float64))
    S = random_symmetric(4, gap=0.3, generator=_gen(4))
    ev = torch.linalg.eigvalsh(S)
    torch.testing.assert_close(ev.diff(), torch.full((3,), 0.3, dtype=torch.float64))
    assert random_spd(3, dtype=torch.float32, generator=_gen()).dtype == torch.float32
    with pytest.raises(ValueError, match="cond"):
        random_spd(3, cond=0.5, generator=_gen())


class _WrongSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * x  # should be 2 g x


def test_assert_gradients_detects_wrong_backward_and_accepts_right_one():
    x = torch.randn(3, dtype=torch.float64, generator=_gen()).requires_grad_(True)
    with pytest.raises(AssertionError, match="gradcheck failed"):
        assert_gradients(_WrongSquare.apply, [x], second_order=False)
    assert_gradients(lambda t: t * t, [x])
    with pytest.raises(ValueError, match="float64"):
        assert_gradients(lambda t: t * t, [x.float().detach().requires_grad_(True)])
