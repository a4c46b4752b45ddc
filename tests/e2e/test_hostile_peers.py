"""Process-level fuzz (issue 17): thousands of hostile messages to a live deployment whose results keep flowing.

A broker, a worker, a stage group (the worker's second stage) and an edge with its control socket run as
``vcascade broker|worker|stage-group|edge`` processes on a looping file camera. Once results flow, extra sockets
send hostile messages, generated from a fixed seed, for a bounded time: to the broker's frontend and backend
(DEALERs playing an edge and a worker), to the stage group's port (a DEALER playing the worker) and to the edge's
control socket (a DEALER playing a REQ client, or not). Kinds: random bytes, truncated, oversized and deeply
nested msgpack, unknown kinds, other protocol versions, wrong field types, valid kinds on the wrong socket,
made-up drop reasons and peer names, bad credits, bad tensor specs, wrong frame counts, pickle and empty frames.

Every message sent is one that the receiver's own decoder (the shared gate, :mod:`vcascade.core.protocol.bounded_decode`)
refuses; its reason is computed here with that decoder. Asserted: every process lives; the edge's results rose
during the fuzz; each receiver's malformed counter rose by exactly what was sent, per reason; no label value
outside the fixed sets and no peer-made string appears in any /metrics; the control socket still answers
``camera list``; every process stops with 0 and the edge's books balance (sent = results + drops).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import yaml
import zmq
from prometheus_client.parser import text_string_to_metric_families

from tests.demo import EMBEDDER, demo_data, scrape_metrics
from tests.e2e.test_runtime_cameras import _stop
from tests.hostile import deep_header
from vcascade.center.stages.link import LINK_VERSION, decode_message
from vcascade.core.protocol import control
from vcascade.core.protocol import wire
from vcascade.core.protocol.bounded_decode import MAX_HEADER_BYTES, REASONS, MalformedMessage
from vcascade.core.config import load_config

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SEED = 17
PER_TARGET = 1000
"""Hostile messages generated per target (fewer are sent: those a decoder would accept are left out)."""
FUZZ_S = 45.0
"""Longest time the messages are spread over, s."""
BURST = 25
"""Messages per target between two pauses; with :data:`PAUSE_S`, about 4 x 40 messages a second."""
PAUSE_S = 0.6
STARTUP_S = 240.0
"""Until the first results: three processes import torch or onnxruntime on a shared 2-core machine."""
MARK = "fuzzmark"
"""In every peer-made name, drop reason and hop: never to be seen in a /metrics page."""
RECEIVER_REASONS = {"frames", "tensor", "wrong_kind", "unexpected_kind", "bad_credits", "worker_limit",
                    "recognizer_changed"}  # fmt: skip
KNOWN_REASONS = set(REASONS) | RECEIVER_REASONS
CONTROL_OUTCOMES = {"ok", "refused", "malformed", "version", "timeout"}

Frames = list[bytes]


# ---------------------------------------------------------------- what the peers send


def _junk(rng: random.Random, depth: int = 0) -> object:
    """A random msgpack-able value: nil, bools, huge ints, NaN/inf, text, bytes, nested lists and maps."""
    makers = [
        lambda: None,
        lambda: rng.random() < 0.5,
        lambda: rng.randint(-(2**63), 2**64 - 1),
        lambda: rng.choice([math.nan, math.inf, -1e308]),
        lambda: f"{MARK}-{rng.randrange(10**6)}",
        lambda: rng.randbytes(rng.randrange(12)),
        lambda: rng.randint(-3, 3),
        lambda: [_junk(rng, depth + 1) for _ in range(rng.randrange(4))],
        lambda: {f"{MARK}{i}": _junk(rng, depth + 1) for i in range(rng.randrange(4))},
    ]
    return makers[rng.randrange(len(makers) if depth < 3 else len(makers) - 2)]()  # fmt: skip


def _common(rng: random.Random, base: dict, version: int) -> dict[str, Callable[[], Frames]]:
    """Generators of hostile frames every receiver gets, built around ``base`` (one valid header as a map)."""
    encoded = msgspec.msgpack.encode(base)
    field_names = [k for k in base if k not in ("v",)]
    return {
        "random_bytes": lambda: [rng.randbytes(rng.randrange(1, 300))],
        "truncated": lambda: [encoded[: rng.randrange(1, len(encoded))]],
        "oversized": lambda: [msgspec.msgpack.encode({**base, MARK: rng.randbytes(MAX_HEADER_BYTES)})],
        "deep": lambda: [deep_header(base, levels=rng.randrange(33, 5000))],
        "other_version": lambda: [msgspec.msgpack.encode({**base, "v": rng.choice([0, version + 1, 999, -1, 2**40])})],
        "unknown_kind": lambda: [
            msgspec.msgpack.encode({**base, "kind": f"{MARK}{rng.randrange(99)}", "op": f"{MARK}{rng.randrange(99)}"})
        ],
        "wrong_types": lambda: [msgspec.msgpack.encode({**base, rng.choice(field_names): _junk(rng)})],
        "junk_map": lambda: [
            msgspec.msgpack.encode({"v": version, **{rng.choice(field_names): _junk(rng) for _ in range(3)}})
        ],
        "pickle": lambda: [b"\x80\x04\x95" + rng.randbytes(20)],
        "empty": lambda: [b""],
    }


def _roi() -> dict:
    return msgspec.to_builtins(wire.Roi(roi_id="f-1", camera="street-1", frame_seq=1, stream_ts_ms=0.0,
                                        capture_unix_ms=0.0, xyxy=(0.0, 0.0, 8.0, 8.0), crop_xyxy=(0, 0, 8, 8),
                                        class_id=1, score=0.5))  # fmt: skip


def frontend_kinds(rng: random.Random) -> dict[str, Callable[[], Frames]]:
    """What a hostile edge sends to the broker's frontend (an ROI header is followed by its crop frame)."""
    roi = _roi()
    kinds = {
        name: (lambda make=make: [*make(), b"crop"]) for name, make in _common(rng, roi, wire.PROTOCOL_VERSION).items()
    }
    ready = wire.encode(wire.Ready(worker="worker-1", credits=4, recognizer=EMBEDDER))
    kinds["frames"] = lambda: [msgspec.msgpack.encode(roi)] + [b"crop"] * rng.choice([0, 2, 3])
    kinds["wrong_socket"] = lambda: [ready]
    kinds["bad_camera_name"] = lambda: [msgspec.msgpack.encode({**roi, "camera": f"{MARK} {rng.randrange(99)}!"}), b"c"]
    return kinds


