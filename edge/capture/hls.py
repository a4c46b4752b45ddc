"""HLS cameras: reading an ``http(s)://...m3u8`` playlist as a camera, not as an endless replay.

FFmpeg's ``hls`` demuxer plays the segments; this module reads the media playlist itself (RFC 8216) to know what
FFmpeg cannot say: whether the playlist has an end (``#EXT-X-ENDLIST``: a VOD playlist, or a live one that was
finished), its target duration, and which segments a camera has already played. With it the camera reader:

* plays a playlist with an end once and ends (``end_of_playlist``), or loops it with ``loop: true``;
* paces every playlist by its timestamps (:class:`vcascade.edge.capture.timing.Pacer`): the demuxer hands out a
  whole segment at once, and without pacing the newest-frame slot would keep one frame per burst;
* tells FFmpeg to give up on a live playlist that has not grown for :data:`STALE_TARGET_DURATIONS` target
  durations (its ``m3u8_hold_counters``: reloads without a new segment, one every half target duration), and
  calls that ``stalled`` with the reason ``playlist_stale``;
* remembers the last segment of a stale playlist, so that reconnecting never plays it again as new footage: the
  camera opens again only once the playlist has a later segment, and starts at the first new one
  (``live_start_index``).

The playlist is fetched with the camera's own limits: its host is checked first
(:func:`vcascade.edge.capture.url_policy.check_host`, ``camera_hosts``), redirects are not followed, the answer is read up to
:data:`PLAYLIST_MAX_BYTES` within ``open_timeout_s``. A master playlist is followed to its first variant (the one
FFmpeg's first video stream comes from).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import requests

from vcascade.edge.capture.faults import CameraFault
from vcascade.edge.capture.url_policy import check_host

STALE_TARGET_DURATIONS = 3
"""A live playlist without a new segment for this many target durations is stale (RFC 8216 section 6.3.4 has a
client reload a playlist that did not change after half a target duration, then after 1.5 and 3 target durations;
after that it is not growing)."""
LIVE_START_SEGMENTS = 3
"""A live playlist opens this many segments before its end (FFmpeg's default ``live_start_index`` -3, RFC 8216
section 6.3.3: no closer than three target durations to the end)."""
PLAYLIST_MAX_BYTES = 1 << 20
"""The most bytes of a playlist read (a playlist of 10,000 segments is about 500 kB)."""
PACE_RESYNC_S = 0.5
"""A segment that arrives this late (s) behind its pace restarts the pacing from itself (a player's rebuffer),
instead of being released at once as a burst."""


@dataclass(frozen=True)
class Playlist:
    """What a media playlist says.

    Attributes:
        target_duration_s: ``#EXT-X-TARGETDURATION``, s (the longest segment, rounded up).
        first_seq: ``#EXT-X-MEDIA-SEQUENCE``, the number of its first segment (0 when absent).
        segments: how many segments it lists.
        ended: True when it has ``#EXT-X-ENDLIST`` (no segment will be added).
    """

    target_duration_s: float
    first_seq: int
    segments: int
    ended: bool

    @property
    def last_seq(self) -> int:
        """The number of its last segment (``first_seq - 1`` when it lists none)."""
        return self.first_seq + self.segments - 1

    @property
    def stale_after_s(self) -> float:
        """Seconds without a new segment after which the playlist is stale."""
        return STALE_TARGET_DURATIONS * self.target_duration_s


def is_hls(url: str) -> bool:
    """True for an ``http(s)://`` URL whose path ends in ``.m3u8`` (an HLS playlist)."""
    parts = urlsplit(url)
    return parts.scheme.lower() in ("http", "https") and parts.path.lower().endswith(".m3u8")


def parse_playlist(text: str) -> Playlist | str:
    """Parse an M3U8 playlist: a :class:`Playlist` for a media playlist, or the URI (maybe relative) of the first
    variant of a master playlist.

    Raises:
        ValueError: not an M3U8 playlist (no ``#EXTM3U`` first line).
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("#EXTM3U"):
        raise ValueError("not an M3U8 playlist (no #EXTM3U)")
    target_s, first_seq, segments, ended, variant = 0.0, 0, 0, False, False
    for line in lines[1:]:
        if line.startswith("#EXT-X-STREAM-INF"):
            variant = True
        elif not line.startswith("#"):
            if variant:
                return line
            segments += 1
        elif line.startswith("#EXT-X-TARGETDURATION:"):
            target_s = float(line.split(":", 1)[1])
        elif line.startswith("#EXT-X-MEDIA-SEQUENCE:"):
            first_seq = int(line.split(":", 1)[1])
        elif line.startswith("#EXT-X-ENDLIST"):
            ended = True
    return Playlist(target_s or 1.0, first_seq, segments, ended)


def fetch_playlist(url: str, timeout_s: float, shown: str) -> Playlist:
    """GET and parse ``url``'s media playlist (a master playlist's first variant, one level).

    Args:
        url: the playlist's URL (credentials in it are sent as HTTP Basic authentication).
        timeout_s: seconds allowed to connect, and again between bytes.
        shown: the URL as logs may show it (credentials redacted).

    Raises:
        CameraFault: ``connection_refused``, ``open_timeout``, ``name_not_resolved``, ``unauthorized``,
            ``not_found``, ``network_error`` (another HTTP status or network failure), ``invalid_data`` (not a
            playlist, or larger than :data:`PLAYLIST_MAX_BYTES`).
    """
    for _ in range(2):
        parsed = parse_playlist(_get(url, timeout_s, shown))
        if isinstance(parsed, Playlist):
            return parsed
        url = urljoin(url, parsed)
    raise CameraFault("invalid_data", f"{shown}: a master playlist whose variant is a master playlist again")


def _get(url: str, timeout_s: float, shown: str) -> str:
    try:
        with requests.get(url, timeout=timeout_s, stream=True, allow_redirects=False,
                          headers={"User-Agent": "vcascade"}) as answer:
            if answer.status_code in (401, 403):
                raise CameraFault("unauthorized", f"{shown}: playlist: HTTP {answer.status_code}")
            if answer.status_code == 404:
                raise CameraFault("not_found", f"{shown}: playlist: HTTP 404 Not Found")
            if answer.status_code != 200:
                raise CameraFault("network_error", f"{shown}: playlist: HTTP {answer.status_code}")
            body = answer.raw.read(PLAYLIST_MAX_BYTES + 1, decode_content=True)
    except requests.ConnectionError as exc:
        text = str(exc)
        reason = ("connection_refused" if "refused" in text.lower() else
                  "name_not_resolved" if "resolve" in text.lower() or "name or service" in text.lower() else
                  "network_error")
        raise CameraFault(reason, f"{shown}: playlist: cannot connect ({reason.replace('_', ' ')})") from None
    except requests.Timeout:
        raise CameraFault("open_timeout", f"{shown}: playlist: no answer within {timeout_s:g} s") from None
    except requests.RequestException as exc:
        raise CameraFault("network_error", f"{shown}: playlist: {type(exc).__name__}") from None
    if len(body) > PLAYLIST_MAX_BYTES:
        raise CameraFault("invalid_data", f"{shown}: playlist larger than {PLAYLIST_MAX_BYTES} bytes")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise CameraFault("invalid_data", f"{shown}: the playlist is not UTF-8 text") from None


def demuxer_options(playlist: Playlist, seen_seq: int | None) -> dict[str, str]:
    """FFmpeg ``hls`` demuxer options for opening a live ``playlist`` after segment ``seen_seq`` was played.

    ``m3u8_hold_counters``: the demuxer ends (EOF) after this many reloads without a new segment (it reloads
    every half target duration once it waits), about :data:`STALE_TARGET_DURATIONS` target durations;
    ``max_reload`` lets it reload that often in one wait. ``live_start_index``: start
    :data:`LIVE_START_SEGMENTS` segments before the end, never at or before ``seen_seq``.
    """
    holds = 2 * STALE_TARGET_DURATIONS
    new = LIVE_START_SEGMENTS if seen_seq is None else min(LIVE_START_SEGMENTS, playlist.last_seq - seen_seq)
    return {"m3u8_hold_counters": str(holds), "max_reload": str(holds + 2), "live_start_index": str(-max(1, new))}


def wait_for_growth(url: str, timeout_s: float, shown: str) -> tuple[Playlist, float | None]:
    """Watch a playlist until it gets a new segment or an end, or for :attr:`Playlist.stale_after_s`.

    Returns:
        (the last playlist fetched, the seconds it took to grow or end; None when it did neither: stale).

    Raises:
        CameraFault: as :func:`fetch_playlist`.
    """
    started_s = time.monotonic()
    first = playlist = fetch_playlist(url, timeout_s, shown)
    while not playlist.ended and playlist.last_seq <= first.last_seq:
        waited_s = time.monotonic() - started_s
        if waited_s >= first.stale_after_s:
            return playlist, None
        time.sleep(min(first.target_duration_s / 2, first.stale_after_s - waited_s))
        playlist = fetch_playlist(url, timeout_s, shown)
    return playlist, time.monotonic() - started_s


class HlsCamera:
    """The playlist side of one HLS camera across its sessions (connections).

    Args:
        url: the playlist URL.
        shown: the URL as logs may show it.
        edge: the edge reading it (its ``camera_hosts`` allow-list is checked before each fetch).

    Attributes:
        playlist: the playlist as last fetched, None before the first session.
        seen_seq: the last segment of a playlist found stale: never played again (None: none yet).
    """

    def __init__(self, url: str, shown: str, edge: str) -> None:
        self.url, self.shown, self.edge = url, shown, edge
        self.playlist: Playlist | None = None
        self.seen_seq: int | None = None

    def before_open(self, open_timeout_s: float, read_timeout_s: float) -> tuple[dict[str, str], float]:
        """Fetch the playlist before FFmpeg opens it: the demuxer options and the read timeout to open it with.

        A live playlist is read with at least :attr:`Playlist.stale_after_s` plus two target durations of read
        timeout, so that the demuxer's own end on a stale playlist comes before the timeout.

        Raises:
            CameraFault: ``host_not_allowed`` (:func:`vcascade.edge.capture.url_policy.check_host`); as
                :func:`fetch_playlist`; ``playlist_stale`` when a playlist found stale has no segment after
                :attr:`seen_seq` yet.
        """
        check_host(self.url, self.edge, self.shown)
        playlist = self.playlist = fetch_playlist(self.url, open_timeout_s, self.shown)
        if playlist.ended:
            return {}, read_timeout_s
        if self.seen_seq is not None and playlist.last_seq <= self.seen_seq:
            raise CameraFault("playlist_stale", f"{self.shown}: the playlist still ends at segment {playlist.last_seq}, "
                              "already played; waiting for a new segment")
        timeout_s = max(read_timeout_s, playlist.stale_after_s + 2 * playlist.target_duration_s)
        return demuxer_options(playlist, self.seen_seq), timeout_s

    def at_end(self, session_frames: int, timeout_s: float) -> tuple[str, str, str] | None:
        """FFmpeg's demuxer ended after ``session_frames`` frames; ``timeout_s`` is the playlist's fetch timeout.

        Returns:
            ``("ended", "end_of_playlist", ...)`` when the playlist has an end; ``("stalled", "playlist_stale",
            ...)`` when it stopped growing (its last segment is remembered in :attr:`seen_seq`); None when it could
            not be fetched again (the caller reports the stream's end as for any live source).
        """
        try:
            playlist = fetch_playlist(self.url, timeout_s, self.shown)
        except CameraFault:
            return None
        self.playlist = playlist
        if playlist.ended:
            return "ended", "end_of_playlist", f"end of playlist after {session_frames} frames"
        self.seen_seq = playlist.last_seq
        detail = (f"{self.shown}: the playlist has not grown for {STALE_TARGET_DURATIONS} target durations of "
                  f"{playlist.target_duration_s:g} s; last segment {playlist.last_seq}, not played again")
        return "stalled", "playlist_stale", detail
