"""The KeOps probe's environment variables are checked: a value that means nothing is an
``OptionError`` naming the variable, never a silent default (issue 64, item 16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amorgp.core.errors import OptionError
from amorgp.lazy_kernels import probe as probe_module
from amorgp.lazy_kernels.probe import KeOpsProbe


@pytest.mark.parametrize("value", ["off", "0", "FALSE", " no "])
def test_off_values_disable_keops(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AMORGP_KEOPS", value)
    assert probe_module.keops_disabled() is True
    assert probe_module.keops_usable("cpu") is False


@pytest.mark.parametrize("value", ["", "on", "1", "true", "yes", "auto"])
def test_on_values_leave_it_to_the_probe(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AMORGP_KEOPS", value)
    assert probe_module.keops_disabled() is False


@pytest.mark.parametrize("value", ["garbage", "2", "offf"])
def test_a_meaningless_keops_switch_is_an_option_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AMORGP_KEOPS", value)
    with pytest.raises(OptionError, match=rf"AMORGP_KEOPS='{value}' is not understood"):
        probe_module.keops_usable("cpu")


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf", "soon"])
def test_the_probe_timeout_must_be_finite_and_positive(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_TIMEOUT", value)
    with pytest.raises(OptionError, match="must be a finite positive number of seconds"):
        probe_module._timeout()


@pytest.mark.parametrize("value", ["3000000", "1e7", "1e300", "86400.5"])
def test_a_probe_timeout_past_one_day_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """``subprocess.run`` raised ``OverflowError`` for timeouts past some 25 days."""
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_TIMEOUT", value)
    with pytest.raises(OptionError, match=r"at most 86400 \(default 600\)"):
        probe_module._timeout()
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_TIMEOUT", "86400")
    assert probe_module._timeout() == 86400.0


def test_a_long_probe_timeout_value_is_cut_in_the_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_TIMEOUT", "9" * 5000)
    with pytest.raises(OptionError, match=r"\.\.\. \(5000 characters\)") as info:
        probe_module._timeout()
    assert len(str(info.value)) < 200


def test_a_valid_probe_timeout_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_TIMEOUT", " 2.5 ")
    assert probe_module._timeout() == 2.5
    monkeypatch.delenv("AMORGP_KEOPS_PROBE_TIMEOUT")
    assert probe_module._timeout() == probe_module.PROBE_TIMEOUT_S


def test_a_folder_as_the_probe_cache_is_an_option_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_CACHE", str(tmp_path))
    with pytest.raises(OptionError, match="is a folder; give the path of a file"):
        probe_module.probe_cache_path()
    assert list(tmp_path.iterdir()) == []


def test_a_device_or_oversized_cache_is_neither_read_nor_replaced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    assert probe_module._read_cache(zero) == {}
    probe_module._write_cache(zero, "k", KeOpsProbe(True, "ok"))
    assert zero.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zero.json"]
    big = tmp_path / "big.json"
    big.write_text('{"k": {"ok": true, "reason": "ok"}}')
    monkeypatch.setattr(probe_module, "MAX_CACHE_BYTES", 10)
    assert probe_module._read_cache(big) == {}
    monkeypatch.undo()
    assert probe_module._read_cache(big) == {"k": {"ok": True, "reason": "ok"}}


def test_a_failed_cache_write_leaves_no_temporary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "probe.json"

    def fail(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(probe_module.os, "replace", fail)
    probe_module._write_cache(cache, "k", KeOpsProbe(True, "ok"))
    assert list(tmp_path.iterdir()) == []
