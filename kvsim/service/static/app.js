// kvsim's page: one tab per planner's question. The forms are built from GET /api/v1/questions (the CLI's
// options), runs are jobs of the API, plots are Plotly (served from the installed plotly package).
// Text from the service is only ever put in the page as text (textContent), never as HTML.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token");
const API = "api/v1";
let EXAMPLES = [];

function withToken(url) {
  return TOKEN ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN) : url;
}

async function api(path, opts = {}) {
  const headers = Object.assign({}, opts.headers || {});
  if (TOKEN) headers["Authorization"] = "Bearer " + TOKEN;
  const r = await fetch(API + path, Object.assign({}, opts, { headers }));
  const kind = r.headers.get("content-type") || "";
  const body = kind.includes("json") ? await r.json() : await r.text();
  if (!r.ok) throw new Error((body && body.error) || `${r.status} ${r.statusText}`);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// ---------- forms
function shownDefault(q, f) {
  const v = f.key in q.defaults ? q.defaults[f.key] : f.default;
  if (v === null || v === undefined) return "";
  return Array.isArray(v) ? v.join(" ") : String(v);
}

function fileInput(q, f, initial) {
  const select = el("select", { name: f.key, "data-kind": "file", "data-many": f.many ? "1" : "", id: `${q.name}-${f.key}` });
  select.append(el("option", { value: "", text: "(none)" }));
  for (const name of EXAMPLES) select.append(el("option", { value: "example:" + name, text: "example: " + name }));
  select.value = initial;
  select.dataset.initial = initial;
  const upload = el("input", { type: "file", "aria-label": `upload a file for ${f.flag}`, class: "upload" });
  upload.addEventListener("change", async () => {
    const file = upload.files[0];
    if (!file) return;
    try {
      const u = await api(`/uploads?name=${encodeURIComponent(file.name)}`, { method: "POST", body: file });
      select.append(el("option", { value: u.ref, text: `uploaded: ${u.name}` }));
      select.value = u.ref;
    } catch (e) {
      showError(q, "upload: " + e.message);
    }
  });
  return el("div", {}, select, upload);
}

function fieldInput(q, f) {
  const initial = shownDefault(q, f);
  const id = `${q.name}-${f.key}`;
  if (f.file) return fileInput(q, f, initial);
  let input;
  if (f.kind === "bool" && !f.negatable) {
    input = el("input", { type: "checkbox", name: f.key, id, "data-kind": "bool" });
    input.checked = initial === "true";
    input.dataset.initial = input.checked ? "true" : "";
    return input;
  }
  if (f.kind === "bool" || f.choices) {
    input = el("select", { name: f.key, id, "data-kind": f.kind === "bool" ? "tristate" : "choice" });
    input.append(el("option", { value: "", text: "(default)" }));
    const choices = f.kind === "bool" ? ["on", "off"] : f.choices;
    for (const c of choices) input.append(el("option", { value: c, text: c }));
    input.value = f.kind === "bool" ? "" : initial;
  } else {
    input = el("input", { type: "text", name: f.key, id, "data-kind": f.kind, "data-many": f.many ? "1" : "",
      inputmode: f.kind === "int" || f.kind === "float" ? "decimal" : null, placeholder: initial ? null : "(default)" });
    input.value = initial;
  }
  input.dataset.initial = input.value;
  return input;
}

function field(q, f) {
  return el("div", { class: "field", "data-key": f.key },
    el("label", { for: `${q.name}-${f.key}` }, f.key.replaceAll("_", " "), " ", el("span", { class: "flag", text: f.flag })),
    fieldInput(q, f),
    el("div", { class: "help", text: f.help }));
}

function collect(q, form) {
  const inputs = {};
  for (const e of form.querySelectorAll("[name]")) {
    const key = e.name;
    const forced = key in q.defaults;
    let v;
    if (e.dataset.kind === "bool") v = e.checked ? "true" : "";
    else v = e.value.trim();
    if (v === (e.dataset.initial || "") && !forced) continue;
    if (v === "") {
      if (forced) inputs[key] = null; // the page's default cleared: not sent at all
      continue;
    }
    if (e.dataset.kind === "bool") inputs[key] = true;
    else if (e.dataset.kind === "tristate") inputs[key] = v === "on";
    else if (e.dataset.many) inputs[key] = v.split(/[\s,]+/).filter(Boolean);
    else inputs[key] = v;
  }
  return inputs;
}

// ---------- results
const CONFIG = (name) => ({
  responsive: true, displaylogo: false,
  toImageButtonOptions: { format: "png", filename: name },
  modeBarButtonsToAdd: [{ name: "Download plot as SVG", icon: Plotly.Icons.disk,
    click: (gd) => Plotly.downloadImage(gd, { format: "svg", filename: name }) }],
});

function plot(box, name, traces, layout) {
  const div = el("div", { class: "plot", "data-plot": name });
  box.append(div);
  Plotly.newPlot(div, traces, Object.assign({ margin: { t: 40, r: 20, b: 50, l: 60 }, legend: { orientation: "h" } }, layout), CONFIG(name));
}

function objects(t) {
  return t.rows.map((r) => Object.fromEntries(t.columns.map((c, i) => [c, r[i]])));
}

function fmt(v) {
  if (typeof v !== "number") return v === null || v === undefined ? "" : String(v);
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  const a = Math.abs(v);
  return a >= 1000 ? v.toLocaleString("en-US", { maximumFractionDigits: 0 }) : a >= 1 ? v.toFixed(3) : v.toPrecision(3);
}

function tableBox(t, title, maxRows = 200) {
  const head = el("tr", {}, ...t.columns.map((c) => el("th", { text: c })));
  const body = t.rows.slice(0, maxRows).map((r) => el("tr", {}, ...r.map((v) => el("td", { class: typeof v === "number" ? "" : "text", text: fmt(v) }))));
  const shown = Math.min(maxRows, t.rows.length);
  const note = t.total_rows > shown ? ` (first ${shown.toLocaleString()} of ${t.total_rows.toLocaleString()} rows; the file has them all)` : "";
  return el("div", { class: "tablebox", "data-table": t.name }, el("h3", { text: title + note }), el("table", {}, el("thead", {}, head), el("tbody", {}, ...body)));
}

const GiB = 2 ** 30;
const RENDER = {
  async memory(job, box) {
    const m = objects(await api(`/jobs/${job.id}/tables/memory`))[0];
    const parts = [
      ["weights", m.weight_bytes], ["activation reserve", m.reserve_bytes], ["KV pool", m.pool_bytes],
      ["rest of usable", Math.max(0, m.usable_bytes - m.weight_bytes - m.reserve_bytes - m.pool_bytes)],
      ["not given to vLLM (1 - utilization)", m.gpu_bytes - m.usable_bytes],
    ];
    plot(box, "memory", parts.filter((p) => p[1] > 0).map(([n, b]) => ({
      type: "bar", orientation: "h", name: n, y: ["one GPU"], x: [b / GiB],
      hovertemplate: `${n}: %{x:.2f} GiB<extra></extra>` })),
      { barmode: "stack", title: `${m.model} on ${m.gpu}: ${(m.pool_tokens).toLocaleString()} KV tokens, maximum concurrency ${m.max_concurrency.toFixed(2)}x`, xaxis: { title: "GiB" }, height: 260 });
  },
  async latency(job, box) {
    const r = objects(await api(`/jobs/${job.id}/tables/latency`))[0];
    const parts = Object.keys(r).filter((k) => k.endsWith("_s") && k !== "total_s");
    plot(box, "latency", parts.filter((k) => r[k] > 0).map((k) => ({
      type: "bar", orientation: "h", name: k.slice(0, -2).replaceAll("_", " "), y: ["one iteration"], x: [1000 * r[k]],
      hovertemplate: `${k.slice(0, -2)}: %{x:.3f} ms<extra></extra>` })),
      { barmode: "stack", height: 260, xaxis: { title: "ms" },
        title: `${r.batch} sequence(s) x ${r.new_tokens} new token(s) after ${r.context.toLocaleString()} cached: ${(1000 * r.total_s).toFixed(3)} ms` });
  },
  async compare(job, box) {
    const runs = objects(await api(`/jobs/${job.id}/tables/runs`));
    const names = runs.map((r) => r.allocator);
    plot(box, "throughput", [{ type: "bar", x: names, y: runs.map((r) => r.throughput_tok_s), name: "output tok/s" }],
      { title: "output throughput", yaxis: { title: "tokens/s" } });
    plot(box, "ttft", ["p50", "p90", "p99"].map((p) => ({ type: "bar", name: "TTFT " + p, x: names, y: runs.map((r) => r[`ttft_${p}_s`]) })),
      { title: "time to first token", barmode: "group", yaxis: { title: "s", type: "log" } });
    const tl = objects(await api(`/jobs/${job.id}/tables/memory_timeline?limit=200000`));
    plot(box, "memory_timeline", names.map((n) => {
      const rows = tl.filter((r) => r.allocator === n);
      return { type: "scatter", mode: "lines", name: n, x: rows.map((r) => r.t_s), y: rows.map((r) => 100 * r.token_states) };
    }), { title: "KV memory holding token states over time", xaxis: { title: "simulated s" }, yaxis: { title: "% of the KV pool" } });
  },
  async plan(job, box) {
    const rows = objects(await api(`/jobs/${job.id}/tables/fleet_plan`));
    const label = (r) => `${r.layout} · ${r.router} · ${r.gpus} GPU${r.gpus > 1 ? "s" : ""}`;
    const trace = (rs, name, marker) => ({ type: "scatter", mode: "markers", name, x: rs.map((r) => r.tok_s_per_gpu),
      y: rs.map((r) => r.ttft_p99_s), text: rs.map(label), marker,
      hovertemplate: "%{text}<br>%{x:.0f} tok/s per GPU<br>TTFT p99 %{y:.3f} s<extra></extra>" });
    const front = rows.filter((r) => r.pareto).sort((a, b) => a.tok_s_per_gpu - b.tok_s_per_gpu);
    const chosen = rows.filter((r) => r.chosen);
    plot(box, "pareto", [
      trace(rows.filter((r) => r.meets_slo), "meets the SLOs", { size: 9, color: "#2458c6" }),
      trace(rows.filter((r) => !r.meets_slo), "misses the SLOs", { size: 9, color: "#b8bfcc" }),
      Object.assign(trace(front, "Pareto front", {}), { mode: "lines", line: { dash: "dot", color: "#444" } }),
      trace(chosen, "chosen: cheapest meeting the SLOs", { size: 18, symbol: "star", color: "#e0a100" }),
    ], { title: "layouts: throughput per GPU vs TTFT p99", xaxis: { title: "output tokens/s per GPU" }, yaxis: { title: "TTFT p99 (s)", type: "log" } });
    const files = (await api(`/jobs/${job.id}/files`)).map((f) => f.name);
    if (files.includes("vllm_serve.sh")) {
      const text = await api(`/jobs/${job.id}/text/vllm_serve.sh`);
      const pre = el("pre", { text });
      box.append(el("h3", { text: "how to start the chosen layout" }), el("div", { class: "serve" }, pre, copyButton(() => text, "copy")));
    } else {
      box.append(el("div", { class: "error", text: "no layout meets the SLOs (see the summary below)" }));
    }
  },
  async autoscale(job, box) {
    const rows = objects(await api(`/jobs/${job.id}/tables/autoscale`));
    const configs = [...new Set(rows.map((r) => `${r.gpu} ${r.allocator}`))];
    const kinds = ["autoscaled", "fixed"];
    const value = (key) => kinds.map((k) => ({ type: "bar", name: k === "fixed" ? "fixed fleet of the peak" : "autoscaled",
      x: configs, y: configs.map((c) => { const r = rows.find((x) => `${x.gpu} ${x.allocator}` === c && x.fleet.startsWith(k)); return r ? r[key] : null; }) }));
    const priced = rows.some((r) => r.cost !== null && r.cost !== undefined);
    plot(box, "autoscale_cost", value(priced ? "cost" : "gpu_hours"),
      { title: priced ? "cost over the trace ($)" : "GPU-hours over the trace", barmode: "group", yaxis: { title: priced ? "$" : "GPU-hours" } });
    plot(box, "autoscale_windows", value("slo_windows_met").map((t) => Object.assign(t, { y: t.y.map((v) => v === null ? null : 100 * v) })),
      { title: "5-minute windows meeting the SLOs", barmode: "group", yaxis: { title: "%", range: [0, 100] } });
    const tl = objects(await api(`/jobs/${job.id}/tables/autoscale_timeline?limit=200000`));
    const runs = [...new Set(tl.map((r) => r.run))];
    plot(box, "replicas_over_time", runs.map((name) => {
      const rs = tl.filter((r) => r.run === name);
      return { type: "scatter", mode: "lines", line: { shape: "hv" }, name, x: rs.map((r) => r.t_s / 3600), y: rs.map((r) => r.serving + r.starting + r.draining) };
    }), { title: "replicas over time", xaxis: { title: "hours" }, yaxis: { title: "replicas" } });
  },
  async fleet(job, box) {
    const fleet = objects(await api(`/jobs/${job.id}/tables/fleet`));
    const routers = fleet.map((r) => r.router);
    plot(box, "ttft", ["p50", "p90", "p99"].map((p) => ({ type: "bar", name: "TTFT " + p, x: routers, y: fleet.map((r) => r[`ttft_${p}_s`]) })),
      { title: "time to first token by router", barmode: "group", yaxis: { title: "s" } });
    const reps = objects(await api(`/jobs/${job.id}/tables/replicas`));
    const by = (key, title, unit, scale = 1) => plot(box, key, routers.map((rt) => {
      const rs = reps.filter((r) => r.router === rt);
      return { type: "bar", name: rt, x: rs.map((r) => "replica " + r.replica), y: rs.map((r) => scale * r[key]) };
    }), { title, barmode: "group", yaxis: { title: unit } });
    by("prefix_hit_rate_tokens", "prefix-cache hit rate per replica", "% of prompt tokens", 100);
    by("ttft_p99_s", "TTFT p99 per replica", "s");
    const files = (await api(`/jobs/${job.id}/files`)).map((f) => f.name);
    if (files.includes("timeline.csv") || files.includes("timeline.parquet")) {  // --autoscaler / --fail-at
      const tl = objects(await api(`/jobs/${job.id}/tables/timeline?limit=200000`));
      const runs = [...new Set(tl.map((r) => r.run))];
      const line = (key, scale = 1) => runs.map((name) => {
        const rows = tl.filter((r) => r.run === name);
        return { type: "scatter", mode: "lines", line: { shape: key === "replicas" ? "hv" : "linear" }, name,
          x: rows.map((r) => r.t_s / 3600), y: rows.map((r) => key === "replicas" ? r.serving + r.starting + r.draining : scale * r[key]) };
      });
      plot(box, "replicas_over_time", line("replicas"), { title: "replicas over time", xaxis: { title: "hours" }, yaxis: { title: "replicas" } });
      plot(box, "ttft_over_time", line("ttft_p99_s"), { title: "TTFT p99 over the last minute", xaxis: { title: "hours" }, yaxis: { title: "s" } });
    }
  },
  async validate(job, box) {
    const reqs = objects(await api(`/jobs/${job.id}/tables/requests?limit=200000`)).filter((r) => r.status === "finished");
    const traces = [["ttft", "TTFT"], ["tpot", "TPOT"]].map(([k, n]) => ({ type: "scatter", mode: "markers", name: n,
      x: reqs.map((r) => r[`${k}_measured_s`]), y: reqs.map((r) => r[`${k}_predicted_s`]), text: reqs.map((r) => `${r.file} #${r.id}`),
      hovertemplate: "%{text}<br>measured %{x:.4f} s<br>predicted %{y:.4f} s<extra></extra>" }));
    const all = traces.flatMap((t) => t.x.concat(t.y)).filter((v) => v > 0);
    const lo = Math.min(...all), hi = Math.max(...all);
    traces.push({ type: "scatter", mode: "lines", name: "predicted = measured", x: [lo, hi], y: [lo, hi], line: { dash: "dot", color: "#888" } });
    plot(box, "predicted_vs_measured", traces, { title: "predicted vs measured, per request", xaxis: { title: "measured (s)", type: "log" }, yaxis: { title: "predicted (s)", type: "log" } });
  },
};

function copyButton(text, label) {
  const b = el("button", { type: "button", class: "copy", text: label });
  b.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(text()); } catch (e) {
      const t = el("textarea", {}); t.value = text(); document.body.append(t); t.select(); document.execCommand("copy"); t.remove();
    }
    b.textContent = "copied"; setTimeout(() => (b.textContent = label), 1500);
  });
  return b;
}

