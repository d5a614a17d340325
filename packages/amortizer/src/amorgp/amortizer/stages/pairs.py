"""The pipeline's dense GP algebra over ``P`` rows (dataset, kernel) that each have their
own points and targets: kernel matrices, the calibration and the scoring
(:mod:`amorgp.amortizer.stages.calibrate`'s functions on rows of different targets).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from amorgp.amortizer.stages import calibrate as calibration
from amorgp.amortizer.stages.batched import exact_solve
from amorgp.amortizer.stages.spectra import Eigen, Tridiagonal, spectrum, tridiagonal_form
from amorgp.kernel_grammar import Vocabulary

__all__ = [
    "RECURRENCE_BYTES",
    "best_prediction",
    "calibrate_rows",
    "evaluate_and_calibrate",
    "log_likelihood_rows",
    "pair_matrices",
]

RECURRENCE_BYTES = 8 * 2**20
"""Bytes of the calibration's pivot recurrence per chunk of pairs (kept in cache: at 100
points a chunk of 1,400 pairs streamed hundreds of MB per grid pass, several times
slower)."""

CACHE_BYTES = 2 * 2**20
"""Bytes of kernel matrices evaluated and calibrated at once by
:func:`evaluate_and_calibrate` on the CPU (about a core's share of the last-level cache)."""


def pair_matrices(
    X: Tensor, symbols: Tensor, mask: Tensor, params: Tensor, vocab: Vocabulary
) -> Tensor:
    """``(P, n, n)`` kernel matrices of ``P`` pairs, each on its own points ``X (P, n, d)``."""
    from amorgp.lazy_kernels import kernel_matrix_dimwise

    d, L = X.shape[-1], symbols.shape[-1]
    par = params.detach()[:, :d, :L].to(X.dtype)
    return kernel_matrix_dimwise(X, X, symbols, mask, par, vocab, validate=False)


def calibrate_rows(
    Km: Tensor,
    Y: Tensor,
    symbols: Tensor,
    mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
    noise_floor: float | None = None,
) -> calibration.Calibration:
    """:func:`amorgp.amortizer.stages.calibrate.calibrate` with precomputed matrices for ``P``
    pairs that each have their own targets: ``Km (P, n, n)`` (read, not modified),
    ``Y (P, n)``, ``symbols``/``mask (P, d, L)``, ``params (P, D, L, S)``, ``noise (P,)``;
    ``noise_floor`` as there.
    The CPU's method (tridiagonal) on the CPU, ``eigh`` elsewhere.  Each pair's
    ``log_marginal_likelihood`` is its exact likelihood at its calibrated scale and noise
    (of the scaled matrix ``s K``), read from the same spectrum (``-inf`` where the matrix
    is not finite or the value is not a number)."""
    P, n = Y.shape
    if Km.device.type == "cpu":
        step = max(1, CACHE_BYTES // (8 * n * n))
        with calibration.one_thread(Km.device):  # one thread, BLAS included: see one_thread
            forms = [
                tridiagonal_form(
                    Km[s : s + step].to(torch.float64), Y[s : s + step].to(torch.float64)
                )
                for s in range(0, P, step)
            ]
        return _calibrate_forms(forms, symbols, mask, params, noise, vocabulary, noise_floor)
    per_chunk = max(1, calibration.CHUNK_ELEMENTS // (n * n))

    def spectra() -> Iterator[tuple[slice, Eigen | Tridiagonal, Tensor]]:
        for start in range(0, P, per_chunk):
            sl = slice(start, min(P, start + per_chunk))
            yield (sl, *spectrum(Km[sl].to(torch.float64), Y[sl].to(torch.float64), "eigh"))

    return calibration.calibrate_spectra(
        spectra(), symbols, mask, params, noise, vocabulary,
        noise_min=calibration.min_noise(noise_floor),
    )  # fmt: skip


def evaluate_and_calibrate(
    X: Tensor,
    Y: Tensor,
    symbols: Tensor,
    mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
    noise_floor: float | None = None,
) -> calibration.Calibration:
    """:func:`calibrate_rows` of the kernel matrices of ``P`` pairs on their own points
    ``X (P, n, d)`` (:func:`pair_matrices`; ``noise_floor`` as there).  On the CPU the matrices are evaluated and
    tridiagonalised by chunks of :data:`CACHE_BYTES` (each chunk's matrices are still in
    cache when their tridiagonal form reads them, and the form is computed in their
    memory), then the grid search runs on the forms of all pairs."""
    P, n = Y.shape
    if X.device.type != "cpu":
        Km = pair_matrices(X, symbols, mask, params, vocabulary)
        return calibrate_rows(Km, Y, symbols, mask, params, noise, vocabulary, noise_floor)
    step = max(1, CACHE_BYTES // (8 * n * n))
    forms = []
    with calibration.one_thread(X.device):  # one thread, BLAS included: see one_thread
        for s in range(0, P, step):
            sl = slice(s, min(P, s + step))
            Km = pair_matrices(X[sl], symbols[sl], mask[sl], params[sl], vocabulary)
            forms.append(tridiagonal_form(Km, Y[sl].to(torch.float64), overwrite=True))
    return _calibrate_forms(forms, symbols, mask, params, noise, vocabulary, noise_floor)


def _calibrate_forms(
    forms: Sequence[tuple[Tensor, Tensor, Tensor]],
    symbols: Tensor,
    mask: Tensor,
    params: Tensor,
    noise: Tensor,
    vocabulary: Vocabulary,
    noise_floor: float | None = None,
) -> calibration.Calibration:
    """:func:`~amorgp.amortizer.stages.calibrate.calibrate_spectra` of the tridiagonal forms
    ``(a, b2, yy)`` of consecutive chunks of the pairs
    (:func:`~amorgp.amortizer.stages.spectra.tridiagonal_form`), searched by chunks of
    :data:`RECURRENCE_BYTES` of the pivot recurrence."""
    noise_min = calibration.min_noise(noise_floor)
    if not forms:  # no pairs
        return calibration.calibrate_spectra(
            (), symbols, mask, params, noise, vocabulary, noise_min=noise_min
        )
    a, b2, yy = (torch.cat(t) for t in zip(*forms))
    P, n = a.shape
    # the pivot recurrence streams (n, rows, grid) float64 arrays
    per_chunk = max(1, RECURRENCE_BYTES // (8 * n * 2 * (calibration.COARSE_POINTS + 1)))

    def spectra() -> Iterator[tuple[slice, Eigen | Tridiagonal, Tensor]]:
        for start in range(0, P, per_chunk):
            sl = slice(start, min(P, start + per_chunk))
            spec = Tridiagonal(a[sl], b2[sl], yy[sl])
            yield sl, spec, spec.finite

    return calibration.calibrate_spectra(
        spectra(), symbols, mask, params, noise, vocabulary, noise_min=noise_min
    )


def log_likelihood_rows(Km: Tensor, Y: Tensor, noise: Tensor) -> Tensor:
    """The exact log marginal likelihoods of rows with their own targets ``Y (P, n)``
    (:func:`amorgp.amortizer.stages.batched.exact_solve`; ``-inf`` where the factorisation
    fails); ``Km (P, n, n)`` is consumed (the noise added in place)."""
    Km.diagonal(dim1=-2, dim2=-1).add_(noise[:, None])
    return exact_solve(Km, Y)[2]


def best_prediction(
    X: Tensor,
    Y: Tensor,
    symbols: Tensor,
    mask: Tensor,
    predictions: Sequence[tuple[Tensor, Tensor]],
    vocabulary: Vocabulary,
    calibrated: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per (dataset, kernel) pair, the prediction of highest exact log marginal likelihood
    on its dataset's points: ``B`` datasets ``X (B, m, d)``, ``Y (B, m)``, ``K`` structures
    ``symbols``/``mask (K, d, L)`` and ``M`` predictions ``(params (B K, D, L, S), noise
    (B K,))`` of pair ``b K + k`` (e.g. one per network), every one of the ``M B K`` rows
    scored in one batch, in float64.

    ``calibrated``: each prediction is scored at its exact Type-2 ML scale and noise
    (:func:`evaluate_and_calibrate`: what the fit's calibration will make of it); else as
    it is.  Returns the winners' ``params`` and ``noise`` (as predicted, uncalibrated)
    and ``index (B K,)``: the winning prediction per pair, the first of the highest (the
    earlier prediction on ties); a likelihood that cannot be evaluated never wins over
    one that can (all of a pair's non-finite: the first).
    """
    M = len(predictions)
    B, m, d = X.shape
    K, L = symbols.shape[0], symbols.shape[-1]
    params = torch.stack([p for p, _ in predictions])  # (M, B K, D, L, S)
    noise = torch.stack([q for _, q in predictions])  # (M, B K)
    rows = torch.arange(B * K, device=params.device)
    if M == 1:
        return params[0], noise[0], torch.zeros(B * K, dtype=torch.long, device=params.device)
    ds = torch.arange(B, device=X.device).repeat_interleave(K).repeat(M)  # row -> dataset
    Xr, Yr = X.to(torch.float64)[ds], Y.to(torch.float64)[ds]
    sym, msk = symbols.repeat(M * B, 1, 1), mask.repeat(M * B, 1, 1)
    p64 = params.reshape(M * B * K, *params.shape[2:])[:, :d, :L].to(X.device, torch.float64)
    n64 = noise.reshape(M * B * K).to(X.device, torch.float64)
    if calibrated:
        lml = evaluate_and_calibrate(Xr, Yr, sym, msk, p64, n64, vocabulary).log_marginal_likelihood
    else:
        step = max(1, CACHE_BYTES // (8 * m * m))
        lml = torch.cat(
            [
                log_likelihood_rows(
                    pair_matrices(Xr[sl], sym[sl], msk[sl], p64[sl], vocabulary), Yr[sl], n64[sl]
                )
                for sl in (slice(s, s + step) for s in range(0, M * B * K, step))
            ]
        )
    score = torch.nan_to_num(lml.reshape(M, B * K), nan=-torch.inf, posinf=-torch.inf)
    index = score.argmax(0).to(params.device)  # the first maximum
    return params[index, rows], noise[index, rows], index
