"""llama-swap's logging and activity keys, acted on (issue 17): logToStdout, logTimeFormat
(Go's named layouts), metricsMaxInMemory and captureBuffer (the activity log's bounds), and
the connection timeouts keepalive, tlsHandshake, idleConn. In-process, no sockets."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, timezone

import pytest
from tests.unit.config.test_compat import (
    ENV,
    FIXTURES,
    SERVER,
    SERVER_FLOW,
    mapped,
    model,
    problems,
    warned,
)

from modelswap.config import load_config_text
from modelswap.config.logtime import LAYOUTS, GoTimeFormatter, layout

# Go's reference time, Mon Jan 2 15:04:05 MST 2006 (MST: UTC-7), plus 123456 µs
REFERENCE = datetime(2006, 1, 2, 15, 4, 5, 123456, tzinfo=timezone(timedelta(hours=-7), "MST"))


@pytest.mark.parametrize(
    ("name", "expected"),
    [  # Go's constants (pkg.go.dev/time#pkg-constants) applied to the reference time
        ("ansic", "Mon Jan  2 15:04:05 2006"),
        ("unixdate", "Mon Jan  2 15:04:05 MST 2006"),
        ("rubydate", "Mon Jan 02 15:04:05 -0700 2006"),
        ("rfc822", "02 Jan 06 15:04 MST"),
        ("rfc822z", "02 Jan 06 15:04 -0700"),
        ("rfc850", "Monday, 02-Jan-06 15:04:05 MST"),
        ("rfc1123", "Mon, 02 Jan 2006 15:04:05 MST"),
        ("rfc1123z", "Mon, 02 Jan 2006 15:04:05 -0700"),
        ("rfc3339", "2006-01-02T15:04:05-07:00"),
        ("rfc3339nano", "2006-01-02T15:04:05.123456-07:00"),
        ("kitchen", "3:04PM"),
        ("stamp", "Jan  2 15:04:05"),
        ("stampmilli", "Jan  2 15:04:05.123"),
        ("stampmicro", "Jan  2 15:04:05.123456"),
        ("stampnano", "Jan  2 15:04:05.123456000"),
    ],
)
def test_go_layouts(name: str, expected: str) -> None:
    render = layout(name)
    assert render is not None
    assert render(REFERENCE) == expected


def test_layout_names_are_llamaswaps_in_any_case() -> None:
    assert len(LAYOUTS) == 15
    assert layout(" RFC3339 ") is LAYOUTS["rfc3339"]
    assert layout("") is None
    assert layout("iso8601") is None


def test_rfc3339_writes_z_for_utc_and_trims_nanoseconds() -> None:
    utc = datetime(2026, 12, 1, 9, 5, 0, 500000, tzinfo=UTC)
    assert LAYOUTS["rfc3339"](utc) == "2026-12-01T09:05:00Z"
    assert LAYOUTS["rfc3339nano"](utc) == "2026-12-01T09:05:00.5Z"
    assert LAYOUTS["rfc3339nano"](utc.replace(microsecond=0)) == "2026-12-01T09:05:00Z"
    assert LAYOUTS["kitchen"](utc.replace(hour=0)) == "12:05AM"


def test_formatter_renders_asctime_with_the_layout() -> None:
    formatter = GoTimeFormatter("%(asctime)s %(message)s", LAYOUTS["stamp"])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    record.created = datetime(2026, 3, 4, 5, 6, 7).timestamp()
    assert formatter.format(record) == "Mar  4 05:06:07 hello"


def test_log_keys_are_read_not_warned() -> None:
    config = model(SERVER, top="logToStdout: both\nlogTimeFormat: rfc3339\n")
    assert (config.log_to_stdout, config.log_time_format) == ("both", "rfc3339")
    assert warned(config) == []
    assert mapped(config)["logToStdout"] == ("logToStdout", "same")
    unknown = model(SERVER, top="logTimeFormat: iso\n")  # llama-swap: no timestamp at all
    assert mapped(unknown)["logTimeFormat"] == ("logTimeFormat", "differs")
    assert model(SERVER).log_to_stdout is None  # unset: the gateway logs to stderr


def test_log_to_stdout_takes_llamaswaps_values_only() -> None:
    [(path, message)] = problems(f"logToStdout: stderr\nmodels:\n  m: {SERVER_FLOW}\n")
    assert path == "logToStdout"
    assert "proxy" in message
    assert "none" in message


def test_metrics_max_in_memory_bounds_the_activity_rows() -> None:
    config = model(SERVER, top="metricsMaxInMemory: 250\n")
    assert config.observability.max_rows == 250
    assert mapped(config)["metricsMaxInMemory"] == ("activity.maxRows", "rewritten")
    assert model(SERVER, top="metricsMaxInMemory: 0\n").observability.max_rows == 1000
    with_store = model(SERVER, top="metricsMaxInMemory: 5\nstore: {path: /tmp/a.db}\n")
    assert with_store.observability.max_rows == 100_000  # no effect, as in llama-swap
    assert mapped(with_store)["metricsMaxInMemory"] == (None, "ignored")
    own = model(SERVER, top="metricsMaxInMemory: 5\nactivity: {maxRows: 7}\n")
    assert own.observability.max_rows == 7


def test_capture_buffer_turns_capture_on_with_its_size() -> None:
    config = model(SERVER, top="captureBuffer: 2\n")
    assert config.observability.capture is True
    assert config.observability.capture_bytes == 2 * 1024 * 1024
    assert mapped(config)["captureBuffer"] == ("activity.captureBytes", "rewritten")
    off = model(SERVER, top="captureBuffer: 0\n")
    assert off.observability.capture is False
    assert (
        model(SERVER, top="captureBuffer: 2\nactivity: {capture: false}\n").observability.capture
        is False
    )
    assert problems(f"captureBuffer: lots\nmodels:\n  m: {SERVER_FLOW}\n")[0][0] == "captureBuffer"


def test_connection_timeouts_are_applied() -> None:
    config = model(f"{SERVER}\ntimeouts: {{keepalive: 30, tlsHandshake: 10, idleConn: 0}}")
    t = config.models["m"].timeouts
    assert (t.keepalive, t.tls_handshake, t.idle_conn) == (30.0, 10.0, 0.0)
    assert t.pooled == (30.0, 0.0, False)
    assert model(SERVER).models["m"].timeouts.pooled is None  # the shared session
    assert warned(config) == []


def test_the_logging_fixture_is_read_without_warnings() -> None:
    text = (FIXTURES / "logging.yaml").read_text()
    config = load_config_text(text, environ=ENV)
    assert warned(config) == []
    assert (config.log_to_stdout, config.log_time_format) == ("both", "rfc3339")
    obs = config.observability
    assert (obs.max_rows, obs.capture, obs.capture_bytes) == (1000, True, 15 * 1024 * 1024)
    t = config.models["llama"].timeouts
    assert (t.connect, t.first_byte, t.keepalive, t.tls_handshake, t.idle_conn) == (
        30.0,
        60.0,
        0.0,
        10.0,
        90.0,
    )


def test_comfyui_auto_gets_at_least_50_requests_at_once_as_in_llamaswap() -> None:
    config = load_config_text(
        "models:\n"
        "  comfyui_auto: {cmd: 'srv --port ${PORT}', concurrencyLimit: 4}\n"
        "  other: {cmd: 'srv --port ${PORT}', concurrencyLimit: 4}\n",
        environ=ENV,
    )
    assert config.models["comfyui_auto"].concurrency_limit == 50
    assert config.models["other"].concurrency_limit == 4
    assert mapped(config)["models.comfyui_auto.concurrencyLimit"][1] == "rewritten"
