#!/usr/bin/env bash
# Events demo: configs/traffic.yaml (bikes.mp4, a counting line across the road, a zone with dwell, an MQTT sink)
# with a local Mosquitto. Starts the broker on a free loopback port, subscribes to every camera's events, runs
# the deployment, then prints the counts per line or zone, direction and class received over MQTT next to the
# counts recomputed offline from the JSONL track lines of the same run, and the number of events received.
# Exit 0 when they agree.
#
#   scripts/demo_events.sh [--frames N] [--model-dir DIR] [--out DIR]
#
# DIR holds yolox_nano.onnx and the PP-OCRv6 text models (det and rec; default: $VCASCADE_TEST_MODELS, else models/).
# Needs the Debian package `mosquitto` (scripts/test.sh installs it) and vcascade installed in .venv
# (or VCASCADE_PYTHON pointing at a Python that has it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${VCASCADE_PYTHON:-.venv/bin/python}"
FRAMES=250
MODEL_DIR="${VCASCADE_TEST_MODELS:-models}"
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --frames) FRAMES="$2"; shift 2 ;;
    --model-dir) MODEL_DIR="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "demo_events.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
MOSQUITTO="$(command -v mosquitto || echo /usr/sbin/mosquitto)"
[ -x "$MOSQUITTO" ] || { echo "demo_events.sh: mosquitto not found (apt-get install mosquitto)" >&2; exit 2; }
OUT="${OUT:-$(mktemp -d /tmp/vcascade-events.XXXXXX)}"
mkdir -p "$OUT"
rm -f "$OUT/mqtt.jsonl" "$OUT/subscribed"

free_port() { "$PY" -c 'from vcascade.core.transport.ports import free_port; print(free_port())'; }
MQTT_PORT="$(free_port)"
printf 'listener %s 127.0.0.1\nallow_anonymous true\nuser %s\nlog_dest file %s\n' \
  "$MQTT_PORT" "$(id -un)" "$OUT/mosquitto.log" > "$OUT/mosquitto.conf"

PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
"$MOSQUITTO" -c "$OUT/mosquitto.conf" 2>>"$OUT/mosquitto.log" & PIDS+=($!)
"$PY" -m tools.demo_events subscribe --port "$MQTT_PORT" --out "$OUT/mqtt.jsonl" --ready "$OUT/subscribed" & PIDS+=($!)
for _ in $(seq 200); do [ -e "$OUT/subscribed" ] && break; sleep 0.1; done  # the subscriber's SUBACK
[ -e "$OUT/subscribed" ] || { echo "demo_events.sh: no subscription to Mosquitto on port $MQTT_PORT" >&2; exit 1; }
echo "demo_events.sh: Mosquitto on 127.0.0.1:$MQTT_PORT, subscribed; running configs/traffic.yaml ($FRAMES frames), output in $OUT" >&2

export VCASCADE_OUT="$OUT" VCASCADE_MAX_FRAMES="$FRAMES" VCASCADE_MQTT_PORT="$MQTT_PORT"
export VCASCADE_EDGE_METRICS_PORT="$(free_port)" VCASCADE_FRONTEND_PORT="$(free_port)"
export VCASCADE_BACKEND_PORT="$(free_port)" VCASCADE_BROKER_METRICS_PORT="$(free_port)"
export VCASCADE_WORKER_METRICS_PORT="$(free_port)"
"$PY" -m vcascade run configs/traffic.yaml --model-dir "$MODEL_DIR" > "$OUT/run.log" 2>&1 \
  || { echo "demo_events.sh: vcascade run failed; its output:" >&2; tail -40 "$OUT/run.log" >&2; exit 1; }
"$PY" -m tools.demo_events report --config configs/traffic.yaml --jsonl "$OUT/results.jsonl" --mqtt "$OUT/mqtt.jsonl"
