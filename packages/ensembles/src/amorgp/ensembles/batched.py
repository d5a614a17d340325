"""All members' predictives in one batch: one kernel evaluation and one batched
Cholesky for the ``M`` structures of an ensemble on the same data.

For members ``m = 1..M`` with normalised hyperparameters ``theta_m`` and noise
``sigma_m^2`` on the same normalised data ``(X~, y~)``:

``K_m = K_{S_m}(X~, X~; theta_m) + sigma_m^2 I = L_m L_m^T``,
``mean_m(x) = k_m(x)^T K_m^{-1} y~``,
``var_m(x) = k_m(x, x) - ||L_m^{-1} k_m(x)||^2 + sigma_m^2`` (clamped at ``sigma_m^2``),

evaluated with lazy-kernels' batched heterogeneous evaluator (the members are the
batch) and its batched dense posterior (:meth:`amorgp.lazy_kernels.Posterior.dense`),
then mapped back to original units with the fits' shared normalisation.  Test points are
processed in chunks that reuse the factors.  A member whose matrix cannot be factorised
gets NaN (the ensemble then drops it with a warning).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from amorgp.kernel_grammar import Vocabulary, base_symbol, encode, symbol_sort_key
from amorgp.lazy_kernels import Posterior, kernel_diag_dimwise, kernel_matrix_dimwise

__all__ = ["batched_member_predictive", "normalisation_of"]


def normalisation_of(fit: Any) -> Any | None:
    """The data normalisation a fit carries (``normalization`` or ``normalizer``), if any."""
    for name in ("normalization", "normalizer"):
        norm = getattr(fit, name, None)
        if norm is not None and hasattr(norm, "transform_x"):
            return norm
    return None


def _params(fits: Sequence[Any], D: int, L: int, P: int) -> Tensor:
    theta = torch.ones((len(fits), D, L, P), dtype=torch.float64)
    for m, fit in enumerate(fits):
        hyper = fit.hyperparameters
        for p in fit.kernel.param_names():
            theta[m, p.dim, p.addend, p.slot] = float(hyper[(p.dim, p.addend, p.param)])
    return theta


def batched_member_predictive(
    fits: Sequence[Any],
    X: Any,
    y: Any,
    X_new: Any,
    *,
    chunk: int = 2048,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor] | None:
    """Predictive means and variances ``(M, T)`` of every fit at ``X_new``, original units.

    Args:
        fits: the members (each with ``kernel``, ``hyperparameters``, ``noise`` in
            normalised units and a normalisation, all fitted to the same ``X, y``).
        X, y: the training data the fits were made on (original units).
        X_new: ``(T, d)`` test inputs.
        chunk: test points per evaluation.
        device: where the kernel matrices and factors are computed (default: the device
            of ``X_new`` when it is a tensor, else the CPU); the results are on the CPU.

    Returns:
        ``(means (M, T), variances (M, T))`` float64 on the CPU, NaN rows for members whose matrix
        could not be factorised; ``None`` when the fits do not expose what this needs
        (the caller then asks each member for its predictive).
    """
    norm = normalisation_of(fits[0]) if fits else None
    if norm is None or not all(hasattr(f, "hyperparameters") for f in fits):
        return None
    if device is None:
        device = X_new.device if isinstance(X_new, Tensor) else "cpu"
    dev = torch.device(device)

    def host(t: Any) -> Tensor:
        return torch.as_tensor(t, dtype=torch.float64).cpu()

    Xn = norm.transform_x(host(X)).to(dev)
    yn = norm.transform_y(host(y).reshape(-1)).to(dev)
    Xq = host(X_new)
    Xq = norm.transform_x(Xq[:, None] if Xq.ndim == 1 else Xq).to(dev)
    names = sorted({s for f in fits for a in f.kernel.dims for s in a}, key=symbol_sort_key)
    vocab = Vocabulary(tuple(names), "ensemble")
    symbols_np, mask_np = encode([f.kernel for f in fits], vocab)
    symbols, mask = torch.as_tensor(symbols_np, device=dev), torch.as_tensor(mask_np, device=dev)
    M, D, L = symbols.shape
    P = max(len(base_symbol(n).params) for n in names)
    theta = _params(fits, D, L, P).to(dev)
    noise = torch.tensor([float(f.noise) for f in fits], dtype=torch.float64, device=dev)
    n = Xn.shape[0]
    Xb = Xn.expand(M, n, D)
    K = kernel_matrix_dimwise(Xb, Xb, symbols, mask, theta, vocab)
    post = Posterior.dense(K, yn.expand(M, n), noise)
    means, variances = [], []
    for start in range(0, Xq.shape[0], chunk):
        Xc = Xq[start : start + chunk].expand(M, -1, D)
        Ks = kernel_matrix_dimwise(Xb, Xc, symbols, mask, theta, vocab)  # (M, n, t)
        kss = kernel_diag_dimwise(Xc, symbols, mask, theta, vocab)
        m_c, v_c = post.predict(Ks, kss, include_noise=True)  # NaN rows where failed
        means.append(m_c)
        variances.append(v_c)
    mean, var = torch.cat(means, 1), torch.cat(variances, 1)
    return norm.unnormalize_predictive(mean.cpu(), var.cpu())
