"""The Grafana dashboard (``deploy/grafana/predictive-autoscaler.json``): its shape, its PromQL, its metric names.

A dashboard breaks silently: a panel without a datasource or with a duplicate id is dropped or misplaced, PromQL
that does not parse shows an error only to whoever opens that panel, and a metric the controller does not (or no
longer) export just draws "No data", which on-call reads as a quiet cluster. So:

* **shape** (no server): the JSON loads; every panel has a title, a unique id and a ``gridPos`` inside the 24
  columns, overlapping no other; every panel that queries names the ``${datasource}`` variable; every variable a
  query or title uses is defined; units, legends and the ceiling thresholds are there.
* **PromQL parses** (real Prometheus, ``tests/servers.py``; 2.42 from Debian): each target's expression, with
  Grafana's variables substituted as Grafana would (``$__rate_interval`` -> ``5m``, the ``All`` value ``.*``, one
  value, two values ``(a|b)``), is sent the way Grafana sends it: ``/api/v1/query_range`` for a graph,
  ``/api/v1/query`` for an instant (stat, table) target. A parse error comes back as HTTP 400 ``bad_data``.
* **only exported metric names**: the exported names are the sample names of the controller's own exposition:
  a ``ControllerMetrics`` (the only registry ``run`` serves on ``/metrics``; ``money.py`` and ``loop.py``
  register nothing of their own) with one child per labelled metric, rendered by ``generate_latest`` and read
  back with prometheus_client's parser, so counters appear as ``x_total``/``x_created`` and the histogram as
  ``x_bucket``/``x_sum``/``x_count``/``x_created``, exactly as Prometheus stores them.

  The names an expression uses are found without a hand-written PromQL grammar: Prometheus 2.42 has no endpoint
  returning the syntax tree (``/api/v1/parse_query`` answers 404 there), but ``/api/v1/format_query`` parses the
  expression and prints it back in canonical form: strings double-quoted, grouping written ``by (...)``/``on
  (...)`` with its label list in parentheses, every matcher inside ``{}``, ranges inside ``[]``. On that text a
  small lexer (``metric_names``) drops strings, matcher lists (keeping the value of a ``__name__="..."``
  matcher), ranges, numbers and durations, identifiers followed by ``(`` or ``by``/``without`` (functions,
  aggregations, ``@ start()``), the operator keywords, and the label lists after ``by``, ``without``, ``on``,
  ``ignoring``, ``group_left`` and ``group_right``. What is left is a metric name. Why not the real Prometheus
  alone: the fixture cannot hold the controller's series without scraping it, and an expression over absent
  series answers an empty result whether its names are right or not. The lexer is tested on tricky expressions
  (a metric-like word inside a string, a label in a grouping, ``__name__`` matchers, offsets, subqueries), and
  the whole check on negatives: a dashboard with one misspelt metric fails it, and so does every target with any
  one of its names misspelt.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.runtime.metrics import ControllerMetrics
from tests.servers import PrometheusServer

REPO = Path(__file__).resolve().parent.parent
GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD_FILE = GRAFANA / "predictive-autoscaler.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
QUERY_PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "gauge"}

# Grafana's global variables, with the values a 6-hour dashboard at a 1-minute step would give them.
BUILT_INS = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "6h",
    "__range_s": "21600",
    "__range_ms": "21600000",
}
RANGE_SECONDS, STEP_SECONDS = 6 * 3600, 60


# ---------------------------------------------------------------------------------------------- the dashboard


def load_dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def all_panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows included, and the panels inside collapsed rows."""
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def query_panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard) if p["type"] != "row"]


