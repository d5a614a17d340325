"""Checkpoints and pretrained weights: safetensors + JSON, written atomically, verified on load.

A checkpoint is a directory::

    <dir>/
      model.safetensors       network weights (float32, or bfloat16 / float16 for storage:
                              see below), no pickle
      optimizer.safetensors   optional: optimiser state flattened to tensors
                              ("state/<param index>/<name>") and RNG states ("rng/torch")
      checkpoint.json         format tag, network config (architecture + vocabulary),
                              normalisation contract, training recipe, simulator config,
                              progress (step, datasets seen per phase), validation metrics,
                              optimiser hyperparameters, SHA-256 of every tensor file

Tensor files are at most :data:`SHARD_BYTES` (16 MiB) each, so that a checkpoint can
travel through channels with a per-file limit (e.g. weights trained on a borrowed GPU
machine): a larger state is split between tensors into ``model-00001-of-00004.safetensors``
... (likewise ``optimizer-...``), listed in order under ``"shards"`` in
``checkpoint.json``; a single tensor larger than the limit gets a shard of its own.  A
state that fits keeps the single-file names above, so small checkpoints are unchanged.

Weights may be stored in a 16-bit float type (``save_checkpoint(..., weights_dtype=
torch.bfloat16)``; ``checkpoint.json`` then says ``"weights_dtype": "bfloat16"``) to halve
the size of a large network kept in a repository; loading always upcasts them to float32,
the network's own precision, so a stored network computes like a float32 one whose
weights are the rounded values.  Optimiser state is always float32.

The directory is written under a temporary sibling name and renamed into place
(a rename to a new name is atomic), so a crash never leaves a half-written
checkpoint, and a model holding NaN or infinite values is never written.  Loading
verifies the format tag, the checksums (a ``checkpoint.json`` without a checksum of
every tensor file is refused unless the caller passes ``verify=False``) and that
every stored tensor is finite, then rebuilds the network from its config; each
failure raises :class:`~amorgp.core.errors.CheckpointError` (a
``ValueError``) naming the file or tensor.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from torch.overrides import TorchFunctionMode

from amorgp.amortizer.jsonlog import irregular_kind
from amorgp.amortizer.networks.config import NetworkConfig
from amorgp.amortizer.networks.model import build_model
from amorgp.core.errors import CheckpointError, shorten

__all__ = [
    "FORMAT",
    "SHARD_BYTES",
    "WEIGHT_DTYPES",
    "check_file_name",
    "check_regular_file",
    "check_finite",
    "check_weight_shapes",
    "NORMALISATION",
    "Checkpoint",
    "load_checkpoint",
    "load_model",
    "optimizer_from_tensors",
    "optimizer_to_tensors",
    "save_checkpoint",
    "tensor_files",
]

logger = logging.getLogger(__name__)

FORMAT = "amorgp-amortizer-checkpoint/1"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
META_FILE = "checkpoint.json"
SHARD_BYTES = 16 * 2**20
"""Largest tensor file a checkpoint writes (bytes of tensor data; see the module docstring)."""
WEIGHT_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
"""Storage types of the weights (``weights_dtype`` of :func:`save_checkpoint`), by name."""

NORMALISATION: dict[str, str] = {
    "X": "each input column min-max scaled to [0, 1]; a constant column maps to 0.5",
    "y": "standardised: (y - mean) / std (population std); a constant y maps to 0",
    "params": "predicted in normalised units; map lengthscales/periods back by the column range, "
    "variances and noise by std(y)^2",
}


@dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
        model: the network, weights loaded, in eval mode on the requested device.
        network: its architecture.
        meta: the whole ``checkpoint.json`` dictionary.
        optimizer_tensors: the flattened optimiser/RNG tensors (empty if none stored).
        path: the directory it was read from.
    """

    model: nn.Module
    network: NetworkConfig
    meta: dict[str, Any]
    optimizer_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    path: Path | None = None


