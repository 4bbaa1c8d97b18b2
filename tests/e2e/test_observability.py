"""Observability end to end: ``/metrics`` values after a known sequence of requests, the
activity log (API and ``modelswap activity``), live log streams and the event stream — against
``python -m modelswap serve`` with fake backends, and the real llama.cpp server on SmolLM2."""

from __future__ import annotations

import contextlib
import http.client
import json
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import (
    HANG,
    REPO,
    Door,
    Gateway,
    Reply,
    chat,
    chat_body,
    fake_cmd,
    llamacpp_cmd,
    load_model,
    next_event,
    open_stream,
    request,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
Labels = frozenset[tuple[str, str]]
JSON = {"Content-Type": "application/json"}
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
PROMPT_WORDS = 2  # chat_body's "hello there": the fake reports prompt tokens = words


def model(model_id: str, *flags: str, delay: float = 0.2) -> str:
    return f"  {model_id}:\n    cmd: {fake_cmd('--load-delay', str(delay), *flags)}\n"


def lab(**labels: str) -> Labels:
    return frozenset(labels.items())


def scrape(gw: Gateway) -> dict[str, dict[Labels, float]]:
    """GET /metrics, parsed with prometheus-client's parser: sample -> {labels: value}."""
    reply = request(gw, "GET", "/metrics")
    assert reply.status == 200, reply.body
    assert reply.headers.get_content_type() == "text/plain"
    out: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for s in family.samples:
            key = frozenset(s.labels.items())
            assert key not in out.get(s.name, {}), f"duplicate sample {s.name}{s.labels}"
            out.setdefault(s.name, {})[key] = s.value
    return out


def value(metrics: dict[str, dict[Labels, float]], name: str, **labels: str) -> float | None:
    return metrics.get(name, {}).get(lab(**labels))


def post(gw: Gateway, path: str, body: dict[str, Any]) -> Reply:
    return request(gw, "POST", path, json.dumps(body).encode(), JSON)


def sse_payloads(body: bytes) -> list[str]:
    """Every ``data:`` payload of a whole SSE body, in order."""
    return [
        line[len("data: ") :] for line in body.decode().splitlines() if line.startswith("data: ")
    ]


def usage_only_chunks(payloads: list[str]) -> list[dict[str, Any]]:
    found = []
    for payload in payloads:
        if payload == "[DONE]":
            continue
        data = json.loads(payload)
        if data.get("choices") == [] and "usage" in data:
            found.append(data)
    return found


def read_frame(resp: http.client.HTTPResponse) -> tuple[str | None, str | None] | None:
    """The next SSE event as (event name, data); comments skipped; None at the end."""
    kind: str | None = None
    data: str | None = None
    for _ in range(1000):
        raw = resp.readline()
        if not raw:
            return None
        line = raw.decode().rstrip("\r\n")
        if not line:
            if kind is not None or data is not None:
                return kind, data
            continue
        if line.startswith(":"):
            continue
        field, _, rest = line.partition(": ")
        if field == "event":
            kind = rest
        elif field == "data":
            data = rest
    raise AssertionError("no SSE frame in 1000 lines")


@contextlib.contextmanager
def get_stream(gw: Gateway, path: str, timeout: float = HANG) -> Iterator[http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.headers["X-Accel-Buffering"] == "no"
        assert resp.headers.get_content_type() == "text/event-stream"
        yield resp
    finally:
        conn.close()


def activity(gw: Gateway, query: str = "") -> list[dict[str, Any]]:
    data = gw.get_json("/api/activity" + query)
    rows = data["data"]
    assert isinstance(rows, list)
    return rows


def run_activity_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "modelswap", "activity", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def table_rows(text: str) -> list[list[str]]:
    """``modelswap activity``'s rows split into cells: date, time, key, model, route, status,
    stream, prompt, compl, ttft, dur, tok/s[, error]."""
    lines = text.strip().splitlines()
    assert lines[0].split()[:2] == ["time", "key"]
    assert lines[-1].endswith("requests")
    return [line.split() for line in lines[1:-1]]


# ------------------------------------------------------------------------------- metrics


def test_metrics_after_a_known_sequence_of_requests(
    door_gateway: StartGateway, door: Door, tmp_path: Path
) -> None:
    # The first stream stops after 40 of its 80 tokens until the test lets it go: it is surely
    # in flight while the test looks (the later requests ask for fewer tokens: never held).
    release = tmp_path / "release-a"
    held = ("--stall-after", "40", "--stall-until", shlex.quote(str(release)))
    gw = door_gateway(
        model("a", "--tps", "100", *held, delay=1.3) + model("b"),
        extra_top="metrics:\n  scrapeBackends: true\n",  # the fake has no /metrics: no harm
    )
    prompt = {"a": 0, "b": 0}
    completion = {"a": 0, "b": 0}

    # 1. A stream that waits for the start (queued; > 1 s, so its event stream opens early
    # with progress comments), then runs (in flight); the client did not ask for usage.
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request("POST", CHAT, chat_body("a", stream=True, max_tokens=80), JSON)

        def queued_while_starting() -> bool:
            m = scrape(gw)
            return (
                value(m, "modelswap_queue_depth", model="a") == 1
                and value(m, "modelswap_model_state", model="a", state="starting") == 1
            )

        gw.wait_for(queued_while_starting)
        gw.wait_for(lambda: value(scrape(gw), "modelswap_in_flight", model="a") == 1)
        release.touch()
        resp = conn.getresponse()
        assert resp.status == 200
        raw = resp.read()
    finally:
        conn.close()
    assert b": loading model a" in raw  # the early-opened stream was relayed into
    payloads = sse_payloads(raw)
    assert payloads[-1] == "[DONE]"
    assert usage_only_chunks(payloads) == [], "the injected usage chunk reached the client"
    prompt["a"] += PROMPT_WORDS
    completion["a"] += 80
    watch = door.watch(gw)  # a is ready: 2-7 are the door's own, 8 aiohttp's on both

    # 2-4. Non-streamed chat and completions: the backend's usage is in the answer.
    for path, body in [
        (CHAT, json.loads(chat_body("a", max_tokens=5))),
        (CHAT, json.loads(chat_body("a", max_tokens=3))),
        (COMPLETIONS, {"model": "a", "prompt": "one two three", "max_tokens": 4}),
    ]:
        reply = post(gw, path, body)
        assert reply.status == 200, reply.body
        usage = reply.json()["usage"]
        prompt["a"] += usage["prompt_tokens"]
        completion["a"] += usage["completion_tokens"]

    # 5. A client error from the backend (passed through): counted, no tokens.
    bad = post(gw, CHAT, json.loads(chat_body("a", max_tokens=-1)))
    assert bad.status == 400
    assert "X-Modelswap-Error" not in bad.headers

    # 6. A stream whose client asked for usage: it gets the chunk, exactly once.
    reply = post(
        gw,
        CHAT,
        json.loads(
            chat_body("a", stream=True, max_tokens=6, stream_options={"include_usage": True})
        ),
    )
    assert reply.status == 200
    chunks = usage_only_chunks(sse_payloads(reply.body))
    assert len(chunks) == 1
    assert chunks[0]["usage"]["completion_tokens"] == 6
    prompt["a"] += chunks[0]["usage"]["prompt_tokens"]
    completion["a"] += 6

    # 7. A streamed /v1/completions without include_usage: counted, chunk not relayed.
    reply = post(
        gw, COMPLETIONS, {"model": "a", "prompt": "a b c d", "max_tokens": 7, "stream": True}
    )
    assert reply.status == 200
    payloads = sse_payloads(reply.body)
    assert payloads[-1] == "[DONE]"
    assert usage_only_chunks(payloads) == []
    assert all('"usage"' not in p for p in payloads)
    prompt["a"] += 4
    completion["a"] += 7

    # 8. A gateway error before any model resolves; 9. a listing (not a model request).
    assert chat(gw, "nope").status == 404
    assert request(gw, "GET", "/v1/models").status == 200
    watch.handed_over("model", served=6)

    m = scrape(gw)
    ok = {"outcome": "ok", "code": "", "key": "anonymous"}  # no keys configured
    error = {"outcome": "error", "key": "anonymous"}
    assert m["modelswap_requests_total"] == {
        lab(model="a", route=CHAT, status="200", **ok): 4,
        lab(model="a", route=COMPLETIONS, status="200", **ok): 2,
        # the backend's own, by its error's type (issue 41)
        lab(model="a", route=CHAT, status="400", **error, code="invalid_request_error"): 1,
        lab(model="", route=CHAT, status="404", **error, code="model_not_found"): 1,
    }
    assert m["modelswap_tokens_total"] == {
        lab(model="a", kind="prompt", key="anonymous"): prompt["a"],
        lab(model="a", kind="completion", key="anonymous"): completion["a"],
    }
    assert prompt["a"] == 4 * PROMPT_WORDS + 3 + 4
    assert completion["a"] == 80 + 5 + 3 + 4 + 6 + 7
    assert m["modelswap_request_duration_seconds_count"] == {
        lab(model="a", route=CHAT, outcome="ok"): 4,
        lab(model="a", route=CHAT, outcome="error"): 1,
        lab(model="a", route=COMPLETIONS, outcome="ok"): 2,
        lab(model="", route=CHAT, outcome="error"): 1,
    }
    assert m["modelswap_time_to_first_byte_seconds_count"] == {
        lab(model="a", route=CHAT, outcome="ok"): 4,
        lab(model="a", route=CHAT, outcome="error"): 1,
        lab(model="a", route=COMPLETIONS, outcome="ok"): 2,
    }
    # The first stream waited ~1.3 s for the start and ran ~0.8 s more.
    durations = m["modelswap_request_duration_seconds_sum"]
    assert durations[lab(model="a", route=CHAT, outcome="ok")] > 2.0
    assert m["modelswap_starts_total"] == {lab(model="a", result="ready"): 1}
    assert m["modelswap_start_duration_seconds_count"] == {lab(model="a"): 1}
    # It waited in the scheduler's queue for that start: the queue wait, by model and key.
    assert m["modelswap_queue_wait_seconds_count"][lab(model="a", key="anonymous")] >= 1
    assert m["modelswap_queue_wait_seconds_sum"][lab(model="a", key="anonymous")] >= 1.0
    assert m["modelswap_start_duration_seconds_sum"][lab(model="a")] >= 1.3
    for name, current in (("a", "ready"), ("b", "stopped")):
        states = {
            dict(k)["state"]: v
            for k, v in m["modelswap_model_state"].items()
            if ("model", name) in k
        }
        assert states[current] == 1
        assert sum(states.values()) == 1, states
    assert m["modelswap_in_flight"] == {lab(model="a"): 0, lab(model="b"): 0}
    assert m["modelswap_queue_depth"] == {lab(model="a"): 0, lab(model="b"): 0}
    gw.wait_for(  # the reported context (probed after ready) is a gauge too
        lambda: value(scrape(gw), "modelswap_context_length_tokens", model="a") == 2048
    )
    assert not any(name.startswith("llamacpp:") for name in m)

    # The streamed requests are in the activity log with their tokens too.
    streamed = [r for r in activity(gw, "?model=a") if r["streamed"] and r["status"] == 200]
    assert sorted((r["prompt_tokens"], r["completion_tokens"]) for r in streamed) == sorted(
        [(PROMPT_WORDS, 80), (PROMPT_WORDS, 6), (4, 7)]
    )


# ------------------------------------------------------------------------------ activity


def test_activity_rows_for_success_errors_and_disconnect(
    gateway: StartGateway, tmp_path: Path
) -> None:
    db = tmp_path / "activity.sqlite3"
    gw = gateway(
        model("ok")
        + model("crashy", "--crash-after", "1")
        + model("slow", "--tps", "20", "--tokens", "400"),
        extra_top=f"activity:\n  path: {json.dumps(str(db))}\n",
    )
    assert chat(gw, "ok", max_tokens=3).status == 200
    client_error = chat(gw, "ok", max_tokens=-1)
    assert client_error.status == 400
    assert "X-Modelswap-Error" not in client_error.headers
    unknown = chat(gw, "nope")
    assert unknown.status == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    between = time.time()
    failed = chat(gw, "crashy")
    assert failed.status == 502
    assert failed.json()["error"]["code"] == "upstream_error"
    with open_stream(gw, "slow") as resp:  # leave mid-stream
        assert resp.status == 200
        assert next_event(resp) is not None
        assert next_event(resp) is not None
    gw.wait_for(lambda: len(activity(gw, "?status=499")) == 1)

    rows = activity(gw)
    assert [(r["model"], r["status"]) for r in rows] == [
        ("slow", 499),
        ("crashy", 502),
        (None, 404),
        ("ok", 400),
        ("ok", 200),
    ]
    slow, crashy, nope, ok_400, ok_200 = rows
    assert all(r["route"] == CHAT for r in rows)
    assert all(r["key_name"] is None for r in rows)
    assert [r["error_code"] for r in rows] == [
        None,
        "upstream_error",
        "model_not_found",
        "invalid_request_error",  # the backend's own 400, by its error's type (issue 41)
        None,
    ]
    assert [r["streamed"] for r in rows] == [True, False, False, False, False]
    # The client's own stop is no error (issue 41): its outcome is "stopped".
    assert [r["outcome"] for r in rows] == ["stopped", "error", "error", "error", "ok"]
    assert (ok_200["prompt_tokens"], ok_200["completion_tokens"]) == (PROMPT_WORDS, 3)
    assert ok_200["tokens_per_second"] > 0
    assert ok_200["ttft"] is not None
    assert 0 < ok_200["ttft"] <= ok_200["duration"]
    assert ok_200["bytes_in"] == len(chat_body("ok", max_tokens=3))
    assert ok_200["bytes_out"] > 0
    assert ok_400["prompt_tokens"] is None
    assert ok_400["completion_tokens"] is None
    assert nope["ttft"] is None
    assert nope["bytes_out"] > 0
    assert crashy["prompt_tokens"] is None
    assert slow["ttft"] is not None
    assert slow["bytes_out"] > 0
    # It left before the usage chunk: its tokens are the text events it was sent (one read,
    # more relayed before its going was noticed).
    assert 1 <= slow["completion_tokens"] < 400
    ids = [r["id"] for r in rows]
    assert ids == sorted(ids, reverse=True)

    # Filters.
    assert [r["id"] for r in activity(gw, "?model=ok")] == [ok_400["id"], ok_200["id"]]
    assert [r["id"] for r in activity(gw, "?status=404")] == [nope["id"]]
    assert [r["id"] for r in activity(gw, f"?since={between}")] == [slow["id"], crashy["id"]]
    assert [r["id"] for r in activity(gw, f"?model=ok&status=200&since={between - 60}")] == [
        ok_200["id"]
    ]
    assert activity(gw, "?model=ghost") == []
    # Paging: limit + before (the smallest id of the previous page), no gaps, no repeats.
    pages: list[list[int]] = []
    before = ""
    for _ in range(10):
        page = [r["id"] for r in activity(gw, f"?limit=2{before}")]
        if not page:
            break
        pages.append(page)
        before = f"&before={min(page)}"
    assert pages == [ids[0:2], ids[2:4], ids[4:5]]
    bad = request(gw, "GET", "/api/activity?since=yesterday")
    assert bad.status == 400

    # `modelswap activity` prints the same rows (the gateway still running: WAL).
    cells = table_rows(run_activity_cli("--db", str(db)))
    assert [(c[3], c[5]) for c in cells] == [
        (str(r["model"] or "-"), str(r["status"])) for r in rows
    ]
    assert [c[6] for c in cells] == ["yes", "no", "no", "no", "no"]
    assert cells[1][-1] == "upstream_error"
    assert cells[2][-1] == "model_not_found"
    assert cells[4][7:9] == [str(PROMPT_WORDS), "3"]
    only_ok = table_rows(run_activity_cli("--db", str(db), "--model", "ok", "--limit", "1"))
    assert [(c[3], c[5]) for c in only_ok] == [("ok", "400")]


GUARD_LOG = REPO / "tests" / "data" / "startup-logs" / "vllm-new-utilization-guard.log"


def test_a_streamed_cold_start_that_fails_is_an_error_everywhere(gateway: StartGateway) -> None:
    """Issue 32 #1: a streamed chat whose start outlasts the first loading comment and then
    fails (vLLM's utilization guard). The client got a 200 event stream, its comments, then
    an error event: the activity row, its errors filter, the metrics, the event stream and the
    gateway's log line all call it an error, with the diagnosis code — not a 200 success."""
    flags = ("--flavor", "vllm", "--print-log", str(GUARD_LOG), "--fail-start")
    gw = gateway(model("guard", *flags, delay=2.0))
    with get_stream(gw, "/api/events") as events:
        assert read_frame(events) is not None  # the snapshot

        def consume() -> None:
            with openai.OpenAI(
                base_url=gw.url("/v1"), api_key="unused", max_retries=0, timeout=HANG
            ) as client:
                stream = client.chat.completions.create(
                    model="guard", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                with stream:
                    for _ in stream:
                        pass

        with pytest.raises(openai.APIError) as info:
            consume()
        # Not an APIStatusError: the status was 200, the error came as the stream's event.
        assert not isinstance(info.value, openai.APIStatusError)
        assert isinstance(info.value.body, dict)
        assert info.value.body["code"] == "utilization_guard"
        finished: dict[str, Any] = {}
        for _ in range(200):
            frame = read_frame(events)
            assert frame is not None
            if frame[0] == "request.finished":
                finished = json.loads(frame[1] or "{}")
                break
    assert (finished["status"], finished["error_code"], finished["outcome"]) == (
        200,
        "utilization_guard",
        "error",
    )

    gw.wait_for(lambda: len(activity(gw)) == 1)
    [row] = activity(gw)
    assert (row["model"], row["status"], row["streamed"]) == ("guard", 200, True)
    assert (row["error_code"], row["outcome"]) == ("utilization_guard", "error")
    assert row["bytes_out"] > 0  # the loading comments and the error event reached it
    assert row["completion_tokens"] is None
    # The errors filter finds it; the successes do not.
    assert [r["id"] for r in activity(gw, "?outcome=error")] == [row["id"]]
    assert activity(gw, "?outcome=ok") == []
    assert request(gw, "GET", "/api/activity?outcome=maybe").status == 400
    # llama-swap's activity API says why too.
    [entry] = gw.get_json("/api/metrics/activity")["data"]  # type: ignore[misc]
    assert (entry["resp_status_code"], entry["error_msg"], entry["outcome"]) == (
        200,
        "utilization_guard",
        "error",
    )

    m = scrape(gw)
    assert m["modelswap_requests_total"] == {
        lab(
            model="guard",
            route=CHAT,
            status="200",
            outcome="error",
            code="utilization_guard",
            key="anonymous",
        ): 1
    }
    assert m["modelswap_request_duration_seconds_count"] == {
        lab(model="guard", route=CHAT, outcome="error"): 1
    }
    assert m["modelswap_starts_total"] == {lab(model="guard", result="failed"): 1}
    # The request's own log line, at info level as errors are, names the code.
    assert f"request {row['request_id']} {CHAT} guard -> 200 utilization_guard in" in gw.log()


# ---------------------------------------------------------------------------------- logs


def data_lines(resp: http.client.HTTPResponse, stop: Callable[[str], bool]) -> list[str]:
    """``data:`` lines of a log stream until ``stop(line)`` (bounded)."""
    lines: list[str] = []
    for _ in range(2000):
        frame = read_frame(resp)
        assert frame is not None, f"log stream ended; got {lines}"
        _, data = frame
        assert data is not None
        lines.append(data)
        if stop(data):
            return lines
    raise AssertionError(f"stop line never came: {lines[-5:]}")


LISTENING = "server is listening"
LOADING = "load_tensors: loading model tensors"


def test_model_log_stream_history_then_live_lines(gateway: StartGateway) -> None:
    # A 3 s start: its first lines surely reach the stream while it is still under way.
    gw = gateway(model("logger", "--progress-interval", "0.05", delay=3.0))
    # Before the start: no history; the stream shows the start as it happens.
    with get_stream(gw, "/logs/stream/logger") as resp:
        starter = threading.Thread(target=lambda: chat(gw, "logger"), daemon=True)
        starter.start()
        try:
            first = data_lines(resp, lambda line: LOADING in line)
            assert starter.is_alive(), "the loading line arrived only after the start"
            rest = data_lines(resp, lambda line: LISTENING in line)
        finally:
            starter.join(HANG)
    live = first + rest
    assert sum(LOADING in line for line in live) >= 5

    history = request(gw, "GET", "/logs/logger").body.decode().splitlines()
    assert any(LISTENING in line for line in history)

    # With history: the buffered lines first, in order.
    with get_stream(gw, "/logs/stream/logger") as resp:
        got = [data_lines(resp, lambda _line: True)[0] for _ in history]
    assert got == history

    # ?no-history: only lines printed after connecting (here: the backend being stopped).
    with get_stream(gw, "/logs/stream/logger?no-history") as resp:
        assert request(gw, "POST", "/api/models/unload/logger").status == 200
        first_live = data_lines(resp, lambda _line: True)[0]
    assert first_live not in history


def test_gateway_log_and_its_stream(gateway: StartGateway) -> None:
    gw = gateway(model("a"))
    assert chat(gw, "a").status == 200
    text = request(gw, "GET", "/logs").body.decode()
    assert "model a: stopped -> starting" in text
    assert "model a: starting -> ready" in text
    with get_stream(gw, "/logs/stream") as resp:
        lines = data_lines(resp, lambda line: "model a: starting -> ready" in line)
    assert any("model a: stopped -> starting" in line for line in lines)
    with get_stream(gw, "/logs/stream?no-history") as resp:
        assert request(gw, "POST", "/api/models/unload/a").status == 200
        live = data_lines(resp, lambda line: "model a: stopping -> stopped" in line)
    assert not any("stopped -> starting" in line for line in live)


def test_plain_log_endpoints_say_no_buffering(gateway: StartGateway) -> None:
    gw = gateway(model("a"))
    assert chat(gw, "a").status == 200
    headers = {}
    for path in ("/logs", "/logs/a"):
        reply = request(gw, "GET", path)
        assert reply.status == 200
        assert reply.body.strip()
        headers[path] = reply.headers.get("X-Accel-Buffering")
    assert headers == {"/logs": "no", "/logs/a": "no"}


# -------------------------------------------------------------------------------- events


def test_event_stream_snapshot_states_swaps_and_finished_requests(gateway: StartGateway) -> None:
    gw = gateway(model("a") + model("b"))
    with get_stream(gw, "/api/events") as resp:
        frame = read_frame(resp)
        assert frame is not None
        kind, data = frame
        assert kind == "snapshot"
        snapshot = json.loads(data or "{}")
        assert snapshot["running"] == []
        assert [m["id"] for m in snapshot["models"]] == ["a", "b"]  # the /v1/models rows
        assert chat(gw, "a", max_tokens=2).status == 200
        assert chat(gw, "b", max_tokens=3).status == 200
        events: list[tuple[str, dict[str, Any]]] = []
        for _ in range(200):
            frame = read_frame(resp)
            assert frame is not None
            kind, data = frame
            assert kind is not None
            events.append((kind, json.loads(data or "{}")))
            if kind == "request.finished" and events[-1][1].get("model") == "b":
                break
    kinds = [k for k, _ in events]
    states = [(d["model"], d["old"], d["new"]) for k, d in events if k == "process.state"]
    assert states[:2] == [("a", "stopped", "starting"), ("a", "starting", "ready")]
    assert ("a", "ready", "stopping") in states
    assert ("b", "starting", "ready") in states
    swaps = [d for k, d in events if k == "swap"]
    assert [(s["target"], s["evict"]) for s in swaps] == [("a", []), ("b", ["a"])]
    assert all(isinstance(s["reason"], str) and s["reason"] for s in swaps)
    finished = [d for k, d in events if k == "request.finished"]
    assert [(f["model"], f["status"], f["completion_tokens"]) for f in finished] == [
        ("a", 200, 2),
        ("b", 200, 3),
    ]
    assert all(f["route"] == CHAT and "request_body" not in f for f in finished)
    assert kinds.index("swap") < kinds.index("process.state")
    ready = next(d for k, d in events if k == "process.state" and d["new"] == "ready")
    assert ready["start_seconds"] > 0


# ------------------------------------------------------------------ real llama.cpp backend


def test_real_llamacpp_usage_in_activity_and_backend_metrics(
    gateway: StartGateway, tmp_path: Path
) -> None:
    db = tmp_path / "real-activity.sqlite3"
    gw = gateway(
        f"  smollm2:\n    cmd: {llamacpp_cmd(2048, '--metrics')}\n",
        extra_top=f"metrics:\n  scrapeBackends: true\nactivity:\n  path: {json.dumps(str(db))}\n",
    )
    client = openai.OpenAI(base_url=gw.url("/v1"), api_key="unused", max_retries=0, timeout=60)
    messages: Any = [{"role": "user", "content": "Name one colour."}]
    try:
        full = client.chat.completions.create(
            model="smollm2", messages=messages, max_tokens=8, temperature=0
        )
    finally:
        client.close()
    usage = full.usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    # The same request streamed, read to the end of the body (see the next test for a client
    # that hangs up at [DONE]); the client did not ask for usage, so no chunk carries it.
    body = {"model": "smollm2", "messages": messages, "max_tokens": 8, "temperature": 0}
    reply = post(gw, CHAT, {**body, "stream": True})
    assert reply.status == 200
    payloads = sse_payloads(reply.body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(c["choices"] and "usage" not in c for c in chunks)
    streamed_text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert streamed_text == full.choices[0].message.content

    rows = activity(gw)
    assert [(r["model"], r["status"], r["streamed"]) for r in rows] == [
        ("smollm2", 200, True),
        ("smollm2", 200, False),
    ]
    stream_row, plain_row = rows
    assert (plain_row["prompt_tokens"], plain_row["completion_tokens"]) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    # Same prompt, same greedy answer: the same counts (usage, not the cache-reduced timings).
    assert (stream_row["prompt_tokens"], stream_row["completion_tokens"]) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    assert stream_row["tokens_per_second"] > 0

    cells = table_rows(run_activity_cli("--db", str(db)))
    assert [c[3] for c in cells] == ["smollm2", "smollm2"]
    for row in cells:
        assert row[7:9] == [str(usage.prompt_tokens), str(usage.completion_tokens)]

    m = scrape(gw)
    assert m["modelswap_tokens_total"] == {
        lab(model="smollm2", kind="prompt", key="anonymous"): 2 * usage.prompt_tokens,
        lab(model="smollm2", kind="completion", key="anonymous"): 2 * usage.completion_tokens,
    }
    backend = {name: series for name, series in m.items() if name.startswith("llamacpp:")}
    assert backend, "no llamacpp: samples re-exposed"
    for name, series in backend.items():
        for labels in series:
            assert dict(labels).get("model") == "smollm2", (name, labels)
    predicted = [v for n, s in backend.items() if "tokens_predicted" in n for v in s.values()]
    assert predicted
    assert max(predicted) >= 2 * usage.completion_tokens


def test_sdk_stream_that_hangs_up_at_done_is_a_success(
    door_gateway: StartGateway, door: Door
) -> None:
    # The openai SDK stops reading at `data: [DONE]` and closes the response without waiting
    # for the end of the chunked body. The client got the whole answer: it must be recorded
    # as 200 (with its tokens), not as a 499 client disconnect.
    gw = door_gateway(f"  smollm2:\n    cmd: {llamacpp_cmd(2048)}\n")
    load_model(gw, "smollm2")  # ready: the fast door relays every stream itself
    watch = door.watch(gw)
    client = openai.OpenAI(base_url=gw.url("/v1"), api_key="unused", max_retries=0, timeout=60)
    messages: Any = [{"role": "user", "content": "Name one colour."}]
    try:
        for _ in range(10):
            stream = client.chat.completions.create(
                model="smollm2", messages=messages, max_tokens=4, temperature=0, stream=True
            )
            chunks = list(stream)  # to [DONE]; the SDK then closes the response
            assert chunks[-1].choices[0].finish_reason == "length"
    finally:
        client.close()
    # Each record is written as its request ends, after the client had its [DONE]: wait for it.
    gw.wait_for(lambda: len(activity(gw)) == 10)
    rows = activity(gw)
    assert [r["status"] for r in rows] == [200] * 10
    assert all(r["completion_tokens"] for r in rows)
    watch.answered(10)
    m = scrape(gw)
    assert m["modelswap_requests_total"] == {
        lab(model="smollm2", route=CHAT, status="200", outcome="ok", code="", key="anonymous"): 10
    }
