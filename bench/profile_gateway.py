"""Where modelswap's CPU goes under load: py-spy samples of the gateway, summarised.

    .venv/bin/python bench/profile_gateway.py [--seconds 15] [--target modelswap]
                                              [--load unpaced,c32] [--out build/bench/profile]

``--target modelswap-keys`` / ``modelswap-quota``: the suite's keyed targets, the load sending
their key (profile both under the same load to see what per-key accounting costs).

Starts the fake backend and modelswap (as in the suite), attaches py-spy (from
build/bench-venv, installed by ``make bench``) to the gateway process, and drives one load at a
time: ``unpaced`` = 32 concurrent unpaced streams of 250 chunks, over and over;
``unpaced128`` = 128 concurrent streams of 100 chunks (the suite's c=128); ``short`` = 32
streams of 5 chunks (the cost of setting up a streamed request); ``c32`` =
non-streamed chat at concurrency 32 (wrk when installed, else the aiohttp client). For each it
writes py-spy's raw collapsed stacks and prints the functions with the most samples, by self
time and inclusive time (only samples where the gateway's thread was running).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load
from bench.targets import BENCH_VENV, KEY_TARGETS, REPO, Fleet

PYSPY = BENCH_VENV / "bin" / "py-spy"


def drive(kind: str, port: int, seconds: float, headers: dict[str, str]) -> tuple[str, float, str]:
    """Run the load for ``seconds`` (``headers`` on every request: a keyed target's key):
    (summary, units of work done, unit name)."""
    outcome = load.Outcome()
    deadline = time.monotonic() + seconds
    if kind in ("unpaced", "unpaced128", "short"):
        # unpaced: 32 streams of 250 chunks (relaying dominates); unpaced128: 128 of 100, as
        # the suite's c=128; short: 32 streams of 5 chunks (setting up a streamed request
        # dominates).
        concurrency, n = {"unpaced": (32, 250), "unpaced128": (128, 100), "short": (32, 5)}[kind]
        chunks = streams = 0
        while time.monotonic() < deadline:
            chunks += load.streams(port, headers, concurrency, n, 0.0, outcome).chunks
            streams += concurrency
        if kind != "short":
            summary, units, unit = f"{chunks} chunks relayed", float(chunks), "chunk"
        else:
            summary, units, unit = f"{streams} streams of {n} chunks", float(streams), "stream"
    elif shutil.which("wrk"):
        rps, _ = load.wrk_throughput(port, headers, 32, seconds, outcome)
        summary, units, unit = f"wrk: {rps:.0f} req/s", rps * seconds, "req"
    else:
        rps = load.aiohttp_throughput(port, headers, 32, seconds, outcome)
        summary, units, unit = f"aiohttp client: {rps:.0f} req/s", rps * seconds, "req"
    if outcome.failed:
        raise RuntimeError(f"wrong answers while profiling: {outcome.errors[:3]}")
    return summary, units, unit


def frame_name(frame: str) -> str:
    """``func (path/to/file.py:12)`` → ``file.py:func`` with the path shortened."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path = where.rsplit(":", 1)[0]
    for marker in ("/site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{name}"


def summarise(raw: Path, top: int, us_per_sample: float, unit: str) -> str:
    """Self and inclusive samples per function: % of all samples, and µs per unit of work."""
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += count
        self_time[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    if not total:
        return "no samples\n"
    cost = f"µs/{unit}"
    lines = [
        f"{total} samples = {total * us_per_sample:.1f} {cost} in all",
        "",
        f"self time (the function itself was running):       %  {cost}",
    ]
    lines += [
        f"  {n / total:6.1%}  {n * us_per_sample:8.2f}  {name}"
        for name, n in self_time.most_common(top)
    ]
    lines.append(f"inclusive time (the function or what it called):   %  {cost}")
    lines += [
        f"  {n / total:6.1%}  {n * us_per_sample:8.2f}  {name}"
        for name, n in inclusive.most_common(top * 2)
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument(
        "--target",
        default="modelswap",
        choices=("modelswap", "modelswap-full", "modelswap-asyncio", *KEY_TARGETS, "floor"),
    )
    parser.add_argument("--load", default="unpaced,c32")
    parser.add_argument("--out", default=str(REPO / "build" / "bench" / "profile"))
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--all-threads",
        action="store_true",
        help="sample every thread py-spy deems active (default: only the thread holding the "
        "GIL, i.e. Python code actually running)",
    )
    args = parser.parse_args()
    if not PYSPY.exists():
        print(f"py-spy is not installed in {BENCH_VENV}: run `make bench` once", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="modelswap-profile-"))
    try:
        with Fleet([args.target], workdir, llamacpp=False) as fleet:
            target = fleet.targets[args.target]
            assert target.proc is not None
            # warm: the model is ready, pools are open
            drive("unpaced", target.port, 1.0, target.headers)
            for kind in [k.strip() for k in args.load.split(",") if k.strip()]:
                raw = out / f"{args.target}-{kind}.txt"
                spy = subprocess.Popen(
                    [str(PYSPY), "record", "--pid", str(target.proc.pid), "--rate",
                     str(args.rate), "--format", "raw", "--output", str(raw),
                     *([] if args.all_threads else ["--gil"])],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )  # fmt: skip
                try:
                    time.sleep(1.0)  # py-spy attaches
                    summary, units, unit = drive(kind, target.port, args.seconds, target.headers)
                finally:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file and exits
                    try:
                        spy.wait(30)
                    except subprocess.TimeoutExpired:
                        spy.kill()
                        spy.wait(10)
                us = 1e6 / args.rate / max(units, 1.0)
                text = f"== {args.target} under {kind} ({summary})\n"
                text += summarise(raw, args.top, us, unit)
                (out / f"{args.target}-{kind}.summary.txt").write_text(text)
                print(text, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
