"""A real kube-apiserver (v1.36.2, with etcd) for the tests, from ``../shared/kube/``.

The recording fake (``tests/kube/fakeapi.py``) answers fast and injects faults, but it cannot say
whether the real server accepts what the controller writes: schemas and CEL rules of the CRDs,
RBAC, subresources, conflicts, Leases. One server is started per test session (``kube_server`` in
``tests/conftest.py``); a test that must break the server itself (stop it, delete a CRD) starts its
own with :func:`start_kube_server`. There is no controller-manager, scheduler or kubelet: a test
writes the status it needs itself (see ``../shared/kube/README.md``).

Helpers here turn the repository's own files into server state: :func:`install_crds` (the real
Karpenter, CapacityBuffer, Kueue and Volcano CRDs), :func:`deploy_objects` + :func:`apply` (the
``deploy/`` kustomization, server-side applied), and :meth:`KubeServer.client_as` (a client that
is the controller's ServiceAccount, by a TokenRequest token, so RBAC is what the cluster enforces).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from autoscaler.adapters.kube import api_client_from_config

REPO = Path(__file__).resolve().parent.parent
KUBE = REPO.parent / "shared" / "kube"
CRDS = REPO.parent / "shared" / "crds"
DEPLOY = REPO / "deploy"
FIELD_MANAGER = "pa-tests"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class KubeServer:
    """A running kube-apiserver: its state directory, admin kubeconfig and URL."""

    state: Path
    kubeconfig: Path

    @property
    def env(self) -> dict[str, str]:
        """``run/ports.env`` of ``start``: APISERVER_URL, CA_FILE, pids, ..."""
        values: dict[str, str] = {}
        for line in (self.state / "run" / "ports.env").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip("'\"")
        return values

    @property
    def url(self) -> str:
        return self.env["APISERVER_URL"]

    def admin(self) -> client.ApiClient:
        """An admin (system:masters) client. Close it (``with``) when done."""
        return api_client_from_config(self.kubeconfig)

    def token_for(self, namespace: str, service_account: str, *, seconds: int = 3600) -> str:
        """A TokenRequest token of a ServiceAccount (the ServiceAccount must exist)."""
        with self.admin() as api:
            request = {"spec": {"audiences": [], "expirationSeconds": seconds}}
            created = client.CoreV1Api(api).create_namespaced_service_account_token(service_account, namespace, request)
        token: str = created.status.token
        return token

    def kubeconfig_as(self, namespace: str, service_account: str, path: Path) -> Path:
        """A kubeconfig file that authenticates as ``namespace/service_account`` (for a controller process)."""
        env = self.env
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {"server": env["APISERVER_URL"],
                                                       "certificate-authority": env["CA_FILE"]}}],
            "users": [{"name": service_account, "user": {"token": self.token_for(namespace, service_account)}}],
            "contexts": [{"name": "sa", "context": {"cluster": "local", "user": service_account}}],
            "current-context": "sa",
        }
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    def client_as(self, namespace: str, service_account: str, tmp: Path) -> client.ApiClient:
        """A client that is the ServiceAccount (token auth): RBAC applies as it would in a pod."""
        path = self.kubeconfig_as(namespace, service_account, tmp / f"{service_account}.kubeconfig")
        return api_client_from_config(path)


def start_kube_server(state: Path, extra_args: Sequence[str] = ()) -> KubeServer:
    """Start a server in ``state`` (about 5 s). Skips without ``../shared/kube`` on a user's machine; fails in CI.

    ``extra_args`` are appended to kube-apiserver's flags (``start`` reads them from ``EXTRA_APISERVER_ARGS``,
    split on whitespace: no argument may contain a space), e.g. ``--audit-policy-file=...``.
    """
    start = KUBE / "start"
    if not start.is_file():
        message = f"no real API server: {start} is missing (the workspace's shared/kube)"
        if _in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    spaced = [a for a in extra_args if not a or any(c.isspace() for c in a)]
    if spaced:
        raise ValueError(f"kube-apiserver arguments cannot hold whitespace (EXTRA_APISERVER_ARGS is split): {spaced}")
    inherited = os.environ.get("EXTRA_APISERVER_ARGS", "").split()  # a developer's own flags (e.g. -v=5) still apply
    env = {**os.environ, "EXTRA_APISERVER_ARGS": " ".join([*inherited, *extra_args])}
    r = subprocess.run(["bash", str(start), str(state)], capture_output=True, text=True, timeout=300, check=False,
                       env=env)
    if r.returncode != 0:
        pytest.fail(f"kube start failed (exit {r.returncode}):\n{r.stderr[-4000:]}", pytrace=False)
    return KubeServer(state=state, kubeconfig=Path(r.stdout.strip().splitlines()[-1]))


def stop_kube_server(server: KubeServer) -> None:
    subprocess.run(["bash", str(KUBE / "stop"), str(server.state)], capture_output=True, timeout=120, check=False)


def running_kube_server(state: Path, extra_args: Sequence[str] = ()) -> Iterator[KubeServer]:
    """Generator body of a server fixture: start, yield, always stop."""
    server = start_kube_server(state, extra_args)
    try:
        yield server
    finally:
        stop_kube_server(server)


# ---- objects from the repository ----------------------------------------------------------------------


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def crd_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(CRDS.glob("*.yaml")) for d in load_yaml_docs(p)]


def deploy_objects() -> list[dict[str, Any]]:
    """What ``kubectl apply -k deploy/`` sends: the kustomization's resources, with its image override."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    images = {i["name"]: i for i in kustomization.get("images", [])}
    objects = [d for name in kustomization["resources"] for d in load_yaml_docs(DEPLOY / name)]
    for obj in objects:
        pod_spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod_spec.get("containers", []) + pod_spec.get("initContainers", []):
            name, _, tag = container["image"].partition(":")
            if name in images:
                new = images[name]
                container["image"] = f"{new.get('newName', name)}:{new.get('newTag', tag)}"
    return objects


