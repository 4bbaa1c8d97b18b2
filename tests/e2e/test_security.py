"""Security end to end: ``python -m modelswap serve`` as a subprocess with fake backends.

The gateways that relay (``keyed``, ``open_gw`` and the connection bounds) run through both
doors, the fast lane on and off (the ``door`` fixture), and where the fast door serves a request
itself the test proves it did (``door.watch``); the exposure policy and the redaction surfaces,
which relay nothing, run once.

Covers the auth matrix (every scope x every route class x every credential form), model
filters, the failure limiter, CORS, client credentials never forwarded, the /upstream path
guard, body/header/connection bounds, the slow-header timeout, the exposure policy at bind
time, and the redaction property across every surface a person can see.

Clients that are meant to fail authentication connect from their own loopback source address
(127.0.0.N), because the gateway's failure limiter counts per client address.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import itertools
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    FAKE_BACKEND,
    REPO,
    Door,
    Gateway,
    chat_body,
    fake_cmd,
    free_port,
    free_port_range,
    serve_command,
    stop_gateway,
    wait_healthy,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
JSON = {"Content-Type": "application/json"}
_sources = itertools.count(10)


def fresh_source() -> str:
    """A loopback source address no other test uses (the failure limiter is per address)."""
    n = next(_sources)
    return f"127.0.{n // 250}.{n % 250 + 2}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def credential(form: str, secret: str) -> dict[str, str]:
    return {
        "bearer": {"Authorization": f"Bearer {secret}"},
        "x-api-key": {"x-api-key": secret},
        "basic": {"Authorization": basic("any-user-name", secret)},
    }[form]


# --- clients --------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def call(
    gw: Gateway,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    *,
    source: str | None = None,
    timeout: float = 60.0,  # only ends a hang
    head_only: bool = False,
) -> Reply:
    """One request on its own connection (closed before returning). ``head_only`` returns
    after the headers (for endless streams such as /api/events)."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", gw.port, timeout=timeout, source_address=(source, 0) if source else None
    )
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = b"" if head_only and resp.status == 200 else resp.read()
        return Reply(resp.status, resp.headers, data)
    finally:
        conn.close()


def raw_exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, read until the server closes or a whole response has arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
            if _complete(out):
                break
        return out


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False


def parse_raw(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


class Capture:
    """An endless response (``/api/events``) read on a raw socket by a thread."""

    def __init__(self, gw: Gateway, path: str, headers: dict[str, str]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.sock.settimeout(0.05)
        self._data = bytearray()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    def text(self) -> str:
        with self._lock:
            return self._data.decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert time.monotonic() < deadline, f"{needle!r} not seen in:\n{self.text()}"
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def poll(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


# --- gateways started by this module --------------------------------------------------------


def launch(
    tmp: Path,
    config_text: str,
    *,
    host: str = "127.0.0.1",
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    name: str = "gw",
) -> Gateway:
    """``modelswap serve`` on ``host:<free port>`` (reached through 127.0.0.1), started."""
    port = free_port()
    config = tmp / f"{name}.yaml"
    config.write_text(config_text)
    config.chmod(0o600)
    log_path = tmp / f"{name}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            serve_command(config, f"{host}:{port}", *args),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=REPO,
        )
    gw = Gateway(proc, port, log_path)
    try:
        wait_healthy(gw)
    except BaseException:
        stop_gateway(gw)
        raise
    return gw


def modelswap_cli(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelswap", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        check=False,
    )


def fake(*flags: str) -> str:
    return fake_cmd(*flags)


# --- gateway A: keys with every scope combination, a model filter, CORS ---------------------

UPSTREAM_KEY = "upstream-key-for-alpha-7f3e9a"
SCOPE_KEYS = {
    "inf": ["inference"],
    "read": ["read"],
    "admin": ["admin"],
    "inf+read": ["inference", "read"],
    "inf+admin": ["inference", "admin"],
    "read+admin": ["read", "admin"],
    "all": ["inference", "read", "admin"],
}
SECRETS = {name: f"sk-matrix-{name.replace('+', '-')}-0123456789" for name in SCOPE_KEYS}
PLAIN_KEY = "sk-plain-string-key-9876543210"
RESTRICTED = "sk-restricted-a-models-555555"
ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, door: Door) -> Iterator[Gateway]:
    entries = [
        f"  - {{key: {SECRETS[n]}, name: {json.dumps(n)}, scopes: {json.dumps(s)}}}"
        for n, s in SCOPE_KEYS.items()
    ]
    entries.append(f"  - {PLAIN_KEY}")
    entries.append(f'  - {{key: {RESTRICTED}, name: restricted, models: ["a*"]}}')
    text = (
        f"startPort: {free_port_range(4)}\nlogLevel: debug\n"
        "apiKeys:\n" + "\n".join(entries) + "\n"
        f"security:\n  corsOrigins: [{json.dumps(ORIGIN)}]\n"
        "includeAliasesInList: true\n"
        f"limits: {{fastLane: {json.dumps(door.fast)}}}\n"
        "models:\n"
        f"  alpha:\n    cmd: {fake()}\n    aliases: [a-one]\n    apiKey: ${{env.MS_T_UPSTREAM}}\n"
        f"  beta:\n    cmd: {fake()}\n"
    )
    tmp = tmp_path_factory.mktemp("keyed")
    gw = launch(tmp, text, env={"MS_T_UPSTREAM": UPSTREAM_KEY}, name="keyed")
    yield gw
    stop_gateway(gw)


ALL = {"Authorization": f"Bearer {SECRETS['all']}"}

# (method, path, body, route class)
ROUTES: list[tuple[str, str, bytes | None, str]] = [
    ("GET", "/v1/models", None, "inference"),
    ("POST", "/v1/chat/completions", chat_body("alpha"), "inference"),
    ("GET", "/running", None, "read"),
    ("GET", "/logs/alpha", None, "read"),
    ("GET", "/api/security", None, "read"),
    ("GET", "/api/events", None, "read"),
    ("POST", "/api/models/unload/beta", None, "admin"),
    ("POST", "/api/models/unload", None, "admin"),
    ("GET", "/api/config", None, "admin"),
    ("GET", "/upstream/alpha/health", None, "admin"),
    ("GET", "/health", None, "open"),
]
MATRIX_KEYS = [(n, SECRETS[n], frozenset(s)) for n, s in SCOPE_KEYS.items()]
MATRIX_KEYS.append(("key-8", PLAIN_KEY, frozenset({"inference"})))


@pytest.mark.parametrize("form", ["bearer", "x-api-key", "basic"])
@pytest.mark.parametrize(("name", "secret", "scopes"), MATRIX_KEYS, ids=[k[0] for k in MATRIX_KEYS])
def test_auth_matrix(
    keyed: Gateway, name: str, secret: str, scopes: frozenset[str], form: str
) -> None:
    wrong: list[str] = []
    for method, path, body, needed in ROUTES:
        headers = {**credential(form, secret), **JSON}
        reply = call(keyed, method, path, body, headers, head_only=path == "/api/events")
        if needed == "open" or needed in scopes:
            if reply.status != 200:
                wrong.append(f"{method} {path}: expected 200, got {reply.status} {reply.text}")
            continue
        problem = None
        if reply.status != 403:
            problem = f"expected 403, got {reply.status}"
        else:
            error = reply.json()["error"]
            if error["code"] != "insufficient_scope" or error["type"] != "permission_error":
                problem = f"wrong envelope {error}"
            elif reply.headers["X-Modelswap-Error"] != "1":
                problem = "no X-Modelswap-Error"
            elif name not in error["message"] or needed not in error["message"]:
                problem = f"message should name the key and the scope: {error['message']}"
            elif secret in reply.text:
                problem = "the key value is in the body"
        if problem:
            wrong.append(f"{method} {path}: {problem}")
    assert not wrong, f"key {name} ({form}):\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "Missing API key."),
        ({"Authorization": "Bearer sk-wrong-key-000000"}, "Invalid API key."),
        ({"x-api-key": "sk-wrong-key-000000"}, "Invalid API key."),
        ({"Authorization": basic("u", "sk-wrong-key-000000")}, "Invalid API key."),
        # The key goes in the password, not the user name.
        ({"Authorization": basic(SECRETS["all"], "x")}, "Invalid API key."),
        # A near miss: one character short.
        ({"Authorization": f"Bearer {SECRETS['all'][:-1]}"}, "Invalid API key."),
    ],
    ids=["missing", "bearer", "x-api-key", "basic", "key-as-user", "prefix"],
)
@pytest.mark.parametrize("path", ["/v1/models", "/running", "/api/config", "/nope"])
def test_missing_or_wrong_key_is_401(
    keyed: Gateway, headers: dict[str, str], message: str, path: str
) -> None:
    reply = call(keyed, "GET", path, headers=headers, source=fresh_source())
    assert reply.status == 401, reply.text
    assert reply.headers["X-Modelswap-Error"] == "1"
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="modelswap"'
    assert reply.headers.get_content_type() == "application/json"
    assert reply.json() == {
        "error": {
            "message": message,
            "type": "authentication_error",
            "code": "invalid_api_key",
            "param": None,
        }
    }


