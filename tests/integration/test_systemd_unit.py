"""``deploy/systemd/modelswap.service``: ``systemd-analyze verify`` accepts it (where systemd is
installed; skipped, with the reason, elsewhere), it carries the hardening docs/deploying.md lists,
and the command it runs is modelswap's serve with the reload signal modelswap handles.

``verify`` also checks that ExecStart's program exists, so it runs on a copy whose ExecStart
is this checkout's ``modelswap`` instead of ``/opt/modelswap/bin/modelswap``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "modelswap.service"
INSTALLED = "/opt/modelswap/bin/modelswap"


def settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    here = Path(sys.executable).with_name("modelswap")
    assert here.exists(), here
    copy = tmp_path / "modelswap.service"
    copy.write_text(UNIT.read_text().replace(INSTALLED, str(here)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "modelswap.service" not in done.stderr, done.stderr  # no warning about the unit


def test_the_unit_is_hardened_and_ends_every_process_of_its_cgroup() -> None:
    unit = settings()
    expected = {
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "StateDirectory": "modelswap",
        "KillMode": "control-group",
        "Restart": "on-failure",
        "DynamicUser": "yes",
        "OOMPolicy": "continue",
        "PrivateTmp": "yes",
    }
    assert {k: unit[k][0] for k in expected} == expected
    assert unit["ExecStart"] == [f"{INSTALLED} serve --config /etc/modelswap/config.yaml"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]  # modelswap reloads on SIGHUP
    assert unit["RestartPreventExitStatus"] == ["2"]  # an invalid config: no restart loop
    assert "XDG_STATE_HOME=%S" in unit["Environment"][0]  # stateDir: /var/lib/modelswap
