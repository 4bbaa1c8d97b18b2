"""Load clients: sequential keep-alive requests, throughput (wrk or aiohttp), streams (aiohttp).

Every function checks what came back (status, the answer's text, the chunk count and order)
and returns the problems it found with the figures, so a fast wrong answer never counts.
All loops are bounded in count and time.

The aiohttp clients (streams, and throughput where wrk is absent) each run in their own fresh
process, one per measurement (``python -m bench.load KIND ARGS``, see :class:`Child`), never in
the suite's: one Python process tops out near 126,000 chunks/s, and a client sharing the
suite's process would compare gateways under that limit rather than at their own. The child
starts, imports, says it is ready and waits; the parent brackets only the load (e.g. the
gateway's CPU time) between its "go" and the child's answer: figures and checks as JSON on
stdout. A child that fails, answers garbage or overruns its time limit (it is then killed by
its PID) is one wrong answer carrying its stderr's tail; the suite carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

CHAT = "/v1/chat/completions"
CONTENT = b'"content":" w'  # one per relayed token chunk (every target keeps this spelling)
MAX_ERRORS = 20  # problems kept per measurement (all are counted)


def chat_body(text: str, *, stream: bool = False, n: int = 4, model: str = "fake") -> bytes:
    body: dict[str, object] = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": n,
    }
    if stream:
        body["stream"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def expected_answer(text: str, n: int) -> str:
    return f"len={len(text)}" + "".join(f" w{i}" for i in range(n))


def check_completion(status: int, raw: bytes, text: str, n: int) -> str | None:
    """None when ``raw`` is the fake backend's answer to ``text``; else what is wrong."""
    if status != 200:
        return f"HTTP {status}: {raw[:200]!r}"
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"not a chat completion: {raw[:200]!r}"
    want = expected_answer(text, n)
    if content != want:
        return f"wrong answer: {content[:80]!r} (want {want[:80]!r})"
    return None


@dataclass
class Outcome:
    """Problems found by one measurement: ``checked`` answers, ``errors`` of them wrong."""

    checked: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def bad(self, problem: str) -> None:
        self.failed += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(problem)

    def absorb(self, other: dict[str, Any]) -> None:
        """Add another outcome's counts and problems (``asdict`` of one, e.g. a child's)."""
        self.checked += int(other["checked"])
        errors = [str(e) for e in other["errors"]]
        for problem in errors:
            self.bad(problem)
        self.failed += max(0, int(other["failed"]) - len(errors))


# -- sequential requests (added latency, large bodies) -------------------------------------


class Sequential:
    """One keep-alive connection (``http.client``), requests one after another."""

    client = "http.client, one keep-alive connection"

    def __init__(self, port: int, headers: dict[str, str], timeout: float = 120.0) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.headers = {"Content-Type": "application/json", **headers}

    def close(self) -> None:
        self.conn.close()

    def post(self, body: bytes) -> tuple[float, int, bytes]:
        """(seconds to the whole answer, status, body)."""
        started = time.perf_counter()
        self.conn.request("POST", CHAT, body, self.headers)
        resp = self.conn.getresponse()
        raw = resp.read()
        return time.perf_counter() - started, resp.status, raw

    def latencies(self, count: int, text: str, outcome: Outcome, warmup: int = 10) -> list[float]:
        body = chat_body(text)
        out: list[float] = []
        for i in range(warmup + count):
            seconds, status, raw = self.post(body)
            if i >= warmup:
                out.append(seconds)
            outcome.checked += 1
            if (problem := check_completion(status, raw, text, 4)) is not None:
                outcome.bad(problem)
        return out


