"""Send a request to its target, then to the model's ``fallback`` targets in order — but only
while nothing of an answer has reached the client.

A target fails *before any byte* when it could not be started (StartError), refused or timed
out the connection or the first byte, answered 5xx (raised instead of relayed while a fallback
follows), or is a peer whose circuit breaker is open. Loading comments of an early-opened event
stream are not an answer: the next target's answer goes into the same stream. Once the
backend's status line was relayed, the request is not retried anywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from modelswap.backends.hints import asks_for_auto_tool_choice
from modelswap.config import ModelConfig
from modelswap.errors import (
    ModelswapError,
    PeerUnavailableError,
    StartError,
    ToolChoiceUnsupportedError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from modelswap.http.reading import raw_query, request_id
from modelswap.http.relay.apply_filters import apply_layers
from modelswap.http.relay.client_transport import ClientTransport
from modelswap.http.relay.extract import RequestBody, dump_json, replace_model
from modelswap.http.relay.loading_stream import LoadingStream, fail_or_raise, queued_acquire
from modelswap.http.relay.relay import Outgoing, Upstream, observe_payload, relay
from modelswap.http.relay.response_sink import ResponseSink
from modelswap.http.relay.spl import PolicyRun, apply_policies, policy_run
from modelswap.http.request_obs import OBS
from modelswap.http.route_table import upstream_path
from modelswap.http.tracking.client_gate import admit, charge
from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.runtime import LocalTarget, Runtime, Target

log = logging.getLogger(__name__)

FALLBACK_ON = (StartError, UpstreamError, UpstreamTimeoutError, PeerUnavailableError)
HOPS_HEADER = "X-Modelswap-Hops"
MAX_HOPS = 8
_HOPS = HOPS_HEADER.encode()


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
    layers, upstream_name = target.body_edits()
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
    if body.data is None or not body.data.get("tools"):
        return
    hint = target.tool_choice_refusal()
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
    admitted = admit(request, runtime)  # once, before the fair queue: over a limit is a 429
    client = admitted.client
    obs = request.get(OBS)  # (a key with a quota is observed for its usage: admit made one)
    sink = ResponseSink(request)
    loading = LoadingStream(request, runtime, sink, client) if body.stream else None
    try:
        for index, target in enumerate(targets):
            has_next = index + 1 < len(targets)
            try:
                payload, data = prepare_body(target, body, policy)  # a deny: nothing started
                payload = observe_payload(
                    obs, target.label, request.path, payload, data, streamed=loading is not None
                )
                return await attempt(
                    request,
                    runtime,
                    target,
                    path_qs=forwarded_path_qs(request),
                    body=payload,
                    sink=sink,
                    loading=loading,
                    raise_5xx=has_next,
                    client=client,
                )
            except FALLBACK_ON as exc:
                if not has_next:
                    raise
                following = targets[index + 1].label
                log.warning("%s failed (%s); trying %s", target.label, exc, following)
                runtime.publish("fallback", model=target.label, to=following, reason=str(exc))
        raise AssertionError("unreachable: the last target re-raises")
    except ModelswapError as exc:
        return await fail_or_raise(loading, exc)
    finally:  # answered, failed, cancelled or its client gone: its quota place back
        charge(admitted, request.get(OBS), len(body.raw))


async def send_to_model(
    request: web.Request, runtime: Runtime, model: ModelConfig, *, path_qs: str, body: bytes
) -> web.StreamResponse:
    """A route's request to one local model, as it is (no filters, no fallback, no loading
    stream): wait for it to be ready, then relay."""
    target = LocalTarget(model, model.id)
    sink = ResponseSink(request)
    admitted = admit(request, runtime)
    try:
        return await attempt(
            request,
            runtime,
            target,
            path_qs=path_qs,
            body=body,
            sink=sink,
            loading=None,
            client=admitted.client,
        )
    finally:
        charge(admitted, request.get(OBS), len(body))


async def attempt(
    request: web.Request,
    runtime: Runtime,
    target: Target,
    *,
    path_qs: str,
    body: bytes,
    sink: ResponseSink,
    loading: LoadingStream | None,
    raise_5xx: bool = False,
    client: Client = ANONYMOUS,
) -> web.StreamResponse:
    """One target's attempt, whatever its kind: reach it (a local model's lease, through
    ``loading`` for streams, else noting its place in the queue; a peer's breaker), relay.
    ``client``: whose request it is, in the fair queue. Raises ModelswapError when nothing but
    loading comments reached the client.

    The lease is released when the body has been relayed or the client went away (the handler
    is cancelled on disconnect; the relay closes the upstream answer, which cancels the
    backend's work, and releases it) — never when the handler merely returns.

    A refused connection means the request never reached the backend. If the backend has just
    died (its exit not yet noticed), the model is marked failed and the request is tried once
    more, which starts it again — a request right after a crash is not lost.
    """
    acquire = loading.acquire if loading is not None else queued_acquire(request, runtime, client)
    for again in (True, False):
        passage = await target.reach(acquire, runtime.peers)
        timeouts = passage.timeouts
        statuses: list[int] = []
        upstream = Upstream(
            target.label,
            ClientTransport(runtime.session_for(timeouts), passage.url, timeouts),
            passage.api_key,
            timeouts,
            passage.release,
            raise_5xx,
            ((_HOPS, b"%d" % (hops(request) + 1)),) if passage.counts_hops else (),
            statuses.append,
        )
        outgoing = Outgoing(
            request.method, request.path, path_qs, request.raw_headers, request_id(request), body
        )
        try:
            await relay(outgoing, upstream, sink, runtime.redactor, request.get(OBS))
        except (UpstreamError, UpstreamTimeoutError) as exc:
            passage.settle(statuses[0] if statuses else None, failed=True)
            if again and isinstance(exc, UpstreamUnreachableError) and await passage.died():
                log.info("%s: backend had died; starting it again", target.label)
                continue
            raise
        except BaseException:
            passage.settle(statuses[0] if statuses else None, failed=False)
            raise
        passage.settle(statuses[0] if statuses else None, failed=False)
        if sink.cut is not None:
            raise ConnectionAbortedError(sink.cut)  # aiohttp closes the connection
        assert sink.response is not None
        return sink.response
    raise AssertionError("unreachable: the second try re-raises")
