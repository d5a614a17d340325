"""Tests of the positive transform (numpy and, when installed, torch)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amorgp.kernel_grammar import FLOORS, ParamKind, positive, positive_inverse

KINDS = list(ParamKind)


def test_every_kind_has_a_positive_floor() -> None:
    assert set(FLOORS) == set(ParamKind)
    assert all(f > 0 for f in FLOORS.values())


@pytest.mark.parametrize("kind", KINDS)
def test_values_and_floor(kind: ParamKind) -> None:
    raw = np.array([-800.0, -30.0, -1.0, 0.0, 2.0, 40.0, 800.0])
    out = positive(raw, kind)
    floor = FLOORS[kind]
    oracle = floor + np.array([math.log1p(math.exp(r)) if r < 700 else r for r in raw])
    np.testing.assert_allclose(out, oracle, rtol=1e-14, atol=0)
    assert (out >= floor).all()
    assert out[0] == floor
    assert positive(0.0, kind.value) == pytest.approx(floor + math.log(2.0), rel=1e-15)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip(kind: ParamKind) -> None:
    raw = np.linspace(-20, 30, 41)
    np.testing.assert_allclose(
        positive_inverse(positive(raw, kind), kind), raw, rtol=1e-8, atol=1e-8
    )
    values = FLOORS[kind] + np.logspace(-5, 3, 17)
    np.testing.assert_allclose(positive(positive_inverse(values, kind), kind), values, rtol=1e-12)


def test_inverse_rejects_values_at_or_below_floor() -> None:
    with pytest.raises(ValueError, match=r"every lengthscale must exceed its floor 0\.0001"):
        positive_inverse(np.array([0.5, 1e-4]), "lengthscale")
    with pytest.raises(ValueError, match="must exceed its floor"):
        positive_inverse(-1.0, ParamKind.NOISE)
    with pytest.raises(ValueError, match="is not a valid ParamKind"):
        positive(0.0, "temperature")


def test_torch_values_gradients_and_round_trip() -> None:
    torch = pytest.importorskip("torch")
    raw = torch.linspace(-10, 10, 21, dtype=torch.float64, requires_grad=True)
    out = positive(raw, "period")
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(
        out.detach().numpy(), positive(raw.detach().numpy(), "period"), rtol=1e-14
    )
    (grad,) = torch.autograd.grad(out.sum(), raw)
    np.testing.assert_allclose(grad.numpy(), torch.sigmoid(raw).detach().numpy(), rtol=1e-12)
    assert torch.autograd.gradcheck(lambda r: positive(r, "variance"), (raw,))
    v = positive(raw, "noise")
    assert torch.autograd.gradcheck(
        lambda t: positive_inverse(t, "noise"), (v.detach().requires_grad_(),)
    )
    np.testing.assert_allclose(
        positive_inverse(v, "noise").detach().numpy(), raw.detach().numpy(), atol=1e-10
    )
    with pytest.raises(ValueError, match="must exceed its floor"):
        positive_inverse(torch.zeros(3, dtype=torch.float64), "noise")