def test_a_key_in_the_query_string_is_not_accepted(keyed: Gateway) -> None:
    reply = call(keyed, "GET", f"/v1/models?api_key={SECRETS['all']}", source=fresh_source())
    assert reply.status == 401


def test_health_and_root_are_open(keyed: Gateway) -> None:
    for path in ("/health", "/"):
        reply = call(keyed, "GET", path, source=fresh_source())
        assert reply.status == 200, path
        assert "alpha" not in reply.text  # the open index names no model


def test_a_valid_key_is_served_whatever_its_address_failed_before(keyed: Gateway) -> None:
    """One person guessing behind a shared address (a proxy, a NAT) locks nobody out: their
    failures are slowed, a valid key from the same address is served at once."""
    blocked, other = fresh_source(), fresh_source()
    for n in range(12):  # past the 10 answered at once: the last ones wait before their 401
        reply = call(keyed, "GET", "/running", headers={"x-api-key": f"guess-{n}"}, source=blocked)
        assert reply.status == 401, (n, reply.text)
        assert reply.json()["error"]["code"] == "invalid_api_key"
    poll(lambda: f"11 failed attempts from {blocked} within" in keyed.log(), 10.0, "logged")
    for _ in range(3):
        reply = call(keyed, "GET", "/running", headers=ALL, source=blocked)
        assert reply.status == 200, reply.text
    assert call(keyed, "GET", "/health", source=blocked).status == 200
    assert call(keyed, "GET", "/running", headers=ALL, source=other).status == 200
    assert keyed.log().count(f"failed attempts from {blocked} within") == 1  # once, not per try
    assert "guess-" not in keyed.log()  # the keys tried are never logged


def test_a_guesser_spread_over_60_addresses_is_slowed(gateway: StartGateway) -> None:
    """The global failure budget: one failure from each of 60 addresses (none over its own
    budget) and the gateway slows every later failure — but still serves a valid key."""
    key = "sk-spread-guess-test-key-00001"
    gw = gateway(f"  m:\n    cmd: {fake()}\n", extra_top=f"apiKeys: [{key}]")
    sources = [f"127.0.9.{n + 1}" for n in range(60)]

    def guess(source: str) -> int:
        return call(
            gw, "GET", "/v1/models", headers={"x-api-key": "sk-wrong"}, source=source
        ).status

    with ThreadPoolExecutor(12) as pool:
        assert set(pool.map(guess, sources)) == {401}
    poll(lambda: "networks within" in gw.log(), 10.0, "the global episode is logged")
    (line,) = [line for line in gw.log().splitlines() if "networks within" in line]
    assert "51 failed attempts from 51 networks within 60 s" in line, line
    assert "every failed attempt now waits" in line
    assert guess("127.0.9.200") == 401  # a fresh address is slowed too, and still answered
    good = {"Authorization": f"Bearer {key}"}
    assert call(gw, "GET", "/v1/models", headers=good, source=sources[0]).status == 200
    assert "sk-wrong" not in gw.log()


