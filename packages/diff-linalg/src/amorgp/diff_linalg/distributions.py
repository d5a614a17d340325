"""Inverse Wishart distribution and multivariate gamma functions.

Written with the operators of :mod:`amorgp.diff_linalg.operators`, for the
deep inverse Wishart process baseline.  Conventions: ``Sigma ~ IW(Psi, nu)``
on ``p x p`` symmetric positive definite matrices has density::

    p(Sigma) = |Psi|^{nu/2} / (2^{nu p/2} Gamma_p(nu/2))
               |Sigma|^{-(nu+p+1)/2} exp(-tr(Psi Sigma^{-1}) / 2),   nu > p - 1,

(the parameterisation of ``scipy.stats.invwishart``); ``Sigma^{-1} ~
Wishart(Psi^{-1}, nu)`` and ``E[Sigma] = Psi / (nu - p - 1)`` for ``nu > p + 1``.
"""

from __future__ import annotations

import math

import torch

from amorgp.diff_linalg._validation import check_finite, check_square, check_tensor
from amorgp.diff_linalg.operators import potrf, potri, sumlogdiag, syrk, trsm

__all__ = [
    "InverseWishart",
    "kl_inverse_wishart",
    "multivariate_digamma",
    "multivariate_lgamma",
]


def _half_offsets(p: int, like: torch.Tensor) -> torch.Tensor:
    """``(1 - j) / 2`` for ``j = 1..p``, shape ``(p,)``."""
    return (1.0 - torch.arange(1, p + 1, dtype=like.dtype, device=like.device)) / 2.0


def multivariate_lgamma(a: torch.Tensor, p: int) -> torch.Tensor:
    """Multivariate log-gamma ``log Gamma_p(a) = p(p-1)/4 log(pi) + sum_{j=1}^p lgamma(a + (1-j)/2)``.

    Args:
        a: shape ``(...)``, ``a > (p - 1) / 2``.
        p: dimension (``>= 1``).

    Returns:
        Shape ``(...)``; differentiable in ``a``.
    """
    a = check_tensor(a, "a")
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    if bool((a <= (p - 1) / 2).any()):
        raise ValueError(f"multivariate_lgamma needs a > (p - 1)/2 = {(p - 1) / 2}")
    return p * (p - 1) / 4.0 * math.log(math.pi) + torch.lgamma(
        a.unsqueeze(-1) + _half_offsets(p, a)
    ).sum(-1)


def multivariate_digamma(a: torch.Tensor, p: int) -> torch.Tensor:
    """Multivariate digamma ``psi_p(a) = d/da log Gamma_p(a) = sum_{j=1}^p digamma(a + (1-j)/2)``.

    Args:
        a: shape ``(...)``, ``a > (p - 1) / 2``.
        p: dimension (``>= 1``).

    Returns:
        Shape ``(...)``.
    """
    a = check_tensor(a, "a")
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    if bool((a <= (p - 1) / 2).any()):
        raise ValueError(f"multivariate_digamma needs a > (p - 1)/2 = {(p - 1) / 2}")
    return torch.digamma(a.unsqueeze(-1) + _half_offsets(p, a)).sum(-1)


