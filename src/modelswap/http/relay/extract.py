"""Find and replace the ``model`` of a request body: JSON or multipart. Pure over bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message

from modelswap import jsonsafe
from modelswap.errors import MAX_MODEL_NAME_BYTES, BadRequestError, echo

# A multipart part's head (its Content-Disposition and Content-Type lines) is a few hundred
# bytes; a longer one is not looked into (its field name could be megabytes).
MAX_PART_HEAD_BYTES = 4096


def _media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _boundary(content_type: str) -> bytes:
    msg = Message()
    msg["content-type"] = content_type
    boundary = msg.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise BadRequestError("multipart body without a boundary in Content-Type")
    return boundary.encode("latin-1")


def _json_object(body: bytes) -> dict[str, object]:
    if not body.strip():
        raise BadRequestError("The request body is empty; expected a JSON object.")
    try:
        data = jsonsafe.loads(body, top_level_duplicates=True)
    except jsonsafe.JSONTooDeepError as exc:
        raise BadRequestError(
            f"The request body is nested deeper than {exc.limit} levels.", code="json_too_deep"
        ) from exc
    except jsonsafe.DuplicateKeyError as exc:
        raise BadRequestError(
            f"The request body repeats the top-level key `{echo(exc.key)}`; send each key once "
            "(parsers disagree on which copy wins).",
            param=exc.key[:64],
            code="duplicate_key",
        ) from exc
    except ValueError as exc:  # UnicodeDecodeError included
        raise BadRequestError(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequestError("The request body must be a JSON object.")
    return data


def _checked(model: object) -> str:
    if model is None:
        raise BadRequestError("The request has no `model` field.", param="model")
    if not isinstance(model, str) or not model.strip():
        raise BadRequestError("`model` must be a non-empty string.", param="model")
    if len(model.encode("utf-8", "surrogatepass")) > MAX_MODEL_NAME_BYTES:
        raise BadRequestError(
            f"`model` is longer than {MAX_MODEL_NAME_BYTES} bytes: `{echo(model)}`.",
            param="model",
            code="invalid_model",
        )
    return model


def _part_name(head: bytes) -> str | None:
    if len(head) > MAX_PART_HEAD_BYTES:
        return None
    for line in head.split(b"\r\n"):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-disposition":
            msg = Message()
            msg["content-disposition"] = value.strip()
            param = msg.get_param("name", header="content-disposition")
            return param if isinstance(param, str) else None
    return None


def _find_multipart_model(content_type: str, body: bytes) -> tuple[int, bytes, bytes] | None:
    """(index of the part, its head, its value) for the ``model`` field, if present."""
    chunks = body.split(b"--" + _boundary(content_type))
    found: tuple[int, bytes, bytes] | None = None
    for index, chunk in enumerate(chunks[1:], start=1):
        if chunk.startswith(b"--"):
            break
        head, sep, rest = chunk.partition(b"\r\n\r\n")
        if sep and _part_name(head) == "model":
            if found is not None:  # which one a backend reads is its parser's choice
                raise BadRequestError(
                    "The multipart form has more than one `model` field; send it once.",
                    param="model",
                    code="duplicate_key",
                )
            value = rest[:-2] if rest.endswith(b"\r\n") else rest
            found = index, head, value
    return found


def extract_model(content_type: str, body: bytes) -> str:
    """The ``model`` a request names. Raises BadRequestError with a client-facing reason."""
    if _media_type(content_type) == "multipart/form-data":
        found = _find_multipart_model(content_type, body)
        if found is None:
            raise BadRequestError("The multipart form has no `model` field.", param="model")
        return _checked(found[2].decode("utf-8", errors="replace"))
    return _checked(_json_object(body).get("model"))


def replace_model(content_type: str, body: bytes, name: str) -> bytes:
    """The body with its ``model`` set to ``name``; all other bytes unchanged for multipart."""
    if _media_type(content_type) == "multipart/form-data":
        delimiter = b"--" + _boundary(content_type)
        found = _find_multipart_model(content_type, body)
        if found is None:
            return body
        index, head, _ = found
        chunks = body.split(delimiter)
        chunks[index] = head + b"\r\n\r\n" + name.encode() + b"\r\n"
        return delimiter.join(chunks)
    data = _json_object(body)
    data["model"] = name
    return dump_json(data)


@dataclass(frozen=True, slots=True)
class RequestBody:
    """A request body read once and parsed once: ``data`` is the JSON object (None for a
    multipart form); every later step (filters, renaming, usage) starts from it."""

    content_type: str
    raw: bytes
    data: Mapping[str, object] | None
    model: str
    stream: bool


def parse_request(content_type: str, body: bytes) -> RequestBody:
    """Parse ``body`` once. Raises BadRequestError with a client-facing reason."""
    if _media_type(content_type) == "multipart/form-data":
        return RequestBody(content_type, body, None, extract_model(content_type, body), False)
    data = _json_object(body)
    model = _checked(data.get("model"))
    return RequestBody(content_type, body, data, model, data.get("stream") is True)


def salted(data: Mapping[str, object] | None) -> bool:
    """Whether a body carries llama.cpp's ``cache_salt`` (a restored slot never serves it)."""
    return data is not None and data.get("cache_salt") not in (None, "")


def dump_json(data: Mapping[str, object]) -> bytes:
    """A JSON body as modelswap writes one it changed: compact, non-ASCII kept as UTF-8."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
