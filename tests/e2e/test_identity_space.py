"""End to end: two workers of one embedder share one identity space under `vcascade run` (issue 16).

Both cameras replay bikes.mp4, so every detection of street-1 has a crop with the same pixels on street-2 (same
frame, same box). Each worker has one credit and the edge sends every detection, so the broker alternates and
both workers see every object. The same pixels must resolve to the same identity whichever worker served them:
directly, or through a merge the store records (two workers that enrol one object at once) or a provisional id
reconciled later (reported in ``merged_from``). Checked with the embedded default (SQLite, no identity
configuration at all) and with a real redis-server; then a worker killed with SIGKILL and restarted by the
launcher keeps every identity the store received (what it enrolled within its last sync interval is lost, as
documented, and only that), and a Redis stopped mid-run crashes nothing, is counted and is reconciled.
Every identical-crop pair served by different workers must resolve to one identity (a gallery per worker, the
design this replaces, agreed on 14 of 82). The one exception is the design's documented limit: a crop at or above
the threshold for two established identities may be answered with either by workers whose copies differ by
their latest unpushed matches; such a pair must show it (one answer's ``runner_up_id`` is the other's identity).
The same holds across a store outage: provisional ids (local to the worker that answered them) resolve through
the store ids that replaced them on that worker.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.demo import EMBEDDER, scrape_metrics, short_demo, start_run, write_deployment
from tests.records import result_lines
from vcascade.center.identity.redis_store import RedisStore
from vcascade.center.identity.sqlite_store import SqliteStore
from vcascade.center.identity.store import MERGED

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]  # a loaded 2-core machine: ~2 min a run

FRAMES = 60  # bikes.mp4 has its first detections from frame 25 on
RUN_TIMEOUT_S = 500


def _deployment(tmp_path: Path, free_port, store: dict | None, frames: int = FRAMES,
                id_block: int | None = None) -> tuple[Path, dict]:  # fmt: skip
    data = short_demo(tmp_path, free_port, frames)
    for cam in data["cameras"].values():
        cam.pop("view", None)  # the same pixels on both cameras: identical crops are the same object, exactly
    data["edges"]["edge-1"]["roi"]["policy"] = {"mode": "every_detection"}
    first = data["workers"].pop("worker-1")
    for name in ("worker-1", "worker-2"):  # one credit each: the broker alternates between them
        data["workers"][name] = {**first, "credits": 1, "max_batch": 1, "metrics_port": free_port()}
    if store is not None:
        data["recognizers"][EMBEDDER]["head"]["identity"] = {"store": store}
    if id_block is not None:
        data["recognizers"][EMBEDDER]["head"].setdefault("identity", {})["id_block"] = id_block
    return write_deployment(tmp_path, data), data


def _run(tmp_path: Path, config: Path, models_dir: Path,
         during: Callable[[Path, Path, Callable[[], None]], None] | None = None) -> dict:  # fmt: skip
    """`vcascade run` to the end; ``during(results_path, status_path, stop)`` is called while it runs (``stop()``:
    Ctrl-C, a graceful stop that drains in-flight ROIs). Returns the summary after checking the exit and the
    accounting (sent = results + drops, one line per ROI)."""
    summary_path, status_path = tmp_path / "summary.json", tmp_path / "status.json"
    proc = start_run(config, models_dir, summary_path, "--status-file", str(status_path))
    try:
        if during is not None:
            during(tmp_path / "results.jsonl", status_path, lambda: proc.send_signal(signal.SIGINT))
        output = proc.communicate(timeout=RUN_TIMEOUT_S)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    summary = json.loads(summary_path.read_text())
    (edge,) = [p for p in summary["processes"] if p["component"] == "edge"]
    lines = result_lines(tmp_path / "results.jsonl")
    for camera, tally in edge["cameras"].items():
        assert tally["sent"] > 0 and tally["sent"] == tally["results"] + sum(tally["drops"].values()), tally
        assert len([line for line in lines if line["camera"] == camera]) == tally["sent"]
    return summary


def _state_store() -> SqliteStore:
    """The embedded default store of the run: the test's state folder (tests/conftest.py), default file name."""
    return SqliteStore(Path(os.environ["VCASCADE_STATE_DIR"]) / "identity.sqlite3", EMBEDDER)


