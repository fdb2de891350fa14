"""Operator configuration: defaults, key-path errors, and hot reload (plain files and ConfigMap symlink swaps)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal, cast

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler import promql
from autoscaler.config.parser import MAX_YAML_NODES, check_promql_template, load_config, parse_config, parse_config_text
from autoscaler.config.schema import (
    CONFIGMAP_KEY,
    DEFAULT_CONFIG_PATH,
    ERROR_CHARS,
    MODEL_NAMES,
    Config,
    ConfigError,
    ForecastProfile,
    format_duration,
)
from autoscaler.config.store import ConfigStore
from autoscaler.errors import UserError
from autoscaler.traces import parse_duration

REPO = Path(__file__).resolve().parent.parent


def errors_of(text: str) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as info:
        parse_config_text(text, "cfg.yaml")
    return info.value.errors


# ---------------------------------------------------------------------------------------------- defaults


def test_packaged_defaults_load_and_equal_the_built_in_defaults() -> None:
    cfg = load_config(DEFAULT_CONFIG_PATH)
    assert cfg == Config()
    assert cfg.warnings == ()
    assert cfg.loop.interval_seconds == 30
    assert cfg.loop.history_seconds == 14 * 86_400
    assert cfg.loop.step_seconds == 60
    default = cfg.profile("default")
    assert (default.model, default.horizon_seconds, default.quantile, default.warm_pool) == ("default", 900, 90, "auto")
    assert (default.refit_seconds, default.scale_down_stabilization_seconds, default.look_ahead_seconds) == (
        86_400, 600, 300,
    )
    assert (cfg.cold_start.pod_startup_seconds, cfg.cold_start.node_startup_seconds) == (180, 240)
    assert (cfg.cold_start.percentile, cfg.cold_start.min_samples) == (90, 5)
    assert cfg.prometheus.arrival_rate_query in cfg.prometheus.queries
    assert cfg.namespaces == ()
    assert cfg.allows_namespace("anything")


def test_config_dir_symlink_points_at_the_packaged_defaults() -> None:
    source_tree_copy = REPO / "config" / "default.yaml"
    assert source_tree_copy.resolve() == DEFAULT_CONFIG_PATH.resolve()
    assert load_config(source_tree_copy) == Config()


def test_empty_mapping_means_all_defaults_but_an_empty_file_is_an_error() -> None:
    assert parse_config_text("{}") == Config()
    assert any("file is empty" in e for e in errors_of(""))
    assert any("file is empty" in e for e in errors_of("# only a comment\n"))


def test_partial_file_overrides_only_what_it_names() -> None:
    cfg = parse_config_text("profiles:\n  default:\n    horizon: 30m\nloop:\n  interval: 1m\n")
    assert cfg.profile("default").horizon_seconds == 1800
    assert cfg.profile("default").quantile == 90
    assert cfg.loop.interval_seconds == 60
    assert cfg.loop.step_seconds == 60
    assert cfg.cold_start == Config().cold_start


def test_named_profiles_inherit_from_default() -> None:
    cfg = parse_config_text(
        "profiles:\n  default:\n    horizon: 30m\n    quantile: 95\n  batch:\n    quantile: 50\n    warm_pool: 2\n"
    )
    batch = cfg.profile("batch")
    assert batch == ForecastProfile(
        name="batch", horizon_seconds=1800, quantile=50, warm_pool=2,
    )
    assert cfg.profile("default").quantile == 95


def test_warm_pool_quantile_defaults_to_p95_and_cannot_sit_below_quantile() -> None:
    cfg = parse_config_text("profiles:\n  default: {}\n  lean:\n    warm_pool_quantile: 91\n")
    assert cfg.profile("default").warm_pool_quantile == 95
    assert cfg.profile("lean").warm_pool_quantile == 91
    with pytest.raises(ConfigError) as exc:
        parse_config_text("profiles:\n  default:\n    quantile: 95\n    warm_pool_quantile: 90\n")
    assert "profiles.default.warm_pool_quantile: 90 is below quantile 95" in str(exc.value)


def test_profile_maps_to_the_planner_policy_once_for_controller_and_simulator() -> None:
    cfg = parse_config_text(
        "profiles:\n  default:\n    quantile: 80\n    warm_pool_quantile: 95\n    look_ahead: 2m\n"
        "    scale_down_stabilization: 5m\n  fixed:\n    warm_pool: 3\n"
    )
    auto = cfg.profile("default").scaling_policy(2.5, 1, 40)
    assert (auto.capacity_per_replica, auto.min_replicas, auto.max_replicas) == (2.5, 1, 40)
    assert (auto.level, auto.warm_pool, auto.warm_pool_level) == (80, None, 95)
    assert (auto.lookahead_window_seconds, auto.scale_down_stabilization_seconds) == (120, 300)
    # a fixed pool replaces the automatic tail: nothing above the replicas' own band is added on top
    fixed = cfg.profile("fixed").scaling_policy(2.5, 1, 40)
    assert (fixed.warm_pool, fixed.warm_pool_level) == (3, 80)
    # the workload's own setting (its annotation) overrides the profile's
    assert cfg.profile("default").scaling_policy(2.5, 1, 40, warm_pool=0).warm_pool == 0


def test_integer_seconds_are_accepted_as_durations() -> None:
    cfg = parse_config_text("loop:\n  interval: 45\n")
    assert cfg.loop.interval_seconds == 45


def test_unknown_profile_lookup_names_the_known_ones() -> None:
    cfg = parse_config_text("profiles:\n  default: {}\n  chat: {}\n")
    with pytest.raises(ConfigError, match=r"profile 'caht' \(did you mean 'chat'\?\); defined: chat, default"):
        cfg.profile("caht")


def test_config_error_is_a_user_error_so_the_cli_prints_one_line() -> None:
    with pytest.raises(UserError) as info:
        parse_config_text("loop: {interval: soon}", "cfg.yaml")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("cfg.yaml: loop.interval: ")


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("profiles: {default: {horizon: soon}}", "profiles.default.horizon: invalid duration 'soon'"),
        ("profiles: {default: {horizon: -5m}}", "profiles.default.horizon: invalid duration '-5m'"),
        ("profiles: {default: {refit: true}}", "profiles.default.refit: invalid duration True"),
        ("loop:\n  step: 0\n", "loop.step: invalid duration '0'"),
        ("profiles: {default: {quantile: 100}}", "profiles.default.quantile: must be between 1 and 99, got 100"),
        ("profiles: {default: {quantile: 0}}", "profiles.default.quantile: must be between 1 and 99, got 0"),
        ("profiles: {default: {quantile: 90.5}}", "profiles.default.quantile: expected an integer between 1 and 99"),
        ("profiles: {default: {quantile: yes}}", "profiles.default.quantile: expected an integer between 1 and 99"),
        ("profiles: {default: {warm_pool: some}}", "profiles.default.warm_pool: expected \"auto\" or an integer >= 0"),
        ("profiles: {default: {warm_pool: -1}}", "profiles.default.warm_pool: expected \"auto\" or an integer >= 0"),
        ("profiles: {default: {model: arima}}", "profiles.default.model: unknown model 'arima'"),
        ("profiles:\n  chat:\n    horizon: 20m\n", "profiles: a 'default' profile is required (found: chat)"),
        ("profiles:\n  default: {}\n  Chat_Bot: {}\n", "profiles.Chat_Bot: profile names must be lower-case"),
        ("profiles: [default]\n", "profiles: expected a mapping of profile names to settings, got a list"),
        ("profiles:\n  default: 3\n", "profiles.default: expected a mapping, got int 3"),
        ("loop: 30s\n", "loop: expected a mapping, got str '30s'"),
        ("cold_start:\n  percentile: 101\n", "cold_start.percentile: must be between 1 and 100, got 101"),
        ("cold_start:\n  min_samples: 0\n", "cold_start.min_samples: must be >= 1, got 0"),
        ("cold_start:\n  pod_startup: 3 minutes\n", "cold_start.pod_startup: invalid duration '3 minutes'"),
        ("prometheus: {url: 'prometheus:9090'}", "prometheus.url: 'prometheus:9090' is not an http:// or https:// URL"),
        ("prometheus:\n  retries: -1\n", "prometheus.retries: must be between 0 and 20, got -1"),
        ("prometheus:\n  ca_file: 7\n", "prometheus.ca_file: expected a file path or null, got int 7"),
        ("prometheus:\n  queries: up\n", "prometheus.queries: expected a mapping of query names to PromQL"),
        ("prometheus:\n  queries:\n    q: ''\n", "prometheus.queries.q: empty query"),
        ("prometheus:\n  queries:\n    q: 3\n", "prometheus.queries.q: expected a PromQL string, got int 3"),
        ("prometheus:\n  queries:\n    q: 'up{job=\"{job}\"}'\n", "prometheus.queries.q: unknown placeholder(s) {job}"),
        ("prometheus: {queries: {q: 'sum(up)'}}", "prometheus.queries.q: template is not restricted to a namespace"),
        ("prometheus:\n  queries:\n    q: 'up{namespace={namespace}}'\n",
         "prometheus.queries.q: label placeholder {namespace} must be inside a double-quoted string"),
        ("prometheus:\n  queries:\n    q: 'rate(x{namespace=\"{namespace}\"}[\"{window}\"])'\n",
         "prometheus.queries.q: duration placeholder {window} must not be inside a string literal"),
        ("prometheus:\n  arrival_rate_query: nope\n", "prometheus.arrival_rate_query: no query named 'nope'"),
        ("namespaces: default\n", "namespaces: expected a list of namespace names, got str 'default'"),
        ("namespaces: [ok, Not_OK]\n", "namespaces[1]: 'Not_OK' is not a valid namespace name"),
        ("namespaces: [a, a]\n", "namespaces[1]: duplicate namespace 'a'"),
        ("leader_election: {lease_name: My_Lease}", "leader_election.lease_name: 'My_Lease' is not a valid Kubernetes"),
        ("leader_election:\n  lease_duration: forever\n", "leader_election.lease_duration: invalid duration 'forever'"),
        # Cross-key rules.
        ("loop:\n  history: 1d\n", "profiles.default.history: 2w is longer than the fetched loop.history (1d)"),
        ("profiles: {default: {horizon: 4m}}", "profiles.default.look_ahead: 5m reaches beyond the horizon (4m)"),
        ("loop:\n  step: 1h\nprofiles:\n  default:\n    horizon: 30m\n",
         "profiles.default.horizon: 30m is shorter than one loop.step (1h)"),
        ("loop:\n  step: 14d\n", "loop.step: 2w must be shorter than loop.history (2w)"),
    ],
)
def test_each_error_names_its_key_path(text: str, expected: str) -> None:
    errors = errors_of(text)
    assert any(e.startswith(expected) for e in errors), errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("loop:\n  intervl: 30s\n", "loop.intervl: unknown key (did you mean 'interval'?)"),
        ("profile:\n  default: {}\n", "profile: unknown key (did you mean 'profiles'?)"),
        ("profiles: {default: {horizn: 15m}}", "profiles.default.horizn: unknown key (did you mean 'horizon'?)"),
        ("profiles: {default: {quantile_level: 90}}", "profiles.default.quantile_level: unknown key"),
        ("prometheus:\n  queries:\n    q: 'up{ns=\"{namspace}\"}'\n", "(did you mean 'namespace'?)"),
        ("profiles: {default: {model: holtwinters}}", "(did you mean 'holt_winters'?)"),
    ],
)
def test_unknown_keys_and_values_suggest_the_close_match(text: str, expected: str) -> None:
    errors = errors_of(text)
    assert any(expected in e for e in errors), errors


def test_unknown_key_without_a_close_match_lists_the_allowed_ones() -> None:
    (error,) = errors_of("cold_start:\n  zzz: 1\n")
    assert error == "cold_start.zzz: unknown key; allowed: pod_startup, node_startup, percentile, min_samples"


def test_every_mistake_is_reported_at_once() -> None:
    errors = errors_of("loop:\n  interval: soon\nprofiles:\n  default:\n    quantile: 0\nextra: 1\n")
    assert {e.split(":")[0] for e in errors} == {"loop.interval", "profiles.default.quantile", "extra"}


def test_yaml_syntax_errors_and_duplicate_keys_give_a_position() -> None:
    (syntax,) = errors_of("loop: [\n")
    assert syntax.startswith("line 2, column 1: invalid YAML")
    (duplicate,) = errors_of("loop:\n  interval: 30s\n  interval: 1m\n")
    assert duplicate == "line 3, column 3: invalid YAML: duplicate key 'interval'"


def _laughs(levels: int, key: str = "namespaces") -> str:
    """A "billion laughs" document: each level repeats the one below ten times, the last under ``key``."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    lines.append(f"{key}: [*l{levels - 1}]")
    return "\n".join(lines) + "\n"


