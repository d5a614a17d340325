"""Benchmark: Bayesian optimisation with BoTorch, default model fitting vs amortized fitting.

One BO loop per (problem, seed, fitting method), side by side in one run:

* model: BoTorch's default ``SingleTaskGP(train_X, train_Y)`` on unit-cube inputs (RBF
  kernel with ARD, LogNormal lengthscale and noise priors, ``Standardize`` outcome
  transform), refitted from scratch at every iteration;
* fitting, the named peers: BoTorch's ``fit_gpytorch_mll(mll)``, and ``lean-default``:
  the project's closed-form objective refined from BoTorch's default start
  (``LeanObjective(mll).minimize(50)``, no network); against ``AmortizedFit()`` of
  ``amorgp.gpytorch`` (one forward pass of the bundled network, the network's start and
  the model's default start scored in one batched evaluation, the better one refined by
  at most 50 L-BFGS-B iterations of the same objective evaluated in closed form,
  stopping at convergence, BoTorch's fit as the fallback), ``amortized-network``
  (``AmortizedFit(model_start=False)``: the network's start alone, as before the two
  starts), ``AmortizedFit(0)``
  (the network's hyperparameters with the calibrated noise, the bridge's default start:
  BoTorch's default kernel has no ``ScaleKernel``, so the calibration sets the noise
  alone to its exact Type-2 ML value) and ``AmortizedFit(0, calibrate=False)``
  (``network-0``: the network's hyperparameters as they are);
* acquisition: ``qLogExpectedImprovement`` (q = 1) optimised by ``optimize_acqf``;
* problems (minimised): Branin (2-d), Hartmann-6 (6-d) and ``trend`` (2-d, designed here:
  ``f(x) = -2 x_0 - 0.5 sin(6 pi x_0) + 0.3 cos(4 pi x_1) - 0.2 x_1`` on ``[0, 1]^2``,
  a linear trend plus periodic terms; its optimum is computed on a fine grid per
  coordinate since ``f`` is separable).

Reported: the model-fitting time per iteration (median and interquartile range over all
iterations and seeds), the MLL gap of every fit to ``fit_gpytorch_mll`` from the same
default start (the oracle, fitted on a copy of the model outside the timings; GPyTorch's
``ExactMarginalLogLikelihood``, priors included, divided by n; median and worst), the
total wall time of the loop, the simple regret
``min_{i<=t} f(x_i) - f*`` per iteration (median and interquartile range over seeds, plot)
and the number of failed fits (an exception, or a BoTorch ``OptimizationWarning`` /
``ModelFittingError``) and of fallbacks.  Writes ``docs/benchmarks/botorch.md``,
``botorch.json`` and ``botorch.png``.

Usage: ``python benchmarks/bench_botorch.py [--full] [--seeds S] [--iterations N]
[--methods botorch,lean-default,amortized,amortized-network,amortized-0,network-0]
[--problems branin,hartmann6,trend] [--refine R] [--out PATH]``
(``--from-json docs/benchmarks/botorch.json`` re-renders the report of a saved run).
Seeds run in the outer loop and the report is rewritten after every seed, so a run
stopped early leaves a consistent report of the seeds it finished (it says so).
The default is a reduced protocol (3 seeds x 15 iterations, ``num_restarts=4``,
``raw_samples=64``); ``--full`` runs 10 seeds x 50 iterations with ``num_restarts=10``,
``raw_samples=512``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
N_INIT = 10
METHODS = (
    "botorch",
    "lean-default",
    "amortized",
    "amortized-network",
    "amortized-0",
    "network-0",
)
COLORS = ("tab:blue", "tab:gray", "tab:orange", "tab:purple", "tab:green", "tab:red")
REFINE = (
    50  # AmortizedFit's default (REFINE_STEPS): an upper limit, the stopping rules end it earlier
)
CAVEATS = (
    "Caveats. The amortized fit time includes the network's forward pass, the mapping to "
    "the model and the L-BFGS-B iterations on the closed-form objective (BoTorch's "
    "default model is evaluated in closed form, so the final check against GPyTorch's "
    "own MLL is skipped); BoTorch's `fit_gpytorch_mll` runs L-BFGS-B to convergence from "
    "its default initialisation through GPyTorch's MLL. Both fits stop by the same "
    "scipy rules, so where both reach the same optimum the BO paths coincide (identical "
    "regret). Methods run one after another, each loop on its own: timings come from a "
    "shared, busy CPU whose load changes during the run, so compare methods within a "
    "problem, not across runs. The regret comparison is against the spread of the "
    "default fit's final regret over seeds, a coarse test with few seeds."
)


def _trend(X: torch.Tensor) -> torch.Tensor:
    x0, x1 = X[..., 0], X[..., 1]
    return (
        -2 * x0 - 0.5 * torch.sin(6 * math.pi * x0) + 0.3 * torch.cos(4 * math.pi * x1) - 0.2 * x1
    )


def _trend_optimum() -> float:
    g = torch.linspace(0, 1, 1_000_001, dtype=torch.float64)
    a = (-2 * g - 0.5 * torch.sin(6 * math.pi * g)).min()
    b = (0.3 * torch.cos(4 * math.pi * g) - 0.2 * g).min()
    return float(a + b)


def problems() -> dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int, float]]:
    """``name -> (f on the unit cube (n, d) -> (n,), d, optimum)``, all minimised."""
    from botorch.test_functions import Branin, Hartmann

    branin, hart = Branin(), Hartmann(dim=6)
    lo, hi = branin.bounds.to(torch.float64)

    def f_branin(X: torch.Tensor) -> torch.Tensor:
        return branin(lo + X * (hi - lo))

    return {
        "branin": (f_branin, 2, float(branin.optimal_value)),
        "hartmann6": (lambda X: hart(X), 6, float(hart.optimal_value)),
        "trend": (_trend, 2, _trend_optimum()),
    }


def _fit_default(mll: Any) -> None:
    from botorch.fit import fit_gpytorch_mll

    fit_gpytorch_mll(mll)


class _LeanDefault:
    """The closed-form objective refined from the model's default start (no network);
    ``last_evaluations`` as :class:`~amorgp.gpytorch.AmortizedFit`'s."""

    last_evaluations = 0

    def __call__(self, mll: Any) -> None:
        from amorgp.gpytorch import LeanObjective

        mll.train()
        self.last_evaluations = LeanObjective(mll).minimize(REFINE).evaluations
        mll.eval()


