/* modelswap web UI: the Playground. Chat, Images, Speech, Transcription, Rerank and a Load test.
   Loaded after app.js and uses its helpers (el, $, api, apiJSON, readSSE, catalog, can, needs,
   secs, pages, hashQuery). Model text is never parsed as HTML: every node is built and every
   string goes in as text. */
"use strict";

/* ---- which models a tab lists ------------------------------------------------------------ */

/* Declared capabilities (llama-swap's `capabilities`, shown in /v1/models) that serve each tab.
   A model that declares none is offered everywhere; the backend's refusal is then shown. */
const TAB_CAPS = {
  chat: ["chat", "completion", "completions", "text", "vision", "tools", "function_calling", "reasoning"],
  images: ["images", "image", "image_generation", "image_to_image", "txt2img", "text-to-image"],
  speech: ["speech", "tts", "text-to-speech", "audio.speech", "audio_speech"],
  transcription: ["transcription", "transcriptions", "stt", "asr", "speech-to-text", "audio.transcriptions", "audio_transcriptions"],
  rerank: ["rerank", "reranking", "reranker"],
};
TAB_CAPS.loadtest = TAB_CAPS.chat;

function capNames(caps) {
  if (Array.isArray(caps)) return caps.map((c) => String(c).toLowerCase());
  if (caps && typeof caps === "object") return Object.entries(caps).filter(([, v]) => v).map(([k]) => k.toLowerCase());
  return caps ? [String(caps).toLowerCase()] : [];
}

/* What each tab asks for, in words, and the modalities (a row's ``architecture``, written or
   remembered: issue 30) that serve it. */
const TAB_WHAT = { chat: "chat", loadtest: "chat", images: "image generation", speech: "speech (text to audio)",
  transcription: "transcription (audio to text)", rerank: "reranking" };
const TAB_MODALITIES = {
  chat: (i, o) => i.includes("text") && o.includes("text"),
  images: (i, o) => o.includes("image"),
  speech: (i, o) => o.includes("audio"),
  transcription: (i, o) => i.includes("audio") && o.includes("text"),
  rerank: () => false,
};
TAB_MODALITIES.loadtest = TAB_MODALITIES.chat;

/* Whether a /v1/models row serves ``tab`` by what it lists: "yes" (a capability or modality
   that serves it), "no" (it lists what it can do, and this is not among it) or "unknown" (it
   lists nothing: only its backend can say). */
function tabFit(model, tab) {
  const names = capNames(model.capabilities);
  const arch = model.architecture || {};
  const ins = arch.input_modalities || [], outs = arch.output_modalities || [];
  if (names.some((n) => TAB_CAPS[tab].includes(n)) || TAB_MODALITIES[tab](ins, outs)) return "yes";
  return names.length || ins.length || outs.length ? "no" : "unknown";
}
function servesTab(model, tab) { return tabFit(model, tab) !== "no"; }

/* What a model lists, for "cannot" notes: "in text, out image" or its capability names. */
function listsText(model) {
  const arch = model.architecture || {};
  if (arch.input_modalities || arch.output_modalities) return `in ${(arch.input_modalities || []).join("+") || "?"}, out ${(arch.output_modalities || []).join("+") || "?"}`;
  return capNames(model.capabilities).join(", ");
}

const FIT_ORDER = { yes: 0, unknown: 1, no: 2 };
const FIT_WORDS = { unknown: "capabilities not listed", no: "cannot, by its capabilities" };

/* Fill ``select`` for ``tab``: the models whose capabilities fit first, then those that list
   none, then (except for chat) those that list others, marked so; keep the choice. */
function fillPicker(select, rows, tab, running) {
  const chosen = select.value;
  const fit = rows.filter((m) => tab !== "loadtest" || servesTab(m, tab))
    .map((m, i) => ({ m, i, fit: tabFit(m, tab) }))
    .sort((a, b) => FIT_ORDER[a.fit] - FIT_ORDER[b.fit] || a.i - b.i);
  // A chat model that lists nothing is the usual case: only the other tabs say so.
  const words = (f) => (tab === "loadtest" && f === "unknown" ? "" : FIT_WORDS[f]);
  const label = ({ m, fit: f }) => `${m.id} · ${running[m.alias_for || m.id] || m.state || "stopped"}` + (words(f) ? ` · ${words(f)}` : "");
  const options = [...select.options];
  // The same models: only their states change (a rebuilt list would close an open picker).
  if (fit.length && options.length === fit.length && fit.every((f, i) => options[i].value === f.m.id)) {
    fit.forEach((f, i) => { options[i].textContent = label(f); options[i].dataset.fit = f.fit; });
    return fit.map((f) => f.m);
  }
  select.replaceChildren(...fit.map((f) => el("option", { value: f.m.id, "data-fit": f.fit, text: label(f) })));
  if (!fit.length) select.append(el("option", { value: "", text: "no model is listed" }));
  if (chosen && fit.some((f) => f.m.id === chosen)) select.value = chosen;
  return fit.map((f) => f.m);
}

/* Under a tab's picker: whether the chosen model can serve the tab, in words, before sending. */
function fitNote(tab) {
  const note = $(`#pg-${tab}-fit`);
  const id = $(`#pg-${tab}-model`).value;
  const model = pg.rows.find((m) => m.id === id);
  const fit = !model || (tab === "loadtest" && tabFit(model, tab) === "unknown") ? "yes" : tabFit(model, tab);
  note.hidden = fit === "yes";
  note.dataset.fit = fit;
  note.textContent = fit === "no" ? `${id} cannot serve ${TAB_WHAT[tab]} by its capabilities (it lists ${listsText(model)}); its backend will most likely refuse.`
    : fit === "unknown" ? `${id} lists no capabilities: whether it serves ${TAB_WHAT[tab]} only its backend can say.` : "";
}

/* A refusal that means "this model does not serve this kind of request" (no such route on its
   backend), said as that first, with the models that list the capability. */
function cannotServe(tab, model, err) {
  if (![404, 405, 501].includes(err.status)) return null;
  const row = pg.rows.find((m) => m.id === model);
  if (row && tabFit(row, tab) === "yes") return null; // it says it can: the backend's words stand
  const can = pg.rows.filter((m) => m.id !== model && tabFit(m, tab) === "yes").map((m) => m.id);
  return `${model} cannot serve ${TAB_WHAT[tab]}: its backend has no ${err.path} (${err.status}).`
    + (can.length ? ` Models that list it: ${can.join(", ")}.` : ` No model lists ${TAB_WHAT[tab]} among its capabilities.`);
}