def backend_kinds(rng: random.Random) -> dict[str, Callable[[], Frames]]:
    """What a hostile worker sends to the broker's backend."""
    ready = msgspec.to_builtins(wire.Ready(worker="worker-1", credits=4, recognizer=EMBEDDER))
    kinds = _common(rng, ready, wire.PROTOCOL_VERSION)
    drop = {"kind": "drop", "v": wire.PROTOCOL_VERSION, "roi_id": "f-1", "where": "worker-1"}
    result = {"kind": "result", "v": wire.PROTOCOL_VERSION, "roi_id": "f-1", "worker": "worker-1"}
    kinds["made_up_drop_reason"] = lambda: [msgspec.msgpack.encode({**drop, "reason": f"{MARK}-{rng.randrange(99)}"})]
    kinds["made_up_hop"] = lambda: [msgspec.msgpack.encode({**result, "hops": [[f"{MARK}{rng.randrange(9)}", 1.0]]})]
    kinds["bad_worker_name"] = lambda: [msgspec.msgpack.encode({**result, "worker": f"{MARK} {rng.randrange(99)}/"})]
    kinds["bad_credits"] = lambda: [msgspec.msgpack.encode({**ready, "credits": rng.choice([-1, -(2**40), 10**9])})]
    kinds["wrong_socket"] = lambda: [msgspec.msgpack.encode(_roi()), b"crop"]
    kinds["frames"] = lambda: [msgspec.msgpack.encode(ready), b"extra"]
    return kinds


def stage_kinds(rng: random.Random) -> dict[str, Callable[[], Frames]]:
    """What a hostile worker sends to a stage group's port (header, then one frame per tensor spec)."""
    batch = {"kind": "batch", "seq": 1, "tensors": [], "compute_s": [], "v": LINK_VERSION}
    kinds = _common(rng, batch, LINK_VERSION)
    specs = [[[0, 2**63], "float32", 0, "c"], [[2**63, 0], "uint8", 0, "c"], [[0, 2**31, 2**31, 2**31], "bool", 0, "c"],
             [[1] * 9, "uint8", 1, "c"], [[2, 2], "complex64", 32, "c"], [[-1, -2], "uint8", 2, "c"],
             [[4], "float32", 16, "nhwc"], [[4], "float32", 16, "c"]]  # fmt: skip
    kinds["bad_tensor_spec"] = lambda: [msgspec.msgpack.encode({**batch, "tensors": [rng.choice(specs)]}),
                                        rng.randbytes(rng.choice([0, 1, 3, 16]))]  # fmt: skip
    kinds["frames"] = lambda: [msgspec.msgpack.encode({**batch, "tensors": [specs[-1]] * rng.randrange(1, 20)})]
    kinds["answer_kind"] = lambda: [msgspec.msgpack.encode({**batch, "kind": rng.choice(["result", "error"])})]
    return kinds


