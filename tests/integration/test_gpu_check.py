"""The prepared GPU check runs its CPU fallback here (no GPU) and reports what it measured."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_gpu_check_cpu_fallback(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [str(REPO / "scripts" / "gpu_check.sh"), "--epochs", "1", "--copies", "4", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["ranks"] == 2 and report["cuda_visible_devices"] == ["", ""]
    assert report["samples_per_s"] > 0 and report["allreduce"] == "Gloo (CPU tensors)"
    assert report["notes"], "the fallback must say why it ran on the CPU"
    assert "measured : global training throughput" in proc.stdout


def test_gpu_check_ddp_cpu_fallback(tmp_path):
    """The DDP case (TorchDistributor, NCCL on GPUs) falls back to DDP over Gloo here, one rank per process."""
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [
            str(REPO / "scripts" / "gpu_check.sh"),
            "--launcher",
            "ddp",
            "--epochs",
            "1",
            "--copies",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["launcher"] == "ddp" and report["mode"] == "cpu" and report["ranks"] == 2
    assert report["cuda_visible_devices"] == ["", ""] and report["local_ranks"] == ["0", "1"]
    assert report["allreduce"] == "DDP over Gloo (CPU tensors)"
    assert report["samples_per_s"] > 0 and report["train_accuracy"] > 0.5
    assert report["notes"], "the fallback must say why it ran on the CPU"