/* A refusal in the API's own shape: status, type and message, and the body as sent. */
async function apiFailure(resp) {
  const raw = await resp.text().catch(() => "");
  let body = null;
  try { body = JSON.parse(raw); } catch { /* not JSON: shown as text */ }
  const e = body && body.error;
  const message = (e && (e.message || (typeof e === "string" ? e : ""))) || (body && body.detail) || raw || resp.statusText;
  const kind = e && e.type ? ` · ${e.type}` : "";
  const err = new Error(`${resp.status}${kind}: ${message}`);
  err.body = body ? JSON.stringify(body, null, 2) : raw;
  err.status = resp.status;
  err.code = (e && e.code) || (e && e.details && e.details.error_code) || null;
  err.gateway = resp.headers.get("X-Modelswap-Error") === "1"; // the gateway's own, not the backend's
  err.retryAfter = resp.headers.get("Retry-After");
  err.path = new URL(resp.url, location.href).pathname;
  return err;
}

function showFailure(box, err, hint = null) {
  const reason = err instanceof OfflineError ? "gateway unreachable" : String(err.message || err);
  box.replaceChildren(el("div", { class: "msg error", "data-role": "error" },
    el("span", { class: "role", text: "error" }),
    hint ? el("strong", { class: "content cannot", "data-role": "cannot", text: hint }) : null,
    el("span", { class: "content", text: reason }),
    err.body ? el("pre", { class: "body", text: err.body }) : null));
}

/* ---- markdown: a small renderer that builds DOM nodes, never HTML ------------------------ */

