#!/usr/bin/env python3
"""CPU time of each step of the broker's loop for one ROI and its answer, one ROI at a time.

    python -m tools.bench_broker_steps [--rois 3000] [--rounds 2] [--reference PYTHON] [--floor] [--json FILE|-]

The real loop of ``vcascade broker`` (:class:`vcascade.broker.server.BrokerLoop`, its own dispatcher and
telemetry) on real tcp sockets, driven by an edge-like and a worker-like DEALER in the same process: an ROI as an
edge sends it (a recognizer, a send reason, a 1-s deadline, 48 KiB payload), its dispatch (nothing else is queued,
so since issue 32 the broker hands it off while handling it, and the dispatch step finds nothing to do), the
worker's ``Result`` and its return to the edge, then one idle round of the loop. Each step is timed with
``time.thread_time`` (CPU of the loop's thread only, so other processes' load does not count, though it cools
the caches between steps, as it does for a broker paced by live cameras); the mean over the ROIs after the first
10 % is printed per step, in us.

``--reference PYTHON`` runs the same measurement under another interpreter (another checkout's environment, e.g.
a git worktree of main): rounds alternate, this checkout then the reference, so both see the same load. ``--floor``
also measures :class:`FloorLoop`, a Python loop that only receives and forwards on the same sockets: what any
Python broker pays before its own work (the proxy's C loop pays less still: ``tools/bench_broker.py``). What
``tools/bench_broker.py`` measures end to end, this splits by step (docs/BENCHMARKS.md, "Broker throughput").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

STEPS = (
    "receive ROI", "handle ROI (decode, book, hand off or queue)", "dispatch queued (pick, re-encode, send)",
    "receive answer", "handle answer (decode, complete, send)", "idle round (poll, dispatch, housekeeping)",
)  # fmt: skip
WAIT_MS = 5000
PAYLOAD_BYTES = 48 * 1024


class FloorLoop:
    """The floor of a Python loop between the same sockets: what :class:`vcascade.broker.server.BrokerLoop` would cost
    if it did nothing but receive and forward (the same ``zmq_poll``, :func:`waiting_messages` and
    :func:`send_frames`), with no decoding, books, deadlines or counting: each ROI goes to the one worker, each
    answer to the one edge. Only for ``--floor``; it refuses nothing, so it is no broker."""

    def __init__(self, frontend, backend) -> None:
        import zmq

        self.frontend, self.backend = frontend, backend
        self._poll_items = [(backend, zmq.POLLIN), (frontend, zmq.POLLIN)]
        self.worker = self.edge = b""
        self.results = 0

    def _on_frontend(self, frames: list) -> None:
        from vcascade.core.transport.sockets import send_frames

        self.edge = frames[0].bytes
        send_frames(self.backend, [self.worker, *frames[1:]])

    def _on_backend(self, frames: list) -> None:
        from vcascade.core.transport.sockets import send_frames

        if not self.worker:  # the worker's Ready
            self.worker = frames[0].bytes
            return
        send_frames(self.frontend, [self.edge, *frames[1:]])
        self.results += 1

    def _poll_round(self, timeout_ms: int) -> None:
        import zmq

        from vcascade.core.transport.sockets import waiting_messages

        for sock, _ in zmq.zmq_poll(self._poll_items, timeout_ms):
            handle = self._on_backend if sock is self.backend else self._on_frontend
            for frames in waiting_messages(sock, copy=False):
                handle(frames)

    def _dispatch(self) -> None:
        pass

    def _housekeeping(self) -> None:
        pass


def measure(rois: int, floor: bool = False) -> dict[str, float]:
    """Mean CPU per step, us, over ``rois`` ROIs (the first 10 % left out: warm-up); ``floor``: of a
    :class:`FloorLoop` instead of the broker's loop."""
    import zmq

    from vcascade.broker import server
    from vcascade.broker.dispatch import Dispatcher
    from vcascade.core.protocol import wire
    from vcascade.core.schema.broker import HeartbeatConfig
    from vcascade.core.transport.sockets import make_socket, waiting_messages

    ctx = zmq.Context()
    front, back = make_socket(ctx, zmq.ROUTER), make_socket(ctx, zmq.ROUTER)
    front_port, back_port = front.bind_to_random_port("tcp://127.0.0.1"), back.bind_to_random_port("tcp://127.0.0.1")
    edge, worker = make_socket(ctx, zmq.DEALER, identity="e1"), make_socket(ctx, zmq.DEALER, identity="w1")
    edge.connect(f"tcp://127.0.0.1:{front_port}")
    worker.connect(f"tcp://127.0.0.1:{back_port}")
    dispatcher = Dispatcher(100_000, answer_timeout_s=20.0)
    loop_class = getattr(server, "BrokerLoop", None) or getattr(server, "_BrokerLoop")  # older checkouts: private
    loop = FloorLoop(front, back) if floor else loop_class("b1", front, back, dispatcher, HeartbeatConfig(), None)
    worker.send(wire.encode(wire.Ready(worker="w1", credits=100, recognizer="bench")))

    def take(sock: zmq.Socket, kind: type) -> wire.Message:
        """The next message of ``kind`` on a DEALER (heartbeats skipped)."""
        while True:
            if not sock.poll(WAIT_MS):
                raise RuntimeError(f"no {kind.__name__} within {WAIT_MS} ms")
            header = wire.decode(sock.recv_multipart()[0])
            if isinstance(header, kind):
                return header

    def handle(sock: zmq.Socket, handler) -> tuple[float, float]:
        """Receive what waits on a broker socket, then handle it: the CPU time of each, s."""
        if not sock.poll(WAIT_MS):
            raise RuntimeError(f"nothing on the broker's socket within {WAIT_MS} ms")
        t0 = time.thread_time()
        messages = list(waiting_messages(sock, copy=False))
        t1 = time.thread_time()
        for frames in messages:
            handler(frames)
        return t1 - t0, time.thread_time() - t1

    handle(back, loop._on_backend)  # the worker's Ready
    payload, samples = bytes(PAYLOAD_BYTES), []
    for i in range(rois):
        roi = wire.Roi(roi_id=f"r-{i}", camera="bench", frame_seq=i, stream_ts_ms=0.0,
                       capture_unix_ms=time.time() * 1e3, xyxy=(0.0, 0.0, 128.0, 128.0), crop_xyxy=(0, 0, 128, 128),
                       class_id=0, score=0.9, ttl_ms=1000.0, recognizer="bench", send_reason="first")  # fmt: skip
        edge.send_multipart([wire.encode(roi), payload])
        receive_roi, handle_roi = handle(front, loop._on_frontend)
        t0 = time.thread_time()
        loop._dispatch()
        dispatch = time.thread_time() - t0
        sent = take(worker, wire.Roi)
        worker.send(wire.encode(wire.Result(roi_id=sent.roi_id, worker="w1")))
        receive_answer, handle_answer = handle(back, loop._on_backend)
        t0 = time.thread_time()
        loop._poll_round(0)
        loop._dispatch()
        loop._housekeeping()
        idle = time.thread_time() - t0
        take(edge, wire.Result)
        samples.append((receive_roi, handle_roi, dispatch, receive_answer, handle_answer, idle))
    results = loop.results if floor else loop.telemetry.counts.results
    if results != rois:
        raise RuntimeError(f"{results} results for {rois} ROIs")
    for sock in (front, back, edge, worker):
        sock.close(linger=0)
    ctx.term()
    kept = samples[rois // 10 :]
    return {step: statistics.mean(s[k] for s in kept) * 1e6 for k, step in enumerate(STEPS)}


def _reference(python: str, rois: int) -> dict[str, float]:
    """:func:`measure` under the interpreter ``python``, this file run as a script."""
    script = Path(__file__).resolve()
    proc = subprocess.run([python, str(script), "--rois", str(rois), "--json", "-"], capture_output=True, text=True,
                          check=True, cwd=script.parents[1])  # fmt: skip
    return json.loads(proc.stdout)["rounds"][0]["broker"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rois", type=int, default=3000, help="ROIs per round (default 3000)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, alternating with the reference (default 1)")
    parser.add_argument("--reference", metavar="PYTHON", help="also measure the broker this interpreter runs")
    parser.add_argument("--floor", action="store_true",
                        help="also measure a bare Python loop that only receives and forwards (FloorLoop)")
    parser.add_argument("--json", help="also write the results as JSON to this file ('-': stdout, no table)")
    args = parser.parse_args(argv)
    rounds = []
    for _ in range(args.rounds):
        rounds.append({"broker": measure(args.rois)})
        if args.floor:
            rounds[-1]["floor"] = measure(args.rois, floor=True)
        if args.reference:
            rounds[-1]["reference"] = _reference(args.reference, args.rois)
    targets = list(rounds[0])
    means = {t: {step: statistics.mean(r[t][step] for r in rounds) for step in STEPS} for t in targets}
    res = {"rois": args.rois, "rounds": rounds, "mean_us": means, "loadavg": os.getloadavg()}
    if args.json == "-":
        print(json.dumps(res, indent=2))
        return 0
    print(f"CPU per step, us (mean of {args.rounds} round(s) of {args.rois} ROIs): " + " | ".join(targets))
    for step in (*STEPS, "total"):
        cells = [sum(means[t].values()) if step == "total" else means[t][step] for t in targets]
        print(f"{step:<45}" + "".join(f"{cell:>12.1f}" for cell in cells))
    print(f"load average {' '.join(f'{x:.2f}' for x in res['loadavg'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
