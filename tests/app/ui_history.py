"""A history store for the review pages' tests, written by the history writer (the edge's own code) from way-back
events with real JPEG evidence cut from the sample video: identity 7 seen on street-1, then street-2, then street-1
again (with id 9 merged into it), other identities, a plate reading, and :data:`EVENTS` line and zone events
(enough for two pages of the events page)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.demo import demo_data

from tests.edge.history.way_back_events import answered, crop_jpeg, picture, raised, video_frames
from vcascade.app.ui.server import serve_view
from vcascade.core.config import Deployment, load_config
from vcascade.core.schema.history import HistoryConfig
from vcascade.core.state_dir import state_path
from vcascade.edge.history.evidence import EvidenceFolder
from vcascade.edge.history.query import HistoryQuery
from vcascade.edge.history.sqlite_store import SqliteHistory
from vcascade.edge.history.writer import HistoryWriter

MINUTE_MS = 60_000.0
EVENTS = 36
"""Line and zone events written (the events page shows 25 a page)."""
CAMERAS = ("street-1", "street-2")
FIRST_FRAME = 110
"""The evidence comes from frames 110..121 of bikes.mp4, where a cyclist stops at the kerb ..."""
CYCLIST_XYXY = (330, 0, 530, 272)
"""... in this box, frame pixels."""
"""The cameras of tests.demo's deployment."""


@dataclass(frozen=True)
class History:
    """The folder written, the number of rows, the capture time (ms) the rows count back from, and the way-back
    events written (a live view's edge may be given the same)."""

    folder: Path
    rows: int
    now_ms: float
    written: list


@contextmanager
def history_view(tmp_path: Path, port: int, bikes_path: Path, token: str) -> Iterator[tuple[str, History, Deployment]]:
    """(view URL, history, deployment) of the live view of the demo deployment (no component running) at ``port``,
    gated by ``token``, its edge's history filled by :func:`fill_history`; the view stops on exit."""
    history = fill_history(bikes_path)
    data = demo_data()
    data["ui"] = {"token": token, "port": port}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = load_config(path)
    server = serve_view(dep)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", history, dep
    finally:
        server.shutdown()


def fill_history(bikes_path: Path) -> History:
    """Write the store in the default history folder of the state folder ($VCASCADE_STATE_DIR)."""
    folder = state_path("history")
    frames = video_frames(bikes_path, FIRST_FRAME + 12)[FIRST_FRAME:]
    crops = [crop_jpeg(frame, CYCLIST_XYXY) for frame in frames]
    now = time.time() * 1000.0
    results = [
        answered("street-1", 7, crop=crops[0], capture_unix_ms=now - 50 * MINUTE_MS),
        answered("street-2", 9, crop=crops[1], capture_unix_ms=now - 41 * MINUTE_MS),
        answered("street-2", 7, crop=crops[2], capture_unix_ms=now - 40 * MINUTE_MS, merged_from=(9,)),
        answered("street-1", 7, crop=crops[3], capture_unix_ms=now - 30 * MINUTE_MS),
        answered("street-1", 11, crop=crops[4], capture_unix_ms=now - 29 * MINUTE_MS),
        answered("street-2", None, text="KA-01-AB-1234", crop=crops[5], capture_unix_ms=now - 28 * MINUTE_MS),
    ]
    events = []
    for i in range(EVENTS):
        camera = CAMERAS[i % 2]
        kind, place = [("line_cross", "stop-line"), ("zone_enter", "yard"), ("zone_exit", "yard")][i % 3]
        identity = 7 if i == 0 else (11 if i % 4 == 1 else None)
        scene = picture(frames[i % len(frames)], CYCLIST_XYXY)
        events.append(raised(camera, kind, place, identity=identity, frame=scene,
                             capture_unix_ms=now - (25 - 0.5 * i) * MINUTE_MS, track_id=100 + i))
    cfg = HistoryConfig(retention_interval_s=3600)
    writer = HistoryWriter("edge-1", cfg, {}, lambda: SqliteHistory(folder), EvidenceFolder(folder)).start()
    for event in results + events:
        writer.keep(event)
    writer.close(20.0)
    stored = SqliteHistory(folder, readonly=True).query(HistoryQuery(limit=1000))
    assert len(stored) == len(results) + len(events), "the writer kept every row"
    return History(folder, len(stored), now, results + events)


def enrol_like(dep, history: History, model_dir: str | None = None) -> str:
    """Make identity 7 live in the identity space of ``dep``'s embedding recognizer with the embedding of the crop
    of its first result (the model of vcascade.app.like_image, as the view embeds it, its file looked up in
    ``model_dir`` first), and identity 11 with a vector like nothing kept; the id of that result's row."""
    import numpy as np

    import vcascade.center.identity as identity_space
    from vcascade.app.like_image import decode_image, embedding_recognizer, load_embedder
    from vcascade.center.identity.store import Sighting, StoreWrite

    name, rec_cfg = embedding_recognizer(dep, None)
    row = next(r for r in SqliteHistory(history.folder, readonly=True).query(HistoryQuery(identity=7, limit=100))
               if r["kind"] == "result" and r["identity"] == 7)
    vector = load_embedder(rec_cfg, model_dir)(decode_image((history.folder / row["crop_path"]).read_bytes(), "crop"))
    other = np.zeros_like(vector)
    other[0] = 1.0
    store = identity_space.build_store(rec_cfg.head.identity.store, name)
    try:
        assert store.reserve_ids(11)[-1] == 11, "a fresh identity space"
        seen = Sighting("street-1", 0.0, 1.0)
        store.write([StoreWrite(7, vector, 1, seen, True, vector), StoreWrite(11, other, 1, seen, True, other)])
    finally:
        store.close()
    return row["ref"]
