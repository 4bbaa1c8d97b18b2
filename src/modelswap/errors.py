"""Domain exceptions. Only ``http/`` maps them to status codes and the OpenAI envelope."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


class ModelswapError(Exception):
    """Base of every error modelswap raises on purpose."""


class ConfigError(ModelswapError):
    """A configuration problem, named by its dotted key path.

    ``problems`` holds every problem found, each as ``(path, message)``; ``str()`` renders
    one line per problem so a user can fix them all in one edit.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("\n".join(f"{p}: {m}" if p else m for p, m in problems))


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a backend failed to start or died: the root cause and the fix, not the wrapper line."""

    code: str
    summary: str
    evidence: str | None = None
    fix: str | None = None
    numbers: dict[str, float] = field(default_factory=dict)

    def message(self) -> str:
        text = self.summary
        if self.fix:
            text += f" Fix: {self.fix}"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "summary": self.summary,
            "evidence": self.evidence,
            "fix": self.fix,
            "numbers": dict(self.numbers),
        }


MAX_MODEL_NAME_BYTES = 256  # longer names are refused before any lookup (invalid_model)
ECHO_CHARS = 64  # how much of a client's string an error message repeats


def echo(text: str) -> str:
    """At most ECHO_CHARS of a client's string, marked when cut: error messages quote what the
    client sent without handing a 10 MB name back."""
    return text if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS]}… ({len(text)} characters)"


class ModelNotFoundError(ModelswapError):
    def __init__(self, model: str, close: list[str]) -> None:
        self.model = model
        self.close = close
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        super().__init__(f"The model `{echo(model)}` does not exist.{hint}")


class BadRequestError(ModelswapError):
    def __init__(
        self, message: str, param: str | None = None, code: str = "invalid_request"
    ) -> None:
        self.param = param
        self.code = code
        super().__init__(message)


class ToolChoiceUnsupportedError(BadRequestError):
    """A request asks for automatic tool choice of a model whose backend cannot do it."""

    def __init__(self, model: str, hint: str) -> None:
        self.hint = hint
        super().__init__(
            f"Model `{model}` cannot choose tools itself: its vLLM command lacks "
            "--enable-auto-tool-choice/--tool-call-parser, so vLLM would refuse this request "
            f"with HTTP 400 after its start; answered now instead. Hint: {hint}.",
            param="tool_choice",
            code="tool_choice_unsupported",
        )


class BodyTooLargeError(ModelswapError):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"Request body is larger than the limit of {limit} bytes.")


class StartError(ModelswapError):
    """A backend did not become ready; carries the diagnosis of why, and for a model that ran
    out of memory the load dry run's prediction (``prediction``, plain JSON) with the fixes."""

    def __init__(self, model: str, diagnosis: Diagnosis) -> None:
        self.model = model
        self.diagnosis = diagnosis
        self.prediction: dict[str, object] | None = None
        super().__init__(f"Model `{model}` failed to start: {diagnosis.message()}")


class QueueFullError(ModelswapError):
    """Too many requests are waiting already (``queueLimit``)."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        super().__init__("Too many requests are waiting for models; retry later.")


class RateLimitedError(ModelswapError):
    """A client key is over one of its limits (``apiKeys[].quota``). ``headers``: the
    ``x-ratelimit-*`` and ``Retry-After`` headers its answer carries (routing/quota.py)."""

    def __init__(
        self, client: str, limit: str, value: int, retry_after: float, headers: dict[str, str]
    ) -> None:
        self.client = client
        self.limit = limit
        self.value = value
        self.retry_after = retry_after
        self.headers = headers
        super().__init__(
            f"Key {client!r} is over its {limit} limit ({value}); retry in "
            f"{max(1, math.ceil(retry_after))} s."
        )


class ShuttingDownError(ModelswapError):
    def __init__(self) -> None:
        super().__init__("modelswap is shutting down.")


class UpstreamError(ModelswapError):
    """The backend could not be reached or broke the connection before answering."""

    def __init__(self, model: str, detail: str) -> None:
        self.model = model
        super().__init__(f"Backend for model `{model}` failed: {detail}")


class UpstreamUnreachableError(UpstreamError):
    """The backend refused the connection: the request never reached it (safe to retry)."""


class UpstreamTimeoutError(ModelswapError):
    def __init__(self, model: str, which: str, seconds: float) -> None:
        self.model = model
        self.which = which
        super().__init__(f"Backend for model `{model}` timed out: no {which} within {seconds:g} s.")


class UpstreamStatusError(UpstreamError):
    """The backend answered 5xx before any byte reached the client, and a fallback is next.
    (Without a fallback, the backend's answer is relayed as it is.)"""

    def __init__(self, model: str, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        detail = body.decode("utf-8", errors="replace")[:300]
        super().__init__(model, f"answered {status}: {detail}")


class PeerUnavailableError(ModelswapError):
    """A peer's circuit breaker is open: it failed repeatedly and is not tried until
    ``retry_after`` seconds have passed."""

    def __init__(self, peer: str, retry_after: float) -> None:
        self.peer = peer
        self.retry_after = retry_after
        super().__init__(
            f"Peer `{peer}` is unavailable after repeated failures; it is tried again in "
            f"{retry_after:.0f} s."
        )


class AmbiguousModelError(ModelswapError):
    """A bare name that several peers serve: the client must qualify it."""

    def __init__(self, model: str, candidates: list[str]) -> None:
        self.model = model
        self.candidates = candidates
        super().__init__(
            f"Model `{model}` is served by several peers; name one of: {', '.join(candidates)}."
        )


class PolicyDeniedError(ModelswapError):
    """A Swap Policy Language ``deny`` fired: the request is refused with the program's own
    status (400..599) and message, before any backend is started or asked."""

    def __init__(
        self, status: int, message: str, policy: Mapping[str, object] | None = None
    ) -> None:
        self.status = status
        self.policy = policy
        """Where the ``deny`` is written (:meth:`modelswap.policy.Denial.provenance`): program,
        line, rule; the error's JSON carries it as ``error.policy``."""
        super().__init__(message)


class PolicyFailedError(ModelswapError):
    """A policy's rewrite cannot be done on this body (``set tools.x`` when ``tools`` is a
    list): the request fails rather than going out half rewritten."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"policy error: {detail}")
