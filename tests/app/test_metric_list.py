"""The metric list of the whole system, read from the registry once the components' metrics modules are imported."""

from __future__ import annotations

from vcascade.app.metric_list import exported_families


def test_every_component_declares_its_families_when_its_metrics_module_is_imported():
    families = exported_families()
    prefixes = {name.split("_")[1] for name in families if name.startswith("vcascade_")}
    assert prefixes == {"edge", "broker", "worker", "stage", "build", "identity", "http", "history"}  # identity: the workers' identity space; http: every process's HTTP endpoints; history: the edges' history store
    for component in ("edge", "broker", "worker"):  # declared before the first refused handshake
        assert families[f"vcascade_{component}_auth_failures_total"].labels == (component, "reason")
