"""Fixed hyperparameters, bounds and the noise floor of amortized inference.

:meth:`Amortizer.infer_many <amorgp.amortizer.frontends.inference.Amortizer.infer_many>` takes

* ``noise_floor``: the smallest noise variance any stage may return (normalised units,
  default :data:`DEFAULT_NOISE_FLOOR`, the transform's floor
  ``kernel_grammar.FLOORS["noise"]``).  Near-noiseless data (a smooth function sampled
  without noise) have their likelihood optimum below the default: lower it, down to
  :data:`MIN_NOISE_FLOOR`;
* ``fixed``: ``{name: value}`` held fixed by calibration and refinement;
* ``bounds``: ``{name: (low, high)}`` within which refinement optimises (scikit-learn's
  ``*_bounds``; GPyTorch's ``Interval``: the refinement moves
  ``logit((log theta - log low) / (log high - log low))``).

Names are those of :attr:`KernelResult.hyperparameters
<amorgp.core.fit.KernelFit.hyperparameters>`: ``(dim, addend, name)``, e.g.
``(0, 0, "lengthscale")`` or ``(0, 1, "per_period")``, and ``"noise"``.  Values are in
the same normalised units as :attr:`KernelResult.noise
<amorgp.core.fit.KernelFit.noise>` and ``hyperparameters`` (inputs scaled to
``[0, 1]``, standardised targets).  With several kernels a name applies to each kernel
that has it (and must exist in one).

Every stage honours them: the network's prediction is projected (a fixed value replaces
the predicted one, a value outside its bounds is clipped into them, a noise below the
floor is raised to it), calibration searches the noise down to the floor and its result
is projected again, as is the multi-start's winner, and the refinement optimises the
free parameters only, each within its bounds, so a fixed value is returned exactly.

A fit whose noise ends at the floor while the likelihood still rises towards lower
noise warns with :class:`NoiseFloorWarning` (see :func:`warn_noise_floor`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from amorgp.core.errors import OptionError
from amorgp.core.warn import warn
from amorgp.kernel_grammar import FLOORS, DimWiseStructure, ParamKind, Vocabulary, base_symbol

if TYPE_CHECKING:
    from amorgp.amortizer.stages.batched import Factor

START_GAP = 1e-3
"""A start closer to a floor than this fraction of it starts there instead (in
``log(theta - floor)`` a start at the floor has no gradient and would never move); a
bounded start is kept this fraction of its log-width inside its bounds, for the same
reason in the logit."""

__all__ = [
    "START_GAP",
    "DEFAULT_NOISE_FLOOR",
    "FLOOR_RTOL",
    "MIN_NOISE_FLOOR",
    "Constraints",
    "KernelConstraints",
    "Name",
    "NoiseFloorWarning",
    "check_constraints",
    "check_noise_floor",
    "noise_slope",
    "warn_at_noise_floor",
]

Name = str | tuple[int, int, str]
"""A hyperparameter's name: ``"noise"`` or ``(dim, addend, parameter name)``."""

DEFAULT_NOISE_FLOOR = FLOORS[ParamKind.NOISE]
"""The default noise floor: the transform's floor of the noise variance (``1e-6``)."""

MIN_NOISE_FLOOR = 1e-12
"""The lowest noise floor accepted.  ``K + sigma^2 I`` of standardised targets has
eigenvalues up to about ``n`` times the signal variance; float64's Cholesky rounds at
``n * eps * lambda_max`` (``eps = 2.2e-16``: about ``1e-13`` for 50 points of a unit
variance, more for more points), so a noise below ``1e-12`` is below the rounding of its
own factorisation: the factor would need jitter larger than the noise."""

FLOOR_RTOL = 1.5
"""A noise within ``(1 + FLOOR_RTOL)`` times the floor is checked for ending at the floor
(calibration keeps the noise at or above twice the floor, within one step of its grid)."""


