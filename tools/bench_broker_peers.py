#!/usr/bin/env python3
"""The processes of ``tools/bench_broker.py`` around the intermediaries it measures: ``zmq.proxy`` and its floor in
Python (the intermediaries that are no broker), the worker-like process that answers every ROI at once, and the
edge-like sender that measures round trips. Each runs in its own process (``multiprocessing``, spawn), started
by :class:`tools.bench_broker.Bench`; method and figures: docs/BENCHMARKS.md, "Broker throughput"."""

from __future__ import annotations

import time

import zmq

from vcascade.core.protocol import wire
from vcascade.core.transport.sockets import make_socket, send_frames, waiting_messages

RECOGNIZER = "bench"
WORKER_CREDITS = 10_000
"""Credits of the worker-like process: never the limit, so the broker forwards as fast as it can."""
READY_EVERY_S = 1.0
WARMUP_TIMEOUT_S = 60.0
DRAIN_S = 2.0


# ---------------------------------------------------------------- processes


def run_proxy(frontend: str, backend: str) -> None:
    """``zmq.proxy(ROUTER, DEALER)``; runs until terminated. No ROUTER_MANDATORY: late answers are dropped."""
    ctx = zmq.Context()
    front, back = make_socket(ctx, zmq.ROUTER), make_socket(ctx, zmq.DEALER)
    front.setsockopt(zmq.ROUTER_MANDATORY, 0)  # a proxy must not die on an answer to a sender that left
    front.bind(frontend)
    back.bind(backend)
    zmq.proxy(front, back)


def run_floor(frontend: str, backend: str) -> None:
    """What ``zmq.proxy(ROUTER, DEALER)`` does, in a Python loop with the broker's own receive and send
    (``zmq_poll``, :func:`waiting_messages`, :func:`send_frames`): every message forwarded as received, nothing
    decoded, booked or counted. The floor of any broker written in Python; runs until terminated."""
    ctx = zmq.Context()
    front, back = make_socket(ctx, zmq.ROUTER), make_socket(ctx, zmq.DEALER)
    front.setsockopt(zmq.ROUTER_MANDATORY, 0)  # as run_proxy
    front.bind(frontend)
    back.bind(backend)
    items, other = [(back, zmq.POLLIN), (front, zmq.POLLIN)], {back: front, front: back}
    while True:
        for sock, _ in zmq.zmq_poll(items, 100):
            out = other[sock]
            for frames in waiting_messages(sock, copy=False):
                try:
                    send_frames(out, frames)
                except zmq.Again:  # a full pipe (not with 64 in flight and HWM 10,000): dropped, where the
                    pass  # proxy would block; the sender's drain then reports the ROI unanswered


def run_worker(backend: str, name: str, send_ready: bool) -> None:
    """Worker-like DEALER: answers every ROI with a Result at once; Ready every second when ``send_ready``."""
    ctx = zmq.Context()
    sock = make_socket(ctx, zmq.DEALER, identity=name)
    sock.connect(backend)
    ready = wire.encode(wire.Ready(worker=name, credits=WORKER_CREDITS, recognizer=RECOGNIZER))
    next_ready_s = 0.0
    while True:
        now_s = time.perf_counter()
        if send_ready and now_s >= next_ready_s:
            sock.send(ready)
            next_ready_s = now_s + READY_EVERY_S
        if not sock.poll(100):
            continue
        for _ in range(1000):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            _answer(sock, frames, name)


def _answer(sock: zmq.Socket, frames: list[zmq.Frame], name: str) -> None:
    """Reply ``[envelope..., Result]`` to ``[envelope..., Roi, payload]``; ignore anything else."""
    if len(frames) < 2:
        return  # Heartbeat and other single-frame messages from the broker
    try:
        header = wire.decode(frames[-2].buffer)
    except wire.MalformedMessage:
        return
    if isinstance(header, wire.Roi):
        envelope = [f.bytes for f in frames[:-2]]  # the proxy's routing frame; none through the broker
        sock.send_multipart([*envelope, wire.encode(wire.Result(roi_id=header.roi_id, worker=name))])


