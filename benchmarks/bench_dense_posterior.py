"""The batched dense exact posterior (``Posterior.dense``) against LAPACK through SciPy.

``amorgp.lazy_kernels.Posterior.dense`` is the one factorisation of ``A = K + sigma^2 I``
behind baselines' ``exact_predictive``, the ensemble's batched members and the GPyTorch
bridge's objectives.  Timed per call, side by side, interleaved, one thread, median of
the repeats:

* ``factor``: ``L``, ``alpha = A^{-1} y`` and ``A^{-1}`` of one ``(n, n)`` matrix (what the
  closed-form RBF objective needs per evaluation), against SciPy's ``dpotrf``, ``dpotrs``
  and ``dpotri`` on the same matrix; with the default relative jitter
  (:func:`amorgp.diff_linalg.robust_cholesky`) and with GPyTorch's absolute ladder (the
  bridge's objectives);
* ``batch``: ``B`` matrices at once (factor and ``alpha``), against a Python loop of
  ``dpotrf`` / ``dpotrs``;
* ``predict``: mean and variance at ``m`` test points from a batch of ``B`` factors,
  against ``dpotrs`` / ``dtrtrs`` per element;
* ``RBF objective``: one evaluation (value and gradient) of the GPyTorch bridge's
  closed-form objective of BoTorch's default ``SingleTaskGP`` (RBF with ARD, ``d = 6``,
  ``n`` training points), factoring through ``Posterior.dense``, against the same objective
  with its factorisation done by SciPy's ``dpotrf`` / ``dpotrs`` / ``dpotri`` (the bridge's
  former NumPy path);
* ``RBF fit``: the bridge's L-BFGS-B fit (at most 50 iterations) of that model from its
  initial hyperparameters, both ways.

Writes ``docs/benchmarks/dense-posterior.md`` (and ``.json``).

Usage: ``python benchmarks/bench_dense_posterior.py [--quick] [--repeats N]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "benchmarks" / "dense-posterior.md"


def _problem(B: int, n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.random((B, n + m, 3))
    d = ((X[:, :, None, :] - X[:, None, :, :]) ** 2).sum(-1)
    full = np.exp(-0.5 * d / 0.3**2)
    return full[:, :n, :n], full[:, :n, n:], rng.standard_normal((B, n)), np.full(B, 0.1)


def _time(
    ours: Callable[[], object], peer: Callable[[], object], repeats: int, number: int = 20
) -> tuple[float, float]:
    """Median seconds per call of each, the repeats of the two alternating."""
    ours(), peer()
    a, b = [], []
    for _ in range(repeats):
        a.append(timeit.timeit(ours, number=number) / number)
        b.append(timeit.timeit(peer, number=number) / number)
    return statistics.median(a), statistics.median(b)


def run(sizes: list[tuple[int, int, int]], repeats: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for B, n, m in sizes:
        rows += _compare(B, n, m, repeats)
    return rows


def _compare(B: int, n: int, m: int, repeats: int) -> list[dict[str, object]]:
    from scipy.linalg.lapack import dpotrf, dpotri, dpotrs, dtrtrs

    from amorgp.lazy_kernels import Posterior

    K, Ks, y, noise = _problem(B, n, m)
    A = K + noise[:, None, None] * np.eye(n)
    Kt, Kst, yt, st = (torch.from_numpy(a) for a in (K, Ks, y, noise))
    kss = torch.ones(B, m, dtype=torch.float64)

    def ours_factor() -> object:
        p = Posterior.dense(Kt[0], yt[0], float(noise[0]))
        return p.alpha.numpy(), p.inverse().numpy()

    def ours_factor_ladder() -> object:
        p = Posterior.dense(Kt[0], yt[0], float(noise[0]), jitter_ladder=(1e-8, 1e-7, 1e-6))
        return p.alpha.numpy(), p.inverse().numpy()

    def lapack_factor() -> object:
        L, _ = dpotrf(A[0], lower=1, clean=0)
        return dpotrs(L, y[0], lower=1)[0], dpotri(L, lower=1)[0]

    def ours_batch() -> object:
        return Posterior.dense(Kt, yt, st).alpha

    def lapack_batch() -> object:
        return [dpotrs(dpotrf(A[b], lower=1)[0], y[b], lower=1)[0] for b in range(B)]

    post = Posterior.dense(Kt, yt, st)
    Ls = [dpotrf(A[b], lower=1)[0] for b in range(B)]
    alphas = [dpotrs(Ls[b], y[b], lower=1)[0] for b in range(B)]

    def ours_predict() -> object:
        return post.predict(Kst, kss)

    def lapack_predict() -> object:
        out = []
        for b in range(B):
            V = dtrtrs(Ls[b], Ks[b], lower=1)[0]
            out.append((Ks[b].T @ alphas[b], 1.0 - (V * V).sum(0)))
        return out

    rows: list[dict[str, object]] = []
    for what, ours, peer in (
        ("factor", ours_factor, lapack_factor),
        ("factor, absolute jitter ladder", ours_factor_ladder, lapack_factor),
        ("batch", ours_batch, lapack_batch),
        ("predict", ours_predict, lapack_predict),
    ):
        t_ours, t_peer = _time(ours, peer, repeats)
        rows.append(
            {"what": what, "B": 1 if what.startswith("factor") else B, "n": n,
             "m": 0 if what.startswith("factor") else m, "ours_us": 1e6 * t_ours,
             "lapack_us": 1e6 * t_peer, "ratio": t_ours / t_peer}
        )  # fmt: skip
        print(rows[-1], flush=True)
    return rows


class _LapackFactor:
    """A stand-in for ``Posterior.dense`` in the RBF objective: SciPy's LAPACK on the
    NumPy views (the peer; no jitter ladder, the benchmark's matrices need none)."""

    def __init__(self, K: torch.Tensor, y: torch.Tensor, noise: float, **_: object) -> None:
        from scipy.linalg.lapack import dpotrf, dpotrs

        A = K.numpy().copy()
        A.flat[:: A.shape[0] + 1] += noise
        L, info = dpotrf(A, lower=1, clean=0)
        self.any_failed, self._L = info != 0, L
        self.L = torch.from_numpy(L)
        self.alpha = torch.from_numpy(dpotrs(L, y.numpy(), lower=1)[0])

    @classmethod
    def dense(cls, *args: object, **kwargs: object) -> _LapackFactor:
        return cls(*args, **kwargs)  # type: ignore[arg-type]

    def inverse(self) -> torch.Tensor:
        from scipy.linalg.lapack import dpotri

        inv = dpotri(self._L, lower=1)[0]  # the lower triangle (upper: leftovers)
        return torch.from_numpy(np.tril(inv) + np.tril(inv, -1).T)


def _objective(n: int, repeats: int, *, fit: bool) -> list[dict[str, object]]:
    import warnings

    from botorch.models import SingleTaskGP
    from gpytorch.mlls import ExactMarginalLogLikelihood

    import amorgp.gpytorch.lean_rbf as lean_rbf
    from amorgp.gpytorch.lean import LeanObjective

    g = torch.Generator().manual_seed(n)
    X = torch.rand(n, 6, generator=g, dtype=torch.float64)
    Y = torch.sin(3.0 * X.sum(-1, keepdim=True)) + 0.1 * torch.randn(n, 1, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SingleTaskGP(X, Y.to(torch.float64))
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    lean = LeanObjective(mll)
    assert lean.closed_form is not None
    theta = lean.x0()
    ours_posterior = lean_rbf.Posterior

    def with_peer(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            lean_rbf.Posterior = _LapackFactor  # type: ignore[misc,assignment]
            try:
                return fn()
            finally:
                lean_rbf.Posterior = ours_posterior  # type: ignore[misc]

        return run

    def evaluate() -> object:
        return lean.value_and_grad(theta)

    def refit() -> object:  # from the initial hyperparameters every time
        start = lean._unflatten(torch.from_numpy(theta)).values()
        with torch.no_grad():
            for p, v in zip(lean.params, start, strict=True):
                p.copy_(v.to(p))
        return lean.minimize(50)

    (f1, g1), (f2, g2) = evaluate(), with_peer(evaluate)()
    if not (
        abs(f1 - f2) <= 1e-10 * max(1.0, abs(f2)) and np.allclose(g1, g2, rtol=1e-7, atol=1e-10)
    ):
        raise AssertionError(f"the objectives differ: {f1} vs {f2}")
    rows = []
    cases = [("RBF objective, one evaluation", evaluate, 20)]
    cases += [("RBF fit, <= 50 L-BFGS-B iterations", refit, 1)] if fit else []
    for what, fn, number in cases:
        t_ours, t_peer = _time(fn, with_peer(fn), repeats, number)
        rows.append(
            {"what": what, "B": 1, "n": n, "m": 0, "ours_us": 1e6 * t_ours,
             "lapack_us": 1e6 * t_peer, "ratio": t_ours / t_peer}
        )  # fmt: skip
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two sizes, 3 repeats")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sizes = [(8, 25, 50), (8, 60, 100)] if a.quick else [(8, 25, 50), (32, 60, 100), (8, 200, 200)]
    repeats = 3 if a.quick else a.repeats
    rows = run(sizes, repeats)
    for n in (25, 50, 60):
        rows += _objective(n, 2 * repeats, fit=n == 50)
    lines = [
        "# Dense exact posterior: `Posterior.dense` against LAPACK (SciPy)",
        "",
        f"Generated by `benchmarks/bench_dense_posterior.py{' --quick' if a.quick else ''}` on "
        f"{platform.machine()} ({os.cpu_count()} cores), torch {torch.__version__}, one "
        "thread; median per call, both sides interleaved. Ratio > 1: `Posterior.dense` is "
        "slower. On a machine shared with other jobs the absolute times vary by a factor of "
        "a few between runs; compare the ratios. The RBF rows time the GPyTorch bridge's "
        "closed-form objective of BoTorch's `SingleTaskGP` (d = 6) with its factorisation by "
        "`Posterior.dense` against the same objective factored by SciPy's LAPACK; the fit "
        "row is the bridge's L-BFGS-B fit (at most 50 iterations) both ways.",
        "",
        "| what | B | n | m | Posterior.dense (us) | LAPACK (us) | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['what']} | {r['B']} | {r['n']} | {r['m']} | {r['ours_us']:.0f} | "
            f"{r['lapack_us']:.0f} | {r['ratio']:.2f} |"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    OUT.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
