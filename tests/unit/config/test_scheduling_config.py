"""Scheduling settings (issue 6): sizes, groups, budgets, keep-warm — resolved and checked at
load time with the key path of every problem — and how the runtime wires them into the
scheduler (swapper, policy, declared-else-measured memory, eviction cost)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from modelswap.config import Config, load_config_text
from modelswap.config.scheduling import format_size, parse_size
from modelswap.errors import ConfigError
from modelswap.model_stats import DEFAULT_START_SECONDS
from modelswap.routing.swappers import (
    BudgetSwapper,
    CombinedSwapper,
    ExclusiveSwapper,
    GroupSwapper,
)
from modelswap.runtime import Runtime

GIB = 1024**3
MIB = 1024**2
CMD = "cmd: srv --port ${PORT}"


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), environ={})


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value.problems


def models(*ids: str, extra: dict[str, str] | None = None) -> str:
    """A ``models:`` block; ``extra`` adds YAML flow-mapping entries per model id."""
    lines = ["models:"]
    for model_id in ids:
        more = (extra or {}).get(model_id, "")
        lines.append(f"  {model_id}: {{cmd: 'srv --port ${{PORT}}'{', ' + more if more else ''}}}")
    return "\n".join(lines) + "\n"


# ---- sizes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (34359738368, 32 * GIB),
        (0, 0),
        ("32GiB", 32 * GIB),
        ("32 GiB", 32 * GIB),
        ("512 MiB", 512 * MIB),
        ("512mib", 512 * MIB),
        ("1.5GB", 1_500_000_000),
        ("1.5 gb", 1_500_000_000),
        ("2TiB", 2 * 1024**4),
        ("64KiB", 64 * 1024),
        ("100", 100),
        ("100B", 100),
        (" 8G ", 8_000_000_000),
        ("0.5GiB", GIB // 2),
    ],
)
def test_parse_size_accepts(text: int | str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["32GiBs", "12XB", "1.5.2GB", "GiB", "", "-1GiB", "32 Gi B", "1e9", "ten GB"]
)
def test_parse_size_rejects_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


def test_parse_size_rejects_negative_and_boolean() -> None:
    with pytest.raises(ValueError, match="negative"):
        parse_size(-1)
    with pytest.raises(ValueError, match="boolean"):
        parse_size(True)


@pytest.mark.parametrize(
    ("size", "text"),
    [(32 * GIB, "32.0 GiB"), (512 * MIB, "512.0 MiB"), (1536, "1.5 KiB"), (10, "10 B")],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_resources_and_uses_are_resolved_to_bytes() -> None:
    config = load(
        "resources: {gpu0: 32GiB, ram: 1.5GB, disk: 1073741824}\n"
        + models("a", "b", extra={"a": "uses: {gpu0: 22GiB, ram: 512 MiB}"})
    )
    sched = config.scheduling
    assert dict(sched.resources) == {"gpu0": 32 * GIB, "ram": 1_500_000_000, "disk": GIB}
    assert dict(config.models["a"].uses) == {"gpu0": 22 * GIB, "ram": 512 * MIB}
    assert dict(config.models["b"].uses) == {}


def test_bad_size_in_resources_is_reported_with_its_key_path() -> None:
    found = problems("resources: {gpu0: 32GiBs, ram: 8GiB}\n" + models("a"))
    assert [path for path, _ in found] == ["resources.gpu0"]
    assert "32GiBs" in found[0][1]


def test_bad_size_in_uses_is_reported_with_its_key_path() -> None:
    found = problems("resources: {gpu0: 32GiB}\n" + models("a", extra={"a": "uses: {gpu0: 2XB}"}))
    assert [path for path, _ in found] == ["models.a.uses.gpu0"]


def test_float_size_is_a_schema_error() -> None:
    found = problems("resources: {gpu0: 1.5}\n" + models("a"))
    assert found
    assert found[0][0].startswith("resources.gpu0")


# ---- groups ---------------------------------------------------------------------------------


def test_groups_resolve_with_llama_swap_defaults() -> None:
    config = load(
        textwrap.dedent(
            """\
            groups:
              small: {members: [a, b], swap: false, exclusive: false}
              pinned: {members: [c], persistent: true}
              plain: {members: [d]}
            """
        )
        + models("a", "b", "c", "d")
    )
    groups = {g.name: g for g in config.scheduling.groups}
    assert groups["small"].members == ("a", "b")
    assert (groups["small"].swap, groups["small"].exclusive, groups["small"].persistent) == (
        False,
        False,
        False,
    )
    assert (groups["pinned"].swap, groups["pinned"].exclusive, groups["pinned"].persistent) == (
        True,
        True,
        True,
    )
    assert (groups["plain"].swap, groups["plain"].exclusive, groups["plain"].persistent) == (
        True,
        True,
        False,
    )


def test_unknown_group_member_is_reported_with_its_index() -> None:
    found = problems("groups:\n  g: {members: [a, ghost]}\n" + models("a"))
    assert found == [("groups.g.members[1]", "'ghost' is not a model id")]


def test_group_without_members_is_accepted_and_constrains_nothing() -> None:
    config = load_config_text("groups:\n  g: {members: []}\n" + models("a"))
    assert config.scheduling.groups == ()


def test_unknown_group_key_is_rejected() -> None:
    found = problems("groups:\n  g: {members: [a], exclusiv: true}\n" + models("a"))
    assert found
    assert "groups.g.exclusiv" in found[0][0]


# ---- budgets --------------------------------------------------------------------------------


def test_uses_key_not_in_resources_is_reported() -> None:
    found = problems("resources: {gpu0: 32GiB}\n" + models("a", extra={"a": "uses: {vram: 1GiB}"}))
    assert len(found) == 1
    path, message = found[0]
    assert path == "models.a.uses.vram"
    assert "'vram' is not in resources" in message
    assert "gpu0" in message


def test_uses_without_any_resources_is_reported() -> None:
    found = problems(models("a", extra={"a": "uses: {gpu0: 1GiB}"}))
    assert found == [("models.a.uses.gpu0", "'gpu0' is not in resources (declared: none)")]


def test_model_that_cannot_fit_alone_is_rejected_at_check_with_the_key_path() -> None:
    found = problems(
        "resources: {gpu0: 32GiB, ram: 64GiB}\n"
        + models(
            "big",
            "ok",
            extra={"big": "uses: {gpu0: 40GiB, ram: 8GiB}", "ok": "uses: {gpu0: 32GiB}"},
        )
    )
    assert len(found) == 1
    path, message = found[0]
    assert path == "models.big.uses.gpu0"
    assert "cannot fit even alone" in message
    assert "40.0 GiB" in message
    assert "32.0 GiB" in message


def test_models_that_fit_only_one_at_a_time_are_accepted() -> None:
    config = load(
        "resources: {ram: 2GiB}\n"
        + models("a", "b", extra={"a": "uses: {ram: 2GiB}", "b": "uses: {ram: 2GiB}"})
    )
    assert config.scheduling.resources["ram"] == 2 * GIB


# ---- keep-warm ------------------------------------------------------------------------------


def test_preload_unknown_model_is_reported_with_its_index() -> None:
    found = problems("hooks:\n  onStartup:\n    preload: [a, nope]\n" + models("a"))
    assert found == [("hooks.onStartup.preload[1]", "'nope' is not a model id")]


def test_preload_and_default_model_resolve() -> None:
    config = load(
        "hooks: {onStartup: {preload: [b, a]}}\ndefaultModel: a\ndefaultAfter: 30\n"
        + models("a", "b")
    )
    assert config.scheduling.preload == ("b", "a")
    assert config.scheduling.default_model == "a"
    assert config.scheduling.default_after == 30


def test_default_model_unknown_is_reported() -> None:
    found = problems("defaultModel: ghost\n" + models("a"))
    assert found == [("defaultModel", "'ghost' is not a model id")]


def test_global_ttl_is_the_default_for_models_without_ttl() -> None:
    config = load("globalTTL: 300\n" + models("a", "b", "c", extra={"b": "ttl: 60", "c": "ttl: 0"}))
    assert config.models["a"].ttl == 300
    assert config.models["b"].ttl == 60
    assert config.models["c"].ttl == 0  # an explicit 0 keeps it loaded


def test_global_ttl_defaults_to_zero() -> None:
    assert load(models("a")).models["a"].ttl == 0


def test_scheduling_defaults() -> None:
    config = load(models("a"))
    sched = config.scheduling
    assert sched.groups == ()
    assert dict(sched.resources) == {}
    assert sched.queue_limit == 1000
    assert sched.max_queue_wait == 60
    assert sched.drain_timeout == 600
    assert sched.max_in_flight == 0
    assert sched.preload == ()
    assert sched.default_model is None
    assert sched.default_after == 300
    model = config.models["a"]
    assert (model.evict_cost, model.priority, model.concurrency_limit) == (1.0, 0, 0)


def test_scheduling_keys_resolve() -> None:
    config = load(
        "queueLimit: 5\nmaxQueueWait: 12\ndrainTimeout: 30\nmaxInFlight: 9\n"
        "stateDir: /tmp/somewhere\n"
        + models("a", extra={"a": "evictCost: 2.5, priority: 3, concurrencyLimit: 4"})
    )
    sched = config.scheduling
    assert (sched.queue_limit, sched.max_queue_wait, sched.drain_timeout) == (5, 12, 30)
    assert (sched.max_in_flight, sched.state_dir) == (9, "/tmp/somewhere")
    model = config.models["a"]
    assert (model.evict_cost, model.priority, model.concurrency_limit) == (2.5, 3, 4)


@pytest.mark.parametrize(
    ("line", "path"),
    [
        ("queueLimit: 0", "queueLimit"),
        ("maxQueueWait: 0", "maxQueueWait"),
        ("drainTimeout: -1", "drainTimeout"),
        ("maxInFlight: -1", "maxInFlight"),
        ("globalTTL: -5", "globalTTL"),
        ("defaultAfter: 0", "defaultAfter"),
    ],
)
def test_scheduling_bounds_are_checked(line: str, path: str) -> None:
    found = problems(line + "\n" + models("a"))
    assert [p for p, _ in found] == [path]


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ("evictCost: 0", "models.a.evictCost"),
        ("concurrencyLimit: -1", "models.a.concurrencyLimit"),
    ],
)
def test_model_scheduling_bounds_are_checked(entry: str, path: str) -> None:
    found = problems(models("a", extra={"a": entry}))
    assert [p for p, _ in found] == [path]


# ---- runtime wiring -------------------------------------------------------------------------


def runtime(tmp_path: Path, text: str) -> Runtime:
    return Runtime(load(f"stateDir: {tmp_path / 'state'}\n" + text), use_reaper=False)


def test_runtime_without_groups_or_budgets_swaps_one_at_a_time(tmp_path: Path) -> None:
    assert isinstance(runtime(tmp_path, models("a")).swapper(), ExclusiveSwapper)


def test_runtime_swapper_kinds(tmp_path: Path) -> None:
    groups = "groups:\n  g: {members: [a]}\n"
    budgets = "resources: {ram: 8GiB}\n"
    assert isinstance(runtime(tmp_path, groups + models("a")).swapper(), GroupSwapper)
    assert isinstance(runtime(tmp_path, budgets + models("a")).swapper(), BudgetSwapper)
    both = runtime(tmp_path, groups + budgets + models("a")).swapper()
    assert isinstance(both, CombinedSwapper)


def test_runtime_budgets_alone_let_small_models_share(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path,
        "resources: {ram: 2GiB}\n"
        + models(
            "s1",
            "s2",
            "big",
            extra={
                "s1": "uses: {ram: 1GiB}",
                "s2": "uses: {ram: 1GiB}",
                "big": "uses: {ram: 2GiB}",
            },
        ),
    )
    swapper = rt.swapper()
    none: frozenset[str] = frozenset()
    assert swapper.eviction_for("s2", {"s1"}, none) is not None
    assert swapper.eviction_for("s2", {"s1"}, none).models == none  # type: ignore[union-attr]
    assert swapper.eviction_for("big", {"s1", "s2"}, none).models == {"s1", "s2"}  # type: ignore[union-attr]


def test_runtime_budget_never_evicts_persistent_group_members(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path,
        "resources: {ram: 4GiB}\ngroups:\n"
        "  pin: {members: [p], persistent: true, exclusive: false}\n"
        "  rest: {members: [a, b], swap: false, exclusive: false}\n"
        + models(
            "p",
            "a",
            "b",
            extra={"p": "uses: {ram: 2GiB}", "a": "uses: {ram: 2GiB}", "b": "uses: {ram: 2GiB}"},
        ),
    )
    eviction = rt.swapper().eviction_for("b", {"p", "a"}, frozenset())
    assert eviction is not None
    assert eviction.models == {"a"}


def test_runtime_policy_from_config(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path,
        "queueLimit: 7\nmaxQueueWait: 11\ndrainTimeout: 13\nmaxInFlight: 17\n"
        + models(
            "a", "b", "c", extra={"a": "priority: 2, concurrencyLimit: 3", "b": "priority: -1"}
        ),
    )
    policy = rt.scheduler_policy()
    assert (policy.queue_limit, policy.max_queue_wait) == (7, 11)
    assert (policy.drain_timeout, policy.max_in_flight) == (13, 17)
    assert dict(policy.priorities) == {"a": 2, "b": -1}
    assert dict(policy.concurrency) == {"a": 3}


def test_runtime_uses_declared_else_measured(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path,
        "resources: {gpu0: 32GiB, ram: 64GiB}\n"
        + models("a", "b", "c", extra={"a": "uses: {gpu0: 20GiB}"}),
    )
    rt.stats.record_peak("a", "gpu0", 5 * GIB)
    rt.stats.record_peak("a", "ram", 3 * GIB)
    rt.stats.record_peak("b", "ram", 2 * GIB)
    rt.stats.record_peak("b", "gpu1", 9 * GIB)  # not a declared resource: ignored
    assert rt.uses("a") == {"gpu0": 20 * GIB, "ram": 3 * GIB}  # declared wins, else measured
    assert rt.uses("b") == {"gpu0": 0, "ram": 2 * GIB}
    assert rt.uses("c") == {"gpu0": 0, "ram": 0}  # never measured


def test_runtime_uses_measurements_remembered_from_an_earlier_run(tmp_path: Path) -> None:
    text = "resources: {ram: 64GiB}\n" + models("a")
    first = runtime(tmp_path, text)
    first.stats.record_peak("a", "ram", 6 * GIB)
    first.stats.save()
    assert runtime(tmp_path, text).uses("a") == {"ram": 6 * GIB}


def test_runtime_evict_cost_is_median_start_times_weight(tmp_path: Path) -> None:
    rt = runtime(tmp_path, models("a", "b", extra={"a": "evictCost: 3"}))
    assert rt.evict_cost("a") == DEFAULT_START_SECONDS * 3
    for seconds in (2.0, 4.0, 30.0):
        rt.stats.record_start("a", seconds)
        rt.stats.record_start("b", seconds)
    assert rt.evict_cost("a") == 12.0
    assert rt.evict_cost("b") == 4.0
