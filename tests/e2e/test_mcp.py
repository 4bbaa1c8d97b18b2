"""Issue 39: ``/api/mcp`` driven by the official MCP Python SDK (``mcp``) as the client, against
a real gateway with fake backends: both revisions' ways in (the 2026-07-28 envelope the SDK
tries first, the ``initialize`` handshake it falls back to), every tool called, scopes refused
per tool, results cut at the cap and redacted; and llama-swap's stateless POST form, raw."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from tests.e2e.conftest import Gateway, fake_cmd

from modelswap.http.mcp.registry import MAX_RESULT_BYTES
from modelswap.redact import MASK

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
ADMIN_KEY = "sk-mcp-operator-4f1c2a9e7b"
READ_KEY = "sk-mcp-watcher-8d3e5b1f0c"
PLANTED = "hf_MCPplantedSecret0123456789abcdef"
LLAMA_SWAP_NAMES = (
    "docs__list_docs",
    "docs__get_doc",
    "docs__search_docs",
    "docs__get_config_schema",
    "config__get_config",
    "sys__now",
)


@pytest.fixture
def gw(gateway: StartGateway, tmp_path: Path) -> Gateway:
    """Three fake models (one at a time: loading one evicts another; ``broken`` never starts),
    the activity log on, an admin key and a read-only key; ``alpha`` carries a secret in its
    environment and prints it while it loads."""
    startup_log = tmp_path / "alpha-startup.log"
    startup_log.write_text(f"loading with HF_TOKEN={PLANTED}\nmodel loaded\n")
    alpha = fake_cmd("--print-log", str(startup_log))
    models = (
        f"  alpha:\n    cmd: {alpha}\n    env:\n      HF_TOKEN: {PLANTED}\n"
        f"    description: the first fake\n"
        f"  beta:\n    cmd: {fake_cmd()}\n"
        f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n"
    )
    keys = (
        "apiKeys:\n"
        f"  - {{key: {ADMIN_KEY}, name: operator, scopes: [read, admin, inference]}}\n"
        f"  - {{key: {READ_KEY}, name: watcher, scopes: [read]}}\n"
    )
    return gateway(models, extra_top=keys)


@asynccontextmanager
async def connect(gw: Gateway, key: str, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(gw.url("/api/mcp"), http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call(client: Client, name: str, args: dict[str, Any] | None = None) -> str:
    result = await client.call_tool(name, args or {})
    assert not result.is_error, (name, text_of(result))
    return text_of(result)


async def call_json(client: Client, name: str, args: dict[str, Any] | None = None) -> Any:
    return json.loads(await call(client, name, args))


async def test_the_sdk_negotiates_2026_and_every_tool_answers(gw: Gateway) -> None:
    async with connect(gw, ADMIN_KEY) as client:
        assert client.protocol_version == "2026-07-28"  # server/discover answered
        assert client.server_info is not None
        assert client.server_info.name == "modelswap"
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(LLAMA_SWAP_NAMES) <= set(listed)
        assert "admin" in (listed["models__load_model"].description or "")
        assert listed["docs__get_doc"].input_schema["required"] == ["id"]

        # docs
        index = await call(client, "docs__list_docs")
        assert "- mcp — " in index
        assert "- scheduling — " in index
        found = await call(client, "docs__search_docs", {"query": "ttl unload"})
        assert "matches for 'ttl unload'" in found
        page = await call(client, "docs__get_doc", {"id": "scheduling", "max_lines": 5})
        assert page.startswith("# ")
        assert "lines 1-5 of" in page
        assert "offset=5" in page
        schema = await call_json(client, "docs__get_config_schema", {"path": "models.*.ttl"})
        assert schema["path"] == "models.*.ttl"
        assert schema["description"]

        # the config, by path and by llama-swap's jq form
        ids = await call_json(client, "config__get_config", {"query": ".models | keys"})
        assert ids["value"] == ["alpha", "beta", "broken"]
        described = await call_json(client, "config__get_config", {"path": "models.alpha"})
        assert described["value"]["description"] == "the first fake"

        # load alpha, then beta: alpha is evicted for it
        loaded = await call_json(client, "models__load_model", {"model": "alpha"})
        assert loaded == {"loaded": "alpha", "state": "ready"}
        await call_json(client, "models__load_model", {"model": "beta"})
        models = await call_json(client, "models__list_models")
        states = {row["id"]: row["state"] for row in models["models"]}
        assert states == {"alpha": "stopped", "beta": "ready", "broken": "stopped"}
        beta = await call_json(client, "models__list_models", {"model": "beta"})
        assert beta["id"] == "beta"
        assert beta["state"] == "ready"
        assert "since" in beta
        why = await call_json(client, "models__why_stopped", {"model": "alpha"})
        assert why["last_stop"]["reason"] == "evicted"
        assert why["last_stop"]["target"] == "beta"
        assert why["answer"].startswith("evicted to start beta")
        running = await call_json(client, "models__why_stopped", {"model": "beta"})
        assert running["answer"] == "beta has not stopped: it is ready."
        swaps = await call_json(client, "swaps__last_swaps")
        assert [s["target"] for s in swaps["swaps"]] == ["beta", "alpha"]
        # The load dry run (Runtime.dry_run, branch `dryrun`): listed once it is merged.
        if "models__dry_run" in listed:
            predicted = await call_json(client, "models__dry_run", {"model": "alpha"})
            assert predicted["model"] == "alpha"
            assert [e["model"] for e in predicted["evict"]] == ["beta"]
            after = await call_json(client, "models__list_models")
            assert {r["id"]: r["state"] for r in after["models"]} == states  # nothing started

        # what happened
        activity = await call_json(client, "activity__search_activity", {"limit": 5})
        assert activity["shown"] == len(activity["requests"])
        tail = await call(client, "logs__tail_log", {"model": "beta", "lines": 5})
        assert tail.startswith("The last ")
        assert "beta's log" in tail
        gateway_tail = await call(client, "logs__tail_log")
        assert "the gateway's log" in gateway_tail
        clock = await call(client, "sys__now", {"timezone": "Asia/Tokyo"})
        assert "UTC: " in clock
        assert "Asia/Tokyo: " in clock
        assert "+09:00" in clock

        # unload, reload
        unloaded = await call_json(client, "models__unload_model", {"model": "beta"})
        assert unloaded == {"unloaded": ["beta"]}
        reloaded = await call_json(client, "config__reload_config")
        assert reloaded["reloaded"] is True


async def test_the_handshake_revisions_answer_too(gw: Gateway) -> None:
    async with connect(gw, ADMIN_KEY, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        names = [tool.name for tool in (await client.list_tools()).tools]
        assert "docs__list_docs" in names
        assert "unix: " in await call(client, "sys__now")
    # every handshake revision is answered with itself; one not known, with the newest
    plain = {k: v for k, v in envelope("initialize").items() if not k.startswith("Mcp-")}
    for asked, spoken in (
        ("2024-11-05", "2024-11-05"),
        ("2025-06-18", "2025-06-18"),
        ("1999-01-01", "2025-11-25"),
    ):
        hello = rpc(
            "initialize",
            {
                "protocolVersion": asked,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        status, headers, text = await post(gw, hello, plain)
        result = json.loads(text)["result"]
        assert status == 200
        assert result["protocolVersion"] == spoken
        assert result["capabilities"] == {"tools": {"listChanged": False}}
        assert "mcp-session-id" not in {h.lower() for h in headers}  # stateless: no session
        status, _, text = await post(gw, rpc("ping"), {**plain, "MCP-Protocol-Version": spoken})
        assert json.loads(text)["result"] == {}


async def test_a_tool_that_fails_is_a_tool_error_not_an_http_error(gw: Gateway) -> None:
    async with connect(gw, ADMIN_KEY) as client:
        missing = await client.call_tool("models__why_stopped", {"model": "gamma"})
        assert missing.is_error
        assert "gamma" in text_of(missing)
        no_doc = await client.call_tool("docs__get_doc", {"id": "nowhere"})
        assert no_doc.is_error
        assert "docs__list_docs" in text_of(no_doc)
        bad_path = await client.call_tool("config__get_config", {"path": "models.nope"})
        assert bad_path.is_error
        assert "alpha, beta" in text_of(bad_path)
        failed = await client.call_tool("models__load_model", {"model": "broken"})
        assert failed.is_error  # a start that fails is the tool's error, with its diagnosis
        assert "broken" in text_of(failed)
        why = await call_json(client, "models__why_stopped", {"model": "broken"})
        assert why["state"] == "failed"
        assert why["last_failure"]["code"]
        bad_jq = await client.call_tool("config__get_config", {"query": ".models | length"})
        assert bad_jq.is_error
        assert "not other jq filters" in text_of(bad_jq)


async def test_a_read_key_is_refused_the_admin_tools_by_name_of_the_scope(gw: Gateway) -> None:
    async with connect(gw, READ_KEY) as client:
        assert "docs__list_docs" in [t.name for t in (await client.list_tools()).tools]
        assert (await call(client, "docs__search_docs", {"query": "scopes"})).strip()
        for name, args in (
            ("models__load_model", {"model": "alpha"}),
            ("models__unload_model", {}),
            ("config__reload_config", {}),
            ("config__get_config", {}),  # as GET /api/config: admin
        ):
            refused = await client.call_tool(name, args)
            assert refused.is_error, name
            text = text_of(refused)
            assert "`admin` scope" in text, text
            assert "(watcher)" in text, text
        models = await call_json(client, "models__list_models")
        assert {row["state"] for row in models["models"]} == {"stopped"}  # nothing was loaded


async def test_a_result_over_the_cap_is_cut_and_says_so(gw: Gateway) -> None:
    async with connect(gw, READ_KEY) as client:
        page = await call(client, "docs__get_doc", {"id": "configuration", "max_lines": 400})
        assert len(page.encode()) <= MAX_RESULT_BYTES
        assert "[truncated: " in page.splitlines()[-1]
        assert "bytes shown" in page.splitlines()[-1]


async def test_a_planted_secret_never_leaves(gw: Gateway) -> None:
    async with connect(gw, ADMIN_KEY) as client:
        await call(client, "models__load_model", {"model": "alpha"})
        config = await call_json(client, "config__get_config", {"path": "models.alpha.env"})
        assert config["value"] == {"HF_TOKEN": MASK}
        texts = [
            json.dumps(config),
            await call(client, "config__get_config"),
            await call(client, "logs__tail_log", {"model": "alpha", "lines": 50}),
            await call(client, "models__list_models", {"model": "alpha"}),
            await call(client, "models__list_models"),
            await call(client, "swaps__last_swaps"),
        ]
        tail = texts[2]
        assert "loading with HF_TOKEN=" in tail  # the line is there, its secret masked
        for text in texts:
            assert PLANTED not in text
            assert PLANTED[:12] not in text


def envelope(method: str, name: str | None = None) -> dict[str, str]:
    """llama-swap's stateless form: every POST names its revision, method and tool."""
    headers = {
        "Authorization": f"Bearer {ADMIN_KEY}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


async def post(
    gw: Gateway, body: object, headers: dict[str, str]
) -> tuple[int, dict[str, str], str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(gw.url("/api/mcp"), json=body, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.text()


def rpc(method: str, params: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}


async def test_llama_swaps_stateless_post_form_and_tool_names(gw: Gateway) -> None:
    status, headers, text = await post(gw, rpc("tools/list"), envelope("tools/list"))
    assert status == 200
    assert headers["Content-Type"].startswith("application/json")
    assert headers["MCP-Protocol-Version"] == "2026-07-28"
    listing = json.loads(text)["result"]
    assert set(LLAMA_SWAP_NAMES) <= {tool["name"] for tool in listing["tools"]}
    assert listing["ttlMs"] > 0
    assert listing["resultType"] == "complete"
    for name, args in (
        ("docs__list_docs", {}),
        ("docs__search_docs", {"query": "swap"}),
        ("docs__get_doc", {"id": "index"}),
        ("docs__get_config_schema", {"path": "models"}),
        ("config__get_config", {"query": '.models["beta"]'}),
        ("sys__now", {}),
    ):
        body = rpc("tools/call", {"name": name, "arguments": args})
        status, _, text = await post(gw, body, envelope("tools/call", name))
        result = json.loads(text)["result"]
        assert status == 200, (name, result)
        assert result["isError"] is False, (name, result)
        assert result["content"][0]["type"] == "text"
        assert result["content"][0]["text"]


async def test_the_transport_edges(gw: Gateway) -> None:
    # one event when the client takes only an event stream
    only_events = {**envelope("ping"), "Accept": "text/event-stream"}
    status, headers, text = await post(gw, rpc("ping", rid=7), only_events)
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    assert text.startswith("event: message\ndata: ")
    assert text.endswith("\n\n")
    assert json.loads(text.split("data: ", 1)[1]) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"resultType": "complete"},
    }
    # a notification is accepted with nothing to say
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _, text = await post(gw, note, envelope("notifications/initialized"))
    assert (status, text) == (202, "")
    # headers that contradict the body, a revision not spoken, a method not served
    status, _, text = await post(gw, rpc("tools/list"), envelope("ping"))
    assert status == 400
    assert json.loads(text)["error"]["code"] == -32020
    wrong_name = rpc("tools/call", {"name": "sys__now", "arguments": {}})
    status, _, text = await post(gw, wrong_name, envelope("tools/call", "docs__list_docs"))
    assert status == 400
    assert json.loads(text)["error"]["code"] == -32020
    old = {**envelope("tools/list"), "Mcp-Protocol-Version": "2023-01-01"}
    status, _, text = await post(gw, rpc("tools/list"), old)
    refused = json.loads(text)["error"]
    assert status == 400
    assert refused["code"] == -32022
    assert "2026-07-28" in refused["data"]["supported"]
    status, _, text = await post(gw, rpc("resources/list"), envelope("resources/list"))
    assert json.loads(text)["error"]["code"] == -32601
    unknown = rpc("tools/call", {"name": "nope", "arguments": {}})
    status, _, text = await post(gw, unknown, envelope("tools/call", "nope"))
    assert json.loads(text)["error"]["code"] == -32602
    # a batch, and a body that is not JSON
    status, _, text = await post(gw, [rpc("ping")], envelope("ping"))
    assert status == 400
    assert json.loads(text)["error"]["code"] == -32600
    async with (
        aiohttp.ClientSession() as session,
        session.post(gw.url("/api/mcp"), data=b"{nope", headers=envelope("ping")) as resp,
    ):
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32700
        # no server-initiated stream: GET is 405 and says what is allowed
        async with session.get(gw.url("/api/mcp"), headers=envelope("ping")) as got:
            assert got.status == 405
            assert got.headers["Allow"] == "POST"
        # the route needs a key with the read scope
        async with session.post(gw.url("/api/mcp"), json=rpc("ping")) as anonymous:
            assert anonymous.status == 401
