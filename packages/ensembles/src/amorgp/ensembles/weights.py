"""Member weights of a kernel ensemble: Bayesian model averaging, uniform, stacking.

* **BMA** (Bitzer et al. 2023, Appendix A, "fast ensembling"): with a uniform prior
  over the structures, ``p(S_m | D) = exp(L_m) / sum_k exp(L_k)`` where ``L_m`` is the
  log marginal likelihood of structure ``S_m`` at its inferred hyperparameters,
  computed with log-sum-exp.
* **Uniform**: ``1 / M`` for every usable member.
* **Stacking** of predictive distributions (Yao, Vehtari, Simpson, Gelman 2018):
  ``w = argmax_{w in simplex} sum_t log sum_m w_m p_m(y_t)`` over held-out points,
  solved by the EM fixed point ``w_m <- mean_t [w_m p_mt / sum_k w_k p_kt]`` (each
  step increases the objective; the problem is concave).

A member whose inference failed (non-finite log marginal likelihood or densities)
gets weight exactly 0 and a warning names it; if every member failed the weights
cannot be defined and a ``ValueError`` is raised.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from amorgp.core.warn import warn

__all__ = ["bma_weights", "stacking_weights", "uniform_weights"]


def _as_vector(values: Tensor | Sequence[float], name: str) -> Tensor:
    t = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if t.numel() == 0:
        raise ValueError(f"{name}: an ensemble needs at least one member")
    return t


def _usable(ok: Tensor, labels: Sequence[str] | None, why: str) -> Tensor:
    if not bool(ok.any()):
        raise ValueError(f"every ensemble member failed ({why}); no weights can be formed")
    bad = (~ok).nonzero().reshape(-1).tolist()
    if bad:
        names = [labels[i] if labels is not None else f"member {i}" for i in bad]
        warn(
            f"{len(bad)} ensemble member(s) get weight 0 ({why}): {', '.join(names)}",
            RuntimeWarning,
        )
    return ok


def bma_weights(
    log_marginal_likelihoods: Tensor | Sequence[float],
    *,
    log_prior: Tensor | Sequence[float] | None = None,
    labels: Sequence[str] | None = None,
) -> Tensor:
    """Posterior structure probabilities ``softmax(L + log p(S))``.

    Args:
        log_marginal_likelihoods: ``(M,)`` log marginal likelihoods of the members (of the
            same targets). Non-finite entries mark failed members.
        log_prior: ``(M,)`` log prior of the structures (default uniform).
        labels: member names for the warning about failed members.

    Returns:
        ``(M,)`` float64 weights summing to 1, exactly 0 for failed members.

    Raises:
        ValueError: empty input, a prior of another length, or every member failed.
    """
    lml = _as_vector(log_marginal_likelihoods, "bma_weights")
    logit = lml.clone()
    if log_prior is not None:
        prior = _as_vector(log_prior, "bma_weights")
        if prior.shape != lml.shape:
            raise ValueError(f"log_prior has {prior.numel()} entries for {lml.numel()} members")
        logit = logit + prior
    ok = _usable(torch.isfinite(logit), labels, "non-finite log marginal likelihood")
    logit = torch.where(ok, logit, torch.full_like(logit, -torch.inf))
    return torch.softmax(logit, dim=0)


def uniform_weights(ok: Tensor | Sequence[bool], *, labels: Sequence[str] | None = None) -> Tensor:
    """``1 / M_ok`` for the usable members ``ok (M,)``, 0 for the others."""
    mask = torch.as_tensor(ok, dtype=torch.bool).reshape(-1)
    if mask.numel() == 0:
        raise ValueError("uniform_weights: an ensemble needs at least one member")
    mask = _usable(mask, labels, "inference failed")
    return mask.double() / mask.sum()


def stacking_weights(
    log_densities: Tensor,
    *,
    labels: Sequence[str] | None = None,
    max_iter: int = 1000,
    tol: float = 1e-10,
) -> Tensor:
    """Stacking weights from held-out log predictive densities.

    Args:
        log_densities: ``(M, T)`` log predictive density of held-out target ``t`` under
            member ``m``. A member with any non-finite entry is treated as failed.
        labels: member names for the warning about failed members.
        max_iter: EM iterations at most.
        tol: stop when the objective (mean log mixture density) improves by less.

    Returns:
        ``(M,)`` float64 weights on the simplex (0 for failed members).

    Raises:
        ValueError: not a 2-d tensor, no held-out points, or every member failed.
    """
    ld = torch.as_tensor(log_densities, dtype=torch.float64)
    if ld.ndim != 2 or ld.shape[1] == 0 or ld.shape[0] == 0:
        raise ValueError(
            f"log_densities must have shape (M, T) with M, T >= 1, got {tuple(ld.shape)}"
        )
    ok = _usable(torch.isfinite(ld).all(1), labels, "non-finite held-out density")
    ld = torch.where(ok[:, None], ld, torch.zeros_like(ld))
    log_w = torch.where(ok, -torch.log(ok.sum().double()), -torch.inf)
    previous = -torch.inf
    for _ in range(max_iter):
        joint = log_w[:, None] + ld  # (M, T)
        log_mix = torch.logsumexp(joint, dim=0)  # (T,)
        objective = float(log_mix.mean())
        log_w = torch.logsumexp(joint - log_mix, dim=1) - torch.log(
            torch.tensor(float(ld.shape[1]), dtype=torch.float64)
        )
        log_w = torch.where(ok, log_w, -torch.inf)
        if objective - previous < tol:
            break
        previous = objective
    w = torch.exp(log_w)
    return w / w.sum()
