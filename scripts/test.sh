#!/usr/bin/env bash
# Install everything the tests need (Debian packages for the real servers the tests start on free ports: GStreamer's
# RTSP server, Prometheus, Redis, Mosquitto, and the headless Chromium the live view's browser test drives; the
# project with every role and its test extras into .venv: `.[test]` holds `.[all]`) and run the whole test suite.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
APT_PACKAGES="python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-good gstreamer1.0-plugins-bad ffmpeg gstreamer1.0-libav gstreamer1.0-plugins-ugly prometheus chromium chromium-driver mosquitto redis-server openssl postgresql fonts-dejavu-core"
# dpkg -s fails when any one of the packages is missing
if ! dpkg -s $APT_PACKAGES >/dev/null 2>&1 \
   || ! /usr/bin/python3 -c 'import gi; gi.require_version("GstRtspServer", "1.0")' 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $APT_PACKAGES >/dev/null
fi
VENV="${VCASCADE_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "torch==2.13.0" -e ".[test]"
exec "$VENV/bin/python" -m pytest "$@"
