"""How long ``modelswap check FILE`` and ``modelswap diagnose FILE`` take, start to exit (issue
18: under 0.3 s each on the 2-core development machine), next to the floors they stand on.

    .venv/bin/python bench/cli_start.py [--runs N] [--no-bytecode-cache] [--variant NAME=SRC]

Every command runs N times (default 10) as a fresh process, the commands alternating round by
round; the median and min–max are printed, with the load average before and after (a busy
machine makes every figure larger: < 1.5 is idle enough here). The commands: ``check`` on the
built-in demo (what ``make run`` serves; its plan line reads the SmolLM2 GGUF header),
``check`` on tests/data/llamaswap/kitchen-sink.yaml (a large llama-swap config; its
``${env.…}`` values are set here), ``diagnose`` on a captured vLLM startup log, and two floors:
the interpreter alone (``python -c pass``) and pydantic with one model class, the least a
pydantic-validated config costs. ``--variant NAME=SRC`` times the modelswap commands again from
another ``src/`` tree (``git archive OLD src | tar -x -C /tmp/old``), in the same rounds, for
a before/after.

Bytecode is cached as an installed copy caches it (pip compiles it at install time): under
build/bench/pycache, whatever PYTHONDONTWRITEBYTECODE says. ``--no-bytecode-cache`` times the
other case: PYTHONDONTWRITEBYTECODE=1 and no ``__pycache__`` in src/ (an editable checkout in
such an environment), so every modelswap module is compiled from source on each start.

A command that exits with an unexpected status stops the script (exit 1). Timings are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KITCHEN_SINK = "tests/data/llamaswap/kitchen-sink.yaml"
VLLM_LOG = "tests/data/startup-logs/vllm-new-kv-cache-too-small.log"
ONE_MODEL = "import pydantic, yaml\nclass M(pydantic.BaseModel):\n    x: int\nM(x=1)"


@dataclass
class Command:
    name: str
    argv: list[str]
    pythonpath: str | None = None  # a variant's src/ tree
    times: list[float] = field(default_factory=list)


def commands(variants: list[tuple[str, str]]) -> list[Command]:
    cli = [
        ("check (demo)", ["check"]),
        ("check kitchen-sink.yaml", ["check", KITCHEN_SINK]),
        ("diagnose (vLLM log)", ["diagnose", VLLM_LOG]),
    ]
    out = [Command(name, [sys.executable, "-m", "modelswap", *args]) for name, args in cli]
    for label, src in variants:
        out += [
            Command(f"{name} [{label}]", [sys.executable, "-m", "modelswap", *args], src)
            for name, args in cli
        ]
    out.append(Command("floor: python -c pass", [sys.executable, "-c", "pass"]))
    out.append(Command("floor: pydantic, 1 model", [sys.executable, "-c", ONE_MODEL]))
    return out


def environment(no_cache: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "PYTHONPATH")
    }
    if no_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(REPO / "build" / "bench" / "pycache")
    env.update(
        FAKE_PYTHON=sys.executable,
        FAKE_BACKEND=str(REPO / "tests" / "fakes" / "openai_backend.py"),
        API_KEY_1="sk-bench",
        PEER_API_KEY="peer-bench",
    )
    return env


def timed(command: Command, env: dict[str, str]) -> float:
    if command.pythonpath:
        env = {**env, "PYTHONPATH": command.pythonpath}
    started = time.perf_counter()
    done = subprocess.run(
        command.argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{command.name} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return took


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--no-bytecode-cache", action="store_true")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SRC")
    args = parser.parse_args(argv)
    variants = [tuple(v.split("=", 1)) for v in args.variant]
    todo = commands([(name, str(Path(src).resolve())) for name, src in variants])
    env = environment(args.no_bytecode_cache)
    cache = "none for src/ (compiled on each start)" if args.no_bytecode_cache else "cached"
    print(f"bytecode: {cache}; python: {sys.executable}")
    print(f"load average before: {load()}")
    for command in todo:
        timed(command, env)  # warm the page cache and the bytecode cache
    for _ in range(args.runs):
        for command in todo:
            command.times.append(timed(command, env))
    width = max(len(c.name) for c in todo)
    for c in todo:
        print(
            f"{c.name:<{width}}  median {statistics.median(c.times):.3f} s "
            f"({min(c.times):.3f}–{max(c.times):.3f}), {len(c.times)} runs"
        )
    print(f"load average after:  {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
