"""Stages across processes: the tensor link codec, and a real `vcascade stage-group` process chained to a worker."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
import zmq
from prometheus_client import REGISTRY

from tests.center.intake.test_preprocess import roi_item
from vcascade.center.intake.microbatch import MicroBatch
from vcascade.center.intake.preprocess import PreprocessSpec, prepare_micro_batch
from tests.center.chain import run_chained
from vcascade.center.stages.torch_stages import build_model, place_stages
from vcascade.center.stage_group import load_stage_range
from vcascade.center.stages.link import RemoteStageError, RemoteStages, StageUnreachable, decode_message, encode_message
from vcascade.center.stages.engine import StageEngine
from vcascade.center.worker import run_worker
from vcascade.core.schema import WorkerSettings
from vcascade.core.protocol import wire
from vcascade.core.config import ConfigError, load_config
from vcascade.core.transport.keys import generate_keys
from vcascade.core.transport.security import secure_client
from vcascade.core.transport.sockets import make_socket

VCASCADE = str(Path(sys.executable).with_name("vcascade"))
pytestmark = pytest.mark.filterwarnings("ignore:The given buffer is not writable")  # tensors are views on frames


# ---------------------------------------------------------------- codec


def test_tensors_cross_the_link_unchanged_channels_last_without_reordering():
    nchw = torch.randn(2, 8, 5, 7, generator=torch.Generator().manual_seed(0))
    cl = nchw.contiguous(memory_format=torch.channels_last)
    ids = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    frames = encode_message("result", 42, (cl, nchw, ids, torch.zeros(0)), compute_s=[0.5, 0.25])
    assert len(frames) == 5
    assert np.shares_memory(frames[1], cl.numpy()) and np.shares_memory(frames[2], nchw.numpy())  # no copies
    header, tensors = decode_message([bytes(f) for f in frames])
    assert (header.kind, header.seq, header.compute_s) == ("result", 42, [0.5, 0.25])
    assert [t.layout for t in header.tensors] == ["nhwc", "c", "c", "c"]
    assert tensors[0].is_contiguous(memory_format=torch.channels_last) and torch.equal(tensors[0], nchw)
    assert torch.equal(tensors[1], nchw) and torch.equal(tensors[2], ids) and tensors[3].numel() == 0


@pytest.mark.parametrize(
    "frames, reason",
    [
        ([], "frames"),
        ([b"\x80\x04pickle"], "pickle"),
        ([b"\xc1"], "not_msgpack"),
        ([b"\x93\x01\x02\x03"], "bad_fields"),
    ],
)
def test_malformed_headers_are_rejected(frames, reason):
    with pytest.raises(wire.MalformedMessage) as err:
        decode_message(frames)
    assert err.value.reason == reason


def test_frames_that_disagree_with_the_header_are_rejected():
    good = encode_message("batch", 1, (torch.ones(2, 3),))
    header, tensor = bytes(good[0]), bytes(good[1])
    for frames, reason in [([header], "frames"), ([header, tensor, tensor], "frames"), ([header, tensor[:-4]], "tensor")]:
        with pytest.raises(wire.MalformedMessage) as err:
            decode_message(frames)
        assert err.value.reason == reason
    with pytest.raises(ValueError):
        encode_message("batch", 1, (torch.ones(2, dtype=torch.bfloat16),))


# ---------------------------------------------------------------- real processes


def _write_config(demo_raw: dict, free_port, tmp_path: Path, timeout_s: float = 3.0, curve: bool = False) -> Path:
    raw = copy.deepcopy(demo_raw)
    if curve:
        generate_keys(tmp_path / "keys", ["broker-1", "edge-1", "worker-1", "stages-b"])
        raw["security"] = {"curve": {"enabled": True, "keys_dir": str(tmp_path / "keys")}}
    raw["heartbeat"] = {"interval_s": 30.0, "liveness": 10}  # the test plays a broker that never heartbeats
    for key in ("frontend_port", "backend_port", "metrics_port"):
        raw["brokers"]["broker-1"][key] = free_port()
    raw["edges"]["edge-1"].update(metrics_port=free_port(), sinks=[])
    raw["workers"]["worker-1"].update(metrics_port=free_port(), max_batch=4, max_wait_ms=20, credits=16,
                                      devices=["cpu"], downstream="stages-b", max_batches_in_flight=4)
    raw["stage_groups"] = {"stages-b": {"port": free_port(), "metrics_port": free_port(), "devices": ["cpu"],
                                        "timeout_s": timeout_s}}
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _start_group(config: Path) -> subprocess.Popen:
    """`vcascade stage-group` as a real process; returns once its ROUTER accepts connections."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([VCASCADE, "stage-group", "--config", str(config), "--name", "stages-b",
                             "--log-level", "WARNING"], env=env)
    port = load_config(config).stage_groups["stages-b"].port
    deadline = time.monotonic() + 180  # splitting the model takes seconds on a busy machine
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"stage group exited with {proc.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("stage group did not start listening")


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    return proc.wait(timeout=60)


