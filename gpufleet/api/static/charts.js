// The charts, drawn with Plotly (a classic script: window.Plotly): the three over time from
// GET /api/v1/history, and the cost card's bars (each group's allocated cost stacked as used,
// idle and unmeasured) from GET /api/v1/cost.

import { h } from "./util.js";

const COLORS = {
  allocation: "#2563eb", p50: "#0d9488", p95: "#f59e0b", pending: "#f59e0b", running: "#2563eb",
  used: "#2563eb", idle: "#f59e0b", unmeasured: "#9ca3af",
};

const CONFIG = { displayModeBar: false, responsive: true };

// Text for Plotly, which reads its strings as markup (<a href>, <span style>, <br>, <b>...):
// a tenant's name, label or annotation value must show as written, never as a link or a style.
// Plotly turns &amp; &lt; &gt; back into the characters when it draws them.
export function plotlyText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function baseLayout(xTitle, yTitle) {
  return {
    margin: { l: 52, r: 12, t: 8, b: 40 },
    height: 210,
    font: { family: "system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif", size: 11, color: "#374151" },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    showlegend: true,
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", font: { size: 11 } },
    hovermode: "x unified",
    xaxis: { title: { text: xTitle, standoff: 6 }, gridcolor: "#eef0f4", zeroline: false },
    yaxis: { title: { text: yTitle, standoff: 4 }, gridcolor: "#eef0f4", zeroline: false, rangemode: "tozero" },
  };
}

// simulated clocks start near zero: plot in minutes, hours or days since then; Unix time
// (Kubernetes) as dates
function timeAxis(points, backend) {
  const times = points.map((p) => p.time);
  if (backend && backend !== "simulated") {
    return { xs: times.map((t) => new Date(t * 1000)), title: "time" };
  }
  const span = times.length ? times[times.length - 1] - times[0] : 0;
  const [unit, name] = span <= 2 * 3600 ? [60, "min"] : span <= 72 * 3600 ? [3600, "h"] : [86400, "d"];
  return { xs: times.map((t) => t / unit), title: `cluster time (${name})` };
}

function delayUnit(points) {
  const max = Math.max(0, ...points.map((p) => p.queueing_delay_p95 ?? p.queueing_delay_p50 ?? 0));
  if (max < 120) return [1, "s"];
  if (max < 2 * 3600) return [60, "min"];
  return [3600, "h"];
}

function placeholder(id, text) {
  const el = document.getElementById(id);
  if (window.Plotly && el.classList.contains("js-plotly-plot")) window.Plotly.purge(el);
  el.replaceChildren(h("div", { class: "chart-empty" }, text));
}

export function renderCharts(history, summary) {
  const ids = ["chart-allocation", "chart-delay", "chart-workloads"];
  if (!history) return;
  if (!window.Plotly) {
    for (const id of ids) placeholder(id, "Charts need /static/vendor/plotly.min.js, which did not load.");
    return;
  }
  const points = history.points || [];
  if (!points.length) {
    for (const id of ids) placeholder(id, "No history yet.");
    return;
  }
  for (const id of ids) {
    const el = document.getElementById(id);
    if (el.querySelector(".chart-empty")) el.replaceChildren();
  }
  const { xs, title } = timeAxis(points, summary && summary.backend);
  const Plotly = window.Plotly;

  const allocation = baseLayout(title, "allocated");
  allocation.showlegend = false;
  allocation.yaxis.range = [0, 100];
  allocation.yaxis.ticksuffix = "%";
  allocation.yaxis.rangemode = undefined;
  Plotly.react(
    "chart-allocation",
    [{
      x: xs, y: points.map((p) => p.gpu_allocation * 100), name: "GPU allocation", type: "scatter",
      mode: "lines", fill: "tozeroy", line: { color: COLORS.allocation, width: 2 },
      fillcolor: "rgba(37,99,235,0.12)", hovertemplate: "%{y:.1f}%<extra></extra>",
    }],
    allocation,
    CONFIG,
  );

  const [unit, unitName] = delayUnit(points);
  const delay = (key) => points.map((p) => (p[key] == null ? null : p[key] / unit));
  Plotly.react(
    "chart-delay",
    [
      { x: xs, y: delay("queueing_delay_p50"), name: "p50", type: "scatter", mode: "lines",
        line: { color: COLORS.p50, width: 2 }, hovertemplate: `%{y:.1f} ${unitName}` },
      { x: xs, y: delay("queueing_delay_p95"), name: "p95", type: "scatter", mode: "lines",
        line: { color: COLORS.p95, width: 2 }, hovertemplate: `%{y:.1f} ${unitName}` },
    ],
    baseLayout(title, `delay (${unitName})`),
    CONFIG,
  );

  Plotly.react(
    "chart-workloads",
    [
      { x: xs, y: points.map((p) => p.running), name: "running", type: "scatter", mode: "lines",
        line: { color: COLORS.running, width: 2, shape: "hv" } },
      { x: xs, y: points.map((p) => p.pending), name: "pending", type: "scatter", mode: "lines",
        line: { color: COLORS.pending, width: 2, shape: "hv" } },
    ],
    baseLayout(title, "workloads"),
    CONFIG,
  );
}

const BAR_PX = 26; // the height of one group's bar in the cost chart

// bars: [{label, used, idle, unmeasured}] in the order to show them, top first; labels are
// plain text (escaped here for Plotly)
export function renderCostChart(id, bars, currency) {
  if (!window.Plotly) {
    placeholder(id, "Charts need /static/vendor/plotly.min.js, which did not load.");
    return;
  }
  const el = document.getElementById(id);
  if (!bars.length) {
    el.style.height = "";
    placeholder(id, "Nothing ran in this window.");
    return;
  }
  if (el.querySelector(".chart-empty")) el.replaceChildren();
  const layout = baseLayout(`cost (${plotlyText(currency)})`, "");
  layout.height = 70 + BAR_PX * bars.length;
  el.style.height = `${layout.height}px`;
  layout.barmode = "stack";
  layout.hovermode = "y unified";
  layout.legend.traceorder = "normal";
  layout.margin.l = 8;
  layout.yaxis = { autorange: "reversed", automargin: true, type: "category", ticksuffix: " " };
  const labels = bars.map((b) => plotlyText(b.label)); // group names are the tenants' values
  const trace = (key, name) => ({
    type: "bar", orientation: "h", name, y: labels, x: bars.map((b) => b[key]),
    marker: { color: COLORS[key] }, hovertemplate: `%{x:,.2f} ${plotlyText(currency)}`,
  });
  window.Plotly.react(
    id,
    [trace("used", "used"), trace("idle", "idle"), trace("unmeasured", "unmeasured")],
    layout,
    CONFIG,
  );
}
