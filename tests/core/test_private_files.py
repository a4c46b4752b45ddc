"""Files holding personal data are their owner's only by default (issue 28, item 7): the JSONL sink (the old code
opened it 0o644 explicitly) and the SQLite identity store with its -wal and -shm files, in folders made 0700;
the modes can be set in the configuration."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import zmq

from vcascade.center.identity.backends import build_store
from vcascade.center.identity.store import Sighting, StoreWrite
from vcascade.core.config import JsonlSinkConfig
from vcascade.core.schema.identity import SqliteStoreConfig
from vcascade.edge.sinks.registry import JsonlSink


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def _usual_umask():
    old = os.umask(0o022)  # the usual one: files 0644 and folders 0755 unless the code asks for less
    yield
    os.umask(old)


def test_a_jsonl_sink_file_is_0600_in_a_0700_folder(tmp_path):
    path = tmp_path / "out" / "deep" / "results.jsonl"
    sink = JsonlSink(JsonlSinkConfig(type="jsonl", path=str(path)), zmq.Context.instance())
    sink.write({"kind": "result", "camera": "c", "status": "ok"})
    sink.close()
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700 and _mode(path.parent.parent) == 0o700
    assert path.read_text().count("\n") == 1


def test_a_jsonl_sink_mode_from_the_configuration_and_an_open_file_tightened(tmp_path):
    shared = tmp_path / "shared.jsonl"
    cfg = JsonlSinkConfig.model_validate({"type": "jsonl", "path": str(shared), "file_mode": "0640"})
    JsonlSink(cfg, zmq.Context.instance()).close()
    assert _mode(shared) == 0o640
    old = tmp_path / "old.jsonl"
    old.write_text("")
    os.chmod(old, 0o666)  # left by an older version
    JsonlSink(JsonlSinkConfig(type="jsonl", path=str(old)), zmq.Context.instance()).close()
    assert _mode(old) == 0o600
    with pytest.raises(ValueError):
        JsonlSinkConfig.model_validate({"type": "jsonl", "path": "x", "file_mode": "rw-r--r--"})


def test_the_sqlite_identity_store_and_its_wal_are_0600_in_a_0700_folder(tmp_path):
    path = tmp_path / "state" / "identity.sqlite3"
    store = build_store(SqliteStoreConfig(path=str(path)), "people")
    (new_id,) = store.reserve_ids(1)
    vector = np.ones(8, np.float32) / np.sqrt(8)
    store.write([StoreWrite(new_id, vector, 1, Sighting("cam", 1000.0, 1.0), True, vector)])
    files = [p for p in path.parent.iterdir()]
    assert {p.name for p in files} >= {"identity.sqlite3", "identity.sqlite3-wal"}
    for file in files:
        assert _mode(file) == 0o600, (file, oct(_mode(file)))
    assert _mode(path.parent) == 0o700
