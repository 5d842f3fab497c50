const COLORS = ["#2e7d32", "#c62828", "#1565c0", "#ef6c00"];
function scale(values, lo, hi) {
  const v = values.filter(x => x !== null && isFinite(x));
  let min = v.length ? Math.min(...v, 0) : 0, max = v.length ? Math.max(...v) : 1;
  if (max === min) max = min + 1;
  return x => hi - (x - min) / (max - min) * (hi - lo);
}
function draw(id, xs, lines, shade, labels) {
  const svg = document.getElementById(id), W = svg.clientWidth || 600, H = 230, L = 48, B = 20;
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const X = x => L + (x - x0) / (x1 - x0) * (W - L - 8);
  const Y = scale(lines.flatMap(l => l.values), 8, H - B);
  let out = "";
  for (const [a, b] of shade || []) out += `<rect x="${X(a)}" y="8" width="${Math.max(X(b) - X(a), 1)}" height="${H - B - 8}" fill="#c8e6c9" opacity="0.6"/>`;
  lines.forEach((line, i) => {
    const pts = xs.map((x, k) => line.values[k] === null ? null : `${X(x).toFixed(1)},${Y(line.values[k]).toFixed(1)}`).filter(p => p);
    out += `<polyline class="series" fill="none" stroke="${COLORS[i]}" stroke-width="1.6" points="${pts.join(" ")}"/>`;
  });
  const all = lines.flatMap(l => l.values).filter(v => v !== null);
  const top = all.length ? Math.max(...all) : 0;
  out += `<text x="2" y="16" font-size="11">${top.toFixed(top < 10 ? 2 : 0)}</text><text x="2" y="${H - B}" font-size="11">0</text>`;
  out += lines.map((l, i) => `<text x="${L + 4 + i * 110}" y="${H - 4}" font-size="11" fill="${COLORS[i]}">${l.name}</text>`).join("");
  svg.innerHTML = out;
}
function holds(points) {
  const spans = []; let start = null;
  for (const p of points) { if (p.measuring && start === null) start = p.time; if (!p.measuring && start !== null) { spans.push([start, p.time]); start = null; } }
  if (start !== null) spans.push([start, points[points.length - 1].time]);
  return spans;
}
function kind(level) {
  if (level.bound === undefined) return "bound: pending";
  return level.bound ? level.bound.split(/[ (:]/)[0] : "not bound";
}
function curve(levels) {
  const svg = document.getElementById("curve"), W = svg.clientWidth || 600, H = 230, L = 48, B = 20;
  const table = document.getElementById("levels");
  if (!levels.length) { svg.innerHTML = '<text x="10" y="30" font-size="12">no level held yet</text>'; table.innerHTML = ""; return; }
  const us = levels.map(l => l.users), ys = levels.map(l => l.output_tokens_per_s || 0);
  const x0 = Math.min(...us), x1 = Math.max(...us, x0 + 1), Y = scale(ys, 24, H - B);
  const X = u => L + (u - x0) / (x1 - x0) * (W - L - 130);
  let out = `<polyline class="series" fill="none" stroke="#2e7d32" stroke-width="1.6" points="${levels.map((l, i) => `${X(l.users).toFixed(1)},${Y(ys[i]).toFixed(1)}`).join(" ")}"/>`;
  levels.forEach((l, i) => { out += `<circle class="level" cx="${X(l.users)}" cy="${Y(ys[i])}" r="5" fill="${l.steady ? "#2e7d32" : "#c62828"}"><title>${l.users} users: ${Math.round(ys[i])} tok/s, ${l.steady ? "steady" : "not steady"} (${l.reason}); ${l.bound === undefined ? "bound: pending" : l.bound || "no bound found"}</title></circle><text class="verdict" x="${X(l.users) + 7}" y="${Y(ys[i]) - 6}" font-size="11">${l.users}: ${kind(l)}</text>`; });
  svg.innerHTML = out;
  const esc = t => String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;");
  table.innerHTML = "<tr><th>Users</th><th>Output tok/s</th><th>Steady</th><th>Bound</th></tr>" + levels.map(l =>
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
      const xs = pts.map(p => p.time);
      draw("tok", xs, [{name: "output tok/s", values: pts.map(p => p.output_tok_s)}], holds(pts));
      draw("ttft", xs, [{name: "p50", values: pts.map(p => p.ttft_p50_ms)}, {name: "p99", values: pts.map(p => p.ttft_p99_ms)}], holds(pts));
      draw("tpot", xs, [{name: "p50", values: pts.map(p => p.tpot_p50_ms)}, {name: "p99", values: pts.map(p => p.tpot_p99_ms)}], holds(pts));
      draw("server", xs, [{name: "running", values: pts.map(p => p.running)}, {name: "waiting", values: pts.map(p => p.waiting)},
        {name: "KV %", values: pts.map(p => p.kv_cache_usage === null ? null : p.kv_cache_usage * 100)}], holds(pts));
    }
    curve(data.levels);
  } catch (e) { document.getElementById("progress").textContent = "cannot reach the master: " + e; }
}
refresh(); setInterval(refresh, 2000);
