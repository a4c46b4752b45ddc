// vcascade live view: a framework-free page over the view's JSON API (vcascade/app/ui/server.py).
// Grid: /api/overview every second, each camera's preview every 1/preview_fps s. Camera page (#/camera/NAME):
// an MJPEG stream, its recent ROIs' latency per hop, its recent result lines and events. The review pages
// (#/events, #/identity/ID) are review.js's.
"use strict";

const FAULT_STATES = new Set(["stalled", "backing_off", "failed", "unreachable"]);  // drawn red, with the reason
const NO_NEW_FRAMES = new Set([...FAULT_STATES, "ended"]);  // the last frame stays; nothing new to ask for
const OVERVIEW_MS = 1000;
let previewFps = 2;
let timers = [];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function num(value, digits = 1) { return value === null || value === undefined ? "-" : Number(value).toFixed(digits); }

function every(ms, fn) { fn(); timers.push(setInterval(fn, ms)); }

async function getJson(path) {
  const answer = await fetch(path, { credentials: "same-origin" });
  if (!answer.ok) throw new Error(`${path}: HTTP ${answer.status}`);
  return answer.json();
}

// ------------------------------------------------------------------ grid

function tileOf(row) {
  let tile = document.querySelector(`.tile[data-camera="${CSS.escape(row.camera)}"]`);
  if (tile) return tile;
  tile = el("div", { class: "tile", "data-camera": row.camera },
    el("a", { href: `#/camera/${encodeURIComponent(row.camera)}` },
      el("img", { class: "frame", alt: `camera ${row.camera}` })),
    el("div", { class: "meta" },
      el("span", { class: "name" }, row.camera), " ", el("span", { class: "state" }), " ",
      el("span", { class: "edge stats" }, `on ${row.edge}`),
      el("div", { class: "reason" }), el("div", { class: "stats" })));
  document.getElementById("cameras").append(tile);
  return tile;
}

function previewHint(tile, key) {
  // a camera whose edge serves no previews: say which key turns them on instead of a broken image
  const link = tile.querySelector("a");
  if (!key || link.querySelector(".hint")) return;
  link.replaceChildren(el("div", { class: "hint" },
    el("span", {}, "No preview: its edge serves none. Set ", el("code", {}, key), " to see this camera.")));
}

function removeGoneTiles(cameras) {
  const names = new Set(cameras.map((c) => c.camera));
  for (const tile of document.querySelectorAll(".tile")) if (!names.has(tile.dataset.camera)) tile.remove();
}

function renderCamera(row) {
  const tile = tileOf(row);
  previewHint(tile, row.no_preview_key);
  const fault = FAULT_STATES.has(row.state);
  tile.classList.toggle("fault", fault);
  tile.dataset.state = row.state;
  const state = tile.querySelector(".state");
  state.textContent = row.state;
  state.className = `state ${row.state === "streaming" ? "streaming" : fault ? "fault" : ""}`;
  const why = row.state === "streaming" ? "" : [row.reason, row.error || row.detail].filter(Boolean).join(": ");
  tile.querySelector(".reason").textContent = why;
  const drops = Object.entries(row.drops_by_reason || {}).map(([r, n]) => `${r}=${n}`).join(",");
  tile.querySelector(".stats").textContent =
    `${num(row.fps)} fps · ${num(row.rois_per_s)} ROIs/s · drops ${row.drops ?? "-"}${drops ? ` (${drops})` : ""}` +
    ` · e2e p50 ${num(row.e2e_p50_ms)} / p99 ${num(row.e2e_p99_ms)} ms`;
}

function fillTable(id, rows, cells) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map((row) => el("tr", {}, ...cells(row).map((c) => el("td", {}, c ?? "-")))));
}

function drops(byReason) {
  return Object.entries(byReason || {}).map(([r, n]) => `${r}=${n}`).join(", ") || "0";
}

