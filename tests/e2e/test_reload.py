"""Live reload: edits of the config file apply without losing what did not change.

The gateway runs with ``--watch-config`` (or gets SIGHUP); each test edits the real file and
waits for the gateway's own log line saying the reload was applied or rejected.
"""

from __future__ import annotations

import http.client
import json
import os
import shlex
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.e2e.conftest import (
    HANG,
    Gateway,
    Reply,
    chat,
    chat_body,
    fake_cmd,
    next_event,
    open_stream,
    pid_alive,
    request,
    stream_tokens,
    wait_dead,
)

pytestmark = pytest.mark.e2e

APPLIED = "config reloaded from"
REJECTED = "config reload rejected"


def pid_of(reply: Reply) -> int:
    assert reply.status == 200, reply.body
    return int(reply.headers["X-Fake-Pid"])


def edit(gw: Gateway, old: str, new: str) -> None:
    assert gw.config_path is not None
    text = gw.config_path.read_text()
    assert old in text, f"{old!r} not in the config"
    gw.config_path.write_text(text.replace(old, new))


def wait_log(gw: Gateway, line: str, count: int = 1, timeout: float = HANG) -> None:
    gw.wait_for(lambda: gw.log().count(line) >= count, timeout=timeout)


def model_ids(gw: Gateway) -> set[str]:
    return {str(row["id"]) for row in gw.get_json("/v1/models")["data"]}  # type: ignore[union-attr]


def held(release: Path) -> str:
    """Fake-backend flags: a stream stops after 15 tokens until ``release`` exists, so it is
    surely still in flight while the test looks, on a loaded machine too."""
    return f"--stall-after 15 --stall-until {shlex.quote(str(release))}"


def states(gw: Gateway) -> dict[str, object]:
    return {model: row["state"] for model, row in gw.running().items()}


def test_an_alias_change_applies_without_restarting_the_model(
    gateway: Callable[..., Gateway],
) -> None:
    gw = gateway(
        f"  m:\n    cmd: {fake_cmd()}\n    aliases: [first-name]\n",
        extra_top="includeAliasesInList: true\n",  # alias rows in /v1/models
        args=("--watch-config",),
    )
    before = pid_of(chat(gw, "first-name"))
    edit(gw, "aliases: [first-name]", "aliases: [second-name]\n    ttl: 300")
    wait_log(gw, APPLIED)
    assert "second-name" in model_ids(gw)
    assert "first-name" not in model_ids(gw)
    assert pid_of(chat(gw, "second-name")) == before  # the same process serves it
    assert chat(gw, "first-name").status == 404
    assert gw.running()["m"]["ttl"] == 300  # the new ttl is live too


