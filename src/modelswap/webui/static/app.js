/* modelswap web UI: vanilla JS, no build step, no external requests. */
"use strict";

const KEY_STORE = "modelswap.key";
const GIB = 1024 ** 3;
const $ = (sel, root = document) => root.querySelector(sel);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function gib(bytes) { return (bytes / GIB).toFixed(bytes >= 10 * GIB ? 1 : 2) + " GiB"; }
function secs(s) {
  if (s === undefined || s === null) return "";
  s = Math.max(0, s);
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
/* The page-wide message: closable; ``owner`` (a model id) lets a later event about that model
   clear it, so one model's old error never sits above another model's start. */
const noticeState = { owner: null };
function notice(text, owner = null) {
  const n = $("#notice");
  $("#notice-text").textContent = text || "";
  n.hidden = !text;
  noticeState.owner = text ? owner : null;
}
function clearNoticeFor(model) { if (noticeState.owner === model) notice(""); }
/* One time format on every page: local time, 24-hour HH:MM:SS; the full date (and the time
   zone) on hover, through ``timeEl`` or a title of ``fullDate``. */
function clock(epochSeconds) {
  return new Date(epochSeconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}
function fullDate(epochSeconds) {
  const d = new Date(epochSeconds * 1000);
  const two = (n) => String(n).padStart(2, "0");
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${clock(epochSeconds)} ${zone}`;
}
function timeEl(epochSeconds) {
  return el("time", { datetime: new Date(epochSeconds * 1000).toISOString(), title: fullDate(epochSeconds), text: clock(epochSeconds) });
}

/* ---- auth + fetch -------------------------------------------------------------------- */

class AuthError extends Error {}
class OfflineError extends Error {}

/* Who is asking (GET /api/whoami): the key's name and scopes, never the key. */
const auth = { known: false, name: null, scopes: [], keysConfigured: false };
function can(scope) { return !auth.known || auth.scopes.includes(scope); }
function needs(scope, plural = false) {
  return `${plural ? "need" : "needs"} a key with the ${scope} scope (this key${auth.name ? " “" + auth.name + "”" : ""} has ${auth.scopes.join(", ") || "none"})`;
}

async function loadWhoami() {
  const resp = await api("/api/whoami");
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) return;
  Object.assign(auth, { known: true, name: body.name, scopes: body.scopes || [], keysConfigured: !!body.keys_configured });
  renderWho();
}

function renderWho() {
  const who = $("#whoami");
  if (!auth.known) { who.textContent = ""; who.hidden = true; return; }
  who.hidden = false;
  who.textContent = auth.keysConfigured ? `key “${auth.name}” · ${auth.scopes.join(", ")}` : "no keys configured · full access";
  $("#signout").hidden = !(auth.keysConfigured && sessionStorage.getItem(KEY_STORE));
}

/* The gateway went away: say so once, mark what is shown as stale, disable actions. */
const link = { offline: false, since: null };
function setOffline(offline) {
  if (offline === link.offline) return;
  link.offline = offline;
  link.since = offline ? Date.now() : null;
  document.body.classList.toggle("offline", offline);
  const banner = $("#offline");
  banner.hidden = !offline;
  if (offline) banner.textContent = `Gateway unreachable since ${clock(Date.now() / 1000)} — what is shown is stale; retrying…`;
  for (const b of document.querySelectorAll("button[data-needs-link]")) b.disabled = offline || b.dataset.blocked === "1";
}

function authHeaders(extra = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { ...extra, Authorization: "Bearer " + key } : extra;
}

async function api(path, opts = {}) {
  let resp;
  try {
    resp = await fetch(path, { ...opts, headers: authHeaders(opts.headers || {}) });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    setOffline(true);
    throw new OfflineError("gateway unreachable");
  }
  setOffline(false);
  if (resp.status === 401) {
    showLogin(sessionStorage.getItem(KEY_STORE) ? "That key was not accepted." : "");
    throw new AuthError("unauthorized");
  }
  return resp;
}

async function apiJSON(path, opts) {
  const resp = await api(path, opts);
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const msg = (body.error && body.error.message) || `${resp.status} ${resp.statusText}`;
    throw new Error(msg);
  }
  return body;
}

/* Server-sent events over fetch (EventSource cannot send an Authorization header). */
async function readSSE(resp, onEvent, onComment) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) { if (onComment) onComment(line.slice(1).trim()); continue; }
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "event") event = val;
        else if (field === "data") data.push(val);
      }
      if (data.length && onEvent(event, data.join("\n")) === false) {
        reader.cancel().catch(() => {});
        return;
      }
    }
  }
}

/* A long-lived stream that reconnects until stopped. */
function liveStream(path, onEvent, onStatus) {
  const ctl = { stopped: false, abort: new AbortController() };
  (async () => {
    let delay = 500;
    while (!ctl.stopped) {
      try {
        const resp = await api(path, { signal: ctl.abort.signal });
        if (!resp.ok) throw new Error(`${resp.status}`);
        onStatus && onStatus("live");
        delay = 500;
        await readSSE(resp, onEvent);
      } catch (err) {
        if (ctl.stopped || err instanceof AuthError) return;
      }
      if (ctl.stopped) return;
      onStatus && onStatus("reconnecting…");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  })();
  return () => { ctl.stopped = true; ctl.abort.abort(); };
}

/* ---- routing --------------------------------------------------------------------------- */

const pages = {};
let current = null; // {name, leave}

function showLogin(message) {
  if (current && current.leave) current.leave();
  current = null;
  auth.known = false;
  renderWho();
  $("#signout").hidden = true; // a rejected key is not signed in
  for (const p of document.querySelectorAll(".page")) p.hidden = true;
  $("#login").hidden = false;
  const err = $("#login-error");
  err.textContent = message || "";
  err.hidden = !message;
  $("#login-key").focus();
}

function hashQuery() { return new URLSearchParams(location.hash.split("?")[1] || ""); }

function route() {
  const name = (location.hash.replace(/^#\/?/, "") || "models").split("?")[0];
  const page = pages[name] ? name : "models";
  if (current && current.leave) current.leave();
  notice("");
  $("#login").hidden = true;
  for (const p of document.querySelectorAll(".page")) p.hidden = p.id !== "page-" + page;
  for (const a of document.querySelectorAll(".top nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  current = { name: page, leave: null };
  const state = current;
  const who = auth.known ? Promise.resolve() : loadWhoami();
  who.then(() => current === state && pages[page](state)).catch((err) => {
    if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(String(err.message || err));
  });
}

/* A page (or part) this key may not use: say so in words instead of failing. */
function scopeNote(box, scope, what) {
  box.replaceChildren(el("p", { class: "perm-note", "data-role": "scope-note", text: `${what} ${needs(scope)}.` }));
}

/* The models this key may see, from a read-scope source: the events snapshot (every model,
   running or not). A key without ``read`` falls back to /v1/models (inference scope). */
async function snapshotOnce() {
  const ctl = new AbortController();
  const resp = await api("/api/events", { signal: ctl.signal });
  if (!resp.ok) throw new Error(`${resp.status} ${resp.statusText}`);
  let snap = null;
  await readSSE(resp, (kind, data) => {
    if (kind !== "snapshot") return;
    try { snap = JSON.parse(data); } catch { snap = {}; }
    return false;
  });
  ctl.abort();
  return snap || {};
}

async function catalog() {
  if (can("read")) {
    const snap = await snapshotOnce();
    return { list: snap.models || [], running: snap.running || [] };
  }
  if (can("inference")) {
    const list = await apiJSON("/v1/models");
    return { list: list.data || [], running: [] };
  }
  return { list: [], running: [] };
}

/* ---- Models ------------------------------------------------------------------------------ */

const models = { list: [], running: {}, cards: {}, selectors: [], peerRows: [] };
/* /v1/models rows: a model of this gateway, or a selector (virtual name) or a peer's model. */
function isModelRow(m) { return !m.alias_for && !m.selector && !m.peer; }
function takeRows(rows) {
  models.list = rows.filter(isModelRow);
  models.selectors = rows.filter((m) => m.selector);
  models.peerRows = rows.filter((m) => m.peer);
}

function takeRunning(rows) {
  models.running = {};
  for (const row of rows || []) models.running[row.model] = { ...row, _at: Date.now() };
}

async function fetchModels() {
  const found = await catalog();
  takeRows(found.list);
  takeRunning(found.running);
}

function modelCard(id) {
  const card = el("article", { class: "card", "data-model": id, "aria-label": id });
  card.innerHTML = `
    <div class="card-head">
      <a class="name" data-role="name"></a>
      <span class="badge" data-role="badge"></span>
      <span class="actions">
        <button type="button" data-role="load" data-needs-link>Load</button>
        <button type="button" data-role="unload" data-needs-link>Unload</button>
      </span>
    </div>
    <div class="tags" data-role="tags" hidden></div>
    <p class="muted small card-desc" data-role="description" hidden></p>
    <p class="stop-note small" data-role="last-stop" hidden></p>
    <div class="progress" data-role="progress" hidden>
      <div><span data-role="phase"></span> · <span data-role="elapsed" class="muted"></span></div>
      <div class="progress-track"><div class="progress-fill" data-role="fill"></div></div>
      <div class="progress-line" data-role="progress-line"></div>
    </div>
    <dl class="kv">
      <dt>context</dt><dd data-role="context"></dd>
      <dt data-role="capacity-dt">receipt</dt><dd data-role="capacity"></dd>
      <dt>requests</dt><dd data-role="load-info"></dd>
      <dt data-role="ttl-dt">unloads in</dt><dd data-role="ttl"></dd>
      <dt data-role="swap-dt" hidden>last swap</dt><dd data-role="swap" hidden></dd>
      <dt data-role="pcache-dt" hidden>prompt cache</dt><dd data-role="pcache" hidden></dd>
    </dl>
    <p class="perm-note small" data-role="perm" hidden></p>
    <div class="confirm" data-role="confirm" role="group" hidden>
      <div data-role="confirm-summary"></div>
      <ul class="small" data-role="confirm-evict"></ul>
      <div class="muted small" data-role="confirm-time"></div>
      <div class="confirm-actions">
        <button type="button" data-role="confirm-load">Load anyway</button>
        <button type="button" data-role="confirm-cancel">Cancel</button>
      </div>
    </div>
    <div class="failure" data-role="failure" hidden>
      <div><strong data-role="fail-code"></strong> <span data-role="fail-summary"></span></div>
      <div class="muted small" data-role="fail-when"></div>
      <pre class="evidence" data-role="fail-evidence" hidden></pre>
      <div class="fix"><span class="muted">fix:</span> <span data-role="fail-fix"></span></div>
      <div class="small"><span data-role="fail-retry"></span> · <a data-role="fail-log" href="#/logs">its log</a></div>
    </div>`;
  $(".name", card).textContent = id;
  $(".name", card).href = `#/model?id=${encodeURIComponent(id)}`;
  role(card, "fail-log").href = `#/logs?source=${encodeURIComponent(id)}`;
  role(card, "load").setAttribute("aria-label", `Load ${id}`);
  role(card, "unload").setAttribute("aria-label", `Unload ${id}`);
  $('[data-role="load"]', card).addEventListener("click", () => loadWithDryRun(card, id));
  role(card, "confirm-load").setAttribute("aria-label", `Load ${id} anyway`);
  role(card, "confirm-load").addEventListener("click", () => { role(card, "confirm").hidden = true; modelAction("load", id); });
  role(card, "confirm-cancel").addEventListener("click", () => { role(card, "confirm").hidden = true; });
  $('[data-role="unload"]', card).addEventListener("click", () => modelAction("unload", id));
  return card;
}

async function modelAction(kind, id) {
  // Busy while the action runs (for assistive technology, and for tests to wait on).
  const busy = [...document.querySelectorAll("article.card")].filter((c) => c.dataset.model === id);
  for (const c of busy) c.setAttribute("aria-busy", "true");
  try {
    const resp = await api(`/api/models/${kind}/${encodeURIComponent(id)}`, { method: "POST" });
    if (!resp.ok) {
      const body = await resp.json().catch(() => ({}));
      // A start that failed is on the model's card (its failure box): not said again above.
      await fetchModels().catch(() => {});
      const run = models.running[id];
      if (!(kind === "load" && run && run.state === "failed" && run.last_failure)) {
        notice(`${kind} ${id}: ${(body.error && body.error.message) || resp.status}`, id);
      }
    }
  } catch (err) {
    if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(`${kind} ${id}: ${err.message || err}`, id);
  } finally {
    for (const c of busy) c.removeAttribute("aria-busy");
  }
  scheduleModelsRefresh(0);
}

/* Load asks the dry run first (GET /api/models/{id}/dry-run; docs/predicting-swaps.md): a load
   that would stop other models, or cannot start now, says so and waits for a confirmation; one
   that stops nothing goes ahead at once. A key that may not read the dry run loads as before. */
async function loadWithDryRun(card, id) {
  let prediction = null;
  try {
    const resp = await api(`/api/models/${encodeURIComponent(id)}/dry-run`);
    if (resp.ok) prediction = await resp.json();
  } catch (err) {
    if (err instanceof AuthError || err instanceof OfflineError) return;
  }
  if (!prediction || prediction.running || (prediction.can_start && !(prediction.evict || []).length)) {
    await modelAction("load", id);
    return;
  }
  const box = role(card, "confirm");
  role(card, "confirm-summary").textContent = prediction.can_start
    ? `Loading ${id} stops ${prediction.evict.length} model${prediction.evict.length === 1 ? "" : "s"}:`
    : `${id} cannot start now: ${prediction.blocked}.`;
  role(card, "confirm-evict").replaceChildren(...(prediction.evict || []).map((e) => el("li", { "data-model": e.model },
    el("strong", { text: e.model }), ` — ${e.why}`,
    e.busy ? el("span", { class: "warn", text: ` · busy: ${e.in_flight} in flight${e.drain_seconds != null ? `, about ${secs(e.drain_seconds)} to drain` : ""}` }) : null)));
  const t = prediction.time || {};
  const fitsHere = prediction.fits_machine && prediction.fits_machine.fits === false
    ? ` · does not fit this machine: ${prediction.fits_machine.problems.join("; ")}` : "";
  role(card, "confirm-time").textContent = t.total_seconds != null
    ? `about ${secs(t.total_seconds)} · start: ${t.start_source}${fitsHere}` : fitsHere;
  box.hidden = false;
  role(card, "confirm-load").focus();
}

function role(card, name) { return card.querySelector(`[data-role="${name}"]`); }

/* Capabilities as llama-swap lists them (an object whose true keys count). */
function capTags(caps) {
  if (Array.isArray(caps)) return caps.map(String);
  if (caps && typeof caps === "object") return Object.entries(caps).filter(([, v]) => v).map(([k, v]) => (v === true ? k : `${k}: ${v}`));
  return caps ? [String(caps)] : [];
}

/* The capability keys each listed tag comes from: a tag is a memory (the last run's, not
   written in the config) when one of them was filled by ``observed`` (issue 30). */
const TAG_KEYS = { vision: ["in"], audio_transcriptions: ["in", "out"], audio_speech: ["in", "out"],
  image_generation: ["in", "out"], image_to_image: ["in", "out"], function_calling: ["tools"] };
function rememberedTag(model, tag) {
  const fills = (model.observed && model.observed.fills) || [];
  return (TAG_KEYS[tag] || []).some((k) => fills.includes(k));
}
function observedTitle(o) {
  return `remembered from the last run (${o.backend}${o.endpoint ? " " + o.endpoint : ""}, ${fullDate(Date.parse(o.at) / 1000)}), not written in the config`;
}
function observedText(o) {
  const parts = [];
  if (o.context !== undefined) parts.push(`context ${o.context}`);
  if (o.in) parts.push(`in ${o.in.join("+")}`);
  if (o.out) parts.push(`out ${o.out.join("+")}`);
  if (o.tools !== undefined) parts.push(o.tools ? "tools" : "no tools");
  if (o.total_slots !== undefined) parts.push(`${o.total_slots} slot${o.total_slots === 1 ? "" : "s"}`);
  return `${parts.join(" · ")} — last run, ${fullDate(Date.parse(o.at) / 1000)}`;
}

function renderContext(dd, model, run) {
  dd.replaceChildren();
  const configured = (run && run.configured) || model.configured || {};
  const state = run ? run.state : model.state;
  // The backend's own report exists only while it is ready (never a guess from the config).
  const reported = state !== "ready" ? undefined : run ? run.context_length : model.context_length;
  const meta = (run && run.meta) || model.meta || {};
  const line = () => { const d = el("div", { class: "ctx-line" }); dd.append(d); return d; };
  if (configured.context !== undefined) {
    const l = line();
    l.append(el("span", { class: "ctx-configured", "data-role": "ctx-configured", text: `configured ${configured.context}` }));
    if (configured.ctx_size !== undefined && (configured.parallel || 1) > 1) {
      l.append(" ", el("span", { class: "muted small", "data-role": "ctx-slots",
        text: `per request: -c ${configured.ctx_size} shared by -np ${configured.parallel} slots = ${configured.context} each` }));
    }
  }
  // Remembered (issue 30): what the backend said when it was last ready, labelled as such.
  const observed = model.observed;
  if (reported === undefined && observed && observed.context !== undefined) {
    line().append(el("span", { class: "ctx-observed", "data-role": "ctx-observed", title: observedTitle(observed),
      text: `last run ${observed.context}` }));
  }
  if (reported !== undefined) {
    const l = line();
    l.append(el("span", { class: "ctx-reported", "data-role": "ctx-reported", text: `reported ${reported}` }));
    if (meta.n_ctx_train !== undefined) l.append(" ", el("span", { class: "muted small", "data-role": "ctx-train", text: `· trained for ${meta.n_ctx_train}` }));
    const mismatch = (run && run.context_mismatch) || (configured.context !== undefined && configured.context !== reported
      ? `the backend reports ${reported} tokens per request, the command line asked for ${configured.context}` : null);
    if (mismatch) dd.append(el("div", { class: "ctx-warn", "data-role": "ctx-warn", role: "note", text: "⚠ less context than asked: " + mismatch }));
  }
  if (!dd.childNodes.length) dd.append(el("span", { class: "muted", text: "—" }));
}

/* The last swap to this model (issue 21): where its time went, the largest part in bold. A
   failed one says "failed" only: the failure box below says why (issue 32: once, not thrice). */
function renderSwap(card, receipt, failureShown) {
  const dd = role(card, "swap");
  dd.hidden = role(card, "swap-dt").hidden = !receipt;
  if (!receipt) return;
  const shown = JSON.stringify([receipt, !!failureShown]);
  if (dd.dataset.shown === shown) return;
  dd.dataset.shown = shown;
  const evicted = (receipt.evict || []).join(", ");
  // A failed start is a phase too (issue 41 #8): before its port listened it is the whole
  // start; after, the wait that ended in the failure. "← most" weighs it with the others.
  const failedEarly = receipt.error && typeof receipt.spawn_to_listening_seconds !== "number";
  const failedLate = receipt.error && !failedEarly;
  const parts = [
    ["drain", receipt.drain_seconds, `waited for ${evicted || "what it evicts"} to finish serving`],
    [receipt.stop_overlapped ? "stop (beside the start)" : "stop", evicted ? receipt.stop_seconds : undefined,
      receipt.stop_overlapped ? `${evicted} saved and stopped while the start ran (the budgets had room for both)` : `${evicted} stopped, every process gone`],
    ["start (failed)", failedEarly ? receipt.start_seconds : undefined, "the backend's start until it failed, before its port listened"],
    ["spawn → listening", receipt.spawn_to_listening_seconds, "the backend's start until its port listened"],
    [failedLate ? "listening → failed" : "listening → healthy", receipt.listening_to_ready_seconds,
      failedLate ? "from listening until the start failed" : "until its health check passed"],
    ["first byte", receipt.first_byte_seconds, "the first request's first byte after it, from that request's arrival"],
  ].filter(([, v]) => typeof v === "number");
  const phases = parts.filter(([k]) => k !== "first byte");
  const slowest = phases.length ? phases.reduce((a, b) => (b[1] > a[1] ? b : a))[0] : null;
  const failedPart = failedEarly ? "start (failed)" : failedLate ? "listening → failed" : null;
  const fmt = (v) => (v < 1 ? `${Math.round(v * 1000)} ms` : secs(v));
  // When the swap began: the time the models it evicted give for their stop (issue 41 #10).
  const at = receipt.began_at !== undefined ? receipt.began_at : receipt.at;
  dd.replaceChildren(
    el("span", { "data-part": "total", title: `began ${fullDate(at)}`, text: `${fmt(receipt.total_seconds || 0)} at ${clock(at)}` + (evicted ? ` · evicted ${evicted}` : "") }),
    receipt.error ? el("span", { class: "error small", "data-role": "swap-error", text: failureShown ? " · failed (why: below)" : ` · failed: ${receipt.error}` }) : "",
    el("ul", { class: "receipt" }, ...parts.map(([k, v, why]) => el("li", { "data-part": k, title: why,
      class: [k === slowest ? "slowest" : "", k === failedPart ? "failed" : ""].filter(Boolean).join(" ") },
      `${k} `, el("strong", { text: fmt(v) })))),
    promptCacheBlock(receipt),
    predictedLine(receipt.prediction, fmt));
}

/* The prompt cache in the last swap (issue 41 #6): what was saved of the models it evicted and
   restored of this one — tokens, size and time — and the cached tokens of its first request. */
function promptCacheBlock(receipt) {
  const pc = receipt.prompt_cache;
  if (!pc) return "";
  const size = (b) => (b >= 1024 ** 2 ? `${(b / 1024 ** 2).toFixed(1)} MiB` : `${Math.round(b / 1024)} KiB`);
  const what = (r) => `${(r.tokens || 0).toLocaleString()} tokens in ${r.slots || 0} slot${r.slots === 1 ? "" : "s"} (${size(r.bytes || 0)}, ${Math.round(r.ms || 0)} ms)` + (r.error ? ` · ${r.error}` : "");
  const lines = (pc.saved || []).map((r) => el("li", { "data-cache": "saved", "data-model": r.model }, `saved ${r.model}: ${what(r)}`));
  if (pc.restored) {
    const used = receipt.first_request_cached_tokens;
    lines.push(el("li", { "data-cache": "restored" }, `restored: ${what(pc.restored)}`
      + (typeof used === "number" ? ` · its first request took ${used.toLocaleString()} from the cache` : "")));
  }
  return el("div", { class: "prompt-cache small", "data-role": "prompt-cache" }, el("span", { class: "muted", text: "prompt cache" }), el("ul", { class: "receipt" }, ...lines));
}

/* How the dry run taken before the swap compared with it (docs/predicting-swaps.md). */
function predictedLine(p, fmt) {
  if (!p) return "";
  const bits = [p.evict_equal ? "evicted as predicted" : `predicted to evict ${(p.evict_predicted || []).join(", ") || "nothing"}`];
  if (p.time) bits.push(`predicted ${fmt(p.time.predicted_seconds)} (${fmt(p.time.range[0])}–${fmt(p.time.range[1])})${p.time.within ? "" : ": outside"}`);
  for (const [name, m] of Object.entries(p.memory || {})) bits.push(`${name} ${m.within ? "within" : "outside"} the predicted band`);
  return el("div", { class: "muted small", "data-role": "swap-predicted", title: "the dry run taken before this swap, against it", text: bits.join(" · ") });
}

/* What the model's restores proved of its prompt cache (issue 38): the verdict, the last
   proof, why it does not work and the fix (on the card as a tooltip, on its page in full). */
const CACHE_WORDS = { works: "works", partly: "works partly", fails: "does not work", unknown: "not proved yet", unsupported: "not saved" };
function renderPromptCache(card, verdict, swap) {
  const dd = role(card, "pcache");
  dd.hidden = role(card, "pcache-dt").hidden = !verdict;
  if (!verdict) return;
  const single = !!card.dataset.single;
  const moved = swap && swap.prompt_cache;
  const shown = JSON.stringify([verdict, moved, single]);
  if (dd.dataset.shown === shown) return;
  dd.dataset.shown = shown;
  dd.dataset.state = verdict.state;
  const last = verdict.last;
  const proof = last ? `${last.cached_tokens.toLocaleString()} of ${last.restored_tokens.toLocaleString()} restored tokens reused` : "";
  const why = [verdict.reason, verdict.stopped, verdict.fix ? `fix: ${verdict.fix}` : ""].filter(Boolean);
  const cls = verdict.state === "fails" ? "error" : verdict.state === "partly" ? "warn" : "";
  const moves = []; // its own restore (what a swap saved is on the card of the model it started)
  if (moved && moved.restored) moves.push(`restored ${moved.restored.tokens.toLocaleString()} tokens, ${(moved.restored.bytes / 1e6).toFixed(1)} MB, ${Math.round(moved.restored.ms)} ms`);
  dd.title = [...why, ...moves].join("\n");
  dd.replaceChildren(
    el("span", { class: cls, "data-part": "state", text: CACHE_WORDS[verdict.state] || verdict.state }),
    verdict.saving === false && verdict.state !== "unsupported" ? el("span", { class: "error small", "data-part": "stopped", text: " · saving stopped" }) : "",
    proof ? el("span", { class: "muted small", "data-part": "proof", text: ` · ${proof}` }) : "",
    single && why.length ? el("div", { class: "small", "data-part": "why" }, ...why.map((line) => el("div", { text: line }))) : "",
    single && moves.length ? el("div", { class: "muted small", "data-part": "moves", text: `last swap ${moves.join(" · ")}` }) : "");
}

function capacityText(cap) {
  if (!cap) return "";
  const parts = [];
  if (cap.kv_cache_tokens !== undefined) parts.push(`${cap.kv_cache_tokens.toLocaleString()} KV tokens`);
  if (cap.max_concurrency !== undefined) parts.push(`max concurrency ${cap.max_concurrency}×`);
  if (cap.weights_gib !== undefined) parts.push(`weights ${cap.weights_gib} GiB`);
  if (cap.kv_cache_gib !== undefined) parts.push(`KV ${cap.kv_cache_gib} GiB`);
  if (cap.n_ctx !== undefined) parts.push(`n_ctx ${cap.n_ctx}`);
  if (cap.n_ctx_seq !== undefined && cap.n_ctx_seq !== cap.n_ctx) parts.push(`per seq ${cap.n_ctx_seq}`);
  if (cap.kv_cells !== undefined) parts.push(`${cap.kv_cells.toLocaleString()} KV cells`);
  if (cap.kv_cache_mib !== undefined) parts.push(`KV ${cap.kv_cache_mib} MiB`);
  return parts.join(" · ");
}

function renderSummary() {
  const ready = models.list.filter((m) => (models.running[m.id] || m).state === "ready").length;
  const starting = models.list.filter((m) => (models.running[m.id] || {}).state === "starting").length;
  $("#models-summary").textContent = `${ready} of ${models.list.length} ready` + (starting ? ` · ${starting} starting` : "");
  const all = $("#unload-all");
  const busy = Object.values(models.running).some((r) => r.state !== "stopped");
  all.dataset.blocked = !can("admin") || !busy ? "1" : "0";
  all.disabled = link.offline || all.dataset.blocked === "1";
  all.title = can("admin") ? (busy ? "stop every running model" : "nothing is running") : `Unload all ${needs("admin")}`;
  const perm = $("#models-perm");
  perm.hidden = can("admin");
  perm.textContent = can("admin") ? "" : `Load, Unload and Unload all ${needs("admin", true)}.`;
}

function renderModels() {
  renderSummary();
  renderSelectors();
  const list = $("#models-list");
  if (!models.list.length) {
    list.replaceChildren(el("p", { class: "muted", text: "No models are listed." }));
    models.cards = {};
    return;
  }
  const seen = new Set();
  for (const model of models.list) {
    seen.add(model.id);
    let card = models.cards[model.id];
    if (!card || !card.isConnected) {
      card = models.cards[model.id] = modelCard(model.id);
      list.append(card);
    }
    updateCard(card, model, models.running[model.id]);
  }
  for (const [id, card] of Object.entries(models.cards)) {
    if (!seen.has(id)) { card.remove(); delete models.cards[id]; }
  }
  for (const child of [...list.children]) if (!child.classList.contains("card")) child.remove();
}

/* Why a stopped (or sleeping) model is not running (issue 32 #2): "stopped: evicted to start X
   at 18:04:05 (X then failed: utilization_guard)", from the gateway's ``last_stop``. */
function renderLastStop(box, state, stop) {
  const shown = (state === "stopped" || state === "sleeping") && stop && stop.at !== undefined;
  box.hidden = !shown;
  if (!shown) { box.dataset.shown = ""; return; }
  const key = JSON.stringify([state, stop]);
  if (box.dataset.shown === key) return;
  box.dataset.shown = key;
  box.dataset.reason = stop.reason || "";
  const then = !stop.target ? null : stop.outcome === "failed"
    ? el("span", { class: "error", "data-role": "stop-outcome", text: `${stop.target} then failed: ${stop.code || "error"}` })
    : el("span", { "data-role": "stop-outcome", text: stop.outcome === "started" ? `${stop.target} then started` : `${stop.target} starting` });
  box.replaceChildren(`${state === "sleeping" ? "asleep" : "stopped"}: ${stop.detail || stop.reason} at `, timeEl(stop.at),
    ...(then ? [" (", then, ")"] : []));
}

function updateCard(card, model, run) {
  const state = run ? run.state : model.state;
  card.dataset.state = state;
  const badge = role(card, "badge");
  badge.textContent = state;
  badge.dataset.state = state;
  const name = $(".name", card);
  name.textContent = model.name ? `${model.id} — ${model.name}` : model.id;
  // The config's description, as llama-swap's list shows it (its own page lists it below).
  const desc = role(card, "description");
  desc.hidden = !model.description || !!card.dataset.single;
  desc.textContent = desc.hidden ? "" : model.description;
  const tags = capTags(model.capabilities);
  const tagBox = role(card, "tags");
  tagBox.hidden = !tags.length;
  const tagKey = tags.map((t) => t + (rememberedTag(model, t) ? "~" : "")).join("|");
  if (tagBox.dataset.shown !== tagKey) {
    tagBox.dataset.shown = tagKey;
    tagBox.replaceChildren(...tags.map((t) => rememberedTag(model, t)
      ? el("span", { class: "tag remembered", "data-remembered": "1", title: observedTitle(model.observed), text: t })
      : el("span", { class: "tag", text: t })));
  }
  const admin = can("admin");
  const load = role(card, "load"), unload = role(card, "unload");
  load.dataset.blocked = !admin || state === "ready" || state === "starting" ? "1" : "0";
  unload.dataset.blocked = !admin || state === "stopped" || state === "stopping" ? "1" : "0";
  load.disabled = link.offline || load.dataset.blocked === "1";
  unload.disabled = link.offline || unload.dataset.blocked === "1";
  const why = admin ? null : `Load and Unload ${needs("admin", true)}`;
  for (const b of [load, unload]) if (why) b.title = why; else b.removeAttribute("title");
  // Said once: on the model's own page by its card, on the list above the cards (renderSummary).
  role(card, "perm").hidden = !why || !card.dataset.single;
  role(card, "perm").textContent = why || "";
  renderLastStop(role(card, "last-stop"), state, (run && run.last_stop) || model.last_stop);

  const progress = role(card, "progress");
  progress.hidden = state !== "starting";
  if (state === "starting" && run) {
    const elapsed = run.elapsed !== undefined ? run.elapsed + (Date.now() - run._at) / 1000 : undefined;
    role(card, "phase").textContent = run.phase || "starting";
    role(card, "elapsed").textContent = elapsed !== undefined ? secs(elapsed) : "";
    const fill = role(card, "fill");
    if (typeof run.progress === "number") {
      fill.classList.remove("indeterminate");
      fill.style.width = (run.progress * 100).toFixed(1) + "%";
    } else {
      fill.classList.add("indeterminate");
      fill.style.width = "";
    }
    role(card, "progress-line").textContent = run.last_progress_line || "";
  }

  renderContext(role(card, "context"), model, run);
  const failure = state === "failed" && run && run.last_failure;
  renderSwap(card, (run && run.last_swap) || model.last_swap, !!failure);
  renderPromptCache(card, (run && run.prompt_cache) || model.prompt_cache, (run && run.last_swap) || model.last_swap);
  const cap = capacityText(run && run.capacity);
  role(card, "capacity").textContent = cap;
  role(card, "capacity").hidden = role(card, "capacity-dt").hidden = !cap;
  role(card, "load-info").textContent = run ? `${run.in_flight || 0} in flight · ${run.queued || 0} queued` : "0 in flight · 0 queued";
  let ttl = "";
  if (run && run.unload_in !== undefined) ttl = secs(run.unload_in - (Date.now() - run._at) / 1000);
  else if (run && state === "ready") ttl = run.ttl ? `after ${secs(run.ttl)} idle` : "never (no ttl)";
  role(card, "ttl").textContent = ttl;
  role(card, "ttl").hidden = role(card, "ttl-dt").hidden = !ttl;

  // A failure is shown only while it is the model's state: an unload or a new start clears it.
  role(card, "failure").hidden = !failure;
  if (failure) {
    role(card, "fail-code").textContent = failure.code || "failed";
    role(card, "fail-summary").textContent = failure.summary || "";
    const at = failure.at !== undefined ? failure.at : run.since ? Date.parse(run.since) / 1000 : undefined;
    role(card, "fail-when").textContent = at !== undefined ? `failed at ${clock(at)} (${secs(Date.now() / 1000 - at)} ago)` : "";
    if (at !== undefined) role(card, "fail-when").title = fullDate(at);
    const ev = role(card, "fail-evidence");
    ev.textContent = failure.evidence || "";
    ev.hidden = !failure.evidence;
    role(card, "fail-fix").textContent = failure.fix || "—";
    let retry = "the next request retries the start";
    if (failure.retry_in !== undefined) {
      const left = failure.retry_in - (Date.now() - run._at) / 1000;
      // Under a tenth of a second left it would read "for 0.0 s more": it is as good as over.
      if (left >= 0.1) retry = `the same answer for ${secs(left)} more, then the next request retries`;
    }
    role(card, "fail-retry").textContent = retry;
  }
}

let refreshTimer = null;
function scheduleModelsRefresh(delay = 150) {
  if (refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    if (!current || current.name !== "models") return;
    try { await fetchModels(); renderModels(); } catch (err) {
      if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(String(err.message || err));
    }
  }, delay);
}

function onModelEvent(kind, text) {
  let data;
  try { data = JSON.parse(text); } catch { return; }
  if (kind === "snapshot") {
    if (data.models) takeRows(data.models);
    takeRunning(data.running);
    renderModels();
    return;
  }
  if (kind === "process.progress") {
    const run = models.running[data.model] || (models.running[data.model] = { model: data.model, state: "starting", _at: Date.now() });
    run.phase = data.phase;
    if (typeof data.progress === "number") run.progress = data.progress; else delete run.progress;
    run.last_progress_line = data.line;
    renderModels();
    return;
  }
  if (kind === "process.state") {
    const run = models.running[data.model];
    if (data.new !== "failed") clearNoticeFor(data.model); // an old error of this model is over
    if (data.new === "stopped") delete models.running[data.model];
    else if (run) {
      run.state = data.new;
      if (data.new !== "failed") delete run.last_failure;
      if (data.new === "starting") { run.elapsed = 0; run._at = Date.now(); }
    }
    else models.running[data.model] = { model: data.model, state: data.new, elapsed: 0, _at: Date.now() };
    const row = models.list.find((m) => m.id === data.model);
    if (row) row.state = data.new;
    renderModels();
  }
  if (["process.state", "process.metadata", "swap", "swap.done", "request.finished"].includes(kind)) scheduleModelsRefresh();
}

async function unloadAll() {
  try {
    const resp = await api("/api/models/unload", { method: "POST" });
    if (!resp.ok) notice(`unload all: ${resp.status}`);
  } catch (err) {
    if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(`unload all: ${err.message || err}`);
  }
  scheduleModelsRefresh(0);
}

/* Selectors: each target with its live state; the one a request would get is not guessed. */
function renderSelectors() {
  const box = $("#selectors-list");
  $("#models-selectors").hidden = !models.selectors.length;
  const stateOf = (t) => (models.running[t] || models.list.find((m) => m.id === t || (m.aliases || []).includes(t)) || {}).state;
  box.replaceChildren(...models.selectors.map((sel) => el("article", { class: "card", "data-selector": sel.id, "aria-label": `selector ${sel.id}` },
    el("div", { class: "card-head" }, el("strong", { class: "name", text: sel.name ? `${sel.id} — ${sel.name}` : sel.id }),
      el("span", { class: "tag", "data-role": "strategy", title: "how it picks a target", text: sel.selector.strategy })),
    sel.description ? el("p", { class: "muted small", text: sel.description }) : null,
    el("ol", { class: "targets" }, ...sel.selector.targets.map((t) => {
      const st = stateOf(t);
      return el("li", { "data-target": t }, el("span", { text: t }), " ",
        el("span", { class: "badge", "data-state": st || "peer", text: st || (t.includes("/") ? "peer" : "—") }));
    })))));
}

/* Peer models: /api/peers (read) with each peer's breaker; else the /v1/models peer rows. */
async function renderPeers(state) {
  let rows;
  if (can("read")) {
    const data = await apiJSON("/api/peers");
    rows = (data.peers || []).filter((p) => !p.dns).map((p) => ({ id: p.id, breaker: p.breaker, models: p.models || [], error: p.discover_error, pool: p.pool }));
  } else {
    const by = {};
    for (const r of models.peerRows) (by[r.peer] = by[r.peer] || []).push(r.id.slice(r.peer.length + 1));
    rows = Object.entries(by).map(([id, ms]) => ({ id, models: ms }));
  }
  if (current !== state) return;
  $("#models-peers").hidden = !rows.length;
  if (!rows.length) return;
  $("#peers-list").replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["peer", "link", "models (as peer/model)"].map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, ...rows.map((p) => el("tr", { "data-peer": p.id },
      el("td", { text: p.pool ? `${p.id} (pool ${p.pool})` : p.id }),
      el("td", { class: p.breaker === "open" ? "status-bad" : "", title: "the circuit breaker: open means requests skip this peer for now",
        text: p.breaker ? (p.breaker === "closed" ? "ok" : p.breaker.replace("_", " ")) + (p.error ? ` · ${p.error}` : "") : "—" }),
      el("td", { class: "wrap-cell", text: p.models.length ? p.models.map((m) => `${p.id}/${m}`).join(", ") : "none listed" }))))));
}

