"""Regression: usearch 2.26 (its bundled numkong kernels) made the worker segfault on start-up, because the
worker imports ONNX Runtime after the identity index (center/heads -> center/identity/index.py -> usearch).
The index now uses faiss; this test fails on any index library that crashes that way."""

from __future__ import annotations

import subprocess
import sys


def test_onnxruntime_imports_after_the_identity_index():
    code = "import vcascade.center.identity.index, onnxruntime, torch; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])
