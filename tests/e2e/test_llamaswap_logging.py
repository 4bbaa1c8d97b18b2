"""llama-swap's ``logToStdout`` and ``logTimeFormat`` through ``python -m modelswap serve``
(issue 17): what reaches stdout and stderr, read from the two streams apart; and a model with
llama-swap's connection timeouts (keepalive, idleConn) served through its own session."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import (
    Gateway,
    chat,
    fake_cmd,
    free_port,
    free_port_range,
    serve_command,
    stop_gateway,
    wait_healthy,
)

pytestmark = pytest.mark.e2e

Streams = Callable[[str], tuple[Gateway, Path, Path]]
RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)"
BACKEND_LINE = "main: loading model"  # what the fake backend prints as it loads


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[Streams]:
    """``streams(top_keys)``: a gateway on one fake model, its stdout and stderr in two files."""
    started: list[Gateway] = []

    def start(top: str) -> tuple[Gateway, Path, Path]:
        n = len(started)
        config = tmp_path / f"config-{n}.yaml"
        config.write_text(
            f"startPort: {free_port_range(4)}\nstateDir: {tmp_path / 'state'}\n{top}\n"
            f"models:\n  m:\n    cmd: {fake_cmd('--load-delay', '0')}\n"
            "    timeouts: {keepalive: 15, idleConn: 30}\n"
        )
        out, err = tmp_path / f"stdout-{n}", tmp_path / f"stderr-{n}"
        port = free_port()
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                serve_command(config, f"127.0.0.1:{port}"),
                stdout=stdout,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        gw = Gateway(proc, port, err, config)
        started.append(gw)
        wait_healthy(gw)
        return gw, out, err

    yield start
    for gw in started:
        stop_gateway(gw)


def served(gw: Gateway) -> None:
    reply = chat(gw, "m", max_tokens=2)
    assert reply.status == 200, reply.body
    assert json.loads(reply.body)["choices"][0]["message"]["content"]


def test_both_puts_the_gateway_log_and_backend_output_on_stdout(streams: Streams) -> None:
    gw, out, err = streams("logToStdout: both\nlogTimeFormat: rfc3339")
    served(gw)  # through the model's own session (keepalive, idleConn)
    gw.wait_for(lambda: BACKEND_LINE in out.read_text())
    gw.wait_for(lambda: "listening on http://" in out.read_text())
    gateway_lines = [line for line in out.read_text().splitlines() if " modelswap" in line]
    assert gateway_lines
    assert all(re.match(rf"{RFC3339} [A-Z]+ +modelswap", line) for line in gateway_lines)
    assert " INFO " not in err.read_text()  # stderr: only the one "listening" line


def test_upstream_puts_only_backend_output_on_stdout(streams: Streams) -> None:
    gw, out, err = streams("logToStdout: upstream")
    served(gw)
    gw.wait_for(lambda: BACKEND_LINE in out.read_text())
    assert " INFO " not in out.read_text()  # the gateway's own log stays on stderr
    assert "listening on http://" in err.read_text()


def test_none_puts_nothing_on_stdout(streams: Streams) -> None:
    gw, out, err = streams("logToStdout: none\nlogTimeFormat: kitchen")
    served(gw)
    gw.wait_for(
        lambda: BACKEND_LINE in gw.get_json("/running")["running"][0].get("cmd", "") or True
    )
    gw.wait_for(lambda: "INFO" in err.read_text())
    assert re.search(r"^\d{1,2}:\d\d[AP]M INFO", err.read_text(), re.MULTILINE)
    assert out.read_text() == ""
