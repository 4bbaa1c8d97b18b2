"""The keeper: the parent of one backend, alive until nothing the backend started is left.

The gateway runs ``python -I -S keeper_program.py --gateway PID`` (in its own session) in place
of the backend command, with one end of a socketpair on its stdin. Standard library only, so its
start costs a bare interpreter's; it never imports modelswap. The keeper

* makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``): a helper that daemonises (double
  fork + ``setsid()``), a ``nohup`` child, a child that moves to another process group — each
  reparents to the keeper when its parent exits, never to init, so it stays in reach;
* reads the command from the socket and starts it as its child, in a process group of its own,
  stdout/stderr inherited (the gateway's log pipe) and, if asked, in its own cgroup v2 (the child
  joins it before ``exec``); replies ``pid N ...`` or, when the command cannot be executed,
  ``errno N`` (the gateway turns that into the same OSError a direct spawn would raise);
* forwards SIGTERM/SIGINT/SIGHUP to the backend's group and reaps every orphan it adopts;
  says ``exited STATUS`` on the socket the moment the backend itself has exited;
* when the backend exits, the gateway says ``kill``, or the gateway is gone (end-of-file on the
  socket or ECONNRESET, ``PR_SET_PDEATHSIG``, or ``getppid()`` changing — the parent-death
  signal alone fires when the gateway's *thread* exits, and not at all if the gateway died
  before ``prctl``):
  SIGTERMs every remaining descendant (and member of its cgroup), waits ``grace`` seconds,
  SIGKILLs (``cgroup.kill``), and waits until none remains; says ``done`` (the gateway's proof
  that the tree was ended: a keeper killed before it, the gateway ends what is left itself);
* then exits as the backend did: same exit code, or the same signal raised on itself, so the
  gateway's ``returncode`` still says how the backend ended.

``--spare CGROUP`` (``''``: none) starts a spare (:meth:`Keeper.start_spare`, the gateway's
``supervisor/spare.py``): it forks the backend's process before the command comes, which joins
the cgroup and waits on a pipe; the keeper says ``spare ...`` and hands the command over when it
comes — a start then costs neither an interpreter's start nor a cgroup migration.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time
from collections.abc import Callable

# Not typing, contextlib or dataclasses: each import would add milliseconds to every start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
GATEWAY_GONE = signal.SIGUSR1  # the parent-death signal: only a prompt to look
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WATCHED = (*FORWARDED, GATEWAY_GONE, signal.SIGCHLD)
POLL_SECONDS = 0.5  # getppid() backup check while the backend runs
STEP_SECONDS = 0.05  # while ending a tree: grandchildren die unseen, so look again this often
DEFAULT_GRACE = 1.0
KILL = b"kill\n"  # gateway to keeper: no more grace
EXITED = b"exited"  # keeper to gateway: the backend itself has exited
TREE_ENDED = b"done"  # keeper to gateway, its last line: nothing the backend started is left
EXEC_FAILED = 127
SPARE = "--spare"  # a keeper started ahead of its command: Keeper.start_spare
HANDED = b"!"  # before a spare's command: the gateway wrote it to the waiting child itself
NOTE_PREFIX = b"[modelswap] keeper: "  # the gateway treats "[modelswap]" lines as its own


# ---- the protocol (the gateway imports these) -------------------------------------------------


class Spec:
    """What to run: the command, its environment (None: the keeper's own), the grace for
    leftovers, the cgroup to put it in (or None). The keeper itself runs with the gateway's
    environment, so a model's ``env`` (LD_PRELOAD, say) reaches the backend only."""

    def __init__(
        self,
        argv: list[str],
        grace: float = DEFAULT_GRACE,
        cgroup: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.argv, self.grace, self.cgroup, self.env = argv, grace, cgroup, env


BACKEND_UMASK = 0o077
"""What a backend creates is its user's alone: llama.cpp's saved slots (a conversation's
tokens) in ``<stateDir>/prompt-cache`` above all (issue 38). A backend that must share what
it writes runs under ``sh -c 'umask 022; exec …'``."""


def quietly(action: Callable[[], object]) -> None:
    """Run ``action``, ignoring OSError: the process or file it touches may be gone already."""
    try:  # noqa: SIM105 - contextlib.suppress: importing contextlib costs ms at every start
        action()
    except OSError:
        pass


def encode_spec(spec: Spec) -> bytes:
    """``<length>\\n`` then NUL-separated fields: grace, cgroup ('' for none), the number of
    environment entries (-1 for none), the ``KEY=VALUE`` entries, argv..."""
    env = [f"{k}={v}" for k, v in spec.env.items()] if spec.env is not None else []
    count = str(len(env)) if spec.env is not None else "-1"
    fields = [repr(spec.grace), spec.cgroup or "", count, *env, *spec.argv]
    payload = b"\0".join(os.fsencode(f) for f in fields)
    return b"%d\n" % len(payload) + payload


def decode_spec(payload: bytes) -> Spec:
    grace, cgroup, count, *rest = [os.fsdecode(f) for f in payload.split(b"\0")]
    entries, argv = rest[: max(0, int(count))], rest[max(0, int(count)) :]
    if not argv:
        raise ValueError("no command")
    env = dict(entry.split("=", 1) for entry in entries) if int(count) >= 0 else None
    return Spec(argv, float(grace), cgroup or None, env)


def started_reply(pid: int, *, subreaper: bool, cgroup: bool) -> bytes:
    return b"pid %d subreaper=%d cgroup=%d\n" % (pid, subreaper, cgroup)


def failed_reply(errno: int) -> bytes:
    return b"errno %d\n" % errno


# ---- the kernel's help -------------------------------------------------------------------------


def prctl(option: int, arg: int) -> bool:
    """Linux's prctl(2) with unsigned long arguments (it is variadic); False where it fails."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        args = (ctypes.c_ulong(option), ctypes.c_ulong(arg), *[ctypes.c_ulong(0)] * 3)
        return int(libc.prctl(*args)) == 0
    except (OSError, AttributeError):
        return False  # not Linux


def children_of(pid: int, proc: str = "/proc") -> list[int] | None:
    """From PROC/PID/task/*/children; None where the kernel lacks those files."""
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return None if os.path.isdir(f"{proc}/self") else []
    found: list[int] = []
    for task in tasks:
        try:
            with open(f"{proc}/{pid}/task/{task}/children", "rb") as f:
                found += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if os.path.exists(f"{proc}/{pid}/task/{task}"):
                return None
        except (OSError, ValueError):
            return None
    return found


def _parents(proc: str = "/proc") -> dict[int, list[int]]:
    """Every process's children, from PROC/*/stat (slower; where children files are missing)."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root: int, proc: str = "/proc") -> set[int]:
    found: set[int] = set()
    stack = [root]
    table: dict[int, list[int]] | None = None
    while stack:
        pid = stack.pop()
        kids = children_of(pid, proc) if table is None else table.get(pid, [])
        if kids is None:
            table = _parents(proc)
            kids = table.get(pid, [])
        for kid in kids:
            if kid not in found:
                found.add(kid)
                stack.append(kid)
    return found


def cgroup_pids(path: str) -> set[int]:
    try:
        with open(os.path.join(path, "cgroup.procs"), "rb") as f:
            return {int(x) for x in f.read().split()}
    except (OSError, ValueError):
        return set()


def cgroup_populated(path: str) -> bool:
    try:
        with open(os.path.join(path, "cgroup.events"), "rb") as f:
            return b"populated 1" in f.read()
    except OSError:
        return False  # removed: nothing can be in it


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def cgroup_kill(path: str) -> None:
    """SIGKILL every process in the cgroup at once (Linux 5.14+): no fork can outrun it."""
    quietly(lambda: _write(os.path.join(path, "cgroup.kill"), b"1"))


def cgroup_join(path: str) -> bool:
    """Move the calling process into the cgroup at ``path``."""
    try:
        _write(os.path.join(path, "cgroup.procs"), b"0")
    except OSError:
        return False
    return True


# ---- the keeper ----------------------------------------------------------------------------------


def _note(text: str) -> None:
    # The gateway, the log pipe's reader, may be gone.
    quietly(lambda: os.write(2, NOTE_PREFIX + text.encode() + b"\n"))


def _read_exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_spec(fd: int, header: bytes = b"") -> Spec:
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(header) > 20:
            raise EOFError
        header += byte
    return decode_spec(_read_exactly(fd, int(header)))


def read_command(fd: int) -> tuple[Spec, bool]:
    """A spare's command, and whether the gateway handed it to the waiting child itself."""
    first = os.read(fd, 1)
    if not first:
        raise EOFError
    handed = first == HANDED
    return read_spec(fd, b"" if handed else first), handed


def send_with_descriptor(control: int, data: bytes, fd: int) -> bool:
    """``data`` on the gateway's socket with a copy of ``fd`` (SCM_RIGHTS); False if that
    could not be sent (nothing was)."""
    import _socket  # only a spare passes a descriptor: a plain keeper's start does not load it

    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, os.dup(control))
    except OSError:
        return False
    try:
        rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fd.to_bytes(4, sys.byteorder))]
        sock.sendmsg([data], rights)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def _prepare_child(cgroup: str | None, report: int) -> None:
    """In the forked child, before the command: own process group, own cgroup, default
    signals, stdin /dev/null, umask :data:`BACKEND_UMASK`. Joining the cgroup is what costs
    (the kernel's cgroup_threadgroup_rwsem): a spare pays it before its command comes."""
    os.setpgid(0, 0)
    os.umask(BACKEND_UMASK)
    if cgroup is not None and not cgroup_join(cgroup):
        os.write(report, b"C")
    signal.set_wakeup_fd(-1)
    for sig in (*WATCHED, signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess restores them
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # also closes our end of the gateway's socket
    os.close(devnull)


def _exec(spec: Spec) -> None:
    if spec.env is None:
        os.execvp(spec.argv[0], spec.argv)
    os.execvpe(spec.argv[0], spec.argv, spec.env)  # PATH from env, as subprocess does


def _exec_child(spec: Spec, report: int) -> NoReturn:
    """In the forked child: prepare, then exec the command."""
    try:
        _prepare_child(spec.cgroup, report)
        _exec(spec)
    except OSError as exc:
        code = exc.errno or 0
        quietly(lambda: os.write(report, b"E%d" % code))
    finally:
        os._exit(EXEC_FAILED)


def _waiting_child(cgroup: str | None, commands: int, report: int) -> NoReturn:
    """In a spare's forked child: prepare, say ``R``, wait for the command on ``commands``
    (end-of-file: the keeper is gone or gave up, so exit), then exec it."""
    try:
        _prepare_child(cgroup, report)
        os.write(report, b"R")
        _exec(read_spec(commands))
    except OSError as exc:
        code = exc.errno or 0
        quietly(lambda: os.write(report, b"E%d" % code))
    except (EOFError, ValueError):
        pass
    finally:
        os._exit(EXEC_FAILED)


def _exec_report(read_end: int) -> bytes:
    report = b""
    while chunk := os.read(read_end, 64):
        report += chunk
    os.close(read_end)
    return report


def spawn(spec: Spec) -> tuple[int, bool] | int:
    """Fork and exec; (pid, joined the cgroup) or the errno of a failed exec (child reaped)."""
    read_end, write_end = os.pipe()  # close-on-exec: EOF means the exec succeeded
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _exec_child(spec, write_end)
    os.close(write_end)
    return _spawned(pid, _exec_report(read_end), spec.cgroup)


def _spawned(pid: int, report: bytes, cgroup: str | None) -> tuple[int, bool] | int:
    if b"E" in report:
        os.waitpid(pid, 0)
        return int(report.split(b"E", 1)[1] or 0)
    return pid, cgroup is not None and b"C" not in report


CORE_SIGNALS = (signal.SIGQUIT, signal.SIGILL, signal.SIGABRT, signal.SIGFPE, signal.SIGSEGV)


def exit_plan(status: int | None) -> tuple[int, int]:
    """How to end as a process with wait status ``status`` did: (exit code, signal to raise on
    ourselves first; 0 for none). No status (never reaped): exit 1. A signal's code, should
    the signal not end us, is the shell's ``128 + N``."""
    if status is None:
        return 1, 0
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return 128 - code, -code  # an int: real-time signals have no Signals member
    return code, 0


def exit_like(status: int | None) -> NoReturn:
    """Exit as a process with wait status ``status`` did (1 when there is none)."""
    code, sig = exit_plan(status)
    if sig:
        if sig in CORE_SIGNALS:
            import resource  # only here: the keeper must not leave a core file of its own

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.set_wakeup_fd(-1)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)  # the exit below is reached only if the signal did not end us
    os._exit(code)


