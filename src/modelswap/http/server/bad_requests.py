"""Requests the HTTP parser rejects, answered like every other error modelswap authors.

aiohttp answers a request it cannot parse (an unknown method, an oversized or malformed header,
broken framing) itself, before any middleware runs: as plain text, and logged as an ERROR with a
traceback. A client's malformed request is not a gateway failure, so here it gets the OpenAI
envelope with ``X-Modelswap-Error`` and a debug log line; a 500 (an exception in a handler: a
modelswap bug) keeps aiohttp's ERROR log with the traceback and gets the envelope too.
"""

from __future__ import annotations

import re
from http import HTTPStatus

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from modelswap.http.error_responses import error_response, in_anthropic_shape
from modelswap.http.route_table import ANTHROPIC_PATHS

# The parser quotes the raw request line it refused: b'FOO /v1/messages HTTP/1.1'
_QUOTED_TARGET = re.compile(r"b'[^ ']* (/[^ ?#']*)")


class EnvelopeRequestHandler(RequestHandler):
    """aiohttp's connection handler with :meth:`handle_error` answering in the envelope."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
        else:
            self.logger.debug("bad request from %s: %s", request.remote, message or exc)
        if request.writer.output_size > 0:  # as aiohttp: a response is under way already
            raise ConnectionError("the response has started; cannot send an error response")
        response = error_response(_summary(status, message), status, code=f"http_{status}")
        if _target_path(request, message) in ANTHROPIC_PATHS:
            in_anthropic_shape(response)  # as every error on Anthropic's routes
        response.force_close()
        return response


def _target_path(request: web.BaseRequest, message: str | None) -> str | None:
    """The path the client asked for: the request's, when the parser got that far, else the one
    in the request line the parser quotes in its message (an unknown method, for one)."""
    if request.path not in ("", "/"):  # a request line that could not be parsed reads as "/"
        return request.path
    found = _QUOTED_TARGET.search(message or "")
    return found[1] if found else None


def _summary(status: int, message: str | None) -> str:
    """The parser's reason on one line (it may quote the raw request line below it)."""
    if status >= 500:
        return "modelswap failed to handle the request (see its log)."
    lines = (message or "").strip().splitlines()
    reason = lines[0].rstrip(":").strip() if lines else ""
    if reason:
        return f"Bad request: {reason}."
    try:
        return f"{HTTPStatus(status).phrase}."
    except ValueError:
        return "Bad request."