def test_a_model_filter_hides_other_models(keyed: Gateway) -> None:
    mine = {"Authorization": f"Bearer {RESTRICTED}", **JSON}
    listed = call(keyed, "GET", "/v1/models", headers=mine).json()
    assert [row["id"] for row in listed["data"]] == ["alpha", "a-one"]
    everything = call(keyed, "GET", "/v1/models", headers=ALL).json()
    assert {row["id"] for row in everything["data"]} == {"alpha", "a-one", "beta"}

    assert call(keyed, "POST", "/v1/chat/completions", chat_body("a-one"), mine).status == 200

    hidden = call(keyed, "POST", "/v1/chat/completions", chat_body("beta"), mine)
    absent = call(keyed, "POST", "/v1/chat/completions", chat_body("gamma"), mine)
    for reply, name in ((hidden, "beta"), (absent, "gamma")):
        assert reply.status == 404, reply.text
        assert reply.headers["X-Modelswap-Error"] == "1"
        error = reply.json()["error"]
        assert (error["code"], error["type"], error["param"]) == (
            "model_not_found",
            "invalid_request_error",
            "model",
        )
        assert error["message"].startswith(f"The model `{name}` does not exist.")
    # A hidden model answers exactly like an absent one (bar the name the client sent).
    assert hidden.json()["error"]["suggestions"] == absent.json()["error"]["suggestions"] == []

    # Suggestions come from the models this key may use only.
    near = call(keyed, "POST", "/v1/chat/completions", chat_body("betta"), mine).json()["error"]
    assert "beta" not in near["suggestions"]
    assert "beta" not in near["message"].partition("Did you mean")[2]
    near_all = call(keyed, "POST", "/v1/chat/completions", chat_body("betta"), {**ALL, **JSON})
    assert "beta" in near_all.json()["error"]["suggestions"]  # the control: it is close

    running = call(keyed, "GET", "/running", headers=ALL).json()["running"]
    assert "beta" not in {row["model"] for row in running}  # never started for that key


def refused_as_absent(reply: Reply, name: str) -> dict[str, Any]:
    """``reply`` is the 404 of a model that does not exist, in OpenAI's shape; its error."""
    assert reply.status == 404, reply.text
    assert reply.headers["X-Modelswap-Error"] == "1"
    assert reply.headers.get_content_type() == "application/json"
    error: dict[str, Any] = reply.json()["error"]
    assert (error["code"], error["type"], error["param"]) == (
        "model_not_found",
        "invalid_request_error",
        "model",
    )
    assert error["message"].startswith(f"The model `{name}` does not exist.")
    return error


def test_a_restricted_key_is_refused_a_ready_idle_model_outside_its_list(
    keyed: Gateway, door: Door
) -> None:
    """A ready, idle model is what the fast door serves itself, without aiohttp's routes: it
    must hold a key to its model list as they do (the same 404 as for a model that does not
    exist), and never reach the backend."""
    mine = {"Authorization": f"Bearer {RESTRICTED}", **JSON}
    loaded = call(keyed, "POST", "/api/models/load/beta", headers=ALL)
    assert loaded.status == 200, loaded.text
    try:
        before = call(keyed, "GET", "/upstream/beta/stats", headers=ALL).json()["requests"]
        watch = door.watch(keyed, ALL)
        for body in (chat_body("beta"), chat_body("beta", stream=True)):
            hidden = call(keyed, "POST", "/v1/chat/completions", body, mine)
            absent = call(keyed, "POST", "/v1/chat/completions", chat_body("gamma"), mine)
            assert refused_as_absent(hidden, "beta")["suggestions"] == []
            assert refused_as_absent(absent, "gamma")["suggestions"] == []
        watch.handed_over("model", 4)  # the fast door found no model for that key
        after = call(keyed, "GET", "/upstream/beta/stats", headers=ALL).json()["requests"]
        assert after == before, "the restricted key's request reached the backend"
        [row] = call(keyed, "GET", "/running", headers=ALL).json()["running"]
        assert (row["model"], row["state"], row["in_flight"]) == ("beta", "ready", 0)

        # The control: a key that may use it is served, by the door under test.
        watch = door.watch(keyed, ALL)
        allowed = call(keyed, "POST", "/v1/chat/completions", chat_body("beta"), {**ALL, **JSON})
        assert allowed.status == 200, allowed.text
        watch.answered(1)
    finally:
        call(keyed, "POST", "/api/models/unload/beta", headers=ALL)


def test_client_credentials_never_reach_the_backend(keyed: Gateway, door: Door) -> None:
    headers = {
        "Authorization": f"Bearer {SECRETS['all']}",
        "x-api-key": SECRETS["inf"],
        "api-key": SECRETS["read"],
        **JSON,
    }
    body = json.dumps({"model": "alpha", "input": "hi"}).encode()
    assert call(keyed, "POST", "/api/models/load/alpha", headers=ALL).status == 200
    watch = door.watch(keyed, ALL)
    via_inference = call(keyed, "POST", "/v1/responses", body, headers)
    watch.answered(1)  # ready: the fast door relays it itself
    basic_auth = {"Authorization": basic("me", SECRETS["admin"]), "x-api-key": SECRETS["inf"]}
    via_upstream = call(keyed, "GET", "/upstream/alpha/echo/me?x=1", headers=basic_auth)
    for reply in (via_inference, via_upstream):
        assert reply.status == 200, reply.text
        echo = reply.json()
        assert echo["echo"] is True
        seen = echo["headers"]
        assert seen.get("authorization") == f"Bearer {UPSTREAM_KEY}"
        assert "x-api-key" not in seen
        assert "api-key" not in seen
        for secret in (*SECRETS.values(), PLAIN_KEY, RESTRICTED):
            assert secret not in reply.text
    assert via_upstream.json()["path"] == "/echo/me"

    # A model without apiKey gets no Authorization at all.
    assert call(keyed, "POST", "/api/models/load/beta", headers=ALL).status == 200
    try:
        watch = door.watch(keyed, ALL)
        beta = call(keyed, "POST", "/v1/responses", json.dumps({"model": "beta"}).encode(), headers)
        watch.answered(1)
    finally:
        call(keyed, "POST", "/api/models/unload/beta", headers=ALL)
    assert beta.status == 200, beta.text
    assert "authorization" not in beta.json()["headers"]
    assert SECRETS["all"] not in beta.text