def test_aliases_that_expand_past_the_bound_are_refused_before_any_value_is_built() -> None:
    # 10**9 values if expanded: refused on the composed graph, so in a moment and with no memory to speak of
    (error,) = errors_of(_laughs(9))
    assert error.endswith(f"invalid YAML: aliases expand this document past {MAX_YAML_NODES:,} values (refused)")
    (recursive,) = errors_of("namespaces: &n [*n]\n")
    assert recursive.endswith("invalid YAML: a recursive alias (refused)")
    # sharing under the bound is ordinary YAML, and the same values as written out
    shared = parse_config_text("namespaces: &ns [serving, research]\nloop: {}\n")
    assert shared.namespaces == parse_config_text("namespaces: [serving, research]\n").namespaces


def test_every_error_is_cut_to_a_readable_length() -> None:
    # under the bound, but 10,000 values quoted back in the message about them
    errors = errors_of(_laughs(4))
    assert errors
    assert all(len(e) <= ERROR_CHARS for e in errors)
    assert any(e.startswith("namespaces") and e.endswith(" characters)") for e in errors)


def test_top_level_must_be_a_mapping() -> None:
    (error,) = errors_of("- loop\n")
    assert error.startswith("expected a mapping of sections")


def test_missing_file_is_reported_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_config(tmp_path / "nope.yaml")


