"""``/api/mcp`` in-process (the fast tier; tests/e2e/test_mcp.py drives it with the official SDK
against a real gateway): a tool refused for want of a scope, secrets masked, results cut at
the cap, the envelope's checks; and the pieces — paths into the config, the cap, ``Accept``."""

from __future__ import annotations

import json
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from modelswap.config import load_config_text
from modelswap.http.mcp import config_tools, docs_tools
from modelswap.http.mcp.registry import MAX_RESULT_BYTES, ToolError, cap
from modelswap.http.routes.mcp import answer_type, origin_allowed
from modelswap.http.server.app import create_app
from modelswap.redact import MASK
from modelswap.runtime import Runtime

ADMIN_KEY, READ_KEY = "sk-unit-admin-7c1e93", "sk-unit-reader-2b8f41"
SECRET = "hf_unitPlantedSecret987654321zyx"
CONFIG = f"""
stateDir: ':memory:'
activity: {{enabled: false}}
apiKeys:
  - {{key: {ADMIN_KEY}, name: operator, scopes: [read, admin]}}
  - {{key: {READ_KEY}, name: watcher, scopes: [read]}}
models:
  qwen2.5-7b:
    cmd: x --port ${{PORT}} --api-key {SECRET}
    env: {{HF_TOKEN: {SECRET}}}
    description: {"a long description " * 1000}
  other:
    cmd: x --port ${{PORT}}
"""
MODERN = {"Mcp-Protocol-Version": "2026-07-28"}

Client = TestClient[Any, Any]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    app = create_app(Runtime(load_config_text(CONFIG), use_reaper=False))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def rpc(
    client: Client, key: str, method: str, params: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}", **MODERN, "Mcp-Method": method}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    async with client.post("/api/mcp", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def tool(client: Client, key: str, name: str, **args: object) -> tuple[str, bool]:
    status, reply = await rpc(client, key, "tools/call", {"name": name, "arguments": args})
    assert status == 200, reply
    result = reply["result"]
    return result["content"][0]["text"], result["isError"]


async def test_an_admin_tool_is_refused_to_a_read_key_naming_the_scope(client: Client) -> None:
    for name in ("config__get_config", "models__load_model", "config__reload_config"):
        text, is_error = await tool(client, READ_KEY, name, model="other")
        assert is_error, name
        assert "`admin` scope" in text
        assert "(watcher)" in text
    text, is_error = await tool(client, ADMIN_KEY, "config__get_config", path="models.other.cmd")
    assert not is_error
    assert json.loads(text)["value"][0] == "x"


async def test_the_config_comes_masked_and_cut_at_the_cap(client: Client) -> None:
    text, is_error = await tool(client, ADMIN_KEY, "config__get_config")
    assert not is_error
    assert SECRET not in text
    assert len(text.encode()) <= MAX_RESULT_BYTES
    assert "[truncated: " in text.splitlines()[-1]
    env, _ = await tool(client, ADMIN_KEY, "config__get_config", path="models.qwen2.5-7b.env")
    assert json.loads(env)["value"] == {"HF_TOKEN": MASK}  # an id with a dot, found whole
    cmd, _ = await tool(client, ADMIN_KEY, "config__get_config", query='.models["qwen2.5-7b"].cmd')
    assert SECRET not in cmd
    assert MASK in cmd


async def test_the_envelope_is_checked(client: Client) -> None:
    headers = {"Authorization": f"Bearer {READ_KEY}", **MODERN, "Mcp-Method": "ping"}
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
    async with client.post("/api/mcp", json=body, headers=headers) as resp:
        assert resp.status == 400
        assert resp.headers["X-Modelswap-Error"] == "1"
        error = (await resp.json())["error"]
        assert error["code"] == -32020
        assert error["type"] == "invalid_request_error"
    status, reply = await rpc(client, READ_KEY, "tools/list")
    assert status == 200
    assert reply["result"]["resultType"] == "complete"
    names = [t["name"] for t in reply["result"]["tools"]]
    assert names[:3] == ["docs__list_docs", "docs__get_doc", "docs__search_docs"]
    async with client.get("/api/mcp", headers={"Authorization": f"Bearer {READ_KEY}"}) as resp:
        assert resp.status == 405
        assert resp.headers["Allow"] == "POST"


