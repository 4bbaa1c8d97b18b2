"""The container image, run the way people run gateways: ``make image && make test-image``.

Each test runs the image with podman (host network, Debian's runc), then talks to it from this
machine: the exposure rule refuses to serve the demo on 0.0.0.0 without a key and says how to
give one; with a key from a mounted secret the demo model answers the ``openai`` SDK, state
lands in the ``/state`` volume, the processes run as the image's own user, and a
``podman stop`` (SIGTERM, as ``docker stop``) ends modelswap with status 0 after it stopped its
backend — no process of the container is left.

Skipped, with the reason, where podman is missing or when not run through ``make test-image``
(which names the image in MODELSWAP_TEST_IMAGE); ``make test`` never needs podman.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

pytestmark = pytest.mark.container

IMAGE = os.environ.get("MODELSWAP_TEST_IMAGE")
RUNTIME = os.environ.get("MODELSWAP_PODMAN_RUNTIME", "")
KEY = "container-test-key-3b9d6f41c2"
UID = 10001
HANG = 180.0  # a cold demo start on a busy 2-core machine takes ~10 s; this only ends a hang


def _podman() -> list[str]:
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (Debian: apt-get install podman runc)")
    if not IMAGE:
        pytest.skip("run through `make test-image` (after `make image`), which names the image")
    found = subprocess.run(["podman", "image", "exists", IMAGE], check=False)
    if found.returncode != 0:
        pytest.fail(f"image {IMAGE} is missing: run `make image` first")
    return ["podman", *(["--runtime", RUNTIME] if RUNTIME else [])]


def run_flags() -> list[str]:
    """Host network; limits set, not raised (no CAP_SYS_RESOURCE to raise them here)."""
    return ["--network=host", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: object, what: str, timeout: float = HANG) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def namespace_pids(pid_namespace: str) -> dict[int, str]:
    """Every host process in the given PID namespace, with its command line."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "pid") == pid_namespace:
                found[int(entry.name)] = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                )
        except OSError:
            continue  # it ended meanwhile
    return found


def owner_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


@pytest.fixture
def podman() -> list[str]:
    return _podman()


@pytest.fixture
def container(podman: list[str]) -> Iterator[str]:
    """A name for one container; it is removed afterwards (by name: only ours)."""
    name = f"modelswap-test-{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(
        [*podman, "rm", "--force", "--time", "10", name], check=False, capture_output=True
    )


def test_the_demo_refuses_0_0_0_0_without_a_key_and_says_how_to_give_one(
    podman: list[str], container: str
) -> None:
    assert IMAGE is not None
    env = ["-e", f"MODELSWAP_LISTEN=0.0.0.0:{free_port()}"]
    done = subprocess.run(
        [*podman, "run", "--name", container, *run_flags(), *env, IMAGE],
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to listen on 0.0.0.0 without apiKeys" in done.stderr
    assert "/run/secrets/modelswap/api-key" in done.stderr  # a mounted secret …
    assert "MODELSWAP_API_KEY" in done.stderr  # … or a variable …
    assert "--allow-unauthenticated-network" in done.stderr  # … or the explicit switch


def test_the_demo_serves_the_openai_sdk_and_stops_cleanly_on_sigterm(
    podman: list[str], container: str, tmp_path: Path
) -> None:
    assert IMAGE is not None
    port = free_port()
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o644)
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, UID, UID)  # the volume belongs to the image's user, as a PVC's fsGroup does
    subprocess.run(
        [
            *podman,
            "run",
            "--detach",
            "--name",
            container,
            *run_flags(),
            "-e",
            f"MODELSWAP_LISTEN=0.0.0.0:{port}",
            "-v",
            f"{key_file}:/run/secrets/modelswap/api-key:ro",
            "-v",
            f"{state}:/state",
            IMAGE,
        ],
        check=True,
        capture_output=True,
        timeout=HANG,
    )
    wait_for(lambda: healthy(port), "the gateway's /health")

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, timeout=HANG)
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Say hi"}], max_tokens=8
    )
    assert reply.choices[0].message.content
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0
        ).models.list()

    inspect = [*podman, "inspect", "--format"]
    init_pid = int(subprocess.check_output([*inspect, "{{.State.Pid}}", container], text=True))
    pid_namespace = os.readlink(f"/proc/{init_pid}/ns/pid")
    running = namespace_pids(pid_namespace)
    commands = list(running.values())
    assert any("modelswap serve" in c for c in commands), commands
    assert any("keeper_program.py" in c for c in commands), commands  # the backend's keeper …
    assert any("modelswap.launchers.llamacpp" in c for c in commands), commands  # … and server
    gateway = next(pid for pid, c in running.items() if "modelswap serve" in c)
    assert owner_uid(gateway) == UID  # not root
    assert list((state / "modelswap").iterdir()), "nothing was kept in the /state volume"

    stopped = subprocess.run(
        [*podman, "stop", "--time", "60", container], capture_output=True, timeout=HANG, check=False
    )
    assert stopped.returncode == 0, stopped.stderr
    exit_code = subprocess.check_output([*inspect, "{{.State.ExitCode}}", container], text=True)
    assert exit_code.strip() == "0"  # modelswap exited by itself (137 would be the SIGKILL)
    logs = subprocess.run([*podman, "logs", container], capture_output=True, text=True, check=True)
    # The backend was stopped by modelswap — its keeper ended its tree — before modelswap exited.
    assert "model smollm2: ready -> stopping" in logs.stdout + logs.stderr
    assert "model smollm2: stopping -> shutdown" in logs.stdout + logs.stderr
    assert namespace_pids(pid_namespace) == {}  # not one of its processes is left
