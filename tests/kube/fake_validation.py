"""What the fake API server checks in a built-in object before it stores it, as the real API server would.

Why it exists: a write the real server refuses (a bad annotation key, a label value of 64 characters, a
toleration with a value and ``operator: Exists``, a misspelt field) would pass a fake that stores anything, and
the real-API-server suite runs only when binaries or a cluster are given. So the fake checks, offline:

* the published schema of the kind: the Kubernetes OpenAPI shipped by ``kubernetes-validate`` (strict: every
  object declares its fields), for ``KUBERNETES_VERSION``. The real server decodes before it validates, so the
  answers differ by kind of problem: an unknown field is dropped with a ``Warning`` (``fieldValidation`` unset or
  ``Warn``) or refused with ``400 BadRequest`` "strict decoding error" (``Strict``); a value of the wrong JSON
  type is ``400`` (it cannot be decoded); anything else the schema says (``required``, ``enum``) is ``422
  Invalid``. ``kubernetes_validate.validate`` re-reads 1.8 MB of definitions on every call (about 7 ms), so the
  same files are read once here and one validator is kept per kind (``builtin_validator``; a test holds it equal
  to ``kubernetes_validate.validate``);
* the ObjectMeta rules the schema does not carry (``k8s.io/apimachinery`` ``ValidateObjectMeta``): names are
  DNS-1123 subdomains (Events: a path segment only), ``generateName`` is cut to 58 characters before 5 random
  ones are added, label keys are qualified names and values at most 63 characters of the label syntax,
  annotation keys are qualified names and all annotations together at most 256 KiB, owner references name
  apiVersion, kind, name and uid;
* the per-kind rules a controller can break (``pkg/apis/*/validation``): a Deployment's selector matches its
  template's labels, is immutable and non-empty; containers have unique DNS-label names and an image; resource
  quantities parse, requests do not exceed limits and extended resources (``nvidia.com/gpu``) are requested equal
  to their limit; tolerations (``Exists`` has no value, known effects and operators, ``tolerationSeconds`` only
  with ``NoExecute``); node selectors are labels; ``Recreate`` has no ``rollingUpdate``; the pod's
  ``restartPolicy`` is ``Always``. Pods: ``controller.kubernetes.io/pod-deletion-cost`` is a 32-bit integer
  without sign or leading zeros, and a pod's spec may not change (but the images). Events (core/v1): the
  involved object's namespace is the Event's; with ``eventTime`` set, the "new" rules (``reportingComponent``,
  ``reportingInstance``, ``action``, ``reason`` of at most 128 characters, ``message`` of at most 1024
  characters). Leases: a positive ``leaseDurationSeconds``, ``leaseTransitions`` >= 0. PriorityClasses: value at
  most 10^9, no ``system-`` name, ``preemptionPolicy`` known; ``value`` and ``preemptionPolicy`` immutable. Scale:
  ``spec.replicas`` >= 0.

Problems are ``FieldError``s, formatted as ``k8s.io/apimachinery``'s ``field.Error`` is (``spec.replicas: Invalid
value: -1: must be greater than or equal to 0``), so the fake's ``422`` reads like the real one.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import jsonschema
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

KUBERNETES_VERSION = "1.37"  # the newest minor kubernetes-validate ships (a test keeps it so)

# ---- field errors ---------------------------------------------------------------------------------------------

_CAUSES = {
    "Invalid": "FieldValueInvalid",
    "Required": "FieldValueRequired",
    "Forbidden": "FieldValueForbidden",
    "TooLong": "FieldValueTooLong",
    "NotSupported": "FieldValueNotSupported",
    "Duplicate": "FieldValueDuplicate",
}


def _show(value: Any) -> str:
    """A value as ``field.Error`` prints it: strings quoted, numbers bare, structures compact."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass(frozen=True)
