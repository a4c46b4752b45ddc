"""The identity space of an embedding recognizer: its store (one per deployment), retention, sync, topology.

Every worker of a recognizer shares one identity space (vcascade.center.identity): ids come from the store and
are never reused, identities survive restarts. The store is chosen by ``type``: ``sqlite`` (embedded, one file
shared by the workers of one host; the default) or ``redis`` (workers on several hosts).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, Tag, model_validator

from vcascade.core.private_files import DIR_MODE, FILE_MODE, Mode, mode_field
from vcascade.core.schema.base import ConfigModel, Name, type_discriminator


class SqliteStoreConfig(ConfigModel):
    """Embedded store: one SQLite file in WAL mode shared by every worker of the recognizer on this host."""

    type: Literal["sqlite"] = Field("sqlite", description="Store kind (registry key).")
    path: str = Field(
        "identity.sqlite3",
        description="Database file; a relative path is relative to the state folder: `$VCASCADE_STATE_DIR`, else "
        "`state` in the working directory (folders created). Recognizers may share a file (one space each).",
    )
    timeout_s: float = Field(2.0, gt=0, le=60, description="Longest wait for the file's write lock, s.")
    file_mode: Annotated[int, Mode] = mode_field(FILE_MODE, "database file (its -wal and -shm files follow it)")
    dir_mode: Annotated[int, Mode] = mode_field(DIR_MODE, "folder")


class RedisStoreConfig(ConfigModel):
    """Shared store on a Redis server (single instance, not Redis Cluster) for workers on several hosts."""

    type: Literal["redis"] = Field(description="Store kind (registry key).")
    url: str = Field(
        description="redis-py URL, e.g. `redis://host:6379/0` (`rediss://` for TLS; `${VAR}` for a password)."
    )
    timeout_s: float = Field(
        0.5, gt=0, le=60, description="Socket connect and read timeout of one store call, s (a slower store is down)."
    )
    key_prefix: str = Field("vcascade:identity", min_length=1, description="Prefix of every key the space writes.")


IdentityStoreConfig = Annotated[
    Union[Annotated[SqliteStoreConfig, Tag("sqlite")], Annotated[RedisStoreConfig, Tag("redis")]],
    type_discriminator("sqlite", ("sqlite", "redis")),
]
"""An identity store, chosen by its ``type`` key (``sqlite`` when omitted)."""


class TopologyLinkConfig(ConfigModel):
    """Objects seen on camera `source` can appear on camera `target` between `min_s` and `max_s` later."""

    source: Name = Field(description="Camera the objects leave.")
    target: Name = Field(description="Camera they reach.")
    min_s: float = Field(0.0, ge=0, description="Shortest travel time, s.")
    max_s: float = Field(gt=0, description="Longest travel time, s.")

    @model_validator(mode="after")
    def _window(self) -> "TopologyLinkConfig":
        if self.max_s < self.min_s:
            raise ValueError(f"max_s ({self.max_s}) is less than min_s ({self.min_s})")
        return self


class TopologyConfig(ConfigModel):
    """Camera topology: a new ROI of camera C is compared only with identities last seen on C or on a camera
    linked to C within the link's travel time window. Cameras named in no link are not pruned."""

    links: list[TopologyLinkConfig] = Field(min_length=1, description="Directed links between cameras.")
    clock: Literal["stream", "capture"] = Field(
        "stream",
        description="Time of a sighting: the ROI's `stream` PTS (synchronised streams, replays) or its `capture` "
        "wall-clock time at the edge (live cameras).",
    )


class TrackAggregateConfig(ConfigModel):
    """Identities from whole tracks: a tracked ROI is matched and enrolled by its track's aggregate embedding
    (quality-weighted mean of its looks, outliers rejected; docs/IDENTITY.md, "Identities from tracks")."""

    enabled: bool = Field(False, description="Match tracked ROIs by their track's aggregate; false: every ROI alone.")
    match_threshold: float = Field(
        0.9, ge=-1, le=1,
        description="Cosine similarity at or above which a track's aggregate matches an identity (an aggregate is "
        "closer to every centroid than one crop: it needs a higher bar than the head's match_threshold).",
    )
    ttl_s: float = Field(
        60.0, gt=0, le=86_400, description="A track not seen for this long (wall time) is forgotten by the worker, s."
    )
    max_tracks: int = Field(10_000, ge=1, le=10_000_000, description="Tracks each worker keeps at most (least "
                            "recently seen forgotten first).")
    outlier_sigma: float = Field(
        2.5, gt=0, le=10,
        description="A look whose cosine with its track's aggregate lies more than this many standard deviations "
        "below the track's mean is left out of the aggregate.",
    )
    revise_margin: float = Field(
        0.02, ge=0, le=1,
        description="Cosine by which another identity must beat a track's current one, for the track to move to it.",
    )


class GalleryConfig(ConfigModel):
    """Several exemplars per identity, matched by the most similar (docs/IDENTITY.md, "Galleries"): a look is
    compared with each identity's centroid and exemplars and scores the largest cosine."""

    size: int = Field(
        0, ge=0, le=256,
        description="Exemplars kept per identity, its enrolment embedding included (the store keeps the latest "
        "size - 1 besides it); 0: the centroid alone.",
    )
    diversity: float = Field(
        1.0, gt=0, le=1,
        description="A look whose cosine with an exemplar already kept is at or above this is not kept (1: every "
        "look matched is kept, the oldest replaced).",
    )


class IdentitySpaceConfig(ConfigModel):
    """How the workers of one embedding recognizer share its identities (docs/IDENTITY.md)."""

    store: IdentityStoreConfig = Field(SqliteStoreConfig(), description="Where identities are kept.")
    retention_s: float = Field(
        86_400.0, gt=0, description="An identity not seen for this long (wall time) is evicted, s."
    )
    sync_interval_s: float = Field(
        0.2, gt=0, le=60,
        description="Period of each worker's background sync with the store, s (bounds how long a new identity "
        "stays unknown to the other workers, and the merge delay).",
    )
    id_block: int = Field(32, ge=1, le=100_000, description="Ids each worker reserves from the store at a time.")
    index: Literal["exact", "ann"] = Field("exact", description="Local vector index: exact search or approximate.")
    topology: TopologyConfig | None = Field(None, description="Camera topology pruning; None: compare with all.")
    tracks: TrackAggregateConfig = Field(TrackAggregateConfig(), description="Identities from whole tracks.")
    centroid_window: int = Field(
        0, ge=0, le=1_000_000,
        description="Looks an identity's centroid remembers: past this many, each look moves it by 1/window (an "
        "exponential moving average); 0: the mean of every look ever matched.",
    )
    gallery: GalleryConfig = Field(GalleryConfig(), description="Exemplars per identity besides its centroid.")

