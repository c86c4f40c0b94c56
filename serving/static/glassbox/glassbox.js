// The glassbox page (docs/glassbox.md): asks /chat, then shows the answer, each citation with its provenance and
// whether its source still holds it (/chunks/{id}?verify=true), the registry rows with their verification age, and
// the places on an SVG map drawn from /gis/query?format=geojson over the county polygons of the served index version
// (/glassbox/counties.geojson, written by the GBIM export from spatial.counties); without them, the places alone.
// A version picker (filled from GET /versions) or an "as of" date-time / commit asks an older version: both are sent
// as `version` / `as_of` on /chat, and an answer from a version CURRENT no longer names says so (docs/versions.md).
// Every value from the API is written with textContent (or as an SVG attribute), never parsed as HTML: passages
// and registry rows are untrusted text.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const DAY_MS = 86400000;
const manifests = new Map(); // per API key: the served manifest (repository names of the sources)
const published = new Map(); // version id -> when it was published (GET /versions), for "answered from ..."

function $(id) {
  return document.getElementById(id);
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  return node;
}

function headers(json) {
  const h = { accept: "application/json" };
  if (json) h["content-type"] = "application/json";
  const key = $("key").value.trim();
  if (key) h["x-api-key"] = key; // the same keys as the API (docs/security.md)
  return h;
}

