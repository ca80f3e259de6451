"""The prepared GPU check runs its CPU fallback here (no GPU) and reports what it measured."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_gpu_check_cpu_fallback(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.run([str(REPO / "scripts" / "gpu_check.sh"), "--epochs", "1", "--copies", "4", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "cpu" and report["ranks"] == 2 and report["cuda_visible_devices"] == ["", ""]
    assert report["samples_per_s"] > 0 and report["allreduce"] == "Gloo (CPU tensors)"
    assert report["notes"], "the fallback must say why it ran on the CPU"
    assert "measured : global training throughput" in proc.stdout
