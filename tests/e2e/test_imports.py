"""What each process loads (issue 18): the serving gateway never numpy or ``gguf`` — not even
once its planner has read a GGUF header — and ``modelswap diagnose`` / ``check`` never the
server. Checked on the real processes (``/proc/<pid>/maps``, ``sys.modules`` at exit), never
by timing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.e2e.conftest import HANG, REPO, Gateway, chat, llamacpp_cmd, smollm2_gguf

pytestmark = pytest.mark.e2e

# Run a CLI subcommand in this interpreter, then say which of these it had loaded.
PROBE = """
import json, sys
from modelswap.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = ("modelswap.http", "modelswap.runtime", "aiohttp", "numpy", "gguf", "prometheus_client")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))), file=sys.stderr)
"""


def loaded_by(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=HANG,
        cwd=REPO,
        check=False,
    )
    found: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return found


def test_diagnose_and_check_never_load_the_server(tmp_path: Path) -> None:
    log = REPO / "tests" / "data" / "startup-logs" / "llamacpp-cpu-smollm2.log"
    assert loaded_by("diagnose", str(log)) == []
    config = tmp_path / "c.yaml"
    config.write_text(f"models:\n  m:\n    cmd: {llamacpp_cmd()}\n")
    assert loaded_by("check", str(config)) == []  # its plan line read the GGUF header too


def numpy_mapped(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if "numpy" in line})


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_a_serving_gateway_that_planned_a_gguf_model_has_no_numpy(
    gateway: Callable[..., Gateway],
) -> None:
    gw = gateway(f"  smollm2:\n    cmd: {llamacpp_cmd()}\n")
    assert chat(gw, "smollm2", max_tokens=2).status == 200
    # The planner ran in the gateway (it read the GGUF header on the start) and compared its
    # plan with the receipt: that is when gguf used to bring numpy in.
    gw.wait_for(lambda: "plan" in gw.running().get("smollm2", {}))
    assert numpy_mapped(gw.proc.pid) == []


def test_the_app_and_the_gguf_header_walk_load_neither_numpy_nor_gguf() -> None:
    """The same in-process: build the app's modules, plan the GGUF file, look."""
    code = (
        "import sys; from pathlib import Path\n"
        "import modelswap.http.server.serving\n"
        "from modelswap.planner.gguf_reader import shape_from_gguf\n"
        f"shape_from_gguf(Path({smollm2_gguf()!r}))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'gguf')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG, check=True
    )
    assert done.stdout.strip() == "[]"
