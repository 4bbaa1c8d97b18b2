"""``models.*.capabilities`` validated as llama-swap's (issue 30): ``in``/``out`` of text, audio
and image, ``tools``, ``reranker``, ``context`` >= 0 and ``disableAuto``; a key not written
stays unset, so what the backend reported may fill it."""

from __future__ import annotations

import pytest

from modelswap.config import load_config_text
from modelswap.config.resolved import Capabilities
from modelswap.errors import ConfigError


def capabilities_of(block: str, top: str = "") -> Capabilities:
    text = f"{top}models:\n  m:\n    cmd: x --port ${{PORT}}\n    capabilities: {block}\n"
    return load_config_text(text).models["m"].capabilities


def problem(block: str) -> str:
    with pytest.raises(ConfigError) as failed:
        capabilities_of(block)
    return str(failed.value)


def test_each_key_is_read_and_one_not_written_stays_unset() -> None:
    assert capabilities_of(
        "{in: [text, audio, image], out: [text], tools: true, reranker: false, context: 32000}"
    ) == Capabilities(("text", "audio", "image"), ("text",), True, False, 32000, False)
    assert capabilities_of("{tools: false}") == Capabilities(tools=False)
    assert capabilities_of("{disableAuto: true}") == Capabilities(disable_auto=True)
    assert capabilities_of("{in: [], context: 0}") == Capabilities(inputs=(), context=0)
    plain = load_config_text("models:\n  m:\n    cmd: x --port ${PORT}\n").models["m"]
    assert plain.capabilities == Capabilities()


def test_a_macro_gives_the_context_its_number() -> None:
    assert capabilities_of("{context: '${ctx}'}", top="macros: {ctx: 4096}\n").context == 4096


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("{in: [text, video]}", "models.m.capabilities.in[1]: must be 'text', 'audio' or 'image'"),
        ("{out: [speech]}", "models.m.capabilities.out[0]: must be 'text', 'audio' or 'image'"),
        ("{context: -1}", "models.m.capabilities.context: must be greater than or equal to 0"),
        ("{context: 4k}", "models.m.capabilities.context: expected an integer"),
        ("{tools: yes-please}", "models.m.capabilities.tools: expected true or false"),
        ("{vision: true}", "models.m.capabilities.vision: unknown key"),
        ("[vision, tools]", "models.m.capabilities: expected a mapping, got a list"),
    ],
)
def test_what_llamaswap_would_refuse_is_refused(block: str, message: str) -> None:
    assert message in problem(block)


@pytest.mark.parametrize(
    ("block", "mapping"),
    [
        ("[vision, tools]", "write it as {in: [text, image], out: [text], tools: true}"),
        ("[chat, rerank]", "write it as {in: [text], out: [text], reranker: true}"),
        ("[audio_transcriptions]", "write it as {in: [audio], out: [text]}"),
        ("[embeddings]", "write it as a mapping, e.g. {in: [text, image], out: [text]"),
    ],
)
def test_the_old_list_form_is_refused_with_the_mapping_it_is_now(block: str, mapping: str) -> None:
    """Issue 41: one message naming the key path, the list called the old form, and the
    mapping to write instead (the names it knows translated)."""
    message = problem(block)
    assert "models.m.capabilities: expected a mapping, got a list (the old form); " in message
    assert mapping in message
    assert message.count("models.m.capabilities") == 1
