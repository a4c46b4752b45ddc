"""The edge's registry of detector families: each family's config class (declared in the schema,
:data:`vcascade.core.schema.detector.DETECTOR_CONFIGS`) paired once with the detector that runs it.

A family's name is written once, in its config class's ``type`` literal; this registry, the schema's union and
the error messages all read it from there (:func:`vcascade.core.schema.base.family_tag`). Adding a family: its
config class in :mod:`vcascade.core.schema.detector` (and in ``DETECTOR_CONFIGS``), its detector module here,
and one :class:`DetectorFamily` line in :data:`DETECTOR_FAMILIES`. How its model file is found follows from its
config's keys (:func:`vcascade.edge.detection.model_file.ensure_detector_model`).
"""

from __future__ import annotations

from typing import NamedTuple

from vcascade.core.schema.base import family_tag
from vcascade.core.schema.detector import (
    DETECTOR_CONFIGS,
    DetectorConfigBase,
    Yolov5DetectorConfig,
    Yolov8DetectorConfig,
    YoloxDetectorConfig,
)
from vcascade.edge.detection.base import OnnxDetector
from vcascade.edge.detection.yolov5 import Yolov5Detector
from vcascade.edge.detection.yolov8 import Yolov8Detector
from vcascade.edge.detection.yolox import YoloxDetector


class DetectorFamily(NamedTuple):
    """One detector family: the config class that describes it and the detector class that runs it."""

    config: type[DetectorConfigBase]
    """Its config class (a member of :data:`vcascade.core.schema.detector.DETECTOR_CONFIGS`)."""
    detector: type[OnnxDetector]
    """Its detector, built by :func:`vcascade.edge.detection.build_detector`."""

    @property
    def type(self) -> str:
        """The family's name: its config's ``type`` (:func:`vcascade.core.schema.base.family_tag`)."""
        return family_tag(self.config)


def registry(*families: DetectorFamily) -> dict[str, DetectorFamily]:
    """The families by ``type``, checked against the schema's registry.

    Raises:
        ValueError: a config class of :data:`DETECTOR_CONFIGS` has no detector here, or one here is not there.
    """
    by_type = {family.type: family for family in families}
    declared = {family_tag(config) for config in DETECTOR_CONFIGS}
    if set(by_type) != declared or len(by_type) != len(families):
        raise ValueError(f"detector families {sorted(by_type)} differ from the schema's {sorted(declared)}")
    return by_type


DETECTOR_FAMILIES: dict[str, DetectorFamily] = registry(
    DetectorFamily(YoloxDetectorConfig, YoloxDetector),
    DetectorFamily(Yolov5DetectorConfig, Yolov5Detector),
    DetectorFamily(Yolov8DetectorConfig, Yolov8Detector),
)
"""Every detector family, by its config's ``type``."""
