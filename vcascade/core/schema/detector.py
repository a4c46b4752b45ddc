"""The edge's object detector: one config class per detector family, picked by the ``type`` key.

``yolox`` (the default) finds its model by file name and downloads the official YOLOX-Nano release when it is
missing; ``yolov5`` and ``yolov8`` (also YOLO11) are user models given by a local ``path``, never downloaded.
The edge's registry (:mod:`vcascade.edge.detection`) is keyed by the same ``type``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, Tag, model_validator

from vcascade.core.schema.base import ConfigModel, key_problem, spinning_field, type_discriminator

YOLOX_NANO_URL = "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0/yolox_nano.onnx"
"""Official YOLOX-Nano ONNX release asset (Megvii-BaseDetection/YOLOX, release 0.1.1rc0, Apache-2.0)."""


class DetectorConfigBase(ConfigModel):
    """Settings every detector family shares: input size, thresholds, class names and filter, ONNX Runtime runs."""

    type: str = Field(description="Detector family (registry key).")
    input_size: int = Field(416, ge=32, le=4096, multiple_of=32, description="Square network input side, px.")
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

    @model_validator(mode="after")
    def _path_or_download(self) -> YoloxDetectorConfig:
        """A local ``path`` replaces ``model``/``url``: giving both is a mistake (key_problem on ``path``)."""
        if self.path is not None and {"model", "url"} & self.model_fields_set:
            raise key_problem("path", self.path, "set either `path` or `model`/`url`, not both")
        return self


def _user_model_notes(family: str) -> dict[str, str]:
    """Messages for the keys a user-model family requires (``path``) or lacks (``model``, ``url``: YOLOX only)."""
    only_yolox = f"only used by type yolox; set `path` to the {family} model file"
    return {
        "path": f"missing (required for type {family}: only yolox models are downloaded)",
        "model": only_yolox,
        "url": only_yolox,
    }


class Yolov5DetectorConfig(DetectorConfigBase):
    """YOLOv5 (Ultralytics ``export.py --include onnx``): a user model at a local ``path``."""

    type: Literal["yolov5"] = Field("yolov5", description="Detector family (registry key).")
    path: str = Field(description="Local ONNX file of the model, used as is (never downloaded).")

    key_notes = _user_model_notes("yolov5")


class Yolov8DetectorConfig(DetectorConfigBase):
    """YOLOv8 or YOLO11 (Ultralytics ``yolo export format=onnx``): a user model at a local ``path``."""

    type: Literal["yolov8"] = Field("yolov8", description="Detector family (registry key); also YOLO11.")
    path: str = Field(description="Local ONNX file of the model, used as is (never downloaded).")

    key_notes = _user_model_notes("yolov8")


DetectorConfig = Annotated[
    Union[
        Annotated[YoloxDetectorConfig, Tag("yolox")],
        Annotated[Yolov5DetectorConfig, Tag("yolov5")],
        Annotated[Yolov8DetectorConfig, Tag("yolov8")],
    ],
    type_discriminator("yolox", ("yolox", "yolov5", "yolov8")),
]
"""The edge's detector, chosen by its ``type`` key (``yolox`` when omitted)."""
