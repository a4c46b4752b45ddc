"""The center side of the deployment file: recognizers (stage runtime, preprocessing, head), workers, stage groups."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator

from vcascade.core.schema.base import (
    ConfigModel,
    Name,
    Port,
    cpus_field,
    family_union,
    model_file_field,
    spinning_field,
    torch_threads_field,
)
from vcascade.core.schema.identity import IdentitySpaceConfig

# ---------------------------------------------------------------- center


class EmbeddingHeadConfig(ConfigModel):
    """L2-normalised embedding matched against an in-memory gallery by cosine similarity."""

    type: Literal["embedding"] = Field("embedding", description="Head kind (registry key).")
    match_threshold: float = Field(0.8, ge=-1, le=1, description="Cosine similarity at or above which an identity matches.")
    max_identities: int = Field(10_000, ge=1, description="Gallery capacity; the least recently seen identity is evicted.")
    dim: int | None = Field(
        None, ge=1, le=65_536,
        description="Embedding length D the model outputs per crop, checked when the worker starts (the ONNX file's "
        "output shape, then the warm-up micro-batch); None: not checked.",
    )
    identity: IdentitySpaceConfig = Field(IdentitySpaceConfig(), description="Identity space shared by the recognizer's workers.")


class ClassifierHeadConfig(ConfigModel):
    """Class scores per ROI (logits or probabilities) to the top-k labels with their scores, best first."""

    type: Literal["classifier"] = Field(description="Head kind (registry key).")
    labels: list[str] | str = Field(
        description="Class names in model output order: a list, or a UTF-8 text file with one name a line; "
        "their number must equal the model's output classes."
    )
    top_k: int = Field(1, ge=1, le=1000, description="Labels reported per ROI, best first.")
    softmax: bool = Field(False, description="Apply a softmax first (true when the model outputs logits).")


class TextHeadConfig(ConfigModel):
    """CTC text recognition (PaddleOCR PP-OCR rec models): greedy decoding of per-time-step character scores."""

    type: Literal["text"] = Field(description="Head kind (registry key).")
    charset: Literal["model"] | str | list[str] = Field(
        "model",
        description="Characters in class order (class 0 = blank not included): `model` (the ONNX model's "
        "`character` metadata), a UTF-8 text file with one character a line, or a list.",
    )
    min_score: float = Field(
        0.0, ge=0, le=1,
        description="Texts whose score (mean max-probability of the kept steps, 0..1) is lower are sent as ''.",
    )


HEAD_CONFIGS: tuple[type[ConfigModel], ...] = (EmbeddingHeadConfig, ClassifierHeadConfig, TextHeadConfig)
"""Registry of the heads' config classes (a new head: its class here, its builder in
:data:`vcascade.center.heads.HEADS`, its output in :data:`vcascade.core.protocol.wire.HEAD_OUTPUTS`)."""

HeadConfig = family_union(HEAD_CONFIGS, default=EmbeddingHeadConfig)
"""A recognizer's head, chosen by its ``type`` key (``embedding`` when omitted, as before other head types existed)."""


class _RecognizerBase(ConfigModel):
    """Fields every recognizer runtime shares: preprocessing, where it is split into stages, its head."""

    input_hw: tuple[int, int] = Field((224, 224), description="Crop resized to (height, width), px.")
    channel_order: Literal["rgb", "bgr"] = Field("rgb", description="Channel order the model expects.")
    mean: tuple[float, float, float] = Field((0.485, 0.456, 0.406), description="Per-channel mean on 0..1 pixels.")
    std: tuple[float, float, float] = Field((0.229, 0.224, 0.225), description="Per-channel std on 0..1 pixels.")
    resize: Literal["stretch", "keep_ratio_pad"] = Field(
        "stretch",
        description="`stretch` to `input_hw`, or `keep_ratio_pad` (PaddleOCR: height = input height, aspect ratio "
        "kept, width capped at the input width, right-padded).",
    )
    split_points: list[str] | Literal["auto"] = Field(
        default_factory=list,
        description="Where a new stage begins (torch: submodule names; onnx: tensor names), or `auto`: profiled at "
        "start-up and balanced over the worker's devices (`vcascade plan` shows the choice).",
    )
    head: HeadConfig = Field(EmbeddingHeadConfig(), description="Turns the last stage's output into a result.")
    intra_op_threads: int | None = Field(
        None, ge=1, le=256,
        description="ONNX Runtime intra-op threads per stage session (`type: onnx`, or `engine: onnxruntime`; "
        "None: the worker's `cpus // stages`, at least 1).",
    )
    allow_spinning: bool = spinning_field()


