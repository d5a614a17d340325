"""Real-data cells shared by Fig. 3, Table 1 and Fig. 11: one method on one split.

A cell ``("real", dataset, split, kernel, method, config)`` holds the test ``rmse``
and ``nll`` (standardised units, ``None`` where the fit failed) and ``time_s``, the
method's wall-clock time per kernel (fit and prediction of all missing kernels of
the split in one call, divided by their number).  Methods:

* ``amortized``, ``amortized+refineK``: the network (``Amortizer.infer_many``), with
  ``K`` L-BFGS iterations of Type-2 ML from its prediction; ``amortized+calibrate``
  (``+refineK``): the exact Type-2 ML scale and noise first; ``amortized@NAME`` runs
  the bundled network ``NAME`` instead of the configured one (Table 1);
* every ``amorgp.baselines`` method (``Baseline(method, **options).fit_many``);
* ``sklearn``: scikit-learn's GPR on the kernels it expresses (SE-ARD; any kernel of
  one input), one fit per kernel (:mod:`amorgp_experiments.paper.sklearn_gp`);
* ``ahgp@NAME``: a fixed-kernel SE-ARD network (AHGP), SE-ARD only.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from amorgp.kernel_grammar import paper_evaluation_set
from amorgp_experiments.paper.cache import CellKey, config_hash
from amorgp_experiments.paper.config import amortized_settings
from amorgp_experiments.paper.context import RunContext
from amorgp_experiments.paper.protocol import (
    TEST_CAP,
    Split,
    amortized_predictions,
    make_split,
    scores,
)

__all__ = ["SE_ARD", "kernel_templates", "method_config", "real_cells"]

SE_ARD = "SE"
"""The evaluation template whose broadcast is the SE-ARD kernel."""

Prediction = tuple[np.ndarray, np.ndarray] | None


def kernel_templates(ids: Sequence[int]) -> list[str]:
    """The evaluation kernels at positions ``ids`` of ``paper_evaluation_set(0)``, as text."""
    templates = paper_evaluation_set(0)
    return [str(templates[i]) for i in ids]


def _model_of(ctx: RunContext, method: str) -> str | None:
    if method.startswith(("amortized", "ahgp")):
        return method.split("@", 1)[1] if "@" in method else ctx.config.model
    return None


def method_config(ctx: RunContext, method: str) -> str | None:
    """The config hash of a real-data method's cells (``None``: its model is unavailable)."""
    settings: dict[str, Any] = {"method": method, "test_cap": TEST_CAP, "protocol": 1}
    if method == "sklearn":
        settings["sklearn"] = 2  # min-max scaled inputs, every expressible kernel
    if "+refine" in method:
        # config version: 2 = each line search has its own evaluation budget; 3 = log space
        settings["refine"] = 3
    if "+calibrate" in method:
        settings["calibrate"] = 1
    model = _model_of(ctx, method)
    if model is not None:
        ident = ctx.identity(model)
        if ident is None:
            return None
        settings["model"] = ident
    else:
        settings["options"] = ctx.config.options(method)
    return config_hash(settings)


def _structures(ctx: RunContext, kernels: Sequence[str], d: int) -> list[Any]:
    from amorgp.kernel_grammar import DimWiseStructure

    return [DimWiseStructure.coerce(k, d) for k in kernels]


def _baseline(
    ctx: RunContext, method: str, sp: Split, kernels: Sequence[str]
) -> tuple[list[Prediction], float]:
    from amorgp.baselines import Baseline

    structs = _structures(ctx, kernels, sp.X_train.shape[1])
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = Baseline(method, **ctx.config.options(method)).fit_many(  # type: ignore[arg-type]
            sp.X_train, sp.y_train, structs
        )
        preds: list[Prediction] = []
        for f in fits:
            try:
                m, v = f.predict(sp.X_test)
                preds.append((m.numpy(), v.numpy()))
            except ValueError:
                preds.append(None)
    return preds, time.perf_counter() - t0


def _ahgp(ctx: RunContext, model: str, sp: Split) -> tuple[list[Prediction], float]:
    """SE-ARD predictions of a fixed-kernel network (one forward pass, exact GP)."""
    from amorgp.amortizer.networks.forward import encode_structures, network_parameters
    from amorgp.baselines import exact_predictive
    from amorgp.core.data import Normalizer
    from amorgp.kernel_grammar import DimWiseStructure
    from amorgp.lazy_kernels import PaddedBatch

    net = ctx.network(model)
    t0 = time.perf_counter()
    norm = Normalizer.fit(sp.X_train, sp.y_train)
    Xn, yn = norm.transform_x(sp.X_train), norm.transform_y(sp.y_train)
    d = Xn.shape[1]
    s = DimWiseStructure((("SE",),) * d)
    sym, smask = encode_structures([s], net.vocabulary, d, torch.device("cpu"))
    params, noise = network_parameters(net, Xn, yn, sym, smask)
    batch = PaddedBatch.from_datasets([(Xn, yn)], [s], net.vocabulary)
    p = params.double()[:, :d, : batch.symbols.shape[-1]]
    with torch.no_grad():
        mean, var = exact_predictive(batch, p, noise.double(), norm.transform_x(sp.X_test)[None])
    m, v = norm.unnormalize_predictive(mean[0], var[0])
    return [(m.numpy(), v.numpy())], time.perf_counter() - t0


