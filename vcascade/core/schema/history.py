"""The history store of an edge (docs/HISTORY.md): where the results, events and camera state changes it answers
are kept for ``vcascade search``, with evidence images, and for how long.

Nothing needs configuring: by default every edge keeps its history in an embedded SQLite file and a folder of
JPEGs under the state folder (``$VCASCADE_STATE_DIR``, else ``state`` in the working directory).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, Tag

from vcascade.core.private_files import DIR_MODE, FILE_MODE, Mode, mode_field
from vcascade.core.schema.base import ConfigModel, type_discriminator

GIB = 1024**3


def max_days_field(default: float | None) -> float | None:
    """``max_days``: rows and their evidence older than this (capture time) are evicted."""
    return Field(
        default, gt=0, le=36_500,
        description="Rows and their evidence older than this many days (capture time) are evicted (None: no age limit).",
    )


def max_bytes_field(default: int | None) -> int | None:
    """``max_bytes``: when the stored bytes exceed this the oldest rows are evicted."""
    return Field(
        default, ge=1_000_000,
        description="Stored bytes (evidence files plus an estimate per row) above which the oldest rows are "
        "evicted (None: no size limit).",
    )


class HistoryLimits(ConfigModel):
    """Retention of one camera's history (on top of its edge's ``history`` limits, which still apply)."""

    max_days: float | None = max_days_field(None)
    max_bytes: int | None = max_bytes_field(None)


class SqliteHistoryStoreConfig(ConfigModel):
    """Embedded store: `history.sqlite3` (WAL) in the history folder; the edges of one host may share it."""

    type: Literal["sqlite"] = Field("sqlite", description="Store kind (registry key).")


class PostgresHistoryStoreConfig(ConfigModel):
    """Shared store on a PostgreSQL server, for edges on several hosts (docs/HISTORY.md); the evidence images stay
    in each edge's history folder (a shared volume makes them readable from every host)."""

    type: Literal["postgres"] = Field(description="Store kind (registry key).")
    url: str = Field(
        pattern=r"^postgres(ql)?://",
        description="libpq URL, e.g. `postgresql://vcascade@db-host:5432/history` (`${VAR}` for a password; "
        "`?sslmode=require` for TLS).",
    )


HistoryStoreConfig = Annotated[
    Union[Annotated[SqliteHistoryStoreConfig, Tag("sqlite")], Annotated[PostgresHistoryStoreConfig, Tag("postgres")]],
    type_discriminator("sqlite", ("sqlite", "postgres")),
]
"""A history store, chosen by its ``type`` key (``sqlite`` when omitted)."""


class HistoryConfig(ConfigModel):
    """What an edge keeps of what it answers (docs/HISTORY.md). On by default, embedded (SQLite + JPEG folder)."""

    enabled: bool = Field(True, description="Keep results, events and camera states in the history store.")
    path: str = Field(
        "history",
        description="Folder of the embedded store (`history.sqlite3`) and of the `evidence` images; a relative path is relative "
        "to the state folder: `$VCASCADE_STATE_DIR`, else `state` in the working directory (folders created). "
        "Edges of one host may share it.",
    )
    store: HistoryStoreConfig = Field(
        SqliteHistoryStoreConfig(), description="Where the rows go: the embedded SQLite file, or a PostgreSQL server."
    )
    evidence: bool = Field(
        True, description="Keep the ROI's crop for each event and for each result with an identity or a text "
        "reading, and a small annotated frame for each event.",
    )
    frame_width_px: int = Field(320, ge=64, le=1920, description="Width of an event's annotated frame, px.")
    jpeg_quality: int = Field(80, ge=1, le=100, description="JPEG quality of the annotated frames.")
    queue_max: int = Field(
        10_000, ge=10, le=1_000_000,
        description="Records waiting for the writer thread, at most; more are dropped and counted (`queue_full`).",
    )
    queue_images_max_bytes: int = Field(
        64 * 1024**2, ge=1_000_000, le=16 * GIB,
        description="Bytes of evidence images (JPEG crops, event pictures' pixels) waiting for the writer thread, at "
        "most; a record that would exceed it is queued without its images (counted, `queue_full`).",
    )
    batch_max: int = Field(500, ge=1, le=100_000, description="Records written in one transaction, at most.")
    timeout_s: float = Field(
        2.0, gt=0, le=60,
        description="Longest wait for the database's write lock (and, on PostgreSQL, to connect and per statement), s.",
    )
    max_days: float | None = max_days_field(30.0)
    max_bytes: int | None = max_bytes_field(10 * GIB)
    retention_interval_s: float = Field(
        60.0, gt=0, le=86_400, description="Period of the retention check (evict rows past the limits), s."
    )
    file_mode: Annotated[int, Mode] = mode_field(FILE_MODE, "database and image file")
    dir_mode: Annotated[int, Mode] = mode_field(DIR_MODE, "folder")
