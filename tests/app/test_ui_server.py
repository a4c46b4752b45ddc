"""The live view's server over real HTTP (issue 20, items 3 and 4): the page and its scripts from the package,
read-only, the token required in every form it may take, components that do not answer shown with the
reason, the per-hop breakdown, and camera credentials never in the page or its API."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
import yaml

from tests.demo import demo_data
from vcascade.app.ui.deployment_view import hop_breakdown
from vcascade.app.ui.server import serve_view, static_file
from vcascade.core.config import load_config
from vcascade.core.telemetry.http import TOKEN_COOKIE
from vcascade.core.telemetry.metrics import serve_metrics
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader

TOKEN = "view-token-0123456789abcdef"
SECRET = "s3cret-pass"


@pytest.fixture
def view(tmp_path, free_port):
    """The view of a deployment none of whose components runs; one camera URL holds credentials."""
    data = demo_data()
    data["cameras"]["street-2"]["url"] = f"rtsp://admin:{SECRET}@127.0.0.1:{free_port()}/cam"
    data["edges"]["edge-1"].update(preview_port=free_port(), metrics_port=free_port())
    data["brokers"]["broker-1"].update(metrics_port=free_port(), frontend_port=free_port(), backend_port=free_port())
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    data["ui"] = {"token": TOKEN, "port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    server = serve_view(load_config(path))
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def get(url: str, headers: dict[str, str] | None = None, method: str = "GET"):
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, answer.read(), answer.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def test_the_token_is_required_in_any_of_its_forms(view):
    assert get(f"{view}/")[0] == 401
    assert get(f"{view}/api/overview", {"Authorization": "Bearer wrong-token-0123456789"})[0] == 401
    assert get(f"{view}/?token=wrong-token-0123456789")[0] == 401
    assert get(f"{view}/static/ui.js", {"Cookie": f"{TOKEN_COOKIE}=wrong"})[0] == 401
    status, _, headers = get(f"{view}/?token={TOKEN}")
    assert status == 200
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"{TOKEN_COOKIE}={TOKEN};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert get(f"{view}/static/ui.js", {"Cookie": f"{TOKEN_COOKIE}={TOKEN}"})[0] == 200
    assert get(f"{view}/api/overview", BEARER)[0] == 200


def test_the_view_is_read_only(view):
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert get(f"{view}/api/overview", BEARER, method)[0] == 405


def test_page_and_scripts_ship_in_the_package(view):
    status, body, headers = get(f"{view}/", BEARER)
    assert status == 200 and b'<script src="/static/ui.js"' in body
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert get(f"{view}/static/ui.css", BEARER)[2]["Content-Type"].startswith("text/css")
    for bad in ("../server.py", "..%2Fserver.py", "server.py", ".hidden.js", "nothing.js"):
        assert get(f"{view}/static/{bad}", BEARER)[0] == 404, bad
    assert static_file("ui.js") and static_file("../__init__.py") is None


def test_components_that_do_not_answer_are_shown_with_the_reason(view):
    status, body, _ = get(f"{view}/api/overview", BEARER)
    overview = json.loads(body)
    assert status == 200
    assert {c["camera"] for c in overview["cameras"]} == {"street-1", "street-2"}
    for row in overview["cameras"]:
        assert row["state"] == "unreachable" and row["reason"] == "edge" and "edge-1" in row["error"]
    assert [b["alive"] for b in overview["brokers"]] == [False] and overview["brokers"][0]["error"]
    assert [(w["worker"], w["recognizer"], w["alive"]) for w in overview["workers"]] == [
        ("worker-1", "mobilenetv2-embedder", False)]
    assert {c["state"] for c in overview["components"]} == {"unreachable"}
    assert get(f"{view}/api/cameras/street-1/frame.jpg", BEARER)[0] == 502  # its edge does not answer
    assert get(f"{view}/api/cameras/nowhere/frame.jpg", BEARER)[0] == 404
    assert get(f"{view}/api/events", BEARER)[1] == b"[]"


def test_camera_credentials_never_reach_the_page_or_its_api(view):
    for path in ("/", "/static/ui.js", "/api/overview", "/api/events", "/api/cameras/street-2/recent"):
        body = get(f"{view}{path}", BEARER)[1].decode()
        assert SECRET not in body and "admin" not in body, path


def test_hop_breakdown_is_per_hop_in_path_order():
    lines = [{"latency_ms": {"detect": d, "queue": q, "end_to_end": d + q}} for d, q in ((10, 1), (20, 3), (30, 5))]
    lines.append({"status": "dropped"})  # a drop line has no latency account
    hops = hop_breakdown(lines)
    assert [h["hop"] for h in hops] == ["detect", "queue", "end_to_end"]
    assert hops[0]["p50_ms"] == 20 and hops[0]["p99_ms"] == pytest.approx(29.8) and hops[0]["n"] == 3
    assert hops[2]["p50_ms"] == 23


def test_head_requests_get_headers_only(view):
    status, body, headers = get(f"{view}/static/ui.js", BEARER, "HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) == len(static_file("ui.js"))


def test_without_a_preview_port_a_camera_shows_its_state_and_reason_from_the_edge_metrics(tmp_path, free_port):
    """An edge with no ``preview_port`` (the demo's file) still shows each camera's state and the reason from its
    metrics; that previews are off is said apart, not as the camera's error."""
    data = demo_data()
    data["cameras"]["street-1"]["url"] = str(tmp_path / "nowhere.mp4")
    metrics_port = free_port()
    data["edges"]["edge-1"].update(metrics_port=metrics_port)
    data["ui"] = {"port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = load_config(path)
    reader = CameraReader("edge-1", "street-1", dep.cameras["street-1"], FrameSlots(), threading.Event())
    reader.start()
    reader.join(30)
    assert reader.state == "failed"
    metrics, server = serve_metrics(metrics_port, "127.0.0.1"), serve_view(dep)
    try:
        view = f"http://127.0.0.1:{server.server_address[1]}"
        (row,) = [c for c in json.loads(get(f"{view}/api/overview")[1])["cameras"] if c["camera"] == "street-1"]
    finally:
        server.shutdown()
        metrics.shutdown()
        metrics.server_close()
    assert (row["state"], row["reason"], row["error"]) == ("failed", "missing_file", None)
    assert row["previews"] == "edge edge-1 has no preview_port"
    assert row["no_preview_key"] == "edges.edge-1.preview_port"  # the page shows it as the hint



def test_without_the_edge_extra_the_live_view_serves_and_the_history_names_the_extra(tmp_path, free_port):
    """A broker or centre host installs no psycopg (the edge extra's): the view still starts and serves the live
    pages; the history's routes answer 501 with the one line naming the extra. In a fresh interpreter,
    ``sys.modules["psycopg"] = None`` makes that import fail as it does where the library is not installed."""
    data = demo_data()
    data["ui"] = {"token": TOKEN, "port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    script = f"""
import sys, urllib.error, urllib.request
sys.modules["psycopg"] = None
from vcascade.app.ui.server import serve_view
from vcascade.core.config import load_config
server = serve_view(load_config({str(path)!r}))
base = f"http://127.0.0.1:{{server.server_address[1]}}"
for url in (base + "/", base + "/api/history/search?limit=5"):
    request = urllib.request.Request(url, headers={{"Authorization": "Bearer {TOKEN}"}})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            print(answer.status, answer.read()[:0].decode())
    except urllib.error.HTTPError as exc:
        print(exc.code, exc.read().decode())
server.shutdown()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page, history = done.stdout.strip().splitlines()
    assert page.strip() == "200"
    assert history.startswith("501 ") and "lacks psycopg" in history and "pip install 'vcascade[edge]'" in history
    assert "the history pages answer 501" in done.stderr  # logged once when the view starts
