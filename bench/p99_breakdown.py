"""What the slowest requests at concurrency 1 waited for: the c=1 p99, broken down.

    .venv/bin/python bench/p99_breakdown.py [--requests 3000] [--rounds 3]
                                            [--experiments control,switch,nogc,...]

Starts the fake backend and one modelswap per experiment (as in the suite, ``bench/targets.py``),
each with a tracer loaded through ``sitecustomize`` (a folder put first on its PYTHONPATH, no
change to ``src/``): it records every garbage collection (generation, start, duration, thread) and
times the gateway's periodic work — the activity log's batch write (on its worker thread), the
memory sampler's process-tree walk, the system monitor's sample, the backend's tree refresh (every
second while it runs), the fast door's, the relay's and the backend pool's deadline sweeps — and
each request's way through the fast door (read, sent up, answer read, written back), all with
``time.monotonic`` (one clock for every process of the machine). A client sends ``--requests``
sequential non-streamed chats on one keep-alive connection, timing each; the rounds alternate the
gateways (``direct`` and, with ``--llama-swap``, llama-swap beside). Then, for the requests over
the p99 (and over p50 + 1 ms), it says which step of their way grew and which recorded work
overlapped them.

An experiment changes one thing in that gateway only, so that a figure that moves names its
cause (the same run, the same machine):

    control     as shipped (traced)
    switch      sys.setswitchinterval(0.0005): a thread holding the GIL hands it to the event
                loop within 0.5 ms instead of 5 ms
    nogc        gc.disable() once started
    freeze      gc.freeze() once started (the startup heap out of every later collection)
    noactivity  the activity log records nothing (no batch write on a worker thread)
    nosampler   the memory sampler and the system monitor sample nothing
"""

from __future__ import annotations

import argparse
import bisect
import gc
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load
from bench.targets import REPO, Fleet

EXPERIMENTS = ("control", "switch", "nogc", "freeze", "noactivity", "nosampler")

# Loaded by every Python process started with the folder on its PYTHONPATH; acts only in
# ``modelswap serve`` with STALL_TRACE set (not in the gateway's helpers, nor the backends).
TRACER = r"""
import os, sys
if "serve" in sys.argv and os.environ.get("STALL_TRACE"):
    import atexit, functools, gc, importlib, json, threading, time

    _OUT = os.environ["STALL_TRACE"]
    _EXPERIMENT = os.environ.get("STALL_EXPERIMENT", "control")
    _events = []
    _mono = time.monotonic
    _main = threading.get_ident()
    _gc_began = {}

    def _on_gc(phase, info):
        me = threading.get_ident()
        if phase == "start":
            _gc_began[me] = _mono()
        elif me in _gc_began:
            began = _gc_began.pop(me)
            where = "loop" if me == _main else "thread"
            _events.append((f"gc{info['generation']}:{where}", began, _mono() - began))

    gc.callbacks.append(_on_gc)

    def _wrap(module, path, label, replace=None):
        owner = importlib.import_module(module)
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        if replace is not None:
            setattr(owner, name, replace)
            return

        @functools.wraps(original)
        def timed(*args, **kwargs):
            began = _mono()
            try:
                return original(*args, **kwargs)
            finally:
                where = "loop" if threading.get_ident() == _main else "thread"
                _events.append((f"{label}:{where}", began, _mono() - began))

        setattr(owner, name, timed)

    _wrap("modelswap.observe.activity", "ActivityLog._tick", "activity-batch")
    _wrap("modelswap.model_stats", "tree_rss", "memory-sampler-tree-walk")
    _wrap("modelswap.observe.performance", "PerformanceMonitor.system_sample", "system-sample")
    _wrap("modelswap.http.server.fast_door", "FastDoor._sweep", "door-sweep")
    _wrap("modelswap.http.relay.transport", "_Sweep._run", "deadline-sweep")
    _wrap("modelswap.http.relay.backend_pool", "BackendPool._sweep", "pool-sweep")
    _wrap("modelswap.supervisor.tree", "alive", "tree-refresh-alive")
    _wrap("modelswap.supervisor.tree", "snapshot", "tree-refresh-snapshot")
    # One request's way through the fast door: its bytes read, sent to the backend, the
    # backend's answer read, the answer written to the client.
    _wrap("modelswap.http.server.fast_door", "DoorConnection.data_received", "in")
    _wrap("modelswap.http.relay.backend_pool", "BackendConnection.send", "up")
    _wrap("modelswap.http.relay.backend_pool", "BackendConnection.data_received", "back")
    _wrap("modelswap.http.server.fast_door", "DoorConnection.write", "out")

    if _EXPERIMENT == "switch":
        sys.setswitchinterval(0.0005)
    elif _EXPERIMENT == "nogc":
        threading.Timer(3.0, gc.disable).start()
    elif _EXPERIMENT == "freeze":
        threading.Timer(3.0, gc.freeze).start()
    elif _EXPERIMENT == "noactivity":
        _wrap("modelswap.observe.activity", "ActivityLog.record", "", lambda self, rec: None)
    elif _EXPERIMENT == "nosampler":
        async def _nothing(self):
            return None

        _wrap("modelswap.model_stats", "MemorySampler.sample", "", _nothing)
        _wrap("modelswap.observe.performance", "PerformanceMonitor.sample", "", _nothing)

    def _dump():
        with open(_OUT, "w") as fh:
            json.dump({"experiment": _EXPERIMENT, "events": _events}, fh)

    atexit.register(_dump)
"""


