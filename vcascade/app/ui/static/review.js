// vcascade review pages over the history (vcascade/app/ui/history_api.py): the events page (#/events?FILTERS,
// newest first, a page of PAGE_SIZE; like=REF: the events of the identities like row REF's crop, listed above) and an
// identity's page (#/identity/ID: its timeline across cameras, oldest
// first, with the gaps between cameras). Loaded before ui.js, which routes to showEvents and showIdentity.
"use strict";

const PAGE_SIZE = 25;
const TIMELINE_LIMIT = 500;  // the API's largest page
const EVENT_TYPES = ["line_cross", "zone_enter", "zone_exit", "zone_dwell"];
const FILTERS = ["camera", "event", "line", "zone", "class", "identity", "text", "since", "like"];

function timeText(ms) { return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC"); }

function spanText(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function identityLink(identity) {
  return identity === null || identity === undefined ? "" :
    el("a", { href: `#/identity/${identity}`, class: "identity" }, String(identity));
}

function thumbnail(row) {
  const src = row.kind === "event" ? row.frame_url || row.crop_url : row.crop_url || row.frame_url;  // the scene of an event
  if (!src) return el("span", { class: "muted" }, "no picture");
  const image = el("a", { href: row.frame_url || row.crop_url, target: "_blank", rel: "noopener" },
    el("img", { class: "thumb", src, alt: `${row.kind} ${row.ref}` }));
  if (!row.crop_url) return image;
  // "find similar": the identities whose appearance is nearest to this crop (the API embeds it)
  return el("span", { class: "thumb-box" }, image,
    el("a", { href: `#/events?${new URLSearchParams({ like: row.ref })}`, class: "similar" }, "similar"));
}

function likeList(like, ref) {
  // the identities a like-query found, most similar first, each a link to its page
  if (!like.length) return [`no identity is like the crop of ${ref} (at or above the recognizer's match threshold)`];
  const items = like.map((n) => el("span", {}, identityLink(n.identity), ` (${n.similarity.toFixed(2)})`));
  return [`identities like the crop of ${ref}: `, ...items.flatMap((item, i) => (i ? [", ", item] : [item]))];
}

async function history(params) {
  const answer = await fetch(`/api/history/search?${params}`, { credentials: "same-origin" });
  const body = await answer.text();
  if (!answer.ok) throw new Error(body.trim() || `HTTP ${answer.status}`);
  return JSON.parse(body);
}

function showOnly(id) {
  for (const main of document.querySelectorAll("main")) main.hidden = main.id !== id;
}

// ------------------------------------------------------------------ events page

function eventFilters(hashQuery) {
  const given = new URLSearchParams(hashQuery);
  const form = document.getElementById("event-filters");
  for (const name of FILTERS) {
    const field = form.elements[name], value = given.get(name) || "";
    if (field.tagName === "SELECT" && value && ![...field.options].some((o) => o.value === value)) {
      field.append(el("option", { value }, value));  // a value from a link that the choices lack: shown, not dropped
    }
    field.value = value;
  }
  return given;
}

async function fillCameraChoices() {
  const select = document.getElementById("event-filters").elements.camera;
  const overview = await getJson("/api/overview");
  const have = new Set([...select.options].map((o) => o.value));
  select.append(...overview.cameras.filter((c) => !have.has(c.camera)).map((c) => el("option", { value: c.camera }, c.camera)));
}

async function showEvents(hashQuery) {
  showOnly("events-view");
  await fillCameraChoices().catch(() => {});
  const given = eventFilters(hashQuery);
  const page = Math.max(0, Number.parseInt(given.get("page"), 10) || 0);  // a hand-typed page=abc: the first
  const focus = given.get("focus");
  const query = new URLSearchParams({ kind: "event", limit: PAGE_SIZE, offset: page * PAGE_SIZE });
  for (const name of FILTERS) if (given.get(name)) query.set(name, given.get(name));
  const body = document.querySelector("#history-events tbody");
  const status = document.getElementById("events-status");
  document.getElementById("like-status").hidden = true;
  let answer;
  try { answer = await history(query); } catch (err) {
    body.replaceChildren(); status.textContent = err.message; status.className = "problem"; return;
  }
  status.className = "";
  const similar = document.getElementById("like-status");
  similar.hidden = !answer.like;
  similar.replaceChildren(...(answer.like ? likeList(answer.like, given.get("like")) : []));
  status.textContent = answer.rows.length ? `events ${page * PAGE_SIZE + 1}–${page * PAGE_SIZE + answer.rows.length}, newest first`
    : "no events match";
  body.replaceChildren(...answer.rows.map((row) => {
    const tr = el("tr", { "data-ref": row.ref },
      el("td", {}, timeText(row.capture_unix_ms)), el("td", {}, row.camera),
      el("td", {}, row.event_type + (row.direction ? ` (${row.direction})` : "")), el("td", {}, row.place || ""),
      el("td", {}, row.class_name), el("td", {}, identityLink(row.identity)), el("td", {}, row.text || ""),
      el("td", {}, thumbnail(row)));
    if (row.ref === focus) tr.classList.add("focus");
    return tr;
  }));
  pager(given, page, answer.more);
}

function pager(given, page, more) {
  const link = (to) => { const next = new URLSearchParams(given); next.set("page", to); next.delete("focus"); return `#/events?${next}`; };
  const newer = document.getElementById("newer"), older = document.getElementById("older");
  newer.hidden = page === 0; newer.href = link(page - 1);
  older.hidden = !more; older.href = link(page + 1);
  document.getElementById("page-number").textContent = `page ${page + 1}`;
}

function applyEventFilters(submit) {
  submit.preventDefault();
  const query = new URLSearchParams();
  for (const [name, value] of new FormData(submit.target)) if (String(value).trim()) query.set(name, String(value).trim());
  location.hash = `#/events?${query}`;
}

// ------------------------------------------------------------------ identity page

function visits(rows) {
  // consecutive rows on one camera, oldest first: {camera, rows, first, last}
  const out = [];
  for (const row of rows) {
    const last = out[out.length - 1];
    if (last && last.camera === row.camera) { last.rows.push(row); last.last = row.capture_unix_ms; continue; }
    out.push({ camera: row.camera, rows: [row], first: row.capture_unix_ms, last: row.capture_unix_ms });
  }
  return out;
}

async function showIdentity(identity) {
  showOnly("identity-view");
  document.getElementById("identity-title").textContent = `Identity ${identity}`;
  const summary = document.getElementById("identity-summary");
  const list = document.getElementById("timeline");
  let answer;
  try { answer = await history(new URLSearchParams({ identity, limit: TIMELINE_LIMIT })); } catch (err) {
    list.replaceChildren(); summary.textContent = err.message; summary.className = "problem"; return;
  }
  summary.className = "";
  const rows = answer.rows.slice().reverse();  // oldest first
  if (!rows.length) { list.replaceChildren(); summary.textContent = "not in the history"; return; }
  const seen = visits(rows);
  const cameras = new Set(rows.map((r) => r.camera));
  const merged = rows[0].merged_from.length ? ` (merged from ${rows[0].merged_from.join(", ")})` : "";
  const count = answer.more ? `the latest ${rows.length}` : `${rows.length}`;  // the API's largest page: say it is not all
  summary.textContent = `${count} sightings on ${cameras.size} camera${cameras.size > 1 ? "s" : ""}${merged}, ` +
    `${timeText(rows[0].capture_unix_ms)} to ${timeText(rows[rows.length - 1].capture_unix_ms)}`;
  const items = [];
  seen.forEach((visit, i) => {
    if (i > 0) {
      const gap = visit.first - seen[i - 1].last;
      items.push(el("li", { class: "gap" }, `${spanText(gap)} later, from ${seen[i - 1].camera} to ${visit.camera}`));
    }
    items.push(el("li", { class: "visit", "data-camera": visit.camera },
      el("div", { class: "visit-head" }, el("strong", {}, visit.camera), " ",
        `${timeText(visit.first)}${visit.last > visit.first ? ` – ${spanText(visit.last - visit.first)}` : ""}`,
        ` · ${visit.rows.length} sighting${visit.rows.length > 1 ? "s" : ""}`),
      el("div", { class: "thumbs" }, ...visit.rows.map((row) => el("figure", {}, thumbnail(row),
        el("figcaption", {}, `${new Date(row.capture_unix_ms).toISOString().slice(11, 19)} ` +
          (row.event_type ? `${row.event_type} ${row.place}` : row.text || row.class_name)))))));
  });
  list.replaceChildren(...items);
}
