"""``amorgp campaign``: options checked before a campaign starts."""

from __future__ import annotations

from pathlib import Path

import torch
from click.testing import CliRunner


def test_campaign_cli_refuses_an_unusable_device(tmp_path: Path) -> None:

    from amorgp.cli import main

    bad = CliRunner().invoke(main, ["campaign", "--state", str(tmp_path), "--device", "tpu"])
    assert bad.exit_code == 2
    assert "--device" in bad.output
    if not torch.cuda.is_available():
        gpu = CliRunner().invoke(main, ["campaign", "--state", str(tmp_path), "--device", "cuda"])
        assert gpu.exit_code == 2
        assert "no CUDA device is available" in gpu.output
    assert not (tmp_path / "campaign.json").exists()  # nothing started