# --- CORS ------------------------------------------------------------------------------------

PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


# A request with an Origin is aiohttp's on both doors (the fast door hands it over, ``head``):
# these run on both so that it stays so, or that the fast door, serving it, gets CORS right.


def test_cors_for_the_configured_origin(keyed: Gateway, door: Door) -> None:
    source = fresh_source()
    pre = call(
        keyed,
        "OPTIONS",
        "/v1/chat/completions",
        headers={"Origin": ORIGIN, **PREFLIGHT},
        source=source,
    )
    assert pre.status == 204, pre.text  # no key needed
    assert pre.headers["Access-Control-Allow-Origin"] == ORIGIN
    allowed = pre.headers["Access-Control-Allow-Headers"].lower()
    assert {"authorization", "content-type", "x-api-key"} <= {h.strip() for h in allowed.split(",")}
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]

    normal = call(keyed, "GET", "/v1/models", headers={"Origin": ORIGIN, **ALL})
    assert normal.status == 200
    assert normal.headers["Access-Control-Allow-Origin"] == ORIGIN

    watch = door.watch(keyed, ALL)
    conn = http.client.HTTPConnection("127.0.0.1", keyed.port, timeout=15)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            chat_body("alpha", stream=True),
            {"Origin": ORIGIN, **ALL, **JSON},
        )
        streamed = conn.getresponse()
        assert streamed.status == 200
        assert streamed.headers.get_content_type() == "text/event-stream"
        assert streamed.headers["Access-Control-Allow-Origin"] == ORIGIN
        assert b"[DONE]" in streamed.read()
    finally:
        conn.close()
    watch.handed_over("head")


@pytest.mark.parametrize(
    "other",
    [
        "https://evil.example",
        ORIGIN + ".evil.net",  # the listed origin is a prefix of it: origins match exactly
        ORIGIN + ":8443",  # another port: another origin
        "http://app.example",  # another scheme
        ORIGIN[:-1],  # a prefix of the listed one
    ],
    ids=["other", "suffixed-host", "other-port", "other-scheme", "prefix"],
)
def test_cors_refuses_other_origins(keyed: Gateway, other: str) -> None:
    evil = {"Origin": other}
    pre = call(keyed, "OPTIONS", "/v1/chat/completions", headers={**evil, **PREFLIGHT})
    assert pre.status == 403
    assert "Access-Control-Allow-Origin" not in pre.headers
    normal = call(keyed, "GET", "/v1/models", headers={**evil, **ALL})
    assert normal.status == 200
    assert "Access-Control-Allow-Origin" not in normal.headers
    # Served, as a request without CORS is, but nothing lets the page read it.
    streamed = call(
        keyed,
        "POST",
        "/v1/chat/completions",
        chat_body("alpha", stream=True),
        {**evil, **ALL, **JSON},
    )
    assert streamed.status == 200, streamed.text
    assert streamed.headers.get_content_type() == "text/event-stream"
    assert b"[DONE]" in streamed.body
    assert not [h for h in streamed.headers if h.lower().startswith("access-control-")]


# --- gateway B: no keys, small bounds --------------------------------------------------------

BODY_CAP = 4096
UPLOAD_CAP = 65536


@pytest.fixture(scope="module")
def open_gw(tmp_path_factory: pytest.TempPathFactory, door: Door) -> Iterator[Gateway]:
    text = (
        f"startPort: {free_port_range(4)}\nlogLevel: debug\n"
        f"maxRequestBodyBytes: {BODY_CAP}\nmaxUploadBodyBytes: {UPLOAD_CAP}\n"
        f"limits: {{maxHeaderBytes: 2048, maxHeaders: 20, fastLane: {json.dumps(door.fast)}}}\n"
        "models:\n"
        f"  trav:\n    cmd: {fake()}\n"
        f"  alpha:\n    cmd: {fake()}\n"
        f"  beta:\n    cmd: {fake()}\n"
    )
    gw = launch(tmp_path_factory.mktemp("open"), text, name="open")
    yield gw
    stop_gateway(gw)


def test_without_keys_every_route_is_open(open_gw: Gateway) -> None:
    wrong = []
    for method, path, body, _ in ROUTES:
        if "trav" in path:
            continue
        reply = call(open_gw, method, path, body, JSON, head_only=path == "/api/events")
        if reply.status != 200:
            wrong.append(f"{method} {path}: {reply.status} {reply.text}")
    assert not wrong, "\n".join(wrong)
    # A client's stray Authorization header is not checked (nor forwarded).
    reply = call(open_gw, "GET", "/upstream/alpha/x", headers={"Authorization": "Bearer junk"})
    assert reply.status == 200
    assert "authorization" not in reply.json()["headers"]


def test_no_cors_headers_by_default(open_gw: Gateway) -> None:
    origin = {"Origin": ORIGIN}
    pre = call(open_gw, "OPTIONS", "/v1/chat/completions", headers={**origin, **PREFLIGHT})
    assert pre.status != 204
    normal = call(open_gw, "GET", "/v1/models", headers=origin)
    assert normal.status == 200
    for reply in (pre, normal):
        assert not [h for h in reply.headers if h.lower().startswith("access-control-")]