def _merged_into(store: Any) -> dict[int, int]:
    """Every merge the store recorded: loser -> survivor."""
    records, _ = store.changes(0)
    store.close()
    return {r.identity_id: r.merged_into for r in records if r.state == MERGED}


def _landed_ids(store: Any) -> set[int]:
    """Every id the store holds a record of (live, merged or evicted); an id reserved but never written is not."""
    records, _ = store.changes(0)
    store.close()
    return {r.identity_id for r in records}


def _resolver(lines: list[dict], merged_into: dict[int, int]) -> Callable[..., int]:
    """``resolve(line, field="identity_id")``: the identity the id a result line answered (``identity_id`` or
    ``runner_up_id``) ended as. A provisional id is local to the worker that answered it (every worker counts down
    from -2), so it maps, per worker, to the store id that replaced it there (``merged_from`` in that worker's
    later lines); merged ids then follow the store's record to their survivors."""
    provisional: dict[tuple[str, int], int] = {}
    for line in lines:
        for old in line.get("merged_from", []):
            if old < 0:
                provisional[(line["worker"], old)] = line["identity_id"]

    def resolve(line: dict, field: str = "identity_id") -> int:
        ident = line[field]
        if ident < -1:
            ident = provisional.get((line["worker"], ident), ident)
        for _ in range(64):
            if ident not in merged_into:
                return ident
            ident = merged_into[ident]
        raise AssertionError(f"merge chain too long from {line[field]}")

    return resolve


def _ambiguous(a: dict, b: dict, resolve: Callable[..., int]) -> bool:
    """The two answers differ only in the order of two identities both at or above the threshold: one side's
    runner-up is the other side's identity (docs/IDENTITY.md, "What is left")."""
    ids = resolve(a), resolve(b)
    ups = [resolve(line, "runner_up_id") if line.get("runner_up_id", -1) != -1 else None for line in (a, b)]
    return ups[0] == ids[1] or ups[1] == ids[0]


def _assert_one_identity(pairs: list[tuple[dict, dict]], resolve: Callable[..., int]) -> int:
    """Every pair of ``pairs`` (identical crops) resolves to one identity, except a crop ambiguous between two
    established identities (both at or above the threshold on a worker), which workers whose copies differ by
    unpushed matches may order apart. Returns the number of pairs apart (ambiguous ones)."""
    apart = [(a, b) for a, b in pairs if resolve(a) != resolve(b)]
    unexplained = [(a, b) for a, b in apart if not _ambiguous(a, b, resolve)]
    assert not unexplained, (
        f"{len(unexplained)} of {len(pairs)} identical-crop pairs resolve to different identities: "
        f"{[(resolve(a), resolve(b)) for a, b in unexplained]}"
    )
    return len(apart)


