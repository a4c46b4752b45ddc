"""What the scale harness computes from the edges' books: pure functions, no processes (tests/scripts).

Definitions (docs/BENCHMARKS.md, "Scale"):

* served share of a camera = results / sent; **Jain's fairness index** over cameras that sent anything,
  ``J = (sum x)^2 / (n * sum x^2)`` (R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and
  Discrimination for Resource Allocation in Shared Computer Systems", DEC-TR-301, 1984): 1 when every camera is
  served the same share, 1/n when one camera takes everything.
* **goodput** = results whose end-to-end latency (capture to result, on the edge) is within the deadline, per s
  of the run; **late share** = results past the deadline / results.
* **conservation**: per camera, ``sent = results + drops`` (every ROI ended exactly once, DESIGN.md).
* **first sightings served**: tracks (camera, track id) whose first ROI (``send_reason`` ``first``) got a
  result within the deadline, over tracks whose first ROI was sent.
* **recovery time** after a broker is killed at ``t_kill``: from ``t_kill`` to the start of the first 0.5-s bin
  from which served ROIs/s stay at >= 90 % of the rate before the kill for the rest of the run (the bins at
  both ends of the run excluded); a bound within one bin of the true time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

RECOVERY_BIN_S = 0.5
RECOVERED_SHARE = 0.9
LATE_COUNT_KEY = "late_results"
"""Key of the count of late results in an edge's sums of their latency accounts (tools/scale_edge.py)."""


def jain_index(shares: Sequence[float]) -> float:
    """Jain's fairness index of ``shares`` (each >= 0); 1.0 for an empty or all-zero list."""
    x = np.asarray(shares, dtype=float)
    if len(x) == 0 or not x.any():
        return 1.0
    return float(x.sum() ** 2 / (len(x) * (x**2).sum()))


def served_shares(cameras: dict[str, dict]) -> list[float]:
    """results / sent of each camera that sent at least one ROI."""
    return [books["results"] / books["sent"] for books in cameras.values() if books["sent"]]


def unbalanced(cameras: dict[str, dict]) -> list[str]:
    """Cameras whose books do not balance (``sent != results + sum(drops)``)."""
    return [cam for cam, b in cameras.items() if b["sent"] != b["results"] + sum(b["drops"].values())]


def latency_summary(e2e_ms: Sequence[float], deadline_ms: float, duration_s: float) -> dict[str, float]:
    """p50/p99 end-to-end ms, goodput (ROIs/s within ``deadline_ms``) and late share of the results."""
    e2e = np.asarray(e2e_ms, dtype=float)
    if len(e2e) == 0:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "goodput": 0.0, "late_share": 0.0}
    on_time = int((e2e <= deadline_ms).sum())
    return {
        "p50_ms": float(np.percentile(e2e, 50)),
        "p99_ms": float(np.percentile(e2e, 99)),
        "goodput": on_time / duration_s,
        "late_share": 1.0 - on_time / len(e2e),
    }


def first_sightings_served(results: Iterable[Sequence], drops: Iterable[Sequence], deadline_ms: float) -> float:
    """Share of tracks whose first ROI got a result within ``deadline_ms`` (results rows: camera, e2e ms, done s,
    send reason, track; drops rows: camera, reason, send reason, track); 1.0 when no first ROI was sent."""
    served = {(r[0], r[4]) for r in results if r[3] == "first" and r[1] <= deadline_ms}
    missed = {(r[0], r[4]) for r in results if r[3] == "first" and r[1] > deadline_ms}
    missed |= {(d[0], d[3]) for d in drops if d[2] == "first"}
    total = len(served | missed)
    return len(served) / total if total else 1.0


def mean_hops_ms(sums_ms: Iterable[dict[str, float]]) -> dict[str, float]:
    """Mean ms per hop of the late results' latency accounts, from the edges' sums per hop (each sum holds
    ``end_to_end``, one term per late result; its count is the number of late results, :data:`LATE_COUNT_KEY`);
    empty when no result was late."""
    total: Counter[str] = Counter()
    for sums in sums_ms:
        total.update(sums)
    count = total.pop(LATE_COUNT_KEY, 0)
    return {hop: round(ms / count, 1) for hop, ms in total.items()} if count else {}


def drops_by_reason(drops: Iterable[Sequence]) -> dict[str, int]:
    """Drop counts by reason, most frequent first."""
    return dict(Counter(d[1] for d in drops).most_common())


def recovery_time_s(done_s: Sequence[float], kill_s: float, duration_s: float) -> float | None:
    """Seconds from ``kill_s`` until served ROIs/s is back to ``RECOVERED_SHARE`` of its rate before the kill and
    stays there (0.5-s bins of result completion times); None when it never recovers within the run."""
    bins = np.arange(0.0, duration_s + RECOVERY_BIN_S, RECOVERY_BIN_S)
    counts, _ = np.histogram(np.asarray(done_s, dtype=float), bins=bins)
    rate = counts / RECOVERY_BIN_S
    kill_bin = int(kill_s // RECOVERY_BIN_S)
    before = rate[1:kill_bin]  # the first bin is the ramp-up
    if len(before) == 0:
        return None
    target = RECOVERED_SHARE * float(before.mean())
    after = rate[kill_bin:-1]  # the last bin is cut by the end of the run
    for start in range(len(after)):
        if (after[start:] >= target).all():
            return max(0.0, (kill_bin + start) * RECOVERY_BIN_S - kill_s)
    return None
