"""Scenarios 5 and 6: the gateway's share of a cold swap, and its memory and idle CPU."""

from __future__ import annotations

import asyncio
import http.client
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import load
from bench.procs import cpu_seconds, free_port, http_post, http_status, rss_bytes, stop
from bench.scenarios import Plan, Results, rss_processes, stream_round
from bench.targets import COLD_LOAD_DELAY, Fleet, Target, fake_backend_cmd, llamacpp_cmd

# -- 5. cold swap --------------------------------------------------------------------------


def _ttfb(
    port: int, body: bytes, headers: dict[str, str] | None = None
) -> tuple[float, int, bytes]:
    """Seconds from sending ``body`` to the answer's status line and headers, status, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        started = time.perf_counter()
        conn.request(
            "POST", load.CHAT, body, {"Content-Type": "application/json", **(headers or {})}
        )
        resp = conn.getresponse()
        first = time.perf_counter() - started
        return first, resp.status, resp.read()
    finally:
        conn.close()


def _alone(cmd_for_port: Any, body: bytes, log: Path) -> tuple[float, float]:
    """Start the backend alone: (spawn → /health 200 seconds, first request's TTFB)."""
    port = free_port()
    with log.open("ab") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd_for_port(port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = started + 300
        while http_status(port, "/health", timeout=1) != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"backend exited ({proc.returncode}); see {log}")
            if time.perf_counter() > deadline:
                raise RuntimeError("backend did not become healthy")
            time.sleep(0.002)
        healthy = time.perf_counter() - started
        first, status, raw = _ttfb(port, body)
        if status != 200:
            raise RuntimeError(f"backend answered {status}: {raw[:200]!r}")
        return healthy, first
    finally:
        stop(proc)


def cold(fleet: Fleet, plan: Plan, results: Results) -> None:
    # A keyed target's key may not unload (bench/targets.py, KEY_TARGETS): relay scenarios only.
    gateways = [t for t in fleet.ready() if t.is_modelswap and not t.headers]
    kinds: list[tuple[str, Any, bytes, str]] = [
        (
            "fake",
            lambda port: fake_backend_cmd(port, "cold", COLD_LOAD_DELAY),
            load.chat_body("hi", model="cold"),
            "cold",
        ),
    ]
    if plan.cold_llamacpp and fleet.gguf is not None:
        gguf = fleet.gguf
        body = json.dumps(
            {
                "model": "smollm2",
                "messages": [{"role": "user", "content": "Say hi."}],
                "max_tokens": 1,
                "temperature": 0,
            }
        ).encode()
        kinds.append(("llama.cpp", lambda port: llamacpp_cmd(port, gguf), body, "smollm2"))
    results.info["cold"] = {
        "client": "http.client, time to the answer's status line",
        "rounds": plan.cold_rounds,
        "backends": [k[0] for k in kinds],
        "fake_load_delay": COLD_LOAD_DELAY,
        "llamacpp": "SmolLM2-135M-Instruct Q4_1, -c 2048" if fleet.gguf else "not installed",
    }
    log = fleet.workdir / "cold-alone.log"
    for kind, cmd_for_port, body, model in kinds:
        case = f"{kind} backend"
        for _ in range(plan.cold_rounds):
            alone_outcome = load.Outcome()
            try:
                healthy, first = _alone(cmd_for_port, body, log)
                alone_outcome.checked += 1
            except RuntimeError as exc:
                alone_outcome.bad(str(exc))
                results.merge("cold", case, "direct", alone_outcome)
                continue
            results.merge("cold", case, "direct", alone_outcome)
            results.add("cold", case, "direct", healthy=healthy, first_request=first)
            for target in gateways:
                outcome = load.Outcome()
                http_post(target.port, f"/api/models/unload/{model}")
                ttfb, status, raw = _ttfb(target.port, body)
                outcome.checked += 1
                if status != 200 or b'"choices"' not in raw:
                    outcome.bad(f"HTTP {status}: {raw[:200]!r}")
                elif model == "cold" and (problem := load.check_completion(status, raw, "hi", 4)):
                    outcome.bad(problem)
                http_post(target.port, f"/api/models/unload/{model}")
                results.merge("cold", case, target.name, outcome)
                results.add("cold", case, target.name, cold_ttfb=ttfb, share=ttfb - healthy - first)


# -- 6. footprint --------------------------------------------------------------------------


def footprint_idle(fleet: Fleet, plan: Plan, results: Results) -> None:
    """Right after start and warm-up, before any load: RSS, and the CPU an idle gateway
    burns (timers, polling, its watchdog)."""
    time.sleep(1.0)
    gateways = [t for t in fleet.ready() if t.gateway]
    before = {t.name: cpu_seconds(t.processes()) for t in gateways}
    time.sleep(plan.idle_seconds)
    for target in gateways:
        used = cpu_seconds(target.processes()) - before[target.name]
        results.add("footprint", "rss", target.name, idle_cpu=used / plan.idle_seconds)
    for target in fleet.ready():
        memory = rss_processes(target)
        if not memory:
            continue
        results.add("footprint", "rss", target.name, idle=rss_bytes(memory))
        if target.is_modelswap:
            watchdog = [p for p in target.processes() if p.pid != target.proc.pid]  # type: ignore[union-attr]
            results.info.setdefault("footprint", {}).setdefault("watchdog_rss", {})[target.name] = (
                rss_bytes(watchdog)
            )


def footprint(fleet: Fleet, plan: Plan, results: Results, *, had_streams: bool) -> None:
    """Peak RSS under 128 streams (if the stream scenario did not already measure it), and RSS
    after each of ``footprint_runs`` identical runs (no growth expected)."""
    info = results.info.setdefault("footprint", {})
    info["runs"] = plan.footprint_runs
    info["run"] = "200 non-streamed requests (c=32) + 32 unpaced streams of 100 chunks"
    targets = [t for t in fleet.ready() if t.gateway]
    if not had_streams:
        n = plan.unpaced_chunks.get(128, 100)
        for target in targets:
            stream_round(results, target, "unpaced c128", 128, n, 0.0)
    for target in targets:
        memory = rss_processes(target)
        after: list[int] = []
        outcome = load.Outcome()
        for _ in range(plan.footprint_runs):
            _requests(target, 200, 32, outcome)
            load.streams(target.port, target.headers, 32, 100, 0.0, outcome)
            time.sleep(0.2)
            after.append(rss_bytes(memory))
        results.merge("footprint", "runs", target.name, outcome)
        results.cell("footprint", "runs", target.name)["rss_after_each"] = after
        results.add("footprint", "rss", target.name, growth=after[-1] - after[0])


def _requests(target: Target, count: int, concurrency: int, outcome: load.Outcome) -> None:
    async def run() -> None:
        body = load.chat_body("hi")
        url = f"http://127.0.0.1:{target.port}{load.CHAT}"
        headers = {"Content-Type": "application/json", **target.headers}
        left = count
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=120)
        ) as session:

            async def worker() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    async with session.post(url, data=body, headers=headers) as resp:
                        raw = await resp.read()
                        outcome.checked += 1
                        if (
                            problem := load.check_completion(resp.status, raw, "hi", 4)
                        ) is not None:
                            outcome.bad(problem)

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    try:
        asyncio.run(run())
    except (OSError, TimeoutError, aiohttp.ClientError) as exc:
        outcome.bad(f"{type(exc).__name__}: {exc}")