def run_sender(frontend: str, run_id: str, seconds: float, window: int, rate: float, payload_kb: int, ttl_ms: float,
               out) -> None:
    """Edge-like DEALER. ``rate == 0``: keep ``window`` in flight (throughput); else send ``rate`` ROIs/s.

    Puts ``{"answers", "sent", "elapsed_s", "drops", "rtt_ms": [...]}`` (round trips within the run) on ``out``.
    """
    ctx = zmq.Context()
    sock = make_socket(ctx, zmq.DEALER)
    sock.connect(frontend)
    sender = _Sender(sock, run_id, bytes(payload_kb * 1024), ttl_ms)
    sender.warm_up()
    if rate > 0:
        sender.paced(seconds, rate, window)
    else:
        sender.windowed(seconds, window)
    sender.drain()
    out.put(sender.summary())
    sock.close(linger=0)
    ctx.term()


class _Sender:
    def __init__(self, sock: zmq.Socket, run_id: str, payload: bytes, ttl_ms: float) -> None:
        self.sock, self.run_id, self.payload, self.ttl_ms = sock, run_id, payload, ttl_ms
        self.sent_s: dict[str, float] = {}
        self.rtt_ms: list[float] = []
        self.counter = self.answers = self.drops = 0
        self.measuring = False
        self.t0_s = self.t1_s = 0.0

    def send(self) -> None:
        self.counter += 1
        roi_id = f"{self.run_id}-{self.counter}"
        header = wire.Roi(
            roi_id=roi_id, camera="bench", frame_seq=self.counter, stream_ts_ms=0.0, capture_unix_ms=time.time() * 1e3,
            xyxy=(0.0, 0.0, 128.0, 128.0), crop_xyxy=(0, 0, 128, 128), class_id=0, score=0.9, ttl_ms=self.ttl_ms,
            recognizer=RECOGNIZER, send_reason="first",
        )  # fmt: skip
        self.sent_s[roi_id] = time.perf_counter()
        self.sock.send_multipart([wire.encode(header), self.payload], copy=False)

    def receive(self, timeout_ms: int) -> None:
        """Take every answer waiting (after up to ``timeout_ms`` for the first)."""
        if not self.sock.poll(timeout_ms):
            return
        while True:
            try:
                frame = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._on_answer(frame, time.perf_counter())

    def _on_answer(self, frame: bytes, now_s: float) -> None:
        try:
            header = wire.decode(frame)
        except wire.MalformedMessage:
            return
        if not isinstance(header, (wire.Result, wire.Drop)):
            return  # heartbeats
        sent_s = self.sent_s.pop(header.roi_id, None)
        if sent_s is None:
            return
        if isinstance(header, wire.Drop):
            self.drops += 1
        elif self.measuring and sent_s >= self.t0_s:
            self.answers += 1
            self.rtt_ms.append((now_s - sent_s) * 1e3)

    def warm_up(self) -> None:
        """One ROI through and back: the intermediary and the worker are connected and registered."""
        self.send()
        deadline_s = time.perf_counter() + WARMUP_TIMEOUT_S
        while self.sent_s and time.perf_counter() < deadline_s:
            self.receive(100)
        if self.sent_s:
            raise RuntimeError(f"no answer through {self.sock.LAST_ENDPOINT.decode()} in {WARMUP_TIMEOUT_S} s")

    def windowed(self, seconds: float, window: int) -> None:
        self.measuring, self.t0_s = True, time.perf_counter()
        while time.perf_counter() < self.t0_s + seconds:
            while len(self.sent_s) < window:
                self.send()
            self.receive(100)
        self.measuring, self.t1_s = False, time.perf_counter()

    def paced(self, seconds: float, rate: float, window: int) -> None:
        self.measuring, self.t0_s = True, time.perf_counter()
        interval_s, next_s = 1.0 / rate, self.t0_s
        while next_s < self.t0_s + seconds:
            now_s = time.perf_counter()
            if now_s >= next_s:
                if len(self.sent_s) < window:
                    self.send()
                next_s += interval_s
                continue
            wait_ms = int((next_s - now_s) * 1000)
            if wait_ms >= 1:
                self.receive(wait_ms)
            else:
                self.receive(0)
                time.sleep(max(0.0, next_s - time.perf_counter()))
        self.measuring, self.t1_s = False, time.perf_counter()

    def drain(self) -> None:
        deadline_s = time.perf_counter() + DRAIN_S
        while self.sent_s and time.perf_counter() < deadline_s:
            self.receive(50)

    def summary(self) -> dict:
        elapsed_s = self.t1_s - self.t0_s
        return dict(answers=self.answers, sent=self.counter, elapsed_s=elapsed_s, drops=self.drops, rtt_ms=self.rtt_ms)
