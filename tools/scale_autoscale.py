"""Day/night mode of the scale harness: the load curve, KEDA's scaling rule, and a pool of real worker processes.

The rule is the one deploy/k8s/keda/worker-scaledobject.yaml asks of KEDA and the Kubernetes HPA it drives,
applied by :class:`Autoscaler` to real ``vcascade worker`` processes:

* **replicas from the metric** (:func:`keda_replicas`): KEDA's Prometheus scaler with ``metricType:
  AverageValue`` hands the HPA the query's value as an external metric with a per-pod target of ``threshold``
  (keda.sh/docs/2.x/reference/scaledobject-spec/, "triggers"); the HPA's algorithm is ``desired =
  ceil(current x currentMetricValue / desiredMetricValue)`` with the average over current pods, i.e.
  ``ceil(metric / threshold)``, left unchanged while ``|ratio - 1| <= 0.1`` (the default tolerance), and bounded
  by ``minReplicaCount``/``maxReplicaCount`` (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/,
  "Algorithm details").
* **cool-down** (:class:`ScaleDownGate`): the HPA scales down only to the highest recommendation of the last
  ``stabilizationWindowSeconds`` (300 s in the ScaledObject), and by at most ``policies`` (1 pod per 120 s);
  scale-up is immediate (same page, "Stabilization window", "Scaling policies"). KEDA's own ``cooldownPeriod``
  applies only to scaling to zero replicas, which ``minReplicaCount: 1`` rules out.
* **polling**: the metric is read every ``pollingInterval`` (15 s) from the real broker's ``/metrics``.

A day is compressed into the run: the curve's times are fractions of ``--duration-s``, and the controller's
times (polling, window, policy period) are the ScaledObject's divided by ``controller_speedup``
(:class:`ControllerTimes`), so a 4-minute run holds the same number of polls and windows per load swing as
hours of a real day would. Worker start-up is not compressed: it is what it is on this host.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

SCALED_OBJECT = Path(__file__).resolve().parents[1] / "deploy" / "k8s" / "keda" / "worker-scaledobject.yaml"
HPA_TOLERANCE = 0.1
"""Kubernetes' default ``--horizontal-pod-autoscaler-tolerance``."""
DAY_NIGHT: tuple[tuple[float, float], ...] = (
    (0.0, 0.2),
    (0.15, 0.2),
    (0.35, 1.0),
    (0.65, 1.0),
    (0.85, 0.2),
    (1.0, 0.2),
)
"""(fraction of the run, load as a share of the peak): night 0.2, ramp up, day at the peak, ramp down, night."""
BACKLOG_QUERY = ("vcascade_broker_queue_depth", "vcascade_broker_in_flight")
BUSY_METRIC = "vcascade_worker_stage_busy_seconds"


def load_share(curve: Sequence[tuple[float, float]], t_frac: float) -> float:
    """Load at ``t_frac`` (0..1 of the run) as a share of the peak: linear between the curve's points
    ``(t_frac, share)`` (sorted by time; clamped outside them)."""
    if t_frac <= curve[0][0]:
        return curve[0][1]
    for (t0, y0), (t1, y1) in itertools.pairwise(curve):
        if t_frac <= t1:
            return y0 + (y1 - y0) * (t_frac - t0) / (t1 - t0) if t1 > t0 else y1
    return curve[-1][1]


def keda_replicas(metric: float, threshold: float, current: int, min_replicas: int, max_replicas: int) -> int:
    """Replicas KEDA's AverageValue trigger and the HPA ask for (module docstring): ``ceil(metric / threshold)``,
    ``current`` kept while the ratio is within :data:`HPA_TOLERANCE` of 1, bounded by the min and max.

    Raises:
        ValueError: ``threshold`` <= 0 or ``min_replicas`` > ``max_replicas``.
    """
    if threshold <= 0 or min_replicas > max_replicas:
        raise ValueError(f"need threshold > 0 and min <= max, got {threshold}, {min_replicas}, {max_replicas}")
    desired = math.ceil(metric / threshold)
    if current > 0 and abs(metric / (threshold * current) - 1.0) <= HPA_TOLERANCE:
        desired = current
    return max(min_replicas, min(max_replicas, desired))


class ScaleDownGate:
    """The HPA's scale-down stabilization and Pods policy: the applied count is the highest recommendation of
    the last ``window_s`` when that is below the current count, lowered by at most ``pods_per_period`` within
    any ``period_s``; a higher recommendation applies at once. Times in s, from the caller's clock."""

    def __init__(self, window_s: float, pods_per_period: int, period_s: float) -> None:
        self.window_s, self.pods_per_period, self.period_s = window_s, pods_per_period, period_s
        self._recommendations: deque[tuple[float, int]] = deque()
        self._removals: deque[tuple[float, int]] = deque()

    def apply(self, now_s: float, current: int, recommended: int) -> int:
        """The replica count to set now, given the ``recommended`` one."""
        self._recommendations.append((now_s, recommended))
        while self._recommendations[0][0] < now_s - self.window_s:
            self._recommendations.popleft()
        if recommended >= current:
            return recommended
        stable = max(r for _, r in self._recommendations)
        while self._removals and self._removals[0][0] <= now_s - self.period_s:
            self._removals.popleft()
        allowed = self.pods_per_period - sum(n for _, n in self._removals)
        target = max(stable, current - max(0, allowed))
        if target < current:
            self._removals.append((now_s, current - target))
        return min(current, target)


