"""Whether KeOps works on a device, tested in a subprocess before the first reduction.

A broken pykeops does not always raise: its code generation can end the process with a
signal (pykeops 2.3 on CUDA 13 segfaults in ``generate_code``).  So before the first KeOps
reduction on a device, :func:`keops_usable` runs a tiny KeOps reduction and its gradient
in a child Python process (same interpreter, same ``sys.path``) and compares them with
torch.  If the child fails (an exception, a wrong value, a signal, a timeout), the parent
warns once, with the reason, and the callers use the torch
:class:`~amorgp.lazy_kernels.BlockKernelOperator` instead.

The outcome is kept in memory for the process and on disk per environment (pykeops version
and location, torch version, Python version, device and, for CUDA, its name, capability
and CUDA version), so the probe runs once per environment, not once per process:

``AMORGP_KEOPS_PROBE_CACHE``
    the JSON file of outcomes (default ``$XDG_CACHE_HOME/amorgp/keops-probe.json``, else
    ``~/.cache/amorgp/keops-probe.json``); ``off`` (or an empty value) keeps outcomes in
    memory only.
``AMORGP_KEOPS``
    ``off`` (or ``0``, ``false``, ``no``) disables KeOps: :func:`keops_usable` is False
    without a probe or a warning, so the block operator is used wherever KeOps would be;
    ``on`` (``1``, ``true``, ``yes``, ``auto`` or unset) lets the probe decide.  Any
    other value is an :class:`~amorgp.core.errors.OptionError` naming the variable.
``AMORGP_KEOPS_PROBE_TIMEOUT``
    seconds the child may take (default 600: the first run compiles two formulas);
    a timeout counts as a failure for this process but is not written to disk.  A value
    that is not a finite positive number of at most :data:`MAX_PROBE_TIMEOUT_S` (one day)
    is an :class:`~amorgp.core.errors.OptionError`.

The cache file must be a regular file (or not exist yet) of at most
:data:`MAX_CACHE_BYTES`; a folder there is an ``OptionError``, a device or an oversized
file is ignored (read as empty and never replaced).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from amorgp.core.errors import OptionError, shorten
from amorgp.core.warn import warn

__all__ = [
    "KeOpsProbe",
    "keops_disabled",
    "keops_installed",
    "keops_usable",
    "probe_cache_path",
    "probe_keops",
]

PROBE_TIMEOUT_S = 600.0
MAX_PROBE_TIMEOUT_S = 86400.0
"""Longest probe timeout accepted (one day; the operating system's waits overflow near
2**31 milliseconds, some 25 days)."""
MAX_CACHE_BYTES = 2**20
"""Largest probe cache file read (an outcome is some 300 bytes)."""
_OFF = ("0", "off", "false", "no")
_ON = ("", "1", "on", "true", "yes", "auto")

_PROBE_SCRIPT = r"""
import fcntl, os, sys
import torch
device = torch.device(sys.argv[1])
import pykeops
from pykeops.torch import Genred
dt = torch.float64
x = torch.linspace(0.0, 1.0, 6, dtype=dt, device=device).reshape(3, 2).requires_grad_()
y = torch.linspace(-0.5, 0.7, 8, dtype=dt, device=device).reshape(4, 2).requires_grad_()
b = torch.linspace(0.3, 1.1, 4, dtype=dt, device=device).reshape(4, 1).requires_grad_()
fn = Genred("Exp(-SqDist(X, Y)) * B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(1)"],
            reduction_op="Sum", axis=1)
folder = pykeops.get_build_folder()
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "amorgp.lock"), "w") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    out = fn(x, y, b, backend="CPU" if device.type == "cpu" else "auto")
    grads = torch.autograd.grad((out * out).sum(), [x, y, b])
ref = torch.exp(-((x[:, None] - y[None]) ** 2).sum(-1)) @ b
want = torch.autograd.grad((ref * ref).sum(), [x, y, b])
for name, a, r in zip(["value", "dx", "dy", "db"], [out, *grads], [ref, *want]):
    if a.shape != r.shape or not torch.allclose(a, r, rtol=1e-9, atol=1e-12):
        sys.exit(f"KeOps {name} differs from torch by {float((a - r).abs().max()):.3g}")
