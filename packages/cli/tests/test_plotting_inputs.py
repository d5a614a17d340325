"""``amorgp.cli.plotting`` takes an estimator, a fit result or a callable (issue 64, item 8),
and long calls below n = 2,000 still get a time estimate (item 6)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from amorgp.cli.plotting import as_predictor, plot_predictive_1d, plot_slices, require_matplotlib


def _data() -> tuple[np.ndarray, np.ndarray]:
    X = np.linspace(0.0, 1.0, 20)[:, None]
    return X, np.sin(6.0 * X[:, 0])


@pytest.fixture(scope="module")
def fitted(tiny_checkpoint: Path) -> tuple[object, object]:
    from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor

    X, y = _data()
    reg = AmortizedGPRegressor(checkpoint=str(tiny_checkpoint), kernel="SE").fit(X, y)
    return reg, reg.result_


def _mean_line(ax: object) -> np.ndarray:
    return np.asarray(ax.lines[0].get_ydata())  # type: ignore[attr-defined]


def test_the_estimator_the_result_and_a_callable_plot_the_same(fitted: tuple) -> None:
    reg, result = fitted
    plt = require_matplotlib()
    X, y = _data()
    grid = np.linspace(0.0, 1.0, 50)[:, None]
    want_mean, want_std = reg.predict(grid, return_std=True)  # the oracle
    _, var = result.predict(grid)
    np.testing.assert_allclose(np.sqrt(var), want_std, rtol=1e-12)
    means = []
    for predictor in (reg, result, lambda Q: reg.predict(Q, return_std=True)):
        got_mean, got_std = as_predictor(predictor)(grid)
        np.testing.assert_allclose(got_mean, want_mean, rtol=1e-12)
        np.testing.assert_allclose(got_std, want_std, rtol=1e-12)
        fig, ax = plt.subplots()
        plot_predictive_1d(ax, X, y, predictor, n_grid=50)
        means.append(_mean_line(ax))
        plt.close(fig)
    np.testing.assert_allclose(means[0], want_mean, rtol=1e-12)
    np.testing.assert_allclose(means[1], means[0], rtol=1e-12)
    np.testing.assert_allclose(means[2], means[0], rtol=1e-12)
    fig, axes = plt.subplots(1, 1, squeeze=False)
    plot_slices(list(axes[0]), X, y, result, n_grid=10)
    plt.close(fig)


def test_something_else_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match=r"predictor must be a fitted estimator .* got str"):
        as_predictor("model")


def test_long_calls_below_two_thousand_points_get_an_estimate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import amorgp.cli._estimate as common

    units = {"cholesky": 2e-3, "eigh": 2e-2, "matmul": 4e-3}  # a slow-ish 2-core CPU
    monkeypatch.setattr(common, "_unit_times", lambda: units)
    common.announce(1000, 1, [2] * 24, "cholesky", 5, True)  # ensemble --refine 5
    note = capsys.readouterr().err
    want = sum(common.estimate_seconds(1000, [2] * 24, "cholesky", True, 5, units).values())
    assert want > common.NOTE_SECONDS
    assert note.startswith("Note: n = 1000 points, 24 kernel(s), backend cholesky: roughly ")
    common.announce(1000, 1, [2], "cholesky", 0, True)  # one kernel: quick, nothing said
    assert capsys.readouterr().err == ""
    assert common.cubic_work(1000, [2] * 24, 5) == pytest.approx(24 * (1000 / 512) ** 3 * 32)
