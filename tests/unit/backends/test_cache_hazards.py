"""What stands against a llama.cpp model's prompt cache kept across a swap (issue 38): read
from its command line, its start's log (captured) and what /props said it takes."""

from __future__ import annotations

from pathlib import Path

from modelswap.backends import registry
from modelswap.backends.llamacpp import cache_hazards
from modelswap.reported import ModelMetadata

LOGS = Path(__file__).resolve().parents[2] / "data" / "startup-logs"
SERVER = ("llama-server", "-m", "m.gguf")
SWA_LOG = [
    "print_info: n_swa                 = 4096",
    "print_info: is_swa_any            = 1",
]


def codes(argv: tuple[str, ...], inputs: tuple[str, ...] | None, lines: list[str]) -> list[str]:
    return [h.code for h in cache_hazards(argv, inputs, lines)]


def test_a_plain_model_has_none() -> None:
    lines = (LOGS / "llamacpp-cpu-smollm2.log").read_text().splitlines()  # n_swa = 0
    assert codes(SERVER, ("text",), lines) == []


def test_a_sliding_window_without_swa_full() -> None:
    (hazard,) = cache_hazards(SERVER, None, SWA_LOG)
    assert hazard.code == "swa"
    assert "4096" in hazard.reason
    assert "--swa-full" in hazard.fix
    assert codes((*SERVER, "--swa-full"), None, SWA_LOG) == []


def test_a_hybrid_model_by_its_recurrent_memory() -> None:
    lines = (LOGS / "llamacpp-success.log").read_text().splitlines()  # llama_memory_recurrent
    assert codes(SERVER, None, lines) == ["hybrid"]
    assert codes((*SERVER, "--swa-full"), None, lines) == []


def test_a_projector_by_its_flag_or_by_props() -> None:
    for argv in (
        (*SERVER, "--mmproj", "p.gguf"),
        (*SERVER, "-mm", "p.gguf"),
        (*SERVER, "--mmproj=p"),
    ):
        assert codes(argv, None, []) == ["mmproj"], argv
    assert codes(SERVER, ("text", "image"), []) == ["mmproj"]
    assert codes((*SERVER, "--mmproj", "p.gguf", "--no-mmproj"), ("text",), []) == []
    assert "21133" in cache_hazards((*SERVER, "-mm", "p"), None, [])[0].reason


def test_the_registry_asks_the_servers_adapter() -> None:
    meta = ModelMetadata("llamacpp", 4096, inputs=("text", "audio"))
    found = registry.cache_hazards("auto", ("python", "server.py"), meta, SWA_LOG)
    assert [h.code for h in found] == ["mmproj", "swa"]
    vllm = ModelMetadata("vllm", 4096)
    assert registry.cache_hazards("auto", ("vllm", "serve", "m"), vllm, SWA_LOG) == ()