def test_doubtful_but_legal_settings_are_warnings() -> None:
    cfg = parse_config_text(
        "profiles:\n  default:\n    horizon: 6m\n    look_ahead: 1m\n"
        "  hw:\n    model: holt_winters\n    history: 1d\n    horizon: 15m\n"
    )
    assert any(w.startswith("profiles.default.horizon: 6m is shorter than the cold-start priors") for w in cfg.warnings)
    assert any(w.startswith("profiles.hw.history: holt_winters needs two full daily seasons") for w in cfg.warnings)
    assert not any(w.startswith("profiles.hw.horizon") for w in cfg.warnings)  # 15m > 3m + 4m
    assert cfg.profile("hw").look_ahead_seconds == 60  # inherited from default, like every unset key


def test_query_overrides_merge_with_the_built_in_queries() -> None:
    builtin = Config().prometheus.queries
    assert dict(builtin) == dict(promql.DEFAULT_QUERIES)
    cfg = parse_config_text(
        "prometheus:\n  arrival_rate_query: tokens\n  queries:\n"
        "    tokens: 'sum by (namespace) (rate(vllm:prompt_tokens_total{namespace=~\"{namespaces}\"}[{window}]))'\n"
        "    queue_depth: 'sum(vllm:num_requests_waiting{namespace=\"{namespace}\"})'\n"
    )
    assert set(cfg.prometheus.queries) == {*builtin, "tokens"}
    assert cfg.prometheus.arrival_rate_template.startswith("sum by (namespace) (rate(vllm:prompt_tokens_total")
    assert cfg.prometheus.queries["queue_depth"] == 'sum(vllm:num_requests_waiting{namespace="{namespace}"})'
    assert cfg.prometheus.queries["completion_rate"] == builtin["completion_rate"]