def targets(dashboard: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(panel title / refId, target) for every query of every panel."""
    return [(f"{p['title']} / {t['refId']}", t) for p in query_panels(dashboard) for t in p.get("targets", [])]


def variables(dashboard: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def variable_query(variable: Mapping[str, Any]) -> str:
    query = variable["query"]
    return str(query["query"] if isinstance(query, dict) else query)


LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+),\s*)?(?P<label>\w+)\s*\)\s*$", re.DOTALL)


def variable_selectors(dashboard: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(variable, series selector, label) of every ``label_values(selector, label)`` query variable."""
    out = []
    for name, var in variables(dashboard).items():
        if var["type"] != "query":
            continue
        match = LABEL_VALUES.match(variable_query(var))
        assert match is not None, f"${name}: only label_values(selector, label) is checked"
        assert match["selector"], f"${name}: label_values without a selector"
        out.append((name, match["selector"], match["label"]))
    return out


# ---------------------------------------------------------------------------------------------- variables

VARIABLE_REFERENCE = re.compile(r"\$\{(\w+)(?::[\w:]+)?\}|\[\[(\w+)(?::\w+)?\]\]|\$(\w+)")


def referenced_variables(text: str) -> set[str]:
    return {next(g for g in m.groups() if g) for m in VARIABLE_REFERENCE.finditer(text)}


def substitute(text: str, values: Mapping[str, str]) -> str:
    """Grafana's interpolation: ``$x``, ``${x}``, ``${x:fmt}``, ``[[x]]``; an unknown variable is a KeyError."""

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name in values:
            return values[name]
        if name in BUILT_INS:
            return BUILT_INS[name]
        raise KeyError(f"${name} is not a dashboard variable")

    return VARIABLE_REFERENCE.sub(value, text)


def custom_options(var: Mapping[str, Any]) -> list[str]:
    return [o.strip() for o in str(var["query"]).split(",") if o.strip()]


def scenarios(dashboard: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Variable values to try: everything selected (``All``), one value each, two values each."""
    custom = {n: custom_options(v) for n, v in variables(dashboard).items() if v["type"] == "custom"}
    base = {"datasource": "prometheus"}
    return {
        "all": {**base, "namespace": ".*", "deployment": ".*", "team": ".*", **{n: o[0] for n, o in custom.items()}},
        "one": {**base, "namespace": "serving", "deployment": "llama-chat", "team": "ml",
                **{n: o[-1] for n, o in custom.items()}},
        "two": {**base, "namespace": "(serving|research)", "deployment": "(llama-chat|qwen-eval)",
                "team": "(ml|cv)", **{n: o[len(o) // 2] for n, o in custom.items()}},
    }


# ---------------------------------------------------------------------------------------------- exported names


def exported_series_names() -> frozenset[str]:
    """Sample names of the controller's ``/metrics`` exposition, every labelled metric with one child."""
    metrics = ControllerMetrics()
    wrappers = [m for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)]
    for metric in wrappers:
        labelnames = metric._labelnames  # no public accessor; a child is needed for the samples to be rendered
        if labelnames:
            metric.labels(*("x" for _ in labelnames))
    exposition = generate_latest(metrics.registry).decode()
    names = frozenset(s.name for family in text_string_to_metric_families(exposition) for s in family.samples)
    collected = list(metrics.registry.collect())
    assert len(collected) == len(wrappers), "a collector that is not a metric attribute: children not created"
    assert all(family.samples for family in collected), "a family without samples is missing from the exposition"
    assert names == {s.name for family in collected for s in family.samples}
    return names


EXPORTED = exported_series_names()


# ---------------------------------------------------------------------------------------------- metric names

KEYWORDS_WITH_LABEL_LIST = {"by", "without", "on", "ignoring", "group_left", "group_right"}
OPERATOR_KEYWORDS = {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan"}
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
NUMBER_OR_DURATION = re.compile(r"[0-9][0-9A-Za-z_.]*|\.[0-9][0-9A-Za-z_.]*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
MATCHER = re.compile(
    r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`)\s*,?'
)


def _matcher_names(body: str) -> set[str]:
    """Metric names a ``{...}`` matcher list selects by ``__name__``; a regex or negative one cannot be checked."""
    names: set[str] = set()
    pos = 0
    while pos < len(body.rstrip()):
        m = MATCHER.match(body, pos)
        assert m is not None, f"unexpected matcher text {body[pos:]!r}"
        label, op, quoted = m.groups()
        if label == "__name__":
            value = json.loads(quoted) if quoted.startswith('"') else quoted[1:-1]
            names.add(value if op == "=" else f"{{__name__{op}{quoted}}}")  # not a name: never exported
        pos = m.end()
    return names


def metric_names(canonical: str) -> set[str]:
    """The metric names in PromQL as ``/api/v1/format_query`` prints it (see the module docstring)."""
    tokens: list[str] = []
    names: set[str] = set()
    i = 0
    while i < len(canonical):
        ch = canonical[i]
        if ch.isspace():
            i += 1
        elif ch in "\"'`":
            m = STRING.match(canonical, i)
            assert m is not None, canonical[i:]
            i = m.end()
            tokens.append("<string>")
        elif ch == "{":
            end = i + 1
            while canonical[end] != "}":
                m = STRING.match(canonical, end)
                end = m.end() if m else end + 1
            names |= _matcher_names(canonical[i + 1 : end])
            i = end + 1
        elif ch == "[":
            i = canonical.index("]", i) + 1
        elif m := NUMBER_OR_DURATION.match(canonical, i):
            i = m.end()
            tokens.append("<number>")
        elif m := IDENTIFIER.match(canonical, i):
            i = m.end()
            tokens.append(m.group())
        else:
            tokens.append(ch)
            i += 1
    k = 0
    while k < len(tokens):
        token, following = tokens[k], tokens[k + 1] if k + 1 < len(tokens) else ""
        lower = token.lower()
        if lower in KEYWORDS_WITH_LABEL_LIST:
            k += 1
            if following == "(":
                k = tokens.index(")", k) + 1  # a label list holds no parentheses
            continue
        calls = following == "(" or following.lower() in {"by", "without"}  # a function, an aggregation
        if IDENTIFIER.fullmatch(token) and not calls and lower not in OPERATOR_KEYWORDS:
            names.add(token)
        k += 1
    return names


# ---------------------------------------------------------------------------------------------- Prometheus


class Prometheus:
    def __init__(self, server: PrometheusServer, client: httpx.Client) -> None:
        self.server, self.client = server, client

    def format(self, expr: str) -> httpx.Response:
        return self.client.get(f"{self.server.url}/api/v1/format_query", params={"query": expr})

    def canonical(self, expr: str) -> str:
        response = self.format(expr)
        assert response.status_code == 200, f"{expr}\n{response.text}"
        return str(response.json()["data"])

    def query(self, expr: str, *, instant: bool) -> httpx.Response:
        now = self.server.now
        if instant:
            return self.client.get(f"{self.server.url}/api/v1/query", params={"query": expr, "time": now})
        params: dict[str, str | float] = {"query": expr, "start": now - RANGE_SECONDS, "end": now, "step": STEP_SECONDS}
        return self.client.get(f"{self.server.url}/api/v1/query_range", params=params)

    def unknown_names(self, expr: str) -> set[str]:
        """Names ``expr`` uses that the controller does not export (empty set: it names none, see below)."""
        names = metric_names(self.canonical(expr))
        if not names:
            return {"<no metric at all>"}
        return names - EXPORTED


@pytest.fixture(scope="module")
def prometheus(prometheus_server: PrometheusServer) -> Iterator[Prometheus]:
    with httpx.Client(timeout=30) as client:
        yield Prometheus(prometheus_server, client)


def dashboard_name_problems(dashboard: Mapping[str, Any], prometheus: Prometheus) -> dict[str, set[str]]:
    """Where the dashboard names a metric the controller does not export: {panel / refId or $variable: names}."""
    values = scenarios(dashboard)["all"]
    problems: dict[str, set[str]] = {}
    for where, target in targets(dashboard):
        unknown = prometheus.unknown_names(substitute(target["expr"], values))
        if unknown:
            problems[where] = unknown
    for name, selector, _ in variable_selectors(dashboard):
        unknown = prometheus.unknown_names(substitute(selector, values))
        if unknown:
            problems[f"${name}"] = unknown
    return problems


# ---------------------------------------------------------------------------------------------- shape


def test_dashboard_is_a_grafana_dashboard_with_the_variables_operators_filter_by() -> None:
    dashboard = load_dashboard()
    assert dashboard["title"]
    assert dashboard["uid"] == "predictive-autoscaler"
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard.get("id") is None, "set the id a UI export writes back to null (the uid identifies it)"
    assert dashboard["panels"]
    vs = variables(dashboard)
    assert {"datasource", "namespace", "deployment", "team"} <= set(vs)
    assert (vs["datasource"]["type"], vs["datasource"]["query"]) == ("datasource", "prometheus")
    for name in ("namespace", "deployment", "team"):
        var = vs[name]
        assert var["type"] == "query", name
        assert var["datasource"] == DATASOURCE, name
        assert (var["multi"], var["includeAll"], var["allValue"]) == (True, True, ".*"), name
    assert "$namespace" in variable_query(vs["deployment"]), "deployments should follow the namespace selection"


def test_every_panel_has_a_title_a_unique_id_and_a_place_on_the_grid() -> None:
    panels = all_panels(load_dashboard())
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for p in panels:
        assert isinstance(p["id"], int), p
        assert isinstance(p.get("title"), str), p["id"]
        assert p["title"].strip(), p["id"]
        pos = p["gridPos"]
        assert all(isinstance(pos.get(k), int) for k in "hwxy"), p["title"]
        assert min(pos["h"], pos["w"]) >= 1, p["title"]
        assert min(pos["x"], pos["y"]) >= 0, p["title"]
        assert pos["x"] + pos["w"] <= 24, f"{p['title']} is wider than the grid"


def overlaps(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a[
        "h"]


def test_panels_do_not_overlap() -> None:
    dashboard = load_dashboard()
    groups = [dashboard["panels"], *(p["panels"] for p in dashboard["panels"] if p.get("panels"))]
    for group in groups:
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                assert not overlaps(a["gridPos"], b["gridPos"]), f"{a['title']!r} overlaps {b['title']!r}"


def test_every_query_panel_uses_the_datasource_variable() -> None:
    dashboard = load_dashboard()
    for p in all_panels(dashboard):
        if p["type"] == "row":
            assert not p.get("targets"), f"row {p['title']!r} has queries"
            continue
        assert p["type"] in QUERY_PANEL_TYPES, p["title"]
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], f"{p['title']} queries nothing"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t.get("datasource", DATASOURCE) == DATASOURCE, p["title"]
            assert isinstance(t.get("expr"), str), p["title"]
            assert t["expr"].strip(), p["title"]


def test_every_variable_used_is_defined() -> None:
    dashboard = load_dashboard()
    defined = set(variables(dashboard)) | set(BUILT_INS)
    texts = [t["expr"] for _, t in targets(dashboard)] + [p["title"] for p in all_panels(dashboard)]
    texts += [variable_query(v) for v in variables(dashboard).values() if v["type"] == "query"]
    used = set().union(*(referenced_variables(t) for t in texts))
    assert used <= defined, used - defined
    assert {"namespace", "deployment", "team", "__rate_interval"} <= used
    for p in all_panels(dashboard):
        if "repeat" in p:
            var = variables(dashboard)[p["repeat"]]
            assert var["multi"] or var["includeAll"], f"{p['title']} repeats over a single-value variable"


def test_substitution_rejects_an_undefined_variable() -> None:
    """Control for the check above and for the queries below: a typo in a variable is not silently kept."""
    values = scenarios(load_dashboard())["all"]
    assert substitute('x{namespace=~"$namespace"}[$__rate_interval]', values) == 'x{namespace=~".*"}[5m]'
    with pytest.raises(KeyError, match="nmespace"):
        substitute('x{namespace=~"$nmespace"}', values)


def test_variables_in_label_matchers_are_regex_matchers() -> None:
    """A multi-value or All selection is a regex (``(a|b)``, ``.*``): ``=`` with a variable matches nothing."""
    exact_with_variable = re.compile(r'\w+\s*!?=\s*"[^"]*\$')
    dashboard = load_dashboard()
    for where, t in targets(dashboard):
        assert not exact_with_variable.search(t["expr"]), where


def test_units_legends_and_ceiling_thresholds_are_set_for_a_person() -> None:
    dashboard = load_dashboard()
    units = set()
    for p in query_panels(dashboard):
        unit = p["fieldConfig"]["defaults"].get("unit")
        assert unit, f"{p['title']} has no unit"
        units.add(unit)
        units |= {prop["value"] for o in p["fieldConfig"]["overrides"] for prop in o["properties"]
                  if prop["id"] == "unit"}
        for t in p["targets"]:
            if p["type"] == "timeseries":
                assert t.get("legendFormat") not in {None, "", "__auto"}, f"{p['title']} {t['refId']}"
            if "by (namespace, deployment" in t["expr"] and p["type"] == "timeseries":
                assert "{{namespace}}/{{deployment}}" in t["legendFormat"], f"{p['title']} {t['refId']}"
            if p["type"] == "table":
                assert (t.get("format"), t.get("instant")) == ("table", True), f"{p['title']} {t['refId']}"
    assert {"reqps", "short", "s", "currencyUSD", "percentunit", "dateTimeAsIso"} <= units
    # Spend against a ceiling: red at 100 % of it, a warning colour before.
    (share,) = [p for p in query_panels(dashboard) if any(
        "/ max by (scope, team) (predictive_autoscaler_cost_ceiling" in " ".join(t["expr"].split())
        for t in p["targets"])]
    steps = share["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert share["fieldConfig"]["defaults"]["unit"] == "percentunit"
    assert [s["color"] for s in steps if s["value"] == 1] == ["red"]
    assert any(s["value"] is not None and 0 < s["value"] < 1 for s in steps)
    # The ceilings themselves are drawn next to the spend.
    ceilings = [t for p in query_panels(dashboard) if p["fieldConfig"]["defaults"]["unit"] == "currencyUSD"
                for t in p["targets"] if "cost_ceiling_dollars_per_hour" in t["expr"]]
    assert len(ceilings) >= 2
    assert all("ceiling" in t["legendFormat"] for t in ceilings)


def test_the_dashboard_shows_what_an_operator_watches() -> None:
    """The panels an operator watches (forecast vs demand, replicas, lead, warm pool, cost, gangs, errors, tick time,
    leadership, another writer of replicas), by the series they read (the name check below proves each is exported)."""
    text = " ".join(t["expr"] for _, t in targets(load_dashboard()))
    wanted = {
        "forecast_requests_per_second", "demand_requests_per_second", "desired_replicas", "current_replicas",
        "ready_replicas", "lead_seconds", "warm_pool_replicas", "projected_cost_dollars_per_hour",
        "cost_ceiling_dollars_per_hour", "gang_planned_start_timestamp_seconds", "gpus_unavailable",
        "errors_total", "tick_duration_seconds_bucket", "deferred_fits", "tuning_replays_waiting", "metrics_source_up",
        "is_leader", "replicas_overwritten_total",
    }
    assert not {w for w in wanted if f"predictive_autoscaler_{w}" not in text}
    assert "by (kind)" in " ".join(text.split())
    assert "histogram_quantile(" in text
    assert 'scope="cluster"' in text
    assert 'team=~"$team"' in text


def test_the_dashboard_shows_self_tuning_and_learned_capacity() -> None:
    """What an operator needs to see why a Deployment runs the point it runs and the capacity it is sized
    on: the chosen point, whether the objective was met on replay, what ran against the HPA's own points over the
    record, the learned capacity and its state."""
    dashboard = load_dashboard()
    text = " ".join(t["expr"] for _, t in targets(dashboard))
    wanted = {"slo_tuned_quantile", "slo_tuned_utilisation", "slo_tuning_met", "slo_replay_attainment",
              "slo_record_gpu_hours", "slo_record_attainment", "capacity_per_replica", "capacity_unknown",
              "capacity_confidence"}
    assert not {w for w in wanted if f"predictive_autoscaler_{w}" not in text}
    (table,) = [p for p in query_panels(dashboard) if p["title"] == "Deployments"]
    renamed = set(table["transformations"][1]["options"]["renameByName"].values())
    assert {"tuned quantile", "objective met on replay", "capacity"} <= renamed
    assert "by (namespace, deployment, source)" in " ".join(text.split())  # annotation and learned, side by side


# ---------------------------------------------------------------------------------------------- the lexer


@pytest.mark.parametrize(
    ("canonical", "names"),
    [
        ("sum by (namespace, deployment) (rate(foo_total[5m]))", {"foo_total"}),
        ("topk without (a) (3, x) / count(y)", {"x", "y"}),
        ('label_replace(up{job="a"}, "dst", "not_a_metric", "src", "(.*)")', {"up"}),
        ('{__name__="foo",job="a"}[5m:1m] @ 100.000', {"foo"}),
        ('{__name__=~"foo.*"}', {'{__name__=~"foo.*"}'}),
        ("a offset 15m and on (job, instance) (b offset 15m == 1)", {"a", "b"}),
        ("x * on (job) group_left (le, kind) y", {"x", "y"}),
        ("max without (y) (x) > bool 3", {"x"}),
        ("x atan2 y unless ignoring (z) w", {"x", "y", "w"}),
        ('count_values("le", x) or vector(Inf) or -NaN', {"x"}),
        ("histogram_quantile(0.9, sum by (le) (rate(h_bucket[1h:30s] @ end())))", {"h_bucket"}),
        ("time() - 1e+3", set()),
        ('x{a="}{[",b=~"by (z)"}[5m] offset -1h30m', {"x"}),
    ],
)
def test_metric_names_lexer(canonical: str, names: set[str]) -> None:
    assert metric_names(canonical) == names


def test_exported_names_have_the_exposition_suffixes() -> None:
    assert {
        "predictive_autoscaler_errors_total", "predictive_autoscaler_tick_duration_seconds_bucket",
        "predictive_autoscaler_tick_duration_seconds_sum", "predictive_autoscaler_tick_duration_seconds_count",
        "predictive_autoscaler_desired_replicas", "predictive_autoscaler_gang_planned_start_timestamp_seconds",
    } <= EXPORTED
    assert "predictive_autoscaler_errors" not in EXPORTED  # a counter is only ever stored as x_total
    assert "predictive_autoscaler_tick_duration_seconds" not in EXPORTED


# ---------------------------------------------------------------------------------------------- real Prometheus


def query_cases() -> list[Any]:
    dashboard = load_dashboard()
    return [
        pytest.param(scenario, where, target, id=f"{scenario}:{where}")
        for scenario in scenarios(dashboard)
        for where, target in targets(dashboard)
    ]


@pytest.mark.prometheus
@pytest.mark.parametrize(("scenario", "where", "target"), query_cases())
def test_every_target_parses_and_runs(
    prometheus: Prometheus, scenario: str, where: str, target: dict[str, Any]
) -> None:
    expr = substitute(target["expr"], scenarios(load_dashboard())[scenario])
    response = prometheus.query(expr, instant=bool(target.get("instant")))
    assert response.status_code == 200, f"{where}: {expr}\n{response.text}"
    assert response.json()["status"] == "success"


@pytest.mark.prometheus
def test_every_variable_query_runs(prometheus: Prometheus) -> None:
    """``label_values(selector, label)`` is what Grafana asks /api/v1/label/<label>/values?match[]=selector."""
    dashboard = load_dashboard()
    now = prometheus.server.now
    for scenario in scenarios(dashboard).values():
        for name, selector, label in variable_selectors(dashboard):
            params: dict[str, str | float] = {"match[]": substitute(selector, scenario), "start": now - RANGE_SECONDS,
                                              "end": now}
            response = prometheus.client.get(f"{prometheus.server.url}/api/v1/label/{label}/values", params=params)
            assert response.status_code == 200, f"${name}: {response.text}"


@pytest.mark.prometheus
def test_a_broken_expression_fails_to_parse(prometheus: Prometheus) -> None:
    """Control: the checks above can fail (a parse error is HTTP 400 bad_data, on both endpoints)."""
    _, target = targets(load_dashboard())[0]
    good = substitute(target["expr"], scenarios(load_dashboard())["all"])
    assert prometheus.query(good, instant=True).status_code == 200
    for broken in (good[: good.rindex(")")], f"no_such_function({good})", f"{good} +", "rate(x[$__rate_interval])"):
        for instant in (True, False):
            response = prometheus.query(broken, instant=instant)
            assert response.status_code == 400, broken
            assert response.json()["errorType"] == "bad_data", broken
        assert prometheus.format(broken).status_code == 400


@pytest.mark.prometheus
def test_every_panel_names_only_metrics_the_controller_exports(prometheus: Prometheus) -> None:
    dashboard = load_dashboard()
    assert dashboard_name_problems(dashboard, prometheus) == {}
    used = set().union(*(metric_names(prometheus.canonical(substitute(t["expr"], scenarios(dashboard)["all"])))
                         for _, t in targets(dashboard)))
    assert "predictive_autoscaler_tick_duration_seconds_bucket" in used
    assert used <= EXPORTED


@pytest.mark.prometheus
def test_the_name_check_catches_a_misspelt_metric(prometheus: Prometheus) -> None:
    """Control: one misspelt name in a copy of the dashboard fails the check, and it names the culprit."""
    dashboard = copy.deepcopy(load_dashboard())
    where, target = next((w, t) for w, t in targets(dashboard) if "predictive_autoscaler_desired_replicas" in t["expr"])
    target["expr"] = target["expr"].replace("predictive_autoscaler_desired_replicas", "predictive_autoscaler_desired")
    assert dashboard_name_problems(dashboard, prometheus) == {where: {"predictive_autoscaler_desired"}}
    # A counter without its _total, a histogram without _bucket: exported families, but not stored names.
    for wrong in ("predictive_autoscaler_errors", "predictive_autoscaler_tick_duration_seconds"):
        assert prometheus.unknown_names(f"rate({wrong}[5m])") == {wrong}
    # A variable's selector is checked too.
    var = variables(dashboard)["team"]
    var["query"]["query"] = var["query"]["query"].replace("projected_cost", "projected_costs")
    assert dashboard_name_problems(dashboard, prometheus)["$team"] == {
        "predictive_autoscaler_projected_costs_dollars_per_hour"
    }


@pytest.mark.prometheus
def test_every_target_fails_the_name_check_with_any_one_name_misspelt(prometheus: Prometheus) -> None:
    """Control, exhaustively: the lexer sees every name of every expression (none hides from the check)."""
    values = scenarios(load_dashboard())["all"]
    for where, target in targets(load_dashboard()):
        expr = substitute(target["expr"], values)
        names = metric_names(prometheus.canonical(expr))
        assert names, where
        for name in names:
            typo = re.sub(rf"\b{name}\b", f"{name}_typo", expr)
            assert prometheus.unknown_names(typo) == {f"{name}_typo"}, f"{where}: {name}"


# ---------------------------------------------------------------------------------------------- the ConfigMap


def test_kustomization_generates_the_sidecar_configmap_from_the_json() -> None:
    """``kubectl apply -k deploy/grafana`` ships the same JSON, labelled for Grafana's dashboard sidecar."""
    kustomization = yaml.safe_load((GRAFANA / "kustomization.yaml").read_text(encoding="utf-8"))
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == [DASHBOARD_FILE.name]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True  # one stable name to update
    # Client-side apply copies the object into an annotation limited to 256 KiB; stay well below.
    assert DASHBOARD_FILE.stat().st_size < 200_000
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the static checks above ran)")
    out = subprocess.run([kubectl, "kustomize", str(GRAFANA)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    (configmap,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"][DASHBOARD_FILE.name]) == load_dashboard()
    import kubernetes_validate

    kubernetes_validate.validate(configmap, "1.29", strict=True)