class InverseWishart:
    """Inverse Wishart distribution ``IW(Psi, nu)`` over ``p x p`` SPD matrices.

    Args:
        psi: scale matrices, shape ``(..., p, p)``, symmetric positive definite.
        df: degrees of freedom ``nu > p - 1``, shape broadcastable to ``(...)``.

    Raises:
        ValueError: if ``psi`` is not square/finite/positive definite or ``df <= p - 1``.
    """

    def __init__(self, psi: torch.Tensor, df: torch.Tensor | float) -> None:
        psi = check_square(psi, "psi")
        check_finite(psi, "psi")
        self.p = psi.shape[-1]
        df_t = torch.as_tensor(df, dtype=psi.dtype, device=psi.device)
        if bool((df_t <= self.p - 1).any()):
            raise ValueError(f"df must exceed p - 1 = {self.p - 1}")
        self.batch_shape = torch.broadcast_shapes(psi.shape[:-2], df_t.shape)
        self.psi = psi.expand(*self.batch_shape, self.p, self.p)
        self.df = df_t.expand(self.batch_shape)
        self.scale_tril = potrf(self.psi)

    @property
    def mean(self) -> torch.Tensor:
        """``E[Sigma] = Psi / (nu - p - 1)`` (NaN where ``nu <= p + 1``)."""
        denom = self.df - self.p - 1
        denom = torch.where(denom > 0, denom, torch.full_like(denom, math.nan))
        return self.psi / denom[..., None, None]

    def log_prob(self, sigma: torch.Tensor) -> torch.Tensor:
        """Log density of SPD matrices ``sigma`` of shape ``(..., p, p)`` (formula in the class docstring)."""
        sigma = check_square(sigma, "sigma")
        if sigma.shape[-1] != self.p:
            raise ValueError(f"sigma must be {self.p} x {self.p}, got {tuple(sigma.shape)}")
        nu, p = self.df, self.p
        L_sigma = potrf(sigma)
        # tr(Psi Sigma^{-1}) = ||L_sigma^{-1} L_psi||_F^2
        tr = trsm(L_sigma, self.scale_tril).pow(2).sum((-2, -1))
        return (
            nu * sumlogdiag(self.scale_tril)
            - 0.5 * nu * p * math.log(2.0)
            - multivariate_lgamma(0.5 * nu, p)
            - (nu + p + 1) * sumlogdiag(L_sigma)
            - 0.5 * tr
        )

    def rsample(
        self, sample_shape: tuple[int, ...] = (), *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Reparameterised samples by the Bartlett decomposition.

        ``A`` is lower triangular with ``A_ii = sqrt(c_i)``,
        ``c_i ~ chi^2(nu - i + 1)`` (``i = 1..p``) and ``A_ij ~ N(0, 1)`` below
        the diagonal, so ``A A^T ~ Wishart(I, nu)``; then
        ``Sigma = (L_psi A^{-T})(L_psi A^{-T})^T ~ IW(Psi, nu)``.  The
        chi-square draws use implicit reparameterisation gradients, so samples
        are differentiable in ``df`` as well as in ``psi``.

        Args:
            sample_shape: leading sample dimensions.
            generator: random number generator.

        Returns:
            Samples of shape ``(*sample_shape, *batch_shape, p, p)``.
        """
        p = self.p
        shape = (*sample_shape, *self.batch_shape)
        dev, dt = self.psi.device, self.psi.dtype
        conc = 0.5 * (self.df.unsqueeze(-1) - torch.arange(p, dtype=dt, device=dev))
        conc = conc.expand(*shape, p)
        chi2 = 2.0 * torch._standard_gamma(conc.contiguous(), generator=generator)
        z = torch.randn(*shape, p, p, dtype=dt, device=dev, generator=generator).tril(-1)
        A = z + torch.diag_embed(chi2.sqrt())
        T = trsm(A, self.scale_tril.expand(*shape, p, p), transpose=True, rightside=True)
        return syrk(T)

    def sample(
        self, sample_shape: tuple[int, ...] = (), *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Samples without gradient (see :meth:`rsample`)."""
        with torch.no_grad():
            return self.rsample(sample_shape, generator=generator)


def kl_inverse_wishart(q: InverseWishart, p: InverseWishart) -> torch.Tensor:
    """Closed-form ``KL(q || p)`` between inverse Wisharts ``IW(Psi_q, nu_q)``, ``IW(Psi_p, nu_p)``.

    KL is invariant under ``Sigma -> Sigma^{-1}``, so it equals the KL between
    ``Wishart(Psi_q^{-1}, nu_q)`` and ``Wishart(Psi_p^{-1}, nu_p)``::

        KL = nu_p/2 (log|Psi_q| - log|Psi_p|) + nu_q/2 (tr(Psi_p Psi_q^{-1}) - p)
             + log Gamma_p(nu_p/2) - log Gamma_p(nu_q/2)
             + (nu_q - nu_p)/2 psi_p(nu_q/2).

    Returns:
        Shape: the broadcast batch shape of ``q`` and ``p``.
    """
    if q.p != p.p:
        raise ValueError(f"dimensions differ: {q.p} and {p.p}")
    d = q.p
    logdet_q = 2.0 * sumlogdiag(q.scale_tril)
    logdet_p = 2.0 * sumlogdiag(p.scale_tril)
    tr = (p.psi * potri(q.scale_tril)).sum((-2, -1))
    return (
        0.5 * p.df * (logdet_q - logdet_p)
        + 0.5 * q.df * (tr - d)
        + multivariate_lgamma(0.5 * p.df, d)
        - multivariate_lgamma(0.5 * q.df, d)
        + 0.5 * (q.df - p.df) * multivariate_digamma(0.5 * q.df, d)
    )