/* Profiles (llama-swap's): the active one's models are loaded and pinned; switching needs admin. */
async function renderProfiles(state) {
  const box = $("#models-profiles");
  if (!can("read")) { box.hidden = true; return; }
  const data = await apiJSON("/api/profiles");
  if (current !== state) return;
  const profiles = data.profiles || [];
  const shown = JSON.stringify([data, can("admin"), link.offline]);
  if (box.dataset.shown === shown) return; // unchanged: keep a choice being made
  box.dataset.shown = shown;
  box.hidden = !profiles.length;
  if (!profiles.length) return;
  const select = el("select", { id: "profile-select", "aria-label": "Active profile" },
    el("option", { value: "", text: "none" }), ...profiles.map((p) => el("option", { value: p.name, text: p.name })));
  select.value = data.active || "";
  const apply = el("button", { type: "button", id: "profile-apply", "data-needs-link": true, text: "Switch" });
  const admin = can("admin");
  apply.dataset.blocked = admin ? "0" : "1";
  apply.disabled = link.offline || !admin;
  if (!admin) apply.title = `Switching the profile ${needs("admin")}`;
  apply.onclick = async () => {
    apply.disabled = true;
    try {
      await apiJSON("/api/profiles/active", { method: "PUT", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ name: select.value || null }) });
    } catch (err) {
      if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(`profile: ${err.message || err}`);
    }
    $("#models-profiles").dataset.shown = "";
    if (current === state) await renderProfiles(state).catch(() => {});
    scheduleModelsRefresh(0);
  };
  const active = profiles.find((p) => p.name === data.active);
  const pins = active ? Object.entries(active.pins || {}) : [];
  box.replaceChildren(...[
    el("div", { class: "controls" },
      el("span", { class: "field" }, el("label", { for: "profile-select", text: "Profile" }), select), apply,
      el("span", { class: "small", "data-role": "profile-active", text: data.active ? `active: ${data.active}` : "no profile active" })),
    active && active.description ? el("p", { class: "muted small", text: active.description }) : null,
    pins.length ? el("p", { class: "small", "data-role": "profile-pins" }, "kept loaded: ",
      ...pins.flatMap(([pin, model], i) => [i ? " · " : "", el("code", { text: pin }), model && model !== pin ? ` → ${model}` : "", model ? "" : " (none)"])) : null,
    admin ? null : el("p", { class: "perm-note small", "data-role": "profile-perm", text: `Switching the profile ${needs("admin")}.` }),
  ].filter(Boolean));
}

