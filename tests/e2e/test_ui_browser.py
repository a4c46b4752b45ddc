"""The live view in a real browser (issue 20, item 5): headless Chromium from Debian (``/usr/bin/chromium``, never
a downloaded browser) driven by Playwright, against a real deployment started by ``vcascade run`` with
``ui.enabled``: bikes.mp4 as a looping camera paced like a live one, and an RTSP camera (tools/rtsp_server.py)
whose URL carries credentials.

The page refuses a wrong token; it shows every camera; the frames change over time; boxes are drawn (the
pixels the page shows differ from the raw frame on a detection's box, and match it elsewhere); the camera page
streams and shows the per-hop latency of its recent ROIs and its result lines; the RTSP camera, its server
killed mid-run, turns to its fault state with the reason; the credentials appear nowhere. With
``VCASCADE_UI_SCREENSHOTS=DIR`` the grid and the camera page are saved there (docs/ui_grid.png,
docs/ui_camera.png come from this test).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from tests.demo import demo_data
from tests.edge.conftest import RtspServer, make_video
from vcascade.core.transport.ports import free_port

pytestmark = pytest.mark.e2e
sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

CHROMIUM = "/usr/bin/chromium"
TOKEN = "browser-test-token-0123456789"
SECRET = "door-s3cret"
START_TIMEOUT_S = 240.0
"""Until both cameras stream and the worker answered: torch and the embedder load on a busy 2-core machine."""
STEP_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, bikes_path):
    """`vcascade run` with the view on: (view URL, RTSP server, bikes.mp4 path). Stopped with SIGINT at the end."""
    if not Path(CHROMIUM).is_file() or shutil.which("ffmpeg") is None:
        pytest.fail("needs /usr/bin/chromium and ffmpeg (scripts/test.sh installs the Debian packages)")
    tmp = tmp_path_factory.mktemp("ui")
    rtsp = RtspServer(make_video(tmp / "door.mp4", 120), free_port())
    rtsp.start()
    data = demo_data()
    data["cameras"] = {
        "street-1": {"url": str(bikes_path), "edge": "edge-1", "realtime": True, "loop": True, "detect_fps": 5},
        "door": {"url": rtsp.url.replace("rtsp://", f"rtsp://viewer:{SECRET}@"), "edge": "edge-1",
                 "read_timeout_s": 2, "open_timeout_s": 2, "backoff_initial_s": 1, "backoff_max_s": 2},
    }  # fmt: skip
    data["edges"]["edge-1"].update(
        metrics_port=free_port(), preview_port=free_port(), control_port=free_port(), drain_timeout_s=5,
        sinks=[{"type": "jsonl", "path": str(tmp / "results.jsonl"), "mode": "truncate"}],
    )
    data["brokers"]["broker-1"].update(frontend_port=free_port(), backend_port=free_port(), metrics_port=free_port())
    data["workers"]["worker-1"].update(metrics_port=free_port(), credits=4, max_batch=4)
    data["ui"] = {"enabled": True, "port": free_port(), "token": "${VCASCADE_UI_TOKEN}", "preview_fps": 4}
    config = tmp / "deploy.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "VCASCADE_UI_TOKEN": TOKEN}
    models = os.environ.get("VCASCADE_TEST_MODELS", str(Path(__file__).resolve().parents[3] / "shared" / "models"))
    with open(tmp / "run.out", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vcascade", "run", str(config), "--model-dir", models],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp, env=env, start_new_session=True,
        )
    view = f"http://127.0.0.1:{data['ui']['port']}"
    try:
        wait_for(lambda: _streaming_with_results(view), START_TIMEOUT_S, f"deployment up ({tmp / 'run.out'})")
        yield view, rtsp, bikes_path
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        rtsp.kill()


def api(view: str, path: str):
    request = urllib.request.Request(f"{view}{path}", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def _streaming_with_results(view: str) -> bool:
    try:
        rows = {row["camera"]: row for row in api(view, "/api/overview")["cameras"]}
    except (OSError, ValueError):
        return False
    return all(row["state"] == "streaming" for row in rows.values()) and bool(rows["street-1"].get("rois_per_s"))


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, deployment):
    view = deployment[0]
    context = browser.new_context(viewport={"width": 1280, "height": 900}, bypass_csp=True)  # the test's own scripts
    page = context.new_page()
    assert page.goto(f"{view}/?token={TOKEN}", wait_until="domcontentloaded").status == 200
    yield page
    context.close()


def screenshot(page, name: str) -> None:
    folder = os.environ.get("VCASCADE_UI_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name))


def tile_frame(page, camera: str) -> dict:
    """The frame a camera's tile shows: seq, boxes and the JPEG bytes the page holds (read back from its blob)."""
    return page.evaluate("""async (camera) => {
        const img = document.querySelector(`.tile[data-camera="${camera}"] img`);
        const bytes = new Uint8Array(await (await fetch(img.src)).arrayBuffer());
        let text = ""; for (const b of bytes) text += String.fromCharCode(b);
        return {seq: img.dataset.frameSeq, boxes: JSON.parse(img.dataset.boxes || "[]"), jpeg: btoa(text)};
    }""", camera)


def test_a_wrong_token_is_refused(browser, deployment):
    view = deployment[0]
    context = browser.new_context()
    page = context.new_page()
    assert page.goto(f"{view}/?token=wrong-token-0123456789").status == 401
    assert page.goto(f"{view}/").status == 401  # no token, no cookie
    assert context.request.get(f"{view}/api/overview").status == 401
    context.close()


