"""Graceful degradation at the edge: send less, in a fixed order, while the brokers report a backlog (pure).

Brokers put ``backlog_ms`` in their heartbeats: the mean time ROIs now wait in their queues
(:mod:`vcascade.broker.backlog`). Measured against the edge's deadline (``roi.ttl_ms``, the longest an ROI may
wait before compute), it sets a **shed level**; each level stops one more kind of send, in this order:

=====  ==========================  =====================================================================
level  backlog / ttl_ms reaches    sends that stop (suppressed as ``backlog``, still followed and tracked)
=====  ==========================  =====================================================================
1      :data:`RAISE_AT` [0] (0.2)  ``refresh``: the track was recognised already, a new look can wait
2      :data:`RAISE_AT` [1] (0.4)  ``better``: a better crop of a track already recognised
3      :data:`RAISE_AT` [2] (0.6)  ``every_detection``: the untracked policy's sends
=====  ==========================  =====================================================================

``first`` sightings are never shed by the edge: a new object is what the cascade exists to recognise; only
the deadline drops them. A level is left when the backlog falls below half the ratio that raised it
(hysteresis, so a backlog near a threshold does not flap), and everything is sent again once the backlog
clears. The edge takes the largest backlog among its live brokers (the one it may be sending to), and level 0
without a deadline (``ttl_ms: 0``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

SHED_ORDER: tuple[str, ...] = ("refresh", "better", "every_detection")
"""Send reasons (:data:`vcascade.edge.selection.roi_selection.SENT_REASONS`) shed at levels 1, 2, 3: level k sheds the first k."""

RAISE_AT: tuple[float, ...] = (0.2, 0.4, 0.6)
"""backlog / ttl_ms at which levels 1, 2, 3 start; each is left below half its value."""


def shed_level(backlogs_ms: Iterable[float], ttl_ms: float, level: int) -> int:
    """The next shed level from the live brokers' backlogs (ms), the deadline ``ttl_ms`` and the current ``level``.

    Returns the highest level whose raise ratio the largest backlog reaches; when that is below ``level``, the
    current level is kept while the backlog stays at or above half its raise ratio (then one level down per call).
    """
    worst_ms = max((ms for ms in backlogs_ms if not math.isnan(ms)), default=0.0)  # a peer's NaN: no backlog
    if ttl_ms <= 0:
        return 0
    ratio = worst_ms / ttl_ms
    raised = sum(ratio >= at for at in RAISE_AT)
    if raised >= level:
        return raised
    return level if ratio >= RAISE_AT[level - 1] / 2 else level - 1


def sheds(send_reason: str, level: int) -> bool:
    """True when a send for ``send_reason`` is stopped at shed ``level`` (``first`` never is)."""
    return send_reason in SHED_ORDER[:level]
