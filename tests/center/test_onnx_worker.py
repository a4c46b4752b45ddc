"""A worker running an ONNX recognizer (PP-OCRv6, auto-split over two CPU stages) over real ZeroMQ sockets."""

from __future__ import annotations

import copy

from tests.center.conftest import jpeg, serve_rois
from tests.center.head_models import render_text
from vcascade.core.protocol import wire
from vcascade.core.config import Deployment


def _roi(roi_id: str) -> bytes:
    return wire.encode(wire.Roi(
        roi_id=roi_id, camera="street-1", frame_seq=150, stream_ts_ms=6000.0, capture_unix_ms=1.7e12,
        xyxy=(199.0, 44.0, 331.0, 268.0), crop_xyxy=(195, 40, 335, 272), class_id=1, score=0.8,
    ))  # fmt: skip


def _deployment(demo_raw: dict, free_port, model_path: str, devices=("cpu", "cpu"), **recognizer) -> Deployment:
    """The demo with the PP-OCR recognizer (auto split, embedding head unless ``recognizer`` overrides keys)."""
    raw = copy.deepcopy(demo_raw)
    for key in ("frontend_port", "backend_port", "metrics_port"):
        raw["brokers"]["broker-1"][key] = free_port()
    raw["edges"]["edge-1"]["metrics_port"] = free_port()
    raw["edges"]["edge-1"]["sinks"] = []
    raw["recognizers"] = {"ppocr": {
        "type": "onnx", "model": model_path, "input_hw": [48, 320], "channel_order": "bgr",
        "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "split_points": "auto",
        "head": {"type": "embedding", "max_identities": 4},  # (T=40) x 18710 scores a crop: keep the gallery small
        **recognizer,
    }}  # fmt: skip
    raw["workers"]["worker-1"].update(
        recognizer="ppocr", metrics_port=free_port(), max_batch=2, max_wait_ms=20, credits=8, devices=list(devices)
    )
    return Deployment.model_validate(raw)


def test_onnx_worker_answers_through_two_auto_split_stages(demo_raw, free_port, models_dir, crops):
    deployment = _deployment(demo_raw, free_port, "PP-OCRv6_rec_small.onnx")  # found in model_dir
    reports: list[dict] = []
    payloads = {"r-bike": crops["bike150"], "r-car": crops["car"], "r-bad": b"not a jpeg"}
    answers = serve_rois(  # profiling + two builds on a busy machine
        deployment, payloads, _roi, model_dir=str(models_dir), reports=reports, timeout_s=300
    )
    assert answers["r-bad"] == wire.Drop(roi_id="r-bad", reason="decode_error", where="worker-1")
    for roi_id in ("r-bike", "r-car"):
        result = answers[roi_id]
        assert isinstance(result, wire.Result), result
        assert [name for name, _ in result.hops] == ["batch_wait", "preprocess", "stage0", "stage1", "head"]
    assert reports[-1]["final"] and reports[-1]["results"] == 2
    assert set(reports[-1]["stage_ms"]) == {"stage0", "stage1"}


def test_text_worker_reads_short_words_through_keep_ratio_pad(demo_raw, free_port, models_dir):
    """keep_ratio_pad in the worker: each crop resized in uint8 to its own width, the batch normalised with the
    padding zeroed. Stretched to 48 x 320 instead, "ok" scores 0.86 here (docs/DESIGN.md, text head: "0k")."""
    text = {"resize": "keep_ratio_pad", "split_points": [], "head": {"type": "text", "min_score": 0.5}}
    deployment = _deployment(demo_raw, free_port, "PP-OCRv6_rec_small.onnx", devices=["cpu"], **text)
    lines = ["ok", "VCASCADE 2026", "Hello World 42"]
    payloads = {f"t{i}": jpeg(render_text(line)) for i, line in enumerate(lines)}
    answers = serve_rois(deployment, payloads, _roi, model_dir=str(models_dir), timeout_s=300)
    outputs = [answers[f"t{i}"].output for i in range(len(lines))]
    assert [output.text for output in outputs] == lines, answers
    assert all(output.text_score > 0.9 for output in outputs), answers  # seen: 0.9994 and more