class TorchRecognizerConfig(_RecognizerBase):
    """A torch model split into pipeline stages: ``factory`` + ``weights``, or a saved ``torch.export`` program."""

    type: Literal["torch"] = Field(description="Stage runtime (registry key).")
    factory: str | None = Field(
        None, pattern=r"^[\w.]+:[\w.]+$", description="`module:callable` returning the nn.Module (with `weights`)."
    )
    factory_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the factory.")
    weights: str | None = Field(None, description="State-dict file path, or package://<distribution>/<file inside it>.")
    program: str | None = Field(
        None,
        description="Instead of `factory` + `weights`: a `torch.export` program saved with `torch.export.save` "
        "(`.pt2`; path or package://).",
    )
    engine: Literal["torch", "onnxruntime"] = Field(
        "torch",
        description="Run the model with torch, or export it to ONNX at start-up and run that with ONNX Runtime "
        "(faster on CPU; `split_points` are then ONNX tensor names, see `vcascade plan`, or auto).",
    )


class OnnxRecognizerConfig(_RecognizerBase):
    """An ONNX model cut into stages where one tensor crosses, one ONNX Runtime session per stage."""

    type: Literal["onnx"] = Field(description="Stage runtime (registry key).")
    model: str = model_file_field(..., "ONNX file", package=True)


class OcrRecognizerConfig(_RecognizerBase):
    """Two ONNX models as two pipeline stages: DB text detection on the crop, then CTC recognition of each region
    found (center/stages/text_pipeline.py). The crop preprocessing fields (`input_hw`, `resize`, `mean`, `std`,
    `channel_order`) are the detector's; its head is `type: text`, which then answers every region."""

    type: Literal["ocr"] = Field(description="Stage runtime (registry key).")
    detector_model: str = Field(
        "PP-OCRv6_det_small.onnx",
        description="Text detection ONNX file (DB: one (N, 3, H, W) input, a (N, 1, H, W) text probability map out); "
        "found like `model`.",
    )
    model: str = model_file_field(
        "PP-OCRv6_rec_small.onnx", "Text recognition ONNX file (CTC: (N, 3, 48, W) in, (N, T, C) class probabilities "
        "out)", package=True,
    )
    input_hw: tuple[int, int] = Field(
        (320, 640), description="Crop resized to (height, width) for detection, px (multiples of 32)."
    )
    channel_order: Literal["rgb", "bgr"] = Field("bgr", description="Channel order the models expect.")
    resize: Literal["stretch", "keep_ratio_pad"] = Field(
        "keep_ratio_pad", description="`keep_ratio_pad` (aspect ratio kept, right-padded) or `stretch`."
    )
    rec_input_hw: tuple[int, int] = Field(
        (48, 320), description="Each text region resized to this height (48), aspect ratio kept, width at most this, px."
    )
    det_threshold: float = Field(0.3, gt=0, lt=1, description="Text probability at or above which a pixel is text.")
    box_threshold: float = Field(0.5, gt=0, lt=1, description="Regions whose mean text probability is lower are dropped.")
    unclip_ratio: float = Field(1.6, gt=0, le=4, description="DB unclip ratio r' (offset A' r' / L', Liao et al. 2020).")
    max_regions: int = Field(8, ge=1, le=64, description="Text regions read per crop at most (the best scoring).")

    @field_validator("input_hw")
    @classmethod
    def _multiple_of_32(cls, hw):
        if any(side % 32 for side in hw):
            raise ValueError(f"the text detector's input_hw must be multiples of 32, got {list(hw)}")
        return hw


