"""First chunk at c=32 and c=128, split: a stream on a new connection vs one on a kept one.

    .venv/bin/python bench/first_chunk_split.py [--rounds 4] [--llama-swap PATH]

The suite's unpaced streams (``bench/load.py``) run two streams per worker, one after the
other on the same aiohttp session: the first opens its connection (an accept in the gateway,
its connection set up, then the request), the second reuses it while the other workers still
stream. Their first-chunk times mix in the suite's p50; here they are reported apart, per
target (``direct``, llama-swap with ``--llama-swap``, modelswap), the rounds alternating the
targets, so a gap says whether it lies in taking connections or in starting a request on one.
The client runs in this process (aiohttp), the same for every target.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import load
from bench.targets import Fleet

CASES = ((32, 250), (128, 100))  # (concurrency, chunks per stream), as the suite's unpaced


async def first_chunks(port: int, concurrency: int, n: int) -> dict[str, list[float]]:
    """``concurrency`` workers, each a stream on a new connection then one on the same
    connection: seconds to the first token chunk of each, by kind."""
    url = f"http://127.0.0.1:{port}{load.CHAT}"
    body = load.chat_body(f"bench n={n}", stream=True, n=n)
    found: dict[str, list[float]] = {"new": [], "kept": []}
    outcome = load.Outcome()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one(kind: str) -> None:
            began = time.perf_counter()
            first: float | None = None
            count = 0
            tail = b""  # a chunk's marker may straddle two reads
            headers = {"Content-Type": "application/json"}
            async with session.post(url, data=body, headers=headers) as resp:
                async for data in resp.content.iter_any():
                    buf = tail + data
                    count += buf.count(load.CONTENT)
                    tail = buf[-(len(load.CONTENT) - 1) :]
                    if first is None and count:
                        first = time.perf_counter() - began
            outcome.checked += 1
            if resp.status != 200 or count != n or first is None:
                outcome.bad(f"{kind}: HTTP {resp.status}, {count} chunks (want {n})")
                return
            found[kind].append(first)

        async def worker() -> None:
            await one("new")
            await one("kept")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    if outcome.failed:
        raise RuntimeError(f"wrong answers: {outcome.errors[:3]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--llama-swap", metavar="PATH", help="llama-swap's binary, measured too")
    args = parser.parse_args()
    names = ["direct", *(["llama-swap"] if args.llama_swap else []), "modelswap"]
    figures: dict[tuple[str, int, str], list[float]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="modelswap-first-chunk-"))
    with Fleet(names, workdir, llamacpp=False, llama_swap=args.llama_swap) as fleet:
        for round_no in range(args.rounds):
            order = names[round_no % len(names) :] + names[: round_no % len(names)]
            for concurrency, n in CASES:
                for name in order:
                    port = fleet.targets[name].port
                    for kind, values in asyncio.run(first_chunks(port, concurrency, n)).items():
                        figures.setdefault((name, concurrency, kind), []).extend(values)
    print(f"first token chunk p50, ms ({args.rounds} rounds; unpaced streams, 2 per worker)")
    print(f"  {'case':6} {'target':12} {'all':>7} {'new connection':>15} {'kept connection':>16}")
    for concurrency, _ in CASES:
        for name in names:
            new = figures[(name, concurrency, "new")]
            kept = figures[(name, concurrency, "kept")]
            print(
                f"  c={concurrency:<4d} {name:12} {statistics.median(new + kept) * 1e3:7.1f} "
                f"{statistics.median(new) * 1e3:15.1f} {statistics.median(kept) * 1e3:16.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
