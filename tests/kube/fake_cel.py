"""The ``x-kubernetes-validations`` (CEL) rules of a CRD's schema, evaluated with cel-python as the API server does.

Why it exists: the CRDs of Karpenter, CapacityBuffer and Kueue carry rules JSON Schema cannot say ("only
``limits.nodes`` on a static NodePool", "either podTemplateRef or scalableRef", "minCount <= count"); a write that
breaks one is ``422`` from a real server and must be from the fake too.

How it follows the API server (``apiextensions-apiserver/pkg/apiserver/schema/cel``):

* a rule is evaluated where it is declared, with ``self`` the value there, for every value present (each list
  item, each map value); ``oldSelf`` is the value at the same place in the stored object, correlated through
  object fields, map values and the keys of ``x-kubernetes-list-type: map`` lists only; a rule that names
  ``oldSelf`` (a transition rule) is evaluated on updates where an old value correlates, never on create;
* ratcheting (CRDValidationRatcheting, on by default since 1.30): where a value is unchanged from the stored
  object, its rules and those below it are not held against the update;
* a failing rule is ``<path>: Invalid value: "<type>": <message>`` (``<nil>`` at the root; ``messageExpression``,
  ``fieldPath`` and ``reason`` are honoured; no message: ``failed rule: <rule>``); a rule that cannot be evaluated
  (no such key, a bad conversion) is ``<error> evaluating rule: <rule>``. Both are ``422 Invalid``.

cel-python (``celpy``) parses and interprets the CEL standard library but has no type checker and no Kubernetes
libraries. ``find``/``findAll`` (Kubernetes' regex library, RE2 like the real one) are supplied here; a rule that
calls any other function cel-python lacks (``quantity``, ``isQuantity``, ``url``, ``ip``, ``cidr``, ``format``,
``lowerAscii``, ``split``, ``sets.*``...), or does not parse (optional syntax ``?.``), or uses ``optionalOldSelf``,
is skipped, counted and listed with the reason (``census``). Each rule is compiled once per process (rules are
shared by text), and each CRD version's rules once into a tree of the schema's ruled branches only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import celpy
import lark
import re2  # type: ignore[import-untyped]  # google-re2, a cel-python dependency: RE2, the real server's syntax
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError, base_functions

from tests.kube.fake_validation import FieldError, child, index

MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})
# Kubernetes CEL libraries cel-python lacks and that are NOT supplied here: a rule calling one is skipped.
KNOWN_MISSING = frozenset({
    "quantity", "isQuantity", "url", "isURL", "ip", "isIP", "cidr", "isCIDR", "format", "lowerAscii", "upperAscii",
    "trim", "split", "join", "replace", "indexOf", "lastIndexOf", "substring", "charAt", "reverse", "quote", "sets",
    "isSorted", "sum", "min", "max", "semver", "isSemver", "authorizer", "optional", "dyn", "strings",
})


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    match = re2.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> celtypes.ListType:
    found = [celtypes.StringType(m.group(0)) for m in re2.finditer(str(pattern), str(text))]
    return celtypes.ListType(found if int(limit) < 0 else found[: int(limit)])


KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {"find": _find, "findAll": _find_all}
SUPPORTED = frozenset(base_functions) | MACROS | frozenset(KUBERNETES_FUNCTIONS)

_ENV = celpy.Environment()


class CelFailure(Exception):
    """cel-python itself failed (not the rule): a limitation of the fake, answered as 500, never as the rule."""


@dataclass(frozen=True)
class Compiled:
    program: Any  # celpy Runner, None when skipped
    transition: bool
    skipped: str | None


def _called(tree: lark.Tree[Any]) -> set[str]:
    names: set[str] = set()
    for sub in tree.iter_subtrees():
        if sub.data in ("member_dot_arg", "ident_arg", "dot_ident_arg"):
            token = next((c for c in sub.children if isinstance(c, lark.Token)), None)
            if token is not None:
                names.add(str(token))
    return names


def _idents(tree: lark.Tree[Any]) -> set[str]:
    return {str(c) for sub in tree.iter_subtrees() if sub.data == "ident" for c in sub.children
            if isinstance(c, lark.Token)}


@functools.cache
def compile_rule(text: str) -> Compiled:
    """One rule's program (parsed once per process), or why cel-python cannot evaluate it."""
    try:
        tree = _ENV.compile(text)
    except Exception as exc:  # CELParseError and lark's own errors
        return Compiled(None, "oldSelf" in text, f"does not parse in cel-python ({type(exc).__name__})")
    missing = sorted(_called(tree) - SUPPORTED)
    transition = "oldSelf" in _idents(tree)
    if missing:
        return Compiled(None, transition, "calls " + ", ".join(missing) + ", which cel-python lacks")
    return Compiled(_ENV.program(tree, functions=dict(KUBERNETES_FUNCTIONS)), transition, None)


@dataclass(frozen=True)
class Rule:
    rule: str
    message: str
    message_expression: str
    field_path: str
    reason: str
    optional_old_self: bool
    compiled: Compiled

    @property
    def skipped(self) -> str | None:
        if self.compiled.skipped:
            return self.compiled.skipped
        if self.optional_old_self:
            return "optionalOldSelf needs CEL optionals, which cel-python lacks"
        return None


@dataclass
class Node:
    """The ruled part of a structural schema: rules here, and the children that have rules below them."""

    type: str = ""
    rules: tuple[Rule, ...] = ()
    properties: dict[str, Node] = field(default_factory=dict)
    additional: Node | None = None
    items: Node | None = None
    map_keys: tuple[str, ...] = ()  # x-kubernetes-list-type: map


