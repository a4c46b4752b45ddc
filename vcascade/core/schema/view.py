"""A camera's view of its source: crop, mirror, rescale and re-encode each decoded frame before detection."""

from __future__ import annotations

from pydantic import Field, model_validator

from vcascade.core.schema.base import ConfigModel, key_problem


class CameraViewConfig(ConfigModel):
    """Transforms applied, in this order, to every frame a camera decodes: crop, mirror, rescale, JPEG re-encode.

    The operator's use: keep the part of a wide view that matters, undo a camera mounted mirrored, lower the
    resolution of a stream that is sharper than detection needs (DeepStream's ``nvvideoconvert`` ``src-crop``
    and ``flip-method`` do the same). The demo and ``tools/bench_reid.py`` use it to show one clip as a second,
    different camera (edge/capture/views.py).
    """

    crop_xyxy_frac: tuple[float, float, float, float] | None = Field(
        None,
        description="Keep only this box of the source frame: [x0, y0, x1, y1] as fractions of its width and "
        "height, 0 <= x0 < x1 <= 1 (None: the whole frame).",
    )
    mirror: bool = Field(False, description="Flip the (cropped) frame left to right.")
    scale: float = Field(1.0, gt=0.05, le=4.0, description="Resize factor after cropping (area interpolation down, "
                         "linear up); 1: unchanged.")
    jpeg_quality: int | None = Field(
        None, ge=1, le=100,
        description="Re-encode each frame as JPEG of this quality and decode it again (another camera's "
        "compression artefacts; costs ~2 ms per 640x480 frame). None: no re-encoding.",
    )

    @model_validator(mode="after")
    def _crop_inside_frame(self) -> CameraViewConfig:
        box = self.crop_xyxy_frac
        if box is not None and not (0 <= box[0] < box[2] <= 1 and 0 <= box[1] < box[3] <= 1):
            raise key_problem("crop_xyxy_frac", list(box), "expected 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1")
        return self