def test_config_checks_that_worker_and_group_devices_cover_the_stages(demo_raw, free_port, tmp_path):
    path = _write_config(demo_raw, free_port, tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["stage_groups"]["stages-b"]["devices"] = ["cpu", "cpu"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"expected 2 devices in all"):
        load_config(path)
    raw["stage_groups"]["stages-b"]["devices"] = ["cpu"]
    raw["workers"]["worker-1"]["downstream"] = "nope"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"(?s)downstream = .nope.*no worker uses this group"):
        load_config(path)


def test_two_process_chain_gives_the_same_embeddings_as_one_process(demo_raw, free_port, tmp_path, crops):
    """Over CurveZMQ (the deployment enables it): a client without the keys is never served."""
    config = _write_config(demo_raw, free_port, tmp_path, curve=True)
    dep = load_config(config)
    recognizer = dep.recognizers["mobilenetv2-embedder"]
    spec = PreprocessSpec.from_config(recognizer)
    prepared = prepare_micro_batch([roi_item(n, p) for n, p in crops.items()], spec, "cpu", time.perf_counter())
    tensor, ok = prepared.batch, prepared.items
    expected = run_chained(place_stages(build_model(recognizer), recognizer.split_points, ["cpu", "cpu"], recognizer.input_hw),
                           tensor)

    group = _start_group(config)
    try:
        done: dict[int, MicroBatch] = {}
        endpoint = dep.stage_groups["stages-b"].endpoint()
        _assert_plaintext_client_refused(endpoint, tensor)
        secure = lambda sock: secure_client(sock, dep.security, "worker-1", "stages-b")  # noqa: E731
        remote = RemoteStages(zmq.Context.instance(), endpoint, 1, 60.0, secure=secure)
        local = load_stage_range(recognizer, ["cpu"], 0)
        engine = StageEngine([*local, remote], 2,
                             lambda b: done.setdefault(b.seq, b), lambda b, w, e: pytest.fail(f"{w}: {e!r}"))
        engine.start()
        rows = [[0, 1, 2], [3, 4, 5], [5, 0], [1], [2, 3, 4, 5]]  # micro-batches of several sizes in flight
        for seq, r in enumerate(rows):
            engine.submit(MicroBatch(seq, [ok[i] for i in r], (tensor[r],), 0.0, 0.0))
        assert engine.stop(timeout_s=120)
        _assert_group_survives_bad_input(endpoint, secure, tensor, local[0])
    finally:
        assert _stop(group) == 0
    assert sorted(done) == list(range(len(rows)))
    for seq, r in enumerate(rows):
        batch = done[seq]
        assert [item.roi.roi_id for item in batch.items] == [ok[i].roi.roi_id for i in r]
        torch.testing.assert_close(batch.data[0], expected[r], rtol=1e-5, atol=1e-5)
        assert batch.hop_names() == ["stage0", "stage1", "link"] and len(batch.compute_s) == 2


def _assert_group_survives_bad_input(endpoint: str, secure, tensor: torch.Tensor, stage0) -> None:
    """Garbage is counted and dropped by the group; a stage that raises answers an error; it keeps serving."""
    dealer = make_socket(zmq.Context.instance(), zmq.DEALER)
    secure(dealer)
    dealer.connect(endpoint)
    dealer.send_multipart([b"\x80\x04 pickled", b"x"])
    dealer.send_multipart(encode_message("result", 7, (tensor[:1],)))  # wrong kind for a group
    ended: dict[int, object] = {}
    remote = RemoteStages(zmq.Context.instance(), endpoint, 1, 60.0, secure=secure)
    engine = StageEngine([remote], 1, lambda b: ended.__setitem__(b.seq, b), lambda b, w, e: ended.__setitem__(b.seq, e))
    engine.start()
    engine.submit(MicroBatch(0, [], (torch.zeros(1, 5, 56, 56),), 0.0, 0.0))  # stage 1 wants 24 channels
    engine.submit(MicroBatch(1, [], (tensor[:1],), 0.0, 0.0))  # not stage 1's input either: raises too
    engine.submit(MicroBatch(2, [], stage0((tensor[:1],)), 0.0, 0.0))  # and the next good one is served
    assert engine.stop(timeout_s=60)
    dealer.close()
    assert isinstance(ended[0], RemoteStageError) and "stage1" in str(ended[0])
    assert isinstance(ended[1], RemoteStageError) and isinstance(ended[2], MicroBatch)


