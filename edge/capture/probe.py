"""Probing a camera once: open its source, decode the first frame, close, and say why not if it fails.

Used by pre-flight checks (``vcascade check --deep``, ``vcascade run``) and ``camera add --wait-s``: the same
opening and decoding code as the camera readers (:mod:`vcascade.edge.capture.av_reader`), so a probe fails for the same
reason a reader would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import av

from vcascade.core.config import CameraConfig
from vcascade.core.redact import redact_url
from vcascade.edge.capture.av_reader import StreamDecoder, open_source, stream_info
from vcascade.edge.capture.faults import CameraFault, classify
from vcascade.edge.capture.ffmpeg_log import CameraLog
from vcascade.edge.capture.hls import STALE_TARGET_DURATIONS, is_hls, wait_for_growth
from vcascade.edge.capture.kinds import is_live
from vcascade.edge.capture.url_policy import check_host
from vcascade.edge.capture.views import apply_view
from vcascade.edge.privacy.masks import FrameMasks, MaskOutsideFrame

PROBE_OK = "opened"
"""``CameraProbe.reason`` of a camera whose first frame was decoded (the reader's state reason for it too)."""


@dataclass(frozen=True)
class CameraProbe:
    """What probing a camera found.

    Attributes:
        ok: True when the source opened and its first frame decoded.
        reason: :data:`PROBE_OK`, or one of :data:`vcascade.edge.capture.faults.FAULT_REASONS`.
        detail: for people: the codec, size and first timestamp, or FFmpeg's error (credentials redacted).
    """

    ok: bool
    reason: str
    detail: str


def probe_camera(cfg: CameraConfig, timeout_s: float) -> CameraProbe:
    """Open ``cfg``'s source, decode its first frame, close it. Never raises for a camera fault.

    Args:
        cfg: the camera's configuration (its URL, RTSP transport).
        timeout_s: seconds allowed to open, and again to read the first frame (FFmpeg's interrupt timeout for
            live sources; files are read without one).

    An HLS playlist without an end is watched first (:func:`vcascade.edge.capture.hls.wait_for_growth`, up to
    three target durations): one that does not grow is ``playlist_stale``, as the reader would find it.

    Returns:
        A :class:`CameraProbe`; ``ok`` False with the reason of :data:`FAULT_REASONS` when the camera fails.
    """
    cfg = cfg.model_copy(update={"open_timeout_s": timeout_s, "read_timeout_s": timeout_s})
    shown = redact_url(cfg.url)
    started_s = time.monotonic()
    with CameraLog("probe", "probe") as ffmpeg_log:  # FFmpeg's lines: DEBUG, camera "probe"
        try:
            if is_hls(cfg.url):
                check_host(cfg.url, cfg.edge, shown)
                stale = _stale_playlist(cfg.url, timeout_s, shown)
                if stale is not None:
                    return stale
            container, stream = open_source(cfg)
        except CameraFault as fault:
            return CameraProbe(False, fault.reason, fault.detail)
        try:
            info = stream_info(stream)
            live_timeout_s = timeout_s if is_live(container.name) else None
            decoder = StreamDecoder(container, stream, lambda reason, n: None, ffmpeg_log.drain, live_timeout_s)
            for image, pts_ms in decoder.frames():
                height, width = image.shape[:2]
                if cfg.privacy is not None and cfg.privacy.masks:  # against the frame the reader hands on
                    shown_image = apply_view(image, cfg.view) if cfg.view is not None else image
                    try:
                        FrameMasks(cfg.privacy).raster(*shown_image.shape[:2])
                    except MaskOutsideFrame as exc:
                        return CameraProbe(False, "privacy_mask_outside_frame", f"{shown}: {exc}")
                took_s = time.monotonic() - started_s
                return CameraProbe(True, PROBE_OK, f"{shown}: {info.codec} {width}x{height}, first frame at "
                                   f"{pts_ms:.0f} ms, in {took_s:.2f} s")
            return CameraProbe(False, "invalid_data", f"{shown}: opened, but no frame could be decoded")
        except CameraFault as fault:
            return CameraProbe(False, fault.reason, fault.detail)
        except av.error.FFmpegError as exc:
            fault = classify(exc, shown, opening=False)
            return CameraProbe(False, fault.reason, fault.detail)
        except Exception as exc:  # noqa: BLE001  (like the reader: whatever the source does, the probe answers)
            return CameraProbe(False, "read_error", f"{shown}: {type(exc).__name__}: {redact_url(str(exc))}")
        finally:
            container.close()


def _stale_playlist(url: str, timeout_s: float, shown: str) -> CameraProbe | None:
    """A failed probe when the HLS playlist at ``url`` neither grows nor ends while watched, else None.

    Raises:
        CameraFault: the playlist cannot be fetched (as :func:`vcascade.edge.capture.hls.fetch_playlist`).
    """
    playlist, took_s = wait_for_growth(url, timeout_s, shown)
    if took_s is not None:
        return None
    return CameraProbe(False, "playlist_stale", f"{shown}: the playlist did not grow in {playlist.stale_after_s:g} s "
                       f"({STALE_TARGET_DURATIONS} target durations of {playlist.target_duration_s:g} s); last segment "
                       f"{playlist.last_seq}")
