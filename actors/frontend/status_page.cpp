// The page at GET /status: one HTML document with its style and script inline. It reads GET /v1/cluster
// twice a second and draws the cluster: each instance with its pool (owned, hosted for others, promised, free)
// and state, the running requests as lines from their owner to the holders of their blocks, and the moves as
// they are reported. Every drawn value is also in a data- attribute, which the browser test reads.
#include "actors/frontend/cluster_feed.hpp"

namespace illm::actors::frontend {

const std::string& status_page_html() {
  static const std::string page = R"PAGE(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>infinite-llm cluster</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{margin:0;font:14px/1.4 system-ui,sans-serif;background:#0f172a;color:#e2e8f0}
header{display:flex;flex-wrap:wrap;gap:24px;align-items:baseline;padding:14px 22px;background:#1e293b}
header h1{font-size:18px;margin:0;color:#f8fafc}
.figure{font-variant-numeric:tabular-nums}.figure b{font-size:18px;color:#f8fafc}
#link.down{color:#f87171}
main{padding:16px 22px;display:grid;grid-template-columns:minmax(0,3fr) minmax(280px,1fr);gap:20px}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.08em;color:#94a3b8;margin:0 0 8px}
section{background:#1e293b;border-radius:8px;padding:12px 14px}
svg text{fill:#e2e8f0;font:12px system-ui,sans-serif}
svg .small{fill:#94a3b8;font-size:11px}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:3px 6px;border-bottom:1px solid #334155}
th{color:#94a3b8;font-weight:normal}
.chip{display:inline-block;padding:0 6px;margin:1px 3px 1px 0;border-radius:4px;background:#334155}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 12px}
ol{list-style:none;margin:0;padding:0;max-height:560px;overflow:auto;scrollbar-color:#475569 #1e293b}
li.move{padding:4px 6px;border-bottom:1px solid #334155;animation:arrive 2s ease-out}
li.move.refused{color:#fca5a5}
@keyframes arrive{from{background:#475569}to{background:transparent}}
</style></head><body>
<header><h1>infinite-llm cluster</h1>
<span class="figure">seq <b id="seq" data-seq="0">-</b></span>
<span class="figure">instances <b id="alive">-</b></span>
<span class="figure">requests <b id="running">-</b></span>
<span class="figure">tokens/s <b id="tokens-per-second">-</b></span>
<span class="figure">moves <b id="moves-done">-</b> done, <b id="moves-refused">-</b> refused</span>
<span id="link" class="figure">connecting</span></header>
<main><div>
<section><h2>Instances and where each request's KV blocks are</h2>
<div><span class="swatch" style="background:#3b82f6"></span>owned<span class="swatch" style="background:#a855f7"></span>hosted for others<span class="swatch" style="background:#f59e0b"></span>promised<span class="swatch" style="background:#475569"></span>free</div>
<svg id="picture" width="100%" height="300"></svg></section>
<section style="margin-top:16px"><h2>Running requests</h2>
<table><thead><tr><th>request</th><th>owner</th><th>blocks</th><th>held on (instance: blocks)</th></tr></thead>
<tbody id="requests"></tbody></table></section></div>
<section><h2>Moves and refusals, newest first</h2><ol id="moves"></ol></section></main>
<script>
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const COLORS = {owned: "#3b82f6", hosted: "#a855f7", promised: "#f59e0b", free: "#475569"};
const STATE_COLORS = {alive: "#22c55e", draining: "#f59e0b", down: "#ef4444", left: "#64748b"};
let seen = new Set();  // the moves of the last snapshot: one not among them is new

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function hue(id) { return (Number(id) * 137.5) % 360; }

function drawInstance(svg, inst, x, width) {
  const g = el("svg:g", {"class": "instance", "data-id": inst.id, "data-state": inst.state,
    "data-owned": inst.owned_blocks, "data-hosted": inst.hosted_blocks, "data-promised": inst.promised_blocks,
    "data-free": inst.free_blocks, "data-total": inst.total_blocks, "data-running": inst.running});
  const faded = inst.state === "down" || inst.state === "left";
  g.append(el("svg:rect", {x: x, y: 8, width: width, height: 200, rx: 8, fill: "#0f172a",
    stroke: STATE_COLORS[inst.state] || "#94a3b8", "stroke-width": 3, opacity: faded ? 0.5 : 1}));
  g.append(el("svg:text", {x: x + 12, y: 30}, "instance " + inst.id));
  g.append(el("svg:text", {x: x + 12, y: 47, "class": "small state"}, inst.state + (inst.node ? " · " + inst.node : "")));
  const parts = [["owned", inst.owned_blocks], ["hosted", inst.hosted_blocks], ["promised", inst.promised_blocks],
                 ["free", inst.free_blocks]];
  const total = Math.max(1, inst.total_blocks);
  let y = 200;
  for (const [name, n] of parts) {
    const h = 140 * n / total;
    y -= h;
    g.append(el("svg:rect", {x: x + 12, y: y, width: 26, height: h, fill: COLORS[name], "class": "pool-" + name}));
  }
  let line = 70;
  for (const [name, n] of parts) {
    g.append(el("svg:text", {x: x + 48, y: line, "class": "small"}, name + " " + n));
    line += 16;
  }
  g.append(el("svg:text", {x: x + 48, y: line + 8, "class": "small"}, "of " + inst.total_blocks + " blocks"));
  g.append(el("svg:text", {x: x + 48, y: line + 28, "class": "small"},
    inst.running + " running, " + inst.waiting + " waiting"));
  if (inst.reason) g.append(el("svg:text", {x: x + 48, y: line + 44, "class": "small"}, inst.reason.slice(0, 28)));
  svg.append(g);
}

function drawRequests(svg, requests, centers) {
  let lane = 0;
  for (const r of requests) {
    const from = centers.get(r.owner);
    if (from === undefined) continue;
    const color = "hsl(" + hue(r.id) + ",75%,60%)";
    for (const b of r.blocks) {
      const to = centers.get(b.instance);
      if (b.local || to === undefined || to === from) continue;
      const dip = 240 + 14 * (lane % 6);
      svg.append(el("svg:path", {d: "M" + from + " 208 C" + from + " " + dip + " " + to + " " + dip + " " + to + " 208",
        fill: "none", stroke: color, "stroke-width": Math.min(10, 1 + b.blocks / 8), opacity: 0.85,
        "class": "spread", "data-request": r.id, "data-holder": b.instance}));
    }
    lane++;
  }
}

function renderPicture(s) {
  const svg = document.getElementById("picture");
  svg.replaceChildren();
  const n = Math.max(1, s.instances.length);
  const width = Math.min(220, Math.floor((svg.clientWidth || 900) / n) - 14);
  const centers = new Map();
  s.instances.forEach((inst, i) => {
    const x = 6 + i * (width + 14);
    drawInstance(svg, inst, x, width);
    centers.set(inst.id, x + 25);
  });
  drawRequests(svg, s.requests, centers);
}

function renderRequests(s) {
  const body = document.getElementById("requests");
  body.replaceChildren();
  for (const r of s.requests) {
    const holders = r.blocks.map(b => b.instance + ":" + b.blocks).join(",");
    const row = el("tr", {"class": "request", "data-id": r.id, "data-owner": r.owner, "data-holders": holders});
    const swatch = el("span", {"class": "swatch", style: "margin-left:0;background:hsl(" + hue(r.id) + ",75%,60%)"});
    const id = el("td");
    id.append(swatch, document.createTextNode(String(r.id)));
    const chips = el("td");
    for (const b of r.blocks) chips.append(el("span", {"class": "chip"}, b.instance + ": " + b.blocks + (b.local ? " (own)" : "")));
    row.append(id, el("td", {}, String(r.owner)), el("td", {}, String(r.total_blocks)), chips);
    body.append(row);
  }
}

function renderMoves(s) {
  const list = document.getElementById("moves");
  const shown = new Set(s.moves.map(m => m.id + "/" + m.ok));
  for (const m of s.moves) {
    if (seen.has(m.id + "/" + m.ok)) continue;
    const text = (m.ok ? "✓ " : "✗ ") + m.kind + " " + m.id + ": request " + m.request + ", " + m.blocks +
      " blocks " + m.from + " → " + m.to + (m.ok ? "" : " refused: " + m.reason);
    list.prepend(el("li", {"class": "move" + (m.ok ? "" : " refused"), "data-id": m.id, "data-ok": m.ok}, text));
  }
  seen = shown;
  while (list.children.length > 200) list.lastChild.remove();
}

function render(s) {
  const seq = document.getElementById("seq");
  seq.textContent = s.seq;
  seq.dataset.seq = s.seq;
  document.getElementById("alive").textContent =
    s.instances.filter(i => i.state === "alive").length + " alive of " + s.instances.length;
  document.getElementById("running").textContent = s.requests.length;
  document.getElementById("tokens-per-second").textContent = s.tokens_per_second.toFixed(1);
  document.getElementById("moves-done").textContent = s.moves_done;
  document.getElementById("moves-refused").textContent = s.moves_refused;
  renderPicture(s);
  renderRequests(s);
  renderMoves(s);
}

async function poll() {
  const link = document.getElementById("link");
  try {
    const answer = await fetch("/v1/cluster", {cache: "no-store"});
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    render(await answer.json());
    link.textContent = "live";
    link.className = "figure";
  } catch (e) {
    link.textContent = "no answer: " + e.message;
    link.className = "figure down";
  }
  setTimeout(poll, 500);
}
poll();
</script></body></html>
)PAGE";
  return page;
}

}  // namespace illm::actors::frontend