def _shard_groups(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[list[str]]:
    """Tensor names split, in order, into groups of at most ``max_bytes`` of data each (a
    larger tensor alone in its group)."""
    groups: list[list[str]] = [[]]
    size = 0
    for name, value in tensors.items():
        nbytes = value.numel() * value.element_size()
        if groups[-1] and size + nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def _save_tensors(
    tensors: dict[str, torch.Tensor], folder: Path, single: str, max_bytes: int
) -> list[str]:
    """Write ``tensors`` as ``single`` or as numbered shards; returns the file names."""
    groups = _shard_groups(tensors, max_bytes)
    if len(groups) == 1:
        names = [single]
    else:
        stem = single.removesuffix(".safetensors")
        names = [
            f"{stem}-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)
        ]
    for name, group in zip(names, groups, strict=True):
        save_file({k: tensors[k] for k in group}, str(folder / name), metadata={"format": FORMAT})
    return names


def tensor_files(path: Path, meta: dict[str, Any], single: str) -> list[str]:
    """The files holding one tensor set of a checkpoint: its shards as listed in
    ``meta["shards"]``, else ``single`` where it exists (else none)."""
    shards = meta.get("shards")
    key = single.removesuffix(".safetensors")
    if isinstance(shards, dict) and key in shards:
        files = shards[key]
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise CheckpointError(f"checkpoint {path}: invalid shard list for {key} in {META_FILE}")
        for f in files:
            check_file_name(path, f)
        return list(files)
    return [single] if (path / single).exists() else []


def check_file_name(path: Path, name: str) -> None:
    """Refuse a tensor file name of ``checkpoint.json`` that is not a plain file name in
    the checkpoint folder (``../x.safetensors``, ``/abs/x``, ``sub/x``, ``..``).

    Raises:
        CheckpointError: naming the file.
    """
    plain = (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not os.path.isabs(name)
        and Path(name).name == name
    )
    if not plain:
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} names the tensor file {shorten(name, quote=True)}, "
            "which is not a "
            "plain file name inside the checkpoint folder; refusing to read or copy it"
        )


_ERR_SHOWN = 240
"""Characters of a checkpoint's content (names, a reader's error) echoed in a message."""

MAX_META_BYTES = 16 * 2**20
"""Largest ``checkpoint.json`` read (a bundled one is a few kB)."""


def check_regular_file(path: Path, name: str) -> int:
    """The size of the file ``name`` of checkpoint ``path``, which must be a regular file
    (a symbolic link to one is fine): a device (``/dev/zero``), a FIFO or a folder would
    hang or fail the checksum and the reader.

    Raises:
        CheckpointError: naming the file and what it is.
    """
    file = path / name
    try:
        info = file.stat()
    except OSError as err:
        raise CheckpointError(
            f"checkpoint {path}: cannot read {name}: {err.strerror or err}"
        ) from None
    kind = irregular_kind(info)
    if kind is not None:
        raise CheckpointError(
            f"checkpoint {path}: {name} is {kind}, not a regular file; refusing to read it"
        )
    return info.st_size


def check_weight_shapes(path: Path, names: list[str], network: NetworkConfig) -> nn.Module:
    """Build ``network`` and compare its parameters' shapes with the tensor shapes in the
    safetensors headers of ``names``, before any weight is read.  The build is bounded:
    it is refused before allocating past the number of stored weights (plus
    :data:`BUILD_SLACK` elements), so an edited architecture never allocates more than
    the weights on disk.

    Returns:
        the freshly built network (random weights), ready for ``load_state_dict``.

    Raises:
        CheckpointError: a missing, extra or differently shaped tensor (an architecture in
            ``checkpoint.json`` that does not fit the weights, e.g. an edited ``d_data``),
            or a header that cannot be read.
    """
    stored: dict[str, tuple[int, ...]] = {}
    for name in names:
        check_regular_file(path, name)
        try:
            with safe_open(str(path / name), framework="pt") as fh:
                for key in fh.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    stored[key] = tuple(fh.get_slice(key).get_shape())
        except (SafetensorError, OSError) as err:
            raise CheckpointError(
                f"checkpoint {path}: cannot read {name}: {shorten(str(err), _ERR_SHOWN)}"
            ) from err
    limit = sum(math.prod(shape) for shape in stored.values()) + BUILD_SLACK
    with _BoundedBuild(limit, path):
        skeleton = build_model(network)
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    wrong = sorted(k for k in set(expected) & set(stored) if expected[k] != stored[k])
    if missing or extra or wrong:
        detail = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing[:3])}" if missing else "",
                f"unexpected {', '.join(extra[:3])}" if extra else "",
                ", ".join(
                    f"{k} stored {list(stored[k])}, architecture {list(expected[k])}"
                    for k in wrong[:3]
                ),
            )
            if part
        )
        raise CheckpointError(
            f"checkpoint {path}: the stored weights do not match the architecture in "
            f"{META_FILE} ({shorten(detail, _ERR_SHOWN)}); refusing to build the network"
        )
    return skeleton


