"""`vcascade plan`: real processes profiling the real recognizers of real deployment files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo import torch_demo_text
from vcascade.app.plan import plan_worker, stage_rows
from vcascade.core.config import load_config

REPO = Path(__file__).resolve().parents[2]
VCASCADE = Path(sys.executable).with_name("vcascade")
DEMO = REPO / "configs" / "demo.yaml"
TIMEOUT_S = 600


def run_plan(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(VCASCADE), "plan", *map(str, args)], capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env, cwd=REPO)  # fmt: skip


def ocr_deployment(tmp_path: Path, split_points: str) -> Path:
    """configs/demo.yaml with its recognizer replaced by PP-OCRv6 (ONNX) on the demo's 2 CPU stages."""
    text = DEMO.read_text()
    start, end = text.index("  mobilenetv2-embedder:\n"), text.index("  ppocr-text:")  # the text one stays
    ocr = (
        "  mobilenetv2-embedder:\n    type: onnx\n    model: PP-OCRv6_rec_small.onnx\n    input_hw: [48, 320]\n"
        "    channel_order: bgr\n    mean: [0.5, 0.5, 0.5]\n    std: [0.5, 0.5, 0.5]\n    resize: keep_ratio_pad\n"
        f"    split_points: {split_points}\n\n"
    )
    path = tmp_path / "ocr.yaml"
    path.write_text(text[:start] + ocr + text[end:])
    return path


def test_plan_of_the_shipped_demo_embedder_on_onnxruntime(models_dir):
    done = run_plan(DEMO, "--worker", "worker-1", "--batch", "2", "--model-dir", models_dir)
    assert done.returncode == 0, done.stderr
    assert "worker-1: mobilenetv2-embedder (torch+onnxruntime), auto split points ['/features/" in done.stdout
    assert done.stdout.count("balance ratio (slowest / mean stage)") == 1 and "auto would choose" not in done.stdout


def test_plan_of_the_demo_on_torch_prints_explicit_and_auto_tables(models_dir, tmp_path):
    path = tmp_path / "torch.yaml"
    path.write_text(torch_demo_text())
    done = run_plan(path, "--batch", "2", "--model-dir", models_dir)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "worker-1: mobilenetv2-embedder (torch), explicit split points ['features.3']" in out
    assert "auto would choose ['features." in out
    assert "worker-2: ppocr-text (ocr), auto split points ['regions']" in out  # detect | read
    assert out.count("balance ratio (slowest / mean stage)") == 3  # worker-1, what auto would choose, worker-2
    assert "features.0" in out and "features.18" in out and "predicted ms" in out


def test_plan_of_an_onnx_auto_recognizer(tmp_path, models_dir):
    done = run_plan(ocr_deployment(tmp_path, "auto"), "--worker", "worker-1", "--batch", "2", "--model-dir", models_dir)
    assert done.returncode == 0, done.stderr
    assert "(onnx), auto split points ['" in done.stdout
    assert "auto would choose" not in done.stdout  # already auto
    assert "Conv.0" in done.stdout  # the first node of stage 0


def test_bad_onnx_cut_name_fails_with_a_clear_message(tmp_path, models_dir):
    done = run_plan(ocr_deployment(tmp_path, "[Conv.0]"), "--batch", "1", "--model-dir", models_dir)
    assert done.returncode == 2
    assert "recognizers.mobilenetv2-embedder.split_points" in done.stderr
    assert "'Conv.0' is not a tensor where this ONNX graph can be cut" in done.stderr
    assert "111 valid cut points" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_torch_split_point_and_unknown_worker_fail_with_exit_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(torch_demo_text().replace("split_points: [features.3]", "split_points: [features.33]"))
    done = run_plan(path, "--batch", "1")
    assert done.returncode == 2 and "'features.33'" in done.stderr and "features.3" in done.stderr
    done = run_plan(DEMO, "--worker", "nobody")
    assert done.returncode == 2 and "no worker 'nobody'" in done.stderr


def test_plan_rows_cover_every_layer_once(models_dir, tmp_path):
    dep = load_config(ocr_deployment(tmp_path, "auto"))
    wp = plan_worker(dep, "worker-1", batch=1, model_dir=str(models_dir))
    rows = stage_rows(wp, wp.plan)
    assert [row[1] for row in rows] == ["cpu", "cpu"]
    assert sum(row[4] for row in rows) == sum(len(s.layers) for s in wp.profile.segments)
    assert sum(row[5] for row in rows) == pytest.approx(wp.plan.total_ms)
    assert sum(row[6] for row in rows) == pytest.approx(100.0)
    assert wp.auto_plan == wp.plan and not wp.explicit
