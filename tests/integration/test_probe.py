"""The metadata probe against real sockets (docs/backends.md §7): fake backends as subprocesses,
a small in-process aiohttp server for HTTP statuses and hangs, and ManagedProcess's handling of
the result (stored after READY, concurrently; cleared first thing when a new start begins)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import json
import logging
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from tests.integration.conftest import FAKE, MakeModel, MakeProcess, free_port

from modelswap.backends.logreader import BackendLogReader
from modelswap.backends.probe import MAX_BODY, PROBE_TIMEOUT, MetadataProbe
from modelswap.config import ModelConfig
from modelswap.errors import StartError
from modelswap.events import Event, EventBus
from modelswap.reported import CapacityReceipt, ModelMetadata
from modelswap.states import ProcessState
from modelswap.supervisor.process import ManagedProcess

# The ceiling of a wait for an event: it only ends a hang.
HANG = 60.0

pytestmark = pytest.mark.integration

S = ProcessState
LOGS = Path(__file__).resolve().parents[1] / "data" / "startup-logs"
PROBE_LOGGER = "modelswap.backends.probe"

INVALID: list[Any] = [
    0,
    -1,
    -4096,
    2048.0,
    0.5,
    "2048",
    True,
    False,
    None,
    2**31 + 1,
    2**53,
    [4096],
    {"n": 4096},
]
INVALID_IDS = [json.dumps(v) for v in INVALID]


# ---- fake backends shared by the module ------------------------------------------------------


@dataclasses.dataclass
class Fake:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


@dataclasses.dataclass
class Fakes:
    """Fake backends started once for the whole module (their bodies are re-read per request,
    so a test rewrites ``body_file`` / ``llama_body_file`` and probes again)."""

    by_name: dict[str, Fake]
    body_file: Path
    llama_body_file: Path

    def port(self, name: str) -> int:
        return self.by_name[name].port

    def set_body(self, data: object) -> None:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        self.body_file.write_bytes(raw)


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _stop(fake: Fake) -> None:
    if fake.proc.poll() is None:
        fake.proc.terminate()  # by PID: a process this module started
        try:
            fake.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            fake.proc.kill()
            fake.proc.wait()


@pytest.fixture(scope="module")
def fakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fakes]:
    tmp = tmp_path_factory.mktemp("probe-fakes")
    body_file = tmp / "models.json"
    body_file.write_text('{"object": "list", "data": []}')
    llama_body_file = tmp / "llama-models.json"
    llama_body_file.write_text(
        json.dumps(
            {
                "object": "list",
                "data": [
                    {
                        "id": "served",
                        "owned_by": "llamacpp",
                        "meta": {"n_ctx": 1111, "n_ctx_train": 8192},
                    }
                ],
            }
        )
    )
    specs = {
        # /props answers 404 (vLLM flavor): /v1/models is whatever body_file holds.
        "body": ["--flavor", "vllm", "--models-body", str(body_file)],
        # /props says n_ctx 3072; /v1/models says meta.n_ctx 1111 (so the source is visible).
        "llama": ["--flavor", "llamacpp", "--ctx", "3072", "--models-body", str(llama_body_file)],
        "vllm": ["--flavor", "vllm", "--model", "served/name", "--strict-model", "--ctx", "4096"],
        "slow": ["--flavor", "vllm", "--metadata-delay", "5"],
        "endless": ["--flavor", "llamacpp", "--metadata-forever"],
    }
    started: dict[str, Fake] = {}
    try:
        for name, args in specs.items():
            port = free_port()
            log = tmp / f"{name}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, str(FAKE), "--port", str(port), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            started[name] = Fake(port, proc, log)
        deadline = time.monotonic() + HANG
        for name, fake in started.items():
            while not _healthy(fake.port):
                assert fake.proc.poll() is None, f"fake {name} exited:\n{fake.log.read_text()}"
                assert time.monotonic() < deadline, f"fake {name} not healthy in time"
                time.sleep(0.02)
        yield Fakes(started, body_file, llama_body_file)
    finally:
        for fake in started.values():
            _stop(fake)


@pytest.fixture
def probe(session: aiohttp.ClientSession) -> MetadataProbe:
    return MetadataProbe(session)


def config_for(make_model: MakeModel, port: int, **overrides: Any) -> ModelConfig:
    overrides.setdefault("backend", "auto")
    return make_model(port=port, **overrides)


def unavailable_reasons(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == PROBE_LOGGER and "metadata unavailable" in r.getMessage()
    ]


# ---- an in-process HTTP server for statuses, redirects and hangs ------------------------------


@dataclasses.dataclass
class Local:
    base: str
    arrived: asyncio.Event
    gone: asyncio.Event


@pytest.fixture
async def local() -> AsyncIterator[Local]:
    arrived, gone = asyncio.Event(), asyncio.Event()

    async def status(request: web.Request) -> web.Response:
        return web.json_response({"error": "nope"}, status=int(request.match_info["code"]))

    async def good(request: web.Request) -> web.Response:
        row = {"id": "m", "owned_by": "vllm", "max_model_len": 4096}
        return web.json_response({"object": "list", "data": [row]})

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/good/v1/models")

    async def hang(request: web.Request) -> web.StreamResponse:
        try:
            if request.match_info["when"] == "body":
                response = web.StreamResponse(headers={"Content-Type": "application/json"})
                await response.prepare(request)
                await response.write(b'{"object": "list", "data": [')
            arrived.set()
            await asyncio.Event().wait()
        finally:
            gone.set()
        raise AssertionError("unreachable")

    async def ollama_ps(request: web.Request) -> web.Response:
        loaded = [
            {"name": "qwen3:8b", "model": "qwen3:8b", "context_length": 8192},
            {"name": "llama3:latest", "model": "llama3:latest", "context_length": 4096},
            {"name": "old:1b", "model": "old:1b"},
        ]
        return web.json_response({"models": loaded})

    app = web.Application()
    app.router.add_get("/ollama/api/ps", ollama_ps)
    app.router.add_get("/status/{code}/v1/models", status)
    app.router.add_get("/status/{code}/props", status)
    app.router.add_get("/good/v1/models", good)
    app.router.add_get("/redirect/v1/models", redirect)
    app.router.add_get("/hang/{when}/v1/models", hang)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield Local(f"http://127.0.0.1:{port}", arrived, gone)
    finally:
        await runner.cleanup()


# ---- llama.cpp ------------------------------------------------------------------------------


async def test_llamacpp_props_n_ctx_is_preferred(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    # Detected from owned_by "llamacpp": /props (3072) wins over /v1/models meta.n_ctx (1111).
    found = await probe.probe(config_for(make_model, fakes.port("llama")))
    assert found == ModelMetadata("llamacpp", 3072, 8192, 1, "/props")


async def test_llamacpp_configured_backend_reads_props(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    found = await probe.probe(config_for(make_model, fakes.port("llama"), backend="llamacpp"))
    assert found is not None
    assert (found.backend, found.context_length, found.total_slots, found.source) == (
        "llamacpp",
        3072,
        1,
        "/props",
    )


async def test_llamacpp_configured_backend_keeps_n_ctx_train(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    # Issue 3: "keep n_ctx_train as the trained maximum". The backend lists it in /v1/models
    # meta.n_ctx_train (llama.cpp's /props has no such field); auto-detection keeps it, so a
    # model configured with `backend: llamacpp` must keep it too.
    found = await probe.probe(config_for(make_model, fakes.port("llama"), backend="llamacpp"))
    assert found is not None
    assert found.n_ctx_train == 8192


@pytest.mark.parametrize("backend", ["llamacpp", "auto"])
async def test_llamacpp_falls_back_to_models_meta_n_ctx_when_props_fails(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel, backend: str
) -> None:
    # The "body" fake is vLLM-flavoured: its /props answers 404.
    fakes.set_body(
        {
            "object": "list",
            "data": [
                {"id": "x", "owned_by": "llamacpp", "meta": {"n_ctx": 1536, "n_ctx_train": 4096}}
            ],
        }
    )
    found = await probe.probe(config_for(make_model, fakes.port("body"), backend=backend))
    assert found == ModelMetadata("llamacpp", 1536, 4096, None, "/v1/models")


# ---- vLLM -----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["vllm", "auto"])
async def test_vllm_strict_served_name_with_use_model_name(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel, backend: str
) -> None:
    config = config_for(
        make_model, fakes.port("vllm"), backend=backend, use_model_name="served/name"
    )
    assert config.id != "served/name"
    found = await probe.probe(config)
    assert found == ModelMetadata("vllm", 4096, None, None, "/v1/models")


async def test_vllm_row_of_the_served_name_among_lora_rows(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    fakes.set_body(
        {
            "data": [
                {"id": "org/base", "owned_by": "vllm", "max_model_len": 32768},
                {"id": "my-lora", "owned_by": "vllm", "max_model_len": 8192, "parent": "org/base"},
            ]
        }
    )
    port = fakes.port("body")
    lora = config_for(make_model, port, backend="vllm", use_model_name="my-lora")
    base = config_for(make_model, port, backend="vllm", use_model_name="org/base")
    assert (await probe.probe(lora)) == ModelMetadata("vllm", 8192, source="/v1/models")
    assert (await probe.probe(base)) == ModelMetadata("vllm", 32768, source="/v1/models")


async def test_vllm_reads_only_max_model_len(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    fakes.set_body({"data": [{"id": "m", "owned_by": "vllm", "context_length": 4096}]})
    assert await probe.probe(config_for(make_model, fakes.port("body"), backend="vllm")) is None


async def test_sglang_reads_max_model_len(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    fakes.set_body({"data": [{"id": "m", "owned_by": "sglang", "max_model_len": 32768}]})
    found = await probe.probe(config_for(make_model, fakes.port("body")))
    assert found == ModelMetadata("sglang", 32768, source="/v1/models")


@pytest.mark.parametrize(
    ("upstream", "want"),
    [("llama3:latest", 4096), ("qwen3:8b", 8192), ("old:1b", None), ("other", None)],
)
async def test_ollama_api_ps_context_length(
    local: Local, probe: MetadataProbe, make_model: MakeModel, upstream: str, want: int | None
) -> None:
    config = make_model(backend="ollama", use_model_name=upstream)
    config = dataclasses.replace(config, proxy=f"{local.base}/ollama")
    found = await probe.probe(config)
    assert found == (None if want is None else ModelMetadata("ollama", want, source="/api/ps"))


# ---- row selection through the probe ---------------------------------------------------------


GENERIC_ROWS = {
    "data": [
        {"id": "alpha", "context_length": 1000},
        {"id": "beta", "max_model_len": 2000},
        {"id": "gamma", "meta": {"n_ctx": 3000}},
    ]
}


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        ({"id": "m1", "use_model_name": "beta"}, 2000),  # useModelName
        ({"id": "m2", "use_model_name": "gamma"}, 3000),
        ({"id": "alpha"}, 1000),  # the model's own id
        ({"id": "gamma", "use_model_name": "beta"}, 2000),  # useModelName beats the own id
        ({"id": "m3"}, None),  # ambiguous: three rows, none matches
        ({"id": "m4", "use_model_name": "delta"}, None),
    ],
    ids=[
        "use-model-name",
        "use-model-name-meta",
        "own-id",
        "upstream-beats-id",
        "ambiguous",
        "unknown",
    ],
)
@pytest.mark.parametrize("backend", ["auto", "generic"])
async def test_row_selection(
    fakes: Fakes,
    probe: MetadataProbe,
    make_model: MakeModel,
    backend: str,
    overrides: dict[str, Any],
    want: int | None,
) -> None:
    fakes.set_body(GENERIC_ROWS)
    found = await probe.probe(
        config_for(make_model, fakes.port("body"), backend=backend, **overrides)
    )
    if want is None:
        assert found is None
    else:
        assert found == ModelMetadata("generic", want, source="/v1/models")


async def test_single_row_fallback(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel
) -> None:
    fakes.set_body({"data": [{"id": "/models/some.gguf", "max_model_len": 4096}]})
    config = config_for(make_model, fakes.port("body"), use_model_name="not-listed")
    assert await probe.probe(config) == ModelMetadata("generic", 4096, source="/v1/models")


# ---- invalid values, bad bodies -------------------------------------------------------------


def _row_with(kind: str, value: object) -> dict[str, Any]:
    if kind == "vllm":
        return {"id": "m", "owned_by": "vllm", "max_model_len": value}
    if kind == "llamacpp":
        return {"id": "m", "owned_by": "llamacpp", "meta": {"n_ctx": value}}
    return {"id": "m", "max_model_len": value, "context_length": value, "meta": {"n_ctx": value}}


@pytest.mark.parametrize("kind", ["vllm", "llamacpp", "generic"])
@pytest.mark.parametrize("value", INVALID, ids=INVALID_IDS)
async def test_invalid_values_mean_unavailable(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel, kind: str, value: object
) -> None:
    fakes.set_body({"object": "list", "data": [_row_with(kind, value)]})
    found = await probe.probe(config_for(make_model, fakes.port("body"), backend=kind))
    assert found is None


@pytest.mark.parametrize("kind", ["vllm", "llamacpp", "generic"])
@pytest.mark.parametrize("value", [1, 2048, 2**31])
async def test_valid_values_are_reported(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel, kind: str, value: int
) -> None:
    fakes.set_body({"object": "list", "data": [_row_with(kind, value)]})
    found = await probe.probe(config_for(make_model, fakes.port("body"), backend=kind))
    assert found is not None
    assert found.context_length == value


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json at all",
        b"[]",
        b'{"data": {}}',
        b'{"data": [',
        b"\xff\xfe\x00{",
        b'{"data": ["m", 4096]}',
    ],
)
async def test_bad_bodies_mean_unavailable(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel, raw: bytes
) -> None:
    fakes.set_body(raw)
    for backend in ("vllm", "llamacpp", "auto"):
        assert (
            await probe.probe(config_for(make_model, fakes.port("body"), backend=backend)) is None
        )


# ---- bounds: status, redirects, size, time, scheme --------------------------------------------


@pytest.mark.parametrize("code", [404, 500, 503, 204])
async def test_http_error_status_means_unavailable(
    local: Local,
    probe: MetadataProbe,
    make_model: MakeModel,
    code: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=PROBE_LOGGER)
    for backend in ("vllm", "llamacpp", "auto"):
        config = dataclasses.replace(
            make_model(backend=backend), proxy=f"{local.base}/status/{code}"
        )
        assert await probe.probe(config) is None
    assert all(str(code) in reason for reason in unavailable_reasons(caplog))
    assert len(unavailable_reasons(caplog)) == 3  # logged once per probe


async def test_redirects_are_not_followed(
    local: Local, probe: MetadataProbe, make_model: MakeModel
) -> None:
    good = dataclasses.replace(make_model(backend="vllm"), proxy=f"{local.base}/good")
    assert await probe.probe(good) == ModelMetadata("vllm", 4096, source="/v1/models")
    moved = dataclasses.replace(make_model(backend="vllm"), proxy=f"{local.base}/redirect")
    assert await probe.probe(moved) is None


@pytest.mark.parametrize("backend", ["vllm", "llamacpp", "auto"])
async def test_endless_body_is_cut_at_64_kib(
    fakes: Fakes,
    probe: MetadataProbe,
    make_model: MakeModel,
    backend: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=PROBE_LOGGER)
    config = config_for(make_model, fakes.port("endless"), backend=backend)
    found = await probe.probe(config)
    assert found is None
    # Abandoned because of its size, not merely timed out.
    reasons = unavailable_reasons(caplog)
    assert len(reasons) == 1, reasons
    assert f"body over {MAX_BODY} B" in reasons[0]
    assert MAX_BODY == 64 * 1024


async def test_the_body_cap_applies_to_a_valid_body_too(
    fakes: Fakes, session: aiohttp.ClientSession, make_model: MakeModel
) -> None:
    fakes.set_body({"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]})
    config = config_for(make_model, fakes.port("body"), backend="vllm")
    assert await MetadataProbe(session).probe(config) is not None
    assert await MetadataProbe(session, max_body=40).probe(config) is None


async def test_timeout_is_one_total_bound(
    fakes: Fakes, probe: MetadataProbe, make_model: MakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    # The slow fake answers metadata after 5 s. vLLM: one request. llama.cpp: /props and then
    # /v1/models, both slow: still one 2-second bound for the whole probe, not one per request.
    caplog.set_level(logging.DEBUG, logger=PROBE_LOGGER)
    port = fakes.port("slow")

    async def timed(backend: str) -> tuple[ModelMetadata | None, float]:
        started = time.monotonic()
        found = await probe.probe(config_for(make_model, port, backend=backend))
        return found, time.monotonic() - started

    results = await asyncio.gather(timed("vllm"), timed("llamacpp"), timed("auto"))
    for found, elapsed in results:
        assert found is None
        # Not given up before the bound ran out; and one bound, not two one after the other
        # (that would take twice as long: the only upper bound here, with a whole bound's slack).
        assert PROBE_TIMEOUT - 0.2 <= elapsed < 2 * PROBE_TIMEOUT, elapsed
    reasons = unavailable_reasons(caplog)
    assert len(reasons) == 3
    assert all("no answer within 2 s" in reason for reason in reasons)


class NoSession:
    """Stands in for the client session; any use of it is a failure."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get(self, url: str, **kwargs: object) -> object:
        self.calls.append(url)
        raise AssertionError(f"the probe connected to {url}")


