"""The configuration reference (docs/configuration.md) is generated from the config's schema
(``modelswap.config.reference``): every key has a description, and the checked-in page is what
the generator writes today. Pure: no sockets, no processes."""

from __future__ import annotations

from pathlib import Path

from modelswap.config.reference import REGENERATE, render, undocumented, walk

REPO = Path(__file__).resolve().parents[3]
PAGE = REPO / "docs" / "configuration.md"


def test_every_config_key_has_a_description() -> None:
    missing = undocumented()
    assert missing == [], (
        f"config keys without a description: {', '.join(missing)} — give each field a "
        f"Field(description=...) in src/modelswap/config/schema*.py, then run `{REGENERATE}`"
    )


def test_the_checked_in_reference_is_what_the_generator_writes() -> None:
    assert PAGE.read_text() == render(), (
        f"docs/configuration.md is stale: run `{REGENERATE}` and commit the result"
    )


def test_the_reference_lists_nested_keys_as_users_write_them() -> None:
    paths = {key.path for key in walk()}
    # aliases, not field names; mappings as `*`, lists as `[]`, at every depth
    assert {
        "models.*.cmd",
        "models.*.timeouts.firstByte",
        "models.*.aliasFilters.*.setParams",
        "limits.headerTimeout",
        "limits.maxConnectionsPerClient",
        "apiKeys[].scopes",
        "peers.*.discover.dns",
        "hooks.onStartup.preload",
        "promptCache.diskBudget",
    } <= paths
    # never the Python names of aliased fields
    assert not {"limits.header_timeout", "models.*.timeouts.first_byte", "startTimeout."} & paths
    page = PAGE.read_text()
    assert all(f"| `{path}` |" in page for path in paths)
