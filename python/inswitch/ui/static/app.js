// inswitch web view: polls the JSON API (docs/ui.md) and draws it with plain DOM and SVG.
// No framework and no network access beyond the page's own server.
"use strict";

const POLL_MS = 1000;   // counters and link rates
const SLOW_MS = 2000;   // system panels, the open table and register
const SVG = "http://www.w3.org/2000/svg";
const S = { topo: null, sw: {} };  // switch name -> its state (element, last counters, rates)

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function s(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
// Whole numbers with digit grouping: never cut, never rounded to "1.2k".
// Integers past 2^53 arrive as decimal strings (a double would lose their last digits).
function fmt(v) {
  if (typeof v === "number" && Number.isInteger(v)) return v.toLocaleString("en-US");
  if (typeof v === "string" && /^\d{4,}$/.test(v)) return v.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return String(v);
}
function fmtRate(x) { return x >= 100 ? x.toFixed(0) : x.toFixed(1); }
function num(v, extra) { return h("td", { class: "num" + (extra ? " " + extra : "") }, fmt(v)); }
async function getJSON(url, opts) {
  const r = await fetch(url, Object.assign({ cache: "no-store" }, opts || {}));
  const d = await r.json();
  if (!r.ok) throw new Error(d.error || ("HTTP " + r.status));
  return d;
}
function setStatus(text, bad) {
  const e = document.getElementById("status");
  e.textContent = text;
  e.className = "status" + (bad ? " error" : "");
}
function reasons(obj) {
  return Object.entries(obj || {}).filter(([, n]) => n).map(([k, n]) => k + " " + fmt(n)).join(", ") || "none";
}

// ---- topology ------------------------------------------------------------------------
function drawTopology() {
  const svg = document.getElementById("topology");
  svg.replaceChildren();
  const t = S.topo, W = Math.max(600, svg.clientWidth || 900), H = 300;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const pos = {};
  t.switches.forEach((sw, i) => { pos[sw.name] = { x: W * (i + 1) / (t.switches.length + 1), y: 70 }; });
  t.hosts.forEach((ho, i) => { pos[ho.name] = { x: W * (i + 1) / (t.hosts.length + 1), y: 225 }; });
  const gl = s("g"), gn = s("g");
  for (const l of t.links) {
    const a = pos[l.a], b = pos[l.b];
    if (!a || !b) continue;
    gl.append(s("line", { class: "link", "data-link": `${l.switch}:${l.port}`, x1: a.x, y1: a.y, x2: b.x, y2: b.y }));
    const mx = (a.x + b.x) / 2, my = (a.y + b.y) / 2;
    gl.append(s("text", { class: "rate", "data-rate": `${l.switch}:${l.port}`, x: mx, y: my - 4 }, "– pkt/s"));
    const sp = pos[l.switch];
    const other = l.a === l.switch ? b : a;
    if (sp) gl.append(s("text", { class: "port", x: sp.x + (other.x - sp.x) * 0.3, y: sp.y + (other.y - sp.y) * 0.3 + 4 }, "port " + l.port));
  }
  for (const sw of t.switches) {
    const p = pos[sw.name], g = s("g", { class: "node switch", "data-node": sw.name });
    g.append(s("rect", { x: p.x - 55, y: p.y - 20, width: 110, height: 40, rx: 6 }));
    g.append(s("text", { x: p.x, y: p.y }, sw.name));
    gn.append(g);
    gn.append(s("text", { class: "label", x: p.x, y: p.y - 28 }, (sw.programs || []).join(", ")));
  }
  for (const ho of t.hosts) {
    const p = pos[ho.name], g = s("g", { class: "node " + (ho.kind || "host"), "data-node": ho.name });
    g.append(s("circle", { cx: p.x, cy: p.y, r: 22 }));
    g.append(s("text", { x: p.x, y: p.y }, ho.short || ho.name));
    gn.append(g);
    gn.append(s("text", { class: "label", x: p.x, y: p.y + 36 }, ho.ip || ""));
  }
  svg.append(gl, gn);
}

function updateLinkRates() {
  for (const l of S.topo.links) {
    const st = S.sw[l.switch];
    const r = st && st.rates[l.port];
    const txt = document.querySelector(`[data-rate="${l.switch}:${l.port}"]`);
    const line = document.querySelector(`[data-link="${l.switch}:${l.port}"]`);
    if (!txt || !r) continue;
    const total = r.rx + r.tx;
    txt.textContent = fmtRate(total) + " pkt/s";
    line.classList.toggle("active", total > 0);
  }
}

// ---- one switch ----------------------------------------------------------------------
async function setupSwitch(sw) {
  const node = document.getElementById("switch-template").content.firstElementChild.cloneNode(true);
  node.dataset.switch = sw.name;
  node.querySelector(".switch-title").textContent = `Switch ${sw.name}` + (sw.programs ? ` (${sw.programs.join(", ")})` : "");
  document.getElementById("switches").append(node);
  const st = S.sw[sw.name] = { sw, node, base: sw.base || "", prev: null, rates: {}, table: null, register: null };
  const tsel = node.querySelector(".table-select"), rsel = node.querySelector(".register-select");
  const pipe = await getJSON(st.base + "api/pipeline");
  for (const t of pipe.tables) tsel.append(h("option", { value: t.name }, `${t.name} (${t.count ?? "?"} of ${t.size})`));
  for (const r of pipe.registers) rsel.append(h("option", { value: r.name }, `${r.name} [${r.size}]` + (r.fields.length ? " {" + r.fields.map(f => f.name).join(", ") + "}" : "")));
  st.table = tsel.value || null;
  st.register = rsel.value || null;
  tsel.addEventListener("change", () => { st.table = tsel.value; loadTable(st); });
  rsel.addEventListener("change", () => { st.register = rsel.value; loadRegister(st); });
  node.querySelector(".register-zeros").addEventListener("change", () => loadRegister(st));
  if (S.topo.writes) setupWrites(st);
  loadTable(st);
  loadRegister(st);
}

function setupWrites(st) {
  const form = st.node.querySelector(".register-write");
  form.hidden = false;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = form.querySelector(".write-result");
    const body = { name: st.register, index: Number(form.index.value), value: form.value.value };
    try {
      await getJSON(st.base + "api/register", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
      out.textContent = "written";
      loadRegister(st);
    } catch (e) { out.textContent = "failed: " + e.message; }
  });
}

