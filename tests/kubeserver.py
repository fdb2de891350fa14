"""A real Kubernetes API server for the end-to-end tests: opt-in, from binaries or from a disposable cluster.

The recording fake (``tests/kube/fakeapi.py``) answers fast, injects faults and checks the published schemas,
RBAC and conflicts offline; but only a real server decides for itself what it accepts. These tests are the
proof on one, and they run wherever one can be had:

* ``KUBE_BIN_DIR`` names a folder holding ``kube-apiserver`` and ``etcd``: each server is started by
  ``../shared/kube/start`` on 127.0.0.1 (one for the session, ``kube_server`` in ``tests/conftest.py``, and one
  more for a test that must break the server itself: stop it, restart it, read its audit log). There is no
  controller-manager, scheduler or kubelet there: a test writes the status it needs itself.
* ``PA_E2E_KUBECONFIG`` names a disposable cluster's kubeconfig (kind, k3d, a dev cluster): the tests that
  share the session's server run against it, in namespaces of their own, and at the end of the session delete
  the namespaces they created and the CRDs they installed. The tests that need a server of their own (an audit
  log, restarts) skip there with that reason.

Without either, every test marked ``kube`` skips with one reason that names both ways (``SKIP_REASON``), on a
developer's machine and in CI alike.

Helpers here turn the repository's own files into server state: :func:`install_crds` (the real Karpenter,
CapacityBuffer, Kueue and Volcano CRDs of ``../shared/crds``), :func:`deploy_objects` + :func:`apply` (the
``deploy/`` kustomization, server-side applied), and :meth:`KubeServer.client_as` (a client that is the
controller's ServiceAccount, by a TokenRequest token, so RBAC is what the cluster enforces).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from autoscaler.adapters.kube import api_client_from_config
from tests.shared import absent_reason, require_shared, shared_path

REPO = Path(__file__).resolve().parent.parent
KUBE = shared_path("kube")
DEPLOY = REPO / "deploy"
FIELD_MANAGER = "pa-tests"

BIN_DIR_ENV = "KUBE_BIN_DIR"
KUBECONFIG_ENV = "PA_E2E_KUBECONFIG"
SKIP_REASON = (
    f"end-to-end test on a real Kubernetes API server: set {BIN_DIR_ENV} to a folder holding kube-apiserver and "
    f"etcd (started through ../shared/kube/start), or {KUBECONFIG_ENV} to a disposable cluster's kubeconfig "
    "(kind, k3d); docs/development.md, 'End-to-end tests on a real API server'"
)
OWN_SERVER_REASON = (
    f"needs a kube-apiserver of its own (an audit log, restarts): set {BIN_DIR_ENV}; a shared cluster "
    f"({KUBECONFIG_ENV}) runs only the tests that share the session's server"
)


def e2e_source() -> str | None:
    """Where the real server comes from: ``"binaries"`` (``KUBE_BIN_DIR``), ``"kubeconfig"`` (``PA_E2E_KUBECONFIG``),
    or ``None`` (the end-to-end tests skip)."""
    if os.environ.get(BIN_DIR_ENV):
        return "binaries"
    if os.environ.get(KUBECONFIG_ENV):
        return "kubeconfig"
    return None


@dataclass
class KubeServer:
    """A real API server: its admin kubeconfig and, for one started here, its state directory.

    ``created_namespaces`` and ``installed_crds`` record what the tests created, so a shared cluster
    (``PA_E2E_KUBECONFIG``) gets it deleted at the end of the session; a server started here is thrown away whole.
    """

    kubeconfig: Path
    state: Path | None = None
    created_namespaces: list[str] = field(default_factory=list)
    installed_crds: list[str] = field(default_factory=list)

    @property
    def external(self) -> bool:
        """A cluster the tests did not start (``PA_E2E_KUBECONFIG``): clean up after them."""
        return self.state is None

    @property
    def env(self) -> dict[str, str]:
        """``run/ports.env`` of ``start``: APISERVER_URL, CA_FILE, pids, ... (a server started here only)."""
        if self.state is None:
            raise RuntimeError("an external cluster has no ports.env: only a server started here has")
        values: dict[str, str] = {}
        for line in (self.state / "run" / "ports.env").read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip("'\"")
        return values

    def _cluster_entry(self) -> dict[str, Any]:
        """The current context's ``cluster`` entry of the admin kubeconfig (file paths made absolute)."""
        doc = yaml.safe_load(self.kubeconfig.read_text())
        current = doc["current-context"]
        (context,) = [c["context"] for c in doc["contexts"] if c["name"] == current]
        (cluster,) = [dict(c["cluster"]) for c in doc["clusters"] if c["name"] == context["cluster"]]
        ca = cluster.get("certificate-authority")
        if ca and not Path(ca).is_absolute():
            cluster["certificate-authority"] = str((self.kubeconfig.parent / ca).resolve())
        return cluster

    @property
    def url(self) -> str:
        return str(self._cluster_entry()["server"])

    def admin(self) -> client.ApiClient:
        """An admin client. Close it (``with``) when done."""
        return api_client_from_config(self.kubeconfig)

    def token_for(self, namespace: str, service_account: str, *, seconds: int = 3600) -> str:
        """A TokenRequest token of a ServiceAccount (the ServiceAccount must exist)."""
        with self.admin() as api:
            request = {"spec": {"audiences": [], "expirationSeconds": seconds}}
            # cast: the client's signatures want its model classes; it validates a dict into them
            created = client.CoreV1Api(api).create_namespaced_service_account_token(
                service_account, namespace, cast(Any, request))
        assert created.status is not None
        assert created.status.token is not None
        token: str = created.status.token
        return token

    def kubeconfig_as(self, namespace: str, service_account: str, path: Path) -> Path:
        """A kubeconfig file that authenticates as ``namespace/service_account`` (for a controller process)."""
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": self._cluster_entry()}],
            "users": [{"name": service_account, "user": {"token": self.token_for(namespace, service_account)}}],
            "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": service_account}}],
            "current-context": "sa",
        }
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    def client_as(self, namespace: str, service_account: str, tmp: Path) -> client.ApiClient:
        """A client that is the ServiceAccount (token auth): RBAC applies as it would in a pod."""
        path = self.kubeconfig_as(namespace, service_account, tmp / f"{service_account}.kubeconfig")
        return api_client_from_config(path)

    def clean_up(self) -> None:
        """Delete what the tests created on a shared cluster (namespaces first, then CRDs); report, never raise."""
        if not self.external:
            return
        with self.admin() as api:
            for name in reversed(self.created_namespaces):
                _delete_quietly(lambda n=name: client.CoreV1Api(api).delete_namespace(n))
            for name in reversed(self.installed_crds):
                _delete_quietly(lambda n=name: client.ApiextensionsV1Api(api).delete_custom_resource_definition(n))


