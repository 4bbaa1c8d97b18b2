"""What real third-party clients found (issue 18), driven with those clients: the ``openai``
SDK's ``models.retrieve``, request ids end to end, and the gateway owning CORS.

Backends and peers here are the fakes (``openai_backend.py``, ``recording_peer.py``); the
``anthropic`` SDK against the real llama.cpp server is in ``test_anthropic.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
from tests.e2e.conftest import HANG, REPO, Gateway, fake_cmd, free_port, request

pytestmark = pytest.mark.e2e

RECORDER = REPO / "tests" / "fakes" / "recording_peer.py"
ALL_KEY = "sk-clients-all-0123456789"
ORG_KEY = "sk-clients-org-0123456789"


class Peer:
    def __init__(self, port: int, record: Path) -> None:
        self.port, self.record = port, record
        self.url = f"http://127.0.0.1:{port}"

    def requests(self, path: str) -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        rows = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [row for row in rows if row["path"] == path]


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Callable[..., Peer]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> Peer:
        port, record = free_port(), tmp_path / f"peer-{len(started)}.jsonl"
        cmd = [sys.executable, str(RECORDER), "--port", str(port), "--record", str(record)]
        proc = subprocess.Popen([*cmd, *flags], stdin=subprocess.DEVNULL)
        started.append(proc)
        _wait_serving(f"http://127.0.0.1:{port}/health", proc)
        return Peer(port, record)

    yield start
    for proc in started:  # by handle: only what this fixture started
        proc.terminate()
        try:
            proc.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_serving(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the recording peer exited"
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"{url} did not answer")


@pytest.fixture
def sdk() -> Iterator[Callable[..., openai.OpenAI]]:
    """Factory: an ``openai`` client for a gateway and key, closed after the test."""
    made: list[openai.OpenAI] = []

    def make(gw: Gateway, key: str = ALL_KEY) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=gw.url("/v1"), api_key=key, max_retries=0, timeout=HANG))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_models_retrieve_answers_listed_ids_aliases_and_peer_models_the_key_may_use(
    gateway: Callable[..., Gateway], peer: Callable[..., Peer], sdk: Callable[..., openai.OpenAI]
) -> None:
    box = peer("--models", "beta")
    gw = gateway(
        f"  org/smol:\n    cmd: {fake_cmd()}\n    aliases: [smol]\n"
        f"  other:\n    cmd: {fake_cmd()}\n"
        f"  hidden:\n    cmd: {fake_cmd()}\n    unlisted: true\n",
        extra_top=(
            f"apiKeys:\n  - {ALL_KEY}\n  - {{key: {ORG_KEY}, name: org, models: ['org/*']}}\n"
            f"peers:\n  box:\n    proxy: {box.url}\n    models: [beta]\n"
        ),
    )
    client = sdk(gw)
    model = client.models.retrieve("org/smol")  # the SDK sends org%2Fsmol
    assert (model.id, model.object, model.owned_by) == ("org/smol", "model", "modelswap")
    listed = {row.id: row for row in client.models.list()}
    assert model.model_dump() == listed["org/smol"].model_dump()  # exactly what the list says
    alias = client.models.retrieve("smol")
    assert alias.id == "smol"
    assert alias.model_dump()["alias_for"] == "org/smol"
    remote = client.models.retrieve("box/beta")
    assert (remote.id, remote.owned_by) == ("box/beta", "box")

    for missing, key in (("hidden", ALL_KEY), ("nothing", ALL_KEY), ("other", ORG_KEY)):
        with pytest.raises(openai.NotFoundError) as info:
            sdk(gw, key).models.retrieve(missing)
        error = info.value.response.json()["error"]
        assert error["code"] == "model_not_found", missing
        assert error["type"] == "invalid_request_error"
        assert missing in info.value.message
    assert sdk(gw, ORG_KEY).models.retrieve("org/smol").id == "org/smol"
    with pytest.raises(openai.AuthenticationError):
        sdk(gw, "sk-wrong-key-000000000").models.retrieve("org/smol")
    plain = request(gw, "GET", "/v1/models/org/smol", headers={"x-api-key": ALL_KEY})
    assert plain.status == 200  # an unencoded slash names the same id
    assert plain.json()["id"] == "org/smol"