TRAVERSAL = [
    "/upstream/trav/../../etc/passwd",
    "/upstream/trav/x/../../trav/health",
    "/upstream/trav/..",
    "/upstream/trav/%2e%2e/%2e%2e/etc/passwd",
    "/upstream/trav/%2E%2e/health",
    "/upstream/trav/%2e%2E%2fhealth",
    "/upstream/trav/..%2f..%2fetc/passwd",
    "/upstream/trav/..%2F",
    "/upstream/trav/%252e%252e/health",
    "/upstream/trav/%252e%252e%252fhealth",
    "/upstream/trav/./health",
    "/upstream/trav/.",
    "/upstream/trav/..\\..\\etc\\passwd",
    "/upstream/trav/%5c..%5chealth",
    "/upstream/trav/http://evil/",
    "/upstream/http://evil/",
    "/upstream/trav/http:%2f%2fevil/x",
    "/upstream/trav//evil/x",
    "/upstream//evil/x",
    "/upstream/trav//etc/passwd",
    "/upstream//etc/passwd",
    "/upstream/trav/%2fetc%2fpasswd",
    "/upstream/trav/%00",
    "/upstream/trav/health%00.txt",
    "/upstream/trav/\x00",
]


def test_upstream_path_traversal_never_reaches_the_backend(open_gw: Gateway) -> None:
    passed: list[str] = []
    for target in TRAVERSAL:
        for method in ("GET", "POST"):
            request = (
                f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                "Connection: close\r\n\r\n{}"
            ).encode("latin-1")
            status, _, body = parse_raw(raw_exchange(open_gw.port, request))
            if status not in (400, 404) or b'"echo"' in body:
                passed.append(f"{method} {target!r}: {status} {body[:160]!r}")
    rows = call(open_gw, "GET", "/running").json()["running"]
    started = "trav" in {row["model"] for row in rows}
    summary = (
        f"{len(TRAVERSAL) * 2} traversal requests, {len(passed)} not refused; "
        f"backend started: {started}"
    )
    print(summary)
    assert not passed, summary + "\n" + "\n".join(passed)
    assert not started, summary
    control = call(open_gw, "GET", "/upstream/trav/plain/path?q=1")
    assert control.status == 200
    assert (control.json()["path"], control.json()["query"]) == ("/plain/path", "q=1")