def _same_pixels_pairs(lines: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of result lines of identical crops (same frame, same box) on the two cameras."""
    by_crop: dict[tuple, dict[str, dict]] = {}
    for line in lines:
        if line["status"] == "ok":
            by_crop.setdefault((line["frame_seq"], tuple(line["bbox_xyxy"])), {})[line["camera"]] = line
    return [(c["street-1"], c["street-2"]) for c in by_crop.values() if len(c) == 2]


def _check_same_ids(
    lines: list[dict], merged_into: dict[int, int], store_was_away: bool = False, lost: frozenset[int] = frozenset(),
) -> dict[str, int]:
    """Identical crops served by different workers resolve to one identity. While the store was away, a worker
    may answer a provisional id that it never names again after the store is back (the object left): such an
    id has no reported store id, and pairs holding one are left out (counted); otherwise every id resolves.
    ``lost``: ids a worker killed with SIGKILL answered but never pushed (docs/IDENTITY.md, "Restarts"); pairs
    holding one are left out too."""
    resolve = _resolver(lines, merged_into)
    across = [(a, b) for a, b in _same_pixels_pairs(lines) if a["worker"] != b["worker"]]
    resolved = [(a, b) for a, b in across if min(resolve(a), resolve(b)) >= 1 and not {resolve(a), resolve(b)} & lost]
    assert len(resolved) >= 20, f"only {len(resolved)} identical crops served by different workers"
    apart = _assert_one_identity(resolved, resolve)
    ok = [line for line in lines if line["status"] == "ok"]
    assert {line["worker"] for line in ok} == {"worker-1", "worker-2"}
    if not store_was_away:
        assert all(resolve(line) >= 1 for line in ok), "every provisional id was reconciled"
    return {"pairs_across_workers": len(across), "pairs_resolved": len(resolved),
            "equal_as_answered": sum(a["identity_id"] == b["identity_id"] for a, b in resolved),
            "apart": apart}


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_two_workers_give_the_same_ids_whichever_served_the_object(tmp_path, free_port, models_dir, backend,
                                                                   request):  # fmt: skip
    if backend == "redis":
        server = request.getfixturevalue("redis_server")
        config, _ = _deployment(tmp_path, free_port, {"type": "redis", "url": server.url})
    else:  # the embedded default: no identity configuration at all
        config, _ = _deployment(tmp_path, free_port, None)
    _run(tmp_path, config, models_dir)
    lines = result_lines(tmp_path / "results.jsonl")
    if backend == "redis":
        store = RedisStore(server.url, EMBEDDER)
    else:
        store = _state_store()
    counts = _check_same_ids(lines, _merged_into(store))
    print(f"identical crops served by different workers: {counts}")  # the numbers for the report (-s)


def test_two_workers_with_a_gallery_keep_exemplars_in_redis_and_agree(tmp_path, free_port, models_dir,
                                                                      redis_server):  # fmt: skip
    """``identity.gallery`` through `vcascade run`: the workers match by centroid and exemplars, the store (Redis)
    keeps at most ``size - 1`` exemplars per identity besides its enrolment embedding, and identical crops served
    by the two workers still resolve to one identity."""
    config, data = _deployment(tmp_path, free_port, {"type": "redis", "url": redis_server.url})
    data["recognizers"][EMBEDDER]["head"]["identity"]["gallery"] = {"size": 4, "diversity": 0.95}
    config = write_deployment(tmp_path, data)
    _run(tmp_path, config, models_dir)
    lines = result_lines(tmp_path / "results.jsonl")
    store = RedisStore(redis_server.url, EMBEDDER, exemplars=3)
    _check_same_ids(lines, _merged_into(store))
    live = [r for r in store.changes(0)[0] if r.state == "live"]
    kept = [len(r.exemplars) for r in live if r.exemplars is not None]
    assert kept and max(kept) <= 3  # identities matched more than once keep distinct looks, bounded
    assert all(r.exemplars.shape[1] == len(r.vector_sum) for r in live if r.exemplars is not None)


def _wait_lines(results: Path, count: int, timeout_s: float = 300.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ok = [line for line in result_lines(results) if line["status"] == "ok"]
        if len(ok) >= count:
            return ok
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} results after {timeout_s} s")


def _worker_pid(status_path: Path, name: str) -> int:
    status = json.loads(status_path.read_text())
    (worker,) = [c for c in status["components"] if c["kind"] == "worker" and c["name"] == name]
    return worker["pid"]


RESTARTED_PAIRS = 5
"""Identical-crop pairs served by the restarted worker and the other one that the kill test waits for."""


def _pairs_across_workers(lines: list[dict]) -> list[tuple[dict, dict]]:
    return [(a, b) for a, b in _same_pixels_pairs(lines) if {a["worker"], b["worker"]} == {"worker-1", "worker-2"}]


def test_kill_9_of_a_worker_and_its_restart_keep_every_identity(tmp_path, free_port, models_dir):
    """The whole clip is room enough for the restart, however slow the machine: the test stops the run (Ctrl-C)
    once the restarted worker has served RESTARTED_PAIRS crops whose twins the other worker served."""
    config, data = _deployment(tmp_path, free_port, None, frames=250)
    port = data["workers"]["worker-1"]["metrics_port"]
    killed = {}

    def kill_worker_1(results: Path, status_path: Path, stop: Callable[[], None]) -> None:
        _wait_lines(results, 60)
        killed["lines"] = len(result_lines(results))
        os.kill(_worker_pid(status_path, "worker-1"), signal.SIGKILL)
        time.sleep(1.0)  # its metrics server is gone
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # the launcher restarts it; it loads the space before serving
            gallery = _sample(scrape_metrics(port), "vcascade_identity_gallery_size")
            if gallery > 0:
                killed["gallery"] = gallery
                break
            time.sleep(0.2)
        while time.monotonic() < deadline:  # the state the test checks: the restarted worker answers beside the other
            if len(_pairs_across_workers(result_lines(results)[killed["lines"]:])) >= RESTARTED_PAIRS:
                stop()
                return
            time.sleep(0.3)

    _run(tmp_path, config, models_dir, during=kill_worker_1)
    (worker_1,) = [c for c in json.loads((tmp_path / "status.json").read_text())["components"]
                   if c["kind"] == "worker" and c["name"] == "worker-1"]  # fmt: skip
    assert worker_1["restarts"] == 1 and worker_1["exit_codes"][0] == -signal.SIGKILL
    lines = result_lines(tmp_path / "results.jsonl")
    merged_into, landed = _merged_into(_state_store()), _landed_ids(_state_store())
    resolve = _resolver(lines, merged_into)
    answered = [line for line in lines[: killed["lines"]] if line["status"] == "ok"]
    # what the killed worker enrolled within its last sync interval never reached the store (docs/IDENTITY.md,
    # "Restarts"): such an id is one worker-1 enrolled, and every other id answered before the kill was kept
    lost = frozenset(resolve(line) for line in answered if resolve(line) not in landed)
    enrolled_by_1 = {line["identity_id"] for line in answered if line["worker"] == "worker-1" and line["enrolled"]}
    assert lost <= enrolled_by_1, f"ids lost that the killed worker did not enrol: {sorted(lost - enrolled_by_1)}"
    before = {resolve(line) for line in answered} - lost
    assert killed.get("gallery", 0) >= len(before), f"restarted with {killed.get('gallery')} of {len(before)} identities"
    restarted = _pairs_across_workers(lines[killed["lines"]:])
    assert len(restarted) >= RESTARTED_PAIRS, "the restarted worker served crops whose twins the other worker served"
    _assert_one_identity(restarted, resolve)  # the restarted worker answers in the same identity space
    counts = _check_same_ids(lines, merged_into, lost=lost)
    print(f"kill -9: {len(lost)} ids enrolled in the killed worker's last sync interval lost, {counts}")


def test_stopping_redis_mid_run_crashes_nothing_is_counted_and_reconciled(tmp_path, free_port, models_dir,
                                                                          redis_server):  # fmt: skip
    config, data = _deployment(tmp_path, free_port, {"type": "redis", "url": redis_server.url, "timeout_s": 0.2},
                               frames=90, id_block=2)  # fmt: skip  (small blocks: new objects get provisional ids)
    ports = [w["metrics_port"] for w in data["workers"].values()]
    seen = {}

    def stop_redis(results: Path, status_path: Path, stop: Callable[[], None]) -> None:
        _wait_lines(results, 40)
        redis_server.stop()
        count = len(result_lines(results))
        _wait_lines(results, count + 40)  # served on while the store is away
        seen["errors"] = sum(_sample(scrape_metrics(port), "vcascade_identity_store_errors_total") for port in ports)
        seen["provisional"] = sum(_sample(scrape_metrics(port), "vcascade_identity_provisional_results_total")
                                  for port in ports)  # fmt: skip
        redis_server.start()
        seen["back_at_line"] = len(result_lines(results))

    _run(tmp_path, config, models_dir, during=stop_redis)
    assert seen["errors"] > 0 and seen["provisional"] > 0, seen
    restarts = [c for c in json.loads((tmp_path / "status.json").read_text())["components"] if c["restarts"]]
    assert restarts == [], "nothing crashed"
    lines = result_lines(tmp_path / "results.jsonl")
    answered = [line for line in lines if line["status"] == "ok"]
    assert any(line["provisional"] for line in answered)
    later = [line for line in lines[seen["back_at_line"]:] if line["status"] == "ok"]
    assert later and not later[-1]["provisional"], "in sync again once the store is back"
    reconciled = {old for line in answered for old in line["merged_from"] if old < 0}
    assert reconciled, "provisional ids were replaced by store ids and reported"
    counts = _check_same_ids(lines, _merged_into(RedisStore(redis_server.url, EMBEDDER)), store_was_away=True)
    print(f"store away: {seen}, reconciled {len(reconciled)} provisional ids, {counts}")


def _sample(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))
