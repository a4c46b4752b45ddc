"""Cost of routing by recognizer in the broker's pure dispatch policy (no sockets): dispatches per second.

Workloads, each a backlog of ROIs over 8 cameras dispatched to 4 workers (32 credits) and completed at once:

* ``any``: ROIs and workers without a recognizer (the shape of a deployment before routing);
* ``routed``: two recognizers, two workers each;
* ``absent``: three recognizers, one without a worker: its ROIs wait in their queues and every dispatch
  passes them over (the no-head-of-line-blocking case).

Runs are interleaved (any, routed, absent, any, ...) so machine noise hits them alike; the medians and the
ratios to ``any`` are printed. Usage: ``python -m tools.bench_routing [--rois 20000] [--reps 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

from vcascade.broker.dispatch import Dispatcher, Pending

WORKLOADS = {
    "any": ([""], [("w1", ""), ("w2", ""), ("w3", ""), ("w4", "")]),
    "routed": (["a", "b"], [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")]),
    "absent": (["a", "b", "c"], [("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b")]),
}


def dispatches_per_s(rois: int, recognizers: list[str], workers: list[tuple[str, str]]) -> float:
    """Dispatch-and-complete rate of one backlog of ``rois`` ROIs, per second of wall time."""
    d = Dispatcher(queue_max=rois + 1)
    for name, recognizer in workers:
        d.worker_ready(name, 32, 0.0, recognizer)
    for i in range(rois):
        d.enqueue(Pending(f"r{i}", f"cam{i % 8}", 0.0, recognizer=recognizers[i % len(recognizers)]))
    start_s, done = time.perf_counter(), 0
    while True:
        flight, _ = d.next_dispatch(0.0)
        if flight is None:
            return done / (time.perf_counter() - start_s)
        d.complete(flight.pending.roi_id, flight.worker)
        done += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rois", type=int, default=20_000, help="ROIs per run")
    parser.add_argument("--reps", type=int, default=5, help="runs per workload (interleaved)")
    args = parser.parse_args()
    rates: dict[str, list[float]] = {name: [] for name in WORKLOADS}
    for _ in range(args.reps):
        for name, (recognizers, workers) in WORKLOADS.items():
            rates[name].append(dispatches_per_s(args.rois, recognizers, workers))
    base = statistics.median(rates["any"])
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:>7}: {median:9.0f} dispatches/s (median of {args.reps}), {median / base:5.2f} x any")


if __name__ == "__main__":
    main()
