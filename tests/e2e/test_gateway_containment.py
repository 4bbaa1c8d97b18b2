"""Containment end to end: ``python -m modelswap serve`` with backends that leave helpers.

Each model runs ``tests/fakes/helper_spawner.py``, which leaves a helper the way daemons do —
double fork + ``setsid()`` (``daemon``), or ``nohup`` in a process group of its own (``nohup``)
— then becomes the fake backend. The helper is an orphan before the model is ready. It must end
when its model is unloaded or swapped out, when the gateway is stopped (SIGTERM), and when the
gateway is SIGKILLed. The gateway uses whatever containment this machine allows (a cgroup per
backend where cgroup v2 is writable, the keeper subreaper otherwise; ``/api/security`` says).

Waits have a ceiling that only ends a hang; the measured figures are printed (``pytest -s``)
and kept as test properties.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import REPO, Gateway, fake_cmd_text, request

from modelswap.supervisor.containment import detect

pytestmark = pytest.mark.e2e

SPAWNER = REPO / "tests" / "fakes" / "helper_spawner.py"
CEILING = 30.0  # only ends a hang: a helper is expected gone within about a second
MODES = ("daemon", "nohup")

StartGateway = Callable[..., Gateway]
Record = Callable[[str, object], None]


def alive(proc: psutil.Process) -> bool:
    """This exact process (pid + creation time) still runs; a zombie counts as dead."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Helpers:
    """The helpers the fakes announce, as psutil handles; teardown kills the ones alive."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.procs: list[psutil.Process] = []

    def pidfile(self, model: str) -> Path:
        return self.directory / f"{model}.helper.pid"

    def of(self, model: str) -> psutil.Process:
        proc = psutil.Process(int(self.pidfile(model).read_text()))
        self.procs.append(proc)
        assert alive(proc), f"the helper of {model} is not running"
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            if alive(proc):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        # Also those a failed test never looked at: a pid is trusted only while the process's
        # own command line names its pidfile.
        for pidfile in self.directory.glob("*.helper.pid"):
            with contextlib.suppress(ValueError, OSError, psutil.Error):
                proc = psutil.Process(int(pidfile.read_text()))
                if str(pidfile) in proc.cmdline():
                    proc.kill()


@pytest.fixture
def helpers(tmp_path: Path) -> Iterator[Helpers]:
    found = Helpers(tmp_path)
    yield found
    found.kill_all()


@pytest.fixture
def record(record_property: Record) -> Record:
    def keep(name: str, value: object) -> None:
        print(f"measured {name} = {value}")
        record_property(name, value)

    return keep


def models_yaml(helpers: Helpers, *, stubborn: bool = False, group: bool = True) -> str:
    rows = []
    for mode in MODES:
        spawner = f'"{sys.executable}" "{SPAWNER}" --mode {mode} '
        spawner += f'--pidfile "{helpers.pidfile(mode)}" {"--stubborn " if stubborn else ""}-- '
        rows.append(f"  {mode}:\n    cmd: {json.dumps(spawner + fake_cmd_text())}\n")
    if not group:
        return "".join(rows)
    groups = "groups:\n  both:\n    members: [daemon, nohup]\n    swap: false\n"
    return "".join(rows) + groups


def start(gateway: StartGateway, helpers: Helpers, **kwargs: bool) -> Gateway:
    text = models_yaml(helpers, **kwargs)
    models, _, groups = text.partition("groups:")
    return gateway(models, extra_top=f"groups:{groups}" if groups else "")


def load(gw: Gateway, model: str) -> None:
    reply = request(gw, "POST", f"/api/models/load/{model}", b"")
    assert reply.status == 200, reply.body


def describe(proc: psutil.Process) -> str:
    """One survivor, as a failure needs it: state, parent, cgroup, command line."""
    try:
        with proc.oneshot():
            head = f"pid {proc.pid} {proc.status()} ppid {proc.ppid()} {proc.cmdline()!r}"
        cgroup = Path(f"/proc/{proc.pid}/cgroup").read_text().strip()
    except (psutil.Error, OSError) as exc:
        return f"pid {proc.pid}: {exc!r}"
    return f"{head} cgroup {cgroup}"


def keepers_left() -> list[str]:
    """The keepers still running anywhere (what should have ended the survivors)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(part.endswith("keeper_program.py") for part in cmdline):
            found.append(describe(proc))
    return found