async function api(path, body) {
  const init = body === undefined
    ? { headers: headers(false) }
    : { method: "POST", headers: headers(true), body: JSON.stringify(body) };
  const response = await fetch(path, init);
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const detail = data && (data.message || data.detail);
    const text = typeof detail === "string" ? detail : detail ? JSON.stringify(detail) : "";
    const error = new Error(`${path.split("?")[0]} answered ${response.status}${text ? ": " + text : ""}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function clear() {
  for (const id of ["answer", "route", "citations", "registry-note", "map", "map-note", "answered-from"]) {
    $(id).replaceChildren();
  }
  $("answered-from").hidden = true;
  $("registry").tBodies[0].replaceChildren();
}

// The version picker: every kept version the key may list (GET /versions), newest first, "current" on top. Read
// again when the key changes; the chosen version stays chosen while it is still kept.
async function loadVersions() {
  const picker = $("version");
  const chosen = picker.value;
  let listing = null;
  try {
    listing = await api("/versions");
  } catch (_) {
    listing = null; // an unknown key: the answer will show the 401
  }
  const options = [el("option", "current")];
  options[0].value = "";
  for (const v of (listing && listing.versions) || []) published.set(v.version_id, v.published_at);
  for (const v of [...((listing && listing.versions) || [])].reverse()) {
    const option = el("option", `${v.published_at} · ${v.version_id}${v.current ? " (current)" : ""}`);
    option.value = v.version_id;
    options.push(option);
  }
  picker.replaceChildren(...options);
  picker.value = options.some((o) => o.value === chosen) ? chosen : "";
  picker.dataset.loaded = String(options.length - 1);
}

// "Answered from version X (published ...), not current": shown when the request named a version or as_of.
async function renderAnsweredFrom(chat) {
  const from = chat.answered_from;
  if (!from) return;
  if (!published.has(from.version_id)) await loadVersions();
  const when = published.get(from.version_id);
  const line = $("answered-from");
  line.textContent = `Answered from version ${from.version_id}` + (when ? ` (published ${when})` : "")
    + (from.current ? ", the current one." : ", not current: the memory as it was then.")
    + (from.asked ? ` Asked for: ${from.asked}.` : "");
  line.className = from.current ? "answered-from" : "answered-from older";
  line.dataset.current = String(from.current);
  line.hidden = false;
}

function manifestFor(key) {
  if (!manifests.has(key)) manifests.set(key, api("/manifest").catch(() => ({})));
  return manifests.get(key);
}

// The served version's county polygons; none (a 404: the version has no spatial.counties) is not an error, the map
// then shows the places alone. Asked each time: a new version may add or change them.
async function counties() {
  try {
    const response = await fetch("/glassbox/counties.geojson", { headers: headers(false) });
    const data = response.ok ? await response.json() : null;
    return data && Array.isArray(data.features) ? data : { features: [] };
  } catch (_) {
    return { features: [] };
  }
}

function badge(text, className) {
  return el("span", text, `badge ${className || ""}`);
}

function shortCommit(commit) {
  return commit ? String(commit).slice(0, 12) : "?";
}

// "+13045550104;ext=2" (E.164 in the registry's data) as people write it: "(304) 555-0104 ext. 2"
function displayPhone(value) {
  const m = /^\+1(\d{3})(\d{3})(\d{4})(?:;ext=(\d+))?$/.exec(value || "");
  if (!m) return value || "";
  return `(${m[1]}) ${m[2]}-${m[3]}${m[4] ? " ext. " + m[4] : ""}`;
}

function ageDays(iso) {
  const t = Date.parse(iso || "");
  return Number.isNaN(t) ? null : Math.max(0, Math.floor((Date.now() - t) / DAY_MS));
}

function renderAnswer(chat) {
  $("answer").textContent = chat.answer;
  const route = chat.route;
  const rows = [
    ["response", `${route.response_class} (${chat.backend}${chat.model ? ", " + chat.model : ""})`],
    ["why", route.reason],
    ["intents", route.intents.join(", ")],
    ["place", (route.filters.county || []).join(", ") || "none"],
    ["places named", (route.places || []).map((p) => p.name + (p.corrected_from ? ` (corrected "${p.corrected_from}")` : "")
      + (p.counties && p.counties.length > 1 ? ` (spans ${p.counties.join(", ")})` : "")).join("; ") || "none"],
    ["West-Virginia-scoped", route.wv_scoped ? "yes: " + route.wv_reasons.join("; ") : "no"],
    ["sources queried", route.sources_queried.join(", ")],
    ["web", route.web.reason],
    ["index version", chat.index_version + (chat.answered_from && !chat.answered_from.current ? " (not current)" : "")],
  ];
  // one program, two stores: where a map place or passage disagrees with the registry (authoritative for contacts)
  for (const link of route.links || []) {
    for (const c of link.conflicts || []) {
      rows.push([`conflict: ${link.name}`, `${c.field}: registry "${c.registry}"; ${c.source} says "${c.other}" (the registry is used)`]);
    }
  }
  for (const [term, value] of rows) {
    $("route").append(el("dt", term), el("dd", value));
  }
}

// "page 3 of flyer.pdf" (or "pages 3–4 of …") for a chunk of a PDF (docs/documents.md), else null
function pageLabel(record) {
  const meta = record.metadata || {};
  if (!Number.isInteger(meta.page)) return null;
  const name = String((record.provenance || {}).path || "").split("/").pop();
  const pages = Number.isInteger(meta.page_end) ? `pages ${meta.page}–${meta.page_end}` : `page ${meta.page}`;
  return `${pages} of ${name}`;
}

function provenanceLine(parts) {
  return el("div", parts.filter(Boolean).join(" · "), "prov");
}

function renderCitations(chat, manifest) {
  const evidence = chat.evidence;
  const chunks = [];
  const list = $("citations");
  if (!chat.citations.length) list.append(el("li", "The answer cites nothing."));
  for (const c of chat.citations) {
    const item = el("li");
    item.dataset.kind = c.kind;
    item.dataset.id = c.id;
    const head = el("div", null, "cite-head");
    head.append(el("span", `[${c.n}]`, "ref"), el("span", c.kind, "kind"));
    item.append(head);
    if (c.kind === "chunk") {
      const p = evidence.unstructured.find((x) => x.chunk_id === c.id) || { provenance: c.provenance || {} };
      const source = (manifest.sources || {})[p.source] || {};
      const prov = p.provenance || {};
      head.append(el("span", (p.heading_path || []).join(" › ") || prov.path));
      const status = badge("checking…", "checking");
      status.dataset.role = "currency";
      head.append(status);
      item.append(provenanceLine([
        `repository ${source.repo || "?"}`, `source ${p.source || "?"}`, `commit ${shortCommit(prov.commit)}`,
        `path ${prov.path || "?"}`, prov.timestamp ? `committed ${prov.timestamp}` : null,
        p.collection ? `collection ${p.collection}` : null, p.seal_state ? `seal ${p.seal_state}` : null,
      ]));
      if (p.content !== undefined) item.append(el("blockquote", p.content, "passage"));
      chunks.push({ id: c.id, status, item });
    } else if (c.kind === "registry") {
      const row = evidence.registry.find((x) => x.local_resource_id === c.id) || {};
      head.append(el("span", c.name || row.name), badge(c.verification_status, c.verification_status));
      const age = ageDays(row.last_verified_at);
      item.append(provenanceLine([
        `registry local_resources`, `id ${c.id}`,
        row.last_verified_at ? `verified ${row.last_verified_at} (${age} days ago)` : "never verified",
      ]));
    } else if (c.kind === "entity") {
      const e = evidence.spatial.find((x) => x.entity_id === c.id) || {};
      const prov = c.provenance || {};
      head.append(el("span", c.label));
      item.append(provenanceLine([
        `GBIM ${e.dataset || ""}`, `source ${prov.source || "?"}`, `table ${prov.table || "?"}`, `key ${prov.pk || "?"}`,
        e.county ? `${e.county} County` : null,
      ]));
    } else if (c.kind === "fact") {
      const f = evidence.structured_facts.find((x) => x.subject === c.id && x.predicate === c.predicate) || {};
      head.append(el("span", `${f.subject_label || c.id} ${c.predicate} ${c.object}`));
      item.append(provenanceLine(Object.entries(c.provenance || {}).map(([k, v]) => `${k} ${v}`)));
    } else if (c.kind === "web") {
      head.append(el("span", c.title), badge("web: not authoritative", "stale"));
      const link = el("a", c.id, "prov");
      if (/^https?:\/\//i.test(c.id)) link.href = c.id; // only http(s): never a javascript: or data: URL
      link.rel = "noopener noreferrer nofollow";
      item.append(link);
    }
    list.append(item);
  }
  return chunks;
}

async function verifyChunks(chunks) {
  const labels = { current: "current", changed: "changed since indexed", missing: "no longer in its source" };
  await Promise.all(chunks.map(async ({ id, status, item }) => {
    try {
      const record = await api(`/chunks/${encodeURIComponent(id)}?verify=true`);
      const where = pageLabel(record);
      if (where) {
        item.dataset.page = where;
        item.querySelector(".cite-head").insertBefore(el("span", where, "page"), status);
      }
      const v = record.verification || {};
      status.textContent = labels[v.status] || v.status || "unknown";
      status.className = `badge ${v.status || ""}`;
      status.title = v.detail || "";
      item.dataset.currency = v.status || "unknown";
      if (v.status !== "current" && v.detail) {
        item.append(provenanceLine([v.detail]));
      }
    } catch (error) {
      status.textContent = error.status === 404 ? "not in the current version" : "could not check";
      status.className = "badge missing";
      item.dataset.currency = "unknown";
    }
  }));
}

function renderRegistry(rows) {
  const body = $("registry").tBodies[0];
  for (const row of rows) {
    const tr = el("tr");
    tr.dataset.id = row.local_resource_id;
    const age = ageDays(row.last_verified_at);
    const status = el("td");
    status.append(badge(row.verification_status, row.verification_status));
    tr.append(
      el("td", row.name), el("td", row.resource_type), el("td", row.county), status,
      el("td", row.last_verified_at ? row.last_verified_at.slice(0, 10) : "never"),
      el("td", age === null ? "—" : `${age} days`), el("td", displayPhone(row.contact_phone)),
    );
    body.append(tr);
  }
  $("registry-note").textContent = rows.length
    ? "Age: days since the row was last verified (the registry's freshness window decides verified / stale)."
    : "No registry rows were used for this answer.";
}

function rings(geometry) {
  if (!geometry) return [];
  if (geometry.type === "Polygon") return geometry.coordinates;
  if (geometry.type === "MultiPolygon") return geometry.coordinates.flat();
  return [];
}

async function drawMap(chat, question) {
  const [boundaries, places] = await Promise.all([
    counties(),
    api("/gis/query?format=geojson", {
      query: question, n_results: 10, ...(chat.route.filters.county ? { county: chat.route.filters.county } : {}),
    }).catch((error) => ({ features: [], error: error.message })),
  ]);
  $("map").dataset.counties = String(boundaries.features.length);
  const cited = new Map(chat.evidence.spatial.map((e) => [e.entity_id, e.ref]));
  const located = (places.features || []).filter((f) => f.geometry && f.geometry.type === "Point");
  const asked = new Set((chat.route.filters.county || []).map((c) => c.toLowerCase()));
  const nameOf = (f) => String((f.properties || {}).name || "");
  // Bounds: the asked counties and the places with a margin (the state around them stays drawn, clipped);
  // the whole state when the question names no place; without county polygons, the places alone.
  let [minLon, minLat, maxLon, maxLat] = [Infinity, Infinity, -Infinity, -Infinity];
  const extend = ([lon, lat]) => {
    minLon = Math.min(minLon, lon); maxLon = Math.max(maxLon, lon);
    minLat = Math.min(minLat, lat); maxLat = Math.max(maxLat, lat);
  };
  const focus = boundaries.features.filter((f) => asked.has(nameOf(f).toLowerCase()));
  for (const f of focus.length || located.length ? focus : boundaries.features) rings(f.geometry).forEach((r) => r.forEach(extend));
  located.forEach((f) => extend(f.geometry.coordinates));
  if (!Number.isFinite(minLon)) {
    $("map-note").textContent = "No county polygons and no places to draw.";
    return;
  }
  const outlined = boundaries.features.length > 0;
  if (focus.length || located.length) {
    // Over county polygons the margin shows the state around the places; alone, the frame hugs them.
    const extent = Math.max(maxLon - minLon, maxLat - minLat);
    const margin = outlined ? Math.max(0.25, 0.3 * extent) : Math.max(0.02, 0.15 * extent);
    [minLon, minLat, maxLon, maxLat] = [minLon - margin, minLat - margin, maxLon + margin, maxLat + margin];
  }
  // Equirectangular, x scaled by cos(mid latitude): true enough at a state's scale.
  const k = Math.cos(((minLat + maxLat) / 2) * Math.PI / 180);
  if (!outlined) { // places alone: a landscape frame (not a tall empty square), with room for labels on the right
    const grow = Math.max(0, (maxLat - minLat) / 0.6 / k - (maxLon - minLon));
    [minLon, maxLon] = [minLon - grow / 2, maxLon + grow / 2];
    maxLon += 0.35 * (maxLon - minLon);
  }
  const width = 600;
  const scale = width / ((maxLon - minLon) * k || 1);
  const height = Math.max(1, (maxLat - minLat) * scale);
  const x = (lon) => ((lon - minLon) * k * scale).toFixed(1);
  const y = (lat) => ((maxLat - lat) * scale).toFixed(1);
  const pad = 12;
  const root = svg("svg", {
    overflow: "hidden",
    viewBox: `${-pad} ${-pad} ${width + 2 * pad} ${height + 2 * pad}`, role: "img", "aria-label": "map of the places",
  });
  const countyLayer = svg("g", { class: "counties" });
  for (const f of boundaries.features) {
    const d = rings(f.geometry).map((ring) => "M" + ring.map(([lon, lat]) => `${x(lon)},${y(lat)}`).join("L") + "Z");
    const name = nameOf(f);
    const path = svg("path", { d: d.join(""), class: asked.has(name.toLowerCase()) ? "county asked" : "county" });
    path.dataset.county = name;
    const title = svg("title");
    title.textContent = `${name} County`;
    path.append(title);
    countyLayer.append(path);
  }
  root.append(countyLayer);
  const nameLayer = svg("g", { class: "county-names" });
  for (const f of boundaries.features) { // each county's name at the mean of its outer ring, when in view
    const ring = rings(f.geometry)[0] || [];
    const lon = ring.reduce((a, p) => a + p[0], 0) / (ring.length || 1);
    const lat = ring.reduce((a, p) => a + p[1], 0) / (ring.length || 1);
    if (!ring.length || lon < minLon || lon > maxLon || lat < minLat || lat > maxLat) continue;
    const text = svg("text", { x: x(lon), y: y(lat), class: "county-label", "text-anchor": "middle" });
    text.textContent = nameOf(f);
    nameLayer.append(text);
  }
  root.append(nameLayer);
  const placeLayer = svg("g", { class: "places" });
  const placed = [];
  for (const f of located) {
    const [lon, lat] = f.geometry.coordinates;
    const ref = cited.get(f.id);
    const dot = svg("circle", { cx: x(lon), cy: y(lat), r: cited.has(f.id) ? 6 : 4.5,
      class: cited.has(f.id) ? "place cited" : "place" });  // prettier-ignore
    dot.dataset.id = f.id;
    const title = svg("title");
    title.textContent = `${f.properties.label}: ${f.properties.description}`;
    dot.append(title);
    // Places in one town share a point: each label moves down until it overlaps no earlier one.
    const lx = Number(x(lon)) + 8;
    let ly = Number(y(lat)) + 3;
    while (placed.some(([px, py]) => Math.abs(px - lx) < 160 && Math.abs(py - ly) < 11)) ly += 11;
    placed.push([lx, ly]);
    const label = svg("text", { x: lx.toFixed(1), y: ly.toFixed(1), class: "place-label" });
    label.textContent = (ref ? `[${ref}] ` : "") + f.properties.label;
    placeLayer.append(dot, label);
  }
  root.append(placeLayer);
  // A scale bar: without county outlines it is the only sense of distance the map gives.
  const kmPerPx = 111.32 / scale; // a degree of latitude is about 111.32 km
  const km = [0.5, 1, 2, 5, 10, 20, 50, 100, 200].find((d) => d / kmPerPx >= 60) || 200;
  const bar = svg("g", { class: "scale" });
  const barEnd = (km / kmPerPx).toFixed(1);
  bar.append(svg("path", { d: `M0,${(height - 8).toFixed(1)}V${height.toFixed(1)}H${barEnd}V${(height - 8).toFixed(1)}` }));
  const barText = svg("text", { x: 0, y: (height - 11).toFixed(1) });
  barText.textContent = `${km} km`;
  bar.append(barText);
  root.append(bar);
  $("map").append(root);
  const over = boundaries.features.length
    ? ` over ${boundaries.features.length} county polygons`
    : " (this index version has no county polygons: spatial.counties, docs/gbim.md)";
  $("map-note").textContent = places.error
    ? `No places: ${places.error}`
    : `${located.length} places from /gis/query (GeoJSON)${over}` +
      (cited.size ? "; the answer's places are marked with their [n]." : ".") +
      (chat.answered_from && !chat.answered_from.current ? " The map shows the current version's places." : "");
}

async function ask(event) {
  event.preventDefault();
  const message = $("question").value.trim();
  if (!message) return;
  const body = { message };
  const county = $("county").value.trim();
  if (county) body.county = county;
  const version = $("version").value;
  if (version) body.version = version;
  const asOf = $("as-of").value.trim();
  if (asOf) body.as_of = asOf;
  clear();
  document.body.dataset.state = "asking";
  setStatus("Asking…");
  try {
    const [chat, manifest] = await Promise.all([api("/chat", body), manifestFor($("key").value.trim())]);
    renderAnswer(chat);
    const chunks = renderCitations(chat, manifest);
    renderRegistry(chat.evidence.registry);
    await Promise.all([verifyChunks(chunks), drawMap(chat, message), renderAnsweredFrom(chat)]);
    setStatus(`Answered from index version ${chat.index_version} (trace ${chat.trace_id.split(".")[0]}).`);
    document.body.dataset.state = "done";
  } catch (error) {
    setStatus(error.message, true);
    document.body.dataset.state = "error";
  }
}

document.addEventListener("DOMContentLoaded", async () => {
  $("ask-form").addEventListener("submit", ask);
  $("key").addEventListener("change", loadVersions);
  const params = new URLSearchParams(window.location.search);
  await loadVersions();
  // /glassbox?q=...&version=...&as_of=... asks at once (a link to an explanation, e.g. of an audited answer)
  const version = params.get("version");
  if (version) {
    if (![...$("version").options].some((o) => o.value === version)) $("version").append(el("option", version));
    $("version").value = version;
  }
  if (params.get("as_of")) $("as-of").value = params.get("as_of");
  const asked = params.get("q");
  if (asked) {
    $("question").value = asked;
    $("ask").click();
  }
});
