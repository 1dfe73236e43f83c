"""examples/kuberay/raycluster.yaml against Kubernetes' own schemas (kubernetes-validate,
which ships them: no cluster, no network). A RayCluster is a custom resource, whose
schema is KubeRay's CRD and not shipped; what makes or breaks the pods is the pod
templates inside it, so each is checked as the Pod it becomes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")
MANIFEST = Path(__file__).resolve().parents[1] / "examples" / "kuberay" / "raycluster.yaml"
K8S = "1.30.0"


def _docs() -> list[dict]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def _pods(cluster: dict) -> dict[str, dict]:
    spec = cluster["spec"]
    templates = {"head": spec["headGroupSpec"]["template"]}
    templates |= {g["groupName"]: g["template"] for g in spec["workerGroupSpecs"]}
    return {name: {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"vmatrix-{name}"}, **t}
            for name, t in templates.items()}


def test_claims_and_pod_templates_are_valid_kubernetes() -> None:
    docs = _docs()
    clusters = [d for d in docs if d["kind"] == "RayCluster"]
    assert len(clusters) == 1 and clusters[0]["apiVersion"] == "ray.io/v1"
    for doc in docs:
        if doc["kind"] != "RayCluster":
            kubernetes_validate.validate(doc, K8S, strict=True)
    for pod in _pods(clusters[0]).values():
        kubernetes_validate.validate(pod, K8S, strict=True)


def test_a_broken_template_is_caught() -> None:
    # The check must be able to fail: a misspelt field in a worker's container.
    pod = _pods(next(d for d in _docs() if d["kind"] == "RayCluster"))["gpu"]
    pod["spec"]["containers"][0]["volumeMount"] = pod["spec"]["containers"][0].pop("volumeMounts")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S, strict=True)


def test_every_claim_a_pod_mounts_is_declared_and_ray_matches_the_pin() -> None:
    docs = _docs()
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    pin = next(d for d in (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text().splitlines()
               if '"ray[default]==' in d)
    assert f'=={cluster["spec"]["rayVersion"]}"' in pin
    for pod in _pods(cluster).values():
        used = {v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
        assert used <= claims, used - claims
        mounted = {m["name"] for c in pod["spec"]["containers"] for m in c["volumeMounts"]}
        assert mounted <= {v["name"] for v in pod["spec"]["volumes"]}