def apply(api: client.ApiClient, objects: Iterable[Mapping[str, Any]], *, field_manager: str = FIELD_MANAGER) -> None:
    """Server-side apply each object (as ``kubectl apply --server-side`` does), in order."""
    dynamic = DynamicClient(api)
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        resource.server_side_apply(body=dict(obj), name=meta["name"], namespace=meta.get("namespace"),
                                   field_manager=field_manager, force_conflicts=True)


def install_crds(api: client.ApiClient, docs: Iterable[Mapping[str, Any]] | None = None,
                 *, timeout: float = 60.0) -> list[str]:
    """Apply the workspace's CRDs (default: all of ``../shared/crds``) and wait until each is Established."""
    docs = list(crd_docs() if docs is None else docs)
    apply(api, docs)
    ext = client.ApiextensionsV1Api(api)
    names = [d["metadata"]["name"] for d in docs]
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            crd = ext.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in (crd.status.conditions or [])} if crd.status else {}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:.0f}s: {conditions}")
            time.sleep(0.1)
    _wait_discovery(api, docs, deadline)
    return names


def _wait_discovery(api: client.ApiClient, docs: list[dict[str, Any]], deadline: float) -> None:
    """Wait until every CRD's served versions answer a list (Established precedes the handler by a moment)."""
    custom = client.CustomObjectsApi(api)
    for doc in docs:
        spec = doc["spec"]
        for version in (v["name"] for v in spec["versions"] if v.get("served")):
            while True:
                try:
                    custom.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"], limit=1)
                    break
                except ApiException as exc:
                    if exc.status != 404 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


def ensure_namespace(api: client.ApiClient, name: str, *, default_service_account: bool = True) -> str:
    """Create a namespace (idempotent) and, since nothing else will, its ``default`` ServiceAccount."""
    core = client.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    if default_service_account:
        try:
            core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
        except ApiException as exc:
            if exc.status != 409:
                raise
    return name
