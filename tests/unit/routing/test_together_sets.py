"""Co-residency generated (issue 39): the sets of models the swapper lets run side by side,
what evicts what, and the llama-swap YAML that pins them — which loads, and gives back the
same sets."""

from __future__ import annotations

import pytest
import yaml

from modelswap.config import load_config_text
from modelswap.plan_offline import Offline
from modelswap.routing.together import Coresidency, as_yaml

ENV = {"FAKE_PYTHON": "python", "FAKE_BACKEND": "fake.py"}
MODELS = "models:\n" + "".join(f"  {m}: {{cmd: 'srv --port ${{PORT}}'}}\n" for m in "abcd")


def coresidency(text: str) -> tuple[Coresidency, Offline]:
    offline = Offline(load_config_text(f"stateDir: ':memory:'\n{text}", environ=ENV), None)
    return offline.together(), offline


def sets(result: Coresidency) -> set[frozenset[str]]:
    return {frozenset(s) for s in result.sets}


def pinned_again(result: Coresidency, form: str | None = None) -> set[frozenset[str]]:
    """The printed YAML as the scheduling of a config with the same models: its sets."""
    again, _ = coresidency(MODELS + as_yaml(result, form=form))
    return sets(again)


def test_without_groups_or_budgets_each_model_runs_alone() -> None:
    result, _ = coresidency(MODELS)
    assert sets(result) == {frozenset(m) for m in "abcd"}
    assert result.evicts["a"] == dict.fromkeys("bcd", "exclusive: one model at a time")
    assert "groups:" in as_yaml(result)  # alone is a partition: groups can say it
    assert pinned_again(result) == sets(result)


def test_groups_give_their_sets_and_who_evicts_whom() -> None:
    text = MODELS + (
        "groups:\n"
        "  pair: {swap: false, exclusive: true, members: [a, b]}\n"
        "  solo: {swap: true, exclusive: true, members: [c, d]}\n"
    )
    result, _ = coresidency(text)
    assert sets(result) == {frozenset("ab"), frozenset("c"), frozenset("d")}
    assert result.evicts["c"]["d"] == "group solo: its members swap"
    assert result.evicts["c"]["a"] == "group solo is exclusive"
    assert "b" not in result.evicts.get("a", {})
    assert pinned_again(result) == sets(result)
    assert pinned_again(result, "matrix") == sets(result)


def test_budgets_over_declared_memory_give_overlapping_sets_as_a_matrix() -> None:
    text = (
        "resources: {gpu0: 24GiB}\nmodels:\n"
        "  a: {cmd: 'srv --port ${PORT}', uses: {gpu0: 10GiB}}\n"
        "  b: {cmd: 'srv --port ${PORT}', uses: {gpu0: 10GiB}}\n"
        "  c: {cmd: 'srv --port ${PORT}', uses: {gpu0: 12GiB}}\n"
        "  d: {cmd: 'srv --port ${PORT}', uses: {gpu0: 20GiB}}\n"
    )
    result, offline = coresidency(text)
    assert sets(result) == {frozenset("ab"), frozenset("ac"), frozenset("bc"), frozenset("d")}
    assert not result.partition
    assert result.evicts["d"]["a"].startswith("budget gpu0")
    assert offline.sources["a"] == {"gpu0": "declared"}
    printed = as_yaml(result)
    assert printed.startswith("matrix:")
    loaded = yaml.safe_load(printed)
    assert loaded["matrix"]["vars"] == {m: m for m in "abcd"}
    again, _ = coresidency(text + printed)  # the budgets, and the matrix pinned over them
    assert sets(again) == sets(result)


def test_groups_cannot_say_overlapping_sets() -> None:
    result, _ = coresidency(
        "resources: {gpu0: 24GiB}\nmodels:\n"
        + "".join(f"  {m}: {{cmd: 'srv --port ${{PORT}}', uses: {{gpu0: 10GiB}}}}\n" for m in "abc")
    )
    assert not result.partition
    with pytest.raises(ValueError, match="overlap"):
        as_yaml(result, form="groups")


def test_model_ids_the_matrix_cannot_spell_get_var_names() -> None:
    result, _ = coresidency(
        "models:\n  'org/m:1': {cmd: 'srv --port ${PORT}'}\n  plain: {cmd: 'srv --port ${PORT}'}\n"
    )
    printed = as_yaml(result, form="matrix")
    loaded = yaml.safe_load(printed)["matrix"]
    assert loaded["vars"] == {"m1": "org/m:1", "plain": "plain"}
    again, _ = coresidency(
        "models:\n  'org/m:1': {cmd: 'srv --port ${PORT}'}\n  plain: {cmd: 'srv --port ${PORT}'}\n"
        + printed
    )
    assert sets(again) == sets(result)
