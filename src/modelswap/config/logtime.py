"""llama-swap's ``logTimeFormat``: Go's named time layouts, written out in Python.

llama-swap maps a name (case-insensitive) to one of Go's ``time`` constants (its
llama-swap.go, ``logTimeFormats``); the layouts are Go's documented reference forms
(pkg.go.dev/time#pkg-constants). Rendered from a datetime, in local time as Go's ``time.Now()``
is; Go's ``_2`` is a space-padded day, its ``.999999999`` trims trailing zeros, and Python has
microseconds where Go has nanoseconds (the last three digits are 0).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime


def _day(dt: datetime) -> str:
    return f"{dt.day:2d}"  # Go's _2


def _zone(dt: datetime) -> str:
    """Go's MST: the zone's abbreviation."""
    return dt.tzname() or "UTC"


def _offset(dt: datetime, colon: bool) -> str:
    """Go's -0700 / Z07:00 (Z for UTC only with the colon form)."""
    delta = dt.utcoffset()
    seconds = int(delta.total_seconds()) if delta is not None else 0
    if colon and seconds == 0:
        return "Z"
    sign = "-" if seconds < 0 else "+"
    hours, minutes = divmod(abs(seconds) // 60, 60)
    return f"{sign}{hours:02d}:{minutes:02d}" if colon else f"{sign}{hours:02d}{minutes:02d}"


def _kitchen(dt: datetime) -> str:
    hour = dt.hour % 12 or 12
    return f"{hour}:{dt:%M}{'PM' if dt.hour >= 12 else 'AM'}"


def _nano_trimmed(dt: datetime) -> str:
    digits = f"{dt.microsecond:06d}000".rstrip("0")
    return f".{digits}" if digits else ""


LAYOUTS: dict[str, Callable[[datetime], str]] = {
    "ansic": lambda d: f"{d:%a %b} {_day(d)} {d:%H:%M:%S %Y}",
    "unixdate": lambda d: f"{d:%a %b} {_day(d)} {d:%H:%M:%S} {_zone(d)} {d:%Y}",
    "rubydate": lambda d: f"{d:%a %b %d %H:%M:%S} {_offset(d, False)} {d:%Y}",
    "rfc822": lambda d: f"{d:%d %b %y %H:%M} {_zone(d)}",
    "rfc822z": lambda d: f"{d:%d %b %y %H:%M} {_offset(d, False)}",
    "rfc850": lambda d: f"{d:%A, %d-%b-%y %H:%M:%S} {_zone(d)}",
    "rfc1123": lambda d: f"{d:%a, %d %b %Y %H:%M:%S} {_zone(d)}",
    "rfc1123z": lambda d: f"{d:%a, %d %b %Y %H:%M:%S} {_offset(d, False)}",
    "rfc3339": lambda d: f"{d:%Y-%m-%dT%H:%M:%S}{_offset(d, True)}",
    "rfc3339nano": lambda d: f"{d:%Y-%m-%dT%H:%M:%S}{_nano_trimmed(d)}{_offset(d, True)}",
    "kitchen": _kitchen,
    "stamp": lambda d: f"{d:%b} {_day(d)} {d:%H:%M:%S}",
    "stampmilli": lambda d: f"{d:%b} {_day(d)} {d:%H:%M:%S}.{d.microsecond // 1000:03d}",
    "stampmicro": lambda d: f"{d:%b} {_day(d)} {d:%H:%M:%S}.{d.microsecond:06d}",
    "stampnano": lambda d: f"{d:%b} {_day(d)} {d:%H:%M:%S}.{d.microsecond:06d}000",
}


def layout(name: str) -> Callable[[datetime], str] | None:
    """The layout llama-swap gives ``name`` (trimmed, any case); None for "" or an unknown
    name (llama-swap then writes no timestamp; modelswap keeps its own)."""
    return LAYOUTS.get(name.strip().lower())


class GoTimeFormatter(logging.Formatter):
    """A log formatter whose ``%(asctime)s`` is a Go layout."""

    def __init__(self, fmt: str, render: Callable[[datetime], str]) -> None:
        super().__init__(fmt)
        self._render = render

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self._render(datetime.fromtimestamp(record.created).astimezone())
