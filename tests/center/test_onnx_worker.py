"""A worker running an ONNX recognizer (PP-OCRv6, auto-split over two CPU stages) over real ZeroMQ sockets."""

from __future__ import annotations

import copy
import threading
import time

import zmq

from center.worker import run_worker
from vcascade import wire
from vcascade.config import Deployment
from vcascade.sockets import make_socket


def _roi(roi_id: str) -> bytes:
    return wire.encode(wire.Roi(
        roi_id=roi_id, camera="street-1", frame_seq=150, stream_ts_ms=6000.0, capture_unix_ms=1.7e12,
        xyxy=(199.0, 44.0, 331.0, 268.0), crop_xyxy=(195, 40, 335, 272), class_id=1, score=0.8,
    ))  # fmt: skip


def _deployment(demo_raw: dict, free_port, model_path: str) -> Deployment:
    raw = copy.deepcopy(demo_raw)
    for key in ("frontend_port", "backend_port", "metrics_port"):
        raw["brokers"]["broker-1"][key] = free_port()
    raw["edges"]["edge-1"]["metrics_port"] = free_port()
    raw["edges"]["edge-1"]["sinks"] = []
    raw["recognizers"] = {"ppocr": {
        "type": "onnx", "model": model_path, "input_hw": [48, 320], "channel_order": "bgr",
        "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "split_points": "auto",
        "head": {"type": "embedding", "max_identities": 4},  # (T=40) x 18710 scores a crop: keep the gallery small
    }}  # fmt: skip
    raw["workers"]["worker-1"].update(
        recognizer="ppocr", metrics_port=free_port(), max_batch=2, max_wait_ms=20, credits=8
    )
    return Deployment.model_validate(raw)


def _next(router: zmq.Socket, deadline: float) -> tuple[bytes, wire.Message]:
    assert router.poll(int(max(0.0, deadline - time.monotonic()) * 1000)), "nothing received from the worker"
    routing, header, _ = wire.split_message(router.recv_multipart(), 1)
    return routing[0], header


def test_onnx_worker_answers_through_two_auto_split_stages(demo_raw, free_port, models_dir, crops):
    deployment = _deployment(demo_raw, free_port, "PP-OCRv6_rec_small.onnx")  # found in model_dir
    router = make_socket(zmq.Context.instance(), zmq.ROUTER)
    router.bind(deployment.brokers["broker-1"].endpoint("backend", bind=True))
    stop = threading.Event()
    reports: list[dict] = []
    thread = threading.Thread(target=run_worker, args=(deployment, "worker-1", stop, reports.append, str(models_dir)),
                              daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 300  # profiling + two builds on a busy machine
        identity, header = _next(router, deadline)
        while not isinstance(header, wire.Ready):
            identity, header = _next(router, deadline)
        for roi_id, crop in (("r-bike", crops["bike150"]), ("r-car", crops["car"]), ("r-bad", b"not a jpeg")):
            router.send_multipart([identity, _roi(roi_id), crop])
        answers: dict[str, wire.Message] = {}
        while len(answers) < 3:
            _, header = _next(router, deadline)
            if isinstance(header, (wire.Result, wire.Drop)):
                answers[header.roi_id] = header
    finally:
        stop.set()
        thread.join(timeout=30)
        router.close()
    assert not thread.is_alive()
    assert answers["r-bad"] == wire.Drop(roi_id="r-bad", reason="decode_error", where="worker-1")
    for roi_id in ("r-bike", "r-car"):
        result = answers[roi_id]
        assert isinstance(result, wire.Result), result
        assert [name for name, _ in result.hops] == ["batch_wait", "preprocess", "stage0", "stage1", "head"]
    assert reports[-1]["final"] and reports[-1]["results"] == 2
    assert set(reports[-1]["stage_ms"]) == {"stage0", "stage1"}
