"""The edge's object detector: one config class per detector family, picked by the ``type`` key.

``yolox`` (the default) finds its model by file name and downloads the official YOLOX-Nano release when it is
missing; ``yolov5`` and ``yolov8`` (also YOLO11) are user models given by a local ``path``, never downloaded.
A family is registered here once, in :data:`DETECTOR_CONFIGS` (its name is written only in its class's ``type``
literal), and once at the edge with its detector (:mod:`vcascade.edge.detection.registry`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from vcascade.core.schema.base import ConfigModel, family_tag, family_union, key_problem, spinning_field

YOLOX_NANO_URL = "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0/yolox_nano.onnx"
"""Official YOLOX-Nano ONNX release asset (Megvii-BaseDetection/YOLOX, release 0.1.1rc0, Apache-2.0)."""


class DetectorConfigBase(ConfigModel):
    """Settings every detector family shares: input size, thresholds, class names and filter, ONNX Runtime runs."""

    type: str = Field(description="Detector family (registry key).")
    input_size: int = Field(
        416, ge=32, le=4096, multiple_of=32,
        description="Square network input side, px. A YOLOX file exported at another size is copied at this size "
        "once at start-up (docs/DETECTORS.md, \"A smaller input\").",
    )
    score_threshold: float = Field(0.3, gt=0, le=1, description="Minimum objectness x class score, 0..1.")
    nms_iou: float = Field(0.45, gt=0, le=1, description="IoU above which a lower-scored box of the same class is removed.")
    classes: list[str] | None = Field(None, min_length=1, description="Class names to keep (None: all classes).")
    instances: int | None = Field(
        None, ge=1, le=256,
        description="Detector runs at once on different frames (one shared session; like Triton's instance count); "
        "tracking stays in frame order (None: `cpus // intra_op_threads`, so one per core given).",
    )
    intra_op_threads: int | None = Field(
        None, ge=1, le=256, description="ONNX Runtime intra-op threads of each run (None: `cpus // instances`, at least 1)."
    )
    allow_spinning: bool = spinning_field()
    class_names: list[str] | str | None = Field(
        None, description="The model's class names in output order: a list, or a text file with one a line (None: the 80 COCO names)."
    )
    max_batch: int = Field(8, ge=1, le=256, description="Frames per session run at most when the model's batch is dynamic.")


class YoloxDetectorConfig(DetectorConfigBase):
    """YOLOX (the default detector): a model file name found on disk, downloaded from ``url`` when missing."""

    type: Literal["yolox"] = Field("yolox", description="Detector family (registry key); the default.")
    model: str = Field("yolox_nano.onnx", description="File name in the model directory, or an absolute path.")
    url: str = Field(YOLOX_NANO_URL, description="Where to download the model when it is not in the model directory.")
    path: str | None = Field(
        None,
        description="Local ONNX file of a user YOLOX model, used as is and never downloaded (instead of `model`/`url`).",
    )
    precision: Literal["fp32", "int8"] = Field(
        "fp32",
        description="int8: run the model's int8 copy `<name>.int8.onnx` beside it, made once by `vcascade quantize` "
        "(docs/DETECTORS.md; never made at start-up: a missing copy fails the start).",
    )

    @model_validator(mode="after")
    def _path_or_download(self) -> YoloxDetectorConfig:
        """A local ``path`` replaces ``model``/``url``: giving both is a mistake (key_problem on ``path``)."""
        if self.path is not None and {"model", "url"} & self.model_fields_set:
            raise key_problem("path", self.path, "set either `path` or `model`/`url`, not both")
        return self


class UserModelDetectorConfig(DetectorConfigBase):
    """Base of the families whose model is a user's local file (never downloaded): ``path`` is required, and the
    messages for ``path`` missing or ``model``/``url`` given name the family (from its ``type``)."""

    path: str = Field(description="Local ONNX file of the model, used as is (never downloaded).")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        family = family_tag(cls)
        only_yolox = f"only used by type {family_tag(YoloxDetectorConfig)}; set `path` to the {family} model file"
        cls.key_notes = {
            "path": f"missing (required for type {family}: only yolox models are downloaded)",
            "model": only_yolox,
            "url": only_yolox,
        }


class Yolov5DetectorConfig(UserModelDetectorConfig):
    """YOLOv5 (Ultralytics ``export.py --include onnx``): a user model at a local ``path``."""

    type: Literal["yolov5"] = Field(description="Detector family (registry key).")


class Yolov8DetectorConfig(UserModelDetectorConfig):
    """YOLOv8 or YOLO11 (Ultralytics ``yolo export format=onnx``): a user model at a local ``path``."""

    type: Literal["yolov8"] = Field(description="Detector family (registry key); also YOLO11.")


DETECTOR_CONFIGS: tuple[type[DetectorConfigBase], ...] = (
    YoloxDetectorConfig, Yolov5DetectorConfig, Yolov8DetectorConfig,
)
"""Registry of the detector families' config classes (a new family: its class here, its detector in
:mod:`vcascade.edge.detection.registry`)."""

DetectorConfig = family_union(DETECTOR_CONFIGS, default=YoloxDetectorConfig)
"""The edge's detector, chosen by its ``type`` key (``yolox`` when omitted)."""