def _delete_quietly(delete: Any) -> None:
    try:
        delete()
    except ApiException as exc:
        if exc.status != 404:
            print(f"kube e2e clean-up: {exc.status} {exc.reason}")


def start_kube_server(state: Path, extra_args: Sequence[str] = ()) -> KubeServer:
    """Start a server of its own in ``state`` (about 5 s) from ``KUBE_BIN_DIR``; skips with the reason otherwise.

    ``extra_args`` are appended to kube-apiserver's flags (``start`` reads them from ``EXTRA_APISERVER_ARGS``,
    split on whitespace: no argument may contain a space), e.g. ``--audit-policy-file=...``. With ``KUBE_BIN_DIR``
    set, a server that does not start fails the test: the binaries were asked for.
    """
    if not os.environ.get(BIN_DIR_ENV):
        pytest.skip(OWN_SERVER_REASON if e2e_source() else SKIP_REASON)
    reason = absent_reason("kube", "start")
    if reason is not None:
        pytest.skip(f"{BIN_DIR_ENV} is set, but {reason}")
    spaced = [a for a in extra_args if not a or any(c.isspace() for c in a)]
    if spaced:
        raise ValueError(f"kube-apiserver arguments cannot hold whitespace (EXTRA_APISERVER_ARGS is split): {spaced}")
    inherited = os.environ.get("EXTRA_APISERVER_ARGS", "").split()  # a developer's own flags (e.g. -v=5) still apply
    env = {**os.environ, "EXTRA_APISERVER_ARGS": " ".join([*inherited, *extra_args])}
    r = subprocess.run(["bash", str(KUBE / "start"), str(state)], capture_output=True, text=True, timeout=300,
                       check=False, env=env)
    if r.returncode != 0:
        pytest.fail(f"kube start failed (exit {r.returncode}):\n{r.stderr[-4000:]}", pytrace=False)
    return KubeServer(state=state, kubeconfig=Path(r.stdout.strip().splitlines()[-1]))


