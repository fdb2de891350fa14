"""A recording fake of the few Kubernetes API endpoints the controller uses, served over real HTTP, as strict as
the real API server about what it accepts.

Why our own instead of ``kmock`` (0.8, read in site-packages): the emulator there stores objects as
plain dicts and (a) ignores ``labelSelector`` on lists, (b) has no ``resourceVersion`` and therefore no
optimistic concurrency: a stale ``PUT`` of a Lease never gets ``409``, so leader election races cannot
be tested, (c) treats a subresource write as a patch of the parent and answers with the parent, not a
``Scale``, and (d) is asyncio-only, so the synchronous official client would have to be pushed into
worker threads from async tests. The behaviours we assert on are exactly those, so a fake that gets
them right is the more faithful test, and a threaded ``http.server`` needs no event loop at all.

Why strict: the real-API-server suite (``tests/kube/test_real_*.py``) runs only when binaries or a disposable
cluster are given, so this fake keeps, offline, what that suite proved: every write the controller makes is
checked the way the API server checks it, and every request is authorized against ``deploy/rbac.yaml``.

Who is calling (``fake_rbac.py``): a request's ``Authorization: Bearer <token>`` names the user through
``tokens``: ``CONTROLLER_TOKEN`` is the controller's ServiceAccount
(``system:serviceaccount:predictive-autoscaler:predictive-autoscaler``), ``ADMIN_TOKEN`` an admin
(``system:masters``, never refused). A request without the header is the controller too (``anonymous``), so
every client pointed at the fake - a kubeconfig a test writes, the fleet benchmark - is held to the
controller's grants; an unknown token is ``401``. State a test sets up as an admin goes through the Python API
(``add``, ``store_unlocked``: never checked) or a client with ``ADMIN_TOKEN``. ``rbac=None`` turns the check off.

What it does like the real API server:

* authorization: RBAC from ``deploy/rbac.yaml`` (Roles, ClusterRoles and their bindings to the controller's
  ServiceAccount): verb from the method (``watch=true`` = watch), resource with subresource
  (``deployments/scale``), API group, namespace scope (Role vs ClusterRole), resourceNames. A request not granted
  is ``403 Forbidden`` with the server's message (``deployments.apps "x" is forbidden: User "system:serviceaccount:
  NS:SA" cannot patch resource "deployments/scale" in API group "apps" in the namespace "NS"``);
* built-in kinds (Deployment, its ``scale`` subresource, Pod, core/v1 Event, Lease, PriorityClass,
  HorizontalPodAutoscaler) are checked
  after a patch is applied to the stored object, or as sent on create/replace, against the Kubernetes OpenAPI of
  ``kubernetes-validate`` (strict, ``fake_validation.KUBERNETES_VERSION``) and the rules the OpenAPI does not
  carry (``fake_validation.py``: names, label and annotation syntax and sizes, owner references, selectors,
  containers, quantities, tolerations, pod-deletion-cost, Event and Lease rules, immutable fields);
* custom resources are served only for CRDs installed with ``install_crd`` (the real YAML from ../shared/crds):
  discovery (``GET /apis/GROUP/VERSION``) lists them and answers ``404`` for a group version nobody installed;
  list/get/create/merge-patch/delete work at the CRD's scope; every object written is checked against the
  version's ``openAPIV3Schema`` and its ``x-kubernetes-validations`` CEL rules (``fake_cel.py``: cel-python,
  transition rules with ``oldSelf`` on updates, ratcheting of unchanged values; rules cel-python cannot evaluate
  are skipped and listed by ``fake_cel.census``), plus the ObjectMeta rules;
* answers: a problem of a value is ``422 Invalid`` (``<Kind>.<group> "<name>" is invalid: <field>: Invalid
  value: ...``, ``details.causes`` per field); an unknown field is dropped with a ``Warning: 299`` header (and
  recorded in ``warnings``), or ``400 BadRequest`` "strict decoding error" under ``fieldValidation=Strict``; a
  value of the wrong JSON type in a built-in kind is ``400`` (it cannot be decoded). Every error is a ``Status``
  (``kind: Status``, ``apiVersion: v1``, ``status: Failure``, ``reason``, ``details {name, group, kind}``,
  ``code``) worded as the server words it;
* lists filter by label selector (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``) and page
  with ``limit``/``continue``;
* every write bumps a cluster-wide ``resourceVersion``; a ``PUT`` or a patch carrying a stale
  ``metadata.resourceVersion`` gets ``409 Conflict``; a ``POST`` of an existing name ``409 AlreadyExists``;
  a body whose name or namespace differs from the URL's is ``400``;
* ``application/merge-patch+json`` is applied as RFC 7386; ``strategic-merge-patch+json`` (which for the
  maps we touch behaves the same) is applied the same way; JSON Patch is refused with ``415`` because
  nothing here should send it;
* the ``scale`` subresource reads and writes the Deployment's ``spec.replicas`` and answers
  ``autoscaling/v1 Scale``;
* Lease ``acquireTime``/``renewTime`` must be ``MicroTime`` with exactly six fractional digits, as the
  real decoder demands (``400`` otherwise) - a whole-second ``isoformat()`` would fail in production;
* Events need ``involvedObject.namespace`` equal to the Event's namespace, and ``generateName`` works (cut to 58
  characters, 5 random ones added);
* pods are listed (also by ``fieldSelector`` ``spec.nodeName=NAME``, the pods bound to a node) and merge-patched
  (the ``pod-deletion-cost`` marks of a scale-down); nodes are listed (label selector), for the free GPUs of a
  NodePool;
* Deployments can be created and deleted, PriorityClasses listed (paged), read and created (creating an existing
  name is ``409 AlreadyExists``).
* ConfigMaps (the controller's status objects) are listed (label selector, and ``fieldSelector`` on
  ``metadata.name``), read, created, replaced (a stale ``resourceVersion`` is ``409 Conflict``) and merge-patched.

Every request is recorded (method, path, query, content type, parsed body, user), and faults can be injected
(``fail("PATCH", r"/scale$", 409, times=2)``) to exercise retries and error reporting. What the fake's own
checks refused (``401``/``403``/``400``/``422``) is kept in ``refusals`` and dropped unknown fields in
``warnings``; the ``fake_api`` fixture fails a test that leaves any behind without calling
``expect_refusals()``, so a denied or invalid write cannot pass unnoticed behind a controller that reports
errors and carries on.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import random
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
import yaml

from tests.kube import fake_cel, fake_validation
from tests.kube.fake_rbac import ADMIN, CONTROLLER, Rbac, RequestInfo, User, forbidden_message, request_info
from tests.kube.fake_validation import FieldError

MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
CONTROLLER_TOKEN = "fake-controller-token"  # names of the fake's identities, not secrets
ADMIN_TOKEN = "fake-admin-token"

Key = tuple[str, str, str]  # (resource, namespace, name)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any
    user: str = ""


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    reason: str
    action: Callable[[FakeKubeAPI], None] | None = None  # instead of failing: change state first (a racer)


@dataclass(frozen=True)
class Refusal:
    request: Recorded
    code: int
    reason: str
    message: str


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


@dataclass(frozen=True)
class Builtin:
    """A built-in resource the fake serves."""

    resource: str
    group: str
    version: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


BUILTINS = {
    b.resource: b
    for b in (
        Builtin("deployments", "apps", "v1", "Deployment"),
        Builtin("pods", "", "v1", "Pod"),
        Builtin("events", "", "v1", "Event"),
        Builtin("leases", "coordination.k8s.io", "v1", "Lease"),
        Builtin("priorityclasses", "scheduling.k8s.io", "v1", "PriorityClass", namespaced=False),
        Builtin("configmaps", "", "v1", "ConfigMap"),
        Builtin("nodes", "", "v1", "Node", namespaced=False),
        Builtin("horizontalpodautoscalers", "autoscaling", "v2", "HorizontalPodAutoscaler"),
    )
}
SCALE = Builtin("deployments/scale", "autoscaling", "v1", "Scale")


def group_of(resource: str) -> tuple[str, str]:
    """(group, plural) of a storage key: ``deployments`` -> (apps, deployments); ``nodepools.karpenter.sh``."""
    if resource in BUILTINS:
        return BUILTINS[resource].group, resource
    plural, _, group = resource.partition(".")
    return group, plural


def qualified(resource: str) -> str:
    group, plural = group_of(resource)
    return f"{plural}.{group}" if group else plural


def invalid(group_kind: str, group: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """``errors.NewInvalid``: one error is the message's tail, several are listed in brackets."""
    listed = [str(e) for e in errors]
    tail = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    return ApiError(422, "Invalid", f'{group_kind} "{name}" is invalid: {tail}',
                    {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errors]})


