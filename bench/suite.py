"""modelswap's side-by-side benchmark suite (issue 10).

    .venv/bin/python bench/suite.py [--quick] [--targets direct,nginx,floor,litellm,modelswap]
                                    [--scenarios latency,throughput,streams,bodies,cold,footprint,
                                                 silent,llamacpp,swap,prefetch]
                                    [--target NAME=URL] [--backend-port PORT]
                                    [--client auto|wrk|aiohttp] [--json FILE]

``make bench`` installs what the other targets need (nginx and wrk from Debian, LiteLLM and
py-spy into build/) and runs the full suite. Every scenario runs against every target in
alternating rounds, on loopback only, against one fast fake backend
(``bench/fake_backend.py``); the table gives medians (min–max) and ratios to direct, then the
issue's goals side by side. A target that cannot run here is skipped with a line saying why.
Exit status: 0, or 1 when any answer was wrong (timings are reported, never asserted).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import cold_and_footprint, extras, load, report, scenarios
from bench.targets import ALL_TARGETS, DEFAULT_TARGETS, LLAMA_SWAP, LLAMA_SWAP_ENV, Fleet

OUTSIDE_HELP = """\
--target NAME=URL puts a gateway that is already running (e.g. your llama-swap) in the same
tables as the others, for the relay scenarios (latency, throughput, streams, bodies,
footprint): URL is its loopback address (http://127.0.0.1:PORT). It must serve the model
`fake`, relayed to the suite's own fake backend, whose port you fix with --backend-port, e.g.
for llama-swap (config.yaml):

  models:
    fake:
      cmd: sleep 86400                 # a placeholder process: the backend is the suite's
      proxy: http://127.0.0.1:18090    # --backend-port 18090
      checkEndpoint: none
  groups:
    hot: {swap: false, exclusive: false, persistent: true, members: [fake]}

then: bench/suite.py --backend-port 18090 --target llama-swap=http://127.0.0.1:8080
Its CPU and memory are read from the process listening on URL's port (root sees every
process). The cold-start, swap and prefetch scenarios run modelswap only: an outside gateway's
models are not the suite's to start.
"""


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kib / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load1 = os.getloadavg()[0]
    return (
        f"{os.cpu_count()} × {cpu}{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}; load average at start {load1:.2f}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog=OUTSIDE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds: proves it runs")
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help=f"comma-separated, from {','.join(ALL_TARGETS)} (default: %(default)s)",
    )
    parser.add_argument(
        "--scenarios",
        default=None,
        help="comma-separated (default: all: "
        f"{','.join((*scenarios.SCENARIOS, *extras.EXTRAS))}; with --quick: "
        f"{','.join(scenarios.SCENARIOS)})",
    )
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="an already-running gateway to measure as well (see below)",
    )
    parser.add_argument(
        "--backend-port",
        type=int,
        default=0,
        help="the fake backend's port (default: a free one); fix it for --target",
    )
    parser.add_argument(
        "--client",
        choices=("auto", "wrk", "aiohttp"),
        default="auto",
        help="throughput client; auto = wrk when installed (full runs), aiohttp otherwise",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=SRC",
        help="one more modelswap target, named NAME (starting with 'modelswap'), run from the "
        "src/ directory SRC (e.g. `git archive` of an older commit): before/after in one run; "
        "a NAME that starts with a keyed target's and a dash (modelswap-quota-before) is "
        "started as that target, with its keys",
    )
    parser.add_argument(
        "--llama-swap",
        metavar="PATH",
        default=os.environ.get(LLAMA_SWAP_ENV) or None,
        help=f"llama-swap's binary: adds the llama-swap target, and the relay goals are "
        f"ratios to it (default: ${LLAMA_SWAP_ENV}; none: skipped)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the raw figures here")
    parser.add_argument("--markdown", metavar="FILE", help="write the tables here too")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args(argv)
    args.target_list = [t.strip() for t in args.targets.split(",") if t.strip()]
    if args.llama_swap:
        args.llama_swap = str(Path(args.llama_swap).resolve())  # the target runs elsewhere
    if args.llama_swap and LLAMA_SWAP not in args.target_list:
        args.target_list.append(LLAMA_SWAP)
    args.variants = {}
    for spec in args.variant:
        name, sep, src = spec.partition("=")
        if not sep or not name.startswith("modelswap") or name in ALL_TARGETS:
            parser.error(f"--variant {spec!r}: want NAME=SRC, NAME starting with 'modelswap'")
        if not (Path(src) / "modelswap" / "__init__.py").is_file():
            parser.error(f"--variant {spec!r}: {src}/modelswap is not a modelswap package")
        args.variants[name] = str(Path(src).resolve())
        args.target_list.append(name)
    args.outside = {}
    for spec in args.target:
        name, sep, url = spec.partition("=")
        if not sep or not name or name in ALL_TARGETS or name.startswith("modelswap"):
            parser.error(f"--target {spec!r}: want NAME=URL, NAME not one of the suite's own")
        try:
            port_of(url)
        except ValueError as exc:
            parser.error(f"--target {spec!r}: {exc}")
        args.outside[name] = url
        args.target_list.append(name)
    if args.scenarios is None:
        known = scenarios.SCENARIOS if args.quick else (*scenarios.SCENARIOS, *extras.EXTRAS)
        args.scenarios = ",".join(known)
    args.scenario_list = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for t in args.target_list:
        if t not in ALL_TARGETS and t not in args.variants and t not in args.outside:
            parser.error(f"unknown target {t!r}; known: {', '.join(ALL_TARGETS)}")
    every = (*scenarios.SCENARIOS, *extras.EXTRAS)
    for s in args.scenario_list:
        if s not in every:
            parser.error(f"unknown scenario {s!r}; known: {', '.join(every)}")
    return args


def port_of(url: str) -> int:
    """The port of a loopback http:// URL (the suite talks to loopback only)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("want http://127.0.0.1:PORT (loopback only)")
    if parsed.port is None:
        raise ValueError("the URL names no port")
    return parsed.port


