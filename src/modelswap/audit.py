"""``modelswap audit``: a security report of a config file or of a running instance.

Each finding has a severity: ``high`` (fix before exposing anything), ``medium`` (deliberate
openings worth a second look) or ``info``. The command exits 1 when any finding is high, and 2
when a running instance's report cannot be read (:class:`ReportUnavailable`): an audit that saw
nothing must not read as a clean one.
"""

from __future__ import annotations

import http.client
import json
import os
import stat
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from modelswap.backends.slots import save_path
from modelswap.config import Config
from modelswap.config.security import is_loopback_host, open_switches
from modelswap.redact import is_secret_name
from modelswap.statefile import loose, named_briefly
from modelswap.supervisor.promptcache import SAVE_PATH_ENV

HIGH, MEDIUM, INFO = "high", "medium", "info"
MIN_KEY_LENGTH = 16


class ReportUnavailable(Exception):
    """``audit --url`` could not read the instance's ``/api/security``; the message says why."""


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str
    topic: str
    message: str

    def line(self) -> str:
        return f"{self.severity.upper():<6} {self.topic}: {self.message}"


def audit_config(config: Config, path: Path | None) -> list[Finding]:
    found: list[Finding] = []
    host = config.listen_host
    if not is_loopback_host(host):
        if not config.api_keys:
            found.append(
                Finding(
                    HIGH,
                    "exposure",
                    f"listens on {host} with no apiKeys: "
                    "anyone who can reach it may use every model",
                )
            )
        else:
            found.append(Finding(INFO, "exposure", f"listens on {host}; keys are required"))
    else:
        found.append(Finding(INFO, "exposure", f"listens on loopback ({host}) only"))
    found += _keys(config, exposed=not is_loopback_host(host))
    for switch in open_switches(config):
        found.append(Finding(MEDIUM, "open switch", switch))
    if path is not None:
        found += _file(path)
    found += _state(config)
    return found


def _state_folders(config: Config) -> dict[Path, str]:
    """``stateDir`` and each prompt-cache folder a model names outside it."""
    folders: dict[Path, str] = {}
    if config.scheduling.state_dir != ":memory:":
        folders[Path(config.scheduling.state_dir).expanduser()] = "stateDir"
    for model in config.models.values():
        named = save_path(model.cmd) or model.env.get(SAVE_PATH_ENV)
        if model.prompt_cache and named:
            folders.setdefault(Path(named).expanduser(), f"the prompt cache of {model.id}")
    return folders


def _state(config: Config) -> list[Finding]:
    """What modelswap keeps (saved conversations' tokens, the activity log's key names and
    captures) is for its user alone: a folder or file others may read is HIGH (issue 38)."""
    found: list[Finding] = []
    for folder, what in _state_folders(config).items():
        if not folder.is_dir():
            found.append(Finding(INFO, "state", f"{what} {folder} is made 0700 at the first start"))
            continue
        paths = loose(folder)
        if not paths:
            found.append(Finding(INFO, "state", f"{what} {folder} is private to its user"))
            continue
        found.append(
            Finding(
                HIGH,
                "state",
                f"{what} {folder}: other local users may read or enter {len(paths)} of its "
                f"paths ({named_briefly(paths, 4)}), where saved conversations and the activity "
                f"log are kept; run `chmod -R go-rwx {folder}` (modelswap serve does it at start)",
            )
        )
    return found


def _keys(config: Config, *, exposed: bool) -> list[Finding]:
    """A short key is easy to guess; off loopback anyone on the network may try (HIGH)."""
    found: list[Finding] = []
    if not config.api_keys:
        found.append(Finding(INFO, "keys", "no apiKeys: every route is open on the listen address"))
    for key in config.api_keys:
        scopes = ", ".join(sorted(key.scopes))
        models = ", ".join(key.models) or "all models"
        found.append(Finding(INFO, "keys", f"{key.name}: scopes {scopes}; {models}"))
        if len(key.secret) < MIN_KEY_LENGTH:
            where = f"; {config.listen_host} is reachable off this machine" if exposed else ""
            found.append(
                Finding(
                    HIGH if exposed else MEDIUM,
                    "keys",
                    f"{key.name} is shorter than {MIN_KEY_LENGTH} characters: easy to guess"
                    + where,
                )
            )
    return found


def _file(path: Path) -> list[Finding]:
    found: list[Finding] = []
    try:
        raw = yaml.safe_load(path.read_text())
        mode = path.stat().st_mode
    except (OSError, yaml.YAMLError):
        return found
    plain = list(plain_text_secrets(raw))
    for where in plain:
        instead = "apiKeyEnv" if where.startswith("peers.") else "keyEnv or keyFile"
        found.append(
            Finding(
                HIGH,
                "plain-text secret",
                f"{where} holds a secret in the file; use ${{env.NAME}} or {instead} instead",
            )
        )
    if mode & stat.S_IROTH:
        severity = HIGH if plain else MEDIUM
        found.append(Finding(severity, "file", f"{path} is world-readable (chmod 600 it)"))
    return found


