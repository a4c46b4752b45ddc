"""Opening and decoding a camera with PyAV (FFmpeg's Python bindings): frames, their true timestamps, and every
frame FFmpeg could not give, counted by reason.

Why PyAV and not OpenCV's ``VideoCapture``: OpenCV hides FFmpeg's error codes (every failure is "cannot open"),
packet timestamps, packet and frame corruption flags, and gives up on a file after
``OPENCV_FFMPEG_READ_ATTEMPTS`` packets of other streams. OpenCV stays for image work.

Decoding rules (docs/CAMERAS.md):

* Only the first video stream is demuxed (audio and data streams are never read).
* ``stream_ts_ms`` is the frame's PTS in ms from the stream's start time (FFmpeg's ``start_time``, else the
  first PTS). A stream without timestamps (raw Annex-B H.264) gets them from its frame durations, else from its
  frame rate: 0, 40, 80... ms at 25 fps. An untimed first frame of a stream with a start time (RTSP, before
  its first RTCP report) is one frame interval before it. A PTS jumping back by more than
  :data:`vcascade.edge.capture.timing.RESTART_MS` is a restart of the stream's timeline (a concatenated file, a
  camera that reset), not a lost frame: the camera's :class:`vcascade.edge.capture.timing.Timeline` counts it.
* Frames FFmpeg decodes are delivered, also those it concealed; a frame decoded while FFmpeg said a reference
  frame it needs is missing (:data:`MISSING_REFERENCE_MESSAGES`) is counted ``missing_reference``, another frame
  the decoder flags corrupt ``corrupt``; a packet it cannot decode is counted ``corrupt``, packets before the first
  keyframe that give no frame ``before_keyframe``.
* Frames missing from the stream itself (``pts_gap``) are found on packets, in decode order, by the stream's own
  frame durations (:class:`vcascade.edge.capture.timing.PacketGaps`): an isolated long DTS step is a gap, a lasting one a
  new frame rate, so variable frame rate is never counted as loss.
* Frames cut off at the end of a stream with reordering (B-frames of a truncated MPEG-TS) leave no DTS jump: at the
  end, the delivered PTS after the last packet's DTS are checked for holes against the recent declared durations.
* A demuxer error in the middle of a file, or a last packet the demuxer flags incomplete, is
  ``truncated_file`` (an error), not an end of file.
* Frames become BGR through one libswscale context per stream (:func:`to_bgr`), on one thread per camera.
* Rotation metadata (display matrix) is applied: frames are upright, as players show them.
* Live sources get PyAV's interrupt-callback timeouts ``(open_timeout_s, read_timeout_s)``: a read blocked longer
  returns with an error instead of leaving a thread behind.
"""

from __future__ import annotations

import errno
import itertools
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from vcascade.core.config import CameraConfig
from vcascade.core.redact import redact_url, remember_url
from vcascade.core.runtime.resources import resolve
from vcascade.edge.capture.faults import CameraFault, check_file, classify, is_unfinished_mp4
from vcascade.edge.capture.follow import follow_options, followed_idle_s, should_follow, writer_idle
from vcascade.edge.capture.hwdecode import Fallback, open_decoding
from vcascade.edge.capture.kinds import (
    SEQUENCE_START_RANGE,
    device_index,
    image_pattern,
    is_image,
    is_live,
    sequence_files,
)
from vcascade.edge.capture.timing import GAP_SLACK, PacketGaps, is_restart
from vcascade.edge.capture.url_policy import (
    PROTOCOLS,
    check_format,
    check_host,
    ffmpeg_options,
    follow_redirects,
    scheme_of,
)