def stop_kube_server(server: KubeServer) -> None:
    if server.state is not None:
        subprocess.run(["bash", str(KUBE / "stop"), str(server.state)], capture_output=True, timeout=120, check=False)


def running_kube_server(state: Path, extra_args: Sequence[str] = ()) -> Iterator[KubeServer]:
    """Generator body of a fixture for a server of its own: start, yield, always stop."""
    server = start_kube_server(state, extra_args)
    try:
        yield server
    finally:
        stop_kube_server(server)


def session_kube_server(state: Path) -> Iterator[KubeServer]:
    """Generator body of the session's server: started from ``KUBE_BIN_DIR``, else the ``PA_E2E_KUBECONFIG`` cluster
    (cleaned up afterwards), else a skip with ``SKIP_REASON``."""
    if e2e_source() == "kubeconfig":
        path = Path(os.environ[KUBECONFIG_ENV]).expanduser()
        if not path.is_file():
            pytest.fail(f"{KUBECONFIG_ENV}={path}: no such kubeconfig file", pytrace=False)
        server = KubeServer(kubeconfig=path)
        try:
            yield server
        finally:
            server.clean_up()
        return
    yield from running_kube_server(state)


# ---- objects from the repository ----------------------------------------------------------------------


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def crd_docs() -> list[dict[str, Any]]:
    """Every CRD of ``../shared/crds`` (skips the test, with the reason, where that folder is absent)."""
    return [d for p in sorted(require_shared("crds").glob("*.yaml")) for d in load_yaml_docs(p)]


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


class _Object(Protocol):
    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def metadata(obj: _Object) -> client.V1ObjectMeta:
    """``obj.metadata``: optional in the client's models, always there on an object the server returns."""
    assert obj.metadata is not None
    return obj.metadata


def name_of(obj: _Object) -> str:
    """``obj.metadata.name``, likewise always there on an object the server returns."""
    name = metadata(obj).name
    assert name is not None
    return name


def apply(api: client.ApiClient, objects: Iterable[Mapping[str, Any]], *, field_manager: str = FIELD_MANAGER) -> None:
    """Server-side apply each object (as ``kubectl apply --server-side`` does), in order."""
    dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]  # kubernetes.dynamic is unannotated
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        meta = obj["metadata"]
        resource.server_side_apply(body=dict(obj), name=meta["name"], namespace=meta.get("namespace"),
                                   field_manager=field_manager, force_conflicts=True)


def install_crds(api: client.ApiClient, docs: Iterable[Mapping[str, Any]] | None = None,
                 *, timeout: float = 60.0, record: KubeServer | None = None) -> list[str]:
    """Apply the workspace's CRDs (default: all of ``../shared/crds``) and wait until each is Established.

    ``record``: the server whose ``installed_crds`` lists those that were not there before (a shared cluster
    deletes them at the end of the session, and keeps its own)."""
    docs = list(crd_docs() if docs is None else docs)
    ext = client.ApiextensionsV1Api(api)
    names = [d["metadata"]["name"] for d in docs]
    if record is not None:
        present = {metadata(c).name for c in ext.list_custom_resource_definition().items}
        record.installed_crds.extend(n for n in names if n not in present)
    apply(api, docs)
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


def _wait_discovery(api: client.ApiClient, docs: Sequence[Mapping[str, Any]], deadline: float) -> None:
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


def ensure_namespace(api: client.ApiClient, name: str, *, default_service_account: bool = True,
                     record: KubeServer | None = None) -> str:
    """Create a namespace (idempotent) and, since a bare API server will not, its ``default`` ServiceAccount.

    ``record``: the server whose ``created_namespaces`` gets it, when this call created it (for the clean-up of a
    shared cluster)."""
    core = client.CoreV1Api(api)
    try:
        core.create_namespace(cast(Any, {"metadata": {"name": name}}))  # cast: the client validates the dict
        if record is not None:
            record.created_namespaces.append(name)
    except ApiException as exc:
        if exc.status != 409:
            raise
    if default_service_account:
        try:
            core.create_namespaced_service_account(name, cast(Any, {"metadata": {"name": "default"}}))
        except ApiException as exc:
            if exc.status != 409:
                raise
    return name
