"""The Kubernetes manifests (``deploy/kubernetes``): the base and the GPU overlay, rendered as
kustomize would (the part of it they use: resources, ``$patch: delete``, generators, images,
labels — kustomize itself is not installed here), validate against the schemas of a current
Kubernetes (``kubernetes-validate``, bundled schemas, strict); and they mean what docs/deploying.md
says: non-root pods probed on ``/health``, Services that select them, a config that loads and
whose peer pool is the headless Service, a GPU each in the overlay.

Without ``kubernetes-validate`` (the ``dev`` extra has it) the schema test is skipped and
says so; the others still run. Pure: files only, no cluster."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelswap.config import load_config_text

REPO = Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy" / "kubernetes"
BASE, GPU = KUBE / "base", KUBE / "overlays" / "gpu"
# What a user writes before `kubectl apply -k` (kustomization.yaml says how); gitignored.
STAND_INS = {"api-key": "test-key-0123456789abcdef"}

Object = dict[str, Any]


def render(directory: Path) -> list[Object]:
    """The objects ``kustomize build directory`` makes (names without the generators' hash)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[Object] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects += render(path)
        else:
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    for patch in spec.get("patches", []):
        (change,) = yaml.safe_load_all((directory / patch["path"]).read_text())
        if change.pop("$patch", None) == "delete":
            objects = [o for o in objects if _key(o) != _key(change)]
        else:
            objects = [_merge(o, change) if _key(o) == _key(change) else o for o in objects]
    for kind, field in (("configMapGenerator", "data"), ("secretGenerator", "stringData")):
        for gen in spec.get(kind, []):
            made = {
                "apiVersion": "v1",
                "kind": "ConfigMap" if kind == "configMapGenerator" else "Secret",
                "metadata": {"name": gen["name"]},
                field: {name: _read(directory / name) for name in gen.get("files", [])},
            }
            if gen.get("behavior") == "replace":
                assert any(_key(o) == _key(made) for o in objects), f"nothing to replace: {gen}"
                objects = [o for o in objects if _key(o) != _key(made)]
            objects.append(made)
    for image in spec.get("images", []):
        for container in _containers(objects):
            name, _, _ = container["image"].partition(":")
            if name == image["name"]:
                new = image.get("newName", name)
                container["image"] = f"{new}:{image.get('newTag', 'latest')}"
    for label in spec.get("labels", []):
        for o in objects:
            o["metadata"].setdefault("labels", {}).update(label["pairs"])
    return objects


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else STAND_INS[path.name]


def _key(o: Object) -> tuple[str, str]:
    return o["kind"], o["metadata"]["name"]


def _merge(base: Object, change: Object) -> Object:
    out = copy.deepcopy(base)
    for k, v in change.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _containers(objects: list[Object]) -> list[Object]:
    return [c for o in objects if "template" in o.get("spec", {}) for c in _pod(o)["containers"]]


def _pod(o: Object) -> Object:
    pod: Object = o["spec"]["template"]["spec"]
    return pod


def one(objects: list[Object], kind: str, name: str | None = None) -> Object:
    (found,) = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


@pytest.fixture(params=[BASE, GPU], ids=["base", "gpu"])
def rendered(request: pytest.FixtureRequest) -> list[Object]:
    return render(request.param)


def test_every_object_validates_against_a_current_kubernetes(rendered: list[Object]) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate",
        reason="kubernetes-validate is not installed (pip install kubernetes-validate; "
        "the dev extra has it)",
    )
    version = kubernetes_validate.latest_version()
    assert len(rendered) == 5, [_key(o) for o in rendered]
    for o in rendered:
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            pytest.fail(f"{_key(o)} at {where}: {exc.message} (Kubernetes {version})")


def test_the_gateway_pods_run_as_non_root_probed_on_health_and_bounded(
    rendered: list[Object],
) -> None:
    (workload,) = [o for o in rendered if o["kind"] in ("Deployment", "DaemonSet")]
    pod = _pod(workload)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
    (container,) = pod["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8080}]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/config", "/run/secrets/modelswap", "/state", "/tmp"} <= mounts  # rootfs read-only
    volumes = {v["name"]: v for v in pod["volumes"]}
    config_map = one(rendered, "ConfigMap", volumes["config"]["configMap"]["name"])
    assert "config.yaml" in config_map["data"]
    secret = one(rendered, "Secret", volumes["keys"]["secret"]["secretName"])
    assert "api-key" in secret["stringData"]
    assert pod["terminationGracePeriodSeconds"] > 10  # modelswap's drain fits in it


def test_both_services_select_the_pods_and_one_is_headless(rendered: list[Object]) -> None:
    (workload,) = [o for o in rendered if o["kind"] in ("Deployment", "DaemonSet")]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    front, headless = (
        one(rendered, "Service", "modelswap"),
        one(rendered, "Service", "modelswap-headless"),
    )
    for service in (front, headless):
        assert service["spec"]["selector"].items() <= labels.items()
        assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert headless["spec"]["clusterIP"] == "None"  # its A records are the pods themselves
    assert "clusterIP" not in front["spec"]


def test_the_config_loads_and_its_peer_pool_is_the_headless_service(
    rendered: list[Object], tmp_path: Path
) -> None:
    (workload,) = [o for o in rendered if o["kind"] in ("Deployment", "DaemonSet")]
    (container,) = _pod(workload)["containers"]
    text = one(rendered, "ConfigMap")["data"]["config.yaml"]
    key_file = tmp_path / "api-key"
    key_file.write_text(STAND_INS["api-key"])
    mounted = "/run/secrets/modelswap/api-key"  # where the Secret is mounted, keyFile reads it
    assert mounted in text
    env = {e["name"]: e for e in container["env"]}
    assert env["MODELSWAP_PEER_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "api-key"
    config = load_config_text(
        text.replace(mounted, str(key_file)), environ={"MODELSWAP_PEER_KEY": "k" * 20}
    )
    assert env["MODELSWAP_CONFIG"]["value"] == "/config/config.yaml"
    assert (config.listen_host, config.listen_port) == ("0.0.0.0", 8080)
    assert [k.secret for k in config.api_keys] == [STAND_INS["api-key"]]
    pool = config.peers["cluster"]
    assert pool.dns is not None
    assert pool.dns.name == "modelswap-headless"
    assert pool.dns.port == container["ports"][0]["containerPort"]
    assert pool.api_key == "k" * 20
    assert config.scheduling.state_dir.startswith("/state")
    assert all(m.fallback == (f"cluster/{m.id}",) for m in config.models.values())


def test_the_gpu_overlay_runs_one_gateway_per_gpu_node_with_a_gpu_each() -> None:
    objects = render(GPU)
    assert not [o for o in objects if o["kind"] == "Deployment"]
    daemonset = one(objects, "DaemonSet", "modelswap")
    pod = _pod(daemonset)
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert container["image"] == "registry.example.com/modelswap-cuda:latest"
    assert "-ngl 99" in one(objects, "ConfigMap")["data"]["config.yaml"]
    assert daemonset["metadata"]["labels"]["app.kubernetes.io/part-of"] == "modelswap"