TIMEOUT_SLACK = 0.9
"""An FFmpeg error after this fraction of a live source's timeout is that timeout (PyAV's interrupt callback makes
FFmpeg fail with a generic error such as ``AVERROR_INVALIDDATA`` or ``AVERROR_EXIT``)."""
TAIL_FRAMES = 64
"""Delivered PTS kept for the end-of-stream check (more than any decoder's reorder delay)."""
DEFAULT_STEP_MS = 40.0
"""Frame interval assumed for a stream with neither timestamps, durations nor a frame rate (25 fps), ms."""
MISSING_REFERENCE_MESSAGES = (
    "missing reference picture",  # libavcodec/h264_refs.c: a reference list entry has no picture
    "reference picture missing during reorder",  # h264_refs.c: ref_pic_list_modification names a lost picture
    "co located pocs unavailable",  # h264_direct.c: direct prediction from a lost picture
    "could not find ref with poc",  # hevc_refs.c: the reference picture set names a lost picture
)
"""FFmpeg's messages (lower case) saying a frame was decoded without a reference frame it needs."""

BGR_THREADS = 1
"""Threads of each camera's conversion to BGR (libswscale). One, so that an edge with many cameras runs one
conversion per camera thread, not a pool per camera the size of the machine (PyAV's default, 0, means one thread
per core); :func:`to_bgr` callers (the ingest benchmark's bare loop) use the same."""

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


def open_source(
    cfg: CameraConfig, on_decoder: Callable[[str], None] | None = None, on_fallback: Fallback | None = None,
    demuxer_options: dict[str, str] | None = None,
) -> tuple[av.container.InputContainer, av.VideoStream]:
    """Open a camera's source with FFmpeg and find its first video stream.

    Files are checked first (:func:`vcascade.edge.capture.faults.check_file`); an image sequence pattern
    (:func:`vcascade.edge.capture.kinds.image_pattern`) must name at least one file and opens with FFmpeg's
    ``image2`` demuxer; ``device://N`` opens
    ``/dev/videoN`` with FFmpeg's ``v4l2`` input; network URLs get ``rtsp_transport`` (RTSP) and PyAV's
    ``(open_timeout_s, read_timeout_s)`` interrupt timeouts. Video files and network streams decode with
    ``cfg.decoder`` (:func:`vcascade.edge.capture.hwdecode.open_decoding`): ``on_decoder(decoder)`` is told the
    decoder in use, ``on_fallback(device, reason, message)`` each hardware decoder skipped; images and capture
    devices always decode in software. A file still being written is opened to be followed
    (:mod:`vcascade.edge.capture.follow`, ``cfg.follow``); ``demuxer_options`` are added to a network stream's
    options (an HLS playlist's, :func:`vcascade.edge.capture.hls.demuxer_options`).

    Raises:
        CameraFault: with the real cause (:data:`vcascade.edge.capture.faults.FAULT_REASONS`), credentials redacted.
    """
    remember_url(cfg.url)  # an echo of its secrets by FFmpeg or the OS is hidden too, wherever it goes
    shown = redact_url(cfg.url)
    try:
        url = resolve(cfg.url)
    except FileNotFoundError as exc:
        raise CameraFault("missing_file", str(exc)) from None
    target, kwargs = url, {}
    if "://" in url and scheme_of(url) not in PROTOCOLS and device_index(url) is None \
            and not url.lower().startswith("device://"):
        ffmpeg_options(url, cfg.edge, shown)  # raises protocol_not_allowed
    if (pattern := image_pattern(url)) is not None:
        files = sequence_files(url, pattern)
        if not files:
            first = "" if pattern == "glob" else f" (FFmpeg starts a numbered sequence at 0 to {SEQUENCE_START_RANGE - 1})"
            raise CameraFault("missing_file", f"{shown}: no file matches this image sequence pattern{first}")
        check_file(files[0], redact_url(files[0]))
        options = {"pattern_type": pattern, **ffmpeg_options("file", cfg.edge, shown)}
        kwargs = {"format": "image2", "options": options}
    elif not is_live(url):
        check_file(url, shown)
        options = ffmpeg_options("file", cfg.edge, shown)  # a playlist file cannot reach the network
        if should_follow(url, cfg.follow, cfg.follow_idle_s):
            options.update(follow_options(cfg.follow_idle_s))
        kwargs = {"options": options}
    elif (index := device_index(url)) is not None:
        target = f"/dev/video{index}"
        if not os.path.exists(target):
            raise CameraFault("missing_file", f"{shown}: no such device ({target})")
        kwargs = {"format": "v4l2", "timeout": (cfg.open_timeout_s, cfg.read_timeout_s)}
    elif url.lower().startswith("device://"):
        raise CameraFault("bad_url", f"{shown}: a device URL is device://N with N the device number (e.g. device://0)")
    else:
        check_host(url, cfg.edge, shown)
        options = ffmpeg_options(url, cfg.edge, shown)
        if scheme_of(url) in ("rtsp", "rtsps"):
            options["rtsp_transport"] = cfg.rtsp_transport
        options.update(demuxer_options or {})
        kwargs = {"options": options, "timeout": (cfg.open_timeout_s, cfg.read_timeout_s)}
    started_s = time.monotonic()
    try:
        try:
            container, decoder = _open(target, kwargs, cfg, on_fallback)
        except (av.error.FFmpegError, OSError):
            # FFmpeg follows no redirect (max_redirects 0): one the policy allows is followed here, once
            allowed = follow_redirects(url, cfg.open_timeout_s, cfg.edge, shown) if scheme_of(url) in (
                "http", "https") else url
            if allowed == url:
                raise
            container, decoder = _open(allowed, kwargs, cfg, on_fallback)
        if on_decoder is not None:
            on_decoder(decoder)
    except (av.error.FFmpegError, OSError) as exc:  # every PyAV error is classified; none escapes as a crash
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
    if not is_live(url):  # a video stream, but read from text, an image...: not a video file
        try:
            check_format(container.format.name, cfg.edge, shown, image=is_image(url))
        except CameraFault:
            container.close()
            raise
    stream = container.streams.video[0]
    if stream.codec_context is None or not stream.codec_context.is_decoder:
        container.close()
        raise CameraFault("unsupported_codec", f"{shown}: no decoder for its video codec")
    return container, stream


