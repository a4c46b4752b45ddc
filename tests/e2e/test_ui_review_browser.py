"""The review pages in a real browser (issue 29, item 5): headless Chromium from Debian (``/usr/bin/chromium``,
never a downloaded browser) driven by Playwright, against the live view's server over a real history store
written by the history writer with real JPEG evidence cut from the sample video (tests/app/ui_history.py), and a
real edge preview endpoint (real camera readers, the preview hub given the same way-back events the history kept).

The events page lists newest first, filters and pages; the identity page shows a timeline across two cameras with
its gaps; the live view's events click through to both; a camera without a preview shows the key that gives it
one; a camera removed at run time leaves the grid. The events and identity pages are saved as PNG files
(always to the test's folder; with ``VCASCADE_UI_SCREENSHOTS=DIR`` also there: docs/ui_events.png and
docs/ui_identity.png come from this test).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.app.ui_history import CAMERAS, EVENTS, enrol_like, fill_history
from tests.demo import demo_data
from vcascade.app.ui.server import serve_view
from vcascade.core.config import load_config
from vcascade.core.schema.edge_settings import EdgeSettings
from vcascade.core.protocol.wire import TextOutput
from vcascade.edge.analytics.counting import AnalyticsEvent
from vcascade.edge.capture.frames import FrameSlots
from vcascade.edge.capture.source import CameraReader
from vcascade.edge.preview.hub import PreviewHub
from vcascade.edge.preview.server import serve_previews
from vcascade.edge.selection.identity_cache import IdentityCache, TrackIdentity
from vcascade.edge.way_back import EventRaised

pytestmark = pytest.mark.e2e
sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

CHROMIUM = "/usr/bin/chromium"
TOKEN = "review-token-0123456789abcdef"
STEP_MS = 30_000
"""Longest wait for the page to show what a step expects (a loaded 2-core machine), ms."""


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.fail("needs /usr/bin/chromium (scripts/test.sh installs the Debian package)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def review(tmp_path, free_port, bikes_path):
    """(view URL, history, the edge's camera readers, its preview hub): the demo deployment's view over its filled
    history, its edge's preview endpoint up with both cameras (readers not started) and their recent events."""
    history = fill_history(bikes_path)
    data = demo_data()
    data["cameras"] = {name: {"url": str(bikes_path), "edge": "edge-1"} for name in CAMERAS}
    data["edges"]["edge-1"].update(preview_port=free_port(), metrics_port=free_port())
    data["ui"] = {"token": TOKEN, "port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    dep = load_config(path)
    readers = [CameraReader("edge-1", name, dep.cameras[name], FrameSlots(), threading.Event()) for name in CAMERAS]
    hub = PreviewHub(dep.ui, ["person"], IdentityCache("edge-1"))
    for camera in CAMERAS:
        hub.watch(camera)
    for event in history.written:
        hub.take(event)
    edge = serve_previews(EdgeSettings.from_deployment(dep, "edge-1"), hub, lambda: readers)
    view = serve_view(dep)
    yield f"http://127.0.0.1:{view.server_address[1]}", history, readers, hub
    view.shutdown()
    edge.shutdown()


@pytest.fixture
def page(browser, review):
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, bypass_csp=True)  # the test's own scripts
    page = context.new_page()
    page.set_default_timeout(STEP_MS)
    assert page.goto(f"{review[0]}/?token={TOKEN}", wait_until="domcontentloaded").status == 200
    yield page
    context.close()


def screenshot(page, tmp_path: Path, name: str) -> None:
    """Save the page as ``name`` in the test's folder (checked to be a PNG) and in $VCASCADE_UI_SCREENSHOTS."""
    page.screenshot(path=str(tmp_path / name))
    assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    folder = os.environ.get("VCASCADE_UI_SCREENSHOTS")
    if folder:
        shutil.copyfile(tmp_path / name, Path(folder) / name)


def wait_images_loaded(page, selector: str) -> int:
    """Wait until every image matching ``selector`` has loaded with pixels; their number."""
    page.wait_for_function("""(selector) => {
        const images = [...document.querySelectorAll(selector)];
        return images.length > 0 && images.every((img) => img.complete && img.naturalWidth > 0);
    }""", arg=selector)
    return page.locator(selector).count()


def event_rows(page) -> list[list[str]]:
    return page.eval_on_selector_all("#history-events tbody tr",
                                     "(rows) => rows.map((tr) => [...tr.cells].map((td) => td.textContent))")


def test_the_events_page_lists_newest_first_filters_and_pages(page, review, tmp_path):
    view, history, _, _ = review
    page.goto(f"{view}/#/events")
    page.wait_for_selector("#history-events tbody tr")
    rows = event_rows(page)
    assert len(rows) == 25 and page.locator("#page-number").text_content() == "page 1"
    assert [r[0] for r in rows] == sorted((r[0] for r in rows), reverse=True), "newest first"
    assert {r[1] for r in rows} == set(CAMERAS) and {r[3] for r in rows} == {"stop-line", "yard"}
    assert "11" in {r[5] for r in rows} and rows[-1][4] == "person"
    assert wait_images_loaded(page, "#history-events img.thumb") == 25  # each event's picture, served by id
    screenshot(page, tmp_path, "ui_events.png")

    page.click("#older")
    page.wait_for_function("document.querySelector('#page-number').textContent === 'page 2'")
    page.wait_for_function(f"document.querySelectorAll('#history-events tbody tr').length === {EVENTS - 25}")
    assert page.locator("#older").is_hidden() and page.locator("#newer").is_visible()
    assert max(r[0] for r in event_rows(page)) < min(r[0] for r in rows), "page 2 holds the older events"

    page.select_option("#event-filters select[name=camera]", "street-2")
    page.select_option("#event-filters select[name=event]", "zone_enter")
    page.click("#event-filters button[type=submit]")
    page.wait_for_function("location.hash.includes('camera=street-2') && "
                           "document.querySelectorAll('#history-events tbody tr').length === 6")
    assert {(r[1], r[2]) for r in event_rows(page)} == {("street-2", "zone_enter")}

    page.fill("#event-filters input[name=identity]", "abc")
    page.click("#event-filters button[type=submit]")
    page.wait_for_function("document.querySelector('#events-status').textContent.includes('identity')")
    assert page.locator("#events-status").text_content() == "identity 'abc': expected an integer"

    page.goto(f"{view}/#/events?since=3d&camera=street-1")  # a link's since that the choices lack stays shown
    page.wait_for_function("document.querySelector('#event-filters select[name=since]').value === '3d'")
    page.click("#event-filters button[type=submit]")
    page.wait_for_function("location.hash.includes('since=3d') && location.hash.includes('camera=street-1')")

    page.goto(f"{view}/#/events?page=abc")  # a hand-typed page that is no number: the first page, not an error
    page.wait_for_function("document.querySelector('#page-number').textContent === 'page 1' && "
                           "document.querySelectorAll('#history-events tbody tr').length === 25")


def test_the_identity_page_shows_its_timeline_across_two_cameras_with_the_gaps(page, review, tmp_path):
    view, _, _, _ = review
    page.goto(f"{view}/#/identity/7")
    page.wait_for_selector("#timeline .visit")
    visits = page.eval_on_selector_all("#timeline .visit", "(items) => items.map((li) => li.dataset.camera)")
    assert visits == ["street-1", "street-2", "street-1"]
    gaps = page.eval_on_selector_all("#timeline .gap", "(items) => items.map((li) => li.textContent)")
    assert gaps == ["9 min 0 s later, from street-1 to street-2", "10 min 0 s later, from street-2 to street-1"]
    summary = page.locator("#identity-summary").text_content()
    assert summary.startswith("5 sightings on 2 cameras (merged from 9)")
    assert wait_images_loaded(page, "#timeline img.thumb") == 5
    screenshot(page, tmp_path, "ui_identity.png")


def test_similar_under_a_thumbnail_lists_the_identities_like_its_crop(page, review, tmp_path):
    view, history, _, _ = review
    ref = enrol_like(load_config(tmp_path / "deploy.yaml"), history)
    page.goto(f"{view}/#/identity/7")
    page.click(f'#timeline figure:has(img[alt="result {ref}"]) a.similar')
    page.wait_for_selector("#like-status:not([hidden]) a.identity")
    assert page.evaluate("location.hash") == f"#/events?like={ref}"
    assert page.locator("#like-status").text_content() == f"identities like the crop of {ref}: 7 (1.00)"
    assert [row[5] for row in event_rows(page)] == ["7"]  # the events of identity 7
    page.click("#like-status a.identity")
    page.wait_for_selector("#timeline .visit")


def test_the_live_events_click_through_to_the_identity_and_events_pages(page, review):
    view, history, _, _ = review
    page.wait_for_selector("#events li.event-row")
    assert "{" not in page.locator("#events").text_content(), "events are rows, not JSON"
    first_of_7 = next(e for e in history.written if isinstance(e, EventRaised) and e.identity is not None
                      and e.identity.gallery_identity() == 7)  # fmt: skip
    page.click(f'#events li[data-event="{first_of_7.event_id}"] a.identity')
    page.wait_for_selector("#timeline .visit")
    assert page.evaluate("location.hash") == "#/identity/7"

    page.goto(f"{view}/#/")
    last = [e for e in history.written if isinstance(e, EventRaised)][-1]
    page.click(f'#events li[data-event="{last.event_id}"] a.history-link')
    page.wait_for_selector(f'#history-events tr.focus[data-ref="{last.event_id}"]')
    assert page.locator("#history-events tbody tr").count() == EVENTS // 2  # the camera's events


def test_a_camera_page_with_events_does_not_scroll_sideways(page, review):
    hub = review[3]
    hub.watch("street-1")
    reading = TrackIdentity(TextOutput(text="W" * 160, text_score=0.9), "roi", 1000.0)  # a long sign, no spaces
    hub.take(EventRaised("street-1", AnalyticsEvent("zone_enter", "yard", 5, "car", 1000.0, time.time() * 1000.0),
                         reading, "ev-long-reading", None))  # fmt: skip
    page.set_viewport_size({"width": 900, "height": 800})
    page.goto(f"{review[0]}/#/camera/street-1", wait_until="domcontentloaded")  # its MJPEG stream never ends loading
    page.wait_for_selector('#camera-events li[data-event="ev-long-reading"]')
    assert "{" not in page.locator("#camera-events").text_content()
    assert "stop-line" in page.locator("#camera-events").text_content()
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def test_a_camera_removed_at_run_time_leaves_the_grid(page, review):
    _, _, readers, _ = review
    page.wait_for_selector('.tile[data-camera="street-2"]')
    readers[1].removal = "closed"  # what the edge's camera set reports once a removal's books are closed
    page.wait_for_selector('.tile[data-camera="street-2"]', state="detached")
    assert page.locator(".tile").count() == 1


def test_a_camera_without_a_preview_shows_the_key_that_gives_it_one(browser, tmp_path, free_port):
    data = demo_data()
    data["ui"] = {"port": free_port()}
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(data))
    view = serve_view(load_config(path))
    context = browser.new_context(bypass_csp=True)
    try:
        page = context.new_page()
        page.set_default_timeout(STEP_MS)
        page.goto(f"http://127.0.0.1:{view.server_address[1]}/")
        page.wait_for_selector('.tile[data-camera="street-1"] .hint')
        assert "edges.edge-1.preview_port" in page.locator('.tile[data-camera="street-1"] .hint').text_content()
        assert page.locator(".tile img").count() == 0, "no broken image"
        page.goto(f"http://127.0.0.1:{view.server_address[1]}/#/camera/street-1")
        page.wait_for_selector("#stream-hint:not([hidden])")
        assert page.locator("#stream").is_hidden()
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    finally:
        context.close()
        view.shutdown()
