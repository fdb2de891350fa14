"""RBAC for the fake API server: who is calling, what the request asks, and whether the manifests grant it.

Why it exists: ``deploy/rbac.yaml`` is least privilege, so a new request in the controller (one more verb, a
subresource, another namespace) is refused with ``403`` in a real cluster. The real-API-server suite proves the
grants, but it runs only when binaries or a cluster are given; the fake applies the same rules offline, so the
everyday suite fails on a request the manifests do not grant.

What is modelled, as the API server's RBAC authorizer does it:

* identities: a user name and groups. A ServiceAccount is ``system:serviceaccount:NS:NAME`` in the groups
  ``system:serviceaccounts``, ``system:serviceaccounts:NS`` and ``system:authenticated``; a member of
  ``system:masters`` may do anything (the admin);
* request attributes from the URL, as ``RequestInfo`` parses them: verb from the method (GET one = get, GET a
  collection = list, ``watch=true`` = watch, POST = create, PUT = update, PATCH = patch, DELETE = delete or
  deletecollection), API group, resource and subresource (``deployments/scale``), namespace, name;
* Roles and ClusterRoles, bound by RoleBindings (rules apply in the binding's namespace only, whether the role is a
  Role or a ClusterRole) and ClusterRoleBindings (everywhere, cluster-scoped resources included); subjects of kind
  ServiceAccount, User and Group; rules match verbs, apiGroups, resources (``*``, ``*/scale``) and resourceNames
  (which never match a list or a create: those requests carry no name);
* discovery (``/api``, ``/apis``, ``/apis/GROUP/VERSION``) is allowed to every authenticated user, as the
  ``system:discovery`` ClusterRole does.

The refusal carries the real server's message:
``deployments.apps "x" is forbidden: User "system:serviceaccount:NS:SA" cannot patch resource "deployments/scale"
in API group "apps" in the namespace "NS"``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RBAC_MANIFEST = REPO / "deploy" / "rbac.yaml"
CONTROLLER_NAMESPACE = "predictive-autoscaler"
CONTROLLER_SERVICE_ACCOUNT = "predictive-autoscaler"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ("system:authenticated",)

    @property
    def superuser(self) -> bool:
        return "system:masters" in self.groups


def service_account(namespace: str, name: str) -> User:
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
    )


ADMIN = User("system:admin", ("system:masters", "system:authenticated"))
CONTROLLER = service_account(CONTROLLER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT)


@dataclass(frozen=True)
class RequestInfo:
    """The authorization attributes of one request (``resource`` empty: a non-resource URL such as discovery)."""

    verb: str
    path: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def qualified_resource(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_info(method: str, path: str, query: dict[str, list[str]]) -> RequestInfo:
    """What ``k8s.io/apiserver``'s ``RequestInfoFactory`` makes of a request (the parts RBAC needs)."""
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        rest = []
        group = version = ""
    watch = query.get("watch", [""])[0] in ("true", "1")
    if not rest:
        return RequestInfo(verb="get" if method == "GET" else method.lower(), path=path)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        verb = ("watch" if watch else "list") if not name else ("watch" if watch else "get")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return RequestInfo(verb, path, group, version, resource, subresource, namespace, name)


@dataclass(frozen=True)
class Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str]

    def matches(self, req: RequestInfo) -> bool:
        if not ({"*", req.verb} & self.verbs):
            return False
        if not ({"*", req.group} & self.api_groups):
            return False
        wanted = {"*", req.full_resource}
        if req.subresource:
            wanted.add(f"*/{req.subresource}")
        if not (wanted & self.resources):
            return False
        return not self.resource_names or req.name in self.resource_names


@dataclass(frozen=True)
class Grant:
    """A role's rules for some subjects: in one namespace (RoleBinding) or everywhere (``namespace`` None)."""

    namespace: str | None
    subjects: tuple[tuple[str, str, str], ...]  # (kind, name, namespace)
    rules: tuple[Rule, ...]
    source: str  # "RoleBinding ns/name -> Role name", for messages


def _rule(raw: dict[str, Any]) -> Rule:
    return Rule(
        frozenset(raw.get("verbs") or ()),
        frozenset(raw.get("apiGroups") or ()),
        frozenset(raw.get("resources") or ()),
        frozenset(raw.get("resourceNames") or ()),
    )


@dataclass(frozen=True)
class Rbac:
    """The Roles, ClusterRoles and their bindings of some manifests."""

    grants: tuple[Grant, ...]

    @classmethod
    def from_documents(cls, docs: list[dict[str, Any]]) -> Rbac:
        roles: dict[tuple[str, str, str], tuple[Rule, ...]] = {}  # (kind, namespace, name)
        for d in docs:
            if d.get("kind") in ("Role", "ClusterRole"):
                meta = d.get("metadata") or {}
                ns = meta.get("namespace", "") if d["kind"] == "Role" else ""
                roles[(d["kind"], ns, meta["name"])] = tuple(_rule(r) for r in d.get("rules") or ())
        grants: list[Grant] = []
        for d in docs:
            if d.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            meta = d.get("metadata") or {}
            ref = d["roleRef"]
            binding_ns = meta.get("namespace", "") if d["kind"] == "RoleBinding" else None
            if d["kind"] == "ClusterRoleBinding" and ref["kind"] != "ClusterRole":
                raise ValueError(f"ClusterRoleBinding {meta.get('name')} must refer to a ClusterRole")
            role_ns = (binding_ns or "") if ref["kind"] == "Role" else ""
            # a binding to a missing role grants nothing, as in a cluster
            rules = roles.get((ref["kind"], role_ns, ref["name"]), ())
            subjects = tuple(
                (s["kind"], s["name"], s.get("namespace", binding_ns or "")) for s in d.get("subjects") or ()
            )
            source = f"{d['kind']} {meta.get('name')} -> {ref['kind']} {ref['name']}"
            grants.append(Grant(binding_ns, subjects, rules, source))
        return cls(tuple(grants))

    @classmethod
    def from_manifest(cls, path: str | Path = RBAC_MANIFEST) -> Rbac:
        return _load(str(Path(path).resolve()))

    def allows(self, user: User, req: RequestInfo) -> bool:
        if user.superuser:
            return True
        if not req.is_resource:
            return "system:authenticated" in user.groups  # system:discovery, system:basic-user
        for grant in self.grants:
            if grant.namespace is not None and grant.namespace != req.namespace:
                continue
            if not any(_is_subject(user, s) for s in grant.subjects):
                continue
            if any(rule.matches(req) for rule in grant.rules):
                return True
        return False


def _is_subject(user: User, subject: tuple[str, str, str]) -> bool:
    kind, name, namespace = subject
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    return False


@functools.lru_cache(maxsize=8)
def _load(path: str) -> Rbac:
    with open(path, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
    return Rbac.from_documents(docs)


def forbidden_message(user: User, req: RequestInfo) -> str:
    """The API server's text (``k8s.io/apiserver`` ``forbiddenMessage`` inside ``errors.NewForbidden``)."""
    if not req.is_resource:
        return f'forbidden: User "{user.name}" cannot {req.verb} path "{req.path}"'
    where = f'in the namespace "{req.namespace}"' if req.namespace else "at the cluster scope"
    reason = (f'User "{user.name}" cannot {req.verb} resource "{req.full_resource}" in API group "{req.group}" '
              f"{where}")
    if req.name:
        return f'{req.qualified_resource} "{req.name}" is forbidden: {reason}'
    return f"{req.qualified_resource} is forbidden: {reason}"
