"""deploy/kubernetes: strict schema validation against Kubernetes' own OpenAPI-derived JSON
schemas (PyPI `kubernetes-validate`, offline: the schemas ship in the package), plus the
structural contract the env image needs (security context, probes, ports, volumes, DNS).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from containers_lib import ROOT
from requirements import missing

K8S_DIR = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"  # the oldest we claim (appArmorProfile is a 1.30 field)
MANIFESTS = sorted(K8S_DIR.glob("*.yaml"))


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _by_kind() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for p in MANIFESTS for d in _docs(p)}


def _validator():
    try:
        import kubernetes_validate
    except ImportError:
        missing("kubernetes-validate", "it is not installed (pip install kubernetes-validate)")
    return kubernetes_validate


def test_manifests_exist():
    assert {p.name for p in MANIFESTS} >= {"env.yaml", "trainer-job.yaml", "vllm.yaml"}


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_matches_the_kubernetes_schema(path: Path):
    kv = _validator()
    for doc in _docs(path):
        kv.validate(doc, K8S_VERSION, strict=True)


def test_the_schema_check_rejects_a_broken_manifest():
    """The validator in use does catch a misspelt field and a wrong type (so a pass means something)."""
    kv = _validator()
    deployment = _by_kind()[("Deployment", "swe-env")]
    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    for bad in (typo, wrong_type):
        with pytest.raises(kv.ValidationError):
            kv.validate(bad, K8S_VERSION, strict=True)


def test_env_deployment_contract():
    objs = _by_kind()
    dep, svc = objs[("Deployment", "swe-env")], objs[("Service", "swe-env")]
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["clusterIP"] == "None", "replicas must be addressable one by one (sticky sessions)"
    assert svc["spec"]["ports"][0]["port"] == 8000
    (env,) = pod["spec"]["containers"]
    assert env["image"].startswith("swe-openenv-env")
    assert env["ports"][0]["containerPort"] == 8000
    for probe in ("readinessProbe", "livenessProbe"):
        assert env[probe]["httpGet"]["path"] == "/health"
    sc = env["securityContext"]
    # what docker/env-entrypoint.sh needs to unmask /proc and drop to ENV_UID, and nothing more
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert set(sc["capabilities"]["add"]) == {"SYS_ADMIN", "SETUID", "SETGID", "SETPCAP"}
    assert sc["seccompProfile"]["type"] == "Unconfined" and not sc.get("privileged", False)
    # the API server refuses allowPrivilegeEscalation=false together with CAP_SYS_ADMIN
    assert sc.get("allowPrivilegeEscalation", True) is True
    variables = {e["name"]: e.get("value") for e in env["env"]}
    mounts = {m["name"]: m for m in env["volumeMounts"]}
    assert mounts["tasks"]["readOnly"] is True
    assert variables["ENV_TASKS"].startswith(mounts["tasks"]["mountPath"] + "/")
    assert {m["mountPath"] for m in mounts.values()} >= {"/data", "/cache"}
    assert variables["ENV_BACKEND"] == "bwrap"
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_trainer_job_reaches_every_replica_and_reserves_gpus():
    objs = _by_kind()
    job = objs[("Job", "swe-trainer")]
    (trainer,) = job["spec"]["template"]["spec"]["containers"]
    assert int(trainer["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    script = " ".join(trainer["args"])
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert trainer_token_from_secret(trainer["env"])
    assert ("Service", env["ENV_SERVICE"]) in objs, "the trainer must look up the env's Service"
    assert "getent ahostsv4" in script and "--env-url" in script and "accelerate launch" in script
    vllm_host = re.match(r"http://([^:/]+):(\d+)", env["VLLM_URL"])
    vllm_svc = objs[("Service", vllm_host.group(1))]
    assert vllm_svc["spec"]["ports"][0]["port"] == int(vllm_host.group(2))


def trainer_token_from_secret(env: list[dict]) -> bool:
    """The trainer reads the replicas' bearer token from the secret the env pods read it from."""
    ref = next((e.get("valueFrom", {}).get("secretKeyRef") for e in env if e["name"] == "ENV_SERVER_TOKEN"), None)
    return bool(ref) and ref.get("name") == "swe-env-token" and ref.get("key") == "token"
