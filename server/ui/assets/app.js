// The Floodgate dashboard: reads the feed (GET /ui/events, server-sent
// events read through fetch so that it can carry a bearer token), draws
// the charts in SVG, and sends the actions (POST /v1/inspect, /v1/reset).
"use strict";

const HISTORY = 120; // points kept per chart: two minutes at one a second
const TOKEN_KEY = "floodgate-token";
const SVGNS = "http://www.w3.org/2000/svg";
const OUTCOMES = ["allowed", "denied", "shadow", "other"];
const WAITING = "waiting for the first second";

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  total: { allowed: [], denied: [], shadow: [], other: [] },
  series: new Map(), // "domain\u0000rule" -> {allowed: [], denied: [], shadow: []}
  feed: null,        // the AbortController of the current stream
  retry: 0,
  admin: false,
  armed: null, // {key, until}: the key whose Reset awaits its second click
};

const $ = (id) => document.getElementById(id);

function fmt(x) {
  if (x === undefined || x === null) return "–";
  if (x >= 100) return Math.round(x).toLocaleString("en");
  if (x >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

function ms(x) {
  if (x === undefined || x === null) return "–";
  return x < 1 ? x.toFixed(3) + " ms" : x.toFixed(1) + " ms";
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function push(arr, v) {
  arr.push(v);
  if (arr.length > HISTORY) arr.shift();
}

// split folds a frame's outcome rates into the four lines of the charts.
function split(rates) {
  const r = { allowed: 0, denied: 0, shadow: 0, other: 0 };
  for (const [o, v] of Object.entries(rates || {})) {
    if (o === "allowed" || o === "local_allowed") r.allowed += v;
    else if (o === "denied" || o === "local_denied" || o === "failed_closed" || o === "ledger_failed") r.denied += v;
    else if (o === "shadow_denied") r.shadow += v;
    else r.other += v;
  }
  return r;
}

// draw draws lines (name -> values) into svg, scaled to their maximum.
function draw(svg, lines, width, height) {
  let top = 1;
  for (const vs of Object.values(lines)) for (const v of vs) top = Math.max(top, v);
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  for (const f of [0.25, 0.5, 0.75]) {
    const g = document.createElementNS(SVGNS, "line");
    g.setAttribute("class", "grid");
    g.setAttribute("x1", 0); g.setAttribute("x2", width);
    g.setAttribute("y1", height * f); g.setAttribute("y2", height * f);
    svg.appendChild(g);
  }
  for (const [name, vs] of Object.entries(lines)) {
    const p = document.createElementNS(SVGNS, "polyline");
    p.setAttribute("class", name);
    const step = width / (HISTORY - 1);
    const x0 = width - step * (vs.length - 1);
    p.setAttribute("points", vs.map((v, i) =>
      (x0 + i * step).toFixed(1) + "," + (height - (v / top) * (height - 2) - 1).toFixed(1)).join(" "));
    svg.appendChild(p);
  }
  return top;
}

function setRows(tbody, rows, empty, cols) {
  while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
  if (rows.length === 0) {
    const tr = el("tr", undefined, "empty");
    const td = el("td", empty);
    td.colSpan = cols;
    tr.appendChild(td);
    tbody.appendChild(tr);
    return;
  }
  for (const r of rows) tbody.appendChild(r);
}

function render(f) {
  $("clock").textContent = new Date(f.at).toLocaleTimeString();
  state.admin = f.admin;
  const badge = $("access");
  badge.textContent = f.admin ? "admin" : "read-only";
  badge.classList.toggle("admin", f.admin);

  // The first frame of a stream brings the last minute the server kept,
  // drawn at once; without it (the server has just started) and before
  // the first rates, the figures say they are waiting, not zero.
  for (const p of f.history || []) {
    const t = split(p.totals);
    for (const o of OUTCOMES) push(state.total[o], t[o]);
  }
  if (f.history) $("chart-total").dataset.backfilled = String(f.history.length);
  let t = null;
  if (f.rates) {
    t = split(f.totals);
    for (const o of OUTCOMES) push(state.total[o], t[o]);
  } else if (f.history && f.history.length) {
    t = split(f.history[f.history.length - 1].totals);
  }
  const chart = $("chart-total");
  chart.dataset.waiting = String(t === null);
  if (t === null) {
    for (const o of OUTCOMES) $("now-" + o).textContent = WAITING;
  } else {
    $("now-allowed").textContent = fmt(t.allowed);
    $("now-denied").textContent = fmt(t.denied);
    $("now-shadow").textContent = fmt(t.shadow);
    $("now-other").textContent = fmt(t.other);
    const top = draw(chart, state.total, 600, 160);
    $("chart-max").textContent = fmt(top);
    chart.dataset.points = String(state.total.allowed.length);
    chart.dataset.allowed = String(t.allowed);
    chart.dataset.denied = String(t.denied);
    chart.dataset.shadow = String(t.shadow);
  }
  if (f.rates) renderSeries(f.series || []);
  renderStore(f);
  renderTop("top-denied", f.top_denied, f.admin, (k) => [
    countCell(k),
    el("td", k.remaining + " / " + k.limit, "n"),
    el("td", k.retry_after_ms < 0 ? "never" : (k.retry_after_ms / 1000).toFixed(1) + " s", "n"),
  ], "no key denied in this window");
  renderTop("near-limit", f.near_limit, f.admin, (k) => [
    countCell(k),
    el("td", k.limit > 0 ? Math.round(100 * (k.limit - k.remaining) / k.limit) + "%" : "–", "n"),
    el("td", k.remaining + " / " + k.limit, "n"),
  ], "no key near its limit in this window");
  renderConfig(f.config, f.admin);
  renderMetrics(f.metrics || []);
}

function countCell(k) {
  const td = el("td", k.count.toLocaleString("en"), "n");
  if (k.err > 0) td.appendChild(el("span", " ±" + k.err.toLocaleString("en"), "err"));
  return td;
}

function renderSeries(series) {
  const seen = new Set();
  const rows = [];
  for (const s of series) {
    const id = s.domain + "\u0000" + s.rule;
    seen.add(id);
    let h = state.series.get(id);
    if (!h) {
      h = { allowed: [], denied: [], shadow: [] };
      state.series.set(id, h);
    }
    const r = split(s.rates);
    push(h.allowed, r.allowed); push(h.denied, r.denied); push(h.shadow, r.shadow);
  }
  // A series without decisions this second is a zero, not a gap.
  for (const [id, h] of state.series) {
    if (!seen.has(id)) {
      push(h.allowed, 0); push(h.denied, 0); push(h.shadow, 0);
      if (h.allowed.every((v) => v === 0) && h.denied.every((v) => v === 0) && h.shadow.every((v) => v === 0)) {
        state.series.delete(id);
      }
    }
  }
  for (const [id, h] of state.series) {
    const [domain, rule] = id.split("\u0000");
    const tr = el("tr");
    tr.dataset.rule = rule;
    tr.appendChild(el("td", domain || "(inline)"));
    tr.appendChild(el("td", rule || "–", "key"));
    tr.appendChild(el("td", fmt(h.allowed[h.allowed.length - 1]), "n"));
    tr.appendChild(el("td", fmt(h.denied[h.denied.length - 1]), "n"));
    tr.appendChild(el("td", fmt(h.shadow[h.shadow.length - 1]), "n"));
    const td = el("td");
    const svg = document.createElementNS(SVGNS, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 160 28");
    svg.setAttribute("preserveAspectRatio", "none");
    draw(svg, h, 160, 28);
    td.appendChild(svg);
    tr.appendChild(td);
    rows.push(tr);
  }
  setRows($("series").tBodies[0], rows, "no decisions yet", 6);
}

function renderStore(f) {
  const s = f.store;
  if (!f.rates) {
    for (const id of ["lat", "calls", "errors", "failmodes", "localhits", "leases"]) $(id).textContent = WAITING;
    $("breaker").textContent = s.breaker;
    return;
  }
  $("lat").textContent = s.p50_ms === undefined ? "no store call" : [s.p50_ms, s.p90_ms, s.p99_ms].map(ms).join(" / ");
  $("calls").textContent = fmt(s.calls_per_second) + " /s";
  $("errors").textContent = fmt(s.errors_per_second) + " /s";
  const fm = Object.entries(s.failure_modes || {}).map(([k, v]) => k + " " + fmt(v) + "/s");
  $("failmodes").textContent = fm.length ? fm.join(", ") : "none";
  $("breaker").textContent = s.breaker;
  const local = s.local || {};
  $("localhits").textContent = s.local ? fmt(local.deny_cache || 0) + " / " + fmt(local.local_budget || 0) + " /s" : "– (Redis store only)";
  const l = f.leases;
  $("leases").textContent = [l.acquired_per_second, l.denied_per_second, l.released_per_second].map(fmt).join(" / ") + " /s";
}

function renderTop(id, top, admin, cells, empty) {
  const note = $(id + "-note");
  const tbody = $(id).tBodies[0];
  if (!top) {
    note.textContent = admin ? "" : "(an admin token shows the keys)";
    setRows(tbody, [], admin ? empty : "an admin token is needed to see keys", 6);
    return;
  }
  note.textContent = "last " + Math.round(top.window_ms / 1000) + " s at most; " + top.total.toLocaleString("en") +
    " counted; each count is over by at most ±" + top.bound.toLocaleString("en") + " (at most N/k = " +
    fmt(top.total / top.counters) + ", k = " + top.counters + " counters)";
  const rows = top.keys.map((k) => {
    const tr = el("tr");
    tr.dataset.key = k.key;
    tr.appendChild(el("td", k.key + (k.local ? " (local)" : ""), "key"));
    tr.appendChild(el("td", (k.rule || "–") + (k.shadow ? " (shadow)" : ""), "key"));
    for (const c of cells(k)) tr.appendChild(c);
    const td = el("td");
    const inspect = el("button", "Inspect");
    inspect.className = "inspect";
    inspect.addEventListener("click", () => act("inspect", k.ref, k.key));
    const armed = state.armed && state.armed.key === k.key && Date.now() < state.armed.until;
    const reset = el("button", armed ? "Confirm reset" : "Reset");
    reset.className = armed ? "reset danger" : "reset";
    reset.addEventListener("click", () => confirmReset(reset, k));
    td.appendChild(inspect);
    td.appendChild(document.createTextNode(" "));
    td.appendChild(reset);
    tr.appendChild(td);
    return tr;
  });
  setRows(tbody, rows, empty, 6);
}

// confirmReset asks for a second click within three seconds; the armed
// key is kept in state, since the table is drawn anew every second.
function confirmReset(button, k) {
  if (state.armed && state.armed.key === k.key && Date.now() < state.armed.until) {
    state.armed = null;
    button.textContent = "Reset";
    button.classList.remove("danger");
    act("reset", k.ref, k.key);
    return;
  }
  state.armed = { key: k.key, until: Date.now() + 3000 };
  button.textContent = "Confirm reset";
  button.classList.add("danger");
}

function renderConfig(c, admin) {
  $("rules-count").textContent = String(c.rules);
  $("last-reload").textContent = c.last_reload ? new Date(c.last_reload).toLocaleString() : "never (no -config)";
  $("reloads").textContent = c.reloads_ok + " / " + c.reloads_failed;
  const rows = (c.list || []).map((r) => {
    const tr = el("tr");
    tr.appendChild(el("td", r.id, "key"));
    tr.appendChild(el("td", r.unlimited ? "unlimited" : r.limit));
    const mode = [];
    if (r.shadow_mode) mode.push("shadow");
    if (r.failure_mode) mode.push(r.failure_mode);
    tr.appendChild(el("td", mode.join(", ") || "–"));
    tr.appendChild(el("td", r.source, "key"));
    return tr;
  });
  setRows($("rules").tBodies[0], rows, admin ? "no rules loaded" : "an admin token is needed to see the rules", 4);
}

function renderMetrics(ms) {
  const rows = ms.map((m) => {
    const tr = el("tr");
    tr.appendChild(el("td", m.name, "key"));
    tr.appendChild(el("td", fmt(m.value), "n"));
    tr.appendChild(el("td", m.per_second === undefined ? "–" : fmt(m.per_second), "n"));
    return tr;
  });
  setRows($("metrics").tBodies[0], rows, "none", 3);
}

function headers() {
  const h = { "Content-Type": "application/json" };
  if (state.token) h.Authorization = "Bearer " + state.token;
  return h;
}

// problemText is the words of an RFC 9457 problem answer.
async function problemText(res) {
  try {
    const p = await res.json();
    return res.status + " " + (p.title || res.statusText) + ": " + (p.detail || "");
  } catch (e) {
    return res.status + " " + res.statusText;
  }
}

async function act(kind, ref, label) {
  const out = $("action-result");
  out.classList.remove("refused");
  out.dataset.state = "pending";
  out.textContent = kind + " " + label + "…";
  let res;
  try {
    res = await fetch("/v1/" + kind, { method: "POST", headers: headers(), body: JSON.stringify(ref), cache: "no-store" });
  } catch (e) {
    out.dataset.state = "failed";
    out.textContent = kind + " " + label + ": the server did not answer";
    return;
  }
  if (!res.ok) {
    out.classList.add("refused");
    out.dataset.state = res.status === 401 || res.status === 403 ? "refused" : "failed";
    let why = await problemText(res);
    if (res.status === 401 || res.status === 403) why += " (paste an admin token above to act on keys)";
    out.textContent = kind + " " + label + " refused: " + why;
    return;
  }
  out.dataset.state = "done";
  if (kind === "reset") {
    out.textContent = "reset " + label + ": its whole budget is back (" + new Date().toLocaleTimeString() + ")";
    return;
  }
  const d = await res.json();
  const lines = [
    "key " + label + "  (store key " + d.store_key + ")",
    "rule " + (d.rule || "–") + "  limit " + (d.policy ? d.policy.limit + " per " + d.policy.period + " " + d.policy.algorithm : "–"),
    "remaining " + d.remaining + " of " + d.limit + (d.allowed ? "" : "  (over its limit)"),
    "reset after " + (d.reset_after_ms / 1000).toFixed(1) + " s  retry after " + (d.retry_after_ms < 0 ? "never" : (d.retry_after_ms / 1000).toFixed(1) + " s"),
  ];
  if (d.fallback) lines.push("decided by the failure mode local (the store is failing)");
  out.textContent = lines.join("\n");
}

function formRef() {
  const domain = $("f-domain").value.trim();
  if (domain) {
    const entries = $("f-entries").value.split(",").map((s) => s.trim()).filter((s) => s).map((s) => {
      const i = s.indexOf("=");
      return i < 0 ? { key: s, value: "" } : { key: s.slice(0, i), value: s.slice(i + 1) };
    });
    return [{ domain, entries }, domain + " " + $("f-entries").value.trim()];
  }
  const key = $("f-key").value;
  const limit = Number($("f-limit").value);
  return [{ key, limit: { algorithm: $("f-alg").value, limit, period: $("f-period").value.trim() || "1m" } }, key];
}

async function connect() {
  if (state.feed) state.feed.abort();
  const ctrl = new AbortController();
  state.feed = ctrl;
  const status = $("status");
  status.dataset.state = "connecting";
  status.textContent = "connecting…";
  let res;
  try {
    res = await fetch("/ui/events", { headers: headers(), signal: ctrl.signal, cache: "no-store" });
  } catch (e) {
    return retryLater(ctrl);
  }
  if (!res.ok) {
    status.dataset.state = "refused";
    status.textContent = "refused";
    const err = $("feed-error");
    err.hidden = false;
    err.textContent = "The feed was refused: " + (await problemText(res)) + ". Paste a token above.";
    return;
  }
  $("feed-error").hidden = true;
  status.dataset.state = "live";
  status.textContent = "live";
  state.retry = 0;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (data) render(JSON.parse(data));
      }
    }
  } catch (e) {
    if (ctrl.signal.aborted) return;
  }
  retryLater(ctrl);
}

function retryLater(ctrl) {
  if (ctrl.signal.aborted || state.feed !== ctrl) return;
  const status = $("status");
  status.dataset.state = "retrying";
  status.textContent = "reconnecting…";
  state.retry = Math.min(state.retry + 1, 5);
  setTimeout(() => { if (state.feed === ctrl) connect(); }, 1000 * state.retry);
}

document.addEventListener("DOMContentLoaded", () => {
  $("token").value = state.token;
  $("token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = $("token").value.trim();
    if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
    else sessionStorage.removeItem(TOKEN_KEY);
    connect();
  });
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const [ref, label] = formRef();
    act("inspect", ref, label);
  });
  $("f-reset").addEventListener("click", () => {
    const [ref, label] = formRef();
    act("reset", ref, label);
  });
  connect();
});
