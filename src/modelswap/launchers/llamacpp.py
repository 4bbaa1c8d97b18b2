"""Start llama.cpp's HTTP server (via the ``xllamacpp`` wheel) with ``llama-server``-style flags.

``xllamacpp`` runs the real llama.cpp server in-process but has no command line of its own, so
the demo and the tests use this module as their ``llama-server``::

    python -m modelswap.launchers.llamacpp -m model.gguf --host 127.0.0.1 --port 8081 -c 2048

The server binds its port at once (``/health`` answers 503 while the model loads) and serves on
its own threads; this process then waits for SIGTERM/SIGINT and exits 0. Errors (a missing
model file, a port in use) exit 1 with a one-line reason on stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m modelswap.launchers.llamacpp",
        description="llama.cpp server (xllamacpp) with llama-server flags",
    )
    parser.add_argument("-m", "--model", required=True, help="path to a GGUF file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("-c", "--ctx-size", type=int, default=4096, help="total context (tokens)")
    parser.add_argument("-np", "--parallel", type=int, default=1, help="number of slots")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-tb", "--threads-batch", type=int, default=None)
    parser.add_argument("-b", "--batch-size", type=int, default=None)
    parser.add_argument("-a", "--alias", action="append", default=[], help="served model name")
    parser.add_argument("--embeddings", "--embedding", action="store_true")
    parser.add_argument(
        "--pooling",
        choices=["none", "mean", "cls", "last", "rank"],
        default=None,
        help="embedding pooling (default: the model's; use mean for OpenAI /v1/embeddings)",
    )
    parser.add_argument(
        "--reranking",
        "--rerank",
        action="store_true",
        help="serve /v1/rerank (as llama-server: embeddings with rank pooling)",
    )
    parser.add_argument("--metrics", action="store_true", help="enable /metrics")
    parser.add_argument("--no-slots", action="store_true")
    parser.add_argument("--api-key", default=None)
    parser.add_argument(
        "--slot-save-path",
        default=os.environ.get("LLAMA_ARG_SLOT_SAVE_PATH") or None,
        help="a folder for POST /slots/{id}?action=save|restore (as llama-server, also from "
        "$LLAMA_ARG_SLOT_SAVE_PATH; without it the server answers those 501)",
    )
    parser.add_argument(
        "-lv",
        "--verbosity",
        "--log-verbosity",
        type=int,
        default=4,
        help="log verbosity (default 4: the model-loading lines llama-server prints, including "
        "the KV cache size the capacity receipt reads; 3 hides them)",
    )
    return parser


def _params(args: argparse.Namespace) -> object:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.verbosity = args.verbosity
    params.cpuparams_batch.n_threads = args.threads_batch or args.threads
    if args.batch_size:
        params.n_batch = args.batch_size
    if args.alias:
        params.model_alias = set(args.alias)
    params.embedding = args.embeddings or args.reranking
    pooling = "rank" if args.reranking else args.pooling
    if pooling:
        params.pooling_type = getattr(
            xllamacpp.llama_pooling_type, f"LLAMA_POOLING_TYPE_{pooling.upper()}"
        )
    params.endpoint_props = True
    params.endpoint_metrics = args.metrics
    params.endpoint_slots = not args.no_slots
    if args.api_key:
        params.api_keys = [args.api_key]
    if args.slot_save_path:
        # llama-server appends the separator itself; the server joins folder + file name
        params.slot_save_path = os.path.join(args.slot_save_path, "")
    return params


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not os.path.isfile(args.model):
        print(f"error loading model: file not found: {args.model}", file=sys.stderr, flush=True)
        return 1
    if args.slot_save_path:
        try:
            os.makedirs(args.slot_save_path, exist_ok=True)
        except OSError as exc:
            print(f"error: --slot-save-path: {exc}", file=sys.stderr, flush=True)
            return 1
    try:
        import xllamacpp
    except ImportError as exc:
        # The package itself, or a shared library it needs (e.g. libgomp.so.1 in a slim image).
        missing = (
            "the xllamacpp package is missing: pip install 'modelswap[llamacpp]'"
            if exc.name == "xllamacpp"
            else f"xllamacpp cannot be loaded: {exc}"
        )
        print(f"error: {missing}", file=sys.stderr, flush=True)
        return 1
    # Block the stop signals before the server's threads exist, so they inherit the mask and
    # only sigwait() below receives them: the process then always exits cleanly with 0.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        server = xllamacpp.Server(_params(args))
    except Exception as exc:  # xllamacpp raises RuntimeError("Failed to init server")
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"server is listening on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    received = signal.sigwait(stop_signals)
    print(f"received {signal.Signals(received).name}, exiting", file=sys.stderr, flush=True)
    del server
    # The server's own threads can take a while to join; the OS reclaims them at exit.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
