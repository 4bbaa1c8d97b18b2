"""``X-Request-Id``: one id per request, so a request can be followed end to end.

The client's own id is kept when it is sane (at most 128 characters of letters, digits and
``._:-``); anything else — missing, too long, odd characters that could forge log lines — is
replaced by a new one. The id goes out on every response (streamed ones included, as their
headers are prepared), to the backend or peer with the request, into the log line, the activity
row and the ``request.finished`` event.
"""

from __future__ import annotations

from aiohttp import web

from modelswap.http.reading import HEADER, request_id
from modelswap.http.route_table import ANTHROPIC_PATHS


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Every response carries the id (a backend's own id, if it sent one, is replaced); on
    Anthropic's routes also as ``request-id``, the header its SDK reports (``e.request_id``)."""
    chosen = request_id(request)
    response.headers[HEADER] = chosen
    if request.path in ANTHROPIC_PATHS:
        response.headers["request-id"] = chosen
