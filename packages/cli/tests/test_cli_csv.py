"""Hostile CSV input through ``amorgp infer``: encodings, delimiters, quoting, odd cells.

Every accepted variant must give exactly the result of the plain comma-separated UTF-8
file (the oracle); every refused one a one-line error with exit code 1 naming the file
line (1-based, header counted).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from click.testing import CliRunner, Result

from amorgp.amortizer.frontends.io import read_csv
from amorgp.cli import main
from amorgp.cli._output import atomic_write, check_output_path
from amorgp.core.errors import DataError

ROWS = [(float(a), float(b)) for a, b in np.random.default_rng(0).uniform(0, 10, (12, 2))]
PLAIN = "time,value\n" + "".join(f"{a!r},{b!r}\n" for a, b in ROWS)


def _infer(path: Path, ckpt: Path, *extra: str) -> Result:
    return CliRunner().invoke(
        main, ["infer", str(path), "-k", "SE", "--json", "--checkpoint", str(ckpt), *extra]
    )


def _refused(folder: Path, ckpt: Path, raw: bytes, message: str) -> Result:
    """``infer --json`` on a file of the bytes ``raw``: exit status 1 and ``message``."""
    path = folder / "bad.csv"
    path.write_bytes(raw)
    res = _infer(path, ckpt)
    assert res.exit_code == 1, res.output
    assert message in res.output
    return res


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("csv") / "plain.csv"
    path.write_text(PLAIN)
    res = _infer(path, tiny_checkpoint)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["results"]  # type: ignore[no-any-return]


VARIANTS = {
    "utf8_bom": lambda t: b"\xef\xbb\xbf" + t.encode(),
    "utf16": lambda t: t.encode("utf-16"),
    "utf16_be_bom": lambda t: b"\xfe\xff" + t.encode("utf-16-be"),
    "utf32": lambda t: t.encode("utf-32"),
    "semicolon": lambda t: t.replace(",", ";").encode(),
    "tab": lambda t: t.replace(",", "\t").encode(),
    "crlf": lambda t: t.replace("\n", "\r\n").encode(),
    "quoted": lambda t: "\n".join(
        ",".join(f'"{c}"' for c in line.split(",")) for line in t.splitlines()
    ).encode(),
    "blank_lines_and_spaces": lambda t: (
        "\n\n" + t.replace(",", " , ").replace("\n", "\n \n")
    ).encode(),
    "no_final_newline": lambda t: t.rstrip("\n").encode(),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_accepted_variants_give_the_plain_result(
    tmp_path: Path, tiny_checkpoint: Path, oracle: list[dict[str, Any]], variant: str
) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(VARIANTS[variant](PLAIN))
    res = _infer(path, tiny_checkpoint)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["features"] == ["time"]  # no BOM or quote in the column name
    assert out["target"] == "value"
    assert out["results"][0]["hyperparameters"] == oracle[0]["hyperparameters"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "time,value\n\n1,2\n\n2,3\n3,nan\n",
            "column 'value' has a NaN or infinite value ('nan' on line 6)",
        ),
        (
            "time,value\n1,2\n\n\ninf,3\n3,4\n",
            "column 'time' has a NaN or infinite value ('inf' on line 5)",
        ),
        ("time,value\n1,2\n\n2,x\n3,4\n", "('x' on line 4)"),
        ('time,value\n1,2\n"2\n",3\n3,4\n4,x\n', "('x' on line 6)"),  # a quoted line break
        ("time,value\n1,2\n\n2,3,4\n3,4\n", "line 4: 3 fields"),
        ('time,value\n1,2\n"1,000",3\n3,4\n', "no thousands separators"),
        ("time;value\n1;2\n2,5;3\n3;4\n", "'.' for decimals"),
        ("time,value\n1,2\n1_000,3\n3,4\n", "('1_000' on line 3)"),
        ("time,value\n1,2\n0x10,3\n3,4\n", "('0x10' on line 3)"),
        ("time,value\n", "has a header but no data rows"),
        ("\n \n", "is empty"),
        ("value\n1\n2\n3\n", "at least one input column"),
        ("time,value,\n1,2,\n2,3,\n3,4,\n", "column 3 of the header has no name"),
        (",value\n1,2\n2,3\n3,4\n", "column 1 of the header has no name"),
        ("a,a\n1,2\n2,3\n3,4\n", "duplicate column names"),
        ("# comment\ntime,value\n1,2\n2,3\n", "line 2: 2 fields, but the header has 1"),
    ],
)
def test_refused_content_names_the_file_line(
    tmp_path: Path, tiny_checkpoint: Path, content: str, message: str
) -> None:
    res = _refused(tmp_path, tiny_checkpoint, content.encode(), message)
    assert len(res.stderr.strip().splitlines()) == 1
    assert json.loads(res.stdout)["error"]["message"] in res.stderr  # --json: the error too


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("time,valeur\n1,2\n".replace("valeur", "température").encode("latin-1"), "not UTF-8 text"),
        (bytes(range(256)) * 4, "not UTF-8 text"),
        (b"time,value\n1,2\x00\n2,3\n3,4\n", "not numeric"),
    ],
)
def test_undecodable_bytes_are_refused(
    tmp_path: Path, tiny_checkpoint: Path, raw: bytes, message: str
) -> None:
    _refused(tmp_path, tiny_checkpoint, raw, message)


def test_a_folder_as_data_is_a_usage_error(tmp_path: Path, tiny_checkpoint: Path) -> None:
    res = _infer(tmp_path, tiny_checkpoint)
    assert res.exit_code == 2, res.output
    assert "is a directory" in res.output


def test_duplicated_rows_and_a_constant_column_give_finite_results(
    tmp_path: Path, tiny_checkpoint: Path
) -> None:
    path = tmp_path / "dup.csv"
    path.write_text("c,time,value\n" + "".join(f"5,{a!r},{b!r}\n" for a, b in ROWS * 3))
    res = _infer(path, tiny_checkpoint)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)  # strict JSON: no NaN/Infinity tokens
    assert out["features"] == ["c", "time"]
    assert np.isfinite(out["results"][0]["log_marginal_likelihood"])


@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e-200])
def test_unrepresentable_scales_are_one_clean_error(
    tmp_path: Path, tiny_checkpoint: Path, scale: float
) -> None:
    path = tmp_path / "scaled.csv"
    path.write_text("time,value\n" + "".join(f"{a!r},{b * scale!r}\n" for a, b in ROWS))
    res = _infer(path, tiny_checkpoint)
    assert res.exit_code == 1, res.output
    assert "results" not in json.loads(res.stdout)  # no NaN/inf/0 result printed
    assert len(res.stderr.strip().splitlines()) == 1
    assert "rescale" in res.output


@pytest.mark.parametrize("scale", [1e100, 1e-100])
def test_large_and_small_scales_map_back_exactly(
    tmp_path: Path, tiny_checkpoint: Path, oracle: list[dict[str, Any]], scale: float
) -> None:
    path = tmp_path / "scaled.csv"
    path.write_text("time,value\n" + "".join(f"{a!r},{b * scale!r}\n" for a, b in ROWS))
    res = _infer(path, tiny_checkpoint)
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)["results"][0]
    assert got["noise"] == pytest.approx(oracle[0]["noise"], rel=1e-6)  # scale-free
    # noise variance in original units scales with the square of the targets' scale
    assert got["noise_original"] == pytest.approx(oracle[0]["noise_original"] * scale**2, rel=1e-6)


def test_read_csv_reports_file_lines_in_the_api(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("a,t\n\n1,2\n\n2,nan\n3,4\n")
    with pytest.raises(
        DataError, match=r"column 't' has a NaN or infinite value \('nan' on line 5\)"
    ):
        read_csv(path)


def test_a_symlinked_output_replaces_the_target_not_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    check_output_path(link, "--output")
    atomic_write(link, lambda p: p.write_text("new\n"))
    assert link.is_symlink()
    assert real.read_text() == "new\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    check_output_path(fifo, "--output")
    atomic_write(fifo, lambda p: p.write_text("through the pipe\n"))
    reader.join(timeout=60)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the pipe


def test_a_full_disk_is_one_clean_error_and_keeps_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "pred.csv"
    out.write_text("old\n")

    def full(tmp: Path) -> None:
        tmp.write_text("par")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(click.ClickException, match=r"cannot write .*pred.csv: No space left"):
        atomic_write(out, full)
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["pred.csv"]