def test_paths_into_the_config() -> None:
    document = {"models": {"qwen2.5-7b": {"ttl": 5, "cmd": ["x", "y"]}, "b": {}}, "n": 1}
    walk, parse = config_tools.walk, config_tools.parse_path
    assert walk(document, parse("models.qwen2.5-7b.ttl")[0]) == 5
    assert walk(document, parse('.models["qwen2.5-7b"].cmd[1]')[0]) == "y"
    assert walk(document, parse("models.qwen2.5-7b.cmd.0")[0]) == "x"
    assert parse(".models | keys") == (["models"], True)
    assert parse(".") == ([], False)
    with pytest.raises(ToolError, match=r"Keys there: qwen2\.5-7b, b"):
        walk(document, parse("models.nope")[0])
    with pytest.raises(ToolError, match="not a section"):
        walk(document, parse("n.deeper")[0])
    with pytest.raises(ToolError, match="not other jq filters"):
        parse(".models | length")
    with pytest.raises(ToolError, match="at most"):
        parse("a." * 40)


def test_the_cap_cuts_at_a_line_and_says_how_much() -> None:
    text = "\n".join(f"line {n:05d} " + "x" * 50 for n in range(1000))
    cut, truncated = cap(text, 4096, "Ask for less.")
    assert truncated
    assert len(cut.encode()) <= 4096
    last = cut.splitlines()[-1]
    assert last.startswith("[truncated: ")
    assert f"of {len(text.encode())} bytes" in last
    assert cut.splitlines()[-2].endswith("x" * 50)  # whole lines kept
    assert cap("short", 4096) == ("short", False)
    wide = "é" * 5000  # never cut inside a character
    assert len(cap(wide, 1000)[0].encode()) <= 1000


@pytest.mark.parametrize(
    ("accept", "kind"),
    [
        ("application/json, text/event-stream", "application/json"),
        ("text/event-stream", "text/event-stream"),
        ("", "application/json"),
        ("*/*", "application/json"),
        ("text/html", None),
    ],
)
def test_the_answer_follows_accept(accept: str, kind: str | None) -> None:
    assert answer_type(accept) == kind


def test_the_docs_ship_inside_the_package() -> None:
    """``modelswap/docs`` (a link to docs/, package data) holds every page of the site, so an
    installed gateway's docs__* tools read them."""
    repo = Path(__file__).resolve().parents[3]
    pages = {path.stem for path in (repo / "docs").glob("*.md")}
    assert set(docs_tools.shipped()) == pages
    assert docs_tools.shipped()["mcp"].title == "The MCP endpoint"
    package_data = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "docs/*.md" in package_data["package-data"]["modelswap"]


async def test_a_browser_page_from_elsewhere_is_refused(client: Client) -> None:
    """MCP's transport asks for ``Origin`` to be checked (DNS rebinding): a page on another
    site is refused; one on loopback, or a client that is no browser, is served."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    auth = {"Authorization": f"Bearer {READ_KEY}", **MODERN}
    for origin, status in (
        ("http://evil.example", 403),
        ("http://127.0.0.1.evil.example:8080", 403),
        ("null", 403),
        ("http://localhost:5173", 200),
        ("http://[::1]:8080", 200),
        (None, 200),
    ):
        headers = auth if origin is None else {**auth, "Origin": origin}
        async with client.post("/api/mcp", json=body, headers=headers) as resp:
            assert resp.status == status, origin
            if status == 403:
                assert "security.corsOrigins" in (await resp.json())["error"]["message"]


def test_an_origin_listed_for_cors_is_allowed() -> None:
    listed = load_config_text(
        "security: {corsOrigins: ['https://app.example']}\nmodels:\n  a:\n    cmd: x ${PORT}\n"
    ).security
    assert origin_allowed(listed, "https://app.example")
    assert not origin_allowed(listed, "https://other.example")