def test_every_built_in_query_passes_the_config_check() -> None:
    for name, template in promql.DEFAULT_QUERIES.items():
        assert check_promql_template(template) is None, name


def test_promql_label_matchers_and_regex_counts_are_not_mistaken_for_placeholders() -> None:
    template = 'sum(rate(x{namespace="{namespace}", job=~"a|b", pod=~"p-[a-z]{5}"}[{window}])) by (pod)'
    assert check_promql_template(template) is None
    assert check_promql_template('up{namespace="{ns}"}') is not None


def test_model_names_match_the_registry_when_there_is_one() -> None:
    try:
        from models import registry  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        assert MODEL_NAMES == ("default", "persistence", "seasonal_naive", "holt_winters", "prophet")
    else:
        assert tuple(registry.MODEL_NAMES) == MODEL_NAMES


# ---------------------------------------------------------------------------------------------- round trip


durations = st.integers(min_value=1, max_value=4 * 604_800)
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # a Unicode category, typed as hypothesis wants it (a tuple: hashable)


@given(durations)
def test_format_duration_round_trips_through_parse_duration(seconds: int) -> None:
    text = format_duration(seconds)
    assert parse_duration(text) == seconds
    assert len(text) <= len(f"{seconds}s")


@settings(max_examples=40, deadline=None)
@given(
    horizon=st.integers(min_value=5, max_value=120).map(lambda m: m * 60),
    quantile=st.integers(min_value=1, max_value=99),
    warm_pool=st.one_of(st.just("auto"), st.integers(min_value=0, max_value=50)),
    pod=st.integers(min_value=1, max_value=3600),
    percentile=st.integers(min_value=1, max_value=100),
    namespaces=st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True), unique=True, max_size=4),
    alerts_auth=st.one_of(
        st.just({}),
        st.builds(lambda f: {"bearer_token_file": f}, st.from_regex(r"/[a-z0-9/._-]{1,30}", fullmatch=True)),
        st.builds(lambda u, f: {"basic_auth": {"username": u, "password_file": f}},
                  st.text(st.characters(blacklist_characters=":", blacklist_categories=SURROGATES), min_size=1,
                          max_size=12).filter(str.strip),
                  st.from_regex(r"/[a-z0-9/._-]{1,30}", fullmatch=True)),
    ),
    alerts_timeout=st.one_of(st.none(), durations),
    ca_file=st.one_of(st.none(), st.from_regex(r"/[a-z0-9/._-]{1,30}", fullmatch=True)),
)
def test_any_valid_config_survives_a_yaml_round_trip(
    horizon: int, quantile: int, warm_pool: int | str, pod: int, percentile: int, namespaces: list[str],
    alerts_auth: dict[str, object], alerts_timeout: int | None, ca_file: str | None,
) -> None:
    data = Config().to_dict()
    data["alerts"].update(alerts_auth, timeout=alerts_timeout, ca_file=ca_file)
    # warm_pool_quantile must be >= quantile in both profiles ("other" inherits it).
    data["profiles"]["default"].update(horizon=format_duration(horizon), quantile=quantile, warm_pool=warm_pool,
                                       warm_pool_quantile=99)
    data["profiles"]["other"] = {"quantile": 100 - quantile, "look_ahead": format_duration(min(horizon, 120))}
    data["cold_start"].update(pod_startup=pod, percentile=percentile)
    data["namespaces"] = namespaces
    cfg = parse_config(data)
    assert cfg.profile("default").quantile == quantile
    assert cfg.profile("other").horizon_seconds == horizon
    assert cfg.profile("default").warm_pool == warm_pool
    assert (cfg.alerts.timeout_seconds, cfg.alerts.ca_file) == (alerts_timeout, ca_file)
    assert (cfg.alerts.basic_auth is None) == ("basic_auth" not in alerts_auth)
    assert parse_config_text(yaml.safe_dump(cfg.to_dict())) == cfg


# ---------------------------------------------------------------------------------------------- reload