class CalibratedRecognizerConfig(_RecognizerBase):
    """No model: one stage that waits the measured service time of each micro-batch, as a device would while
    it computes (capacity planning, scale harness; center/stages/calibrated.py). Sizes between two measured ones are
    interpolated linearly, sizes above the largest extrapolated with the last per-ROI slope. No split points:
    the worker gives it one device."""

    type: Literal["calibrated"] = Field(description="Stage runtime (registry key).")
    service_ms: dict[int, float] = Field(
        min_length=1,
        description="Measured time of one micro-batch through all stages, ms, by micro-batch size (>= 1).",
    )
    output_dim: int = Field(2, ge=1, le=4096, description="Width of the last stage's (N, output_dim) float32 output.")
    source: str = Field("", description="Where the times were measured (model, device, date): documentation only.")

    @field_validator("service_ms")
    @classmethod
    def _sizes_and_times_positive(cls, table: dict[int, float]) -> dict[int, float]:
        if any(size < 1 for size in table) or any(not 0 <= ms < 1e6 for ms in table.values()):
            raise ValueError("micro-batch sizes must be >= 1 and times in [0, 1e6) ms")
        return dict(sorted(table.items()))

    @field_validator("split_points")
    @classmethod
    def _no_split_points(cls, split_points):
        if split_points:
            raise ValueError("a calibrated recognizer has no model to split: it runs as one stage, leave it empty")
        return split_points


RecognizerConfig = Annotated[
    Union[TorchRecognizerConfig, OnnxRecognizerConfig, OcrRecognizerConfig, CalibratedRecognizerConfig],
    Field(discriminator="type"),
]


class WorkerConfig(ConfigModel):
    """One center worker process: micro-batches ROIs and runs the recognizer as pipeline stages."""

    brokers: list[Name] = Field(min_length=1, description="Brokers to take ROIs from (one socket each).")
    recognizer: Name = Field(description="Name of the recognizer (key under `recognizers`) to run.")
    devices: list[str] = Field(
        min_length=1, description="One device per stage (`cpu`, `cuda:0`, ...); count = split points + 1."
    )
    max_batch: int = Field(16, ge=1, le=4096, description="Micro-batch size at most.")
    max_wait_ms: float = Field(10.0, ge=0, description="A partial micro-batch starts after waiting this long, ms.")
    credits: int = Field(64, ge=1, le=100_000, description="ROIs this worker accepts in flight at once.")
    stage_queue: int = Field(2, ge=1, le=64, description="Micro-batches waiting before each stage, at most.")
    cpus: int | None = cpus_field()
    torch_threads: int | None = torch_threads_field()
    opencv_threads: int = Field(
        1, ge=0, le=256, description="cv2.setNumThreads for this process (0: OpenCV default)."
    )
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")
    max_batches_in_flight: int = Field(
        8, ge=1, le=1024,
        description="Micro-batches between the batcher's hand-over and the head's result (or failure), at most; "
        "the batcher waits when reached (back-pressure). Bounds what a remote stage group holds too.",
    )
    downstream: Name | None = Field(
        None,
        description="Stage group (key under `stage_groups`) that runs the recognizer's stages after this worker's "
        "own (`devices` then covers only the first stages); None: the worker runs every stage.",
    )


class StageGroupConfig(ConfigModel):
    """Consecutive pipeline stages of a worker's recognizer in their own process, maybe on another host.

    The worker whose `downstream` names the group runs the first `len(devices)` stages and sends the
    activations over ZeroMQ (raw tensor frames); the group runs the next `len(group.devices)` stages and sends
    the last stage's output back; the worker runs the head.
    """

    host: str = Field("127.0.0.1", description="Address the worker connects to.")
    bind: str | None = Field(None, description="Address the group binds (default: `host`; `*` for all).")
    port: Port = Field(description="Port the worker connects to.")
    devices: list[str] = Field(min_length=1, description="One device per stage of the group (`cpu`, `cuda:0`, ...).")
    metrics_port: Port = Field(description="Port serving Prometheus /metrics for this process.")
    timeout_s: float = Field(
        10.0, gt=0, le=600,
        description="A micro-batch the group has not answered after this many seconds fails (its ROIs dropped as "
        "`stage_error`, counted as `stage_unreachable`).",
    )
    stage_queue: int = Field(2, ge=1, le=64, description="Micro-batches waiting before each stage, at most.")
    cpus: int | None = cpus_field()
    torch_threads: int | None = torch_threads_field()

    def endpoint(self, *, bind: bool = False) -> str:
        """ZeroMQ tcp endpoint: for the connecting worker, or (``bind=True``) for the group itself."""
        return f"tcp://{(self.bind or self.host) if bind else self.host}:{self.port}"