class NoiseFloorWarning(UserWarning):
    """The fitted noise variance ended at the noise floor while the log marginal likelihood
    still rises towards lower noise: lower ``noise_floor=`` to let the fit go further."""


def check_noise_floor(noise_floor: Any) -> float:
    """``noise_floor`` as a ``float`` in ``[MIN_NOISE_FLOOR, 1)``.

    Raises:
        OptionError: not a real number, not finite, not positive, below
            :data:`MIN_NOISE_FLOOR` (below what float64 can factor) or ``>= 1`` (the
            variance of the standardised targets).
    """
    if isinstance(noise_floor, bool) or not isinstance(noise_floor, numbers.Real):
        raise OptionError(f"noise_floor must be a real number, got {noise_floor!r}")
    value = float(noise_floor)
    if not math.isfinite(value) or value <= 0.0:
        raise OptionError(f"noise_floor must be a positive finite number, got {noise_floor!r}")
    if value < MIN_NOISE_FLOOR:
        raise OptionError(
            f"noise_floor={value:g} is below {MIN_NOISE_FLOOR:g}, under the rounding of a "
            "float64 Cholesky of K + noise I (the factor would need more jitter than the noise)"
        )
    if value >= 1.0:
        raise OptionError(
            f"noise_floor={value:g} must be below 1 (the variance of the standardised targets)"
        )
    return value


def _name_text(name: Name) -> str:
    return repr(name)