async function showResults(q, job, box) {
  await RENDER[q.name](job, box);
  const files = await api(`/jobs/${job.id}/files`);
  const names = files.map((f) => f.name);
  for (const t of q.tables) {
    if (names.includes(t + ".csv") || names.includes(t + ".parquet")) box.append(tableBox(await api(`/jobs/${job.id}/tables/${t}?limit=200`), t));
  }
  for (const f of q.files) {
    if (f !== "vllm_serve.sh" && names.includes(f)) box.append(el("details", {}, el("summary", { text: f }), el("pre", { class: "log", text: await api(`/jobs/${job.id}/text/${f}`) })));
  }
  box.append(el("div", { class: "downloads" }, el("strong", { text: "files: " }),
    ...files.map((f) => el("a", { href: withToken(`${API}/jobs/${job.id}/files/${encodeURIComponent(f.name)}`), download: f.name, "data-file": f.name, text: f.name }))));
}

// ---------- runs
const STATE = {};

function showError(q, message) {
  const s = STATE[q.name];
  s.error.textContent = message;
  s.error.hidden = !message;
}

async function run(q) {
  const s = STATE[q.name];
  showError(q, "");
  s.results.replaceChildren();
  s.cli.hidden = true;
  let job;
  try {
    job = await api("/jobs", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ question: q.name, inputs: collect(q, s.form) }) });
  } catch (e) {
    showError(q, e.message);
    return;
  }
  s.job = job.id;
  s.cliText.textContent = job.command;
  s.cli.hidden = false;
  s.runButton.disabled = true;
  s.cancelButton.disabled = false;
  s.progress.hidden = false;
  while (true) {
    try { job = await api(`/jobs/${job.id}?wait_s=0.3`); } catch (e) { showError(q, e.message); break; }
    const p = job.progress;
    s.status.textContent = `${job.state}` + (p && p.total ? ` · ${p.label}: ${p.done.toLocaleString()} / ${p.total.toLocaleString()}` : "") + (job.elapsed_s !== null ? ` · ${job.elapsed_s.toFixed(1)} s` : "");
    if (p && p.total) s.progress.value = p.done / p.total; else s.progress.removeAttribute("value");
    if (!["queued", "running"].includes(job.state)) break;
  }
  s.runButton.disabled = false;
  s.cancelButton.disabled = true;
  s.progress.hidden = true;
  if (job.state === "done") {
    try { await showResults(q, job, s.results); } catch (e) { showError(q, "showing the results: " + e.message); }
  } else if (job.state !== "cancelled") {
    showError(q, job.error || job.state);
  }
  if (job.state !== "done") s.results.append(el("pre", { class: "log", text: await api(`/jobs/${job.id}/log`).catch(() => "") }));
}