def write(path: Path, text: str) -> None:
    """Replace a file the way editors and `kubectl cp` do: write a sibling, then rename over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_reload_picks_up_a_change(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    write(path, "profiles:\n  default:\n    horizon: 15m\n")
    store = ConfigStore(path)
    assert store.current().profile("default").horizon_seconds == 900
    assert store.maybe_reload() is False  # unchanged
    write(path, "profiles:\n  default:\n    horizon: 30m\n")
    assert store.maybe_reload() is True
    assert store.current().profile("default").horizon_seconds == 1800
    assert store.generation == 2
    assert store.maybe_reload() is False


def test_in_place_same_size_edit_is_detected(tmp_path: Path) -> None:
    """Same inode, same size, mtime forced back: only the content hash can tell."""
    path = tmp_path / "config.yaml"
    path.write_text("loop:\n  interval: 30s\n")
    before = path.stat()
    store = ConfigStore(path)
    with path.open("r+") as fh:
        fh.write("loop:\n  interval: 40s\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_ino == before.st_ino
    assert store.maybe_reload() is True
    assert store.current().loop.interval_seconds == 40


def test_comment_only_edit_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    write(path, "loop:\n  interval: 30s\n")
    store = ConfigStore(path)
    write(path, "# tuned on Monday\nloop:\n  interval: 30s\n")
    assert store.maybe_reload() is False
    assert store.generation == 1


def test_broken_edit_keeps_the_last_good_config_and_reports_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    write(path, "profiles:\n  default:\n    horizon: 20m\n")
    reported: list[ConfigError] = []
    store = ConfigStore(path, on_error=reported.append)
    good = store.current()

    write(path, "profiles:\n  default:\n    horizon: soon\n")
    with caplog.at_level(logging.ERROR, logger="autoscaler.config"):
        assert store.maybe_reload() is False
        assert store.maybe_reload() is False  # same broken content: not reported again
    assert store.current() is good
    assert store.last_error is not None
    assert "profiles.default.horizon: invalid duration 'soon'" in str(store.last_error)
    assert [str(e) for e in reported] == [str(store.last_error)]
    assert store.reload_failures == 1
    assert sum("keeping the last good one" in r.getMessage() for r in caplog.records) == 1

    write(path, "profiles: [\n")  # a different mistake is reported
    assert store.maybe_reload() is False
    assert len(reported) == 2
    assert "invalid YAML" in str(store.last_error)

    write(path, "profiles:\n  default:\n    horizon: 25m\n")  # fixed
    assert store.maybe_reload() is True
    assert cast("ConfigError | None", store.last_error) is None  # cast: mypy keeps the narrowing above across calls
    assert store.current().profile("default").horizon_seconds == 1500


def test_deleted_file_keeps_the_last_good_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    write(path, "loop:\n  interval: 1m\n")
    store = ConfigStore(path)
    path.unlink()
    assert store.maybe_reload() is False
    assert store.current().loop.interval_seconds == 60
    assert "no such file" in str(store.last_error)
    write(path, "loop:\n  interval: 1m\n")  # restored unchanged: the error clears, nothing reloads
    assert store.maybe_reload() is False
    assert store.last_error is None


def test_first_load_must_succeed(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    write(path, "loop:\n  interval: soon\n")
    with pytest.raises(ConfigError, match=r"loop\.interval: invalid duration"):
        ConfigStore(path)


def configmap_swap(mount: Path, version: str, text: str) -> None:
    """Do what the kubelet's atomic writer does: new timestamped dir, then rename a new ``..data`` link over the old."""
    target = mount / f"..{version}"
    target.mkdir()
    (target / CONFIGMAP_KEY).write_text(text)
    os.symlink(target.name, mount / "..data_tmp")
    os.replace(mount / "..data_tmp", mount / "..data")
    if not (mount / CONFIGMAP_KEY).is_symlink():
        os.symlink(f"..data/{CONFIGMAP_KEY}", mount / CONFIGMAP_KEY)


@pytest.mark.parametrize("point_at", ["directory", "file"])
def test_configmap_symlink_swap_is_detected(tmp_path: Path, point_at: str) -> None:
    mount = tmp_path / "etc-predictive-autoscaler"
    mount.mkdir()
    configmap_swap(mount, "2026_01_01_00_00_00.1", "profiles:\n  default:\n    quantile: 90\n")
    store = ConfigStore(mount if point_at == "directory" else mount / CONFIGMAP_KEY)
    assert store.current().profile("default").quantile == 90

    # The new version is written with an *older* mtime: a swap must not depend on mtimes increasing.
    configmap_swap(mount, "2026_01_01_00_05_00.2", "profiles:\n  default:\n    quantile: 95\n")
    old = mount / "..2026_01_01_00_00_00.1" / CONFIGMAP_KEY
    os.utime(mount / "..2026_01_01_00_05_00.2" / CONFIGMAP_KEY, ns=(0, old.stat().st_mtime_ns - 10**9))
    assert store.maybe_reload() is True
    assert store.current().profile("default").quantile == 95

    configmap_swap(mount, "2026_01_01_00_10_00.3", "profiles:\n  default:\n    quantile: 990\n")
    assert store.maybe_reload() is False
    assert store.current().profile("default").quantile == 95
    assert "profiles.default.quantile: must be between 1 and 99, got 990" in str(store.last_error)


# ---------------------------------------------------------------------------------------------- pricing, ceilings


