"""The web page at `/`: jobs, a job's page with its live log, submit and templates, the pool.

One static page with its script inline (no build step, no assets, nothing from elsewhere). It
reads the same API as the CLI with the visitor's token, kept in the browser's localStorage and
sent only to this server in the Authorization header. Views are chosen by the fragment
(#/jobs, #/job/ID, #/submit, #/pool), so reloading or sharing a link keeps the view.

Every string that comes from the API is put into the page as text (textContent, attribute
values), never as HTML, so a job name like `<script>` is shown as itself. The CSP that
httpguard.py sends lets only this page's own inline script and style run.
"""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>corral</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 * { box-sizing: border-box } [hidden] { display: none !important }
 body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; padding: 0 1em 2em;
        max-width: 78em; color: #1d2330; background: #fff }
 header { display: flex; flex-wrap: wrap; align-items: center; gap: .4em 1.2em;
          padding: .7em 0; border-bottom: 1px solid #e3e6ec; margin-bottom: 1em }
 header h1 { font-size: 1.3em; margin: 0 } header h1 a { color: inherit; text-decoration: none }
 nav a { margin-right: .9em; color: #245; font-weight: 500 } nav a.on { color: #06c;
   text-decoration: underline }
 #auth { margin-left: auto; display: flex; gap: .4em; align-items: center; flex-wrap: wrap }
 h2 { font-size: 1.1em; margin: 1.4em 0 .4em } h3 { font-size: 1em; margin: 1em 0 .3em }
 a { color: #06c } .muted { color: #778 } .small { font-size: .9em }
 table { border-collapse: collapse; width: 100% }
 th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid #eef0f4;
          vertical-align: top }
 th { font-weight: 600; border-bottom: 1px solid #cdd2db; white-space: nowrap }
 th.sort { cursor: pointer; user-select: none } th.sort:hover { color: #06c }
 .scroll { overflow-x: auto } td.num, th.num { text-align: right }
 .state { font-weight: 600 } .pending { color: #a60 } .running { color: #06c }
 .succeeded { color: #080 } .failed { color: #c00 } .cancelled { color: #808 }
 #err { color: #c00; min-height: 1.2em } .warn { background: #fff4d6; padding: .6em .9em;
   border: 1px solid #f0d890; border-radius: 4px }
 button, input, select, textarea { font: inherit }
 button { padding: .3em .8em; border: 1px solid #9aa6b8; background: #f6f7f9;
          border-radius: 4px; cursor: pointer } button:hover { background: #e9edf3 }
 button.primary { background: #06c; color: #fff; border-color: #05a }
 button.danger { background: #c22; color: #fff; border-color: #a11 }
 input, select, textarea { padding: .3em .4em; border: 1px solid #b8c0cc; border-radius: 4px }
 .bar { display: flex; flex-wrap: wrap; gap: .5em; align-items: center; margin: .5em 0 }
 dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: .25em 1em; margin: .5em 0 }
 dl.kv dt { font-weight: 600 } dl.kv dd { margin: 0; overflow-wrap: anywhere }
 pre.log { background: #11151c; color: #dfe6ee; padding: .7em; border-radius: 4px;
   max-height: 28em; overflow: auto; white-space: pre-wrap; overflow-wrap: anywhere;
   font-size: 12.5px; margin: .3em 0 }
 ul.events { list-style: none; padding: 0; margin: 0 }
 ul.events li { padding: .2em 0; border-bottom: 1px dotted #e3e6ec }
 ul.events .ev { font-weight: 600; margin: 0 .5em }
 form.grid { display: grid; grid-template-columns: max-content minmax(0, 28em); gap: .5em 1em;
   align-items: center } form.grid textarea { min-height: 4em }
 .cards { display: flex; flex-wrap: wrap; gap: .7em }
 .card { border: 1px solid #dde2ea; border-radius: 6px; padding: .7em .9em; min-width: 12em;
   flex: 1 1 14em; max-width: 24em }
 .card p { margin: .3em 0 .6em }
 .node { border: 1px solid #dde2ea; border-radius: 6px; padding: .5em .7em; margin: .4em 0 }
 .gpus { display: flex; flex-wrap: wrap; gap: 3px; margin: .3em 0 }
 .gpu { width: 1.4em; height: 1.4em; border-radius: 3px; background: #e3e8ef;
   border: 1px solid #c8d0dc } .gpu.used { background: #3b7dd8; border-color: #2a62b0 }
 svg.chart { width: 100%; height: auto; max-width: 46em; display: block }
 svg.chart text { font-size: 11px; fill: #556 } .legend span { margin-right: 1em }
 .legend i { display: inline-block; width: .9em; height: .9em; margin-right: .3em;
   vertical-align: -1px; border-radius: 2px }
 @media (max-width: 640px) {
   form.grid { grid-template-columns: 1fr } dl.kv { grid-template-columns: 1fr }
   dl.kv dd { margin-bottom: .4em } #auth { margin-left: 0 } th, td { padding: .25em .35em }
 }
</style></head><body>
<header><h1><a href="#/jobs">corral</a></h1>
<nav><a href="#/jobs" data-view="jobs">Jobs</a><a href="#/submit" data-view="submit">Submit</a><a
 href="#/pool" data-view="pool">Pool</a><a href="/docs">API</a></nav>
<div id="auth"><span id="who" class="muted"></span>
<form id="login" class="bar"><input id="tok" type="password" size="24" autocomplete="off"
 placeholder="paste your corral token" aria-label="token"><button>sign in</button></form>
<button id="logout" hidden>sign out</button></div></header>
<noscript><p class="warn">This page needs JavaScript. Without it, use the command line
(<code>corral ls</code>, <code>corral show JOB</code>) or the API at <a href="/docs">/docs</a>.
</p></noscript>
<div id="err" role="alert"></div>
<main id="main"></main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const main = $("main");
const PALETTE = ["#3b7dd8", "#e0672b", "#2e9e5b", "#a44cc4", "#c9a227", "#d04a6f", "#4bb3c4",
  "#7a7f8a"];

// Elements from data: strings always become text, never markup.
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "cls") el.className = v;
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const kid of kids) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}
const token = () => localStorage.token || "";
async function api(path, opts) {
  opts = opts || {};
  const headers = {Authorization: "Bearer " + token()};
  if (opts.json !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {method: opts.method || "GET", headers,
    body: opts.json === undefined ? undefined : JSON.stringify(opts.json)});
  if (!r.ok) {
    let detail = r.statusText;
    try { detail = (await r.json()).detail || detail; } catch (e) { /* not JSON */ }
    throw new Error(detail + " (HTTP " + r.status + ")");
  }
  return r;
}
const getJSON = async (path) => (await api(path)).json();
function showError(e) { $("err").textContent = e ? (e.message || String(e)) : ""; }

function ago(t) {
  if (t === null || t === undefined) return "-";
  return span(Date.now() / 1000 - t) + " ago";
}
function span(sec) {
  sec = Math.max(0, Math.round(sec));
  if (sec < 60) return sec + "s";
  if (sec < 3600) return Math.floor(sec / 60) + "m" + String(sec % 60).padStart(2, "0") + "s";
  if (sec < 86400) return Math.floor(sec / 3600) + "h" + String(Math.floor(sec % 3600 / 60))
    .padStart(2, "0") + "m";
  return Math.floor(sec / 86400) + "d" + Math.floor(sec % 86400 / 3600) + "h";
}
const when = (t) => t ? new Date(t * 1000).toLocaleString() : "-";
const stateEl = (st) => h("span", {cls: "state " + st}, st);
const table = (head, rows, empty) => h("div", {cls: "scroll"}, h("table", {},
  h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
  h("tbody", {}, rows.length ? rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c))))
    : h("tr", {}, h("td", {cls: "muted", colspan: head.length}, empty || "none")))));

// -- session -----------------------------------------------------------------------------
let me = null;
async function whoami() {
  if (!token()) { me = null; } else {
    try { me = await getJSON("/v1/whoami"); } catch (e) { me = null; showError(e); }
  }
  $("who").textContent = me ? "signed in as " + me.user + (me.admin ? " (admin)" : "") : "";
  $("login").hidden = !!me; $("logout").hidden = !me;
}
$("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  localStorage.token = $("tok").value.trim(); $("tok").value = ""; showError(null);
  await whoami(); route();
});
$("logout").addEventListener("click", async () => {
  delete localStorage.token; await whoami(); route();
});

// -- views -------------------------------------------------------------------------------
let generation = 0; let timers = [];
function every(ms, fn) { fn(); timers.push(setInterval(fn, ms)); }
function live(gen) { return gen === generation; }
async function route() {
  generation++; timers.forEach(clearInterval); timers = [];
  const [, view, arg] = (location.hash || "#/jobs").split("/");
  for (const a of document.querySelectorAll("nav a[data-view]"))
    a.className = a.dataset.view === (view === "job" ? "jobs" : view) ? "on" : "";
  main.replaceChildren();
  if (!me) {
    main.append(h("p", {cls: "warn"}, "Sign in with your corral token (top right): ",
      h("code", {}, "corral token create NAME"), " makes one; ", h("code", {}, "corral up"),
      " writes an admin token to STATE/admin.token."));
    return;
  }
  const views = {jobs: jobsView, job: jobView, submit: submitView, pool: poolView};
  try { await (views[view] || jobsView)(decodeURIComponent(arg || ""), generation); }
  catch (e) { showError(e); }
}
window.addEventListener("hashchange", route);

async function startTemplate(name) {
  try {
    const job = await (await api("/v1/jobs", {method: "POST", json: {template: name}})).json();
    location.hash = "#/job/" + encodeURIComponent(job.id);
  } catch (e) { showError(e); }
}
function quickStart(templates) {
  templates = [...templates].sort((a, b) => (b.name === "jupyter") - (a.name === "jupyter"));
  return h("div", {cls: "bar"}, h("span", {cls: "muted"}, "Start:"), templates.map((t) =>
    h("button", {cls: t.name === "jupyter" ? "primary" : "", title: t.description,
      "data-template": t.name, onclick: () => startTemplate(t.name)}, t.name)));
}

// Jobs: sortable, filterable, paged.
const list = {sort: "seq", dir: -1, page: 0, state: "", project: "", user: "", size: 25};
async function jobsView(_, gen) {
  const templates = await getJSON("/v1/templates");
  const body = h("div");
  const stateSel = h("select", {"aria-label": "state"}, ["", "pending", "running", "succeeded",
    "failed", "cancelled"].map((x) => h("option", {value: x}, x || "any state")));
  stateSel.value = list.state;
  const proj = h("input", {placeholder: "project", size: 12, value: list.project});
  const user = h("input", {placeholder: "user", size: 12, value: list.user});
  const onFilter = () => { list.state = stateSel.value; list.project = proj.value.trim();
    list.user = user.value.trim(); list.page = 0; draw(); };
  stateSel.addEventListener("change", onFilter);
  proj.addEventListener("input", onFilter); user.addEventListener("input", onFilter);
  main.append(h("h2", {}, "Jobs"), quickStart(templates),
    h("div", {cls: "bar"}, h("span", {cls: "muted"}, "Filter:"), stateSel, proj, user), body);
  let jobs = [];
  const cols = [["id", "job", (j) => j.seq], ["name", "name"], ["project", "project"],
    ["user", "user"], ["state", "state"], ["accelerators", "GPUs"],
    ["submitted_at", "submitted"], ["run_time", "ran"], ["reason", "why"]];
  function draw() {
    let rows = jobs.filter((j) => (!list.state || j.state === list.state) &&
      (!list.project || j.project.includes(list.project)) &&
      (!list.user || j.user.includes(list.user)));
    const key = list.sort;
    rows.sort((a, b) => {
      const x = key === "seq" ? a.seq : a[key], y = key === "seq" ? b.seq : b[key];
      return (x > y ? 1 : x < y ? -1 : 0) * list.dir;
    });
    const pages = Math.max(1, Math.ceil(rows.length / list.size));
    list.page = Math.min(list.page, pages - 1);
    const shown = rows.slice(list.page * list.size, (list.page + 1) * list.size);
    const head = cols.map(([k, label]) => h("th", {cls: "sort" + (k === "accelerators" ||
      k === "run_time" ? " num" : ""), onclick: () => { list.dir = list.sort === k ? -list.dir
      : 1; list.sort = k; draw(); }}, label + (list.sort === k ? (list.dir > 0 ? " ▲" : " ▼")
      : "")));
    const trs = shown.map((j) => h("tr", {"data-job": j.id},
      h("td", {}, h("a", {href: "#/job/" + encodeURIComponent(j.id)}, j.id)),
      h("td", {}, j.name), h("td", {}, j.project), h("td", {}, j.user),
      h("td", {}, stateEl(j.state)),
      h("td", {cls: "num"}, j.accelerators + " " + j.accelerator),
      h("td", {title: when(j.submitted_at)}, ago(j.submitted_at)),
      h("td", {cls: "num"}, span(j.run_time + (j.state === "running" && j.started_at ?
        Date.now() / 1000 - j.started_at : 0))),
      h("td", {cls: "small"}, j.reason || "")));
    body.replaceChildren(h("div", {cls: "scroll"}, h("table", {id: "jobs"},
      h("thead", {}, h("tr", {}, head)),
      h("tbody", {}, trs.length ? trs : h("tr", {}, h("td", {colspan: cols.length,
        cls: "muted"}, "no jobs"))))),
      h("div", {cls: "bar"}, h("button", {disabled: list.page === 0,
        onclick: () => { list.page--; draw(); }}, "‹ newer"),
        h("span", {cls: "muted"}, "page " + (list.page + 1) + " of " + pages + " · " +
          rows.length + " jobs"),
        h("button", {disabled: list.page >= pages - 1, onclick: () => { list.page++; draw(); }},
          "older ›")));
  }
  every(3000, async () => {
    try {
      const got = await getJSON("/v1/jobs?limit=5000" + (me.admin ? "&all=true" : ""));
      if (!live(gen)) return;
      jobs = got.map((j) => ({...j, seq: Number(String(j.id).replace(/\\D/g, "")) || 0}));
      draw(); showError(null);
    } catch (e) { showError(e); }
  });
}

// One job: everything about it, its log following.
async function jobView(id, gen) {
  const head = h("div"); const eps = h("div"); const facts = h("div");
  const atts = h("div"); const evs = h("div"); const logs = h("div");
  main.append(head, eps, facts, h("h3", {}, "Log"), logs, h("h3", {}, "Attempts"), atts,
    h("h3", {}, "Events"), evs);
  let job = null; let worker = 0; let follow = null;
  async function refresh() {
    const [j, events] = await Promise.all([getJSON("/v1/jobs/" + encodeURIComponent(id)),
      getJSON("/v1/jobs/" + encodeURIComponent(id) + "/events")]);
    if (!live(gen)) return;
    const first = job === null; job = j;
    const canCancel = j.state === "pending" || j.state === "running";
    head.replaceChildren(h("h2", {}, j.name + " ", h("span", {cls: "muted"}, "(" + j.id + ")"),
      " ", stateEl(j.state)),
      h("p", {id: "reason"}, j.reason_code ? h("b", {}, j.reason_code + ": ") : "",
        j.reason || ""),
      canCancel ? h("button", {cls: "danger", id: "cancel", onclick: async () => {
        try { await api("/v1/jobs/" + encodeURIComponent(j.id) + "/cancel", {method: "POST"});
          refresh(); } catch (e) { showError(e); } }}, "Cancel job") : "");
    eps.replaceChildren(...(j.endpoints || []).map((e) => h("p", {cls: "bar"},
      h("b", {}, e.name), e.protocol === "http" ? h("a", {href: e.url + "#token=" +
        encodeURIComponent(token()), target: "_blank", rel: "noopener noreferrer",
        cls: "endpoint", "data-ready": e.ready ? "1" : "0"},
        (e.ready ? "Open " : "Starting… ") + (j.template || e.name))
        : h("code", {}, "corral ssh " + j.id), h("span", {cls: "muted small"}, e.url))));
    const place = (j.placement || []).map((p) => "worker " + p.worker + " on " + p.node +
      " (GPUs " + (p.gpus.join(",") || "-") + ")").join("; ");
    const kv = [["project / user", j.project + " / " + j.user],
      ["kind", j.kind + (j.template ? " (" + j.template + ")" : "")],
      ["command", Array.isArray(j.command) ? j.command.join(" ") : j.command],
      ["resources", j.resources.workers + " worker(s) × " + j.resources.per_worker + " " +
        j.resources.accelerator + (j.resources.slices > 1 ? " × " + j.resources.slices +
        " slices" : "")],
      ["priority", j.priority], ["submitted", when(j.submitted_at)],
      ["predicted start", j.predicted_start ? when(j.predicted_start) :
        (j.state === "pending" ? "not known" : "-")],
      ["started", when(j.started_at)], ["finished", when(j.finished_at)],
      ["placement", place || "-"],
      ["env", Object.entries(j.env || {}).map(([k, v]) => k + "=" + v).join(" ") || "-"]];
    if (j.idle_timeout) kv.push(["idle timeout", span(j.idle_timeout)]);
    facts.replaceChildren(h("dl", {cls: "kv"}, kv.map(([k, v]) => [h("dt", {}, k),
      h("dd", {}, String(v))])));
    const preempts = events.filter((e) => e.event === "preempt");
    let n = 0;
    atts.replaceChildren(table(["#", "state", "started", "ran", "exit", "placement", "why"],
      j.attempts.map((a) => {
        let why = a.message || "";
        if (a.stop_reason === "preempt" && preempts[n]) {
          const p = preempts[n++]; why = "preempted by " + p.preemptor + ": " + p.reason;
        }
        return [String(a.attempt), stateEl(a.state), when(a.started_at),
          span((a.finished_at || Date.now() / 1000) - a.started_at),
          a.exit_code === null ? "-" : String(a.exit_code),
          a.placement.map((p) => p.node + ":" + p.gpus.join(",")).join(" "), why];
      }), "not started yet"));
    evs.replaceChildren(h("ul", {cls: "events"}, events.slice().reverse().map((e) => {
      const {t, event, job: _j, project: _p, ...rest} = e;
      const detail = Object.entries(rest).map(([k, v]) => k + "=" + (typeof v === "string" ? v
        : JSON.stringify(v))).join(" ");
      return h("li", {}, h("span", {cls: "muted small"}, when(t)), h("span", {cls: "ev"},
        event), detail);
    })));
    if (first) drawLogTabs();
  }
  function drawLogTabs() {
    const tabs = h("div", {cls: "bar"});
    const pre = h("pre", {cls: "log", id: "log"});
    for (let w = 0; w < job.workers; w++) tabs.append(h("button", {cls: w === worker ?
      "primary" : "", onclick: () => { worker = w; drawLogTabs(); }}, "worker " + w));
    logs.replaceChildren(job.workers > 1 ? tabs : "", pre);
    follow = {pre, attempt: null, offset: null, worker};
  }
  async function tail() {
    const f = follow; if (!f) return;
    let q = "worker=" + f.worker;
    q += f.offset === null ? "&tail=200" : "&offset=" + f.offset;
    if (f.attempt !== null) q += "&attempt=" + f.attempt;
    let r;
    try { r = await api("/v1/jobs/" + encodeURIComponent(id) + "/logs?" + q); }
    catch (e) { if (f.pre.childNodes.length === 0) f.pre.textContent = "(no log yet)"; return; }
    const text = await r.text();
    if (!live(gen) || f !== follow) return;
    if (f.pre.textContent === "(no log yet)") f.pre.textContent = "";
    const atBottom = f.pre.scrollHeight - f.pre.scrollTop - f.pre.clientHeight < 40;
    if (text) f.pre.append(text);
    if (atBottom) f.pre.scrollTop = f.pre.scrollHeight;
    f.offset = Number(r.headers.get("X-Corral-Offset"));
    f.attempt = Number(r.headers.get("X-Corral-Attempt"));
    const latest = Number(r.headers.get("X-Corral-Latest") || f.attempt);
    if (r.headers.get("X-Corral-Done") === "1" && latest > f.attempt) {
      f.attempt = latest; f.offset = 0; f.pre.append("--- attempt " + latest + " ---\\n");
    }
  }
  await refresh();
  every(2000, () => refresh().catch(showError));
  every(1000, () => tail());
}

// Submit: a batch job form, and one click per template.
async function submitView(_, gen) {
  const [templates, nodes] = await Promise.all([getJSON("/v1/templates"),
    getJSON("/v1/nodes")]);
  if (!live(gen)) return;
  const types = [...new Set(nodes.map((n) => n.accelerator))];
  main.append(h("h2", {}, "Start from a template"), h("div", {cls: "cards"},
    templates.map((t) => h("div", {cls: "card"}, h("b", {}, t.name),
      h("p", {cls: "muted small"}, t.description),
      h("button", {cls: "primary", "data-template": t.name,
        onclick: () => startTemplate(t.name)}, "Start " + t.name)))));
  const f = {
    name: h("input", {name: "name", placeholder: "(the job id)"}),
    project: h("select", {name: "project"}, me.projects.map((p) => h("option", {}, p))),
    command: h("textarea", {name: "command", required: true,
      placeholder: "python train.py --lr 3e-4"}),
    accelerator: h("select", {name: "accelerator"}, types.map((t) => h("option", {}, t))),
    per_worker: h("input", {name: "per_worker", type: "number", min: 1, value: 1}),
    workers: h("input", {name: "workers", type: "number", min: 1, value: 1}),
    max_runtime: h("input", {name: "max_runtime", placeholder: "e.g. 30m, 72h"}),
    priority: h("input", {name: "priority", placeholder: "0, or a class name"}),
    env: h("textarea", {name: "env", placeholder: "KEY=value, one a line"}),
  };
  const form = h("form", {cls: "grid", id: "submit"},
    Object.entries(f).map(([k, el]) => [h("label", {}, k.replace("_", " ")), el]),
    h("span"), h("div", {}, h("button", {cls: "primary"}, "Submit")));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const spec = {command: f.command.value, project: f.project.value,
      resources: {accelerator: f.accelerator.value, per_worker: Number(f.per_worker.value),
        workers: Number(f.workers.value)}};
    if (f.name.value.trim()) spec.name = f.name.value.trim();
    if (f.max_runtime.value.trim()) spec.max_runtime = f.max_runtime.value.trim();
    const pr = f.priority.value.trim();
    if (pr) spec.priority = /^-?\\d+$/.test(pr) ? Number(pr) : pr;
    const env = {};
    for (const line of f.env.value.split("\\n")) {
      const i = line.indexOf("=");
      if (line.trim() && i > 0) env[line.slice(0, i).trim()] = line.slice(i + 1);
    }
    if (Object.keys(env).length) spec.env = env;
    try {
      const job = await (await api("/v1/jobs", {method: "POST", json: spec})).json();
      showError(null); location.hash = "#/job/" + encodeURIComponent(job.id);
    } catch (e) { showError(e); }
  });
  main.append(h("h2", {}, "Submit a batch job"), form);
}

// The pool: usage against guarantee over time, the queue, every node's accelerators.
function lineChart(series, label) {
  const W = 640, H = 200, L = 36, B = 22, T = 8;
  const pts = series.flatMap((x) => x.points);
  if (!pts.length) return h("p", {cls: "muted"}, "no samples yet");
  const t0 = Math.min(...pts.map((p) => p[0])), t1 = Math.max(t0 + 1, ...pts.map((p) => p[0]));
  const ymax = Math.max(1, ...pts.map((p) => p[1])) * 1.1;
  const X = (t) => L + (t - t0) / (t1 - t0) * (W - L - 6);
  const Y = (v) => T + (1 - v / ymax) * (H - T - B);
  const svg = s("svg", {class: "chart", viewBox: "0 0 " + W + " " + H, role: "img",
    "aria-label": label});
  for (let i = 0; i <= 4; i++) {
    const v = ymax / 1.1 * i / 4;
    svg.append(s("line", {x1: L, x2: W - 6, y1: Y(v), y2: Y(v), stroke: "#eef0f4"}),
      s("text", {x: 2, y: Y(v) + 4}, String(Math.round(v * 10) / 10)));
  }
  svg.append(s("text", {x: L, y: H - 6}, new Date(t0 * 1000).toLocaleTimeString()),
    s("text", {x: W - 6, y: H - 6, "text-anchor": "end"},
      new Date(t1 * 1000).toLocaleTimeString()));
  for (const x of series) {
    const d = x.points.map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + " " +
      Y(p[1]).toFixed(1)).join(" ");
    svg.append(s("path", {d, fill: "none", stroke: x.color, "stroke-width": x.dash ? 1.5 : 2,
      "stroke-dasharray": x.dash ? "5 4" : "none"}));
  }
  return svg;
}
async function poolView(_, gen) {
  const charts = h("div"); const map = h("div"); const quota = h("div");
  main.append(h("h2", {}, "Usage against guarantee"), charts, h("h2", {}, "Nodes"), map,
    h("h2", {}, "Quota now"), quota);
  every(5000, async () => {
    try {
      const [hist, nodes, q] = await Promise.all([getJSON("/v1/pool/history"),
        getJSON("/v1/nodes"), getJSON("/v1/quota")]);
      if (!live(gen)) return;
      const types = [...new Set([...Object.keys(q.capacity),
        ...Object.values(hist.guarantee).flatMap(Object.keys)])].sort();
      const projects = [...new Set([...Object.keys(hist.guarantee),
        ...hist.samples.flatMap((x) => Object.keys(x.usage))])].sort();
      const color = (p) => PALETTE[projects.indexOf(p) % PALETTE.length];
      const blocks = types.map((t) => {
        const series = [];
        for (const p of projects) {
          series.push({color: color(p), points: hist.samples.map((x) =>
            [x.t, (x.usage[p] || {})[t] || 0])});
          const g = (hist.guarantee[p] || {})[t];
          if (g) series.push({color: color(p), dash: true, points: hist.samples.map((x) =>
            [x.t, g])});
        }
        return h("div", {}, h("h3", {}, t + " (capacity " + (q.capacity[t] || 0) + ")"),
          lineChart(series, t + " usage per project"),
          h("div", {cls: "legend small"}, projects.map((p) => h("span", {},
            h("i", {cls: "swatch", "data-color": color(p)}), p))),
          h("p", {cls: "muted small"}, "solid: in use · dashed: guarantee"));
      });
      const queue = lineChart([{color: "#7a7f8a", points: hist.samples.map((x) =>
        [x.t, x.queue])}], "queue length");
      charts.replaceChildren(...blocks, h("h3", {}, "Queue length"), queue);
      for (const i of charts.querySelectorAll("i.swatch")) i.style.background = i.dataset.color;
      map.replaceChildren(...nodes.map((n) => {
        const free = new Set(n.free_devices);
        return h("div", {cls: "node"}, h("b", {}, n.name), " ",
          h("span", {cls: "muted"}, n.accelerator + " · " + n.free + " of " + n.count +
            " free" + (n.domain ? " · domain " + n.domain : "")),
          h("div", {cls: "gpus"}, Array.from({length: n.count}, (_, i) => h("span",
            {cls: "gpu" + (free.has(i) ? "" : " used"), title: "device " + i +
              (free.has(i) ? " (free)" : " (in use)")}))),
          n.jobs.length ? h("div", {cls: "small"}, "jobs: ", n.jobs.map((j, i) =>
            [i ? ", " : "", h("a", {href: "#/job/" + encodeURIComponent(j)}, j)])) : "");
      }));
      quota.replaceChildren(table(["project", "type", "guarantee", "in use", "borrowed",
        "pending"], q.projects.flatMap((p) => Object.keys(p.guarantee).map((t) => [p.project,
        t, String(Math.round(p.guarantee[t] * 100) / 100), String(p.in_use[t]),
        String(p.borrowed[t]), String(p.pending[t])]))));
      showError(null);
    } catch (e) { showError(e); }
  });
}

if (location.hash.startsWith("#token=")) {  // a link with the token in the fragment: the
  localStorage.token = decodeURIComponent(location.hash.slice(7));  // server never sees it
  history.replaceState(null, "", location.pathname + "#/jobs");
}
whoami().then(route);
</script></body></html>
"""