def bad_request(kind: str, version: str, problems: list[str]) -> ApiError:
    return ApiError(400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: '
                    + "; ".join(problems))


def strict_decoding(kind: str, version: str, fields: list[str]) -> ApiError:
    listed = ", ".join(f'unknown field "{f}"' for f in fields)
    return ApiError(400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: strict '
                    f"decoding error: {listed}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def _split_selector(text: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            yield text[start:i].strip()
            start = i + 1
    if text[start:].strip():
        yield text[start:].strip()


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in _split_selector(selector):
        if m := re.fullmatch(r"([^\s!=]+)\s+(in|notin)\s+\((.*)\)", term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if (op == "in") != (key in labels and labels[key] in values):
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass(frozen=True)
class Crd:
    """One served version of an installed CustomResourceDefinition."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    list_kind: str
    namespaced: bool
    schema: dict[str, Any] | None

    @property
    def resource(self) -> str:
        """The storage key: one per resource, whatever version a client speaks."""
        return f"{self.plural}.{self.group}"


def load_crd(path: str | Path) -> list[Crd]:
    """Every served version of the CRD in a YAML file (parsed once per process: the Kueue CRD is 19k lines)."""
    return list(_load_crd(str(Path(path).resolve())))


@functools.lru_cache(maxsize=32)
def _load_crd(path: str) -> tuple[Crd, ...]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=loader)  # CSafeLoader/SafeLoader: safe
    spec = doc["spec"]
    names = spec["names"]
    return tuple(
        Crd(
            group=spec["group"],
            version=v["name"],
            plural=names["plural"],
            singular=names.get("singular", names["kind"].lower()),
            kind=names["kind"],
            list_kind=names.get("listKind", names["kind"] + "List"),
            namespaced=spec["scope"] == "Namespaced",
            schema=(v.get("schema") or {}).get("openAPIV3Schema"),
        )
        for v in spec["versions"]
        if v.get("served", True)
    )


def strict_schema(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever it declares properties (and does not keep unknown
    fields): what the API server's pruning / ``fieldValidation=Strict`` means, in JSON Schema."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def prune(obj: Any, schema: Any) -> Any:
    """Drop fields the structural schema does not declare, as the API server does without Strict validation."""
    if not isinstance(schema, dict):
        return obj
    if isinstance(obj, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return obj
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None:
            return {k: prune(v, props[k]) for k, v in obj.items() if k in props}
        if isinstance(extra, dict):
            return {k: prune(v, extra) for k, v in obj.items()}
        return obj
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"]) for v in obj]
    return obj


_VALIDATORS: dict[tuple[int, bool], tuple[dict[str, Any], Any]] = {}


def schema_errors(obj: Any, schema: dict[str, Any], *, strict: bool) -> list[str]:
    """Violations of ``schema`` (JSON Schema keywords; Kubernetes extensions and CEL rules are ignored)."""
    cached = _VALIDATORS.get((id(schema), strict))
    if cached is None or cached[0] is not schema:
        cached = (schema, jsonschema.Draft7Validator(strict_schema(schema) if strict else schema))
        _VALIDATORS[(id(schema), strict)] = cached
    validator = cached[1]
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}" for e in validator.iter_errors(obj)
    )


_CRD_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def _crd_validator(schema: dict[str, Any]) -> Any:
    """The strict validator of a CRD version's schema, built once (unknown fields show as additionalProperties)."""
    cached = _CRD_VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = (schema, jsonschema.Draft7Validator(strict_schema(schema)))
        _CRD_VALIDATORS[id(schema)] = cached
    return cached[1]


_MISSING: Any = object()


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        if (isinstance(obj, dict) and p in obj) or (isinstance(obj, list) and isinstance(p, int) and 0 <= p < len(obj)):
            obj = obj[p]
        else:
            return _MISSING
    return obj


NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand: no vowels, no look-alikes


@dataclass
class FakeKubeAPI:
    """State, recording and fault injection. ``start()`` serves it on 127.0.0.1 and returns the base URL."""

    url: str = ""
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    crds: dict[tuple[str, str, str], Crd] = field(default_factory=dict)  # (group, version, plural)
    rbac: Rbac | None = field(default_factory=Rbac.from_manifest)  # None: no authorization
    tokens: dict[str, User] = field(default_factory=lambda: {CONTROLLER_TOKEN: CONTROLLER, ADMIN_TOKEN: ADMIN})
    anonymous: User | None = CONTROLLER  # who a request without a bearer token is (None: 401)
    refusals: list[Refusal] = field(default_factory=list)
    warnings: list[tuple[Recorded, str]] = field(default_factory=list)
    refusals_expected: bool = False
    _rv: Iterator[int] = field(default_factory=lambda: itertools.count(100))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _warned: list[str] = field(default_factory=list)  # the request being served's warnings

    # ---- test-facing helpers -------------------------------------------------------------------

    def add(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as an admin would have (not checked: tests may seed any state)."""
        with self._lock:
            return self._store(resource, copy.deepcopy(obj))

    def remove(self, resource: str, namespace: str, name: str) -> None:
        """Remove an object as a controller the fake does not run would (a ReplicaSet its pod; not checked)."""
        with self._lock:
            self.objects.pop((resource, namespace, name), None)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def all(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(o)
                for (r, ns, _), o in self.objects.items()
                if r == resource and (namespace is None or ns == namespace)
            ]

    def install_crd(self, path: str | Path, *, versions: tuple[str, ...] | None = None) -> list[Crd]:
        """Serve the custom resource defined in a CRD YAML file (all served versions, or only ``versions``)."""
        installed = [c for c in load_crd(path) if versions is None or c.version in versions]
        if not installed:
            raise ValueError(f"{path}: no served version among {versions}")
        with self._lock:
            for crd in installed:
                self.crds[(crd.group, crd.version, crd.plural)] = crd
        return installed

    def uninstall_crd(self, group: str, plural: str) -> None:
        with self._lock:
            for key in [k for k in self.crds if k[0] == group and k[2] == plural]:
                del self.crds[key]

    def fail(self, method: str, path: str, status: int, *, times: int = 1, reason: str = "") -> None:
        default = {409: "Conflict", 500: "InternalError", 403: "Forbidden", 404: "NotFound"}.get(status, "Error")
        with self._lock:
            self.faults.append(Fault(method.upper(), re.compile(path), status, times, reason or default))

    def before(self, method: str, path: str, action: Callable[[FakeKubeAPI], None]) -> None:
        """Run ``action`` once, just before the next matching request is served (under the server's lock):
        another writer that gets in between a client's read and its write."""
        with self._lock:
            self.faults.append(Fault(method.upper(), re.compile(path), 0, 1, "", action))

    def store_unlocked(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Write an object from inside a ``before`` action (the lock is already held; not checked)."""
        return self._store(resource, copy.deepcopy(obj))

    def calls(self, method: str | None = None, path: str = "") -> list[Recorded]:
        rx = re.compile(path)
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method) and rx.search(r.path)]

    def writes(self) -> list[Recorded]:
        return [r for r in self.calls() if r.method in ("POST", "PUT", "PATCH", "DELETE")]

    def denied(self) -> list[Refusal]:
        """Requests RBAC refused (``403``)."""
        with self._lock:
            return [r for r in self.refusals if r.code == 403]

    def expect_refusals(self) -> None:
        """This test provokes refusals (or dropped fields) on purpose: the fixture's final check is off."""
        self.refusals_expected = True

    def unexpected(self) -> list[str]:
        """What the fake's checks refused or dropped, unless the test said it expects that (one line each)."""
        if self.refusals_expected:
            return []
        with self._lock:
            out = [f"{r.code} {r.reason} for {r.request.method} {r.request.path} as {r.request.user}: {r.message}"
                   for r in self.refusals]
            out += [f"Warning for {req.method} {req.path}: {w} (dropped)" for req, w in self.warnings]
        return out

    # ---- server ----------------------------------------------------------------------------------

    def start(self) -> str:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, payload, headers = api.serve(
                    self.command, self.path, self.headers.get("Content-Type"), raw, self.headers.get("Authorization")
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ---- request handling ------------------------------------------------------------------------

    def handle(
        self, method: str, target: str, content_type: str | None, raw: bytes, authorization: str | None = None
    ) -> tuple[int, Any]:
        """Serve one request without HTTP (status, parsed answer); ``authorization``: the header's value."""
        status, payload, _ = self.serve(method, target, content_type, raw, authorization)
        return status, payload

    def serve(
        self, method: str, target: str, content_type: str | None, raw: bytes, authorization: str | None = None
    ) -> tuple[int, Any, list[tuple[str, str]]]:
        """Serve one request: (status, parsed answer, extra headers)."""
        url = urlsplit(target)
        query = parse_qs(url.query)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self._lock:
            user = self._authenticate(authorization)
            recorded = Recorded(method, url.path, query, content_type, copy.deepcopy(body),  # as sent
                                user.name if user is not None else "")
            self.requests.append(recorded)
            self._warned = []
            try:
                self._authorize(user, request_info(method, url.path, query))
            except ApiError as err:
                self.refusals.append(Refusal(recorded, err.code, err.reason, err.message))
                return err.code, self._status(err), []
            try:
                for fault in self.faults:
                    if fault.times > 0 and fault.method == method and fault.path.search(url.path):
                        fault.times -= 1
                        if fault.action is not None:
                            fault.action(self)
                            continue
                        raise ApiError(fault.status, fault.reason, f"injected {fault.status} for {method} {url.path}")
            except ApiError as err:
                return err.code, self._status(err), []
            try:
                status, payload = self._route(method, url.path, query, content_type, body)
            except ApiError as err:
                if err.code in (400, 415, 422):
                    self.refusals.append(Refusal(recorded, err.code, err.reason, err.message))
                return err.code, self._status(err), []
            except fake_cel.CelFailure as exc:
                failure = ApiError(500, "InternalError", f"the fake API server: {exc}")
                self.refusals.append(Refusal(recorded, failure.code, failure.reason, failure.message))
                return failure.code, self._status(failure), []
            self.warnings.extend((recorded, w) for w in self._warned)
            return status, payload, [("Warning", f"299 - {json.dumps(w)}") for w in self._warned]

    @staticmethod
    def _status(err: ApiError) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": err.message, "reason": err.reason}
        if err.details:
            body["details"] = {k: v for k, v in err.details.items() if v not in ("", None, [])}
        body["code"] = err.code
        return body

    def _authenticate(self, authorization: str | None) -> User | None:
        if not authorization:
            return self.anonymous
        scheme, _, token = authorization.partition(" ")
        return self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    def _authorize(self, user: User | None, info: RequestInfo) -> None:
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if self.rbac is None or self.rbac.allows(user, info):
            return
        raise ApiError(403, "Forbidden", forbidden_message(user, info),
                       {"name": info.name, "group": info.group, "kind": info.resource})

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], ctype: str | None, body: Any
    ) -> tuple[int, Any]:
        strict = query.get("fieldValidation", [""])[0] == "Strict"
        apps = re.fullmatch(r"/apis/apps/v1(?:/namespaces/([^/]+))?/deployments(?:/([^/]+))?(/scale)?", path)
        core = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/(pods|events)(?:/([^/]+))?", path)
        lease = re.fullmatch(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?", path)
        if apps:
            ns, name, scale = apps.groups()
            if name is None and method == "GET":
                return 200, self._list("deployments", ns, query, "DeploymentList", "apps/v1")
            if name is not None and scale:
                return self._scale(method, ns, name, ctype, body, strict)
            if name is not None and method == "GET":
                return 200, self._fetch("deployments", ns, name)
            if name is not None and method == "PATCH":
                return 200, self._patch("deployments", ns, name, ctype, body, strict)
        if core:
            ns, resource, name = core.groups()
            if method == "GET" and name is None:
                kind = "PodList" if resource == "pods" else "EventList"
                listed = self._list(resource, ns, query, kind, "v1")
                wanted = query.get("fieldSelector", [""])[0]
                if wanted:
                    field_name, _, value = wanted.partition("=")
                    if resource != "pods" or field_name != "spec.nodeName" or value.startswith("="):
                        raise ApiError(400, "BadRequest", f'"{field_name}" is not a known field selector: only '
                                       '"spec.nodeName=NAME" on pods is served by this fake')
                    listed["items"] = [o for o in listed["items"] if (o.get("spec") or {}).get("nodeName") == value]
                return 200, listed
            if resource == "events" and method == "POST" and ns is not None and name is None:
                return 201, self._create_builtin("events", ns, body, strict)
            if resource == "pods" and method == "PATCH" and ns is not None and name is not None:
                return 200, self._patch("pods", ns, name, ctype, body, strict)
        if lease:
            ns, name = lease.groups()
            if method == "GET" and name is not None:
                return 200, self._fetch("leases", ns, name)
            if method == "POST" and name is None:
                return 201, self._create_builtin("leases", ns, self._check_lease(body), strict)
            if method == "PUT" and name is not None:
                return 200, self._replace("leases", ns, name, self._check_lease(body), strict)
        hpa = re.fullmatch(r"/apis/autoscaling/v2(?:/namespaces/([^/]+))?/horizontalpodautoscalers(?:/([^/]+))?", path)
        if hpa:
            ns, name = hpa.groups()
            if method == "GET" and name is None:
                listed = self._list("horizontalpodautoscalers", ns, query, "HorizontalPodAutoscalerList",
                                    "autoscaling/v2")
                listed["items"] = [{**o, "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"}
                                   for o in listed["items"]]
                return 200, listed
            if method == "POST" and ns is not None and name is None:
                return 201, self._create_builtin("horizontalpodautoscalers", ns, body, strict)
            if method == "DELETE" and ns is not None and name is not None:
                return 200, self._delete("horizontalpodautoscalers", ns, name)
        if method == "GET" and (m := re.fullmatch(r"/apis/([^/]+)/([^/]+)", path)):
            return 200, self._discovery(m.group(1), m.group(2))
        custom = re.fullmatch(r"/apis/([^/]+)/([^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", path)
        if custom and (crd := self.crds.get((custom.group(1), custom.group(2), custom.group(4)))) is not None:
            return self._custom(crd, method, custom.group(3), custom.group(5), query, ctype, body)
        if apps and method == "POST" and apps.group(1) is not None and apps.group(2) is None:
            return 201, self._create_builtin("deployments", apps.group(1), body, strict)
        if apps and method == "DELETE" and apps.group(2) is not None and not apps.group(3):
            return 200, self._delete("deployments", apps.group(1), apps.group(2))
        pc = re.fullmatch(r"/apis/scheduling\.k8s\.io/v1/priorityclasses(?:/([^/]+))?", path)
        if pc and method == "GET" and pc.group(1) is not None:
            return 200, self._fetch("priorityclasses", "", pc.group(1))
        if pc and method == "GET":
            listed = self._list("priorityclasses", None, query, "PriorityClassList", "scheduling.k8s.io/v1")
            listed["items"] = [{**o, "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
                               for o in listed["items"]]
            return 200, listed
        if pc and method == "POST" and pc.group(1) is None:
            return 201, self._create_builtin("priorityclasses", "", body, strict)
        if method == "GET" and path == "/api/v1/nodes":
            return 200, self._list("nodes", None, query, "NodeList", "v1")
        cm = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/configmaps(?:/([^/]+))?", path)
        if cm:
            return self._configmaps(method, cm.group(1), cm.group(2), query, ctype, body, strict)
        raise ApiError(404, "NotFound", f"the fake API server does not serve {method} {path}")

    # ---- built-in kinds: what the API server checks before it stores ----------------------------

    def _admit(self, b: Builtin, obj: Any, old: dict[str, Any] | None, ns: str, strict: bool) -> dict[str, Any]:
        """``obj`` as it may be stored (unknown fields dropped), or the server's refusal: 400 for what cannot be
        decoded (wrong JSON types; unknown fields under ``Strict``), 422 for what is invalid."""
        if not isinstance(obj, dict):
            raise ApiError(400, "BadRequest", f"{b.kind} body must be a JSON object")
        for key, want in (("apiVersion", b.api_version), ("kind", b.kind)):
            if obj.get(key) not in (None, want):
                raise bad_request(b.kind, b.version, [f"{key} is {obj.get(key)!r}, expected {want!r}"])
        typed = {**obj, "apiVersion": b.api_version, "kind": b.kind}
        problems = fake_validation.schema_problems(typed, fake_validation.builtin_validator(b.api_version, b.kind))
        undecodable = list(problems.undecodable)
        if b.resource == "deployments":
            undecodable += fake_validation.unparsable_quantities(
                ((obj.get("spec") or {}).get("template") or {}).get("spec"), "spec.template.spec")
        if undecodable:
            raise bad_request(b.kind, b.version, undecodable)
        if problems.unknown:
            names = [fake_validation.field_name(p) for p in problems.unknown]
            if strict:
                raise strict_decoding(b.kind, b.version, names)
            fake_validation.drop_fields(obj, problems.unknown)
            self._warned += [f'unknown field "{n}"' for n in names]
        if b.resource == "priorityclasses":
            obj.setdefault("value", 0)  # int32 without omitempty: decoding gives 0, and every read shows it
        errors = list(problems.invalid)
        errors += fake_validation.object_meta_errors(
            obj.get("metadata"), name_rule="segment" if b.resource == "events" else "subdomain")
        if b.resource == "deployments":
            errors += fake_validation.deployment_errors(obj, old)
        elif b.resource == "pods":
            errors += fake_validation.pod_errors(obj, old)
        elif b.resource == "events":
            errors += fake_validation.event_errors(obj, ns)
        elif b.resource == "leases":
            errors += fake_validation.lease_errors(obj)
        elif b.resource == "priorityclasses":
            errors += fake_validation.priority_class_errors(obj, old)
        if errors:
            raise invalid(b.group_kind, b.group, b.kind, (obj.get("metadata") or {}).get("name", ""), errors)
        return obj

    def _create_builtin(self, resource: str, ns: str, body: Any, strict: bool) -> dict[str, Any]:
        b = BUILTINS[resource]
        return self._create(resource, ns, body, lambda obj: self._admit(b, obj, None, ns, strict))

    def _configmaps(
        self, method: str, ns: str | None, name: str | None, query: dict[str, list[str]], ctype: str | None,
        body: Any, strict: bool,
    ) -> tuple[int, Any]:
        """core/v1 ConfigMaps: list (labelSelector; fieldSelector ``metadata.name=NAME``, the only field this fake
        selects on), get, create, replace and merge patch, each checked like the other built-in kinds."""
        if method == "GET" and name is None:
            listed = self._list("configmaps", ns, query, "ConfigMapList", "v1")
            wanted = query.get("fieldSelector", [""])[0]
            if wanted:
                field_name, _, value = wanted.partition("=")
                if field_name != "metadata.name":
                    raise ApiError(400, "BadRequest", f'"{field_name}" is not a known field selector: only '
                                   '"metadata.name" is served by this fake')
                listed["items"] = [o for o in listed["items"] if o["metadata"]["name"] == value.lstrip("=")]
            return 200, listed
        if ns is None:
            raise ApiError(404, "NotFound", f"the fake API server does not serve {method} on configmaps of all "
                           "namespaces")
        if method == "GET" and name is not None:
            return 200, self._fetch("configmaps", ns, name)
        if method == "POST" and name is None:
            return 201, self._create_builtin("configmaps", ns, body, strict)
        if method == "PUT" and name is not None:
            return 200, self._replace("configmaps", ns, name, body, strict)
        if method == "PATCH" and name is not None:
            return 200, self._patch("configmaps", ns, name, ctype, body, strict)
        raise ApiError(405, "MethodNotAllowed", f"{method} on configmaps")

    def _check_lease(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "Lease body must be a JSON object")
        for key in ("acquireTime", "renewTime"):
            value = (body.get("spec") or {}).get(key)
            if value is not None and not MICROTIME.match(str(value)):
                raise ApiError(
                    400,
                    "BadRequest",
                    f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" as '
                    '"2006-01-02T15:04:05.000000Z07:00"',
                )
        return body

    # ---- custom resources ------------------------------------------------------------------------

    def _discovery(self, group: str, version: str) -> dict[str, Any]:
        crds = sorted((c for (g, v, _), c in self.crds.items() if (g, v) == (group, version)), key=lambda c: c.plural)
        if not crds:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        verbs = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}",
            "resources": [
                {
                    "name": c.plural,
                    "singularName": c.singular,
                    "namespaced": c.namespaced,
                    "kind": c.kind,
                    "verbs": verbs,
                    "storageVersionHash": "fake",
                }
                for c in crds
            ],
        }

    def _custom(
        self, crd: Crd, method: str, ns: str | None, name: str | None, query: dict[str, list[str]],
        ctype: str | None, body: Any,
    ) -> tuple[int, Any]:
        if ns is not None and not crd.namespaced:
            raise ApiError(404, "NotFound", f"{crd.resource} is cluster-scoped")
        if ns is None and crd.namespaced and (method != "GET" or name is not None):
            raise ApiError(404, "NotFound", f"{crd.resource} is namespaced")
        api_version = f"{crd.group}/{crd.version}"
        strict = query.get("fieldValidation", [""])[0] == "Strict"

        def out(obj: dict[str, Any]) -> dict[str, Any]:
            return {**obj, "apiVersion": api_version, "kind": crd.kind}

        if method == "GET" and name is None:
            listed = self._list(crd.resource, ns, query, crd.list_kind, api_version)
            listed["items"] = [out(o) for o in listed["items"]]
            return 200, listed
        if method == "GET" and name is not None:
            return 200, out(self._fetch(crd.resource, ns or "", name))
        if method == "POST" and name is None:
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", f"{crd.kind} body must be a JSON object")
            if body.get("apiVersion") != api_version or body.get("kind") != crd.kind:
                raise ApiError(400, "BadRequest", f"body is {body.get('apiVersion')}/{body.get('kind')}, "
                                                  f"expected {api_version}/{crd.kind}")
            created = self._create(crd.resource, ns or "", body, lambda obj: self._validated(crd, obj, strict, None))
            return 201, out(created)
        if method == "PATCH" and name is not None:
            current = self._fetch(crd.resource, ns or "", name)
            merged = self._apply_patch(crd.resource, current, ctype, body)
            return 200, out(self._store(crd.resource, self._validated(crd, merged, strict, current)))
        if method == "DELETE" and name is not None:
            obj = self._fetch(crd.resource, ns or "", name)
            del self.objects[(crd.resource, ns or "", name)]
            return 200, out(obj)
        raise ApiError(405, "MethodNotAllowed", f"{method} on {crd.resource}")

    def _validated(self, crd: Crd, obj: dict[str, Any], strict: bool, old: dict[str, Any] | None) -> dict[str, Any]:
        """``obj`` pruned to its schema, or the server's refusal: the ObjectMeta rules, the ``openAPIV3Schema``
        (unchanged values ratcheted on update), the CEL rules; unknown fields are 400 under ``Strict``."""
        errors = fake_validation.object_meta_errors(obj.get("metadata"))
        if crd.schema is None:
            if errors:
                raise invalid(f"{crd.kind}.{crd.group}", crd.group, crd.kind, obj["metadata"].get("name", ""), errors)
            return obj
        unknown: list[tuple[Any, ...]] = []
        for e in _crd_validator(crd.schema).iter_errors(obj):
            path = tuple(e.absolute_path)
            if e.validator == "additionalProperties" and isinstance(e.instance, dict):
                declared = set((e.schema or {}).get("properties") or {})
                unknown += [(*path, k) for k in sorted(e.instance) if k not in declared]
                continue
            if old is not None and _at(old, path) == e.instance:
                continue  # ratcheting: a value the update does not change is not held against it
            if e.validator == "required":
                missing = re.match(r"'([^']+)'", e.message)
                where = ".".join(str(p) for p in (*path, missing.group(1) if missing else "?"))
                errors.append(FieldError(where, "Required"))
            else:
                where = ".".join(str(p) for p in path) or "<nil>"
                errors.append(FieldError(where, "Invalid", e.message, e.instance))
        if unknown:
            names = [fake_validation.field_name(p) for p in unknown]
            if strict:
                raise strict_decoding(crd.kind, crd.version, names)
            self._warned += [f'unknown field "{n}"' for n in names]
        pruned: dict[str, Any] = prune(obj, crd.schema)
        pruned["metadata"] = obj.get("metadata") or {}
        tree = fake_cel.ruled_tree(crd.schema)
        errors += fake_cel.validate(tree, pruned) if old is None else fake_cel.validate(tree, pruned, old)
        if errors:
            raise invalid(f"{crd.kind}.{crd.group}", crd.group, crd.kind, pruned["metadata"].get("name", ""), errors)
        return pruned

    # ---- storage ---------------------------------------------------------------------------------

    def _delete(self, resource: str, ns: str, name: str) -> dict[str, Any]:
        obj = self._fetch(resource, ns, name)
        del self.objects[(resource, ns, name)]
        group, plural = group_of(resource)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": group, "kind": plural, "uid": obj["metadata"]["uid"]},
        }

    def _store(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(resource, meta.get("namespace", ""), meta["name"])] = obj
        return copy.deepcopy(obj)

    def _fetch(self, resource: str, ns: str, name: str) -> dict[str, Any]:
        obj = self.objects.get((resource, ns, name))
        if obj is None:
            group, plural = group_of(resource)
            raise ApiError(404, "NotFound", f'{qualified(resource)} "{name}" not found',
                           {"name": name, "group": group, "kind": plural})
        return copy.deepcopy(obj)

    def _list(self, resource: str, ns: str | None, query: dict[str, list[str]], kind: str, api: str) -> dict[str, Any]:
        selector = query.get("labelSelector", [""])[0]
        items = [
            copy.deepcopy(o)
            for (r, ons, _), o in sorted(self.objects.items())
            if r == resource and (ns is None or ons == ns)
            if selector_matches(selector, o.get("metadata", {}).get("labels") or {})
        ]
        start = int(query.get("continue", ["0"])[0] or 0)
        limit = int(query.get("limit", ["0"])[0] or 0)
        meta: dict[str, Any] = {"resourceVersion": str(next(self._rv))}
        if limit and start + limit < len(items):
            meta["continue"] = str(start + limit)
        page = items[start : start + limit] if limit else items[start:]
        return {"apiVersion": api, "kind": kind, "metadata": meta, "items": page}

    def _precondition(self, resource: str, current: dict[str, Any], body: Any, *, required: bool) -> None:
        sent = (body or {}).get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        name = current["metadata"]["name"]
        group, plural = group_of(resource)
        if sent is None and required:  # the generic store's words: the resource stands in for the kind, 0x0
            message = "Invalid value: 0x0: must be specified for an update"
            raise ApiError(422, "Invalid", f'{qualified(resource)} "{name}" is invalid: metadata.resourceVersion: '
                           f"{message}", {"name": name, "group": group, "kind": plural, "causes": [
                               {"reason": "FieldValueInvalid", "message": message,
                                "field": "metadata.resourceVersion"}]})
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {qualified(resource)} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "group": group, "kind": plural},
            )

    def _apply_patch(self, resource: str, current: dict[str, Any], ctype: str | None, body: Any) -> dict[str, Any]:
        if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", f"the fake API server does not accept patch type {ctype!r}")
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        self._precondition(resource, current, body, required=False)
        merged: dict[str, Any] = merge_patch(current, body)
        if not isinstance(merged.get("metadata"), dict):
            merged["metadata"] = {}
        for key in ("name", "namespace"):
            if merged["metadata"].get(key) != current["metadata"].get(key):
                raise ApiError(400, "BadRequest", f"the {key} of the object ({merged['metadata'].get(key)}) does not "
                               f"match the {key} on the URL ({current['metadata'].get(key)})")
        for key in ("uid", "creationTimestamp"):
            if key in current["metadata"]:
                merged["metadata"][key] = current["metadata"][key]
        return merged

    def _patch(self, resource: str, ns: str, name: str, ctype: str | None, body: Any, strict: bool) -> dict[str, Any]:
        current = self._fetch(resource, ns, name)
        merged = self._apply_patch(resource, current, ctype, body)
        return self._store(resource, self._admit(BUILTINS[resource], merged, current, ns, strict))

    def _scale(self, method: str, ns: str, name: str, ctype: str | None, body: Any, strict: bool) -> tuple[int, Any]:
        dep = self._fetch("deployments", ns, name)

        def as_scale(d: dict[str, Any]) -> dict[str, Any]:
            m = d["metadata"]
            selector = ",".join(f"{k}={v}" for k, v in sorted(d["spec"]["selector"].get("matchLabels", {}).items()))
            return {
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": {k: m[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
                "spec": {"replicas": d["spec"].get("replicas", 1)},
                "status": {"replicas": d.get("status", {}).get("replicas", 0), "selector": selector},
            }

        if method == "GET":
            return 200, as_scale(dep)
        if method != "PATCH":
            raise ApiError(405, "MethodNotAllowed", f"{method} on scale")
        patched = self._apply_patch("deployments", as_scale(dep), ctype, body)
        problems = fake_validation.schema_problems(patched, fake_validation.builtin_validator("autoscaling/v1",
                                                                                              "Scale"))
        if problems.undecodable:
            raise bad_request("Scale", "v1", list(problems.undecodable))
        if problems.unknown and strict:
            raise strict_decoding("Scale", "v1", [fake_validation.field_name(p) for p in problems.unknown])
        errors = list(problems.invalid) + fake_validation.scale_errors(patched)
        if errors:
            raise invalid(SCALE.group_kind, SCALE.group, SCALE.kind, name, errors)
        old = copy.deepcopy(dep)
        dep["spec"]["replicas"] = patched["spec"]["replicas"]
        return 200, as_scale(self._store("deployments", self._admit(BUILTINS["deployments"], dep, old, ns, False)))

    def _create(
        self, resource: str, ns: str, body: Any, admit: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        """``rest.BeforeCreate`` then storage: name generation, namespace, checks (``admit``), then 409 if taken."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        if not isinstance(body.get("metadata"), dict):
            body["metadata"] = {}
        meta = body["metadata"]
        if "resourceVersion" in meta:
            raise ApiError(400, "BadRequest", "resourceVersion should not be set on objects to be created")
        if ns and meta.get("namespace") not in (None, "", ns):
            raise ApiError(400, "BadRequest",
                           "the namespace of the provided object does not match the namespace sent on the request")
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(NAME_ALPHABET, k=5))
            meta["name"] = fake_validation.generated_name(str(meta["generateName"]), suffix)
        group, plural = group_of(resource)
        if not meta.get("name"):
            b = BUILTINS.get(resource)
            raise invalid(b.group_kind if b else qualified(resource), group, b.kind if b else plural, "",
                          [FieldError("metadata.name", "Required", "name or generateName is required")])
        meta["namespace"] = ns
        if not ns:
            meta.pop("namespace")
        body = admit(body)
        if (resource, ns, body["metadata"]["name"]) in self.objects:
            name = body["metadata"]["name"]
            raise ApiError(409, "AlreadyExists", f'{qualified(resource)} "{name}" already exists',
                           {"name": name, "group": group, "kind": plural})
        return self._store(resource, body)

    def _replace(self, resource: str, ns: str, name: str, body: Any, strict: bool) -> dict[str, Any]:
        current = self._fetch(resource, ns, name)
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object with metadata")
        if body["metadata"].get("name") != name:
            raise ApiError(400, "BadRequest", f"the name of the object ({body['metadata'].get('name')}) does not "
                           f"match the name on the URL ({name})")
        self._precondition(resource, current, body, required=True)
        body["metadata"]["uid"] = current["metadata"]["uid"]
        body["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        body["metadata"]["namespace"] = ns
        return self._store(resource, self._admit(BUILTINS[resource], body, current, ns, strict))
