"""The web page at `/`: the pool at a glance (quota use, nodes, queue, your jobs).

A static page that reads the same API as the CLI with the visitor's token (kept in the
browser's localStorage, never sent anywhere but this server). No build step, no assets.
"""

from __future__ import annotations

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>corral</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em auto; max-width: 70em; color: #222 }
 h1 { font-size: 1.4em; margin-bottom: .2em } h2 { font-size: 1.1em; margin: 1.2em 0 .3em }
 table { border-collapse: collapse; width: 100% }
 th, td { text-align: left; padding: .2em .6em; border-bottom: 1px solid #eee; vertical-align: top }
 th { font-weight: 600; border-bottom: 1px solid #ccc }
 .pending { color: #a60 } .running { color: #06c } .succeeded { color: #080 }
 .failed { color: #c00 } .cancelled { color: #808 }
 .bar { font-family: monospace } #err { color: #c00 } .muted { color: #888 }
</style></head><body>
<h1>corral</h1>
<div class="muted">Fair-share GPU pool. <a href="/docs">API reference</a> ·
<a href="/metrics">metrics</a> · token: <input id="tok" size="30" type="password"
placeholder="paste a token"> <button id="save">use</button> <span id="who"></span></div>
<div id="err"></div>
<h2>Quota</h2><table id="quota"></table>
<h2>Nodes</h2><table id="nodes"></table>
<h2>Queue</h2><table id="queue"></table>
<h2>Jobs</h2><table id="jobs"></table>
<script>
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"]/g, (c) => "&#" + c.charCodeAt(0) + ";");
function table(id, head, rows) {
  $(id).innerHTML = "<tr>" + head.map((h) => "<th>" + h + "</th>").join("") + "</tr>" +
    (rows.length ? rows.map((r) => "<tr>" + r.map((c) => "<td>" + c + "</td>").join("") +
    "</tr>").join("") : "<tr><td class=muted colspan=" + head.length + ">none</td></tr>");
}
async function get(path) {
  const r = await fetch(path, {headers: {Authorization: "Bearer " + localStorage.token}});
  if (!r.ok) throw new Error(path + ": " + ((await r.json()).detail || r.status));
  return r.json();
}
const state = (j) => "<span class=" + esc(j.state) + ">" + esc(j.state) + "</span>";
async function refresh() {
  if (!localStorage.token) { $("err").textContent = "paste a token to see the pool"; return; }
  try {
    const me = await get("/v1/whoami");
    $("who").textContent = "as " + me.user + (me.admin ? " (admin)" : "");
    const [quota, nodes, queue, jobs] = await Promise.all([get("/v1/quota"),
      get("/v1/nodes"), get("/v1/queue"), get("/v1/jobs?limit=50&all=" + me.admin)]);
    table("quota", ["project", "type", "guarantee", "in use", "borrowed", "pending"],
      quota.projects.flatMap((p) => Object.keys(p.guarantee).map((t) => [esc(p.project),
        esc(t), p.guarantee[t], p.in_use[t], p.borrowed[t], p.pending[t]])));
    table("nodes", ["node", "type", "free / total", "jobs"], nodes.map((n) => [esc(n.name),
      esc(n.accelerator), "<span class=bar>" + "■".repeat(n.count - n.free) +
      "□".repeat(n.free) + "</span> " + n.free + " / " + n.count, esc(n.jobs.join(", "))]));
    table("queue", ["#", "project", "job", "user", "gpus", "why"], queue.map((j) => [
      j.position, esc(j.project), esc(j.id + " " + j.name), esc(j.user),
      j.accelerators + " " + esc(j.accelerator), esc(j.reason_code + ": " + j.reason)]));
    table("jobs", ["job", "project", "user", "state", "attempt", "exit", "why"],
      jobs.reverse().map((j) => [esc(j.id + " " + j.name), esc(j.project), esc(j.user),
        state(j), j.attempt, j.exit_code ?? "", esc(j.reason)]));
    $("err").textContent = "";
  } catch (e) { $("err").textContent = e.message; }
}
if (location.hash.startsWith("#token=")) {  // a link with the token in the fragment: the
  localStorage.token = decodeURIComponent(location.hash.slice(7));  // server never sees it
  history.replaceState(null, "", location.pathname);
}
$("save").onclick = () => { localStorage.token = $("tok").value.trim(); refresh(); };
refresh(); setInterval(refresh, 2000);
</script></body></html>
"""