def test_pricing_and_ceilings_parse_into_the_domain_values() -> None:
    from autoscaler.domain.cost import DEFAULT_KEEP_ORDER, KeepClass

    cfg = parse_config_text(
        "pricing:\n  default_gpu_hour: 3\n  capacity_type: spot\n"
        "  instance_types:\n    my.gpu8: {gpus: 8, on_demand: 20, spot: 7.5}\n"
        "  gpu_types:\n    h100: {on_demand: 6.5}\n"
        "  nodepools:\n    gpu-a: {instance_type: my.gpu8}\n    gpu-b: {gpus_per_node: 4, gpu_hour: 2}\n"
        "ceilings:\n  cluster: 500\n  teams: {ml: 120.5}\n  keep_order: [inference>=critical, '*']\n"
    )
    pricing = cfg.pricing
    assert (pricing.default_gpu_hour, pricing.capacity_type) == (3.0, "spot")
    assert pricing.instance_types["my.gpu8"].gpu_hour("spot") == 7.5 / 8
    assert "p4d.24xlarge" in pricing.instance_types  # added to the built-in table, not replacing it
    assert pricing.gpu_types["h100"].gpu_hour("spot") == 6.5  # no spot price: on-demand
    assert pricing.nodepools["gpu-a"].instance_type == "my.gpu8"
    assert (pricing.nodepools["gpu-b"].gpus_per_node, pricing.nodepools["gpu-b"].gpu_hour) == (4, 2.0)
    assert (cfg.ceilings.cluster, dict(cfg.ceilings.teams)) == (500.0, {"ml": 120.5})
    assert cfg.ceilings.keep_order == (KeepClass("inference", 1000), KeepClass("*"))
    assert Config().ceilings.keep_order == DEFAULT_KEEP_ORDER
    assert Config().ceilings.cluster is None
    assert parse_config_text(yaml.safe_dump(cfg.to_dict())) == cfg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pricing: {default_gpu_hour: -1}", "pricing.default_gpu_hour: expected a number of dollars per hour >= 0"),
        ("pricing: {capacity_type: reserved}", "pricing.capacity_type: expected on-demand or spot"),
        ("pricing: {instance_types: {x: {gpus: 0, on_demand: 1}}}", "pricing.instance_types.x.gpus: must be >= 1"),
        ("pricing: {instance_types: {x: {gpus: 8}}}", "pricing.instance_types.x.on_demand: required"),
        ("pricing: {instance_types: {x: {on_demand: 2}}}", "pricing.instance_types.x.gpus: required"),
        ("pricing: {instance_types: {x: {gpus: 8, on_demand: 2, spt: 1}}}",
         "pricing.instance_types.x.spt: unknown key (did you mean 'spot'?)"),
        ("pricing: {instance_types: {x: 3}}", "pricing.instance_types.x: expected a mapping"),
        ("pricing: {gpu_types: {h100: {on_demand: cheap}}}", "pricing.gpu_types.h100.on_demand: expected a number"),
        ("pricing: {nodepools: {gpu: {instance_type: p4d.24xlarg}}}",
         "pricing.nodepools.gpu.instance_type: unknown instance type 'p4d.24xlarg' (did you mean 'p4d.24xlarge'?)"),
        ("pricing: {nodepools: {Bad_Pool: {}}}", "pricing.nodepools.Bad_Pool: not a valid NodePool name"),
        ("pricing: {nodepools: {gpu: {gpus_per_node: 0}}}", "pricing.nodepools.gpu.gpus_per_node: must be >= 1"),
        ("ceilings: {cluster: lots}", "ceilings.cluster: expected a number of dollars per hour >= 0 or null"),
        ("ceilings: {teams: [ml]}", "ceilings.teams: expected a mapping of team names"),
        ("ceilings: {teams: {ml: -5}}", "ceilings.teams.ml: expected a number of dollars per hour >= 0"),
        ("ceilings: {keep_order: []}", "ceilings.keep_order: expected a non-empty list"),
        ("ceilings: {keep_order: [inference, gpus]}", "ceilings.keep_order[1]: unknown kind 'gpus'"),
        ("ceilings: {keep_order: [warm_pool, warm_pool]}", "ceilings.keep_order[1]: duplicate entry 'warm_pool'"),
        ("ceilings: {keep_order: ['inference>=vip']}", "ceilings.keep_order[0]: unknown priority tier 'vip'"),
        ("ceilings: {budget: 5}", "ceilings.budget: unknown key"),
    ],
)
def test_pricing_and_ceiling_errors_name_their_key_path(text: str, expected: str) -> None:
    errors = errors_of(text)
    assert any(e.startswith(expected) for e in errors), errors


# ---------------------------------------------------------------------------------------------- alerts, karpenter


