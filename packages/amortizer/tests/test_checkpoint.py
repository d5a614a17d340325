"""Tests of the checkpoint format: round trip, optimiser state, corruption and mismatch errors."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from amorgp.amortizer import testing
from amorgp.amortizer.networks.checkpoint import (
    FORMAT,
    load_checkpoint,
    optimizer_from_tensors,
    optimizer_to_tensors,
    save_checkpoint,
)
from amorgp.amortizer.networks.config import PRESETS
from amorgp.amortizer.networks.model import build_model
from amorgp.core.errors import CheckpointError
from amorgp.kernel_grammar import PAPER_VOCABULARY

NET = PRESETS["tiny"].network


def _trained(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = build_model(NET)
    opt = torch.optim.RAdam(model.parameters(), lr=1e-3)
    batch = testing.random_padded_batch(
        torch.Generator().manual_seed(seed), PAPER_VOCABULARY, dtype=torch.float32
    )
    for _ in range(2):
        out = model(batch)
        loss = out.params.log().square().mean() + out.noise.log().square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def test_round_trip_predictions_identical(tmp_path: Path) -> None:
    model, opt = _trained()
    save_checkpoint(tmp_path / "c", model, NET, optimizer=opt, meta={"validation": {"nll": 1.5}})
    ckpt = load_checkpoint(tmp_path / "c")
    assert ckpt.network == NET
    assert ckpt.meta["validation"] == {"nll": 1.5}
    assert "sha256" in ckpt.meta
    batch = testing.random_padded_batch(
        torch.Generator().manual_seed(5), PAPER_VOCABULARY, dtype=torch.float32
    )
    model.eval()
    with torch.no_grad():
        a, b = model(batch), ckpt.model(batch)
    torch.testing.assert_close(a.params, b.params, rtol=0, atol=0)
    torch.testing.assert_close(a.noise, b.noise, rtol=0, atol=0)
    assert not any(p.suffix == ".pkl" for p in (tmp_path / "c").iterdir())


def test_optimizer_state_round_trip_continues_identically() -> None:
    model, opt = _trained()
    tensors, json_part = optimizer_to_tensors(opt)
    json.dumps(json_part)  # JSON-ready
    clone = build_model(NET)
    clone.load_state_dict(model.state_dict())
    opt2 = torch.optim.RAdam(clone.parameters(), lr=1e-3)
    optimizer_from_tensors(opt2, tensors, json.loads(json.dumps(json_part)))
    batch = testing.random_padded_batch(
        torch.Generator().manual_seed(9), PAPER_VOCABULARY, dtype=torch.float32
    )
    for m, o in ((model, opt), (clone, opt2)):
        out = m(batch)
        loss = out.params.log().square().mean()
        o.zero_grad()
        loss.backward()
        o.step()
    for (name, p), q in zip(model.named_parameters(), clone.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_corrupted_weights_detected(tmp_path: Path) -> None:
    model, _ = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET)
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-3] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted"):
        load_checkpoint(path)


def test_missing_or_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no checkpoint\.json"):
        load_checkpoint(tmp_path / "empty")
    model, _ = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET)
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["format"] = "something-else/9"
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unsupported format"):
        load_checkpoint(path)


def test_architecture_mismatch(tmp_path: Path) -> None:
    model, _ = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET)
    with pytest.raises(ValueError, match="different architecture"):
        load_checkpoint(path, expect_network=dataclasses.replace(NET, d_data=32))
    # a config edited by hand so that the weights no longer fit
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["network"]["head_hidden"] = 8
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="do not match the architecture"):
        load_checkpoint(path)


def test_existing_target_needs_overwrite(tmp_path: Path) -> None:
    model, _ = _trained()
    save_checkpoint(tmp_path / "c", model, NET)
    with pytest.raises(ValueError, match="exists"):
        save_checkpoint(tmp_path / "c", model, NET)
    save_checkpoint(tmp_path / "c", model, NET, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


@pytest.mark.parametrize("checksums", ["deleted", "empty", "model-unlisted"])
def test_checkpoint_without_checksums_is_refused_unless_opted_out(
    tmp_path: Path, checksums: str
) -> None:
    """A bit-flipped model whose checksums were removed must not load silently."""
    model, opt = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET, optimizer=opt)
    meta = json.loads((path / "checkpoint.json").read_text())
    if checksums == "deleted":
        del meta["sha256"]
    elif checksums == "empty":
        meta["sha256"] = {}
    else:
        del meta["sha256"]["model.safetensors"]
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"(no SHA-256 checksum).*verify=False"):
        load_checkpoint(path)
    # the caller can opt out explicitly; the weights then load as written
    loaded = load_checkpoint(path, verify=False)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], value, rtol=0, atol=0)


def test_checkpoint_with_unlisted_optimizer_file_is_refused(tmp_path: Path) -> None:
    model, opt = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET, optimizer=opt)
    meta = json.loads((path / "checkpoint.json").read_text())
    del meta["sha256"]["optimizer.safetensors"]
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"checksum of optimizer\.safetensors"):
        load_checkpoint(path)


def test_nan_weights_are_reported_as_a_broken_checkpoint(tmp_path: Path) -> None:
    """Weights written with NaN (checksums matching) are refused, naming the tensor."""
    model, _ = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET)
    weights = load_file(str(path / "model.safetensors"))
    name = sorted(weights)[3]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[:2] = float("nan")
    save_file(weights, str(path / "model.safetensors"), metadata={"format": FORMAT})
    meta = json.loads((path / "checkpoint.json").read_text())
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    meta["sha256"]["model.safetensors"] = digest
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=rf"broken: tensor '{re.escape(name)}' holds 2 non"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="broken"):
        load_checkpoint(path, verify=False)


def test_non_finite_model_is_never_written(tmp_path: Path) -> None:
    model, _ = _trained()
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] = float("inf")
    with pytest.raises(CheckpointError, match=r"refusing to write.*non-finite"):
        save_checkpoint(tmp_path / "c", model, NET)
    assert list(tmp_path.iterdir()) == []


def test_bundled_default_still_verifies() -> None:
    from amorgp.amortizer.api import PRETRAINED_DIR

    ckpt = load_checkpoint(PRETRAINED_DIR)
    assert set(ckpt.meta["sha256"]) == {"model.safetensors"}


def test_large_states_are_sharded_and_load_bit_exactly(tmp_path: Path) -> None:
    """With a small shard limit the weights and the optimiser state are split into
    files of at most that size (in the order of the state), listed under ``shards``, and
    load back bit for bit; a corrupted or missing shard is refused."""
    model, opt = _trained()
    limit = 64 * 2**10
    path = save_checkpoint(tmp_path / "sharded", model, NET, optimizer=opt, max_shard_bytes=limit)
    meta = json.loads((path / "checkpoint.json").read_text())
    model_files, opt_files = meta["shards"]["model"], meta["shards"]["optimizer"]
    assert len(model_files) > 1
    assert len(opt_files) > 1
    assert not (path / "model.safetensors").exists()
    assert set(meta["sha256"]) == {*model_files, *opt_files}
    sizes = {}
    for name in model_files:
        part = load_file(str(path / name))
        sizes[name] = sum(t.numel() * t.element_size() for t in part.values())
        assert sizes[name] <= limit or len(part) == 1  # one oversized tensor alone
    ckpt = load_checkpoint(path)
    for (name, value), ref in zip(ckpt.model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(value, ref), name
    tensors, _ = optimizer_to_tensors(opt)
    assert ckpt.optimizer_tensors.keys() == tensors.keys()
    for key, value in tensors.items():
        assert torch.equal(ckpt.optimizer_tensors[key], value), key
    # an unsharded copy of the same state holds the same tensors
    single = load_checkpoint(save_checkpoint(tmp_path / "single", model, NET, optimizer=opt))
    for a, b in zip(single.model.state_dict().values(), ckpt.model.state_dict().values()):
        assert torch.equal(a, b)
    blob = bytearray((path / model_files[1]).read_bytes())
    blob[-1] ^= 0xFF
    (path / model_files[1]).write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="corrupted"):
        load_checkpoint(path)
    (path / model_files[1]).unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(path)


def test_medium_preset_weights_fit_16_mib_files(tmp_path: Path) -> None:
    """The ``medium`` preset (55 MiB of float32 weights) is written in shards of at most
    16 MiB each, the per-file limit of the GPU machine's channel back."""
    network = PRESETS["medium"].network
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model(network)
    path = save_checkpoint(tmp_path / "medium", model, network)
    files = json.loads((path / "checkpoint.json").read_text())["shards"]["model"]
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    assert total > 50 * 2**20
    assert len(files) >= 4
    assert all((path / f).stat().st_size <= 16 * 2**20 + 2**16 for f in files)  # + header
    loaded = load_checkpoint(path, expect_network=network)
    for a, b in zip(loaded.model.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_bfloat16_storage_rounds_the_weights_and_loads_float32(tmp_path: Path) -> None:
    """``weights_dtype=torch.bfloat16`` stores each weight rounded to nearest bfloat16
    (the safetensors header says BF16), about half the bytes, and loading gives float32
    parameters equal to the rounded values; the network then computes exactly like a
    float32 network holding those values."""
    from safetensors import safe_open

    model, opt = _trained()
    full = save_checkpoint(tmp_path / "f32", model, NET)
    half = save_checkpoint(
        tmp_path / "bf16", model, NET, optimizer=opt, weights_dtype=torch.bfloat16
    )
    meta = json.loads((half / "checkpoint.json").read_text())
    assert meta["weights_dtype"] == "bfloat16"
    assert "weights_dtype" not in json.loads((full / "checkpoint.json").read_text())
    with safe_open(str(half / "model.safetensors"), framework="pt") as fh:
        assert {fh.get_slice(k).get_dtype() for k in fh.keys()} == {"BF16"}  # noqa: SIM118
    w32 = (full / "model.safetensors").stat().st_size
    assert (half / "model.safetensors").stat().st_size < 0.6 * w32  # + the header
    loaded = load_checkpoint(half)
    # the optimiser state stays float32
    assert all(t.dtype == torch.float32 for t in loaded.optimizer_tensors.values())
    rounded = build_model(NET)
    for (name, value), ref in zip(loaded.model.state_dict().items(), model.state_dict().items()):
        assert value.dtype == torch.float32, name
        want = ref[1].detach().to(torch.bfloat16).to(torch.float32)
        assert torch.equal(value, want), name
        # bfloat16 keeps 8 significant bits: relative rounding error at most 2^-8
        scale = ref[1].abs().clamp_min(torch.finfo(torch.float32).tiny)
        assert float(((value - ref[1]).abs() / scale).max()) <= 2.0**-8 + 1e-12, name
    rounded.load_state_dict(
        {k: v.detach().to(torch.bfloat16).to(torch.float32) for k, v in model.state_dict().items()}
    )
    rounded.eval()
    batch = testing.random_padded_batch(
        torch.Generator().manual_seed(5), PAPER_VOCABULARY, dtype=torch.float32
    )
    with torch.no_grad():
        a, b = rounded(batch), loaded.model(batch)
    torch.testing.assert_close(a.params, b.params, rtol=0, atol=0)
    torch.testing.assert_close(a.noise, b.noise, rtol=0, atol=0)


def test_unknown_weight_storage_type_is_refused(tmp_path: Path) -> None:
    model, _ = _trained()
    with pytest.raises(CheckpointError, match="not a storage type"):
        save_checkpoint(tmp_path / "c", model, NET, weights_dtype=torch.int8)
    assert not (tmp_path / "c").exists()


def test_an_architecture_larger_than_its_weights_is_refused_before_it_is_built(
    tmp_path: Path,
) -> None:
    """An edited ``checkpoint.json`` whose network would hold far more weights than the
    file stores is refused by the bounded build, before the big tensors are allocated
    (``d_data = 8192`` with 64 blocks per stage would take tens of gigabytes)."""
    model, _ = _trained()
    path = save_checkpoint(tmp_path / "c", model, NET)
    meta = json.loads((path / "checkpoint.json").read_text())
    meta["network"].update(d_data=8192, n_heads=4, data_blocks=[64, 64, 64, 64])
    (path / "checkpoint.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"needs more than the [\d,]+ weights stored"):
        load_checkpoint(path, verify=False)


def test_bounded_build_counts_every_constructor() -> None:
    """The bound is exact: the network builds under its own parameter count plus the
    slack, and is refused under a smaller one."""
    from amorgp.amortizer.networks.checkpoint import BUILD_SLACK, _BoundedBuild
    from amorgp.amortizer.networks.model import build_model

    count = sum(p.numel() for p in build_model(NET).parameters())
    with _BoundedBuild(count + BUILD_SLACK, Path("x")):
        built = build_model(NET)
    assert sum(p.numel() for p in built.parameters()) == count
    with pytest.raises(ValueError, match="needs more than"), _BoundedBuild(count // 2, Path("x")):
        build_model(NET)


def _edit_meta(path: Path, edit: object) -> None:
    meta = json.loads((path / "checkpoint.json").read_text())
    edit(meta)  # type: ignore[operator]
    (path / "checkpoint.json").write_text(json.dumps(meta))


def test_a_checkpoint_with_100000_vocabulary_symbols_gives_a_bounded_message(
    tmp_path: Path,
) -> None:
    """The whole symbol list came back in the message: a 600 kB line."""
    ckpt = testing.tiny_checkpoint(tmp_path)
    _edit_meta(ckpt, lambda m: m["network"]["vocabulary"].update(symbols=["SE"] * 100_000))
    with pytest.raises(CheckpointError, match=r"invalid network config: .*duplicate") as info:
        load_checkpoint(ckpt)
    message = str(info.value)
    assert re.search(r"\.\.\. \(\d{6} characters\)$", message), message[-200:]
    assert len(message) < len(str(ckpt)) + 400
    assert "\n" not in message


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda m: m.update(format="x" * 100_000), "unsupported format 'xxx"),
        (
            lambda m: m["sha256"].update({"../" + "y" * 100_000: "0"}),
            "names the tensor file '../yy",
        ),
    ],
)
def test_long_checkpoint_content_is_cut_in_the_message(
    tmp_path: Path, edit: object, words: str
) -> None:
    ckpt = testing.tiny_checkpoint(tmp_path)
    _edit_meta(ckpt, edit)
    with pytest.raises(CheckpointError, match=re.escape(words)) as info:
        load_checkpoint(ckpt)
    assert "characters)" in str(info.value)
    assert len(str(info.value)) < len(str(ckpt)) * 2 + 400
