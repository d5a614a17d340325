"""The closed-form derivatives of the elementary unit factors (``unit_and_grads`` and the
relative ``unit_and_log_grads`` of :class:`amorgp.lazy_kernels.TorchElementary`) against
central finite differences of the registry's numpy float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amorgp.kernel_grammar import ELEMENTARY
from amorgp.lazy_kernels import TORCH_ELEMENTARY

VALUES = {"lengthscale": 0.7, "period": 0.9, "alpha": 1.6, "offset": 0.4}


def _pairs(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two batches of 1-D points (the second row of one batch equal to its first: ``r = 0``
    on the diagonal), their differences, squares and products, ``(2, n, n)``."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, (2, 12))
    r = x[:, :, None] - x[:, None, :]
    return x, r, r**2, x[:, :, None] * x[:, None, :]


def _finite_differences(name: str, x: np.ndarray, p: dict[str, float], h: float = 1e-6):
    ref = ELEMENTARY[name].unit
    out = {}
    for q in p:
        up, down = dict(p), dict(p)
        up[q] += h
        down[q] -= h
        out[q] = np.stack([(ref(xb, xb, up) - ref(xb, xb, down)) / (2 * h) for xb in x])
    return out


@pytest.mark.parametrize("name", sorted(TORCH_ELEMENTARY))
def test_the_closed_form_derivatives_match_finite_differences(name: str) -> None:
    form = TORCH_ELEMENTARY[name]
    x, r, r2, xx = _pairs(0)
    spec = ELEMENTARY[name]
    p = {q.name: VALUES[q.name] for q in spec.params}
    # per row of a batch: the parameters as (2, 1, 1), row 1 at 1.3 times row 0
    pt = {q: torch.tensor([v, 1.3 * v], dtype=torch.float64)[:, None, None] for q, v in p.items()}
    rt, r2t, xxt = (torch.tensor(a) for a in (r, r2, xx))
    for row in range(2):
        pr = {q: v * (1.3 if row else 1.0) for q, v in p.items()}
        want_unit = spec.unit(x[row], x[row], pr)
        fd = _finite_differences(name, x[row : row + 1], pr)
        if form.unit_and_grads is not None:
            t, grads = form.unit_and_grads(pt, rt, r2t, xxt)
            np.testing.assert_allclose(t[row].numpy(), want_unit, rtol=1e-12, atol=1e-14)
            assert [q for q, _ in grads] == [q.name for q in spec.params]
            for q, dt in grads:
                np.testing.assert_allclose(dt[row].numpy(), fd[q][0], rtol=1e-6, atol=1e-8)
        relative = [(form.unit_and_log_grads, False), (form.exponent_grads, True)]
        if form.points_exponent_grads is not None:  # from the points: the same contract
            xt = torch.tensor(x)
            x1, x2 = xt[:, :, None], xt[:, None, :]
            fn = form.points_exponent_grads
            relative.append((lambda p, r, r2, xx, x1=x1, x2=x2, fn=fn: fn(p, x1, x2, r), True))
        for log_grads, exponent in relative:
            if log_grads is None:
                continue
            t, logs = log_grads(pt, rt, r2t, xxt)
            t = t.exp() if exponent else t
            np.testing.assert_allclose(t[row].numpy(), want_unit, rtol=1e-12, atol=1e-14)
            assert [q for q, _, _ in logs] == [q.name for q in spec.params]
            for q, s, m in logs:
                dt = (s * t * m)[row].numpy()
                np.testing.assert_allclose(dt, fd[q][0], rtol=1e-6, atol=1e-8)


def test_per_from_points_is_exact_on_the_diagonal_and_far_from_it() -> None:
    """PER's matrices by angle addition: the unit factor exactly 1 and the derivatives
    exactly 0 where the points coincide, and equal to the registry's numpy reference to
    rounding over many periods (``|x| / p`` up to about 400), where the angle's rounding
    is largest."""
    form = TORCH_ELEMENTARY["PER"]
    assert form.points_exponent_grads is not None
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-40.0, 40.0, 30), [3.0, 3.0]])
    p = {"lengthscale": 0.8, "period": 0.1}
    xt = torch.tensor(x)
    x1, x2 = xt[:, None], xt[None, :]
    e, logs = form.points_exponent_grads(
        {q: torch.tensor(v, dtype=torch.float64) for q, v in p.items()}, x1, x2, x1 - x2
    )
    t = e.exp()
    np.testing.assert_allclose(t.numpy(), ELEMENTARY["PER"].unit(x, x, p), rtol=0, atol=1e-12)
    assert bool((t.diagonal() == 1.0).all())
    assert float(t[-1, -2]) == 1.0
    for _, _, m in logs:
        assert bool((m.diagonal() == 0.0).all())


def test_per_from_points_packed_pairs_match_the_reference() -> None:
    """With ``pairs=(i, j)`` PER's form returns the pairs' values only (the upper triangle
    of the matrices, packed): the unit factor equals the registry's numpy reference there
    and each relative derivative its central finite difference, row by row of a batch."""
    form = TORCH_ELEMENTARY["PER"]
    assert form.points_exponent_grads is not None
    x, _, _, _ = _pairs(2)
    n = x.shape[1]
    i, j = torch.triu_indices(n, n)
    xt = torch.tensor(x)
    p = {"lengthscale": 0.7, "period": 0.9}
    pt = {q: torch.tensor([v, 1.3 * v], dtype=torch.float64)[:, None] for q, v in p.items()}
    e, logs = form.points_exponent_grads(pt, xt, xt, xt[:, i] - xt[:, j], pairs=(i, j))
    t = e.exp()
    assert t.shape == (2, n * (n + 1) // 2)
    for row in range(2):
        pr = {q: v * (1.3 if row else 1.0) for q, v in p.items()}
        want = ELEMENTARY["PER"].unit(x[row], x[row], pr)[i.numpy(), j.numpy()]
        np.testing.assert_allclose(t[row].numpy(), want, rtol=1e-12, atol=1e-14)
        fd = _finite_differences("PER", x[row : row + 1], pr)
        for q, s, m in logs:
            dt = (s * t * m)[row].numpy()
            np.testing.assert_allclose(dt, fd[q][0][i.numpy(), j.numpy()], rtol=1e-6, atol=1e-8)


def test_exponential_forms_are_registered_for_se_and_per() -> None:
    """The refinement takes one exponential per product of SE and PER factors only if both
    registered their exponents."""
    assert TORCH_ELEMENTARY["SE"].exponent_grads is not None
    assert TORCH_ELEMENTARY["PER"].points_exponent_grads is not None


def test_a_kernel_that_can_be_zero_gives_no_relative_derivatives() -> None:
    """LIN's unit factor ``x x' + c`` vanishes where ``x x' = -c``: its derivatives cannot
    be relative to it."""
    assert TORCH_ELEMENTARY["LIN"].unit_and_log_grads is None
    assert all(
        TORCH_ELEMENTARY[n].unit_and_log_grads is not None for n in ("SE", "PER", "MAT52", "RQ")
    )