# -- throughput ------------------------------------------------------------------------------

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = %s
wrk.headers["Content-Type"] = "application/json"
%s
done = function(summary, latency, requests)
  io.write(string.format(
    'WRKJSON {"requests":%%d,"duration_us":%%d,"status":%%d,"connect":%%d,"read":%%d,' ..
    '"write":%%d,"timeout":%%d,"p50_us":%%d,"p99_us":%%d}\\n',
    summary.requests, summary.duration, summary.errors.status, summary.errors.connect,
    summary.errors.read, summary.errors.write, summary.errors.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def wrk_version() -> str | None:
    binary = shutil.which("wrk")
    if binary is None:
        return None
    done = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False, timeout=10)
    match = re.search(r"wrk (\S+)", done.stdout + done.stderr)
    return f"wrk {match.group(1)}" if match else "wrk"


def lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wrk_throughput(
    port: int, headers: dict[str, str], concurrency: int, seconds: float, outcome: Outcome
) -> tuple[float, dict[str, float]]:
    """(requests per second, wrk's latency figures). Non-2xx answers and socket errors count
    as problems; one request is also checked for content (wrk does not read bodies)."""
    extra = "\n".join(f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items())
    body = chat_body("hi").decode()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(WRK_SCRIPT % (lua_string(body), extra))
    try:
        done = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{concurrency}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "30s",
                "-s",
                script.name,
                f"http://127.0.0.1:{port}{CHAT}",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=seconds + 60,
        )
    finally:
        Path(script.name).unlink(missing_ok=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("WRKJSON ")), None)
    if line is None:
        outcome.bad(f"wrk failed: {done.stderr.strip()[:300]}")
        return 0.0, {}
    data = json.loads(line[len("WRKJSON ") :])
    outcome.checked += int(data["requests"])
    for kind in ("status", "connect", "read", "write", "timeout"):
        for _ in range(min(int(data[kind]), MAX_ERRORS)):
            outcome.bad(f"wrk: {kind} error ({data[kind]} in all)")
        outcome.failed += max(0, int(data[kind]) - MAX_ERRORS)
    one = Sequential(port, headers)
    try:
        _, status, raw = one.post(body.encode())
        outcome.checked += 1
        if (problem := check_completion(status, raw, "hi", 4)) is not None:
            outcome.bad(problem)
    finally:
        one.close()
    rps = data["requests"] / (data["duration_us"] / 1e6)
    return rps, {"p50": data["p50_us"] / 1e6, "p99": data["p99_us"] / 1e6}


async def _aiohttp_throughput(
    port: int, headers: dict[str, str], concurrency: int, seconds: float, outcome: Outcome
) -> float:
    body = chat_body("hi")
    url = f"http://127.0.0.1:{port}{CHAT}"
    hdrs = {"Content-Type": "application/json", **headers}
    done = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=60)
    ) as session:

        async def worker(deadline: float | None) -> None:
            nonlocal done
            while deadline is None or time.perf_counter() < deadline:
                try:
                    async with session.post(url, data=body, headers=hdrs) as resp:
                        raw = await resp.read()
                        status = resp.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    outcome.checked += 1
                    outcome.bad(f"{type(exc).__name__}: {exc}")
                    if deadline is None:
                        return
                    continue
                outcome.checked += 1
                if (problem := check_completion(status, raw, "hi", 4)) is not None:
                    outcome.bad(problem)
                if deadline is None:
                    return  # a warm-up request (opens this worker's connection)
                done += 1

        # Open the connections first, then time a fixed window.
        await asyncio.gather(*(worker(None) for _ in range(concurrency)))
        started = time.perf_counter()
        await asyncio.gather(*(worker(started + seconds) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return done / elapsed


def start_throughput(
    port: int, headers: dict[str, str], concurrency: int, seconds: float, outcome: Outcome
) -> Child:
    """The aiohttp throughput client in its own process, ready to go (see :class:`Child`)."""
    args = {"port": port, "headers": headers, "concurrency": concurrency, "seconds": seconds}
    return Child("throughput", args, limit=seconds + 60 + 60, outcome=outcome)


def aiohttp_throughput(
    port: int, headers: dict[str, str], concurrency: int, seconds: float, outcome: Outcome
) -> float:
    """Requests per second of ``concurrency`` keep-alive workers over ``seconds`` (each
    worker's connection opened first), every answer checked; the client in its own process."""
    with start_throughput(port, headers, concurrency, seconds, outcome) as child:
        return float(child.run().get("rps", 0.0))


# For both aiohttp clients (streams; throughput without wrk): see ``Child``.
AIOHTTP_CLIENT = (
    f"aiohttp {aiohttp.__version__} client in its own process (a fresh one per target per round)"
)


# -- streams ---------------------------------------------------------------------------------


@dataclass
class StreamFigures:
    chunks: int = 0
    wall: float = 0.0
    ttfc: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StreamFigures:
        """The figures a child sent (``asdict`` of one); none if it sent nothing."""
        if not data:
            return cls()
        return cls(
            chunks=int(data["chunks"]),
            wall=float(data["wall"]),
            ttfc=[float(x) for x in data["ttfc"]],
            gaps=[float(x) for x in data["gaps"]],
        )


def _events_text(raw: bytes) -> str:
    """The concatenated delta texts of an event stream (for the full check of one stream)."""
    text = []
    for line in raw.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        data = json.loads(line[6:])
        for choice in data.get("choices") or []:
            content = (choice.get("delta") or {}).get("content")
            if content:
                text.append(content)
    return "".join(text)


async def _one_stream(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    body: bytes,
    n: int,
    full_check: bool,
    figures: StreamFigures,
    outcome: Outcome,
) -> None:
    started = time.perf_counter()
    count = 0
    last = 0.0
    tail = b""
    end = b""
    whole = bytearray()
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            if resp.status != 200:
                raw = await resp.read()
                outcome.checked += 1
                outcome.bad(f"HTTP {resp.status}: {raw[:200]!r}")
                return
            async for data in resp.content.iter_any():
                now = time.perf_counter()
                buf = tail + data
                found = buf.count(CONTENT)
                tail = buf[-(len(CONTENT) - 1) :]
                end = (end + data)[-64:]
                if full_check:
                    whole += data
                if found:
                    if count == 0:
                        figures.ttfc.append(now - started)
                    else:
                        figures.gaps.append(now - last)
                    last = now
                    count += found
    except (aiohttp.ClientError, TimeoutError) as exc:
        outcome.checked += 1
        outcome.bad(f"stream broke after {count} chunks: {type(exc).__name__}: {exc}")
        return
    figures.chunks += count
    outcome.checked += 1
    if count != n:
        outcome.bad(f"stream relayed {count} token chunks, want {n}")
    elif b"data: [DONE]" not in end:
        outcome.bad(f"stream did not end with data: [DONE]: {end!r}")
    elif full_check:
        text = _events_text(bytes(whole))
        want = "".join(f" w{i}" for i in range(n))
        if text != want:
            outcome.bad(f"stream text differs: {text[:60]!r}… (want {want[:60]!r}…)")


async def _streams(
    port: int,
    headers: dict[str, str],
    concurrency: int,
    n: int,
    rate: float,
    per_worker: int,
    limit: float,
    outcome: Outcome,
) -> StreamFigures:
    url = f"http://127.0.0.1:{port}{CHAT}"
    body = chat_body(f"bench n={n} rate={rate:g}", stream=True, n=n)
    hdrs = {"Content-Type": "application/json", **headers}
    figures = StreamFigures()
    # Paced workers start spread over one stream's length, as requests arrive in a steady
    # state (a synchronized burst would measure queueing, not relaying); unpaced ones at once.
    spread = n / rate if rate > 0 else 0.0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=limit)
    ) as session:

        async def worker(i: int) -> None:
            await asyncio.sleep(spread * i / concurrency)
            for k in range(per_worker):
                full = i == 0 and k == 0
                await _one_stream(session, url, hdrs, body, n, full, figures, outcome)

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        figures.wall = time.perf_counter() - started
    return figures


