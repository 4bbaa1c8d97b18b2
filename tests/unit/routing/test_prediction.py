"""The load dry run (issue 39) on recorded scheduler states: the eviction it predicts is the one
the scheduler then commits, each evicted model says which rule stops it and whether it is busy,
and memory, time and the machine's fit carry their sources and spreads."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from tests.fakes.effects import Admission, RecordingEffects
from tests.unit.planner.conftest import GIB, MIB, model

from modelswap.planner.memory import PlanInputs, make_plan
from modelswap.routing.matrix_swapper import MatrixSwapper
from modelswap.routing.prediction import (
    MEASURED_ERROR,
    ModelFacts,
    compare,
    planner_figure,
    predict,
)
from modelswap.routing.protocols import Swapper
from modelswap.routing.scheduler import Scheduler, SchedulerPolicy
from modelswap.routing.swappers import (
    BudgetSwapper,
    CombinedSwapper,
    ExclusiveSwapper,
    GroupSpec,
    GroupSwapper,
)

BUDGETS = {"gpu0": 24 * GIB}
USES = {"a": 10 * GIB, "b": 10 * GIB, "c": 12 * GIB}
COSTS = {"a": 30.0, "b": 5.0, "c": 1.0}


def budget_swapper() -> BudgetSwapper:
    return BudgetSwapper(BUDGETS, lambda m: {"gpu0": USES.get(m, 0)}, lambda m: COSTS.get(m, 10))


def running(
    swapper: Swapper,
    *models: str,
    busy: Mapping[str, int] | None = None,
    effects: RecordingEffects | None = None,
) -> Scheduler:
    """A scheduler with ``models`` started one by one (the swaps done), and ``busy`` of them
    holding that many granted requests."""
    effects = effects or RecordingEffects()
    sched = Scheduler(swapper, effects, SchedulerPolicy(drain_timeout=100.0))
    for name in models:
        sched.on_request(Admission(name, f"load-{name}"))
        if sched.swapping == name:
            sched.on_swap_done(name, None)
        sched.on_serve_done(name)
    for name, count in (busy or {}).items():
        for i in range(count):
            sched.on_request(Admission(name, f"{name}-{i}"))
    assert sched.running == frozenset(models)
    return sched


def facts(**per_model: ModelFacts) -> object:
    return lambda m: per_model.get(m, ModelFacts())


def test_the_predicted_eviction_is_the_one_the_scheduler_commits() -> None:
    # a (cost 30) and b (cost 5) run in 24 GiB; c (12 GiB) needs one of them out: b, the
    # cheaper. The dry run says so, and the real request for c then evicts exactly that.
    effects = RecordingEffects()
    sched = running(budget_swapper(), "a", "b", effects=effects)
    prediction = predict("c", sched.snapshot(), facts(), BUDGETS, policy="budgets")
    assert prediction.evicted == {"b"}
    assert prediction.evict[0].why.startswith("budget gpu0: idle")
    assert prediction.fits_now
    assert prediction.can_start
    assert not prediction.running

    sched.on_request(Admission("c", "c"))
    assert effects.starts()[-1] == ("c", prediction.evicted)
    assert effects.reasons[-1] == prediction.reason


def test_a_busy_model_to_evict_is_named_with_its_drain() -> None:
    groups = GroupSwapper([GroupSpec("g", ["a"]), GroupSpec("h", ["b"])], ["a", "b"])
    sched = running(groups, "a", busy={"a": 2})
    served = ModelFacts(served=(3.0, 5.0, 4.0))
    prediction = predict("b", sched.snapshot(), facts(a=served), {}, policy="groups")
    [evicted] = prediction.evict
    assert (evicted.model, evicted.busy, evicted.in_flight) == ("a", True, 2)
    assert evicted.why == "group h is exclusive"
    assert evicted.drain_seconds == 4.0  # the median time its requests held a lease
    assert prediction.time.drain_seconds == 4.0
    assert not prediction.fits_now
    assert prediction.blocked is not None
    assert "a to finish serving" in prediction.blocked
    # Nothing was changed by asking: a still runs and serves, b was never started.
    assert sched.running == {"a"}
    assert sched.in_flight("a") == 2
    assert sched.swapping is None


def test_each_swapper_says_why_it_evicts() -> None:
    exclusive = ExclusiveSwapper().eviction_for("b", frozenset({"a"}), frozenset())
    assert exclusive.why == {"a": "exclusive: one model at a time"}
    groups = GroupSwapper([GroupSpec("g", ["a", "b"])], ["a", "b", "c"])
    same = groups.eviction_for("b", frozenset({"a", "c"}), frozenset())
    assert same is not None
    assert same.why == {"a": "group g: its members swap", "c": "group g is exclusive"}
    matrix = MatrixSwapper((frozenset({"a", "b"}), frozenset({"c"})), {})
    out = matrix.eviction_for("c", frozenset({"a", "b"}), frozenset())
    assert out is not None
    assert out.why == dict.fromkeys(("a", "b"), "matrix: not in set {c}")
    both = CombinedSwapper(GroupSwapper([], ["a", "b", "c"]), budget_swapper())
    combined = both.eviction_for("c", frozenset(), frozenset())
    assert combined is not None
    assert combined.why == {}


def test_no_eviction_makes_room_when_persistent_models_hold_the_budget() -> None:
    swapper = BudgetSwapper(
        BUDGETS, lambda m: {"gpu0": USES.get(m, 0)}, lambda m: 1.0, persistent={"a", "b"}
    )
    sched = running(swapper, "a", "b")
    prediction = predict("c", sched.snapshot(), facts(), BUDGETS, policy="budgets")
    assert not prediction.can_start
    assert not prediction.fits_now
    assert prediction.blocked is not None
    assert "persistent" in prediction.blocked
    assert "cannot start now" in prediction.summary()


def test_memory_comes_from_declared_then_measured_runs_then_the_planner() -> None:
    sched = running(ExclusiveSwapper())
    budgets = {"gpu0": 24 * GIB, "ram": 64 * GIB}
    declared = ModelFacts(declared={"gpu0": 8 * GIB}, run_peaks={"gpu0": [1, 2]})
    runs = ModelFacts(peaks={"ram": 3 * GIB}, run_peaks={"ram": [2 * GIB, 3 * GIB, 2 * GIB]})
    shape = model("qwen3.6-27b", quantization="nvfp4")
    plan = make_plan(shape, PlanInputs(engine="vllm", gpu_bytes=32 * GIB, utilization=0.98))
    planned = ModelFacts(planner=planner_figure(plan))
    known = facts(a=declared, b=runs, c=planned)
    by = {
        name: {
            m.resource: m
            for m in predict(name, sched.snapshot(), known, budgets, policy="x").memory
        }
        for name in ("a", "b", "c", "d")
    }
    assert (by["a"]["gpu0"].source, by["a"]["gpu0"].bytes) == ("declared", 8 * GIB)
    ram = by["b"]["ram"]
    assert (ram.source, ram.bytes, ram.runs) == ("measured", 2 * GIB, 3)  # the median run
    assert ram.low == int(2 * GIB * (1 - MEASURED_ERROR))
    assert ram.high == int(3 * GIB * (1 + MEASURED_ERROR))
    assert ram.counted_bytes == 3 * GIB  # the budget counts the highest peak ever seen
    gpu = by["c"]["gpu0"]
    assert gpu.source == "planner"
    assert gpu.bytes == plan.budget_bytes  # vLLM takes its whole budget
    assert by["c"]["ram"].source == "unknown"  # the planner does not size host memory
    assert by["d"]["gpu0"].source == "unknown"


def test_a_model_that_cannot_fit_this_machine_gets_the_planners_fixes() -> None:
    sched = running(ExclusiveSwapper())
    shape = model("qwen3.6-27b", quantization="nvfp4")
    inputs = PlanInputs(engine="vllm", gpu_bytes=32 * GIB, utilization=0.98, max_model_len=200001)
    plan = make_plan(shape, inputs)
    assert plan.fits is False
    big = ModelFacts(planner=planner_figure(plan), run_peaks={"ram": [70 * GIB]})
    prediction = predict("a", sched.snapshot(), facts(a=big), {"ram": 64 * GIB}, policy="x")
    assert prediction.fits_machine is False
    assert any("ram: needs" in p for p in prediction.problems)
    assert any("--max-model-len 174832" in f for f in prediction.fixes)
    data = prediction.to_json()
    assert data["fits_machine"]["fits"] is False
    assert data["memory"]["planner"]["fixes"] == list(plan.fixes)


def test_time_is_the_measured_start_with_its_spread_or_the_default() -> None:
    sched = running(ExclusiveSwapper(), "a")
    measured = ModelFacts(starts=(2.0, 4.0, 3.0), stop_seconds=0.5)
    prediction = predict("b", sched.snapshot(), facts(b=measured), {}, policy="x")
    t = prediction.time
    assert (t.start_seconds, t.start_source, t.start_samples) == (3.0, "measured", 3)
    assert t.start_low < 2.0
    assert t.start_high > 4.0
    assert t.stop_seconds == 0.5
    assert t.total_seconds == 3.5
    never = predict("b", sched.snapshot(), facts(), {}, policy="x").time
    assert never.start_source.startswith("default")
    assert never.start_seconds == 10.0
    assert predict("a", sched.snapshot(), facts(), {}, policy="x").time.total_seconds == 0.0


def test_compare_sets_the_prediction_beside_the_swap() -> None:
    sched = running(ExclusiveSwapper(), "a")
    known = facts(b=ModelFacts(starts=(1.0, 1.2), run_peaks={"ram": [100 * MIB]}))
    predicted = predict("b", sched.snapshot(), known, {}, policy="x").to_json()
    swap = {"target": "b", "evict": ["a"], "stop_seconds": 0.1, "start_seconds": 1.1}
    swap["total_seconds"] = 1.2
    out = compare(predicted, swap, {"ram": 101 * MIB})
    assert out["evict_equal"] is True
    assert out["time"]["start"]["within"] is True
    assert out["memory"]["ram"]["within"] is True
    worse = compare(predicted, {**swap, "evict": [], "start_seconds": 9.0}, {"ram": 500 * MIB})
    assert worse["evict_equal"] is False
    assert worse["time"]["start"]["within"] is False
    assert worse["memory"]["ram"]["within"] is False


@pytest.mark.parametrize("target", ["a", "b", "c"])
def test_a_running_model_evicts_nothing(target: str) -> None:
    sched = running(budget_swapper(), "a", "b") if target != "c" else running(budget_swapper(), "c")
    prediction = predict(target, sched.snapshot(), facts(), BUDGETS, policy="budgets")
    assert prediction.running
    assert prediction.fits_now
    assert not prediction.evict


def test_a_model_already_starting_evicts_nothing_more() -> None:
    effects = RecordingEffects()
    sched = running(ExclusiveSwapper(), "a", effects=effects)
    sched.on_request(Admission("b", "b"))  # the swap to b begins: a is evicted
    assert effects.starts()[-1] == ("b", frozenset({"a"}))
    prediction = predict("b", sched.snapshot(), facts(), {}, policy="x")
    assert prediction.evict == ()
    assert prediction.reason == "a start of b is under way"
    other = predict("a", sched.snapshot(), facts(), {}, policy="x")
    assert other.blocked == "the swap to b under way"
