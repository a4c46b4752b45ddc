"""The live view's protective headers in a real browser (issue 28, item 2): headless Chromium from Debian
(``/usr/bin/chromium``). Another site cannot frame the view (``frame-ancestors 'none'``), answers are
``nosniff``, and a page whose name was rebound to 127.0.0.1 (DNS rebinding, played with Chromium's
``--host-resolver-rules``) is answered 421 and reads nothing."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
import yaml

from tests.demo import demo_data
from vcascade.app.ui.server import serve_view
from vcascade.core.config import load_config
from vcascade.core.telemetry.http_server import HTTP_REFUSED

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

CHROMIUM = "/usr/bin/chromium"
REBOUND = "rebind.attacker.example"


@pytest.fixture
def view(tmp_path, free_port):
    """The view (no token, loopback) of a deployment none of whose components runs."""
    data = demo_data()
    data["edges"]["edge-1"].update(metrics_port=free_port())
    data["brokers"]["broker-1"].update(metrics_port=free_port(), frontend_port=free_port(), backend_port=free_port())
    data["workers"]["worker-1"]["metrics_port"] = free_port()
    data["ui"] = {"port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    server = serve_view(load_config(path))
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def framing_site(tmp_path, view):
    """Another origin (a second loopback port, stdlib server) whose page frames the view."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text(
        f'<html><body><iframe id="v" src="http://127.0.0.1:{view}/" width="800" height="600"></iframe></body></html>'
    )
    handler = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: handler(*a, directory=str(tmp_path / "site")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_address[1]}/index.html"
    server.shutdown()
    server.server_close()


@pytest.fixture
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.fail("needs /usr/bin/chromium (scripts/test.sh installs the Debian package)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"],
        )  # fmt: skip
        yield chromium
        chromium.close()


def test_the_page_and_its_api_carry_nosniff_and_frame_ancestors(browser, view):
    page = browser.new_page()
    for path in ("/", "/static/ui.js", "/api/overview", "/nope"):
        answer = page.goto(f"http://127.0.0.1:{view}{path}")
        headers = answer.headers
        assert headers.get("x-content-type-options") == "nosniff", path
        assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), path
    page.close()


def test_another_site_cannot_frame_the_view(browser, view, framing_site):
    page = browser.new_page()
    page.goto(framing_site, wait_until="load")
    page.wait_for_timeout(1000)
    assert page.locator("#v").count() == 1 and len(page.frames) == 2  # the iframe is there ...
    assert "vcascade live view" not in [f.title() for f in page.frames]  # ... and holds no view (an error page)
    page.close()


def test_a_rebound_name_gets_421_and_no_data(browser, view):
    before = HTTP_REFUSED.labels("ui", "host")._value.get()
    page = browser.new_page()
    answer = page.goto(f"http://{REBOUND}:{view}/api/overview")
    assert answer.status == 421
    assert "cameras" not in answer.text()
    assert HTTP_REFUSED.labels("ui", "host")._value.get() >= before + 1
    assert page.goto(f"http://localhost:{view}/api/overview").status == 200  # the same page by a loopback name
    page.close()
