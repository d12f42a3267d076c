// The cameo console: a single page over the service's JSON API (no framework, no build step).
//
// Hash routes (#/dataflows, #/dataflow/NAME, #/dataflow/NAME/checkpoints, #/hotspots, #/pool)
// each build their page's fixed parts once, then fetch their API calls every REFRESH_MS and
// update in place: a part is redrawn only when its answer changed, so the search box keeps
// its text and focus. Every value shown comes from an API answer, and goes into the page
// through textContent and createElement only (never markup built from data). An API error is
// shown in the page's role="alert" area, never thrown. The token is kept in sessionStorage
// (this tab only) and sent as `Authorization: Bearer <token>` with every call.
"use strict";

(() => {
  const TOKEN_KEY = "cameo.console.token";
  const REFRESH_MS = 2000;
  const LIVE = new Set(["running", "finishing", "recovering", "stopping"]);
  const SVG_NS = "http://www.w3.org/2000/svg";

  const $ = (id) => document.getElementById(id);
  const sigs = new WeakMap();

  let token = null;
  let me = null; // the whoami answer
  let generation = 0; // bumped at each route change: late answers of the old page are dropped
  let timer = null;
  const problems = { refresh: [], action: [] };

  // -- DOM helpers -------------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function sv(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "testid") node.setAttribute("data-testid", value);
      else if (key === "class") node.setAttribute("class", value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  /** Redraw `node` from `data` with `render`, unless it shows that very data already. */
  function update(node, data, render) {
    const sig = JSON.stringify(data === undefined ? null : data);
    if (sigs.get(node) === sig) return;
    sigs.set(node, sig);
    node.replaceChildren(...[render(data)].flat(Infinity).filter((c) => c !== null && c !== undefined));
  }

  function forget(node) {
    sigs.delete(node);
  }

  // -- formatting ---------------------------------------------------------------------------
  const DASH = "-";

  function isNum(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  function num(v, digits = 1) {
    if (!isNum(v)) return DASH;
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
  }

  function pct(share) {
    if (!isNum(share)) return DASH;
    return share > 0 && share < 0.0005 ? "<0.1 %" : `${(100 * share).toFixed(1)} %`;
  }

  function bytes(v) {
    if (!isNum(v)) return DASH;
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let x = v;
    let i = 0;
    while (Math.abs(x) >= 1024 && i < units.length - 1) {
      x /= 1024;
      i += 1;
    }
    return i === 0 ? `${x} B` : `${x.toFixed(1)} ${units[i]}`;
  }

  const pad = (n) => String(n).padStart(2, "0");

  function clock(d) {
    return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  /** Epoch seconds as local "YYYY-MM-DD HH:MM:SS". */
  function when(epochS) {
    if (!isNum(epochS)) return DASH;
    const d = new Date(epochS * 1000);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock(d)}`;
  }

  function text(v) {
    if (v === null || v === undefined) return DASH;
    if (typeof v === "number") return num(v);
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }

  function dataflowHref(name, tail = "") {
    return `#/dataflow/${encodeURIComponent(name)}${tail}`;
  }

  // -- the API ------------------------------------------------------------------------------
  /** One call: {ok, status, data} or {ok: false, status, error, where}; it never throws. */
  async function api(method, path, body) {
    const where = `${method} ${path}`;
    if (!token) {  // signed out meanwhile: a refresh under way sends nothing more
      return { ok: false, status: 0, where, error: { code: "signed_out", message: "signed out" } };
    }
    const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
    const init = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let status = 0;
    let raw = "";
    try {
      const response = await fetch(path, init);
      status = response.status;
      raw = await response.text();
    } catch (e) {
      return { ok: false, status, where,
               error: { code: "network", message: `the service did not answer (${e.message})`,
                        fix: "check that the service runs; the page retries by itself" } };
    }
    let data = null;
    try {
      data = raw ? JSON.parse(raw) : null;
    } catch (e) {
      data = null;
    }
    if (status >= 200 && status < 300) return { ok: true, status, data };
    let error = data && typeof data === "object" && data.error && typeof data.error === "object"
      ? data.error : null;
    if (!error) {
      const detail = data && typeof data === "object" && "detail" in data ? text(data.detail) : raw;
      error = { code: "http_error", message: detail.slice(0, 300) || `HTTP ${status}` };
    }
    if (status === 401 && token) setTimeout(() => signOut("The token was refused: sign in again."), 0);
    return { ok: false, status, where, error };
  }

  function describe(problem) {
    const e = problem.error || {};
    let line = `${problem.where}: ${e.message || "failed"}`;
    if (problem.status || e.code) line += ` (HTTP ${problem.status || "-"}${e.code ? ` ${e.code}` : ""})`;
    if (e.step) line += `; step ${e.step}`;
    if (e.expected !== undefined && e.expected !== null) {
      line += `; expected ${text(e.expected)}, got ${text(e.got)}`;
    }
    if (e.fix) line += `. Fix: ${e.fix}`;
    return line;
  }

  function showProblems() {
    const box = $("alerts");
    const all = [...problems.action, ...problems.refresh];
    update(box, all.map(describe), (lines) => lines.length
      ? el("ul", {}, lines.map((l) => el("li", { testid: "alert", text: l })))
      : []);
    box.classList.toggle("shown", all.length > 0);
  }

  function fail(where, e) {
    return { where, status: 0, error: { code: "console", message: String(e && e.message || e) } };
  }

  // -- shared widgets -----------------------------------------------------------------------
  function table(caption, headers, rows, testid) {
    return el("table", { testid },
      el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", {}, rows));
  }

  // A checkpoint's phases: seconds from its first barrier to the last part past each.
  function phaseText(p) {
    if (!p) return DASH;
    return `in ${num(p.barriers_s, 2)} · aligned ${num(p.aligned_s, 2)} · packed ${num(p.packed_s, 2)}` +
      ` · written ${num(p.written_s, 2)}`;
  }

  function emptyRow(span, what) {
    return el("tr", {}, el("td", { colspan: span, class: "muted", text: what }));
  }

  function facts(pairs, testid) {
    return el("dl", { class: "facts", testid },
      pairs.map(([label, value, id]) => el("div", {},
        el("dt", { text: label }), el("dd", { testid: id, text: value }))));
  }

  function section(title, id, ...children) {
    const h = el("h2", { id: `${id}-title`, text: title });
    return el("section", { "aria-labelledby": `${id}-title`, class: "card" }, h, children);
  }

  /** A confirmation dialog: labelled fields, a confirm and a cancel button. */
  function dialog({ id, title, body, fields, confirmText, danger, onConfirm }) {
    const heading = el("h2", { id: `${id}-title`, text: title });
    const description = el("p", { id: `${id}-desc` });
    const inputs = {};
    const rows = (fields || []).map((f) => {
      const input = f.options
        ? el("select", { id: `${id}-${f.key}`, testid: f.testid })
        : el("input", { id: `${id}-${f.key}`, testid: f.testid, type: f.type || "number",
                        min: f.min, step: f.step || "any", inputmode: "decimal" });
      inputs[f.key] = input;
      return el("p", {}, el("label", { for: input.id, text: f.label }), " ", input);
    });
    const confirm = el("button", { type: "submit", class: danger ? "danger" : "primary",
                                   testid: `${id}-confirm`, text: confirmText });
    const dismiss = el("button", { type: "button", testid: `${id}-dismiss`, text: "Cancel" });
    const form = el("form", {}, heading, description, rows, el("p", { class: "buttons" }, confirm, " ", dismiss));
    const node = el("dialog", { id, testid: id, "aria-labelledby": heading.id,
                                "aria-describedby": description.id }, form);
    dismiss.addEventListener("click", () => node.close());
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const values = {};
      for (const [key, input] of Object.entries(inputs)) values[key] = input.value;
      node.close();
      onConfirm(values);
    });
    return {
      node,
      open(say, prefill) {
        description.textContent = say || body || "";
        for (const [key, input] of Object.entries(inputs)) {
          const p = (prefill || {})[key];
          if (input.tagName === "SELECT") {
            input.replaceChildren(...(p && p.options || []).map((o) =>
              el("option", { value: o.value, text: o.label })));
            if (p && p.value !== undefined) input.value = p.value;
          } else {
            input.value = p === undefined || p === null ? "" : String(p);
          }
        }
        node.showModal();
        const first = Object.values(inputs)[0];
        (first || confirm).focus();
      },
    };
  }

  /** Run an action's API call; its answer goes to the status line, its error to the alerts. */
  async function act(what, method, path, body) {
    $("action-result").textContent = `${what}: sent...`;
    // No refresh runs beside an action: one that read the state before it would fetch
    // what the action just ended (an ended dataflow's error output, say).
    clearTimeout(timer);
    generation += 1;
    await inflight;
    const answer = await api(method, path, body);
    if (answer.ok) {
      problems.action = [];
      $("action-result").textContent = `${what}: done. ${summarize(answer.data)}`;
    } else {
      problems.action = [answer];
      $("action-result").textContent = `${what}: refused (see above).`;
    }
    showProblems();
    if (current) refreshNow();
    return answer;
  }

  function summarize(data) {
    if (!data || typeof data !== "object") return "";
    return Object.entries(data).filter(([, v]) => v === null || typeof v !== "object")
      .map(([k, v]) => `${k} ${text(v)}`).join(", ");
  }

  function numberOrNull(raw) {
    const s = String(raw).trim();
    if (!s) return null;
    const v = Number(s);
    return Number.isFinite(v) ? v : NaN;
  }

  // -- charts -------------------------------------------------------------------------------
  /** p50 and p99 of each 1-s snapshot as lines, the target as a dashed line (as ui.py). */
  function latencyChart(explanation, width = 560, height = 190) {
    const points = (explanation.latency || []).filter((p) => p && isNum(p.t_ms));
    const target = isNum(explanation.latency_target_ms) ? explanation.latency_target_ms : null;
    const left = 52, right = 12, top = 12, bottom = 26;
    const w = width - left - right, h = height - top - bottom;
    const root = sv("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                             testid: "latency-chart",
                             "aria-label": `latency p50 and p99 against the target${target ? ` of ${target} ms` : ""}, ${points.length} snapshots` });
    root.append(sv("rect", { x: left, y: top, width: w, height: h, fill: "#fafbfc", stroke: "#d0d7de" }));
    if (!points.length) {
      root.append(sv("text", { x: left + 10, y: top + h / 2, fill: "#57606a", text: "no latency snapshots in this window" }));
      return root;
    }
    const times = points.map((p) => p.t_ms);
    let t0 = isNum(explanation.from_ms) ? explanation.from_ms : Math.min(...times);
    let t1 = isNum(explanation.to_ms) ? explanation.to_ms : Math.max(...times);
    t0 = Math.min(t0, ...times);
    t1 = Math.max(t1, ...times);
    const span = Math.max(t1 - t0, 1000);
    const values = points.flatMap((p) => [p.p50_ms, p.p99_ms]).filter(isNum);
    const topMs = (Math.max(...values, target ? 2 * target : 1) * 1.1) || 1;
    const x = (t) => left + ((t - t0) / span) * w;
    const y = (ms) => top + h - (Math.min(ms, topMs) / topMs) * h;
    for (const ms of [0, topMs / 2, topMs]) {
      root.append(sv("text", { x: left - 4, y: (y(ms) + 4).toFixed(1), "font-size": 11, "text-anchor": "end", fill: "#57606a", text: `${ms.toFixed(0)} ms` }));
    }
    root.append(sv("text", { x: left, y: height - 8, "font-size": 11, fill: "#57606a", text: `-${(span / 1000).toFixed(0)} s` }));
    root.append(sv("text", { x: left + w, y: height - 8, "font-size": 11, "text-anchor": "end", fill: "#57606a", text: "now" }));
    if (target) {
      root.append(sv("line", { x1: left, x2: left + w, y1: y(target).toFixed(1), y2: y(target).toFixed(1), stroke: "#b42318", "stroke-dasharray": "6 4", testid: "target-line" }));
      root.append(sv("text", { x: left + w - 4, y: (y(target) - 4).toFixed(1), "font-size": 11, "text-anchor": "end", fill: "#b42318", text: `target ${target} ms` }));
    }
    for (const [key, colour] of [["p50_ms", "#0969da"], ["p99_ms", "#9a6700"]]) {
      let run = [];
      for (const p of [...points, {}]) {
        const v = p[key];
        if (isNum(v)) {
          run.push([x(p.t_ms), y(v)]);
          continue;
        }
        if (run.length === 1) {
          root.append(sv("circle", { cx: run[0][0].toFixed(1), cy: run[0][1].toFixed(1), r: 2, fill: colour }));
        } else if (run.length) {
          root.append(sv("polyline", { fill: "none", stroke: colour, "stroke-width": 2, "data-series": key,
                                       points: run.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(" ") }));
        }
        run = [];
      }
    }
    root.append(sv("text", { x: left + 8, y: top + 14, "font-size": 11, fill: "#0969da", text: "p50" }));
    root.append(sv("text", { x: left + 40, y: top + 14, "font-size": 11, fill: "#9a6700", text: "p99" }));
    return root;
  }

  /** A fill from pale (no part of the critical path) to red (all of it). */
  function heat(share) {
    const s = Math.min(1, Math.max(0, isNum(share) ? share : 0));
    const mix = (a, z) => Math.round(a + (z - a) * s);
    return [mix(238, 214), mix(242, 39), mix(246, 40)];
  }

  function ink(rgb) {
    const [r, g, b] = rgb.map((c) => {
      const v = c / 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 ? "#1d2329" : "#ffffff";
  }

  function depths(steps) {
    const ids = new Set(steps.map((s) => String(s.id)));
    const column = {};
    for (let round = 0; round <= steps.length; round += 1) {
      for (const s of steps) {
        const inputs = (s.inputs || []).map(String).filter((i) => ids.has(i));
        column[String(s.id)] = 1 + Math.max(-1, ...inputs.map((i) => column[i] || 0));
      }
    }
    return column;
  }

  function clip(s, n) {
    return s.length <= n ? s : `${s.slice(0, n - 1)}\u2026`;
  }

  /** The steps as boxes in columns by depth, coloured by their critical-path share. */
  function graphSvg(graph) {
    const steps = (graph.steps || []).filter((s) => s && typeof s === "object");
    if (!steps.length) return el("p", { class: "muted", text: "no steps" });
    const boxW = 210, boxH = 70, gapX = 46, gapY = 16, padding = 6;
    const column = depths(steps);
    const rows = {};
    const at = {};
    for (const s of steps) {
      const c = column[String(s.id)];
      at[String(s.id)] = [padding + c * (boxW + gapX), padding + (rows[c] || 0) * (boxH + gapY)];
      rows[c] = (rows[c] || 0) + 1;
    }
    const width = padding * 2 + (Math.max(...Object.values(column)) + 1) * (boxW + gapX) - gapX;
    const height = padding * 2 + Math.max(...Object.values(rows)) * (boxH + gapY) - gapY;
    const label = `graph of ${graph.name || "the dataflow"}: ${steps.map((s) => `${s.id} (${s.op}, ${(s.instances || []).length} instances${isNum(s.critical_share) ? `, ${pct(s.critical_share)} of the critical path` : ""}${s.held ? `, ${s.held} held` : ""})`).join("; ")}`;
    const root = sv("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": label, testid: "graph" });
    for (const s of steps) {
      const [x2, y2] = at[String(s.id)];
      for (const i of s.inputs || []) {
        const from = at[String(i)];
        if (!from) continue;
        root.append(sv("line", { x1: from[0] + boxW, y1: from[1] + boxH / 2, x2, y2: y2 + boxH / 2,
                                 stroke: "#8c959f", "stroke-width": 1.5 }));
      }
    }
    for (const s of steps) {
      const sid = String(s.id);
      const [x, y] = at[sid];
      const fill = heat(s.critical_share);
      const colour = ink(fill);
      const placed = (s.instances || []).map((i) => `${String(i.id).split("/").pop()}\u2192${isNum(i.executor) ? `x${i.executor}` : "unplaced"}`);
      const held = isNum(s.held) && s.held > 0;
      root.append(sv("g", { testid: "graph-step", "data-step": sid },
        sv("title", { text: `${sid} (${s.op}), parallelism ${s.parallelism}: ${(s.instances || []).map((i) => `${i.id} on ${isNum(i.executor) ? `executor ${i.executor}` : "no executor"}`).join(", ")}; ${isNum(s.critical_share) ? pct(s.critical_share) : "no share"} of the critical path; ${isNum(s.busy_share) ? `busy ${pct(s.busy_share)}` : "busy not measured yet"}; ${s.held || 0} held by backpressure` }),
        sv("rect", { x, y, width: boxW, height: boxH, rx: 5, fill: `rgb(${fill.join(",")})`,
                     stroke: held ? "#b42318" : "#57606a", "stroke-width": held ? 3 : 1,
                     "stroke-dasharray": held ? "5 3" : null }),
        sv("text", { x: x + 6, y: y + 16, "font-size": 12, "font-weight": 600, fill: colour, text: clip(sid, 22) }),
        sv("text", { x: x + 6, y: y + 32, "font-size": 11, fill: colour,
                     text: `${s.op} \u00d7${s.parallelism ?? placed.length}${isNum(s.critical_share) ? ` \u00b7 cp ${pct(s.critical_share)}` : ""}${isNum(s.busy_share) ? ` \u00b7 busy ${pct(s.busy_share)}` : ""}` }),
        sv("text", { x: x + 6, y: y + 48, "font-size": 11, fill: colour, text: clip(placed.join(" ") || "no instances", 28) }),
        held ? sv("text", { x: x + 6, y: y + 63, "font-size": 11, "font-weight": 600, fill: colour, text: `held ${s.held} (backpressure)` }) : null));
    }
    return root;
  }

  /** Checkpoint durations as bars, oldest on the left; failed ones in red. */
  function durationBars(history, width = 560, height = 150) {
    const items = [...history].reverse().filter((c) => c && typeof c === "object");
    const left = 52, right = 8, top = 10, bottom = 22;
    const w = width - left - right, h = height - top - bottom;
    const durations = items.map((c) => (isNum(c.duration_s) ? c.duration_s : 0));
    const topS = Math.max(...durations, 0.001) * 1.1;
    const root = sv("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", testid: "ckpt-chart",
                             "aria-label": `checkpoint durations, oldest first: ${items.map((c) => `${c.id} ${num(c.duration_s, 3)} s${c.ok ? "" : " failed"}`).join(", ") || "none"}` });
    root.append(sv("rect", { x: left, y: top, width: w, height: h, fill: "#fafbfc", stroke: "#d0d7de" }));
    if (!items.length) {
      root.append(sv("text", { x: left + 10, y: top + h / 2, fill: "#57606a", text: "no checkpoints yet" }));
      return root;
    }
    for (const s of [0, topS / 2, topS]) {
      root.append(sv("text", { x: left - 4, y: top + h - (s / topS) * h + 4, "font-size": 11, "text-anchor": "end", fill: "#57606a", text: `${s.toFixed(s < 1 ? 2 : 1)} s` }));
    }
    const slot = w / items.length;
    items.forEach((c, i) => {
      const bh = (durations[i] / topS) * h;
      root.append(sv("rect", { x: (left + i * slot + slot * 0.15).toFixed(1), y: (top + h - bh).toFixed(1),
                               width: Math.max(1, slot * 0.7).toFixed(1), height: Math.max(bh, 0.5).toFixed(1),
                               fill: c.ok === false ? "#b42318" : "#0969da" },
        sv("title", { text: `checkpoint ${c.id}: ${num(c.duration_s, 3)} s, ${bytes(c.bytes)}${c.ok === false ? `, failed: ${c.reason || ""}` : ""}` })));
    });
    root.append(sv("text", { x: left, y: height - 6, "font-size": 11, fill: "#57606a", text: "oldest" }));
    root.append(sv("text", { x: left + w, y: height - 6, "font-size": 11, "text-anchor": "end", fill: "#57606a", text: "newest" }));
    return root;
  }

  // -- pages --------------------------------------------------------------------------------
  function heading(title, testid) {
    document.title = `${title} - cameo console`;
    return el("h1", { testid, text: title });
  }

  /** #/dataflows: every dataflow this token may see, filtered by a search and a state. */
  function dataflowsPage(view) {
    const search = el("input", { id: "search", type: "search", testid: "search", autocomplete: "off",
                                 placeholder: "name, tenant or state" });
    const filter = el("select", { id: "state-filter", testid: "state-filter" },
      el("option", { value: "all", text: "all" }), el("option", { value: "running", text: "running" }),
      el("option", { value: "ended", text: "ended" }));
    const count = el("p", { class: "muted", testid: "df-count" });
    const holder = el("div", { class: "scroll" });
    view.append(heading("Dataflows", "page-title"),
      el("div", { class: "controls", role: "search" },
        el("label", { for: "search", text: "Search" }), search,
        el("label", { for: "state-filter", text: "State" }), filter), count, holder);
    let last = null;

    function draw() {
      if (!last) return;
      const words = search.value.trim().toLowerCase();
      const want = filter.value;
      const shown = last.filter((d) => {
        const live = LIVE.has(d.state);
        if (want === "running" && !live) return false;
        if (want === "ended" && live) return false;
        return !words || [d.name, d.tenant, d.state].some((v) => String(v).toLowerCase().includes(words));
      });
      count.textContent = `${shown.length} of ${last.length} dataflows`;
      update(holder, { shown, words, want }, () => table("Dataflows",
        ["Name", "Tenant", "State", "Target (ms)", "Within target", "p99 (ms)", "Events/s in", "Backlog"],
        shown.length ? shown.map((d) => {
          const f = d.figures || {};
          return el("tr", { testid: "dataflow-row", "data-name": d.name },
            el("td", {}, el("a", { href: dataflowHref(d.name), testid: "df-name", text: d.name })),
            el("td", { testid: "df-tenant", text: d.tenant }),
            el("td", { testid: "df-state" }, el("span", { class: `state ${d.state}`, text: d.state })),
            el("td", { class: "n", testid: "df-target", text: num(d.latency_target_ms) }),
            el("td", { class: "n", testid: "df-within", text: pct(f.within_target) }),
            el("td", { class: "n", testid: "df-p99", text: num(f.p99_ms) }),
            el("td", { class: "n", testid: "df-eps", text: num(f.events_in_per_s) }),
            el("td", { class: "n", testid: "df-backlog", text: num(f.backlog) }));
        }) : [emptyRow(8, last.length ? "no dataflow matches" : "no dataflows")], "dataflows-table"));
    }

    search.addEventListener("input", draw);
    filter.addEventListener("change", draw);
    return {
      async refresh() {
        const a = await api("GET", "/v1/dataflows?detail=true");
        if (!a.ok) return [a];
        last = [...(a.data.dataflows || [])].sort((x, y) =>
          (LIVE.has(y.state) - LIVE.has(x.state)) || String(x.name).localeCompare(String(y.name)));
        draw();
        return [];
      },
    };
  }

  function mayAct(status) {
    return !!me && (me.admin || (me.tenant !== null && me.tenant === status.tenant));
  }

  /** #/dataflow/NAME: status, graph, latency, errors, timeline, spec, and the actions. */
  function dataflowPage(view, name) {
    const base = `/v1/dataflows/${encodeURIComponent(name)}`;
    const summary = el("div", {});
    const actions = el("div", { class: "actions", testid: "actions" });
    const graph = el("div", { class: "scroll" });
    const latency = el("div", {});
    const errors = el("div", {});
    const migrations = el("div", { class: "scroll" });
    const timeline = el("div", {});
    const spec = el("pre", { testid: "spec", tabindex: 0 });
    let status = null;
    let graphAnswer = null;

    const cancelDialog = dialog({ id: "dialog-cancel", title: `Cancel ${name}?`, danger: true,
      confirmText: "Cancel the dataflow",
      body: "Its sources stop taking events and its unread results and state are dropped.",
      onConfirm: () => act(`cancel ${name}`, "DELETE", base) });
    const updateDialog = dialog({ id: "dialog-update", title: `Change ${name}`, confirmText: "Change",
      fields: [{ key: "target", label: "Latency target (ms)", testid: "input-target", min: 0 },
               { key: "weight", label: "Weight", testid: "input-weight", min: 0 }],
      onConfirm: (v) => {
        const body = {};
        const target = numberOrNull(v.target);
        const weight = numberOrNull(v.weight);
        if (target !== null && (!status || target !== status.latency_target_ms)) body.latency_target_ms = target;
        if (weight !== null && (!status || weight !== status.weight)) body.weight = weight;
        if (Number.isNaN(target) || Number.isNaN(weight)) {
          problems.action = [{ where: `PATCH ${base}`, status: 0, error: { code: "invalid_request",
            message: "the target and the weight are numbers", expected: "a number > 0",
            got: `${v.target} / ${v.weight}`, fix: "type a number" } }];
          showProblems();
          return;
        }
        if (!Object.keys(body).length) {
          $("action-result").textContent = `change ${name}: nothing to change.`;
          return;
        }
        act(`change ${name}`, "PATCH", base, body);
      } });
    const scaleDialog = dialog({ id: "dialog-scale", title: `Scale a step of ${name}`, confirmText: "Scale",
      body: "A keyed step goes to the new number of instances while the dataflow runs: its key bins and their state move, no event is lost.",
      fields: [{ key: "step", label: "Step", testid: "input-step", options: true },
               { key: "parallelism", label: "Parallelism", testid: "input-parallelism", min: 1, step: 1 }],
      onConfirm: (v) => {
        const p = numberOrNull(v.parallelism);
        act(`scale ${v.step} of ${name}`, "POST", `${base}/scale`,
            { step: v.step, parallelism: Number.isInteger(p) ? p : v.parallelism });
      } });

    const moveDialog = dialog({ id: "dialog-move", title: `Move an instance of ${name}`, confirmText: "Move",
      body: "The instance goes to another executor while the dataflow runs, with its state; no event is lost.",
      fields: [{ key: "step", label: "Step", testid: "input-move-step", options: true },
               { key: "instance", label: "Instance", testid: "input-move-instance", min: 0, step: 1 },
               { key: "executor", label: "To executor", testid: "input-move-executor", min: 0, step: 1 }],
      onConfirm: (v) => {
        const instance = numberOrNull(v.instance);
        const executor = numberOrNull(v.executor);
        act(`move ${v.step}/${v.instance} of ${name} to executor ${v.executor}`, "POST", `${base}/migrate`,
            { step: v.step, instance: Number.isInteger(instance) ? instance : v.instance,
              to_executor: Number.isInteger(executor) ? executor : v.executor });
      } });

    /** The first instance of `step` (its number), and an executor of the dataflow's other
     *  than the one it runs on. */
    function moveOf(step) {
      const s = graphAnswer && (graphAnswer.steps || []).find((x) => x.id === step);
      const first = s && s.instances && s.instances.length ? s.instances[0] : null;
      const from = first ? first.executor : null;
      const others = ((status && status.executors) || []).filter((e) => e !== from);
      return { instance: first ? Number(String(first.id).split("/").pop()) : 0,
               executor: others.length ? others[0] : (isNum(from) ? from : 0) };
    }

    function parallelismOf(step) {
      const fromGraph = graphAnswer && (graphAnswer.steps || []).find((s) => s.id === step);
      if (fromGraph && isNum(fromGraph.parallelism)) return fromGraph.parallelism;
      const scaled = status && status.scaling && status.scaling.steps && status.scaling.steps[step];
      return scaled && isNum(scaled.parallelism) ? scaled.parallelism : 1;
    }

    function scalableSteps() {
      const scaled = (status && status.scaling && status.scaling.steps) || {};
      const keyed = Object.entries(scaled).filter(([, s]) => s && s.scalable).map(([id]) => id);
      if (keyed.length) return keyed;
      return ((graphAnswer && graphAnswer.steps) || []).filter((s) => (s.inputs || []).length).map((s) => s.id);
    }

    const buttons = {
      cancel: el("button", { type: "button", class: "danger", testid: "action-cancel", text: "Cancel dataflow",
                             onclick: () => cancelDialog.open() }),
      update: el("button", { type: "button", testid: "action-update", text: "Change target or weight",
                             onclick: () => updateDialog.open(
                               `Now: target ${num(status && status.latency_target_ms)} ms, weight ${num(status && status.weight)}.`,
                               { target: status && status.latency_target_ms, weight: status && status.weight }) }),
      scale: el("button", { type: "button", testid: "action-scale", text: "Scale a step",
                            onclick: () => {
                              const steps = scalableSteps();
                              const step = steps[0];
                              scaleDialog.open(null, {
                                step: { options: steps.map((s) => ({ value: s, label: `${s} (now ${parallelismOf(s)})` })), value: step },
                                parallelism: step ? parallelismOf(step) + 1 : 2 });
                            } }),
      move: el("button", { type: "button", testid: "action-move", text: "Move an instance",
                           onclick: () => {
                             const steps = scalableSteps();
                             const to = moveOf(steps[0]);
                             moveDialog.open(null, {
                               step: { options: steps.map((s) => ({ value: s, label: s })), value: steps[0] },
                               instance: to.instance, executor: to.executor });
                           } }),
    };
    const scaleStep = scaleDialog.node.querySelector("select");
    scaleStep.addEventListener("change", () => {
      scaleDialog.node.querySelector("input").value = String(parallelismOf(scaleStep.value) + 1);
    });

    const back = el("p", { class: "crumbs" }, el("a", { href: "#/dataflows", text: "All dataflows" }), " \u00b7 ",
      el("a", { href: dataflowHref(name, "/checkpoints"), testid: "checkpoints-link", text: "Checkpoints" }));
    view.append(heading(name, "df-title"), back, summary, actions,
      section("Graph", "graph", el("p", { class: "muted", text: "Columns by depth; a box's colour is its step's share of the critical path (cp; pale: none, red: all); busy: its instances' share of time at work; instances \u2192 executors; a dashed red border: activations held by backpressure." }), graph),
      section("Latency", "latency", latency),
      section("Errors", "errors", errors),
      section("Migrations", "migrations", migrations),
      section("Timeline", "timeline", timeline),
      el("details", { class: "card", testid: "spec-details" }, el("summary", { text: "Spec" }), spec),
      cancelDialog.node, updateDialog.node, scaleDialog.node, moveDialog.node);

    function drawStatus(s) {
      const lat = s.latency || {};
      const tp = s.throughput || {};
      return [
        facts([["State", s.state, "status-state"], ["Tenant", s.tenant, "status-tenant"],
               ["Target (ms)", num(s.latency_target_ms), "status-target"], ["Weight", num(s.weight), "status-weight"],
               ["Within target", pct(s.within_target), "status-within"],
               ["p50 / p95 / p99 (ms)", `${num(lat.p50_ms)} / ${num(lat.p95_ms)} / ${num(lat.p99_ms)}`, "status-latency"],
               ["Max / mean (ms)", `${num(lat.max_ms)} / ${num(lat.mean_ms)}`, "status-latency-max"],
               ["Events/s in / out", `${num(tp.events_in_per_s)} / ${num(tp.events_out_per_s)}`, "status-eps"],
               ["Results/s", num(tp.results_per_s), "status-rps"], ["Results", num(s.results), "status-results"],
               ["Backlog", num(s.backlog), "status-backlog"], ["Executors", (s.executors || []).join(", ") || DASH, "status-executors"],
               ["Recoveries", num(s.recoveries), "status-recoveries"], ["State size", bytes(s.state_bytes), "status-state-bytes"],
               ["Submitted", when(s.submitted_at), "status-submitted"], ["Ended", when(s.ended_at), "status-ended"]],
              "status"),
        s.cause ? el("p", { class: "bad", testid: "status-cause", text: `Cause: ${s.cause}` }) : null,
        (s.held || []).length ? el("p", { class: "bad", testid: "status-held", text: `Held by flow control: ${s.held.join(", ")}` }) : null,
        s.outlook ? el("p", { testid: "status-outlook", text: `Outlook: ${s.outlook.verdict}. ${s.outlook.reason || ""}` }) : null,
      ];
    }

    function drawActions(s) {
      if (!mayAct(s) || !LIVE.has(s.state)) {
        return el("p", { class: "muted", text: LIVE.has(s.state) ? "Only the admin and its tenant may act on this dataflow." : "It has ended: nothing to act on." });
      }
      return el("p", { class: "buttons" }, buttons.update, " ", buttons.scale, " ", buttons.move, " ", buttons.cancel);
    }

    function drawErrors(counts, page, live) {
      const countRows = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
      const out = [table("Error records by step and kind", ["Step:kind", "Records"],
        countRows.length ? countRows.map(([k, n]) => el("tr", { testid: "error-count" },
          el("td", { text: k }), el("td", { class: "n", text: num(n) }))) : [emptyRow(2, "no error records")],
        "error-counts")];
      if (!live) out.push(el("p", { class: "muted", text: "Its error output went with it: it has ended." }));
      if (page) {
        out.push(el("p", { class: "muted", testid: "error-page",
                           text: `The error output: ${num(page.pending)} pending, ${num(page.dropped)} dropped unread. A sample (read, not committed):` }));
        out.push(el("div", { class: "scroll" }, table("Error output sample", ["Step", "Kind", "Message", "Record"],
          (page.rows || []).length ? page.rows.map((r) => el("tr", { testid: "error-row" },
            el("td", { text: text(r.step) }), el("td", { text: text(r.kind) }), el("td", { text: text(r.message) }),
            el("td", {}, el("code", { text: clip(JSON.stringify(r.event) ?? "", 160) })))) : [emptyRow(4, "no records waiting")],
          "error-rows")));
      }
      return out;
    }

    function drawExplanation(x) {
      if (!x) return el("p", { class: "muted", text: "Not explained: the dataflow has ended." });
      const list = (items, testid) => (items || []).length
        ? el("ul", { class: "words", testid }, items.map((w) => el("li", { text: w }))) : null;
      return [el("p", {}, el("span", { testid: "explain-within", text: pct(x.within_target) }),
                 ` of ${num(x.results || 0)} traced results within the ${num(x.latency_target_ms)} ms target, over the last 60 s.`),
              latencyChart(x), el("h3", { text: "Why" }),
              list(x.words, "words") || el("p", { class: "muted", text: "nothing traced in this window" }),
              (x.late_words || []).length ? [el("h3", { text: "Late results" }), list(x.late_words, "late-words")] : null];
    }

    function drawMigrations(list) {
      return table("Reconfigurations", ["Step", "Kind", "State", "Parallelism", "Bins moved", "Started", "Took (s)", "Error"],
        (list || []).length ? list.map((m) => el("tr", { testid: "migration-row", "data-step": m.step },
          el("td", { text: m.step }), el("td", { text: m.kind }), el("td", { text: m.state }),
          el("td", { text: `${m.from_parallelism} \u2192 ${m.to_parallelism}` }),
          el("td", { class: "n", text: `${num(m.bins_moved)} / ${num(m.bins_total)}` }),
          el("td", { text: when(m.started_at) }), el("td", { class: "n", text: num(m.duration_s, 2) }),
          el("td", { text: m.error || "" }))) : [emptyRow(8, "none")], "migrations-table");
    }

    function drawTimeline(t) {
      const events = t.events || [];
      if (!events.length) return el("p", { class: "muted", text: "nothing happened yet" });
      return el("ol", { class: "timeline", testid: "timeline" }, events.map((e) => el("li", { testid: "timeline-event", "data-kind": e.kind },
        el("time", { datetime: isNum(e.at) ? new Date(e.at * 1000).toISOString() : "", text: when(e.at) }), " ",
        el("span", { class: `kind ${e.kind}`, text: e.kind }), " ", el("span", { text: e.what }))));
    }

    return {
      async refresh() {
        const problemsHere = [];
        const s = await api("GET", base);
        if (!s.ok) {
          update(summary, null, () => el("p", { class: "muted", text: "No status now." }));
          return [s];
        }
        status = s.data;
        const live = LIVE.has(status.state);
        const [g, x, e, sp, tl] = await Promise.all([
          api("GET", `${base}/graph`),
          live ? api("GET", `${base}/explain?last=60s`) : Promise.resolve({ ok: true, data: null }),
          live ? api("GET", `${base}/errors?limit=10`) : Promise.resolve({ ok: true, data: null }),
          api("GET", `${base}/spec`),
          api("GET", `${base}/timeline`)]);
        update(summary, status, drawStatus);
        update(actions, [status.state, status.tenant, me], () => drawActions(status));
        update(migrations, status.migrations || [], drawMigrations);
        if (g.ok) {
          graphAnswer = g.data;
          update(graph, g.data, graphSvg);
        } else problemsHere.push(g);
        if (x.ok) update(latency, x.data, drawExplanation);
        else problemsHere.push(x);
        if (!e.ok) problemsHere.push(e);
        update(errors, [status.errors, e.ok ? e.data : null, live], ([c, pg, l]) => drawErrors(c, pg, l));
        if (sp.ok) update(spec, sp.data, (d) => JSON.stringify(d, null, 2));
        else problemsHere.push(sp);
        if (tl.ok) update(timeline, tl.data, drawTimeline);
        else problemsHere.push(tl);
        return problemsHere;
      },
    };
  }

  /** #/dataflow/NAME/checkpoints: the history, its durations, the last restore. */
  function checkpointsPage(view, name) {
    const path = `/v1/dataflows/${encodeURIComponent(name)}/checkpoints`;
    const summary = el("div", {});
    const chart = el("div", {});
    const rows = el("div", { class: "scroll" });
    const restore = el("div", {});
    view.append(heading(`Checkpoints of ${name}`, "page-title"),
      el("p", { class: "crumbs" }, el("a", { href: dataflowHref(name), testid: "dataflow-link", text: `Back to ${name}` })),
      summary, section("Durations", "durations", chart), section("History", "history", rows),
      section("Last restore", "restore", restore));
    return {
      async refresh() {
        const a = await api("GET", path);
        if (!a.ok) return [a];
        const c = a.data;
        update(summary, c, () => facts([
          ["Interval (s)", num(c.interval_s, 2), "ckpt-interval"], ["Completed", num(c.completed), "ckpt-completed"],
          ["Failed", num(c.failed), "ckpt-failed"], ["Last", c.last === null || c.last === undefined ? DASH : String(c.last), "ckpt-last"],
          ["Last at", when(c.last_at), "ckpt-last-at"], ["Last took (s)", num(c.last_duration_s, 3), "ckpt-last-duration"],
          ["Last size", bytes(c.last_bytes), "ckpt-last-bytes"]], "ckpt-summary"));
        const history = c.history || [];
        update(chart, history, (h) => durationBars(h));
        update(rows, history, (h) => table("Checkpoints, newest first",
          ["Id", "At", "Outcome", "Took (s)", "Phases (s)", "Size", "Parts", "Incremental", "Per executor", "Reason"],
          h.length ? h.map((k) => el("tr", { testid: "ckpt-row", "data-id": k.id },
            el("td", { text: String(k.id) }), el("td", { text: when(k.at) }),
            el("td", { class: k.ok ? "ok" : "bad", text: k.ok ? "ok" : "failed" }),
            el("td", { class: "n", text: num(k.duration_s, 3) }),
            el("td", { testid: "ckpt-phases", text: phaseText(k.phases) }), el("td", { class: "n", text: bytes(k.bytes) }),
            el("td", { class: "n", text: num(k.parts) }), el("td", { class: "n", text: num(k.incremental_parts) }),
            el("td", { text: Object.entries(k.executors || {}).map(([x, b]) => `x${x}: ${bytes(b)}`).join(", ") || DASH }),
            el("td", { text: k.reason || "" }))) : [emptyRow(10, "no checkpoints yet")], "ckpt-table"));
        update(restore, c.last_restore, (r) => {
          if (!r) return el("p", { class: "muted", testid: "ckpt-restore", text: "It was never restored." });
          const phases = [["waited", r.waited_s, "#8c959f"], ["read", r.read_s, "#0969da"], ["restored", r.restored_s, "#1a7f37"]];
          const total = phases.reduce((t, [, v]) => t + (isNum(v) ? v : 0), 0) || 1;
          let x0 = 0;
          const bar = sv("svg", { width: 560, height: 28, viewBox: "0 0 560 28", role: "img",
                                  "aria-label": `restore phases: ${phases.map(([k, v]) => `${k} ${num(v, 3)} s`).join(", ")}` },
            phases.map(([k, v, colour]) => {
              const w = (isNum(v) ? v : 0) / total * 560;
              const r0 = sv("rect", { x: x0.toFixed(1), y: 4, width: Math.max(w, 0).toFixed(1), height: 20, fill: colour },
                sv("title", { text: `${k}: ${num(v, 3)} s` }));
              x0 += w;
              return r0;
            }));
          return [facts([["Checkpoint", String(r.checkpoint), "restore-checkpoint"], ["Waited (s)", num(r.waited_s, 3), "restore-waited"],
                         ["Read (s)", num(r.read_s, 3), "restore-read"], ["Restored (s)", num(r.restored_s, 3), "restore-restored"],
                         ["Read", bytes(r.read_bytes), "restore-read-bytes"], ["Of it local", bytes(r.read_local_bytes), "restore-local-bytes"]],
                        "ckpt-restore"), bar];
        });
        return [];
      },
    };
  }

  /** #/pool: the deployment, the overload report, scaling, migrations; executors for the admin. */
  function poolPage(view) {
    const info = el("div", {});
    const overload = el("div", {});
    const executors = el("div", { class: "scroll" });
    const scaling = el("div", {});
    const migrations = el("div", { class: "scroll" });
    const admin = !!(me && me.admin);
    let nodes = [];
    const drainDialog = dialog({ id: "dialog-drain", title: "Drain a node", danger: true, confirmText: "Drain the node",
      body: "Its executors leave the pool: their dataflows are checkpointed and restored on the executors left.",
      fields: [{ key: "node", label: "Node", testid: "input-node", options: true }],
      onConfirm: (v) => act(`drain ${v.node}`, "POST", `/v1/pool/nodes/${encodeURIComponent(v.node)}/drain`) });
    const drain = admin ? el("p", { class: "buttons" }, el("button", { type: "button", class: "danger", testid: "action-drain",
      text: "Drain a node", onclick: () => drainDialog.open(null, { node: { options: nodes.map((n) => ({ value: n, label: n })), value: nodes[0] } }) })) : null;
    view.append(heading("Pool", "page-title"), section("Deployment", "info", info),
      section("Overload", "overload", overload),
      section("Executors", "executors", admin ? [executors, drain]
        : el("p", { class: "muted", testid: "executors-note", text: "Executors and nodes are shown to the admin only." })),
      section("Scaling", "scaling", scaling), section("Migrations", "pool-migrations", migrations),
      admin ? drainDialog.node : null);
    return {
      async refresh() {
        const [i, o, s, m, x] = await Promise.all([api("GET", "/v1/info"), api("GET", "/v1/overload"),
          api("GET", "/v1/scaling"), api("GET", "/v1/migrations"),
          admin ? api("GET", "/v1/executors") : Promise.resolve(null)]);
        const out = [];
        if (i.ok) update(info, i.data, (d) => facts(Object.entries(d || {}).map(([k, v]) => [k, text(v), `info-${k}`]), "info"));
        else out.push(i);
        if (o.ok) {
          update(overload, o.data, (p) => [
            facts([["Feasible", p.feasible ? "yes" : "no", "overload-feasible"], ["Capacity (ms/s)", num(p.capacity_ms_per_s), "overload-capacity"],
                   ["Utilization", pct(p.utilization), "overload-utilization"], ["Executors needed", num(p.executors_needed), "overload-needed"]], "overload"),
            el("div", { class: "scroll" }, table("Outcomes", ["Dataflow", "Tenant", "Verdict", "Demand (ms/s)", "Allocation (ms/s)", "Sustainable (ev/s)", "Behind (s/s)", "Reason"],
              (p.outcomes || []).length ? p.outcomes.map((c) => el("tr", { testid: "outcome-row" },
                el("td", { text: c.name }), el("td", { text: c.tenant }), el("td", { text: c.verdict }),
                el("td", { class: "n", text: num(c.demand_ms_per_s) }), el("td", { class: "n", text: num(c.allocation_ms_per_s) }),
                el("td", { class: "n", text: num(c.sustainable_eps) }), el("td", { class: "n", text: num(c.behind_s_per_s, 3) }),
                el("td", { text: c.reason }))) : [emptyRow(8, "no dataflows")], "outcomes-table")),
            (p.causes || []).length ? el("ul", { testid: "overload-causes" }, p.causes.map((c) => el("li", { text: `${c.tenant}: ${num(c.over_share_ms_per_s)} ms/s over its share` }))) : null,
            (p.warnings || []).length ? el("ul", { class: "bad", testid: "overload-warnings" }, p.warnings.map((w) => el("li", { text: w }))) : null]);
        } else out.push(o);
        if (x) {
          if (x.ok) {
            const list = x.data.executors || [];
            nodes = [...new Set(list.map((e) => e.address || e.node).filter(Boolean))];
            update(executors, list, (l) => table("Executors", ["Executor", "Node", "Alive", "Activations", "Backlog", "Executed", "Busy (ms)", "Held", "CPU (s)", "Memory", "GC (ms)", "Version", "Pid", "Tenants"],
              l.length ? l.map((e) => el("tr", { testid: "executor-row", "data-executor": e.executor },
                el("td", { text: text(e.executor) }), el("td", { text: e.address || e.node || DASH }),
                el("td", { class: e.alive === false ? "bad" : "ok", text: e.alive === false ? "dead" : "alive" }),
                el("td", { class: "n", text: num(e.activations) }), el("td", { class: "n", text: num(e.backlog) }),
                el("td", { class: "n", text: num(e.executed) }), el("td", { class: "n", text: num(e.busy_ms, 0) }),
                el("td", { class: "n", text: num(e.held) }), el("td", { class: "n", text: num(e.cpu_s) }),
                el("td", { class: "n", text: bytes(e.rss_bytes) }),
                el("td", { class: "n", text: e.gc ? num((e.gc.total_ms || []).reduce((a, b) => a + b, 0)) : DASH }),
                el("td", { text: `${e.version || DASH} ${e.code ? `(${String(e.code).slice(0, 8)})` : ""}` }),
                el("td", { text: text(e.pid) }),
                el("td", { text: Object.entries(e.tenants || {}).map(([t, v]) => `${t}: ${num(v && v.busy_ms, 0)} ms`).join(", ") || DASH }))) : [emptyRow(14, "no executors")], "executors-table"));
          } else out.push(x);
        }
        if (s.ok) {
          update(scaling, s.data, (d) => [
            facts([["Policy", text(d.policy), "scaling-policy"], ["Enabled", d.enabled ? "yes" : "no", "scaling-enabled"],
                   ["Executors", text(d.executors), "scaling-executors"], ["Wanted", text(d.wanted_executors), "scaling-wanted"]], "scaling"),
            (d.decisions || []).length ? el("ol", { class: "words", testid: "scaling-decisions" }, d.decisions.slice(-10).map((c) =>
              el("li", { text: `${c.dataflow} ${c.step}: ${c.from_parallelism} \u2192 ${c.to_parallelism} (${c.policy}): ${c.reason}` })))
              : el("p", { class: "muted", text: "no scaling decisions" }),
            (d.misses || []).length ? el("ul", { class: "bad" }, d.misses.map((c) => el("li", { text: `${c.dataflow}: ${c.reason}` }))) : null,
            (d.errors || []).length ? el("ul", { class: "bad" }, d.errors.map((c) => el("li", { text: `${c.where}: ${c.error}` }))) : null]);
        } else out.push(s);
        if (m.ok) {
          update(migrations, m.data.migrations || [], (l) => table("Reconfigurations", ["Dataflow", "Step", "Kind", "State", "Parallelism", "Bins moved", "Started", "Took (s)"],
            l.length ? l.map((c) => el("tr", { testid: "pool-migration-row" }, el("td", { text: c.dataflow }), el("td", { text: c.step }),
              el("td", { text: c.kind }), el("td", { text: c.state }), el("td", { text: `${c.from_parallelism} \u2192 ${c.to_parallelism}` }),
              el("td", { class: "n", text: `${num(c.bins_moved)} / ${num(c.bins_total)}` }), el("td", { text: when(c.started_at) }),
              el("td", { class: "n", text: num(c.duration_s, 2) }))) : [emptyRow(8, "none")], "pool-migrations-table"));
        } else out.push(m);
        return out;
      },
    };
  }

  /** #/hotspots: the steps on the critical path, the misses, the backlogs, the busy executors. */
  function hotspotsPage(view) {
    const parts = { steps: el("div", { class: "scroll" }), misses: el("div", { class: "scroll" }),
                    backlogs: el("div", { class: "scroll" }), executors: el("div", { class: "scroll" }) };
    const windowNote = el("p", { class: "muted", testid: "hot-window" });
    const why = el("div", {});
    const link = (d) => el("a", { href: dataflowHref(d), text: d });
    view.append(heading("Hotspots", "page-title"), windowNote,
      section("The pool's critical path", "hot-why", why),
      section("Steps on the critical path", "hot-steps", parts.steps),
      section("Dataflows missing their target", "hot-misses", parts.misses),
      section("Backlogs", "hot-backlogs", parts.backlogs),
      section("Busy executors", "hot-executors", parts.executors));
    return {
      async refresh() {
        const a = await api("GET", "/v1/hotspots");
        if (!a.ok) return [a];
        const h = a.data;
        windowNote.textContent = isNum(h.window_s) ? `Ranked over the last ${num(h.window_s)} s.` : "Ranked now.";
        update(why, h.words || [], (l) => l.length ? el("ul", { class: "words", testid: "hot-words" }, l.map((w) => el("li", { text: w })))
          : el("p", { class: "muted", text: "no explanation yet" }));
        update(parts.steps, h.steps || [], (l) => table("Steps by share of the critical path", ["#", "Dataflow", "Tenant", "Step", "Share"],
          l.length ? l.map((r, i) => el("tr", { testid: "hot-step-row" }, el("td", { text: i + 1 }), el("td", {}, link(r.dataflow)),
            el("td", { text: r.tenant }), el("td", { text: r.step }), el("td", { class: "n", text: pct(r.critical_share) }))) : [emptyRow(5, "none")], "hot-steps"));
        update(parts.misses, h.misses || [], (l) => table("Dataflows by share within target", ["#", "Dataflow", "Tenant", "Within target", "p99 (ms)", "Target (ms)"],
          l.length ? l.map((r, i) => el("tr", { testid: "hot-miss-row" }, el("td", { text: i + 1 }), el("td", {}, link(r.dataflow)),
            el("td", { text: r.tenant }), el("td", { class: "n", text: pct(r.within_target) }), el("td", { class: "n", text: num(r.p99_ms) }),
            el("td", { class: "n", text: num(r.latency_target_ms) }))) : [emptyRow(6, "none")], "hot-misses"));
        update(parts.backlogs, h.backlogs || [], (l) => {
          const held = l.some((r) => "held" in r);
          return table("Dataflows by backlog", ["#", "Dataflow", "Tenant", "Backlog", held ? "Held" : null].filter(Boolean),
            l.length ? l.map((r, i) => el("tr", { testid: "hot-backlog-row" }, el("td", { text: i + 1 }), el("td", {}, link(r.dataflow)),
              el("td", { text: r.tenant }), el("td", { class: "n", text: num(r.backlog) }),
              held ? el("td", { class: "n", text: num(r.held) }) : null)) : [emptyRow(held ? 5 : 4, "none")], "hot-backlogs");
        });
        update(parts.executors, h.executors || [], (l) => table("Executors by busy share", ["#", "Executor", "Busy", "Backlog", "Held"],
          l.length ? l.map((r, i) => el("tr", { testid: "hot-executor-row" }, el("td", { text: i + 1 }), el("td", { text: text(r.executor) }),
            el("td", { class: "n", text: pct(r.busy_share) }), el("td", { class: "n", text: num(r.backlog) }), el("td", { class: "n", text: num(r.held) }))) : [emptyRow(5, "none")], "hot-executors"));
        return [];
      },
    };
  }

  // -- routing and the refresh loop ---------------------------------------------------------
  let current = null;
  let inflight = Promise.resolve(); // the refresh under way, if any

  function route() {
    const raw = location.hash.replace(/^#\/?/, "");
    const parts = raw.split("/");
    try {
      if (parts[0] === "dataflow" && parts[1]) {
        const name = decodeURIComponent(parts[1]);
        if (parts[2] === "checkpoints") return { nav: "dataflows", make: (v) => checkpointsPage(v, name) };
        return { nav: "dataflows", make: (v) => dataflowPage(v, name) };
      }
    } catch (e) {
      return { nav: "dataflows", make: dataflowsPage };
    }
    if (parts[0] === "pool") return { nav: "pool", make: poolPage };
    if (parts[0] === "hotspots") return { nav: "hotspots", make: hotspotsPage };
    return { nav: "dataflows", make: dataflowsPage };
  }

  function show() {
    clearTimeout(timer);
    generation += 1;
    problems.refresh = [];
    problems.action = [];
    const view = $("view");
    for (const d of view.querySelectorAll("dialog[open]")) d.close();
    view.replaceChildren();
    view.dataset.hash = location.hash;
    forget($("alerts"));
    $("action-result").textContent = "";
    $("updated").textContent = "";
    showProblems();
    const r = route();
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.dataset.route === r.nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    try {
      current = r.make(view);
    } catch (e) {
      current = null;
      problems.refresh = [fail("console", e)];
      showProblems();
      return;
    }
    tick(generation);
  }

  async function tick(gen) {
    if (gen !== generation || !current || !token) return;
    let found;
    const refreshing = current.refresh();
    inflight = refreshing.catch(() => null);
    try {
      found = await refreshing;
    } catch (e) {
      found = [fail("console", e)];
    }
    if (gen !== generation || !token) return;
    problems.refresh = found;
    showProblems();
    $("updated").textContent = `updated ${clock(new Date())}`;
    timer = setTimeout(() => tick(gen), REFRESH_MS);
  }

  function refreshNow() {
    clearTimeout(timer);
    generation += 1;
    tick(generation);
  }

  // -- signing in and out -------------------------------------------------------------------
  function signedOutView(message) {
    $("nav").hidden = true;
    $("who").hidden = true;
    $("view").hidden = true;
    $("status-line").hidden = true;
    $("signin-view").hidden = false;
    document.title = "Sign in - cameo console";
    problems.refresh = message ? [{ where: "sign in", status: 0, error: { code: "unauthorized", message } }] : [];
    problems.action = [];
    showProblems();
    $("token").focus();
  }

  function signOut(message) {
    if (!token && !message) return;
    clearTimeout(timer);
    generation += 1;
    current = null;
    token = null;
    me = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("view").replaceChildren();
    signedOutView(message);
  }

  async function signIn(candidate) {
    token = candidate;
    const who = await api("GET", "/v1/whoami");
    if (!who.ok) {
      token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      signedOutView(null);
      problems.refresh = [who];
      showProblems();
      return;
    }
    me = who.data;
    sessionStorage.setItem(TOKEN_KEY, candidate);
    $("token").value = "";
    $("signin-view").hidden = true;
    $("nav").hidden = false;
    $("who").hidden = false;
    $("view").hidden = false;
    $("status-line").hidden = false;
    $("whoami").textContent = me.admin ? "admin" : `tenant ${me.tenant}`;
    if (!location.hash || location.hash === "#") {
      history.replaceState(null, "", "#/dataflows");
    }
    show();
  }

  function start() {
    $("signin-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token").value.trim();
      if (value) signIn(value);
    });
    $("signout").addEventListener("click", () => signOut(null));
    window.addEventListener("hashchange", () => {
      if (token && me) show();
    });
    window.addEventListener("unhandledrejection", (event) => {
      event.preventDefault();
      problems.refresh = [fail("console", event.reason)];
      showProblems();
    });
    const kept = sessionStorage.getItem(TOKEN_KEY);
    if (kept) signIn(kept);
    else signedOutView(null);
  }

  start();
})();
