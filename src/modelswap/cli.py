"""Command line: ``modelswap serve | check | plan | schema``. Exit codes: 0 ok, 1 runtime error,
2 bad usage or invalid configuration."""

from __future__ import annotations

import argparse
import atexit
import gc
import json
import logging
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from modelswap import __version__
from modelswap.planner import command as plan_command

if TYPE_CHECKING:
    import asyncio

    from modelswap.config import Config
    from modelswap.redact import Redactor

# Each subcommand imports only what it uses, inside its function: `diagnose` and `check` never
# load the server (aiohttp, http/), and nothing loads numpy unless it plans a GGUF file.

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
    serve.add_argument(
        "--watch-config",
        action="store_true",
        help="apply edits of the config file as they are saved (SIGHUP always reloads it)",
    )
    serve.add_argument("--log-level", choices=sorted(_LEVELS), help="overrides logLevel")
    serve.add_argument(
        "--allow-unauthenticated-network",
        action="store_true",
        help="allow a non-loopback --listen address without apiKeys (a trusted network only)",
    )
    serve.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the event loop: uvloop (libuv; ~10%% less CPU per relayed request, the default "
        "where it is installed) or Python's own asyncio",
    )
    check = sub.add_parser("check", help="validate a config and print the resolved commands")
    check.add_argument("config", nargs="?", help="YAML config file (default: the demo config)")
    check.add_argument(
        "--show", action="store_true", help="print the whole resolved config as JSON, redacted"
    )
    check.add_argument(
        "--explain", action="store_true", help="also show how each llama-swap key was read"
    )
    check.add_argument(
        "--listen",
        help="the host:port serve will listen on (else a port clash with the "
        "default 127.0.0.1:8080 is not assumed)",
    )
    audit = sub.add_parser(
        "audit",
        help="security report of a config file or a running instance",
        description="Rate exposure, keys, open switches, remote backends and plain-text "
        "secrets; exit 1 when anything is rated high, 2 when there is nothing to rate (an "
        "invalid config, or --url whose report cannot be read).",
    )
    audit.add_argument("--config", help="YAML config file (default: the demo config)")
    audit.add_argument("--url", help="a running modelswap, e.g. http://127.0.0.1:8080")
    audit.add_argument("--key", help="a key with the read scope, for --url (or MODELSWAP_KEY)")
    act = sub.add_parser("activity", help="print the activity log (one row per request)")
    act.add_argument("--config", help="YAML config file (default: the demo config)")
    act.add_argument("--db", help="the activity database (default: from the config)")
    act.add_argument("--model", help="only this model")
    act.add_argument("--limit", type=int, default=50, help="rows (newest first; default 50)")
    sub.add_parser("schema", help="print the config's JSON Schema (for editor completion)")
    plan_parser = sub.add_parser(
        "plan",
        help="will this model serve this context on this GPU? (the fit planner)",
        description="Size weights, KV cache and per-sequence state from a model folder, a GGUF "
        "header or a configured model, and say whether it fits (exit 1 when it does not). "
        "With --config FILE MODEL: the load dry run (what it evicts, its memory and time); "
        "with --config FILE --together: which models run side by side, as llama-swap YAML.",
    )
    plan_command.add_arguments(plan_parser)
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
    if args.command != "serve":
        _skip_the_last_collection()
    if args.command == "schema":
        from modelswap.config import config_json_schema

        print(json.dumps(config_json_schema(), indent=2))
        return EXIT_OK
    if args.command == "diagnose":
        return diagnose_file(args.log)
    if args.command == "plan":
        from modelswap import plan_offline  # the scheduler's code: only for these two

        if plan_offline.wants_offline(args):
            return plan_offline.run(args)
        return plan_command.run(args)
    if args.command == "audit":
        return run_audit(args)
    if args.command == "activity":
        return print_activity(args)
    return check_or_serve(args)


def _skip_the_last_collection() -> None:
    """A command that exits once its one job is done (all but ``serve``) skips the garbage
    collection the interpreter runs on its way out: ``gc.freeze()`` at exit moves every object
    out of the collector's reach, so that last pass has nothing to walk. Walking the ~30,000
    objects the config's imports build (pydantic's models above all) was ~45 ms of ``check``
    here (docs/PERFORMANCE.md, "Command-line starts"). None of these commands leaves work to a
    finalizer; the memory goes back to the system with the process."""
    global _FREEZE_AT_EXIT
    if not _FREEZE_AT_EXIT:
        _FREEZE_AT_EXIT = True
        atexit.register(gc.freeze)


_FREEZE_AT_EXIT = False