def reap_children(
    backend: int | None, waitpid: Callable[[int, int], tuple[int, int]] = os.waitpid
) -> tuple[int | None, bool]:
    """Collect every exited child (the backend, and each orphan that reparented to us, the
    subreaper): the backend's wait status if it was among them, and whether no child at all is
    left — none can come back then, since only a descendant's orphan is ever reparented to us."""
    status = None
    while True:
        try:
            pid, reaped = waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, True
        if pid == 0:
            return status, False
        if pid == backend:
            status = reaped


def tree_gone(no_children: bool, cgroup: str | None) -> bool:
    """Nothing the backend started is left: no child of ours remains (every orphan reparents
    to us) and the backend's cgroup, where it has one, holds no process (a helper that left
    our tree, had we not been a subreaper, is still counted there)."""
    return no_children and (cgroup is None or not cgroup_populated(cgroup))


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def _kill(pid: int, sig: signal.Signals) -> None:
    quietly(lambda: os.kill(pid, sig))


class Keeper:
    def __init__(self, control: int, gateway: int, spec: Spec) -> None:
        self.control: int | None = control  # None once the gateway's end is closed
        self.gateway = gateway
        self.spec = spec
        self.backend: int | None = None
        self.status: int | None = None  # the backend's wait status, once reaped
        self.gateway_gone = False
        self.hurry = False  # the gateway said "kill": no more grace
        self.no_children = False
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        for sig in WATCHED:
            signal.signal(sig, lambda *_: None)  # the wakeup fd says which arrived
        signal.set_wakeup_fd(wake_w)

    def arm(self) -> bool:
        """Become a child subreaper and arm the parent-death signal; whether the first took."""
        subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_PDEATHSIG, GATEWAY_GONE)
        if os.getppid() != self.gateway:
            os._exit(1)  # the gateway died before the parent-death signal was armed
        return subreaper

    def start(self) -> None:
        subreaper = self.arm()
        self._started(spawn(self.spec), subreaper)

    def start_spare(self) -> None:
        """A spare keeper: fork the backend's process now (it joins the cgroup and waits), say
        ``spare``, then wait for the command and hand it over. The gateway gone (or saying
        anything but a command), a forwarded signal, or the waiting child gone end the spare."""
        subreaper = self.arm()
        commands_r, commands_w = os.pipe()
        report_r, report_w = os.pipe()  # close-on-exec: EOF means the exec succeeded
        pid = os.fork()
        if pid == 0:
            os.close(commands_w)
            os.close(report_r)
            _waiting_child(self.spec.cgroup, commands_r, report_w)
        os.close(commands_r)
        os.close(report_w)
        self.backend = pid
        early = b""
        while b"R" not in early and (chunk := os.read(report_r, 64)):
            early += chunk
        if b"R" not in early:
            self._end_spare()  # it died before it was ready
        joined = self.spec.cgroup is not None and b"C" not in early
        # The child's command pipe goes along: the gateway may write the command to the child
        # itself, saving the hop through this process (~1 ms) on the way to the exec.
        ready = b"spare subreaper=%d cgroup=%d\n" % (subreaper, joined)
        control = self.control
        if control is None or not send_with_descriptor(control, ready, commands_w):
            self._send(ready)
        command = self._await_command()
        if command is None:
            self._end_spare()
        spec, handed = command
        spec.cgroup = self.spec.cgroup  # the child is in the spare's cgroup, whatever was sent
        self.spec = spec
        if not handed:
            quietly(lambda: _write_all(commands_w, encode_spec(spec)))
        # Handed: the gateway writes it (or has); it gone first, the child reads end-of-file
        # and exits, which the exec report below shows.
        os.close(commands_w)
        report = early.replace(b"R", b"") + _exec_report(report_r)
        self._started(_spawned(pid, report, spec.cgroup), subreaper)

    def _await_command(self) -> tuple[Spec, bool] | None:
        control = self.control
        assert control is not None
        assert self.backend is not None
        while True:
            readable, _, _ = select.select([self._wake_r, control], [], [], POLL_SECONDS)
            if control in readable:
                try:
                    return read_command(control)
                except (EOFError, ValueError, OSError):
                    return None  # the gateway is gone or discards the spare
            if self._wake_r in readable:
                try:
                    signals = os.read(self._wake_r, 256)
                except BlockingIOError:
                    signals = b""
                if any(signum in FORWARDED for signum in signals):
                    return None
            if os.getppid() != self.gateway:
                return None
            try:
                pid, status = os.waitpid(self.backend, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.backend, 0
            if pid == self.backend:
                self.status = status
                return None

    def _end_spare(self) -> NoReturn:
        """End the waiting child (it has started nothing) and its cgroup; exit."""
        backend = self.backend
        if backend is not None and self.status is None:
            _kill(backend, signal.SIGKILL)
            quietly(lambda: os.waitpid(backend, 0))
        cgroup = self.spec.cgroup
        if cgroup is not None:
            deadline = time.monotonic() + 5.0
            while cgroup_populated(cgroup) and time.monotonic() < deadline:
                time.sleep(STEP_SECONDS)
            quietly(lambda: os.rmdir(cgroup))
        os._exit(0)

    def _started(self, spawned: tuple[int, bool] | int, subreaper: bool) -> None:
        if isinstance(spawned, int):
            cgroup = self.spec.cgroup
            if cgroup is not None:
                quietly(lambda: os.rmdir(cgroup))
            self._send(failed_reply(spawned))
            os._exit(EXEC_FAILED)
        self.backend, in_cgroup = spawned
        if self.spec.cgroup is not None and not in_cgroup:
            _note(f"could not join cgroup {self.spec.cgroup}; the subreaper alone contains it")
        self._send(started_reply(self.backend, subreaper=subreaper, cgroup=in_cgroup))

    def _send(self, data: bytes) -> None:
        control = self.control
        if control is not None:
            quietly(lambda: os.write(control, data))

    def serve(self) -> NoReturn:
        while self.status is None and not self.gateway_gone and not self.hurry:
            self._wait(POLL_SECONDS)
        self._end_tree()
        self._send(TREE_ENDED + b"\n")
        exit_like(self.status)

    def _wait(self, timeout: float) -> None:
        """Sleep until a signal, a message or ``timeout``; then act on what happened."""
        fds = [self._wake_r] if self.control is None else [self._wake_r, self.control]
        readable, _, _ = select.select(fds, [], [], max(0.0, timeout))
        if self._wake_r in readable:
            try:
                signals = os.read(self._wake_r, 256)
            except BlockingIOError:
                signals = b""
            for signum in signals:
                if signum in FORWARDED and self.status is None:
                    self._signal_backend_group(signal.Signals(signum))
        if self.control is not None and self.control in readable:
            try:
                message = os.read(self.control, 256)
            except OSError:
                # ECONNRESET, not end-of-file, when the gateway died with a line of ours
                # unread (the start's reply, "exited"): gone all the same. Raised, it would
                # end the keeper and leave the tree it keeps running.
                message = b""
            if not message:
                self.gateway_gone = True
                self.control = None
            elif KILL in message:
                self.hurry = True
        if os.getppid() != self.gateway:
            self.gateway_gone = True
        self._reap()

    def _reap(self) -> None:
        """Collect every exited child: the backend and each orphan that reparented to us."""
        status, self.no_children = reap_children(self.backend)
        if status is not None:
            self.status = status
            self._send(b"%s %d\n" % (EXITED, status))

    def _signal_backend_group(self, sig: signal.Signals) -> None:
        backend = self.backend
        if backend is not None:
            quietly(lambda: os.killpg(backend, sig))

    def _signal_tree(self, sig: signal.Signals) -> int:
        """Signal every descendant and cgroup member; how many there were."""
        if self.status is None:  # not reaped, so the pid (and group) is still the backend's
            self._signal_backend_group(sig)
        me = os.getpid()
        pids = descendants(me)
        cgroup = self.spec.cgroup
        if cgroup is not None:
            pids |= cgroup_pids(cgroup)
            if sig == signal.SIGKILL:
                cgroup_kill(cgroup)
        pids.discard(me)
        for pid in pids:
            _kill(pid, sig)
        return len(pids)

    def _tree_gone(self) -> bool:
        self._reap()
        return tree_gone(self.no_children, self.spec.cgroup)

    def _end_tree(self) -> None:
        """SIGTERM what is left, SIGKILL it after the grace, return once none remains."""
        if not self._tree_gone():
            termed = self._signal_tree(signal.SIGTERM)
            deadline = time.monotonic() + self.spec.grace
            while not self.hurry and not self._tree_gone() and time.monotonic() < deadline:
                self._wait(min(STEP_SECONDS, deadline - time.monotonic()))
            killed = 0
            while not self._tree_gone():
                killed = max(killed, self._signal_tree(signal.SIGKILL))
                self._wait(STEP_SECONDS)
            if self.status is not None and not self.gateway_gone and not self.hurry:
                _note(f"ended {_processes(termed)} the backend left behind ({killed} by SIGKILL)")
        cgroup = self.spec.cgroup
        if cgroup is not None:
            quietly(lambda: os.rmdir(cgroup))


def main(argv: list[str]) -> NoReturn:
    if len(argv) == 4 and argv[2] == SPARE and argv[0] == "--gateway" and argv[1].isdigit():
        keeper = Keeper(0, int(argv[1]), Spec(["(spare)"], DEFAULT_GRACE, argv[3] or None))
        keeper.start_spare()
        keeper.serve()
    if len(argv) != 2 or argv[0] != "--gateway" or not argv[1].isdigit():
        sys.stderr.write(
            "usage: keeper_program.py --gateway PID [--spare CGROUP]"
            "  (the command comes on stdin)\n"
        )
        os._exit(2)
    try:
        spec = read_spec(0)
    except (EOFError, ValueError, OSError):
        os._exit(2)  # the gateway went away, or spoke nonsense
    keeper = Keeper(0, int(argv[1]), spec)
    keeper.start()
    keeper.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
