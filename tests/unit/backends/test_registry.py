"""The adapters behind one protocol (issue 31): which one speaks for a model, and the knowledge
that lower layers receive as data instead of comparing a backend's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelswap.backends import registry
from modelswap.backends.adapter import BackendAdapter
from modelswap.reported import ModelMetadata

NAMES = ("vllm", "sglang", "llamacpp", "ollama", "generic")


def test_one_adapter_per_backend_kind_the_config_names() -> None:
    assert tuple(a.name for a in registry.ADAPTERS) == NAMES
    for adapter in registry.ADAPTERS:
        assert isinstance(adapter.name, str)
        checked: BackendAdapter = adapter  # the protocol, checked by mypy
        assert registry.named(checked.name) is adapter
    assert registry.named("auto") is registry.GENERIC
    assert registry.configured("auto") is None
    assert registry.configured("generic") is None
    assert registry.configured("vllm") is registry.named("vllm")


@pytest.mark.parametrize("name", NAMES)
def test_each_adapter_module_says_which_versions_its_patterns_come_from(name: str) -> None:
    module = __import__(f"modelswap.backends.{name}", fromlist=["_"])
    assert module.__doc__ is not None
    assert re.search(r"\d+\.\d+|build", module.__doc__), module.__doc__


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (("vllm", "serve", "Qwen/Qwen3-8B"), "vllm"),
        (("python", "-m", "vllm.entrypoints.openai.api_server"), "vllm"),
        (("docker", "run", "vllm/vllm-openai:latest"), "vllm"),
        (("python", "-m", "sglang.launch_server", "--model-path", "m"), "sglang"),
        (("/opt/llama/llama-server", "-m", "m.gguf"), "llamacpp"),
        (("python", "-m", "modelswap.launchers.llamacpp", "-m", "m.gguf"), "llamacpp"),
        (("ollama", "serve"), "ollama"),
        (("python", "server.py"), "generic"),
    ],
)
def test_auto_recognises_the_command(argv: tuple[str, ...], name: str) -> None:
    assert registry.for_command("auto", argv).name == name
    assert registry.for_command("sglang", argv).name == "sglang"  # the config wins


def test_owned_by_names_the_server_except_ollamas_namespace() -> None:
    assert [registry.owning(o) for o in ("vllm", "sglang", "llamacpp")] == [
        registry.named(n) for n in ("vllm", "sglang", "llamacpp")
    ]
    assert registry.owning("library") is None
    assert registry.owning(None) is None


LLAMA = ("/opt/llama/llama-server", "-m", "m.gguf")
OTHER = ("python", "server.py")


@pytest.mark.parametrize("backend", ["auto", *NAMES])
@pytest.mark.parametrize("reported", [None, *NAMES])
@pytest.mark.parametrize("argv", [LLAMA, OTHER])
def test_only_a_llamacpp_server_is_asked_for_its_slots(
    backend: str, reported: str | None, argv: tuple[str, ...]
) -> None:
    meta = None if reported is None else ModelMetadata(reported, 4096)
    why = registry.why_no_slots(backend, argv, meta)
    configured = registry.for_command(backend, argv).name
    expected = configured in ("llamacpp", "generic") and reported in (None, "llamacpp")
    assert (why is None) is expected, why


def test_a_command_that_names_another_server_is_not_asked_for_slots() -> None:
    # issue 41 item 6: before its probe answers, a vLLM command is known by its command line
    why = registry.why_no_slots("auto", ("vllm", "serve", "m"), None)
    assert why is not None
    assert "vllm" in why
    assert registry.why_no_slots("auto", OTHER, None) is None  # it may be llama-server: asked


def test_failure_rules_come_in_root_cause_order() -> None:
    codes = [rule.code for rule in registry.failure_rules()]
    order = [registry.ROOT_CAUSE_ORDER.index(code) for code in codes]
    assert order == sorted(order)
    assert set(codes) == set(registry.ROOT_CAUSE_ORDER)


def _engine_before(argv: tuple[str, ...], path: Path) -> str:
    """planner/from_config.engine_of before the adapters gave the planner its memory models."""
    text = " ".join(a.rsplit("/", 1)[-1] for a in argv).lower()
    if "vllm" in text or "sglang" in text:
        return "vllm"
    if "llama" in text or path.suffix.lower() == ".gguf":
        return "llamacpp"
    return "vllm"


@pytest.mark.parametrize(
    "argv",
    [
        ("vllm", "serve", "/m"),
        ("python", "-m", "sglang.launch_server"),
        ("/usr/bin/llama-server", "-m", "/m"),
        ("python", "x.py", "/m"),
    ],
)
@pytest.mark.parametrize("path", [Path("/m/model.gguf"), Path("/m/folder")])
def test_the_planners_engine_for_a_command_is_unchanged(argv: tuple[str, ...], path: Path) -> None:
    assert registry.memory_model_for(argv, path).engine == _engine_before(argv, path)


def test_memory_models_the_planner_offers() -> None:
    assert tuple(registry.MEMORY_MODELS) == ("vllm", "llamacpp")
    assert registry.default_memory(gguf=True).engine == "llamacpp"
    assert registry.default_memory(gguf=False).engine == "vllm"
    with pytest.raises(ValueError, match="engine must be one of vllm, llamacpp"):
        registry.memory_model("sglang")


def test_the_configured_limits_read_every_adapters_flags_as_before() -> None:
    assert registry.limit_flags() == {
        "--max-model-len": "max_model_len",
        "--context-length": "max_model_len",  # SGLang
        "-c": "ctx_size",
        "--ctx-size": "ctx_size",
        "--max-num-seqs": "max_num_seqs",
        "-np": "parallel",
        "--parallel": "parallel",
    }
