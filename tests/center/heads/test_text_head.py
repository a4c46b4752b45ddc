"""TextHead: CTC greedy decoding on hand-built scores, charsets (list, file, model metadata), and the real
PP-OCRv6 rec model reading rendered text."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.center.head_models import OCR_HW, PPOCR_MEAN_STD, ort_session, render_text
from vcascade.center.heads import (
    HeadContext,
    TextHead,
    build_head,
    ctc_classes,
    ctc_greedy_decode,
    head_context,
    read_model_charset,
)
from vcascade.center.intake.preprocess import PreprocessSpec, stack_batch, to_input
from vcascade.core.config import TextHeadConfig
from vcascade.core.protocol.wire import TextOutput

CHARSET = ["a", "b", "c"]
"""Classes: 0 blank, 1 a, 2 b, 3 c, 4 space."""


def _scores(classes: list[int], probs: list[float], n_classes: int = 5) -> np.ndarray:
    """(1, T, C) scores whose argmax at step t is ``classes[t]`` with probability ``probs[t]``."""
    out = np.zeros((1, len(classes), n_classes), np.float32)
    for t, (c, p) in enumerate(zip(classes, probs)):
        out[0, t] = (1.0 - p) / (n_classes - 1)
        out[0, t, c] = p
    return out


@pytest.fixture(scope="module")
def ppocr_path(models_dir: Path) -> str:
    path = models_dir / "PP-OCRv6_rec_small.onnx"
    assert path.is_file(), f"{path} missing (see /work/shared/models/README.md)"
    return str(path)


def test_repeats_collapse_blanks_drop_and_blank_separates_doubled_letters():
    #       a  a  blank a  b  b  blank blank c
    scores = _scores([1, 1, 0, 1, 2, 2, 0, 0, 3], [0.9, 0.8, 0.99, 0.7, 0.6, 0.95, 0.9, 0.9, 0.5])
    (text,) = TextHead(CHARSET)(scores)
    assert text.text == "aabc"
    # kept steps: first of each non-blank run: 0 (0.9), 3 (0.7), 4 (0.6), 8 (0.5)
    assert text.text_score == pytest.approx(np.mean([0.9, 0.7, 0.6, 0.5]), rel=1e-6)


def test_last_class_is_the_space_when_the_model_has_one_more_class():
    (text,) = TextHead(CHARSET)(_scores([1, 4, 4, 0, 2], [0.9] * 5))
    assert text.text == "a b"


def test_all_blank_decodes_to_empty_text_with_score_zero():
    (text,) = TextHead(CHARSET)(_scores([0, 0, 0], [0.99] * 3))
    assert text == TextOutput("", 0.0)


def test_without_space_class_the_charset_fills_all_classes():
    (text,) = TextHead(CHARSET)(_scores([3, 0, 3, 2], [0.9] * 4, n_classes=4))
    assert text.text == "ccb"


def test_rows_decode_independently():
    scores = np.concatenate([_scores([1, 2], [0.9, 0.9]), _scores([3, 3], [0.9, 0.9])])
    assert [t.text for t in ctc_greedy_decode(scores, ctc_classes(CHARSET, 5))] == ["ab", "c"]


def test_min_score_rejects_unsure_text_but_reports_its_score():
    head = TextHead(CHARSET, min_score=0.8)
    sure, unsure = head(np.concatenate([_scores([1, 2], [0.9, 0.9]), _scores([1, 2], [0.5, 0.6])]))
    assert sure.text == "ab"
    assert unsure == TextOutput("", pytest.approx(0.55))


def test_class_count_that_does_not_fit_the_charset_fails_clearly():
    with pytest.raises(ValueError, match="outputs 7 classes but the charset has 3 characters"):
        TextHead(CHARSET)(np.zeros((1, 2, 7), np.float32))
    with pytest.raises(ValueError, match=r"\(n, T, C\)"):
        TextHead(CHARSET)(np.zeros((2, 5), np.float32))


def test_charset_from_file_keeps_characters_that_splitlines_would_split(tmp_path):
    path = tmp_path / "chars.txt"
    path.write_text("a\n\u2028\nc\n", encoding="utf-8")  # U+2028 LINE SEPARATOR is a character here
    head = build_head(TextHeadConfig(type="text", charset=str(path)))
    assert head.charset == ["a", "\u2028", "c"]
    assert head(_scores([2, 3], [0.9, 0.9]))[0].text == "\u2028c"


def test_charset_list_and_missing_file(tmp_path):
    assert build_head(TextHeadConfig(type="text", charset=["x", "y"])).charset == ["x", "y"]
    with pytest.raises(FileNotFoundError, match="charset file"):
        build_head(TextHeadConfig(type="text", charset=str(tmp_path / "nope.txt")))


def test_charset_model_needs_an_onnx_model():
    with pytest.raises(ValueError, match="charset: model"):
        build_head(TextHeadConfig(type="text"))


def test_charset_model_reads_the_ppocr_metadata(ppocr_path):
    charset = read_model_charset(ppocr_path)
    assert len(charset) == 18_708
    assert charset[:3] == ["!", '"', "#"] and " " not in charset  # the space is the extra last class
    head = build_head(TextHeadConfig(type="text", charset="model"), HeadContext(model_path=ppocr_path))
    assert head.charset == charset


def test_model_without_character_metadata_fails_clearly(yolox_path):
    with pytest.raises(ValueError, match="no `character` metadata"):
        read_model_charset(str(yolox_path))


def test_ppocr_reads_rendered_text(ppocr_path):
    """The real model, keep_ratio_pad preprocessing, ORT CPU 1 thread: exact text, case included (seen here:
    'VCASCADE 2026' at score 0.999, 'Hello World 42' at 0.9999, 'ok' at 0.99)."""
    lines = ["VCASCADE 2026", "Hello World 42", "ok"]
    spec = PreprocessSpec(OCR_HW, "bgr", PPOCR_MEAN_STD, PPOCR_MEAN_STD, "keep_ratio_pad")
    batch = stack_batch([to_input(render_text(line), spec) for line in lines])
    session = ort_session(ppocr_path)
    scores = session.run(None, {"x": batch})[0]
    assert scores.shape[:2] == (3, 40) and scores.shape[2] == 18_710  # T = W / 8 for PP-OCRv6
    head = build_head(TextHeadConfig(type="text", min_score=0.5), HeadContext(model_path=ppocr_path))
    texts = head(scores)
    assert [t.text for t in texts] == lines
    assert all(t.text_score > 0.9 for t in texts), texts


def test_head_context_finds_the_recognizer_model_by_name_in_the_model_dir(ppocr_path, monkeypatch, tmp_path):
    monkeypatch.setenv("VCASCADE_MODEL_DIR", str(Path(ppocr_path).parent))
    named = head_context(SimpleNamespace(type="onnx", model="PP-OCRv6_rec_small.onnx"))
    assert named.model_path == ppocr_path
    assert head_context(SimpleNamespace(type="onnx", model=ppocr_path)).model_path == ppocr_path
    assert head_context(SimpleNamespace(type="torch")) == HeadContext()  # no `model` field
