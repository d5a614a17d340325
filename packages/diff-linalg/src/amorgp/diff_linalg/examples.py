"""Machine-learning examples of Seeger et al. written with the differentiable operators.

* :func:`sparse_gp_titsias_bound`: collapsed variational lower bound of a sparse GP;
* :func:`blr_log_evidence`: Bayesian linear regression evidence, via ``potrf o syrk``
  or via the LQ factorisation ``gelqf([I, sqrt(alpha) X^T])``;
* :func:`kalman_nll`: negative log-likelihood of a linear Gaussian state-space model
  by the Kalman filter with the Joseph-form covariance update.

All functions are batched over leading dimensions and differentiable.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from amorgp.diff_linalg._validation import check_finite, check_square, check_tensor
from amorgp.diff_linalg.operators import gelqf, potrf, sumlogdiag, syrk, trsm

__all__ = ["blr_log_evidence", "kalman_nll", "sparse_gp_titsias_bound"]

_LOG_2PI = math.log(2.0 * math.pi)


def sparse_gp_titsias_bound(
    Kuu: torch.Tensor,
    Kuf: torch.Tensor,
    kff_diag: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor | float,
) -> torch.Tensor:
    """Titsias' collapsed evidence lower bound of a sparse GP with ``m`` inducing points.

    ``F = log N(y | 0, Q_ff + sigma^2 I) - tr(K_ff - Q_ff) / (2 sigma^2)``,
    ``Q_ff = K_fu K_uu^{-1} K_uf``, computed in ``O(n m^2)``::

        L_u = potrf(K_uu),  A = trsm(L_u, K_uf) / sigma,  L_B = potrf(I + syrk(A)),
        c = trsm(L_B, A y) / sigma,
        F = -n/2 log(2 pi sigma^2) - sumlogdiag(L_B) - y^T y / (2 sigma^2) + c^T c / 2
            - sum(k_ff) / (2 sigma^2) + ||A||_F^2 / 2.

    Args:
        Kuu: inducing covariance, shape ``(..., m, m)``.
        Kuf: cross covariance, shape ``(..., m, n)``.
        kff_diag: prior variances at the data, shape ``(..., n)``.
        y: targets, shape ``(..., n)``.
        noise: noise variance ``sigma^2``, shape ``(...)`` or a float.

    Returns:
        The bound, shape ``(...)``.
    """
    Kuu = check_square(Kuu, "Kuu")
    Kuf = check_tensor(Kuf, "Kuf", min_dim=2)
    m, n = Kuf.shape[-2:]
    if Kuu.shape[-1] != m or y.shape[-1] != n or kff_diag.shape[-1] != n:
        raise ValueError(
            f"shapes do not match: Kuu {tuple(Kuu.shape)}, Kuf {tuple(Kuf.shape)}, "
            f"kff_diag {tuple(kff_diag.shape)}, y {tuple(y.shape)}"
        )
    s2 = torch.as_tensor(noise, dtype=Kuf.dtype, device=Kuf.device)
    if bool((s2 <= 0).any()):
        raise ValueError("noise variance must be positive")
    sig = s2.sqrt()[..., None, None]
    Lu = potrf(Kuu)
    A = trsm(Lu, Kuf) / sig
    eye = torch.eye(m, dtype=Kuf.dtype, device=Kuf.device)
    LB = potrf(eye + syrk(A))
    c = trsm(LB, A @ y.unsqueeze(-1)).squeeze(-1) / sig[..., 0]
    return (
        -0.5 * n * (_LOG_2PI + s2.log())
        - sumlogdiag(LB)
        - 0.5 * (y * y).sum(-1) / s2
        + 0.5 * (c * c).sum(-1)
        - 0.5 * kff_diag.sum(-1) / s2
        + 0.5 * A.pow(2).sum((-2, -1))
    )


def blr_log_evidence(
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    prior_var: torch.Tensor | float,
    noise: torch.Tensor | float,
    method: Literal["potrf", "gelqf"] = "potrf",
) -> torch.Tensor:
    """Log evidence ``log N(y | 0, sigma^2 I + tau^2 X X^T)`` of Bayesian linear regression.

    Model: ``y = X w + eps``, ``w ~ N(0, tau^2 I_d)``, ``eps ~ N(0, sigma^2 I_n)``.
    With ``alpha = tau^2 / sigma^2`` and ``L L^T = I_d + alpha X^T X`` (Sylvester
    and Woodbury)::

        log det = n log sigma^2 + 2 sumlogdiag(L),
        quad    = (y^T y - alpha ||L^{-1} X^T y||^2) / sigma^2,
        log p(y) = -1/2 (quad + log det + n log 2 pi).

    ``method="potrf"`` computes ``L = potrf(I + alpha syrk(X^T))``;
    ``method="gelqf"`` takes ``L`` from the LQ factorisation of the
    ``d x (d + n)`` matrix ``[I_d, sqrt(alpha) X^T]`` (no Gram matrix formed,
    better conditioned).

    Args:
        X: design matrices, shape ``(..., n, d)``.
        y: targets, shape ``(..., n)``.
        prior_var: ``tau^2``, shape ``(...)`` or float.
        noise: ``sigma^2``, shape ``(...)`` or float.
        method: ``"potrf"`` or ``"gelqf"``.

    Returns:
        Shape ``(...)``.
    """
    X = check_tensor(X, "X", min_dim=2)
    n, d = X.shape[-2:]
    if y.shape[-1] != n:
        raise ValueError(
            f"y must have {n} entries to match X {tuple(X.shape)}, got {tuple(y.shape)}"
        )
    tau2 = torch.as_tensor(prior_var, dtype=X.dtype, device=X.device)
    s2 = torch.as_tensor(noise, dtype=X.dtype, device=X.device)
    if bool((tau2 <= 0).any()) or bool((s2 <= 0).any()):
        raise ValueError("prior_var and noise must be positive")
    alpha = (tau2 / s2)[..., None, None]
    eye = torch.eye(d, dtype=X.dtype, device=X.device)
    if method == "potrf":
        L = potrf(eye + alpha * syrk(X, transpose=True))
    elif method == "gelqf":
        M = torch.cat([eye.expand(*X.shape[:-2], d, d), alpha.sqrt() * X.mT], dim=-1)
        L = gelqf(M).L
    else:
        raise ValueError(f"unknown method {method!r}; expected 'potrf' or 'gelqf'")
    c = trsm(L, X.mT @ y.unsqueeze(-1)).squeeze(-1)
    quad = ((y * y).sum(-1) - alpha[..., 0, 0] * (c * c).sum(-1)) / s2
    logdet = n * s2.log() + 2.0 * sumlogdiag(L)
    return -0.5 * (quad + logdet + n * _LOG_2PI)


def kalman_nll(
    y: torch.Tensor,
    F: torch.Tensor,
    H: torch.Tensor,
    Q: torch.Tensor,
    R: torch.Tensor,
    m0: torch.Tensor,
    P0: torch.Tensor,
) -> torch.Tensor:
    """Negative log-likelihood ``-log p(y_1, ..., y_T)`` of a linear Gaussian state-space model.

    Model: ``x_1 ~ N(m0, P0)``, ``x_t = F x_{t-1} + q_t``, ``q_t ~ N(0, Q)``,
    ``y_t = H x_t + r_t``, ``r_t ~ N(0, R)``.  Kalman filter with one Cholesky
    of the innovation covariance per step::

        S = H P^- H^T + R = L_S L_S^T,  v = y_t - H m^-,
        nll += 1/2 ||L_S^{-1} v||^2 + sumlogdiag(L_S) + k/2 log 2 pi,
        K = P^- H^T S^{-1},  m = m^- + K v,
        P = (I - K H) P^- (I - K H)^T + K R K^T      (Joseph form).

    Args:
        y: observations, shape ``(..., T, k)``.
        F: transition, shape ``(..., s, s)``.
        H: observation matrix, shape ``(..., k, s)``.
        Q: process noise covariance, shape ``(..., s, s)``.
        R: observation noise covariance, shape ``(..., k, k)``.
        m0: initial mean, shape ``(..., s)``.
        P0: initial covariance, shape ``(..., s, s)``.

    Returns:
        Shape ``(...)``.
    """
    y = check_tensor(y, "y", min_dim=2)
    F = check_square(F, "F")
    Q = check_square(Q, "Q")
    R = check_square(R, "R")
    P0 = check_square(P0, "P0")
    T, k = y.shape[-2:]
    s = F.shape[-1]
    if H.shape[-2:] != (k, s) or Q.shape[-1] != s or R.shape[-1] != k or P0.shape[-1] != s:
        raise ValueError(
            f"shapes do not match: y {tuple(y.shape)}, F {tuple(F.shape)}, H {tuple(H.shape)}, "
            f"Q {tuple(Q.shape)}, R {tuple(R.shape)}, P0 {tuple(P0.shape)}"
        )
    if m0.shape[-1] != s:
        raise ValueError(f"m0 must have {s} entries, got shape {tuple(m0.shape)}")
    for name, arr in (("y", y), ("F", F), ("H", H), ("Q", Q), ("R", R), ("m0", m0), ("P0", P0)):
        check_finite(arr, name)
    eye = torch.eye(s, dtype=y.dtype, device=y.device)
    m, P = m0, P0
    batch = torch.broadcast_shapes(y.shape[:-2], F.shape[:-2], m0.shape[:-1])
    nll = torch.zeros(batch, dtype=y.dtype, device=y.device)
    for t in range(T):  # the filter is sequential in time
        if t > 0:
            m = (F @ m.unsqueeze(-1)).squeeze(-1)
            P = F @ P @ F.mT + Q
        S = H @ P @ H.mT + R
        LS = potrf(0.5 * (S + S.mT))
        v = y[..., t, :] - (H @ m.unsqueeze(-1)).squeeze(-1)
        w = trsm(LS, v.unsqueeze(-1))
        nll = nll + 0.5 * w.pow(2).sum((-2, -1)) + sumlogdiag(LS) + 0.5 * k * _LOG_2PI
        # K = P H^T S^{-1} = (S^{-1} H P)^T, S^{-1} by two triangular solves
        Kt = trsm(LS, trsm(LS, H @ P), transpose=True)
        K = Kt.mT
        m = m + (K @ v.unsqueeze(-1)).squeeze(-1)
        IKH = eye - K @ H
        P = IKH @ P @ IKH.mT + K @ R @ K.mT
    return nll