function buildPage(q) {
  const main = q.fields.filter((f) => f.main);
  const groups = {};
  for (const f of q.fields.filter((f) => !f.main)) (groups[f.group] = groups[f.group] || []).push(f);
  const runButton = el("button", { type: "submit", class: "run", text: "Run" });
  const cancelButton = el("button", { type: "button", class: "cancel", text: "Cancel", disabled: true });
  const form = el("form", { "data-question": q.name },
    ...main.map((f) => field(q, f)),
    el("details", {}, el("summary", { text: "more options" }),
      ...Object.entries(groups).flatMap(([g, fs]) => [el("h4", { text: g }), ...fs.map((f) => field(q, f))])),
    el("div", { class: "buttons" }, runButton, cancelButton));
  const status = el("div", { class: "status-text" });
  const progress = el("progress", { hidden: true });
  const error = el("div", { class: "error", hidden: true, role: "alert" });
  const cliText = el("code", {});
  const cli = el("div", { class: "cli", hidden: true }, el("span", { text: "the same on the command line:" }), cliText, copyButton(() => cliText.textContent, "copy"));
  const results = el("div", { class: "result-body" });
  STATE[q.name] = { form, status, progress, error, cli, cliText, results, runButton, cancelButton, job: null };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); run(q); });
  cancelButton.addEventListener("click", async () => {
    if (STATE[q.name].job) await api(`/jobs/${STATE[q.name].job}`, { method: "DELETE" }).catch((e) => showError(q, e.message));
    status.textContent = "cancelled";
  });
  return el("section", { class: "page", id: "page-" + q.name, role: "tabpanel" },
    el("p", { class: "ask", text: q.ask }),
    form,
    el("div", { class: "results" }, el("div", { class: "status" }, status, progress), error, cli, results));
}

function show(name) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.page === name);
  for (const p of document.querySelectorAll("section.page")) p.classList.toggle("active", p.id === "page-" + name);
  history.replaceState(null, "", "#" + name);
}

async function init() {
  let questions;
  try {
    [questions, EXAMPLES] = await Promise.all([api("/questions"), api("/examples")]);
  } catch (e) {
    document.getElementById("pages").append(el("div", { class: "error", text: "the service did not answer: " + e.message }));
    return;
  }
  const tabs = document.getElementById("tabs");
  const pages = document.getElementById("pages");
  for (const q of questions) {
    tabs.append(el("button", { type: "button", role: "tab", "data-page": q.name, text: q.title, onclick: () => show(q.name) }));
    pages.append(buildPage(q));
  }
  const wanted = location.hash.slice(1);
  show(questions.some((q) => q.name === wanted) ? wanted : questions[0].name);
  window.addEventListener("hashchange", () => {
    const name = location.hash.slice(1);
    if (questions.some((q) => q.name === name)) show(name);
  });
  document.body.dataset.ready = "1";
}

init();