BUILD_SLACK = 2**20
"""Elements a network may allocate beyond its stored weights while it is built
(temporaries of its initialisation, small buffers)."""

_SHAPED_CONSTRUCTORS = frozenset(
    {torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn, torch.full}
)


class _BoundedBuild(TorchFunctionMode):
    """Refuse, before allocating it, any tensor made by a shaped constructor
    (``torch.empty``, ``zeros``, ``randn``...) that would take the network being built past
    ``limit`` elements in all: a network is built for real (once, then loaded) only while
    it stays the size of the weights that will fill it.

    Function modes are per thread: other threads building networks meanwhile are
    untouched.
    """

    def __init__(self, limit: int, path: Path) -> None:
        super().__init__()
        self.limit, self.path, self.total = limit, path, 0

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func not in _SHAPED_CONSTRUCTORS:
            return func(*args, **kwargs)
        size = kwargs.get("size", args[0] if args else ())
        dims = size if isinstance(size, (tuple, list, torch.Size)) else args
        if func is torch.full:
            dims = size
        wanted = math.prod(int(d) for d in dims)
        if self.total + wanted > self.limit:
            raise CheckpointError(
                f"checkpoint {self.path}: the architecture in {META_FILE} needs more than "
                f"the {self.limit:,} weights stored (plus slack): a tensor of shape "
                f"{[int(d) for d in dims]} would pass it; refusing to build the network"
            )
        out = func(*args, **kwargs)
        self.total += out.numel()
        return out


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_finite(tensors: dict[str, torch.Tensor], what: str) -> None:
    """Raise if a floating-point tensor of ``tensors`` holds NaN or infinite values.

    Args:
        tensors: named tensors (weights, optimiser state...); non-floating ones are skipped.
        what: how to name the owner in the message, e.g. ``"checkpoint runs/x/last"``.

    Raises:
        CheckpointError: naming the first non-finite tensor and how many values are bad.
    """
    for name, value in tensors.items():
        if not (value.is_floating_point() or value.is_complex()):
            continue
        bad = int((~torch.isfinite(value)).sum())
        if bad:
            raise CheckpointError(
                f"{what} is broken: tensor {shorten(name, quote=True)} holds {bad} non-finite value(s) "
                f"(NaN or inf) of {value.numel()}"
            )