def test_alerts_and_karpenter_sections_parse_and_default() -> None:
    from autoscaler.config.schema import AlertsConfig, KarpenterConfig

    assert Config().alerts == AlertsConfig(alertmanager_url=None, cluster="default", expire_after_seconds=120)
    assert Config().karpenter == KarpenterConfig(enabled=True, headroom="auto", namespace="predictive-autoscaler")
    cfg = parse_config_text(
        "alerts:\n  alertmanager_url: http://alertmanager.monitoring.svc:9093\n  cluster: prod-eu-1\n"
        "  expire_after: 5m\nkarpenter:\n  headroom: off\n  namespace: ops\n"
    )
    assert cfg.alerts == AlertsConfig("http://alertmanager.monitoring.svc:9093", "prod-eu-1", 300)
    assert cfg.karpenter == KarpenterConfig(enabled=True, headroom="off", namespace="ops")  # bare YAML `off`
    assert parse_config_text(yaml.safe_dump(cfg.to_dict())) == cfg
    # the headroom's quantile: the pools' strictest objective unless the operator sets one (a cost knob)
    assert Config().karpenter.headroom_quantile is None
    knob = parse_config_text("karpenter:\n  headroom_quantile: 0.9\n")
    assert knob.karpenter.headroom_quantile == 0.9
    assert parse_config_text(yaml.safe_dump(knob.to_dict())) == knob
    # the replays' worker processes: none unless the operator gives the pod the cores
    assert Config().loop.replay_workers == 0
    workers = parse_config_text("loop:\n  replay_workers: 4\n")
    assert workers.loop.replay_workers == 4
    assert parse_config_text(yaml.safe_dump(workers.to_dict())) == workers


def test_alerts_tls_and_credentials_parse_and_round_trip() -> None:
    from autoscaler.config.schema import BasicAuthConfig

    assert (Config().alerts.bearer_token_file, Config().alerts.ca_file) == (None, None)
    assert (Config().alerts.basic_auth, Config().alerts.timeout_seconds) == (None, None)
    cfg = parse_config_text(
        "alerts:\n  alertmanager_url: https://alertmanager.monitoring.svc:9093\n"
        "  ca_file: /etc/alertmanager-ca/ca.crt\n  timeout: 5s\n"
        "  basic_auth: {username: autoscaler, password_file: /etc/alertmanager-auth/password}\n"
    )
    assert cfg.alerts.ca_file == "/etc/alertmanager-ca/ca.crt"
    assert cfg.alerts.basic_auth == BasicAuthConfig("autoscaler", "/etc/alertmanager-auth/password")
    assert (cfg.alerts.bearer_token_file, cfg.alerts.timeout_seconds) == (None, 5)
    assert cfg.warnings == ()
    assert cfg.to_dict()["alerts"]["basic_auth"] == {"username": "autoscaler",
                                                     "password_file": "/etc/alertmanager-auth/password"}
    assert parse_config_text(yaml.safe_dump(cfg.to_dict())) == cfg
    token = parse_config_text("alerts: {bearer_token_file: /var/run/secrets/tokens/am, basic_auth: null}")
    assert (token.alerts.bearer_token_file, token.alerts.basic_auth) == ("/var/run/secrets/tokens/am", None)


def test_alerts_credentials_or_a_ca_over_plain_http_are_warned_about() -> None:
    cfg = parse_config_text("alerts: {alertmanager_url: 'http://am:9093', ca_file: /ca.pem, bearer_token_file: /t}")
    assert cfg.warnings == (
        "alerts.ca_file: has no effect, alerts.alertmanager_url is http:// (not https://)",
        "alerts.alertmanager_url: credentials are sent unencrypted over http://; use https://",
    )
    assert parse_config_text("alerts: {alertmanager_url: 'https://am:9093', ca_file: /ca.pem}").warnings == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alerts: {alertmanager_url: alertmanager:9093}", "alerts.alertmanager_url: expected an http:// or https://"),
        ("alerts: {cluster: 'prod eu'}", "alerts.cluster: 'prod eu' is not a usable cluster name"),
        ("alerts: {expire_after: soon}", "alerts.expire_after: invalid duration"),
        ("alerts: {alertmanager_url: 'http://am:9093', expire_after: 30s}",
         "alerts.expire_after: 30s must be longer than loop.interval (30s)"),
        ("alerts: {url: 'http://am:9093'}", "alerts.url: unknown key"),
        ("alerts: {bearer_token_file: /t, basic_auth: {username: u, password_file: /p}}",
         "alerts.basic_auth: give bearer_token_file or basic_auth, not both"),
        ("alerts: {basic_auth: {username: u}}", "alerts.basic_auth.password_file: required when basic_auth is set"),
        ("alerts: {basic_auth: {password_file: /p}}", "alerts.basic_auth.username: required when basic_auth is set"),
        ("alerts: {basic_auth: {username: u, password: hunter2}}",
         "alerts.basic_auth.password: unknown key (did you mean 'password_file'?)"),
        ("alerts: {basic_auth: {username: 'a:b', password_file: /p}}",
         "alerts.basic_auth.username: 'a:b' contains ':'"),
        ("alerts: {basic_auth: {username: u, password_file: 7}}",
         "alerts.basic_auth.password_file: expected a file path or null"),
        ("alerts: {basic_auth: oncall}", "alerts.basic_auth: expected a mapping"),
        ("alerts: {ca_file: ''}", "alerts.ca_file: expected a file path or null"),
        ("alerts: {bearer_token_file: [a]}", "alerts.bearer_token_file: expected a file path or null"),
        ("alerts: {timeout: 0}", "alerts.timeout: invalid duration '0': must be positive"),
        ("alerts: {timeout: soon}", "alerts.timeout: invalid duration"),
        ("karpenter: {headroom: buffers}",
         "karpenter.headroom: expected one of auto, capacitybuffer, placeholder, off"),
        ("karpenter: {enabled: maybe}", "karpenter.enabled: expected true or false"),
        ("karpenter: {namespace: Ops_NS}", "karpenter.namespace: 'Ops_NS' is not a valid Kubernetes name"),
        ("karpenter: {headroom_quantile: 1}", "karpenter.headroom_quantile: expected a share in [0.5, 1)"),
        ("karpenter: {headroom_quantile: 95%}", "karpenter.headroom_quantile: expected a share in [0.5, 1)"),
        ("karpenter: {headroom_quantile: true}", "karpenter.headroom_quantile: expected a share in [0.5, 1)"),
        ("loop: {replay_workers: -1}", "loop.replay_workers: must be between 0 and 64, got -1"),
        ("loop: {replay_workers: 100}", "loop.replay_workers: must be between 0 and 64, got 100"),
        ("loop: {replay_workers: two}", "loop.replay_workers: expected an integer between 0 and 64"),
    ],
)
def test_alerts_and_karpenter_errors_name_their_key_path(text: str, expected: str) -> None:
    errors = errors_of(text)
    assert any(e.startswith(expected) for e in errors), errors


