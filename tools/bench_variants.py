"""The edge variants and clips of ``tools/bench.py`` (issue 32): which detector settings the edge runs with and
which footage its cameras replay.

Variants (``--variant`` for the cascade and scaling sections, ``--live-variants`` for the live section):

* ``plain``: every frame detected by the fp32 model (the demo's edge);
* ``motion``: every camera's motion gate on with its default settings (``motion: {}``, as
  ``tools/bench_motion.py`` measures it): still frames are tracked with the carried detections, not detected;
* ``int8``: the detector's int8 copy (``detector.precision: int8``), made once per run into the run's scratch
  folder as ``vcascade quantize`` makes it (:func:`tools.bench_quantize.make_int8_copy`, without its agreement
  check), or an existing copy given with ``--int8-model``;
* ``motion+int8``: both.

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
from vcascade.edge.detection.model_file import int8_path, yolox_model_file

VARIANTS = ("plain", "motion", "int8", "motion+int8")
CLIPS = ("demo", "static")


@dataclass(frozen=True)
class EdgeVariant:
    """One way of running the edge's detection: ``motion`` gating on or off, the ``int8`` copy or the fp32 model."""

    name: str
    motion: bool
    int8: bool

    @classmethod
    def parse(cls, name: str) -> EdgeVariant:
        """``plain``, ``motion``, ``int8`` or ``motion+int8``.

        Raises:
            argparse.ArgumentTypeError: any other name.
        """
        if name not in VARIANTS:
            raise argparse.ArgumentTypeError(f"unknown edge variant {name!r}: expected one of {', '.join(VARIANTS)}")
        parts = set(name.split("+"))
        return cls(name, "motion" in parts, "int8" in parts)


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
        """Keys the variant sets on every camera: ``motion`` with its default settings, or none."""
        return {"motion": {}} if variant.motion else {}

    def detector_keys(self, variant: EdgeVariant) -> dict[str, Any]:
        """Keys the variant sets on the edge's detector: for int8, ``precision: int8`` and a ``path`` to a link to
        the fp32 model in the scratch folder, beside which the int8 copy lies (made on first use)."""
        if not variant.int8:
            return {}
        if self._fp32_link is None:
            self._fp32_link = self._int8_beside_fp32()
        return {"path": str(self._fp32_link), "precision": "int8"}

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
                        help=f"edge variant of the cascade and scaling sections ({', '.join(VARIANTS)})")
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
