/* modelswap web UI: the Performance and Hardware pages (loaded after app.js, whose helpers
   el, svg, api, apiJSON, pages, current, can, needs and scopeNote it uses). Its own names stay
   inside this function, so they never collide with another file's. */
"use strict";
(() => {

const PERF_WINDOWS = [{ label: "1 min", s: 60 }, { label: "5 min", s: 300 }, { label: "15 min", s: 900 }];
const PERF_WINDOW_STORE = "modelswap.perf.window";
const PERF_COLORS = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#65a30d"];
const perf = { sys: [], gpu: [], every: 5, gpuInfo: null, last: null, budgets: null };

function bytesRate(v) {
  if (v == null) return "—";
  const units = ["B/s", "KiB/s", "MiB/s", "GiB/s"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v.toFixed(v >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}
function mib(v) { return v == null ? "—" : v >= 1024 ? `${(v / 1024).toFixed(1)} GiB` : `${Math.round(v)} MiB`; }
function pct(v) { return v == null ? "—" : `${v.toFixed(0)} %`; }

/* One unit per axis (issue 32 #8): the unit the top of the axis needs, for every tick — never
   "0 MiB" under "11.8 GiB". ``base``: the value's unit as a power of 1024 of ``units[0]``. */
function scaled(units, base = 0) {
  return (top) => {
    let i = 0, div = 1;
    while (top / div >= 1024 && base + i < units.length - 1) { div *= 1024; i += 1; }
    const unit = units[base + i];
    const digits = top / div >= 100 ? 0 : 1;
    return (v) => (v == null ? "—" : v === 0 ? `0 ${unit}` : `${(v / div).toFixed(digits)} ${unit}`);
  };
}
const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
const RATE_UNITS = ["B/s", "KiB/s", "MiB/s", "GiB/s"];
const mibAxis = scaled(BYTE_UNITS, 2);
const rateAxis = scaled(RATE_UNITS);

/* A line chart over [now - span, now]: values on the left (0, half, top), time below. */
function perfChart({ id, title, series, span, now, top, fmt, axis, note }) {
  const W = 520, H = 170, L = 62, R = 10, T = 10, B = 24;
  const values = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => v != null);
  const ymax = top || Math.max(1, ...values) * 1.1;
  const tick = axis ? axis(ymax) : fmt;
  // The legend and the points say their values in the axis's unit (issue 41 #11): never a
  // legend in B/s under an axis in KiB/s.
  const say = axis ? tick : fmt;
  const x = (t) => L + ((t - (now - span)) / span) * (W - L - R);
  const y = (v) => H - B - (v / ymax) * (H - T - B);
  const nodes = [];
  for (const f of [0, 0.5, 1]) {
    const yy = y(ymax * f);
    nodes.push(svg("line", { class: "grid", x1: L, x2: W - R, y1: yy, y2: yy }),
      svg("text", { class: "axis-label", x: L - 4, y: yy + 4, "text-anchor": "end" }, tick(ymax * f)));
  }
  nodes.push(svg("path", { class: "axis", d: `M${L} ${T} V${H - B} H${W - R}` }));
  const minutes = span / 60;
  for (const f of [0, 0.5, 1]) {
    const label = f === 1 ? "now" : `−${+(minutes * (1 - f)).toFixed(1)} min`;
    nodes.push(svg("text", { class: "axis-label", x: L + f * (W - L - R), y: H - 6, "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" }, label));
  }
  // A dashed series is drawn over a solid one: two equal lines stay two lines.
  series.forEach((s) => {
    const pts = s.points.filter((p) => p[1] != null && p[0] >= now - span);
    if (!pts.length) return;
    nodes.push(svg("polyline", { class: "perf-line", stroke: s.color, "stroke-dasharray": s.dash || null, "data-series": s.name,
      points: pts.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ") }));
    const [lt, lv] = pts[pts.length - 1];
    nodes.push(svg("circle", { cx: x(lt).toFixed(1), cy: y(lv).toFixed(1), r: 2.5, fill: s.color }, svg("title", {}, `${s.name}: ${say(lv)}`)));
  });
  const legend = el("ul", { class: "perf-legend small" }, ...series.map((s) => {
    const pts = s.points.filter((p) => p[1] != null);
    const last = pts.length ? pts[pts.length - 1][1] : null;
    const swatch = s.dash ? el("span", { class: "swatch dashed", style: `border-top-color:${s.color}` }) : el("span", { class: "swatch", style: `background:${s.color}` });
    return el("li", { "data-series": s.name }, swatch, `${s.name} `, el("strong", { "data-role": "value", text: say(last) }));
  }));
  return el("figure", { class: "pchart", "data-chart": id },
    el("figcaption", {}, el("strong", { text: title })),
    svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title} over the last ${minutes} minutes` }, ...nodes),
    legend, note ? el("p", { class: "muted small", "data-role": "note", text: note }) : null);
}

/* The machine's memory is measured (every program on it); the Memory page draws the budgets
   the config declares (``resources:``) — say which is which, with the declared figures. */
function memoryNote() {
  const budgets = (perf.budgets || []).map(([name, bytes]) => `${name} ${mib(bytes / 1024 / 1024)}`);
  return "Measured: what the whole machine uses, every program included. " + (budgets.length
    ? `The Memory page draws the budgets declared in the config instead (resources: ${budgets.join(", ")}), not a measurement.`
    : "The Memory page draws budgets declared in the config (resources:), not this measurement.");
}

function perfNote(id, text) { return el("figure", { class: "pchart", "data-chart": id }, el("p", { class: "muted", "data-role": "no-gpu", text })); }

function renderPerformance() {
  const span = PERF_WINDOWS[+($("#perf-window").value || 0)].s;
  const now = perf.sys.length ? Math.max(Date.now() / 1000, perf.sys[perf.sys.length - 1].t) : Date.now() / 1000;
  const sys = perf.sys.filter((s) => s.t >= now - span);
  const pts = (key) => sys.map((s) => [s.t, s[key]]);
  const total = sys.length ? sys[sys.length - 1].mem_total_mb : null;
  const charts = [
    perfChart({ id: "cpu", title: "CPU", series: [{ name: "all cores", color: PERF_COLORS[0], points: pts("cpu_percent") }], span, now, top: 100, fmt: pct }),
    perfChart({ id: "memory", title: total ? `Memory used, measured (of ${mib(total)} installed)` : "Memory used, measured",
      series: [{ name: "used", color: PERF_COLORS[2], points: pts("mem_used_mb") }], span, now, top: total || undefined, fmt: mib, axis: mibAxis, note: memoryNote() }),
    perfChart({ id: "network", title: "Network (all interfaces but loopback)", series: [
      { name: "received", color: PERF_COLORS[0], points: pts("net_recv_bps") },
      { name: "sent", color: PERF_COLORS[3], dash: "6 4", points: pts("net_sent_bps") }], span, now, fmt: bytesRate, axis: rateAxis }),
  ];
  const gpus = {};
  for (const g of perf.gpu) if (g.t >= now - span) (gpus[g.id] = gpus[g.id] || { name: g.name, rows: [] }).rows.push(g);
  const ids = Object.keys(gpus).sort((a, b) => a - b);
  if (!ids.length) {
    const reason = (perf.gpuInfo && perf.gpuInfo.reason) || (perf.gpuInfo && perf.gpuInfo.tool ? "waiting for the first GPU sample" : "no GPU");
    charts.push(perfNote("gpu", reason.startsWith("no GPU") ? `No GPU${reason.slice(6)}.` : `GPU: ${reason}.`));
  } else {
    const gseries = (key) => ids.map((id, i) => ({ name: `GPU ${id} ${gpus[id].name}`, color: PERF_COLORS[i % PERF_COLORS.length], points: gpus[id].rows.map((g) => [g.t, g[key]]) }));
    const gtotal = Math.max(...ids.map((id) => gpus[id].rows[gpus[id].rows.length - 1].mem_total_mb || 0));
    charts.push(
      perfChart({ id: "gpu-util", title: "GPU utilisation", series: gseries("gpu_util_pct"), span, now, top: 100, fmt: pct }),
      perfChart({ id: "gpu-memory", title: "GPU memory", series: gseries("mem_used_mb"), span, now, top: gtotal || undefined, fmt: mib, axis: mibAxis }),
      perfChart({ id: "gpu-power", title: "GPU power", series: gseries("power_draw_w"), span, now, fmt: (v) => (v == null ? "—" : `${v.toFixed(0)} W`) }),
      perfChart({ id: "gpu-temp", title: "GPU temperature", series: gseries("temp_c"), span, now, fmt: (v) => (v == null ? "—" : `${v.toFixed(0)} °C`) }));
  }
  $("#perf-charts").replaceChildren(...charts);
  const last = perf.sys[perf.sys.length - 1];
  $("#perf-status").textContent = last
    ? `sampled every ${perf.every} s · last ${clock(last.t)} · ${sys.length} samples shown · load ${last.load_avg_1.toFixed(2)}`
    : `sampled every ${perf.every} s · waiting for the first sample…`;
}

async function loadPerformance(state) {
  const query = perf.last != null ? `?after=${perf.last}` : "";
  const resp = await api("/api/performance" + query);
  const body = await resp.json().catch(() => ({}));
  if (current !== state) return;
  if (resp.status === 503 && body.enabled === false) {
    $("#perf-charts").replaceChildren(el("p", { class: "muted", "data-role": "perf-off", text: `The system monitor is off (${body.reason || "disabled"}).` }));
    $("#perf-status").textContent = "";
    return false;
  }
  if (!resp.ok) throw new Error((body.error && body.error.message) || `${resp.status}`);
  perf.every = body.every;
  perf.gpuInfo = body.gpu;
  perf.sys = perf.sys.concat(body.sys_stats || []);
  perf.gpu = perf.gpu.concat(body.gpu_stats || []);
  const keep = Date.now() / 1000 - PERF_WINDOWS[PERF_WINDOWS.length - 1].s - 60;
  perf.sys = perf.sys.filter((s) => s.t >= keep);
  perf.gpu = perf.gpu.filter((g) => g.t >= keep);
  if (perf.sys.length) perf.last = perf.sys[perf.sys.length - 1].t;
  renderPerformance();
  return true;
}

pages.performance = async (state) => {
  const select = $("#perf-window");
  if (!select.options.length) select.replaceChildren(...PERF_WINDOWS.map((w, i) => el("option", { value: String(i), text: w.label })));
  select.value = localStorage.getItem(PERF_WINDOW_STORE) || "1";
  if (!select.value) select.value = "1";
  select.onchange = () => { localStorage.setItem(PERF_WINDOW_STORE, select.value); renderPerformance(); };
  if (!can("read")) { scopeNote($("#perf-charts"), "read", "The system monitor"); return; }
  Object.assign(perf, { sys: [], gpu: [], last: null });
  apiJSON("/api/memory").then((d) => { perf.budgets = (d.resources || []).map((r) => [r.name, r.total_bytes]); }).catch(() => {});
  if (!(await loadPerformance(state))) return;
  let timer = null;
  const tick = async () => {
    try { await loadPerformance(state); } catch (err) { if (err instanceof AuthError) return; }
    if (current === state) timer = setTimeout(tick, Math.max(1, Math.min(perf.every, 10)) * 1000);
  };
  timer = setTimeout(tick, Math.max(1, Math.min(perf.every, 10)) * 1000);
  state.leave = () => clearTimeout(timer);
};

pages.hardware = async (state) => {
  const box = $("#hardware-info");
  if (!can("read")) { scopeNote(box, "read", "The hardware report"); return; }
  const hw = await apiJSON("/api/hardware");
  if (current !== state) return;
  const dl = el("dl", { class: "kv" });
  const add = (k, v, role) => { if (v !== undefined && v !== null && v !== "") dl.append(el("dt", { text: k }), el("dd", { "data-role": role || k, text: String(v) })); };
  const cpu = hw.cpu || {};
  add("CPU", [cpu.model, cpu.vendor && !(cpu.model || "").includes(cpu.vendor) ? `(${cpu.vendor})` : ""].filter(Boolean).join(" ") || "unknown", "cpu");
  add("cores", `${cpu.physical_core_count ?? "?"} physical · ${cpu.logical_thread_count ?? "?"} logical${cpu.socket_count ? ` · ${cpu.socket_count} socket${cpu.socket_count > 1 ? "s" : ""}` : ""}`, "cores");
  add("memory", hw.memory && hw.memory.capacity_bytes ? gib(hw.memory.capacity_bytes) : "unknown", "memory");
  const gpus = hw.accelerators || [];
  if (!gpus.length) add("GPUs", `none — ${(hw.gpu && hw.gpu.reason) || "no GPU"}`, "gpus");
  for (const g of gpus) {
    const parts = [g.model || "GPU"];
    if (g.memory && g.memory.capacity_bytes) parts.push(gib(g.memory.capacity_bytes));
    if (g.driver && g.driver.version) parts.push(`driver ${g.driver.version}`);
    if (g.power_limit_watts) parts.push(`${g.power_limit_watts.toFixed(0)} W limit`);
    add(`GPU ${g.index}`, parts.join(" · "), "gpu");
  }
  const os = hw.operating_system || {};
  add("OS", [os.name, os.version && !(os.name || "").includes(os.version) ? os.version : ""].filter(Boolean).join(" "), "os");
  add("kernel", os.kernel);
  add("architecture", hw.architecture && hw.architecture.name);
  add("Python", hw.python && `${hw.python.implementation} ${hw.python.version}`, "python");
  add("gateway", hw.gateway && `${hw.gateway.name} ${hw.gateway.version} · pid ${hw.gateway.pid}`, "gateway");
  add("read at", hw.captured_at && fullDate(Date.parse(hw.captured_at) / 1000), "captured");
  box.replaceChildren(dl);
};
})();
