#!/usr/bin/env python3
"""The two halves of scripts/demo_events.sh around ``vcascade run configs/traffic.yaml``.

    python -m tools.demo_events subscribe --port P --out mqtt.jsonl --ready FILE
        An MQTT client (paho, QoS 1) subscribed to every camera's ``event`` and ``event_update`` topics; appends
        each record it receives to ``--out`` as one JSON line, and creates ``--ready`` once the broker has
        acknowledged the subscription. Runs until killed (SIGTERM).

    python -m tools.demo_events report --config FILE --jsonl results.jsonl --mqtt mqtt.jsonl [--wait-s S]
        Waits (up to ``--wait-s``) until the subscriber holds every event record the JSONL sink wrote, then prints
        per camera the counts by line or zone, direction and class received over MQTT next to the counts recomputed
        offline from the JSONL track lines of the same run (:mod:`tools.event_replay`), and the number
        of events and updates received. Exit 0 when they agree, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import cv2
import paho.mqtt.client as mqtt

from vcascade.core.coco import COCO_CLASSES
from vcascade.core.config import Deployment, load_config
from tools.event_replay import count_events, replay_lines
from vcascade.core.runtime.resources import resolve

TOPICS = ("+/+/event", "+/+/event_update")
"""Topic filters of the subscriber: ``<prefix>/<camera>/<kind>`` for the two event kinds (any one-level prefix)."""


def subscribe(port: int, out: Path, ready: Path) -> int:
    """Record every event and update the broker on ``port`` delivers until SIGTERM; see the module docstring."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sink = out.open("a", buffering=1)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="vcascade-demo-events", clean_session=True)
    client.on_connect = lambda c, u, f, rc, p: c.subscribe([(t, 1) for t in TOPICS])
    client.on_subscribe = lambda c, u, mid, rcs, p: ready.touch()
    client.on_message = lambda c, u, message: sink.write(message.payload.decode() + "\n")
    client.reconnect_delay_set(0.1, 1)
    client.connect_async("127.0.0.1", port, 30)
    client.loop_start()
    stop.wait()
    client.disconnect()
    client.loop_stop()
    sink.close()
    return 0


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The whole JSON lines of ``path`` (a line still being written is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def class_names(dep: Deployment, edge: str) -> list[str]:
    """The detector's class names: inline, from its names file, or the COCO names."""
    names = dep.edges[edge].detector.class_names
    if names is None:
        return list(COCO_CLASSES)
    if isinstance(names, str):
        return [line.strip() for line in Path(names).read_text().splitlines() if line.strip()]
    return list(names)


def frame_hw(url: str) -> tuple[int, int]:
    """(height, width) of a file camera's frames, px (OpenCV decodes upright, as the edge does)."""
    cap = cv2.VideoCapture(str(resolve(url)))
    try:
        ok, image = cap.read()
        if not ok:
            raise SystemExit(f"cannot read a frame of {url}")
        return image.shape[0], image.shape[1]
    finally:
        cap.release()


def report(config: Path, jsonl: Path, mqtt_path: Path, wait_s: float) -> int:
    """Compare the events received over MQTT with the JSONL sink's and with the offline counts; print the tables."""
    dep = load_config(config)
    lines = read_jsonl(jsonl)
    written = [line for line in lines if line.get("kind") in ("event", "event_update")]
    deadline = time.monotonic() + wait_s
    received = read_jsonl(mqtt_path)
    while len({r["event_id"] + r["kind"] for r in received}) < len(written) and time.monotonic() < deadline:
        time.sleep(0.2)  # the subscriber appends to its file as messages arrive
        received = read_jsonl(mqtt_path)
    events = [r for r in received if r.get("kind") == "event"]
    updates = [r for r in received if r.get("kind") == "event_update"]
    unique = {r["event_id"]: r for r in events}
    agree = True
    for camera, cam in dep.cameras.items():
        if cam.analytics is None:
            continue
        live = count_events(r for r in unique.values() if r["camera"] == camera)
        offline = count_events(replay_lines(lines, camera, cam.analytics, class_names(dep, cam.edge), frame_hw(cam.url)))
        agree &= live == offline
        print_counts(camera, live, offline)
    lost = sum(1 for r in unique.values() if r.get("track_lost"))
    print(f"exits of tracks the tracker dropped inside a zone (not in the table: a replay cannot see them): {lost}")
    jsonl_events = sum(1 for line in written if line["kind"] == "event")
    print(f"events received over MQTT: {len(events)} ({len(unique)} distinct ids), updates: {len(updates)}; "
          f"written to JSONL: {jsonl_events} events, {len(written) - jsonl_events} updates")  # fmt: skip
    delivered = {r["event_id"] for r in written if r["kind"] == "event"} <= set(unique)
    agree &= delivered
    print("MQTT counts and offline counts agree" if agree else "MISMATCH: see the rows marked <-- above")
    return 0 if agree else 1


def print_counts(camera: str, live: Counter, offline: Counter) -> None:
    """One row per (type, line or zone, direction, class): received over MQTT, recomputed offline."""
    print(f"camera {camera}")
    print(f"  {'event':<11} {'line/zone':<12} {'direction':<9} {'class':<10} {'mqtt':>5} {'offline':>7}")
    for key in sorted(set(live) | set(offline)):
        kind, place, direction, cls = key
        mark = "" if live[key] == offline[key] else "  <--"
        print(f"  {kind:<11} {place:<12} {direction or '-':<9} {cls:<10} {live[key]:>5} {offline[key]:>7}{mark}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("subscribe")
    sub.add_argument("--port", type=int, required=True)
    sub.add_argument("--out", type=Path, required=True)
    sub.add_argument("--ready", type=Path, required=True)
    rep = commands.add_parser("report")
    rep.add_argument("--config", type=Path, required=True)
    rep.add_argument("--jsonl", type=Path, required=True)
    rep.add_argument("--mqtt", type=Path, required=True)
    rep.add_argument("--wait-s", type=float, default=30.0)
    args = parser.parse_args()
    if args.command == "subscribe":
        return subscribe(args.port, args.out, args.ready)
    return report(args.config, args.jsonl, args.mqtt, args.wait_s)


if __name__ == "__main__":
    sys.exit(main())