const MD_INLINE = /`([^`\n]+)`|\*\*(.+?)\*\*|__(.+?)__|\*([^*\s](?:[^*\n]*[^*\s])?)\*|(?<![\w])_([^_\s](?:[^_\n]*[^_\s])?)_(?![\w])|\[([^\]\n]+)\]\(([^()\s]+)\)/g;

function safeHref(url) {
  try {
    const u = new URL(url, location.href);
    return ["http:", "https:", "mailto:"].includes(u.protocol) ? u.href : null;
  } catch { return null; }
}

function mdInline(text) {
  const nodes = [];
  let last = 0;
  for (const m of text.matchAll(MD_INLINE)) {
    if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
    if (m[1] !== undefined) nodes.push(el("code", { text: m[1] }));
    else if (m[2] !== undefined || m[3] !== undefined) nodes.push(el("strong", {}, ...mdInline(m[2] ?? m[3])));
    else if (m[4] !== undefined || m[5] !== undefined) nodes.push(el("em", {}, ...mdInline(m[4] ?? m[5])));
    else {
      const href = safeHref(m[7]);
      nodes.push(href ? el("a", { href, rel: "noopener noreferrer", target: "_blank" }, ...mdInline(m[6]))
        : document.createTextNode(m[0]));
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

const MD_FENCE = /^\s*(```+|~~~+)\s*([\w+.#-]*)/;
const MD_ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
const MD_HEAD = /^(#{1,6})\s+(.*)$/;

/* Blocks: fenced code (an unclosed fence while streaming runs to the end), headings, lists
   (ordered or not), paragraphs (line breaks kept). */
function mdBlocks(text) {
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(MD_FENCE);
    if (fence) {
      const code = [];
      for (i++; i < lines.length && !lines[i].trim().startsWith(fence[1]); i++) code.push(lines[i]);
      i++;
      out.push(el("pre", { class: "md-code" }, el("code", { "data-lang": fence[2] || null, text: code.join("\n") })));
      continue;
    }
    const head = line.match(MD_HEAD);
    if (head) { out.push(el("p", { class: "md-h" }, el("strong", {}, ...mdInline(head[2])))); i++; continue; }
    const item = line.match(MD_ITEM);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const list = el(ordered ? "ol" : "ul", ordered && parseInt(item[1], 10) !== 1 ? { start: parseInt(item[1], 10) } : {});
      for (let m; i < lines.length && (m = lines[i].match(MD_ITEM)) && /\d/.test(m[1]) === ordered; i++) {
        list.append(el("li", {}, ...mdInline(m[2])));
      }
      out.push(list);
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    for (; i < lines.length && lines[i].trim() && !MD_FENCE.test(lines[i]) && !MD_HEAD.test(lines[i]) && !MD_ITEM.test(lines[i]); i++) para.push(lines[i]);
    out.push(el("p", {}, ...mdInline(para.join("\n"))));
  }
  return out;
}

function renderMarkdown(target, text) { target.replaceChildren(...mdBlocks(text)); }

/* ---- Chat ------------------------------------------------------------------------------- */

/* One definition of the times everywhere (Playground, Activity, metrics): TTFT is the first
   generated token after the model was ready (a cold start's load is shown apart), tok/s the
   tokens after the first over the time after it. The browser's estimate is replaced by what the
   gateway recorded for the same request when this key may read the activity log. */
const chat = { messages: [], abort: null, model: null, states: {}, attachments: [], turn: 0 };
const pg = { rows: [] }; // the catalog's rows, as the pickers last listed them
const FINISH = {
  stop: "finished (stop)",
  length: "length — cut by max_tokens",
  content_filter: "content_filter — cut by the backend's filter",
  tool_calls: "tool_calls",
};
/* Images go inline as data: URLs (base64 adds a third); the gateway takes 32 MiB a body. */
const IMAGE_CAP = 4 * 1024 * 1024;
const IMAGES_MAX = 4;

function addMessage(roleName, text, { model, label } = {}) {
  const body = el("span", { class: "content", text });
  const meta = el("span", { class: "meta small", "data-role": "meta" });
  const who = label || (roleName === "assistant" && model ? `assistant · ${model}` : roleName);
  const node = el("div", { class: "msg " + roleName, "data-role": roleName, "data-model": model },
    el("span", { class: "role", text: who }), body, meta);
  $("#pg-chat").append(node);
  node.scrollIntoView({ block: "nearest" });
  return { node, body, meta };
}

function timing(t) {
  const parts = [];
  if (t.ttft != null) parts.push(`TTFT ${(t.ttft * 1000).toFixed(0)} ms`);
  if (t.tps != null) parts.push(`${t.tps.toFixed(1)} tok/s`);
  if (t.tokens != null) parts.push(`${t.tokens} tokens`);
  if (t.firstByte != null) parts.push(`first byte ${(t.firstByte * 1000).toFixed(0)} ms`);
  if (t.load) parts.push(`load ${secs(t.load)} (not in TTFT)`);
  return parts.join(" · ");
}

/* The gateway's own record of this request (Activity's row): the same numbers Activity shows. */
async function gatewayRecord(model, sentAt, tokens) {
  if (!can("read")) return null;
  for (let i = 0; i < 20; i++) {
    const q = `/api/activity?limit=20&model=${encodeURIComponent(model)}&since=${(sentAt - 2).toFixed(3)}`;
    const rows = (await apiJSON(q)).data || [];
    const row = rows.find((r) => r.route === "/v1/chat/completions" && r.streamed && r.at >= sentAt - 2
      && (tokens == null || r.completion_tokens == null || r.completion_tokens === tokens));
    if (row) return row;
    await new Promise((r) => setTimeout(r, 250));
  }
  return null;
}

function chatButtons() {
  const busy = !!chat.abort;
  $("#pg-send").disabled = !can("inference") || busy;
  $("#pg-stop").disabled = !busy;
  const last = chat.messages[chat.messages.length - 1];
  const regen = $("#pg-regen");
  regen.disabled = !can("inference") || busy || !last || last.role !== "assistant";
  regen.title = can("inference") ? "" : needs("inference");
  for (const b of document.querySelectorAll("#pg-chat button.edit")) b.disabled = busy;
}

/* The user turn as sent: plain text, or OpenAI content parts when images are attached. */
function userContent(text, images) {
  if (!images.length) return text;
  return [{ type: "text", text }, ...images.map((a) => ({ type: "image_url", image_url: { url: a.url } }))];
}

function userBubble(text, images) {
  const user = addMessage("user", text, { label: "you" });
  if (images.length) {
    user.body.after(el("span", { class: "thumbs" },
      ...images.map((a) => el("img", { src: a.url, alt: `attached image ${a.name}`, title: a.name }))));
  }
  user.node.dataset.index = String(chat.messages.length - 1);
  const edit = el("button", { type: "button", class: "edit link small", text: "Edit", "aria-label": "Edit this message" });
  edit.addEventListener("click", () => editTurn(user.node, text, images));
  user.node.querySelector(".role").append(" ", edit);
  return user;
}

/* Edit-and-resend: this turn and every turn after it leave the conversation; its text (and its
   images) go back into the form, and Send sends it from here. */
function editTurn(node, text, images) {
  if (chat.abort) return;
  chat.messages.length = Math.min(chat.messages.length, Number(node.dataset.index));
  while (node.nextSibling) node.nextSibling.remove();
  node.remove();
  $("#pg-input").value = text;
  chat.attachments = [...images];
  renderAttachments();
  $("#pg-stats").textContent = "editing: this turn and the ones after it were taken out; Send sends it again";
  $("#pg-input").focus();
  chatButtons();
}

/* Regenerate: the last answer leaves the conversation and the same turns are sent again. */
function regenerate() {
  const last = chat.messages[chat.messages.length - 1];
  if (chat.abort || !last || last.role !== "assistant") return;
  chat.messages.pop();
  const users = document.querySelectorAll("#pg-chat .msg.user");
  const user = users[users.length - 1];
  if (!user) return;
  while (user.nextSibling) user.nextSibling.remove();
  sendChat("", { again: user });
}

async function sendChat(text, { again = null } = {}) {
  const model = $("#pg-model").value;
  if (!model || (!again && !text.trim())) return;
  chat.model = model;
  let user;
  if (again) user = { node: again };
  else {
    const images = chat.attachments;
    chat.attachments = [];
    renderAttachments();
    chat.messages.push({ role: "user", content: userContent(text, images) });
    user = userBubble(text, images);
  }
  user.node.classList.remove("unsent");
  const out = addMessage("assistant", "", { model });
  out.body.classList.add("md");
  out.node.classList.add("pending");
  out.meta.textContent = "waiting…";
  const stats = $("#pg-stats");
  stats.textContent = "";
  const maxTokens = Number($("#pg-max").value);
  const system = $("#pg-system").value.trim();
  const body = {
    model, stream: true, messages: system ? [{ role: "system", content: system }, ...chat.messages] : chat.messages,
    temperature: Number($("#pg-temp").value), max_tokens: maxTokens,
    stream_options: { include_usage: true },
  };
  chat.abort = new AbortController();
  chatButtons();
  const sentAt = Date.now() / 1000;
  const turn = ++chat.turn; // a later send owns the stats line
  const t0 = performance.now();
  let ready = t0, loaded = false, first = null, last = null, chunks = 0, usage = null, answer = "", finish = null;
  let reasoning = "", thought = null, drawing = false;
  // One markdown render a frame, not one a token (a long answer re-parses from the start).
  const draw = () => { drawing = false; if (out.node.isConnected) renderMarkdown(out.body, answer); };
  const browser = () => {
    const tokens = usage && usage.completion_tokens != null ? usage.completion_tokens : chunks;
    const gen = first !== null ? (last - first) / 1000 : 0;
    return {
      ttft: first !== null ? (first - ready) / 1000 : null,
      tps: gen > 0 && tokens > 1 ? (tokens - 1) / gen : null,
      tokens: first !== null ? tokens : null,
      load: loaded ? (ready - t0) / 1000 : null,
    };
  };
  const show = () => { stats.textContent = timing(browser()) + (first !== null ? " (browser)" : ""); };
  let outcome = "done";
  try {
    const resp = await api("/v1/chat/completions", {
      method: "POST", body: JSON.stringify(body), signal: chat.abort.signal,
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    });
    if (!resp.ok) throw await apiFailure(resp);
    await readSSE(resp, (_kind, data) => {
      if (data === "[DONE]") return false;
      let msg;
      try { msg = JSON.parse(data); } catch { return; }
      if (msg.error) throw Object.assign(new Error(msg.error.message || "the backend failed mid-answer"), { code: msg.error.code || null, inStream: true });
      if (msg.usage) usage = msg.usage;
      const choice = msg.choices && msg.choices[0];
      if (choice && choice.finish_reason) finish = choice.finish_reason;
      const delta = (choice && choice.delta) || {};
      const think = delta.reasoning_content || delta.reasoning;
      if (!think && !delta.content) return;
      last = performance.now();
      if (first === null) { first = last; out.node.classList.remove("pending"); out.meta.textContent = ""; }
      chunks += 1;
      if (think) {
        // The reasoning is shown apart, collapsible, and never sent back as history.
        if (!thought) {
          thought = el("details", { class: "reasoning", "data-role": "reasoning", open: true },
            el("summary", { text: "Reasoning" }), el("div", { class: "reasoning-text" }));
          out.body.before(thought);
        }
        reasoning += think;
        thought.lastChild.textContent = reasoning;
      }
      if (delta.content) {
        if (thought && !answer) thought.open = false;
        answer += delta.content;
        if (!drawing) { drawing = true; requestAnimationFrame(draw); }
      }
      show();
    }, (comment) => {
      // ": loading model X — phase (N s)": the model is starting; TTFT starts when it is ready.
      if (first === null && comment) { out.meta.textContent = comment; loaded = true; ready = performance.now(); }
    });
    if (first === null && !finish) throw new Error("the stream ended without an answer");
    out.meta.textContent = FINISH[finish] ? FINISH[finish].replace("max_tokens", `max_tokens (${maxTokens})`) : finish || "finished";
    out.node.dataset.finish = finish || "";
  } catch (err) {
    if (err.name === "AbortError") {
      outcome = "stopped";
      out.node.dataset.finish = "stopped";
      out.meta.textContent = "stopped — you pressed Stop";
    } else if (!(err instanceof AuthError)) {
      outcome = "error";
      if (!answer) out.node.remove();
      else { out.node.dataset.finish = "error"; out.meta.textContent = "cut by an error"; }
      const bubble = chatFailure(err, model);
      bubble.meta.textContent = "this turn was not kept: the next message is sent without it";
      user.node.classList.add("unsent");
      evictionNote(bubble, model, sentAt).catch(() => {});
    }
  } finally {
    if (answer) renderMarkdown(out.body, answer); // the whole answer, whatever the frames drew
    out.node.classList.remove("pending");
    if (outcome === "error" && !answer) chat.messages.pop(); // never send a failed turn as history
    else chat.messages.push({ role: "assistant", content: answer });
    chat.abort = null;
    chatButtons();
  }
  if (outcome === "error") { stats.textContent = ""; refreshPicker().catch(() => {}); return; }
  show();
  stats.textContent += ` · ${outcome}`;
  refreshPicker().catch(() => {});
  const tokens = usage && usage.completion_tokens != null ? usage.completion_tokens : null;
  try {
    const row = outcome === "done" ? await gatewayRecord(model, sentAt, tokens) : null;
    if (row && turn === chat.turn) {
      stats.textContent = timing({ ttft: row.ttft, tps: row.tokens_per_second, tokens: row.completion_tokens,
        firstByte: row.first_byte, load: row.load }) + ` (gateway) · ${outcome}`;
      stats.dataset.activityId = row.id;
    }
  } catch (err) { /* the browser's estimate stays */ }
}

/* A failed turn, said as whose refusal it is (issue 41 #9): a policy denial is the gateway's
   policy (status and code), never the model's answer; another refusal of the gateway names
   its status and code; the backend's own error is the model's. */
function chatFailure(err, model) {
  if (err instanceof OfflineError) return addMessage("error", "gateway unreachable", { label: `error · ${model}` });
  const message = String(err.message || err);
  if (err.code === "policy_denied") {
    const said = message.replace(/^\d{3}( · [\w-]+)?: /, "");
    const bubble = addMessage("error", `${err.status} policy_denied: ${said}`, { label: "refused · the gateway's policy (not the model's answer)" });
    bubble.node.classList.add("policy");
    bubble.node.dataset.refusal = "policy";
    return bubble;
  }
  const who = !err.gateway ? `error · ${model}` : err.status < 500 ? `refused by the gateway · ${model}` : `error · ${model} · from the gateway`;
  const code = err.code && !message.includes(err.code) ? ` · ${err.code}` : "";
  const bubble = addMessage("error", message + code, { label: who });
  if (err.gateway) bubble.node.dataset.refusal = "gateway";
  return bubble;
}

/* A start that failed may have evicted models first (they are stopped now): the failed turn
   says so, from the model's last swap (read scope). */
async function evictionNote(bubble, model, sentAt) {
  if (!can("read")) return;
  const found = await catalog();
  const run = (found.running || []).find((r) => r.model === model) || (found.list || []).find((m) => m.id === model);
  const swap = run && run.last_swap;
  const began = swap && (swap.began_at !== undefined ? swap.began_at : swap.at);
  if (!swap || !swap.error || !(swap.evict || []).length || began < sentAt - 1 || !bubble.node.isConnected) return;
  const names = swap.evict.join(", ");
  bubble.body.after(el("span", { class: "small", "data-role": "evicted", text: `Before it failed, the start of ${model} evicted ${names}: ${swap.evict.length === 1 ? "it is" : "they are"} stopped now.` }));
}

function mib(bytes) { return (bytes / 1024 / 1024).toFixed(1) + " MiB"; }

function renderAttachments() {
  $("#pg-attachments").replaceChildren(...chat.attachments.map((a, i) => el("span", { class: "chip" },
    el("img", { src: a.url, alt: "" }), `${a.name} · ${mib(a.size)}`,
    el("button", { type: "button", class: "close", "aria-label": `Remove ${a.name}`, text: "×",
      onclick: () => { chat.attachments.splice(i, 1); renderAttachments(); } }))));
}

function readDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

/* Attach images: each one read as a data: URL, refused in words when too big or not an image. */
async function attachImages(input) {
  const note = $("#pg-attach-note");
  const refused = [];
  for (const file of [...input.files]) {
    if (!file.type.startsWith("image/")) refused.push(`“${file.name}” is not an image (${file.type || "unknown type"})`);
    else if (file.size > IMAGE_CAP) refused.push(`“${file.name}” is ${mib(file.size)}: images are capped at ${mib(IMAGE_CAP)} each (they are sent inline, base64)`);
    else if (chat.attachments.length >= IMAGES_MAX) refused.push(`“${file.name}” not attached: at most ${IMAGES_MAX} images a message`);
    else chat.attachments.push({ name: file.name, size: file.size, url: await readDataURL(file) });
  }
  input.value = "";
  note.textContent = refused.join(" · ");
  note.hidden = !refused.length;
  renderAttachments();
}

async function refreshPicker() {
  const select = $("#pg-model");
  const found = await catalog();
  const running = {};
  for (const r of found.running) running[r.model] = r.state;
  const chosen = select.value;
  const rows = found.list.filter((m) => servesTab(m, "chat"));
  const options = [...select.options];
  const same = options.length === rows.length && rows.every((m, i) => options[i].value === m.id);
  if (!same) select.replaceChildren(...rows.map((m) => el("option", { value: m.id })));
  [...select.options].forEach((opt, i) => {
    const m = rows[i];
    const st = running[m.alias_for || m.id] || m.state || "stopped";
    chat.states[m.id] = st;
    opt.textContent = m.alias_for ? `${m.id} (→ ${m.alias_for}) · ${st}` : `${m.id} · ${st}`;
  });
  if (chosen && [...select.options].some((o) => o.value === chosen)) select.value = chosen;
  if (!chat.model) chat.model = select.value;
  pg.rows = found.list;
  for (const tab of Object.keys(TABS)) {
    const picker = $(`#pg-${tab}-model`);
    if (picker) fillPicker(picker, found.list, tab, running);
    if ($(`#pg-${tab}-fit`)) fitNote(tab);
  }
}

function newThread(note) {
  if (chat.abort) chat.abort.abort();
  chat.messages = [];
  $("#pg-attach-note").hidden = true; // an old refusal does not belong to the new chat
  $("#pg-attach-note").textContent = "";
  $("#pg-chat").replaceChildren();
  $("#pg-stats").textContent = "";
  if (note) $("#pg-chat").append(el("p", { class: "muted small", "data-role": "thread-note", text: note }));
  chatButtons();
}

/* ---- the other tabs --------------------------------------------------------------------- */

function field(label, control) {
  return el("span", { class: "field" }, el("label", { for: control.id, text: label }), " ", control);
}

/* A tab's panel: a model picker, its fields, one action button, and where the result goes. */
function tabPanel(tab, title, fields, action, run) {
  const picker = el("select", { id: `pg-${tab}-model`, onchange: () => fitNote(tab) });
  const fit = el("p", { class: "perm-note small", id: `pg-${tab}-fit`, "data-role": "fit-note", hidden: true });
  const go = el("button", { type: "submit", id: `pg-${tab}-go`, class: "primary", text: action });
  const status = el("span", { class: "muted small", id: `pg-${tab}-status`, "data-role": "status" });
  const result = el("div", { class: "pg-result", id: `pg-${tab}-out`, "aria-live": "polite" });
  const form = el("form", { class: "stack wide" },
    el("div", { class: "controls" }, field("Model", picker)), fit, ...fields,
    el("div", { class: "controls" }, go, status));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!picker.value || go.disabled) return;
    go.disabled = true;
    status.textContent = "working…";
    const started = performance.now();
    try {
      await run(picker.value, result, status);
      if (status.textContent === "working…") status.textContent = `done in ${secs((performance.now() - started) / 1000)}`;
    } catch (err) {
      if (err instanceof AuthError) return;
      status.textContent = "failed";
      showFailure(result, err, cannotServe(tab, picker.value, err));
    } finally {
      go.disabled = !can("inference");
      refreshPicker().catch(() => {});
    }
  });
  return el("div", { id: `pg-tab-${tab}`, class: "pg-panel", role: "tabpanel", "aria-label": title, hidden: true },
    form, result);
}