pages.models = async (state) => {
  $("#unload-all").onclick = unloadAll;
  $("#events-status").textContent = can("read") ? "connecting…" : "not live: " + needs("read");
  await fetchModels();
  if (current !== state) return;
  renderModels();
  const extras = () => Promise.all([renderProfiles(state), renderPeers(state)]).catch((err) => {
    if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(String(err.message || err));
  });
  await extras();
  if (!can("read")) return;
  const stop = liveStream("/api/events", onModelEvent, (s) => { $("#events-status").textContent = s === "live" ? "● live" : s; });
  const tick = setInterval(renderModels, 1000);
  const poll = setInterval(() => { scheduleModelsRefresh(0); extras(); }, 5000);
  state.leave = () => { stop(); clearInterval(tick); clearInterval(poll); };
};

/* ---- One model: its card, its log, its requests ------------------------------------------- */

pages.model = async (state) => {
  const id = hashQuery().get("id") || "";
  $("#model-title").textContent = id || "Model";
  const box = $("#model-card");
  const logView = $("#model-log");
  logView.replaceChildren();
  $("#model-logs-link").href = `#/logs?source=${encodeURIComponent(id)}`;
  await fetchModels();
  const model = models.list.find((m) => m.id === id);
  if (!model) { box.replaceChildren(el("p", { class: "muted", text: `No model named “${id}” is listed for this key.` })); return; }
  const card = modelCard(id);
  card.dataset.single = "1"; // its scope note is said here, once
  box.replaceChildren(card);
  const details = el("dl", { class: "kv", "data-role": "details" });
  const add = (k, v) => { if (v !== undefined && v !== null && v !== "") details.append(el("dt", { text: k }), el("dd", { text: String(v) })); };
  add("name", model.name);
  add("description", model.description);
  add("aliases", (model.aliases || []).join(", "));
  add("capabilities", capTags(model.capabilities).join(", "));
  if (model.observed) add("observed (a memory)", observedText(model.observed));
  box.append(details);
  const draw = () => {
    const m = models.list.find((x) => x.id === id) || model;
    updateCard(card, m, models.running[id]);
  };
  draw();
  const rowsBox = $("#model-activity");
  const loadRows = async () => {
    if (!can("read")) { scopeNote(rowsBox, "read", "Its requests"); return; }
    const data = await apiJSON(`/api/activity?limit=20&model=${encodeURIComponent(id)}`);
    if (current !== state) return;
    const rows = data.data || [];
    rowsBox.replaceChildren(rows.length ? el("table", {},
      el("thead", {}, el("tr", {}, ...["time", "status", "tokens", "TTFT", "tok/s"].map((h) => el("th", { text: h })))),
      // A failed request is red, as in Activity, and has no TTFT or speed unless a token came.
      el("tbody", {}, ...rows.map((r) => { const none = tokenless(r); return el("tr", { "data-id": r.id, "data-outcome": rowOutcome(r) },
        el("td", {}, timeEl(r.at)),
        el("td", { class: statusClass(r), "data-role": "status", title: statusTitle(r) }, ...statusNodes(r)),
        el("td", { class: "num", text: r.completion_tokens == null ? "" : String(r.completion_tokens) }),
        el("td", { class: "num", "data-role": "ttft", text: none || r.ttft == null ? "" : (r.ttft * 1000).toFixed(0) + " ms" }),
        el("td", { class: "num", text: none || r.tokens_per_second == null ? "" : r.tokens_per_second.toFixed(1) })); })))
      : el("p", { class: "muted", text: "No requests recorded for this model yet." }));
  };
  await loadRows();
  let stop = null;
  if (can("read")) {
    stop = liveStream(`/logs/stream/${encodeURIComponent(id)}`, (_k, data) => {
      logView.append(el("div", { class: "line" }, ...ansiNodes(data)));
      while (logView.childNodes.length > 200) logView.firstChild.remove();
      logView.scrollTop = logView.scrollHeight;
    });
  } else scopeNote(logView, "read", "Its log");
  const tick = setInterval(draw, 1000);
  const poll = setInterval(() => { fetchModels().then(draw).catch(() => {}); loadRows().catch(() => {}); }, 3000);
  state.leave = () => { if (stop) stop(); clearInterval(tick); clearInterval(poll); };
};

