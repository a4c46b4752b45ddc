"""The Kubernetes manifests (deploy/k8s) render and validate offline against the Kubernetes schemas
(``kubernetes-validate``), and agree with the deployment file they carry: ports, probes, scrape annotations,
GPU requests, the HPA's queue-depth metric, the CurveZMQ keys each pod needs, and the workers' shared, persistent
Redis identity store that only they reach.

The manifests are rendered by a small kustomize renderer (tests/deploy/kustomize.py; no kubectl here) from a
copy of deploy/k8s in which ``vcascade keys generate`` has made the key files the secret generators read.
"""

from __future__ import annotations

import base64
import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from tests.deploy.identity_store import assert_persistent_redis, redis_stores
from tests.deploy.stopping import drain_bound_s
from vcascade.broker import metrics as broker_metrics
from vcascade.core.config import Deployment, load_config
from vcascade.core.transport.keys import component_names, generate_keys
from vcascade.core.transport.security import check_keys

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (test extras)")

REPO = Path(__file__).resolve().parents[2]
UI_TOKEN = "k8s-test-token-0123456789"
"""What Secret vcascade-ui would hold (``${VCASCADE_UI_TOKEN}`` of the deployment file)."""
METRICS_TOKEN = "k8s-metrics-token-0123456789"
"""What Secret vcascade-metrics would hold (``${VCASCADE_METRICS_TOKEN}``)."""
UI = "vcascade-ui"
"""The live view's Deployment: no CurveZMQ keys (it speaks HTTP only), nothing to drain."""
REDIS = "vcascade-redis"
"""The identity store's Deployment (redis.yaml): the official Redis image, no vcascade component."""
WORKER = "vcascade-worker-1"
K8S_VERSION = "1.30.0"
"""Kubernetes release whose schemas the manifests must satisfy (autoscaling/v2 is GA since 1.23)."""
_spec = importlib.util.spec_from_file_location("kustomize", Path(__file__).with_name("kustomize.py"))
kustomize = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kustomize)


@pytest.fixture(scope="module")
def k8s_copy(tmp_path_factory) -> Path:
    """deploy/k8s copied, with the key files of every component of the base deployment generated."""
    root = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(REPO / "deploy" / "k8s", root, ignore=shutil.ignore_patterns("keys"))
    dep = _load(root / "base" / "vcascade.yaml")
    generate_keys(root / "base" / "keys", component_names(dep))
    return root


