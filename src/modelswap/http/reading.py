"""What a route reads from a request, shared by every route, the relay and both doors: its body
(within a cap), the body's cap, a safe upstream path, the key the client presented (and the
configured key it matches) and the request's id.

Below the routes, the relay and the middleware: it imports none of them, so each may read a
request the same way without reaching into another.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import uuid
from collections.abc import Mapping

from aiohttp import web

from modelswap.bounded_read import BodyOverLimitError, read_capped
from modelswap.config.resolved import ApiKey
from modelswap.errors import BadRequestError, BodyTooLargeError
from modelswap.runtime import Runtime


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, refusing more than ``limit`` bytes (before reading, when declared)."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLargeError(limit)
    try:  # a chunked body has no declared length: the cap counts what arrives
        return await read_capped(request.content.iter_any(), limit)
    except BodyOverLimitError as exc:
        raise BodyTooLargeError(limit) from exc


def body_limit(runtime: Runtime, content_type: str) -> int:
    """Multipart uploads (audio, images) have their own cap; everything else the JSON one."""
    if content_type.lower().startswith("multipart/"):
        return runtime.config.max_upload_body_bytes
    return runtime.config.max_request_body_bytes


_ENCODED_TRAVERSAL = re.compile(r"%(?:2e|2f|5c|25)", re.IGNORECASE)


def check_upstream_path(raw_path: str, decoded: str) -> None:
    """Refuse anything but a plain relative path below the backend's root: ``..`` and ``.``
    segments (also percent-encoded or double-encoded), backslashes, absolute URLs."""
    segments = decoded.split("/") + raw_path.split("?", 1)[0].split("/")
    if (
        "//" in decoded  # an empty segment: "//evil" would be a network-path reference
        or ".." in segments
        or "." in segments
        or "\\" in decoded
        or "://" in decoded
        or decoded.startswith("/")
        or "\x00" in decoded
        or _ENCODED_TRAVERSAL.search(raw_path)
    ):
        raise BadRequestError(
            "The upstream path must be a plain relative path (no '..', '.', empty segments, "
            "encoded slashes or dots, backslashes or URLs).",
            param="path",
        )


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client presented: ``Authorization: Bearer``, ``x-api-key``, or the password
    of ``Authorization: Basic``."""
    auth = headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if scheme.lower() == "basic" and value.strip():
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    header = headers.get("x-api-key", "").strip()
    return header or None


def match_key(keys: tuple[ApiKey, ...], presented: str) -> ApiKey | None:
    """The configured key equal to ``presented``. Every key is compared, each in constant
    time, so neither the position nor the length of a match shows in the timing."""
    found = None
    candidate = presented.encode("utf-8", errors="replace")
    for key in keys:
        if hmac.compare_digest(candidate, key.secret.encode("utf-8")):
            found = key
    return found


HEADER = "X-Request-Id"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)


def request_id(request: web.Request) -> str:
    """This request's id, chosen on first use and the same ever after."""
    found = request.get(REQUEST_ID)
    if found is None:
        found = request[REQUEST_ID] = choose_request_id(request.headers.get(HEADER, ""))
    return found


def choose_request_id(sent: str) -> str:
    """The id the client sent, when sane; else a new one."""
    return sent if _SANE.fullmatch(sent) else uuid.uuid4().hex


def raw_query(request: web.Request) -> str:
    """``?`` and the query as the client sent it, percent-escapes kept (``""`` without one).
    aiohttp's ``query_string`` is decoded: forwarded, ``%26`` would become a separator and
    ``%0A`` a line break in a header."""
    query = request.rel_url.raw_query_string
    return "?" + query if query else ""