function updateCounters(st, c) {
  const prev = st.prev, dt = prev ? c.time - prev.time : 0;
  const before = {};
  if (prev) for (const p of prev.ports || []) before[p.port] = p;
  const body = st.node.querySelector("table.ports tbody");
  const rows = [];
  for (const p of c.ports || []) {
    const b = before[p.port];
    const rx = b && dt > 0 ? (p.rx_packets - b.rx_packets) / dt : 0, tx = b && dt > 0 ? (p.tx_packets - b.tx_packets) / dt : 0;
    st.rates[p.port] = { rx, tx };
    const io = (p.io || {}).drops || {};
    const ioDrops = Object.values(io).reduce((a, n) => a + n, 0);
    const tr = h("tr", { "data-port": p.port },
      num(p.port), h("td", {}, p.name || ""),
      num(p.rx_packets), num(p.rx_bytes), num(p.tx_packets), num(p.tx_bytes),
      h("td", { class: "num" }, fmtRate(rx)), h("td", { class: "num" }, fmtRate(tx)),
      num(p.queue_drops || 0, p.queue_drops ? "bad" : ""), h("td", { title: reasons(io) }, fmt(ioDrops)));
    for (const [i, key] of ["rx_packets", "rx_bytes", "tx_packets", "tx_bytes"].entries()) tr.children[2 + i].dataset.key = key;
    rows.push(tr);
  }
  body.replaceChildren(...rows);

  const pbody = st.node.querySelector("table.programs tbody");
  const prow = [];
  for (const [name, pc] of Object.entries(c.programs || {})) {
    const pp = prev && prev.programs && prev.programs[name];
    const passes = pc.ingress_passes + pc.egress_passes;
    const r = pp && dt > 0 ? (passes - pp.ingress_passes - pp.egress_passes) / dt : 0;
    prow.push(h("tr", { "data-program": name }, h("td", {}, name), num(pc.ingress_passes), num(pc.egress_passes), h("td", { class: "num" }, fmtRate(r)), h("td", {}, reasons(pc.drops)), h("td", {}, reasons(pc.violations))));
  }
  pbody.replaceChildren(...prow);

  const dbody = st.node.querySelector("table.drops tbody");
  const drow = [];
  for (const [reason, n] of Object.entries(c.drops || {})) {
    if (!n) continue;
    const was = prev && prev.drops ? prev.drops[reason] || 0 : n;
    drow.push(h("tr", { "data-drop": reason }, h("td", {}, reason), num(n, "bad"), h("td", { class: "num" }, fmtRate(dt > 0 ? (n - was) / dt : 0))));
  }
  if (!drow.length) drow.push(h("tr", {}, h("td", { colSpan: 3 }, "no drops")));
  dbody.replaceChildren(...drow);

  const sbody = st.node.querySelector("table.scalars tbody");
  const srow = [];
  for (const k of ["recirculations", "clones", "mcast_replicas", "packet_in", "packet_out", "digests", "pktgen_packets", "events_dropped"]) {
    if (k in c) srow.push(h("tr", {}, h("td", {}, k.replace(/_/g, " ")), num(c[k])));
  }
  sbody.replaceChildren(...srow);
  st.prev = c;
}

