#!/usr/bin/env python3
"""Write docs/CONFIG.md from the pydantic config models (field, type, default, description).

    python -m tools.gen_config_docs          # rewrite docs/CONFIG.md
    python -m tools.gen_config_docs --check  # exit 1 if docs/CONFIG.md is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from vcascade.core import config
from vcascade.core.schema.identity import GalleryConfig, TrackAggregateConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "CONFIG.md"
SECTIONS = [
    ("Top level", config.Deployment),
    ("`cameras.<name>`", config.CameraConfig),
    ("`cameras.<name>.analytics`", config.AnalyticsConfig),
    ("`cameras.<name>.analytics.lines[]`", config.CountingLineConfig),
    ("`cameras.<name>.analytics.zones[]`", config.ZoneConfig),
    ("`cameras.<name>.view`", config.CameraViewConfig),
    ("`cameras.<name>.history`", config.HistoryLimits),
    ("`cameras.<name>.motion`", config.MotionConfig),
    ("`cameras.<name>.privacy`", config.PrivacyConfig),
    ("`cameras.<name>.privacy.faces`", config.FaceRedactionConfig),
    ("`cameras.<name>.privacy.text`", config.TextRedactionConfig),
    ("`edges.<name>`", config.EdgeConfig),
    ("`edges.<name>.detector` with `type: yolox` (the default)", config.YoloxDetectorConfig),
    ("`edges.<name>.detector` with `type: yolov5`", config.Yolov5DetectorConfig),
    ("`edges.<name>.detector` with `type: yolov8` (also YOLO11)", config.Yolov8DetectorConfig),
    ("`edges.<name>.roi`", config.RoiConfig),
    ("`edges.<name>.roi.policy` (and `cameras.<name>.roi_policy`)", config.RoiPolicyConfig),
    ("`edges.<name>.roi.policy.tracker`", config.TrackerConfig),
    ("`edges.<name>.roi.routes[]` (and `cameras.<name>.routes[]`)", config.RouteConfig),
    ("`edges.<name>.history`", config.HistoryConfig),
    ("`edges.<name>.history.store` with `type: sqlite` (the default)", config.SqliteHistoryStoreConfig),
    ("`edges.<name>.history.store` with `type: postgres`", config.PostgresHistoryStoreConfig),
    ("`edges.<name>.sinks[]` with `type: jsonl`", config.JsonlSinkConfig),
    ("`edges.<name>.sinks[]` with `type: zmq_pub`", config.ZmqPubSinkConfig),
    ("`edges.<name>.sinks[]` with `type: mqtt`", config.MqttSinkConfig),
    ("`edges.<name>.sinks[]` with `type: webhook`", config.WebhookSinkConfig),
    ("`brokers.<name>`", config.BrokerConfig),
    ("`recognizers.<name>` with `type: torch`", config.TorchRecognizerConfig),
    ("`recognizers.<name>` with `type: onnx`", config.OnnxRecognizerConfig),
    ("`recognizers.<name>` with `type: ocr`", config.OcrRecognizerConfig),
    ("`recognizers.<name>` with `type: calibrated`", config.CalibratedRecognizerConfig),
    ("`recognizers.<name>.head` with `type: embedding`", config.EmbeddingHeadConfig),
    ("`recognizers.<name>.head.identity`", config.IdentitySpaceConfig),
    ("`recognizers.<name>.head.identity.store` with `type: sqlite`", config.SqliteStoreConfig),
    ("`recognizers.<name>.head.identity.store` with `type: redis`", config.RedisStoreConfig),
    ("`recognizers.<name>.head.identity.tracks`", TrackAggregateConfig),
    ("`recognizers.<name>.head.identity.gallery`", GalleryConfig),
    ("`recognizers.<name>.head.identity.topology`", config.TopologyConfig),
    ("`recognizers.<name>.head.identity.topology.links[]`", config.TopologyLinkConfig),
    ("`recognizers.<name>.head` with `type: classifier`", config.ClassifierHeadConfig),
    ("`recognizers.<name>.head` with `type: text`", config.TextHeadConfig),
    ("`workers.<name>`", config.WorkerConfig),
    ("`stage_groups.<name>`", config.StageGroupConfig),
    ("`security`", config.SecurityConfig),
    ("`security.curve`", config.CurveConfig),
    ("`heartbeat`", config.HeartbeatConfig),
    ("`supervision`", config.SupervisionConfig),
    ("`ui`", config.UiConfig),
    ("`metrics`", config.MetricsConfig),
]


def _strip_annotated(text: str) -> str:
    """``Annotated[X, metadata...]`` -> ``X`` (bracket-aware; metadata may hold brackets of its own)."""
    while (i := text.find("Annotated[")) >= 0:
        depth, j, first_end = 0, i + len("Annotated["), None
        while True:
            ch = text[j]
            if ch in "[(":
                depth += 1
            elif ch in "])":
                if depth == 0:
                    break
                depth -= 1
            elif ch == "," and depth == 0 and first_end is None:
                first_end = j
            j += 1
        text = text[:i] + text[i + len("Annotated[") : first_end] + text[j + 1 :]
    return text


def _type_name(annotation) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else _strip_annotated(str(annotation))
    text = re.sub(r"vcascade\.core(\.\w+)*\.", "", text.replace("typing.", ""))
    return re.sub(r"Union\[(\w+)\]", r"\1", text).replace("|", "\\|")


def _summary(model: type[BaseModel]) -> str:
    """The first paragraph of the model's docstring as one line, its reST code (````x````, ``:mod:`x` ``) as
    Markdown's."""
    paragraph = " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())
    return re.sub(r":\w+:`", "`", paragraph.replace("``", "`"))


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "Generated from `vcascade/core/schema/` by `python -m tools.gen_config_docs`; do not edit by hand.",
        "Every mapping rejects unknown keys. Strings may use `${VAR}` or `${VAR:-default}` (environment).",
        "Names (keys of `cameras`, `edges`, ...) match `" + config.NAME_PATTERN + "`.",
        "",
    ]
    for title, model in SECTIONS:
        out += [f"## {title}", "", _summary(model), "",
                "| key | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            default = "required" if field.is_required() else (
                "(empty)" if field.default is PydanticUndefined else f"`{field.default!r}`")
            if isinstance(field.default, BaseModel):
                default = "(section defaults)"
            desc = (field.description or "").replace("|", "\\|")
            out.append(f"| `{name}` | `{_type_name(field.annotation)}` | {default} | {desc} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is out of date: run python -m tools.gen_config_docs", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
