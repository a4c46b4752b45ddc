"""What a camera URL may make the edge open: protocols per camera kind, hosts for network cameras, redirects,
and only video formats for files.

Whoever can add a camera (the deployment file, ``vcascade camera add``) could otherwise make the edge fetch any
address its network reaches (directly, through a redirect, through an HLS playlist's segments) and read the
answer's kind back from the camera state, or "decode" a local text file. So:

- **Protocols per kind**: FFmpeg's ``protocol_whitelist`` option (applied to every nested open, HLS segments
  and redirects included): :data:`PROTOCOLS`. A local file opens only ``file``, so a playlist file cannot reach
  the network; an RTSP camera opens only RTSP and its transports.
- **Hosts** (optional, ``edges.<name>.camera_hosts``): host names or IP networks a network camera may be on; a
  name must resolve only to addresses inside the listed networks, unless the name itself is listed.
- **Redirects**: FFmpeg opens an HTTP camera with ``max_redirects=0``, so it follows none. When that open fails,
  the redirects are followed here (at most :data:`MAX_REDIRECTS`, headers only), each hop checked: one to another
  host is refused unless that host is allowed, and an allowed final address is opened (again without redirects).
  The extra request is made only after a failed open, so a camera that serves one client is not disturbed.
- **Files**: only the demuxers of :data:`VIDEO_DEMUXERS` are accepted (a text file opens in FFmpeg's ``tty``
  demuxer, "ANSI art", and is refused as ``not_video``).

Each refusal is a :class:`~vcascade.edge.capture.faults.CameraFault` with its reason (``protocol_not_allowed``,
``host_not_allowed``, ``redirect_refused``, ``not_video``) that shows in the camera's state, and is counted in
``vcascade_edge_camera_url_refusals_total{edge, reason}``.

Limits: the host check resolves the name once, before FFmpeg resolves it again (a DNS server that answers
differently the second time, DNS rebinding, is not caught; list IP networks and use names your own resolver
serves); HLS segments on other hosts of the allowed protocols are fetched by FFmpeg without a host check.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
from urllib.parse import urljoin

from vcascade.edge.capture.faults import CameraFault
from vcascade.edge.metrics import CAMERA_URL_REFUSALS

PROTOCOLS = {
    "file": "file",
    "rtsp": "rtsp,rtp,srtp,udp,tcp",
    "rtsps": "rtsp,rtsps,rtp,srtp,udp,tcp,tls",
    "http": "http,https,tcp,tls,crypto",
    "https": "http,https,tcp,tls,crypto",
}
"""FFmpeg ``protocol_whitelist`` per URL scheme (``file`` for local files). RTSP needs its RTP/UDP/TCP
transports; HTTP cameras may be MJPEG or HLS (``crypto`` for encrypted segments), and may move to https."""

VIDEO_DEMUXERS = frozenset({
    "mov", "mp4", "m4a", "3gp", "3g2", "mj2", "matroska", "webm", "avi", "mpegts", "mpegtsraw", "flv", "h264",
    "hevc", "vvc", "mjpeg", "mpjpeg", "m4v", "mpeg", "mpegvideo", "asf", "ogg", "ivf", "yuv4mpegpipe", "vc1", "obu",
    "nut", "mxf", "gif",
})
"""Demuxers (``container.format.name``, comma-separated parts) a file camera may be read with; it is refused with
any other (``tty`` for text, ``image2`` for a still image, playlists and session descriptions: ``hls``,
``sdp``...)."""

MAX_REDIRECTS = 5
"""Redirects of an HTTP camera followed at most before it opens."""

URL_REFUSALS = CAMERA_URL_REFUSALS
"""``vcascade_edge_camera_url_refusals_total{edge, reason}`` (declared with the edge's other families)."""

_lock = threading.Lock()
_allowed: tuple[list[str], list[ipaddress.IPv4Network | ipaddress.IPv6Network]] | None = None


def allow_hosts(entries: list[str] | None) -> None:
    """Set this process's camera host allow-list (``edges.<name>.camera_hosts``): host names and IP addresses
    or networks (CIDR); None: every host.

    Raises:
        ValueError: an entry is neither a host name nor an address or network.
    """
    global _allowed
    if entries is None:
        with _lock:
            _allowed = None
        return
    names, networks = [], []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        except ValueError:
            if not entry or any(c in entry for c in "/:@ "):
                raise ValueError(f"camera host {entry!r}: expected a host name, an address or a network") from None
            names.append(entry.lower().rstrip("."))
    with _lock:
        _allowed = (names, networks)


def scheme_of(url: str) -> str:
    """The URL's scheme in lower case, ``file`` for a path."""
    head, sep, _ = url.partition("://")
    return head.lower() if sep else "file"


def host_of(url: str) -> str:
    """The host FFmpeg connects to (``av_url_split``: the authority ends at the first ``/``, ``?`` or ``#``, the
    user information at its last ``@``), without port or brackets, lower case."""
    rest = url.partition("://")[2]
    for stop in "/?#":
        rest = rest.split(stop, 1)[0]
    host = rest.rpartition("@")[2]
    if host.startswith("["):
        return host[1:].split("]", 1)[0].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


def ffmpeg_options(url: str, edge: str, shown: str) -> dict[str, str]:
    """The FFmpeg options that hold ``url`` to its kind's protocols (and, for HTTP, no redirect of its own).

    Raises:
        CameraFault: ``protocol_not_allowed`` for a scheme no camera kind uses (counted).
    """
    scheme = scheme_of(url)
    if scheme not in PROTOCOLS:
        refuse(edge, "protocol_not_allowed",
               f"{shown}: the {scheme}:// protocol is not a camera kind ({', '.join(sorted(PROTOCOLS))})")
    options = {"protocol_whitelist": PROTOCOLS[scheme]}
    if scheme in ("http", "https"):
        options["max_redirects"] = "0"
    return options


def check_host(url: str, edge: str, shown: str) -> None:
    """Refuse a network camera on a host the allow-list does not hold (no allow-list: every host passes).

    Raises:
        CameraFault: ``host_not_allowed`` (counted). A name that does not resolve passes (FFmpeg reports it).
    """
    if not _host_allowed(host_of(url)):
        refuse(edge, "host_not_allowed", f"{shown}: host {host_of(url)} is not in edges.{edge}.camera_hosts")


def follow_redirects(url: str, timeout_s: float, edge: str, shown: str) -> str:
    """The address an HTTP camera's redirects lead to, each hop checked: to the same host, or to a host the
    allow-list holds (with no allow-list, only the same host). A server that cannot be asked (refused, TLS
    error) leaves ``url`` as it is: FFmpeg then opens it, and follows no redirect.

    Raises:
        CameraFault: ``redirect_refused`` (counted), or more than :data:`MAX_REDIRECTS` redirects.
    """
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        location = _redirect_of(current, timeout_s)
        if location is None:
            return current
        target = urljoin(current, location)
        if scheme_of(target) not in ("http", "https"):
            refuse(edge, "redirect_refused", f"{shown}: redirected to another protocol ({scheme_of(target)})")
        same = host_of(target) == host_of(url)
        if not same and (_allowed is None or not _host_allowed(host_of(target))):
            refuse(edge, "redirect_refused", f"{shown}: redirected to another host ({host_of(target)})")
        current = target
    refuse(edge, "redirect_refused", f"{shown}: more than {MAX_REDIRECTS} redirects")
    return current  # not reached


IMAGE_DEMUXERS = frozenset({"image2", "png_pipe", "jpeg_pipe", "bmp_pipe", "webp_pipe", "tiff_pipe", "gif_pipe"})
"""Demuxers a still image or an image sequence (a file name ending in an image suffix, see
:func:`vcascade.edge.capture.kinds.is_image`) may be read with."""


def check_format(format_name: str, edge: str, shown: str, image: bool = False) -> None:
    """Refuse a file that FFmpeg opened with a demuxer that is not a video one (an image one for ``image``).

    Raises:
        CameraFault: ``not_video`` (counted).
    """
    if not set(format_name.split(",")) & (VIDEO_DEMUXERS | IMAGE_DEMUXERS if image else VIDEO_DEMUXERS):
        refuse(edge, "not_video", f"{shown}: not a video file (FFmpeg reads it as {format_name!r})")


def refuse(edge: str, reason: str, detail: str) -> None:
    """Count a refusal and raise it.

    Raises:
        CameraFault: always, with ``reason`` and ``detail``.
    """
    URL_REFUSALS.labels(edge, reason).inc()
    raise CameraFault(reason, detail)


def _host_allowed(host: str) -> bool:
    allowed = _allowed
    if allowed is None:
        return True
    names, networks = allowed
    if host.rstrip(".") in names:
        return True
    try:
        addresses = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None)}
        except (socket.gaierror, UnicodeError):
            return True  # unresolvable: FFmpeg fails it as name_not_resolved
    return bool(addresses) and all(any(a in net for net in networks) for a in addresses)


def _redirect_of(url: str, timeout_s: float) -> str | None:
    """The ``Location`` of a redirect answer to a GET of ``url`` (headers only), else None."""
    scheme, rest = url.split("://", 1)
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    host, path = rest[:cut].rpartition("@")[2], rest[cut:].split("#", 1)[0]
    path = path if path.startswith("/") else "/" + path
    try:
        if scheme.lower() == "https":
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # as FFmpeg's default (tls_verify 0)
            conn = http.client.HTTPSConnection(host, timeout=timeout_s, context=context)
        else:
            conn = http.client.HTTPConnection(host, timeout=timeout_s)
        try:
            conn.request("GET", path or "/", headers={"User-Agent": "vcascade"})
            answer = conn.getresponse()
            location = answer.getheader("Location") if answer.status in (301, 302, 303, 307, 308) else None
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError):
        return None
    return location