@pytest.mark.parametrize(
    "proxy",
    [
        "ftp://127.0.0.1:{port}",
        "unix:/tmp/modelswap-probe.sock",
        "unix:///tmp/modelswap-probe.sock",
        "file:///etc/passwd",
        "ws://127.0.0.1:{port}",
        "127.0.0.1:{port}",
        "//127.0.0.1:{port}",
        "",
    ],
)
async def test_non_http_urls_are_refused_without_a_connection(
    make_model: MakeModel, session: aiohttp.ClientSession, proxy: str
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        config = dataclasses.replace(make_model(backend="auto"), proxy=proxy.format(port=port))
        stub = NoSession()
        assert await MetadataProbe(stub).probe(config) is None  # type: ignore[arg-type]
        assert stub.calls == []
        assert await MetadataProbe(session).probe(config) is None
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected


# ---- cancellation -----------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["headers", "body"])
async def test_cancelled_mid_probe_propagates_and_closes_the_connection(
    local: Local, probe: MetadataProbe, make_model: MakeModel, when: str
) -> None:
    config = dataclasses.replace(make_model(backend="vllm"), proxy=f"{local.base}/hang/{when}")
    task = asyncio.create_task(probe.probe(config))
    async with asyncio.timeout(HANG):
        await local.arrived.wait()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()  # not swallowed into "unavailable"
    async with asyncio.timeout(HANG):
        await local.gone.wait()  # the server saw the client go away: nothing left open


# ---- ManagedProcess: storage, concurrency, lifetime -------------------------------------------


class Recorder:
    """Events of one model: metadata publications, and what ``metadata``/``capacity`` held at
    the very moment each start began (read synchronously in the listener)."""

    def __init__(self, events: EventBus, process: ManagedProcess) -> None:
        self.process = process
        self.published: list[ModelMetadata] = []
        self.at_starting: list[tuple[ModelMetadata | None, CapacityReceipt | None]] = []
        self.states: list[ProcessState] = []
        events.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.data.get("model") != self.process.model:
            return
        if event.kind == "process.metadata":
            self.published.append(event.data["metadata"])
        elif event.kind == "process.state":
            self.states.append(event.data["new"])
            if event.data["new"] is S.STARTING:
                self.at_starting.append((self.process.metadata, self.process.capacity))


def probe_tasks(model: str) -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == f"probe:{model}" and not t.done()]