def _open(target: str, kwargs: dict, cfg: CameraConfig, on_fallback: Fallback | None
          ) -> tuple[av.container.InputContainer, str]:
    """``av.open`` with the camera's decoder for video files and streams; images and devices in software."""
    if not is_image(target) and device_index(target) is None and not target.startswith("/dev/video"):
        return open_decoding(target, kwargs, cfg.decoder, on_fallback or _no_fallback)
    return av.open(target, **kwargs), "software"


def _no_fallback(device: str, reason: str, message: str) -> None:
    """A hardware decoder skipped, with nobody counting it (probes)."""


def stream_info(stream: av.VideoStream) -> StreamInfo:
    """Frame count, nominal rate, codec and size of an opened video stream (0 where unknown)."""
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    ctx = stream.codec_context
    return StreamInfo(stream.frames or 0, float(rate) if rate else 0.0, ctx.name, ctx.width or 0, ctx.height or 0)


def to_bgr(reformatter: VideoReformatter, frame: av.VideoFrame) -> np.ndarray:
    """A decoded frame as (H, W, 3) uint8 BGR, converted by libswscale with ``reformatter``'s cached context.

    Keep one reformatter per stream: ``frame.to_ndarray(format="bgr24")`` makes a new one per frame, so it
    allocates and initialises a libswscale context (and its thread pool) for every frame, 0.1-0.4 ms at 640x272
    to 720p (docs/BENCHMARKS.md, "Ingest with PyAV"). Rotation metadata is not applied here.
    """
    return reformatter.reformat(frame, format="bgr24", threads=BGR_THREADS).to_ndarray()


