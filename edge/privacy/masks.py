"""Privacy masks: a camera's polygons filled in every decoded frame, on the reader's thread, before the frame
reaches its slot, so the detector, the tracker, the crops, the previews and the snapshots never see them.

A mask is rasterised once per frame size with OpenCV's ``fillPoly`` (which fills the polygon's boundary pixels
too) into the flat indices of the pixels it covers, and applied per frame by one fancy-index assignment (0.23 ms
for a fifth of a 640x272 frame, against 1.4 ms for ``np.copyto`` with a ``where`` mask); a new frame size (a
camera reconfigured) rasterises again.
"""

from __future__ import annotations

import cv2
import numpy as np

from vcascade.core.config import PrivacyConfig
from vcascade.core.schema.privacy import mask_outside, outside_reason


class MaskOutsideFrame(ValueError):
    """A pixel mask has a corner outside the camera's frames (``frame_size_px`` was not given, so ``check`` could
    not tell). Recovery: fix the mask's corners, or use ``coordinates: normalized``; the camera's state says which
    mask."""


class FrameMasks:
    """The privacy masks of one camera.

    Args:
        privacy: the camera's ``privacy`` settings (its ``masks`` may be empty: :meth:`apply` then returns the
            frame untouched).
    """

    def __init__(self, privacy: PrivacyConfig) -> None:
        self.privacy = privacy
        self.fill = np.array(privacy.fill_bgr, np.uint8)
        self._size: tuple[int, int] | None = None
        self._mask: np.ndarray | None = None  # (H, W) bool
        self._flat: np.ndarray | None = None  # (k,) int64: indices of the masked pixels in the flattened frame

    def __bool__(self) -> bool:
        return bool(self.privacy.masks)

    def raster(self, height_px: int, width_px: int) -> np.ndarray:
        """(H, W) bool: the pixels the masks cover in a frame of this size.

        Raises:
            MaskOutsideFrame: a pixel mask has a corner outside ``[0, width] x [0, height]``.
        """
        if self._size != (height_px, width_px):
            self._mask = self._rasterise(height_px, width_px)
            self._flat = np.flatnonzero(self._mask)
            self._size = (height_px, width_px)
        return self._mask

    def apply(self, image: np.ndarray) -> np.ndarray:
        """Fill the masked pixels of a frame.

        Args:
            image: (H, W, 3) uint8 BGR; filled in place when writeable and C-contiguous, else copied first.

        Returns:
            The filled (H, W, 3) uint8 BGR frame, C-contiguous (``image`` itself when it could be filled in place).

        Raises:
            MaskOutsideFrame: see :meth:`raster`.
        """
        if not self.privacy.masks:
            return image
        self.raster(image.shape[0], image.shape[1])
        out = image if image.flags.writeable and image.flags.c_contiguous else np.array(image, order="C")
        out.reshape(-1, 3)[self._flat] = self.fill
        return out

    def _rasterise(self, height_px: int, width_px: int) -> np.ndarray:
        size = (width_px, height_px)
        raster = np.zeros((height_px, width_px), np.uint8)
        scale = np.array(size, np.float64) if self.privacy.coordinates == "normalized" else np.ones(2)
        for mask in self.privacy.masks:
            corner = mask_outside(mask.polygon, self.privacy.coordinates, size)
            if corner is not None:
                raise MaskOutsideFrame(
                    f"privacy.masks {mask.name!r}: corner {list(corner)} "
                    f"{outside_reason(self.privacy.coordinates, size)}"
                )
            corners = np.round(np.asarray(mask.polygon, np.float64) * scale).astype(np.int32)
            cv2.fillPoly(raster, [corners], 1)
        return raster.astype(bool)
