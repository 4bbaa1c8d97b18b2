"""A backend that leaves a helper behind the way daemons do, for the containment tests.

    python tests/fakes/helper_spawner.py --mode daemon|nohup --pidfile FILE [--stubborn] -- CMD...

It starts a helper that escapes the backend's process tree, then ``exec``s CMD (the fake
backend), so CMD keeps this program's pid:

* ``daemon``: fork; the child calls ``setsid()`` and forks again; the middle process exits. The
  helper (the grandchild) reparents at once, before any snapshot of the tree can see it: to init,
  or to the nearest child subreaper. Its stdio is /dev/null, as a daemon's is.
* ``nohup``: fork; the child moves to a process group of its own (``setpgid``), forks
  ``nohup python ...`` and exits: the helper ignores SIGHUP, shares no process group with the
  backend, has lost its parent, and keeps the backend's stdout/stderr (the gateway's log pipe).

The helper writes its pid to FILE (atomically) and sleeps; with ``--stubborn`` it ignores SIGTERM.
This program waits until FILE exists and the middle process is gone before it execs CMD, so by
the time the backend is ready the helper is an orphan already. Only the standard library.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HELPER_CODE = """
import os, signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
path = sys.argv[1]
with open(path + ".tmp", "w") as f:
    f.write(f"{os.getpid()}\\n")
os.replace(path + ".tmp", path)
time.sleep(600)
"""
WAIT_SECONDS = 30.0


def helper_argv(pidfile: str, stubborn: bool, mode: str) -> list[str]:
    argv = [sys.executable, "-c", HELPER_CODE, pidfile, "stubborn" if stubborn else "-"]
    return ["nohup", *argv] if mode == "nohup" else argv


def to_devnull() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def middle(mode: str, argv: list[str]) -> None:
    """The first child: leave the session (daemon) or the group (nohup), fork the helper, exit."""
    try:
        if mode == "daemon":
            os.setsid()
        else:
            os.setpgid(0, 0)
        if os.fork() == 0:
            if mode == "daemon":
                os.chdir("/")
                to_devnull()
            os.execvp(argv[0], argv)
    finally:
        os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("daemon", "nohup"), required=True)
    parser.add_argument("--pidfile", required=True)
    parser.add_argument("--stubborn", action="store_true", help="the helper ignores SIGTERM")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command after --")
    argv = helper_argv(args.pidfile, args.stubborn, args.mode)
    first = os.fork()
    if first == 0:
        middle(args.mode, argv)
    os.waitpid(first, 0)  # the middle process is gone: the helper is an orphan now
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(args.pidfile):
        if time.monotonic() > deadline:
            sys.exit(f"helper_spawner: no helper pid in {args.pidfile} after {WAIT_SECONDS} s")
        time.sleep(0.005)
    print(f"helper_spawner: helper pid {Path(args.pidfile).read_text().strip()}", flush=True)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
