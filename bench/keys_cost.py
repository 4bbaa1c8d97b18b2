"""What per-key accounting costs (issue 40): gateway CPU per request of ``modelswap-keys``
and ``modelswap-quota`` (and, with ``--before SRC``, ``modelswap-quota-before`` run from an
older ``src/``), the suite's throughput load in rotating order, many rounds; medians.

    .venv/bin/python bench/keys_cost.py [--rounds 6] [--seconds 4] [--before SRC]

The suite's 3 rounds cannot resolve a few µs on a busy machine; more rounds narrow it. Prints
each round, the medians and quota − keys, and the fast door's counters (a request handed
over, or refused, would cost more than the gate: none should be).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load
from bench.procs import cpu_seconds
from bench.targets import KEY_TARGETS, Fleet, Target

CONCURRENCY = (32, 128)


def door_counts(target: Target) -> list[str]:
    """The fast door's served / handed-over counters, from the target's scrape."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{target.port}/metrics", headers=target.headers
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        text = answer.read().decode()
    return [line for line in text.splitlines() if line.startswith("modelswap_fast_lane")]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--before", metavar="SRC", help="an older src/ to run as well")
    args = parser.parse_args()
    names = list(KEY_TARGETS)
    variants = {}
    if args.before:
        variants["modelswap-quota-before"] = str(Path(args.before).resolve())
        names.append("modelswap-quota-before")
    cpu: dict[tuple[str, int], list[float]] = {(n, c): [] for n in names for c in CONCURRENCY}
    workdir = Path(tempfile.mkdtemp(prefix="modelswap-keys-cost-"))
    with Fleet(names, workdir, llamacpp=False, variants=variants) as fleet:
        print(f"load average at start {os.getloadavg()[0]:.2f}", flush=True)
        for r in range(args.rounds):
            for concurrency in CONCURRENCY:
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    target = fleet.targets[name]
                    procs = target.processes()
                    outcome = load.Outcome()
                    with load.start_throughput(
                        target.port, target.headers, concurrency, args.seconds, outcome
                    ) as child:
                        cpu0, started = cpu_seconds(procs), time.perf_counter()
                        rps = float(child.run().get("rps", 0.0))
                        elapsed = time.perf_counter() - started
                        used = cpu_seconds(procs) - cpu0
                    if outcome.failed or not rps:
                        print(f"{name}: wrong answers {outcome.errors[:3]}", file=sys.stderr)
                        return 1
                    us = used / (rps * elapsed) * 1e6
                    cpu[name, concurrency].append(us)
                    print(f"round {r} c{concurrency} {name}: {rps:.0f} req/s, {us:.1f} µs/req")
        for name in names:
            print(name, door_counts(fleet.targets[name]))
        print(f"load average at end {os.getloadavg()[0]:.2f}")
    for concurrency in CONCURRENCY:
        keys = statistics.median(cpu["modelswap-keys", concurrency])
        print(f"c{concurrency}: modelswap-keys {keys:.1f} µs/req")
        for name in names[1:]:
            value = statistics.median(cpu[name, concurrency])
            print(f"c{concurrency}: {name} {value:.1f} µs/req ({value - keys:+.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
