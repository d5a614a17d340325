"""The typed configuration of the simulator: every number of p(D, S) is a field.

The default values are the paper preset (Bitzer et al. 2023, Appendix A);
:meth:`SimulatorConfig.realdata` is the named prior that looks like real data
(:mod:`amorgp.simulator.realdata`: irrelevant and near-linear inputs, lengthscales that
grow with ``d``, short periods, near-noiseless targets, non-uniform inputs, standardised
targets, ``n`` up to 500):

============================  ==============================  =========================================
field                         default                         meaning
============================  ==============================  =========================================
``n_min``, ``n_max``          10, 250                         training points per dataset ``n ~ U{n_min..n_max}``
``n_test``                    0                               extra held-out test points per dataset
``d_max``                     8                               ``d ~ Geometric(p_dims)`` clipped to ``d_max``
``p_dims``                    0.25                            success probability of the dimension law
``p_addends``                 0.6                             addends per dimension ``~ Geometric(p_addends)``
``max_addends``               6                               cap of the addend count (see deviations)
``vocabulary``                ``PAPER_VOCABULARY``            symbols drawn uniformly, without replacement
``positive_ratio``            0.5                             fraction of positive (D, S) pairs
``x_low``, ``x_high``         0.0, 1.0                        ``X ~ U[x_low, x_high]^d``
``inputs``                    ``"uniform"``                   input law (:mod:`amorgp.simulator.inputs`)
``prior``                     ``"paper"``                     parameter laws: ``"paper"``, ``"realdata"``,
                                                              ``"realdata-series"``,
                                                              ``"realdata-irrelevant"`` or
                                                              ``"realdata-ard"``
                                                              (:mod:`amorgp.simulator.realdata`)
``jitter``, ``max_tries``     1e-8, 5                         robust Cholesky: relative jitter, escalations
``negative_rounds``           8                               candidate draws for a distinct negative structure
``fixed_shapes``              False                           pad to ``(n_max, d_max, addend_cap)``
``clamp_to_floors``           True                            raise draws below a transform floor to it
``size_buckets``              4                               groups of similar ``n`` for kernel + Cholesky
============================  ==============================  =========================================

``size_buckets`` is a cost knob, not part of the law: the batch is sorted by
``n`` and cut into that many groups of equal count, and each group's kernel
matrices and Cholesky factors are computed at the group's largest ``n`` instead
of the batch's (Cholesky costs ``O(n^3)``).  The random draws do not depend on
it, so results agree to rounding for any value.

Geometric laws are on ``{1, 2, ...}``: ``P(k) = (1 - p)^(k - 1) p``.

Deviations from the paper (documented choices):

* **Addends without replacement, capped.**  Within one dimension the addends
  are distinct symbols (``SE + SE`` is a non-identifiable re-parameterisation
  of ``SE`` with a different amplitude split), drawn uniformly without
  replacement from the vocabulary.  The addend count is therefore clipped to
  ``min(max_addends, len(vocabulary))``; with the paper's 6 symbols and
  ``p_addends = 0.6`` the clipped mass is ``0.4^6 = 0.4 %``.
* **Canonical addend order.**  Addends are stored sorted by vocabulary id so
  that equal structures have equal tensors (the network is permutation
  invariant over addends anyway).
* **Distinct negatives.**  A negative structure is drawn from the same law
  conditioned on the same ``d`` and on being different from the data's
  structure (exact rejection with ``negative_rounds`` vectorised candidates);
  if all candidates coincide, the pair is reported as positive and counted
  (``SimulatedBatch.n_negative_fallback``), never silently resampled.
* **Floors.**  Draws below the floor of the shared positive transform
  (``kernel_grammar.FLOORS``, e.g. ``1e-6`` for the noise variance) are raised
  to it (``clamp_to_floors``), so every ground truth is reachable by the
  network heads; this moves ``4.4e-5`` of the noise prior's mass and less
  than ``1e-6`` of any kernel prior's.
* **Priors** are not fields here: they are declared once, next to the
  parameter specs, in :mod:`amorgp.kernel_grammar` (``base_symbol(...).params``
  and ``NOISE``), and the JSON form of the config records them for reference.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from amorgp.kernel_grammar import NOISE, PAPER_VOCABULARY, Vocabulary
from amorgp.simulator.inputs import INPUT_LAWS
from amorgp.simulator.realdata import PRIORS

__all__ = ["SimulatorConfig"]

_FORMAT = "amorgp-simulator-config/1"


def _check_probability(name: str, value: float, *, open_low: bool, open_high: bool) -> None:
    ok = math.isfinite(value)
    ok = ok and (value > 0.0 if open_low else value >= 0.0)
    ok = ok and (value < 1.0 if open_high else value <= 1.0)
    if not ok:
        lo = "(0" if open_low else "[0"
        hi = "1)" if open_high else "1]"
        raise ValueError(f"SimulatorConfig.{name} must lie in {lo}, {hi}, got {value!r}")


@dataclass(frozen=True)
class SimulatorConfig:
    """Configuration of the simulator's prior ``p(D, S)`` (paper preset by default).

    See the module docstring for the meaning of every field and the documented
    deviations from the paper.

    Raises:
        ValueError: on construction, for negative or inconsistent sizes, an empty
            vocabulary, ``d_max < 1``, probabilities or ratios outside their range,
            a non-positive jitter or an empty input box.
    """

    n_min: int = 10
    n_max: int = 250
    n_test: int = 0
    d_max: int = 8
    p_dims: float = 0.25
    p_addends: float = 0.6
    max_addends: int = 6
    vocabulary: Vocabulary = field(default=PAPER_VOCABULARY)
    positive_ratio: float = 0.5
    x_low: float = 0.0
    x_high: float = 1.0
    inputs: str = "uniform"
    prior: str = "paper"
    jitter: float = 1e-8
    max_tries: int = 5
    negative_rounds: int = 8
    fixed_shapes: bool = False
    clamp_to_floors: bool = True
    size_buckets: int = 4

    def __post_init__(self) -> None:
        for name in (
            "n_min",
            "n_max",
            "n_test",
            "d_max",
            "max_addends",
            "max_tries",
            "size_buckets",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"SimulatorConfig.{name} must be an int, got {value!r}")
        if self.n_min < 1:
            raise ValueError(f"SimulatorConfig.n_min must be >= 1, got {self.n_min}")
        if self.n_max < self.n_min:
            raise ValueError(
                f"SimulatorConfig.n_max ({self.n_max}) must be >= n_min ({self.n_min})"
            )
        if self.n_test < 0:
            raise ValueError(f"SimulatorConfig.n_test must be >= 0, got {self.n_test}")
        if self.d_max < 1:
            raise ValueError(f"SimulatorConfig.d_max must be >= 1, got {self.d_max}")
        if self.max_addends < 1:
            raise ValueError(f"SimulatorConfig.max_addends must be >= 1, got {self.max_addends}")
        if self.size_buckets < 1:
            raise ValueError(f"SimulatorConfig.size_buckets must be >= 1, got {self.size_buckets}")
        if self.max_tries < 0:
            raise ValueError(f"SimulatorConfig.max_tries must be >= 0, got {self.max_tries}")
        if isinstance(self.negative_rounds, bool) or not isinstance(self.negative_rounds, int):
            raise ValueError(
                f"SimulatorConfig.negative_rounds must be an int, got {self.negative_rounds!r}"
            )
        if self.negative_rounds < 1:
            raise ValueError(
                f"SimulatorConfig.negative_rounds must be >= 1, got {self.negative_rounds}"
            )
        if not isinstance(self.vocabulary, Vocabulary):
            raise ValueError(
                f"SimulatorConfig.vocabulary must be a Vocabulary, got {type(self.vocabulary)}"
            )
        if len(self.vocabulary) == 0:  # Vocabulary forbids it too; keep the message here
            raise ValueError("SimulatorConfig.vocabulary is empty")
        _check_probability("p_dims", self.p_dims, open_low=True, open_high=False)
        _check_probability("p_addends", self.p_addends, open_low=True, open_high=False)
        _check_probability("positive_ratio", self.positive_ratio, open_low=False, open_high=False)
        if self.inputs not in INPUT_LAWS:
            raise ValueError(
                f"SimulatorConfig.inputs must be one of {', '.join(INPUT_LAWS)}, got {self.inputs!r}"
            )
        if self.prior not in PRIORS:
            raise ValueError(
                f"SimulatorConfig.prior must be one of {', '.join(PRIORS)}, got {self.prior!r}"
            )
        if not (math.isfinite(self.jitter) and self.jitter > 0):
            raise ValueError(f"SimulatorConfig.jitter must be finite and > 0, got {self.jitter}")
        if not (math.isfinite(self.x_low) and math.isfinite(self.x_high)):
            raise ValueError("SimulatorConfig.x_low and x_high must be finite")
        if not self.x_low < self.x_high:
            raise ValueError(
                f"SimulatorConfig needs x_low < x_high, got [{self.x_low}, {self.x_high}]"
            )

    # presets --------------------------------------------------------------------------
    @classmethod
    def paper(cls, **overrides: Any) -> SimulatorConfig:
        """The paper preset (Appendix A), phase 1: positive and negative pairs, 1:1."""
        return cls(**overrides)

    @classmethod
    def realdata(cls, **overrides: Any) -> SimulatorConfig:
        """The prior that looks like real data (:mod:`amorgp.simulator.realdata`): the
        paper's structures, the ``realdata`` parameter laws, ``realistic`` inputs,
        standardised targets and ``n ~ U{10..500}``."""
        return cls(**{"prior": "realdata", "inputs": "realistic", "n_max": 500, **overrides})

    @classmethod
    def paper_finetune(cls, **overrides: Any) -> SimulatorConfig:
        """The paper preset, phase 2 (noise fine-tuning): positive pairs only."""
        return cls(**{"positive_ratio": 1.0, **overrides})

    def finetune(self) -> SimulatorConfig:
        """This configuration with positives only (the noise fine-tuning mode)."""
        return replace(self, positive_ratio=1.0)

    # derived --------------------------------------------------------------------------
    @property
    def addend_cap(self) -> int:
        """The effective cap of addends per dimension: ``min(max_addends, V)``."""
        return min(self.max_addends, len(self.vocabulary))

    @property
    def n_total_max(self) -> int:
        """Largest number of points (training + test) of one dataset."""
        return self.n_max + self.n_test

    # serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (with the priors in force, for the record)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "vocabulary"}
        data["vocabulary"] = self.vocabulary.to_dict()
        priors: dict[str, Any] = {"noise": NOISE.prior.to_dict()}
        for sym in self.vocabulary:
            priors[sym.name] = {p.name: p.prior.to_dict() for p in sym.params}
        return {"format": _FORMAT, "config": data, "priors": priors}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SimulatorConfig:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: wrong format tag, unknown or invalid fields.
        """
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"not a simulator config (expected format {_FORMAT!r})")
        body = dict(data.get("config", {}))
        known = {f.name for f in fields(cls)}
        unknown = set(body) - known
        if unknown:
            raise ValueError(f"unknown simulator config fields: {sorted(unknown)}")
        if "vocabulary" in body:
            body["vocabulary"] = Vocabulary.from_dict(body["vocabulary"])
        return cls(**body)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SimulatorConfig:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"simulator config is not valid JSON: {err}") from err
        return cls.from_dict(data)