async function postJSON(path, body) {
  const resp = await api(path, { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } });
  if (!resp.ok) throw await apiFailure(resp);
  return resp;
}

function b64Type(b64) {
  if (b64.startsWith("/9j/")) return "image/jpeg";
  if (b64.startsWith("UklGR")) return "image/webp";
  if (b64.startsWith("R0lGOD")) return "image/gif";
  return "image/png";
}

function imagesTab() {
  const prompt = el("textarea", { id: "pg-images-prompt", rows: 2, required: true, placeholder: "A lighthouse at dusk, watercolour" });
  const size = el("select", { id: "pg-images-size" }, ...["256x256", "512x512", "1024x1024"].map((s) => el("option", { value: s, text: s })));
  const n = el("input", { id: "pg-images-n", type: "number", min: 1, max: 4, value: 1 });
  return tabPanel("images", "Images", [el("label", { for: prompt.id, text: "Prompt" }), prompt,
    el("div", { class: "controls" }, field("Size", size), field("Count", n))], "Generate", async (model, out) => {
    const body = { model, prompt: prompt.value, n: Number(n.value) || 1, size: size.value, response_format: "b64_json" };
    const data = (await (await postJSON("/v1/images/generations", body)).json()).data || [];
    if (!data.length) throw new Error("the backend answered without an image");
    out.replaceChildren(...data.map((d, i) => {
      const src = d.b64_json ? `data:${b64Type(d.b64_json)};base64,${d.b64_json}` : safeHref(d.url);
      return el("figure", { class: "pg-image" },
        src ? el("img", { src, alt: `generated image ${i + 1}: ${prompt.value}` }) : el("span", { class: "error", text: "no usable image in the answer" }),
        el("figcaption", { class: "small muted", text: d.revised_prompt || prompt.value }));
    }));
  });
}