/* ---- Memory ------------------------------------------------------------------------------ */

/* Colours by position among every configured model (the gateway's ``model_order``), never a
   hash: two models never share one, and a model keeps its colour in every basin and at every
   refresh, whichever others are loaded. */
const PALETTE = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#dc2626", "#4f46e5", "#0d9488"];
const colors = {};
function colorFor(model) { return colors[model] || "#6b7280"; }
function assignColors(names) {
  for (const k of Object.keys(colors)) delete colors[k];
  [...new Set(names)].forEach((name, i) => {
    colors[name] = i < PALETTE.length ? PALETTE[i] : `hsl(${(i * 137.508) % 360} 65% 45%)`;
  });
}

const SOURCE_WORDS = { receipt: "receipt: the backend's own allocator report", measured: "counted as measured: the peak seen while it ran", declared: "counted as declared: uses: in the config" };
const BASIN = { w: 430, h: 320, top: 20, bottom: 20, left: 70, width: 150, labelX: 236, gap: 13 };

/* Labels beside the basin, each at its band's middle, pushed apart so none overlaps. */
function placeLabels(items, minY, maxY) {
  items.sort((a, b) => a.want - b.want);
  let y = minY;
  for (const it of items) { it.y = Math.max(it.want, y); y = it.y + BASIN.gap; }
  let over = items.length ? items[items.length - 1].y - maxY : 0;
  for (let i = items.length - 1; i >= 0 && over > 0; i--) {
    const limit = i === items.length - 1 ? maxY : items[i + 1].y - BASIN.gap;
    if (items[i].y > limit) items[i].y = limit;
  }
  return items;
}

