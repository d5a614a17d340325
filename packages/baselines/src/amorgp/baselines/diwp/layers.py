"""The layers of a deep inverse Wishart process, batched over ``S`` samples.

Conventions (those of :class:`~amorgp.diff_linalg.InverseWishart`): ``G ~ W^-1(Psi, nu)``
on ``P x P`` matrices has density ``prop. |G|^{-(nu+P+1)/2} exp(-tr(Psi G^-1) / 2)`` and
mean ``Psi / (nu - P - 1)``.  Points are split into the inducing points ``i`` (``P_i`` of
them, whose Gram block is sampled from the approximate posterior) and other points ``t``
(training or test), of which only the cross block ``G_ti`` and the diagonal ``g_tt`` are
ever formed (:class:`~amorgp.baselines.gram_kernels.GramBlocks`).

* :func:`input_gram`: ``G^1 = X~ Omega X~^T / N_0`` from a sample of ``Omega``.
* :func:`sample_inducing_gram`: ``G_ii ~ Q = W^-1(delta K_ii + V V^T, delta + gamma + P_i + 1)``
  and the single-sample ``log P(G_ii | K_ii) - log Q(G_ii)`` with the prior
  ``W^-1(delta K_ii, delta + P_i + 1)``.
* :func:`sample_conditional`: the points ``t`` given ``G_ii``, one point at a time, from
  the prior conditional of the joint ``W^-1(delta K, delta + P + 1)``.
* :func:`sample_output` and :func:`output_conditional`: the Gaussian output layer with the
  pseudo-likelihood ``N(v | f_i, Lambda^-1)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from amorgp.baselines.gram_kernels import GramBlocks
from amorgp.diff_linalg import (
    InverseWishart,
    kl_inverse_wishart,
    multivariate_lgamma,
    robust_cholesky,
    sumlogdiag,
    syrk,
    trsm,
)

__all__ = [
    "PointNoise",
    "bartlett_log_prob",
    "bartlett_rsample",
    "conditional_dof",
    "draw_point_noise",
    "input_gram",
    "output_conditional",
    "output_log_ratio",
    "sample_conditional",
    "sample_inducing_gram",
    "sample_output",
]

_LOG2PI = math.log(2.0 * math.pi)
_TINY = 1e-12


class PointNoise(NamedTuple):
    """The standard random draws of one layer's conditional, for ``P_t`` points.

    Attributes:
        gamma: ``(S, P_t)`` standard gamma draws of shape ``conditional_dof / 2``.
        normal: ``(S, P_i, P_t)`` standard normal draws.
    """

    gamma: Tensor
    normal: Tensor


def conditional_dof(delta: Tensor, n_inducing: int) -> Tensor:
    """Degrees of freedom ``delta + P_i + 2`` of one point's Schur complement given ``G_ii``.

    For ``G ~ W^-1(Psi, nu)`` over the inducing points and one point ``t`` (``P = P_i + 1``,
    ``nu = delta + P + 1``), the Schur complement ``g_t.i = g_tt - G_ti G_ii^-1 G_it`` is
    ``W^-1_1(psi_t.i, nu)``, an inverse gamma of shape ``nu / 2 = (delta + P_i + 2) / 2``,
    independent of ``G_ii``.  The dof does not depend on how many points are sampled
    together: a diagonal element of ``W^-1_{P_t}(Psi_t.i, delta + P_i + P_t + 1)`` has the
    same law.  Using ``delta + P_i + P_t + 1`` for each point of a batch of ``P_t`` (the
    other reading of the published text) makes the moments depend on the batch size and
    disagree with the joint inverse Wishart (tested against direct joint draws).
    """
    return delta + n_inducing + 2.0


def input_gram(omega: Tensor, Xi: Tensor, Xt: Tensor) -> GramBlocks:
    """``G^1 = X Omega X^T / N_0`` on the blocks of inducing inputs ``Xi`` and points ``Xt``.

    Args:
        omega: ``(S, N_0, N_0)`` samples of ``Omega``.
        Xi: ``(P_i, N_0)`` scaled inducing inputs.
        Xt: ``(P_t, N_0)`` scaled inputs of the other points.
    """
    n0 = omega.shape[-1]
    Oi = omega @ Xi.mT  # (S, N0, Pi)
    return GramBlocks(Xi @ Oi / n0, (Xt @ Oi) / n0, ((Xt @ omega) * Xt).sum(-1) / n0)


def sample_inducing_gram(
    K_ii: Tensor,
    delta: Tensor,
    gamma: Tensor,
    V: Tensor,
    generator: torch.Generator | None,
    sample_shape: tuple[int, ...] = (),
    *,
    analytic_kl: bool = False,
) -> tuple[Tensor, Tensor]:
    """One draw of ``G_ii ~ Q`` per batch element and ``log P(G_ii | K_ii) - log Q(G_ii)``.

    ``Q = W^-1(delta K_ii + V V^T, delta + gamma + P + 1)`` and the prior
    ``P = W^-1(delta K_ii, delta + P + 1)`` (mean ``K_ii``).  Sampled by the Bartlett
    decomposition, reparameterised (:func:`bartlett_rsample`, the draws of
    :meth:`~amorgp.diff_linalg.InverseWishart.rsample`); both log densities at the sample
    come from its Bartlett factor (:func:`bartlett_log_prob`), equal to
    :meth:`~amorgp.diff_linalg.InverseWishart.log_prob` without factoring ``G_ii``.

    Args:
        K_ii: ``(..., P, P)`` kernel of the previous layer on the inducing block (or ``I``).
        delta, gamma: positive scalars (tensors).
        V: ``(P, P)`` variational factor.
        sample_shape: extra leading sample dimensions (the input layer's ``(S,)``).
        analytic_kl: return ``-KL(Q || P)`` in closed form
            (:func:`~amorgp.diff_linalg.kl_inverse_wishart`), the expectation of the
            single-sample log ratio over ``G_ii``, instead of the single-sample ratio.

    Returns:
        ``G_ii (*sample_shape, ..., P, P)`` and the log ratio ``(*sample_shape, ...)``.
    """
    P = K_ii.shape[-1]
    prior = InverseWishart(delta * K_ii, delta + P + 1.0)
    q = InverseWishart(delta * K_ii + V @ V.mT, delta + gamma + P + 1.0)
    G, A = bartlett_rsample(q, sample_shape, generator)
    if analytic_kl:
        return G, (-kl_inverse_wishart(q, prior)).expand(G.shape[:-2])
    return G, bartlett_log_prob(prior, q, A) - bartlett_log_prob(q, q, A)


def bartlett_rsample(
    q: InverseWishart, sample_shape: tuple[int, ...], generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """``G ~ q = W^-1(Psi, nu)`` and its Bartlett factor ``A``: ``G = (L_psi A^-T)(L_psi A^-T)^T``.

    The draws of :meth:`~amorgp.diff_linalg.InverseWishart.rsample` in the same order
    (the same generator gives the same ``G``): ``A`` lower triangular with
    ``A_jj = sqrt(c_j)``, ``c_j ~ chi^2(nu - j + 1)`` (implicit reparameterisation
    gradients, so differentiable in ``nu``) and standard normals below the diagonal.

    Returns:
        ``G`` and ``A``, each ``(*sample_shape, *q.batch_shape, P, P)``.
    """
    p = q.p
    shape = (*sample_shape, *q.batch_shape)
    dt, dev = q.psi.dtype, q.psi.device
    conc = 0.5 * (q.df.unsqueeze(-1) - torch.arange(p, dtype=dt, device=dev))
    chi2 = 2.0 * torch._standard_gamma(conc.expand(*shape, p).contiguous(), generator=generator)
    z = torch.randn(*shape, p, p, dtype=dt, device=dev, generator=generator).tril(-1)
    A = z + torch.diag_embed(chi2.sqrt())
    T = trsm(A, q.scale_tril.expand(*shape, p, p), transpose=True, rightside=True)
    return syrk(T), A


def bartlett_log_prob(d: InverseWishart, q: InverseWishart, A: Tensor) -> Tensor:
    """``log d(G)`` at ``G = (L_q A^-T)(L_q A^-T)^T`` (:func:`bartlett_rsample` of ``q``).

    With ``G^-1 = L_q^-T A A^T L_q^-1``: ``log|G| / 2 = sum log diag L_q - sum log diag A``
    and ``tr(Psi_d G^-1) = ||A^T L_q^-1 L_d||_F^2`` (``= ||A||_F^2`` when ``d`` is ``q``),
    so no factorisation of ``G`` is needed; the rest is the density of
    :class:`~amorgp.diff_linalg.InverseWishart`.
    """
    p = d.p
    half_logdet = sumlogdiag(q.scale_tril) - sumlogdiag(A)
    if d is q:
        tr = A.pow(2).sum((-2, -1))
    else:
        tr = (A.mT @ trsm(q.scale_tril, d.scale_tril)).pow(2).sum((-2, -1))
    return (
        d.df * sumlogdiag(d.scale_tril)
        - 0.5 * d.df * p * math.log(2.0)
        - multivariate_lgamma(0.5 * d.df, p)
        - (d.df + p + 1) * half_logdet
        - 0.5 * tr
    )


def draw_point_noise(
    delta: Tensor, n_samples: int, n_inducing: int, n_points: int, generator: torch.Generator
) -> PointNoise:
    """The standard draws of one layer's conditional (:func:`sample_conditional`).

    The ``(S, P_i, P_t)`` standard normals are drawn in float32 and widened to ``delta``'s
    dtype (several times faster than float64 draws on a CPU, the largest draw of a
    training step); the algebra that uses them stays in ``delta``'s dtype.
    """
    alpha = (0.5 * conditional_dof(delta, n_inducing)).expand(n_samples, n_points)
    z = torch.randn(n_samples, n_inducing, n_points, generator=generator, dtype=torch.float32)
    return PointNoise(
        torch._standard_gamma(alpha.contiguous(), generator=generator), z.to(delta.dtype)
    )


def sample_conditional(
    K: GramBlocks, L_ii: Tensor, G_ii: Tensor, delta: Tensor, noise: PointNoise
) -> GramBlocks:
    """Each point ``t`` given the inducing block, from the prior conditional of the joint.

    With ``Psi = delta K``, ``k_t.i = k_tt - k_ti K_ii^-1 k_it`` and
    :func:`conditional_dof` ``nu_c = delta + P_i + 2``:

    .. math::

        g_{t.i} \\sim \\mathrm{InvGamma}(\\nu_c / 2,\\ \\delta k_{t.i} / 2), \\qquad
        G_{ii}^{-1} G_{it} \\mid g_{t.i} \\sim
            \\mathcal N(K_{ii}^{-1} k_{it},\\ g_{t.i} (\\delta K_{ii})^{-1}),

        G_{it} = G_{ii} (G_{ii}^{-1} G_{it}), \\qquad
        g_{tt} = g_{t.i} + G_{ti} G_{ii}^{-1} G_{it} ,

    the Schur-complement (Bartlett) factorisation of ``W^-1(Psi, nu)``.  Every point is
    sampled independently (cost linear in ``P_t``).

    Args:
        K: kernel blocks of the previous layer: ``ii (S, P_i, P_i)``, ``ti (S, P_t, P_i)``,
            ``tt (S, P_t)``.
        L_ii: ``(S, P_i, P_i)`` Cholesky factor of ``K.ii``.
        G_ii: ``(S, P_i, P_i)`` the sampled inducing block.
        delta: the layer's positive scalar ``delta``.
        noise: the standard draws (:func:`draw_point_noise`).

    Returns:
        The Gram blocks ``(G_ii, G_ti, g_tt)`` of the layer.
    """
    A = trsm(L_ii, K.ti.mT)  # (S, Pi, Pt): L^-1 K_it
    k_ti = (K.tt - A.pow(2).sum(-2)).clamp_min(_TINY * K.tt)
    g = 0.5 * delta * k_ti / noise.gamma  # inverse gamma, scale delta k / 2
    B = trsm(L_ii, A + (g / delta).sqrt()[:, None, :] * noise.normal, transpose=True)
    G_it = G_ii @ B
    return GramBlocks(G_ii, G_it.mT, g + (B * G_it).sum(-2))


def _pseudo_factor(K_ii: Tensor, lam: Tensor) -> Tensor:
    """Cholesky factor of ``B = I + Lambda^1/2 K_ii Lambda^1/2`` (well conditioned)."""
    sl = lam.sqrt()
    eye = torch.eye(K_ii.shape[-1], dtype=K_ii.dtype, device=K_ii.device)
    return robust_cholesky(sl[:, None] * K_ii * sl[None, :] + eye).L


def _log_ratio(LB: Tensor, f: Tensor, v: Tensor, lam: Tensor) -> Tensor:
    """``log N(v | 0, K + Lambda^-1) - log N(v | f, Lambda^-1)`` from the factor of ``B``."""
    S, P = f.shape
    a = trsm(LB, (v * lam.sqrt()).expand(S, P)[..., None])[..., 0]
    logdet = 2.0 * LB.diagonal(dim1=-2, dim2=-1).log().sum(-1) - lam.log().sum()
    log_ev = -0.5 * (a.pow(2).sum(-1) + logdet + P * _LOG2PI)
    log_pl = 0.5 * (lam.log().sum() - P * _LOG2PI) - 0.5 * (lam * (v - f) ** 2).sum(-1)
    return log_ev - log_pl


def sample_output(
    K_ii: Tensor, L_ii: Tensor, v: Tensor, lam: Tensor, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """``f_i ~ Q(f_i) prop. N(f_i | 0, K_ii) N(v | f_i, Lambda^-1)`` and ``log P(f_i) - log Q(f_i)``.

    Sampled by Matheron's rule, ``f = f_0 + K (K + Lambda^-1)^-1 (v - f_0 - e)`` with
    ``f_0 ~ N(0, K)``, ``e ~ N(0, Lambda^-1)``; by Bayes' rule
    ``log P(f) - log Q(f) = log N(v | 0, K + Lambda^-1) - log N(v | f, Lambda^-1)``
    (no inverse of ``K``: only ``B = I + Lambda^1/2 K Lambda^1/2`` is factored).

    Args:
        K_ii: ``(S, P, P)``; L_ii: its Cholesky factor; v, lam: ``(P,)`` pseudo-data and
            positive precisions.

    Returns:
        ``f_i (S, P)`` and the log ratio ``(S,)``.
    """
    S, P = K_ii.shape[0], K_ii.shape[-1]
    z = torch.randn(S, P, 2, generator=generator, dtype=K_ii.dtype)
    f0 = (L_ii @ z[..., :1])[..., 0]
    sl = lam.sqrt()
    LB = _pseudo_factor(K_ii, lam)
    r = (v - f0 - z[..., 1] / sl) * sl  # Lambda^1/2 (v - f0 - e)
    w = trsm(LB, trsm(LB, r[..., None]), transpose=True)[..., 0] * sl
    f = f0 + (K_ii @ w[..., None])[..., 0]
    return f, _log_ratio(LB, f, v, lam)


def output_log_ratio(K_ii: Tensor, f: Tensor, v: Tensor, lam: Tensor) -> Tensor:
    """``log P(f_i | K_ii) - log Q(f_i)`` for given ``f_i (S, P)`` (see :func:`sample_output`)."""
    return _log_ratio(_pseudo_factor(K_ii, lam), f, v, lam)


def output_conditional(K: GramBlocks, L_ii: Tensor, f_i: Tensor) -> tuple[Tensor, Tensor]:
    """``f_t | f_i ~ N(k_ti K_ii^-1 f_i, k_tt - k_ti K_ii^-1 k_it)``, per point.

    Returns:
        Mean and variance, each ``(S, P_t)`` (the variance clamped at 0).
    """
    A = trsm(L_ii, K.ti.mT)  # (S, Pi, Pt)
    c = trsm(L_ii, f_i[..., None])  # (S, Pi, 1)
    mean = (A * c).sum(-2)
    var = (K.tt - A.pow(2).sum(-2)).clamp_min(0.0)
    return mean, var
