const COLORS = ["#2e7d32", "#c62828", "#1565c0", "#ef6c00"];
const H = 250, PAD = {left: 60, right: 12, right2: 48, top: 22, bottom: 44}; // room for the legend, the ticks, the units
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400];
const esc = t => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;");
function niceStep(span, count) {
  const raw = span / count, mag = 10 ** Math.floor(Math.log10(raw)), m = raw / mag;
  return mag * (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10);
}
function valueAxis(values, lo, hi) {
  // a scale from 0 to a round top, and its ticks: {Y, ticks}
  const v = values.filter(x => x !== null && isFinite(x)), max = v.length ? Math.max(...v, 0) : 0;
  const step = max > 0 ? niceStep(max, 4) : 1, top = Math.max(Math.ceil(max / step) * step, step);
  const ticks = []; for (let t = 0; t <= top + step / 2; t += step) ticks.push(t);
  return {Y: x => hi - x / top * (hi - lo), ticks, step};
}
const number = (v, step) => step < 1 ? v.toFixed(Math.min(3, Math.ceil(-Math.log10(step)))) : Math.round(v).toLocaleString("en");
const clock = t => new Date(t * 1000).toTimeString().slice(0, 8);
function frame(W, xTicks, yAxis, labels, right) {
  // the grid, the ticks and the axis labels of a chart: xTicks [[x px, text]], yAxis {Y, ticks, step}, labels {x, y, y2},
  // right: the 0-100 % axis {Y, ticks, step} on the right-hand side, if any
  const bottom = H - PAD.bottom, end = W - (right ? PAD.right2 : PAD.right);
  let out = `<line x1="${PAD.left}" y1="${bottom}" x2="${end}" y2="${bottom}" stroke="#999"/>`;
  for (const t of yAxis.ticks) {
    const y = yAxis.Y(t).toFixed(1);
    out += `<line x1="${PAD.left}" y1="${y}" x2="${end}" y2="${y}" stroke="#eee"/><text class="tick-y" x="${PAD.left - 4}" y="${y}" dy="4" font-size="10" text-anchor="end">${number(t, yAxis.step)}</text>`;
  }
  for (const [x, text] of xTicks) out += `<line x1="${x}" y1="${bottom}" x2="${x}" y2="${bottom + 4}" stroke="#999"/><text class="tick-x" x="${x}" y="${bottom + 16}" font-size="10" text-anchor="middle">${text}</text>`;
  out += `<text class="axis-label axis-x" x="${(PAD.left + end) / 2}" y="${H - 6}" font-size="11" text-anchor="middle">${labels.x}</text>`;
  const mid = (PAD.top + bottom) / 2;
  out += `<text class="axis-label axis-y" transform="rotate(-90)" x="${-mid}" y="13" font-size="11" text-anchor="middle">${labels.y}</text>`;
  if (right) {
    for (const t of right.ticks) out += `<text class="tick-y2" x="${end + 4}" y="${right.Y(t).toFixed(1)}" dy="4" font-size="10">${number(t, right.step)}</text>`;
    out += `<text class="axis-label axis-y2" transform="rotate(90)" x="${mid}" y="${-(W - 6)}" font-size="11" text-anchor="middle">${labels.y2}</text>`;
  }
  return out;
}
function timeTicks(x0, x1, X) {
  const step = TIME_STEPS.find(s => (x1 - x0) / s <= 6) || TIME_STEPS[TIME_STEPS.length - 1], ticks = [];
  for (let t = Math.ceil(x0 / step) * step; t <= x1; t += step) ticks.push([X(t).toFixed(1), clock(t)]);
  return ticks;
}
function draw(id, xs, lines, spans, unit, right) {
  // a time chart: lines [{name, values}] on the left axis in ``unit``, those with right: true on a 0-100 % axis
  const svg = document.getElementById(id), W = svg.clientWidth || 600, bottom = H - PAD.bottom;
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const X = x => PAD.left + (x - x0) / (x1 - x0) * (W - PAD.left - (right ? PAD.right2 : PAD.right));
  const left = valueAxis(lines.filter(l => !l.right).flatMap(l => l.values), PAD.top, bottom);
  const percent = right ? {Y: v => bottom - v / 100 * (bottom - PAD.top), ticks: [0, 25, 50, 75, 100], step: 25} : null;
  let out = "";
  for (const s of spans) out += `<rect class="hold${s.steady === false ? " unsteady" : ""}" x="${X(s.start)}" y="${PAD.top}" width="${Math.max(X(s.end) - X(s.start), 1)}" height="${bottom - PAD.top}" fill="${s.steady === false ? "#ffcdd2" : "#c8e6c9"}" opacity="0.6"><title>hold of ${s.users} users${s.steady === false ? ": not steady" : ""}</title></rect>`;
  out += frame(W, timeTicks(x0, x1, X), left, {x: "time (HH:MM:SS, this browser's clock)", y: unit, y2: right}, percent);
  lines.forEach((line, i) => {
    const Y = line.right ? percent.Y : left.Y;
    const pts = xs.map((x, k) => line.values[k] === null ? null : `${X(x).toFixed(1)},${Y(line.values[k]).toFixed(1)}`).filter(p => p);
    out += `<polyline class="series" fill="none" stroke="${COLORS[i]}" stroke-width="1.6" points="${pts.join(" ")}"/>`;
  });
  out += lines.map((l, i) => `<text class="legend" x="${PAD.left + 6 + i * 90}" y="${PAD.top - 8}" font-size="11" fill="${COLORS[i]}">${l.name}</text>`).join("");
  svg.innerHTML = out;
}
function holds(points, levels) {
  // the holds as {start, end, users, steady}: steady from the level's verdict once it has one
  const spans = []; let open = null;
  const close = end => { const level = levels.find(l => l.users === open.users); spans.push({...open, end, steady: level ? level.steady : undefined}); open = null; };
  for (const p of points) {
    if (open && (!p.measuring || p.users !== open.users)) close(p.time);
    if (p.measuring && !open) open = {start: p.time, users: p.users};
  }
  if (open) close(points[points.length - 1].time);
  return spans;
}
function kind(level) {
  if (level.bound === undefined) return "bound: pending";
  return level.bound ? level.bound.split(/[ (:]/)[0] : "not bound";
}
function userTicks(us, X) {
  // a tick per level, leaving out those that would overlap the previous one
  const ticks = []; let last = -Infinity;
  for (const u of [...new Set(us)].sort((a, b) => a - b)) if (X(u) - last >= 28) { ticks.push([X(u).toFixed(1), String(u)]); last = X(u); }
  return ticks;
}
// where a point's label may go, tried in order: [dx, dy, anchor] from the point; then it is left out (the table has it)
const LABEL_SPOTS = [[7, -6, "start"], [7, 15, "start"], [-7, -6, "end"], [-7, 15, "end"]];
for (let row = 1; row <= 4; row++) for (const [dx, anchor] of [[7, "start"], [-7, "end"]]) LABEL_SPOTS.push([dx, -6 - 13 * row, anchor], [dx, 15 + 13 * row, anchor]);
function spread(svg, area) {
  // each point's label at the first spot inside ``area`` clear of the points, the saturation label and those placed
  const placed = [], clear = b => b.x >= area.left && b.x + b.width <= area.right && b.y >= area.top - 12 && b.y + b.height <= area.bottom
    && placed.every(p => b.x >= p.x + p.width + 2 || p.x >= b.x + b.width + 2 || b.y >= p.y + p.height + 1 || p.y >= b.y + b.height + 1);
  for (const mark of svg.querySelectorAll("text.saturation, circle.level")) placed.push(mark.getBBox());
  for (const text of svg.querySelectorAll("text.verdict")) {
    const x = +text.dataset.x, y = +text.dataset.y;
    const spot = LABEL_SPOTS.find(([dx, dy, anchor]) => {
      text.setAttribute("x", x + dx); text.setAttribute("y", y + dy); text.setAttribute("text-anchor", anchor);
      return clear(text.getBBox());
    });
    if (spot) placed.push(text.getBBox()); else text.setAttribute("display", "none");
  }
}
function curve(levels, saturation, logRatio, cause) {
  const svg = document.getElementById("curve"), W = svg.clientWidth || 600, bottom = H - PAD.bottom;
  const table = document.getElementById("levels");
  if (!levels.length) { svg.innerHTML = '<text x="10" y="30" font-size="12">no level held yet</text>'; table.innerHTML = ""; return; }
  const us = levels.map(l => l.users), ys = levels.map(l => l.output_tokens_per_s || 0);
  const x0 = Math.min(...us), x1 = Math.max(...us, x0 + 1), log = x1 >= logRatio * x0, axis = valueAxis(ys, PAD.top + 14, bottom), Y = axis.Y;
  const f = log ? Math.log : u => u, span = f(x1) - f(x0) || 1;
  const X = u => PAD.left + 10 + (f(u) - f(x0)) / span * (W - PAD.left - 130);
  let out = frame(W, userTicks(us, X), axis, {x: `concurrency (users${log ? ", log scale" : ""})`, y: "output tok/s"});
  if (saturation !== null && saturation !== undefined) {
    out += `<line class="saturation" x1="${X(saturation)}" y1="${PAD.top}" x2="${X(saturation)}" y2="${bottom}" stroke="#1565c0" stroke-dasharray="4 3"/><text class="saturation" x="${X(saturation) + 4}" y="${bottom - 4}" font-size="11" fill="#1565c0">saturation: ${saturation} users</text>`;
  }
  out += `<polyline class="series" fill="none" stroke="#2e7d32" stroke-width="1.6" points="${levels.map((l, i) => `${X(l.users).toFixed(1)},${Y(ys[i]).toFixed(1)}`).join(" ")}"/>`;
  levels.forEach((l, i) => { out += `<circle class="level" cx="${X(l.users)}" cy="${Y(ys[i])}" r="5" fill="${l.steady ? "#2e7d32" : "#c62828"}"><title>${l.users} users: ${Math.round(ys[i])} tok/s, ${l.steady ? "steady" : "not steady"} (${esc(l.reason)}); ${l.bound === undefined ? "bound: pending" : esc(l.bound || "no bound found")}</title></circle><text class="verdict" data-x="${X(l.users)}" data-y="${Y(ys[i])}" x="${X(l.users) + 7}" y="${Y(ys[i]) - 6}" font-size="11">${l.users}: ${kind(l)}</text>`; });
  svg.innerHTML = out;
  spread(svg, {left: PAD.left, right: W - PAD.right, top: PAD.top, bottom});
  table.innerHTML = (cause ? `<caption class="saturation-cause">Saturation at ${saturation} users: ${esc(cause)}</caption>` : "") + "<tr><th>Users</th><th>Output tok/s</th><th>Steady</th><th>Bound</th></tr>" + levels.map(l =>
    `<tr class="level-row"><td>${l.users}</td><td>${Math.round(l.output_tokens_per_s || 0)}</td><td>${l.steady ? "steady" : "not steady"} (${esc(l.reason)})</td><td>${l.bound === undefined ? "pending (read once the hold's samples are in)" : esc(l.bound || "none found: neither the server nor a load generator was at a limit")}</td></tr>`).join("");
}
function finalReport(report) {
  const el = document.getElementById("final");
  if (!report) { el.textContent = "The report of a run is built when it ends."; return; }
  if (report.state === "ready") el.innerHTML = `<a id="run-report" href="./run-report" target="_blank">Report of ${report.run}</a><a href="./summary.json">summary.json</a>`;
  else el.textContent = report.state === "building" ? `Building the report of ${report.run}…` : `No report of ${report.run}: ${report.message}`;
}
async function refresh() {
  try {
    const data = await (await fetch("./series.json")).json(), pts = data.points;
    const left = data.phase_limit_s === null ? "" : `, at most ${Math.max(data.phase_limit_s - (data.now - data.phase_since), 0).toFixed(0)} s left`;
    const ended = data.report ? `run ended: ${data.totals.requests || 0} requests; its report ${data.report.state === "ready" ? "is ready (link below)" : data.report.state === "building" ? "is being built" : "failed"}` : "";
    document.getElementById("progress").textContent = !data.running && ended ? ended : data.phase ? `${data.phase} — ${(data.now - data.phase_since).toFixed(0)} s in${left}` :
      (data.folder ? `running: ${data.totals.requests || 0} requests` : "no run yet");
    finalReport(data.report);
    if (pts.length) {
      const xs = pts.map(p => p.time), spans = holds(pts, data.levels);
      draw("tok", xs, [{name: "output tok/s", values: pts.map(p => p.output_tok_s)}], spans, "output tok/s");
      const ttft = [{name: "p50", values: pts.map(p => p.ttft_p50_ms)}, {name: "p99", values: pts.map(p => p.ttft_p99_ms)}];
      if (pts.some(p => p.ttfa_p50_ms !== null && p.ttfa_p50_ms !== undefined))  // a reasoning model: its first answer token too
        ttft.push({name: "answer p50", values: pts.map(p => p.ttfa_p50_ms)}, {name: "answer p99", values: pts.map(p => p.ttfa_p99_ms)});
      draw("ttft", xs, ttft, spans, "TTFT (ms)");
      draw("tpot", xs, [{name: "p50", values: pts.map(p => p.tpot_p50_ms)}, {name: "p99", values: pts.map(p => p.tpot_p99_ms)}], spans, "TPOT (ms)");
      draw("server", xs, [{name: "running", values: pts.map(p => p.running)}, {name: "waiting", values: pts.map(p => p.waiting)},
        {name: "KV cache %", right: true, values: pts.map(p => p.kv_cache_usage === null ? null : p.kv_cache_usage * 100)}], spans, "requests", "KV cache %");
    }
    curve(data.levels, data.saturation_users, data.log_users_axis_ratio, data.saturation_cause);
  } catch (e) { document.getElementById("progress").textContent = "cannot reach the master: " + e; }
}
refresh(); setInterval(refresh, 2000);