def _predict(
    ctx: RunContext, method: str, sp: Split, kernels: Sequence[str]
) -> tuple[list[Prediction], float]:
    """Predictions of ``method`` for ``kernels`` on one split and the call's seconds."""
    base = method.split("@", 1)[0]
    if base.startswith("amortized"):
        calibrate, refine = amortized_settings(base)
        amz = ctx.amortizer(_model_of(ctx, method))
        structs = _structures(ctx, kernels, sp.X_train.shape[1])
        preds, dt = amortized_predictions(
            amz, sp.X_train, sp.y_train, sp.X_test, structs, refine, calibrate=calibrate
        )
        return list(preds), dt
    if base == "sklearn":
        from amorgp_experiments.paper.sklearn_gp import sklearn_gpr

        fits = [sklearn_gpr(sp.X_train, sp.y_train, sp.X_test, k) for k in kernels]
        return [(m, v) for m, v, _ in fits], sum(dt for _, _, dt in fits)
    if base == "ahgp":
        return _ahgp(ctx, str(_model_of(ctx, method)), sp)
    return _baseline(ctx, method, sp, kernels)


def _cell_values(preds: list[Prediction], dt: float, sp: Split) -> list[dict[str, Any]]:
    out = []
    for p in preds:
        rmse: float | None = None
        nll: float | None = None
        if p is not None and np.all(np.isfinite(p[0])) and np.all(p[1] > 0):
            rmse, nll = scores(p[0], p[1], sp.y_test, sp.mu, sp.sd)
        out.append({"rmse": rmse, "nll": nll, "time_s": dt / len(preds)})
    return out


def supports(method: str, kernel: str, d: int) -> bool:
    """Whether ``method`` can fit ``kernel`` on ``d`` inputs (AHGP: SE-ARD only;
    scikit-learn: see :func:`~amorgp_experiments.paper.sklearn_gp.expressible`)."""
    if method.startswith("ahgp"):
        return kernel == SE_ARD
    if method == "sklearn":
        from amorgp_experiments.paper.sklearn_gp import expressible

        return expressible(kernel, d)
    return True


def real_cells(
    ctx: RunContext,
    methods: Sequence[str],
    kernels: Sequence[str],
    experiment: str,
    splits: Sequence[int] | None = None,
) -> list[dict[str, Any]]:
    """Every real-data cell of ``methods`` x ``kernels`` x datasets x splits.

    Missing cells are computed (all missing kernels of a split and method in one call)
    and cached; methods whose model is not available are skipped with a note for
    ``experiment``.  ``splits`` restricts the splits (default: all of the config's).

    Returns:
        One record per cell: ``dataset, split, kernel, method, rmse, nll, time_s``.
    """
    cfg = ctx.config
    hashes = {m: method_config(ctx, m) for m in methods}
    for m, h in hashes.items():
        if h is None:
            ctx.note(experiment, f"method {m}: its model is not available; skipped")
    runnable = [m for m in methods if hashes[m] is not None]
    names = ctx.dataset_names()
    records: list[dict[str, Any]] = []
    split_ids = list(range(cfg.splits) if splits is None else splits)
    with ctx.bar(len(names) * len(split_ids) * len(runnable), f"{experiment}: real data") as bar:
        for path, name in zip(cfg.datasets, names, strict=True):
            data = ctx.dataset(path)
            for split in split_ids:
                lazy = functools.cache(functools.partial(make_split, data, split))
                for m in runnable:
                    ks = [k for k in kernels if supports(m, k, data.X.shape[1])]
                    keys = [CellKey("real", name, split, k, m, str(hashes[m])) for k in ks]

                    def compute(
                        missing: list[int], m: str = m, ks: list[str] = ks, sp: Any = lazy
                    ) -> Any:
                        preds, dt = _predict(ctx, m, sp(), [ks[i] for i in missing])
                        return _cell_values(preds, dt, sp())

                    values = ctx.cache.get_many(keys, compute)
                    for k, v in zip(ks, values, strict=True):
                        if v is not None:
                            records.append(
                                {"dataset": name, "split": split, "kernel": k, "method": m, **v}
                            )
                    bar.update(1)
    return records
