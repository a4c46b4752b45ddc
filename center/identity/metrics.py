"""Identity space metrics (Prometheus, prefix ``vcascade_identity_``, label ``worker`` on all).

Module globals registered once per process, like :mod:`vcascade.center.metrics`; several workers in one process
(tests) differ by their ``worker`` label.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from vcascade.center.identity.space import MatchStats
from vcascade.core.telemetry.metrics import LATENCY_BUCKETS_S

GALLERY = Gauge("vcascade_identity_gallery_size", "Identities in this worker's copy of the identity space.", ["worker"])
ENROLMENTS = Counter(
    "vcascade_identity_enrolments_total", "ROIs that enrolled a new identity (provisional ones included).", ["worker"]
)
MATCHES = Counter("vcascade_identity_matches_total", "ROIs that matched a known identity.", ["worker"])
MERGES = Counter(
    "vcascade_identity_merges_total",
    "Identities folded into another, by kind (duplicate: this worker merged two live identities in the store; "
    "reconciled: a provisional id replaced by a store id; revised: an identity a track enrolled, folded into the "
    "one more looks of the track matched).",
    ["worker", "kind"],
)
PROVISIONAL = Counter(
    "vcascade_identity_provisional_results_total",
    "Results marked provisional (the store was away, or the identity has no store id yet).", ["worker"],
)
COMPARISONS = Counter(
    "vcascade_identity_comparisons_total",
    "Embedding comparisons made to match ROIs (with a camera topology, only the candidates').", ["worker"],
)
STORE_SECONDS = Histogram(
    "vcascade_identity_store_seconds", "Round-trip time of identity store calls, by operation, s.",
    ["worker", "op"], buckets=LATENCY_BUCKETS_S,
)
STORE_ERRORS = Counter(
    "vcascade_identity_store_errors_total", "Identity store calls that failed (store down, slow or refusing), by "
    "operation.", ["worker", "op"],
)
DROPPED_UPDATES = Counter(
    "vcascade_identity_dropped_updates_total",
    "Matches the store did not take because their identity had been evicted meanwhile.", ["worker"],
)
RECORDS_SKIPPED = Counter(
    "vcascade_identity_store_records_skipped_total",
    "Identity records pulled from the store and skipped, by reason (malformed: a field that is not a number, a "
    "vector of bytes that are not float32; wrong_length: a vector of another size than the space's); the others "
    "pulled with them are kept.", ["worker", "reason"],
)
STORE_RESETS = Counter(
    "vcascade_identity_store_resets_total",
    "Times the identity store was found to have lost its data, by how (generation_changed: its generation marker "
    "changed; ids_went_back: its id counter was below ids already seen).", ["worker", "reason"],
)
TRACK_REVISIONS = Counter(
    "vcascade_identity_track_revisions_total",
    "Tracks whose identity changed after more looks (their aggregate matched another identity better; the "
    "result line says so in identity_revised_from).", ["worker"],
)
IDS_REFUSED = Counter(
    "vcascade_identity_ids_refused_total",
    "Ids the store handed out at or below ids this worker had already seen, refused (never given to anyone).",
    ["worker"],
)


SKIP_REASONS = ("malformed", "wrong_length")
"""``reason`` label values of ``vcascade_identity_store_records_skipped_total``."""
RESET_REASONS = ("generation_changed", "ids_went_back")
"""``reason`` label values of ``vcascade_identity_store_resets_total``."""

MERGE_KINDS = ("duplicate", "reconciled", "revised")
"""``kind`` label values of ``vcascade_identity_merges_total``."""
STORE_OPS = ("reserve", "write", "changes", "merge", "sweep", "generation", "raise_ids")
"""``op`` label values: the :class:`vcascade.center.identity.store.IdentityStore` calls."""


class IdentityTelemetry:
    """Counts one worker's identity events into the metrics above. Thread-safe (Prometheus objects are)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        for family in (GALLERY, ENROLMENTS, MATCHES, PROVISIONAL, COMPARISONS, DROPPED_UPDATES, IDS_REFUSED,
                       TRACK_REVISIONS):
            family.labels(worker)  # exported from the start, at 0
        for kind in MERGE_KINDS:
            MERGES.labels(worker, kind)
        for op in STORE_OPS:
            STORE_ERRORS.labels(worker, op)
        for reason in SKIP_REASONS:
            RECORDS_SKIPPED.labels(worker, reason)
        for reason in RESET_REASONS:
            STORE_RESETS.labels(worker, reason)

    def matched(self, stats: MatchStats, gallery_size: int) -> None:
        """One micro-batch matched (:class:`vcascade.center.identity.space.MatchStats`); the gallery's size after."""
        MATCHES.labels(self.worker).inc(stats.matches)
        ENROLMENTS.labels(self.worker).inc(stats.enrolments)
        PROVISIONAL.labels(self.worker).inc(stats.provisional)
        COMPARISONS.labels(self.worker).inc(stats.comparisons)
        TRACK_REVISIONS.labels(self.worker).inc(stats.revisions)
        self.merged("revised", stats.folded)
        GALLERY.labels(self.worker).set(gallery_size)

    def gallery(self, size: int) -> None:
        """The local copy now holds ``size`` identities."""
        GALLERY.labels(self.worker).set(size)

    def merged(self, kind: str, count: int = 1) -> None:
        """``count`` identities merged (``duplicate`` or ``reconciled``)."""
        if count:
            MERGES.labels(self.worker, kind).inc(count)

    def store_call(self, op: str, seconds: float) -> None:
        """One store call ``op`` answered in ``seconds``."""
        STORE_SECONDS.labels(self.worker, op).observe(seconds)

    def store_failed(self, op: str) -> None:
        """One store call ``op`` raised."""
        STORE_ERRORS.labels(self.worker, op).inc()

    def updates_dropped(self, count: int) -> None:
        """``count`` pushed matches that the store dropped (identity evicted)."""
        if count:
            DROPPED_UPDATES.labels(self.worker).inc(count)

    def records_skipped(self, reason: str, count: int = 1) -> None:
        """``count`` pulled records skipped (``malformed`` or ``wrong_length``)."""
        if count:
            RECORDS_SKIPPED.labels(self.worker, reason).inc(count)

    def store_reset(self, reason: str) -> None:
        """The store was found to have lost its data (``generation_changed`` or ``ids_went_back``)."""
        STORE_RESETS.labels(self.worker, reason).inc()

    def ids_refused(self, count: int) -> None:
        """``count`` reserved ids refused: at or below ids already seen."""
        if count:
            IDS_REFUSED.labels(self.worker).inc(count)