def optimizer_to_tensors(
    optimizer: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Flatten ``optimizer.state_dict()`` into tensors and a JSON-ready remainder.

    Returns:
        ``tensors`` (``"state/<index>/<name>"``) and ``json_part`` (param groups and
        non-tensor state entries).
    """
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for index, state in sd["state"].items():
        for name, value in state.items():
            key = f"state/{index}/{name}"
            if isinstance(value, torch.Tensor):
                tensors[key] = value.detach().cpu().clone()
            else:
                scalars[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_tensors(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], json_part: dict[str, Any]
) -> None:
    """Inverse of :func:`optimizer_to_tensors`: load the state into ``optimizer``.

    Raises:
        CheckpointError: the stored state does not fit the optimiser's parameters.
    """
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if not key.startswith("state/"):
            continue
        _, index, name = key.split("/", 2)
        state.setdefault(int(index), {})[name] = value
    for key, value in json_part.get("scalars", {}).items():
        _, index, name = key.split("/", 2)
        state.setdefault(int(index), {})[name] = value
    groups = json_part["param_groups"]
    own = optimizer.state_dict()["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in own]:
        raise CheckpointError(
            "optimizer state does not match the model's parameters (different layout)"
        )
    try:
        optimizer.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError, RuntimeError) as err:
        raise CheckpointError(
            f"optimizer state does not match the model: {shorten(str(err), _ERR_SHOWN)}"
        ) from err


def save_checkpoint(
    directory: str | os.PathLike[str],
    model: nn.Module,
    network: NetworkConfig,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    extra_tensors: dict[str, torch.Tensor] | None = None,
    meta: dict[str, Any] | None = None,
    overwrite: bool = False,
    max_shard_bytes: int = SHARD_BYTES,
    weights_dtype: torch.dtype = torch.float32,
) -> Path:
    """Write a checkpoint directory atomically.

    Args:
        directory: target directory (must not exist unless ``overwrite``).
        model: the network (``DistributedDataParallel`` is unwrapped).
        network: its architecture config.
        optimizer: optionally, the optimiser whose state to store for resuming.
        extra_tensors: more tensors for ``optimizer.safetensors`` (e.g. ``"rng/torch"``).
        meta: JSON-ready entries merged into ``checkpoint.json`` (recipe, progress,
            validation metrics, simulator config...).
        overwrite: replace an existing directory.
        max_shard_bytes: largest tensor file (bytes of tensor data); larger states are
            sharded (see the module docstring).
        weights_dtype: storage type of the floating-point weights: ``torch.float32``
            (default), ``torch.bfloat16`` or ``torch.float16`` (rounded to nearest;
            recorded as ``"weights_dtype"`` in ``checkpoint.json``; loading upcasts to
            float32).  The optimiser state stays float32.

    Returns:
        The checkpoint directory.

    Raises:
        CheckpointError: ``directory`` exists (without ``overwrite``), a weight or
            optimiser tensor is not finite (nothing is written then), or the files
            cannot be written (a full disk: the partial copy is removed, an existing
            checkpoint at ``directory`` is untouched), or ``weights_dtype`` is not a
            storage type of :data:`WEIGHT_DTYPES`.
    """
    target = Path(directory)
    dtype_name = next((k for k, v in WEIGHT_DTYPES.items() if v == weights_dtype), None)
    if dtype_name is None:
        raise CheckpointError(
            f"weights_dtype={weights_dtype} is not a storage type of checkpoint weights; "
            f"choose one of {', '.join(f'torch.{k}' for k in WEIGHT_DTYPES)}"
        )
    if target.exists() and not overwrite:
        raise CheckpointError(f"checkpoint {target} exists; pass overwrite=True to replace it")
    module = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    weights = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    check_finite(weights, f"refusing to write checkpoint {target}: the model")
    if weights_dtype != torch.float32:
        weights = {
            k: v.to(weights_dtype) if v.is_floating_point() else v for k, v in weights.items()
        }
        check_finite(weights, f"refusing to write checkpoint {target}: the {dtype_name} weights")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as err:
        raise _write_error(target, err) from err
    try:
        files = _save_tensors(weights, tmp, MODEL_FILE, max_shard_bytes)
        shards: dict[str, list[str]] = {}
        if files != [MODEL_FILE]:
            shards["model"] = list(files)
        body: dict[str, Any] = {
            "format": FORMAT,
            "network": network.to_dict(),
            "vocabulary": network.vocabulary.to_dict(),
            "normalisation": NORMALISATION,
            "torch_version": torch.__version__,
            "created_unix": time.time(),
            "n_parameters": sum(p.numel() for p in module.parameters()),
        }
        body.update(meta or {})
        body.pop("shards", None)  # describes the files written here, never inherited
        body.pop("weights_dtype", None)
        if weights_dtype != torch.float32:
            body["weights_dtype"] = dtype_name
        opt_tensors: dict[str, torch.Tensor] = dict(extra_tensors or {})
        if optimizer is not None:
            t, j = optimizer_to_tensors(optimizer)
            opt_tensors.update(t)
            body["optimizer"] = {"class": type(optimizer).__name__, **j}
        check_finite(opt_tensors, f"refusing to write checkpoint {target}: the optimiser state")
        if opt_tensors:
            opt_files = _save_tensors(opt_tensors, tmp, OPTIMIZER_FILE, max_shard_bytes)
            if opt_files != [OPTIMIZER_FILE]:
                shards["optimizer"] = opt_files
            files += opt_files
        if shards:
            body["shards"] = shards
        body["sha256"] = {name: _sha256(tmp / name) for name in files}
        (tmp / META_FILE).write_text(json.dumps(body, indent=2, sort_keys=True, default=str))
        replace_directory(tmp, target)
    except (SafetensorError, OSError) as err:  # a full disk, a quota, a lost mount
        raise _write_error(target, err) from err
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_error(target: Path, err: BaseException) -> CheckpointError:
    """The clean error of a checkpoint that could not be written (the partial copy is
    removed; an older checkpoint at ``target`` is untouched)."""
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    if (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "StorageFull" in reason:
        reason = "no space left on device"
    return CheckpointError(
        f"cannot write checkpoint {target}: {reason}; nothing was replaced (an earlier "
        "checkpoint there is intact): free space and resume the run"
    )


def replace_directory(tmp: Path, target: Path) -> None:
    """Move the finished directory ``tmp`` to ``target``, replacing any old one.

    Both renames stay within one folder, so ``target`` is never half-written: it is the
    old directory or the new one (a crash between the renames leaves ``.NAME.old``).
    """
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / META_FILE
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a checkpoint directory")
    if not meta_path.exists():
        raise CheckpointError(f"{path} has no {META_FILE}; not an amorgp checkpoint")
    size = check_regular_file(path, META_FILE)
    if size > MAX_META_BYTES:
        raise CheckpointError(
            f"{meta_path} holds {size} bytes, more than the {MAX_META_BYTES} a checkpoint's "
            "metadata may hold; refusing to read it"
        )
    try:
        with meta_path.open("rb") as fh:
            meta = json.loads(fh.read(MAX_META_BYTES + 1).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise CheckpointError(
            f"{meta_path} is corrupted (invalid JSON: {shorten(str(err), _ERR_SHOWN)})"
        ) from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise CheckpointError(
            f"{meta_path}: unsupported format {shorten(found, quote=True)}; expected {FORMAT!r}"
        )
    return meta


def _verify_checksums(path: Path, meta: dict[str, Any]) -> None:
    """Every tensor file must exist, be listed in ``meta["sha256"]`` and match its digest."""
    digests = meta.get("sha256")
    if not isinstance(digests, dict) or not digests:
        raise CheckpointError(
            f"checkpoint {path} has no SHA-256 checksums in {META_FILE}, so its weights "
            "cannot be verified; refusing to load it (pass verify=False to load it anyway)"
        )
    model_files = tensor_files(path, meta, MODEL_FILE) or [MODEL_FILE]
    expected = {*model_files, *tensor_files(path, meta, OPTIMIZER_FILE)}
    unlisted = sorted(expected - set(digests))
    if unlisted:
        raise CheckpointError(
            f"checkpoint {path}: {META_FILE} holds no SHA-256 checksum of "
            f"{shorten(', '.join(unlisted), _ERR_SHOWN)}; "
            "refusing to load unverified tensors (pass verify=False to load it anyway)"
        )
    for name, digest in digests.items():
        check_file_name(path, name)
        file = path / name
        if not file.exists():
            raise CheckpointError(f"checkpoint {path} is missing {shorten(name)}")
        check_regular_file(path, name)
        if _sha256(file) != digest:
            raise CheckpointError(
                f"checkpoint {path}: {shorten(name)} is corrupted (SHA-256 mismatch)"
            )


def _load_tensors(path: Path, names: list[str]) -> dict[str, torch.Tensor]:
    """The tensors of ``names`` (one file or the shards of one set), merged."""
    tensors: dict[str, torch.Tensor] = {}
    for name in names:
        check_regular_file(path, name)
        try:
            part = load_file(str(path / name))
        except (SafetensorError, OSError) as err:
            raise CheckpointError(
                f"checkpoint {path}: cannot read {name}: {shorten(str(err), _ERR_SHOWN)}"
            ) from err
        check_finite(part, f"checkpoint {path} ({name})")
        twice = sorted(set(part) & set(tensors))
        if twice:
            raise CheckpointError(
                f"checkpoint {path}: {name} repeats tensor(s) {shorten(twice[:3], _ERR_SHOWN)}"
            )
        tensors.update(part)
    return tensors


def _upcast(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Weights stored in a 16-bit float type (bfloat16, float16), as float32 (the
    network's precision); other tensors unchanged."""
    low = (torch.bfloat16, torch.float16)
    return {k: v.to(torch.float32) if v.dtype in low else v for k, v in weights.items()}


def load_checkpoint(
    directory: str | os.PathLike[str],
    *,
    device: torch.device | str = "cpu",
    expect_network: NetworkConfig | None = None,
    verify: bool = True,
) -> Checkpoint:
    """Read and verify a checkpoint; rebuild the network from its config.

    Args:
        directory: the checkpoint directory (or a symlink such as ``runs/NAME/last``).
        device: where to put the model.
        expect_network: if given, the stored architecture must equal it.
        verify: check the SHA-256 of every tensor file against ``checkpoint.json`` and
            refuse a checkpoint without them.  ``False`` skips the checksums only (for a
            checkpoint written by hand without them); the format, the architecture and
            the finiteness of every tensor are always checked.

    Raises:
        CheckpointError: missing/corrupted files, missing checksums (with ``verify``),
            unknown format, architecture mismatch, weights that do not fit the
            architecture, or a tensor holding NaN or infinite values (named).
    """
    t0 = time.perf_counter()
    path = Path(directory)
    meta = _read_meta(path)
    if verify:
        _verify_checksums(path, meta)
    try:
        network = NetworkConfig.from_dict(meta["network"])
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"checkpoint {path}: invalid network config: {shorten(str(err), _ERR_SHOWN)}"
        ) from err
    if expect_network is not None and expect_network != network:
        raise CheckpointError(
            f"checkpoint {path} holds a different architecture: "
            f"{shorten(str(network), _ERR_SHOWN)} != expected "
            f"{shorten(str(expect_network), _ERR_SHOWN)}"
        )
    model_files = tensor_files(path, meta, MODEL_FILE) or [MODEL_FILE]
    model = check_weight_shapes(path, model_files, network)
    weights = _upcast(_load_tensors(path, model_files))
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:
        raise CheckpointError(
            f"checkpoint {path}: weights do not match the architecture: "
            f"{shorten(str(err), _ERR_SHOWN)}"
        ) from err
    opt: dict[str, torch.Tensor] = {}
    opt_files = tensor_files(path, meta, OPTIMIZER_FILE)
    if opt_files:
        opt = _load_tensors(path, opt_files)
    logger.info(
        "loaded checkpoint %s (%s network, %d parameters%s) in %.2f s",
        path,
        network.model,
        sum(p.numel() for p in model.parameters()),
        ", checksums verified" if verify else "",
        time.perf_counter() - t0,
    )
    return Checkpoint(model.to(device).eval(), network, meta, opt, path)


def load_model(
    directory: str | os.PathLike[str], device: torch.device | str = "cpu", *, verify: bool = True
) -> nn.Module:
    """The network of a checkpoint, in eval mode (see :func:`load_checkpoint`)."""
    return load_checkpoint(directory, device=device, verify=verify).model