@dataclass(frozen=True)
class ControllerTimes:
    """The ScaledObject's numbers (threshold left to the harness, which sizes it like the manifest does), with its
    times divided by ``speedup``."""

    min_replicas: int
    polling_s: float
    window_s: float
    pods_per_period: int
    period_s: float

    @classmethod
    def from_scaled_object(cls, speedup: float, path: Path = SCALED_OBJECT) -> ControllerTimes:
        """Read deploy/k8s/keda/worker-scaledobject.yaml and compress its times by ``speedup``."""
        spec = yaml.safe_load(path.read_text())["spec"]
        down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        policy = down["policies"][0]
        return cls(spec["minReplicaCount"], spec["pollingInterval"] / speedup,
                   down["stabilizationWindowSeconds"] / speedup, policy["value"], policy["periodSeconds"] / speedup)  # fmt: skip


def scrape(port: int, names: Sequence[str]) -> float:
    """Sum of the samples of the metric families ``names`` at ``http://127.0.0.1:<port>/metrics`` (OSError when
    the process does not answer)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
        text = reply.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) if family.name in names
               for sample in family.samples if not sample.name.endswith("_created"))  # fmt: skip


class WorkerPool:
    """Real worker processes ``names`` (in start order), started by ``spawn(name)`` and stopped by SIGTERM
    (the worker drains and says Bye). Books replica-seconds and stage busy seconds within a measured window."""

    def __init__(self, names: Sequence[str], metrics_ports: dict[str, int],
                 spawn: Callable[[str], subprocess.Popen]) -> None:  # fmt: skip
        self.names, self.ports, self._spawn = list(names), metrics_ports, spawn
        self.live: dict[str, subprocess.Popen] = {}
        self.stopped: list[subprocess.Popen] = []
        self._since_s: dict[str, float] = {}
        self._busy0: dict[str, float] = {}
        self.window: tuple[float, float] | None = None
        self.replica_s = self.busy_s = 0.0
        self.timeline: list[tuple[float, int]] = []

    def scale_to(self, n: int) -> None:
        """Start or stop workers until ``n`` run (the last started is stopped first)."""
        while len(self.live) < n:
            name = self.names[len(self.live)]
            self.live[name] = self._spawn(name)
            self._since_s[name] = time.time()
            self._busy0[name] = 0.0
        while len(self.live) > n:
            name = list(self.live)[-1]
            self._book(name)
            proc = self.live.pop(name)
            proc.terminate()
            self.stopped.append(proc)
        self.timeline.append((time.time(), n))

    def start_window(self) -> None:
        """Count from now: busy seconds so far and the time before now are left out."""
        now = time.time()
        self.window = (now, math.inf)
        for name in self.live:
            self._since_s[name] = now
            self._busy0[name] = self._busy(name)
        self.timeline.append((now, len(self.live)))

    def end_window(self) -> None:
        """Stop counting: book every live worker up to now."""
        for name in self.live:
            self._book(name)
        self.window = (self.window[0], time.time()) if self.window else None

    def _busy(self, name: str) -> float:
        try:
            return scrape(self.ports[name], [BUSY_METRIC])
        except OSError:  # not up yet: it has computed nothing
            return 0.0

    def _book(self, name: str) -> None:
        if self.window is None or self.window[1] != math.inf:
            return
        now = time.time()
        self.replica_s += now - max(self._since_s[name], self.window[0])
        self.busy_s += self._busy(name) - self._busy0[name]
        self._since_s[name], self._busy0[name] = now, self._busy(name)

    def processes(self) -> list[subprocess.Popen]:
        """Every worker process started, live or stopping."""
        return [*self.live.values(), *self.stopped]


class Autoscaler(threading.Thread):
    """Every ``times.polling_s``, reads the brokers' backlog (queue depth + in flight, :data:`BACKLOG_QUERY`)
    and sets the pool to :func:`keda_replicas` through the :class:`ScaleDownGate` until :meth:`stop`."""

    def __init__(self, pool: WorkerPool, broker_ports: Sequence[int], threshold: float, max_replicas: int,
                 times: ControllerTimes) -> None:  # fmt: skip
        super().__init__(daemon=True, name="autoscaler")
        self.pool, self.broker_ports, self.threshold, self.max_replicas, self.times = (
            pool, list(broker_ports), threshold, max_replicas, times)  # fmt: skip
        self.gate = ScaleDownGate(times.window_s, times.pods_per_period, times.period_s)
        self._halt = threading.Event()
        self.polls: list[tuple[float, float, int]] = []  # time s, backlog, replicas set

    def run(self) -> None:
        while not self._halt.wait(self.times.polling_s):
            try:
                backlog = sum(scrape(port, BACKLOG_QUERY) for port in self.broker_ports)
            except OSError:  # a broker that does not answer: KEDA keeps the replicas as they are
                continue
            current = len(self.pool.live)
            wanted = keda_replicas(backlog, self.threshold, current, self.times.min_replicas, self.max_replicas)
            replicas = self.gate.apply(time.monotonic(), current, wanted)
            if replicas != current:
                self.pool.scale_to(replicas)
            self.polls.append((time.time(), backlog, replicas))

    def stop(self) -> None:
        """End the loop and wait for it."""
        self._halt.set()
        self.join()
