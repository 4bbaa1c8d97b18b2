"""Token usage read from responses as they are relayed — pure, bounded, and cheap.

OpenAI-style ``usage`` (``prompt_tokens``/``completion_tokens``, or Anthropic's
``input_tokens``/``output_tokens``) and llama.cpp's ``timings`` (``prompt_n``/``predicted_n``)
are read from a non-streamed JSON body (first MAX_BODY bytes) or from the event of a stream
that carries them. When modelswap itself asked the backend for the final usage chunk
(``stream_options.include_usage``) the client did not ask for, that chunk is removed from what
the client receives.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from modelswap import jsonsafe

MAX_BODY = 1024 * 1024
# An SSE event ends at a blank line; lines may end in \n, \r\n or \r.
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_EVENT_SPLIT = re.compile(rb"(\r\n\r\n|\n\n|\r\r)")  # keeps the separators
MAX_PENDING = 1024 * 1024  # an "event" larger than this is passed on unsplit
# A stream event that carries generated text (chat, completions, reasoning, Anthropic and
# Responses deltas): a non-empty string value. A role-only first chunk does not match.
_TEXT = re.compile(
    rb'"(?:content|reasoning_content|reasoning|text|delta|partial_json)"\s*:\s*"[^"]'
)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def usage_of(data: object) -> tuple[int | None, int | None] | None:
    """(prompt, completion) tokens from one JSON object, or None when it reports none."""
    if not isinstance(data, dict):
        return None
    usage = data.get("usage")
    if isinstance(usage, dict):
        prompt = _int(usage.get("prompt_tokens", usage.get("input_tokens")))
        completion = _int(usage.get("completion_tokens", usage.get("output_tokens")))
        if prompt is not None or completion is not None:
            return prompt, completion
    timings = data.get("timings")
    if isinstance(timings, dict):
        prompt = _int(timings.get("prompt_n"))
        completion = _int(timings.get("predicted_n"))
        if prompt is not None or completion is not None:
            return prompt, completion
    message = data.get("message")  # Anthropic streams: message_start carries input tokens
    if isinstance(message, dict):
        return usage_of(message)
    return None


def cached_of(data: object) -> int | None:
    """Prompt tokens the backend took from its cache: OpenAI's
    ``usage.prompt_tokens_details.cached_tokens``, Anthropic's ``cache_read_input_tokens``,
    llama.cpp's ``timings.cache_n``; None when it says nothing."""
    if not isinstance(data, dict):
        return None
    usage = data.get("usage")
    if isinstance(usage, dict):
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
            return _int(details.get("cached_tokens"))
        if _int(usage.get("cache_read_input_tokens")) is not None:
            return _int(usage.get("cache_read_input_tokens"))
    timings = data.get("timings")
    if isinstance(timings, dict) and _int(timings.get("cache_n")) is not None:
        return _int(timings.get("cache_n"))
    message = data.get("message")  # Anthropic streams: message_start
    return cached_of(message) if isinstance(message, dict) else None


def _is_usage_only(data: Any) -> bool:
    return (
        isinstance(data, dict) and data.get("choices") == [] and isinstance(data.get("usage"), dict)
    )


class UsageTracker:
    """Feed it the response bytes in order; it returns the bytes to relay (unchanged unless
    the injected usage chunk must be stripped) and keeps the last usage seen."""

    def __init__(self, *, streamed: bool, strip_usage_chunk: bool = False) -> None:
        self.streamed = streamed
        self._strip = strip_usage_chunk and streamed
        self._pending = b""
        self._body = bytearray()
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.saw_text = False
        """Streamed: whether a generated token has been relayed yet (for the TTFT)."""
        self._relayed = 0  # streamed: whole events relayed (a count per read, no parse)
        self._text_from = 0  # of those, the ones before the first that carried text

    @property
    def strips(self) -> bool:
        return self._strip

    def feed(self, chunk: bytes) -> bytes:
        if not self.streamed:
            if len(self._body) < MAX_BODY:
                self._body += chunk[: MAX_BODY - len(self._body)]
            return chunk
        data = self._pending + chunk
        if not self.saw_text and (text := _TEXT.search(data)):
            self.saw_text = True
            self._text_from = self._relayed + _event_count(data[: text.start()]) - 1
        end = _last_event_end(data)
        complete, tail = data[:end], data[end:]
        if complete:
            self._relayed += complete.count(b"\ndata:") + complete.startswith(b"data:")
        if not self._strip:
            # Relay at once; keep only an incomplete event's bytes for the next scan.
            if complete:
                self._scan(complete)
            self._pending = tail if len(tail) < MAX_PENDING else b""
            return chunk
        if not complete:
            if len(data) < MAX_PENDING:
                self._pending = data
                return b""
            self._pending = b""
            return data  # too large to be an event worth holding: pass it on
        self._pending = tail
        if b'"usage"' not in complete and b'"timings"' not in complete:
            return complete  # nothing to read or strip in these events
        return self._events(complete)

    def received(self) -> int:
        """Streamed: the events carrying text relayed so far — the tokens a client that left
        mid-stream received (one an event, as llama.cpp and vLLM stream): every whole event
        since the first that carried text (none other comes before the stream's end)."""
        return max(0, self._relayed - self._text_from) if self.saw_text else 0

    def finish(self) -> bytes:
        """End of body: read a non-streamed body's usage; return any bytes still held."""
        if not self.streamed:
            if self._body and (b'"usage"' in self._body or b'"timings"' in self._body):
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    self._take(_usage_objects(bytes(self._body)))
            return b""
        rest, self._pending = self._pending, b""
        if not self._strip:
            self._scan(rest)
            return b""
        payload = self._payload(rest)
        if payload is not None:
            self._take(payload)
            if _is_usage_only(payload):
                return b""
        return rest

    def _events(self, data: bytes) -> bytes:
        """Scan complete events; drop the injected usage-only event when stripping."""
        if not self._strip:
            self._scan(data)
            return data
        # Only the events from the first that mentions usage on need reading (in a big read
        # of many events, the last): the ones before it go on as they are, unsplit.
        usage, timings = data.find(b'"usage"'), data.find(b'"timings"')
        first = usage if timings < 0 or 0 <= usage < timings else timings
        if first < 0:
            return data
        head = _event_start(data, first)
        kept: list[bytes] = [data[:head]]
        pieces = _EVENT_SPLIT.split(data[head:])  # event, separator, event, …, last event
        pieces.append(b"")
        for event, sep in zip(pieces[0::2], pieces[1::2], strict=True):
            payload = self._payload(event)
            if payload is not None:
                self._take(payload)
                if _is_usage_only(payload):
                    continue  # the chunk modelswap asked for: the client did not
            kept.append(event + sep)
        return b"".join(kept)

    def _scan(self, data: bytes) -> None:
        if b'"usage"' not in data and b'"timings"' not in data:
            return
        for event in _EVENT_END.split(data):
            payload = self._payload(event)
            if payload is not None:
                self._take(payload)

    @staticmethod
    def _payload(event: bytes) -> object | None:
        if b'"usage"' not in event and b'"timings"' not in event:
            return None
        for line in event.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
            if line.startswith(b"data:"):
                try:
                    payload: object = jsonsafe.loads(line[5:].strip())
                except (ValueError, UnicodeDecodeError):
                    return None
                return payload
        return None

    def _take(self, data: object) -> None:
        cached = cached_of(data)
        if cached is not None:
            self.cached_tokens = cached
        found = usage_of(data)
        if found is None:
            return
        prompt, completion = found
        if prompt is not None:
            self.prompt_tokens = prompt
        if completion is not None:
            self.completion_tokens = completion