class StreamDecoder:
    """Decodes one opened video stream into (H, W, 3) uint8 BGR images with stream timestamps, counting losses.

    Args:
        container: the opened container (:func:`open_source`); closed by the caller.
        stream: its video stream.
        count_loss: called as ``count_loss(reason, n)`` for frames lost or damaged.
        drain_log: returns FFmpeg's log lines (lower case) captured since its last call, or None.
        read_timeout_s: a live source's read timeout (PyAV's interrupt), s; None for files.

    Attributes:
        follow_idle_s: the idle time of a followed file (:mod:`vcascade.edge.capture.follow`), else None.
        writer_idle: True once a followed file that grew while it was read ended because its writer stopped
            writing (a followed file that never grew ends as a plain file does).
    """

    def __init__(
        self, container: av.container.InputContainer, stream: av.VideoStream, count_loss: LossCounter,
        drain_log: Callable[[], list[str]] | None = None, read_timeout_s: float | None = None,
    ) -> None:
        self.container, self.stream, self.count_loss = container, stream, count_loss
        self.read_timeout_s = read_timeout_s
        self._drain_log = drain_log or list
        self._tb_ms = float(stream.time_base or Fraction(1, 1000)) * 1000.0
        rate = stream.average_rate or stream.guessed_rate
        self._rate_step_ms = 1000.0 / float(rate) if rate else DEFAULT_STEP_MS
        self._origin = stream.start_time
        self._last_ms: float | None = None
        self._gaps = PacketGaps()
        self._tail_pts: deque[int] = deque(maxlen=TAIL_FRAMES)
        self._last_dts: int | None = None
        self._durations: deque[int] = deque(maxlen=TAIL_FRAMES)
        self._before_key = 0
        self._keyframe_seen = False
        self._frames_out = 0
        self._reformatter = VideoReformatter()
        self.follow_idle_s = followed_idle_s(container)
        self.writer_idle = False
        self._size_at_open = os.path.getsize(container.name) if self.follow_idle_s is not None else 0

    def frames(self) -> Iterator[tuple[np.ndarray, float]]:
        """Yield (image, stream_ts_ms) for every frame FFmpeg decodes, to the end of the stream.

        Raises:
            CameraFault: ``truncated_file`` (the demuxer failed mid-file or flagged the last packet incomplete),
                ``read_timeout``, ``network_error``, ``read_error`` (the cause FFmpeg gave).
        """
        shown = redact_url(self.container.name)
        timed = self.read_timeout_s is not None  # a live source: each read is timed (files are not)
        last_packet, packet_s = None, time.monotonic()
        try:
            for packet in self.container.demux(self.stream):
                if timed:
                    waited_s, packet_s = time.monotonic() - packet_s, time.monotonic()
                    if self._timed_out(waited_s):  # FFmpeg's interrupt fired; the demuxer handed out what it held
                        raise CameraFault("read_timeout",
                                          f"{shown}: no data for {waited_s:.1f} s (FFmpeg read timeout)")
                if packet.size:
                    last_packet = packet
                    self._watch_packet(packet)
                try:
                    decoded = packet.decode()
                except av.error.InvalidDataError:
                    self.count_loss("corrupt", 1)  # FFmpeg could not decode this packet at all
                    continue
                lines = self._drain_log()  # before the first keyframe every unit misses references: before_keyframe
                missing_ref = bool(lines) and self._keyframe_seen and any(
                    m in line for line in lines for m in MISSING_REFERENCE_MESSAGES)
                for frame in decoded:
                    if missing_ref or frame.is_corrupt:  # damaged but decoded: delivered, and counted
                        self.count_loss("missing_reference" if missing_ref else "corrupt", 1)
                        missing_ref = False
                    yield self._image(frame), self._stamp_ms(frame)
                if missing_ref:  # the damaged frame is still inside the decoder (reordering): counted now
                    self.count_loss("missing_reference", 1)
                if timed:
                    packet_s = time.monotonic()  # the next read starts now (delivering frames is not reading)
        except CameraFault:
            raise
        except av.error.EOFError:
            pass
        except av.error.FFmpegError as exc:
            waited_s = time.monotonic() - packet_s
            if self._timed_out(waited_s):
                raise CameraFault("read_timeout", f"{shown}: no data for {waited_s:.1f} s (FFmpeg read timeout)") from None
            if self.follow_idle_s is not None and getattr(exc, "errno", None) == errno.EIO \
                    and writer_idle(self.container.name, self.follow_idle_s):  # FFmpeg's rw_timeout ended the read
                self.writer_idle = self._grew()  # the writer stopped; else nobody wrote: a clean end
                for frame in self.stream.codec_context.decode(None):  # the frames still inside the decoder
                    yield self._image(frame), self._stamp_ms(frame)
                self._ended(last_packet)
                return
            fault = classify(exc, shown, opening=False)
            if fault.reason in ("invalid_data", "read_error") and not is_live(self.container.name):
                raise CameraFault("truncated_file", f"{fault.detail} (the file ends before its data does)") from None
            raise fault from None
        self._ended(last_packet)

    def _grew(self) -> bool:
        """True when the followed file is larger than when it was opened (a writer added to it while read)."""
        try:
            return os.path.getsize(self.container.name) > self._size_at_open
        except OSError:
            return False

    def _ended(self, last_packet: av.Packet | None) -> None:
        """The stream's end: frames cut off at it, units never decodable, an incomplete last packet (an error)."""
        self._count_tail_gap()
        if not self._keyframe_seen and self._before_key:
            self.count_loss("before_keyframe", max(0, self._before_key - self._frames_out))
        if last_packet is not None and last_packet.is_corrupt:
            shown = redact_url(self.container.name)
            raise CameraFault("truncated_file", f"{shown}: truncated: the demuxer flags its last packet incomplete")

    def _timed_out(self, waited_s: float) -> bool:
        """True when a read of a live source took its ``read_timeout_s`` (PyAV's interrupt fired). A packet that
        still comes out of such a read is not fresh data: FFmpeg's RTSP demuxer hands out the packets it held back
        (its reorder queue) when the read is interrupted, and taking it as a frame restarts the timeout, so a frozen
        server would be seen only at twice ``read_timeout_s``."""
        return self.read_timeout_s is not None and waited_s >= TIMEOUT_SLACK * self.read_timeout_s

    def _watch_packet(self, packet: av.Packet) -> None:
        if not self._keyframe_seen:
            if packet.is_keyframe:
                self._keyframe_seen = True
                if self._before_key > self._frames_out:
                    self.count_loss("before_keyframe", self._before_key - self._frames_out)
            else:
                self._before_key += 1
        ts = packet.dts if packet.dts is not None else packet.pts
        self._last_dts = ts
        if packet.duration:
            self._durations.append(packet.duration)
        if ts is not None:
            missing = self._gaps.observe(ts * self._tb_ms)
            if missing:
                self.count_loss("pts_gap", missing)

    def _stamp_ms(self, frame: av.VideoFrame) -> float:
        self._frames_out += 1
        if frame.pts is not None:
            if self._origin is None:
                self._origin = frame.pts
            pts_ms = (frame.pts - self._origin) * self._tb_ms
        elif self._last_ms is None:  # untimed first frame: before the stream's start time if it has one (RTSP)
            pts_ms = 0.0 if self._origin is None else -self._rate_step_ms
        else:
            pts_ms = self._last_ms + (frame.duration * self._tb_ms if frame.duration else self._rate_step_ms)
        if self._last_ms is not None and is_restart(self._last_ms, pts_ms):
            self._tail_pts.clear()  # a new timeline (a PTS restart): counted by the camera's Timeline, not lost
        elif self._last_ms is not None and pts_ms <= self._last_ms:
            self.count_loss("pts_not_increasing", 1)
        if frame.pts is not None:
            self._tail_pts.append(frame.pts)
        self._last_ms = pts_ms
        return pts_ms

    def _count_tail_gap(self) -> None:
        """Holes among the delivered PTS after the last packet's DTS (frames cut off at the end), counted against
        the median declared duration of the last packets (a file's last duration is often arbitrary)."""
        if self._last_dts is None or not self._durations:
            return
        duration = statistics.median(self._durations)
        below = [pts for pts in self._tail_pts if pts <= self._last_dts]
        tail = sorted(pts for pts in self._tail_pts if pts > self._last_dts)
        points = ([max(below)] if below else []) + tail
        missing = sum(max(1, round((b - a) / duration) - 1) for a, b in itertools.pairwise(points)
                      if b - a > GAP_SLACK * duration)
        if missing:
            self.count_loss("pts_gap", missing)

    def _image(self, frame: av.VideoFrame) -> np.ndarray:
        image = to_bgr(self._reformatter, frame)  # a view over padded lines when the row size is not aligned
        turns = round((frame.rotation or 0) / 90) % 4
        if turns:
            image = np.rot90(image, turns)
        return image if image.flags.c_contiguous else np.ascontiguousarray(image)
