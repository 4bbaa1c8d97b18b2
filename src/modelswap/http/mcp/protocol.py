"""MCP's JSON-RPC over Streamable HTTP, stateless: every POST carries one message and is
answered on its own, so no session is kept (none is issued; the header is optional).

Two eras, as the official SDK's client negotiates them:

* the ``initialize`` handshake (revisions 2024-11-05 to 2025-11-25): ``initialize`` names a
  revision, the answer names the one spoken (the client's if known, else the newest), and
  every later request carries it in ``MCP-Protocol-Version``;
* the per-request envelope (2026-07-28, which is also llama-swap's only form): no handshake,
  ``server/discover`` says what is spoken, each request names its revision in
  ``MCP-Protocol-Version`` and ``params._meta``, with ``Mcp-Method`` (and ``Mcp-Name`` for
  ``tools/call``) repeating the body; a header that contradicts the body is refused
  (-32020), an unknown revision too (-32022, naming the ones spoken).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modelswap import __version__
from modelswap.http.mcp.registry import Caller, Registry

HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
VERSIONS = HANDSHAKE_VERSIONS + MODERN_VERSIONS
# A request naming no revision is taken as 2025-03-26, as the 2025-06-18 transport says.
ASSUMED_VERSION = "2025-03-26"

PROTOCOL_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
HEADER_MISMATCH, UNSUPPORTED_VERSION = -32020, -32022

# How long a client may keep the tool list (2026-07-28's ttlMs): a reload may change it.
LIST_TTL_MS = 60_000
SERVER_INFO = {"name": "modelswap", "title": "modelswap gateway", "version": __version__}
INSTRUCTIONS = (
    "modelswap runs many local inference servers behind one endpoint and swaps them in and out "
    "of memory. Tools are namespaced: docs__* read modelswap's own documentation (start with "
    "docs__search_docs), config__get_config the running configuration (secrets masked), "
    "models__* the models (state, capabilities, why one stopped, what a load would evict), "
    "swaps__last_swaps, activity__search_activity and logs__tail_log what happened. Loading, "
    "unloading and reloading the config need a key with the admin scope."
)


@dataclass(frozen=True, slots=True)
class Reply:
    """What the POST answers: an HTTP status, the JSON-RPC message (None: 202, nothing to say)
    and the revision spoken (for the ``MCP-Protocol-Version`` response header)."""

    status: int
    message: dict[str, Any] | None
    version: str | None = None


def error(
    request_id: object, code: int, text: str, data: object = None, status: int = 200
) -> Reply:
    body: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        body["data"] = data
    if status >= 400:  # refused at the HTTP level: also readable as the gateway's own envelope
        body.update(type="invalid_request_error", param=None)
    return Reply(status, {"jsonrpc": "2.0", "id": request_id, "error": body})


def _result(request_id: object, result: dict[str, Any], version: str) -> Reply:
    if version in MODERN_VERSIONS:
        result = {**result, "resultType": "complete"}
    return Reply(200, {"jsonrpc": "2.0", "id": request_id, "result": result}, version)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value.strip() if value is not None else None


def _unsupported(request_id: object, asked: str, supported: tuple[str, ...]) -> Reply:
    return error(
        request_id,
        UNSUPPORTED_VERSION,
        f"MCP revision {asked[:40]!r} is not spoken here; these are: {', '.join(supported)}.",
        {"supported": list(supported), "requested": asked[:40]},
        status=400,
    )


def _version(request_id: object, params: dict[str, Any], headers: Mapping[str, str]) -> Reply | str:
    """The revision a (non-initialize) request speaks, or the error refusing it."""
    meta = params.get("_meta")
    in_meta = meta.get(META_VERSION) if isinstance(meta, dict) else None
    in_header = _header(headers, PROTOCOL_HEADER)
    if in_meta is not None and not isinstance(in_meta, str):
        return error(request_id, INVALID_PARAMS, f"_meta {META_VERSION} must be a string.")
    if in_meta is not None and in_header is not None and in_meta != in_header:
        return error(
            request_id,
            HEADER_MISMATCH,
            f"{PROTOCOL_HEADER} says {in_header[:40]!r}, the body's _meta {in_meta[:40]!r}.",
            status=400,
        )
    version = in_meta or in_header or ASSUMED_VERSION
    if version not in VERSIONS:
        return _unsupported(request_id, version, VERSIONS)
    return version


def _envelope_mismatch(
    request_id: object, method: str, params: dict[str, Any], headers: Mapping[str, str]
) -> Reply | None:
    """2026-07-28's headers repeat the body; one that says otherwise is refused."""
    said = _header(headers, METHOD_HEADER)
    if said is not None and said != method:
        return error(
            request_id,
            HEADER_MISMATCH,
            f"{METHOD_HEADER} says {said[:60]!r} but the body's method is {method[:60]!r}.",
            status=400,
        )
    named = _header(headers, NAME_HEADER)
    name = params.get("name")
    if method == "tools/call" and named is not None and named != name:
        return error(
            request_id,
            HEADER_MISMATCH,
            f"{NAME_HEADER} says {named[:60]!r} but the body calls {str(name)[:60]!r}.",
            status=400,
        )
    return None