def test_the_grid_shows_every_camera_with_frames_that_change(page):
    page.wait_for_function("document.querySelectorAll('.tile img[data-frame-seq]').length === 2",
                           timeout=STEP_TIMEOUT_S * 1000)  # fmt: skip
    assert sorted(page.eval_on_selector_all(".tile", "tiles => tiles.map(t => t.dataset.camera)")) == ["door", "street-1"]
    first = page.eval_on_selector(".tile[data-camera='street-1'] img", "img => img.dataset.frameSeq")
    page.wait_for_function(
        "seq => document.querySelector(\".tile[data-camera='street-1'] img\").dataset.frameSeq !== seq", arg=first,
        timeout=STEP_TIMEOUT_S * 1000,
    )
    assert "streaming" in page.inner_text(".tile[data-camera='street-1'] .state")
    assert "fps" in page.inner_text(".tile[data-camera='street-1'] .stats")
    page.wait_for_function("document.querySelectorAll('#workers tbody tr').length === 1")
    assert "yes" in page.inner_text("#brokers tbody") and "yes" in page.inner_text("#workers tbody")
    assert "mobilenetv2-embedder" in page.inner_text("#workers tbody")


def test_boxes_are_drawn_on_the_frame_the_page_shows(page, deployment):
    bikes = deployment[2]
    page.wait_for_function(
        "JSON.parse(document.querySelector(\".tile[data-camera='street-1'] img\")?.dataset.boxes || '[]').length > 0",
        timeout=STEP_TIMEOUT_S * 1000,
    )
    shown = tile_frame(page, "street-1")
    image = cv2.imdecode(np.frombuffer(base64.b64decode(shown["jpeg"]), np.uint8), cv2.IMREAD_COLOR)
    raw = _matching_raw_frame(bikes, image)
    diff = np.abs(image.astype(int) - raw.astype(int)).max(axis=2)
    assert np.median(diff) < 8, np.median(diff)  # the same frame, apart from JPEG noise and the drawing
    outlines = [_outline_mean(diff, box) for box in shown["boxes"]]
    assert max(outlines) > 40, (shown["boxes"], outlines)  # a drawn box: its outline is not the raw frame's


def _outline_mean(diff: np.ndarray, box: list[int]) -> float:
    """Mean difference along a box's outline, 2 px wide, clipped to the image."""
    h, w = diff.shape
    x1, y1 = max(int(box[0]), 0), max(int(box[1]), 0)
    x2, y2 = min(int(box[2]), w - 2), min(int(box[3]), h - 2)
    sides = [diff[y1:y2 + 1, x1:x1 + 2], diff[y1:y2 + 1, x2:x2 + 2], diff[y1:y1 + 2, x1:x2 + 1], diff[y2:y2 + 2, x1:x2 + 1]]
    return float(np.concatenate([side.ravel() for side in sides]).mean())


def _matching_raw_frame(video: Path, image: np.ndarray) -> np.ndarray:
    """The frame of ``video`` closest to ``image`` (smallest median pixel difference)."""
    cap, best, best_score = cv2.VideoCapture(str(video)), None, float("inf")
    while True:
        ok, raw = cap.read()
        if not ok:
            break
        if raw.shape != image.shape:
            raw = cv2.resize(raw, (image.shape[1], image.shape[0]), interpolation=cv2.INTER_AREA)
        score = float(np.median(np.abs(raw.astype(int) - image.astype(int))))
        if score < best_score:
            best, best_score = raw, score
    cap.release()
    return best


def test_the_camera_page_streams_with_latency_per_hop_and_result_lines(page):
    page.click(".tile[data-camera='street-1'] a")
    page.wait_for_function("location.hash === '#/camera/street-1'")
    page.wait_for_function("document.getElementById('stream').naturalWidth > 0", timeout=STEP_TIMEOUT_S * 1000)
    page.wait_for_function("document.querySelectorAll('#hops tbody tr').length > 0", timeout=STEP_TIMEOUT_S * 1000)
    hops = page.eval_on_selector_all("#hops tbody tr td:first-child", "cells => cells.map(c => c.textContent)")
    assert "end_to_end" in hops and len(hops) >= 3
    page.wait_for_function("document.querySelectorAll('#results li').length > 0")
    results = page.inner_text("#results")
    assert "{" not in results and re.search(r"\w+ #\d+ · identity \d+", results), results  # rows, not JSON
    assert "streaming" in page.inner_text("#camera-state")
    screenshot(page, "ui_camera.png")


def test_a_camera_whose_server_dies_turns_to_its_fault_state_with_the_reason(page, deployment):
    view, rtsp, _ = deployment
    page.wait_for_function("document.querySelector(\".tile[data-camera='door'] .state\")?.textContent === 'streaming'",
                           timeout=STEP_TIMEOUT_S * 1000)  # fmt: skip
    rtsp.kill()
    page.wait_for_function("document.querySelector(\".tile[data-camera='door']\")?.classList.contains('fault')",
                           timeout=STEP_TIMEOUT_S * 1000)  # fmt: skip
    state = page.inner_text(".tile[data-camera='door'] .state")
    reason = page.inner_text(".tile[data-camera='door'] .reason")
    assert state in ("stalled", "backing_off") and reason, (state, reason)
    assert "streaming" in page.inner_text(".tile[data-camera='street-1'] .state")  # the other camera goes on
    page.wait_for_function("JSON.parse(document.querySelector(\".tile[data-camera='street-1'] img\")?.dataset.boxes"
                           " || '[]').length > 0", timeout=STEP_TIMEOUT_S * 1000)  # fmt: skip
    screenshot(page, "ui_grid.png")
    for text in (page.content(), json.dumps(api(view, "/api/overview")), json.dumps(api(view, "/api/events"))):
        assert SECRET not in text