def test_a_changed_command_restarts_the_model_once_its_request_finished(
    gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = gateway(
        f"  m:\n    cmd: {fake_cmd(held(release), '--tokens', '30', '--tps', '30')}\n",
        args=("--watch-config",),
    )
    before = pid_of(chat(gw, "m"))  # (not a stream: never held)
    with open_stream(gw, "m") as resp:
        assert next_event(resp) is not None  # the answer is under way
        edit(gw, "--tps 30", "--tps 30 -c 1234")
        wait_log(gw, APPLIED)
        assert pid_alive(before)  # busy: not restarted under its request
        release.touch()
        tokens, events = stream_tokens(resp)
    assert events[-1] == "[DONE]"  # the answer completed
    assert tokens[-1] == "tok29 "  # every token arrived
    wait_dead([before])  # stopped once idle …
    gw.wait_for(lambda: states(gw).get("m") == "ready")  # … and started again
    after = pid_of(chat(gw, "m"))
    assert after != before
    assert gw.running()["m"]["configured"]["context"] == 1234  # type: ignore[index]


def test_a_removed_model_finishes_its_request_then_stops(
    gateway: Callable[..., Gateway], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = gateway(
        f"  keep:\n    cmd: {fake_cmd()}\n"
        f"  drop:\n    cmd: {fake_cmd(held(release), '--tokens', '30', '--tps', '30')}\n",
        args=("--watch-config",),
    )
    drop_pid = pid_of(chat(gw, "drop"))  # (not a stream: never held)
    with open_stream(gw, "drop") as resp:
        assert next_event(resp) is not None
        assert gw.config_path is not None
        text = gw.config_path.read_text()
        gw.config_path.write_text(text[: text.index("  drop:")])
        wait_log(gw, APPLIED)
        assert chat(gw, "drop").status == 404  # no new request, at once
        assert "drop" not in model_ids(gw)
        assert pid_alive(drop_pid)
        release.touch()
        _, events = stream_tokens(resp)
    assert events[-1] == "[DONE]"  # the request in flight completed
    wait_dead([drop_pid])
    gw.wait_for(lambda: "drop" not in gw.running())
    assert chat(gw, "keep").status == 200  # unaffected


def test_an_invalid_edit_is_rejected_and_the_old_config_stays_live(
    gateway: Callable[..., Gateway],
) -> None:
    gw = gateway(f"  m:\n    cmd: {fake_cmd()}\n    aliases: [old-alias]\n")  # no watching
    pid = pid_of(chat(gw, "m"))
    edit(gw, "aliases: [old-alias]", "aliases: [new-alias]\n    ttl: -5")
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request("GET", "/api/events")
        events = conn.getresponse()
        assert events.readline().startswith(b"event: snapshot")
        os.kill(gw.proc.pid, signal.SIGHUP)
        while not (line := events.readline()).startswith(b"event: config."):
            assert line, "the event stream ended"
        assert line.strip() == b"event: config.rejected"  # shown in /api/events
        data = json.loads(events.readline().removeprefix(b"data: "))
        assert any("models.m.ttl" in problem for problem in data["problems"])
    finally:
        conn.close()
    wait_log(gw, REJECTED)
    assert "models.m.ttl" in gw.log()  # the reason, with its key path
    assert gw.proc.poll() is None  # SIGHUP reloads; it does not stop the gateway
    assert pid_of(chat(gw, "old-alias")) == pid
    assert chat(gw, "new-alias").status == 404
    edit(gw, "ttl: -5", "ttl: 5")  # fixed: the next SIGHUP applies it
    os.kill(gw.proc.pid, signal.SIGHUP)
    wait_log(gw, APPLIED)
    assert pid_of(chat(gw, "new-alias")) == pid


def test_adding_a_model_keeps_the_others_ports_and_processes(
    gateway: Callable[..., Gateway],
) -> None:
    gw = gateway(
        f"  first:\n    cmd: {fake_cmd()}\n  last:\n    cmd: {fake_cmd()}\n",
        args=("--watch-config",),
    )
    last = pid_of(chat(gw, "last"))
    edit(gw, "  last:\n", f"  middle:\n    cmd: {fake_cmd()}\n  last:\n")
    wait_log(gw, APPLIED)
    assert "middle" in model_ids(gw)
    assert pid_of(chat(gw, "last")) == last  # its ${PORT} (and so its command) did not change
    assert chat(gw, "middle").status == 200


def test_keys_apply_live_and_are_never_logged(gateway: Callable[..., Gateway]) -> None:
    gw = gateway(f"  m:\n    cmd: {fake_cmd()}\n", args=("--watch-config",))
    pid = pid_of(chat(gw, "m"))
    edit(gw, "models:\n", "apiKeys:\n  - key: fresh-key-81\nmodels:\n")
    wait_log(gw, APPLIED)
    assert chat(gw, "m").status == 401
    headers = {"Content-Type": "application/json", "Authorization": "Bearer fresh-key-81"}
    reply = request(gw, "POST", "/v1/chat/completions", chat_body("m"), headers)
    assert pid_of(reply) == pid  # keys changed; the model did not restart
    assert "fresh-key-81" not in gw.log()


def test_a_reload_naming_a_missing_program_is_rejected_like_at_startup(
    gateway: Callable[..., Gateway],
) -> None:
    gw = gateway(f"  m:\n    cmd: {fake_cmd()}\n")
    pid = pid_of(chat(gw, "m"))
    edit(gw, f"    cmd: {fake_cmd()}\n", "    cmd: /nonexistent/llama-server --port ${PORT}\n")
    os.kill(gw.proc.pid, signal.SIGHUP)
    wait_log(gw, REJECTED)
    assert "models.m.cmd" in gw.log()
    assert pid_of(chat(gw, "m")) == pid  # the old command still serves
