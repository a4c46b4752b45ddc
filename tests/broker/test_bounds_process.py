"""A real `vcascade broker` process under 40 ROIs of 16 MiB for a recognizer no worker serves: its memory stays
within the default byte bounds (issue 17, case 3)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest
import yaml
import zmq

from tests.broker.conftest import deployment_data
from tests.broker.test_server import recv
from vcascade.broker.dispatch import ByteBounds
from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import MAX_MESSAGE_BYTES, make_socket

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024
ROIS = 40
TRANSIT_SLACK_BYTES = 128 * MIB
"""What the process may hold beyond its queue: messages in ZeroMQ's pipes (8 of 16 MiB) and allocator slack."""


def roi(roi_id: str) -> wire.Roi:
    return wire.Roi(
        roi_id=roi_id, camera="cam-1", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
        xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=0, score=0.9, recognizer="text",
    )  # fmt: skip


def test_a_broker_process_keeps_its_memory_bounded_under_40_rois_of_16_mib(tmp_path, free_port):
    ports = [free_port(), free_port(), free_port()]
    config = tmp_path / "deploy.yaml"
    config.write_text(yaml.safe_dump(deployment_data("broker-rss", ports, queue_max=10_000)))  # default byte bounds
    proc = subprocess.Popen(
        [sys.executable, "-m", "vcascade", "broker", "--config", str(config), "--name", "broker-rss",
         "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    edge = make_socket(zmq.Context.instance(), zmq.DEALER, identity="edge-rss")
    edge.connect(f"tcp://127.0.0.1:{ports[0]}")
    try:
        up_by = time.monotonic() + 60
        while recv(edge, timeout_s=0.5, heartbeats=True) is None:  # the broker heartbeats an edge it heard from
            assert proc.poll() is None and time.monotonic() < up_by, proc.stderr.read().decode()[-2000:]
            edge.send(wire.encode(wire.Heartbeat(sender="edge-rss")))
        broker = psutil.Process(proc.pid)
        base_rss = peak_rss = broker.memory_info().rss
        crop = bytes(MAX_MESSAGE_BYTES)  # the largest part a socket accepts
        kept = ByteBounds().recognizer // (MAX_MESSAGE_BYTES + len(wire.encode(roi("r00"))))
        drops: list[wire.Drop] = []
        for i in range(ROIS):
            edge.send_multipart([wire.encode(roi(f"r{i:02d}")), crop], copy=False)
            while (got := recv(edge, timeout_s=0.05)) is not None:
                drops.append(got[0])
            peak_rss = max(peak_rss, broker.memory_info().rss)
        while len(drops) < ROIS - kept and (got := recv(edge, timeout_s=10)) is not None:
            drops.append(got[0])
            peak_rss = max(peak_rss, broker.memory_info().rss)
        assert [(d.roi_id, d.reason) for d in drops] == [(f"r{i:02d}", "no_worker") for i in range(ROIS - kept)]
        grown = peak_rss - base_rss
        print(f"broker RSS {base_rss / MIB:.0f} MiB before, grew by {grown / MIB:.0f} MiB at most ({kept} ROIs kept)")
        assert grown <= ByteBounds().recognizer + TRANSIT_SLACK_BYTES, f"grew by {grown / MIB:.0f} MiB"
        assert recv(edge, timeout_s=0.5) is None  # no more drops: the kept ROIs wait
    finally:
        edge.close(linger=0)
        proc.terminate()
        proc.wait(30)