function drawBasin(res) {
  const inner = BASIN.h - BASIN.top - BASIN.bottom;
  const used = res.models.reduce((s, m) => s + (m.bytes || 0), 0);
  const scaleMax = Math.max(res.total_bytes, used) || 1;
  const px = (bytes) => (bytes / scaleMax) * inner;
  const floor = BASIN.h - BASIN.bottom;
  const x = BASIN.left;
  const totalTop = floor - px(res.total_bytes);
  const free = Math.max(0, res.total_bytes - used);
  const root = svg("svg", { viewBox: `0 0 ${BASIN.w} ${BASIN.h}`, role: "img", "aria-label": `${res.name}: ${gib(used)} of ${gib(res.total_bytes)}`, "data-resource": res.name, "data-total-bytes": res.total_bytes, "data-scale": (inner / scaleMax) });
  root.append(svg("rect", { class: "free", x, y: totalTop, width: BASIN.width, height: floor - totalTop, "data-free-bytes": free }, svg("title", {}, `free ${gib(free)}`)));
  root.append(svg("text", { x: x - 6, y: totalTop + 4, "text-anchor": "end" }, gib(res.total_bytes)));
  root.append(svg("text", { x: x - 6, y: floor + 4, "text-anchor": "end" }, "0"));
  let y = floor;
  const labels = [];
  const ordered = [...res.models.filter((m) => m.state !== "starting"), ...res.models.filter((m) => m.state === "starting")];
  for (const m of ordered) {
    const h = px(m.bytes || 0);
    const top = y - h;
    const color = colorFor(m.model);
    const starting = m.state === "starting";
    const label = `${m.model} (${m.state}): ${gib(m.bytes || 0)} counted (${m.source})` + (m.receipt_bytes !== undefined ? ` · receipt ${gib(m.receipt_bytes)}` : "");
    const g = svg("g", { "data-model": m.model, "data-bytes": m.bytes || 0, "data-state": m.state });
    if (!starting && h > 0 && m.weights_bytes !== undefined && m.kv_bytes !== undefined) {
      // The parts (a receipt's weights and KV) inside the counted band, from its floor; a
      // receipt larger than what is counted is drawn to the band's scale, never past it.
      const fit = Math.min(1, (m.bytes || 0) / ((m.weights_bytes + m.kv_bytes) || 1));
      const hw = px(m.weights_bytes) * fit, hk = px(m.kv_bytes) * fit;
      g.append(svg("rect", { class: "part", "data-part": "weights", "data-model": m.model, "data-bytes": m.weights_bytes, x, y: y - hw, width: BASIN.width, height: hw, fill: color, "fill-opacity": 0.85 },
        svg("title", {}, `${m.model} ${m.weights_label || "weights"}: ${gib(m.weights_bytes)}`)));
      g.append(svg("rect", { class: "part", "data-part": "kv", "data-model": m.model, "data-bytes": m.kv_bytes, x, y: y - hw - hk, width: BASIN.width, height: hk, fill: color, "fill-opacity": 0.45 },
        svg("title", {}, `${m.model} KV cache: ${gib(m.kv_bytes)}`)));
    }
    const hasParts = g.childNodes.length > 0;
    g.append(svg("rect", {
      class: "band" + (starting ? " starting" : ""), "data-model": m.model, "data-bytes": m.bytes || 0,
      x, y: top, width: BASIN.width, height: h,
      fill: starting || hasParts ? "none" : color, "fill-opacity": 0.8,
      stroke: starting ? color : "var(--card)", "stroke-width": starting ? 2 : 1,
      "stroke-dasharray": starting ? "6 4" : null,
    }, svg("title", {}, label)));
    root.append(g);
    labels.push({ want: top + h / 2 + 4, mid: top + h / 2, color, text: `${m.model} ${gib(m.bytes || 0)}${starting ? " (starting)" : ""}`, model: m.model });
    y = top;
  }
  for (const it of placeLabels(labels, BASIN.top + 4, floor)) {
    root.append(svg("line", { class: "leader", x1: x + BASIN.width, y1: it.mid, x2: BASIN.labelX - 3, y2: it.y - 4, stroke: it.color }));
    root.append(svg("text", { class: "label", "data-label-for": it.model, x: BASIN.labelX, y: it.y, style: `fill:${it.color}` }, it.text));
  }
  if (res.limit_bytes !== undefined) {
    const ly = floor - px(res.limit_bytes);
    const names = (res.limits || []).map((l) => `${l.model} ${l.fraction}`).join(", ");
    root.append(svg("line", { class: "limit", x1: x - 4, x2: x + BASIN.width + 4, y1: ly, y2: ly, "data-bytes": res.limit_bytes },
      svg("title", {}, `utilisation limit ${gib(res.limit_bytes)} (--gpu-memory-utilization ${names})`)));
    // Inside the basin, right-aligned above its line: never cut off by the left margin.
    root.append(svg("text", { class: "limit-label", x: x + BASIN.width - 4, y: ly - 4, "text-anchor": "end" }, `limit ${gib(res.limit_bytes)}`));
  }
  root.append(svg("path", { class: "wall", d: `M${x} ${totalTop} V${floor} H${x + BASIN.width} V${totalTop}` }));
  return root;
}

/* A model's share: what the scheduler counts (the band), then a receipt beside it, each
   labelled for what it is (issue 41 #1). */
function legendItem(m) {
  const parts = m.weights_bytes !== undefined ? `${m.weights_label || "weights"} ${gib(m.weights_bytes)} + KV ${gib(m.kv_bytes)}` : "";
  const receipt = m.receipt_bytes !== undefined
    ? [" · ", el("span", { "data-role": "receipt", text: `receipt ${gib(m.receipt_bytes)} (${parts})` })]
    : parts ? [` (${parts})`] : [];
  return el("li", { "data-model": m.model },
    el("span", { class: "swatch", style: `background:${colorFor(m.model)}` }),
    el("strong", { text: m.model }), " ", el("span", { "data-role": "counted", text: `${gib(m.bytes)} counted` }), ...receipt, " ",
    el("span", { class: "muted small", "data-role": "source", text: `${m.state} · ${m.source_note || SOURCE_WORDS[m.source] || m.source}` }));
}

function renderMemory(data) {
  const box = $("#memory-basins");
  if (!data.resources.length) {
    box.replaceChildren(el("p", { class: "muted" }, "No memory budgets are configured (",
      el("code", { text: "resources:" }), " in the config), so there is nothing to draw."));
    return;
  }
  assignColors([...(data.model_order || []), ...data.resources.flatMap((r) => r.models.map((m) => m.model))]);
  box.replaceChildren(...data.resources.map((res) => {
    // A starting model's memory is spoken for: it is not free.
    const used = res.models.reduce((s, m) => s + m.bytes, 0);
    const starting = res.models.filter((m) => m.state === "starting").reduce((s, m) => s + m.bytes, 0);
    const legend = el("ul", { class: "legend" }, ...res.models.map(legendItem));
    if (res.limit_bytes !== undefined) {
      const names = (res.limits || []).map((l) => `${l.model} --gpu-memory-utilization ${l.fraction}`).join(", ");
      legend.append(el("li", { "data-role": "limit" }, el("span", { class: "swatch limit-swatch" }), `limit ${gib(res.limit_bytes)} `,
        el("span", { class: "muted small", text: `(${names})` })));
    }
    legend.append(el("li", { class: "muted", "data-role": "free", "data-free-bytes": Math.max(0, res.total_bytes - used),
      title: "the total less what the scheduler counts for each model (declared uses:, else the measured peak): the room a start has without evicting",
      text: `free ${gib(Math.max(0, res.total_bytes - used))} of ${gib(res.total_bytes)}, as the scheduler counts` + (starting ? ` (${gib(starting)} held for starting models)` : "") }));
    return el("div", { class: "basin", "data-resource": res.name },
      el("div", {}, el("h2", { text: res.name }), drawBasin(res)), legend);
  }));
}

pages.memory = async (state) => {
  // While the gateway cannot be reached, say so in place of the basins (never a blank page);
  // the last basins drawn stay, marked stale, with the note above them.
  const load = async () => {
    try {
      const data = await apiJSON("/api/memory");
      if (current !== state) return;
      $("#memory-offline").hidden = true;
      renderMemory(data);
    } catch (err) {
      if (current !== state || err instanceof AuthError) return;
      const note = $("#memory-offline");
      note.hidden = false;
      note.textContent = err instanceof OfflineError
        ? `The gateway is unreachable (since ${clock(link.since / 1000)}): no memory figures until it answers; retrying every 2 s.`
        : `The memory view could not be read: ${err.message || err}`;
    }
  };
  await load();
  const timer = setInterval(load, 2000);
  state.leave = () => clearInterval(timer);
};

/* ---- Logs -------------------------------------------------------------------------------- */

const logs = { lines: [], paused: false, filter: "", regex: null, max: 3000, pending: false };

