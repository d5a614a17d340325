"""``refine=k``: Type-2 ML warm-started at the amortized prediction.

The objective, the parameter transform and the optimiser are those of
:mod:`amorgp.baselines` (``GP-ML (L-BFGS)``: ``torch.optim.LBFGS`` with a
strong-Wolfe line search, one kernel at a time); only the starting point differs:
the network's hyperparameters instead of the paper's default initialisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from amorgp.kernel_grammar import DimWiseStructure, Vocabulary

__all__ = ["refine_type2ml"]


def refine_type2ml(
    Xn: Tensor,
    yn: Tensor,
    structures: Sequence[DimWiseStructure],
    params: Tensor,
    noise: Tensor,
    steps: int,
    vocab: Vocabulary,
) -> tuple[Tensor, Tensor]:
    """``steps`` L-BFGS iterations of ``-log p(y | theta)`` from ``(params, noise)``.

    Args:
        Xn: ``(n, d)`` normalised inputs.
        yn: ``(n,)`` standardised targets.
        structures: ``K`` structures.
        params: ``(K, d, L, P)`` starting parameters (constrained).
        noise: ``(K,)`` starting noise variances.
        steps: L-BFGS iterations (>= 1).
        vocab: vocabulary of the symbol ids.

    Returns:
        Refined ``params`` and ``noise`` (same shapes, float64 on the input device).
        A kernel whose refinement fails (non-finite objective) keeps its last finite
        iterate, as in the baselines.
    """
    from amorgp.baselines.gp import GPBatch, constrain, log_marginal_likelihood, unconstrain
    from amorgp.baselines.optim import lbfgs

    device, dtype = params.device, params.dtype
    X64, y64 = Xn.detach().to("cpu", torch.float64), yn.detach().to("cpu", torch.float64)
    batch = GPBatch.from_pairs([(X64, y64)] * len(structures), list(structures), vocab)
    D, L, P = batch.param_shape[1:]
    start = params.detach().to("cpu", torch.float64)[:, :D, :L, :P]
    raw0, raw_noise0 = unconstrain(batch, start, noise.detach().to("cpu", torch.float64))
    out_p, out_n = [], []
    for b in range(batch.batch_size):  # L-BFGS runs one pair at a time (see baselines.optim)
        one = batch.select(b)

        def objective(p: Sequence[Tensor], one: GPBatch = one) -> Tensor:
            c, s2 = constrain(one, p[0], p[1])
            return -log_marginal_likelihood(one, c, s2)[0]

        res = lbfgs([raw0[b : b + 1], raw_noise0[b : b + 1]], objective, max_iters=steps)
        with torch.no_grad():
            c, s2 = constrain(one, res.params[0], res.params[1])
        out_p.append(c)
        out_n.append(s2)
    refined = params.detach().clone()
    refined[:, :D, :L, :P] = torch.cat(out_p).to(device=device, dtype=dtype)
    return refined, torch.cat(out_n).to(device=device, dtype=dtype)
