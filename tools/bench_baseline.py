"""The centralized baseline of ``tools/bench.py``, and the per-step CPU costs behind its compute floor.

Run as a child process of ``tools/bench.py`` (so its CPU time and peak RSS are its own):

* ``--mode baseline``: one process decodes the cameras' files, detects, crops and recognises **every**
  detection in one loop, with ONNX Runtime and torch each given all ``--cores`` threads (the thread budget
  the cascade's processes share). The same models (the recognizer on its configured engine), the same detector and ROI
  settings and the same recognizer as the deployment file: what a user would run without vcascade.
* ``--mode calibrate``: the same steps on one thread each, timed one by one on a prefix of the first camera:
  decode, detect, track and the motion gate (default ``motion`` settings, :mod:`vcascade.edge.detection.motion`)
  per frame; crop + JPEG encode, JPEG decode + preprocess, recognition (in micro-batches
  of the worker's ``max_batch``) and the embedding head per ROI. ``tools/bench.py`` turns these into the
  compute floor: the CPU seconds a run's frames and ROIs need, divided by the cores. Then the two heavy steps
  again with ``--cores`` threads running them at once (``contended_ms``): the CPU a step costs when every
  core is busy, which is what a deployment using all its cores pays (shared caches and memory bandwidth).

Usage: ``python -m tools.bench_baseline --mode baseline|calibrate --config DEPLOY.yaml --cores N --json OUT
[--model-dir DIR] [--frames N]``. Writes one JSON object to OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

START_S = time.perf_counter()  # before the heavy imports: "time to first result" counts model loading too

import cv2  # noqa: E402

from vcascade.center.heads import EmbeddingHead  # noqa: E402
from vcascade.center.intake.preprocess import PreprocessSpec, decode_jpeg, stack_batch, to_input  # noqa: E402
from vcascade.center.stages.onnx_stages import to_numpy  # noqa: E402
from vcascade.center.stages.runtimes import load_recognizer_stages, stage_input, with_stage_threads  # noqa: E402
from vcascade.core.config import MotionConfig, RoiConfig, RoiPolicyConfig, load_config  # noqa: E402
from vcascade.core.runtime.resources import resolve  # noqa: E402
from vcascade.core.runtime.threads import set_process_threads  # noqa: E402
from vcascade.edge.detection.motion import MotionGate  # noqa: E402
from vcascade.edge.process import load_detector  # noqa: E402
from vcascade.edge.selection.roi import crop_pixels, encode_jpeg  # noqa: E402
from vcascade.edge.selection.roi_policy import RoiPolicy  # noqa: E402
from vcascade.edge.selection.tracking import CameraTracker  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    dep = load_config(args.config)
    edge_name = next(iter(dep.edges))
    cores = 1 if args.mode == "calibrate" else args.cores
    dep = _with_threads(dep, edge_name, cores)
    set_process_threads(cores, opencv_threads=1)  # as the cascade's processes: torch, OpenCV and numpy's BLAS
    detector, _ = load_detector(dep.edges[edge_name], args.model_dir)
    worker = next(iter(dep.workers.values()))
    rec_cfg = dep.recognizers[worker.recognizer]
    model = recognizer(with_stage_threads(rec_cfg, cores), args.model_dir)
    spec = PreprocessSpec.from_config(rec_cfg)
    head = EmbeddingHead(rec_cfg.head.match_threshold, rec_cfg.head.max_identities)
    urls = [_path(cam.url) for cam in dep.cameras_of(edge_name).values()]
    if args.mode == "baseline":
        out = run_baseline(urls, args.frames, detector, model, spec, head, dep.edges[edge_name].roi, worker.max_batch)
    else:
        camera = next(iter(dep.cameras_of(edge_name)))
        tracker = CameraTracker(dep.roi_policy_of(camera).tracker)
        out = calibrate(urls[0], args.frames, detector, tracker, model, spec, head, dep.edges[edge_name].roi, worker.max_batch)
        out["contended_threads"] = args.cores
        out["contended_ms"] = contended_costs(urls[0], detector, model, spec, dep.edges[edge_name].roi,
                                              worker.max_batch, args.cores)  # fmt: skip
    Path(args.json).write_text(json.dumps(out))
    return 0


def run_baseline(urls, frames_per_camera, detector, model, spec, head, roi_cfg, max_batch) -> dict[str, Any]:
    """Decode the cameras round-robin, detect, crop and recognise every detection, one frame at a time.

    Returns:
        ``frames``, ``rois``, ``wall_s`` (first frame read to last result), ``first_result_s`` (process start
        to first result, model loading included), ``latency_ms`` (per ROI: frame read to its result),
        ``cpu_s`` (user + system of this process), ``total_s`` (process start to now), ``peak_rss_bytes``.
    """
    caps = [cv2.VideoCapture(url) for url in urls]
    counts = [0] * len(caps)
    frames = rois = 0
    latencies: list[float] = []
    first_result_s = None
    t_first_frame = None
    live = list(range(len(caps)))
    while live:
        for index in list(live):
            ok, image = caps[index].read()
            if not ok or (frames_per_camera and counts[index] >= frames_per_camera):
                live.remove(index)
                continue
            read_s = time.perf_counter()
            t_first_frame = t_first_frame or read_s
            counts[index] += 1
            frames += 1
            crops = every_crop(image, detector(image), roi_cfg)
            for start in range(0, len(crops), max_batch):
                chunk = crops[start:start + max_batch]
                batch = stack_batch([to_input(crop, spec) for crop in chunk])
                embeddings = model(batch).reshape(len(chunk), -1)
                head(embeddings)
                done_s = time.perf_counter()
                first_result_s = first_result_s or done_s - START_S
                latencies += [(done_s - read_s) * 1000.0] * len(chunk)
                rois += len(chunk)
    end_s = time.perf_counter()
    for cap in caps:
        cap.release()
    return {
        "frames": frames, "rois": rois, "wall_s": end_s - (t_first_frame or end_s),
        "first_result_s": first_result_s, "latency_ms": latencies, **_process_usage(),
    }


def calibrate(url, frames, detector, tracker, model, spec, head, roi_cfg, max_batch) -> dict[str, Any]:
    """Per-step CPU cost on one thread: ms per frame (decode, detect, track, gate) and per ROI (encode, prep, recog,
    head). ``gate`` is a motion gate's decision on the frame (default settings), which a gated edge adds per frame.

    Each step is timed with ``time.process_time`` (this process's CPU time; one thread per library, so CPU time
    is the step's work, not time spent waiting). Recognition runs in full micro-batches of ``max_batch``.
    """
    cap = cv2.VideoCapture(url)
    per_frame = {"decode": 0.0, "detect": 0.0, "track": 0.0, "gate": 0.0}
    gate = MotionGate(MotionConfig())
    per_roi = {"encode": 0.0, "prep": 0.0, "recog": 0.0, "head": 0.0}
    payloads: list[bytes] = []
    n_frames = 0
    while not frames or n_frames < frames:
        ok, image = _timed(per_frame, "decode", cap.read)
        if not ok:
            break
        n_frames += 1
        detections = _timed(per_frame, "detect", detector, image)
        pts_ms = cap.get(cv2.CAP_PROP_POS_MSEC)
        _timed(per_frame, "track", tracker.update, detections, pts_ms)
        _timed(per_frame, "gate", gate.needs_detection, image, pts_ms)
        for crop in every_crop(image, detections, roi_cfg):
            payloads.append(_timed(per_roi, "encode", encode_jpeg, crop, roi_cfg.jpeg_quality))
    cap.release()
    if not payloads:
        raise SystemExit(f"calibration: no ROI (a detection the size rules keep) in the first {n_frames} frames of {url}; "
                         "calibrate on more frames (--frames)")
    inputs = [_timed(per_roi, "prep", lambda p: to_input(decode_jpeg(p), spec), p) for p in payloads]
    usable = _full_batches(len(inputs), max_batch)
    for start in range(0, usable, max_batch):
        batch = stack_batch(inputs[start:start + max_batch])
        out = _timed(per_roi, "recog", model, batch)
        _timed(per_roi, "head", head, out.reshape(len(batch), -1))
    n_rois = max(len(payloads), 1)
    per_roi_ms = {k: v * 1000.0 / (usable if k in ("recog", "head") else n_rois) for k, v in per_roi.items()}
    return {
        "frames": n_frames, "rois": len(payloads), "max_batch": max_batch,
        "per_frame_ms": {k: v * 1000.0 / max(n_frames, 1) for k, v in per_frame.items()},
        "per_roi_ms": per_roi_ms,
    }


def contended_costs(url, detector, model, spec, roi_cfg, max_batch, threads, frames=40) -> dict[str, float]:
    """CPU ms per frame of ``detect`` and per ROI of ``recog`` while ``threads`` threads run the step at once.

    Each thread runs the step over the same ``frames`` frames (or their ROIs, in micro-batches of ``max_batch``)
    with one library thread, as the edge's detector runs and the worker's stage threads do; the cost is the
    process's CPU time over all threads' items. Against the one-thread costs of :func:`calibrate` the ratio is
    what running every core at once costs per item on this host.
    """
    cap = cv2.VideoCapture(url)
    images = [image for ok, image in (cap.read() for _ in range(frames)) if ok]
    cap.release()
    crops = [crop for image in images for crop in every_crop(image, detector(image), roi_cfg)]
    inputs = [to_input(decode_jpeg(encode_jpeg(c, roi_cfg.jpeg_quality)), spec) for c in crops]
    usable = _full_batches(len(inputs), max_batch)  # as :func:`calibrate`
    batches = [stack_batch(inputs[i:i + max_batch]) for i in range(0, usable, max_batch)]
    detect_s = _cpu_of_threads(threads, lambda: [detector(image) for image in images])
    recog_s = _cpu_of_threads(threads, lambda: [model(batch) for batch in batches])
    return {"detect": detect_s * 1e3 / (threads * len(images)),
            "recog": recog_s * 1e3 / (threads * max(usable, 1))}  # fmt: skip


def every_crop(image, detections, roi_cfg: RoiConfig) -> list:
    """Views of ``image`` ((H, W, 3) uint8 BGR) cropping each of its ``detections`` that the edge's size rules keep:
    the ROI policy ``every_detection`` with no other filter (its crop rectangles, ``roi.padding_px``)."""
    policy = RoiPolicy(RoiPolicyConfig(mode="every_detection"), roi_cfg.min_size_px, roi_cfg.padding_px)
    selection = policy.decide(detections, 0.0, image.shape[:2])
    return [crop_pixels(image, crop_xyxy) for crop_xyxy in selection.crop_xyxy]


def _full_batches(items: int, max_batch: int) -> int:
    """How many of ``items`` fill whole micro-batches of ``max_batch`` (all of them when under one batch)."""
    return items - items % max_batch or items


def _cpu_of_threads(threads: int, work) -> float:
    """This process's CPU seconds while ``threads`` threads each call ``work`` once, started together."""
    work()  # warm-up: first-run allocations are not the step's cost
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised below: a failed run must not read as cheap
            errors.append(exc)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for thread in pool:
        thread.start()
    started = time.process_time()
    barrier.wait()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return time.process_time() - started


def recognizer(rec_cfg, model_dir):
    """The deployment's recognizer unsplit (one stage, its configured engine): (n, 3, H, W) float32 numpy batch
    -> (n, ...) float32 numpy output."""
    (stage,) = load_recognizer_stages(rec_cfg.model_copy(update={"split_points": []}), ["cpu"], model_dir=model_dir)
    return lambda batch: to_numpy(stage((stage_input(rec_cfg, batch, "cpu"),))[0])


def _timed(totals: dict[str, float], key: str, fn, *args):
    started = time.process_time()
    out = fn(*args)
    totals[key] += time.process_time() - started
    return out


def _process_usage() -> dict[str, float]:
    times = os.times()
    return {
        "cpu_s": times.user + times.system,
        "total_s": time.perf_counter() - START_S,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _with_threads(dep, edge_name: str, threads: int):
    """The deployment with the edge detector's ONNX Runtime intra-op threads set to ``threads``."""
    edge = dep.edges[edge_name]
    detector = edge.detector.model_copy(update={"intra_op_threads": threads})
    edges = {**dep.edges, edge_name: edge.model_copy(update={"detector": detector})}
    return dep.model_copy(update={"edges": edges})


def _path(url: str) -> str:
    return str(resolve(url)) if url.startswith("package://") else url


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["baseline", "calibrate"], required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--frames", type=int, default=0, help="frames per camera at most (0: all)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