const ANSI_RE = /\x1b\[([0-9;]*)m/g;
function ansiNodes(text) {
  const out = [];
  let last = 0, classes = [];
  const push = (s) => { if (s) out.push(classes.length ? el("span", { class: classes.join(" "), text: s }) : document.createTextNode(s)); };
  text.replace(ANSI_RE, (m, codes, offset) => {
    push(text.slice(last, offset));
    last = offset + m.length;
    for (const c of (codes || "0").split(";").map(Number)) {
      if (c === 0) classes = [];
      else if (c === 1) classes.push("ansi-bold");
      else if (c >= 30 && c <= 37) classes = classes.filter((k) => !/^ansi-3/.test(k)).concat("ansi-" + c);
      else if (c >= 90 && c <= 97) classes = classes.filter((k) => !/^ansi-3/.test(k)).concat("ansi-" + (c - 60), "ansi-bold");
      else if (c === 39) classes = classes.filter((k) => !/^ansi-3/.test(k));
    }
    return m;
  });
  push(text.slice(last));
  return out;
}
function plain(text) { return text.replace(ANSI_RE, ""); }

/* The part of a progress line before its percentage or counter: lines that share it are one
   tqdm-style bar redrawn in place. */
function progressKey(text) {
  const t = plain(text);
  const m = /(\d+(?:\.\d+)?\s?%|\b\d+\s?\/\s?\d+\b)/.exec(t);
  if (!m) return null;
  const key = t.slice(0, m.index).replace(/\d{2}:\d{2}:\d{2}(?:[.,]\d+)?/g, "").trim();
  return key.length >= 3 ? key : null;
}

/* The search is a case-insensitive regular expression when "regex" is ticked (an invalid one
   is said so, and matches nothing), else plain text. */
function lineMatches(text) {
  if (!logs.filter) return true;
  if (logs.regex) return logs.regex.test(plain(text));
  return plain(text).toLowerCase().includes(logs.filter);
}
function setLogFilter() {
  const raw = $("#logs-search").value.trim();
  logs.filter = raw.toLowerCase();
  logs.regex = null;
  $("#logs-regex-error").hidden = true;
  if (raw && $("#logs-regex").checked) {
    try { logs.regex = new RegExp(raw, "i"); } catch (err) {
      logs.regex = /(?!)/;
      $("#logs-regex-error").textContent = `not a regular expression: ${err.message}`;
      $("#logs-regex-error").hidden = false;
    }
  }
  renderLogs();
}

function lineNode(entry) {
  const node = el("div", { class: "line" });
  node.append(...ansiNodes(entry.text));
  if (entry.count > 1) node.title = `updated ${entry.count} times in place`;
  return node;
}

const LOG_LAYOUT_STORE = "modelswap.logs.panels";
const LOG_FONT_STORE = "modelswap.logs.font";
/* A second panel for "both": the gateway's own log (proxy) beside a model's output (upstream). */
const proxyLogs = { lines: [], view: "#logs-proxy" };
function addLogLine(raw, panel = logs) {
  // A \r inside a line: only what was drawn last is visible.
  let text = raw;
  if (text.includes("\r")) {
    const parts = text.split("\r").filter((p) => p.trim());
    text = parts.length ? parts[parts.length - 1] : "";
  }
  const key = progressKey(text);
  const last = panel.lines[panel.lines.length - 1];
  const view = $(panel.view || "#logs-view");
  if (key && last && last.key === key) {
    last.text = text;
    last.count += 1;
    if (!logs.paused && last.node && last.node.isConnected) {
      const fresh = lineNode(last);
      last.node.replaceWith(fresh);
      last.node = fresh;
    }
    return;
  }
  const entry = { text, key, count: 1, node: null };
  panel.lines.push(entry);
  if (panel.lines.length > logs.max) {
    const gone = panel.lines.shift();
    if (gone.node) gone.node.remove();
  }
  if (logs.paused || !lineMatches(text)) return;
  const stick = view.scrollTop + view.clientHeight >= view.scrollHeight - 30;
  entry.node = lineNode(entry);
  view.append(entry.node);
  if (stick) view.scrollTop = view.scrollHeight;
}

function renderLogs() {
  renderPanel(proxyLogs);
  renderPanel(logs);
}
function renderPanel(panel) {
  const view = $(panel.view || "#logs-view");
  const nodes = [];
  for (const entry of panel.lines) {
    entry.node = null;
    if (lineMatches(entry.text)) nodes.push((entry.node = lineNode(entry)));
  }
  view.replaceChildren(...nodes);
  view.scrollTop = view.scrollHeight;
  $("#logs-status").textContent = logs.paused ? "paused" : $("#logs-status").textContent;
}

pages.logs = async (state) => {
  const select = $("#logs-source");
  if (!can("read")) { scopeNote($("#logs-view"), "read", "Logs"); return; }
  try {
    const found = await catalog();
    const chosen = hashQuery().get("source") ?? select.value;
    select.replaceChildren(el("option", { value: "", text: "gateway" }),
      ...found.list.filter((m) => !m.alias_for).map((m) => el("option", { value: m.id, text: m.id })));
    select.value = chosen;
    if (select.value !== chosen) select.value = "";
  } catch (err) {
    if (err instanceof AuthError) throw err;
  }
  // Panels: one log (the source chosen), or "both": a model's output (upstream) beside the
  // gateway's own log (proxy), as llama-swap's Logs page shows them.
  const layout = $("#logs-layout");
  layout.value = hashQuery().get("panels") || localStorage.getItem(LOG_LAYOUT_STORE) || "one";
  if (!layout.value) layout.value = "one";
  const font = $("#logs-font");
  font.value = localStorage.getItem(LOG_FONT_STORE) || "m";
  if (!font.value) font.value = "m";
  const applyFont = () => { for (const v of document.querySelectorAll("#page-logs .logs")) v.dataset.font = font.value; };
  applyFont();
  font.onchange = () => { localStorage.setItem(LOG_FONT_STORE, font.value); applyFont(); };
  let stops = [];
  const connect = () => {
    for (const s of stops) s();
    stops = [];
    const both = layout.value === "both";
    if (both && !select.value && select.options.length > 1) select.value = select.options[1].value;
    $("#logs-proxy-wrap").hidden = !both;
    $("#logs-panels").classList.toggle("two", both);
    const title = $("#logs-main-title");
    title.hidden = !both;
    title.textContent = select.value ? `${select.value} (upstream)` : "gateway (proxy)";
    logs.lines = [];
    proxyLogs.lines = [];
    renderLogs();
    const path = select.value ? `/logs/stream/${encodeURIComponent(select.value)}` : "/logs/stream";
    stops.push(liveStream(path, (_kind, data) => addLogLine(data), (s) => {
      $("#logs-status").textContent = logs.paused ? "paused" : s === "live" ? "● live" : s;
    }));
    if (both) stops.push(liveStream("/logs/stream", (_kind, data) => addLogLine(data, proxyLogs)));
  };
  select.onchange = connect;
  layout.onchange = () => { localStorage.setItem(LOG_LAYOUT_STORE, layout.value); connect(); };
  $("#logs-search").oninput = setLogFilter;
  $("#logs-regex").onchange = setLogFilter;
  $("#logs-wrap").onchange = (e) => { for (const v of document.querySelectorAll("#page-logs .logs")) v.classList.toggle("nowrap", !e.target.checked); };
  $("#logs-pause").onclick = (e) => {
    logs.paused = !logs.paused;
    e.target.textContent = logs.paused ? "Resume" : "Pause";
    e.target.setAttribute("aria-pressed", String(logs.paused));
    $("#logs-status").textContent = logs.paused ? "paused" : "● live";
    if (!logs.paused) renderLogs();
  };
  $("#logs-clear").onclick = () => { logs.lines = []; proxyLogs.lines = []; renderLogs(); };
  connect();
  state.leave = () => { for (const s of stops) s(); };
};

/* ---- Activity ---------------------------------------------------------------------------- */

/* ``wide``: hidden below 600 px, so a phone sees status, tokens and speed without scrolling. */
const COLUMNS = [
  { key: "at", label: "time", fmt: clock, title: "arrival (local time; the full date on hover)" },
  { key: "model", label: "model" },
  { key: "route", label: "route", wide: true, fmt: (v, r) => (r && r.method && r.method !== "POST" ? `${r.method} ${v}` : v) },
  { key: "status", label: "status", num: true },
  { key: "streamed", label: "stream", fmt: (v) => (v ? "yes" : "no"), wide: true },
  { key: "prompt_tokens", label: "prompt", num: true, wide: true },
  { key: "cached_tokens", label: "cached", num: true, wide: true, title: "prompt tokens the backend took from its cache (blank: it did not say)" },
  { key: "completion_tokens", label: "tokens", num: true, title: "completion tokens" },
  { key: "ttft", label: "TTFT", num: true, fmt: (v) => (v == null ? "" : (v * 1000).toFixed(0) + " ms"),
    title: "first generated token after the model was ready (a cold start's load not counted)" },
  { key: "first_byte", label: "first byte", num: true, wide: true, fmt: (v) => (v == null ? "" : (v * 1000).toFixed(0) + " ms"),
    title: "the backend's first byte after the request arrived (load included)" },
  { key: "load", label: "load", num: true, wide: true, fmt: (v) => (v == null ? "" : secs(v)),
    title: "time this request waited for its model to start" },
  { key: "duration", label: "duration", num: true, wide: true, fmt: (v) => (v == null ? "" : v.toFixed(2) + " s") },
  { key: "tokens_per_second", label: "tok/s", num: true, fmt: (v) => (v == null ? "" : v.toFixed(1)) },
  { key: "key_name", label: "key", wide: true },
  { key: "error_code", label: "error", wide: true },
];
const PAGE = 100;
const activity = { rows: [], sort: "at", dir: -1, more: false, live: null, reload: null };
const COLUMNS_STORE = "modelswap.activity.hidden";
/* Columns the user hid (kept in localStorage); the time always shows: it opens the request. */
function hiddenColumns() {
  try { return new Set(JSON.parse(localStorage.getItem(COLUMNS_STORE) || "[]")); } catch { return new Set(); }
}
function shownColumns() { const hidden = hiddenColumns(); return COLUMNS.filter((c) => c.key === "at" || !hidden.has(c.key)); }
function renderColumnChooser() {
  const hidden = hiddenColumns();
  $("#activity-columns-list").replaceChildren(...COLUMNS.filter((c) => c.key !== "at").map((c) => el("label", { class: "small" },
    el("input", { type: "checkbox", "data-column": c.key, checked: !hidden.has(c.key), onchange: (e) => {
      const now = hiddenColumns();
      if (e.target.checked) now.delete(c.key); else now.add(c.key);
      localStorage.setItem(COLUMNS_STORE, JSON.stringify([...now]));
      renderActivity();
    } }), ` ${c.label}`)));
}

/* Export: the rows shown (filters applied), never a captured body or header. */
const EXPORT_DROP = new Set(["request_body", "response_body", "request_headers", "response_headers"]);
function exportRows() {
  return activityFiltered().map((r) => Object.fromEntries(Object.entries(r).filter(([k]) => !EXPORT_DROP.has(k))));
}
function download(name, type, text) {
  // a data: URL, so the download is no request to anywhere
  const a = el("a", { href: `data:${type};charset=utf-8,` + encodeURIComponent(text), download: name });
  document.body.append(a);
  a.click();
  a.remove();
}
function exportCSV() {
  const rows = exportRows();
  const keys = [...new Set(["id", ...COLUMNS.map((c) => c.key), ...rows.flatMap((r) => Object.keys(r))])].filter((k) => !EXPORT_DROP.has(k));
  const cell = (v) => { const t = v == null ? "" : String(v); return /[",\n\r]/.test(t) ? `"${t.replace(/"/g, '""')}"` : t; };
  download("modelswap-activity.csv", "text/csv", [keys.join(","), ...rows.map((r) => keys.map((k) => cell(r[k])).join(","))].join("\r\n") + "\r\n");
}
function exportJSON() { download("modelswap-activity.json", "application/json", JSON.stringify(exportRows(), null, 1)); }

/* Stats over the rows shown: token totals and two speed histograms. Prompt speed is the prompt's
   tokens over TTFT (the time to the first token is the prompt's processing); generation speed
   is tok/s as everywhere (tokens after the first over the time after it). */
function histogram(id, title, values, unit) {
  const W = 300, H = 110, L = 30, R = 8, T = 8, B = 30;
  const box = el("figure", { class: "chart", "data-histogram": id, style: "margin:0" }, el("figcaption", { class: "small" }, el("strong", { text: title })));
  if (!values.length) { box.append(el("p", { class: "muted small", text: "no requests with this figure among the rows shown" })); return box; }
  const lo = Math.min(...values), hi = Math.max(...values);
  const bins = Math.min(10, Math.max(1, values.length));
  const width = hi > lo ? (hi - lo) / bins : 1;
  const counts = new Array(bins).fill(0);
  for (const v of values) counts[Math.min(bins - 1, Math.floor((v - lo) / width))] += 1;
  const cmax = Math.max(...counts);
  const bw = (W - L - R) / bins;
  const sorted = [...values].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)];
  const fmt = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
  box.querySelector("figcaption").append(el("span", { class: "muted", "data-role": "median", text: ` · median ${fmt(median)} ${unit} · ${values.length} requests` }));
  box.append(svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title}: how many requests at each speed` },
    svg("path", { class: "axis", d: `M${L} ${T} V${H - B} H${W - R}` }),
    svg("text", { class: "axis-label", x: L - 3, y: T + 8, "text-anchor": "end" }, String(cmax)),
    svg("text", { class: "axis-label", x: L - 3, y: H - B, "text-anchor": "end" }, "0"),
    svg("text", { class: "axis-label", x: L, y: H - B + 12 }, fmt(lo)),
    svg("text", { class: "axis-label", x: W - R, y: H - B + 12, "text-anchor": "end" }, fmt(lo + width * bins)),
    svg("text", { class: "axis-label", x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, unit),
    ...counts.map((c, i) => svg("rect", { class: "bar", x: (L + i * bw + 1).toFixed(1), y: (H - B - (c / cmax) * (H - T - B)).toFixed(1),
      width: Math.max(1, bw - 2).toFixed(1), height: ((c / cmax) * (H - T - B)).toFixed(1) },
      svg("title", {}, `${fmt(lo + i * width)}–${fmt(lo + (i + 1) * width)} ${unit}: ${c} requests`)))));
  return box;
}
function renderStats() {
  const rows = activityFiltered();
  const sum = (k) => rows.reduce((t, r) => t + (r[k] || 0), 0);
  const hasCached = rows.some((r) => r.cached_tokens != null);
  const card = (role, label, value, title) => el("div", { class: "stat", "data-stat": role, title },
    el("div", { class: "stat-value", text: value }), el("div", { class: "muted small", text: label }));
  // Processed: the prompt tokens the backend computed, not those it took from its cache.
  const processed = (r) => Math.max(0, (r.prompt_tokens || 0) - (r.cached_tokens || 0));
  const prompt = rows.filter((r) => processed(r) && r.ttft > 0).map((r) => processed(r) / r.ttft);
  const gen = rows.filter((r) => r.tokens_per_second != null).map((r) => r.tokens_per_second);
  const preflights = rows.filter((r) => rowOutcome(r) === "preflight").length;
  $("#activity-stats").replaceChildren(
    el("div", { class: "stat-cards" },
      // A CORS preflight is a browser's check, not a request: counted apart when there are any.
      card("requests", "requests", rows.filter((r) => rowOutcome(r) !== "preflight").length.toLocaleString(), "the rows shown (filters applied), CORS preflights apart"),
      card("errors", "errors", rows.filter(failed).length.toLocaleString(), "status 400 and above, or an error event inside a 200 stream (a client's own stop is none)"),
      ...(preflights ? [card("preflights", "CORS preflights", preflights.toLocaleString(), "browsers' OPTIONS checks among the rows shown")] : []),
      card("processed", "prompt tokens processed", rows.reduce((t, r) => t + processed(r), 0).toLocaleString(),
        "the prompt tokens the backends computed: their prompt tokens less those taken from the cache"),
      card("cached", "prompt tokens cached", hasCached ? sum("cached_tokens").toLocaleString() : "—",
        hasCached ? "prompt tokens the backend took from its cache" : "no backend reported cached tokens for these rows"),
      card("generated", "tokens generated", sum("completion_tokens").toLocaleString(), "completion tokens")),
    histogram("prompt", "Prompt speed (prompt tokens processed ÷ TTFT)", prompt, "tok/s"),
    histogram("generation", "Generation speed (tok/s)", gen, "tok/s"));
}

/* In flight (GET /api/inflight), with Cancel for admin keys (else disabled, saying why). */
async function loadInflight(state) {
  const data = await apiJSON("/api/inflight");
  if (current !== state) return;
  const rows = data.requests || [];
  $("#inflight-count").textContent = `· ${rows.length}`;
  if (!rows.length) { $("#inflight").replaceChildren(el("p", { class: "muted small", "data-role": "inflight-none", text: "No request is being served now." })); return; }
  const admin = can("admin");
  const why = admin ? null : `Cancel ${needs("admin")}`;
  $("#inflight").replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ...["since", "model", "route", "state", "key", ""].map((h, i) => el("th", { scope: "col", class: i >= 2 && i <= 4 ? "wide" : "", text: h })))),
    el("tbody", {}, ...rows.map((r) => el("tr", { "data-inflight": r.id },
      el("td", { class: "num", text: secs((r.elapsed_ms || 0) / 1000) }),
      el("td", { text: r.model || r.requested || "—" }),
      el("td", { class: "wide", text: `${r.method} ${r.req_path}` }),
      el("td", { class: "wide", text: r.cancelling ? "cancelling…" : r.state || "" }),
      el("td", { class: "wide", text: r.key_name || "" }),
      el("td", {}, el("button", { type: "button", "data-needs-link": true, "data-blocked": admin ? "0" : "1", "aria-label": `Cancel request ${r.id}`,
        disabled: !admin || r.cancelling || link.offline, title: why || "close the upstream request and free the model's slot", text: "Cancel",
        onclick: async (e) => {
          e.target.disabled = true;
          try { await apiJSON(`/api/inflight/${encodeURIComponent(r.id)}/cancel`, { method: "POST" }); } catch (err) {
            if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(`cancel: ${err.message || err}`);
          }
          loadInflight(state).catch(() => {});
        } })))))),
    why ? el("p", { class: "perm-note small", "data-role": "inflight-perm", text: why + "." }) : "");
}