async def wait_until(predicate: Any, within: float = HANG) -> None:
    """Poll a condition with a deadline (no fixed sleeps for state)."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {within} s")
        await asyncio.sleep(0.01)


def managed(
    make_process: MakeProcess, config: ModelConfig, session: aiohttp.ClientSession, **kwargs: Any
) -> ManagedProcess:
    kwargs.setdefault("prober", MetadataProbe(session))
    kwargs.setdefault("log_reader", BackendLogReader())
    return make_process(config, **kwargs)


async def test_metadata_is_stored_and_published_after_ready(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    events: EventBus,
) -> None:
    process = managed(make_process, make_model("--ctx", "3072"), session)
    seen = Recorder(events, process)
    await process.ensure_ready()
    await wait_until(lambda: process.metadata is not None)
    assert process.metadata is not None
    assert process.metadata.context_length == 3072
    assert process.metadata.source == "/props"
    assert seen.published == [process.metadata]
    assert process.state is S.READY


async def test_slow_probe_never_delays_ready_nor_marks_unhealthy(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    events: EventBus,
) -> None:
    process = managed(make_process, make_model("--metadata-delay", "5"), session)
    seen = Recorder(events, process)
    await process.ensure_ready()
    ready_at = time.monotonic()
    assert probe_tasks(process.model), "the probe runs after READY, concurrently"
    await wait_until(lambda: not probe_tasks(process.model))
    # It ran on, after ready, until its own bound ended it (a lower bound, with room for the
    # moment between the probe's start and ready_at being read).
    assert time.monotonic() - ready_at >= PROBE_TIMEOUT / 2
    assert process.metadata is None
    assert process.state is S.READY
    assert seen.states == [S.STARTING, S.READY]
    assert seen.published == []


async def test_stop_during_the_probe_leaves_metadata_none(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    events: EventBus,
) -> None:
    process = managed(make_process, make_model("--metadata-delay", "5"), session)
    seen = Recorder(events, process)
    await process.ensure_ready()
    tasks = probe_tasks(process.model)
    assert len(tasks) == 1
    await process.stop()
    # Done by the time the stop returns or just after: cancelled, or ended by the backend's
    # exit ("unavailable"); either way it left nothing behind.
    await wait_until(lambda: all(t.done() for t in tasks))
    assert process.metadata is None
    assert process.state is S.STOPPED
    assert seen.published == []


class StubbornProber:
    """A prober whose answer arrives after the stop: it ignores its cancellation."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = asyncio.Event()

    async def probe(self, config: ModelConfig) -> ModelMetadata | None:
        self.entered.set()
        while not self.release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.release.wait()
        self.finished.set()
        return ModelMetadata("llamacpp", 2048, source="/props")


