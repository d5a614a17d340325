"""The estimator's constraints in the user's units and its names, against oracles: the same
data with the inputs scaled by 5 (and the bounds with them) gives the same normalised fit;
a bound in the data's units binds in those units; every printed name is accepted back.
Also the estimator's refusals (sample_weight, multi-output y, alpha) and the binary-target
warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from amorgp.amortizer.frontends.estimator import AmortizedGPRegressor
from amorgp.amortizer.stages.constraints import NoiseFloorWarning
from amorgp.core.errors import DataError, OptionError

LS = "d0.0.SE.lengthscale"


def _data(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 1.0, n))
    return x, np.sin(6.0 * x) + 0.1 * rng.standard_normal(n)


def test_scaling_the_inputs_and_the_bounds_gives_the_same_normalised_fit() -> None:
    """Oracle: ``x`` and ``5 x`` normalise to the same data, so with bounds scaled by 5
    the normalised solution is the same and the lengthscale in user units is 5 times."""
    x, y = _data()
    fits = [
        AmortizedGPRegressor("SE", refine=5, bounds={LS: (0.3 * s, 0.5 * s)}).fit(
            (s * x)[:, None], y
        )
        for s in (1.0, 5.0)
    ]
    a, b = (f.result_ for f in fits)
    np.testing.assert_allclose(a.params.numpy(), b.params.numpy(), rtol=1e-7)
    assert a.noise == pytest.approx(b.noise, rel=1e-7)
    # the normalised bounds are the user's divided by the column's range
    for f, s in zip(fits, (1.0, 5.0), strict=True):
        r = float(np.ptp(s * x))
        lo, hi = f.result_.bounds[(0, 0, "lengthscale")]
        assert (lo, hi) == pytest.approx((0.3 * s / r, 0.5 * s / r), rel=1e-15)
    la = fits[0].hyperparameters_original_[LS]
    lb = fits[1].hyperparameters_original_[LS]
    assert lb == pytest.approx(5.0 * la, rel=1e-7)
    assert fits[1].kernel_.get_params()[LS] == pytest.approx(lb, rel=1e-12)


def test_a_bound_in_user_units_binds_in_user_units() -> None:
    """On x spanning 5 the free lengthscale is about 1.5 (user units); bounds
    (2.5, 4) must hold it at 2.5 in user units (0.5 normalised, not 2.5)."""
    x, y = _data()
    X = 5.0 * x[:, None]
    free = AmortizedGPRegressor("SE", refine=5).fit(X, y).hyperparameters_original_[LS]
    assert free is not None
    assert free < 2.5
    reg = AmortizedGPRegressor("SE", refine="auto", bounds={LS: (2.5, 4.0)}).fit(X, y)
    ls = reg.hyperparameters_original_[LS]
    assert ls is not None
    assert 2.5 * (1 - 1e-12) <= ls <= 4.0 * (1 + 1e-12)
    # the optimum lies below: the bound binds (to the resolution of the stopping rule,
    # 0.01 nats of predicted gain, which the logit of a bound approaches slowly)
    assert ls == pytest.approx(2.5, rel=2e-3)
    # kernel_ shows the user's bounds (lengthscales are in the data's units there)
    i = reg.kernel_.hyperparameter_names.index(LS)
    np.testing.assert_allclose(np.exp(reg.kernel_.bounds[i]), [2.5, 4.0], rtol=1e-12)


def test_variances_and_noise_are_in_units_of_y_squared() -> None:
    """Fixed values in ``y^2`` units come back exactly in ``y^2`` units; normalised they
    are divided by the population variance of ``y`` (numpy's, the oracle)."""
    x, y = _data()
    y = 10.0 * y + 3.0
    fixed = {"noise": 0.8, "d0.0.SE.variance": 60.0}
    reg = AmortizedGPRegressor("SE", refine=3, fixed=fixed).fit(x[:, None], y)
    var = float(np.var(y))
    assert reg.result_.noise == pytest.approx(0.8 / var, rel=1e-12)
    assert reg.hyperparameters_["d0.0.SE.variance"] == pytest.approx(60.0 / var, rel=1e-12)
    assert reg.hyperparameters_original_["noise"] == pytest.approx(0.8, rel=1e-12)
    assert reg.hyperparameters_original_["d0.0.SE.variance"] == pytest.approx(60.0, rel=1e-12)
    hp = {h.name: h for h in reg.kernel_.hyperparameters}
    assert hp["noise_level"].fixed
    assert hp["d0.0.SE.variance"].fixed
    assert not hp[LS].fixed
    assert tuple(hp["noise_level"].bounds) == pytest.approx((0.8 / var, 0.8 / var), rel=1e-12)


def test_every_printed_name_is_accepted_back() -> None:
    """Fixing every hyperparameter at its printed value (names of ``hyperparameters_``,
    values of ``hyperparameters_original_``) reproduces the fit; each other printed form
    (``kernel_``'s ``noise_level``, the CLI's ``DIM.ADDEND.NAME``, the result's
    ``dDIM.ADDEND.NAME``, tuples) names the same hyperparameter."""
    x, y = _data()
    X = 3.0 * x[:, None] + 1.0
    first = AmortizedGPRegressor("SE + PER").fit(X, y)
    printed = first.hyperparameters_original_
    assert set(printed) == set(first.hyperparameters_)
    again = AmortizedGPRegressor("SE + PER", fixed=dict(printed)).fit(X, y)
    for name, value in printed.items():
        assert again.hyperparameters_original_[name] == pytest.approx(value, rel=1e-12)
    # kernel_'s names of a one-column kernel are the same, plus noise_level
    assert set(first.kernel_.hyperparameter_names) == (set(printed) - {"noise"}) | {"noise_level"}
    ls = printed["d0.1.PER.period"]
    assert ls is not None
    for key in ("d0.1.PER.period", "0.1.period", "d0.1.period", (0, 1, "period")):
        reg = AmortizedGPRegressor("SE + PER", fixed={key: ls}).fit(X, y)
        assert reg.result_.fixed == {(0, 1, "period"): pytest.approx(ls / 3.0 / np.ptp(x))}
    noise = printed["noise"]
    assert noise is not None
    reg = AmortizedGPRegressor("SE + PER", fixed={"noise_level": noise}).fit(X, y)
    assert reg.hyperparameters_original_["noise"] == pytest.approx(noise, rel=1e-12)


@pytest.mark.parametrize(
    ("kernel", "d", "options", "match"),
    [
        ("SE", 1, {"fixed": {"d0.0.PER.lengthscale": 1.0}}, "addend 0 of column 0 is SE"),
        ("SE", 1, {"fixed": {"d0.0.SE.period": 1.0}}, "not a hyperparameter of"),
        ("SE", 1, {"fixed": {"lengthscale": 1.0}}, "is not a hyperparameter name"),
        ("SE + PER", 2, {"fixed": {"d1.1.PER.weight": 1.0}}, "weight of kernel_"),
        ("LIN", 1, {"fixed": {"d0.0.LIN.variance": 1.0}}, "no exact value in the data's units"),
        ("SE", 1, {"fixed": {LS: -1.0}}, "positive and finite"),
        ("SE", 1, {"bounds": {LS: (2.0, 1.0)}}, "low < high"),
        (
            "SE",
            1,
            {"fixed": {LS: 1e-5}},
            "below the floor 0.000497.* in the data's units \\(0.0001 normalised",
        ),
        ("SE", 1, {"fixed": {"noise": 1e-9}}, "below the floor .* lower noise_floor"),
    ],
)
def test_bad_constraints_are_one_line_option_errors(
    kernel: str, d: int, options: dict[str, object], match: str
) -> None:
    x, y = _data()
    X = 5.0 * np.column_stack([x] * d) + np.arange(d)
    with pytest.raises(OptionError, match=match) as err:
        AmortizedGPRegressor(kernel, **options).fit(X, y)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_sample_weight_multi_output_and_alpha_are_refused_clearly() -> None:
    x, y = _data()
    X = x[:, None]
    with pytest.raises(OptionError, match="sample_weight is not supported") as err:
        AmortizedGPRegressor("SE").fit(X, y, sample_weight=np.linspace(1.0, 2.0, len(y)))
    assert "\n" not in str(err.value)
    with pytest.raises(OptionError, match="zero or negative"):
        AmortizedGPRegressor("SE").fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(DataError, match=r"y has 2 columns: multi-output.*MultiOutputRegressor"):
        AmortizedGPRegressor("SE").fit(X, np.column_stack([y, y]))
    with pytest.raises(OptionError, match="alpha as an array \\(per-point noise\\) is not"):
        AmortizedGPRegressor("SE", alpha=np.full(len(y), 0.1)).fit(X, y)
    # a number is a floor of the fitted noise (normalised units), as noise_floor
    with pytest.warns(NoiseFloorWarning):  # the likelihood wants less noise
        floored = AmortizedGPRegressor("SE", alpha=0.5).fit(X, y)
    assert floored.result_.noise >= 0.5
    assert floored.result_.noise_floor == 0.5
    # a constant weight changes nothing
    plain = AmortizedGPRegressor("SE").fit(X, y)
    weighted = AmortizedGPRegressor("SE").fit(X, y, sample_weight=np.full(len(y), 3.0))
    np.testing.assert_array_equal(plain.predict(X), weighted.predict(X))


def test_a_binary_target_warns_that_it_is_treated_as_continuous() -> None:
    x, _ = _data()
    y = (x > 0.5).astype(float)
    with pytest.warns(UserWarning, match="only 2 distinct values.*treats it as continuous"):
        AmortizedGPRegressor("SE").fit(x[:, None], y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        AmortizedGPRegressor("SE").fit(x[:, None], _data()[1])  # continuous: no warning


@pytest.mark.parametrize("refine", [0, 5, "auto", None])
def test_the_wide_input_warning_recommends_refine_auto_only_when_not_set(
    refine: int | str | None,
) -> None:
    from amorgp.amortizer.networks.forward import warn_outside_training
    from amorgp.kernel_grammar import DimWiseStructure

    s = DimWiseStructure.coerce("SE", 10)
    with pytest.warns(UserWarning, match="10 input dimensions") as record:
        warn_outside_training(10, [s], 8, 6, refine)
    text = str(record[0].message)
    if refine in ("auto", None):
        assert "consider refine='auto'" not in text
        assert "takes it to a Type-2 ML optimum" in text
    else:
        assert "consider refine='auto'" in text
