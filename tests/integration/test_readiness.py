"""Readiness is detected, not waited for: the port's listening is watched, then health asked.

Real fake backends that print nothing when they bind (many servers log before binding, or not
at all), one that answers 503 while loading (llama.cpp), and `checkEndpoint: none`. What is
asserted is behaviour — the state reached, the receipt fields, that a request right after
ready is answered; how fast is measured by bench/cold_start.py --silent.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from tests.integration.conftest import MakeModel, MakeProcess

from modelswap.events import Event, EventBus
from modelswap.states import ProcessState as S
from modelswap.supervisor import health

pytestmark = pytest.mark.integration


def ready_events(events: EventBus) -> list[Event]:
    seen: list[Event] = []
    events.add_listener(
        lambda e: seen.append(e) if e.kind == "process.state" and e.data["new"] == S.READY else None
    )
    return seen


@pytest.mark.parametrize("flavor", ["vllm", "llamacpp"])
async def test_a_backend_silent_at_bind_is_ready_with_its_listening_time(
    make_model: MakeModel,
    make_process: MakeProcess,
    events: EventBus,
    flavor: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    stamps = tmp_path / "stamps.jsonl"
    config = make_model(
        "--flavor", flavor, "--quiet-loading", "--silent-bind", "--load-delay", "0.3",
        "--timestamps", str(stamps),
    )  # fmt: skip
    process = make_process(config)
    seen = ready_events(events)
    for start in range(2):  # the second start is watched where the first one's port listened
        if start:
            await process.stop()
            stamps.write_text("")
        await process.ensure_ready()
        assert process.state is S.READY
        assert process.listening_at is not None
        ready = seen[-1]
        # The start's receipt: spawn -> listening, and spawn -> healthy, listening first.
        assert 0 < ready.data["listening_seconds"] <= ready.data["start_seconds"]
        # And listening -> ready, which the next start's health window follows.
        assert 0 <= ready.data["listening_to_ready_seconds"] < ready.data["start_seconds"]
        assert any("its port listened after" in line for line in process.logs.tail())
        # How long after the backend listened the gateway saw it (the backend's own clock
        # stamp: CLOCK_MONOTONIC is the machine's): kept as a figure, never asserted.
        listened = [json.loads(line) for line in stamps.read_text().splitlines()]
        (at,) = [entry["t"] for entry in listened if entry["event"] == "listen"]
        delay_ms = round((process.listening_at - at) * 1000, 2)
        print(f"measured {flavor} start {start + 1}: seen {delay_ms} ms after it listened")
        record_property(f"seen_after_listen_ms_start{start + 1}", delay_ms)
    assert len(seen) == 2


async def test_check_endpoint_none_waits_for_the_port_before_ready(
    make_model: MakeModel, make_process: MakeProcess, session: aiohttp.ClientSession
) -> None:
    # With no health endpoint, "ready" used to mean "spawned": the first request then met a
    # refused connection. Now it waits for the port to listen.
    config = make_model(
        "--flavor",
        "vllm",
        "--quiet-loading",
        "--silent-bind",
        "--load-delay",
        "1.0",
        check_endpoint=None,
    )
    process = make_process(config)
    await process.ensure_ready()
    assert process.state is S.READY
    async with session.get(config.proxy + "/health") as resp:
        assert resp.status == 200


def test_the_listen_probe_sees_a_listening_socket_and_a_closed_port() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        target = health.probe_target("127.0.0.1", port)
        assert target is not None
        assert not health.is_listening(target)  # bound, not listening: refused
        server.listen()
        assert health.is_listening(target)


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("127.0.0.1", 8080, ("127.0.0.1", 8080)),
        ("localhost", 8080, ("127.0.0.1", 8080)),
        ("::1", 8080, ("::1", 8080)),
        ("[::1]", 8080, ("::1", 8080)),
        ("127.0.0.5", 1, ("127.0.0.5", 1)),
        ("10.0.0.7", 8080, None),  # a remote backend: health polls only
        ("gpu-box.lan", 8080, None),
        ("127.0.0.1", None, None),
        (None, 8080, None),
    ],
)
def test_the_listen_probe_only_looks_at_loopback(
    host: str | None, port: int | None, expected: tuple[str, int] | None
) -> None:
    assert health.probe_target(host, port) == expected
