"""Component settings: each process gets its own section and what it uses of the rest, built from the file by
name; an unknown name is a KeyError naming the ones there are."""

from pathlib import Path

import pytest
import yaml

from vcascade.app.components import COMPONENT_KINDS
from vcascade.core.config import Deployment, load_config
from vcascade.core.schema import BrokerSettings, StageGroupSettings, WorkerSettings

DEMO = Path(__file__).resolve().parents[3] / "configs" / "demo.yaml"


def _split_demo() -> Deployment:
    """The demo with a second broker that only worker-2 uses, and worker-1's recognizer split: 1 stage local,
    2 in stage group ``tail``."""
    raw = yaml.safe_load(DEMO.read_text())
    raw["brokers"]["broker-2"] = {**raw["brokers"]["broker-1"], "frontend_port": 5655, "backend_port": 5656,
                                  "metrics_port": 9112}  # fmt: skip
    raw["workers"]["worker-2"]["brokers"] = ["broker-1", "broker-2"]
    raw["recognizers"]["mobilenetv2-embedder"]["split_points"] = ["features.6", "features.12"]
    raw["workers"]["worker-1"].update(devices=["cpu"], downstream="tail")
    raw["stage_groups"] = {"tail": {"devices": ["cpu", "cpu"], "port": 5660, "metrics_port": 9113}}
    return Deployment.model_validate(raw)


def test_a_broker_gets_its_section_and_the_names_it_admits():
    dep = _split_demo()
    settings = BrokerSettings.from_deployment(dep, "broker-2")
    assert settings.broker == dep.brokers["broker-2"] and settings.name == "broker-2"
    assert settings.edges == () and settings.workers == ("worker-2",)
    assert BrokerSettings.from_deployment(dep, "broker-1").edges == ("edge-1",)
    assert settings.worker_timeout_s == dep.heartbeat.liveness * dep.heartbeat.interval_s
    assert set(BrokerSettings.model_fields) == {"name", "broker", "security", "heartbeat", "metrics", "edges", "workers"}


def test_a_worker_gets_its_recognizer_its_brokers_endpoints_and_its_stage_group():
    dep = _split_demo()
    two = WorkerSettings.from_deployment(dep, "worker-2")
    assert two.recognizer == dep.recognizers["ppocr-text"] and two.downstream is None
    assert two.broker_endpoints == (dep.brokers["broker-1"].endpoint("backend"),
                                    dep.brokers["broker-2"].endpoint("backend"))  # fmt: skip
    one = WorkerSettings.from_deployment(dep, "worker-1")
    assert one.downstream == dep.stage_groups["tail"] and one.recognizer == dep.recognizers["mobilenetv2-embedder"]


def test_a_stage_group_gets_its_recognizer_and_first_stage_from_its_workers():
    dep = _split_demo()
    tail = StageGroupSettings.from_deployment(dep, "tail")
    assert (tail.recognizer_name, tail.first_stage, tail.workers) == ("mobilenetv2-embedder", 1, ("worker-1",))
    assert tail.recognizer == dep.recognizers["mobilenetv2-embedder"] and tail.group == dep.stage_groups["tail"]


@pytest.mark.parametrize("settings", [BrokerSettings, WorkerSettings, StageGroupSettings])
def test_an_unknown_name_is_a_key_error_naming_the_known_ones(settings):
    with pytest.raises(KeyError, match="no .* named 'nobody' \\(have: "):
        settings.from_deployment(load_config(DEMO), "nobody")


def test_every_kind_with_settings_builds_them_for_each_entry_of_its_section():
    dep = _split_demo()
    for kind in COMPONENT_KINDS.values():
        for name in getattr(dep, kind.section) if kind.settings is not None else ():
            assert kind.settings.from_deployment(dep, name).name == name