def control_kinds(rng: random.Random) -> dict[str, Callable[[], Frames]]:
    """What a hostile client sends to an edge's control socket: a REQ envelope (empty delimiter), or none."""
    listing = {"op": "camera_list", "v": control.PROTOCOL_VERSION}
    kinds = {
        name: (lambda make=make: [b"", *make()])
        for name, make in _common(rng, listing, control.PROTOCOL_VERSION).items()
    }
    kinds["no_envelope"] = lambda: [control.encode(control.CameraList())] * rng.randrange(1, 4)
    kinds["bad_camera"] = lambda: [b"", msgspec.msgpack.encode({"op": "camera_add", "v": control.PROTOCOL_VERSION,
                                                                "name": f"{MARK} !", "camera": _junk(rng)})]  # fmt: skip
    return kinds


# ---------------------------------------------------------------- what each receiver must count


def broker_reason(side: str, frames: Frames) -> str | None:
    """The malformed reason the broker counts for ``frames`` on ``side``; None for a message it would accept."""
    try:
        _, header, _ = wire.split_message([b"peer", *frames], n_routing=1)
    except MalformedMessage as exc:
        return exc.reason
    if side == "frontend":
        return "wrong_kind" if isinstance(header, (wire.Result, wire.Drop, wire.Ready)) else None
    if isinstance(header, wire.Ready):
        return None if 0 <= header.credits <= 100_000 else "bad_credits"
    return "wrong_kind" if isinstance(header, wire.Roi) else None


def stage_reason(frames: Frames) -> str | None:
    """The reason a stage group counts; None for a ``batch`` it would compute."""
    try:
        header, _ = decode_message(frames)
    except MalformedMessage as exc:
        return exc.reason
    return None if header.kind == "batch" else "unexpected_kind"


def control_outcome(frames: Frames) -> str | None:
    """The outcome the control socket counts (op ``unknown``); None for a request it would carry out."""
    if len(frames) != 2 or frames[0] != b"":
        return "malformed"
    try:
        control.decode_request(frames[1])
    except MalformedMessage as exc:
        return "version" if exc.reason == "version" else "malformed"
    return None


def hostile_messages(kinds: dict[str, Callable[[], Frames]], reason: Callable[[Frames], str | None],
                     n: int) -> list[tuple[str, Frames, str]]:  # fmt: skip
    """``n`` draws of (kind, frames, expected reason), kinds in turn at random, without those ``reason`` accepts."""
    names = sorted(kinds)
    drawn = [(name, kinds[name]()) for name in (names[i % len(names)] for i in range(n))]
    return [(name, frames, why) for name, frames in drawn if (why := reason(frames)) is not None]


# ---------------------------------------------------------------- the deployment


def _write_config(tmp_path: Path, free_port) -> tuple[Path, dict]:
    data = demo_data()
    del data["cameras"]["street-2"]
    data["cameras"]["street-1"].update(realtime=True, loop=True, detect_fps=2)
    edge = data["edges"]["edge-1"]
    edge["roi"]["policy"]["mode"] = "every_detection"
    edge.update(sinks=[{"type": "jsonl", "path": str(tmp_path / "results.jsonl"), "mode": "truncate"}],
                metrics_port=free_port(), control_port=free_port(), max_in_flight=8, drain_timeout_s=30.0)  # fmt: skip
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"].update(metrics_port=free_port(), devices=["cpu"], downstream="stages-b")
    data["stage_groups"] = {"stages-b": {"port": free_port(), "metrics_port": free_port(), "devices": ["cpu"]}}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def _start(kind: str, name: str, config: Path, tmp_path: Path, *extra: str) -> subprocess.Popen:
    with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "vcascade", kind, "--config", str(config), "--name", name,
                                 *extra], stdout=out, stderr=err, text=True, cwd=tmp_path)  # fmt: skip


