"""PromQL templates: escaping, placeholder checks, the namespace restriction, the default queries.

(The real Prometheus parses rendered queries in tests/adapters/test_prometheus_server.py.)
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.promql import (
    DEFAULT_QUERIES,
    DEGRADED_SOURCES,
    PER_POD_QUERIES,
    POD_TO_DEPLOYMENT_REGEX,
    SOURCE_FULL,
    SOURCE_LABEL,
    NamespaceRegex,
    TemplateError,
    deployment_pods_regex,
    duration,
    escape_regex,
    escape_string,
    namespace_regex,
    placeholders,
    render,
)

FLEET_TEMPLATE = 'sum by (namespace, deployment) (x{namespace=~"{namespaces}"})'


def unquote(escaped: str) -> str:
    """Decode a PromQL double-quoted string body (the escapes we emit are JSON's subset)."""
    decoded = json.loads('"' + escaped + '"')
    assert isinstance(decoded, str)
    return decoded


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain-ns", "plain-ns"),
        ('say "hi"', 'say \\"hi\\"'),
        ("back\\slash", "back\\\\slash"),
        ("two\nlines", "two\\nlines"),
        ("tab\there", "tab\\there"),
        ("bell\x07", "bell\\u0007"),
    ],
)
def test_escape_string(raw: str, escaped: str) -> None:
    assert escape_string(raw) == escaped


@settings(deadline=None)  # a shared, loaded test machine: no per-example time limit
@given(st.text())
def test_escape_string_round_trips_and_never_closes_the_literal(value: str) -> None:
    escaped = escape_string(value)
    assert unquote(escaped) == value
    assert "\n" not in escaped
    # Every double quote in the output is escaped, so the literal cannot end early.
    assert re.search(r'(?<!\\)(?:\\\\)*"', escaped) is None


@settings(deadline=None)
@given(
    st.lists(st.text(alphabet="ab.*+?()[]{}|^$\\-", min_size=1, max_size=4), min_size=1, max_size=4),
    st.text(alphabet="ab.*+?()[]{}|^$\\-", max_size=5),
)
def test_namespace_regex_matches_exactly_the_given_names(names: list[str], other: str) -> None:
    # Prometheus anchors label regexes: fullmatch is its semantics (RE2 and Python agree on escapes).
    pattern = re.compile(namespace_regex(names))
    for name in names:
        assert pattern.fullmatch(name)
    assert bool(pattern.fullmatch(other)) == (other in names)


def test_namespace_regex_refuses_nothing_and_empty_names() -> None:
    with pytest.raises(TemplateError, match="no namespaces"):
        namespace_regex([])
    with pytest.raises(TemplateError, match="empty namespace"):
        namespace_regex(["serving", ""])


def test_escape_regex_escapes_metacharacters() -> None:
    assert escape_regex("team.a") == "team\\.a"
    assert re.fullmatch(escape_regex("a+b(c)"), "a+b(c)")
    assert not re.fullmatch(escape_regex("team.a"), "teamXa")


def test_render_escapes_values_inside_their_string_literal() -> None:
    query = render('x{namespace="{namespace}"}', namespace='ev"il"} or vector(1) #')
    assert query == 'x{namespace="ev\\"il\\"} or vector(1) #"}'


def test_render_fleet_regex_is_string_escaped_after_regex_escaping() -> None:
    query = render(FLEET_TEMPLATE, namespaces=namespace_regex(["team.a", "b"]))
    assert 'namespace=~"b|team\\\\.a"' in query


