"""The KeOps probe: a pykeops that segfaults, raises or hangs never takes the process down;
the parent warns once with the reason and falls back to the torch block operator."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from amorgp.kernel_grammar import DimWiseStructure
from amorgp.lazy_kernels import (
    BlockKernelOperator,
    DimWiseKernel,
    KeOpsKernel,
    Posterior,
    choose_backend,
    keops_usable,
    kernel_operator,
    probe_keops,
)
from amorgp.lazy_kernels import probe as probe_module
from amorgp.lazy_kernels.testing.keops_standin import BrokenMode, write_broken_pykeops

STRUCTURE = DimWiseStructure.parse("SE@0 * PER@1")


@pytest.fixture
def fresh_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No memo, no warning yet, and a private cache file (returned)."""
    monkeypatch.setattr(probe_module, "_MEMO", {})
    monkeypatch.setattr(probe_module, "_WARNED", set())
    monkeypatch.setattr(probe_module, "_USABLE", {})
    cache = tmp_path / "cache" / "probe.json"
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_CACHE", str(cache))
    return cache


def _broken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: BrokenMode) -> None:
    root = write_broken_pykeops(tmp_path / f"broken-{mode}", mode)
    monkeypatch.syspath_prepend(str(root))


def _kernel() -> tuple[DimWiseKernel, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(150, 2, generator=g, dtype=torch.float64)
    y = torch.sin(5 * X[:, 0]) + 0.1 * torch.randn(150, generator=g, dtype=torch.float64)
    params = torch.tensor([[[1.0, 0.3, 0.0]], [[1.0, 0.5, 0.7]]], dtype=torch.float64)
    return DimWiseKernel(STRUCTURE, params), X, y


def test_a_segfaulting_keops_is_detected_warned_once_and_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_probe: Path
) -> None:
    _broken(monkeypatch, tmp_path, "segfault")
    result = probe_keops("cpu")
    assert not result.ok
    assert not result.cached
    assert "signal SIGSEGV" in result.reason
    with pytest.warns(UserWarning, match=r"KeOps does not work on cpu: .*SIGSEGV.*block"):
        assert not keops_usable("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not keops_usable("cpu")  # warned once per process
    # the outcome is on disk: a new process reads it instead of probing again
    entries = json.loads(fresh_probe.read_text())
    assert [e["ok"] for e in entries.values()] == [False]
    monkeypatch.setattr(probe_module, "_MEMO", {})

    def no_child(*args: object) -> None:
        raise AssertionError("probed again despite the cache")

    monkeypatch.setattr(probe_module, "_run_child", no_child)
    again = probe_keops("cpu")
    assert again.cached
    assert not again.ok
    assert "SIGSEGV" in again.reason


def test_a_raising_keops_reports_the_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_probe: Path
) -> None:
    _broken(monkeypatch, tmp_path, "raise")
    result = probe_keops("cpu")
    assert not result.ok
    assert "stand-in pykeops: code generation failed" in result.reason


def test_a_hanging_probe_times_out_and_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_probe: Path
) -> None:
    _broken(monkeypatch, tmp_path, "hang")
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_TIMEOUT", "3")
    result = probe_keops("cpu")
    assert not result.ok
    assert "did not finish within 3 s" in result.reason
    assert not fresh_probe.exists()


def test_the_disk_cache_can_be_turned_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_probe: Path
) -> None:
    _broken(monkeypatch, tmp_path, "raise")
    monkeypatch.setenv("AMORGP_KEOPS_PROBE_CACHE", "off")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert probe_module.probe_cache_path() is None
    assert not probe_keops("cpu").ok
    assert not (tmp_path / "home").exists()


def test_exact_gp_falls_back_to_the_block_operator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_probe: Path
) -> None:
    """``auto`` beyond the dense limit and an explicit ``keops`` both end on the block
    operator, with one warning, and predict like the dense Cholesky oracle."""
    _broken(monkeypatch, tmp_path, "segfault")
    kernel, X, y = _kernel()
    n = X.shape[0]
    budget = 8 * n * n  # below the dense evaluator's needs: only a lazy operator fits
    with pytest.warns(UserWarning, match="SIGSEGV"):
        assert choose_backend(n, memory_budget=budget) == "block"
    ref_mean, ref_var = Posterior.from_kernel(kernel, X, y, 0.05, backend="cholesky").predict(X[:5])
    for backend in ("auto", "keops"):
        gp = Posterior.from_kernel(kernel, X, y, 0.05, backend=backend, memory_budget=budget)  # type: ignore[arg-type]
        assert gp.backend == "block"
        mean, var = gp.predict(X[:5])
        torch.testing.assert_close(mean, ref_mean, rtol=1e-6, atol=1e-7)
        assert var is not None
        assert ref_var is not None
        torch.testing.assert_close(var, ref_var, rtol=1e-5, atol=1e-7)
    assert isinstance(kernel_operator(kernel, X, backend="keops"), BlockKernelOperator)


def test_a_keops_kernel_falls_back_to_torch_blocks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_probe: Path
) -> None:
    _broken(monkeypatch, tmp_path, "segfault")
    kernel, X, _ = _kernel()
    V = torch.randn(150, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with pytest.warns(UserWarning, match="SIGSEGV"):
        out = KeOpsKernel(STRUCTURE, kernel.params).matmul(X, X, V)
    torch.testing.assert_close(out, kernel(X) @ V, rtol=1e-12, atol=1e-12)


def test_no_pykeops_means_no_probe_and_no_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_probe: Path
) -> None:
    monkeypatch.setattr(probe_module, "keops_installed", lambda: False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not keops_usable("cpu")
        assert probe_keops("cpu").reason == "pykeops is not installed"
    assert not fresh_probe.exists()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_keops_on_cuda_where_the_probe_passes() -> None:
    """KeOps matvecs on CUDA equal the dense evaluator where KeOps works there; where it
    does not, the probe says why and the KeOps kernel falls back to the block operator."""
    kernel, X, _ = _kernel()
    Xc, params = X.cuda(), kernel.params.cuda()
    V = torch.randn(150, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        usable = keops_usable("cuda")
        out = KeOpsKernel(STRUCTURE, params).matmul(Xc, Xc, V.cuda())
    ref = DimWiseKernel(STRUCTURE, params)(Xc) @ V.cuda()
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    if not usable:
        assert probe_keops("cuda").reason


def test_keops_can_be_turned_off(monkeypatch: pytest.MonkeyPatch, fresh_probe: Path) -> None:
    monkeypatch.setenv("AMORGP_KEOPS", "off")
    monkeypatch.setattr(probe_module, "keops_installed", lambda: True)

    def no_probe(*args: object, **kwargs: object) -> None:
        raise AssertionError("probed although KeOps is off")

    monkeypatch.setattr(probe_module, "probe_keops", no_probe)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not keops_usable("cpu")
        assert choose_backend(100_000) == "block"
