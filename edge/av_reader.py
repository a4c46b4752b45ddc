"""Opening and decoding a camera with PyAV (FFmpeg's Python bindings): frames, their true timestamps, and every
frame FFmpeg could not give, counted by reason.

Why PyAV and not OpenCV's ``VideoCapture``: OpenCV hides FFmpeg's error codes (every failure is "cannot open"),
packet timestamps, packet and frame corruption flags, and gives up on a file after
``OPENCV_FFMPEG_READ_ATTEMPTS`` packets of other streams. OpenCV stays for image work.

Decoding rules (docs/CAMERAS.md):

* Only the first video stream is demuxed (audio and data streams are never read).
* ``stream_ts_ms`` is the frame's PTS in ms from the stream's start time (FFmpeg's ``start_time``, else the
  first PTS). A stream without timestamps (raw Annex-B H.264) gets them from its frame durations, else from its
  frame rate: 0, 40, 80... ms at 25 fps.
* Frames FFmpeg decodes are delivered, also those it concealed; a frame the decoder flags corrupt is counted
  ``corrupt`` (``missing_reference`` when FFmpeg logged a missing reference meanwhile), a packet it cannot decode
  is counted ``corrupt``, packets before the first keyframe that give no frame ``before_keyframe``.
* Frames missing from the stream itself (``pts_gap``) are found on packets, in decode order: a DTS step longer
  than the previous packet's declared duration (MP4 ``stts``, Matroska block durations, the parser's frame
  duration for MPEG-TS) misses ``round(step / duration) - 1`` frames, so a variable frame rate is never a gap.
  Without declared durations (RTP) the step is compared with :data:`GAP_FACTOR` x the median of the last
  :data:`GAP_WINDOW` steps, and every step joins the window so that a rate change is learnt.
* A demuxer error in the middle of a file, or a last packet the demuxer flags incomplete, is
  ``truncated_file`` (an error), not an end of file.
* Rotation metadata (display matrix) is applied: frames are upright, as players show them.
* Live sources get PyAV's interrupt-callback timeouts ``(open_timeout_s, read_timeout_s)``: a read blocked longer
  returns with an error instead of leaving a thread behind.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np

from vcascade.core.config import CameraConfig
from vcascade.core.redact import redact_url
from vcascade.core.resources import resolve
from vcascade.edge.camera_faults import CameraFault, check_file, classify, is_unfinished_mp4
from vcascade.edge.capture import device_index, is_live

GAP_FACTOR = 4.0
"""Without declared packet durations: a DTS step above this many times the recent median step is a gap."""
GAP_WINDOW = 16
"""Without declared packet durations: number of recent DTS steps whose median is the nominal interval."""
DURATION_SLACK = 1.5
"""With declared durations: a step above this many declared durations is a gap (rounding of time bases)."""
TIMEOUT_SLACK = 0.9
"""An FFmpeg error after this fraction of a live source's timeout is that timeout (PyAV's interrupt callback makes
FFmpeg fail with a generic error such as ``AVERROR_INVALIDDATA`` or ``AVERROR_EXIT``)."""
DEFAULT_STEP_MS = 40.0
"""Frame interval assumed for a stream with neither timestamps, durations nor a frame rate (25 fps), ms."""
_REFERENCE_WORDS = ("reference", "co located", "frame num gap")
"""FFmpeg H.264/HEVC messages about a missing reference frame (libavcodec/h264_refs.c, h264_direct.c)."""

LossCounter = Callable[[str, int], None]
"""``count(reason, n)``: ``n`` frames lost or damaged for ``reason`` (FRAME_LOSS_REASONS)."""


@dataclass(frozen=True)
class StreamInfo:
    """What the container header says about an opened video stream.

    Attributes:
        frame_count: frames announced by the header (0 when unknown).
        fps: nominal frame rate, frames/s (0 when unknown); used for timestamps only when a stream has none.
        codec: the codec's FFmpeg name (``h264``, ``hevc``...).
        width_px: frame width, pixels (0 when unknown before decoding).
        height_px: frame height, pixels.
    """

    frame_count: int
    fps: float
    codec: str
    width_px: int
    height_px: int


def open_source(cfg: CameraConfig) -> tuple[av.container.InputContainer, av.VideoStream]:
    """Open a camera's source with FFmpeg and find its first video stream.

    Files are checked first (:func:`vcascade.edge.camera_faults.check_file`); ``device://N`` opens
    ``/dev/videoN`` with FFmpeg's ``v4l2`` input; network URLs get ``rtsp_transport`` (RTSP) and PyAV's
    ``(open_timeout_s, read_timeout_s)`` interrupt timeouts.

    Raises:
        CameraFault: with the real cause (:data:`vcascade.edge.camera_faults.FAULT_REASONS`), credentials redacted.
    """
    shown = redact_url(cfg.url)
    try:
        url = resolve(cfg.url)
    except FileNotFoundError as exc:
        raise CameraFault("missing_file", str(exc)) from None
    target, kwargs = url, {}
    if not is_live(url):
        check_file(url, shown)
    elif (index := device_index(url)) is not None:
        target = f"/dev/video{index}"
        if not os.path.exists(target):
            raise CameraFault("missing_file", f"{shown}: no such device ({target})")
        kwargs = {"format": "v4l2", "timeout": (cfg.open_timeout_s, cfg.read_timeout_s)}
    elif url.lower().startswith("device://"):
        raise CameraFault("bad_url", f"{shown}: a device URL is device://N with N the device number (e.g. device://0)")
    else:
        options = {"rtsp_transport": cfg.rtsp_transport} if url.lower().startswith(("rtsp://", "rtsps://")) else {}
        kwargs = {"options": options, "timeout": (cfg.open_timeout_s, cfg.read_timeout_s)}
    started_s = time.monotonic()
    try:
        container = av.open(target, **kwargs)
    except Exception as exc:  # every PyAV error is classified; none escapes as a crash
        waited_s = time.monotonic() - started_s
        if "timeout" in kwargs and waited_s >= TIMEOUT_SLACK * cfg.open_timeout_s:  # the interrupt fired
            raise CameraFault("open_timeout", f"{shown}: no answer within {waited_s:.1f} s "
                              f"(open_timeout_s={cfg.open_timeout_s:g})") from None
        fault = classify(exc, shown, opening=True)
        if target == url and not is_live(url) and is_unfinished_mp4(url, str(exc)):
            raise CameraFault("truncated_file", f"cannot open {fault.detail}: an MP4 without its index (moov), "
                              "a recording cut before it was finished") from None
        raise CameraFault(fault.reason, f"cannot open {fault.detail}") from None
    if not container.streams.video:
        kinds = ", ".join(sorted({s.type for s in container.streams})) or "none"
        container.close()
        raise CameraFault("no_video_stream", f"{shown}: no video stream (streams: {kinds})")
    stream = container.streams.video[0]
    if stream.codec_context is None or not stream.codec_context.is_decoder:
        container.close()
        raise CameraFault("unsupported_codec", f"{shown}: no decoder for its video codec")
    return container, stream


def stream_info(stream: av.VideoStream) -> StreamInfo:
    """Frame count, nominal rate, codec and size of an opened video stream (0 where unknown)."""
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    ctx = stream.codec_context
    return StreamInfo(stream.frames or 0, float(rate) if rate else 0.0, ctx.name, ctx.width or 0, ctx.height or 0)


class StreamDecoder:
    """Decodes one opened video stream into (H, W, 3) uint8 BGR images with stream timestamps, counting losses.

    Args:
        container: the opened container (:func:`open_source`); closed by the caller.
        stream: its video stream.
        count_loss: called as ``count_loss(reason, n)`` for frames lost or damaged.
        drain_log: returns FFmpeg's log lines (lower case) captured since its last call, or None.
        read_timeout_s: a live source's read timeout (PyAV's interrupt), s; None for files.
    """

    def __init__(
        self, container: av.container.InputContainer, stream: av.VideoStream, count_loss: LossCounter,
        drain_log: Callable[[], list[str]] | None = None, read_timeout_s: float | None = None,
    ) -> None:
        self.container, self.stream, self.count_loss = container, stream, count_loss
        self.read_timeout_s = read_timeout_s
        self._drain_log = drain_log or (lambda: [])
        self._tb_ms = float(stream.time_base or Fraction(1, 1000)) * 1000.0
        rate = stream.average_rate or stream.guessed_rate
        self._rate_step_ms = 1000.0 / float(rate) if rate else DEFAULT_STEP_MS
        self._origin = stream.start_time
        self._last_ms: float | None = None
        self._gaps = PacketGaps()
        self._before_key = 0
        self._keyframe_seen = False
        self._frames_out = 0

    def frames(self) -> Iterator[tuple[np.ndarray, float]]:
        """Yield (image, stream_ts_ms) for every frame FFmpeg decodes, to the end of the stream.

        Raises:
            CameraFault: ``truncated_file`` (the demuxer failed mid-file or flagged the last packet incomplete),
                ``read_timeout``, ``network_error``, ``read_error`` (the cause FFmpeg gave).
        """
        shown = redact_url(self.container.name)
        last_packet, packet_s = None, time.monotonic()
        try:
            for packet in self.container.demux(self.stream):
                packet_s = time.monotonic()
                if packet.size:
                    last_packet = packet
                    self._watch_packet(packet)
                try:
                    decoded = packet.decode()
                except av.error.InvalidDataError:
                    self.count_loss("corrupt", 1)  # FFmpeg could not decode this packet at all
                    continue
                lines = self._drain_log()
                for frame in decoded:
                    yield self._image(frame), self._stamp_ms(frame, lines)
        except CameraFault:
            raise
        except av.error.EOFError:
            pass
        except av.error.FFmpegError as exc:
            waited_s = time.monotonic() - packet_s
            if self.read_timeout_s is not None and waited_s >= TIMEOUT_SLACK * self.read_timeout_s:
                raise CameraFault("read_timeout", f"{shown}: no data for {waited_s:.1f} s (FFmpeg read timeout)") from None
            fault = classify(exc, shown, opening=False)
            if fault.reason in ("invalid_data", "read_error") and not is_live(self.container.name):
                raise CameraFault("truncated_file", f"{fault.detail} (the file ends before its data does)") from None
            raise fault from None
        if not self._keyframe_seen and self._before_key:
            self.count_loss("before_keyframe", max(0, self._before_key - self._frames_out))
        if last_packet is not None and last_packet.is_corrupt:
            raise CameraFault("truncated_file", f"{shown}: truncated: the demuxer flags its last packet incomplete")

    def _watch_packet(self, packet: av.Packet) -> None:
        if not self._keyframe_seen:
            if packet.is_keyframe:
                self._keyframe_seen = True
                if self._before_key > self._frames_out:
                    self.count_loss("before_keyframe", self._before_key - self._frames_out)
            else:
                self._before_key += 1
        ts = packet.dts if packet.dts is not None else packet.pts
        if ts is not None:
            missing = self._gaps.observe(ts * self._tb_ms, (packet.duration or 0) * self._tb_ms)
            if missing:
                self.count_loss("pts_gap", missing)

    def _stamp_ms(self, frame: av.VideoFrame, lines: list[str]) -> float:
        self._frames_out += 1
        if frame.is_corrupt:
            missing_ref = any(word in line for line in lines for word in _REFERENCE_WORDS)
            self.count_loss("missing_reference" if missing_ref else "corrupt", 1)
        if frame.pts is not None:
            if self._origin is None:
                self._origin = frame.pts
            pts_ms = (frame.pts - self._origin) * self._tb_ms
        elif self._last_ms is None:
            pts_ms = 0.0
        else:
            pts_ms = self._last_ms + (frame.duration * self._tb_ms if frame.duration else self._rate_step_ms)
        if self._last_ms is not None and pts_ms <= self._last_ms:
            self.count_loss("pts_not_increasing", 1)
        self._last_ms = pts_ms
        return pts_ms

    @staticmethod
    def _image(frame: av.VideoFrame) -> np.ndarray:
        image = frame.to_ndarray(format="bgr24")
        turns = round((frame.rotation or 0) / 90) % 4
        return np.ascontiguousarray(np.rot90(image, turns)) if turns else image


class PacketGaps:
    """Frames missing from a stream, found on its packets' decode timestamps (see the module's rules)."""

    def __init__(self) -> None:
        self._last_ms: float | None = None
        self._declared_ms = 0.0
        self._steps: deque[float] = deque(maxlen=GAP_WINDOW)

    def observe(self, ts_ms: float, duration_ms: float) -> int:
        """Record a packet's DTS and declared duration, ms (0: none). Returns the frames missing before it."""
        last, declared, self._last_ms, self._declared_ms = self._last_ms, self._declared_ms, ts_ms, duration_ms
        if last is None or ts_ms <= last:
            return 0
        step = ts_ms - last
        if declared > 0:
            return max(1, round(step / declared) - 1) if step > DURATION_SLACK * declared else 0
        missing = 0
        if len(self._steps) >= 3 and step > GAP_FACTOR * min(self._steps):  # cheap pre-check: median >= min
            nominal = statistics.median(self._steps)
            if step > GAP_FACTOR * nominal:
                missing = max(1, round(step / nominal) - 1)
        self._steps.append(step)
        return missing
