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
# The suite runs in parallel worker processes (pytest-xdist; every test has its own free ports and tmp folders),
# VCASCADE_TEST_WORKERS of them (default 3: most tests wait on real processes and sockets, so 3 beat 2 on a 2-core
# machine; docs/DESIGN.md "Testing"), then the tests marked `alone` one by one with nothing beside them. Arguments
# go to both runs; with your own `-m` the suite runs once, in parallel, as you select.
WORKERS="${VCASCADE_TEST_WORKERS:-3}"
for arg in "$@"; do
  case "$arg" in -m|-m*) exec "$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadgroup "$@" ;; esac
done
status=0
"$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadgroup -m "not alone" "$@" || status=$?
# The alone phase collects only the files that hold `alone` tests unless you name paths yourself: collecting all
# ~1,800 tests again for two of them costs 15-30 s of imports.
where=()
for arg in "$@"; do [ -e "${arg%%::*}" ] && where=(none); done
[ ${#where[@]} -eq 0 ] && mapfile -t where < <(grep -rl --include='test_*.py' 'mark\.alone' tests)
[ "${where[0]:-}" = none ] && where=()
alone=0
"$VENV/bin/python" -m pytest -p no:xdist -m alone "$@" "${where[@]}" || alone=$?
[ "$alone" -eq 5 ] && alone=0  # 5: no test selected (a folder without `alone` tests)
[ "$status" -eq 0 ] && status=$alone
exit "$status"
