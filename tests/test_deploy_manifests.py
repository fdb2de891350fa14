"""Offline validation of every manifest under deploy/: schemas, RBAC allow-list, and the wiring between objects.

A manifest mistake (a misspelt field, a Service that selects nothing, a config mounted with subPath so
it never reloads, an RBAC rule widened by accident) shows up only after `kubectl apply` on a real
cluster. These tests catch them in CI without one: built-in kinds are validated against the
Kubernetes OpenAPI schemas shipped by ``kubernetes-validate`` (strict: unknown fields fail) and
round-tripped through the official client's models; the cross-object checks are explicit.
"""

from __future__ import annotations

import inspect
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from autoscaler.config.parser import load_config, parse_config_text
from autoscaler.config.schema import CONFIGMAP_KEY, DEFAULT_CONFIG_PATH

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
NAMESPACE = "predictive-autoscaler"
KUBERNETES_VERSION = "1.29"  # oldest minor we claim to support; schemas of newer minors accept these too
OPTIONAL_FILES = {"servicemonitor.yaml", "prometheusrule.yaml"}  # need prometheus-operator's CRDs; applied separately
CUSTOM_KINDS = {  # no built-in schema
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}

MANIFEST_FILES = sorted(p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml")


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def all_objects() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in MANIFEST_FILES:
        for doc in load_docs(path):
            yield path, doc


def find(kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for _, d in all_objects() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


BUILT_IN_OBJECTS = [(p, d) for p, d in all_objects() if (d["apiVersion"], d["kind"]) not in CUSTOM_KINDS]
BUILT_IN_IDS = [f"{p.relative_to(DEPLOY)}:{d['kind']}/{d['metadata']['name']}" for p, d in BUILT_IN_OBJECTS]


def controller() -> dict[str, Any]:
    return find("Deployment", "predictive-autoscaler")


def controller_container() -> dict[str, Any]:
    container: dict[str, Any]
    (container,) = controller()["spec"]["template"]["spec"]["containers"]
    return container


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---------------------------------------------------------------------------------------------- shape


def test_there_are_manifests() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in MANIFEST_FILES}
    assert {"rbac.yaml", "deployment.yaml", "configmap.yaml", "examples/vllm-deployment.yaml"} <= names
    custom = {(d["apiVersion"], d["kind"]) for _, d in all_objects()} - {(d["apiVersion"], d["kind"]) for _, d in
                                                                         BUILT_IN_OBJECTS}
    assert custom == CUSTOM_KINDS


@pytest.mark.parametrize("path", MANIFEST_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_object_has_api_version_kind_and_name(path: Path) -> None:
    docs = load_docs(path)
    assert docs, f"{path} holds no objects"
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str), doc
        assert isinstance(doc.get("kind"), str), doc
        assert isinstance(doc.get("metadata", {}).get("name"), str), doc


def test_controller_objects_live_in_the_controller_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    for path, doc in all_objects():
        if path.parent.name == "examples" or doc["kind"] in cluster_scoped:
            continue
        assert doc["metadata"].get("namespace") == NAMESPACE, f"{path.name}: {doc['kind']}/{doc['metadata']['name']}"
    assert find("Namespace")["metadata"]["name"] == NAMESPACE


# ---------------------------------------------------------------------------------------------- schemas


def schema_validate(doc: dict[str, Any]) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(("path", "doc"), BUILT_IN_OBJECTS, ids=BUILT_IN_IDS)
def test_built_in_kinds_validate_against_the_kubernetes_schema(path: Path, doc: dict[str, Any]) -> None:
    """Custom kinds (the ServiceMonitor) have no schema here: test_servicemonitor_selects_... checks them."""
    schema_validate(doc)


@pytest.mark.parametrize(
    ("mutate", "what"),
    [
        (lambda d: d["spec"].update(replica=2), "misspelt field"),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(ports=[{"containerPort": "http"}]), "type"),
        (lambda d: d["spec"].pop("selector"), "missing required field"),
    ],
)
def test_schema_validation_catches_broken_manifests(mutate: Any, what: str) -> None:
    """Control: the validator used above must be able to fail."""
    import kubernetes_validate

    doc = json.loads(json.dumps(controller()))
    mutate(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        schema_validate(doc)


def key_paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        out: set[str] = set()
        for k, v in value.items():
            out |= {f"{prefix}.{k}"} | key_paths(v, f"{prefix}.{k}")
        return out
    if isinstance(value, list):
        return set().union(*(key_paths(v, f"{prefix}[{i}]") for i, v in enumerate(value))) if value else set()
    return set()


class _Response:
    """What ``ApiClient.deserialize`` reads in kubernetes < 33: a response object with a JSON body."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body)


def client_deserialize(doc: dict[str, Any], model_name: str) -> Any:
    from kubernetes import client

    api = client.ApiClient()
    if "response_text" in inspect.signature(api.deserialize).parameters:  # kubernetes >= 33: the body itself
        return api.deserialize(json.dumps(doc), model_name, "application/json")
    return cast(Any, api).deserialize(_Response(doc), model_name)  # cast: the signature of kubernetes < 33


def fields_lost_in_client_models(doc: dict[str, Any]) -> set[str]:
    """The client's models drop fields they do not know: keys lost in a round trip are wrong field names."""
    from kubernetes import client

    group_version = doc["apiVersion"].split("/")
    version = group_version[-1].capitalize()
    group = group_version[0].split(".")[0].capitalize() if len(group_version) == 2 else "Core"
    model_name = f"{version}{doc['kind']}"
    if not hasattr(client, model_name):
        model_name = f"{group}{version}{doc['kind']}"
    assert hasattr(client, model_name), f"no client model for {doc['apiVersion']} {doc['kind']}"
    back = client.ApiClient().sanitize_for_serialization(  # type: ignore[no-untyped-call]  # unannotated in the client
        client_deserialize(doc, model_name))
    return key_paths(doc) - key_paths(back)


@pytest.mark.parametrize(("path", "doc"), BUILT_IN_OBJECTS, ids=BUILT_IN_IDS)
def test_objects_round_trip_through_the_official_client_models(path: Path, doc: dict[str, Any]) -> None:
    assert fields_lost_in_client_models(doc) == set()


def test_client_model_round_trip_catches_a_misspelt_field() -> None:
    """Control: the round trip above must be able to fail."""
    doc = json.loads(json.dumps(controller()))
    doc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"periodSeconds": 5}
    assert fields_lost_in_client_models(doc) == {
        ".spec.template.spec.containers[0].readinesProbe",
        ".spec.template.spec.containers[0].readinesProbe.periodSeconds",
    }


