"""The gateway's side of the keeper: start a backend under one, and speak to it.

:func:`spawn` starts ``sys.executable -I -S keeper_program.py`` (isolated, no site: no
modelswap import, a bare interpreter's start) in its own session with one end of a socketpair on its
stdin, sends the command, and waits for the keeper's reply. The socket then stays open for the
keeper's lifetime: its end-of-file is how the keeper learns that the gateway is gone, however it
died.

:class:`Kept` stands for the backend: ``pid`` is the backend's own (what ``${PID}`` in cmdStop
means, what /running and the memory sampler see); ``keeper_pid`` is the root of the whole tree
(what the orphan watchdog and the backend record watch). ``returncode`` is the keeper's, which
exits as the backend did — but only once nothing the backend started is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from modelswap.supervisor import keeper_program, tree

REPLY_TIMEOUT = 30.0  # only ends a hang: a keeper replies within tens of milliseconds
KEEPER_ARGV = (sys.executable, "-I", "-S", keeper_program.__file__)
# A spare's command is written to its waiting child directly up to this size: an empty pipe
# (64 KiB) takes it without blocking; a larger one (a vast environment) goes through the keeper.
HAND_LIMIT = 60_000


class KeeperError(Exception):
    """The keeper itself could not be started or did not answer (not the backend's fault)."""


class Kept:
    """One backend under its keeper (made by :func:`spawn`)."""

    def __init__(
        self,
        keeper_proc: asyncio.subprocess.Process,
        pid: int,
        control: socket.socket,
        *,
        cgroup: Path | None,
        in_cgroup: bool,
        subreaper: bool,
        pending: bytes = b"",
    ) -> None:
        self.keeper = keeper_proc
        self.pid = pid
        self.cgroup = cgroup  # the cgroup made for it (None: the subreaper alone)
        self.in_cgroup = in_cgroup  # the backend did join it
        self.subreaper = subreaper  # the keeper is a child subreaper
        self._control = control
        self._backend_key: tree.ProcKey | None = None
        with contextlib.suppress(psutil.Error):  # gone already: nothing to signal, ever
            self._backend_key = (pid, psutil.Process(pid).create_time())
        self._backend_exited = asyncio.Event()
        self.backend_returncode: int | None = None  # as the keeper reported it
        # The keeper said it ended the whole tree. False once it has exited: it was killed (or
        # killed by us), and what the backend left is the gateway's to find (tree.end_tagged).
        self.tree_ended = False
        self._buffer = b""
        self._take(pending)
        self._listener = asyncio.get_running_loop().create_task(
            self._listen(), name=f"keeper:{keeper_proc.pid}"
        )

    @property
    def keeper_pid(self) -> int:
        return self.keeper.pid

    @property
    def returncode(self) -> int | None:
        """The keeper's: set once the whole tree is gone (the backend's code, passed through)."""
        return self.keeper.returncode

    @property
    def exit_code(self) -> int | None:
        """How the backend ended, as soon as it is known (the keeper may still be ending its
        leftovers)."""
        code = self.keeper.returncode
        return code if code is not None else self.backend_returncode

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        return self.keeper.stdout

    def _take(self, data: bytes) -> None:
        """Lines from the keeper after its reply: ``exited STATUS`` when the backend has,
        ``done`` when nothing it started is left."""
        *lines, self._buffer = (self._buffer + data).split(b"\n")
        for line in lines:
            words = line.split()
            if words[:1] == [keeper_program.EXITED] and len(words) == 2 and words[1].isdigit():
                self.backend_returncode = os.waitstatus_to_exitcode(int(words[1]))
                self._backend_exited.set()
            elif words == [keeper_program.TREE_ENDED]:
                self.tree_ended = True

    async def _listen(self) -> None:
        """Read the keeper's lines until end-of-file, which comes when the keeper exits."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    data = await loop.sock_recv(self._control, 256)
                except OSError:
                    data = b""
                if not data:
                    self._backend_exited.set()
                    return
                self._take(data)
        finally:
            self._control.close()

    async def backend_exit(self) -> None:
        """Until the backend itself has exited (its leftovers may still be ending)."""
        await self._backend_exited.wait()

    async def wait(self) -> int:
        """Until the backend and everything it started are gone; the backend's exit status."""
        code = await self.keeper.wait()
        listener = self._listener
        if not listener.done():  # end-of-file follows the keeper's exit at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(listener), 1.0)
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        return code

    def backend_alive(self) -> bool:
        """The backend itself (pid and creation time) still runs."""
        return self._backend_key is not None and bool(tree.alive({self._backend_key}))

    def signal_backend(self, sig: signal.Signals) -> None:
        """Signal the backend's process group (its own: the keeper puts it in one)."""
        if self.backend_alive():
            tree.signal_group(self.pid, sig)

    def kill_now(self) -> None:
        """SIGKILL the backend's group, and have the keeper SIGKILL the rest without grace."""
        self.signal_backend(signal.SIGKILL)
        with contextlib.suppress(OSError):
            self._control.send(keeper_program.KILL)

    def kill_keeper(self) -> None:
        """Last resort, for a keeper that does not exit: what is left is the snapshots' job."""
        if self.keeper.returncode is None:
            kill_and_forget(self.keeper)


def kill_and_forget(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def _abandon(proc: asyncio.subprocess.Process, control: socket.socket) -> None:
    """Have the keeper end whatever it started, at once, and wait for it to exit."""
    with contextlib.suppress(OSError):
        control.send(keeper_program.KILL)
    control.close()  # end-of-file: a keeper still reading the command exits without running it
    try:
        await asyncio.wait_for(asyncio.shield(proc.wait()), REPLY_TIMEOUT)
    except TimeoutError:
        kill_and_forget(proc)
        await proc.wait()


async def _reply(control: socket.socket, proc: asyncio.subprocess.Process) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while b"\n" not in data:
        chunk = await loop.sock_recv(control, 256)
        if not chunk:
            code = await proc.wait()
            raise KeeperError(f"the keeper exited ({code}) before it started the command")
        data += chunk
    return data


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Until ``sock`` is readable (data, or end-of-file)."""
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(sock.fileno(), ready)
    try:
        await readable
    finally:
        loop.remove_reader(sock.fileno())


async def _reply_with_descriptor(
    control: socket.socket, proc: asyncio.subprocess.Process
) -> tuple[bytes, int | None]:
    """As :func:`_reply`, and the descriptor that came with it (a spare's command pipe), if
    one did: the gateway's own, close-on-exec."""
    loop = asyncio.get_running_loop()
    data, fds = b"", []
    try:
        while b"\n" not in data:
            await _readable(loop, control)
            try:  # not socket.recv_fds: it drops its flags, so the copy would be inherited
                chunk, ancillary, _, _ = control.recvmsg(
                    256, socket.CMSG_SPACE(4), socket.MSG_CMSG_CLOEXEC
                )
            except BlockingIOError:
                continue
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += [
                        int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True)
                        for i in range(0, len(payload) - len(payload) % 4, 4)
                    ]
            if not chunk:
                code = await proc.wait()
                raise KeeperError(f"the keeper exited ({code}) before it was ready")
            data += chunk
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    for extra in fds[1:]:
        os.close(extra)
    return data, fds[0] if fds else None


async def _launch_keeper(*extra_argv: str) -> tuple[asyncio.subprocess.Process, socket.socket]:
    """Start a keeper (``extra_argv`` after ``--gateway PID``: a spare's) in its own session,
    one end of a socketpair on its stdin, stdout and stderr to one pipe; the keeper and the
    gateway's end of the socket (non-blocking). Raises KeeperError when it cannot be started."""
    control, theirs = socket.socketpair()
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *KEEPER_ARGV,
                "--gateway",
                str(os.getpid()),
                *extra_argv,
                stdin=theirs.fileno(),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # the gateway's own environment: env is the backend's
            )
        finally:
            theirs.close()
    except BaseException as exc:
        control.close()
        if isinstance(exc, OSError):
            raise KeeperError(f"cannot start the keeper ({sys.executable}): {exc}") from exc
        raise
    control.setblocking(False)
    return proc, control


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cgroup: Path | None = None,
    grace: float = keeper_program.DEFAULT_GRACE,
) -> Kept:
    """Start ``argv`` under a keeper, stdout and stderr to one pipe.

    Raises OSError (errno, strerror, ``argv[0]``) when the command cannot be executed — the
    error a direct spawn would raise — and :class:`KeeperError` when the keeper fails."""
    proc, control = await _launch_keeper()
    try:
        where = str(cgroup) if cgroup is not None else None
        spec = keeper_program.Spec(list(argv), grace, where, dict(env))
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(control, keeper_program.encode_spec(spec))
        reply = await asyncio.wait_for(_reply(control, proc), REPLY_TIMEOUT)
    except BaseException as exc:  # cancelled (a stop during the start) included
        await _abandon(proc, control)
        if isinstance(exc, OSError | TimeoutError):
            raise KeeperError(f"the keeper did not answer: {exc!r}") from exc
        raise
    return await _started(proc, control, reply, argv[0], cgroup)


