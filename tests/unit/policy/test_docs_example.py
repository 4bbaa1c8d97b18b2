"""The policy example in docs/llamaswap.md (issue 41 #11), run by the language's evaluator: its
``hooks.on_request`` refuses a chat without ``messages`` and lets every other route's request
through (an embeddings or an images request has no ``messages``)."""

from __future__ import annotations

import re

import pytest
import yaml
from tests.e2e.conftest import REPO

from modelswap.policy import Denial, Request, check, parse, run

DOC = REPO / "docs" / "llamaswap.md"


def docs_example() -> dict[str, object]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## The Swap Policy Language") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the section's YAML example is gone"
    data = yaml.safe_load(block.group(1))
    assert isinstance(data, dict)
    return data


def on_request(path: str, body: dict[str, object], key: str | None = "sk-x") -> Denial | None:
    data = docs_example()
    library = {name: parse(source) for name, source in data["policies"].items()}  # type: ignore[attr-defined]
    program = parse(data["hooks"]["on_request"])  # type: ignore[index]
    assert check(program, library) == []
    request = Request(dict(body), api_key=key, model=str(body.get("model", "")), path=path)
    request.method = "POST"
    return run(program, library, request)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"model": "qwen-coder", "input": "a line to embed"}),
        ("/v1/images/generations", {"model": "painter", "prompt": "a lighthouse"}),
        ("/v1/rerank", {"model": "ranker", "query": "q", "documents": ["a", "b"]}),
        ("/v1/completions", {"model": "qwen-coder", "prompt": "def f():"}),
        ("/v1/chat/completions", {"model": "qwen-coder", "messages": [{"role": "user"}]}),
    ],
)
def test_the_docs_example_lets_other_routes_and_complete_chats_through(
    path: str, body: dict[str, object]
) -> None:
    assert on_request(path, body) is None


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_the_docs_example_refuses_a_chat_without_messages(path: str) -> None:
    assert on_request(path, {"model": "qwen-coder"}) == Denial(400, "messages is required")


def test_the_docs_example_still_asks_a_private_model_for_a_key() -> None:
    body = {"model": "private-x", "input": "a line"}
    assert on_request("/v1/embeddings", body, key=None) == Denial(401, "API key required")