def throughput_client(choice: str, quick: bool) -> str:
    if choice == "auto":
        return "wrk" if shutil.which("wrk") and not quick else "aiohttp"
    if choice == "wrk" and not shutil.which("wrk"):
        print("[bench] wrk is not installed: using the aiohttp client", file=sys.stderr)
        return "aiohttp"
    return choice


def warm(fleet: Fleet) -> None:
    """A few requests to every target (modelswap's model is ready after the first)."""
    for target in fleet.ready():
        outcome = load.Outcome()
        seq = load.Sequential(target.port, target.headers)
        try:
            seq.latencies(20, "hi", outcome, warmup=0)
        finally:
            seq.close()
        load.streams(target.port, target.headers, 2, 20, 0.0, outcome)
        if outcome.failed:
            raise RuntimeError(f"{target.name} answers wrongly: {outcome.errors[0]}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    plan = scenarios.QUICK if args.quick else scenarios.FULL
    started = time.monotonic()
    results = scenarios.Results()
    client = throughput_client(args.client, args.quick)
    steps = [s for s in args.scenario_list if s in scenarios.SCENARIOS]
    extra_steps = [s for s in args.scenario_list if s in extras.EXTRAS]
    workdir = Path(tempfile.mkdtemp(prefix="modelswap-bench-"))
    fleet = Fleet(
        args.target_list,
        workdir,
        llamacpp=not args.quick and "cold" in steps,
        variants=args.variants,
        outside={name: port_of(url) for name, url in args.outside.items()},
        backend_port=args.backend_port,
        llama_swap=args.llama_swap,
    )
    meta: dict[str, Any] = {
        "command": " ".join(shlex.quote(a) for a in ["bench/suite.py", *sys.argv[1:]]),
        "mode": "quick" if args.quick else "full",
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "workdir": str(workdir),
    }
    targets: dict[str, Any] = {}
    extra_results: dict[str, Any] = {}
    try:
        if steps:
            targets = _run_fleet(fleet, steps, plan, results, client, workdir)
        for step in extra_steps:
            log(f"scenario {step} …")
            t0 = time.monotonic()
            extra_results[step] = extras.run(step, args.quick)
            log(f"scenario {step} done in {time.monotonic() - t0:.1f} s")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    meta["elapsed"] = time.monotonic() - started
    meta["plan"] = {
        k: (v if not isinstance(v, dict) else {str(a): b for a, b in v.items()})
        for k, v in vars(plan).items()
    }
    problems = results.problems() + [
        f"{name}: {data['error']}" for name, data in extra_results.items() if "error" in data
    ]
    return {
        "meta": meta,
        "targets": targets,
        "info": results.info,
        "scenarios": results.data,
        "extras": extra_results,
        "problems": problems,
    }


def _run_fleet(
    fleet: Fleet,
    steps: list[str],
    plan: scenarios.Plan,
    results: scenarios.Results,
    client: str,
    workdir: Path,
) -> dict[str, Any]:
    """The scenarios every target runs; returns the targets' descriptions."""
    with fleet:
        warm(fleet)
        log(f"targets up: {', '.join(t.name for t in fleet.ready())} ({workdir})")
        if "footprint" in steps:
            cold_and_footprint.footprint_idle(fleet, plan, results)
        for step in steps:
            log(f"scenario {step} …")
            t0 = time.monotonic()
            if step == "latency":
                scenarios.latency(fleet, plan, results)
            elif step == "throughput":
                scenarios.throughput(fleet, plan, results, client)
            elif step == "streams":
                scenarios.streams(fleet, plan, results)
            elif step == "bodies":
                scenarios.bodies(fleet, plan, results)
            elif step == "cold":
                cold_and_footprint.cold(fleet, plan, results)
            elif step == "footprint":
                cold_and_footprint.footprint(fleet, plan, results, had_streams="streams" in steps)
            log(f"scenario {step} done in {time.monotonic() - t0:.1f} s")
        return {
            name: {"description": t.description, "skipped": t.skipped, "port": t.port}
            for name, t in fleet.targets.items()
        }


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally: all processes stopped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    results = run(args)
    text = report.render(results)
    print(text)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        results["goals"] = [vars(g) for g in report.goals(results)]
        path.write_text(json.dumps(results, indent=1))
    if results["problems"]:
        log(f"{len(results['problems'])} measurement(s) saw wrong answers")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
