// The "Training progress" tab: polls ../progress for one task instance and draws it (plain JS, inline SVG).
// The task instance comes from this page's query string (dag_id, run_id, task_id, map_index, try_number).
"use strict";
(function () {
  const POLL_MS = 3000;          // while the task is active: at most 3 s behind, plus the job's own write interval
  const RETRY_MS = 10000;        // after a network error
  const SVG = "http://www.w3.org/2000/svg";
  const query = new URLSearchParams(window.location.search);
  const mapIndex = /^-?\d+$/.test(query.get("map_index") || "") ? query.get("map_index") : "-1";
  const params = new URLSearchParams({
    dag_id: query.get("dag_id") || "", run_id: query.get("run_id") || "", task_id: query.get("task_id") || "",
    map_index: mapIndex,
  });
  let chosenTry = /^\d+$/.test(query.get("try_number") || "") ? query.get("try_number") : null;  // null: the latest
  const endpoint = () => "progress?" + params.toString() + (chosenTry ? "&try_number=" + chosenTry : "");
  const $ = (id) => document.getElementById(id);
  const logScale = {};           // metric -> the user's choice; unset: log when positive and over two decades
  let timer = null;

  function duration(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "?";
    const s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + String(s % 60).padStart(2, "0") + " s";
    return Math.floor(s / 3600) + " h " + String(Math.floor(s / 60) % 60).padStart(2, "0") + " min";
  }

  function number(value) {
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value)) return String(value);
    const abs = Math.abs(value);
    return abs !== 0 && (abs < 1e-3 || abs >= 1e5) ? value.toExponential(3) : value.toPrecision(4);
  }

  const WAITING = { queued: "queued: waiting for an Airflow worker", scheduled: "scheduled: waiting to be queued",
                    running: "running: submitting the job to Spark",
                    deferred: "deferred: the triggerer watches the job",
                    up_for_retry: "waiting for the next try", restarting: "restarting" };

  function statusText(p, data) {
    const reported = p && ((p.step !== null && p.step !== undefined) || (p.epoch !== null && p.epoch !== undefined)
                           || Object.keys(p.metrics || {}).length);
    if (!reported) {
      if (data.active) return (p && p.phase) || WAITING[data.state] || "no progress reported yet";
      if (data.state === "success" || (p && p.state === "finished")) return "finished, no progress reported";
      if (data.state === "failed" || (p && p.state === "failed")) return "failed before any progress was reported";
      return data.state ? data.state + ", no progress reported" : "no progress reported";
    }
    const parts = [];
    if (p.step !== null && p.step !== undefined) {
      let text = "step " + p.step + (p.total_steps ? "/" + p.total_steps : "");
      if (typeof p.percent === "number") text += " (" + p.percent.toFixed(0) + "%)";
      parts.push(text);
    }
    if (p.epoch !== null && p.epoch !== undefined) parts.push("epoch " + p.epoch);
    if (typeof p.steps_per_s === "number") parts.push(number(p.steps_per_s) + " steps/s");
    if (p.state === "running" && typeof p.eta_s === "number") parts.push("ETA " + duration(p.eta_s));
    if (typeof p.started_at === "number" && typeof p.time === "number") {
      parts.push("elapsed " + duration(p.time - p.started_at));
    }
    if (p.state && p.state !== "running") parts.push(p.state);
    return parts.join(" · ");
  }

  function httpUrl(url) {  // only http(s) links become clickable (the endpoint filters them too)
    try {
      const parsed = new URL(url);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch (err) {
      return null;
    }
  }

  function fillTable(tbody, rows) {
    tbody.replaceChildren(...rows.map(([cells, cls]) => {
      const tr = document.createElement("tr");
      if (cls) tr.className = cls;
      for (const [text, isNumber] of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        if (isNumber) td.className = "num";
        tr.appendChild(td);
      }
      return tr;
    }));
  }

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function chart(name, points, xLabel, restarts) {
    const W = 360, H = 180, L = 52, R = 8, T = 8, B = 28;
    const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
    const positive = ys.every((y) => y > 0);
    const span = positive ? Math.max(...ys) / Math.min(...ys) : 0;
    const log = positive && (name in logScale ? logScale[name] : span > 100);
    const fy = log ? Math.log10 : (y) => y;
    let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
    let [y0, y1] = [Math.min(...ys.map(fy)), Math.max(...ys.map(fy))];
    if (x1 === x0) { x0 -= 1; x1 += 1; }  // one point: centred, on an axis around its own value
    if (y1 === y0) { const pad = log ? 0.5 : Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; }
    const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
    const sy = (y) => T + (1 - (fy(y) - y0) / (y1 - y0)) * (H - T - B);
    const unfy = (v) => (log ? Math.pow(10, v) : v);
    const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                            "aria-label": name + " over " + xLabel + (log ? " (log scale)" : "") });
    svg.append(el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B }), el("line", { x1: L, y1: T, x2: L, y2: H - B }),
               el("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, number(unfy(y1))),
               el("text", { x: L - 4, y: H - B, "text-anchor": "end" }, number(unfy(y0))),
               el("text", { x: L, y: H - B + 12 }, number(x0)),
               el("text", { x: W - R, y: H - B + 12, "text-anchor": "end" }, number(x1)),
               el("text", { x: (L + W) / 2, y: H - 4, "text-anchor": "middle" }, xLabel));
    if (points.length > 1) {
      svg.append(el("polyline", { points: points.map((p) => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1))
                                                .join(" ") }));
    }
    // a dashed line where the job restarted within the try (max_restarts), at the step the failed attempt reached
    if (xLabel === "step") {
      for (const r of restarts || []) {
        if (typeof r.step !== "number" || r.step < x0 || r.step > x1) continue;
        const line = el("line", { x1: sx(r.step).toFixed(1), y1: T, x2: sx(r.step).toFixed(1), y2: H - B,
                                  class: "restart" });
        line.append(el("title", {}, "restart " + r.number + " at step " + r.step + ": " + r.cause));
        svg.append(line);
      }
    }
    // a marker per point (up to 300; the last one always), each with its value on hover
    const marked = points.length <= 300 ? points : [points[points.length - 1]];
    for (const [x, y] of marked) {
      const dot = el("circle", { cx: sx(x).toFixed(1), cy: sy(y).toFixed(1), r: points.length === 1 ? 3 : 2 });
      dot.append(el("title", {}, xLabel + " " + number(x) + ": " + name + " " + number(y)));
      svg.append(dot);
    }
    const box = document.createElement("div");
    box.className = "chart";
    box.dataset.metric = name;
    box.dataset.points = String(points.length);
    box.dataset.scale = log ? "log" : "linear";
    const title = document.createElement("div");
    title.className = "title";
    title.textContent = name + " (last " + number(ys[ys.length - 1]) + ")";
    if (positive) {
      const toggle = document.createElement("label");
      toggle.className = "scale";
      const box2 = document.createElement("input");
      box2.type = "checkbox";
      box2.checked = log;
      box2.addEventListener("change", () => { logScale[name] = box2.checked; poll(); });
      toggle.append(box2, " log scale");
      title.append(" ", toggle);
    }
    box.append(title, svg);
    return box;
  }

  function tryPicker(data) {
    const select = $("try");
    const tries = data.tries || [];
    select.hidden = tries.length < 2;
    if (String(tries) !== select.dataset.tries) {
      select.replaceChildren(...tries.map((n) => {
        const option = document.createElement("option");
        option.value = String(n);
        option.textContent = "try " + n + (n === tries[tries.length - 1] ? " (latest)" : "");
        return option;
      }));
      select.dataset.tries = String(tries);
    }
    select.value = String(data.try_number);
  }

  function render(data) {
    const p = data.progress;
    $("state").textContent = (data.state || (p && p.state) || "unknown") +
      (data.try_number ? " · try " + data.try_number : "");
    tryPicker(data);
    $("status-text").textContent = statusText(p, data);
    const resumed = p && p.resumed;
    $("resumed").hidden = !resumed;
    $("resumed").textContent = resumed ? "resumed from checkpoint step " + resumed.step +
      (resumed.saved_by ? " (saved by try " + resumed.saved_by + ")" : "") : "";
    const restarts = (p && p.restarts) || [];
    $("restarts").hidden = !restarts.length;
    $("restarts").textContent = restarts.length ? "restarted " + restarts.length + " time" +
      (restarts.length > 1 ? "s" : "") + " within this try: " + restarts.map((r) => "restart " + r.number + ": " +
      r.cause + (typeof r.step === "number" ? " at step " + r.step : "")).join("; ") : "";
    $("failure").hidden = !(p && p.error);
    $("failure").textContent = p && p.error ? "failed: " + p.error : "";
    const percent = p && typeof p.percent === "number" ? Math.min(100, Math.max(0, p.percent))
                    : (p && p.state === "finished" ? 100 : 0);
    $("bar-fill").style.width = percent + "%";
    $("bar").setAttribute("aria-valuenow", String(percent));
    $("error").hidden = !data.error;
    $("error").textContent = data.error || "";
    const metrics = Object.entries((p && p.metrics) || {});
    fillTable($("metrics").tBodies[0], metrics.map(([k, v]) => [[[k], [number(v), true]]]));
    const history = data.history || { metrics: {} };
    const xLabel = history.x === "step" ? "step" : "seconds";
    $("charts").replaceChildren(...Object.entries(history.metrics).filter(([, pts]) => pts.length)
      .map(([name, pts]) => chart(name, pts, xLabel, restarts)));
    if (!Object.keys(history.metrics).length) {
      $("charts").textContent = p && p.step !== null && p.step !== undefined ? "no metrics reported" : "";
    }
    const now = p && typeof p.time === "number" ? p.time : Date.now() / 1000;
    const ranks = Object.entries((p && p.ranks) || {}).sort((a, b) => Number(a[0]) - Number(b[0]));
    const lead = Math.max(...ranks.map(([, r]) => (typeof r.step === "number" ? r.step : -Infinity)));
    const slowest = p && p.slowest_rank !== null && p.slowest_rank !== undefined && ranks.length > 1
      ? String(p.slowest_rank) : null;
    fillTable($("ranks").tBodies[0], ranks.map(([rank, r]) => [
      [[rank + (rank === slowest ? " (slowest)" : ""), true],
       [typeof r.step === "number" ? String(r.step) : "?", true],
       [typeof r.step === "number" && lead > r.step ? String(lead - r.step) : "0", true],
       [typeof r.time === "number" ? duration(now - r.time) + " before" : "?", true]],
      rank === slowest ? "slowest" : ""]));
    const link = $("spark-ui");
    const url = data.spark_ui_url ? httpUrl(data.spark_ui_url) : null;
    if (url) { link.href = url; link.textContent = url; } else { link.removeAttribute("href"); link.textContent =
      data.active ? "not known yet" : "none"; }
    $("tensorboard").textContent = data.tensorboard_dir ? "tensorboard --logdir " + data.tensorboard_dir
                                                        : "none reported";
    $("artifact-dir").textContent = data.artifact_dir || "not known yet";
    $("footer").textContent = "updated " + new Date().toLocaleTimeString() +
      (data.active ? "; refreshing every " + POLL_MS / 1000 + " s" : "; the task is not running: not refreshing");
  }

  async function poll() {
    let next = null;
    try {
      const response = await fetch(endpoint(), { credentials: "same-origin",
                                                  headers: { Accept: "application/json" } });
      if (response.status === 401 || response.status === 403) {
        throw Object.assign(new Error("not allowed to read this task's progress (HTTP " + response.status +
                                      "): log in to Airflow again"), { final: true });
      }
      if (!response.ok) throw new Error("HTTP " + response.status + ": " + (await response.text()).slice(0, 300));
      const data = await response.json();
      render(data);
      if (data.active) next = POLL_MS;
    } catch (err) {
      $("error").hidden = false;
      $("error").textContent = String(err.message || err);
      if (!err.final) next = RETRY_MS;
    }
    window.clearTimeout(timer);
    timer = next !== null ? window.setTimeout(poll, next) : null;
  }

  $("try").addEventListener("change", (event) => {
    const tries = ($("try").dataset.tries || "").split(",");
    chosenTry = event.target.value === tries[tries.length - 1] ? null : event.target.value;
    poll();
  });
  poll();
})();
