// Braid's page: the topic list, and one topic's segments live (server-sent
// events from /ui/api/watch: "layout" at every change, "stats" every
// second). No framework, no CDN.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const TWO64 = 2n ** 64n;
let source = null, layout = null, known = new Set(), lastNext = new Map(), lastTime = 0, rates = new Map(), loads = new Map();

function el(tag, attrs, text) {
  const e = tag === "svg" || ["g", "rect", "line", "text", "title"].includes(tag) ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

async function loadTopics() {
  try {
    const r = await fetch("api/topics");
    const { names } = await r.json();
    const ul = $("topics"), f = $("filter").value;
    ul.replaceChildren(...names.filter((n) => n.includes(f)).map((n) => {
      const a = el("a", { href: "?topic=" + encodeURIComponent(n) }, n);
      if (n === current()) a.className = "current";
      return el("li", {}, undefined).appendChild(a).parentNode;
    }));
  } catch (e) { /* the next refresh */ }
}

function current() { return new URLSearchParams(location.search).get("topic"); }

// depth: the longest chain of parents above a segment.
function depths(segs) {
  const byID = new Map(segs.map((s) => [s.id, s])), memo = new Map();
  const d = (id) => {
    if (memo.has(id)) return memo.get(id);
    const s = byID.get(id);
    const v = !s || !s.parents.length ? 0 : 1 + Math.max(...s.parents.map(d));
    memo.set(id, v);
    return v;
  };
  segs.forEach((s) => d(s.id));
  return memo;
}

function drawLayout(l) {
  layout = l;
  $("title").textContent = l.topic;
  const active = l.segments.filter((s) => s.state === "active").length;
  $("summary").textContent = `epoch ${l.epoch} · ${active} active of ${l.segments.length} segments`;
  const svg = $("dag"), W = svg.clientWidth || 900, H = svg.clientHeight || 360;
  const dep = depths(l.segments), cols = Math.max(...dep.values(), 0) + 1;
  const colW = W / cols, pad = 6;
  const parts = l.segments.filter((s) => s.partition !== undefined && s.partition !== null);
  const nparts = parts.length ? Math.max(...parts.map((s) => s.partition)) + 1 : 0;
  const box = new Map();
  for (const s of l.segments) {
    let y0, y1;
    if (s.partition !== undefined && s.partition !== null && nparts) {
      y0 = (s.partition / nparts) * H; y1 = ((s.partition + 1) / nparts) * H;
    } else {
      const lo = BigInt(s.range[0]), hi = BigInt(s.range[1]);
      y0 = Number((lo * 10000n) / TWO64) / 10000 * H;
      y1 = Number(((hi + 1n) * 10000n) / TWO64) / 10000 * H;
    }
    const x = dep.get(s.id) * colW;
    box.set(s.id, { x: x + pad, y: y0 + 2, w: colW - 3 * pad, h: Math.max(y1 - y0 - 4, 8) });
  }
  const nodes = [], edges = [];
  for (const s of l.segments) {
    const b = box.get(s.id);
    for (const p of s.parents) {
      const a = box.get(p);
      if (a) edges.push(el("line", { x1: a.x + a.w, y1: a.y + a.h / 2, x2: b.x, y2: b.y + b.h / 2 }));
    }
    const g = el("g", { "data-segment": s.id, class: s.state + (known.has(s.id) || !known.size ? "" : " new") });
    g.appendChild(el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 3 }));
    const rate = rates.get(s.id);
    const ld = loads.get(s.id), hot = ld && ld.hot_key_share >= 0.5;
    if (hot) g.classList.add("hot");
    const reps = s.replicas || [];
    const label = `#${s.id}` + (s.partition !== undefined && s.partition !== null ? ` p${s.partition}` : "") + ` ${s.owner || ""}` + (reps.length > 1 ? ` x${reps.length}` : "") + (rate ? ` ${Math.round(rate)} msg/s` : "") +
      (hot ? ` hot key ${ld.hot_key || ld.hot_key_hash} ${Math.round(ld.hot_key_share * 100)}%` : "");
    g.appendChild(el("text", { x: b.x + 4, y: b.y + Math.min(14, b.h - 2) }, label));
    const copies = reps.length ? `, replicas ${reps.map((r, i) => r.node + (i === 0 ? " (leader)" : "")).join(", ")}` : "";
    g.appendChild(el("title", {}, `segment ${s.id}: ${s.state}, range [${s.range[0]}, ${s.range[1]}], ${s.buckets} buckets, owner ${s.owner || "-"}${copies}`));
    if (reps.length) g.setAttribute("data-replicas", reps.map((r) => r.node).join(","));
    nodes.push(g);
  }
  svg.replaceChildren(...edges, ...nodes);
  known = new Set(l.segments.map((s) => s.id));
}