def _check_name(name: Any, option: str) -> Name:
    if name == "noise":
        return "noise"
    if (
        isinstance(name, tuple)
        and len(name) == 3
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in name[:2])
        and isinstance(name[2], str)
    ):
        return (int(name[0]), int(name[1]), name[2])
    raise OptionError(
        f"{option} key {name!r} must be 'noise' or (dim, addend, name) as in "
        "KernelResult.hyperparameters, e.g. (0, 0, 'lengthscale')"
    )


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionError(f"{what} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v <= 0.0:
        raise OptionError(f"{what} must be positive and finite (a positive parameter), got {v!r}")
    return v


def _floor_of(name: Name, structure: DimWiseStructure | None, noise_floor: float) -> float:
    if not isinstance(name, tuple) or structure is None:
        return noise_floor
    dim, addend, pname = name
    spec = base_symbol(structure.dims[dim][addend]).params
    kind = next(p.kind for p in spec if p.name == pname)
    return FLOORS[kind]


@dataclass(frozen=True)
class Constraints:
    """The checked ``fixed``, ``bounds``, ``noise_floor`` and ``priors`` of one call (all
    kernels)."""

    fixed: Mapping[Name, float] = field(default_factory=dict)
    bounds: Mapping[Name, tuple[float, float]] = field(default_factory=dict)
    noise_floor: float = DEFAULT_NOISE_FLOOR
    priors: bool = False

    def check_refine(self, steps: int | str | None) -> None:
        """Raise :class:`OptionError` where ``priors`` asks for a refinement that
        ``steps`` (:func:`~amorgp.amortizer.stages.refine.check_refine`'s) does not run."""
        if self.priors and steps == 0:
            raise OptionError("priors=True acts through the refinement: pass refine=k or 'auto'")

    @property
    def trivial(self) -> bool:
        """Nothing fixed or bounded, the default floor and no priors (the unconstrained
        pipeline)."""
        return (
            not self.fixed
            and not self.bounds
            and self.noise_floor == DEFAULT_NOISE_FLOOR
            and not self.priors
        )

    def resolve(self, structures: Sequence[DimWiseStructure]) -> list[KernelConstraints]:
        """Per kernel, the constraints on its own parameters.

        Raises:
            OptionError: a name no kernel has, or a fixed value or bound below the floor
                of its parameter kind (``kernel_grammar.FLOORS``; ``noise_floor`` for the
                noise).
        """
        have = {
            (pn.dim, pn.addend, pn.param): k
            for k, s in reversed(list(enumerate(structures)))
            for pn in s.param_names()
        }
        for option, names in (("fixed", self.fixed), ("bounds", self.bounds)):
            for name in names:
                if name != "noise" and name not in have:
                    known = ", ".join(repr(n) for n in list(have)[:12])
                    raise OptionError(
                        f"{option} names {_name_text(name)}, a hyperparameter of none of the "
                        f"kernels; known: 'noise', {known}"
                    )
        for option, values in (
            ("fixed", {n: (v,) for n, v in self.fixed.items()}),
            ("bounds", dict(self.bounds)),
        ):
            for name, vals in values.items():
                s = structures[have[name]] if isinstance(name, tuple) else None
                floor = _floor_of(name, s, self.noise_floor)
                if min(vals) < floor:
                    kind = "noise_floor=" if name == "noise" else "floor of its kind"
                    raise OptionError(
                        f"{option}[{_name_text(name)}] = {min(vals):g} is below the "
                        f"{kind} {floor:g}"
                        + (" (lower noise_floor too)" if name == "noise" else "")
                    )
        out = []
        for s in structures:
            mine = {(pn.dim, pn.addend, pn.param) for pn in s.param_names()} | {"noise"}
            out.append(
                KernelConstraints(
                    structure=s,
                    noise_floor=self.noise_floor,
                    fixed={n: v for n, v in self.fixed.items() if n in mine},
                    bounds={n: b for n, b in self.bounds.items() if n in mine},
                    priors=self.priors,
                )
            )
        return out


def check_constraints(
    fixed: Any = None, bounds: Any = None, noise_floor: Any = None, priors: Any = False
) -> Constraints:
    """``fixed``, ``bounds``, ``noise_floor`` and ``priors`` checked (names not yet against
    kernels).

    Args:
        fixed: ``{name: value}`` or ``None``.
        bounds: ``{name: (low, high)}`` or ``None``.
        noise_floor: a float or ``None`` (:data:`DEFAULT_NOISE_FLOOR`).
        priors: ``True``: refinement maximises the log marginal likelihood plus the log
            density of the grammar's prior of every free hyperparameter (MAP, normalised
            units: each ``ParamSpec.prior`` and the noise's); ``False``: the likelihood.

    Raises:
        OptionError: one line naming the problem: a key that is not a name, a value that
            is not a positive finite number, ``low >= high``, a name both fixed and
            bounded, or a bad ``noise_floor`` (see :func:`check_noise_floor`).
    """
    floor = DEFAULT_NOISE_FLOOR if noise_floor is None else check_noise_floor(noise_floor)
    if not isinstance(priors, bool):
        raise OptionError(f"priors must be True or False, got {priors!r}")
    fx: dict[Name, float] = {}
    bd: dict[Name, tuple[float, float]] = {}
    for option, given in (("fixed", fixed), ("bounds", bounds)):
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise OptionError(f"{option} must be a mapping of names to values, got {given!r}")
        for key, value in given.items():
            name = _check_name(key, option)
            what = f"{option}[{_name_text(name)}]"
            if option == "fixed":
                fx[name] = _positive(value, what)
                continue
            if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != 2:
                raise OptionError(f"{what} must be a pair (low, high), got {value!r}")
            low, high = _positive(value[0], f"{what} low"), _positive(value[1], f"{what} high")
            if low >= high:
                raise OptionError(f"{what} = ({low:g}, {high:g}) needs low < high")
            bd[name] = (low, high)
    both = sorted(_name_text(n) for n in set(fx) & set(bd))
    if both:
        raise OptionError(f"{', '.join(both)} is both fixed and bounded; give one of the two")
    return Constraints(fx, bd, floor, priors)


@dataclass(frozen=True)
class KernelConstraints:
    """The constraints of one kernel: its fixed values and bounds, and the noise floor.

    The flat order of :meth:`vectors` is that of ``structure.param_names()`` (dimension,
    addend, slot) followed by the noise, the order of
    :class:`~amorgp.amortizer.stages.objective.LogMarginalLikelihood`'s parameters.
    """

    structure: DimWiseStructure
    noise_floor: float = DEFAULT_NOISE_FLOOR
    fixed: Mapping[Name, float] = field(default_factory=dict)
    bounds: Mapping[Name, tuple[float, float]] = field(default_factory=dict)
    priors: bool = False

    @property
    def trivial(self) -> bool:
        return (
            not self.fixed
            and not self.bounds
            and self.noise_floor == DEFAULT_NOISE_FLOOR
            and not self.priors
        )

    @property
    def names(self) -> list[Name]:
        """The flat names: the kernel's parameters, then ``"noise"``."""
        return [(pn.dim, pn.addend, pn.param) for pn in self.structure.param_names()] + ["noise"]

    def vectors(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(floors, fixed, low, high)``, each ``(m,)`` float64 in the flat order: the
        transform's floors (the noise's is ``noise_floor``), the fixed values (NaN where
        free) and the bounds (NaN where unbounded)."""
        floors, fx, lo, hi = [], [], [], []
        for pn in self.structure.param_names():
            floors.append(FLOORS[base_symbol(pn.symbol).params[pn.slot].kind])
        floors.append(self.noise_floor)
        for name in self.names:
            fx.append(self.fixed.get(name, math.nan))
            b = self.bounds.get(name, (math.nan, math.nan))
            lo.append(b[0])
            hi.append(b[1])
        return tuple(torch.tensor(v, dtype=torch.float64) for v in (floors, fx, lo, hi))  # type: ignore[return-value]

    def project(self, params: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """``params (D, L, P)`` and ``noise ()`` with fixed values set, bounded values
        clipped into their bounds and the noise raised to the floor (copies)."""
        params, noise = params.clone(), noise.clone()
        noise = noise.clamp_min(self.noise_floor)
        for name in self.names:
            value = self.fixed.get(name)
            b = self.bounds.get(name)
            if value is None and b is None:
                continue
            if not isinstance(name, tuple):  # the noise
                noise = noise.new_tensor(value) if b is None else noise.clamp(b[0], b[1])
                continue
            dim, addend, pname = name
            slot = base_symbol(self.structure.dims[dim][addend]).param_names.index(pname)
            if value is not None:
                params[dim, addend, slot] = value
            else:
                assert b is not None
                params[dim, addend, slot] = params[dim, addend, slot].clamp(b[0], b[1])
        return params, noise

    def describe(self) -> dict[str, Any]:
        """JSON-ready: ``{"noise_floor", "fixed", "bounds", "priors"}`` with names as
        text."""
        return {
            "noise_floor": self.noise_floor,
            "fixed": {name_key(n): v for n, v in self.fixed.items()},
            "bounds": {name_key(n): list(b) for n, b in self.bounds.items()},
            "priors": self.priors,
        }


def name_key(name: Name) -> str:
    """``"noise"`` or ``"d<dim>.<addend>.<name>"`` (JSON keys are text)."""
    if not isinstance(name, tuple):
        return "noise"
    dim, addend, pname = name
    return f"d{dim}.{addend}.{pname}"


def project_all(
    constraints: Sequence[KernelConstraints], params: Tensor, noise: Tensor
) -> tuple[Tensor, Tensor]:
    """:meth:`KernelConstraints.project` of each of ``K`` kernels: ``params (K, D, L, P)``,
    ``noise (K,)``."""
    params, noise = params.clone(), noise.clone()
    for k, c in enumerate(constraints):
        if c.trivial:
            continue
        s = c.structure
        p, nz = c.project(params[k, : s.n_dims, : s.max_addends], noise[k])
        params[k, : s.n_dims, : s.max_addends] = p
        noise[k] = nz
    return params, noise


def warn_noise_floor(text: str, noise: float, floor: float) -> None:
    """Warn (:class:`NoiseFloorWarning`, at the caller's line) that kernel ``text`` ended at
    the noise floor."""
    lower = max(floor * 1e-4, MIN_NOISE_FLOOR)
    advice = (
        f"pass a lower noise_floor= (e.g. noise_floor={lower:g}; --noise-floor on the "
        "command line) to fit near-noiseless data"
        if lower < floor
        else f"{floor:g} is the lowest floor float64 can factor: the data are noiseless to "
        "its precision"
    )
    warn(
        f"kernel {text!r}: the noise variance ended at {noise:.3g} (normalised units), at "
        f"the noise floor {floor:g}, and the log marginal likelihood still rises as the noise "
        f"falls; {advice}",
        NoiseFloorWarning,
    )


def noise_slope(L: Tensor, alpha: Tensor) -> float:
    """``d log p(y) / d sigma^2 = (alpha^T alpha - tr A^{-1}) / 2`` from the Cholesky factor
    ``L (n, n)`` of ``A = K + sigma^2 I`` and ``alpha = A^{-1} y`` (``tr A^{-1}`` is the
    squared Frobenius norm of ``L^{-1}``)."""
    eye = torch.eye(L.shape[-1], dtype=L.dtype, device=L.device)
    inv_L = torch.linalg.solve_triangular(L, eye, upper=False)
    return 0.5 * (float(alpha @ alpha) - float(inv_L.square().sum()))


def warn_at_noise_floor(
    Xn: Tensor,
    yn: Tensor,
    constraints: Sequence[KernelConstraints],
    params: Tensor,
    noise: Tensor,
    factors: Sequence[Factor | None] | None,
    vocabulary: Vocabulary,
) -> None:
    """Warn (:class:`~amorgp.amortizer.stages.constraints.NoiseFloorWarning`) for each kernel whose
    free noise ended at the floor (within :data:`~amorgp.amortizer.stages.constraints.FLOOR_RTOL`
    of it) while the exact log marginal likelihood still rises towards lower noise: its
    derivative in the noise, ``(alpha^T alpha - tr A^{-1}) / 2`` with ``A = K + sigma^2 I``
    and ``alpha = A^{-1} y``, is negative.  It reads the kernel's batched factor where
    there is one, else factors ``A`` for such kernels only (at most
    :data:`~amorgp.amortizer.stages.calibrate.MAX_POINTS` points).  Above that size the noise
    must be within :data:`START_GAP` of the floor, where only a
    refinement towards it ends."""
    from amorgp.amortizer.stages import batched
    from amorgp.amortizer.stages.calibrate import MAX_POINTS

    noises = noise.tolist()
    for k, c in enumerate(constraints):
        floor = c.noise_floor
        if "noise" in c.fixed or "noise" in c.bounds or noises[k] > floor * (1.0 + FLOOR_RTOL):
            continue
        s = c.structure
        if Xn.shape[0] > MAX_POINTS:
            at_floor = noises[k] <= floor * (1.0 + START_GAP)
        else:
            factor = None if factors is None else factors[k]
            if factor is None:
                with torch.no_grad():
                    X64, y64 = Xn.to(torch.float64), yn.to(torch.float64)
                    p64 = params[k : k + 1].to(torch.float64)
                    Km = batched.kernel_matrices(X64, [s], vocabulary, p64)
                    f = batched.factor(Km, y64, noise[k : k + 1].to(torch.float64))
                factor = None if bool(f.failed[0]) else (f.L[0], f.alpha[0], f.jitter[0], f.lml[0])
            if factor is None:  # the factorisation failed: nothing to say
                continue
            at_floor = noise_slope(factor[0], factor[1]) < 0.0
        if at_floor:
            warn_noise_floor(
                str(s) if not s.is_uniform else " + ".join(s.dims[0]), noises[k], floor
            )
