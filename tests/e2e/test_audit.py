"""``modelswap audit`` as users run it: a config file (safe and unsafe ones) and a running
instance (``--url``, with and without a read key). Exit 0 unless something is rated high; exit 2
when there is nothing to rate (an invalid config; an instance whose report cannot be read)."""

from __future__ import annotations

import contextlib
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import REPO, Gateway, fake_cmd, free_port

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]

READ_KEY = "sk-audit-read-key-0123456789ab"
INF_KEY = "sk-audit-inference-key-0123456"


def audit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "MODELSWAP_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "modelswap", "audit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**base, **(env or {})},
        check=False,
    )


def findings(stdout: str) -> list[tuple[str, str]]:
    """(SEVERITY, rest of the line) for each finding line."""
    out = []
    for line in stdout.splitlines():
        severity, _, rest = line.partition(" ")
        if severity in ("HIGH", "MEDIUM", "INFO"):
            out.append((severity, rest.strip()))
    return out


def highs(stdout: str) -> list[str]:
    return [rest for severity, rest in findings(stdout) if severity == "HIGH"]


def write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


# --- a config file ---------------------------------------------------------------------------

SAFE_ENV = {
    "MS_AUDIT_KEY": "sk-audit-env-key-0123456789abc",
    "MS_AUDIT_UP": "upstream-audit-secret-0001",
    "MS_AUDIT_HF": "hf-audit-secret-0002",
}


def safe_config(tmp_path: Path, mode: int = 0o600) -> Path:
    return write(
        tmp_path / "safe.yaml",
        "apiKeys:\n"
        "  - {keyEnv: MS_AUDIT_KEY, name: app, scopes: [inference]}\n"
        "security: {corsOrigins: ['https://app.example']}\n"
        "models:\n"
        "  m:\n"
        "    cmd: srv --port ${PORT} --api-key ${env.MS_AUDIT_UP} --hf-token=${env.MS_AUDIT_HF}\n"
        "    apiKey: ${env.MS_AUDIT_UP}\n"
        "    env:\n"
        "      HF_TOKEN: ${env.MS_AUDIT_HF}\n"
        "      THREADS: '4'\n",
        mode,
    )