async def test_a_probe_answer_arriving_after_the_stop_is_dropped(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    events: EventBus,
) -> None:
    prober = StubbornProber()
    process = managed(make_process, make_model(), session, prober=prober)
    seen = Recorder(events, process)
    await process.ensure_ready()
    async with asyncio.timeout(HANG):
        await prober.entered.wait()
    await process.stop()
    prober.release.set()
    async with asyncio.timeout(HANG):
        await prober.finished.wait()
    await wait_until(lambda: not probe_tasks(process.model))
    assert process.metadata is None
    assert seen.published == []


async def test_metadata_and_capacity_are_gone_the_moment_a_restart_begins(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    events: EventBus,
) -> None:
    log = str(LOGS / "llamacpp-success.log")
    process = managed(make_process, make_model("--ctx", "2048", "--print-log", log), session)
    seen = Recorder(events, process)
    await process.ensure_ready()
    await wait_until(lambda: process.metadata is not None)
    assert process.capacity is not None
    await process.stop()
    await process.ensure_ready()
    assert seen.at_starting == [(None, None), (None, None)]
    await wait_until(lambda: process.metadata is not None)
    assert len(seen.published) == 2


async def test_a_receipt_read_only_after_ready_still_counts(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
) -> None:
    """The backend's log reaches the gateway through a pipe another task reads: lines printed
    before the port answered may be read after READY. Here they come after it for certain (the
    fake prints them at the gateway's first metadata request), and the receipt still has them."""
    log = str(LOGS / "llamacpp-success.log")
    process = managed(
        make_process, make_model("--ctx", "2048", "--quiet-loading", "--late-log", log), session
    )
    await process.ensure_ready()
    await wait_until(lambda: process.capacity is not None)
    assert process.capacity is not None
    assert process.capacity.n_ctx is not None


