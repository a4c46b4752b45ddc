"""Arguments shared by several commands: the model folder and the log line format."""

from __future__ import annotations

import argparse
import os

from vcascade.core.telemetry.logs import FORMAT_ENV, LOG_FORMATS
from vcascade.core.runtime.models import MODEL_DIR_ENV


def add_model_dir(parser: argparse.ArgumentParser) -> None:
    """``--model-dir DIR``: the folder for every model file the deployment names (default ``$VCASCADE_MODEL_DIR``);
    the search order and downloads are :mod:`vcascade.core.runtime.models`'."""
    parser.add_argument(
        "--model-dir",
        default=os.environ.get(MODEL_DIR_ENV),
        help="folder for every model file the deployment names (the detector's and the recognizers', e.g. PP-OCR), "
        f"searched before ${MODEL_DIR_ENV} and ~/.cache/vcascade/models; a missing model is downloaded there "
        f"(into the cache when the folder is not writable). Without it, ${MODEL_DIR_ENV} takes its place",
    )


def add_log_format(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json`` (default ``$VCASCADE_LOG_FORMAT``, else text)."""
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=os.environ.get(FORMAT_ENV) or "text",
                        help="log lines as text or one JSON object per line (default: $VCASCADE_LOG_FORMAT, text)")
