"""deploy/kuberay/: a structural check of the manifests. No package on the registries
this project uses carries KubeRay's CRD schemas, so this checks the fields KubeRay
requires and the types it declares for them, and that the job's entrypoint is a command
this checkout runs (its flags are `harbor-ray sweep`'s, its files exist)."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
from pathlib import Path
from typing import Any

import typer
import yaml

from harbor_ray.cli import app

REPO = Path(__file__).resolve().parents[2]
RAYJOB = REPO / "deploy" / "kuberay" / "rayjob-sweep.yaml"
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def documents() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(RAYJOB.read_text())}


def ray_job() -> dict[str, Any]:
    return documents()["RayJob"]


def check_pod_template(template: dict[str, Any], volumes: set[str]) -> list[dict[str, Any]]:
    containers = template["spec"]["containers"]
    assert containers, "a pod template needs a container"
    for container in containers:
        assert DNS_1123.fullmatch(container["name"]) and container["image"]
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"volume {mount['name']} is not declared"
            assert mount["mountPath"].startswith("/")
    return containers


def check_group(group: dict[str, Any]) -> list[dict[str, Any]]:
    # KubeRay declares rayStartParams a map of strings: a bare number is refused.
    params = group.get("rayStartParams", {})
    assert all(isinstance(v, str) for v in params.values()), params
    volumes = {v["name"] for v in group["template"]["spec"].get("volumes", [])}
    return check_pod_template(group["template"], volumes)


def test_rayjob_has_what_kuberay_requires() -> None:
    job = ray_job()
    assert job["apiVersion"] == "ray.io/v1"
    assert DNS_1123.fullmatch(job["metadata"]["name"])
    spec = job["spec"]
    assert isinstance(spec["entrypoint"], str)
    assert isinstance(spec["shutdownAfterJobFinishes"], bool)
    assert isinstance(spec["ttlSecondsAfterFinished"], int)
    cluster = spec["rayClusterSpec"]
    # The image's Ray is the lock's: nodes of other versions do not join.
    assert cluster["rayVersion"] == importlib.metadata.version("ray")
    check_group(cluster["headGroupSpec"])
    names = []
    for group in cluster["workerGroupSpecs"]:
        names.append(group["groupName"])
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        check_group(group)
    assert len(set(names)) == len(names)


def test_engine_on_gpu_workers_hosts_on_cpu_workers() -> None:
    cluster = ray_job()["spec"]["rayClusterSpec"]
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    (gpu,) = [g for g in groups.values() if "num-gpus" in g.get("rayStartParams", {})]
    (container,) = gpu["template"]["spec"]["containers"]
    gpus = gpu["rayStartParams"]["num-gpus"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
    assert container["image"].endswith(":gpu")
    cpu = [g for g in groups.values() if g is not gpu]
    assert cpu and all(
        c["image"].endswith(":cpu") for g in cpu for c in g["template"]["spec"]["containers"]
    )
    # The driver's head takes no tasks, and the hosts reach replicas on other nodes.
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert "--ingress serve" in ray_job()["spec"]["entrypoint"]


def test_entrypoint_is_a_sweep_this_checkout_runs() -> None:
    argv = shlex.split(ray_job()["spec"]["entrypoint"])
    assert argv[:2] == ["python", "jobs/sweep.py"] and (REPO / argv[1]).is_file()
    command = typer.main.get_command(app).commands["sweep"]
    known = {opt for param in command.params for opt in param.opts}
    flags = [arg for arg in argv[2:] if arg.startswith("-")]
    assert set(flags) <= known, set(flags) - known
    context = command.make_context("sweep", argv[2:])  # parses, type-checks the values
    assert context.params["out"].is_absolute()  # jobs/sweep.py refuses a relative one
    assert (REPO / context.params["engine"]).is_file()


def test_the_dataset_volume_is_claimed_and_mounted_at_out() -> None:
    docs = documents()
    head = ray_job()["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (claim,) = [v["persistentVolumeClaim"]["claimName"] for v in head["volumes"]]
    assert docs["PersistentVolumeClaim"]["metadata"]["name"] == claim
    mounts = [m["mountPath"] for c in head["containers"] for m in c.get("volumeMounts", [])]
    out = shlex.split(ray_job()["spec"]["entrypoint"])
    out_dir = out[out.index("--out") + 1]
    assert any(out_dir.startswith(m.rstrip("/") + "/") for m in mounts)


RAYSERVICE = REPO / "deploy" / "kuberay" / "rayservice-online.yaml"
ONLINE_GPU = REPO / "serve_configs" / "online_gpu.yaml"
# Where the service keeps what must outlive a pod: on the head's volume.
ON_THE_VOLUME = {"key_file", "work_dir", "out"}


def ray_service() -> dict[str, Any]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(RAYSERVICE.read_text())}["RayService"]


def test_rayservice_has_what_kuberay_requires() -> None:
    service = ray_service()
    assert service["apiVersion"] == "ray.io/v1"
    assert DNS_1123.fullmatch(service["metadata"]["name"])
    assert isinstance(service["spec"]["serveConfigV2"], str)  # KubeRay takes it as text
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["rayVersion"] == importlib.metadata.version("ray")
    check_group(cluster["headGroupSpec"])
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    assert len(groups) == len(cluster["workerGroupSpecs"])
    for group in groups.values():
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        check_group(group)
    (gpu,) = [g for g in groups.values() if "num-gpus" in g.get("rayStartParams", {})]
    (container,) = gpu["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == gpu["rayStartParams"]["num-gpus"]
    assert all(
        c["image"].endswith(":cpu")
        for g in groups.values()
        if g is not gpu
        for c in g["template"]["spec"]["containers"]
    )


def test_rayservice_serves_online_gpu_yaml_with_its_state_on_the_volume() -> None:
    served = yaml.safe_load(ray_service()["spec"]["serveConfigV2"])
    expected = yaml.safe_load(ONLINE_GPU.read_text())["applications"]
    apps = served["applications"]
    assert [a["name"] for a in apps] == [a["name"] for a in expected]
    head = ray_service()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    mounts = [m["mountPath"] for c in head["containers"] for m in c.get("volumeMounts", [])]
    for application, want in zip(apps, expected, strict=True):
        args = {k: v for k, v in application["args"].items() if k not in ON_THE_VOLUME}
        assert {**application, "args": args} == {
            **want,
            "args": {k: v for k, v in want["args"].items() if k not in ON_THE_VOLUME},
        }
        for key in ON_THE_VOLUME & application["args"].keys():
            path = application["args"][key]
            assert any(path.startswith(m.rstrip("/") + "/") for m in mounts), key
    # The trainer reaches the controller from outside the pod.
    assert served["http_options"]["host"] == "0.0.0.0"
