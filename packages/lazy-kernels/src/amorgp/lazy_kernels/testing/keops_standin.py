"""A broken ``pykeops`` stand-in, for testing that a failing KeOps never takes a process down.

:func:`write_broken_pykeops` writes a package ``pykeops`` (with ``pykeops.torch.Genred``)
into a folder; put that folder first on ``sys.path``/``PYTHONPATH`` and any KeOps reduction
ends the process with ``SIGSEGV`` (as pykeops 2.3's code generation does on CUDA 13),
raises, or hangs.  Importing it is harmless, as with the real failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

__all__ = ["BrokenMode", "write_broken_pykeops"]

BrokenMode = Literal["segfault", "raise", "hang"]

_INIT = '''"""Stand-in pykeops whose reductions fail ({mode})."""
import os

MODE = {mode!r}
__version__ = "0.0-broken"


def get_build_folder():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "build")
'''

_TORCH = """import os
import signal
import time

from pykeops import MODE


class Genred:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if MODE == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if MODE == "hang":
            time.sleep(3600)
        raise RuntimeError("stand-in pykeops: code generation failed")


class LazyTensor:
    def __init__(self, *args, **kwargs):
        Genred()()
"""


def write_broken_pykeops(folder: str | Path, mode: BrokenMode = "segfault") -> Path:
    """Write the stand-in package under ``folder`` (created) and return ``folder``, the
    entry to put first on the path."""
    if mode not in ("segfault", "raise", "hang"):
        raise ValueError(f"unknown mode {mode!r}; use segfault, raise or hang")
    root = Path(folder)
    package = root / "pykeops"
    (package / "torch").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(_INIT.format(mode=mode))
    (package / "torch" / "__init__.py").write_text(_TORCH)
    return root