def seconds_until_gone(
    procs: list[psutil.Process], since: float, gw: Gateway | None = None
) -> float:
    """Wait until none of ``procs`` runs; seconds from ``since`` (fails after CEILING, saying
    what each survivor is, which keepers remain and what the gateway logged)."""
    while any(alive(proc) for proc in procs):
        if time.monotonic() - since > CEILING:
            survivors = "\n".join(describe(p) for p in procs if alive(p))
            keepers = "\n".join(keepers_left()) or "(none)"
            log = gw.log()[-6000:] if gw is not None else "(not kept)"
            pytest.fail(
                f"still alive after {CEILING} s:\n{survivors}\nkeepers:\n{keepers}\n"
                f"gateway log:\n{log}"
            )
        time.sleep(0.01)
    return round(time.monotonic() - since, 3)


@pytest.mark.parametrize("mode", MODES)
def test_unloading_a_model_ends_its_helper(
    mode: str, gateway: StartGateway, helpers: Helpers, record: Record
) -> None:
    gw = start(gateway, helpers)
    load(gw, mode)
    helper = helpers.of(mode)
    assert helper.ppid() != 1, "the helper was not adopted by its keeper"

    asked = time.monotonic()
    reply = request(gw, "POST", f"/api/models/unload/{mode}")
    assert reply.status == 200, reply.body

    record(f"{mode}_helper_gone_after_unload_s", seconds_until_gone([helper], asked))
    assert mode not in gw.running()


def test_swapping_models_ends_the_helper_of_the_one_swapped_out(
    gateway: StartGateway, helpers: Helpers, record: Record
) -> None:
    gw = start(gateway, helpers, group=False)  # one model at a time
    load(gw, "daemon")
    first = helpers.of("daemon")

    asked = time.monotonic()
    load(gw, "nohup")

    record("helper_gone_after_swap_s", seconds_until_gone([first], asked))
    assert set(gw.running()) == {"nohup"}
    assert alive(helpers.of("nohup"))


def test_stopping_the_gateway_ends_every_helper(
    gateway: StartGateway, helpers: Helpers, record: Record
) -> None:
    gw = start(gateway, helpers)
    for mode in MODES:
        load(gw, mode)
    procs = [helpers.of(mode) for mode in MODES]

    asked = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(timeout=CEILING) == 0, gw.log()

    record("helpers_gone_after_gateway_sigterm_s", seconds_until_gone(procs, asked))


@pytest.mark.parametrize("stubborn", [False, True], ids=["helpers", "sigterm-ignoring-helpers"])
def test_a_sigkilled_gateway_leaves_no_helper(
    stubborn: bool, gateway: StartGateway, helpers: Helpers, record: Record
) -> None:
    gw = start(gateway, helpers, stubborn=stubborn)
    for mode in MODES:
        load(gw, mode)
    procs = [helpers.of(mode) for mode in MODES]
    tree = psutil.Process(gw.proc.pid).children(recursive=True)

    os.kill(gw.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert gw.proc.wait(timeout=CEILING) == -signal.SIGKILL

    name = "stubborn_helpers" if stubborn else "helpers"
    record(f"{name}_gone_after_gateway_sigkill_s", seconds_until_gone(procs, killed, gw))
    record(f"{name}_whole_tree_gone_after_gateway_sigkill_s", seconds_until_gone(tree, killed, gw))


def test_the_security_report_names_the_containment(gateway: StartGateway) -> None:
    gw = gateway("  plain:\n    cmd: " + json.dumps(fake_cmd_text()) + "\n")
    report = gw.get_json("/api/security")
    containment = report["containment"]
    assert isinstance(containment, dict)
    assert containment["mechanism"] == detect().mechanism  # what this machine allows
    assert containment["mechanism"] in ("cgroup", "subreaper")
    assert isinstance(containment["detail"], str)
    assert containment["detail"]