def _capabilities() -> dict[str, Any]:
    return {"tools": {"listChanged": False}}


def _initialize(request_id: object, params: dict[str, Any]) -> Reply:
    asked = params.get("protocolVersion")
    version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    assert isinstance(version, str)
    result = {
        "protocolVersion": version,
        "capabilities": _capabilities(),
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    }
    return Reply(200, {"jsonrpc": "2.0", "id": request_id, "result": result}, version)


def _discover(request_id: object, params: dict[str, Any], headers: Mapping[str, str]) -> Reply:
    version = _version(request_id, params, headers)
    if isinstance(version, Reply):
        return version
    if version not in MODERN_VERSIONS:  # discover exists only from 2026-07-28 on
        return _unsupported(request_id, version, MODERN_VERSIONS)
    result = {
        "supportedVersions": list(MODERN_VERSIONS),
        "capabilities": _capabilities(),
        "instructions": INSTRUCTIONS,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "private",  # what a key may call differs by key
        "_meta": {META_SERVER_INFO: SERVER_INFO},
    }
    return _result(request_id, result, version)


async def handle(
    message: object, headers: Mapping[str, str], registry: Registry, caller: Caller
) -> Reply:
    """Answer one JSON-RPC message (already parsed) sent with ``headers``."""
    if isinstance(message, list):
        return error(
            None,
            INVALID_REQUEST,
            "JSON-RPC batches are not accepted: one message per POST.",
            status=400,
        )
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return error(
            None, INVALID_REQUEST, 'Not a JSON-RPC 2.0 message ("jsonrpc": "2.0").', status=400
        )
    request_id = message.get("id")
    method = message.get("method")
    if "id" not in message or request_id is None or "method" not in message:
        # a notification (notifications/initialized, cancelled) or a client's answer to a
        # request (none is ever sent): nothing is kept between requests, so nothing to do
        return Reply(202, None)
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        return error(None, INVALID_REQUEST, "`id` must be a string or a number.", status=400)
    if not isinstance(method, str):
        return error(request_id, INVALID_REQUEST, "`method` must be a string.", status=400)
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return error(request_id, INVALID_PARAMS, "`params` must be an object.")
    if method == "initialize":
        return _initialize(request_id, params)
    if method == "server/discover":
        return _discover(request_id, params, headers)
    version = _version(request_id, params, headers)
    if isinstance(version, Reply):
        return version
    if version in MODERN_VERSIONS and (
        refused := _envelope_mismatch(request_id, method, params, headers)
    ):
        return refused
    if method == "ping":
        return _result(request_id, {}, version)
    if method == "tools/list":
        listing: dict[str, Any] = {"tools": registry.listing()}
        if version in MODERN_VERSIONS:
            listing.update(ttlMs=LIST_TTL_MS, cacheScope="private")
        return _result(request_id, listing, version)
    if method == "tools/call":
        name = params.get("name")
        if not isinstance(name, str) or name not in registry:
            known = ", ".join(registry.names())
            return error(
                request_id,
                INVALID_PARAMS,
                f"No tool named {str(name)[:64]!r}. The tools: {known}.",
            )
        outcome = await registry.call(caller, name, params.get("arguments"))
        return _result(request_id, outcome.result(), version)
    return error(request_id, METHOD_NOT_FOUND, f"Method {method[:64]!r} is not served here.")
