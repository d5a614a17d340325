"""``to_gpytorch`` of something that is not a fit is one clear ``OptionError``."""

from __future__ import annotations

import pytest

from amorgp.core.errors import OptionError
from amorgp.gpytorch import to_gpytorch


@pytest.mark.parametrize("bad", ["str", None, 3.0])
def test_to_gpytorch_of_a_non_fit_is_an_option_error(bad: object) -> None:
    with pytest.raises(OptionError, match=r"to_gpytorch needs a fit result \(KernelFit\), got "):
        to_gpytorch(bad)  # type: ignore[arg-type]