function blobDataURL(blob) { return readDataURL(blob); }

function speechTab() {
  const input = el("textarea", { id: "pg-speech-input", rows: 3, required: true, placeholder: "Text to speak" });
  const voice = el("input", { id: "pg-speech-voice", value: "alloy", size: 10 });
  const format = el("select", { id: "pg-speech-format" }, ...["wav", "mp3", "opus", "aac", "flac", "pcm"].map((f) => el("option", { value: f, text: f })));
  return tabPanel("speech", "Speech", [el("label", { for: input.id, text: "Text" }), input,
    el("div", { class: "controls" }, field("Voice", voice), field("Format", format))], "Speak", async (model, out) => {
    const resp = await postJSON("/v1/audio/speech", { model, input: input.value, voice: voice.value, response_format: format.value });
    const blob = await resp.blob();
    const type = (resp.headers.get("Content-Type") || `audio/${format.value}`).split(";")[0];
    // A data: URL (not blob:): the UI makes no request it could not name.
    const url = await blobDataURL(new Blob([blob], { type }));
    out.replaceChildren(el("audio", { controls: true, src: url, "data-role": "audio" }),
      el("p", { class: "small muted", text: `${(blob.size / 1024).toFixed(1)} KiB · ${type}` + (format.value === "pcm" ? " · raw samples: download to play" : "") }),
      el("a", { href: url, download: `speech.${format.value}`, text: "download" }));
  });
}