def _rules(schema: dict[str, Any]) -> tuple[Rule, ...]:
    return tuple(
        Rule(
            rule=r["rule"],
            message=r.get("message") or "",
            message_expression=r.get("messageExpression") or "",
            field_path=r.get("fieldPath") or "",
            reason=r.get("reason") or "FieldValueInvalid",
            optional_old_self=bool(r.get("optionalOldSelf")),
            compiled=compile_rule(r["rule"]),
        )
        for r in schema.get("x-kubernetes-validations") or ()
    )


def build(schema: Any) -> Node | None:
    """The ruled tree of ``schema``, or None when no rule is declared anywhere in it."""
    if not isinstance(schema, dict):
        return None
    node = Node(type=str(schema.get("type") or ""), rules=_rules(schema))
    for name, sub in (schema.get("properties") or {}).items():
        built = build(sub)
        if built is not None:
            node.properties[name] = built
    if isinstance(schema.get("additionalProperties"), dict):
        node.additional = build(schema["additionalProperties"])
    node.items = build(schema.get("items"))
    if schema.get("x-kubernetes-list-type") == "map":
        node.map_keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
    if not (node.rules or node.properties or node.additional or node.items):
        return None
    return node


_TREES: dict[int, tuple[dict[str, Any], Node | None]] = {}


def ruled_tree(schema: dict[str, Any]) -> Node | None:
    """``build(schema)`` once per schema object (the CRD loader keeps its schemas for the process)."""
    cached = _TREES.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = (schema, build(schema))
        _TREES[id(schema)] = cached
    return cached[1]


def census(schema: dict[str, Any]) -> list[tuple[str, Rule]]:
    """Every rule of ``schema`` with the path it is declared at (``<nil>``: the root; ``[*]``: each item/value)."""
    out: list[tuple[str, Rule]] = []

    def walk(s: Any, path: str | None) -> None:
        if not isinstance(s, dict):
            return
        out.extend((path or "<nil>", r) for r in _rules(s))
        for name, sub in (s.get("properties") or {}).items():
            walk(sub, child(path, name))
        walk(s.get("additionalProperties"), index(path, "*"))
        walk(s.get("items"), index(path, "*"))

    walk(schema, None)
    return out


_MISSING: Any = object()


def _failure(rule: Rule, path: str | None, node_type: str, activation: dict[str, Any]) -> FieldError:
    message = rule.message or f"failed rule: {rule.rule.strip()}"
    if rule.message_expression:
        compiled = compile_rule(rule.message_expression)
        if compiled.program is not None:
            try:
                value = compiled.program.evaluate(activation)
                if isinstance(value, str) and value.strip() and "\n" not in value:
                    message = str(value)
            except CELEvalError:
                pass
    where = path
    if rule.field_path:
        where = (path or "") + (rule.field_path if rule.field_path.startswith(("[", ".")) else "." + rule.field_path)
        where = where.lstrip(".")
    shown = where or "<nil>"
    kind = {"FieldValueForbidden": "Forbidden", "FieldValueRequired": "Required",
            "FieldValueDuplicate": "Duplicate"}.get(rule.reason, "Invalid")
    if kind == "Invalid":
        return FieldError(shown, "Invalid", message, node_type)
    if kind == "Duplicate":
        return FieldError(shown, "Duplicate", value=node_type)
    return FieldError(shown, kind, message)


def _evaluate(node: Node, value: Any, old: Any, path: str | None, errors: list[FieldError]) -> None:
    runnable = [r for r in node.rules if r.skipped is None and (old is not _MISSING or not r.compiled.transition)]
    if not runnable:
        return
    activation: dict[str, Any] = {"self": json_to_cel(value)}
    if old is not _MISSING:
        activation["oldSelf"] = json_to_cel(old)
    for rule in runnable:
        try:
            result = rule.compiled.program.evaluate(activation)
        except CELEvalError as exc:
            result = exc
        except Exception as exc:  # cel-python's own failure, not the rule's
            raise CelFailure(f"cel-python failed on rule {rule.rule!r}: {type(exc).__name__}: {exc}") from exc
        if isinstance(result, CELEvalError):
            detail = result.args[0] if result.args else str(result)
            errors.append(FieldError(path or "<nil>", "Invalid", f"{detail} evaluating rule: {rule.rule.strip()}",
                                     node.type))
        elif not (isinstance(result, celtypes.BoolType) and bool(result)):
            errors.append(_failure(rule, path, node.type, activation))


def validate(node: Node | None, value: Any, old: Any = _MISSING, path: str | None = None) -> list[FieldError]:
    """The rule failures of ``value`` (``old``: the stored object on an update; omitted on create)."""
    errors: list[FieldError] = []
    if node is not None:
        _walk(node, value, old, path, errors)
    return errors


def _walk(node: Node, value: Any, old: Any, path: str | None, errors: list[FieldError]) -> None:
    if value is None:
        return
    if old is not _MISSING and old == value:
        return  # ratcheting: an unchanged value is not held against the update
    _evaluate(node, value, old, path, errors)
    if isinstance(value, dict):
        olds = old if isinstance(old, dict) else {}
        for name, sub in node.properties.items():
            if name in value:
                _walk(sub, value[name], olds.get(name, _MISSING), child(path, name), errors)
        if node.additional is not None:
            for name, v in value.items():
                _walk(node.additional, v, olds.get(name, _MISSING), index(path, name), errors)
    elif isinstance(value, list) and node.items is not None:
        correlated: dict[tuple[Any, ...], Any] = {}
        if node.map_keys and isinstance(old, list):
            correlated = {tuple(o.get(k) for k in node.map_keys): o for o in old if isinstance(o, dict)}
        for i, item in enumerate(value):
            before = _MISSING
            if node.map_keys and isinstance(item, dict):
                before = correlated.get(tuple(item.get(k) for k in node.map_keys), _MISSING)
            _walk(node.items, item, before, index(path, i), errors)
