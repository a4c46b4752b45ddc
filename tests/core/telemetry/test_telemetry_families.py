"""The metric list read back from a Prometheus registry (:func:`vcascade.core.telemetry.metrics.metric_families`): what
a registry declares, with or without series, and the series names that belong to a family."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vcascade.core.telemetry.metrics import MetricFamily, family_of, metric_families


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("vcascade_t_rois_total", "ROIs.", ["edge", "camera"], registry=registry)  # no series yet
    Gauge("vcascade_t_up", "Up.", registry=registry).set(1)
    Histogram("vcascade_t_wait_seconds", "Wait, s.", ["hop"], registry=registry).labels("a").observe(0.1)
    Counter("other_app_total", "Not ours.", registry=registry).inc()
    ProcessCollector(registry=registry)
    return registry


def test_families_are_listed_from_their_declaration_with_exposed_names_and_labels():
    families = metric_families(_registry())
    assert families["vcascade_t_rois_total"] == MetricFamily("vcascade_t_rois_total", "counter", "ROIs.", ("edge", "camera"))
    assert families["vcascade_t_up"] == MetricFamily("vcascade_t_up", "gauge", "Up.", ())
    assert families["vcascade_t_wait_seconds"] == MetricFamily("vcascade_t_wait_seconds", "histogram", "Wait, s.", ("hop",))
    assert families["process_cpu_seconds_total"].kind == "counter"
    assert "other_app_total" not in families and list(families) == sorted(families)


def test_listed_names_are_the_families_of_the_exposition():
    registry = _registry()
    families = metric_families(registry)
    exposed = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    # the parser names counters without _total; a declared family without series is still announced (# TYPE)
    assert {name.removesuffix("_total") for name in families} <= exposed


def test_series_names_map_to_their_family():
    families = metric_families(_registry())
    assert family_of("vcascade_t_wait_seconds_bucket", families) == "vcascade_t_wait_seconds"
    assert family_of("vcascade_t_wait_seconds_count", families) == "vcascade_t_wait_seconds"
    assert family_of("vcascade_t_rois_total", families) == "vcascade_t_rois_total"
    assert family_of("vcascade_t_up_bucket", families) is None  # a gauge has no buckets
    assert family_of("vcascade_t_nothing", families) is None