function transcriptionTab() {
  const file = el("input", { id: "pg-transcription-file", type: "file", accept: "audio/*,video/*", required: true });
  const lang = el("input", { id: "pg-transcription-language", size: 6, placeholder: "auto" });
  return tabPanel("transcription", "Transcription", [el("div", { class: "controls" }, field("Audio file", file), field("Language", lang))],
    "Transcribe", async (model, out) => {
      const chosen = file.files[0];
      if (!chosen) throw new Error("choose an audio file first");
      const form = new FormData();
      form.append("model", model); // first, so the gateway routes by it without reading the file
      form.append("response_format", "json");
      if (lang.value.trim()) form.append("language", lang.value.trim());
      form.append("file", chosen, chosen.name);
      const resp = await api("/v1/audio/transcriptions", { method: "POST", body: form });
      if (!resp.ok) throw await apiFailure(resp);
      const raw = await resp.text();
      let text = raw;
      try { text = JSON.parse(raw).text ?? raw; } catch { /* text/plain answer */ }
      out.replaceChildren(el("p", { class: "transcript", "data-role": "transcript", text }));
    });
}

function rerankTab() {
  const query = el("input", { id: "pg-rerank-query", required: true, placeholder: "What is the capital of France?" });
  const docs = el("textarea", { id: "pg-rerank-docs", rows: 5, required: true, placeholder: "One document a line" });
  const topN = el("input", { id: "pg-rerank-top", type: "number", min: 1, max: 1000, placeholder: "all" });
  return tabPanel("rerank", "Rerank", [el("label", { for: query.id, text: "Query" }), query,
    el("label", { for: docs.id, text: "Documents (one a line)" }), docs,
    el("div", { class: "controls" }, field("Top N", topN))], "Rerank", async (model, out) => {
    const documents = docs.value.split("\n").map((d) => d.trim()).filter(Boolean);
    if (!documents.length) throw new Error("give at least one document");
    const body = { model, query: query.value, documents };
    if (Number(topN.value) > 0) body.top_n = Number(topN.value);
    const answer = await (await postJSON("/v1/rerank", body)).json();
    const results = [...(answer.results || answer.data || [])].sort((a, b) => b.relevance_score - a.relevance_score);
    out.replaceChildren(el("div", { class: "table-wrap" }, el("table", { "data-role": "ranking" },
      el("thead", {}, el("tr", {}, el("th", { class: "num", text: "rank" }), el("th", { class: "num", text: "score" }), el("th", { text: "document" }))),
      el("tbody", {}, ...results.map((r, i) => el("tr", { "data-index": r.index },
        el("td", { class: "num", text: String(i + 1) }),
        el("td", { class: "num", text: Number(r.relevance_score).toFixed(4) }),
        el("td", { class: "doc", text: `#${r.index} ${documents[r.index] ?? (r.document && r.document.text) ?? ""}` })))))));
  });
}

/* ---- Load test: N streamed requests at concurrency C, measured as the chat measures ------ */

const LOAD_MAX_N = 1000;
const LOAD_MAX_C = 64;
const LOAD_RETRIES = 10; // tries a refused request gets when Retry-After is honoured
const load = { ctl: null };

/* Seconds a refusal asks to wait (Retry-After: seconds or an HTTP date), 1 when it does not
   say, at most a minute. */
function retryAfterSeconds(value) {
  if (!value) return 1;
  const n = Number(value);
  const s = Number.isFinite(n) ? n : (Date.parse(value) - Date.now()) / 1000;
  return Math.min(60, Math.max(0, Number.isFinite(s) ? s : 1));
}
function pause(seconds, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) { reject(new DOMException("stopped", "AbortError")); return; }
    const timer = setTimeout(resolve, seconds * 1000);
    signal.addEventListener("abort", () => { clearTimeout(timer); reject(new DOMException("stopped", "AbortError")); }, { once: true });
  });
}

/* One streamed chat request, as the chat measures it: TTFT from sending (or from the model
   being ready, after a cold start's load comments) to the first token; tok/s the tokens after
   the first over the time after it. ``id`` goes out as X-Request-Id (the activity row's id). */
async function measuredStream(body, signal, id) {
  let ready = performance.now(), first = null, last = null, chunks = 0, usage = null;
  const resp = await api("/v1/chat/completions", {
    method: "POST", body: JSON.stringify(body), signal,
    headers: { "Content-Type": "application/json", Accept: "text/event-stream", "X-Request-Id": id },
  });
  if (!resp.ok) throw await apiFailure(resp);
  await readSSE(resp, (_kind, data) => {
    if (data === "[DONE]") return false;
    let msg;
    try { msg = JSON.parse(data); } catch { return; }
    if (msg.error) throw new Error(msg.error.message || "the backend failed mid-answer");
    if (msg.usage) usage = msg.usage;
    const delta = (msg.choices && msg.choices[0] && msg.choices[0].delta) || {};
    if (delta.content || delta.reasoning_content || delta.reasoning) {
      last = performance.now();
      if (first === null) first = last;
      chunks += 1;
    }
  }, (comment) => { if (first === null && comment) ready = performance.now(); });
  if (first === null) return { ttft: null, tps: null, tokens: 0 };
  const tokens = usage && usage.completion_tokens != null ? usage.completion_tokens : chunks;
  const gen = (last - first) / 1000;
  return { ttft: (first - ready) / 1000, tps: gen > 0 && tokens > 1 ? (tokens - 1) / gen : null, tokens };
}

function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];
}

