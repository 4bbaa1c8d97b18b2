"""apply_layers: strip, then default (when absent), then set; layers in order; in place."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from modelswap.config.load import load_config
from modelswap.config.resolved import Filters, ModelConfig, Timeouts
from modelswap.errors import ConfigError
from modelswap.http.relay.apply_filters import apply_layers


def filters(
    strip: tuple[str, ...] = (),
    set_: dict[str, Any] | None = None,
    default: dict[str, Any] | None = None,
) -> Filters:
    return Filters(
        strip_params=strip,
        set_params=MappingProxyType(set_ or {}),
        default_params=MappingProxyType(default or {}),
    )


BASE = {"model": "m", "temperature": 0.9, "top_k": 40}

CASES: list[tuple[str, dict[str, Any], list[Filters], dict[str, Any]]] = [
    ("strip", BASE, [filters(strip=("top_k",))], {"model": "m", "temperature": 0.9}),
    ("strip missing key is fine", {"model": "m"}, [filters(strip=("x",))], {"model": "m"}),
    ("default when absent", {"model": "m"}, [filters(default={"n": 2})], {"model": "m", "n": 2}),
    ("default keeps client value", BASE, [filters(default={"top_k": 1})], BASE),
    ("set forces", BASE, [filters(set_={"top_k": 1})], {**BASE, "top_k": 1}),
    (
        "strip then default re-adds",
        BASE,
        [filters(strip=("top_k",), default={"top_k": 5})],
        {**BASE, "top_k": 5},
    ),
    (
        "set wins over default",
        {"model": "m"},
        [filters(default={"t": 1}, set_={"t": 2})],
        {"model": "m", "t": 2},
    ),
    (
        "any JSON value",
        {"model": "m"},
        [filters(set_={"a": [1, "x"], "b": {"c": None}, "d": True, "e": "s", "f": 1.5})],
        {"model": "m", "a": [1, "x"], "b": {"c": None}, "d": True, "e": "s", "f": 1.5},
    ),
    (
        "alias layer on top of the model's",
        BASE,
        [filters(set_={"temperature": 0.1, "x": 1}), filters(set_={"temperature": 0.7})],
        {**BASE, "temperature": 0.7, "x": 1},
    ),
    (
        "alias strips what the model set",
        BASE,
        [filters(set_={"x": 1}), filters(strip=("x",))],
        BASE,
    ),
    (
        "model is protected",
        BASE,
        [filters(strip=("model",), set_={"model": "other"}, default={"model": "z"})],
        BASE,
    ),
]


@pytest.mark.parametrize(
    ("body", "layers", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_apply_layers(
    body: dict[str, Any], layers: list[Filters], expected: dict[str, Any]
) -> None:
    data = dict(body)
    changed = apply_layers(data, layers)
    assert data == expected
    assert changed or expected == body


@pytest.mark.parametrize(
    "layers",
    [
        [],
        [Filters()],
        [filters(strip=("absent",))],
        [filters(default={"temperature": 0.1})],
        [filters(set_={"temperature": 0.9, "top_k": 40})],
        [filters(strip=("model",), set_={"model": "x"})],
    ],
)
def test_no_change_is_reported_as_none(layers: list[Filters]) -> None:
    # The caller then forwards the client's very bytes (dispatch.prepare_body).
    data = dict(BASE)
    assert apply_layers(data, layers) is False
    assert data == BASE


def test_set_distinguishes_true_from_one() -> None:
    data: dict[str, object] = {"model": "m", "flag": 1}
    assert apply_layers(data, [filters(set_={"flag": True})]) is True
    assert data["flag"] is True


def test_model_config_layers_by_name() -> None:
    model_f, alias_f = filters(set_={"a": 1}), filters(set_={"b": 2})
    cfg = ModelConfig(
        id="m",
        cmd=("x",),
        cmd_stop=None,
        proxy="http://127.0.0.1:1",
        port=None,
        aliases=("fast", "plain"),
        use_model_name=None,
        env=MappingProxyType({}),
        check_endpoint=None,
        ttl=0,
        unlisted=False,
        name=None,
        description=None,
        backend="generic",
        timeouts=Timeouts(),
        start_timeout=1,
        silence_timeout=1,
        failure_backoff=1,
        filters=model_f,
        alias_filters=MappingProxyType({"fast": alias_f}),
    )
    assert cfg.filters_for("m") == (model_f,)
    assert cfg.filters_for("plain") == (model_f,)
    assert cfg.filters_for("fast") == (model_f, alias_f)
    assert ModelConfig.__dataclass_fields__["filters"].default == Filters()


def test_config_resolves_filters_and_reports_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "models:\n  m:\n    cmd: srv --port ${PORT}\n    aliases: [fast]\n"
        "    filters: {stripParams: [top_k], defaultParams: {n: 1}, setParams: {o: {p: [1]}}}\n"
        "    aliasFilters: {fast: {setParams: {t: 0.1}}}\n"
    )
    model = load_config(path, environ={}).models["m"]
    assert model.filters == filters(strip=("top_k",), default={"n": 1}, set_={"o": {"p": [1]}})
    assert model.filters_for("fast")[1].set_params == {"t": 0.1}

    path.write_text(
        "models:\n  m:\n    cmd: srv --port ${PORT}\n    aliases: [fast]\n"
        "    filters: {stripParams: [model]}\n"
        "    aliasFilters: {slow: {}, fast: {defaultParams: {model: x}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    text = str(info.value)
    assert "models.m.filters.stripParams[0]: `model` cannot be filtered" in text
    assert "models.m.aliasFilters.slow: 'slow' is not an alias of this model" in text
    assert "models.m.aliasFilters.fast.defaultParams.model: `model` cannot be filtered" in text

    path.write_text(
        "models:\n  m:\n    cmd: srv --port ${PORT}\n    filters: {setParams: {when: 2024-01-01}}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert "models.m.filters.setParams.when: expected a JSON value" in str(info.value)