/* A row that never reached a model names what was asked for instead (bounded, redacted). */
function modelCell(r) {
  if (r.model) return el("td", { text: r.model });
  if (r.requested) return el("td", { class: "asked", title: "the model the request named" }, el("span", { text: r.requested }), el("span", { class: "muted small", text: r.status === 404 ? " (no such model)" : " (asked)" }));
  return el("td", { class: "muted", text: "—" });
}

/* One request in a dialog: its fields, and the bodies only when activity.capture recorded them
   (already bounded and redacted by the gateway). */
const SECOND_FIELDS = new Set(["ttft", "first_byte", "load", "duration"]);
/* A field as a person reads it: a time as the page's clock (the full date beside it), seconds
   as ms or s, other fractions to three decimals, objects as JSON — never a raw Unix time or
   sixteen digits. */
function fieldNode(k, v) {
  if ((k === "at" || k.endsWith("_at")) && typeof v === "number") return el("dd", { "data-field": k }, timeEl(v), ` · ${fullDate(v)}`);
  if (k.endsWith("_headers")) return headersNode(k, v);
  let text;
  if (typeof v === "number" && SECOND_FIELDS.has(k)) text = v < 1 ? `${(v * 1000).toFixed(v < 0.01 ? 1 : 0)} ms` : `${v.toFixed(2)} s`;
  else if (typeof v === "number" && !Number.isInteger(v)) text = String(+v.toFixed(3));
  else if (typeof v === "object") text = JSON.stringify(v);
  else text = String(v);
  return el("dd", { "data-field": k, text });
}
/* Captured headers (a JSON object, credentials already masked): one a row, name and value. */
function headersNode(k, v) {
  let map = v;
  if (typeof v === "string") { try { map = JSON.parse(v); } catch { map = null; } }
  if (!map || typeof map !== "object") return el("dd", { "data-field": k, text: String(v) });
  const rows = Array.isArray(map) ? map : Object.entries(map);
  return el("dd", { "data-field": k }, el("table", { class: "headers", "data-role": "headers" },
    el("tbody", {}, ...rows.map(([name, value]) => el("tr", {}, el("th", { scope: "row", text: String(name) }),
      el("td", { text: Array.isArray(value) ? value.join(", ") : String(value) }))))));
}
/* A captured body: JSON pretty-printed (two spaces); anything else (a stream, a cut body) as
   it was captured. */
function prettyBody(text) {
  if (!text) return "";
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch { return text; }
}
/* The dialog's "why": the outcome, the error's code and message, and the rule in full — a
   policy's program, line and text as it ran (and the applies that led there), a limit's name,
   value and count, a preflight's origin. Nothing when the request went as asked. */
function whyNode(r) {
  const outcome = rowOutcome(r), rule = r.rule;
  if (outcome === "ok" && !rule) return null;
  const items = el("dl", { class: "kv" });
  const add = (k, v, role) => items.append(el("dt", { text: k }), el("dd", { "data-role": role, text: String(v) }));
  add("outcome", outcome === "stopped" ? "stopped by the client (not an error)" : outcome, "why-outcome");
  if (r.error_code) add("code", r.error_code, "why-code");
  if (r.error_message) add("message", r.error_message, "why-message");
  if (rule && rule.kind === "policy") {
    add("denied by", `${rule.program || "a policy"}, line ${rule.line}`, "why-program");
    if (rule.applied_by && rule.applied_by.length) add("applied by", rule.applied_by.join(" → "), "why-applied");
    items.append(el("dt", { text: "rule" }), el("dd", {}, el("pre", { class: "body", "data-role": "why-rule", text: rule.rule || "" })));
  } else if (rule && rule.kind === "limit") {
    add("limit", `${rule.name}: ${rule.value} (${rule.in_flight} in flight when it came)`, "why-limit");
  } else if (rule && rule.kind === "cors") {
    add("origin", `${rule.origin || "(none sent)"}: ${rule.allowed ? "allowed" : "not allowed"}`, "why-origin");
  }
  if (outcome === "stopped") add("received", `${r.completion_tokens || 0} tokens before it went away`, "why-received");
  return el("section", { class: "why-box", "data-role": "why-box" }, el("h3", { text: "why" }), items);
}
function showCapture(r) {
  const dlg = $("#capture");
  const fields = el("dl", { class: "kv" });
  const why = whyNode(r);
  for (const [k, v] of Object.entries(r)) {
    if (k === "request_body" || k === "response_body" || v === null || v === undefined) continue;
    if (why && k === "rule") continue;  // the why above shows it, in words
    fields.append(el("dt", { text: k }), fieldNode(k, v));
  }
  const bodies = r.request_body !== undefined || r.response_body !== undefined
    ? [el("h3", { text: "request body (redacted)" }), el("pre", { class: "body", "data-role": "request-body", text: prettyBody(r.request_body) }),
       el("h3", { text: "response body (redacted)" }), el("pre", { class: "body", "data-role": "response-body", text: prettyBody(r.response_body) })]
    : [el("p", { class: "muted", "data-role": "no-capture", text: "No bodies: they are recorded only with activity.capture: true in the config (bounded by captureBytes, redacted)." })];
  $("#capture-body").replaceChildren(...(why ? [why] : []), fields, ...bodies);
  dlg.showModal();
}

/* The status cell: the HTTP status, or — for a stream that failed after its 200 went out —
   the outcome (issue 41 #11), the status in its title. A client's own stop and a CORS
   preflight say so: neither is an error. */
function statusText(r) {
  const outcome = rowOutcome(r);
  if (outcome === "stopped") return `${r.status} stopped by the client`;
  if (outcome === "preflight") return `${r.status} preflight`;
  if (failed(r) && r.status < 400) return `${r.error_code || "error"} (mid-stream)`;
  // The code beside the status: the error column is off screen on a phone (issue 41 #3).
  if (failed(r) && r.error_code) return `${r.status} ${r.error_code}`;
  return r.status == null ? "" : String(r.status);
}
function statusTitle(r) {
  const outcome = rowOutcome(r);
  if (outcome === "stopped") return "the client went away before the answer ended: not an error; its tokens are those it received";
  if (outcome === "preflight") return "a browser's CORS check (OPTIONS), not a request for a model";
  if (failed(r) && r.status < 400) return `HTTP ${r.status} had been sent when the answer failed: an error event inside the stream`;
  return [r.error_code, r.error_message].filter(Boolean).join(": ");
}
/* Why, in one short line under the status (issue 41): the rule that refused the request — a
   policy's program and line, a limit and its value, a preflight's origin — or the error's
   message; the whole rule is in the request's dialog. */
function whyText(r) {
  const rule = r.rule;
  if (rule && rule.kind === "policy") return `denied by ${rule.program || "a policy"} line ${rule.line}${r.error_message ? `: ${r.error_message}` : ""}`;
  if (rule && rule.kind === "limit") return `${rule.name} ${rule.value} reached (${rule.in_flight} in flight)`;
  if (rule && rule.kind === "cors") return `origin ${rule.origin || "(none)"} ${rule.allowed ? "allowed" : "not allowed"}`;
  if (rowOutcome(r) === "stopped") return r.completion_tokens ? `${r.completion_tokens} tokens received` : "";
  // An error no rule refused (a backend's own, a start's): its message, as the client read it.
  if (failed(r) && r.error_message) return cut(r.error_message, WHY_CHARS);
  return "";
}
const WHY_CHARS = 160;  // of a message under the status: the dialog has it whole
function cut(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }
/* The status cell's content: the status line, and the why under it when there is one. */
function statusNodes(r) {
  const why = whyText(r);
  return why ? [el("span", { text: statusText(r) }), el("span", { class: "why", "data-role": "why", text: why })] : [statusText(r)];
}
/* What the row's outcome is: the gateway's ``outcome`` (``ok``, ``error``, ``stopped``,
   ``preflight``); rows from before it was recorded, by status. */
function rowOutcome(r) { return r.outcome || (r.status >= 400 ? "error" : "ok"); }
/* An error: a status of 400 or more, or an error event inside a 200 stream (e.g. a start that
   failed after the loading comments) — never a client's own stop or a preflight. */
function failed(r) { return rowOutcome(r) === "error"; }
function statusClass(r) { const o = rowOutcome(r); return o === "error" ? "status-bad" : o === "stopped" ? "status-stopped" : o === "preflight" ? "status-preflight" : ""; }
/* A failed request that generated nothing: its "TTFT" would be the error's first byte. */
function tokenless(r) { return failed(r) && !r.completion_tokens; }
const TOKEN_TIMES = new Set(["ttft", "tokens_per_second"]);
function activityFiltered() {
  const outcome = $("#activity-outcome").value;
  return activity.rows.filter((r) => !outcome || rowOutcome(r) === outcome);
}