def _post_partial(port: int, head: bytes, first_bytes: bytes, timeout: float = 5.0) -> tuple:
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head + first_bytes)
        out = b""
        while not _complete(out):
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
    return time.monotonic() - start, out


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/upstream/alpha/v1/chat/completions"])
def test_declared_oversize_body_is_413_without_reading_it(open_gw: Gateway, path: str) -> None:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {1 << 30}\r\n\r\n"
    ).encode()
    elapsed, out = _post_partial(open_gw.port, head, b'{"model": "alpha", ')
    status, headers, body = parse_raw(out)
    print(f"413 for a declared 1 GiB body after {elapsed * 1000:.0f} ms")
    assert status == 413, out
    assert headers["x-modelswap-error"] == "1"
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_chunked_body_over_the_cap_is_413_as_soon_as_it_passes_it(open_gw: Gateway) -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunks = b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(BODY_CAP // 1024 + 2))
    _, out = _post_partial(open_gw.port, head, chunks)  # never terminated
    status, _, body = parse_raw(out)
    assert status == 413, out
    assert json.loads(body)["error"]["code"] == "request_too_large"


BOUNDARY = "----modelswapSecurityBoundary"


def multipart(size: int) -> bytes:
    return (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nalpha\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + b"\x01" * size
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


def test_upload_cap_is_separate_from_the_json_cap(open_gw: Gateway) -> None:
    form = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    upload = call(open_gw, "POST", "/v1/audio/transcriptions", multipart(20_000), form)
    assert upload.status == 200, upload.text  # over the JSON cap, under the upload cap
    assert upload.json()["path"] == "/v1/audio/transcriptions"

    padded = chat_body("alpha", user="u" * 20_000)
    assert call(open_gw, "POST", "/v1/chat/completions", padded, JSON).status == 413
    small = chat_body("alpha", user="u" * 1000)
    assert call(open_gw, "POST", "/v1/chat/completions", small, JSON).status == 200

    too_big = call(open_gw, "POST", "/v1/audio/transcriptions", multipart(UPLOAD_CAP + 10), form)
    assert too_big.status == 413
    assert str(UPLOAD_CAP) in too_big.json()["error"]["message"]


def test_header_size_and_count_limits(open_gw: Gateway) -> None:
    big = call(open_gw, "GET", "/health", headers={"X-Big": "b" * 3000})
    assert big.status in (400, 431), big.status
    many = call(open_gw, "GET", "/health", headers={f"X-H{n}": "v" for n in range(30)})
    assert many.status in (400, 431), many.status
    assert call(open_gw, "GET", "/health", headers={"X-Ok": "v" * 1000}).status == 200


# --- connection bounds -----------------------------------------------------------------------


def test_slow_header_client_is_dropped_within_the_header_timeout(
    door_gateway: StartGateway,
) -> None:
    gw = door_gateway(f"  m:\n    cmd: {fake()}\n", extra_top="limits: {headerTimeout: 1}")
    measured = []
    for first in (b"GET /hea", b"", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
            start = time.monotonic()
            sock.sendall(first)
            try:
                data = sock.recv(1024)
            except ConnectionResetError:
                data = b""
            elapsed = time.monotonic() - start
        measured.append(elapsed)
        assert data == b"" or data.startswith(b"HTTP/1.1 408"), data
        assert elapsed >= 0.7, elapsed  # held until headerTimeout (1 s), not refused at once

    # A client dripping one byte every 0.2 s is dropped too: the timeout is for the whole head.
    with socket.create_connection(("127.0.0.1", gw.port), timeout=0.2) as sock:
        start = time.monotonic()
        closed_after = None
        for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"d" * 100:
            try:
                sock.sendall(bytes([byte]))
                data = sock.recv(1024)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                data = b""
            closed_after = time.monotonic() - start
            break
    measured.append(closed_after or -1.0)
    print("slow-header clients dropped after (s):", [round(m, 2) for m in measured])
    assert closed_after is not None, "the dripping client was never dropped mid-drip"
    assert call(gw, "GET", "/health").status == 200


def raw_request(port: int, source: str = "127.0.0.1") -> bytes:
    """A whole request sent at once, then everything read until the gateway closes (a reset
    raises: it must not happen)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def assert_refused(out: bytes, limit: str) -> None:
    status, headers, body = parse_raw(out)
    assert status == 503, out
    assert headers["connection"] == "close"
    assert headers["x-modelswap-error"] == "1"
    assert int(headers["retry-after"]) >= 1
    assert b'"code":"too_many_connections"' in body
    assert limit.encode() in body
    # A client reads exactly Content-Length bytes of the body: it must be the whole JSON.
    declared = int(headers["content-length"])
    assert declared == len(body), (
        f"Content-Length {declared} but the body is {len(body)} bytes; a client reads "
        f"{body[:declared]!r}"
    )
    assert json.loads(body[:declared])["error"]["code"] == "too_many_connections"


def test_connections_over_max_connections_get_a_503_and_are_closed(
    door_gateway: StartGateway,
) -> None:
    gw = door_gateway(f"  m:\n    cmd: {fake()}\n", extra_top="limits: {maxConnections: 2}")
    held = [Capture(gw, "/api/events", {}) for _ in range(2)]
    try:
        for stream in held:
            stream.wait_for("event: snapshot")
        out = raw_request(gw.port, "127.0.0.2")  # over the total, whoever asks
    finally:
        held[0].close()
    try:

        def healthy() -> bool:
            with contextlib.suppress(OSError, http.client.HTTPException):
                return call(gw, "GET", "/health", timeout=2).status == 200
            return False

        poll(healthy, 10.0, "a new connection is served once one is closed")
    finally:
        held[1].close()
    assert_refused(out, "limits.maxConnections: 2")


def test_one_client_cannot_take_every_connection(door_gateway: StartGateway) -> None:
    gw = door_gateway(
        f"  m:\n    cmd: {fake()}\n", extra_top="limits: {maxConnectionsPerClient: 2}"
    )
    # Requests in flight are not what the share counts: more streams than it are served...
    held = [Capture(gw, "/api/events", {}) for _ in range(3)]  # from 127.0.0.1
    slow: list[socket.socket] = []
    try:
        for stream in held:
            stream.wait_for("event: snapshot")
        # ...connections that have not sent a whole request are: two slow heads take the share.
        for _ in range(2):
            slow.append(socket.create_connection(("127.0.0.1", gw.port), timeout=10))
            slow[-1].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        assert_refused(raw_request(gw.port), "limits.maxConnectionsPerClient: 2")
        assert call(gw, "GET", "/health", source="127.0.0.2").status == 200  # its own share
    finally:
        for sock in slow:
            sock.close()
        for stream in held:
            stream.close()
    poll(
        lambda: call(gw, "GET", "/health", timeout=2).status == 200,
        10.0,
        "127.0.0.1 is served again once its connections are closed",
    )


# --- the exposure policy at bind time --------------------------------------------------------


def _models_with_marker(marker: Path) -> str:
    script = f"touch {shlex.quote(str(marker))}; exec {fake_cmd_text_unquoted()}"
    return f"models:\n  m:\n    cmd: {json.dumps(f'bash -c {shlex.quote(script)}')}\n"


def fake_cmd_text_unquoted() -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_BACKEND))} --port ${{PORT}}"


def _port_is_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_non_loopback_listen_without_keys_is_refused(tmp_path: Path, host: str) -> None:
    marker = tmp_path / "started"
    config = tmp_path / "c.yaml"
    config.write_text(f"startPort: {free_port_range(2)}\n" + _models_with_marker(marker))
    port = free_port()
    result = modelswap_cli("serve", "--config", str(config), "--listen", f"{host}:{port}")
    assert result.returncode == 2, result.stderr
    err = result.stderr
    assert "apiKeys" in err
    assert "--allow-unauthenticated-network" in err
    assert "security.allowUnauthenticatedNetwork" in err
    assert "listening" not in err
    assert _port_is_closed(port)
    assert not marker.exists()


def test_non_loopback_listen_with_the_switch_or_keys(tmp_path: Path) -> None:
    """The one test that binds 0.0.0.0 (on a free port, only ever reached via 127.0.0.1)."""
    start = f"startPort: {free_port_range(2)}\nlogLevel: debug\n"
    models = f"models:\n  m:\n    cmd: {fake()}\n"
    switch = "security.allowUnauthenticatedNetwork"

    gw = launch(
        tmp_path,
        start + models,
        host="0.0.0.0",
        args=("--allow-unauthenticated-network",),
        name="flag",
    )
    try:
        assert f"WARNING modelswap: open switch on: {switch}" in " ".join(gw.log().split())
        report = call(gw, "GET", "/api/security").json()
        assert report["loopback_only"] is False
        assert report["listen"].startswith("0.0.0.0:")
        assert report["open_switches"][0].startswith(switch)
        audit = modelswap_cli("audit", "--url", gw.base_url)
        assert audit.returncode == 1, audit.stdout
        assert "HIGH   exposure" in audit.stdout
        assert f"MEDIUM open switch: {switch}" in audit.stdout
    finally:
        stop_gateway(gw)

    gw = launch(
        tmp_path,
        start + "security: {allowUnauthenticatedNetwork: true}\n" + models,
        host="0.0.0.0",
        name="config",
    )
    try:
        assert f"open switch on: {switch}" in gw.log()
        assert call(gw, "GET", "/api/security").json()["open_switches"][0].startswith(switch)
    finally:
        stop_gateway(gw)

    keys = "apiKeys: [{key: sk-bind-test-key-0000001, scopes: [read, inference]}]\n"
    gw = launch(tmp_path, start + keys + models, host="0.0.0.0", name="keys")
    try:
        assert "open switch" not in gw.log()
        assert call(gw, "GET", "/v1/models", source=fresh_source()).status == 401
        auth = {"Authorization": "Bearer sk-bind-test-key-0000001"}
        report = call(gw, "GET", "/api/security", headers=auth).json()
        assert report["open_switches"] == []
        assert report["authentication"] == "api keys"
    finally:
        stop_gateway(gw)


def test_a_remote_backend_is_allowed_and_named_by_check_and_audit(tmp_path: Path) -> None:
    """llama-swap allows a backend off this machine; modelswap too, as an open switch."""
    config = tmp_path / "remote.yaml"
    config.write_text("models:\n  far:\n    cmd: srv\n    proxy: http://192.0.2.10:8000\n")
    assert modelswap_cli("check", str(config)).returncode == 0
    result = modelswap_cli("audit", "--config", str(config))
    assert "MEDIUM open switch: models.far.proxy" in result.stdout, result.stdout
    assert "192.0.2.10" in result.stdout
    config.write_text(
        "models:\n  far:\n    cmd: srv\n    proxy: http://192.0.2.10:8000\n"
        "    allowRemoteBackend: true\n"
    )
    assert modelswap_cli("check", str(config)).returncode == 0


def test_cors_star_without_keys_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "star.yaml"
    config.write_text(f"security: {{corsOrigins: ['*']}}\nmodels:\n  m:\n    cmd: {fake()}\n")
    result = modelswap_cli("check", str(config))
    assert result.returncode == 2
    assert "security.corsOrigins" in result.stderr


# --- redaction across every surface ----------------------------------------------------------
#
# Secrets are placed in every field that can hold one. "Known" secrets are values modelswap is
# told are secret (keys, keyEnv/keyFile contents, apiKey, anything from ${env.…}): they must
# never appear anywhere, even when a backend prints them bare. "Literal" secrets are written in
# the file under a secret-looking flag/name, or as URL userinfo: masked by their shape.

KNOWN = {
    "apiKeys[0].key": "ms-client-literal-A1b2C3d4e5",
    "apiKeys[1].keyEnv": "ms-client-keyenv-F6g7H8i9j0",
    "apiKeys[2].keyFile": "ms-client-keyfile-K1l2M3n4o5",
    "models.leaky.apiKey (${env})": "ms-upstream-env-P6q7R8s9t0",
    "models.*.env.HF_TOKEN (${env})": "ms-hf-env-U1v2W3x4y5",
    "models.leaky.env.SETTING (${env})": "ms-plain-env-Z6a7B8c9d0",
    "models.leaky.cmd --api-key ${env}": "ms-cmd-env-E1f2G3h4i5",
    "models.failing.apiKey (literal)": "ms-upstream-literal-J6k7L8m9n0",
}
LITERAL = {
    "models.leaky.cmd --api-key literal": "ms-cmd-literal-O1p2Q3r4s5",
    "models.leaky.cmd --hf-token=literal": "ms-cmd-eq-literal-T6u7V8w9x0",
    "models.leaky.env.API_TOKEN literal": "ms-env-literal-Y1z2A3b4c5",
    "models.withuser.proxy userinfo": "ms-proxy-pw-D6e7F8g9h0",
}
ENV = {
    "MS_R_KEYENV": KNOWN["apiKeys[1].keyEnv"],
    "MS_R_UP": KNOWN["models.leaky.apiKey (${env})"],
    "MS_R_HF": KNOWN["models.*.env.HF_TOKEN (${env})"],
    "MS_R_PLAIN": KNOWN["models.leaky.env.SETTING (${env})"],
    "MS_R_CMD": KNOWN["models.leaky.cmd --api-key ${env}"],
}


def _leaky_cmd() -> str:
    """A backend that prints every secret it was given, bare, then serves (slowly)."""
    script = (
        'echo "boot: setting=$SETTING hf=$HF_TOKEN tok=$API_TOKEN '
        'args: $2 $4 $(printf %s "$5" | cut -d= -f2)" >&2; '
        'echo "Downloading $HF_TOKEN $2: 50%|#####     | 5/10 [00:01<00:01, 2.00it/s]" >&2; '
        f"exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_BACKEND))} "
        '--port "$6" --load-delay 1.5 --quiet-loading'
    )
    args = (
        f"--api-key ${{env.MS_R_CMD}} --api-key {LITERAL['models.leaky.cmd --api-key literal']} "
        f"--hf-token={LITERAL['models.leaky.cmd --hf-token=literal']} ${{PORT}}"
    )
    return f"bash -c {shlex.quote(script)} leaky {args}"


def _failing_cmd() -> str:
    """A backend whose start fails with an error line quoting secrets."""
    script = (
        'echo "llama_model_load: error loading model: cannot fetch '
        'https://hf.example/m.gguf with $HF_TOKEN and $1" >&2; exit 1'
    )
    key = KNOWN["models.failing.apiKey (literal)"]
    return f"bash -c {shlex.quote(script)} failing {key} --port ${{PORT}}"


def _redaction_config(key_file: Path) -> str:
    return (
        f"startPort: {free_port_range(4)}\nlogLevel: debug\n"
        "apiKeys:\n"
        f"  - {{key: {KNOWN['apiKeys[0].key']}, name: boss, scopes: [inference, read, admin]}}\n"
        "  - {keyEnv: MS_R_KEYENV, name: reader, scopes: [read]}\n"
        f"  - {{keyFile: {json.dumps(str(key_file))}, name: app}}\n"
        "models:\n"
        "  leaky:\n"
        f"    cmd: {json.dumps(_leaky_cmd())}\n"
        "    apiKey: ${env.MS_R_UP}\n"
        "    env:\n"
        "      HF_TOKEN: ${env.MS_R_HF}\n"
        "      SETTING: ${env.MS_R_PLAIN}\n"
        f"      API_TOKEN: {LITERAL['models.leaky.env.API_TOKEN literal']}\n"
        "  failing:\n"
        f"    cmd: {json.dumps(_failing_cmd())}\n"
        f"    apiKey: {KNOWN['models.failing.apiKey (literal)']}\n"
        "    env:\n      HF_TOKEN: ${env.MS_R_HF}\n"
        "  withuser:\n"
        f"    cmd: {fake()}\n"
        f"    proxy: http://bob:{LITERAL['models.withuser.proxy userinfo']}@127.0.0.1:${{PORT}}\n"
    )


@pytest.fixture(scope="module")
def surfaces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every surface's text after an eventful run: what the tests search for secrets."""
    tmp = tmp_path_factory.mktemp("redaction")
    key_file = tmp / "client.key"
    key_file.write_text(KNOWN["apiKeys[2].keyFile"] + "\n")
    config_text = _redaction_config(key_file)
    config = tmp / "config.yaml"
    config.write_text(config_text)
    out: dict[str, str] = {}

    show = modelswap_cli("check", "--show", str(config), env=ENV)
    assert show.returncode == 0, show.stderr
    out["check --show"] = show.stdout + show.stderr
    plain = modelswap_cli("check", str(config), env=ENV)
    assert plain.returncode == 0, plain.stderr
    out["check"] = plain.stdout + plain.stderr

    boss = {"Authorization": f"Bearer {KNOWN['apiKeys[0].key']}", **JSON}
    reader = {"x-api-key": KNOWN["apiKeys[1].keyEnv"]}
    app = {"Authorization": basic("app", KNOWN["apiKeys[2].keyFile"]), **JSON}
    gw = launch(tmp, config_text, env=ENV, name="redaction")
    events = Capture(gw, "/api/events", {"Authorization": f"Bearer {KNOWN['apiKeys[0].key']}"})
    try:
        events.wait_for("event: snapshot")
        failed = call(gw, "POST", "/v1/chat/completions", chat_body("failing"), boss)
        assert failed.status == 503, failed.text
        out["503 error body"] = failed.text
        assert "cannot fetch" in failed.json()["error"]["diagnosis"]["evidence"]  # quoted
        assert call(gw, "POST", "/v1/chat/completions", chat_body("withuser"), app).status == 200

        results: list[Reply] = []
        client = threading.Thread(
            target=lambda: results.append(
                call(gw, "POST", "/v1/chat/completions", chat_body("leaky"), boss)
            )
        )
        client.start()
        starting: list[str] = []

        def caught_starting() -> bool:
            reply = call(gw, "GET", "/running", headers=reader)
            rows = {row["model"]: row for row in reply.json()["running"]}
            row = rows.get("leaky", {})
            if row.get("state") == "starting" and "last_progress_line" in row:
                starting.append(reply.text)
                return True
            return False

        poll(caught_starting, 10.0, "leaky shows its start progress in /running")
        client.join(20)
        assert results, "the request to leaky did not finish"
        assert results[0].status == 200, results[0].text
        out["/running while starting"] = "\n".join(starting)

        out["/running"] = call(gw, "GET", "/running", headers=reader).text
        assert "last_failure" in out["/running"]
        for model in ("leaky", "failing", "withuser"):
            out[f"/logs/{model}"] = call(gw, "GET", f"/logs/{model}", headers=reader).text
        assert "boot:" in out["/logs/leaky"]
        assert "error loading model" in out["/logs/failing"]
        out["/api/config"] = call(gw, "GET", "/api/config", headers=boss).text
        out["/api/security"] = call(gw, "GET", "/api/security", headers=reader).text
        out["/v1/models"] = call(gw, "GET", "/v1/models", headers=app).text
        out["403 body"] = call(gw, "GET", "/api/config", headers=reader).text
        out["404 body"] = call(
            gw, "POST", "/v1/chat/completions", chat_body(KNOWN["apiKeys[0].key"]), boss
        ).text
        echo = call(gw, "POST", "/v1/responses", json.dumps({"model": "leaky"}).encode(), boss)
        assert echo.json()["headers"]["authorization"] == f"Bearer {ENV['MS_R_UP']}"
        events.wait_for('"new":"ready"')
        events.wait_for("process.progress")
    finally:
        events.close()
        stop_gateway(gw)
    out["/api/events"] = events.text()
    assert "diagnosis" in out["/api/events"]
    out["gateway log"] = gw.log()
    return out


def _leaks(secrets: dict[str, str], texts: dict[str, str]) -> tuple[int, list[str]]:
    """(cases tried, leaks): each secret x each surface; a leak is the secret, or its unique
    tail in any letter case (a surface that changes case would hide it from exact matching)."""
    tried, found = 0, []
    for surface, text in texts.items():
        lowered = text.lower()
        for where, secret in secrets.items():
            tried += 1
            tail = secret.rsplit("-", 1)[1].lower()
            if secret in text or tail in lowered:
                at = lowered.find(tail)
                context = text[max(0, at - 60) : at + 30].replace("\n", "\\n")
                found.append(f"{surface}: {where} ... {context!r}")
    return tried, found


def _report(kind: str, tried: int, leaks: list[str]) -> str:
    summary = f"redaction ({kind}): {tried} cases tried, {len(leaks)} leaks found"
    print(summary)
    return summary + ("\n  " + "\n  ".join(leaks) if leaks else "")


def test_known_secrets_never_leak_on_any_surface(surfaces: dict[str, str]) -> None:
    texts = {k: v for k, v in surfaces.items() if k != "check"}
    tried, leaks = _leaks(KNOWN, texts)
    assert tried == len(KNOWN) * len(texts)
    assert not leaks, _report("known secrets", tried, leaks)
    print(_report("known secrets", tried, leaks))


def test_literal_secrets_never_leak_on_any_surface(surfaces: dict[str, str]) -> None:
    texts = {k: v for k, v in surfaces.items() if k != "check"}
    tried, leaks = _leaks(LITERAL, texts)
    assert not leaks, _report("literal secrets", tried, leaks)
    print(_report("literal secrets", tried, leaks))


def test_plain_check_output_never_shows_secrets(surfaces: dict[str, str]) -> None:
    """``modelswap check`` (without --show) prints each resolved command line."""
    tried, leaks = _leaks({**KNOWN, **LITERAL}, {"check": surfaces["check"]})
    assert not leaks, _report("plain check", tried, leaks)
    print(_report("plain check", tried, leaks))
