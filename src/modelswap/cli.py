"""Command line: ``modelswap serve | check | schema``. Exit codes: 0 ok, 1 runtime error,
2 bad usage or invalid configuration."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from modelswap import __version__
from modelswap.backends.diagnose import diagnose_text, missing_tool_flags
from modelswap.config import (
    Config,
    config_json_schema,
    demo_config,
    load_config,
    override_listen,
)
from modelswap.errors import ConfigError
from modelswap.http.app import create_app
from modelswap.runtime import Runtime

log = logging.getLogger("modelswap")

EXIT_OK, EXIT_RUNTIME, EXIT_CONFIG = 0, 1, 2
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modelswap",
        description="One OpenAI-compatible endpoint that starts and swaps local model servers.",
    )
    parser.add_argument("--version", action="version", version=f"modelswap {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument(
        "-c", "--config", help="YAML config file (default: the built-in SmolLM2 demo)"
    )
    serve.add_argument("--listen", help="host:port to listen on (overrides the config's listen)")
    serve.add_argument("--log-level", choices=sorted(_LEVELS), help="overrides logLevel")
    check = sub.add_parser("check", help="validate a config and print the resolved commands")
    check.add_argument("config", nargs="?", help="YAML config file (default: the demo config)")
    sub.add_parser("schema", help="print the config's JSON Schema (for editor completion)")
    diag = sub.add_parser(
        "diagnose",
        help="explain why a backend failed to start, from its saved log",
        description="Read a saved backend log and print the root cause as JSON "
        "(exit 0 when a known cause is found, 1 when not).",
    )
    # Every known format is read (vLLM's and llama.cpp's lines never collide), so there is
    # no --backend switch: it could not change the answer.
    diag.add_argument("log", help="log file ('-' for standard input)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "schema":
        print(json.dumps(config_json_schema(), indent=2))
        return EXIT_OK
    if args.command == "diagnose":
        return diagnose_file(args.log)
    try:
        config = load_config(args.config) if args.config else demo_config()
        if args.command == "serve" and args.listen:
            config = override_listen(config, args.listen)
    except ConfigError as exc:
        source = args.config or "the built-in demo config"
        print(f"modelswap: invalid configuration in {source}:", file=sys.stderr)
        for path, message in exc.problems:
            print(f"  {path}: {message}" if path else f"  {message}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check":
        print(describe(config))
        return EXIT_OK
    _setup_logging(args.log_level or config.log_level)
    try:
        return asyncio.run(serve(config))
    except KeyboardInterrupt:
        return EXIT_OK


def diagnose_file(path: str) -> int:
    """``modelswap diagnose FILE``: the Diagnosis of a saved log as JSON."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(errors="replace")
    except OSError as exc:
        print(f"modelswap: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CONFIG
    found = diagnose_text(text)
    if found is None:
        print(json.dumps({"code": None, "summary": "no known cause of failure in this log"}))
        return EXIT_RUNTIME
    print(json.dumps(found.as_dict(), indent=2))
    return EXIT_OK


def describe(config: Config) -> str:
    """The resolved configuration, one block per model (no process is started)."""
    lines = [
        f"config: {config.source}",
        f"listen: {_host_port(config.listen_host, config.listen_port)}",
        f"models: {len(config.models)}",
    ]
    for model in config.models.values():
        lines.append("")
        lines.append(
            f"{model.id}" + (f"  (aliases: {', '.join(model.aliases)})" if model.aliases else "")
        )
        lines.append(f"  cmd:   {shlex.join(model.cmd)}")
        if model.cmd_stop:
            lines.append(f"  stop:  {shlex.join(model.cmd_stop)}")
        lines.append(f"  proxy: {model.proxy}")
        lines.append(f"  check: {model.check_endpoint or 'none'}")
        lines.append(f"  ttl:   {model.ttl:g} s" if model.ttl else "  ttl:   never")
        if model.use_model_name:
            lines.append(f"  upstream name: {model.use_model_name}")
        if model.env:
            lines.append(f"  env:   {', '.join(sorted(model.env))}")
        note = missing_tool_flags(model.cmd)
        if note:
            lines.append(f"  info:  {note}")
    return "\n".join(lines)


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=_LEVELS.get(level, logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


async def serve(config: Config, *, ready: asyncio.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT; then finish in-flight requests and stop every backend."""
    runtime = Runtime(config)
    await runtime.start()
    runner = web.AppRunner(
        create_app(runtime), handler_cancellation=True, access_log=None, shutdown_timeout=10.0
    )
    await runner.setup()
    site = web.TCPSite(runner, config.listen_host, config.listen_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await runtime.close()
        where = _host_port(config.listen_host, config.listen_port)
        print(f"modelswap: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_RUNTIME
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    where = _host_port(config.listen_host, config.listen_port)
    log.info(
        "listening on http://%s with %d models: %s",
        where,
        len(config.models),
        ", ".join(config.models),
    )
    print(f"modelswap {__version__} listening on http://{where}", file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info("shutting down: finishing in-flight requests, then stopping backends")
        await runner.cleanup()
        await runtime.close()
    return EXIT_OK
