"""The container image's entrypoint: ``python -m modelswap.container [ARGS]`` (under tini).

* A config at ``/config/config.yaml`` (or ``$MODELSWAP_CONFIG``) is served when it exists;
  otherwise the built-in demo.
* Inside a container modelswap listens on ``$MODELSWAP_LISTEN`` (``0.0.0.0:8080``), so the
  exposure rule applies: without keys modelswap refuses to start and says how to give one.
  The demo takes its key from a mounted secret, ``/run/secrets/modelswap/api-key`` (or
  ``$MODELSWAP_API_KEY_FILE``), else from the variable ``MODELSWAP_API_KEY``; a mounted config
  names its own keys (``keyFile:`` a mounted secret, ``keyEnv:`` a variable).
* ARGS that start with ``-`` are passed to ``modelswap serve`` (``--allow-unauthenticated-network``,
  ``--log-level debug`` …); any other first word is run as the command instead
  (``podman run IMAGE modelswap check /config/config.yaml``).

The entrypoint then *becomes* ``modelswap serve`` (exec), so tini's SIGTERM reaches the
gateway itself, which drains, stops its backends (their keepers end every process of their
trees) and exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from modelswap.config.demo import demo_gguf_path
from modelswap.errors import ConfigError

CONFIG = "/config/config.yaml"
KEY_FILE = "/run/secrets/modelswap/api-key"
KEY_ENV = "MODELSWAP_API_KEY"
LISTEN = "0.0.0.0:8080"
ALLOW_FLAG = "--allow-unauthenticated-network"
NO_KEY_HINT = (
    "modelswap container: the demo found no key: mount one at {key_file} "
    "(podman run -v ./api-key:{key_file}:ro …, or a Kubernetes Secret), or set {key_env}; "
    "or pass {allow} if this network is trusted"
)


def serve_argv(
    args: Sequence[str],
    environ: Mapping[str, str],
    is_file: Callable[[str], bool],
    write_demo: Callable[[str], str],
) -> tuple[list[str], str | None]:
    """The command to exec, and a hint for stderr (or None). ``write_demo(text)`` stores the
    demo's config text and returns its path."""
    if args and not args[0].startswith("-"):
        return list(args), None
    argv = [sys.executable, "-m", "modelswap", "serve"]
    if "--listen" not in args:
        argv += ["--listen", environ.get("MODELSWAP_LISTEN", LISTEN)]
    if any(a in ("-c", "--config") or a.startswith("--config=") for a in args):
        return [*argv, *args], None
    config = environ.get("MODELSWAP_CONFIG", CONFIG)
    if is_file(config):
        return [*argv, "--config", config, *args], None
    key_file = environ.get("MODELSWAP_API_KEY_FILE", KEY_FILE)
    key: dict[str, object] | None = None
    if is_file(key_file):
        key = {"name": "container", "keyFile": key_file}
    elif environ.get(KEY_ENV):
        key = {"name": "container", "keyEnv": KEY_ENV}
    hint = None
    if key is None and ALLOW_FLAG not in args:
        hint = NO_KEY_HINT.format(key_file=key_file, key_env=KEY_ENV, allow=ALLOW_FLAG)
    return [*argv, "--config", write_demo(demo_config_text(key)), *args], hint


def demo_config_text(key: Mapping[str, object] | None) -> str:
    """The built-in demo as a config file: its two macros written out, and ``key`` (with every
    scope: the demo is one person's) as its only client key."""
    text = resources.files("modelswap").joinpath("demo/config.yaml").read_text("utf-8")
    macros = {"python": sys.executable, "smollm2_gguf": demo_gguf_path()}
    text += "\nmacros:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in macros.items())
    if key is not None:
        entry = {**key, "scopes": ["inference", "read", "admin"]}
        text += f"\napiKeys:\n  - {json.dumps(entry)}\n"
    return text


def _write_demo(text: str) -> str:
    handle, path = tempfile.mkstemp(prefix="modelswap-demo-", suffix=".yaml")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def main(args: Sequence[str] | None = None) -> int:
    try:
        argv, hint = serve_argv(
            sys.argv[1:] if args is None else args,
            os.environ,
            lambda p: Path(p).is_file(),
            _write_demo,
        )
    except ConfigError as exc:  # the demo's model package is missing from the image
        print(f"modelswap container: {exc}", file=sys.stderr)
        return 2
    if hint:
        print(hint, file=sys.stderr, flush=True)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"modelswap container: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