# ---------------------------------------------------------------------------------------------- RBAC

# tests/kube/test_real_controller.py checks the other direction on a real API server: every grant here is used by
# the controller's ticks (audit log), nothing is watched (it polls), scale is patched (never updated), Events are
# core/v1 and only created.
ALLOWED_CLUSTER_GRANTS = {
    ("apps", "deployments", "get"),
    ("apps", "deployments", "list"),
    ("apps", "deployments", "patch"),
    ("apps", "deployments/scale", "get"),
    ("apps", "deployments/scale", "patch"),
    ("", "pods", "list"),
    ("", "pods", "patch"),  # pod-deletion-cost marks of a scale-down (set, then cleared)
    ("", "events", "create"),
    ("", "nodes", "list"),  # free GPUs of a NodePool: its nodes, and the pods bound to them (the pods list above)
    ("autoscaling", "horizontalpodautoscalers", "list"),  # another autoscaler on a Deployment: it runs as advisory
    # the status of each Deployment, in a ConfigMap it owns (no get: a conflict re-reads by a field-selected list;
    # no delete: garbage collection removes it with its Deployment)
    ("", "configmaps", "list"),
    ("", "configmaps", "create"),
    ("", "configmaps", "update"),
    # GPU nodes and cost ceiling (autoscaler/adapters/karpenter.py, training.py)
    ("karpenter.sh", "nodepools", "get"),
    ("karpenter.sh", "nodepools", "list"),
    ("karpenter.sh", "nodepools", "patch"),
    ("autoscaling.x-k8s.io", "capacitybuffers", "get"),
    ("autoscaling.x-k8s.io", "capacitybuffers", "list"),
    ("autoscaling.x-k8s.io", "capacitybuffers", "create"),
    ("autoscaling.x-k8s.io", "capacitybuffers", "patch"),
    ("autoscaling.x-k8s.io", "capacitybuffers", "delete"),
    ("kueue.x-k8s.io", "workloads", "list"),
    ("kueue.x-k8s.io", "workloads", "patch"),  # planned-start annotation; activating a held Workload
    ("kueue.x-k8s.io", "localqueues", "list"),  # no nodes held for a gang Kueue cannot admit
    ("kueue.x-k8s.io", "clusterqueues", "list"),
    ("scheduling.volcano.sh", "podgroups", "list"),
    ("scheduling.volcano.sh", "podgroups", "patch"),  # planned-start annotation
    ("scheduling.k8s.io", "priorityclasses", "get"),
    ("scheduling.k8s.io", "priorityclasses", "list"),  # Volcano PodGroups rank by their PriorityClass
    ("scheduling.k8s.io", "priorityclasses", "create"),
}
ALLOWED_LEASE_GRANTS = {
    ("coordination.k8s.io", "leases", "create", "*"),
    ("coordination.k8s.io", "leases", "get", "predictive-autoscaler"),
    ("coordination.k8s.io", "leases", "update", "predictive-autoscaler"),
}
ALLOWED_HEADROOM_GRANTS = {  # placeholder Deployments, in the controller's namespace only
    ("apps", "deployments", "create", "*"),
    ("apps", "deployments", "delete", "*"),
}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    out = set()
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or ["*"]:
                        out.add((group, resource, verb, name))
    return out