/* The gateway's own rows for this run (X-Request-Id ``prefix``…), the numbers Activity shows:
   they leave out the time a request waited in the browser for a connection. */
async function gatewayRows(prefix, sentAt, expected) {
  if (!can("read")) return null;
  for (let attempt = 0; attempt < 20; attempt++) {
    const found = [];
    let before = null;
    for (let page = 0; page < 5; page++) {
      const q = `/api/activity?limit=1000&since=${(sentAt - 2).toFixed(3)}` + (before ? `&before=${before}` : "");
      const rows = (await apiJSON(q)).data || [];
      found.push(...rows.filter((r) => (r.request_id || "").startsWith(prefix)));
      if (rows.length < 1000) break;
      before = Math.min(...rows.map((r) => r.id));
    }
    if (found.length >= expected) return found;
    await new Promise((r) => setTimeout(r, 250));
  }
  return null;
}

function loadTab() {
  const prompt = el("input", { id: "pg-loadtest-prompt", value: "Count from one to ten.", required: true });
  const n = el("input", { id: "pg-loadtest-n", type: "number", min: 1, max: LOAD_MAX_N, value: 20, required: true });
  const c = el("input", { id: "pg-loadtest-c", type: "number", min: 1, max: LOAD_MAX_C, value: 4, required: true });
  const maxTokens = el("input", { id: "pg-loadtest-max", type: "number", min: 1, max: 4096, value: 32 });
  const honour = el("input", { id: "pg-loadtest-retry", type: "checkbox" });
  const stop = el("button", { type: "button", id: "pg-loadtest-stop", text: "Stop", disabled: true });
  stop.addEventListener("click", () => { if (load.ctl) { load.ctl.stopped = true; load.ctl.abort.abort(); } });
  const panel = tabPanel("loadtest", "Load test", [el("label", { for: prompt.id, text: "Prompt (every request)" }), prompt,
    el("div", { class: "controls" }, field("Requests (N)", n), field("Concurrency (C)", c), field("Tokens each", maxTokens),
      el("label", { class: "small", for: honour.id, title: `a request refused with 429 waits what its Retry-After asks, then is sent again (at most ${LOAD_RETRIES} tries)` },
        honour, " Honour Retry-After")),
    el("p", { class: "muted small", text: `At most ${LOAD_MAX_N} requests, ${LOAD_MAX_C} at a time. TTFT and tok/s as in the chat: the first token after the model was ready; the tokens after the first over the time after it. A browser opens at most 6 connections to one gateway (HTTP/1.1), so above C = 6 requests also wait in the browser: the final percentiles come from the gateway's activity log when this key may read it, which leaves that wait out.` }),
  ], "Start", async (model, out, status) => {
    const total = Number(n.value), width = Number(c.value);
    if (!Number.isInteger(total) || total < 1 || total > LOAD_MAX_N) throw new Error(`Requests (N) must be a whole number from 1 to ${LOAD_MAX_N}`);
    if (!Number.isInteger(width) || width < 1 || width > LOAD_MAX_C) throw new Error(`Concurrency (C) must be a whole number from 1 to ${LOAD_MAX_C}`);
    const ctl = { stopped: false, abort: new AbortController() };
    load.ctl = ctl;
    stop.disabled = false;
    const res = { started: 0, ok: 0, refused: 0, retried: 0, errors: 0, stopped: 0, ttft: [], tps: [], tokens: 0, lastError: "", lastRefusal: "", source: "this browser" };
    const body = { model, stream: true, max_tokens: Number(maxTokens.value) || 32, stream_options: { include_usage: true },
      messages: [{ role: "user", content: prompt.value }] };
    const prefix = `loadtest-${Date.now().toString(36)}-`;
    const sentAt = Date.now() / 1000;
    const t0 = performance.now();
    const render = (state, at = performance.now()) => renderLoad(out, res, total, state, (at - t0) / 1000);
    // A refusal (429) is not an answer (issue 41 #5): counted apart, and with Retry-After
    // honoured the request waits what it asks and is sent again.
    const attempt = async (id) => {
      for (let tries = 1; ; tries++) {
        try { return await measuredStream(body, ctl.abort.signal, tries > 1 ? `${id}-try${tries}` : id); } catch (err) {
          if (err.status !== 429 || !honour.checked || tries >= LOAD_RETRIES || ctl.stopped) throw err;
          res.retried += 1;
          render("running");
          await pause(retryAfterSeconds(err.retryAfter), ctl.abort.signal);
        }
      }
    };
    const worker = async () => {
      while (!ctl.stopped && res.started < total) {
        const id = prefix + res.started;
        res.started += 1;
        try {
          const m = await attempt(id);
          res.ok += 1;
          if (m.ttft != null) res.ttft.push(m.ttft);
          if (m.tps != null) res.tps.push(m.tps);
          res.tokens += m.tokens || 0;
        } catch (err) {
          if (err.name === "AbortError") res.stopped += 1;
          else if (err instanceof AuthError) { ctl.stopped = true; res.errors += 1; }
          else if (err.status === 429) { res.refused += 1; res.lastRefusal = String(err.message || err); }
          else { res.errors += 1; res.lastError = String(err.message || err); }
        }
        render("running");
      }
    };
    render("running");
    try {
      await Promise.all(Array.from({ length: Math.min(width, total) }, worker));
    } finally {
      load.ctl = null;
      stop.disabled = true;
    }
    const state = ctl.stopped ? "stopped" : "finished";
    const ended = performance.now();
    render(state, ended);
    status.textContent = `${state}: ${loadCounts(res)}`;
    try {
      const rows = await gatewayRows(prefix, sentAt, res.ok);
      const served = (rows || []).filter((r) => r.status === 200 && r.ttft != null);
      if (served.length) {
        Object.assign(res, { ttft: served.map((r) => r.ttft), source: "the gateway's activity log (as Activity shows)",
          tps: served.map((r) => r.tokens_per_second).filter((v) => v != null),
          tokens: served.reduce((t, r) => t + (r.completion_tokens || 0), 0) });
        render(state, ended);
      }
    } catch (err) { /* the browser's numbers stay */ }
  });
  panel.querySelector(`#pg-loadtest-go`).after(" ", stop);
  return panel;
}