_DECODER = json.JSONDecoder()


def _usage_objects(body: bytes) -> dict[str, object]:
    """The top-level ``usage``/``timings`` objects of a JSON body, decoding just those (the
    last occurrence of each key: OpenAI and llama.cpp put them at the end)."""
    text = body.decode("utf-8")
    # No deeper than its count of opening brackets: measure only when that count could be.
    opening = body.count(b"[") + body.count(b"{")
    if opening > jsonsafe.MAX_DEPTH and jsonsafe.nesting_depth(body) > jsonsafe.MAX_DEPTH:
        raise jsonsafe.JSONTooDeepError(jsonsafe.MAX_DEPTH)
    out: dict[str, object] = {}
    for key in ("usage", "timings"):
        at = text.rfind(f'"{key}"')
        if at < 0:
            continue
        colon = text.find(":", at + len(key) + 2)
        if colon < 0:
            continue
        start = colon + 1
        while start < len(text) and text[start] in " \t\r\n":
            start += 1
        value, _ = _DECODER.raw_decode(text, start)
        out[key] = value
    return out


def _event_count(data: bytes) -> int:
    """The ``data:`` events that start in ``data`` (which begins at an event's start): a
    line's start only, so text that mentions ``data:`` (escaped in its JSON) never counts."""
    return data.count(b"\ndata:") + data.startswith(b"data:")


def _event_start(data: bytes, at: int) -> int:
    """Where the event holding ``data[at]`` starts: just past the last event end before
    ``at`` (0 if none), as a scan of all of ``data`` would place it. A separator's match
    depends only on the run of CR/LF it lies in, so only that last run is scanned."""
    cut = max(
        data.rfind(b"\n\n", 0, at), data.rfind(b"\r\r", 0, at), data.rfind(b"\r\n\r\n", 0, at)
    )
    if cut < 0:
        return 0
    while cut > 0 and data[cut - 1] in b"\r\n":
        cut -= 1
    end = 0
    for match in _EVENT_END.finditer(data, cut, at):
        end = match.end()
    return end


def _last_event_end(data: bytes) -> int:
    """Index just past the last complete event (0 if none is complete)."""
    if b"\r" not in data:
        cut = data.rfind(b"\n\n")
        return cut + 2 if cut >= 0 else 0
    end = 0
    for match in _EVENT_END.finditer(data):
        end = match.end()
    return end


_INCLUDE_USAGE = b'"stream_options":{"include_usage":true},'


def request_usage_injection(body: bytes, data: Mapping[str, object] | None = None) -> bytes | None:
    """For a streamed chat/completions JSON request that did not ask for the final usage
    chunk: the body with ``stream_options.include_usage`` set (so tokens can be counted), else
    None (leave the request as it is). ``data``: the body already parsed, if it was.

    Without ``stream_options`` the key is spliced in front of the body's bytes (no
    re-serialisation: a long prompt is copied once, not parsed and dumped again)."""
    if data is None:
        try:
            parsed = jsonsafe.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(parsed, dict):
            return None
        data = parsed
    if data.get("stream") is not True:
        return None
    options = data.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    if options is not None and not isinstance(options, dict):
        return None
    start = len(body) - len(body.lstrip())  # the object's "{" (UTF-8 JSON, no BOM)
    if "stream_options" not in data and body[start : start + 1] == b"{":
        return body[: start + 1] + _INCLUDE_USAGE + body[start + 1 :]
    out = dict(data)
    out["stream_options"] = {**(options or {}), "include_usage": True}
    data = out
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