class FieldError:
    """One problem at one field path (``<nil>`` for the object itself), as ``field.Error``."""

    field: str
    type: str  # Invalid, Required, Forbidden, TooLong, NotSupported, Duplicate
    detail: str = ""
    value: Any = None
    supported: tuple[str, ...] = ()
    limit: int = 0

    def body(self) -> str:
        if self.type == "Invalid":
            return f"Invalid value: {_show(self.value)}" + (f": {self.detail}" if self.detail else "")
        if self.type == "Required":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.type == "Forbidden":
            return "Forbidden" + (f": {self.detail}" if self.detail else "")
        if self.type == "TooLong":
            return f"Too long: may not be more than {self.limit} bytes"
        if self.type == "NotSupported":
            return f"Unsupported value: {_show(self.value)}: supported values: " + ", ".join(
                json.dumps(s) for s in self.supported
            )
        if self.type == "Duplicate":
            return f"Duplicate value: {_show(self.value)}"
        return self.detail

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        return {"reason": _CAUSES.get(self.type, "FieldValueInvalid"), "message": self.body(), "field": self.field}


def child(path: str | None, name: str) -> str:
    return name if path is None else f"{path}.{name}"


def index(path: str | None, i: int | str) -> str:
    return f"{path or ''}[{i}]"


# ---- names, labels, annotations (k8s.io/apimachinery/pkg/util/validation) -------------------------------------

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
TOTAL_ANNOTATION_SIZE = 256 * 1024
MAX_GENERATED_NAME_PREFIX = 63 - 5

_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
              "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
              "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_QUALIFIED_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                  "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                  "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def dns1123_label(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not DNS1123_LABEL.fullmatch(value):
        out.append(_LABEL_MSG)
    return out


def dns1123_subdomain(value: str) -> list[str]:
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        out.append(_SUBDOMAIN_MSG)
    return out


def path_segment_name(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in value]


