"""The Swap Policy Language on the way to a backend (llama-swap's order of operations):
the filters (``http/relay/apply_filters.py``), then ``hooks.on_request``, then the target model's or
peer's own ``filters.policy``; each sees what the one before left. JSON bodies only (a
multipart form and ``/upstream/`` pass through as they are). Whatever a request's
``Content-Type`` says, a body read as JSON is a JSON body here: a header cannot take a request
past a policy.

A ``deny`` raises :class:`PolicyDeniedError` (the route's own error shape, OpenAI's or
Anthropic's, with the program's status); a rewrite that cannot be done raises
:class:`PolicyFailedError` (500). ``context.<key>`` writes go into the request's activity
record (``metadata``). With no policies configured, nothing here runs at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web

from modelswap.errors import PolicyDeniedError, PolicyFailedError
from modelswap.http.reading import presented_key
from modelswap.http.relay.extract import RequestBody
from modelswap.policy import PolicyRuntimeError, PolicySet, Request, run
from modelswap.runtime import Target


@dataclass(slots=True)
class PolicyRun:
    """One request's facts for its programs, and the ``context`` they wrote (what the last
    attempt wrote: a fallback starts it afresh)."""

    policies: PolicySet
    api_key: str | None
    requested: str  # request.model: the name the client sent, before any renaming
    path: str
    method: str
    headers: Mapping[str, str]
    context: dict[str, str] = field(default_factory=dict)


def policy_run(
    request: web.Request, policies: PolicySet | None, body: RequestBody
) -> PolicyRun | None:
    """The run for this request, or None when no program can apply (none configured, or a
    multipart body)."""
    if policies is None or body.data is None:
        return None
    return PolicyRun(
        policies,
        presented_key(request.headers),
        body.model,
        request.path,
        request.method,
        request.headers,
    )


def apply_policies(policy: PolicyRun, target: Target, data: dict[str, object]) -> bool:
    """Run the hook and ``target``'s own policy over ``data`` (the filtered body, a shallow
    copy: changed in place). True when the body changed."""
    programs = target.programs(policy.policies)
    policy.context.clear()
    if not programs:
        return False
    state = Request(
        data,
        policy.context,
        api_key=policy.api_key,
        model=policy.requested,
        path=policy.path,
        method=policy.method,
        headers=policy.headers,
    )
    for program in programs:
        try:
            denied = run(program, policy.policies.library, state)
        except PolicyRuntimeError as exc:
            raise PolicyFailedError(str(exc)) from None
        if denied is not None:
            raise PolicyDeniedError(denied.status, denied.message, denied.provenance())
    return state.changed
