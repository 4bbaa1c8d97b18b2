from __future__ import annotations

from modelswap.supervisor.logs import MAX_LINE_CHARS, LogBuffer


def test_logs_lines_split_on_newline_and_carriage_return_across_chunks() -> None:
    buf = LogBuffer()
    buf.feed(b"load_tensors: 10%\rload_tensors: 5")
    buf.feed(b"0%\rload_tensors: 100%\nready\r\nlast")
    assert buf.tail() == ["load_tensors: 10%", "load_tensors: 50%", "load_tensors: 100%", "ready"]
    buf.flush()
    assert buf.tail(1) == ["last"]


def test_logs_ring_keeps_only_the_newest_lines() -> None:
    buf = LogBuffer(capacity=3)
    for i in range(10):
        buf.append(f"line {i}")
    assert buf.tail() == ["line 7", "line 8", "line 9"]
    assert buf.tail(2) == ["line 8", "line 9"]
    assert buf.total_lines == 10


def test_logs_blank_lines_are_dropped_and_long_lines_truncated() -> None:
    buf = LogBuffer()
    buf.feed(b"\n\n   \n" + b"x" * (MAX_LINE_CHARS + 50) + b"\n")
    (line,) = buf.tail()
    assert line.startswith("x" * MAX_LINE_CHARS)
    assert len(line) < MAX_LINE_CHARS + 5


def test_logs_invalid_utf8_is_replaced_not_raised() -> None:
    buf = LogBuffer()
    buf.feed(b"bad \xff byte\n")
    assert buf.tail() == ["bad \ufffd byte"]


def test_logs_listeners_see_each_complete_line() -> None:
    seen: list[str] = []
    buf = LogBuffer()
    buf.add_listener(seen.append)
    buf.feed(b"a\nb")
    assert seen == ["a"]
    buf.feed(b"\n")
    assert seen == ["a", "b"]
