"""A model request's pass through the client gate (``runtime.gate``; docs/sharing.md,
"Wiring"), the same on both doors: admitted once, before the fair queue (a key over a limit is
answered 429 with ``Retry-After``), its client handed to the queue, its ``x-ratelimit-*``
headers on every answer, and its quota given back and charged once at its end.

The fast door keeps its :class:`~modelswap.routing.gate.Admitted` on the request it serves;
aiohttp's door on the request (:data:`ADMITTED`), read by :func:`on_prepare` as the answer's
head goes out.
"""

from __future__ import annotations

from aiohttp import web

from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.request_obs import OBS, RequestObs
from modelswap.http.tracking.scope import observed
from modelswap.routing.gate import Admitted
from modelswap.routing.quota import estimate_tokens
from modelswap.runtime import Runtime

ADMITTED: web.RequestKey[Admitted] = web.RequestKey("admitted", Admitted)
# ``X-Modelswap-Queue`` and its words, for a request that waited (its last place seen)
QUEUE_PLACE: web.RequestKey[tuple[str, str]] = web.RequestKey("queue_place", tuple)


def admit(request: web.Request, runtime: Runtime) -> Admitted:
    """Let the request in for its key (raises RateLimitedError: a 429). A key with a quota
    gets the request observed even with metrics and the activity log off: its tokens are read
    from the backend's usage."""
    admitted = runtime.gate.admit(client_key(request))
    request[ADMITTED] = admitted
    if admitted.limited and request.get(OBS) is None:
        request[OBS] = RequestObs()
    return admitted


def charge(admitted: Admitted, obs: RequestObs | None, request_bytes: int) -> None:
    """The request is over (answered, failed, cancelled, its client gone): give back its
    place and charge its tokens — the backend's usage (prompt + completion); where it reported
    none, the estimate (request and answer bytes / 4); nothing when no backend answered."""
    if not admitted.limited:
        return
    if obs is None:  # (not observed: only the request's size is known)
        admitted.finish(None, estimate_tokens(request_bytes, 0))
        return
    if obs.ttft is None:  # no backend answered: it did no work for this request
        admitted.finish(0)
        return
    usage = obs.usage
    prompt = usage.prompt_tokens if usage is not None else None
    completion = usage.completion_tokens if usage is not None else None
    tokens = None if prompt is None and completion is None else (prompt or 0) + (completion or 0)
    admitted.finish(tokens, estimate_tokens(request_bytes, obs.bytes_out) if tokens is None else 0)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """As any answer's head goes out on aiohttp's door: the key's ``x-ratelimit-*`` headers
    (as its admission left them; a model request refused before it, e.g. a 404, gets them as
    they stand), and ``X-Modelswap-Queue`` on one that waited. A header already set (a 429's)
    is kept."""
    admitted = request.get(ADMITTED)
    if admitted is not None:
        if admitted.limited:
            _add(response, admitted.headers())
        place = request.get(QUEUE_PLACE)
        if place is not None:
            response.headers[place[0]] = place[1]
        return
    if observed(request.path):
        key = client_key(request)
        runtime = request.app[RUNTIME]
        if key is None and runtime.config.api_keys:
            return  # no valid key (a 401): no client to speak of
        if runtime.gate.client(key).quota:
            _add(response, runtime.gate.headers(key))


def _add(response: web.StreamResponse, headers: dict[str, str]) -> None:
    existing = response.headers
    for name, value in headers.items():
        if name not in existing:
            existing[name] = value