def _assert_plaintext_client_refused(endpoint: str, tensor: torch.Tensor) -> None:
    failures: list[BaseException] = []
    remote = RemoteStages(zmq.Context.instance(), endpoint, 1, 2.0)
    engine = StageEngine([remote], 1, lambda b: pytest.fail("served without CurveZMQ"),
                         lambda b, where, exc: failures.append(exc))
    engine.start()
    engine.submit(MicroBatch(0, [], (tensor[:1],), 0.0, 0.0))
    assert engine.stop(timeout_s=30)
    assert len(failures) == 1 and isinstance(failures[0], StageUnreachable)


def _roi(roi_id: str) -> bytes:
    return wire.encode(wire.Roi(roi_id=roi_id, camera="street-1", frame_seq=150, stream_ts_ms=6000.0,
                                capture_unix_ms=1.7e12, xyxy=(199.0, 44.0, 331.0, 268.0),
                                crop_xyxy=(195, 40, 335, 272), class_id=1, score=0.8))


def _answers(router: zmq.Socket, n: int, timeout_s: float) -> dict[str, wire.Message]:
    answers: dict[str, wire.Message] = {}
    deadline = time.monotonic() + timeout_s
    while len(answers) < n and router.poll(max(1, int((deadline - time.monotonic()) * 1000))):
        _, header, _ = wire.split_message(router.recv_multipart(), 1)
        if isinstance(header, (wire.Result, wire.Drop)):
            assert header.roi_id not in answers
            answers[header.roi_id] = header
    return answers


def test_worker_with_a_stage_group_survives_its_death_and_reconnects(demo_raw, free_port, tmp_path, crops):
    config = _write_config(demo_raw, free_port, tmp_path, timeout_s=3.0)
    dep = load_config(config)
    router = make_socket(zmq.Context.instance(), zmq.ROUTER)
    router.bind(dep.brokers["broker-1"].endpoint("backend", bind=True))
    group = _start_group(config)
    stop = threading.Event()
    reports: list[dict] = []
    settings = WorkerSettings.from_deployment(dep, "worker-1")
    worker = threading.Thread(target=run_worker, args=(settings, stop, reports.append), daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + 180
        identity = None
        while identity is None and time.monotonic() < deadline:
            assert router.poll(int((deadline - time.monotonic()) * 1000))
            frames = router.recv_multipart()
            identity = frames[0] if isinstance(wire.decode(frames[1]), wire.Ready) else None

        for roi_id, crop in [("a-bike150", "bike150"), ("a-bike170", "bike170"), ("a-car", "car")]:
            router.send_multipart([identity, _roi(roi_id), crops[crop]])
        first = _answers(router, 3, 120)
        assert all(isinstance(a, wire.Result) for a in first.values()), first
        assert [n for n, _ in first["a-car"].hops] == ["batch_wait", "preprocess", "stage0", "stage1", "link", "head"]
        ids = {name: answer.output.identity_id for name, answer in first.items()}
        assert ids["a-bike150"] == ids["a-bike170"] != ids["a-car"]

        assert _stop(group, signal.SIGKILL) == -signal.SIGKILL  # the group dies without a word
        for i in range(4):
            router.send_multipart([identity, _roi(f"b-{i}"), crops["bike160"]])
        dead = _answers(router, 4, 60)
        assert {a.reason for a in dead.values() if isinstance(a, wire.Drop)} == {"stage_error"} and len(dead) == 4
        unreachable = REGISTRY.get_sample_value(
            "vcascade_worker_stage_errors_total", {"worker": "worker-1", "stage": "stage1", "reason": "stage_unreachable"})
        assert unreachable >= 1

        group = _start_group(config)  # back: the worker reconnects by itself
        recovered = None
        for attempt in range(60):
            router.send_multipart([identity, _roi(f"c-{attempt}"), crops["bike180"]])
            answer = _answers(router, 1, 30)[f"c-{attempt}"]
            if isinstance(answer, wire.Result):
                recovered = answer
                break
            time.sleep(0.5)
        assert recovered is not None and recovered.output.identity_id == first["a-bike150"].output.identity_id
    finally:
        stop.set()
        worker.join(timeout=30)
        if group.poll() is None:
            _stop(group)
        router.close()
    assert not worker.is_alive()
    final = reports[-1]
    assert final["final"] and final["rois"] == final["results"] + sum(final["drops"].values())