function drawStats(snap) {
  const st = snap.stats;
  // Rates: next offsets' growth between two snapshots, per unit and segment.
  const dt = lastTime ? (snap.time - lastTime) / 1000 : 0;
  const segRates = new Map();
  for (const b of st.buckets) {
    const k = `${b.segment}/${b.bucket}`, prev = lastNext.get(k);
    const r = dt > 0 && prev !== undefined ? Math.max(0, b.next_offset - prev) / dt : 0;
    b.rate = r;
    segRates.set(b.segment, (segRates.get(b.segment) || 0) + r);
    lastNext.set(k, b.next_offset);
  }
  lastTime = snap.time;
  rates = segRates;
  loads = new Map((st.load || []).map((l) => [l.segment, l]));
  $("load").tBodies[0].replaceChildren(...(st.load || []).map((l) => {
    const tr = el("tr", { "data-load": l.segment });
    const key = l.hot_key || l.hot_key_hash || "";
    for (const v of [l.segment, l.msg_in_rate.toFixed(0), l.msg_out_rate.toFixed(0), l.byte_in_rate.toFixed(0), l.byte_out_rate.toFixed(0), key,
      l.hot_key_share ? `${Math.round(l.hot_key_share * 100)}%` : ""]) tr.appendChild(el("td", {}, String(v)));
    if (l.hot_key_share >= 0.5) tr.className = "hot";
    return tr;
  }));
  $("units").tBodies[0].replaceChildren(...st.buckets.map((b) => {
    const tr = el("tr", { "data-unit": `${b.segment}/${b.bucket}` });
    for (const v of [`${b.segment}/${b.bucket}`, b.state, b.owner || "", b.first_offset, b.next_offset, b.rate.toFixed(0), b.bytes]) tr.appendChild(el("td", {}, String(v)));
    return tr;
  }));
  let lag = new Map();
  if (snap.subscriptions && snap.subscriptions.subscriptions) {
    for (const s of snap.subscriptions.subscriptions) {
      const parts = (s.units || []).filter((u) => u.lag > 0).map((u) => `${u.segment}/${u.bucket}: ${u.lag}`);
      for (const c of s.consumers || []) {
        const held = (c.units || []).map((u) => `${u.segment}/${u.bucket}`).join(" ");
        parts.push(s.kind === "queue" ? `${c.name}: ${c.inflight} in flight` : `${c.name} [${held}]: lag ${c.lag}`);
      }
      lag.set(s.name, parts.join(", "));
    }
  }
  $("subs").tBodies[0].replaceChildren(...(st.subscriptions || []).map((s) => {
    const tr = el("tr", { "data-subscription": s.name });
    for (const v of [s.name, s.kind || "stream", (s.consumers || []).join(", "), s.backlog, lag.get(s.name) || ""]) tr.appendChild(el("td", {}, String(v)));
    return tr;
  }));
  if (layout) drawLayout(layout);
}

function watch(uri) {
  if (source) source.close();
  source = new EventSource("api/watch?uri=" + encodeURIComponent(uri));
  source.addEventListener("layout", (e) => { drawLayout(JSON.parse(e.data)); $("status").textContent = "live"; $("status").className = "status"; });
  source.addEventListener("stats", (e) => drawStats(JSON.parse(e.data)));
  source.onerror = async () => {
    $("status").className = "status down";
    if (source.readyState !== EventSource.CLOSED) { $("status").textContent = "reconnecting…"; return; }
    // Refused (a bad name, a topic that does not exist): say why, and try
    // again in a while (it may be created).
    try {
      const r = await fetch("api/topic?uri=" + encodeURIComponent(uri));
      $("status").textContent = r.ok ? "reconnecting…" : (await r.text()).trim();
    } catch (e) { $("status").textContent = "Braid is not answering"; }
    setTimeout(() => { if (current() === uri) watch(uri); }, 5000);
  };
}

$("filter").addEventListener("input", loadTopics);
loadTopics();
setInterval(loadTopics, 5000);
if (current()) watch(current());
