#!/usr/bin/env bash
# Install vcascade into .venv and run the demo: two cameras on real street footage, YOLOX-nano at the edge,
# at the center the MobileNetV2 embedder and the PP-OCR text recognizer, each split into 2 pipeline stages.
# It installs every role (`.[all]`: docs/DEPLOY.md, "Installs per role").
# Arguments go to `vcascade run`, e.g. --model-dir DIR (a folder holding yolox_nano.onnx, PP-OCRv6_det_small.onnx
# and PP-OCRv6_rec_small.onnx; a model missing there is downloaded once and verified).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VCASCADE_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
echo "demo.sh: installing vcascade into $VENV (a few minutes the first time)" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check "torch==2.13.0" -e ".[all]"
status=0
"$VENV/bin/vcascade" run configs/demo.yaml "$@" || status=$?
results="${VCASCADE_OUT:-out/demo}/results.jsonl"  # configs/demo.yaml's jsonl sink
if [ "$status" -eq 0 ] && [ -s "$results" ]; then
    echo "demo.sh: results in $results (one JSON line per ROI, plus tracked and camera_state lines: docs/USAGE.md, \"A result line\")" >&2
fi
exit "$status"
