"""Make sure the edge detector model (yolox_nano.onnx) is on disk; print its path.

Usage: ``python scripts/fetch_models.py [--model-dir DIR] [--url URL]``

Searches ``--model-dir``, ``$VCASCADE_MODEL_DIR`` and the user cache (see :mod:`vcascade.models`); when the
file is in none of them, downloads it (from ``--url``, default the official YOLOX release asset) into
``--model-dir`` if writable, else the user cache, and verifies it by loading it. Exit status 0 and the path on
stdout on success; 1 and the reason with what to do on stderr when the model is unavailable.
"""

from __future__ import annotations

import argparse
import logging
import sys

from vcascade.config import DetectorConfig
from vcascade.models import ModelUnavailable, ensure_detector_model


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="folder searched first, and where a download goes if writable")
    parser.add_argument("--url", help="download URL (default: the official YOLOX-Nano release asset)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    config = DetectorConfig(url=args.url) if args.url else DetectorConfig()
    try:
        path = ensure_detector_model(config, args.model_dir)
    except ModelUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