async def _started(
    proc: asyncio.subprocess.Process,
    control: socket.socket,
    reply: bytes,
    command: str,
    cgroup: Path | None,
) -> Kept:
    """The :class:`Kept` a ``pid N ...`` reply stands for; raises for any other reply."""
    reply, _, pending = reply.partition(b"\n")  # an "exited" line may have come with it
    words = reply.split()
    if words[:1] == [b"errno"]:
        control.close()
        await proc.wait()
        code = int(words[1]) if len(words) > 1 and words[1].isdigit() else errno.ENOEXEC
        raise OSError(code, os.strerror(code), command)
    if words[:1] != [b"pid"] or len(words) < 2 or not words[1].isdigit():
        await _abandon(proc, control)
        raise KeeperError(f"the keeper answered {reply!r}")
    flags = _flags(words)
    return Kept(
        proc,
        int(words[1]),
        control,
        cgroup=cgroup,
        in_cgroup=flags.get(b"cgroup") == b"1",
        subreaper=flags.get(b"subreaper") == b"1",
        pending=pending,
    )


def _flags(words: list[bytes]) -> dict[bytes, bytes]:
    return dict(w.split(b"=", 1) for w in words[2:] if b"=" in w)


class Spare:
    """A keeper started ahead of its command (:func:`spawn_spare`): the interpreter's start and
    the cgroup join are paid; :meth:`use` hands it the command. Used once."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        control: socket.socket,
        cgroup: Path | None,
        commands: int | None = None,
    ) -> None:
        self.keeper = proc
        self.cgroup = cgroup  # its own, named ``...-spare`` (None: the subreaper alone)
        self._control = control
        self._commands = commands  # the waiting child's command pipe, when the keeper sent it
        self._used = False

    @property
    def keeper_pid(self) -> int:
        return self.keeper.pid

    def alive(self) -> bool:
        return self.keeper.returncode is None and not self._used

    async def use(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        grace: float = keeper_program.DEFAULT_GRACE,
    ) -> Kept:
        """Run ``argv`` in the spare; raises as :func:`spawn` does (KeeperError: the spare was
        dead or died, and nothing runs)."""
        if not self.alive():
            raise KeeperError("the spare keeper is gone")
        self._used = True
        proc, control = self.keeper, self._control
        where = str(self.cgroup) if self.cgroup is not None else None
        spec = keeper_program.Spec(list(argv), grace, where, dict(env))
        payload = keeper_program.encode_spec(spec)
        commands, self._commands = self._commands, None
        handed = commands is not None and len(payload) <= HAND_LIMIT
        try:
            # The keeper first (it then leaves the pipe to us), then the waiting child itself:
            # its exec need not wait for the keeper to wake, read and write (~1 ms).
            loop = asyncio.get_running_loop()
            await loop.sock_sendall(control, keeper_program.HANDED + payload if handed else payload)
            if commands is not None:
                _hand(commands, payload if handed else b"")
                commands = None
            reply = await asyncio.wait_for(_reply(control, proc), REPLY_TIMEOUT)
        except BaseException as exc:
            if commands is not None:
                os.close(commands)
            await _abandon(proc, control)
            if isinstance(exc, OSError | TimeoutError):
                raise KeeperError(f"the spare keeper did not answer: {exc!r}") from exc
            raise
        return await _started(proc, control, reply, argv[0], self.cgroup)

    async def gone(self) -> None:
        """Until the keeper is gone: its end of the socket closed (or it said something a
        waiting spare never says). Not its exit: that waits for its output pipe, which its
        waiting child holds — kept waiting by our copy of its command pipe until
        :meth:`discard` closes it."""
        # sock_recv, not a reader of our own: cancelled (the spare is taken), it leaves alone
        # the reader that use() registers next on the same socket. uvloop keeps its own copy
        # of the child's stdin (our socket's other end) until the process's pipes close, which
        # the waiting child holds: there the end-of-file would never come. Its wait() returns
        # at the exit itself (asyncio's only once the pipes close: there the EOF comes first),
        # and then shutting our end's reading ends the sock_recv as an EOF would.
        loop = asyncio.get_running_loop()
        watch = loop.create_task(self._shut_when_exited())
        try:
            with contextlib.suppress(OSError):
                await loop.sock_recv(self._control, 1)
        finally:
            watch.cancel()

    async def _shut_when_exited(self) -> None:
        await self.keeper.wait()
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RD)

    async def discard(self) -> None:
        """End it (it has started nothing) and wait until it has exited."""
        if self._commands is not None:
            os.close(self._commands)
            self._commands = None
        if not self._used:
            self._used = True
            await _abandon(self.keeper, self._control)


async def spawn_spare(cgroup: Path | None = None) -> Spare:
    """Start a spare keeper whose child waits, in ``cgroup`` if given, for the command."""
    proc, control = await _launch_keeper(
        keeper_program.SPARE, str(cgroup) if cgroup is not None else ""
    )
    try:
        reply, commands = await asyncio.wait_for(
            _reply_with_descriptor(control, proc), REPLY_TIMEOUT
        )
    except BaseException as exc:
        await _abandon(proc, control)
        if isinstance(exc, OSError | TimeoutError):
            raise KeeperError(f"the spare keeper did not answer: {exc!r}") from exc
        raise
    if not reply.startswith(b"spare "):
        if commands is not None:
            os.close(commands)
        await _abandon(proc, control)
        raise KeeperError(f"the spare keeper answered {reply!r}")
    # Could it not join its cgroup, the backend's reply says so.
    return Spare(proc, control, cgroup, commands)


def _hand(commands: int, payload: bytes) -> None:
    """Write the command to a spare's waiting child (nothing: leave it to the keeper), close
    the pipe. A child already gone is the keeper's to report (its exec report)."""
    try:
        if payload:
            os.write(commands, payload)  # an empty pipe takes HAND_LIMIT bytes at once
    except OSError:
        pass
    finally:
        os.close(commands)