def _samples(body: str, name: str) -> dict[tuple, float]:
    """``{sorted label items: value}`` of the samples called ``name`` in a /metrics page."""
    return {tuple(sorted(s.labels.items())): s.value for family in text_string_to_metric_families(body)
            for s in family.samples if s.name == name}  # fmt: skip


def _by(body: str, name: str, label: str, **where: str) -> Counter:
    """Sum of the samples ``name`` by the value of ``label``, over those matching ``where``."""
    totals: Counter = Counter()
    for labels, value in _samples(body, name).items():
        labels = dict(labels)
        if all(labels.get(k) == v for k, v in where.items()):
            totals[labels[label]] += int(value)
    return totals


@pytest.mark.filterwarnings("ignore:The given buffer is not writable")
def test_hostile_peers_never_stop_results_or_a_process(tmp_path, free_port, models_dir):
    config, data = _write_config(tmp_path, free_port)
    ports = {
        "broker": data["brokers"]["broker-1"]["metrics_port"],
        "worker": data["workers"]["worker-1"]["metrics_port"],
        "group": data["stage_groups"]["stages-b"]["metrics_port"],
        "edge": data["edges"]["edge-1"]["metrics_port"],
    }
    procs = {name: _start(kind, name, config, tmp_path, *extra) for kind, name, extra in [
        ("broker", "broker-1", ()), ("stage-group", "stages-b", ()), ("worker", "worker-1", ()),
        ("edge", "edge-1", ("--model-dir", str(models_dir)))]}  # fmt: skip
    ctx = zmq.Context()
    try:
        rng = random.Random(SEED)
        targets = {  # name: (endpoint, messages)
            "frontend": (f"tcp://127.0.0.1:{data['brokers']['broker-1']['frontend_port']}",
                         hostile_messages(frontend_kinds(rng), lambda f: broker_reason("frontend", f), PER_TARGET)),
            "backend": (f"tcp://127.0.0.1:{data['brokers']['broker-1']['backend_port']}",
                        hostile_messages(backend_kinds(rng), lambda f: broker_reason("backend", f), PER_TARGET)),
            "stage": (f"tcp://127.0.0.1:{data['stage_groups']['stages-b']['port']}",
                      hostile_messages(stage_kinds(rng), stage_reason, PER_TARGET)),
            "control": (load_config(config).edges["edge-1"].control_endpoint(),
                        hostile_messages(control_kinds(rng), control_outcome, PER_TARGET)),
        }  # fmt: skip
        results_before = _wait_for_results(ports["edge"], procs, tmp_path)
        before = _counted(ports)
        sent_s = _send_all(ctx, targets, procs)
        results_after = _edge_results(scrape_metrics(ports["edge"]))
        expected = {name: Counter(why for _, _, why in messages) for name, (_, messages) in targets.items()}
        counted = _wait_counted(ports, before, expected, procs)
        kinds = {
            name: dict(sorted(Counter(kind for kind, _, _ in messages).items()))
            for name, (_, messages) in targets.items()
        }
        print(f"\nsent {sum(map(len, (m for _, m in targets.values())))} hostile messages in {sent_s:.1f} s, "
              f"by target and kind: {json.dumps(kinds)}")  # fmt: skip
        print(f"counted by reason: {json.dumps(counted)}")
        print(f"edge results during the fuzz: {results_before} -> {results_after}")

        assert {name: p.poll() for name, p in procs.items()} == dict.fromkeys(procs), "a process died"
        assert counted == {name: dict(expected[name]) for name in targets}
        assert results_after > results_before, "results stopped flowing during the fuzz"
        _assert_fixed_labels([scrape_metrics(port) for port in ports.values()])
        listing = _camera_list(ctx, targets["control"][0])
        assert listing.ok and listing.cameras["street-1"]["state"] == "streaming", listing
        assert _stop(procs["edge-1"]) == 0, (tmp_path / "edge-1.err").read_text()[-3000:]
    finally:
        ctx.destroy(linger=0)
        codes = {name: _stop(p) for name, p in reversed(procs.items())}
    assert codes == dict.fromkeys(procs, 0), {n: (tmp_path / f"{n}.err").read_text()[-2000:] for n in procs}
    tally = json.loads((tmp_path / "edge-1.out").read_text())["cameras"]["street-1"]
    print(f"edge books: sent={tally['sent']} results={tally['results']} drops={tally['drops']}")
    assert tally["sent"] > 0 and tally["sent"] == tally["results"] + sum(tally["drops"].values()), tally