def check_or_serve(args: argparse.Namespace) -> int:
    """``modelswap check`` (the resolved config, nothing started) and ``modelswap serve``."""
    from modelswap.config import demo_config, load_config, override_listen
    from modelswap.config.preflight import check_runnable, missing_executables
    from modelswap.errors import ConfigError

    try:
        config = load_config(args.config) if args.config else demo_config()
        if args.listen:
            config = override_listen(config, args.listen)
        serving = args.command == "serve"
        check_runnable(config, executables=serving, listen=serving)  # port clashes; programs
    except ConfigError as exc:
        source = args.config or "the built-in demo config"
        print(f"modelswap: invalid configuration in {source}:", file=sys.stderr)
        for path, message in exc.problems:
            print(f"  {path}: {message}" if path else f"  {message}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check":
        return print_check(args, config, missing_executables(config))
    return run_serve(args, config)


def print_check(
    args: argparse.Namespace, config: Config, missing: Iterable[tuple[str, str]]
) -> int:
    from modelswap.config.compat import explain
    from modelswap.config.export import export_config
    from modelswap.redact import Redactor

    for path, message in missing:  # `serve` refuses these, here
        print(f"modelswap: note: {path}: {message}", file=sys.stderr)
    if args.show:
        print(json.dumps(export_config(config, Redactor(config.secrets)), indent=2))
    else:
        print(describe(config))
    if args.explain:
        print(f"\n{explain(config.compat)}")
    return EXIT_OK


def run_serve(args: argparse.Namespace, config: Config) -> int:
    from modelswap.config.security import exposure_problem
    from modelswap.http.server.serving import serve
    from modelswap.redact import Redactor
    from modelswap.reload import Reloading

    allow = args.allow_unauthenticated_network or config.security.allow_unauthenticated_network
    refused = exposure_problem(config.listen_host, config.api_keys, allow)
    if refused:
        print(f"modelswap: {refused}", file=sys.stderr)
        return EXIT_CONFIG
    log_filter = _setup_logging(
        args.log_level or config.log_level,
        Redactor(config.secrets),
        to_stdout=config.log_to_stdout,
        time_format=config.log_time_format,
    )
    reloading = Reloading(
        path=args.config,
        watch=args.watch_config,
        keep_listen=bool(args.listen),
        on_applied=lambda new: log_filter.add_secrets(new.secrets),
    )
    # The event loop must get the GIL back within 0.5 ms from any worker thread (the activity
    # log's batches, to_thread calls): at the default 5 ms a request arriving during a batch
    # waited up to 5 ms, the gateway's c=1 p99 (docs/PERFORMANCE.md, "The c=1 p99").
    sys.setswitchinterval(0.0005)
    try:
        import asyncio

        with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
            return runner.run(
                serve(config, allow_unauthenticated_network=allow, reloading=reloading)
            )
    except KeyboardInterrupt:
        return EXIT_OK


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop when asked for and installed (it is not on Windows), else asyncio's."""
    if name == "uvloop":
        try:
            import uvloop
        except ImportError:
            return None
        return uvloop.new_event_loop
    return None


def run_audit(args: argparse.Namespace) -> int:
    """``modelswap audit``: findings one per line, high first; exit 1 if any is high, 2 if
    there was nothing to rate (an invalid config, an instance whose report cannot be read)."""
    from modelswap.audit import (
        HIGH,
        MEDIUM,
        ReportUnavailable,
        audit_config,
        audit_url,
        key_from_env,
    )
    from modelswap.config import demo_config, load_config
    from modelswap.errors import ConfigError

    if args.url:
        try:
            findings = audit_url(args.url, args.key or key_from_env())
        except ReportUnavailable as exc:
            print(f"modelswap audit: {exc}; nothing was rated", file=sys.stderr)
            return EXIT_CONFIG
    else:
        try:
            config = load_config(args.config) if args.config else demo_config()
        except ConfigError as exc:
            print(f"modelswap: invalid configuration: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        findings = audit_config(config, Path(args.config) if args.config else None)
    order = {HIGH: 0, MEDIUM: 1}
    for finding in sorted(findings, key=lambda f: order.get(f.severity, 2)):
        print(finding.line())
    high = sum(f.severity == HIGH for f in findings)
    print(f"\n{high} high, {sum(f.severity == MEDIUM for f in findings)} medium")
    return EXIT_RUNTIME if high else EXIT_OK


def print_activity(args: argparse.Namespace) -> int:
    """``modelswap activity``: the newest requests as a table."""
    from modelswap.config import demo_config, load_config
    from modelswap.errors import ConfigError
    from modelswap.observe.activity import ActivityLog

    path = args.db
    if path is None:
        try:
            config = load_config(args.config) if args.config else demo_config()
        except ConfigError as exc:
            print(f"modelswap: invalid configuration: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        obs = config.observability
        state = Path(config.scheduling.state_dir).expanduser()
        path = obs.activity_path or str(state / "activity.sqlite3")
    if path != ":memory:" and not Path(path).expanduser().is_file():
        print(f"modelswap: no activity database at {path}", file=sys.stderr)
        return EXIT_RUNTIME
    store = ActivityLog(Path(path).expanduser())
    try:
        rows = store.query(model=args.model, limit=args.limit)
    finally:
        store.close_now()
    print(format_activity(rows))
    return EXIT_OK


def format_activity(rows: list[dict[str, object]]) -> str:
    columns = [
        ("time", 19),
        ("key", 10),
        ("model", 18),
        ("route", 22),
        ("status", 6),
        ("stream", 6),
        ("prompt", 6),
        ("compl", 6),
        ("ttft s", 7),
        ("dur s", 7),
        ("tok/s", 7),
        ("error", 16),
    ]
    out = ["  ".join(f"{name:<{width}}" for name, width in columns)]
    for row in rows:
        at = row.get("at")
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at)))
            if isinstance(at, int | float)
            else "?"
        )
        values = [
            when,
            row.get("key_name") or "-",
            row.get("model") or "-",
            row.get("route"),
            row.get("status"),
            "yes" if row.get("streamed") else "no",
            _cell(row.get("prompt_tokens")),
            _cell(row.get("completion_tokens")),
            _cell(row.get("ttft"), 3),
            _cell(row.get("duration"), 3),
            _cell(row.get("tokens_per_second"), 1),
            row.get("error_code") or "",
        ]
        out.append(
            "  ".join(f"{str(v)[:w]:<{w}}" for v, (_, w) in zip(values, columns, strict=True))
        )
    out.append(f"{len(rows)} requests")
    return "\n".join(out)


