#!/usr/bin/env python3
"""A real RTSP server for tests and local trials: GStreamer's gst-rtsp-server replaying an H.264 MP4.

Runs under the system Python with Debian's GObject bindings (packages python3-gi, gir1.2-gst-rtsp-server-1.0,
gstreamer1.0-plugins-good, gstreamer1.0-plugins-bad), not inside the project's environment:

    /usr/bin/python3 tools/rtsp_server.py --port 8554 --path /cam VIDEO.mp4

The stream is the file's own H.264 packets (no re-encoding), with the file's timestamps, served to every
client from the start. Prints ``READY rtsp://127.0.0.1:PORT/PATH`` on stdout once listening.

With ``--user NAME --password SECRET`` the server asks for HTTP Basic authentication (RFC 7617 over RTSP): a
client without those credentials gets ``401 Unauthorized``. A path other than ``--path`` gets ``404 Not Found``.

The tests (tests/edge/conftest.py, ``RtspServer``) inject faults with signals: SIGKILL (server crash),
SIGSTOP / SIGCONT (frozen server: connections stay open, no data), and a restart on the same port.
"""

import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def require_basic_auth(server, factory, user: str, password: str) -> None:
    """Only ``user``/``password`` (Basic) may see and play the stream; others get 401."""
    auth = GstRtspServer.RTSPAuth()
    token = GstRtspServer.RTSPToken()
    token.set_string(GstRtspServer.RTSP_TOKEN_MEDIA_FACTORY_ROLE, "viewer")
    auth.add_basic(GstRtspServer.RTSPAuth.make_basic(user, password), token)
    server.set_auth(auth)
    permissions = GstRtspServer.RTSPPermissions()
    permissions.add_role_from_structure(Gst.Structure.new_empty("viewer"))
    permissions.add_permission_for_role("viewer", GstRtspServer.RTSP_PERM_MEDIA_FACTORY_ACCESS, True)
    permissions.add_permission_for_role("viewer", GstRtspServer.RTSP_PERM_MEDIA_FACTORY_CONSTRUCT, True)
    factory.set_permissions(permissions)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("video")
    parser.add_argument("--port", type=int, default=8554)
    parser.add_argument("--path", default="/cam")
    parser.add_argument("--user", help="require Basic authentication with this user name (and --password)")
    parser.add_argument("--password", default="")
    args = parser.parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    factory = GstRtspServer.RTSPMediaFactory()
    location = args.video.replace('"', '\\"')
    factory.set_launch(f'( filesrc location="{location}" ! qtdemux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=1 )')
    factory.set_shared(False)
    if args.user:
        require_basic_auth(server, factory, args.user, args.password)
    server.get_mount_points().add_factory(args.path, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{args.port}", file=sys.stderr)
        return 1
    print(f"READY rtsp://127.0.0.1:{args.port}{args.path}", flush=True)
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
