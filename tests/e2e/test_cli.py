"""The command line as users run it: ``python -m modelswap check | schema | serve``."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import REPO, free_port_range

pytestmark = pytest.mark.e2e


def modelswap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelswap", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def touch_cmd(marker: Path, *extra: str) -> str:
    """A YAML scalar for a command that would create ``marker`` if it were ever run."""
    script = f"touch {shlex.quote(str(marker))}"
    return json.dumps(f"bash -c {shlex.quote(script)} {' '.join(extra)}".strip())


def test_check_prints_each_resolved_command(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    config = tmp_path / "ok.yaml"
    config.write_text(
        "startPort: 7300\n"
        "macros:\n  threads: 4\n"
        "models:\n"
        f"  first:\n    cmd: {touch_cmd(marker, '--port', '${PORT}', '-t', '${threads}')}\n"
        "  second:\n    aliases: [two]\n"
        f"    cmd: {touch_cmd(marker, '--port=${PORT}', '--name', '${MODEL_ID}')}\n"
    )
    result = modelswap("check", str(config))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"config: {config}" in out
    assert "models: 2" in out
    cmds = [line.split("cmd:", 1)[1].strip() for line in out.splitlines() if "cmd:" in line]
    assert len(cmds) == 2
    assert cmds[0].endswith("--port 7300 -t 4")
    assert cmds[1].endswith("--port=7301 --name second")
    assert "first" in out
    assert "second  (aliases: two)" in out
    assert "proxy: http://127.0.0.1:7300" in out
    assert "proxy: http://127.0.0.1:7301" in out
    assert not marker.exists(), "check ran a model's command"


def test_check_reports_every_problem_with_its_key_path(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "startPort: 7300\n"
        "modles: {}\n"
        "models:\n"
        f"  a:\n    cmd: {touch_cmd(marker, '${PORT}')}\n    ttll: 5\n"
        f"  b:\n    cmd: {touch_cmd(marker, '${PORT}')}\n    timeouts: {{firstbyte: 3}}\n"
    )
    result = modelswap("check", str(typo))
    assert result.returncode == 2
    assert result.stdout == ""
    problems = result.stderr.splitlines()[1:]
    assert sorted(line.strip() for line in problems) == [
        "models.a.ttll: unknown key (did you mean ttl?)",
        "models.b.timeouts.firstbyte: unknown key (did you mean firstByte?)",
        "modles: unknown key (did you mean models?)",
    ]
    assert str(typo) in result.stderr.splitlines()[0]

    macro = tmp_path / "macro.yaml"
    macro.write_text(
        "startPort: 7300\n"
        "macros:\n  threads: 4\n"
        "models:\n"
        f"  a:\n    cmd: {touch_cmd(marker, '${PORT}', '-t', '${thread}')}\n"
        f"  b:\n    cmd: {touch_cmd(marker, '${PORT}', '${nosuch')}\n"
    )
    result = modelswap("check", str(macro))
    assert result.returncode == 2
    problems = [line.strip() for line in result.stderr.splitlines()[1:]]
    assert len(problems) == 2
    assert problems[0] == "models.a.cmd: ${thread} is not a known macro (did you mean ${threads}?)"
    assert problems[1].startswith("models.b.cmd: unterminated ${")
    assert not marker.exists(), "check ran a model's command"


def test_check_without_a_file_checks_the_demo_config() -> None:
    result = modelswap("check")
    assert result.returncode == 0, result.stderr
    assert "config: <demo>" in result.stdout
    assert "models: 3" in result.stdout
    for model_id in ("smollm2", "smollm2-long", "smollm2-embed"):
        assert f"\n{model_id}" in result.stdout
    assert "--port 5800" in result.stdout
    assert "--port 5801" in result.stdout
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in result.stdout


def test_schema_is_json_naming_the_top_level_keys() -> None:
    result = modelswap("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert "models" in schema["properties"]
    assert "startPort" in schema["properties"]
    assert "listen" in schema["properties"]


def minimal_config(tmp_path: Path) -> Path:
    config = tmp_path / "serve.yaml"
    config.write_text(f"startPort: {free_port_range(2)}\nmodels:\n  a:\n    cmd: true ${{PORT}}\n")
    return config


def test_serve_on_a_port_in_use_exits_1(tmp_path: Path) -> None:
    config = minimal_config(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = [sys.executable, "-m", "modelswap", "serve", "--config", str(config)]
        with subprocess.Popen(
            [*argv, "--listen", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        ) as proc:
            _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"modelswap: cannot listen on 127.0.0.1:{port}" in stderr
    assert "Traceback" not in stderr
    # The orphan watchdog it started was closed with it.
    reaper_argv = ["-m", "modelswap.supervisor.reaper", str(proc.pid)]
    for other in psutil.process_iter(["cmdline"]):
        assert (other.info["cmdline"] or [])[-3:] != reaper_argv, "a reaper outlived modelswap"


def test_serve_with_a_bad_listen_exits_2(tmp_path: Path) -> None:
    config = minimal_config(tmp_path)
    result = modelswap("serve", "--config", str(config), "--listen", "bad")
    assert result.returncode == 2
    assert "--listen: 'bad' is not host:port" in result.stderr
    result = modelswap("serve", "--config", str(config), "--listen", "127.0.0.1:70000")
    assert result.returncode == 2
    assert "--listen: '127.0.0.1:70000': the port must be a number from 1 to" in result.stderr