def _cell(value: object, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def diagnose_file(path: str) -> int:
    """``modelswap diagnose FILE``: the Diagnosis of a saved log as JSON."""
    from modelswap.backends.diagnose import diagnose_text

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
    """The resolved configuration, one block per model (no process is started); secrets
    masked like every other surface."""
    from modelswap.backends.hints import missing_tool_flags
    from modelswap.config.security import host_port
    from modelswap.planner.from_config import check_line
    from modelswap.redact import Redactor

    redactor = Redactor(config.secrets)
    lines = [
        f"config: {config.source}",
        f"listen: {host_port(config.listen_host, config.listen_port)}",
        f"models: {len(config.models)}",
    ]
    for model in config.models.values():
        lines.append("")
        lines.append(
            f"{model.id}" + (f"  (aliases: {', '.join(model.aliases)})" if model.aliases else "")
        )
        lines.append(f"  cmd:   {shlex.join(redactor.argv(model.cmd))}")
        if model.cmd_stop:
            lines.append(f"  stop:  {shlex.join(redactor.argv(model.cmd_stop))}")
        lines.append(f"  proxy: {redactor.url(model.proxy)}")
        lines.append(f"  check: {model.check_endpoint or 'none'}")
        lines.append(f"  ttl:   {model.ttl:g} s" if model.ttl else "  ttl:   never")
        if model.use_model_name:
            lines.append(f"  upstream name: {model.use_model_name}")
        if model.env:
            lines.append(f"  env:   {', '.join(sorted(model.env))}")
        planned = check_line(model.cmd)
        if planned:
            lines.append(f"  plan:  {planned}")
        if model.fallback:
            lines.append(f"  fallback: {', '.join(model.fallback)}")
        note = missing_tool_flags(model.cmd)
        if note:
            lines.append(f"  info:  {note}")
    for peer in config.peers.values():
        served = "discovered from its /v1/models" if peer.discover else ", ".join(peer.models)
        key = "with its key" if peer.api_key else "no key"
        lines += ["", f"peer {peer.id}: {redactor.url(peer.proxy)} ({key})", f"  models: {served}"]
    return "\n".join(lines)


class RedactingFilter(logging.Filter):
    """Masks secrets in every gateway log record (message and arguments, as rendered)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """A reloaded config's secrets are masked too (the old ones stay masked)."""
        self._redactor = self._redactor.with_secrets(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._redactor.text(message)
        if redacted != message or record.args:
            record.msg, record.args = redacted, None
        return True


def _setup_logging(
    level: str, redactor: Redactor, *, to_stdout: str | None = None, time_format: str = ""
) -> RedactingFilter:
    """The gateway's log: stderr, or stdout with llama-swap's ``logToStdout: proxy|both``; its
    timestamps in a Go layout with ``logTimeFormat``."""
    from modelswap.config.logtime import GoTimeFormatter, layout

    handler = logging.StreamHandler(sys.stdout if to_stdout in ("proxy", "both") else sys.stderr)
    line = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    render = layout(time_format)
    handler.setFormatter(
        GoTimeFormatter(line, render) if render is not None else logging.Formatter(line)
    )
    log_filter = RedactingFilter(redactor)
    handler.addFilter(log_filter)
    logging.basicConfig(level=_LEVELS.get(level, logging.INFO), handlers=[handler])
    return log_filter