async def test_failed_restart_leaves_no_metadata(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    events: EventBus,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "fail-next-start"
    base = make_model("--ctx", "2048")
    # The same command fails once the marker exists (the second start).
    wrapper = ("/bin/sh", "-c", 'test -e "$0" && exit 3; exec "$@"', str(marker), *base.cmd)
    process = managed(make_process, dataclasses.replace(base, cmd=wrapper), session)
    seen = Recorder(events, process)
    await process.ensure_ready()
    await wait_until(lambda: process.metadata is not None)
    await process.stop()
    marker.touch()
    with pytest.raises(StartError):
        await process.ensure_ready()
    assert process.state is S.FAILED
    assert process.metadata is None
    assert process.capacity is None
    assert seen.at_starting[-1] == (None, None)
    assert len(seen.published) == 1


@pytest.mark.parametrize(
    ("flavor", "log"),
    [
        ("vllm", "vllm-new-success"),
        ("vllm", "vllm-old-success"),
        ("llamacpp", "llamacpp-success"),
        ("llamacpp", "llamacpp-old-success"),
    ],
)
async def test_capacity_receipt_is_read_from_the_startup_log(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    flavor: str,
    log: str,
) -> None:
    path = LOGS / f"{log}.log"
    want = json.loads(path.with_suffix(".expected.json").read_text())["receipt"]
    config = make_model("--flavor", flavor, "--print-log", str(path), backend=flavor)
    process = managed(make_process, config, session, prober=None)
    await process.ensure_ready()
    assert process.capacity == CapacityReceipt(**want)


@pytest.mark.parametrize("backend", ["vllm", "auto"])
async def test_deeply_nested_models_body_is_unavailable_and_says_why(
    fakes: Fakes,
    probe: MetadataProbe,
    make_model: MakeModel,
    caplog: pytest.LogCaptureFixture,
    backend: str,
) -> None:
    # 30,000 levels used to end the probe task in a RecursionError with nothing logged.
    caplog.set_level(logging.DEBUG, logger=PROBE_LOGGER)
    fakes.set_body(b'{"data": ' + b"[" * 30_000 + b"]" * 30_000 + b"}")
    assert await probe.probe(config_for(make_model, fakes.port("body"), backend=backend)) is None
    reasons = unavailable_reasons(caplog)
    assert len(reasons) == 1
    assert "nested deeper than" in reasons[0]
