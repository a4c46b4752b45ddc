"""Pieces of tools/chaos.py: malformed-message injection and the per-camera accounting check.

* :func:`inject_malformed`: a DEALER on the broker's frontend, then one on its backend, each sending one
  message per :data:`MALFORMED` case; returns how many the broker counted in
  ``vcascade_broker_malformed_messages_total`` per side.
* :func:`account`: per camera, from the launcher's summary (every run of every edge with its last report) and
  the JSONL sinks: sent = results + drops for each edge run that ended on its own, the sink holding exactly
  that many lines for the edge's last run, and no ``roi_id`` twice. SIGKILLed runs are listed, not checked:
  their in-flight ROIs die with them (docs/RELIABILITY.md).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgspec
import zmq
from tools.chaos_deploy import scrape
from rich.table import Table

from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket

MALFORMED: list[tuple[str, list[bytes]]] = [
    ("empty", [b""]),
    ("not_msgpack", [b"\xc1 definitely not msgpack"]),
    ("version", [msgspec.msgpack.encode({"kind": "heartbeat", "v": 99, "sender": "chaos"})]),
    ("too_large", [b"\x00" * (wire.MAX_HEADER_BYTES + 1)]),
    ("pickle", [b"\x80\x05\x95\x03\x00\x00\x00\x00\x00\x00\x00}\x94."]),  # the bytes of a pickled {}; never loaded
    ("bad_fields", [msgspec.msgpack.encode({"kind": "roi", "v": wire.PROTOCOL_VERSION})]),
    ("frames", [wire.encode(wire.Heartbeat(sender="chaos")), b"unexpected payload"]),
]
"""One malformed message per reason of :class:`vcascade.core.protocol.wire.MalformedMessage` (pickle: bytes only)."""
COUNT_TIMEOUT_S = 15.0


def _malformed_count(port: int, broker: str, side: str) -> float:
    samples = scrape(port) or {}
    return sum(v for (n, labels), v in samples.items() if n == "vcascade_broker_malformed_messages_total"
               and dict(labels).get("broker") == broker and dict(labels).get("side") == side)  # fmt: skip


def inject_malformed(dep: dict[str, Any], broker: str) -> dict[str, tuple[int, int]]:
    """Send every :data:`MALFORMED` message to both sides of ``broker``. Returns ``{side: (sent, counted)}``."""
    cfg = dep["brokers"][broker]
    ctx = zmq.Context.instance()
    out = {}
    for side in ("frontend", "backend"):
        before = _malformed_count(cfg["metrics_port"], broker, side)
        sock = make_socket(ctx, zmq.DEALER, identity=f"chaos-{side}")
        sock.connect(f"tcp://127.0.0.1:{cfg[f'{side}_port']}")
        for _, frames in MALFORMED:
            sock.send_multipart(frames)
        deadline = time.monotonic() + COUNT_TIMEOUT_S
        while (counted := _malformed_count(cfg["metrics_port"], broker, side) - before) < len(MALFORMED):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        sock.close(linger=0)
        out[side] = (len(MALFORMED), int(counted))
    return out


def jsonl_lines(out: Path) -> list[dict[str, Any]]:
    """ROI lines (``status`` ok or dropped) of every ``results-EDGE.jsonl`` in ``out``, each with ``_edge``."""
    lines = []
    for path in sorted(out.glob("results-*.jsonl")):
        edge = path.stem.removeprefix("results-")
        for text in path.read_text().splitlines():
            try:
                record = json.loads(text)
            except ValueError:
                record = {"status": "unparsable", "roi_id": None}
            if record.get("status") in ("ok", "dropped", "unparsable"):
                lines.append({**record, "_edge": edge})
    return lines


def run_id(roi_id: str) -> str:
    """The edge run of an ROI: ``roi_id`` is ``EDGE-RUNID-COUNTER`` (edge/node.py)."""
    return roi_id.rsplit("-", 2)[1]


def account(summary: dict[str, Any], lines: list[dict[str, Any]]) -> tuple[Table, list[str]]:
    """Per-camera accounting table and violations (see the module docstring)."""
    problems = [f"{n} unparsable JSONL lines" for n in [sum(r["status"] == "unparsable" for r in lines)] if n]
    dupes = [rid for rid, n in Counter(r["roi_id"] for r in lines if r["roi_id"]).items() if n > 1]
    if dupes:
        problems.append(f"{len(dupes)} roi_ids twice in the sinks, e.g. {dupes[:3]}")
    last_run = {}
    for r in lines:
        if r["roi_id"]:
            last_run[r["_edge"]] = run_id(r["roi_id"])
    sink = Counter((r["_edge"], r["camera"]) for r in lines if r["roi_id"] and run_id(r["roi_id"]) == last_run[r["_edge"]])
    table = Table(title="chaos accounting per camera (edge runs that ended on their own)")
    for col in ("camera", "edge", "runs checked", "sent", "results", "drops", "accounted", "sink lines (last run)",
                "killed runs: last report sent/results/drops"):  # fmt: skip
        table.add_column(col)
    runs = {c["name"]: c for c in summary["components"] if c["kind"] == "edge"}
    for edge, comp in sorted(runs.items()):
        history = summary["runs"][f"edge {edge}"]
        for cam in sorted({cam for run in history for cam in ((run.get("snapshot") or {}).get("cameras") or {})}):
            _camera_row(table, problems, edge, cam, history, sink[(edge, cam)])
    return table, problems


def _camera_row(table: Table, problems: list[str], edge: str, cam: str, history: list[dict], sink_lines: int) -> None:
    checked, killed, tot = 0, [], defaultdict(int)
    ok = True
    last = None
    for run in history:
        c = ((run.get("snapshot") or {}).get("cameras") or {}).get(cam)
        if c is None:
            continue
        drops = sum(c["drops"].values())
        if not run["snapshot"].get("final"):
            killed.append(f"{c['sent']}/{c['results']}/{drops} (pid {run['pid']}, exit {run['exit_code']})")
            continue
        checked += 1
        tot["sent"] += c["sent"]
        tot["results"] += c["results"]
        tot["drops"] += drops
        last = c["results"] + drops
        if c["sent"] != c["results"] + drops:
            ok = False
            problems.append(f"camera {cam} (edge {edge} pid {run['pid']}): sent {c['sent']} != results "
                            f"{c['results']} + drops {c['drops']}")  # fmt: skip
    if checked == 0:
        problems.append(f"camera {cam}: no edge run of {edge} ended on its own")
    elif history[-1].get("snapshot", {}).get("final") and last != sink_lines:
        ok = False
        problems.append(f"camera {cam}: the sink holds {sink_lines} lines of the last run, its report says {last}")
    table.add_row(cam, edge, str(checked), str(tot["sent"]), str(tot["results"]), str(tot["drops"]),
                  "yes" if ok and checked else "[red]NO[/red]", str(sink_lines), "; ".join(killed) or "-")  # fmt: skip
