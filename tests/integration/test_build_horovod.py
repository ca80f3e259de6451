"""
The Gloo interface patch that scripts/build_horovod.sh applies to Horovod's sdist: it applies to the real sdist
(downloaded with pip, as the script does), changes exactly one line, the one in ``InitializeForProcessSet``, and the
installed build (scripts/setup.sh runs the script) carries the label the launcher reads.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from airflow_provider_horovod.runtime.task.plan import GLOO_IFACE_PATCH_LABEL, horovod_honours_gloo_iface

ROOT = Path(__file__).resolve().parents[2]
GLOO_CONTEXT = "horovod/common/gloo/gloo_context.cc"


def _function_of(lines: list[str], index: int) -> str:
    """The name of the C++ function whose body holds line ``index`` (the last definition above it)."""
    for line in reversed(lines[:index]):
        if line.startswith("void GlooContext::"):
            return line.split("::")[1].split("(")[0]
    return ""


def test_the_patch_changes_only_the_process_set_interface(tmp_path):
    script = ROOT / "scripts" / "build_horovod.sh"
    run = subprocess.run(
        ["bash", str(script), "--source-dir", str(tmp_path), sys.executable],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if run.returncode == 2:  # the script's code for "pip could not download the sdist"
        pytest.skip(f"no package index to download Horovod's sdist from: {run.stderr[-500:]}")
    assert run.returncode == 0, run.stderr
    (sdist,) = tmp_path.glob("horovod-*.tar.gz")
    with tarfile.open(sdist) as tar:
        original = tar.extractfile(f"{sdist.name[: -len('.tar.gz')]}/{GLOO_CONTEXT}").read().decode().splitlines()
    patched = (tmp_path / sdist.name[: -len(".tar.gz")] / GLOO_CONTEXT).read_text().splitlines()
    assert len(patched) == len(original)
    changed = [i for i, (a, b) in enumerate(zip(original, patched, strict=False)) if a != b]
    assert len(changed) == 1, changed
    (i,) = changed
    assert original[i].strip() == "device_attr.iface = gloo_iface_;"
    assert patched[i].strip() == "device_attr.iface = global_context.gloo_iface_;"
    assert _function_of(patched, i) == "InitializeForProcessSet"
    # the global context's own device keeps the interface it was initialised with (from HOROVOD_GLOO_IFACE)
    assert [
        _function_of(patched, j) for j, line in enumerate(patched) if "device_attr.iface = gloo_iface_;" in line
    ] == ["InitializeFromMPI", "Initialize"]


def test_the_installed_horovod_is_the_patched_build():
    from importlib.metadata import version

    assert version("horovod").endswith(f"+{GLOO_IFACE_PATCH_LABEL}"), "run scripts/setup.sh to rebuild Horovod"
    assert horovod_honours_gloo_iface()
