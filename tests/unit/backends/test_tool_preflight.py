"""Which requests the tool-choice preflight refuses before a start (issue 18)."""

from __future__ import annotations

from modelswap.backends.hints import (
    TOOL_CHOICE_HINT,
    asks_for_auto_tool_choice,
    auto_tool_choice_unsupported,
)

TOOLS = [{"type": "function", "function": {"name": "f"}}]
VLLM = ("vllm", "serve", "Qwen/Qwen3-8B")


def test_only_automatic_tool_choice_with_tools_counts() -> None:
    assert asks_for_auto_tool_choice({"tools": TOOLS})
    assert asks_for_auto_tool_choice({"tools": TOOLS, "tool_choice": "auto"})
    assert asks_for_auto_tool_choice({"tools": TOOLS, "tool_choice": {"type": "auto"}})
    for choice in ("none", "required", {"type": "function", "function": {"name": "f"}}):
        assert not asks_for_auto_tool_choice({"tools": TOOLS, "tool_choice": choice})
    assert not asks_for_auto_tool_choice({"tools": [], "tool_choice": "auto"})
    assert not asks_for_auto_tool_choice({"messages": []})
    assert not asks_for_auto_tool_choice(None)


def test_a_vllm_command_without_both_flags_gets_the_hint() -> None:
    assert auto_tool_choice_unsupported(VLLM, "auto") == TOOL_CHOICE_HINT
    half = (*VLLM, "--enable-auto-tool-choice")
    assert auto_tool_choice_unsupported(half, "auto") == TOOL_CHOICE_HINT
    both = (*half, "--tool-call-parser=hermes")
    assert auto_tool_choice_unsupported(both, "auto") is None
    assert auto_tool_choice_unsupported(("python", "x.py"), "vllm") == TOOL_CHOICE_HINT
    assert auto_tool_choice_unsupported(("python", "x.py"), "auto") is None  # not vLLM
    assert auto_tool_choice_unsupported(VLLM, "llamacpp") is None  # told otherwise