def qualified_name(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        name, prefix = parts[0], None
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
    else:
        return ["a qualified name " + _QUALIFIED_MSG.removeprefix("name part ") + " with an optional DNS subdomain "
                "prefix and '/' (e.g. 'example.com/MyName')"]
    out = [] if prefix is None else ["prefix part " + m for m in dns1123_subdomain(prefix)]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    if name and not QUALIFIED_NAME_PART.fullmatch(name):
        out.append(_QUALIFIED_MSG)
    return out


def label_value(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not LABEL_VALUE.fullmatch(value):
        out.append(_LABEL_VALUE_MSG)
    return out


def label_errors(labels: Any, path: str) -> list[FieldError]:
    if not isinstance(labels, dict):
        return []
    errs = [FieldError(path, "Invalid", m, k) for k in labels for m in qualified_name(str(k))]
    errs += [FieldError(index(path, k), "Invalid", m, v) for k, v in labels.items() if isinstance(v, str)
             for m in label_value(v)]
    return errs


def annotation_errors(annotations: Any, path: str) -> list[FieldError]:
    if not isinstance(annotations, dict):
        return []
    errs = [FieldError(path, "Invalid", m, k) for k in annotations for m in qualified_name(str(k).lower())]
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > TOTAL_ANNOTATION_SIZE:
        errs.append(FieldError(path, "TooLong", limit=TOTAL_ANNOTATION_SIZE))
    return errs


def object_meta_errors(meta: Any, *, name_rule: str = "subdomain", path: str = "metadata") -> list[FieldError]:
    """``ValidateObjectMeta`` minus what the fake fills in itself (uid, resourceVersion, creationTimestamp)."""
    if not isinstance(meta, dict):
        return [FieldError(path, "Required")]
    errs: list[FieldError] = []
    name = meta.get("name")
    check = {"subdomain": dns1123_subdomain, "label": dns1123_label, "segment": path_segment_name}[name_rule]
    if isinstance(name, str) and name:
        errs += [FieldError(child(path, "name"), "Invalid", m, name) for m in check(name)]
    generate = meta.get("generateName")
    if isinstance(generate, str) and generate:
        # a prefix may end in '-' (``maskTrailingDash``); a path segment prefix may be '.' or '..'
        masked = generate[:-2] + "a" if len(generate) > 1 and generate.endswith("-") else generate
        found = check(masked) if name_rule != "segment" else [m for m in check(masked) if "may not be '" not in m]
        errs += [FieldError(child(path, "generateName"), "Invalid", m, generate) for m in found]
    errs += label_errors(meta.get("labels"), child(path, "labels"))
    errs += annotation_errors(meta.get("annotations"), child(path, "annotations"))
    owners = meta.get("ownerReferences") or []
    controllers = 0
    for i, ref in enumerate(owners if isinstance(owners, list) else []):
        at = index(child(path, "ownerReferences"), i)
        if not isinstance(ref, dict):
            continue
        for key, what in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not ref.get(key):
                errs.append(FieldError(child(at, key), "Invalid", f"{what} must not be empty", ref.get(key, "")))
        controllers += bool(ref.get("controller"))
    if controllers > 1:
        errs.append(FieldError(child(path, "ownerReferences"), "Invalid",
                               "Only one reference can have Controller set to true", owners))
    for i, fin in enumerate(meta.get("finalizers") or []):
        errs += [FieldError(index(child(path, "finalizers"), i), "Invalid", m, fin) for m in qualified_name(str(fin))]
    return errs


def generated_name(prefix: str, suffix: str) -> str:
    """What ``SimpleNameGenerator`` makes of ``generateName``: at most 58 characters, then 5 random ones."""
    return prefix[:MAX_GENERATED_NAME_PREFIX] + suffix


# ---- the published schemas of built-in kinds (kubernetes-validate) --------------------------------------------


@functools.lru_cache(maxsize=64)
def builtin_validator(api_version: str, kind: str) -> Any:
    """The strict JSON schema validator ``kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)``
    builds for ``api_version``/``kind``, built once (a ``SchemaNotFoundError`` for a kind it does not know)."""
    version = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) == KUBERNETES_VERSION][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"v{version}-local-strict"
    try:
        schema = kv_utils.schema_contents(
            f"kubernetes-json-schema/{folder}/{kind.lower()}-{group_version}.json", KUBERNETES_VERSION
        )
    except FileNotFoundError as exc:
        raise kv_utils.SchemaNotFoundError(kind=kind, version=KUBERNETES_VERSION, api_version=api_version) from exc
    definitions = _definitions(folder)
    registry = Resource.from_contents(schema) @ Registry()
    registry = definitions @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


@functools.lru_cache(maxsize=2)
def _definitions(folder: str) -> Resource[Any]:
    return Resource.from_contents(kv_utils.schema_contents(f"kubernetes-json-schema/{folder}/_definitions.json",
                                                           KUBERNETES_VERSION))


@dataclass(frozen=True)
class SchemaProblems:
    unknown: tuple[tuple[str | int, ...], ...]  # paths of fields the schema does not declare
    undecodable: tuple[str, ...]  # values of the wrong JSON type: the server cannot decode them (400)
    invalid: tuple[FieldError, ...]  # everything else the schema says (422)


def _dotted(path: Any) -> str:
    out = ""
    for p in path:
        out = index(out, p) if isinstance(p, int) else child(out or None, str(p))
    return out or "<nil>"


def schema_problems(obj: dict[str, Any], validator: Any) -> SchemaProblems:
    unknown: list[tuple[str | int, ...]] = []
    undecodable: list[str] = []
    invalid: list[FieldError] = []
    for e in validator.iter_errors(obj):
        where = tuple(e.absolute_path)
        if e.validator == "additionalProperties" and isinstance(e.instance, dict):
            declared = set((e.schema or {}).get("properties") or {})
            unknown += [(*where, k) for k in sorted(e.instance) if k not in declared]
        elif e.validator in ("type", "oneOf", "anyOf"):
            undecodable.append(f"{_dotted(where)}: {e.message}")
        elif e.validator == "required":
            missing = re.match(r"'([^']+)'", e.message)
            invalid.append(FieldError(child(_dotted(where) if where else None, missing.group(1) if missing else "?"),
                                      "Required"))
        elif e.validator == "enum":
            invalid.append(FieldError(_dotted(where), "NotSupported", value=e.instance,
                                      supported=tuple(str(v) for v in e.validator_value)))
        else:
            invalid.append(FieldError(_dotted(where), "Invalid", e.message, e.instance))
    return SchemaProblems(tuple(unknown), tuple(undecodable), tuple(invalid))


def drop_fields(obj: Any, paths: tuple[tuple[str | int, ...], ...]) -> None:
    """Remove the fields at ``paths`` (what decoding does with unknown fields)."""
    for path in paths:
        node = obj
        for p in path[:-1]:
            node = node[p]
        if isinstance(node, dict):
            node.pop(path[-1], None)


def field_name(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path if not isinstance(p, int))


# ---- per-kind rules (pkg/apis/*/validation) -------------------------------------------------------------------

QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_SUFFIX = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": 1e-9, "u": 1e-6}
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


def quantity_value(text: Any) -> float | None:
    """A quantity's value, or None when it does not parse (the server answers 400 for those)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str) or not QUANTITY.match(text):
        return None
    m = re.fullmatch(r"([+-]?[0-9.]+)(?:([eE][-+]?[0-9]+)|([a-zA-Z]*))", text)
    if m is None:
        return None
    number, exponent, suffix = m.groups()
    try:
        value = float(number)
    except ValueError:
        return None
    if exponent:
        return value * float(10) ** int(exponent[1:])
    factor = _SUFFIX.get(suffix or "")
    return None if factor is None else value * factor


def unparsable_quantities(pod_spec: Any, path: str) -> list[str]:
    out = []
    for kind in ("containers", "initContainers"):
        for i, c in enumerate((pod_spec or {}).get(kind) or []):
            for which in ("requests", "limits"):
                for name, q in ((c.get("resources") or {}).get(which) or {}).items():
                    if quantity_value(q) is None:
                        out.append(f'{path}.{kind}[{i}].resources.{which}[{name}]: quantities must match the '
                                   "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    return out


def _is_extended(resource: str) -> bool:
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests.", "hugepages-"))


def container_errors(c: dict[str, Any], at: str, *, image_required: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    name = c.get("name")
    if not name:
        errs.append(FieldError(child(at, "name"), "Required"))
    else:
        errs += [FieldError(child(at, "name"), "Invalid", m, name) for m in dns1123_label(str(name))]
    if image_required and not str(c.get("image") or "").strip():
        errs.append(FieldError(child(at, "image"), "Required"))
    resources = c.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for which, values in (("requests", requests), ("limits", limits)):
        for res, q in values.items():
            where = index(child(child(at, "resources"), which), res)
            if "/" not in res and res not in STANDARD_RESOURCES and not res.startswith("hugepages-"):
                errs.append(FieldError(where, "Invalid", "must be a standard resource for containers", res))
            if "/" in res:
                errs += [FieldError(where, "Invalid", m, res) for m in qualified_name(res)]
            value = quantity_value(q)
            if value is not None and value < 0:
                errs.append(FieldError(where, "Invalid", "must be greater than or equal to 0", q))
            if value is not None and _is_extended(res) and value != int(value):
                errs.append(FieldError(where, "Invalid", "must be an integer", q))
    for res, q in requests.items():
        req = quantity_value(q)
        if res in limits:
            lim = quantity_value(limits[res])
            if req is not None and lim is not None and req > lim:
                errs.append(FieldError(index(child(child(at, "resources"), "requests"), res), "Invalid",
                                       f"must be less than or equal to {res} limit of {limits[res]}", q))
            if _is_extended(res) and req is not None and lim is not None and req != lim:
                errs.append(FieldError(index(child(child(at, "resources"), "requests"), res), "Invalid",
                                       f"must be equal to {res} limit of {limits[res]}", q))
        elif _is_extended(res):
            errs.append(FieldError(index(child(child(at, "resources"), "limits"), res), "Required",
                                   "Limit must be set for non overcommitable resources"))
    return errs


TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def toleration_errors(tolerations: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, t in enumerate(tolerations if isinstance(tolerations, list) else []):
        at = index(path, i)
        key, op, value, effect = t.get("key", ""), t.get("operator", ""), t.get("value", ""), t.get("effect", "")
        if key:
            errs += [FieldError(child(at, "key"), "Invalid", m, key) for m in qualified_name(key)]
        if not key and op != "Exists":
            errs.append(FieldError(child(at, "operator"), "Invalid",
                                   "operator must be Exists when `key` is empty, which means \"match all values and "
                                   "all keys\"", op))
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(FieldError(child(at, "effect"), "Invalid",
                                   "effect must be 'NoExecute' when `tolerationSeconds` is set", effect))
        if op in ("", "Equal"):
            errs += [FieldError(child(at, "operator"), "Invalid", m, value) for m in label_value(value)]
        elif op == "Exists":
            if value:
                errs.append(FieldError(child(at, "operator"), "Invalid",
                                       "value must be empty when `operator` is 'Exists'", value))
        else:
            errs.append(FieldError(child(at, "operator"), "NotSupported", value=op, supported=("Equal", "Exists")))
        if effect and effect not in TOLERATION_EFFECTS:
            errs.append(FieldError(child(at, "effect"), "NotSupported", value=effect, supported=TOLERATION_EFFECTS))
    return errs


def pod_spec_errors(spec: Any, path: str, *, template: bool) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [FieldError(path, "Required")]
    errs: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errs.append(FieldError(child(path, "containers"), "Required"))
    seen: set[str] = set()
    for kind in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(kind) or []):
            at = index(child(path, kind), i)
            errs += container_errors(c, at, image_required=template)
            if c.get("name") in seen:
                errs.append(FieldError(child(at, "name"), "Duplicate", value=c.get("name")))
            seen.add(c.get("name"))
    node_selector = spec.get("nodeSelector")
    if isinstance(node_selector, dict):
        errs += label_errors(node_selector, child(path, "nodeSelector"))
    errs += toleration_errors(spec.get("tolerations"), child(path, "tolerations"))
    pc = spec.get("priorityClassName")
    if pc:
        errs += [FieldError(child(path, "priorityClassName"), "Invalid", m, pc) for m in dns1123_subdomain(pc)]
    grace = spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0:
        errs.append(FieldError(child(path, "terminationGracePeriodSeconds"), "Invalid",
                               "must be greater than or equal to 0", grace))
    if template and spec.get("restartPolicy", "Always") != "Always":
        errs.append(FieldError(child(path, "restartPolicy"), "NotSupported", value=spec.get("restartPolicy"),
                               supported=("Always",)))
    return errs


def selector_errors(selector: Any, path: str) -> list[FieldError]:
    if not isinstance(selector, dict):
        return []
    errs = label_errors(selector.get("matchLabels"), child(path, "matchLabels"))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        at = index(child(path, "matchExpressions"), i)
        op, values = expr.get("operator"), expr.get("values") or []
        errs += [FieldError(child(at, "key"), "Invalid", m, expr.get("key")) for m in qualified_name(expr.get("key",
                                                                                                              ""))]
        if op in ("In", "NotIn") and not values:
            errs.append(FieldError(child(at, "values"), "Required",
                                   "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(FieldError(child(at, "values"), "Forbidden",
                                   "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        elif op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errs.append(FieldError(child(at, "operator"), "Invalid", "not a valid selector operator", op))
    return errs


def selector_selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or [])
        present = key in labels
        if (op == "In" and not (present and labels[key] in values)) or (
            op == "NotIn" and present and labels[key] in values
        ) or (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def deployment_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    selector = spec.get("selector")
    template = spec.get("template") or {}
    tmeta = template.get("metadata") or {}
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errs.append(FieldError("spec.selector", "Invalid", "empty selector is invalid for deployment", selector))
    else:
        errs += selector_errors(selector, "spec.selector")
        if not selector_selects(selector, tmeta.get("labels") or {}):
            errs.append(FieldError("spec.template.metadata.labels", "Invalid",
                                   "`selector` does not match template `labels`", tmeta.get("labels") or {}))
    errs += label_errors(tmeta.get("labels"), "spec.template.metadata.labels")
    errs += annotation_errors(tmeta.get("annotations"), "spec.template.metadata.annotations")
    errs += pod_spec_errors(template.get("spec"), "spec.template.spec", template=True)
    for key in ("replicas", "revisionHistoryLimit", "minReadySeconds"):
        value = spec.get(key)
        if isinstance(value, int) and value < 0:
            errs.append(FieldError(f"spec.{key}", "Invalid", "must be greater than or equal to 0", value))
    strategy = spec.get("strategy") or {}
    if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
        errs.append(FieldError("spec.strategy.rollingUpdate", "Forbidden",
                               "may not be specified when strategy `type` is 'Recreate'"))
    elif strategy.get("type") not in (None, "Recreate", "RollingUpdate"):
        errs.append(FieldError("spec.strategy.type", "NotSupported", value=strategy.get("type"),
                               supported=("Recreate", "RollingUpdate")))
    if old is not None and (old.get("spec") or {}).get("selector") != selector:
        errs.append(FieldError("spec.selector", "Invalid", "field is immutable", selector))
    return errs


POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _deletion_cost_valid(value: Any) -> bool:
    text = str(value)
    if not text or not (text[0] == "-" or text == "0" or text[0] in "123456789"):
        return False
    try:
        number = int(text, 10)
    except ValueError:
        return False
    return -(2**31) <= number < 2**31 and text.lstrip("-").isdigit()


def pod_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    errs: list[FieldError] = []
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    old_annotations = ((old or {}).get("metadata") or {}).get("annotations") or {}
    old_invalid = POD_DELETION_COST in old_annotations and not _deletion_cost_valid(old_annotations[POD_DELETION_COST])
    cost = annotations.get(POD_DELETION_COST)
    if cost is not None and not old_invalid and not _deletion_cost_valid(cost):
        errs.append(FieldError(index("metadata.annotations", POD_DELETION_COST), "Invalid", "must be a 32bit integer",
                               annotations[POD_DELETION_COST]))
    if old is None:
        errs += pod_spec_errors(obj.get("spec"), "spec", template=False)
    else:
        new_spec, old_spec = dict(obj.get("spec") or {}), dict(old.get("spec") or {})
        for s in (new_spec, old_spec):
            s["containers"] = [{k: v for k, v in c.items() if k != "image"} for c in s.get("containers") or []]
        if new_spec != old_spec:
            errs.append(FieldError("spec", "Forbidden",
                                   "pod updates may not change fields other than `spec.containers[*].image`, "
                                   "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                                   "`spec.tolerations` (only additions to existing tolerations), "
                                   "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                                   "previously negative)"))
    return errs


def event_errors(obj: dict[str, Any], namespace: str) -> list[FieldError]:
    """``legacyValidateEvent``: all a core/v1 Event is checked against (``ValidateEventCreate`` for v1)."""
    errs: list[FieldError] = []
    involved_ns = (obj.get("involvedObject") or {}).get("namespace") or ""
    if not obj.get("eventTime"):
        if not involved_ns:
            if namespace not in ("", "default"):
                errs.append(FieldError("involvedObject.namespace", "Invalid", "does not match event.namespace", ""))
        elif involved_ns != namespace:
            errs.append(FieldError("involvedObject.namespace", "Invalid", "does not match event.namespace",
                                   involved_ns))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            errs.append(FieldError("involvedObject.namespace", "Invalid", "does not match event.namespace", ""))
        component = obj.get("reportingComponent") or ""
        if not component:
            errs.append(FieldError("reportingComponent", "Required"))
        errs += [FieldError("reportingComponent", "Invalid", m, component) for m in qualified_name(component)]
        for key, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
            value = obj.get(key) or ""
            if not value:
                errs.append(FieldError(key, "Required"))
            if len(value) > limit:
                errs.append(FieldError(key, "Invalid", f"can have at most {limit} characters", ""))
        if len(obj.get("message") or "") > 1024:
            errs.append(FieldError("message", "Invalid", "can have at most 1024 characters", ""))
    errs += [FieldError("namespace", "Invalid", m, namespace) for m in dns1123_subdomain(namespace)]
    return errs


def lease_errors(obj: dict[str, Any]) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errs = []
    duration, transitions = spec.get("leaseDurationSeconds"), spec.get("leaseTransitions")
    if isinstance(duration, int) and duration <= 0:
        errs.append(FieldError("spec.leaseDurationSeconds", "Invalid", "must be greater than 0", duration))
    if isinstance(transitions, int) and transitions < 0:
        errs.append(FieldError("spec.leaseTransitions", "Invalid", "must be greater than or equal to 0", transitions))
    return errs


HIGHEST_USER_PRIORITY = 1_000_000_000


def priority_class_errors(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    errs: list[FieldError] = []
    name = (obj.get("metadata") or {}).get("name") or ""
    if name.startswith("system-"):
        errs.append(FieldError("metadata.name", "Forbidden", "priority class names with 'system-' prefix are reserved"))
    value = obj.get("value")
    if isinstance(value, int) and value > HIGHEST_USER_PRIORITY:
        errs.append(FieldError("value", "Forbidden",
                               f"maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"))
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
        errs.append(FieldError("preemptionPolicy", "NotSupported", value=policy,
                               supported=("Never", "PreemptLowerPriority")))
    if old is not None:
        if old.get("value") != value:
            errs.append(FieldError("value", "Forbidden", "may not be changed in an update."))
        if old.get("preemptionPolicy") != policy:
            errs.append(FieldError("preemptionPolicy", "Invalid", "field is immutable", policy))
    return errs


def scale_errors(obj: dict[str, Any]) -> list[FieldError]:
    replicas = (obj.get("spec") or {}).get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        return [FieldError("spec.replicas", "Invalid", "must be greater than or equal to 0", replicas)]
    return []
