"""What an identity store keeps and the calls every store backend answers (backends: :mod:`.backends`).

A store holds one identity space per recognizer (its ``space`` name). Per identity: the sum of the unit
embeddings matched to it and their count (the centroid is the L2-normalised sum: the maximum-likelihood
prototype of a von Mises-Fisher cluster, as in :class:`vcascade.center.heads.EmbeddingHead`), the camera and
time of its last sighting, the wall time of its last sighting (retention and least-recently-seen eviction), and
its state, and its **enrolment**: the unit embedding it was enrolled with (it never drifts) and the version at
which the enrolment landed. Every change bumps the space's version; workers pull the changes since the version
they last saw. The enrolment version is what convergence is counted in (:mod:`.space`, "Merge").

Ids come from the store (a counter that only grows), in blocks reserved by each worker, and are never reused:
an evicted or merged identity keeps a tombstone row so that late writes to it are recognised and dropped.

Writes are applied at most once. A push whose answer is lost (a timeout after the store applied it) is sent
again as it was, and the sums it adds must not be added twice. So each worker process pushes under a writer
token of its own and numbers its writes; the store keeps, per writer, the highest number it applied, and skips a
write numbered at or below it (the idempotent-producer scheme of Kafka, KIP-98), and the updates the writer's
latest push dropped, so that a push sent again answers them again and they are counted once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

LIVE, MERGED, EVICTED = "live", "merged", "evicted"
"""Identity states in a store."""
MALFORMED = "malformed"
"""State of a pulled record the backend could not read (a field that is not a number, a vector whose bytes are not
float32): the sync skips and counts it, the others pulled with it are kept."""

WRITER_TTL_S = 86_400
"""How long a store remembers a writer's highest applied write number after its last push, s. A worker sends a
push again every sync interval until the store takes it, so this only has to outlast a store outage: a push sent
again after a day away could be applied twice."""


@dataclass(frozen=True)
class Sighting:
    """Where and when an identity was last seen.

    Attributes:
        camera: camera name ("" when unknown).
        t_ms: time of the sighting on the topology's clock (ROI stream PTS or capture time), ms.
        wall_s: wall-clock time at the worker, s since the Unix epoch (retention, eviction order).
    """

    camera: str
    t_ms: float
    wall_s: float


@dataclass(frozen=True)
class StoreWrite:
    """One worker's news about one identity, pushed to the store.

    Attributes:
        identity_id: an id the store reserved.
        sum_delta: float32 (D,): the unit embeddings matched since the last push (all of them for an enrolment).
        count_delta: how many embeddings ``sum_delta`` adds.
        seen: the latest sighting among them.
        enrol: True the first time (the id was reserved, not yet live).
        first: float32 (D,) unit embedding the identity was enrolled with (enrolments only; else None).
        exemplars: float32 (k, D) unit looks the worker added to the identity's gallery since the last push (all
            of them but the enrolment embedding for an enrolment; :mod:`.gallery`), or None.
    """

    identity_id: int
    sum_delta: np.ndarray
    count_delta: int
    seen: Sighting
    enrol: bool
    first: np.ndarray | None = None
    exemplars: np.ndarray | None = None


@dataclass(frozen=True)
class StoredIdentity:
    """An identity as a store holds it (what :meth:`IdentityStore.changes` returns).

    Attributes:
        identity_id: its id.
        state: :data:`LIVE`, :data:`MERGED` or :data:`EVICTED`.
        vector_sum: float32 (D,) sum of its unit embeddings; None unless live.
        count: embeddings in the sum.
        seen: its last sighting (None unless live).
        merged_into: the surviving id when merged, else -1.
        first: float32 (D,) unit enrolment embedding (None unless live; a row written before stores kept it:
            None too, the centroid stands in).
        enrolled_version: the store version at which its enrolment landed (0 unless live).
        exemplars: float32 (k, D) the gallery's looks besides the enrolment embedding, oldest first (the store
            keeps the latest ``exemplars`` of its constructor; :mod:`.gallery`), or None (none kept).
    """

    identity_id: int
    state: str
    vector_sum: np.ndarray | None = None
    count: int = 0
    seen: Sighting | None = None
    merged_into: int = -1
    first: np.ndarray | None = None
    enrolled_version: int = 0
    exemplars: np.ndarray | None = None


class IdentityStore(Protocol):
    """A store backend. Every call may raise the backend's connection or timeout errors (the caller counts
    them and retries later); none is made from a thread that matches ROIs."""

    def reserve_ids(self, n: int) -> list[int]:
        """``n`` fresh ids, never handed out before."""
        ...

    def write(self, writes: list[StoreWrite], writer: str | None = None, first_seq: int = 0) -> int:
        """Apply ``writes`` in order (an update of a merged identity goes to its survivor).

        With ``writer`` (a token unique to one worker process), ``writes[i]`` is numbered ``first_seq + i``, and
        one numbered at or below the writer's highest applied number is skipped: it was applied by an earlier
        sending of the same push whose answer was lost. Without, every write is applied (one-off tools).

        Returns how many updates of the push were dropped because their identity was evicted; for a push sent
        again, those its earlier sendings dropped included, so that the one answer that arrives counts each
        drop once."""
        ...

    def changes(self, cursor: int) -> tuple[list[StoredIdentity], int]:
        """Identities changed after version ``cursor`` (0: all), and the version to ask from next time."""
        ...

    def generation(self) -> str:
        """The store's generation marker: a random token set the first time it is asked for, gone with the
        store's data (a flushed or replaced store answers a new one)."""
        ...

    def raise_ids(self, floor: int) -> None:
        """Make every id reserved from now on larger than ``floor`` (a store that lost its data)."""
        ...

    def merge(self, loser: int, survivor: int) -> bool:
        """Fold ``loser`` into ``survivor`` (sums and counts added, latest sighting kept, the loser's exemplars
        appended to the survivor's, the latest kept; the survivor keeps its enrolment). A ``survivor`` merged
        meanwhile is followed to the identity it was merged into. False when ``loser`` is not live any more
        (already merged or evicted), the survivor was evicted, or both are one: nothing changes."""
        ...

    def sweep(self, now_s: float, retention_s: float, capacity: int) -> int:
        """Evict identities last seen before ``now_s - retention_s`` (wall time), then the least recently seen
        beyond ``capacity``. Returns how many identities were evicted. A backend without key expiry forgets
        writers silent for :data:`WRITER_TTL_S` here too."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


def add_sighting(old: Sighting | None, new: Sighting) -> Sighting:
    """The later of two sightings by wall time (``old`` may be None)."""
    return new if old is None or new.wall_s >= old.wall_s else old


def keep_latest(old: np.ndarray | None, new: np.ndarray | None, keep: int) -> np.ndarray | None:
    """A gallery's stored exemplars after ``new`` are appended: float32 (k, D) rows, the latest ``keep`` (None when
    none are kept or ``keep`` is 0)."""
    rows = [block for block in (old, new) if block is not None and len(block)]
    if keep <= 0 or not rows:
        return None
    return np.concatenate(rows).astype(np.float32)[-keep:]