def test_cluster_role_grants_exactly_the_allow_list() -> None:
    granted = grants(find("ClusterRole", "predictive-autoscaler"))
    assert {(g, r, v) for g, r, v, _ in granted} == ALLOWED_CLUSTER_GRANTS
    assert all(name == "*" for *_, name in granted)
    assert not any("*" in (g, r, v) for g, r, v, _ in granted)


def test_leader_election_role_is_namespaced_and_limited_to_our_lease() -> None:
    role = find("Role", "predictive-autoscaler-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == ALLOWED_LEASE_GRANTS
    lease = load_config(DEFAULT_CONFIG_PATH).leader_election
    assert (lease.lease_name, lease.lease_namespace) == ("predictive-autoscaler", NAMESPACE)


def test_no_other_roles_exist() -> None:
    kinds = [(d["kind"], d["metadata"]["name"]) for _, d in all_objects() if d["kind"] in {"Role", "ClusterRole"}]
    assert sorted(kinds) == [
        ("ClusterRole", "predictive-autoscaler"),
        ("Role", "predictive-autoscaler-headroom"),
        ("Role", "predictive-autoscaler-leader-election"),
    ]


def test_headroom_role_is_namespaced_and_only_creates_and_deletes_deployments() -> None:
    role = find("Role", "predictive-autoscaler-headroom")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == ALLOWED_HEADROOM_GRANTS


def test_bindings_give_the_roles_to_the_controllers_service_account() -> None:
    sa = find("ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    bindings = [(kind, role_kind, d) for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"),
                                                              ("RoleBinding", "Role"))
                for _, d in all_objects() if d["kind"] == kind]
    assert sorted(d["metadata"]["name"] for _, _, d in bindings) == [
        "predictive-autoscaler", "predictive-autoscaler-headroom", "predictive-autoscaler-leader-election"
    ]
    for kind, role_kind, binding in bindings:
        assert binding["subjects"] == [subject]
        role = find(role_kind, binding["roleRef"]["name"])
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                      "name": role["metadata"]["name"]}
        if kind == "RoleBinding":
            assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert controller()["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


# ---------------------------------------------------------------------------------------------- config


def test_configmap_embeds_the_default_config_verbatim() -> None:
    cm = find("ConfigMap", "predictive-autoscaler-config")
    assert set(cm["data"]) == {CONFIGMAP_KEY}
    embedded = cm["data"][CONFIGMAP_KEY]
    assert embedded == DEFAULT_CONFIG_PATH.read_text(), "deploy/configmap.yaml drifted from config/default.yaml"
    assert embedded == (REPO / "config" / "default.yaml").read_text()
    assert parse_config_text(embedded, "configmap") == load_config(DEFAULT_CONFIG_PATH)


def test_config_is_mounted_as_a_directory_so_updates_reach_the_controller() -> None:
    pod = controller()["spec"]["template"]["spec"]
    container = controller_container()
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == "predictive-autoscaler-config"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert "subPath" not in mount, "a subPath mount never receives ConfigMap updates"
    assert mount.get("readOnly") is True
    args = container["args"]
    config_path = args[args.index("--config") + 1]
    assert config_path == f"{mount['mountPath']}/{CONFIGMAP_KEY}"


def test_controller_command_line_parses_when_the_run_command_exists() -> None:
    from autoscaler.cli import build_parser

    container = controller_container()
    # No `command`: the image's ENTRYPOINT, the console script, runs these args (tests/test_image.py checks it).
    assert "command" not in container
    args = container["args"]
    assert args[0] == "run"
    assert args[args.index("--prometheus-url") + 1].startswith("http")
    parser = build_parser()
    try:
        import autoscaler.commands.run  # noqa: F401
    except ModuleNotFoundError:
        pytest.skip("autoscaler/commands/run.py does not exist yet: the args cannot be checked against it")
    parsed = parser.parse_args(args)
    assert parsed.command == "run"


# ---------------------------------------------------------------------------------------------- controller pod


def test_controller_pod_is_hardened() -> None:
    pod = controller()["spec"]["template"]["spec"]
    container = controller_container()
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    # A read-only root needs a writable /tmp for Prophet/cmdstan and matplotlib.
    tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert len(tmp) == 1
    assert any(v["name"] == tmp[0]["name"] and "emptyDir" in v for v in pod["volumes"])
    assert find("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_controller_is_highly_available_with_probes_and_resources() -> None:
    dep = controller()
    assert dep["spec"]["replicas"] == 2
    container = controller_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http-metrics": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert container["resources"]["requests"].keys() >= {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == ports["http-metrics"]
    env = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env  # leader-election identity
    pdb = find("PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    assert pdb["spec"]["minAvailable"] < dep["spec"]["replicas"]
    assert selects(dep["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])


def test_metrics_service_selects_the_controller_pods_on_a_named_port() -> None:
    svc = find("Service", "predictive-autoscaler-metrics")
    labels = controller()["spec"]["template"]["metadata"]["labels"]
    assert selects(svc["spec"]["selector"], labels)
    container_ports = {p["name"] for p in controller_container()["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= container_ports


def test_servicemonitor_selects_the_metrics_service() -> None:
    sm = find("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    svc = find("Service", "predictive-autoscaler-metrics")
    assert set(sm["spec"]) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
    assert selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    service_ports = {p["name"] for p in svc["spec"]["ports"]}
    for endpoint in sm["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "honorLabels"}
        assert endpoint["honorLabels"] is True  # the workload labels must survive the scrape
        assert endpoint["port"] in service_ports
        assert endpoint["path"] == "/metrics"


# ---------------------------------------------------------------------------------------------- kustomize


def kustomization() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert isinstance(data, dict)
    return data


def test_kustomization_lists_every_manifest_except_the_optional_ones() -> None:
    listed = kustomization()["resources"]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    for name in listed:
        assert (DEPLOY / name).is_file(), f"kustomization.yaml lists missing {name}"
    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == on_disk - OPTIONAL_FILES
    for name in OPTIONAL_FILES:
        assert "kubectl apply -f deploy/" + name in (DEPLOY / name).read_text(), f"{name} must say how to apply it"


def test_kustomize_build_yields_exactly_the_listed_objects() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (optional; test_kustomization_lists_every_manifest covers the listing)")
    out = subprocess.run([kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
    expected = {
        (d["kind"], d["metadata"]["name"]) for name in kustomization()["resources"] for d in load_docs(DEPLOY / name)
    }
    assert built == expected


# ---------------------------------------------------------------------------------------------- example


EXAMPLE = DEPLOY / "examples" / "vllm-deployment.yaml"


def test_example_is_a_gpu_vllm_deployment_with_a_health_readiness_probe() -> None:
    (dep,) = load_docs(EXAMPLE)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("vllm/vllm-openai:")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_example_annotations_parse_without_problems() -> None:
    try:
        from autoscaler.domain import annotations
    except ImportError:
        pytest.skip("autoscaler/domain/annotations.py does not exist yet")
    (dep,) = load_docs(EXAMPLE)
    meta = dep["metadata"]
    result = annotations.parse_workload(
        meta["namespace"], meta["name"], meta.get("labels"), meta.get("annotations"), dep["spec"]["template"]
    )
    assert result.problems == (), [str(p) for p in result.problems]
    assert result.spec is not None
    assert result.spec.gpus_per_replica == 1
    # Every annotation a team can set is shown (the status annotation is the controller's own).
    used = {k.removeprefix(annotations.PREFIX) for k in meta["annotations"] if k.startswith(annotations.PREFIX)}
    assert used == set(annotations.KNOWN_KEYS) - {annotations.STATUS}
    # The profile it names exists in the shipped config.
    load_config(DEFAULT_CONFIG_PATH).profile(result.spec.forecast_profile)


def test_every_example_annotation_and_label_of_ours_is_explained_by_a_comment() -> None:
    lines = EXAMPLE.read_text().splitlines()
    ours = [i for i, line in enumerate(lines) if line.strip().startswith("predictive-autoscaler.io/")]
    assert len(ours) >= 11
    for i in ours:
        assert lines[i - 1].strip().startswith("#"), f"line {i + 1} has no comment above it: {lines[i].strip()}"
