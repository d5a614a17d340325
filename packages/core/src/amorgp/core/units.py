"""How a kernel hyperparameter's value changes when the data go back to original units.

Every GP computation runs on normalised data (:mod:`amorgp.core.data`); a fitted value
is reported in original units by :meth:`~amorgp.core.data.Normalizer.to_original`, which
needs to know only how the value scales, its :class:`Unit`.  Which unit a parameter of a
kernel has is the kernel's business (``amorgp.kernel_grammar.param_unit``, from the
registry's parameter kinds, ``input_scaled`` and ``stationary``); how a unit maps is the
normalisation's.  This module imports nothing beyond the standard library.
"""

from __future__ import annotations

import enum

__all__ = ["Unit"]


class Unit(enum.Enum):
    """The unit of a kernel hyperparameter under the normalisation.

    With the column range ``r_d`` and the target standard deviation ``s_y``:

    * ``INPUT``: a length along input column ``d`` (the lengthscale of ``SE``, a
      period): ``l = l~ r_d``, no value for a constant column (``r_d = 0``);
    * ``FREE``: unit-free (e.g. the lengthscale of ``PER``, which divides
      ``sin^2(pi r / p)``): unchanged;
    * ``VARIANCE``: a factor of the kernel's variance.  The kernel is a product over
      dimensions, so ``s_y^2`` belongs to the product; by convention it goes to
      dimension 0: ``v = v~ s_y^2`` there, unchanged in the other dimensions;
    * ``INEXACT``: the kernel in original units has no value of this form (e.g. the
      variance and offset of ``LIN``: ``x~ x~' = (x - m)(x' - m) / r^2`` is not
      ``a x x' + b`` unless the column minimum is 0): no value.
    """

    INPUT = "input"
    FREE = "free"
    VARIANCE = "variance"
    INEXACT = "inexact"