def _mll(mll: Any) -> float:
    """GPyTorch's MLL of the model's parameters (priors included, divided by n)."""
    model = mll.model
    model.train()
    with torch.no_grad():
        value = float(mll(model(*model.train_inputs), model.train_targets))
    model.eval()
    return value


def _oracle_mll(model: Any) -> float:
    """The MLL ``fit_gpytorch_mll`` reaches from a copy of ``model`` (its default start)."""
    import copy

    from botorch.fit import fit_gpytorch_mll
    from gpytorch.mlls import ExactMarginalLogLikelihood

    twin = copy.deepcopy(model)
    mll = ExactMarginalLogLikelihood(twin.likelihood, twin)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit_gpytorch_mll(mll)
    return _mll(mll)


def run_loop(
    f: Callable[[torch.Tensor], torch.Tensor],
    d: int,
    f_opt: float,
    seed: int,
    iters: int,
    fit: Callable[[Any], Any],
    acq_opts: dict[str, int],
    gaps: bool = True,
) -> dict[str, Any]:
    """One BO loop; returns per-iteration fit times, MLL gaps to ``fit_gpytorch_mll``
    (``gaps``), regret, failures and wall time (the oracle fits' time excluded)."""
    from botorch.acquisition.logei import qLogExpectedImprovement
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf
    from gpytorch.mlls import ExactMarginalLogLikelihood

    g = torch.Generator().manual_seed(seed)
    X = torch.rand(N_INIT, d, generator=g, dtype=torch.float64)
    y = f(X)
    bounds = torch.stack([torch.zeros(d), torch.ones(d)]).to(torch.float64)
    fit_times, regret, mll_gaps, failures = [], [], [], 0
    evaluations: list[int] = []
    oracle_s = 0.0
    t0 = time.perf_counter()
    for it in range(iters):
        model = SingleTaskGP(X, -y[:, None])  # BoTorch maximises
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        if gaps:
            t = time.perf_counter()
            oracle = _oracle_mll(model)
            oracle_s += time.perf_counter() - t
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fit(mll)
            except Exception:  # a failed fit: count it, keep the model as it is
                failures += 1
        fit_times.append(time.perf_counter() - t)
        if hasattr(fit, "last_evaluations"):
            evaluations.append(int(fit.last_evaluations))
        failures += sum("OptimizationWarning" in type(w.message).__name__ for w in caught)
        if gaps:
            t = time.perf_counter()
            mll_gaps.append(_mll(mll) - oracle)
            oracle_s += time.perf_counter() - t
        torch.manual_seed(seed * 1000 + it)
        acq = qLogExpectedImprovement(model, best_f=float((-y).max()))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cand, _ = optimize_acqf(acq, bounds=bounds, q=1, **acq_opts)
        X = torch.cat([X, cand.detach()])
        y = torch.cat([y, f(cand.detach())])
        regret.append(float(y.min()) - f_opt)
    return {
        "fit_times": fit_times,
        "regret": regret,
        "mll_gaps": mll_gaps,
        "failures": failures,
        "evaluations": evaluations,
        "wall_s": time.perf_counter() - t0 - oracle_s,
    }