def _is_macro(value: str) -> bool:
    return value.strip().startswith("${")


def plain_text_secrets(raw: Any) -> Iterable[str]:
    """Key paths in a raw config that hold a literal secret rather than a reference."""
    if not isinstance(raw, dict):
        return
    for index, entry in enumerate(raw.get("apiKeys") or []):
        literal = entry if isinstance(entry, str) else (entry or {}).get("key")
        if isinstance(literal, str) and not _is_macro(literal):
            yield f"apiKeys[{index}]"
    for model_id, model in (raw.get("models") or {}).items():
        if not isinstance(model, dict):
            continue
        base = f"models.{model_id}"
        key = model.get("apiKey")
        if isinstance(key, str) and not _is_macro(key):
            yield f"{base}.apiKey"
        yield from _env_secrets(model.get("env"), f"{base}.env")
        yield from _cmd_secrets(model.get("cmd"), f"{base}.cmd")
        proxy = model.get("proxy")
        if isinstance(proxy, str) and "@" in proxy.split("//", 1)[-1].split("/", 1)[0]:
            yield f"{base}.proxy"
    for peer_id, peer in (raw.get("peers") or {}).items():
        # The key modelswap sends to another gateway: literal here, or ${env.X} / apiKeyEnv.
        key = peer.get("apiKey") if isinstance(peer, dict) else None
        if isinstance(key, str) and key.strip() and not _is_macro(key):
            yield f"peers.{peer_id}.apiKey"


def _env_secrets(env: Any, base: str) -> Iterable[str]:
    pairs: list[tuple[str, Any]] = []
    if isinstance(env, dict):
        pairs = list(env.items())
    elif isinstance(env, list):
        pairs = [tuple(str(e).split("=", 1)) for e in env if "=" in str(e)]  # type: ignore[misc]
    for name, value in pairs:
        if is_secret_name(str(name)) and str(value).strip() and not _is_macro(str(value)):
            yield f"{base}.{name}"


def _cmd_secrets(cmd: Any, base: str) -> Iterable[str]:
    words = cmd if isinstance(cmd, list) else str(cmd or "").split()
    words = [str(w) for w in words]
    for index, word in enumerate(words):
        flag, eq, inline = word.partition("=")
        if not flag.startswith("--") or not is_secret_name(flag.lstrip("-")):
            continue
        value = inline if eq else (words[index + 1] if index + 1 < len(words) else "")
        if value and not value.startswith("-") and not _is_macro(value):
            yield f"{base} ({flag})"


def audit_url(url: str, key: str | None) -> list[Finding]:
    """Audit a running instance through its own ``/api/security`` (read scope; open when the
    instance has no keys) and what answers without a key. Raises :class:`ReportUnavailable`
    when the report cannot be read: without it nothing can be rated."""
    base = url.rstrip("/")
    report = _report(base, key)
    try:
        open_models = _status(base + "/v1/models", None) == 200
    except (OSError, http.client.HTTPException) as exc:
        raise ReportUnavailable(f"cannot read {base}/v1/models: {_reason(exc)}") from exc
    found: list[Finding] = []
    loopback = bool(report.get("loopback_only"))
    if open_models and not loopback:
        found.append(
            Finding(
                HIGH, "exposure", f"listens on {report.get('listen')} and answers without a key"
            )
        )
    elif open_models:
        found.append(
            Finding(
                INFO,
                "exposure",
                f"loopback only ({report.get('listen')}); no keys, so every local user may use it",
            )
        )
    else:
        found.append(Finding(INFO, "exposure", f"{report.get('listen')}; keys are required"))
    for switch in report.get("open_switches", []):
        found.append(Finding(MEDIUM, "open switch", str(switch)))
    for k in report.get("keys", []):
        scopes = ", ".join(k.get("scopes", []))
        found.append(Finding(INFO, "keys", f"{k.get('name')}: scopes {scopes}"))
    return found


def _report(base: str, key: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(base + "/api/security", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            report = json.loads(response.read(1 << 20))
    except urllib.error.HTTPError as exc:
        hint = {
            401: "give a key with the read scope (--key or MODELSWAP_KEY)"
            if not key
            else "the key given is not valid there",
            403: "the key given lacks the read scope",
        }.get(exc.code, "is it modelswap?")
        raise ReportUnavailable(
            f"cannot read {base}/api/security: it answered {exc.code} ({hint})"
        ) from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, not HTTP/JSON
        raise ReportUnavailable(f"cannot read {base}/api/security: {_reason(exc)}") from exc
    if not isinstance(report, dict) or "listen" not in report:
        raise ReportUnavailable(
            f"cannot read {base}/api/security: the answer is not a modelswap security report"
        )
    return report


def _reason(exc: BaseException) -> str:
    """An exception in words on one line (urllib wraps the socket error in ``reason``)."""
    reason = getattr(exc, "reason", None) or exc
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return " ".join(str(text).split())


def _status(url: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def key_from_env() -> str | None:
    return os.environ.get("MODELSWAP_KEY") or None