@pytest.mark.parametrize(
    ("template", "labels", "message"),
    [
        ('x{namespace="{namespace}"}', {}, "missing value for placeholder"),
        ('x{namespace="{namespace}"}', {"namespace": "a", "pod": "b"}, "unknown placeholder"),
        ('x{pod="{pod}"}', {"pod": "b"}, "not restricted to a namespace"),
        ("x{namespace={namespace}}", {"namespace": "a"}, "inside a double-quoted string"),
        ("x{namespace='{namespace}'}", {"namespace": "a"}, "inside a double-quoted string"),
        ('x{namespace="{namespace}"}', {"namespace": ""}, "empty namespace"),
        ('rate(x{namespace="{namespace}"}[{window}])', {"namespace": "a", "window": "5 minutes"}, "PromQL duration"),
        ('x{namespace="{namespace}",w="{window}"}', {"namespace": "a", "window": "5m"}, "must not be inside"),
        ('x{namespace="{namespace}}', {"namespace": "a"}, "unterminated"),
    ],
)
def test_render_refuses(template: str, labels: dict[str, str], message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        render(template, **labels)


def test_render_refuses_a_hand_written_fleet_regex() -> None:
    with pytest.raises(TemplateError, match="namespace_regex"):
        render(FLEET_TEMPLATE, namespaces=".*")
    assert render(FLEET_TEMPLATE, namespaces=NamespaceRegex("a")).endswith('x{namespace=~"a"})')


def test_duration() -> None:
    assert duration(60) == "60s"
    for bad in (0, -5, 1.5, True):
        with pytest.raises(TemplateError, match="positive whole number"):
            duration(bad)  # type: ignore[arg-type]


def test_placeholders_ignores_promql_braces() -> None:
    assert placeholders('label_replace(x{namespace="{namespace}"}, "d", "$1", "pod", "(.+)-[a-z]{5}")') == ["namespace"]


@pytest.mark.parametrize(
    ("pod", "deployment"),
    [
        ("llama-chat-7d9f8b6c5d-x7k2p", "llama-chat"),
        ("web-5b7c9d8f4-m2n3b", "web"),
        ("vllm-standalone", None),  # a bare pod
        ("web-0", None),  # a StatefulSet pod
        ("job-abcde", None),  # a Job pod: one suffix only
    ],
)
def test_pod_to_deployment_regex(pod: str, deployment: str | None) -> None:
    m = re.fullmatch(POD_TO_DEPLOYMENT_REGEX, pod)
    assert (m.group(1) if m else None) == deployment
    if deployment is not None:
        assert re.fullmatch(deployment_pods_regex(deployment), pod)
        assert not re.fullmatch(deployment_pods_regex(deployment + "x"), pod)


SAMPLE_VALUES = {
    "namespaces": namespace_regex(["serving"]),
    "namespace": "serving",
    "pods": deployment_pods_regex("llama-chat"),
    "window": "60s",
    "resolution": "60s",
}


VLLM_METRICS = {
    "vllm:request_success_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    # the capacity estimate's (promql.CAPACITY_QUERIES): KV cache under its old and new name, and the TTFT histogram
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds_bucket",
}


def outside_strings(query: str) -> str:
    """``query`` with the inside of every double-quoted literal blanked (same length, so offsets hold)."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: '"' + " " * (len(m.group()) - 2) + '"', query)


@pytest.mark.parametrize("name", sorted(DEFAULT_QUERIES))
def test_default_query_selects_every_metric_within_the_namespace(name: str) -> None:
    template = DEFAULT_QUERIES[name]
    # Metric names inside string literals (the demand_source label's explanations) select nothing.
    uses = list(re.finditer(r"vllm:[a-z_]+", outside_strings(template)))
    assert uses, "every default query reads vLLM metrics"
    for use in uses:
        assert use.group() in VLLM_METRICS
        after = template[use.end() :]
        assert after.startswith(('{namespace=~"{namespaces}"}', '{namespace="{namespace}"')), (
            f"{use.group()} in {name} is not restricted to the namespace: {after[:40]!r}"
        )
    rendered = render(template, **{k: v for k, v in SAMPLE_VALUES.items() if k in placeholders(template)})
    assert len(re.findall(r'vllm:[a-z_]+\{namespace=~?"serving"', rendered)) == len(uses)


@pytest.mark.parametrize("name", sorted(n for n, t in DEFAULT_QUERIES.items()
                                         if "{namespaces}" in t and n not in PER_POD_QUERIES))
def test_fleet_queries_aggregate_by_namespace_and_deployment(name: str) -> None:
    template = DEFAULT_QUERIES[name]
    # (a histogram keeps its buckets to the quantile: ttft_p90 sums by (namespace, deployment, le))
    assert template.count("sum by (namespace, deployment)") + template.count("sum by (namespace, deployment, le)") >= 1
    assert "label_replace(" in template


@pytest.mark.parametrize("name", sorted(PER_POD_QUERIES))
def test_per_pod_queries_aggregate_by_namespace_and_pod(name: str) -> None:
    template = DEFAULT_QUERIES[name]
    assert "{namespaces}" in template
    assert template.count("sum by (namespace, pod)") == len(re.findall(r"vllm:[a-z_]+", template))
    assert "deployment" not in template


def test_default_queries_are_read_only() -> None:
    with pytest.raises(TypeError):
        DEFAULT_QUERIES["arrival_rate"] = "x"  # type: ignore[index]


BRANCH = re.compile(rf'label_replace\((.*), "{SOURCE_LABEL}", "([^"]*)", "", ""\)')


def test_arrival_rate_falls_back_to_completions_per_deployment_and_says_why() -> None:
    values = {k: SAMPLE_VALUES[k] for k in ("namespaces", "window", "resolution")}
    rendered = render(DEFAULT_QUERIES["arrival_rate"], **values)
    completions = render(DEFAULT_QUERIES["completion_rate"], **{k: values[k] for k in ("namespaces", "window")})
    present = {
        gauge: "count by (namespace, deployment) (label_replace("
        f'vllm:num_requests_{gauge}{{namespace=~"serving"}}, "deployment", "$1", "pod", "{POD_TO_DEPLOYMENT_REGEX}"))'
        for gauge in ("waiting", "running")
    }
    # clamp_min(full or on (namespace, deployment) fallback or on (...) ..., 0): each later branch answers only
    # the Deployments no earlier one answered, at each evaluation time; one query for the whole fleet.
    assert rendered.startswith("clamp_min(")
    assert rendered.endswith(", 0)")
    branches = [BRANCH.fullmatch(b) for b in rendered[10:-4].split(" or on (namespace, deployment) ")]
    assert all(branches), branches
    assert [b.group(2) for b in branches if b] == [SOURCE_FULL, *DEGRADED_SOURCES.values()]
    full, neither, no_running, no_waiting, not_over_window = (b.group(1) for b in branches if b)
    assert full == (
        f"{completions} + sum by (namespace, deployment) (label_replace(deriv((sum by (namespace, pod) "
        '(vllm:num_requests_waiting{namespace=~"serving"}) + sum by (namespace, pod) '
        '(vllm:num_requests_running{namespace=~"serving"}))[60s:60s]), '
        f'"deployment", "$1", "pod", "{POD_TO_DEPLOYMENT_REGEX}"))'
    )
    unless = f"{completions} unless on (namespace, deployment) "
    assert neither == f"{unless}({present['waiting']} or {present['running']})"
    assert no_running == unless + present["running"]
    assert no_waiting == unless + present["waiting"]
    assert not_over_window == completions
    assert DEGRADED_SOURCES["running"] == "completions only: vllm:num_requests_running absent"
    assert all(v.startswith("completions only: ") for v in DEGRADED_SOURCES.values())


def test_arrival_rate_fallback_keeps_the_namespace_restriction_and_escaping() -> None:
    hostile = namespace_regex(['team"a', "b.c"])
    rendered = render(DEFAULT_QUERIES["arrival_rate"], namespaces=hostile, window="60s", resolution="30s")
    selectors = re.findall(r"vllm:[a-z_]+\{([^}]*)\}", outside_strings(rendered))
    assert len(selectors) == 11  # full: 3; fallbacks: 1 + 2, 1 + 1, 1 + 1, 1
    for match in re.finditer(r"vllm:[a-z_]+\{", outside_strings(rendered)):
        assert rendered[match.end():].startswith('namespace=~"b\\\\.c|team\\"a"}')
    # Every per-pod term is mapped to its Deployment (full: 2, fallbacks: 3, 2, 2, 1).
    assert rendered.count(f'"pod", "{POD_TO_DEPLOYMENT_REGEX}")') == 10
