"""Send a request to its target, then to the model's ``fallback`` targets in order — but only
while nothing of an answer has reached the client.

A target fails *before any byte* when it could not be started (StartError), refused or timed
out the connection or the first byte, answered 5xx (raised instead of relayed while a fallback
follows), or is a peer whose circuit breaker is open. Waiting comments of an early-opened event
stream are not an answer: the next target's answer goes into the same stream. Once the
backend's status line was relayed, the request is not retried anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from modelswap.backends.hints import asks_for_auto_tool_choice, auto_tool_choice_unsupported
from modelswap.errors import (
    ModelswapError,
    PeerUnavailableError,
    StartError,
    ToolChoiceUnsupportedError,
    UpstreamError,
    UpstreamTimeoutError,
)
from modelswap.http.reading import raw_query
from modelswap.http.relay import proxy
from modelswap.http.relay.apply_filters import apply_layers
from modelswap.http.relay.extract import RequestBody, dump_json, replace_model, salted
from modelswap.http.relay.policy import PolicyRun, apply_policies, policy_run
from modelswap.http.relay.waiting import WaitingStream, fail_or_raise
from modelswap.http.request_obs import OBS
from modelswap.http.route_table import USAGE_PATHS, upstream_path
from modelswap.observe.usage import UsageTracker, request_usage_injection
from modelswap.routing.peer_directory import PeerRoute
from modelswap.runtime import LocalTarget, Runtime, Target

log = logging.getLogger(__name__)

FALLBACK_ON = (StartError, UpstreamError, UpstreamTimeoutError, PeerUnavailableError)
HOPS_HEADER = "X-Modelswap-Hops"
MAX_HOPS = 8


def forwarded_path_qs(request: web.Request) -> str:
    """The path and query the target gets (llama-swap's /v/ and /audioapi/ dropped), both as
    the client escaped them."""
    raw_path = request.rel_url.raw_path
    path = upstream_path(raw_path)
    if path is raw_path:
        return request.path_qs
    return path + raw_query(request)


def hops(request: web.Request) -> int:
    """How many gateways this request went through already (peers add one each)."""
    value = request.headers.get(HOPS_HEADER, "0")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 4 else MAX_HOPS


def prepare_body(
    target: Target, request: RequestBody, policy: PolicyRun | None = None
) -> tuple[bytes, Mapping[str, object] | None]:
    """The body as ``target`` gets it (and its parsed form): its filters applied (JSON only),
    ``model`` renamed to the name the backend or peer knows, then the Swap Policy Language's
    programs (``policy``; a ``deny`` raises) — re-serialised only when something changed;
    otherwise the very bytes the client sent."""
    if isinstance(target, LocalTarget):
        layers = target.model.filters_for(target.name)
        upstream_name = target.model.upstream_name_for(target.name)  # as llama-swap: as sent
    else:
        peer_filters = target.peer.filters
        layers = (peer_filters,) if peer_filters else ()
        upstream_name = target.model
    if request.data is None:  # multipart: only the model field can change
        if upstream_name == request.model:
            return request.raw, None
        return replace_model(request.content_type, request.raw, upstream_name), None
    if not layers and upstream_name == request.model and policy is None:
        return request.raw, request.data
    data = dict(request.data)
    changed = apply_layers(data, layers) if layers else False
    if upstream_name != request.model:
        data["model"] = upstream_name
        changed = True
    if policy is not None:
        changed = apply_policies(policy, target, data) or changed
    return (dump_json(data), data) if changed else (request.raw, request.data)


def preflight(target: Target, body: RequestBody, policy: PolicyRun | None = None) -> None:
    """Refuse at once what the target's backend is known to refuse only after its start
    (which can take many minutes): automatic tool choice on a vLLM started without a
    tool-call parser. Judged on the body as the backend would get it (filters applied)."""
    if not isinstance(target, LocalTarget) or body.data is None or not body.data.get("tools"):
        return
    hint = auto_tool_choice_unsupported(target.model.cmd, target.model.backend)
    if hint is not None and asks_for_auto_tool_choice(prepare_body(target, body, policy)[1]):
        raise ToolChoiceUnsupportedError(target.label, hint)


async def dispatch(
    request: web.Request, runtime: Runtime, targets: list[Target], body: RequestBody
) -> web.StreamResponse:
    policy = policy_run(request, runtime.config.policies, body)
    obs = request.get(OBS)
    if policy is not None and obs is not None:
        obs.metadata = policy.context  # context.<key>, as the last attempt left it
    preflight(targets[0], body, policy)  # before any start, and before a stream opens: a 400
    waiting = WaitingStream(request, runtime) if body.stream else None
    try:
        for index, target in enumerate(targets):
            has_next = index + 1 < len(targets)
            try:
                return await _attempt(request, runtime, target, body, waiting, has_next, policy)
            except FALLBACK_ON as exc:
                if not has_next:
                    raise
                following = targets[index + 1].label
                log.warning("%s failed (%s); trying %s", target.label, exc, following)
                runtime.publish("fallback", model=target.label, to=following, reason=str(exc))
        raise AssertionError("unreachable: the last target re-raises")
    except ModelswapError as exc:
        return await fail_or_raise(waiting, exc)


async def _attempt(
    request: web.Request,
    runtime: Runtime,
    target: Target,
    body: RequestBody,
    waiting: WaitingStream | None,
    has_next: bool,
    policy: PolicyRun | None = None,
) -> web.StreamResponse:
    payload, data = prepare_body(target, body, policy)  # a deny raises: nothing started
    obs = request.get(OBS)
    if obs is not None:
        obs.model, obs.bytes_in = target.label, len(payload)
        obs.request_body = payload[: obs.request_limit]
        obs.salted = salted(data)
        injected = None
        if data is not None and request.path in USAGE_PATHS:
            injected = request_usage_injection(payload, data)
        if injected is not None:  # ask for the usage chunk; the client will not see it
            payload = injected
        streamed = waiting is not None
        obs.usage = UsageTracker(streamed=streamed, strip_usage_chunk=injected is not None)
    if isinstance(target, LocalTarget):
        return await proxy.attempt_local(
            request,
            runtime,
            target.model,
            path_qs=forwarded_path_qs(request),
            body=payload,
            waiting=waiting,
            raise_5xx=has_next,
        )
    return await _attempt_peer(request, runtime, target, payload, waiting, has_next)


async def _attempt_peer(
    request: web.Request,
    runtime: Runtime,
    route: PeerRoute,
    body: bytes,
    waiting: WaitingStream | None,
    has_next: bool,
) -> web.StreamResponse:
    """Forward to a peer through its circuit breaker; the peer's key, never the client's."""
    directory = runtime.peers
    breaker = directory.breaker(route.peer.id)
    if not breaker.admit(directory.now()):
        raise PeerUnavailableError(route.peer.id, breaker.retry_in(directory.now()))
    statuses: list[int] = []
    upstream = proxy.Upstream(
        route.label,
        route.peer.proxy,
        route.peer.api_key,
        route.peer.timeouts,
        release=_nothing,
        raise_5xx=has_next,
        extra_headers=((HOPS_HEADER, str(hops(request) + 1)),),
        on_status=statuses.append,
    )
    failed = False
    try:
        return await proxy.forward(
            request,
            runtime,
            upstream,
            path_qs=forwarded_path_qs(request),
            body=body,
            into=waiting.response if waiting is not None else None,
        )
    except (UpstreamError, UpstreamTimeoutError):
        if not statuses:
            failed = True
            breaker.failure(directory.now())
        raise
    finally:
        if not failed:
            if not statuses:
                breaker.abandon()  # the client left before the peer answered
            elif statuses[0] >= 500:
                breaker.failure(directory.now())
            else:
                breaker.success()


def _nothing() -> None:
    """A peer holds no lease."""
