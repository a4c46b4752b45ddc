#!/usr/bin/env bash
# Run the demo (after its own set-up: ./scripts/demo.sh installs .venv), then ask its history for an identity seen
# on both demo cameras and print that identity's timeline across cameras with the paths of its evidence images
# (docs/HISTORY.md). Arguments go to `vcascade run`, e.g. --model-dir DIR. VCASCADE_DEMO_FILE names another
# deployment file to run and search (the test's short form: tests/e2e/test_demo_search.py).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VCASCADE_VENV:-.venv}"
FILE="${VCASCADE_DEMO_FILE:-configs/demo.yaml}"
if [ ! -x "$VENV/bin/vcascade" ]; then
    echo "demo_search.sh: no $VENV/bin/vcascade: run ./scripts/demo.sh first (it installs vcascade)" >&2
    exit 2
fi
"$VENV/bin/vcascade" run "$FILE" "$@"
identity="$("$VENV/bin/vcascade" search "$FILE" --limit 100000 --json | "$VENV/bin/python" -c '
import json, sys
from vcascade.core.config import load_config
demo_cameras = set(load_config(sys.argv[1]).cameras)  # the history may hold other deployments cameras too
cameras = {}
for row in json.load(sys.stdin):
    if row["identity"] is not None and row["identity"] >= 0 and row["camera"] in demo_cameras:
        cameras.setdefault(row["identity"], set()).add(row["camera"])
both = sorted(i for i, seen in cameras.items() if len(seen) >= 2)
print(both[0] if both else "")
' "$FILE")"
if [ -z "$identity" ]; then
    echo "demo_search.sh: no identity was seen on both cameras in this history" >&2
    exit 1
fi
echo "demo_search.sh: identity $identity was seen on both cameras; its timeline:" >&2
COLUMNS="${COLUMNS:-200}" "$VENV/bin/vcascade" search "$FILE" --identity "$identity"
