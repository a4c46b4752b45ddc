#!/usr/bin/env python3
"""Service times per micro-batch size of a real recognizer, for the ``calibrated`` stage runtime.

    python -m tools.scale_calibrate [--recognizer mobilenetv2-embedder] [--sizes 1 2 4 8 16] [--runs 5]
                                      [--threads 1] [--out configs/scale/service_times.json]

Loads the recognizer of configs/demo.yaml exactly as a worker does (``load_recognizer_stages`` on one ``cpu``
device, ``intra_op_threads`` = ``--threads``), warms it up, then times ``--runs`` micro-batches of each size
through all its stages and keeps the median, ms. The JSON it writes is what ``recognizers.<name>.service_ms``
of a ``calibrated`` recognizer takes (``tools/bench_scale.py`` reads it), with the host, load and model it was
measured on. A GPU run of ``tools/gpu_center.py`` gives the same table for a GPU (docs/DEPLOY.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.yaml"
OUT = REPO / "configs" / "scale" / "service_times.json"


def measure(recognizer: str, sizes: list[int], runs: int, threads: int, model_dir: str | None) -> dict[int, float]:
    """Median ms of one micro-batch through all stages of ``recognizer``, per size in ``sizes``."""
    from vcascade.center.stages.runtimes import default_sample, load_recognizer_stages, stage_input, warm_up
    from vcascade.core.config import load_config

    rec = load_config(DEMO).recognizers[recognizer]
    rec = rec.model_copy(update={"split_points": [], "intra_op_threads": threads})
    stages = load_recognizer_stages(rec, ["cpu"], model_dir=model_dir)
    warm_up(stages, rec, "cpu", max(sizes))
    table = {}
    for size in sizes:
        x = (stage_input(rec, default_sample(rec, size), "cpu"),)
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            activations = x
            for stage in stages:
                activations = stage(activations)
            samples.append((time.perf_counter() - start) * 1e3)
        table[size] = round(statistics.median(samples), 2)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recognizer", default="mobilenetv2-embedder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--model-dir")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    table = measure(args.recognizer, args.sizes, args.runs, args.threads, args.model_dir)
    doc = {
        "service_ms": {str(size): ms for size, ms in table.items()},
        "source": f"{args.recognizer} (configs/demo.yaml), cpu, {args.threads} intra-op thread(s), median of "
                  f"{args.runs}, {platform.node()} {time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.1f}",
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