def start_streams(
    port: int,
    headers: dict[str, str],
    concurrency: int,
    n: int,
    rate: float,
    outcome: Outcome,
    *,
    per_worker: int = 1,
    timeout: float = 120.0,
) -> Child:
    """The stream client of :func:`streams` in its own process, ready to go: ``with`` it,
    start what brackets the load, then ``StreamFigures.from_json(child.run())``."""
    args = {
        "port": port,
        "headers": headers,
        "concurrency": concurrency,
        "n": n,
        "rate": rate,
        "per_worker": per_worker,
        "timeout": timeout,
    }
    # Each request is bounded by ``timeout``; a worker runs ``per_worker`` of them after its
    # start (spread over one paced stream's length). Past that, plus a margin, it is stuck.
    spread = n / rate if rate > 0 else 0.0
    limit = spread + per_worker * timeout + 30.0
    return Child("streams", args, limit=limit, outcome=outcome)


def streams(
    port: int,
    headers: dict[str, str],
    concurrency: int,
    n: int,
    rate: float,
    outcome: Outcome,
    *,
    per_worker: int = 1,
    timeout: float = 120.0,
) -> StreamFigures:
    """``concurrency`` workers, each running ``per_worker`` streams of ``n`` token chunks one
    after another (``rate`` chunks per second per stream, 0 = as fast as the backend can).
    The first stream's text is checked in full; every stream's chunk count and final
    ``[DONE]``. ``wall`` runs from the first request to the end of the last stream. The client
    runs in its own process (see :class:`Child`)."""
    with start_streams(
        port, headers, concurrency, n, rate, outcome, per_worker=per_worker, timeout=timeout
    ) as child:
        return StreamFigures.from_json(child.run())


# -- the client's own process ----------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
MARK = "BENCHLOAD "  # the child's lines to the parent on stdout start with this
READY_SECONDS = 60.0  # for the child to start and import (a loaded machine is slow)
STDERR_TAIL = 600


