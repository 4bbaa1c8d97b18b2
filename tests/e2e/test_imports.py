"""What each process loads (issue 18): the serving gateway never numpy or ``gguf`` — not even
once its planner has read a GGUF header — and ``modelswap diagnose`` / ``check`` never the
server; ``diagnose`` not the config (pydantic, YAML) nor the planner, ``check`` not the log
diagnosis, nor the planner for a model it cannot plan. Checked on the real processes
(``/proc/<pid>/maps``, ``sys.modules`` at exit), never by timing: bench/cli_start.py times them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.e2e.conftest import HANG, REPO, Gateway, chat, llamacpp_cmd, smollm2_gguf

pytestmark = pytest.mark.e2e

# Run a CLI subcommand in this interpreter, then say its exit status and which of the modules
# named by the first argument (a JSON list: each a module or a package) it had loaded.
PROBE = """
import json, sys
names = tuple(json.loads(sys.argv[1]))
from modelswap.cli import main
try:
    status = main(sys.argv[2:])
except SystemExit as exc:
    status = exc.code
found = (m for m in sys.modules if m in names or m.startswith(tuple(n + "." for n in names)))
print(json.dumps({"status": status, "loaded": sorted(found)}), file=sys.stderr)
"""
SERVER = ("modelswap.http", "modelswap.runtime", "aiohttp", "numpy", "gguf", "prometheus_client")
# What a command started by hand has no use for: the gateway's process and request machinery.
GATEWAY = (*SERVER, "modelswap.supervisor", "modelswap.routing", "modelswap.observe", "psutil")
# The log diagnosis: its rules are dozens of regular expressions, compiled as the modules load.
DIAGNOSIS = (
    "modelswap.backends.diagnose",
    "modelswap.backends.causes",
    "modelswap.backends.progress",
    "modelswap.backends.logtext",
    "modelswap.reported",
)
# The planner's readers and arithmetic (``plan`` adds its arguments to every start's parser).
PLANNER = (
    "modelswap.planner.memory",
    "modelswap.planner.hf",
    "modelswap.planner.params",
    "modelswap.planner.shape",
    "modelswap.planner.gguf_reader",
    "modelswap.planner.render",
    "modelswap.planner.gpu",
)


def loaded_by(*argv: str, among: tuple[str, ...] = SERVER, status: int | None = None) -> list[str]:
    """The modules of ``among`` that ``modelswap ARGV`` loaded; its exit status must be
    ``status`` when one is given."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(among), *argv],
        capture_output=True,
        text=True,
        timeout=HANG,
        cwd=REPO,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    if status is not None:
        assert report["status"] == status, done.stderr
    found: list[str] = report["loaded"]
    return found


def test_diagnose_and_check_never_load_the_server(tmp_path: Path) -> None:
    log = REPO / "tests" / "data" / "startup-logs" / "llamacpp-cpu-smollm2.log"
    assert loaded_by("diagnose", str(log)) == []
    config = tmp_path / "c.yaml"
    config.write_text(f"models:\n  m:\n    cmd: {llamacpp_cmd()}\n")
    assert loaded_by("check", str(config)) == []  # its plan line read the GGUF header too


def test_diagnose_loads_neither_the_config_nor_the_planner() -> None:
    log = REPO / "tests" / "data" / "startup-logs" / "vllm-new-kv-cache-too-small.log"
    among = (*GATEWAY, *PLANNER, "modelswap.config", "pydantic", "yaml")
    assert loaded_by("diagnose", str(log), among=among, status=0) == []  # a cause found


def test_check_loads_no_diagnosis_and_no_planner_for_models_it_cannot_plan(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.yaml"
    # A hub id and a remote server: no local model for the planner to read.
    config.write_text(
        "models:\n"
        "  qwen:\n    cmd: vllm serve Qwen/Qwen3-8B --port ${PORT}\n"
        "  remote:\n    cmd: sleep infinity\n    proxy: http://192.0.2.1:8000\n"
    )
    among = (*GATEWAY, *DIAGNOSIS, *PLANNER)
    assert loaded_by("check", str(config), among=among, status=0) == []
    # --show and --explain print more of the same config, with nothing more loaded
    assert loaded_by("check", str(config), "--show", "--explain", among=among, status=0) == []


def test_check_of_a_local_model_loads_the_planner_but_no_diagnosis(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"models:\n  m:\n    cmd: {llamacpp_cmd()}\n")
    among = (*GATEWAY, *DIAGNOSIS, "modelswap.planner.gguf_reader", "modelswap.planner.gpu")
    # the plan line read the GGUF header (no GPU is asked about: check plans sizes only)
    assert loaded_by("check", str(config), among=among, status=0) == [
        "modelswap.planner.gguf_reader"
    ]


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
