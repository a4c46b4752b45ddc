"""``decoder: auto | software | cuda | qsv``: a hardware decoder that cannot be used falls back to software, counted
with its reason; the decoder in use is in the reader, its metrics and ``vcascade status``. Runs with or without a
GPU: without one, ``auto`` is the fallback path."""

from __future__ import annotations

import shutil
import subprocess
import threading

from prometheus_client import REGISTRY
from rich.console import Console

from vcascade.app.promconfig import MetricsTarget
from vcascade.app.status import cameras_table, scrape
from vcascade.core.config import CameraConfig
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader


def _value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, {"edge": "edge", **labels}) or 0.0


def _fallbacks(camera: str) -> dict[str, float]:
    return {f"{s.labels['device']}:{s.labels['reason']}": s.value for family in REGISTRY.collect()
            if family.name == "vcascade_edge_decoder_fallbacks" for s in family.samples
            if s.name.endswith("_total") and s.labels["camera"] == camera}


def test_auto_decodes_every_frame_on_hardware_or_falls_back_to_software_counted(read_all, short_video):
    reader, frames = read_all(short_video, decoder="auto")
    assert (reader.reason, len(frames), reader.corrupt_frames) == ("end_of_file", 10, 0), reader.detail
    assert reader.decoder in ("software", "cuda", "qsv")
    if reader.decoder == "software":  # no usable GPU: both devices were tried, each skip counted with its reason
        assert {key.split(":")[0] for key in reader.decoder_fallbacks} == {"cuda", "qsv"}, reader.decoder_fallbacks
    assert _fallbacks("cam") == reader.decoder_fallbacks
    assert _value("vcascade_edge_camera_decoder", camera="cam", decoder=reader.decoder) == 1


def test_software_and_images_try_no_hardware(read_all, short_video, tmp_path):
    reader, frames = read_all(short_video)
    assert (len(frames), reader.decoder, reader.decoder_fallbacks) == (10, "software", {})
    image = tmp_path / "still.png"
    subprocess.run([shutil.which("ffmpeg") or "ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=32x24",
                    "-frames:v", "1", "-threads", "1", str(image)], check=True)
    reader, frames = read_all(image, decoder="cuda")
    assert (len(frames), reader.decoder, reader.decoder_fallbacks) == (1, "software", {})


def test_an_unreachable_source_keeps_its_own_fault_and_is_not_a_decoder_fallback(free_port, wait_for):
    cfg = CameraConfig(url=f"rtsp://127.0.0.1:{free_port()}/cam", edge="e", decoder="auto", backoff_initial_s=0.2)
    stop = threading.Event()
    reader = CameraReader("edge", "refused-hw", cfg, FrameSlots(), stop)
    reader.start()
    try:
        assert wait_for(lambda: reader.fault is not None, 30)
        assert reader.fault == "connection_refused" and reader.decoder_fallbacks == {}
    finally:
        stop.set()
        reader.join(15)


def test_status_shows_the_decoder_of_each_camera(read_all, short_video, free_port):
    reader, _ = read_all(short_video, decoder="auto")
    port = free_port()
    server = serve_metrics(port, "127.0.0.1")
    try:
        after = scrape(MetricsTarget("edge", "edge", "127.0.0.1", port))
    finally:
        server.shutdown()
        server.server_close()
    console = Console(width=200, record=True)
    console.print(cameras_table({}, {"edge": after}))
    row = next(line for line in console.export_text().splitlines() if " cam " in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]][4] == reader.decoder, row