async function loadTable(st) {
  const view = st.node.querySelector(".table-view");
  if (!st.table) { view.replaceChildren(h("p", { class: "note" }, "no tables")); return; }
  const d = await getJSON(st.base + "api/table?name=" + encodeURIComponent(st.table));
  const keys = d.keys.map(k => k.name);
  const head = h("tr", {}, ...keys.map(k => h("th", { title: d.keys.find(x => x.name === k).kind }, k)), h("th", {}, "action"), h("th", {}, "params"), h("th", { class: "num" }, "priority"));
  const rows = d.entries.map(e => h("tr", {}, ...keys.map(k => h("td", {}, e.match[k] ?? "*")), h("td", {}, e.action),
    h("td", { class: "wrap" }, Object.entries(e.params).map(([n, v]) => `${n}=${v}`).join(", ")), num(e.priority)));
  const dflt = d.default ? `default: ${d.default.action}` + (Object.keys(d.default.params).length ? "(" + Object.entries(d.default.params).map(([n, v]) => `${n}=${v}`).join(", ") + ")" : "") : "";
  view.replaceChildren(h("table", { class: "entries" }, h("thead", {}, head), h("tbody", {}, ...rows)),
    h("p", { class: "note" }, `${d.count} of ${d.size} entries` + (d.entries.length < d.count ? `, first ${d.entries.length} shown` : "") + (dflt ? "; " + dflt : "")));
}

async function loadRegister(st) {
  const view = st.node.querySelector(".register-view");
  if (!st.register) { view.replaceChildren(h("p", { class: "note" }, "no registers")); return; }
  const zeros = st.node.querySelector(".register-zeros").checked ? "&zeros=1" : "";
  const d = await getJSON(st.base + "api/register?name=" + encodeURIComponent(st.register) + zeros);
  const fields = d.fields.length ? d.fields.map(f => f.name) : ["value"];
  const head = h("tr", {}, h("th", { class: "num" }, "index"), ...fields.map(f => h("th", { class: "num" }, f)), ...(d.fields.length ? [h("th", { class: "num" }, "raw")] : []));
  const rows = d.cells.map(c => h("tr", { "data-index": c.index }, num(c.index),
    ...fields.map(f => { const td = num(c[f]); td.dataset.field = f; return td; }),
    ...(d.fields.length ? [Object.assign(num(c.raw), { title: "the whole cell" })] : [])));
  for (const tr of rows) if (d.fields.length) tr.lastElementChild.dataset.field = "raw";
  view.replaceChildren(h("p", { class: "note" }, d.doc || ""), h("table", { class: "cells", "data-register": d.name }, h("thead", {}, head), h("tbody", {}, ...rows)),
    h("p", { class: "note" }, `${d.nonzero} of ${d.size} cells non-zero; ${d.cells.length} listed` + (d.cells.length < d.listed_of ? ` of ${d.listed_of}` : "")));
}

async function loadSystems(st) {
  const d = await getJSON(st.base + "api/systems");
  const box = st.node.querySelector(".systems");
  box.replaceChildren(...d.panels.map(p => h("div", { class: "card system", "data-system": p.program },
    h("h3", {}, p.title),
    h("table", { class: "summary" }, h("tbody", {}, ...p.summary.map(([k, v]) => h("tr", {}, h("td", {}, k), num(v))))),
    ...(p.rows.columns.length ? [h("table", {}, h("thead", {}, h("tr", {}, ...p.rows.columns.map((c, i) => h("th", { class: typeof (p.rows.data[0] || [])[i] === "number" ? "num" : "" }, c)))),
      h("tbody", {}, ...p.rows.data.map(r => h("tr", {}, ...r.map(v => typeof v === "number" ? num(v) : h("td", {}, v))))))] : []),
    h("p", { class: "note" }, p.note))));
}

// ---- polling -------------------------------------------------------------------------
let failures = 0;
async function tick() {
  try {
    await Promise.all(Object.values(S.sw).map(async st => updateCounters(st, await getJSON(st.base + "api/counters"))));
    updateLinkRates();
    failures = 0;
    setStatus("live · updated " + new Date().toLocaleTimeString());
  } catch (e) {
    failures += 1;
    setStatus("cannot read the switch: " + e.message, true);
  }
}
async function slow() {
  for (const st of Object.values(S.sw)) {
    try { await Promise.all([loadSystems(st), loadTable(st), loadRegister(st)]); } catch (e) { /* shown by tick */ }
  }
}

async function start() {
  try {
    S.topo = await getJSON("api/topology");
  } catch (e) { setStatus("cannot read the topology: " + e.message, true); return; }
  document.getElementById("title").textContent = S.topo.title || "";
  document.title = "inswitch " + (S.topo.title || S.topo.switches.map(x => x.name).join(", "));
  drawTopology();
  try {
    await Promise.all(S.topo.switches.map(setupSwitch));
  } catch (e) { setStatus("cannot read a switch's pipeline: " + e.message, true); }
  await tick();
  setInterval(tick, POLL_MS);
  slow();
  setInterval(slow, SLOW_MS);
}
start();
