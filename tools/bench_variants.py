"""The edge variants and clips of ``tools/bench.py`` (issue 32): which detector settings the edge runs with and
which footage its cameras replay.

Variants (``--variant`` for the cascade and scaling sections, ``--live-variants`` for the live section):

* ``plain``: every frame detected by the fp32 model (the demo's edge);
* ``motion``: every camera's motion gate on with its default settings (``motion: {}``, as
  ``tools/bench_motion.py`` measures it): still frames are tracked with the carried detections, not detected;
* ``int8``: the detector's int8 copy (``detector.precision: int8``), made once per run into the run's scratch
  folder as ``vcascade quantize`` makes it (:func:`tools.bench_quantize.make_int8_copy`, without its agreement
  check), or an existing copy given with ``--int8-model``;
* ``motion+int8``: both;
* ``fpsR`` (e.g. ``fps12.5``): every camera's ``detect_fps: R``, so the detector sees at most R frames per second
  of stream time and the tracks carry over the frames between (DeepStream nvinfer's ``interval``);
* ``sizeS`` (e.g. ``size320``): the detector's ``input_size: S``, on a copy of the fp32 model at that input
  size made once per run (:func:`vcascade.edge.detection.input_size.yolox_at_input_size`).

Parts combine with ``+`` (``fps12.5+size320``, ``motion+int8``); ``int8`` does not combine with ``sizeS`` (the
copy is made at the model's own size).

Clips (``--clip``, ``--live-clips``): ``demo`` (bikes.mp4, the demo's camera: something moves in nearly every
frame) and ``static`` (:func:`tools.bench_motion.make_static_clip`: ``--static-segments`` seconds of the same
footage, each after ``--static-still-s`` s of its first frame held still with sensor noise), made once per run.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.bench_motion import VIDEO, make_static_clip
from tools.bench_quantize import make_int8_copy
from vcascade.core.config import YoloxDetectorConfig
from vcascade.core.runtime.resources import resolve
from vcascade.edge.detection.input_size import yolox_at_input_size
from vcascade.edge.detection.model_file import int8_path, yolox_model_file

VARIANTS = ("plain", "motion", "int8", "motion+int8", "fpsR", "sizeS")
"""The variant names and parts (``fpsR`` and ``sizeS`` stand for any rate and size; module docstring)."""
CLIPS = ("demo", "static")


@dataclass(frozen=True)
class EdgeVariant:
    """One way of running the edge's detection: ``motion`` gating on or off, the ``int8`` copy or the fp32 model,
    a ``detect_fps`` on every camera (None: every frame), and an ``input_size`` for the detector (None: the
    model's own, 416)."""

    name: str
    motion: bool
    int8: bool
    detect_fps: float | None = None
    input_size: int | None = None

    @classmethod
    def parse(cls, name: str) -> EdgeVariant:
        """``plain``, or ``+``-joined parts among ``motion``, ``int8``, ``fpsR`` (R > 0 frames per second) and
        ``sizeS`` (S a multiple of 32).

        Raises:
            argparse.ArgumentTypeError: an unknown part, a bad rate or size, or ``int8`` with ``sizeS``.
        """
        if name == "plain":
            return cls(name, False, False)
        fields: dict[str, Any] = {"motion": False, "int8": False, "detect_fps": None, "input_size": None}
        for part in name.split("+"):
            if part in ("motion", "int8"):
                fields[part] = True
            elif part.startswith("fps") and _number(part[3:], float) > 0:
                fields["detect_fps"] = _number(part[3:], float)
            elif part.startswith("size") and _number(part[4:], int) > 0 and _number(part[4:], int) % 32 == 0:
                fields["input_size"] = _number(part[4:], int)
            else:
                raise argparse.ArgumentTypeError(
                    f"unknown edge variant part {part!r} in {name!r}: expected plain or parts among motion, int8, "
                    "fpsR (R > 0) and sizeS (S a multiple of 32), joined by +")  # fmt: skip
        if fields["int8"] and fields["input_size"] is not None:
            raise argparse.ArgumentTypeError(f"edge variant {name!r}: int8 does not combine with sizeS")
        return cls(name, **fields)


def _number(text: str, kind: type) -> float:
    """``text`` as ``kind`` (int or float), or -1 where it is not one."""
    try:
        return kind(text)
    except ValueError:
        return -1


def variant_list(text: str) -> list[EdgeVariant]:
    """``--live-variants``: comma-separated variant names (argparse type)."""
    return [EdgeVariant.parse(name.strip()) for name in text.split(",") if name.strip()]


def clip_list(text: str) -> list[str]:
    """``--live-clips``: comma-separated clip names (argparse type).

    Raises:
        argparse.ArgumentTypeError: a name other than ``demo`` and ``static``.
    """
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in CLIPS:
            raise argparse.ArgumentTypeError(f"unknown clip {name!r}: expected one of {', '.join(CLIPS)}")
    return names


def positive_int(text: str) -> int:
    """An integer >= 1 (argparse type).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


class Inputs:
    """The footage and detector files of one bench run, made on first use into ``folder`` (which the caller
    removes): clip URLs by name and the deployment keys of each variant.

    Args:
        folder: scratch folder of the run.
        args: the bench's options (``model_dir``, ``int8_model``, ``int8_calibration_frames``,
            ``static_segments``, ``static_still_s``).
    """

    def __init__(self, folder: Path, args: argparse.Namespace) -> None:
        self.folder, self.args = folder, args
        self._static: Path | None = None
        self._fp32_link: Path | None = None
        self._sized: dict[int, Path] = {}
        self.made: dict[str, Any] = {}  # what was made and how long it took, for the report

    def clip(self, name: str) -> str:
        """The camera URL of clip ``name`` (``demo`` or ``static``; the static clip is made on first use)."""
        if name == "demo":
            return VIDEO
        if self._static is None:
            self._static = make_static_clip(resolve(VIDEO), self.folder / "static.mp4", self.args.static_segments,
                                            self.args.static_still_s)  # fmt: skip
            self.made["static_clip"] = {"segments": self.args.static_segments, "still_s": self.args.static_still_s}
        return str(self._static)

    def camera_keys(self, variant: EdgeVariant) -> dict[str, Any]:
        """Keys the variant sets on every camera: ``motion`` with its default settings, ``detect_fps``."""
        keys: dict[str, Any] = {"motion": {}} if variant.motion else {}
        if variant.detect_fps is not None:
            keys["detect_fps"] = variant.detect_fps
        return keys

    def detector_keys(self, variant: EdgeVariant) -> dict[str, Any]:
        """Keys the variant sets on the edge's detector: for int8, ``precision: int8`` and a ``path`` to a link to
        the fp32 model in the scratch folder, beside which the int8 copy lies (made on first use); for sizeS,
        ``input_size: S`` and a ``path`` to the model's copy at that size (made on first use)."""
        if variant.input_size is not None:
            return {"path": str(self._at_size(variant.input_size)), "input_size": variant.input_size}
        if not variant.int8:
            return {}
        if self._fp32_link is None:
            self._fp32_link = self._int8_beside_fp32()
        return {"path": str(self._fp32_link), "precision": "int8"}

    def _at_size(self, size: int) -> Path:
        if size not in self._sized:
            fp32 = yolox_model_file(YoloxDetectorConfig(), self.args.model_dir)
            self._sized[size] = yolox_at_input_size(fp32, self.folder / f"{fp32.stem}.{size}.onnx", size)
            self.made.setdefault("input_sizes", []).append(size)
        return self._sized[size]

    def _int8_beside_fp32(self) -> Path:
        fp32 = yolox_model_file(YoloxDetectorConfig(), self.args.model_dir)
        folder = self.folder / "detector"
        folder.mkdir(exist_ok=True)
        link = folder / fp32.name
        os.symlink(fp32.resolve(), link)
        copy = int8_path(link)
        if self.args.int8_model:
            os.symlink(Path(self.args.int8_model).resolve(), copy)
            self.made["int8"] = {"given": str(self.args.int8_model)}
        else:
            frames = self.args.int8_calibration_frames
            make_int8_copy(fp32, copy, resolve(VIDEO), frames)
            self.made["int8"] = {"calibration_frames": frames}
        return link


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the variants and clips (module docstring)."""
    parser.add_argument("--variant", type=EdgeVariant.parse, default=EdgeVariant.parse("plain"),
                        help=f"edge variant of the cascade and scaling sections ({', '.join(VARIANTS)}; "
                             "parts joined by +)")
    parser.add_argument("--clip", choices=CLIPS, default="demo",
                        help="footage of the baseline, cascade and scaling sections (calibration: always demo)")
    parser.add_argument("--live-variants", type=variant_list, default=variant_list("plain"),
                        help="comma-separated edge variants the live section searches, each on every live clip")
    parser.add_argument("--live-clips", type=clip_list, default=clip_list("demo"),
                        help="comma-separated clips of the live section (demo, static)")
    parser.add_argument("--int8-model", type=Path, default=None,
                        help="an existing int8 copy of the detector (default: made for the run)")
    parser.add_argument("--int8-calibration-frames", type=positive_int, default=32,
                        help="frames of bikes.mp4 the int8 copy is calibrated on when made for the run")
    parser.add_argument("--static-segments", type=positive_int, default=10,
                        help="static clip: seconds of footage, each after a held stretch (1..10)")
    parser.add_argument("--static-still-s", type=float, default=4.0, help="static clip: seconds held per segment")