/* "2 ok · 10 refused (429) · 1 failed": answers and refusals apart. */
function loadCounts(res) {
  const parts = [`${res.ok} ok`];
  if (res.refused) parts.push(`${res.refused} refused (429)`);
  if (res.errors) parts.push(`${res.errors} failed`);
  if (res.stopped) parts.push(`${res.stopped} stopped`);
  if (res.retried) parts.push(`${res.retried} retried after Retry-After`);
  return parts.join(" · ");
}

/* The run as a whole (requests and tokens per second of wall time), then per request: the
   median and the slow tail — for TTFT the 95th percentile (slower is higher), for tok/s the 5th
   (slower is lower: the speed 95 % of requests beat). */
function renderLoad(out, res, total, state, elapsed) {
  const ms = (v) => (v == null ? "–" : `${(v * 1000).toFixed(0)} ms`);
  const rate = (v) => (v == null ? "–" : `${v.toFixed(1)} tok/s`);
  const per = (n, unit) => (elapsed > 0 && res.ok ? `${(n / elapsed).toFixed(n / elapsed >= 100 ? 0 : 2)} ${unit}` : "–");
  const rows = [
    ["state", state], ["sent", `${res.started} of ${total}`], ["ok", res.ok],
    ["refused", `${res.refused} (429)`, "refused", "refused by the gateway or the backend with 429 (a limit), never answered" + (res.retried ? "" : "; Honour Retry-After waits and sends them again")],
    ["retried", res.retried, "retried", "refusals sent again after the wait their Retry-After asked"],
    ["errors", res.errors], ["stopped", res.stopped],
    ["requests/s", per(res.ok, "req/s"), "requests-per-s", "answers finished per second of the run's wall time (all requests together)"],
    ["tokens/s, all", per(res.tokens, "tok/s"), "total-tok-s", "completion tokens of every answer per second of the run's wall time"],
    ["TTFT p50", ms(percentile(res.ttft, 50)), "TTFT-p50"],
    ["TTFT p95 (slow tail)", ms(percentile(res.ttft, 95)), "TTFT-p95", "95 % of requests had their first token sooner"],
    ["tok/s p50", rate(percentile(res.tps, 50)), "tok-s-p50"],
    ["tok/s p5 (slow tail)", rate(percentile(res.tps, 5)), "tok-s-p5", "the per-request speed 95 % of requests beat: the slowest 5 % were at or below it"],
    ["measured by", res.source], ["elapsed", secs(elapsed)],
  ];
  if (res.lastRefusal) rows.push(["last refusal", res.lastRefusal]);
  if (res.lastError) rows.push(["last error", res.lastError]);
  out.replaceChildren(el("dl", { class: "kv", "data-role": "load-result", "data-state": state },
    ...rows.flatMap(([k, v, id, why]) => [el("dt", { text: k, title: why }),
      el("dd", { "data-role": id || k.replace(/\W+/g, "-"), title: why, text: String(v) })])));
}

/* ---- tabs ------------------------------------------------------------------------------- */

const TABS = { chat: "Chat", images: "Images", speech: "Speech", transcription: "Transcription", rerank: "Rerank", loadtest: "Load test" };

function buildTabs() {
  if ($("#pg-tabs").childElementCount) return;
  $("#pg-panels").append(imagesTab(), speechTab(), transcriptionTab(), rerankTab(), loadTab());
  $("#pg-tabs").append(...Object.entries(TABS).map(([tab, label]) => el("button", {
    type: "button", role: "tab", id: `pg-tabbtn-${tab}`, "aria-controls": `pg-tab-${tab}`, "data-tab": tab, text: label,
    onclick: () => { history.replaceState(null, "", `#/playground?tab=${tab}`); showTab(tab); },
  })));
  // Arrow keys move between tabs (the WAI-ARIA tabs pattern); Tab goes into the panel.
  $("#pg-tabs").addEventListener("keydown", (e) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
    const names = Object.keys(TABS);
    const at = names.indexOf(document.activeElement && document.activeElement.dataset.tab);
    if (!step || at < 0) return;
    e.preventDefault();
    const next = $(`#pg-tabbtn-${names[(at + step + names.length) % names.length]}`);
    next.click();
    next.focus();
  });
}

function showTab(tab) {
  const chosen = TABS[tab] ? tab : "chat";
  for (const b of document.querySelectorAll("#pg-tabs [role=tab]")) {
    b.setAttribute("aria-selected", String(b.dataset.tab === chosen));
    b.tabIndex = b.dataset.tab === chosen ? 0 : -1;
  }
  for (const t of Object.keys(TABS)) $(`#pg-tab-${t}`).hidden = t !== chosen;
}

pages.playground = async (state) => {
  buildTabs();
  showTab(hashQuery().get("tab") || "chat");
  $("#pg-scope").hidden = can("inference");
  $("#pg-scope").textContent = can("inference") ? "" : `Sending ${needs("inference")}.`;
  for (const tab of Object.keys(TABS)) {
    const go = $(`#pg-${tab}-go`);
    if (!go) continue;
    go.disabled = !can("inference") || (tab === "loadtest" && !!load.ctl);
    go.title = can("inference") ? "" : needs("inference");
  }
  chatButtons();
  await refreshPicker();
  const select = $("#pg-model");
  select.onchange = () => {
    const was = chat.model;
    chat.model = select.value;
    // Another model never receives this conversation as if it had written it.
    if (was && was !== select.value && chat.messages.length) newThread(`New chat with ${select.value} — the conversation with ${was} was not sent to it.`);
  };
  const poll = setInterval(() => refreshPicker().catch(() => {}), 3000);
  state.leave = () => clearInterval(poll);
};

document.addEventListener("DOMContentLoaded", () => {
  $("#pg-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("#pg-input");
    const text = input.value;
    input.value = "";
    sendChat(text);
  });
  $("#pg-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); $("#pg-form").requestSubmit(); }
  });
  $("#pg-stop").addEventListener("click", () => { if (chat.abort) chat.abort.abort(); });
  $("#pg-regen").addEventListener("click", regenerate);
  $("#pg-clear").addEventListener("click", () => { chat.attachments = []; renderAttachments(); newThread(""); });
  $("#pg-attach").addEventListener("change", (e) => attachImages(e.target).catch((err) => {
    $("#pg-attach-note").textContent = String(err.message || err);
    $("#pg-attach-note").hidden = false;
  }));
});
