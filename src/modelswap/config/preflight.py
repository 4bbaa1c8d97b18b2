"""Checks of a loaded config before anything starts: port clashes, and commands that cannot run.

:func:`load_config` says whether a config is well-formed. This adds what only the whole resolved
config, or the machine, can tell: no model's fixed ``proxy`` port is a port given to another
model as ``${PORT}`` or the gateway's own listen port; and (for ``serve``, which runs them here)
each model's ``cmd`` and ``cmdStop`` name a program that exists and may be executed, looked up on
the ``PATH`` the backend will get (its ``env`` may change it). ``check`` only notes missing
programs: a config is often checked on another machine than the one that serves it. Each problem
names its key path, like every other config problem.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from urllib.parse import urlsplit

from modelswap.config.paths import key_path
from modelswap.config.resolved import Config, ModelConfig
from modelswap.config.security import is_loopback_host
from modelswap.errors import ConfigError

Problems = list[tuple[str, str]]


def check_runnable(
    config: Config,
    *,
    executables: bool = True,
    environ: Mapping[str, str] | None = None,
    listen: bool = True,
) -> None:
    """Raise :class:`ConfigError` naming every port clash and (with ``executables``) every
    command that cannot run here. ``listen``: the listen port counts as taken even when it is
    only the default (``serve`` listens there; ``check`` without ``--listen`` may not)."""
    problems = port_collisions(config, listen=listen or config.listen_given)
    if executables:
        problems += missing_executables(config, environ)
    if problems:
        raise ConfigError(problems)


def missing_executables(config: Config, environ: Mapping[str, str] | None = None) -> Problems:
    """``(key path, why)`` for each ``cmd`` / ``cmdStop`` whose program cannot be run here."""
    environ = dict(os.environ if environ is None else environ)
    problems: Problems = []
    for model in config.models.values():
        for field, argv in (("cmd", model.cmd), ("cmdStop", model.cmd_stop)):
            if not argv:
                continue
            why = _not_runnable(argv[0], {**environ, **model.env})
            if why is not None:
                problems.append((key_path("models", model.id, field), why))
    return problems


def _not_runnable(program: str, environ: Mapping[str, str]) -> str | None:
    """Why ``program`` cannot be executed (None if it can), found as ``exec`` would find it."""
    if os.sep in program:
        if not os.path.isfile(program):
            return f"{program!r} does not exist"
        if not os.access(program, os.X_OK):
            return f"{program!r} is not executable (chmod +x it)"
        return None
    search = os.pathsep.join(os.get_exec_path(dict(environ)))
    if shutil.which(program, path=search) is None:
        return f"{program!r} is not found on PATH (install it, or give its absolute path)"
    return None


def _port(model: ModelConfig) -> int | None:
    """The loopback port ``model``'s proxy points at, if it is on this machine."""
    try:
        parts = urlsplit(model.proxy)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if host is None or not is_loopback_host(host):
        return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return port


def port_collisions(config: Config, *, listen: bool = True) -> Problems:
    """A fixed proxy port that is another model's ``${PORT}``, or (with ``listen``) a port that
    is the listen port."""
    allocated = {m.port: m.id for m in config.models.values() if m.port is not None}
    problems: Problems = []
    own = listen and is_loopback_host(config.listen_host)
    for model in config.models.values():
        if model.port is not None:
            # allocated without clashes by the loader, which checks a listen key of the file
            if own and model.port == config.listen_port and not config.listen_given:
                problems.append(
                    (
                        "startPort",
                        f"model {model.id!r} would get port {model.port}, which is the listen "
                        "port; choose another startPort",
                    )
                )
            continue
        port = _port(model)
        if port is None:
            continue
        if port in allocated:
            problems.append(
                (
                    key_path("models", model.id, "proxy"),
                    f"port {port} is also given to model {allocated[port]!r} as ${{PORT}}; "
                    "use another port or another startPort",
                )
            )
        elif own and port == config.listen_port:
            problems.append(
                (
                    key_path("models", model.id, "proxy"),
                    f"port {port} is modelswap's own listen port; use another port",
                )
            )
    return problems