def _q(v: list[float]) -> tuple[float, float, float]:
    if len(v) < 2:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], statistics.median(v), q[2]


def _plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, grid = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False)
    axes = grid[0]
    for ax, name in zip(axes, names, strict=True):
        for method, color in zip(METHODS, COLORS, strict=True):
            if method not in results[name] or not results[name][method]["runs"]:
                continue
            runs = results[name][method]["runs"]
            curves = torch.tensor([r["regret"] for r in runs]).clamp_min(1e-12)
            t = torch.arange(1, curves.shape[1] + 1)
            lo, med, hi = (curves.quantile(q, dim=0) for q in (0.25, 0.5, 0.75))
            ax.plot(t, med, color=color, label=method)
            ax.fill_between(t, lo, hi, color=color, alpha=0.25)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xlabel("iteration")
    axes[0].set_ylabel("simple regret (median, IQR over seeds)")
    axes[0].legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def _gaps(runs: list[dict[str, Any]]) -> list[float]:
    return [g for r in runs for g in r.get("mll_gaps", [])]


def _report(results: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        "# BoTorch: default model fitting vs amortized fitting",
        "",
        f"Generated by `benchmarks/bench_botorch.py` ({meta['protocol']}). "
        f"{meta['seeds']} seeds x {meta['iters']} iterations after {N_INIT} random initial "
        f"points; `optimize_acqf(num_restarts={meta['acq']['num_restarts']}, "
        f"raw_samples={meta['acq']['raw_samples']})`. Machine: {meta['machine']}, "
        f"torch {meta['torch']}, BoTorch {meta['botorch']}, GPyTorch {meta['gpytorch']}, "
        f"{meta['threads']} thread(s) on a shared CPU.",
        "",
        "Model: BoTorch's default `SingleTaskGP` (RBF with ARD, priors, `Standardize`), "
        "refitted from scratch every iteration. **botorch** = `fit_gpytorch_mll(mll)`; "
        "**lean-default** = `LeanObjective(mll).minimize(50)` (the project's closed-form "
        "objective refined from BoTorch's default start, no network); "
        "**amortized** = `AmortizedFit()` (one forward pass of the bundled network"
        + (
            ", the noise and a common lengthscale factor tuned on the model's objective, "
            "priors included"
            if meta.get("tuned")
            else (", the noise calibrated" if meta.get("calibrated") else "")
        )
        + (
            "; the network's start and the model's default start each run 3 L-BFGS-B "
            "iterations and the better one is refined on"
            if meta.get("race")
            else (
                "; the network's start and the model's default start scored in one batched "
                "evaluation and the better one refined"
                if meta.get("two_starts")
                else ""
            )
        )
        + f"; at most {meta.get('refine', 5)} L-BFGS-B iterations of the same objective, "
        "evaluated in closed form (`LeanObjective`), stopping at convergence; "
        "`fit_gpytorch_mll` as the fallback); **amortized-network** = "
        "`AmortizedFit(model_start=False)` (the network's start alone, the bridge before "
        "the two starts); **amortized-0** = `AmortizedFit(refine_steps=0)` "
        + (
            (
                "(the better of the two starts by their score, no iteration); **network-0** = "
                if meta.get("tuned")
                else "(the better of the two starts, no iteration; the network's start has "
                "the noise calibrated: its exact Type-2 ML value given the network's other "
                "hyperparameters, BoTorch's kernel having no `ScaleKernel`); **network-0** = "
            )
            + "`AmortizedFit(refine_steps=0, calibrate=False, model_start=False)` (the "
            "network's hyperparameters as they are)"
            if meta.get("calibrated")
            else "(the network's hyperparameters as they are)"
        )
        + ". Problems are minimised; `trend` is "
        "`-2 x0 - 0.5 sin(6 pi x0) + 0.3 cos(4 pi x1) - 0.2 x1` on [0, 1]^2 (a linear trend "
        "plus periodic terms). MLL gap: the fit's MLL (GPyTorch's, priors included, divided "
        "by n) minus the MLL `fit_gpytorch_mll` reaches from the same model's default start "
        "(fitted on a copy, outside the timings), over every fit of every seed; negative is "
        "worse than BoTorch's fit.",
        "",
        "| problem | d | method | fit time / iteration, median [IQR] | fit speed-up | "
        "MLL gap to `fit_gpytorch_mll`, median / worst | network's start scored higher "
        "/ model's start refined | "
        "total wall time (s), median over seeds | final regret, median [IQR] | "
        "failed fits | fallbacks | L-BFGS-B evaluations per fit, median [IQR] |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        base = statistics.median(t for r in res["botorch"]["runs"] for t in r["fit_times"])
        for method in (m for m in METHODS if m in res):
            runs = res[method]["runs"]
            ft = _q([t for r in runs for t in r["fit_times"]])
            fin = _q([r["regret"][-1] for r in runs])
            wall = statistics.median(r["wall_s"] for r in runs)
            speed = base / ft[1]
            gaps = _gaps(runs)
            gap = f"{statistics.median(gaps):.2g} / {min(gaps):.2g}" if gaps else "0 (oracle)"
            calls = res[method].get("calls")
            better = res[method].get("network_better")
            won = (
                ("" if better is None else f"{better} / ")
                + f"{res[method].get('model_starts', 0)} of {calls}"
                if calls and method in ("amortized", "amortized-0")
                else "-"
            )
            ev = [float(e) for r in runs for e in r.get("evaluations", [])]
            evals = "-" if not ev else "{1:.0f} [{0:.0f}, {2:.0f}]".format(*_q(ev))
            lines.append(
                f"| {name} | {res['d']} | {method} | {1e3 * ft[1]:.1f} ms "
                f"[{1e3 * ft[0]:.1f}, {1e3 * ft[2]:.1f}] | {speed:.1f}x | {gap} | {won} | "
                f"{wall:.1f} | {fin[1]:.3g} [{fin[0]:.3g}, {fin[2]:.3g}] | "
                f"{sum(r['failures'] for r in runs)} | {res[method].get('fallbacks', 0)} | "
                f"{evals} |"
            )
    lines += ["", "![simple regret](botorch.png)", "", "## Findings (computed from the run)", ""]
    for name, res in results.items():
        fb = [r["regret"][-1] for r in res["botorch"]["runs"]]
        tb = statistics.median(t for r in res["botorch"]["runs"] for t in r["fit_times"])
        lo, hi = min(fb), max(fb)
        for method in (m for m in METHODS[1:] if m in res):
            fa = [r["regret"][-1] for r in res[method]["runs"]]
            ta = statistics.median(t for r in res[method]["runs"] for t in r["fit_times"])
            med = statistics.median(fa)
            where = "within" if lo <= med <= hi else ("below" if med < lo else "above")
            lines.append(
                f"- **{name}** (d = {res['d']}), {method}: fitting {tb / ta:.1f}x faster per "
                f"iteration (median {1e3 * tb:.1f} ms -> {1e3 * ta:.1f} ms); final regret "
                f"median {med:.3g}, {where} the default fit's range over seeds "
                f"[{lo:.3g}, {hi:.3g}] (lower is better)."
            )
    lines += ["", _verdict(results), "", _start_verdict(results), "", CAVEATS, ""]
    if meta.get("load"):
        lines += [
            f"The machine's 1-minute load average after each seed: "
            f"{min(meta['load']):.1f} to {max(meta['load']):.1f} (on "
            f"{os.cpu_count()} cores).",
            "",
        ]
    if meta.get("note"):
        lines += [meta["note"], ""]
    return "\n".join(lines)


def _start_verdict(results: dict[str, Any]) -> str:
    """One paragraph: is ``amortized`` at least as fast per fit as ``lean-default`` (the
    closed-form objective from BoTorch's default start) with a worst MLL gap to
    ``fit_gpytorch_mll`` no larger?"""
    parts = []
    for name, res in results.items():
        if "lean-default" not in res or "amortized" not in res:
            continue
        tl = statistics.median(t for r in res["lean-default"]["runs"] for t in r["fit_times"])
        ta = statistics.median(t for r in res["amortized"]["runs"] for t in r["fit_times"])
        gl, ga = min(_gaps(res["lean-default"]["runs"])), min(_gaps(res["amortized"]["runs"]))
        fast, close = ta <= tl, ga >= gl
        verdict = "met" if fast and close else "missed"
        detail = [f"{1e3 * ta:.1f} ms vs {1e3 * tl:.1f} ms per fit ({ta / tl:.2f}x the time)"]
        detail.append(f"worst MLL gap {ga:.2g} vs {gl:.2g}")
        if "amortized-network" in res:
            tn = statistics.median(
                t for r in res["amortized-network"]["runs"] for t in r["fit_times"]
            )
            gn = min(_gaps(res["amortized-network"]["runs"]))
            detail.append(f"the network's start alone: {1e3 * tn:.1f} ms, worst gap {gn:.2g}")
            ev = {
                m: [e for r in res[m]["runs"] for e in r.get("evaluations", [])]
                for m in ("lean-default", "amortized-network")
            }
            if all(ev.values()):
                detail.append(
                    "L-BFGS-B evaluations per fit from the network's tuned start "
                    f"{statistics.median(ev['amortized-network']):.0f} against "
                    f"{statistics.median(ev['lean-default']):.0f} from the model's default "
                    "start (medians)"
                )
        parts.append(f"{name}: {verdict} ({'; '.join(detail)})")
    if not parts:
        return ""
    return (
        "Against the closed-form objective from BoTorch's default start. Target: "
        "`AmortizedFit()` at least as fast per fit (median) as lean-default, with a worst "
        "MLL gap to `fit_gpytorch_mll` no larger. " + ". ".join(parts) + "."
    )


def _verdict(results: dict[str, Any]) -> str:
    """One paragraph: does ``amortized`` meet the target (>= 10x faster per iteration,
    final regret median within or below the default fit's range over seeds, no failed
    fits) on each problem?"""
    met, missed = [], []
    for name, res in results.items():
        bt = [t for r in res["botorch"]["runs"] for t in r["fit_times"]]
        am = [t for r in res["amortized"]["runs"] for t in r["fit_times"]]
        speed = statistics.median(bt) / statistics.median(am)
        hi = max(r["regret"][-1] for r in res["botorch"]["runs"])
        med = statistics.median(r["regret"][-1] for r in res["amortized"]["runs"])
        fails = sum(r["failures"] for r in res["amortized"]["runs"])
        ok = speed >= 10 and med <= hi and fails == 0
        (met if ok else missed).append(f"{name} ({speed:.1f}x)")
    text = (
        "Reading the table. Target: the amortized fit at least 10x faster per iteration, "
        "final regret (median over seeds) within or below the default fit's range, no "
        "failed fits. "
    )
    if met:
        text += f"Met on {', '.join(met)}. "
    if missed:
        text += f"Not met on {', '.join(missed)}. "
    stops = sum(r["amortized"].get("abnormal_stops", 0) for r in results.values())
    calls = sum(r["amortized"].get("calls", 0) for r in results.values())
    text += (
        f"The amortized refine's L-BFGS-B stopped abnormally (a failed line search: the "
        f"best parameters found are kept, no fallback) in {stops} of {calls} fits. "
    )
    return text + (
        "amortized-0 (no L-BFGS-B iteration) is the cost floor of the amortized start; its "
        "regret shows what the iterations add, and network-0's what the calibration adds."
    )


def _write(out: Path, results: dict[str, Any], meta: dict[str, Any], save_json: bool) -> None:
    """Write ``out`` (Markdown), its ``.png`` and (``save_json``) its ``.json``, each
    through a temporary file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if save_json:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
        tmp.replace(out.with_suffix(".json"))
    _plot(results, out.with_suffix(".png"))
    tmp = out.with_suffix(".tmp")
    tmp.write_text(_report(results, meta))
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="10 seeds x 50 iterations")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--iters", "--iterations", dest="iters", type=int, default=None)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--refine", type=int, default=REFINE, help="amortized's refine_steps")
    parser.add_argument("--problems", default="branin,hartmann6,trend")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/botorch.md")
    parser.add_argument(
        "--from-json", type=Path, default=None, help="re-render the report of a saved run"
    )
    parser.add_argument(
        "--note", default=None, help="with --from-json: a sentence added to the report's notes"
    )
    args = parser.parse_args()
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        if args.note:
            saved["meta"]["note"] = " ".join(filter(None, [saved["meta"].get("note"), args.note]))
        _write(args.out, saved["results"], saved["meta"], save_json=args.note is not None)
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import botorch
    import gpytorch

    from amorgp.gpytorch import AmortizedFit, default_amortizer

    seeds = args.seeds or (10 if args.full else 3)
    iters = args.iters or (50 if args.full else 15)
    acq = (
        {"num_restarts": 10, "raw_samples": 512}
        if args.full
        else {"num_restarts": 4, "raw_samples": 64}
    )
    default_amortizer()  # load the network and prepare its forward once, outside the timings
    probs = problems()
    names = args.problems.split(",")
    methods = [m for m in METHODS if m in args.methods.split(",")]
    results: dict[str, Any] = {
        n: {"d": probs[n][1], "optimum": probs[n][2]} | {m: {"runs": []} for m in methods}
        for n in names
    }
    fits = {
        n: {
            m: AmortizedFit(
                refine_steps=0 if m.endswith("-0") else args.refine,
                calibrate=False if m == "network-0" else None,
                model_start=m not in ("amortized-network", "network-0"),
            )
            for m in methods
        }
        for n in names
    }
    meta = {
        "protocol": "full protocol"
        if args.full
        else "REDUCED protocol (the default run; `--full` for 10 seeds x 50 iterations)",
        "seeds": 0,
        "seeds_planned": seeds,
        "iters": iters,
        "refine": args.refine,
        "calibrated": True,  # the bridge's default start since calibration became the default
        "two_starts": True,  # the network's and the model's start, the better refined
        "tuned": True,  # the noise and a lengthscale factor tuned on the model's objective
        "race": True,  # both starts run RACE_STEPS iterations, the better refined on
        "acq": acq,
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "botorch": botorch.__version__,
        "gpytorch": gpytorch.__version__,
        "threads": torch.get_num_threads(),
    }
    lean_default = _LeanDefault()
    for s in range(seeds):
        for name in names:
            f, d, f_opt = probs[name]
            for method in methods:
                amz = fits[name][method]
                peers = {"botorch": _fit_default, "lean-default": lean_default}
                fit = peers.get(method, amz)
                run = run_loop(f, d, f_opt, s, iters, fit, acq, gaps=method != "botorch")
                res = results[name][method]
                res["runs"].append(run)
                if method not in peers:
                    res["fallbacks"] = amz.fallbacks
                    res["abnormal_stops"] = amz.abnormal_stops
                    res["calls"] = amz.calls
                    res["model_starts"] = amz.model_starts
                    res["network_better"] = amz.network_better
                    if amz.fallbacks:
                        res["last_error"] = amz.last_error
                print(
                    name,
                    method,
                    s,
                    f"{statistics.median(run['fit_times']):.3f}s/fit",
                    f"{run['wall_s']:.0f}s",
                    flush=True,
                )
        meta["seeds"] = s + 1
        meta.setdefault("load", []).append(os.getloadavg()[0])
        if s + 1 < seeds:
            meta["note"] = (
                f"Only {s + 1} of the {seeds} planned seeds were run in the time available; "
                "the table and plot use those."
            )
        else:
            meta.pop("note", None)
        _write(args.out, results, meta, save_json=True)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