class Child:
    """One load client in a fresh process of its own: ``sys.executable -m bench.load KIND
    ARGS`` (``bench`` importable from this checkout). ``with`` it to start the child and wait
    until it is ready (imported, nothing sent yet); :meth:`run` says go and returns the figures
    it sent as JSON, having added its checks and problems to ``outcome``. Whatever goes wrong
    (it cannot start, exits non-zero, sends bad JSON, or outruns ``limit`` seconds and is
    killed by its PID) is one wrong answer in ``outcome`` with its stderr's tail, and
    :meth:`run` returns ``{}``."""

    def __init__(self, kind: str, args: dict[str, Any], *, limit: float, outcome: Outcome) -> None:
        self.kind = kind
        self.args = args
        self.limit = limit
        self.outcome = outcome
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self.buffer = b""
        self.problem: str | None = None
        self.answer: dict[str, Any] = {}

    def __enter__(self) -> Child:
        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.load", self.kind, json.dumps(self.args)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                cwd=REPO,
                env=env,
                bufsize=0,
            )
        except OSError as exc:
            self.problem = f"{self.kind} client did not start: {exc}"
            return self
        line = self._line(time.monotonic() + READY_SECONDS)
        if line != "ready":
            self.problem = self._failure(f"was not ready (limit {READY_SECONDS:g} s)", line)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()  # only when stuck or failed: this child, by its PID
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self.stderr is not None:
            self.stderr.close()

    def run(self) -> dict[str, Any]:
        """Say go; wait (at most ``limit`` seconds) for the child's answer and its exit."""
        if self.problem is None:
            self.problem = self._run()
        if self.problem is not None:
            self.outcome.bad(self.problem)
            return {}
        return self.answer

    def _run(self) -> str | None:
        if self.proc is None or self.proc.stdin is None:
            return f"{self.kind} client process was not started"
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        except OSError as exc:
            return self._failure(f"could not be told to go ({exc})", None)
        deadline = time.monotonic() + self.limit
        line = self._line(deadline)
        if line is None:  # it ended its output (exited?) or outran its limit
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(max(0.0, min(5.0, deadline - time.monotonic())))
            if self.proc.returncode is not None:
                return self._failure("exited without an answer", None)
            return self._failure(f"sent no answer (limit {self.limit:g} s)", None)
        try:
            data = json.loads(line)
            self.outcome.absorb(data["outcome"])
            self.answer = dict(data["figures"])
        except (ValueError, KeyError, TypeError) as exc:
            return self._failure(f"sent a bad answer ({type(exc).__name__}: {exc})", line)
        try:
            code = self.proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return self._failure("did not exit", None)
        return None if code == 0 else self._failure("exited", None)

    def _line(self, deadline: float) -> str | None:
        """The child's next line marked for us (others are ignored), or None at its end of
        output or at ``deadline``."""
        if self.proc is None or self.proc.stdout is None:
            return None
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                while b"\n" in self.buffer:
                    raw, self.buffer = self.buffer.split(b"\n", 1)
                    text = raw.decode(errors="replace")
                    if text.startswith(MARK):
                        return text[len(MARK) :]
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                data = os.read(fd, 1 << 20)
                if not data:
                    return None
                self.buffer += data

    def _failure(self, what: str, line: str | None) -> str:
        if self.proc is None:
            return f"{self.kind} client process {what}"
        if self.proc.poll() is None:
            self.proc.kill()  # stuck or confused: this child, by its PID
            what += f"; killed it (pid {self.proc.pid})"
        else:
            what += f" (exit status {self.proc.returncode})"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        tail = ""
        if self.stderr is not None:
            self.stderr.seek(0)
            tail = self.stderr.read().decode(errors="replace").strip()[-STDERR_TAIL:]
        got = f"; sent {line[:200]!r}" if line else ""
        return f"{self.kind} client process {what}{got}; stderr: {tail or '(empty)'}"


def _child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one measurement here (in the child) and return what the parent needs."""
    outcome = Outcome()
    figures: dict[str, Any]
    if kind == "streams":
        done = asyncio.run(
            _streams(
                args["port"],
                args["headers"],
                args["concurrency"],
                args["n"],
                args["rate"],
                args["per_worker"],
                args["timeout"],
                outcome,
            )
        )
        figures = asdict(done)
    elif kind == "throughput":
        rps = asyncio.run(
            _aiohttp_throughput(
                args["port"], args["headers"], args["concurrency"], args["seconds"], outcome
            )
        )
        figures = {"rps": rps}
    else:
        raise SystemExit(f"unknown load client {kind!r}")
    return {"outcome": asdict(outcome), "figures": figures}


def main(argv: list[str]) -> int:
    """``python -m bench.load KIND ARGS_JSON``: say ready, wait for go, measure, answer."""
    kind, args = argv[0], json.loads(argv[1])
    print(MARK + "ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2  # the parent gave up (or died) before the load
    answer = _child(kind, args)
    sys.stdout.write(MARK + json.dumps(answer, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
