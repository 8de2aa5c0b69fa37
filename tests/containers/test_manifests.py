"""deploy/kubernetes: strict schema validation against Kubernetes' own OpenAPI-derived JSON
schemas (PyPI `kubernetes-validate`, offline: the schemas ship in the package), plus the
structural contract the env image needs (security context, probes, ports, volumes, DNS),
the Pod Security level of the namespace, TRL's weight-sync port, persistent volumes,
secrets, and what the NetworkPolicies let through (evaluated, not just read).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from containers_support import ROOT
from support.requirements import missing

K8S_DIR = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"  # the oldest we claim (appArmorProfile is a 1.30 field)
MANIFESTS = sorted(K8S_DIR.glob("*.yaml"))
SECRETS_TEMPLATE = K8S_DIR / "secrets.yaml.example"  # not applied by `kubectl apply -f deploy/kubernetes/`
NAMESPACE = "swe-openenv"


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
    assert {p.name for p in MANIFESTS} >= {"00-namespace.yaml", "env.yaml", "trainer-job.yaml", "vllm.yaml",
                                           "network-policy.yaml"}
    assert SECRETS_TEMPLATE.is_file()
    # `kubectl apply -f deploy/kubernetes/` goes in file-name order: the namespace first
    assert MANIFESTS[0].name == "00-namespace.yaml"


@pytest.mark.parametrize("path", [*MANIFESTS, SECRETS_TEMPLATE], ids=lambda p: p.name)
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


# ------------------------------------------------------------------ helpers
def _pods() -> dict[str, dict]:
    """Pod template (metadata + spec) of every workload, by workload name."""
    return {name: d["spec"]["template"] for (kind, name), d in _by_kind().items() if kind in ("Deployment", "Job")}


def _container(pod: dict) -> dict:
    (c,) = pod["spec"]["containers"]
    return c


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def _mounted_claims(pod: dict) -> dict[str, str]:
    """mountPath -> PVC claim name, for the PVC-backed mounts of ``pod``."""
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
              for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v}
    return {m["mountPath"]: claims[m["name"]] for m in _container(pod)["volumeMounts"] if m["name"] in claims}


# Pod Security Standards "baseline" (kubernetes.io/docs/concepts/security/pod-security-standards,
# v1.30): the checks that can apply to these manifests.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def baseline_violations(pod: dict) -> list[str]:
    spec, out = pod["spec"], []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(field)
    if any("hostPath" in v for v in spec.get("volumes", [])):
        out.append("hostPath volume")
    pod_sc = spec.get("securityContext", {})
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccomp Unconfined")
    if (pod_sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append("pod AppArmor Unconfined")
    if pod_sc.get("sysctls"):
        out.append("sysctls")
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        extra = set((sc.get("capabilities") or {}).get("add", [])) - BASELINE_CAPS
        if extra:
            out.append(f"{c['name']}: capabilities {sorted(extra)}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"{c['name']}: seccomp Unconfined")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{c['name']}: AppArmor Unconfined")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"{c['name']}: procMount")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{c['name']}: hostPort")
    return out


def _matches(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, f"only matchLabels selectors are evaluated here: {selector}"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _peer_ok(peers: list[dict] | None, labels: dict) -> bool:
    if not peers:  # no `from`/`to`: any peer
        return True
    for peer in peers:
        assert set(peer) == {"podSelector"}, f"only same-namespace pod peers are evaluated here: {peer}"
        if _matches(peer["podSelector"], labels):
            return True
    return False


def _port_ok(ports: list[dict] | None, port: int, names: dict[str, int]) -> bool:
    if not ports:  # no `ports`: every port
        return True
    return any(p.get("protocol", "TCP") == "TCP" and names.get(p["port"], p["port"]) == port for p in ports)


def allowed(src: str, dst: str, port: int) -> bool:
    """Whether the NetworkPolicies of the manifests let pod ``src`` open TCP ``port`` on pod ``dst``
    (both workload names, or "other" for an unlabelled pod of the namespace)."""
    pods = _pods()
    labels = {name: pod["metadata"]["labels"] for name, pod in pods.items()} | {"other": {"app": "other"}}
    port_names = {p["name"]: p["containerPort"] for p in _container(pods[dst]).get("ports", [])} if dst in pods else {}
    policies = [d["spec"] for (kind, _), d in _by_kind().items() if kind == "NetworkPolicy"]
    egress = [p for p in policies if "Egress" in p["policyTypes"] and _matches(p["podSelector"], labels[src])]
    ingress = [p for p in policies if "Ingress" in p["policyTypes"] and _matches(p["podSelector"], labels[dst])]
    out_ok = not egress or any(_peer_ok(r.get("to"), labels[dst]) and _port_ok(r.get("ports"), port, port_names)
                               for p in egress for r in p.get("egress") or [])
    in_ok = not ingress or any(_peer_ok(r.get("from"), labels[src]) and _port_ok(r.get("ports"), port, port_names)
                               for p in ingress for r in p.get("ingress") or [])
    return out_ok and in_ok


# ------------------------------------------------------------------ the cluster contract
def test_everything_lives_in_the_namespace_whose_pod_security_level_is_documented():
    objs = _by_kind()
    ns = objs[("Namespace", NAMESPACE)]["metadata"]["labels"]
    # privileged: what the env pods need (test below); warn/audit at baseline for everything else
    assert ns["pod-security.kubernetes.io/enforce"] == "privileged"
    assert ns["pod-security.kubernetes.io/warn"] == ns["pod-security.kubernetes.io/audit"] == "baseline"
    namespace_doc = (K8S_DIR / "00-namespace.yaml").read_text()
    assert "baseline" in namespace_doc and "restricted" in namespace_doc and "SYS_ADMIN" in namespace_doc
    for (kind, name), doc in objs.items():
        if kind != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{kind}/{name} is outside {NAMESPACE}"
    for doc in _docs(SECRETS_TEMPLATE):
        assert doc["metadata"]["namespace"] == NAMESPACE


def test_env_pod_needs_privileged_and_the_other_pods_meet_baseline():
    pods = _pods()
    env_violations = baseline_violations(pods["swe-env"])
    # each of these is why "baseline" (and so "restricted") would refuse the env pod
    assert any("SYS_ADMIN" in v for v in env_violations), env_violations
    assert any("seccomp Unconfined" in v for v in env_violations), env_violations
    assert any("AppArmor Unconfined" in v for v in env_violations), env_violations
    for name in ("swe-trainer", "swe-vllm"):
        assert baseline_violations(pods[name]) == [], name
    # the checker does catch the host-level escapes too
    bad = copy.deepcopy(pods["swe-trainer"])
    bad["spec"]["hostNetwork"] = True
    bad["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}})
    assert len(baseline_violations(bad)) == 2


def test_weight_sync_port_is_trls_default_and_open_on_the_trainer():
    """TRL 1.16: the trainer's main process is rank 0 of the NCCL weight-update group and hosts its
    rendezvous at its own IP on GRPOConfig.vllm_group_port; the vLLM workers connect to it."""
    try:
        import dataclasses
        import inspect

        from trl.generation.vllm_client import VLLMClient
        from trl.trainer.grpo_config import GRPOConfig
    except ImportError as exc:
        missing("trl", f"it does not import ({exc})")
    default = next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "vllm_group_port")
    source = inspect.getsource(VLLMClient.init_communicator)
    # who hosts the rendezvous: if TRL moves it to the server, the port belongs on the vLLM Service
    assert re.search(r'"master_address":\s*get_ip\(\)', source) and '"master_port": self.group_port' in source
    pods = _pods()
    trainer = _container(pods["swe-trainer"])
    ports = {p["name"]: p["containerPort"] for p in trainer["ports"]}
    assert ports["weight-sync"] == default == 51216
    env = _env(trainer)
    assert int(env["VLLM_GROUP_PORT"]["value"]) == default
    assert "grpo.vllm_group_port=$VLLM_GROUP_PORT" in " ".join(trainer["args"])
    # the server side: the trainer reaches the vLLM Service's HTTP port, the vLLM workers reach
    # the trainer's rendezvous (and NCCL's own ephemeral ports, both ways)
    vllm_svc = _by_kind()[("Service", "swe-vllm")]
    http = vllm_svc["spec"]["ports"][0]
    assert http["targetPort"] in {p["name"] for p in _container(pods["swe-vllm"])["ports"]}
    assert allowed("swe-trainer", "swe-vllm", http["port"]) and allowed("swe-vllm", "swe-trainer", default)
    assert allowed("swe-vllm", "swe-trainer", 40000) and allowed("swe-trainer", "swe-vllm", 40000)


def test_checkpoints_traces_and_model_cache_are_persistent_volumes():
    objs, pods = _by_kind(), _pods()
    pvcs = {name: d for (kind, name), d in objs.items() if kind == "PersistentVolumeClaim"}
    trainer, env, vllm = (_mounted_claims(pods[n]) for n in ("swe-trainer", "swe-env", "swe-vllm"))
    # checkpoints: the trainer's --output-dir
    trainer_c = _container(pods["swe-trainer"])
    out_dir = re.search(r"--output-dir (\S+)", " ".join(trainer_c["args"])).group(1)
    assert trainer[out_dir] == "swe-checkpoints"
    # traces: the env's data dir (ENV_DATA_DIR, /data by default in the image)
    env_c = _container(pods["swe-env"])
    data_dir = _env(env_c).get("ENV_DATA_DIR", {}).get("value", "/data")
    assert env[data_dir] == "swe-traces"
    assert pvcs["swe-traces"]["spec"]["accessModes"] == ["ReadWriteMany"], "every replica writes to it"
    # the server runs as ENV_GID: fsGroup makes the volume writable for that group
    assert pods["swe-env"]["spec"]["securityContext"]["fsGroup"] == int(_env(env_c)["ENV_GID"]["value"])
    # the model cache: HF_HOME of the trainer and the vLLM server on one shared claim
    for pod_name, mounts in (("swe-trainer", trainer), ("swe-vllm", vllm)):
        hf_home = _env(_container(pods[pod_name]))["HF_HOME"]["value"]
        mount = next(m for m in mounts if hf_home == m or hf_home.startswith(m.rstrip("/") + "/"))
        assert mounts[mount] == "swe-model-cache", pod_name
    assert pvcs["swe-model-cache"]["spec"]["accessModes"] == ["ReadWriteMany"]
    # every claim a pod mounts is defined here
    for mounts in (trainer, env, vllm):
        assert set(mounts.values()) <= set(pvcs)


SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.I)


def test_tokens_and_keys_come_from_secrets():
    pods = _pods()
    template = {d["metadata"]["name"]: d for d in _docs(SECRETS_TEMPLATE)}
    assert all(d["kind"] == "Secret" and all(v == "" for v in d["stringData"].values()) for d in template.values()), \
        "the template must not hold values"
    refs = {}
    for name, pod in pods.items():
        for var, e in _env(_container(pod)).items():
            if SECRET_NAME.search(var):
                assert "value" not in e, f"{name}: {var} is a literal, not a secretKeyRef"
                ref = e["valueFrom"]["secretKeyRef"]
                assert ref["key"] in template[ref["name"]]["stringData"], (name, var, ref)
                assert ref.get("optional") is True, (name, var)
                refs[(name, var)] = ref
    assert ("swe-trainer", "HF_TOKEN") in refs and ("swe-vllm", "HF_TOKEN") in refs
    assert refs[("swe-trainer", "ENV_SERVER_TOKEN")] == refs[("swe-env", "ENV_SERVER_TOKEN")]
    # every teacher key the default teacher pool reads is given to the trainer
    teachers = yaml.safe_load((ROOT / "trainer_client" / "replay" / "teachers.default.yaml").read_text())["teachers"]
    for key_env in {t["api_key_env"] for t in teachers if t.get("api_key_env")}:
        assert ("swe-trainer", key_env) in refs, key_env


def test_network_policy_only_trainers_reach_env_replicas_and_replicas_reach_nothing():
    objs, pods = _by_kind(), _pods()
    policy = objs[("NetworkPolicy", "swe-env-isolation")]["spec"]
    assert _matches(policy["podSelector"], pods["swe-env"]["metadata"]["labels"])
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"} and policy["egress"] == []
    env_port = _container(pods["swe-env"])["ports"][0]["containerPort"]
    assert allowed("swe-trainer", "swe-env", env_port)
    for src in ("swe-vllm", "swe-env", "other"):
        assert not allowed(src, "swe-env", env_port), src
    assert not allowed("swe-trainer", "swe-env", 22)
    for dst in ("swe-trainer", "swe-vllm", "other"):  # not even DNS or a sibling replica
        for port in (53, 8000, 8001, 51216, 443):
            assert not allowed("swe-env", dst, port), (dst, port)
    # vLLM (unauthenticated weight-update endpoints) and the trainer's rendezvous: trainer/vLLM only
    assert not allowed("other", "swe-vllm", 8001) and not allowed("swe-env", "swe-vllm", 8001)
    assert not allowed("other", "swe-trainer", 51216)
    # the evaluator is not vacuous: without the policies everything is allowed
    assert allowed("other", "other", 1)
