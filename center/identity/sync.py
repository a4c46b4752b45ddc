"""The background thread that keeps a worker's identity space and the store in step.

Every ``sync_interval_s`` one cycle: reserve ids when the worker's block runs low (and replace provisional ids),
push the worker's enrolments and matches, pull the store's changes since the last cycle, merge the duplicates
they reveal, and now and then sweep the store (retention, capacity). A failing or slow call (the store's own
timeout) ends the cycle: it is counted, the space is marked out of sync (results provisional), nothing is lost
(unpushed news stays queued, and so do duplicates found in a pull whose merge the store did not take) and the
next cycle tries again. The head thread never waits for any of this.

A push that failed is sent again as it was, under the same write numbers, before the news gathered since: if
the store had applied it and only the answer was lost, the store skips it (:mod:`.store`, "at most once"). No
pull runs while a push is unanswered, so the local copy (the store's sums plus the news not yet pushed) never
counts a write twice or misses one.

Bound on duplicates: every worker checks every enrolment in the first pull that brings it
(:meth:`IdentitySpace.apply`); the enrolling worker pulls right after its push, in the same cycle. So while the
store is up, a duplicate its own worker can see is merged in the cycle that pushes it, one that only another
worker can see (that worker's unpushed matches made it) in that worker's next cycle: within two
``sync_interval_s`` of the enrolment plus store round trips and however late the cycles run; a late cycle
delays the merge, never skips it.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any, Callable

from vcascade.center.identity.guard import IdGuard
from vcascade.center.identity.metrics import IdentityTelemetry
from vcascade.center.identity.space import IdentitySpace
from vcascade.center.identity.store import MALFORMED, IdentityStore, StoredIdentity, StoreWrite

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 10.0
"""Period of the store sweep (retention and capacity), s; any worker may run it (it is idempotent)."""
STOP_TIMEOUT_S = 5.0
"""On close, time allowed for the last cycle (pushing what is left), s."""


class StoreSync:
    """Runs the sync cycle of ``space`` against ``store`` on its own thread.

    Args:
        space: the worker's local identity space.
        store: the recognizer's store (only this thread calls it).
        telemetry: the worker's identity metrics.
        interval_s: period of a cycle, s.
        id_block: ids reserved at a time.
        retention_s: store retention (wall time since last sighting), s.
        capacity: identities the store keeps at most.
        clock: wall clock, s since the Unix epoch (tests pass their own).
        guard: the watermark of ids seen and the store's generation (:mod:`.guard`); None: kept in memory only.
    """

    def __init__(self, space: IdentitySpace, store: IdentityStore, telemetry: IdentityTelemetry, interval_s: float,
                 id_block: int, retention_s: float, capacity: int, clock: Callable[[], float] = time.time,
                 guard: IdGuard | None = None) -> None:  # fmt: skip
        self.space, self.store, self.telemetry = space, store, telemetry
        self.guard = guard or IdGuard(None, telemetry)
        self.interval_s, self.id_block = interval_s, id_block
        self.retention_s, self.capacity = retention_s, capacity
        self.clock = clock
        self.cursor = 0
        self.cycles = 0
        self.writer = secrets.token_hex(8)  # this process's writer token in the store
        self._unanswered: list[StoreWrite] = []  # the last push, until the store answers it
        self._first_seq = self._next_seq = 0  # write numbers: of the unanswered push's first, of the next
        self._merges: list[tuple[int, int, str]] = []  # (loser, survivor, kind) found, not yet merged in the store
        self._next_sweep_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="identity-sync", daemon=True)

    def start(self) -> None:
        """One cycle now (the worker starts with the stored identities), then the thread."""
        self.cycle()
        self._thread.start()

    def close(self) -> None:
        """Stop the thread after a last cycle (what is still queued is pushed), then close the store."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)
        else:
            self.cycle()
        self.store.close()

    def cycle(self) -> bool:
        """One exchange with the store. Returns True when every call succeeded (the space is in sync)."""
        try:
            self._exchange()
        except Exception as exc:  # any store failure: counted by _call, retried next cycle
            if self.space.in_sync:  # once per outage
                log.warning("identity store unavailable: %s", exc)
            self.space.in_sync = False
            return False
        self.space.in_sync = True
        self.cycles += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.cycle()
        self.cycle()

    def _exchange(self) -> None:
        if not self.guard.check_generation(self._call("generation", self.store.generation)):
            self.cursor = 0  # its versions start again too: read every record it has now
            self._call("raise_ids", self.store.raise_ids, self.guard.max_id)
        wanted = self.space.ids_wanted(self.id_block)
        if wanted:
            reconciled = self.space.add_ids(self._reserve(wanted))
            self.telemetry.merged("reconciled", len(reconciled))
        self._push()  # the one that failed last time, if any
        self._unanswered, self._first_seq = self.space.take_writes(), self._next_seq
        self._next_seq += len(self._unanswered)
        self._push()
        since = self.cursor
        records, self.cursor = self._call("changes", self.store.changes, since)
        news = self.space.apply(self._readable(records), since)
        if news.wrong_length:
            log.warning("identity store: %d records with a vector of another size skipped", news.wrong_length)
            self.telemetry.records_skipped("wrong_length", news.wrong_length)
        self.guard.saw([r.identity_id for r in records if r.identity_id > 0])
        self.guard.save()
        self._merges.extend([(loser, survivor, "duplicate") for loser, survivor in news.duplicates])
        self._merges.extend([(loser, survivor, "revised") for loser, survivor in news.revised])
        while self._merges:  # in order; one the store did not take stays for the next cycle (the pull has moved on)
            loser, survivor, kind = self._merges[0]
            if self._call("merge", self.store.merge, loser, survivor):
                self.telemetry.merged(kind)
            self._merges.pop(0)
        now_s = self.clock()
        if now_s >= self._next_sweep_s:
            self._call("sweep", self.store.sweep, now_s, self.retention_s, self.capacity)
            self._next_sweep_s = now_s + SWEEP_INTERVAL_S
        self.telemetry.gallery(len(self.space))

    def _reserve(self, wanted: int) -> list[int]:
        """``wanted`` fresh ids, all above every id this worker has seen: a store whose counter went back has it
        raised first, and the ids it handed out at or below it are refused (counted, never used)."""
        got = self._call("reserve", self.store.reserve_ids, wanted)
        went_back = bool(got) and self.guard.counter_went_back(min(got) - 1)  # logged and counted
        ids = self.guard.accept(got)  # those at or below what was seen: refused, counted
        if went_back:
            self._call("raise_ids", self.store.raise_ids, self.guard.max_id)
            ids += self.guard.accept(self._call("reserve", self.store.reserve_ids, wanted - len(ids)))
        self.guard.save()
        return ids

    def _readable(self, records: list[StoredIdentity]) -> list[StoredIdentity]:
        """``records`` without the malformed ones (counted and logged: each is skipped, the rest kept)."""
        bad = [r.identity_id for r in records if r.state == MALFORMED]
        if not bad:
            return records
        log.warning("identity store: %d unreadable records skipped (ids %s)", len(bad), bad[:10])
        self.telemetry.records_skipped("malformed", len(bad))
        return [r for r in records if r.state != MALFORMED]

    def _push(self) -> None:
        """Push the unanswered writes (none: nothing to do); they stay unanswered if the call fails."""
        if self._unanswered:
            dropped = self._call("write", self.store.write, self._unanswered, self.writer, self._first_seq)
            self._unanswered = []
            self.telemetry.updates_dropped(dropped)

    def _call(self, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        try:
            result = fn(*args)
        except Exception:
            self.telemetry.store_failed(op)
            raise
        self.telemetry.store_call(op, time.perf_counter() - start)
        return result