print("ok")
"""


@dataclass(frozen=True)
class KeOpsProbe:
    """Outcome of one probe: whether KeOps works on the device, and why not."""

    ok: bool
    reason: str
    cached: bool = False
    """Whether the outcome came from the on-disk cache."""


_MEMO: dict[str, KeOpsProbe] = {}
_WARNED: set[str] = set()
_USABLE: dict[str, bool] = {}
""":func:`keops_usable` by device in this process (its fast path: every KeOps matvec asks)."""


def keops_installed() -> bool:
    """Whether a ``pykeops`` package is on the path (found, not imported: importing a broken
    installation may itself fail)."""
    try:
        return importlib.util.find_spec("pykeops") is not None
    except (ImportError, ValueError):  # pragma: no cover - a half-installed package
        return False


def keops_disabled() -> bool:
    """Whether the environment variable ``AMORGP_KEOPS`` turns KeOps off (see module doc).

    Raises:
        OptionError: a value that means neither on nor off.
    """
    value = os.environ.get("AMORGP_KEOPS", "")
    if value.strip().lower() in _OFF:
        return True
    if value.strip().lower() in _ON:
        return False
    raise OptionError(
        f"AMORGP_KEOPS={value!r} is not understood: use off (or 0, false, no) to disable "
        "KeOps, on (or 1, true, yes, auto) to use it where it works"
    )


def probe_cache_path() -> Path | None:
    """The on-disk cache of probe outcomes, or None when disabled (see module doc).

    Raises:
        OptionError: ``AMORGP_KEOPS_PROBE_CACHE`` names a folder.
    """
    value = os.environ.get("AMORGP_KEOPS_PROBE_CACHE")
    if value is not None:
        value = value.strip()
        if value.lower() in ("", "off", "0", "none"):
            return None
        if os.path.isdir(value):
            raise OptionError(
                f"AMORGP_KEOPS_PROBE_CACHE={value!r} is a folder; give the path of a file "
                "(e.g. a keops-probe.json inside it) or off"
            )
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "amorgp" / "keops-probe.json"


def _timeout() -> float:
    """``AMORGP_KEOPS_PROBE_TIMEOUT`` in seconds (default :data:`PROBE_TIMEOUT_S`).

    Raises:
        OptionError: not a finite positive number of at most :data:`MAX_PROBE_TIMEOUT_S`.
    """
    value = os.environ.get("AMORGP_KEOPS_PROBE_TIMEOUT", "").strip()
    if not value:
        return PROBE_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_PROBE_TIMEOUT_S):
        raise OptionError(
            f"AMORGP_KEOPS_PROBE_TIMEOUT={shorten(value, 40)!r} must be a finite positive number of "
            f"seconds, at most {MAX_PROBE_TIMEOUT_S:g} (default {PROBE_TIMEOUT_S:g})"
        )
    return seconds


def _device_key(device: torch.device) -> str:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        name = torch.cuda.get_device_name(index)
        return f"cuda:{index} {name} (sm {major}.{minor}, CUDA {torch.version.cuda})"
    return device.type


def _environment_key(device: torch.device) -> str:
    spec = importlib.util.find_spec("pykeops")
    origin = spec.origin if spec is not None else None
    try:
        version = importlib.metadata.version("pykeops")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return (
        f"pykeops {version} at {origin}; torch {torch.__version__}; "
        f"python {platform.python_version()}; {_device_key(device)}"
    )


def _cache_file_usable(path: Path) -> bool:
    """Whether ``path`` is a regular file of at most :data:`MAX_CACHE_BYTES` (or absent)."""
    try:
        info = path.stat()
    except OSError:
        return True  # absent (or unreachable: reading and writing will fail quietly)
    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_CACHE_BYTES


def _read_cache(path: Path) -> dict[str, dict[str, object]]:
    if not _cache_file_usable(path):
        return {}
    try:
        with path.open("rb") as fh:
            data = json.loads(fh.read(MAX_CACHE_BYTES + 1))
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, key: str, probe: KeOpsProbe) -> None:
    """Add one outcome (atomically: a temporary file renamed over the cache; no
    temporary is left when that fails, and a cache that is not a regular file is never
    replaced)."""
    if not _cache_file_usable(path):
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_cache(path)
        data[key] = {"ok": probe.ok, "reason": probe.reason}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".keops-probe-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _run_child(device: torch.device, timeout: float) -> tuple[KeOpsProbe, bool]:
    """Run the probe script; the outcome and whether it is definite (worth caching)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if isinstance(p, str) and p)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, str(device)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return KeOpsProbe(False, f"the probe did not finish within {timeout:g} s"), False
    except OSError as exc:  # pragma: no cover - cannot start the interpreter
        return KeOpsProbe(False, f"the probe could not start: {exc}"), False
    if proc.returncode == 0 and proc.stdout.strip().endswith("ok"):
        return KeOpsProbe(True, "ok"), True
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = str(-proc.returncode)
        return KeOpsProbe(False, f"the probe process died with signal {name}"), True
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {proc.returncode}"
    if len(last) > 300:
        last = last[:297] + "..."
    return KeOpsProbe(False, f"the probe failed: {last}"), True


def probe_keops(device: torch.device | str = "cpu", *, refresh: bool = False) -> KeOpsProbe:
    """Probe KeOps on ``device`` (memoised per process and cached on disk, see module doc).

    Args:
        device: where the reductions would run.
        refresh: probe again, ignoring the memo and the disk cache.
    """
    device = torch.device(device)
    if not keops_installed():
        return KeOpsProbe(False, "pykeops is not installed")
    key = _environment_key(device)
    if refresh:
        _USABLE.pop(str(device), None)
    if not refresh and key in _MEMO:
        return _MEMO[key]
    path = probe_cache_path()
    probe: KeOpsProbe | None = None
    if path is not None and not refresh:
        entry = _read_cache(path).get(key)
        if isinstance(entry, dict) and isinstance(entry.get("ok"), bool):
            probe = KeOpsProbe(bool(entry["ok"]), str(entry.get("reason", "")), cached=True)
    if probe is None:
        probe, definite = _run_child(device, _timeout())
        if definite and path is not None:
            _write_cache(path, key, probe)
    _MEMO[key] = probe
    return probe


def keops_usable(device: torch.device | str = "cpu") -> bool:
    """Whether KeOps reductions (and their gradients) work on ``device``.

    False without a warning where pykeops is not installed or ``AMORGP_KEOPS=off``; False
    with one warning per device and process (naming the reason) where the probe fails.
    """
    device = torch.device(device)
    if keops_disabled():
        return False
    known = _USABLE.get(str(device))
    if known is not None:
        return known
    if not keops_installed():
        _USABLE[str(device)] = False
        return False
    probe = probe_keops(device)
    if not probe.ok:
        key = _environment_key(device)
        if key not in _WARNED:
            _WARNED.add(key)
            note = " (cached outcome; delete the probe cache to retry)" if probe.cached else ""
            warn(
                f"KeOps does not work on {device}: {probe.reason}{note}; using the torch "
                "block kernel operator instead (O(n x block) memory, slower)",
                UserWarning,
            )
    _USABLE[str(device)] = probe.ok
    return probe.ok