def test_a_profiles_objective_and_self_tuning_keys() -> None:
    default = parse_config_text("{}").profile("default")
    assert (default.slo_wait_seconds, default.slo_attainment, default.self_tune) == (2, 0.99, True)
    assert default.tune_quantiles == (80, 90, 95, 99)
    assert (default.reactive_utilisation, default.tune_utilisations) == (1.0, (0.85, 0.75, 0.65))
    cfg = parse_config_text("profiles:\n  default:\n    slo_wait: 5s\n    slo_attainment: 99.9\n"
                            "    self_tune: false\n    tune_quantiles: [99, 90, 90]\n    reactive_utilisation: 0.8\n"
                            "    tune_utilisations: [0.7, 0.9]\n")
    p = cfg.profile("default")
    # object: mypy's strict equality does not see pytest.approx's __eq__ inside a tuple
    read: tuple[object, ...] = (p.slo_wait_seconds, p.slo_attainment, p.self_tune, p.tune_quantiles)
    assert read == (5, pytest.approx(0.999), False, (90, 99))
    assert (p.reactive_utilisation, p.tune_utilisations) == (0.8, (0.9, 0.7))
    assert p.scaling_policy(1.0, 1, 5).reactive_utilisation == 0.8
    # round trip through the file's own spelling
    assert parse_config(cfg.to_dict(), "again").profile("default") == p


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slo_wait: 0s", "profiles.default.slo_wait: invalid duration '0s': must be positive"),
        ("slo_attainment: 0.99", "did you mean 99?"),
        ("slo_attainment: 100", "expected a percentage in [1, 100)"),
        ("self_tune: yes please", "profiles.default.self_tune: expected true or false"),
        ("tune_quantiles: []", "profiles.default.tune_quantiles: expected a non-empty list"),
        ("tune_quantiles: [90, 100]", "integers between 1 and 99"),
        ("reactive_utilisation: 0", "profiles.default.reactive_utilisation: expected a utilisation in (0, 1]"),
        ("tune_utilisations: [0.8, 1.2]", "profiles.default.tune_utilisations: expected a list of utilisations"),
    ],
)
def test_bad_objective_and_self_tuning_keys_name_their_path(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text(f"profiles:\n  default:\n    {text}\n")
    assert any(message in e for e in info.value.errors), info.value.errors


def test_a_profiles_token_weights() -> None:
    from autoscaler.domain.demand import TokenWeights

    assert parse_config_text("{}").profile("default").token_weights == TokenWeights(1.0, 1.0)
    cfg = parse_config_text("profiles:\n  default:\n    token_weights: {input: 0.25}\n"
                            "  long:\n    token_weights: {output: 3}\n")
    assert cfg.profile("default").token_weights == TokenWeights(0.25, 1.0)
    assert cfg.profile("long").token_weights == TokenWeights(0.25, 3.0)  # inherits input from default
    assert parse_config(cfg.to_dict(), "again") == cfg


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("token_weights: 1", "profiles.default.token_weights: expected a mapping with input and/or output"),
        ("token_weights: {prompt: 1}", "profiles.default.token_weights: expected a mapping with input and/or output"),
        ("token_weights: {input: -1}", "profiles.default.token_weights: token weight input must be a finite number"),
        ("token_weights: {input: 0, output: 0}", "input and output cannot both be 0"),
        ("token_weights: {output: yes}", "token weight output must be a finite number >= 0"),
    ],
)
def test_bad_token_weights_name_their_path(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text(f"profiles:\n  default:\n    {text}\n")
    assert any(message in e for e in info.value.errors), info.value.errors