def _wait_for_results(edge_port: int, procs: dict[str, subprocess.Popen], tmp_path: Path) -> int:
    deadline = time.monotonic() + STARTUP_S
    while (results := _edge_results(scrape_metrics(edge_port))) < 3:
        dead = {n: (tmp_path / f"{n}.err").read_text()[-2000:] for n, p in procs.items() if p.poll() is not None}
        assert not dead, dead
        assert time.monotonic() < deadline, f"no results within {STARTUP_S} s"
        time.sleep(0.5)
    return results


def _edge_results(body: str) -> int:
    return sum(_by(body, "vcascade_edge_results_total", "camera").values())


def _counted(ports: dict[str, int]) -> dict[str, dict[str, int]]:
    """Malformed messages counted so far per target, by reason (control: by outcome of op ``unknown``)."""
    broker, group, edge = (scrape_metrics(ports[k]) for k in ("broker", "group", "edge"))
    name = "vcascade_broker_malformed_messages_total"
    return {"frontend": dict(_by(broker, name, "reason", side="frontend")),
            "backend": dict(_by(broker, name, "reason", side="backend")),
            "stage": dict(_by(group, "vcascade_stage_group_malformed_messages_total", "reason")),
            "control": dict(_by(edge, "vcascade_edge_control_requests_total", "outcome", op="unknown"))}  # fmt: skip


def _send_all(ctx: zmq.Context, targets: dict, procs: dict[str, subprocess.Popen]) -> float:
    """Send every target's messages in bursts of :data:`BURST`, pausing :data:`PAUSE_S` between rounds (within
    :data:`FUZZ_S`), reading and discarding whatever comes back (control replies, stage-group answers)."""
    socks = {}
    for name, (endpoint, _) in targets.items():
        socks[name] = ctx.socket(zmq.DEALER)
        socks[name].setsockopt(zmq.SNDTIMEO, 5000)
        socks[name].connect(endpoint)
    t0 = time.monotonic()
    for start in range(0, max(len(m) for _, m in targets.values()), BURST):
        assert time.monotonic() - t0 < FUZZ_S, f"sending took over {FUZZ_S} s"
        assert all(p.poll() is None for p in procs.values()), {n: p.returncode for n, p in procs.items()}
        for name, (_, messages) in targets.items():
            for _, frames, _ in messages[start : start + BURST]:
                socks[name].send_multipart(frames)
        time.sleep(PAUSE_S)
        for sock in socks.values():
            while sock.poll(0):
                sock.recv_multipart()
    return time.monotonic() - t0


def _wait_counted(ports: dict[str, int], before: dict, expected: dict, procs: dict) -> dict[str, dict[str, int]]:
    """The rise of each malformed counter since ``before``, once it reaches ``expected`` (or after 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        now = _counted(ports)
        rise = {t: {r: n - before[t].get(r, 0) for r, n in now[t].items() if n > before[t].get(r, 0)} for t in now}
        if rise == {t: dict(e) for t, e in expected.items()} or time.monotonic() > deadline:
            return rise
        assert all(p.poll() is None for p in procs.values()), {n: p.returncode for n, p in procs.items()}
        time.sleep(0.5)


def _assert_fixed_labels(bodies: list[str]) -> None:
    """Malformed reasons and control outcomes only from their fixed sets; no peer-made string anywhere."""
    for body in bodies:
        assert body and MARK not in body
        for name in ("vcascade_broker_malformed_messages_total", "vcascade_stage_group_malformed_messages_total",
                     "vcascade_worker_malformed_messages_total", "vcascade_edge_malformed_messages_total"):  # fmt: skip
            assert set(_by(body, name, "reason")) <= KNOWN_REASONS, _by(body, name, "reason")
        assert set(_by(body, "vcascade_edge_control_requests_total", "outcome")) <= CONTROL_OUTCOMES


def _camera_list(ctx: zmq.Context, endpoint: str) -> control.Reply:
    sock = ctx.socket(zmq.REQ)
    try:
        sock.connect(endpoint)
        sock.send(control.encode(control.CameraList()))
        assert sock.poll(30_000), "the control socket no longer answers"
        return control.decode_reply(sock.recv())
    finally:
        sock.close(linger=0)
