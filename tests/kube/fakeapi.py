"""A recording fake of the few Kubernetes API endpoints the controller uses, served over real HTTP.

Why our own instead of ``kmock`` (0.8, read in site-packages): the emulator there stores objects as
plain dicts and (a) ignores ``labelSelector`` on lists, (b) has no ``resourceVersion`` and therefore no
optimistic concurrency: a stale ``PUT`` of a Lease never gets ``409``, so leader election races cannot
be tested, (c) treats a subresource write as a patch of the parent and answers with the parent, not a
``Scale``, and (d) is asyncio-only, so the synchronous official client would have to be pushed into
worker threads from async tests. The behaviours we assert on are exactly those, so a fake that gets
them right is the more faithful test, and a threaded ``http.server`` needs no event loop at all.

What it does like the real API server:

* lists filter by label selector (``=``, ``==``, ``!=``, ``in``, ``notin``, ``key``, ``!key``) and page
  with ``limit``/``continue``;
* every write bumps a cluster-wide ``resourceVersion``; a ``PUT`` or a patch carrying a stale
  ``metadata.resourceVersion`` gets ``409 Conflict``; a ``POST`` of an existing name ``409 AlreadyExists``;
* ``application/merge-patch+json`` is applied as RFC 7386; ``strategic-merge-patch+json`` (which for the
  maps we touch behaves the same) is applied the same way; JSON Patch is refused with ``415`` because
  nothing here should send it;
* the ``scale`` subresource reads and writes the Deployment's ``spec.replicas`` and answers
  ``autoscaling/v1 Scale``;
* Lease ``acquireTime``/``renewTime`` must be ``MicroTime`` with exactly six fractional digits, as the
  real decoder demands (``400`` otherwise) - a whole-second ``isoformat()`` would fail in production;
* Events need ``involvedObject.namespace`` equal to the Event's namespace, and ``generateName`` works;
* pods are listed and merge-patched (the ``pod-deletion-cost`` marks of a scale-down);
* custom resources are served only for CRDs installed with ``install_crd`` (the real YAML from
  /work/shared/crds): discovery (``GET /apis/GROUP/VERSION``) lists them and answers ``404`` for a group
  version nobody installed; list/get/create/merge-patch/delete work at the CRD's scope; every object
  written is checked against the version's ``openAPIV3Schema`` (``422 Invalid``), and unknown fields are
  pruned silently unless the request says ``fieldValidation=Strict`` (then ``422``), as the API server does.
  CEL rules (``x-kubernetes-validations``) are not evaluated; tests check the ones that matter explicitly;
* Deployments can be created (the selector must match the template's labels) and deleted, PriorityClasses
  listed (paged), read and created (``value`` is immutable; creating an existing name is ``409 AlreadyExists``).

Every request is recorded (method, path, query, content type, parsed body), and faults can be injected
(``fail("PATCH", r"/scale$", 409, times=2)``) to exercise retries and error reporting.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema  # type: ignore[import-untyped]
import yaml

MICROTIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")

Key = tuple[str, str, str]  # (resource, namespace, name)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    reason: str
    action: Callable[[FakeKubeAPI], None] | None = None  # instead of failing: change state first (a racer)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


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


@dataclass
class FakeKubeAPI:
    """State, recording and fault injection. ``start()`` serves it on 127.0.0.1 and returns the base URL."""

    url: str = ""
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    crds: dict[tuple[str, str, str], Crd] = field(default_factory=dict)  # (group, version, plural)
    _rv: Iterator[int] = field(default_factory=lambda: itertools.count(100))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # ---- test-facing helpers -------------------------------------------------------------------

    def add(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return self._store(resource, copy.deepcopy(obj))

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
        """Write an object from inside a ``before`` action (the lock is already held)."""
        return self._store(resource, copy.deepcopy(obj))

    def calls(self, method: str | None = None, path: str = "") -> list[Recorded]:
        rx = re.compile(path)
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method) and rx.search(r.path)]

    def writes(self) -> list[Recorded]:
        return [r for r in self.calls() if r.method in ("POST", "PUT", "PATCH", "DELETE")]

    # ---- server ----------------------------------------------------------------------------------

    def start(self) -> str:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, payload = api.handle(self.command, self.path, self.headers.get("Content-Type"), raw)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
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

    def handle(self, method: str, target: str, content_type: str | None, raw: bytes) -> tuple[int, Any]:
        url = urlsplit(target)
        query = parse_qs(url.query)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        with self._lock:
            self.requests.append(Recorded(method, url.path, query, content_type, copy.deepcopy(body)))  # as sent
            try:
                for fault in self.faults:
                    if fault.times > 0 and fault.method == method and fault.path.search(url.path):
                        fault.times -= 1
                        if fault.action is not None:
                            fault.action(self)
                            continue
                        raise ApiError(fault.status, fault.reason, f"injected {fault.status} for {method} {url.path}")
                return self._route(method, url.path, query, content_type, body)
            except ApiError as err:
                status = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure"}
                return err.code, {**status, "message": err.message, "reason": err.reason, "code": err.code}

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], ctype: str | None, body: Any
    ) -> tuple[int, Any]:
        apps = re.fullmatch(r"/apis/apps/v1(?:/namespaces/([^/]+))?/deployments(?:/([^/]+))?(/scale)?", path)
        core = re.fullmatch(r"/api/v1(?:/namespaces/([^/]+))?/(pods|events)(?:/([^/]+))?", path)
        lease = re.fullmatch(r"/apis/coordination\.k8s\.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?", path)
        if apps:
            ns, name, scale = apps.groups()
            if name is None and method == "GET":
                return 200, self._list("deployments", ns, query, "DeploymentList", "apps/v1")
            if name is not None and scale:
                return self._scale(method, ns, name, ctype, body)
            if name is not None and method == "GET":
                return 200, self._fetch("deployments", ns, name)
            if name is not None and method == "PATCH":
                return 200, self._patch("deployments", ns, name, ctype, body)
        if core:
            ns, resource, name = core.groups()
            if method == "GET" and name is None:
                kind = "PodList" if resource == "pods" else "EventList"
                return 200, self._list(resource, ns, query, kind, "v1")
            if resource == "events" and method == "POST" and ns is not None:
                return 201, self._create_event(ns, body)
            if resource == "pods" and method == "PATCH" and ns is not None and name is not None:
                return 200, self._patch("pods", ns, name, ctype, body)
        if lease:
            ns, name = lease.groups()
            if method == "GET" and name is not None:
                return 200, self._fetch("leases", ns, name)
            if method == "POST" and name is None:
                return 201, self._create("leases", ns, self._check_lease(body))
            if method == "PUT" and name is not None:
                return 200, self._replace("leases", ns, name, self._check_lease(body))
        if method == "GET" and (m := re.fullmatch(r"/apis/([^/]+)/([^/]+)", path)):
            return 200, self._discovery(m.group(1), m.group(2))
        custom = re.fullmatch(r"/apis/([^/]+)/([^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?", path)
        if custom and (crd := self.crds.get((custom.group(1), custom.group(2), custom.group(4)))) is not None:
            return self._custom(crd, method, custom.group(3), custom.group(5), query, ctype, body)
        if apps and method == "POST" and apps.group(1) is not None and apps.group(2) is None:
            return 201, self._create("deployments", apps.group(1), self._check_deployment(body))
        if apps and method == "DELETE" and apps.group(2) is not None and not apps.group(3):
            return 200, self._delete("deployments", apps.group(1), apps.group(2), "Deployment", "apps")
        pc = re.fullmatch(r"/apis/scheduling\.k8s\.io/v1/priorityclasses(?:/([^/]+))?", path)
        if pc and method == "GET" and pc.group(1) is not None:
            return 200, self._fetch("priorityclasses", "", pc.group(1))
        if pc and method == "GET":
            listed = self._list("priorityclasses", None, query, "PriorityClassList", "scheduling.k8s.io/v1")
            listed["items"] = [{**o, "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
                               for o in listed["items"]]
            return 200, listed
        if pc and method == "POST" and pc.group(1) is None:
            return 201, self._create("priorityclasses", "", self._check_priority_class(body))
        raise ApiError(404, "NotFound", f"the fake API server does not serve {method} {path}")

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
            return 201, out(self._create(crd.resource, ns or "", self._validated(crd, body, strict)))
        if method == "PATCH" and name is not None:
            current = self._fetch(crd.resource, ns or "", name)
            merged = self._apply_patch(current, ctype, body)
            return 200, out(self._store(crd.resource, self._validated(crd, merged, strict)))
        if method == "DELETE" and name is not None:
            obj = self._fetch(crd.resource, ns or "", name)
            del self.objects[(crd.resource, ns or "", name)]
            return 200, out(obj)
        raise ApiError(405, "MethodNotAllowed", f"{method} on {crd.resource}")

    @staticmethod
    def _validated(crd: Crd, obj: dict[str, Any], strict: bool) -> dict[str, Any]:
        if crd.schema is None:
            return obj
        problems = schema_errors(obj, crd.schema, strict=strict)
        if problems:
            name = (obj.get("metadata") or {}).get("name", "")
            raise ApiError(422, "Invalid", f'{crd.kind}.{crd.group} "{name}" is invalid: ' + "; ".join(problems))
        pruned: dict[str, Any] = prune(obj, crd.schema)
        pruned["metadata"] = obj.get("metadata") or {}
        return pruned

    def _delete(self, resource: str, ns: str, name: str, kind: str, group: str) -> dict[str, Any]:
        obj = self._fetch(resource, ns, name)
        del self.objects[(resource, ns, name)]
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "group": group, "kind": resource, "uid": obj["metadata"]["uid"]},
        }

    @staticmethod
    def _check_deployment(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "Deployment body must be a JSON object")
        spec = body.get("spec") or {}
        match = (spec.get("selector") or {}).get("matchLabels") or {}
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if not match or any(labels.get(k) != v for k, v in match.items()):
            raise ApiError(
                422, "Invalid", "spec.template.metadata.labels: Invalid value: `selector` does not match template "
                "`labels`"
            )
        if not (spec.get("template") or {}).get("spec", {}).get("containers"):
            raise ApiError(422, "Invalid", "spec.template.spec.containers: Required value")
        return body

    @staticmethod
    def _check_priority_class(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("value"), int):
            raise ApiError(422, "Invalid", "value: Required value: a PriorityClass needs an integer value")
        if body.get("preemptionPolicy", "PreemptLowerPriority") not in ("Never", "PreemptLowerPriority"):
            raise ApiError(422, "Invalid", f"preemptionPolicy: Unsupported value: {body.get('preemptionPolicy')!r}")
        return body

    # ---- storage ---------------------------------------------------------------------------------

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
            raise ApiError(404, "NotFound", f'{resource} "{name}" not found')
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

    def _precondition(self, current: dict[str, Any], body: Any, *, required: bool) -> None:
        sent = (body or {}).get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if sent is None and required:
            raise ApiError(
                422, "Invalid", "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
            )
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )

    def _apply_patch(self, current: dict[str, Any], ctype: str | None, body: Any) -> dict[str, Any]:
        if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", f"the fake API server does not accept patch type {ctype!r}")
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        self._precondition(current, body, required=False)
        merged: dict[str, Any] = merge_patch(current, body)
        merged["metadata"]["uid"] = current["metadata"]["uid"]
        return merged

    def _patch(self, resource: str, ns: str, name: str, ctype: str | None, body: Any) -> dict[str, Any]:
        current = self._fetch(resource, ns, name)
        return self._store(resource, self._apply_patch(current, ctype, body))

    def _scale(self, method: str, ns: str, name: str, ctype: str | None, body: Any) -> tuple[int, Any]:
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
        patched = self._apply_patch(as_scale(dep), ctype, body)
        replicas = patched.get("spec", {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}")
        dep["spec"]["replicas"] = replicas
        return 200, as_scale(self._store("deployments", dep))

    def _create(self, resource: str, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body.setdefault("metadata", {})
        if "resourceVersion" in meta:
            raise ApiError(400, "BadRequest", "resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        meta["namespace"] = ns
        if (resource, ns, meta["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
        return self._store(resource, body)

    def _replace(self, resource: str, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        current = self._fetch(resource, ns, name)
        self._precondition(current, body, required=True)
        body["metadata"]["uid"] = current["metadata"]["uid"]
        body["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        body["metadata"]["namespace"] = ns
        return self._store(resource, body)

    @staticmethod
    def _check_lease(body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "Lease body must be a JSON object")
        for key in ("acquireTime", "renewTime"):
            value = body.get("spec", {}).get(key)
            if value is not None and not MICROTIME.match(str(value)):
                raise ApiError(
                    400,
                    "BadRequest",
                    f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" as '
                    '"2006-01-02T15:04:05.000000Z07:00"',
                )
        return body

    def _create_event(self, ns: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "Event body must be a JSON object")
        involved = body.get("involvedObject") or {}
        if involved.get("namespace") != ns:
            raise ApiError(422, "Invalid", "involvedObject.namespace: Invalid value: does not match event.namespace")
        if not body.get("reason") or body.get("type") not in ("Normal", "Warning"):
            raise ApiError(422, "Invalid", "reason is required and type must be Normal or Warning")
        if len(str(body.get("message", "")).encode()) > 1024:
            raise ApiError(422, "Invalid", "message: Too long: must have at most 1024 bytes")
        return self._create("events", ns, body)