def test_a_safe_config_passes(tmp_path: Path) -> None:
    result = audit("--config", str(safe_config(tmp_path)), env=SAFE_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert highs(result.stdout) == []
    assert [s for s, _ in findings(result.stdout)].count("MEDIUM") == 0, result.stdout
    assert "INFO   exposure: listens on loopback (127.0.0.1) only" in result.stdout
    assert "INFO   keys: app: scopes inference; all models" in result.stdout
    assert result.stdout.rstrip().endswith("0 high, 0 medium")
    for secret in SAFE_ENV.values():
        assert secret not in result.stdout + result.stderr


def test_a_world_readable_config_without_plain_secrets_is_medium(tmp_path: Path) -> None:
    path = safe_config(tmp_path, 0o644)
    result = audit("--config", str(path), env=SAFE_ENV)
    assert result.returncode == 0, result.stdout
    assert f"MEDIUM file: {path} is world-readable (chmod 600 it)" in result.stdout


LITERAL_KEY = "sk-literal-client-key-000000001"
CMD_KEY = "cmd-literal-secret-0000002"
HF_LITERAL = "hf-literal-secret-0000003"
ENV_LITERAL = "env-literal-secret-0000004"
UP_LITERAL = "upstream-literal-secret-0000005"
PROXY_PW = "proxy-literal-password-0000006"


def test_an_unsafe_config_with_keys_fails_naming_each_plain_text_secret(tmp_path: Path) -> None:
    path = write(
        tmp_path / "unsafe.yaml",
        f"apiKeys:\n  - {LITERAL_KEY}\n  - {{key: short, name: tiny}}\n"
        "security: {corsOrigins: ['*']}\n"
        "models:\n"
        "  m:\n"
        f"    cmd: srv --port ${{PORT}} --api-key {CMD_KEY} --hf-token={HF_LITERAL} -t 4\n"
        f"    apiKey: {UP_LITERAL}\n"
        f"    env:\n      HF_TOKEN: {ENV_LITERAL}\n      THREADS: '4'\n"
        "  p:\n"
        "    cmd: srv --port ${PORT}\n"
        f"    proxy: http://user:{PROXY_PW}@127.0.0.1:${{PORT}}\n",
        0o644,
    )
    result = audit("--config", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    high = highs(result.stdout)
    expected = [
        "apiKeys[0] holds a secret in the file",
        "apiKeys[1] holds a secret in the file",
        "models.m.apiKey holds a secret in the file",
        "models.m.env.HF_TOKEN holds a secret in the file",
        "models.m.cmd (--api-key) holds a secret in the file",
        "models.m.cmd (--hf-token) holds a secret in the file",
        "models.p.proxy holds a secret in the file",
        f"file: {path} is world-readable",
    ]
    missing = [e for e in expected if not any(e in h for h in high)]
    assert not missing, f"missing high findings {missing} in:\n{result.stdout}"
    assert all("${env.NAME}" in h for h in high if "holds a secret" in h)
    assert "threads" not in " ".join(high).lower()  # not every env var is a secret
    medium = [rest for s, rest in findings(result.stdout) if s == "MEDIUM"]
    assert any(m.startswith("open switch: security.corsOrigins") for m in medium), medium
    assert any("tiny is shorter than 16 characters" in m for m in medium), medium
    # The report names where secrets are, never what they are.
    for secret in (LITERAL_KEY, CMD_KEY, HF_LITERAL, ENV_LITERAL, UP_LITERAL, PROXY_PW):
        assert secret not in result.stdout + result.stderr
    # High first, then medium, then info; then the count.
    order = [s for s, _ in findings(result.stdout)]
    assert order == sorted(order, key=["HIGH", "MEDIUM", "INFO"].index)
    assert result.stdout.rstrip().endswith(f"{len(high)} high, {len(medium)} medium")


def test_an_exposed_config_without_keys_fails(tmp_path: Path) -> None:
    path = write(
        tmp_path / "exposed.yaml",
        "listen: 0.0.0.0:8080\n"
        "security: {allowUnauthenticatedNetwork: true}\n"
        f"models:\n  m:\n    cmd: srv --port ${{PORT}} --api-key {CMD_KEY}\n",
        0o600,
    )
    result = audit("--config", str(path))
    assert result.returncode == 1, result.stdout
    high = highs(result.stdout)
    assert any(h.startswith("exposure: listens on 0.0.0.0 with no apiKeys") for h in high), high
    assert any("models.m.cmd (--api-key)" in h for h in high), high
    assert "MEDIUM open switch: security.allowUnauthenticatedNetwork" in result.stdout
    assert "world-readable" not in result.stdout
    assert CMD_KEY not in result.stdout


PEER_LITERAL = "peer-literal-key-0000007"


def test_a_plain_text_peer_key_is_high_and_an_env_sourced_one_is_not(tmp_path: Path) -> None:
    path = write(
        tmp_path / "peers.yaml",
        "peers:\n"
        f"  literal: {{proxy: 'http://192.0.2.20:8080', apiKey: {PEER_LITERAL}, models: [a]}}\n"
        "  macro: {proxy: 'http://192.0.2.21:8080', apiKey: '${env.MS_PEER_KEY}', models: [b]}\n"
        "  named: {proxy: 'http://192.0.2.22:8080', apiKeyEnv: MS_PEER_KEY, models: [c]}\n"
        "models:\n  m:\n    cmd: srv --port ${PORT}\n",
        0o600,
    )
    result = audit("--config", str(path), env={"MS_PEER_KEY": "peer-env-key-0000008"})
    assert result.returncode == 1, result.stdout + result.stderr
    high = highs(result.stdout)
    assert any(h.startswith("plain-text secret: peers.literal.apiKey holds") for h in high), high
    assert not any("peers.macro" in h or "peers.named" in h for h in high), high
    assert PEER_LITERAL not in result.stdout + result.stderr
    assert "peer-env-key-0000008" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("listen", "severity"),
    [("0.0.0.0:8080", "HIGH"), ("127.0.0.1:8080", "MEDIUM"), ("[::1]:8080", "MEDIUM")],
)
def test_a_short_key_is_high_off_loopback_and_medium_on_it(
    tmp_path: Path, listen: str, severity: str
) -> None:
    path = write(
        tmp_path / "short.yaml",
        f"listen: '{listen}'\napiKeys: [{{keyEnv: MS_SHORT, name: tiny}}]\n"
        "models:\n  m:\n    cmd: srv --port ${PORT}\n",
        0o600,
    )
    result = audit("--config", str(path), env={"MS_SHORT": "abc"})
    short = [(s, rest) for s, rest in findings(result.stdout) if "tiny is shorter than 16" in rest]
    assert [s for s, _ in short] == [severity], result.stdout
    assert result.returncode == (1 if severity == "HIGH" else 0), result.stdout
    if severity == "HIGH":
        assert "reachable off this machine" in short[0][1]
    assert "abc" not in result.stdout  # the key itself is never shown


def test_an_exposed_config_with_keys_is_not_high(tmp_path: Path) -> None:
    path = write(
        tmp_path / "keyed.yaml",
        "listen: 0.0.0.0:8080\napiKeys: [{keyEnv: MS_AUDIT_KEY}]\n"
        "models:\n  m:\n    cmd: srv --port ${PORT}\n",
        0o600,
    )
    result = audit("--config", str(path), env=SAFE_ENV)
    assert result.returncode == 0, result.stdout
    assert "INFO   exposure: listens on 0.0.0.0; keys are required" in result.stdout


def test_a_remote_backend_is_an_open_switch(tmp_path: Path) -> None:
    path = write(
        tmp_path / "remote.yaml",
        "models:\n  far:\n    cmd: srv\n    proxy: http://192.0.2.7:8000\n"
        "    allowRemoteBackend: true\n",
        0o600,
    )
    result = audit("--config", str(path))
    assert result.returncode == 0, result.stdout
    assert "MEDIUM open switch: models.far.allowRemoteBackend" in result.stdout
    assert "http://192.0.2.7:8000" in result.stdout


def test_an_invalid_config_exits_2(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.yaml", "modles: {}\n", 0o600)
    result = audit("--config", str(path))
    assert result.returncode == 2
    assert "invalid configuration" in result.stderr


# --- a running instance ----------------------------------------------------------------------


def keyed_models() -> str:
    return f"  m:\n    cmd: {fake_cmd()}\n"


KEYS_TOP = (
    "apiKeys:\n"
    f"  - {{key: {READ_KEY}, name: auditor, scopes: [read]}}\n"
    f"  - {{key: {INF_KEY}, name: app}}\n"
)


def cannot_audit(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one clear line on stderr, and no verdict on stdout (never "0 high")."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("modelswap audit: cannot read "), lines[0]
    assert lines[0].endswith("; nothing was rated"), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert "high" not in result.stdout


def test_audit_url_of_a_keyed_instance(gateway: StartGateway) -> None:
    gw = gateway(keyed_models(), extra_top=KEYS_TOP)

    without = audit("--url", gw.base_url)
    cannot_audit(without, f"{gw.base_url}/api/security: it answered 401", "--key", "MODELSWAP_KEY")

    with_key = audit("--url", gw.base_url + "/", "--key", READ_KEY)
    assert with_key.returncode == 0, with_key.stdout + with_key.stderr
    assert highs(with_key.stdout) == []
    assert "INFO   keys: auditor: scopes read" in with_key.stdout
    assert "INFO   keys: app: scopes inference" in with_key.stdout
    assert "answered" not in with_key.stdout

    from_env = audit("--url", gw.base_url, env={"MODELSWAP_KEY": READ_KEY})
    assert "INFO   keys: auditor: scopes read" in from_env.stdout

    wrong_scope = audit("--url", gw.base_url, "--key", INF_KEY)
    cannot_audit(wrong_scope, "answered 403", "lacks the read scope")

    bad_key = audit("--url", gw.base_url, "--key", "sk-not-a-key-of-this-instance")
    cannot_audit(bad_key, "answered 401", "not valid")

    for result in (without, with_key, from_env, wrong_scope, bad_key):
        assert READ_KEY not in result.stdout + result.stderr
        assert INF_KEY not in result.stdout + result.stderr


def test_audit_url_agrees_with_audit_config_on_a_loopback_instance_without_keys(
    gateway: StartGateway, tmp_path: Path
) -> None:
    """The default setup (loopback, no keys) is rated the same from its file and its URL."""
    gw = gateway(keyed_models())
    config = write(tmp_path / "default.yaml", f"models:\n{keyed_models()}", 0o600)
    from_file = audit("--config", str(config))
    assert from_file.returncode == 0, from_file.stdout
    from_url = audit("--url", gw.base_url)
    assert gw.get_json("/api/security")["loopback_only"] is True
    assert from_url.returncode == 0, (
        f"audit --config rates this setup 0 high, audit --url exits "
        f"{from_url.returncode}:\n{from_url.stdout}"
    )
    assert highs(from_url.stdout) == []


def test_audit_url_of_a_refused_port_exits_2() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    cannot_audit(audit("--url", url), f"cannot read {url}/api/security", "refused")


class NotModelswap(http.server.BaseHTTPRequestHandler):
    """Answers every GET 200 with a body that is not a security report."""

    body = b"<html>hello</html>"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


class JsonButNotAReport(NotModelswap):
    body = b'["a", "list"]'


@pytest.mark.parametrize("handler", [NotModelswap, JsonButNotAReport], ids=["html", "json-list"])
def test_audit_url_of_something_else_exits_2(
    handler: type[http.server.BaseHTTPRequestHandler],
) -> None:
    with serving(handler) as url:
        result = audit("--url", url)
    cannot_audit(result, f"{url}/api/security")
