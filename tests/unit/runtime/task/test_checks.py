"""
The multi-host pre-check for an unpatched Horovod 0.28's Gloo, which binds process-set connections to the host
name's address; a build patched by scripts/build_horovod.sh (version label ``+gloo.iface``) skips it.
"""

from __future__ import annotations

import socket

import pytest

from airflow_provider_horovod.runtime.errors import LaunchError
from airflow_provider_horovod.runtime.task import checks
from airflow_provider_horovod.runtime.task.plan import build_plan, gloo_host_address, horovod_honours_gloo_iface


@pytest.fixture
def unpatched(monkeypatch):
    monkeypatch.setattr(checks, "horovod_honours_gloo_iface", lambda: False)


def test_gloo_host_address_mimics_gloo():
    assert gloo_host_address("localhost") in {"127.0.0.1", "::1"}
    assert gloo_host_address("no-such-host.invalid") is None


@pytest.mark.parametrize(
    "resolved, found",
    [("127.0.1.1", "resolves to 127.0.1.1"), (None, "does not resolve to an address of this machine")],
)
def test_multi_host_job_refuses_a_host_name_other_hosts_cannot_reach(monkeypatch, unpatched, resolved, found):
    monkeypatch.setattr(socket, "gethostname", lambda: "node7")
    monkeypatch.setattr(checks, "gloo_host_address", lambda name: resolved)
    with pytest.raises(LaunchError) as info:
        checks._check_host_name(build_plan(["10.0.0.1", "10.0.0.2"]), "10.0.0.2")
    message = str(info.value)
    assert message.startswith(f"on 10.0.0.2: the host name 'node7' {found}.")
    assert "ignores HOROVOD_GLOO_IFACE" in message and "10.0.0.2 in /etc/hosts" in message
    assert "scripts/build_horovod.sh" in message


def test_reachable_host_name_and_single_host_jobs_pass(monkeypatch, unpatched):
    monkeypatch.setattr(checks, "gloo_host_address", lambda name: "10.0.0.2")
    checks._check_host_name(build_plan(["10.0.0.1", "10.0.0.2"]), "10.0.0.2")
    monkeypatch.setattr(checks, "gloo_host_address", lambda name: "127.0.0.1")
    checks._check_host_name(build_plan(["127.0.0.1", "127.0.0.1"]), "127.0.0.1")  # one host: loopback is fine


def test_patched_horovod_skips_the_check(monkeypatch):
    monkeypatch.setattr(checks, "gloo_host_address", lambda name: "127.0.1.1")
    monkeypatch.setattr(checks, "horovod_honours_gloo_iface", lambda: True)
    checks._check_host_name(build_plan(["10.0.0.1", "10.0.0.2"]), "10.0.0.2")
    monkeypatch.setattr(checks, "horovod_honours_gloo_iface", lambda: False)
    with pytest.raises(LaunchError):
        checks._check_host_name(build_plan(["10.0.0.1", "10.0.0.2"]), "10.0.0.2")


@pytest.mark.parametrize(
    "installed, patched",
    [
        ("0.28.1+gloo.iface", True),
        ("0.28.1", False),
        ("0.28.1+local", False),
        ("0.28.1+gloo.iface.x", False),
        (None, False),
    ],
)
def test_a_patched_build_is_known_by_its_version_label(monkeypatch, installed, patched):
    import importlib.metadata

    def version(name):
        assert name == "horovod"
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert horovod_honours_gloo_iface() is patched


def test_ranks_on_a_driver_without_horovod_are_refused_naming_the_extra():
    """np < 0 with launcher='horovod' where Horovod is missing: one clear error, before any rank starts."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['horovod'] = None\n"
        "from airflow_provider_horovod.runtime import HorovodRunner, LaunchError\n"
        "try:\n"
        "    HorovodRunner(np=-2).run(print)\n"
        "except LaunchError as err:\n"
        "    print('LAUNCH', err)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        "LAUNCH horovod (horovod.runner.http.http_server) is not importable by the "
        f"driver's Python {sys.executable}: install it there (Horovod built with Gloo and "
        "PyTorch: pip install 'airflow-provider-horovod[horovod]'"
    ), proc.stdout


def test_the_preflight_finds_a_launchers_modules_without_importing_them():
    """``find_spec("torch.distributed")`` imports torch: 1.2 s of CPU in every barrier task's Python worker before its
    rank started (the rank imports it anyway). The task's check looks the modules up on the path instead."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from airflow_provider_horovod.runtime.task.checks import _preflight, installed\n"
        "_preflight('127.0.0.1', 'torch')\n"
        "_preflight('127.0.0.1', 'horovod')\n"
        "print(sorted(m for m in ('torch', 'horovod') if m in sys.modules))\n"
        "print([installed(m) for m in ('torch.distributed', 'torch.no_such', 'no_such.sub', 'json.decoder')])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "[True, False, False, True]"]
