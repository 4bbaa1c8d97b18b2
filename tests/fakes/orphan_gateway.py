"""A stand-in gateway for the orphan tests: starts backends under a Reaper, then waits to die.

    python tests/fakes/orphan_gateway.py --pidfile GRANDCHILD_PIDFILE [--starting]
        [--helpers DIR] [--no-reaper]

It starts the orphan watchdog (:class:`modelswap.supervisor.reaper.Reaper`) and, through real
:class:`ManagedProcess` objects, these fake backends:

* ``plain``: a well-behaved fake;
* ``grandchild``: a fake that forks a grandchild which calls ``setsid()`` (PID in PIDFILE);
* ``stubborn``: a fake that ignores SIGTERM;
* ``wrapped``: a fake run by ``bash -c '... ; true'``, so bash stays its parent;
* ``starting`` (with ``--starting``): a fake that is still loading (60 s) when we are killed;
* ``daemon``, ``nohup``, ``stubborn-daemon`` (with ``--helpers DIR``): fakes run by
  ``tests/fakes/helper_spawner.py``, each leaving an orphaned helper (PID in DIR/<name>.pid).

``--no-reaper`` starts no orphan watchdog: then only the backends' keepers end their trees.

When the ready ones are ready it prints one JSON line to stdout::

    {"gateway": PID, "reaper": PID or null, "backends": {"plain": PID, ...},
     "keepers": {"plain": PID, ...}, "wrapped_children": [PID]}

and sleeps until killed. The test SIGKILLs it and checks that nothing it started survives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
FAKE = REPO / "tests" / "fakes" / "openai_backend.py"
SPAWNER = REPO / "tests" / "fakes" / "helper_spawner.py"

# Importable both from a checkout and an installed package; the watchdog inherits PYTHONPATH.
sys.path.insert(0, str(SRC))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)

import aiohttp  # noqa: E402
import psutil  # noqa: E402

from modelswap.backends.diagnose import GenericDiagnoser  # noqa: E402
from modelswap.config import ModelConfig, Timeouts  # noqa: E402
from modelswap.events import EventBus  # noqa: E402
from modelswap.supervisor.process import ManagedProcess  # noqa: E402
from modelswap.supervisor.reaper import Reaper  # noqa: E402


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def model(name: str, cmd: list[str], port: int) -> ModelConfig:
    return ModelConfig(
        id=name,
        cmd=tuple(cmd),
        cmd_stop=None,
        proxy=f"http://127.0.0.1:{port}",
        port=port,
        aliases=(),
        use_model_name=None,
        env={},
        check_endpoint="/health",
        ttl=0.0,
        unlisted=False,
        name=None,
        description=None,
        backend="llamacpp",
        timeouts=Timeouts(),
        start_timeout=30.0,
        silence_timeout=30.0,
        failure_backoff=0.0,
    )


def commands(pidfile: str, starting: bool, helpers: str | None) -> dict[str, tuple[list[str], int]]:
    def fake(*extra: str) -> tuple[list[str], int]:
        port = free_port()
        return [sys.executable, str(FAKE), "--port", str(port), *extra], port

    wrapped, wrapped_port = fake()
    specs = {
        "plain": fake(),
        "grandchild": fake("--fork-grandchild", pidfile),
        "stubborn": fake("--ignore-sigterm"),
        # "; true" keeps bash alive as the fake's parent instead of exec-ing it.
        "wrapped": (["bash", "-c", f"{shlex.join(wrapped)} ; true"], wrapped_port),
    }
    if starting:
        specs["starting"] = fake("--load-delay", "60")
    if helpers is not None:
        for name, mode, extra in (
            ("daemon", "daemon", []),
            ("nohup", "nohup", []),
            ("stubborn-daemon", "daemon", ["--stubborn"]),
        ):
            cmd, port = fake()
            spawner = [sys.executable, str(SPAWNER), "--mode", mode, *extra]
            helper_pidfile = str(Path(helpers) / f"{name}.pid")
            specs[name] = ([*spawner, "--pidfile", helper_pidfile, "--", *cmd], port)
    return specs


async def amain(pidfile: str, starting: bool, helpers: str | None, use_reaper: bool) -> None:
    reaper = Reaper() if use_reaper else None
    if reaper is not None:
        reaper.start()
    events = EventBus()
    async with aiohttp.ClientSession() as session:
        processes = {
            name: ManagedProcess(
                model(name, cmd, port),
                events=events,
                session=session,
                diagnoser=GenericDiagnoser(),
                reaper=reaper,
                stop_grace=1.0,
            )
            for name, (cmd, port) in commands(pidfile, starting, helpers).items()
        }
        slow = processes.pop("starting", None)
        loading: asyncio.Task[None] | None = None
        spawned = asyncio.Event()
        if slow is not None:
            # The child prints this once it runs, so by then slow.pid is set.
            slow.logs.add_listener(lambda line: spawned.set() if "pid=" in line else None)
            loading = asyncio.create_task(slow.ensure_ready())
        await asyncio.gather(*(process.ensure_ready() for process in processes.values()))
        if slow is not None:
            processes["starting"] = slow
            await spawned.wait()
        pids = {name: process.pid for name, process in processes.items()}
        wrapper_pid = pids["wrapped"]
        assert wrapper_pid is not None
        children = [child.pid for child in psutil.Process(wrapper_pid).children(recursive=True)]
        line = {
            "gateway": os.getpid(),
            "reaper": reaper.pid if reaper is not None else None,
            "keepers": {name: process.keeper_pid for name, process in processes.items()},
            "backends": pids,
            "wrapped_children": children,
        }
        print(json.dumps(line), flush=True)
        await asyncio.Event().wait()
        assert loading is None or loading.done()  # never reached: we are killed first


def main() -> None:
    parser = argparse.ArgumentParser(description="A stand-in gateway for the orphan tests.")
    parser.add_argument("--pidfile", required=True, help="where the grandchild's PID goes")
    parser.add_argument("--starting", action="store_true", help="also leave one backend loading")
    parser.add_argument("--helpers", metavar="DIR", help="also run fakes that leave helpers")
    parser.add_argument("--no-reaper", action="store_true", help="start no orphan watchdog")
    args = parser.parse_args()
    asyncio.run(amain(args.pidfile, args.starting, args.helpers, not args.no_reaper))


if __name__ == "__main__":
    main()
