"""The deep inverse Wishart process (Aitchison, Yang & Ober, "Deep kernel processes", 2021).

Prior, with ``N_0`` input dimensions, ``P`` points, Gram layers ``l = 1..L`` and a
Gram-matrix kernel ``K(.)`` (:mod:`amorgp.baselines.gram_kernels`):

.. math::

    \\Omega \\sim W^{-1}(\\delta_1 I, \\delta_1 + N_0 + 1), \\qquad
    G^1 = \\tilde X \\Omega \\tilde X^T / N_0, \\qquad
    G^l \\mid G^{l-1} \\sim W^{-1}(\\delta_l K(G^{l-1}), \\delta_l + P + 1), \\qquad
    f \\sim \\mathcal N(0, K(G^L)), \\quad y \\sim \\mathcal N(f, \\sigma^2 I).

``L - 1`` is the number of hidden (inverse Wishart) layers.  The learned input scaling is
``X~ = sqrt(N_0) X / l_in`` with ARD lengthscales ``l_in (N_0,)``, so ``E[G^1] =
X diag(l_in^-2) X^T`` and, as every ``delta -> inf`` (the infinite-width, NNGP limit),
``G^l -> K(G^{l-1})``: with no hidden layer the model is a GP with the ARD kernel.
Kernel ``l`` (applied to ``G^l``) has lengthscale 1 for ``l = 1`` (the input scaling
plays that role) and a learned one above; its variance is 1 except for the top kernel,
whose variance ``s^2`` is learned.  Every kernel matrix gets ``jitter * variance`` added
to its diagonal (part of the model).

Approximate posterior (doubly stochastic, global inducing points ``Z (P_i, N_0)``): on the
inducing block ``Q(Omega) = W^-1(delta_1 I + V_1 V_1^T, delta_1 + gamma_1 + N_0 + 1)``,
``Q(G^l_ii | G^{l-1}_ii) = W^-1(delta_l K_ii + V_l V_l^T, delta_l + gamma_l + P_i + 1)``
and ``Q(f_i) prop. N(f_i | 0, K(G^L_ii)) N(v | f_i, Lambda^-1)`` (pseudo-data ``v``,
diagonal precision ``Lambda``); training and test points follow the prior conditional
given the inducing block (:func:`~amorgp.baselines.diwp.layers.sample_conditional`),
one point at a time.  The ELBO, estimated with ``S`` samples and single-sample log
ratios, is

.. math::

    \\sum_t E[\\log \\mathcal N(y_t \\mid f_t, \\sigma^2)]
    + \\log \\frac{P(\\Omega)}{Q(\\Omega)}
    + \\sum_{l \\ge 2} \\log \\frac{P(G^l_{ii} \\mid G^{l-1}_{ii})}{Q(G^l_{ii} \\mid G^{l-1}_{ii})}
    + \\log \\frac{P(f_i \\mid G^L_{ii})}{Q(f_i \\mid G^L_{ii})} ,

with the expectation over ``f_t | f_i`` Gaussian in closed form.  ``delta``, ``gamma``
and ``Lambda`` are ``exp`` of raw parameters; lengthscales, variances and the noise use
the shared :func:`~amorgp.kernel_grammar.positive` transform.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor, nn

from amorgp.baselines.diwp.layers import (
    PointNoise,
    draw_point_noise,
    input_gram,
    output_conditional,
    sample_conditional,
    sample_inducing_gram,
    sample_output,
)
from amorgp.baselines.gram_kernels import GramBlocks, GramKernel, gram_kernel
from amorgp.core.errors import OptionError
from amorgp.diff_linalg import robust_cholesky
from amorgp.kernel_grammar import ParamKind, positive, positive_inverse

__all__ = ["DIWP", "DIWPSettings", "InducingSample"]

_LOG2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class DIWPSettings:
    """Model and training settings (defaults: the paper's UCI setting).

    Attributes:
        n_hidden: hidden inverse Wishart layers (``L - 1``).
        n_inducing: inducing points ``P_i`` (a random subset of the training inputs at
            the start, then learned).
        kernel: the Gram-matrix kernel of every layer (``"SE"``, ``"MAT52"``, ``"RELU"``).
        iterations: Adam steps; the last ``late_iterations`` use ``lr_late``.
        lr, lr_late: Adam step sizes (``1e-2`` then ``1e-3``).
        late_iterations: steps at ``lr_late``.
        train_samples, test_samples: Monte Carlo samples per ELBO step / at prediction.
        batch_size: training points per step (``None``: all).
        delta_init, gamma_init: initial ``delta_l`` and ``gamma_l`` (every layer).
        learn_delta: optimise ``delta`` (else fixed at ``delta_init``).
        lengthscale_init, noise_init, variance_init: initial input lengthscales, noise
            variance and top-kernel variance (normalised units).
        v_init_scale: initial ``V_l = v_init_scale I``.
        lam_init: initial pseudo-likelihood precisions ``Lambda``; ``None``: ``n / (P_i
            noise_init)`` (each inducing point stands for ``n / P_i`` observations).
        jitter: relative diagonal jitter of every kernel matrix.
        analytic_kl: replace the single-sample ``log P - log Q`` of ``Omega`` and of each
            ``G^l_ii`` by ``-KL(Q || P)`` given the previous layer (closed form, the same
            expectation, less variance); the paper's estimator is the single sample.
        chunk_size: test points per chunk at prediction (memory ``S P_i chunk_size``).
    """

    n_hidden: int = 2
    n_inducing: int = 100
    kernel: str = "SE"
    iterations: int = 4000
    lr: float = 1e-2
    lr_late: float = 1e-3
    late_iterations: int = 1000
    train_samples: int = 10
    test_samples: int = 100
    batch_size: int | None = None
    delta_init: float = 50.0
    gamma_init: float = 1.0
    learn_delta: bool = True
    lengthscale_init: float = 1.0
    noise_init: float = 0.1
    variance_init: float = 1.0
    v_init_scale: float = 0.1
    lam_init: float | None = None
    jitter: float = 1e-6
    analytic_kl: bool = False
    chunk_size: int = 512
    _kernel: GramKernel = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_kernel", gram_kernel(self.kernel))
        ints = {
            "n_hidden": (self.n_hidden, 0),
            "n_inducing": (self.n_inducing, 1),
            "iterations": (self.iterations, 0),
            "late_iterations": (self.late_iterations, 0),
            "train_samples": (self.train_samples, 1),
            "test_samples": (self.test_samples, 1),
            "chunk_size": (self.chunk_size, 1),
        }
        for name, (value, low) in ints.items():
            if int(value) != value or value < low:
                raise OptionError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.batch_size is not None and self.batch_size < 1:
            raise OptionError(f"batch_size must be positive or None, got {self.batch_size}")
        if self.lam_init is not None and not self.lam_init > 0:
            raise OptionError(f"lam_init must be positive or None, got {self.lam_init}")
        for name in ("lr", "lr_late", "delta_init", "gamma_init", "lengthscale_init"):
            if not getattr(self, name) > 0:
                raise OptionError(f"{name} must be positive, got {getattr(self, name)}")
        if not (self.noise_init > 0 and self.variance_init > 0 and self.jitter > 0):
            raise OptionError("noise_init, variance_init and jitter must be positive")

    @classmethod
    def quick(cls, **overrides: object) -> DIWPSettings:
        """A small, fast configuration (tests, CI): 1 hidden layer, 16 inducing points,
        300 steps (the last 100 at ``lr_late``), 3 training and 30 test samples."""
        base: dict[str, object] = {
            "n_hidden": 1,
            "n_inducing": 16,
            "iterations": 300,
            "late_iterations": 100,
            "train_samples": 3,
            "test_samples": 30,
        }
        return cls(**{**base, **overrides})  # type: ignore[arg-type]

    @property
    def gram_kernel(self) -> GramKernel:
        return self._kernel


class InducingSample(NamedTuple):
    """``S`` joint samples of everything on the inducing block.

    Attributes:
        omega: ``(S, N_0, N_0)`` input-layer samples.
        grams: ``G^l_ii (S, P_i, P_i)``, ``l = 1..L``.
        kernels: ``K(G^l_ii)`` with jitter, ``l = 1..L``.
        factors: their Cholesky factors.
        f: ``(S, P_i)`` output-layer samples.
        log_ratio: ``(S,)`` the sum of the single-sample ``log P - log Q`` terms.
    """

    omega: Tensor
    grams: list[Tensor]
    kernels: list[Tensor]
    factors: list[Tensor]
    f: Tensor
    log_ratio: Tensor


def _raw(value: float | Tensor, kind: ParamKind, n: int = 1) -> nn.Parameter:
    v = torch.as_tensor(value, dtype=torch.float64).expand(n).clone()
    return nn.Parameter(positive_inverse(v, kind))


class DIWP(nn.Module):
    """A deep inverse Wishart process and its approximate posterior (module docstring).

    Args:
        Z: ``(P_i, N_0)`` initial inducing inputs (normalised units).
        v: ``(P_i,)`` initial pseudo-data (e.g. the targets at ``Z``).
        settings: model settings.
        n_data: training points (sets the default initial ``Lambda``, see
            :class:`DIWPSettings`); default ``P_i``.
    """

    def __init__(self, Z: Tensor, v: Tensor, settings: DIWPSettings, n_data: int | None = None):
        super().__init__()
        s = settings
        self.settings = s
        P, n0 = Z.shape
        L = s.n_hidden + 1
        f64 = torch.float64
        self.Z = nn.Parameter(Z.to(f64).clone())
        self.v = nn.Parameter(v.to(f64).clone())
        n = P if n_data is None else n_data
        lam0 = s.lam_init if s.lam_init is not None else n / (P * s.noise_init)
        self.log_lam = nn.Parameter(torch.full((P,), math.log(lam0), dtype=f64))
        self.raw_input_ls = _raw(s.lengthscale_init, ParamKind.LENGTHSCALE, n0)
        self.raw_layer_ls = _raw(1.0, ParamKind.LENGTHSCALE, L - 1)
        self.raw_variance = _raw(s.variance_init, ParamKind.VARIANCE)
        self.raw_noise = _raw(s.noise_init, ParamKind.NOISE)
        log_delta = torch.full((L,), math.log(s.delta_init), dtype=f64)
        self.log_delta = nn.Parameter(log_delta, requires_grad=s.learn_delta)
        self.log_gamma = nn.Parameter(torch.full((L,), math.log(s.gamma_init), dtype=f64))
        self.V = nn.ParameterList(
            [nn.Parameter(s.v_init_scale * torch.eye(n0, dtype=f64))]
            + [nn.Parameter(s.v_init_scale * torch.eye(P, dtype=f64)) for _ in range(L - 1)]
        )

    # -- constrained values -------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return self.settings.n_hidden + 1

    @property
    def input_lengthscales(self) -> Tensor:
        return positive(self.raw_input_ls, ParamKind.LENGTHSCALE)

    @property
    def noise(self) -> Tensor:
        return positive(self.raw_noise, ParamKind.NOISE)[0]

    @property
    def variance(self) -> Tensor:
        """The top kernel's variance ``s^2``."""
        return positive(self.raw_variance, ParamKind.VARIANCE)[0]

    @property
    def delta(self) -> Tensor:
        return self.log_delta.exp()

    @property
    def gamma(self) -> Tensor:
        return self.log_gamma.exp()

    @property
    def lam(self) -> Tensor:
        return self.log_lam.exp()

    def _kernel_params(self, layer: int) -> tuple[Tensor | float, Tensor | float]:
        """``(lengthscale, variance)`` of the kernel applied to ``G^layer`` (0-based)."""
        ls = 1.0 if layer == 0 else positive(self.raw_layer_ls, ParamKind.LENGTHSCALE)[layer - 1]
        var = self.variance if layer == self.n_layers - 1 else 1.0
        return ls, var

    def _scale(self, X: Tensor) -> Tensor:
        return X * math.sqrt(X.shape[-1]) / self.input_lengthscales

    def _kernel_ii(self, G_ii: Tensor, layer: int) -> Tensor:
        ls, var = self._kernel_params(layer)
        K = self.settings.gram_kernel.matrix(G_ii, ls, var)
        eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
        return K + self.settings.jitter * var * eye

    def _kernel_points(self, G: GramBlocks, layer: int) -> tuple[Tensor, Tensor]:
        """``K_ti (S, P_t, P_i)`` and ``diag K_tt (S, P_t)`` (with jitter) of layer ``layer``."""
        ls, var = self._kernel_params(layer)
        k = self.settings.gram_kernel
        d_i = G.ii.diagonal(dim1=-2, dim2=-1)
        return k.cross(G.tt, G.ti, d_i, ls, var), k.diag(G.tt, var) + self.settings.jitter * var

    # -- sampling -----------------------------------------------------------------------------
    def sample_inducing(self, n_samples: int, generator: torch.Generator) -> InducingSample:
        """``S`` samples of ``Omega``, ``G^l_ii`` and ``f_i`` from ``Q`` with their log ratio."""
        n0 = self.Z.shape[1]
        eye = torch.eye(n0, dtype=torch.float64)
        delta, gamma = self.delta, self.gamma
        kl = self.settings.analytic_kl
        omega, log_ratio = sample_inducing_gram(
            eye, delta[0], gamma[0], self.V[0], generator, (n_samples,), analytic_kl=kl
        )
        Zs = self._scale(self.Z)
        grams = [Zs @ omega @ Zs.mT / n0]
        kernels, factors = [], []
        for layer in range(1, self.n_layers):
            kernels.append(self._kernel_ii(grams[-1], layer - 1))
            factors.append(robust_cholesky(kernels[-1]).L)
            G, lr = sample_inducing_gram(
                kernels[-1], delta[layer], gamma[layer], self.V[layer], generator, analytic_kl=kl
            )
            grams.append(G)
            log_ratio = log_ratio + lr
        kernels.append(self._kernel_ii(grams[-1], self.n_layers - 1))
        factors.append(robust_cholesky(kernels[-1]).L)
        f, lr = sample_output(kernels[-1], factors[-1], self.v, self.lam, generator)
        return InducingSample(omega, grams, kernels, factors, f, log_ratio + lr)

    def draw_noise(
        self, n_samples: int, n_points: int, generator: torch.Generator
    ) -> list[PointNoise]:
        """The per-point standard draws of every hidden layer (see :meth:`sample_points`)."""
        P = self.Z.shape[0]
        return [
            draw_point_noise(self.delta[layer].detach(), n_samples, P, n_points, generator)
            for layer in range(1, self.n_layers)
        ]

    def sample_points(
        self, ind: InducingSample, X: Tensor, noise: list[PointNoise]
    ) -> tuple[Tensor, Tensor]:
        """``f_t | f_i`` at points ``X (P_t, N_0)``: mean and variance, each ``(S, P_t)``.

        Every point is conditioned on the inducing block alone (cost linear in ``P_t``);
        ``noise`` holds the standard draws of the hidden layers (:meth:`draw_noise`), so
        the same draws give the same result whether points are processed together or
        one chunk at a time.
        """
        G = input_gram(ind.omega, self._scale(self.Z), self._scale(X))
        delta = self.delta
        for layer in range(1, self.n_layers):
            k_ti, k_tt = self._kernel_points(G, layer - 1)
            K = GramBlocks(ind.kernels[layer - 1], k_ti, k_tt)
            G = sample_conditional(
                K, ind.factors[layer - 1], ind.grams[layer], delta[layer], noise[layer - 1]
            )
        k_ti, k_tt = self._kernel_points(G, self.n_layers - 1)
        K = GramBlocks(ind.kernels[-1], k_ti, k_tt)
        return output_conditional(K, ind.factors[-1], ind.f)

    def elbo(
        self,
        X: Tensor,
        y: Tensor,
        n_samples: int,
        generator: torch.Generator,
        n_total: int | None = None,
    ) -> Tensor:
        """The ELBO estimate (module docstring), averaged over ``n_samples`` samples.

        Args:
            X, y: ``(b, N_0)``, ``(b,)`` training points (a minibatch of ``n_total``).
            n_total: size of the full training set (the data term is scaled by ``n_total / b``).
        """
        ind = self.sample_inducing(n_samples, generator)
        noise = self.draw_noise(n_samples, X.shape[0], generator)
        mean, var = self.sample_points(ind, X, noise)
        s2 = self.noise
        ell = -0.5 * (_LOG2PI + s2.log() + ((y - mean) ** 2 + var) / s2)
        scale = 1.0 if n_total is None else n_total / X.shape[0]
        return (scale * ell.sum(-1) + ind.log_ratio).mean()

    @torch.no_grad()
    def predictive_components(
        self,
        X: Tensor,
        n_samples: int,
        generator: torch.Generator,
        include_noise: bool = True,
        chunk_size: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The Gaussian mixture components ``(mean, var)``, each ``(S, m)``, at ``X (m, N_0)``.

        One inducing sample serves every point; points are processed in chunks of
        ``chunk_size`` (default: the settings'), each with its own per-point draws, so
        memory is ``O(S P_i chunk_size)`` and time linear in ``m``.
        """
        size = chunk_size or self.settings.chunk_size
        ind = self.sample_inducing(n_samples, generator)
        means, variances = [], []
        for start in range(0, X.shape[0], size):
            Xc = X[start : start + size]
            noise = self.draw_noise(n_samples, Xc.shape[0], generator)
            m, v = self.sample_points(ind, Xc, noise)
            means.append(m)
            variances.append(v)
        var = torch.cat(variances, -1)
        return torch.cat(means, -1), var + self.noise if include_noise else var