def _load(path: Path) -> Deployment:
    """The deployment file as its pods load it, with the view's token in the environment."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VCASCADE_UI_TOKEN", UI_TOKEN)
        env.setenv("VCASCADE_METRICS_TOKEN", METRICS_TOKEN)
        return load_config(path)


def _components(objects: list[dict]) -> list[dict]:
    """The Deployments that run a component of the deployment file (every one but the live view's and Redis's)."""
    return [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] not in (UI, REDIS)]


def _render(k8s_copy: Path, variant: str) -> list[dict]:
    return kustomize.build(k8s_copy / variant)


def _one(objects: list[dict], kind: str, name: str) -> dict:
    (obj,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _deployment_file(objects: list[dict], tmp_path: Path) -> Deployment:
    text = _one(objects, "ConfigMap", "vcascade-config")["data"]["vcascade.yaml"]
    (tmp_path / "vcascade.yaml").write_text(text)
    return _load(tmp_path / "vcascade.yaml")


@pytest.mark.parametrize("variant", ["base", "overlays/cpu"])
def test_every_rendered_object_validates_against_the_kubernetes_schema(k8s_copy, variant):
    objects = _render(k8s_copy, variant)
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == [
        "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "NetworkPolicy", "PersistentVolumeClaim", "Secret",
        "Service",
    ]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)  # raises ValidationError with the path


def test_a_broken_manifest_is_refused_by_the_validator(k8s_copy):
    deployment = _one(_render(k8s_copy, "base"), "Deployment", "vcascade-broker-1")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = [9102]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


@pytest.mark.parametrize("variant", ["base", "overlays/cpu"])
def test_pods_run_the_components_of_their_deployment_file(k8s_copy, variant, tmp_path):
    objects = _render(k8s_copy, variant)
    dep = _deployment_file(objects, tmp_path)
    ports = {
        **{f"vcascade-edge-{n[5:]}": (e.metrics_port, "edge", n) for n, e in dep.edges.items()},
        **{f"vcascade-broker-{n[7:]}": (b.metrics_port, "broker", n) for n, b in dep.brokers.items()},
        **{f"vcascade-worker-{n[7:]}": (w.metrics_port, "worker", n) for n, w in dep.workers.items()},
    }
    deployments = {o["metadata"]["name"]: o for o in _components(objects)}
    assert sorted(deployments) == sorted(ports)
    for name, (metrics_port, kind, component) in ports.items():
        pod = deployments[name]["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert container["args"] == [kind, "--config", "/etc/vcascade/vcascade.yaml", "--name", component]
        assert pod["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port), "prometheus.io/path": "/metrics"
        }
        by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert by_name["metrics"] == metrics_port
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    edge = dep.edges["edge-1"]
    edge_ports = {p["name"]: p["containerPort"] for p in deployments["vcascade-edge-1"]["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert edge_ports["control"] == edge.control_port and edge.host == "vcascade-edge-1"
    broker = dep.brokers["broker-1"]
    policy = _one(objects, "NetworkPolicy", "vcascade-broker")["spec"]["ingress"]
    assert [rule["ports"][0]["port"] for rule in policy] == [broker.frontend_port, broker.backend_port, broker.metrics_port]
    service = _one(objects, "Service", broker.host)
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "frontend": broker.frontend_port, "backend": broker.backend_port, "metrics": broker.metrics_port
    }


def test_workers_request_a_gpu_in_the_base_and_none_in_the_cpu_overlay(k8s_copy, tmp_path):
    for variant, gpus in (("base", 1), ("overlays/cpu", 0)):
        objects = _render(k8s_copy, variant)
        pod = _one(objects, "Deployment", "vcascade-worker-1")["spec"]["template"]["spec"]
        resources = pod["containers"][0]["resources"]
        assert resources["limits"].get("nvidia.com/gpu", 0) == gpus, variant
        devices = _deployment_file(objects, tmp_path).workers["worker-1"].devices
        assert all(d.startswith("cuda") for d in devices) if gpus else devices == ["cpu", "cpu"]
        image = "ghcr.io/vcascade/vcascade-cuda" if gpus else "ghcr.io/vcascade/vcascade-center"
        assert pod["containers"][0]["image"].startswith(image)


def test_the_autoscaler_follows_the_brokers_queue_depth_metric(k8s_copy):
    objects = _render(k8s_copy, "base")
    hpa = _one(objects, "HorizontalPodAutoscaler", "vcascade-worker-1")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == "vcascade-worker-1"
    (metric,) = hpa["spec"]["metrics"]
    gauge_name = broker_metrics.QUEUE_DEPTH._name  # the series the broker really exports
    assert metric["external"]["metric"]["name"] == gauge_name == "vcascade_broker_queue_depth"
    rules = yaml.safe_load((REPO / "deploy" / "k8s" / "prometheus-adapter-rules.yaml").read_text())
    assert gauge_name in rules["rules"]["external"][0]["seriesQuery"]


def test_each_pod_gets_exactly_the_curve_keys_its_component_needs(k8s_copy, tmp_path):
    objects = _render(k8s_copy, "base")
    dep = _deployment_file(objects, tmp_path)
    assert dep.security.curve.enabled
    for deployment in _components(objects):
        pod = deployment["spec"]["template"]["spec"]
        component = pod["containers"][0]["args"][-1]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "keys"]
        secret = _one(objects, "Secret", volume["secret"]["secretName"])
        mounted = tmp_path / component
        mounted.mkdir()
        for file, data in secret["data"].items():
            (mounted / file).write_bytes(base64.b64decode(data))
        secrets = sorted(f for f in secret["data"] if f.endswith(".key_secret"))
        assert secrets == [f"{component}.key_secret"]  # a pod never holds another component's secret key
        here = dep.model_copy(update={"security": dep.security.model_copy(
            update={"curve": dep.security.curve.model_copy(update={"keys_dir": str(mounted)})})})
        check_keys(here, component)  # raises SecurityError naming a missing file


@pytest.mark.parametrize("variant", ["base", "overlays/cpu"])
def test_every_pod_is_given_longer_to_stop_than_its_component_drains(k8s_copy, variant, tmp_path):
    """Kubernetes sends SIGTERM, then SIGKILL after terminationGracePeriodSeconds: a component must be able to
    drain in between (docs/RELIABILITY.md, "Stopping")."""
    objects = _render(k8s_copy, variant)
    dep = _deployment_file(objects, tmp_path)
    for deployment in _components(objects):
        pod = deployment["spec"]["template"]["spec"]
        kind, *_, name = pod["containers"][0]["args"]
        bound_s = drain_bound_s(dep, kind, name)
        assert pod["terminationGracePeriodSeconds"] >= bound_s, (deployment["metadata"]["name"], bound_s)


@pytest.mark.parametrize("variant", ["base", "overlays/cpu"])
def test_only_the_live_view_reaches_the_edges_previews_and_both_need_the_token(k8s_copy, variant, tmp_path):
    objects = _render(k8s_copy, variant)
    dep = _deployment_file(objects, tmp_path)
    edge = dep.edges["edge-1"]
    assert dep.ui.token == UI_TOKEN and dep.ui.bind == "0.0.0.0" and edge.preview_port is not None
    edge_pod = _one(objects, "Deployment", "vcascade-edge-1")["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in edge_pod["ports"]}["preview"] == edge.preview_port
    service = _one(objects, "Service", edge.host)
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["preview"] == edge.preview_port
    rules = _one(objects, "NetworkPolicy", "vcascade-edge")["spec"]["ingress"]
    (preview_rule,) = [r for r in rules if {"port": edge.preview_port} in r["ports"]]
    assert preview_rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": UI}}}]
    ui = _one(objects, "Deployment", UI)["spec"]["template"]
    (container,) = ui["spec"]["containers"]
    assert container["args"] == ["ui", "/etc/vcascade/vcascade.yaml"]
    assert ui["metadata"]["labels"]["app.kubernetes.io/name"] == UI
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": dep.ui.port}
    assert not any(v["name"] == "keys" for v in ui["spec"]["volumes"])  # it holds no CurveZMQ key
    token_from = {"secretKeyRef": {"name": UI, "key": "token"}}
    for pod in (container, edge_pod):
        assert {"name": "VCASCADE_UI_TOKEN", "valueFrom": token_from} in pod["env"]
    (ui_rule,) = _one(objects, "NetworkPolicy", UI)["spec"]["ingress"]
    assert ui_rule["ports"] == [{"port": dep.ui.port}]


@pytest.mark.parametrize("variant", ["base", "overlays/cpu"])
def test_workers_share_a_persistent_redis_identity_store_that_only_they_reach(k8s_copy, variant, tmp_path):
    """Every worker replica (the HPA adds them) must see one identity space: the embedding recognizer's store is
    the Redis of redis.yaml, which keeps its append-only file on a PersistentVolumeClaim."""
    objects = _render(k8s_copy, variant)
    ((host, port),) = set(redis_stores(_deployment_file(objects, tmp_path)).values())
    service = _one(objects, "Service", host)
    assert [p["port"] for p in service["spec"]["ports"]] == [port]
    deployment = _one(objects, "Deployment", REDIS)
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (container,) = pod["spec"]["containers"]
    assert container["image"].startswith("redis:7")
    (mount,) = container["volumeMounts"]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    _one(objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert_persistent_redis(container["args"], mount["mountPath"], port)
    (policy,) = [
        o for o in objects
        if o["kind"] == "NetworkPolicy" and o["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ]  # fmt: skip
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    pods = {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["labels"] for o in objects if o["kind"] == "Deployment"}
    for rule in policy["spec"]["ingress"]:
        assert rule["ports"] == [{"port": port}] and rule.get("from"), rule  # no "from": every pod may connect
        assert all(list(peer) == ["podSelector"] and list(peer["podSelector"]) == ["matchLabels"] for peer in rule["from"])
        admitted = {
            name for name, pod_labels in pods.items() for peer in rule["from"]
            if peer["podSelector"]["matchLabels"].items() <= pod_labels.items()
        }  # fmt: skip
        assert admitted == {WORKER}, rule
def test_the_keda_scaled_object_scales_a_real_worker_on_series_the_broker_exports(k8s_copy, tmp_path):
    """deploy/k8s/keda: KEDA's ScaledObject (a CRD: checked here by its documented fields, keda.sh v2 ScaledObject
    spec) targets a Deployment of the base, and its Prometheus query reads gauges the broker really exports."""
    (scaled,) = list(yaml.safe_load_all((REPO / "deploy" / "k8s" / "keda" / "worker-scaledobject.yaml").read_text()))
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["kind"] == "ScaledObject"
    spec = scaled["spec"]
    objects = _render(k8s_copy, "base")
    target = _one(objects, "Deployment", spec["scaleTargetRef"]["name"])
    assert target["metadata"]["name"] == "vcascade-worker-1"
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"] and spec["cooldownPeriod"] > 0
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert float(trigger["metadata"]["threshold"]) > 0 and trigger["metadata"]["serverAddress"].startswith("http")
    query = trigger["metadata"]["query"]
    for gauge in (broker_metrics.QUEUE_DEPTH, broker_metrics.IN_FLIGHT):
        assert f'{gauge._name}{{broker="broker-1"}}' in query
    dep = _deployment_file(objects, tmp_path)
    worker = dep.workers["worker-1"]
    assert "broker-1" in dep.brokers and worker.brokers == ["broker-1"]
    assert float(trigger["metadata"]["threshold"]) == worker.credits + worker.max_batch  # busy + one batch waiting


@pytest.mark.parametrize("variant", ["base", "overlays/cpu"])
def test_metrics_need_the_token_and_every_pod_that_reads_the_file_gets_it(k8s_copy, variant, tmp_path):
    objects = _render(k8s_copy, variant)
    dep = _deployment_file(objects, tmp_path)
    assert dep.metrics.bind == "0.0.0.0" and dep.metrics.read_token() == METRICS_TOKEN
    assert dep.metrics.allowed_hosts == ["*"]  # probes and Prometheus address pods by IP
    token_from = {"secretKeyRef": {"name": "vcascade-metrics", "key": "token"}}
    for deployment in [*_components(objects), _one(objects, "Deployment", UI)]:
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert {"name": "VCASCADE_METRICS_TOKEN", "valueFrom": token_from} in container["env"], deployment["metadata"]["name"]


def test_each_component_runs_the_image_of_its_role(k8s_copy):
    """Brokers and the live view run the base install, edges an image without torch (docs/DEPLOY.md, "Installs per
    role"); workers the CUDA image in the base, the CPU center image in the cpu overlay."""
    expected = {"vcascade-broker-1": "vcascade-broker", "vcascade-ui": "vcascade-broker",
                "vcascade-edge-1": "vcascade-edge", "vcascade-worker-1": "vcascade-cuda"}  # fmt: skip
    for variant in ("base", "overlays/cpu"):
        objects = _render(k8s_copy, variant)
        for deployment, image in expected.items():
            if variant != "base" and deployment == "vcascade-worker-1":
                image = "vcascade-center"
            container = _one(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"][0]
            assert container["image"].rpartition(":")[0] == f"ghcr.io/vcascade/{image}", (variant, deployment)