def timed_requests(port: int, count: int) -> list[tuple[float, float]]:
    """``count`` sequential chats on one keep-alive connection: (sent at, seconds) each."""
    body = load.chat_body("hi")
    out: list[tuple[float, float]] = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    gc.disable()  # the client's own collections are not the gateway's stalls
    try:
        for i in range(count + 20):
            began = time.monotonic()
            conn.request("POST", load.CHAT, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            took = time.monotonic() - began
            if (problem := load.check_completion(resp.status, raw, "hi", 4)) is not None:
                raise RuntimeError(problem)
            if i >= 20:  # warm-up
                out.append((began, took))
    finally:
        gc.enable()
        conn.close()
    return out


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def overlaps(
    slow: list[tuple[float, float]], events: list[tuple[str, float, float]]
) -> dict[str, int]:
    """For each kind of recorded work, how many of the ``slow`` requests it overlapped."""
    found: dict[str, int] = {}
    for began, took in slow:
        kinds = {kind for kind, at, dur in events if at < began + took and at + dur > began}
        for kind in kinds or {"(nothing recorded)"}:
            found[kind] = found.get(kind, 0) + 1
    return found


SEGMENTS = (
    ("client -> door reads it", "began", "in"),
    ("door: parse, admit, send up", "in", "up"),
    ("backend answers, door reads it", "up", "back"),
    ("door: relay the answer", "back", "out"),
    ("door wrote -> client has it all", "out", "end"),
)


def segments(
    requests: list[tuple[float, float]], events: list[tuple[str, float, float]]
) -> list[dict[str, float]]:
    """Per request (one at a time, c=1): when each step of its way began, from the door's
    traced calls inside its window; requests without the whole way are skipped."""
    marks = sorted((at, kind) for kind, at, _ in events if kind.split(":")[0] in WAY)
    out: list[dict[str, float]] = []
    index = 0
    for began, took in requests:
        end = began + took
        while index < len(marks) and marks[index][0] < began:
            index += 1
        seen: dict[str, float] = {"began": began, "end": end}
        j = index
        while j < len(marks) and marks[j][0] <= end:
            at, kind = marks[j]
            name = kind.split(":")[0]
            if name == "out":
                seen["out"] = at  # the last write
            else:
                seen.setdefault(name, at)  # the first read, send, answer
            j += 1
        if all(k in seen for k in WAY):
            out.append(seen)
    return out


WAY = ("in", "up", "back", "out")


def segment_table(ways: list[dict[str, float]], slow: set[float]) -> list[str]:
    """Median µs of each step, for every request and for the slow ones (by start time)."""
    slow_ways = [w for w in ways if w["began"] in slow]
    lines = [f"    {'step':34} {'all: median':>12} {'p99':>8} {'slow: median':>13} {'max':>8}"]
    for label, start, stop in SEGMENTS:
        every = [(w[stop] - w[start]) * 1e6 for w in ways]
        worst = [(w[stop] - w[start]) * 1e6 for w in slow_ways]
        if not every:
            continue
        lines.append(
            f"    {label:34} {statistics.median(every):12.0f} {percentile(every, 99):8.0f} "
            f"{statistics.median(worst) if worst else float('nan'):13.0f} "
            f"{max(worst) if worst else float('nan'):8.0f}"
        )
    lines.append(f"    ({len(ways)} requests traced whole, {len(slow_ways)} of them slow)")
    return lines


def describe(events: list[tuple[str, float, float]], span: float) -> list[str]:
    by_kind: dict[str, list[float]] = {}
    for kind, _, dur in events:
        by_kind.setdefault(kind, []).append(dur * 1e6)
    lines = []
    for kind, durs in sorted(by_kind.items()):
        lines.append(
            f"    {kind:34} {len(durs) / span:7.1f}/s  median {statistics.median(durs):7.0f} µs"
            f"  max {max(durs):8.0f} µs  ({len(durs)} in all)"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="per round and gateway")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--experiments", default="control,switch,nogc,noactivity,nosampler")
    parser.add_argument("--out", default=str(REPO / "build" / "bench" / "p99"))
    parser.add_argument(
        "--llama-swap", metavar="PATH", help="llama-swap's binary: measured beside (untraced)"
    )
    args = parser.parse_args()
    chosen = [e.strip() for e in args.experiments.split(",") if e.strip()]
    unknown = set(chosen) - set(EXPERIMENTS)
    if unknown:
        parser.error(f"unknown experiments: {sorted(unknown)} (from {', '.join(EXPERIMENTS)})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="modelswap-p99-"))
    tracer = workdir / "tracer"
    tracer.mkdir()
    (tracer / "sitecustomize.py").write_text(TRACER)
    names = [f"modelswap-{e}" for e in chosen]
    traces = {name: workdir / f"{name}.trace.json" for name in names}
    # direct: the fake backend alone, the floor of the tail; llama-swap: the mark to beat
    measured = ["direct", *(["llama-swap"] if args.llama_swap else []), *names]
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in measured}
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH",)}
    try:
        # Each gateway is a "variant" running the installed src/ with the tracer first on its
        # path; the experiment and the trace file reach it through its environment.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(tracer), saved["PYTHONPATH"]) if p
        )
        variants = {name: str(REPO / "src") for name in names}
        fleet = Fleet(
            measured, workdir, llamacpp=False, variants=variants, llama_swap=args.llama_swap
        )
        original_spawn = fleet.spawn

        def spawn(name: str, cmd: list[str], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
            extra = dict(env or {})
            if name in traces:
                extra["PYTHONPATH"] = os.pathsep.join((str(tracer), extra.get("PYTHONPATH", "")))
                extra["STALL_TRACE"] = str(traces[name])
                extra["STALL_EXPERIMENT"] = name.removeprefix("modelswap-")
            return original_spawn(name, cmd, extra)

        fleet.spawn = spawn  # type: ignore[method-assign]
        with fleet:
            time.sleep(4.0)  # past the experiments' 3 s timers
            for round_no in range(args.rounds):
                turn = round_no % len(measured)
                order = measured[turn:] + measured[:turn]
                for name in order:
                    samples[name] += timed_requests(fleet.targets[name].port, args.requests)
        # The fleet is closed: each gateway wrote its trace as it exited.
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    report = [
        f"c=1 non-streamed chat, {args.rounds} rounds x {args.requests} requests per gateway, "
        "one keep-alive connection (client: http.client)",
        "",
        f"  {'gateway':24} {'p50 µs':>8} {'p90 µs':>8} {'p99 µs':>8} {'p99.9 µs':>9} "
        f"{'max µs':>8} {'>p50+1ms':>9}",
    ]
    details: list[str] = []
    for name in measured:
        took = [t for _, t in samples[name]]
        p50, p99 = percentile(took, 50), percentile(took, 99)
        slow_1ms = [s for s in samples[name] if s[1] > p50 + 0.001]
        report.append(
            f"  {name:24} {p50 * 1e6:8.0f} {percentile(took, 90) * 1e6:8.0f} {p99 * 1e6:8.0f} "
            f"{percentile(took, 99.9) * 1e6:9.0f} {max(took) * 1e6:8.0f} {len(slow_1ms):9d}"
        )
        if name not in traces:
            continue
        try:
            trace = json.loads(traces[name].read_text())
        except (OSError, ValueError):
            details.append(f"  {name}: no trace written")
            continue
        events = [(str(k), float(a), float(d)) for k, a, d in trace["events"]]
        first, last = samples[name][0][0], samples[name][-1][0]
        during = [e for e in events if first <= e[1] <= last]
        # The time the client was measuring this gateway (the rounds alternate gateways).
        measuring = sum(t for _, t in samples[name])
        starts = [b for b, _ in samples[name]]  # in order: one request at a time

        def in_a_request(at: float, name: str = name, starts: list[float] = starts) -> bool:
            i = bisect.bisect_right(starts, at) - 1
            return i >= 0 and at < starts[i] + samples[name][i][1]

        in_requests = [e for e in during if in_a_request(e[1])]
        over_p99 = [s for s in samples[name] if s[1] >= p99]
        details.append(f"  {name}: work recorded while it was measured ({measuring:.1f} s):")
        details += describe(
            [e for e in in_requests if e[0].split(":")[0] not in WAY], max(measuring, 1e-9)
        )
        details.append(f"    the way of a request (slow: at or over p99 = {p99 * 1e6:.0f} µs):")
        details += segment_table(segments(samples[name], during), {b for b, _ in over_p99})
        details.append(f"    the {len(over_p99)} requests at or over its p99 overlapped:")
        work = [e for e in during if e[0].split(":")[0] not in WAY]
        for kind, n in sorted(overlaps(over_p99, work).items(), key=lambda kv: -kv[1]):
            details.append(f"      {n:5d}  {kind}")
        details.append(f"    the {len(slow_1ms)} requests over p50 + 1 ms overlapped:")
        for kind, n in sorted(overlaps(slow_1ms, work).items(), key=lambda kv: -kv[1]):
            details.append(f"      {n:5d}  {kind}")
    text = "\n".join([*report, "", *details]) + "\n"
    (out / "p99-breakdown.txt").write_text(text)
    (out / "p99-samples.json").write_text(json.dumps(samples))
    print(text)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