async function refreshOverview() {
  let data;
  try { data = await getJson("/api/overview"); } catch (err) {
    document.getElementById("updated").textContent = `view unreachable: ${err.message}`; return;
  }
  previewFps = data.preview_fps || previewFps;
  const shown = data.cameras.filter((c) => c.removal !== "closed");  // removed at run time: leaves the grid
  removeGoneTiles(shown);
  shown.forEach(renderCamera);
  fillTable("brokers", data.brokers, (b) => [b.broker, b.alive ? "yes" : `no: ${b.error}`, b.workers, b.edges,
    b.queue_depth, b.in_flight, num(b.dispatched_per_s), b.alive ? drops(b.drops_by_reason) : "-"]);
  fillTable("workers", data.workers, (w) => [w.worker, w.recognizer, w.alive ? "yes" : `no: ${w.error}`, w.credits, w.in_flight,
    num(w.results_per_s), (w.stages || []).map((s) => `${s.stage} ${num(s.busy_pct, 0)}% / ${num(s.mean_ms)}`).join("  ")]);
  fillTable("components", data.components, (c) => [c.kind, c.name, c.address, c.why ? `${c.state}: ${c.why}` : c.state]);
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function refreshFrame(img, camera) {
  const answer = await fetch(`/api/cameras/${encodeURIComponent(camera)}/frame.jpg`, { credentials: "same-origin" });
  if (answer.status !== 200) return;
  const old = img.src;
  img.src = URL.createObjectURL(await answer.blob());
  img.dataset.frameSeq = answer.headers.get("X-Frame-Seq") || "";
  img.dataset.boxes = answer.headers.get("X-Boxes") || "[]";  // [[x1, y1, x2, y2], ...] in preview pixels
  if (old.startsWith("blob:")) URL.revokeObjectURL(old);
}

function refreshFrames() {
  for (const tile of document.querySelectorAll(".tile")) {
    const img = tile.querySelector("img");
    if (NO_NEW_FRAMES.has(tile.dataset.state) || !img) continue;
    refreshFrame(img, tile.dataset.camera).catch(() => {});
  }
}

async function refreshEvents() {
  const events = await getJson("/api/events");
  if (!events.length) return;  // keep the note saying why there are none
  document.getElementById("events").replaceChildren(...events.slice().reverse().map(eventRow));
}

function showGrid() {
  showOnly("grid-view");
  every(OVERVIEW_MS, refreshOverview);
  every(2 * OVERVIEW_MS, () => refreshEvents().catch(() => {}));
  every(1000 / previewFps, refreshFrames);
}

// ------------------------------------------------------------------ one camera

function clock(ms) { return ms ? new Date(ms).toLocaleTimeString() : ""; }

function eventRow(e) {
  // one live event as a row: time, camera, what and where, who; links to its history and identity
  const place = e.line || e.zone || "";
  const history = new URLSearchParams({ camera: e.camera, focus: e.event_id });
  return el("li", { class: "event-row", "data-event": e.event_id || "" },
    el("span", { class: "row-time" }, clock(e.capture_ts_ms)), " ", el("span", { class: "row-what" },
      `${e.camera} · ${e.type} ${place}${e.direction ? ` (${e.direction})` : ""}`),
    " ", `${e.class || ""} #${e.track_id}`,
    ...(e.identity_id !== null && e.identity_id !== undefined ? [" · identity ", identityLink(e.identity_id)] : []),
    e.text ? ` · "${e.text}"` : "", e.dwell_s ? ` · ${num(e.dwell_s)} s` : "", " · ",
    el("a", { href: `#/events?${history}`, class: "history-link" }, "history"));
}

function resultRow(r) {
  // one result line as a row: time, class and track, status, identity or text, end-to-end latency
  const who = r.identity_id !== null && r.identity_id !== undefined && r.identity_id >= 0
    ? [" · identity ", identityLink(r.identity_id), r.similarity ? ` (${num(r.similarity, 2)})` : ""] : [];
  const e2e = r.latency_ms && r.latency_ms.end_to_end;
  return el("li", {}, el("span", { class: "row-time" }, clock(r.capture_unix_ms)), " ",
    el("span", { class: "row-what" }, `${r.class_name} #${r.track_id}`), r.status === "ok" ? "" : ` · ${r.status}`,
    r.reason ? ` (${r.reason})` : "", ...who, r.text ? ` · "${r.text}"` : "", r.recognizer ? ` · ${r.recognizer}` : "",
    e2e ? ` · ${num(e2e, 0)} ms` : "");
}

async function refreshCamera(camera) {
  const [overview, recent] = await Promise.all([
    getJson("/api/overview"), getJson(`/api/cameras/${encodeURIComponent(camera)}/recent`).catch(() => null)]);
  const row = overview.cameras.find((c) => c.camera === camera);
  if (row && row.no_preview_key) {
    const hint = document.getElementById("stream-hint");
    document.getElementById("stream").hidden = true;
    hint.hidden = false;
    hint.replaceChildren("No preview: its edge serves none. Set ", el("code", {}, row.no_preview_key), " to see this camera.");
  }
  if (row) {
    const why = row.state === "streaming" ? "" : ` (${[row.reason, row.error || row.detail].filter(Boolean).join(": ")})`;
    document.getElementById("camera-state").textContent =
      `${row.state}${why} · ${num(row.fps)} fps · ${num(row.rois_per_s)} ROIs/s · drops ${row.drops ?? "-"}`;
  }
  if (!recent) return;
  fillTable("hops", recent.hops, (h) => [h.hop, num(h.p50_ms), num(h.p99_ms), h.n]);
  const lines = recent.results.slice(-30).reverse().map(resultRow);
  document.getElementById("results").replaceChildren(...lines);
  const events = recent.events.slice(-30).reverse().map(eventRow);
  document.getElementById("camera-events").replaceChildren(...events);
}

function showCamera(camera) {
  showOnly("camera-view");
  document.getElementById("camera-title").textContent = camera;
  const stream = document.getElementById("stream");
  stream.hidden = false;
  document.getElementById("stream-hint").hidden = true;
  stream.src = `/api/cameras/${encodeURIComponent(camera)}/stream.mjpg`;
  every(OVERVIEW_MS, () => refreshCamera(camera).catch(() => {}));
}

// ------------------------------------------------------------------ routing

function route() {
  timers.forEach(clearInterval);
  timers = [];
  const stream = document.getElementById("stream");
  stream.removeAttribute("src");  // closes the MJPEG connection when leaving a camera page
  const camera = location.hash.match(/^#\/camera\/(.+)$/);
  const events = location.hash.match(/^#\/events(?:\?(.*))?$/);
  const identity = location.hash.match(/^#\/identity\/(-?\d+)$/);
  if (camera) showCamera(decodeURIComponent(camera[1]));
  else if (events) showEvents(events[1] || "");
  else if (identity) showIdentity(identity[1]);
  else showGrid();
}

document.getElementById("event-filters").addEventListener("submit", applyEventFilters);

window.addEventListener("hashchange", route);
route();