function renderActivity() {
  const head = $("#activity-table thead tr");
  const columns = shownColumns();
  head.replaceChildren(...columns.map((c) => {
    const th = el("th", { class: (c.num ? "num" : "") + (c.wide ? " wide" : ""), scope: "col", title: c.title,
      "aria-sort": activity.sort === c.key ? (activity.dir > 0 ? "ascending" : "descending") : "none" });
    th.append(el("button", { type: "button", text: c.label, "data-sort": c.key, onclick: () => {
      activity.dir = activity.sort === c.key ? -activity.dir : c.num || c.key === "at" ? -1 : 1;
      activity.sort = c.key;
      renderActivity();
    } }));
    return th;
  }));
  const rows = activityFiltered().sort((a, b) => {
    const x = a[activity.sort], y = b[activity.sort];
    if (x == null && y == null) return 0;
    if (x == null) return 1;
    if (y == null) return -1;
    return (x < y ? -1 : x > y ? 1 : 0) * activity.dir;
  });
  $("#activity-table tbody").replaceChildren(...rows.map((r) => el("tr", { "data-id": r.id, "data-status": r.status, "data-outcome": rowOutcome(r) },
    ...columns.map((c) => c.key === "model" ? modelCell(r) : c.key === "at" ? el("td", {},
      el("button", { type: "button", class: "link row-open", "aria-label": `details of request ${r.id}`, title: fullDate(r.at), onclick: () => showCapture(r), text: c.fmt(r.at) }))
      : c.key === "status" ? el("td", { class: `num ${statusClass(r)}${whyText(r) ? " has-why" : ""}`.trim(), "data-role": "status", title: statusTitle(r) || null }, ...statusNodes(r))
      : el("td", { class: (c.num ? "num" : "") + (c.wide ? " wide" : ""),
      text: TOKEN_TIMES.has(c.key) && tokenless(r) ? "" : c.fmt ? c.fmt(r[c.key], r) : r[c.key] == null ? "" : String(r[c.key]) })))));
  $("#activity-empty").hidden = rows.length > 0;
  $("#activity-older").disabled = !activity.more;
  // The footer, the stats and the charts count the same rows: those the filters let through.
  const loaded = activity.rows.length, more = activity.more ? " · older ones on the next page" : " · that is all";
  $("#activity-range").textContent = !loaded ? "" : rows.length === loaded ? `${loaded} requests shown${more}`
    : `${rows.length} of ${loaded} loaded requests shown (filtered)${more}`;
  renderStats();
  renderCharts();
}

function renderCharts() {
  const byModel = {};
  for (const r of activityFiltered()) {
    if (r.tokens_per_second == null || !r.model) continue;
    (byModel[r.model] = byModel[r.model] || []).push(r);
  }
  // Axes: tok/s on the left (0 and the max), time below (first and last request).
  const W = 260, H = 90, L = 34, R = 6, T = 6, B = 18;
  $("#activity-charts").replaceChildren(...Object.entries(byModel).map(([model, rs]) => {
    rs.sort((a, b) => a.at - b.at);
    const t0 = rs[0].at, t1 = rs[rs.length - 1].at;
    const vmax = Math.max(...rs.map((r) => r.tokens_per_second)) || 1;
    const pts = rs.map((r) => [L + (t1 > t0 ? (r.at - t0) / (t1 - t0) : 0.5) * (W - L - R),
      H - B - (r.tokens_per_second / vmax) * (H - T - B), r]);
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${model} tokens per second over time` },
      svg("path", { class: "axis", d: `M${L} ${T} V${H - B} H${W - R}` }),
      svg("text", { class: "axis-label", x: L - 3, y: T + 8, "text-anchor": "end" }, vmax.toFixed(0)),
      svg("text", { class: "axis-label", x: L - 3, y: H - B, "text-anchor": "end" }, "0"),
      svg("text", { class: "axis-label", x: 2, y: (H - B) / 2 + 4 }, "tok/s"),
      svg("text", { class: "axis-label", x: L, y: H - 4 }, clock(t0)),
      svg("text", { class: "axis-label", x: W - R, y: H - 4, "text-anchor": "end" }, clock(t1)),
      svg("polyline", { class: "spark", points: pts.map((p) => `${p[0].toFixed(1)},${p[1].toFixed(1)}`).join(" ") }),
      ...pts.map(([x, y, r]) => svg("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 2.5 },
        svg("title", {}, `${fullDate(r.at)}: ${r.tokens_per_second.toFixed(1)} tok/s`))));
    const last = rs[rs.length - 1].tokens_per_second;
    return el("figure", { class: "chart", "data-model": model, style: "margin:0" },
      el("figcaption", { class: "small" }, el("strong", { text: model }),
        el("span", { class: "muted", text: ` tok/s · last ${last.toFixed(1)} · max ${vmax.toFixed(1)}` })), chart);
  }));
}

async function loadActivity(state, { older = false } = {}) {
  const params = new URLSearchParams({ limit: String(PAGE) });
  const model = $("#activity-model").value;
  if (model) params.set("model", model);
  if (older && activity.rows.length) params.set("before", String(Math.min(...activity.rows.map((r) => r.id))));
  const data = await apiJSON("/api/activity?" + params);
  if (current !== state) return;
  const rows = data.data || [];
  activity.rows = older ? activity.rows.concat(rows) : rows;
  activity.more = rows.length === PAGE;
  const models = new Set([...$("#activity-model").options].map((o) => o.value));
  for (const r of rows) if (r.model && !models.has(r.model)) { models.add(r.model); $("#activity-model").append(el("option", { value: r.model, text: r.model })); }
  renderActivity();
}

pages.activity = async (state) => {
  if (!can("read")) { scopeNote($("#activity-charts"), "read", "The activity log"); return; }
  const fail = (err) => { if (!(err instanceof AuthError) && !(err instanceof OfflineError)) notice(String(err.message || err)); };
  $("#activity-refresh").onclick = () => loadActivity(state).catch(fail);
  $("#activity-older").onclick = () => loadActivity(state, { older: true }).catch(fail);
  $("#activity-model").onchange = () => loadActivity(state).catch(fail);
  $("#activity-outcome").onchange = () => renderActivity();
  $("#activity-csv").onclick = exportCSV;
  $("#activity-json").onclick = exportJSON;
  renderColumnChooser();
  const inflight = () => loadInflight(state).catch(fail);
  inflight();
  const inflightPoll = setInterval(inflight, 1000);
  let stop = null;
  const live = () => {
    if (stop) { stop(); stop = null; }
    $("#activity-status").textContent = "";
    if (!$("#activity-live").checked) return;
    // Live: each finished request reloads the first page (at most every half second).
    stop = liveStream("/api/events", (kind) => {
      if (kind !== "request.finished" || activity.reload) return;
      activity.reload = setTimeout(() => { activity.reload = null; loadActivity(state).catch(() => {}); }, 500);
    }, (s) => { $("#activity-status").textContent = s === "live" ? "● live" : s; });
  };
  $("#activity-live").onchange = live;
  await loadActivity(state);
  live();
  state.leave = () => { clearInterval(inflightPoll); if (stop) stop(); if (activity.reload) clearTimeout(activity.reload); activity.reload = null; };
};

/* ---- Queue (GET /api/queue): the waiters in serving order, each key against its limits -- */

const WAITS_WORDS = {
  start: "its model's start",
  swap: "a swap (another start first, or its model is to stop)",
  drain: "the models its start evicts to finish their answers",
  concurrencyLimit: "a free place (the model's concurrencyLimit)",
  maxInFlight: "a free place (the gateway's maxInFlight)",
  turn: "its turn",
};
const LIMIT_WORDS = { concurrency: "at once", requests: "requests / min", tokens: "tokens / min", "tokens-day": "tokens / day" };

function renderWaiting(rows) {
  $("#queue-count").textContent = `· ${rows.length}`;
  if (!rows.length) { $("#queue-waiting").replaceChildren(el("p", { class: "muted small", "data-role": "queue-none", text: "Nothing is waiting: every request is being served." })); return; }
  $("#queue-waiting").replaceChildren(el("table", { "data-role": "queue-table" },
    el("thead", {}, el("tr", {}, ...["place", "model", "key", "class", "waits for", "waited", "estimate"].map((h, i) =>
      el("th", { scope: "col", class: i === 3 || i === 4 ? "wide" : "", text: h })))),
    el("tbody", {}, ...rows.map((r) => el("tr", { "data-waiter": r.model, "data-key": r.key, title: r.says },
      el("td", { class: "num", text: String(r.place) }),
      el("td", { text: r.model }),
      el("td", { text: r.key }),
      el("td", { class: "wide", text: r.weight === 1 ? r.class : `${r.class} ×${r.weight}` }),
      el("td", { class: "wide", "data-role": "waits-for", text: WAITS_WORDS[r.waits_for] || r.waits_for }),
      el("td", { class: "num", text: secs(r.waited_seconds) }),
      el("td", { class: "num", "data-role": "estimate", title: r.estimate_seconds == null ? "no estimate: it depends on starts before it, or nothing has been measured yet" : "", text: r.estimate_seconds == null ? "—" : "~" + secs(r.estimate_seconds) }))))));
}

function limitBar(w) {
  const used = Math.max(0, w.value - w.remaining);
  const pct = w.value ? Math.min(100, (100 * used) / w.value) : 0;
  const full = w.remaining <= 0;
  return el("div", { class: "limit", "data-limit": w.limit },
    el("div", { class: "limit-line" },
      el("span", { text: LIMIT_WORDS[w.limit] || w.limit }),
      el("span", { class: "muted small", text: `${used.toLocaleString()} of ${w.value.toLocaleString()} used` + (w.reset_seconds > 0 && w.limit !== "concurrency" ? ` · whole in ${secs(w.reset_seconds)}` : "") })),
    el("div", { class: "limit-track", role: "meter", "aria-valuemin": "0", "aria-valuemax": String(w.value), "aria-valuenow": String(used), "aria-label": `${w.limit} used` },
      el("div", { class: "limit-fill" + (full ? " full" : ""), style: `width: ${pct.toFixed(1)}%` })));
}

function renderKeys(keys) {
  $("#queue-keys").replaceChildren(...keys.map((k) => el("div", { class: "card key-card", "data-key-card": k.key },
    el("div", { class: "limit-line" }, el("strong", { text: k.key }),
      el("span", { class: "muted small", text: `${k.class}${k.weight === 1 ? "" : ` ×${k.weight}`}` })),
    el("p", { class: "muted small", text: `${k.in_flight} in flight · ${k.requests.toLocaleString()} requests, ${k.tokens.toLocaleString()} tokens since start` }),
    ...(k.limits.length ? k.limits.map(limitBar) : [el("p", { class: "muted small", "data-role": "no-limits", text: "No limits: nothing is counted." })]))));
}

pages.queue = async (state) => {
  if (!can("read")) { scopeNote($("#queue-waiting"), "read", "The queue"); $("#queue-keys").replaceChildren(); return; }
  const load = async () => {
    try {
      const data = await apiJSON("/api/queue");
      if (current !== state) return;
      $("#queue-offline").hidden = true;
      renderWaiting(data.waiting || []);
      renderKeys(data.keys || []);
    } catch (err) {
      if (current !== state || err instanceof AuthError) return;
      const note = $("#queue-offline");
      note.hidden = false;
      note.textContent = err instanceof OfflineError
        ? `The gateway is unreachable (since ${clock(link.since / 1000)}): the queue shown is stale; retrying every 2 s.`
        : `The queue could not be read: ${err.message || err}`;
    }
  };
  await load();
  const timer = setInterval(load, 2000);
  state.leave = () => clearInterval(timer);
};

/* ---- Playground: in playground.js (loaded after this file) ---------------------------- */

/* ---- Settings ---------------------------------------------------------------------------- */

const THEME_STORE = "modelswap.theme";
function applyTheme() {
  const theme = localStorage.getItem(THEME_STORE) || "auto";
  if (theme === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = theme;
}

pages.settings = async () => {
  const select = $("#settings-theme");
  select.value = localStorage.getItem(THEME_STORE) || "auto";
  select.onchange = () => { localStorage.setItem(THEME_STORE, select.value); applyTheme(); };
  const build = $("#settings-build");
  build.replaceChildren();
  const add = (k, v) => build.append(el("dt", { text: k }), el("dd", { "data-role": k, text: v }));
  add("key", auth.keysConfigured ? `“${auth.name}” · ${auth.scopes.join(", ")}` : "no keys configured · full access");
  add("gateway", location.origin);
  try {
    const v = await apiJSON("/api/version");
    add("version", `${v.name || "modelswap"} ${v.version}`);
    if (v.commit && v.commit !== "unknown") add("commit", v.commit);
  } catch (err) {
    if (err instanceof AuthError) throw err;
    add("version", "unknown (the gateway did not say)");
  }
};

/* ---- wiring ------------------------------------------------------------------------------ */

applyTheme();
document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("#login-key").value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORE, key);
    $("#login-key").value = "";
    auth.known = false;
    route();
  });
  $("#signout").addEventListener("click", () => { sessionStorage.removeItem(KEY_STORE); auth.known = false; route(); });
  $("#notice-close").addEventListener("click", () => notice(""));
  window.addEventListener("hashchange", route);
  route();
});
