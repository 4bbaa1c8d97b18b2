"""A reload keeps each model's ${PORT}: ``ports`` passed to the loader wins over file order."""

from __future__ import annotations

from modelswap.config import load_config_text

THREE = (
    "startPort: 6000\nmodels:\n"
    "  a:\n    cmd: srv --port ${PORT}\n"
    "  new:\n    cmd: srv --port ${PORT}\n"
    "  b:\n    cmd: srv --port ${PORT}\n"
)


def ports(text: str, keep: dict[str, int] | None = None) -> dict[str, int | None]:
    config = load_config_text(text, environ={}, ports=keep)
    return {m: cfg.port for m, cfg in config.models.items()}


def test_without_previous_ports_they_follow_the_file_order() -> None:
    assert ports(THREE) == {"a": 6000, "new": 6001, "b": 6002}


def test_a_model_inserted_in_the_middle_takes_a_free_port() -> None:
    kept = ports(THREE, {"a": 6000, "b": 6001})
    assert kept == {"a": 6000, "new": 6002, "b": 6001}
    config = load_config_text(THREE, environ={}, ports={"a": 6000, "b": 6001})
    assert config.models["b"].cmd == ("srv", "--port", "6001")  # unchanged command


def test_kept_ports_out_of_range_or_shared_are_reassigned() -> None:
    # startPort moved: old ports no longer in range; two models claiming one port.
    assert ports(THREE, {"a": 5000, "new": 6001, "b": 6001}) == {
        "a": 6000,
        "new": 6001,
        "b": 6002,
    }
